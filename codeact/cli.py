"""The ``codeact`` command line.

Commands: ``run``, ``chat``, ``demo``, ``logs``, ``doctor``, ``image``, ``sandbox``.
Every error a user can cause ends in one red ``Error: ...`` line on stderr and
a non-zero exit (2 for usage and configuration, 1 otherwise); set
``CODEACT_DEBUG=1`` to see tracebacks.

Only click and the standard library are imported at module level, so that
``codeact --help`` starts fast; rich, the agent, the sandbox, docker and
openai are imported inside the commands that need them.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import click

from . import __version__
from . import config as cfg
from .errors import CodeActError, ConfigError, ToolDefinitionError, UnknownToolError

if TYPE_CHECKING:  # pragma: no cover
    from .events import Event, RunResult
    from .render import Renderer
    from .runlog import RunLog

BACKENDS = ("docker", "local", "restricted", "auto")
STATUSES = ("running", "success", "max_steps", "error", "cancelled")
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


# --------------------------------------------------------------------------- errors


class UserError(click.ClickException):
    """An error the user can fix; printed as one line. ``exit_code`` 1 unless given."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class RunCancelledByUser(Exception):
    """Ctrl-C during a run; the run was logged as cancelled."""

    def __init__(self, run_id: str | None, during_code: bool) -> None:
        super().__init__(run_id or "")
        self.run_id = run_id
        self.during_code = during_code


def _error_line(message: str) -> None:
    from .terminal import safe

    message = safe(message)  # error messages can carry text from the sandbox
    message = " ".join(str(message).split()) if "\n" not in str(message).strip() else str(message).strip()
    click.secho("Error: ", fg="red", bold=True, err=True, nl=False)
    click.secho(message, fg="red", err=True)


def _is_from(exc: BaseException, root: str, package: str) -> bool:
    """True when ``exc`` derives from a class named ``root`` defined in ``package`` (no import needed)."""
    return any(c.__name__ == root and c.__module__.split(".")[0] == package for c in type(exc).__mro__)


def _exit_code_for(exc: BaseException) -> int:
    if isinstance(exc, (ConfigError, ToolDefinitionError, UnknownToolError)):
        return 2
    return 1


def _message_for(exc: BaseException) -> str:
    if isinstance(exc, CodeActError) or _is_from(exc, "SandboxError", "sandbox"):
        return str(exc) or type(exc).__name__
    if _is_from(exc, "DockerException", "docker"):
        return f"Docker: {exc}"
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return (f"unexpected {type(exc).__name__}: {exc} "
            f"(probably a bug in codeact; set {cfg.DEBUG_ENV}=1 to see the traceback)")


