"""The ``codeact`` command group, its error handling and the options commands share.

Only click and the standard library are imported here, so that ``codeact
--help`` starts fast; each command imports what it needs when it runs.
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

from .. import __version__
from .. import config as cfg
from ..errors import CodeActError, ConfigError, ToolDefinitionError, UnknownToolError

if TYPE_CHECKING:  # pragma: no cover
    from ..events import Event, RunResult
    from ..render import Renderer
    from ..runlog import RunLog

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


def error_line(message: str) -> None:
    from ..terminal import safe

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


def message_for(exc: BaseException) -> str:
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
            error_line(exc.format_message() + hint)
            code = exc.exit_code
        except click.ClickException as exc:
            error_line(exc.format_message())
            code = exc.exit_code
        except KeyboardInterrupt:
            click.secho("Interrupted.", fg="yellow", err=True)
            code = 130
        except Exception as exc:  # noqa: BLE001 - the one place that reports everything
            if cfg.debug_enabled():
                import traceback

                traceback.print_exc()
            error_line(message_for(exc))
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


def model_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--api-key", metavar="KEY", help="API key [env: OPENAI_API_KEY].")(f)
    f = click.option("--base-url", metavar="URL",
                     help="OpenAI-compatible API root, e.g. http://localhost:11434/v1 [env: OPENAI_BASE_URL].")(f)
    f = click.option("-m", "--model", metavar="NAME", help="Model name [env: CODEACT_MODEL].")(f)
    return f


def backend_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "-b", "--backend", type=click.Choice(BACKENDS), default=None,
        help="Sandbox: docker (the default: isolated; an error if Docker is not ready), local (a kernel "
             "process; NOT isolated), restricted (RestrictedPython in-process; NOT isolated) [env: CODEACT_BACKEND].",
    )(f)


def db_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--db", metavar="PATH", type=click.Path(dir_okay=False),
                        help="Run log database [env: CODEACT_DB].")(f)


def agent_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--no-log", is_flag=True, help="Do not record the run in the run log.")(f)
    f = db_option(f)
    f = click.option("-o", "--output-dir", metavar="DIR", type=click.Path(file_okay=False),
                     help="Artifacts go to DIR/<run id>/ [env: CODEACT_OUTPUT_DIR].")(f)
    f = click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
                     metavar="S", help="Seconds one code action may run.")(f)
    f = click.option("--max-steps", type=click.IntRange(min=1), default=10, show_default=True,
                     help="Model turns before the run stops.")(f)
    f = click.option("-y", "--yes", is_flag=True,
                     help="Approve every call of tools that require approval "
                          "(default: ask; deny without a terminal).")(f)
    f = backend_option(f)
    f = model_options(f)
    f = click.option("-t", "--tools", "tool_specs", multiple=True, metavar="SPEC",
                     help="Tools to offer: module:ALL, module:name1,name2 or path/to/file.py:ALL (repeatable).")(f)
    f = click.option("-f", "--file", "files", multiple=True,
                     type=click.Path(exists=True, dir_okay=False, readable=True),
                     help="A file to copy into the sandbox's working directory (repeatable).")(f)
    return f



# --------------------------------------------------------------------------- helpers


def load_tools(specs: Sequence[str]) -> list[Any]:
    if not specs:
        return []
    from ..tools import ensure_tools, load_tools

    tools: list[Any] = []
    for spec in specs:
        tools.extend(load_tools(spec))
    return ensure_tools(tools)


def resolve_backend(backend: str | None, renderer: Renderer) -> str:
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


def open_log(db: str | None, no_log: bool) -> RunLog | None:
    if no_log:
        return None
    from ..runlog import RunLog

    return RunLog(cfg.db_path(db))


def stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, AttributeError):
        return False


def make_approver(renderer: Renderer, yes: bool) -> Callable[[Any], bool]:
    from ..render import call_text, short

    def approve(request: Any) -> bool:
        call = short(call_text(request.tool, request.arguments), 200)
        if yes:
            renderer.note(f"approved (--yes): {call}", style="yellow")
            return True
        if not stdin_is_tty():
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
def sigint_guard() -> Iterator[None]:
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


def mark_cancelled(log: RunLog | None, run_id: str | None, task: str) -> None:
    """Record a run stopped by Ctrl-C as cancelled, unless the agent already did."""
    if log is None or run_id is None:
        return
    from ..events import RunFinished, RunResult

    try:
        if log.get_run(run_id).status != "running":
            return
        log.record(RunFinished(run_id=run_id, result=RunResult(
            run_id=run_id, task=task, status="cancelled", error="interrupted by the user (Ctrl-C)")))
    except Exception:  # noqa: BLE001 - never let the log hide the cancellation
        pass


def drive(events: Iterator[Event], renderer: Renderer | None, log: RunLog | None, task: str,
           *, quiet_renderer: Renderer | None = None) -> RunResult:
    """Consume a run's events, rendering them; Ctrl-C cancels the run cleanly."""
    from ..events import CodeAction, ErrorEvent, Observation, RunFinished, RunStarted

    result: RunResult | None = None
    run_id: str | None = None
    in_code = False
    with sigint_guard():
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
            mark_cancelled(log, run_id, task)
            raise RunCancelledByUser(run_id, in_code) from None
        finally:
            for r in (renderer, quiet_renderer):
                if r is not None:
                    r.close()
    assert result is not None, "the run ended without a RunFinished event"
    return result


def result_json(result: RunResult) -> str:
    import json

    from ..runlog import jsonable

    from ..terminal import safe_json

    data = jsonable(result)
    data["ok"] = result.ok
    return safe_json(json.dumps(data, ensure_ascii=False, indent=2))


def cancelled_message(exc: RunCancelledByUser, log: RunLog | None) -> str:
    if exc.run_id and log is not None:
        return f"Cancelled: run {exc.run_id} was stopped and logged as cancelled."
    return "Cancelled."


def make_agent(model: Any, tools: list[Any], backend: str, *, max_steps: int, timeout: float,
                output_root: Path, log: RunLog | None, approve: Callable[[Any], bool], stream: bool) -> Any:
    from ..agent import CodeActAgent

    return CodeActAgent(model, tools, sandbox=backend, max_steps=max_steps, approve=approve,
                        log=log if log is not None else False, output_dir=output_root, stream_model=stream,
                        execution_timeout=timeout)


def renderers(output_root: Path, as_json: bool = False) -> tuple[Renderer | None, Renderer]:
    """(renderer for the steps or None with --json, renderer for notes and errors)."""
    from rich.console import Console

    from ..render import Renderer

    err = Console(stderr=True, highlight=False)
    if as_json:
        quiet = Renderer(console=err, err_console=err, output_root=output_root, live=False)
        return None, quiet
    r = Renderer(err_console=err, output_root=output_root)
    return r, r


# --------------------------------------------------------------------------- run