class CodeActGroup(click.Group):
    """The root group: turns every exception into one ``Error:`` line and an exit code."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        import warnings

        code: int
        previous_showwarning = warnings.showwarning
        warnings.showwarning = _show_warning
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                              standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else 0
        except click.exceptions.Abort:
            click.secho("Aborted.", fg="yellow", err=True)
            code = 130
        except click.UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError" and exc.ctx is not None:  # `codeact`, `codeact image`
                click.echo(exc.ctx.get_help())
                code = 0
                return self._finish(code, standalone_mode)
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            _error_line(exc.format_message() + hint)
            code = exc.exit_code
        except click.ClickException as exc:
            _error_line(exc.format_message())
            code = exc.exit_code
        except KeyboardInterrupt:
            click.secho("Interrupted.", fg="yellow", err=True)
            code = 130
        except Exception as exc:  # noqa: BLE001 - the one place that reports everything
            if cfg.debug_enabled():
                import traceback

                traceback.print_exc()
            _error_line(_message_for(exc))
            code = _exit_code_for(exc)
        finally:
            warnings.showwarning = previous_showwarning
        return self._finish(code, standalone_mode)

    @staticmethod
    def _finish(code: int, standalone_mode: bool) -> int:
        if standalone_mode:
            sys.exit(code)
        return code


def _show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                  line: Any = None) -> None:
    click.secho(f"Warning: {message}", fg="yellow", err=True)


# --------------------------------------------------------------------------- the group


@click.group(cls=CodeActGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "-V", "--version", prog_name="codeact", message="%(prog)s %(version)s")
def cli() -> None:
    """codeact: an LLM agent that acts by writing Python.

    The model answers with Python code that calls your tools as ordinary
    functions; the code runs in an isolated, stateful Jupyter kernel (Docker
    by default) and what it prints is the model's next observation.

    \b
    Quick start:
      codeact doctor                        check Docker, the sandbox image, the model
      codeact demo                          a data-analysis run (works without a model)
      codeact run "How many rows in data.csv?" --file data.csv
      codeact chat --tools mytools.py:ALL   a multi-turn session
      codeact logs                          recent runs; `codeact logs show ID`

    \b
    Environment: CODEACT_MODEL, OPENAI_BASE_URL, OPENAI_API_KEY (the model);
    CODEACT_DB (run log); CODEACT_OUTPUT_DIR (artifacts); CODEACT_DEBUG=1 (tracebacks).
    """


# --------------------------------------------------------------------------- shared options


def _model_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--api-key", metavar="KEY", help="API key [env: OPENAI_API_KEY].")(f)
    f = click.option("--base-url", metavar="URL",
                     help="OpenAI-compatible API root, e.g. http://localhost:11434/v1 [env: OPENAI_BASE_URL].")(f)
    f = click.option("-m", "--model", metavar="NAME", help="Model name [env: CODEACT_MODEL].")(f)
    return f


def _backend_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "-b", "--backend", type=click.Choice(BACKENDS), default=None,
        help="Sandbox: docker (the default: isolated; an error if Docker is not ready), local (a kernel "
             "process; NOT isolated), restricted (RestrictedPython in-process; NOT isolated) [env: CODEACT_BACKEND].",
    )(f)


def _db_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--db", metavar="PATH", type=click.Path(dir_okay=False),
                        help="Run log database [env: CODEACT_DB].")(f)


def _agent_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--no-log", is_flag=True, help="Do not record the run in the run log.")(f)
    f = _db_option(f)
    f = click.option("-o", "--output-dir", metavar="DIR", type=click.Path(file_okay=False),
                     help="Artifacts go to DIR/<run id>/ [env: CODEACT_OUTPUT_DIR].")(f)
    f = click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
                     metavar="S", help="Seconds one code action may run.")(f)
    f = click.option("--max-steps", type=click.IntRange(min=1), default=10, show_default=True,
                     help="Model turns before the run stops.")(f)
    f = click.option("-y", "--yes", is_flag=True,
                     help="Approve every call of tools that require approval "
                          "(default: ask; deny without a terminal).")(f)
    f = _backend_option(f)
    f = _model_options(f)
    f = click.option("-t", "--tools", "tool_specs", multiple=True, metavar="SPEC",
                     help="Tools to offer: module:ALL, module:name1,name2 or path/to/file.py:ALL (repeatable).")(f)
    f = click.option("-f", "--file", "files", multiple=True,
                     type=click.Path(exists=True, dir_okay=False, readable=True),
                     help="A file to copy into the sandbox's working directory (repeatable).")(f)
    return f


# --------------------------------------------------------------------------- helpers


def _load_tools(specs: Sequence[str]) -> list[Any]:
    if not specs:
        return []
    from .tools import ensure_tools, load_tools

    tools: list[Any] = []
    for spec in specs:
        tools.extend(load_tools(spec))
    return ensure_tools(tools)


def _resolve_backend(backend: str | None, renderer: Renderer) -> str:
    """The backend to use: docker unless local or restricted is named; Docker's absence is an error."""
    name = cfg.backend(backend)
    if name != "docker":
        from sandbox import UNSAFE_BACKENDS

        renderer.notice(f"Note: the {name} backend is not isolated ({UNSAFE_BACKENDS[name]}); "
                        "use it only for trusted code.")
        return name
    from sandbox import docker_available

    reason = docker_available()
    if reason is not None:
        raise UserError(
            f"the Docker sandbox is not ready: {reason}; `codeact doctor` shows what to fix. To run code "
            f"WITHOUT isolation instead, choose it knowingly: --backend local (or {cfg.BACKEND_ENV}=local)"
        )
    return "docker"


def _open_log(db: str | None, no_log: bool) -> RunLog | None:
    if no_log:
        return None
    from .runlog import RunLog

    return RunLog(cfg.db_path(db))


def _stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, AttributeError):
        return False


def _make_approver(renderer: Renderer, yes: bool) -> Callable[[Any], bool]:
    from .render import call_text, short

    def approve(request: Any) -> bool:
        call = short(call_text(request.tool, request.arguments), 200)
        if yes:
            renderer.note(f"approved (--yes): {call}", style="yellow")
            return True
        if not _stdin_is_tty():
            renderer.warning(f"denied {call}: {request.tool} requires approval and there is no terminal "
                             "to ask (pass --yes to approve such calls)")
            return False
        renderer.approval_request(request.tool, request.arguments, request.step)
        try:
            allowed = click.confirm(f"Allow this call to {request.tool}?", default=False, err=True)
        except click.exceptions.Abort:
            allowed = False
        renderer.note(("approved: " if allowed else "denied: ") + call, style="green" if allowed else "yellow")
        renderer.wait(f"step {request.step}: running the code")
        return allowed

    return approve


@contextmanager
def _sigint_guard() -> Iterator[None]:
    """First Ctrl-C raises KeyboardInterrupt; the next one is ignored while the run cleans up; a third forces."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    presses = [0]

    def handler(signum: int, frame: Any) -> None:
        presses[0] += 1
        if presses[0] == 1:
            raise KeyboardInterrupt
        if presses[0] == 2:
            click.secho("Cancelling: closing the sandbox (press Ctrl-C again to force quit) ...", fg="yellow",
                        err=True)
            return
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _mark_cancelled(log: RunLog | None, run_id: str | None, task: str) -> None:
    """Record a run stopped by Ctrl-C as cancelled, unless the agent already did."""
    if log is None or run_id is None:
        return
    from .events import RunFinished, RunResult

    try:
        if log.get_run(run_id).status != "running":
            return
        log.record(RunFinished(run_id=run_id, result=RunResult(
            run_id=run_id, task=task, status="cancelled", error="interrupted by the user (Ctrl-C)")))
    except Exception:  # noqa: BLE001 - never let the log hide the cancellation
        pass


def _drive(events: Iterator[Event], renderer: Renderer | None, log: RunLog | None, task: str,
           *, quiet_renderer: Renderer | None = None) -> RunResult:
    """Consume a run's events, rendering them; Ctrl-C cancels the run cleanly."""
    from .events import CodeAction, ErrorEvent, Observation, RunFinished, RunStarted

    result: RunResult | None = None
    run_id: str | None = None
    in_code = False
    with _sigint_guard():
        try:
            for event in events:
                if isinstance(event, RunStarted):
                    run_id = event.run_id
                elif isinstance(event, CodeAction):
                    in_code = True
                elif isinstance(event, Observation):
                    in_code = False
                if renderer is not None:
                    renderer.event(event)
                elif quiet_renderer is not None and isinstance(event, ErrorEvent) and event.fatal:
                    quiet_renderer.error(event.message)
                if isinstance(event, RunFinished):
                    result = event.result
        except KeyboardInterrupt:
            for r in (renderer, quiet_renderer):
                if r is not None:
                    r.pause()
            close = getattr(events, "close", None)
            if close is not None:
                close()  # a suspended run: the agent logs it as cancelled and closes its sandbox
            _mark_cancelled(log, run_id, task)
            raise RunCancelledByUser(run_id, in_code) from None
        finally:
            for r in (renderer, quiet_renderer):
                if r is not None:
                    r.close()
    assert result is not None, "the run ended without a RunFinished event"
    return result


def _result_json(result: RunResult) -> str:
    import json

    from .runlog import jsonable

    from .terminal import safe_json

    data = jsonable(result)
    data["ok"] = result.ok
    return safe_json(json.dumps(data, ensure_ascii=False, indent=2))


def _cancelled_message(exc: RunCancelledByUser, log: RunLog | None) -> str:
    if exc.run_id and log is not None:
        return f"Cancelled: run {exc.run_id} was stopped and logged as cancelled."
    return "Cancelled."


def _make_agent(model: Any, tools: list[Any], backend: str, *, max_steps: int, timeout: float,
                output_root: Path, log: RunLog | None, approve: Callable[[Any], bool], stream: bool) -> Any:
    from .agent import CodeActAgent

    return CodeActAgent(model, tools, sandbox=backend, max_steps=max_steps, approve=approve,
                        log=log if log is not None else False, output_dir=output_root, stream_model=stream,
                        execution_timeout=timeout)


def _renderers(output_root: Path, as_json: bool = False) -> tuple[Renderer | None, Renderer]:
    """(renderer for the steps or None with --json, renderer for notes and errors)."""
    from rich.console import Console

    from .render import Renderer

    err = Console(stderr=True, highlight=False)
    if as_json:
        quiet = Renderer(console=err, err_console=err, output_root=output_root, live=False)
        return None, quiet
    r = Renderer(err_console=err, output_root=output_root)
    return r, r


# --------------------------------------------------------------------------- run


@cli.command(context_settings=CONTEXT_SETTINGS)
@click.argument("task", required=False)
@_agent_options
@click.option("--json", "as_json", is_flag=True, help="Print only the final RunResult as JSON.")
def run(task: str | None, files: tuple[str, ...], tool_specs: tuple[str, ...], model: str | None,
        base_url: str | None, api_key: str | None, backend: str, yes: bool, max_steps: int, timeout: float,
        output_dir: str | None, db: str | None, no_log: bool, as_json: bool) -> None:
    """Run TASK to the end and print each step as it happens.

    TASK is read from stdin when it is not given and stdin is not a terminal.
    Exit status: 0 when the run succeeds; 1 on an error, at max steps or when
    cancelled (Ctrl-C); 2 for bad options or configuration.

    \b
    Examples:
      codeact run "What is the 20th Fibonacci number?"
      codeact run "Summarise sales.csv and plot revenue by month" -f sales.csv
      codeact run "Book a table for two" --tools mytools.py:ALL --yes
      echo "2**100?" | codeact run --json --backend local

    Testing and replays: with CODEACT_SCRIPTED_REPLIES=replies.json (a JSON
    list of strings) the model is not called; its replies are replayed in order.
    """
    if task is None:
        if not _stdin_is_tty():
            task = sys.stdin.read().strip()
        if not task:
            raise click.UsageError("Missing argument 'TASK' (give it as an argument or on stdin).")
    output_root = cfg.output_root(output_dir)
    renderer, notes = _renderers(output_root, as_json)
    tools = _load_tools(tool_specs)
    model_obj = cfg.build_model(model, base_url=base_url, api_key=api_key)
    backend = _resolve_backend(backend, notes)
    log = _open_log(db, no_log)
    stream = renderer is not None and renderer.live_enabled
    agent = _make_agent(model_obj, tools, backend, max_steps=max_steps, timeout=timeout, output_root=output_root,
                        log=log, approve=_make_approver(notes, yes), stream=stream)
    try:
        result = _drive(agent.stream(task, files=list(files)), renderer, log, task, quiet_renderer=notes)
    except RunCancelledByUser as exc:
        click.secho(_cancelled_message(exc, log), fg="yellow", err=True)
        raise click.exceptions.Exit(1) from None
    finally:
        if log is not None:
            log.close()
    if as_json:
        click.echo(_result_json(result))
    raise click.exceptions.Exit(0 if result.ok else 1)


# --------------------------------------------------------------------------- chat

CHAT_HELP = """\
Type a task and press Enter; the model works on it in the same Python session as before.
  /reset   start a new session (history and kernel state cleared)
  /help    this help
  /exit    quit (also Ctrl-D)"""


def _read_line(prompt: str) -> str:
    if _stdin_is_tty():
        try:
            import readline  # noqa: F401 - line editing and history for input()
        except ImportError:  # pragma: no cover - Windows
            pass
        return input(prompt)
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\n")


@cli.command(context_settings=CONTEXT_SETTINGS)
@_agent_options
def chat(files: tuple[str, ...], tool_specs: tuple[str, ...], model: str | None, base_url: str | None,
         api_key: str | None, backend: str, yes: bool, max_steps: int, timeout: float, output_dir: str | None,
         db: str | None, no_log: bool) -> None:
    """A multi-turn session: variables and files survive between turns.

    Each turn is a run of its own in the run log. Files given with --file are
    copied in before the first turn. Commands: /reset, /help, /exit (or Ctrl-D).

    \b
    Example:
      codeact chat -f sales.csv
      > load sales.csv into df and show the columns
      > now plot revenue by region
    """
    output_root = cfg.output_root(output_dir)
    renderer, _ = _renderers(output_root)
    assert renderer is not None
    tools = _load_tools(tool_specs)
    model_obj = cfg.build_model(model, base_url=base_url, api_key=api_key)
    backend = _resolve_backend(backend, renderer)
    log = _open_log(db, no_log)
    agent = _make_agent(model_obj, tools, backend, max_steps=max_steps, timeout=timeout, output_root=output_root,
                        log=log, approve=_make_approver(renderer, yes), stream=renderer.live_enabled)
    interactive = _stdin_is_tty()
    pending = list(files)
    renderer.note(f"Chatting with {getattr(model_obj, 'name', '?')} (backend {backend}). "
                  "/exit or Ctrl-D to quit, /reset for a new session, /help for help.", style="bold")
    session = agent.session()
    try:
        while True:
            try:
                line = _read_line("> " if interactive else "")
            except EOFError:
                if interactive:
                    click.echo()
                break
            except KeyboardInterrupt:
                click.echo()
                renderer.note("(/exit or Ctrl-D to quit)")
                continue
            text = line.strip()
            if not text:
                continue
            if not interactive:
                renderer.note(f"> {text}", style="bold")  # a readable transcript when input is piped
            if text in ("/exit", "/quit", "/q"):
                break
            if text == "/help":
                renderer.note(CHAT_HELP, style="default")
                continue
            if text == "/reset":
                session.close()
                session = agent.session()
                pending = list(files)
                renderer.note("New session: history and kernel state cleared.")
                continue
            if text.startswith("/"):
                renderer.warning(f"unknown command {text.split()[0]}; try /help")
                continue
            try:
                _drive(session.stream(text, files=pending), renderer, log, text)
            except RunCancelledByUser as exc:
                if exc.during_code:
                    # The kernel may still be running the interrupted code: start clean.
                    session.close()
                    session = agent.session()
                    pending = list(files)
                    renderer.note("Turn cancelled while code was running; started a new session "
                                  "(history and kernel state cleared).", style="yellow")
                else:
                    renderer.note("Turn cancelled.", style="yellow")
                continue
            pending = []
    finally:
        session.close()
        if log is not None:
            log.close()


# --------------------------------------------------------------------------- demo


@cli.command(context_settings=CONTEXT_SETTINGS)
@_backend_option
@_model_options
@click.option("--max-steps", type=click.IntRange(min=1), default=10, show_default=True,
              help="Model turns before the run stops.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=120.0, show_default=True,
              metavar="S", help="Seconds one code action may run.")
@click.option("-o", "--output-dir", metavar="DIR", type=click.Path(file_okay=False),
              help="Artifacts go to DIR/<run id>/ [env: CODEACT_OUTPUT_DIR].")
@_db_option
@click.option("--no-log", is_flag=True, help="Do not record the run in the run log.")
def demo(backend: str, model: str | None, base_url: str | None, api_key: str | None, max_steps: int,
         timeout: float, output_dir: str | None, db: str | None, no_log: bool) -> None:
    """Analyse a bundled sales data set end to end: growth by region and a chart.

    Asks "Which region grew fastest? Plot monthly sales by region." about
    codeact/data/sales.csv (24 months, 4 regions, 3 products) in the best
    available sandbox. Without a model (no --model and no CODEACT_MODEL) it
    replays hand-written model replies, so the code, the sandbox, the chart
    and the run log are all real; only the model's text is canned.
    """
    from .demo import DEMO_TASK, demo_csv, scripted_demo_model

    if cfg.model_configured(model):
        model_obj = cfg.build_model(model, base_url=base_url, api_key=api_key, scripted=False)
        click.echo(f"Running the demo with model {model_obj.name} at {model_obj.base_url}.")
    else:
        click.echo("No model configured (set CODEACT_MODEL or pass --model): replaying a scripted demo model.")
        model_obj = scripted_demo_model()
    output_root = cfg.output_root(output_dir)
    renderer, _ = _renderers(output_root)
    assert renderer is not None
    data = demo_csv()
    renderer.note(f"Task: {DEMO_TASK}", style="bold")
    renderer.note(f"Data: {data}")
    backend = _resolve_backend(backend, renderer)
    log = _open_log(db, no_log)
    agent = _make_agent(model_obj, [], backend, max_steps=max_steps, timeout=timeout, output_root=output_root,
                        log=log, approve=lambda request: False, stream=renderer.live_enabled)
    try:
        result = _drive(agent.stream(DEMO_TASK, files=[data]), renderer, log, DEMO_TASK)
    except RunCancelledByUser as exc:
        click.secho(_cancelled_message(exc, log), fg="yellow", err=True)
        raise click.exceptions.Exit(1) from None
    finally:
        if log is not None:
            log.close()
    if result.artifacts:
        click.echo(f"Artifacts are in {output_root / result.run_id}:")
        for path in result.artifacts:
            click.echo(f"  {path}")
    if log is not None:
        click.echo(f"Replay the steps with: codeact logs show {result.run_id}")
    raise click.exceptions.Exit(0 if result.ok else 1)


# --------------------------------------------------------------------------- logs


def _log_for_reading(db: str | None) -> RunLog:
    from .runlog import RunLog

    return RunLog(cfg.db_path(db))


def _list_runs(db: str | None, limit: int, status: str | None, as_json: bool) -> None:
    log = _log_for_reading(db)
    try:
        runs = log.list_runs(limit=limit or None, status=status)
    finally:
        log.close()
    if as_json:
        import json

        from .runlog import jsonable
        from .terminal import safe_json

        click.echo(safe_json(json.dumps(jsonable(runs), ensure_ascii=False, indent=2)))
        return
    if not runs:
        where = cfg.db_path(db)
        click.echo(f"No runs{f' with status {status}' if status else ''} in {where}.")
        return
    from .render import Renderer

    Renderer().runs_table(runs)


def _list_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")(f)
    f = click.option("--status", type=click.Choice(STATUSES), help="Only runs with this status.")(f)
    f = click.option("-n", "--limit", type=click.IntRange(min=0), default=20, show_default=True,
                     help="How many runs (0 for all).")(f)
    return f


@cli.group(invoke_without_command=True, context_settings=CONTEXT_SETTINGS)
@_db_option
@_list_options
@click.pass_context
def logs(ctx: click.Context, db: str | None, limit: int, status: str | None, as_json: bool) -> None:
    """The run log: every run, step, tool call and image, in SQLite.

    Without a subcommand, lists recent runs (like `codeact logs list`).

    \b
    Examples:
      codeact logs -n 5 --status error
      codeact logs show 3f2a              (an id or a unique prefix; default: the last run)
      codeact logs export 3f2a --ipynb run.ipynb
      codeact logs export 3f2a --jsonl -  (to stdout)
    """
    ctx.obj = {"db": db}
    if ctx.invoked_subcommand is None:
        _list_runs(db, limit, status, as_json)


def _group_db(ctx: click.Context, db: str | None) -> str | None:
    return db or (ctx.obj or {}).get("db")


@logs.command("list", context_settings=CONTEXT_SETTINGS)
@_db_option
@_list_options
@click.pass_context
def logs_list(ctx: click.Context, db: str | None, limit: int, status: str | None, as_json: bool) -> None:
    """List recent runs, newest first."""
    _list_runs(_group_db(ctx, db), limit, status, as_json)


@logs.command("show", context_settings=CONTEXT_SETTINGS)
@click.argument("run_id", metavar="RUN", required=False)
@_db_option
@click.pass_context
def logs_show(ctx: click.Context, run_id: str | None, db: str | None) -> None:
    """Show a run step by step: thoughts, code, tool calls, observations, answer.

    RUN is a run id or a unique prefix of one; without it, the last run.
    """
    log = _log_for_reading(_group_db(ctx, db))
    try:
        if run_id is None:
            record = log.last_run()
            if record is None:
                raise UserError(f"the run log {log.path} is empty; run something first (try `codeact demo`)")
        else:
            record = log.get_run(run_id)
    finally:
        log.close()
    from .render import Renderer

    Renderer(live=False).run_record(record)


@logs.command("export", context_settings=CONTEXT_SETTINGS)
@click.argument("run_id", metavar="RUN")
@click.option("--jsonl", "jsonl_out", metavar="OUT", help="Write JSON Lines to OUT ('-' for stdout).")
@click.option("--ipynb", "ipynb_out", metavar="OUT", help="Write a Jupyter notebook to OUT ('-' for stdout).")
@click.option("--no-images", is_flag=True, help="JSONL: leave image bytes out (hashes and sizes stay).")
@_db_option
@click.pass_context
def logs_export(ctx: click.Context, run_id: str, jsonl_out: str | None, ipynb_out: str | None, no_images: bool,
                db: str | None) -> None:
    """Export a run as JSON Lines (for machines) or a Jupyter notebook (for people)."""
    if bool(jsonl_out) == bool(ipynb_out):
        raise click.UsageError("give exactly one of --jsonl OUT or --ipynb OUT")
    from . import export as _export

    log = _log_for_reading(_group_db(ctx, db))
    try:
        record = log.get_run(run_id)
    finally:
        log.close()
    out = jsonl_out or ipynb_out
    assert out is not None
    if jsonl_out:
        if out == "-":
            _export.export_jsonl(record, click.get_text_stream("stdout"), include_images=not no_images)
            return
        with open(out, "w", encoding="utf-8") as fp:
            _export.export_jsonl(record, fp, include_images=not no_images)
        fmt = "JSON Lines"
    else:
        if out == "-":
            import nbformat

            click.echo(nbformat.writes(_export.to_notebook(record)))
            return
        _export.export_notebook(record, out)
        fmt = "a notebook"
    click.echo(f"Exported run {record.id} ({len(record.steps)} steps) as {fmt} to {out}")


@logs.command("path", context_settings=CONTEXT_SETTINGS)
@_db_option
@click.pass_context
def logs_path(ctx: click.Context, db: str | None) -> None:
    """Print the run log's database path."""
    click.echo(str(cfg.db_path(_group_db(ctx, db))))


# --------------------------------------------------------------------------- doctor


class _Checks:
    def __init__(self) -> None:
        self.results: dict[str, str] = {}

    def report(self, key: str, status: str, what: str, detail: str, fix: str = "") -> None:
        self.results[key] = status
        colour = {"OK": "green", "FAIL": "red", "WARN": "yellow", "INFO": "cyan"}[status]
        click.secho(f"{status:<4}", fg=colour, bold=True, nl=False)
        click.echo(f"  {what}: {detail}")
        if fix and status != "OK":
            click.secho(f"      → {fix}", fg=colour)


def _check_model(checks: _Checks, model: str | None, base_url: str | None, api_key: str | None) -> None:
    name = cfg.model_name(model)
    url = cfg.base_url(base_url)
    if not name:
        checks.report("model", "WARN", "model", "not configured (CODEACT_MODEL is unset)",
                      "set CODEACT_MODEL (and OPENAI_BASE_URL / OPENAI_API_KEY for your endpoint) or pass --model; "
                      "`codeact demo` works without one")
        return
    from .errors import ModelError, ModelNotFoundError
    from .models import OpenAIModel

    m = OpenAIModel(name, base_url=base_url or None, api_key=api_key or None, timeout=5, max_retries=0,
                    max_tokens=1)
    where = f"{name} at {url}"
    try:
        try:
            ids = m.list_models()
        except ModelNotFoundError:
            ids = None  # the server has no /models; ask for one token instead
        if ids is None:
            from .messages import Message

            m.complete([Message("user", "Reply with OK.")])
            checks.report("model", "OK", "model", f"{where} answered a 1-token completion")
        elif name in ids:
            checks.report("model", "OK", "model", f"{where} (listed by GET /models)")
        else:
            listed = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
            checks.report("model", "WARN", "model", f"the endpoint answers but does not list {name!r} "
                          f"({len(ids)} models: {listed or 'none'})",
                          "check the model name (GET /models lists what the server serves)")
    except ModelError as exc:
        checks.report("model", "FAIL", "model", f"{where}: {exc}",
                      "check OPENAI_BASE_URL, OPENAI_API_KEY and that the server is running")
    finally:
        m.close()


@cli.command(context_settings=CONTEXT_SETTINGS)
@_model_options
@_db_option
def doctor(model: str | None, base_url: str | None, api_key: str | None, db: str | None) -> None:
    """Check this machine: Python, Docker, the sandbox image, the local kernel, the model, the run log.

    Exit status 0 when code can run somewhere (Docker with the image, or a
    local kernel); 1 otherwise.
    """
    import importlib.util
    import platform

    checks = _Checks()
    click.echo(f"codeact {__version__} ({Path(__file__).parent})")
    py = sys.version_info
    if py >= (3, 10):
        checks.report("python", "OK", "Python", f"{platform.python_version()} ({sys.executable})")
    else:
        checks.report("python", "FAIL", "Python", platform.python_version(), "codeact needs Python 3.10 or newer")

    # Docker engine and image.
    from sandbox.errors import BackendUnavailable

    client = None
    try:
        from sandbox.container import docker_client

        client = docker_client(timeout=5)
        version = client.version().get("Version", "?")
        checks.report("docker", "OK", "Docker engine", f"answers (server {version})")
    except BackendUnavailable as exc:
        checks.report("docker", "FAIL", "Docker engine", str(exc).split("; ")[0],
                      "install and start Docker (e.g. `apt-get install docker.io && dockerd &`, or "
                      "`scripts/dev.sh setup` in a checkout)")
    except Exception as exc:  # noqa: BLE001
        checks.report("docker", "FAIL", "Docker engine", f"{type(exc).__name__}: {exc}", "check the Docker engine")
    from sandbox.image import default_image_tag, image_exists

    tag = default_image_tag()
    if client is None:
        checks.report("image", "FAIL", "sandbox image", f"{tag}: cannot check without a Docker engine",
                      "start Docker, then `codeact image build`")
    else:
        try:
            if image_exists(tag, client):
                checks.report("image", "OK", "sandbox image", f"{tag} is present")
            else:
                checks.report("image", "FAIL", "sandbox image", f"{tag} is not built", "run `codeact image build`")
        except Exception as exc:  # noqa: BLE001
            checks.report("image", "FAIL", "sandbox image", f"{tag}: {exc}", "run `codeact image build`")

    # Local kernel.
    missing = [m for m in ("ipykernel", "jupyter_client") if importlib.util.find_spec(m) is None]
    if missing:
        checks.report("local", "FAIL", "local kernel", f"{', '.join(missing)} not importable",
                      f"pip install {' '.join(missing)}")
    else:
        import importlib.metadata as md

        data = [m for m in ("pandas", "matplotlib") if importlib.util.find_spec(m) is None]
        extra = f"; {', '.join(data)} missing for data analysis (pip install 'codeact[data]')" if data else ""
        checks.report("local", "OK", "local kernel", f"ipykernel {md.version('ipykernel')} importable{extra}")

    _check_model(checks, model, base_url, api_key)

    # Run log.
    path = cfg.db_path(db)
    try:
        import sqlite3

        from .runlog import RunLog

        RunLog(path).close()
        conn = sqlite3.connect(str(path), timeout=5)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
        finally:
            conn.close()
        checks.report("log", "OK", "run log", f"{path} is writable")
    except Exception as exc:  # noqa: BLE001
        checks.report("log", "FAIL", "run log", f"{path}: {_message_for(exc)}",
                      "pass --db PATH or set CODEACT_DB to a writable location")

    if client is not None:
        _check_isolation_extras(checks, client)

    docker_ok = checks.results.get("docker") == "OK" and checks.results.get("image") == "OK"
    local_ok = checks.results.get("local") == "OK"
    if docker_ok:
        click.secho("Ready: code runs in the Docker sandbox.", fg="green", bold=True)
    else:
        click.secho("Not ready: the Docker sandbox (the default) cannot run code here; fix what is marked "
                    "above.", fg="red", bold=True)
        if local_ok:
            click.echo("Code can run WITHOUT isolation if you choose it: --backend local (or CODEACT_BACKEND=local).")
    raise click.exceptions.Exit(0 if docker_ok else 1)


def _check_isolation_extras(checks: _Checks, client: Any) -> None:
    """Optional hardening of the engine: user-namespace remapping and gVisor (informational)."""
    try:
        info = client.info()
    except Exception:  # noqa: BLE001
        return
    security = " ".join(info.get("SecurityOptions") or [])
    if "userns" in security:
        checks.report("userns", "OK", "user namespaces", "the engine remaps container users (userns-remap)")
    else:
        checks.report("userns", "INFO", "user namespaces", "not enabled (containers' uid 1000 is the host's uid 1000)",
                      'optional: "userns-remap": "default" in /etc/docker/daemon.json (see README, Security)')
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    if "runsc" in runtimes:
        checks.report("gvisor", "OK", "gVisor", "runtime runsc is installed: DockerSandbox(runtime='runsc')")
    else:
        checks.report("gvisor", "INFO", "gVisor", f"not installed (runtimes: {', '.join(runtimes) or '?'})",
                      "optional: install gVisor for a second kernel boundary (see README, Security)")


# --------------------------------------------------------------------------- image


@cli.group(context_settings=CONTEXT_SETTINGS)
def image() -> None:
    """Build and inspect the sandbox image."""


@image.command("build", context_settings=CONTEXT_SETTINGS)
@click.option("--variant", type=click.Choice(["auto", "standard", "offline"]), default="auto", show_default=True,
              help="standard: python:3.11-slim + PyPI (needs a registry); offline: a Debian base made with "
                   "debootstrap (needs root); auto: standard when a registry answers.")
@click.option("--force", is_flag=True, help="Rebuild even when an image of the same recipe exists.")
@click.option("-q", "--quiet", is_flag=True, help="Do not print the build output.")
def image_build(variant: str, force: bool, quiet: bool) -> None:
    """Build the sandbox image (skipped when it is up to date)."""
    from sandbox.image import build_image, default_image_tag

    tag = default_image_tag()
    click.echo(f"Sandbox image {tag} ({variant} variant{', forced' if force else ''})")

    def log(line: str) -> None:
        if not quiet:
            click.secho(f"  {line}", dim=True)

    result = build_image(variant, force=force, log=log)  # type: ignore[arg-type]
    if result.skipped:
        click.secho(f"✔ {result.tag} is already built (pass --force to rebuild)", fg="green")
    else:
        click.secho(f"✔ built {result.tag} ({result.variant} variant) in {result.seconds:.0f} s", fg="green")


@image.command("status", context_settings=CONTEXT_SETTINGS)
def image_status() -> None:
    """Print the image tag this version uses and whether it is present (exit 1 when it is not)."""
    from sandbox.container import docker_client
    from sandbox.image import default_image_tag

    tag = default_image_tag()
    client = docker_client(timeout=10)
    import docker.errors

    try:
        img = client.images.get(tag)
    except docker.errors.ImageNotFound:
        click.echo(f"{tag}: ", nl=False)
        click.secho("not built", fg="red", nl=False)
        click.echo(" (run `codeact image build`)")
        raise click.exceptions.Exit(1) from None
    labels = img.labels or {}
    size = (img.attrs.get("Size") or 0) / 1e6
    created = (img.attrs.get("Created") or "?")[:19].replace("T", " ")
    click.echo(f"{tag}: ", nl=False)
    click.secho("present", fg="green", nl=False)
    click.echo(f" ({labels.get('io.codeact.variant', '?')} variant, {size:.0f} MB, created {created})")


# --------------------------------------------------------------------------- sandbox


@cli.group("sandbox", context_settings=CONTEXT_SETTINGS)
def sandbox_group() -> None:
    """Manage sandbox containers."""


@sandbox_group.command("reap", context_settings=CONTEXT_SETTINGS)
@click.option("--all", "everything", is_flag=True,
              help="Remove every sandbox container of this host, also those of running sessions.")
def sandbox_reap(everything: bool) -> None:
    """Remove sandbox containers and volumes left behind by processes that died."""
    from sandbox import reap

    removed = reap(everything=everything)
    if not removed:
        click.echo("Nothing to remove.")
        return
    click.echo(f"Removed {len(removed)}:")
    for name in removed:
        click.echo(f"  {name}")


# --------------------------------------------------------------------------- entry point


def main(argv: Sequence[str] | None = None) -> Any:
    """The ``codeact`` console script."""
    return cli.main(args=list(argv) if argv is not None else None, prog_name="codeact")


if __name__ == "__main__":  # pragma: no cover
    main()
