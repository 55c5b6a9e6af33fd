"""``codeact chat``: a multi-turn session in the terminal, and what Ctrl-C does in it.

The session saves itself when the chat ends (``/exit``, Ctrl-D, Ctrl-C twice,
``/reset``), on ``/save``, and with ``--autosave`` after every step as well;
``codeact chat --resume ID`` continues it (see :mod:`codeact.sessions`).

Ctrl-C while the code runs interrupts that code (it gets a ``KeyboardInterrupt``),
ends the turn and keeps the session: variables, files and history stay, and the
model's observation says that the user interrupted it. Ctrl-C while the model
writes cancels the turn. A second Ctrl-C within :data:`QUIT_WINDOW` seconds of
the first quits, as does Ctrl-D or ``/exit`` at the prompt.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import click

from .. import config as cfg
from ._app import (
    CONTEXT_SETTINGS,
    RunCancelledByUser,
    UserError,
    agent_options,
    images_setting,
    compaction_settings,
    cli,
    drive,
    load_output_schema,
    load_tools,
    output_schema_option,
    make_agent,
    make_approver,
    open_log,
    renderers,
    resolve_backend,
    stdin_is_tty,
)
from .mcp import open_mcp

CHAT_HELP = """\
Type a task and press Enter; the model works on it in the same Python session as before.
  Ctrl-C   while code runs: interrupt it (variables stay); twice: quit
  /reset   start a new session (history and kernel state cleared; the old one is saved)
  /save    save the session now (it also saves itself when the chat ends)
  /type FILE  the next turn's answer must match the JSON Schema in FILE (shown as validated JSON)
  /type off   the next turn's answer is free (when --output-schema types every turn)
  /help    this help
  /exit    quit (also Ctrl-D)"""

#: Seconds within which a second Ctrl-C quits the chat instead of interrupting again.
QUIT_WINDOW = 2.0
#: An interrupt that finds no code running yet (the code was about to start) is sent again this often...
REINTERRUPT_EVERY = 1.0
#: ... this many times, while the turn is still in its code action.
REINTERRUPT_TIMES = 5


class CtrlC:
    """Ctrl-C presses in a chat: the first asks for an interrupt, a second one soon after quits."""

    def __init__(self, window: float = QUIT_WINDOW) -> None:
        self.window = window
        self.last: float | None = None  # time.monotonic() of the last press
        self.quitting = False

    def press(self) -> bool:
        """Count a press; True when it is the second within the window (the user wants out)."""
        now = time.monotonic()
        self.quitting = self.last is not None and now - self.last <= self.window
        self.last = now
        return self.quitting


class Turn:
    """One turn's events as they pass to the renderer, and Ctrl-C while its code runs.

    The signal handler only sets flags and starts a thread: the main thread may be
    inside the sandbox's client (listing files) when the press arrives.
    """

    def __init__(self, session: Any, renderer: Any, presses: CtrlC) -> None:
        self.session = session
        self.renderer = renderer
        self.presses = presses
        self.cancel = threading.Event()
        self.in_code = False
        self.step = 0
        self.interrupted = False

    def events(self, events: Iterator[Any]) -> Iterator[Any]:
        from ..events import CodeAction, Observation, RunFinished

        try:
            for event in events:
                if isinstance(event, CodeAction):
                    self.in_code, self.step = True, event.step
                elif isinstance(event, (Observation, RunFinished)):
                    self.in_code = False
                yield event
        finally:
            self.in_code = False
            close = getattr(events, "close", None)
            if close is not None:
                close()

    def on_ctrl_c(self) -> bool:
        """The press handler for :func:`drive`: True when it interrupted the code (the turn goes on)."""
        if self.presses.press() or not self.in_code:
            return False  # KeyboardInterrupt: quits (second press) or cancels the model's turn
        self.interrupted = True
        self.cancel.set()  # no further step: the turn ends after this code's observation
        threading.Thread(target=self._interrupt, daemon=True, name="codeact-chat-interrupt").start()
        label = f"step {self.step}: interrupting the code (the session keeps its variables; Ctrl-C again to quit)"
        if self.renderer.live_enabled:
            self.renderer.wait(label)
        else:
            self.renderer.notice(label)
        return True

    def _interrupt(self) -> None:
        # Code that was only about to start when the first interrupt went out misses it: send it again.
        for _ in range(REINTERRUPT_TIMES):
            if not self.in_code:
                return
            self.session.interrupt()
            time.sleep(REINTERRUPT_EVERY)


def _read_line(prompt: str) -> str:
    if stdin_is_tty():
        with contextlib.suppress(ImportError):  # Windows has no readline
            import readline  # noqa: F401 - line editing and history for input()
        return input(prompt)
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\n")


def _session_options(f: Any) -> Any:
    f = click.option("--keep-snapshots", metavar="N|all",
                     help="Snapshots kept per session, the newest [env: CODEACT_SNAPSHOT_KEEP; default 3].")(f)
    f = click.option("--snapshot-dir", metavar="DIR", type=click.Path(file_okay=False),
                     help="Where saved sessions go [env: CODEACT_SNAPSHOT_DIR; default: the data dir's "
                          "snapshots].")(f)
    f = click.option("--no-save", is_flag=True, help="Do not save the session when the chat ends (/save still "
                                                     "does).")(f)
    f = click.option("--autosave", is_flag=True,
                     help="Save after every step too (only what changed is saved again), so that even a killed "
                          "chat resumes at its last completed step.")(f)
    f = click.option("--resume", "resume", metavar="ID",
                     help="Continue a saved session: a run id, chat session id or snapshot id (or a unique "
                          "prefix); see `codeact sessions list`.")(f)
    return f


@cli.command(context_settings=CONTEXT_SETTINGS)
@agent_options
@_session_options
@output_schema_option
def chat(files: tuple[str, ...], tool_specs: tuple[str, ...], model: str | None, base_url: str | None,
         api_key: str | None, backend: str, yes: bool, max_steps: int, timeout: float, output_dir: str | None,
         db: str | None, no_log: bool, mcp_files: tuple[str, ...] = (), mcp_specs: tuple[str, ...] = (),
         mcp_on_error: str = "stop", resume: str | None = None, autosave: bool = False, no_save: bool = False,
         snapshot_dir: str | None = None, keep_snapshots: str | None = None,
         output_schema: str | None = None) -> None:
    """A multi-turn session: variables and files survive between turns.

    Each turn is a run of its own in the run log. Files given with --file are
    copied in before the first turn. Commands: /save, /reset, /type FILE,
    /help, /exit (or Ctrl-D). Ctrl-C while code runs interrupts it and keeps the session
    (variables stay); Ctrl-C twice in a row quits.

    The session (variables, files, packages, and its conversation in the run
    log) is saved when the chat ends and on /save; with --autosave after every
    step as well. --resume continues it, in a new sandbox on any engine; the
    model is told what was restored and what was lost.

    With --output-schema FILE every turn's answer must match that JSON Schema
    and is shown as validated JSON; /type FILE types the next turn only
    (/type off leaves it free).

    \b
    Example:
      codeact chat -f sales.csv
      > load sales.csv into df and show the columns
      > now plot revenue by region
      codeact chat --resume 3f2a           (a run of that chat, its session or snapshot id)
      codeact chat --output-schema answer.json
    """
    from ..sessions import SaveOptions

    typed = load_output_schema(output_schema) if output_schema is not None else None  # before any sandbox

    keep = cfg.snapshot_keep(keep_snapshots)
    if no_log and (resume or autosave):
        raise click.UsageError("--resume and --autosave need the run log (the conversation is rebuilt from it); "
                               "drop --no-log")
    saving = None if no_log else SaveOptions(store=cfg.snapshot_dir(snapshot_dir), keep=keep, autosave=autosave,
                                             on_close=False)
    output_root = cfg.output_root(output_dir)
    renderer, _ = renderers(output_root)
    assert renderer is not None
    tools = load_tools(tool_specs)
    model_obj = cfg.build_model(model, base_url=base_url, api_key=api_key, images=images_setting(),
                                context_window=compaction_settings()[0])
    backend = resolve_backend(backend, renderer)
    # MCP servers: connected once for the whole chat (all turns), closed when it ends.
    toolset = open_mcp(mcp_files, mcp_specs, mcp_on_error, renderer.warning)
    try:
        _chat(renderer, model_obj, tools + list(toolset or ()), backend, files, max_steps, timeout, output_root,
              db, no_log, yes, saving=saving, save_at_end=not no_save, resume=resume, typed=typed)
    finally:
        if toolset is not None:
            toolset.close()


def _save(session: Any, renderer: Any, *, quitting: bool = False, explicit: bool = False) -> None:
    """Save the session (if it has anything to save) and say where it went and how to resume it."""
    from ..errors import CodeActError

    if session.sandbox is None or session.closed:
        return
    if not explicit and getattr(session.sandbox, "backend", None) not in ("docker", "local"):
        return  # the restricted backend has no kernel to save (/save says so)
    if quitting:  # Ctrl-C twice may leave code running: stop it, so that the save does not wait on it
        with contextlib.suppress(Exception):  # best effort; the save says what failed
            session.interrupt()
    try:
        record = session.save(timeout=60.0 if quitting else None)
    except CodeActError as exc:
        renderer.warning(str(exc))
        return
    renderer.note(f"Saved session {record.session} (snapshot {record.id}, {record.size / 1e6:.1f} MB). "
                  f"Resume with: codeact chat --resume {record.session}")


def _start_session(agent: Any, renderer: Any, saving: Any, resume: str | None) -> Any:
    from ..errors import SavedSessionError

    if resume is None:
        return agent.session(save=saving)
    try:
        session = agent.session(save=saving, resume=resume)
    except SavedSessionError as exc:
        raise UserError(str(exc)) from None
    report = session.restored
    renderer.note(f"Resumed: {report.describe()}" if report is not None else "Resumed.", style="bold")
    return session


#: ``/type`` not used since the last turn: the next turn is typed as ``--output-schema`` says.
_EVERY_TURN: Any = object()


def _type_command(argument: str, renderer: Any, current: Any) -> Any:
    """``/type FILE`` (the next turn must match the JSON Schema in FILE) or ``/type off``; the next turn's type."""
    from ..errors import ConfigError

    if not argument:
        renderer.warning("give a JSON Schema file (/type answer.json) or /type off")
        return current
    if argument == "off":
        renderer.note("The next answer is free (no schema).")
        return None
    try:
        spec = load_output_schema(argument, option="/type")
    except ConfigError as exc:
        renderer.warning(str(exc))
        return current
    renderer.note(f"The next answer must match {spec.label.removeprefix('the ')} ({argument}).")
    return spec


def _chat(renderer: Any, model_obj: Any, tools: list[Any], backend: str, files: tuple[str, ...], max_steps: int,
          timeout: float, output_root: Any, db: str | None, no_log: bool, yes: bool, *, saving: Any = None,
          save_at_end: bool = True, resume: str | None = None, typed: Any = None) -> None:
    log = open_log(db, no_log)
    agent = make_agent(model_obj, tools, backend, max_steps=max_steps, timeout=timeout, output_root=output_root,
                       log=log, approve=make_approver(renderer, yes), stream=renderer.live_enabled)
    interactive = stdin_is_tty()
    pending = list(files)
    presses = CtrlC()
    renderer.note(f"Chatting with {getattr(model_obj, 'name', '?')} (backend {backend}). "
                  "/exit or Ctrl-D to quit, /reset for a new session, /help for help.", style="bold")
    session = _start_session(agent, renderer, saving, resume)
    if resume is not None:
        pending = []  # the files are in the restored session already
    quitting = False
    next_type: Any = _EVERY_TURN  # /type: the next turn's answer type (an OutputSpec, or None for a free answer)
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
                if presses.press():
                    quitting = True
                    raise
                renderer.note("(Ctrl-C again to quit; /exit or Ctrl-D also quit)")
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
            if text == "/save":
                if saving is None:
                    renderer.warning("saving needs the run log; this chat runs with --no-log")
                elif session.sandbox is None:
                    renderer.note("Nothing to save yet: the session starts with its first turn.")
                else:
                    _save(session, renderer, explicit=True)
                continue
            if text == "/reset":
                if saving is not None and save_at_end:
                    _save(session, renderer)
                session.close()
                session = agent.session(save=saving)
                pending = list(files)
                renderer.note("New session: history and kernel state cleared.")
                continue
            if text == "/type" or text.startswith("/type "):
                next_type = _type_command(text[5:].strip(), renderer, next_type)
                continue
            if text.startswith("/"):
                renderer.warning(f"unknown command {text.split()[0]}; try /help")
                continue
            spec = typed if next_type is _EVERY_TURN else next_type
            next_type = _EVERY_TURN
            renderer.answer_schema = spec.label.removeprefix("the ") if spec is not None else None
            turn = Turn(session, renderer, presses)
            try:
                drive(turn.events(session.stream(text, files=pending, cancel=turn.cancel, output_type=spec)),
                      renderer, log, text, on_ctrl_c=turn.on_ctrl_c)
            except RunCancelledByUser as exc:
                if presses.quitting:
                    quitting = True
                    raise KeyboardInterrupt from None  # the second Ctrl-C: "Interrupted.", exit 130
                if exc.during_code:
                    # Not the interrupt above (no terminal to take it over): the code may still run. Start clean.
                    session.close()
                    session = agent.session(save=saving)
                    pending = list(files)
                    renderer.note("Turn cancelled while code was running; started a new session "
                                  "(history and kernel state cleared).", style="yellow")
                else:
                    renderer.note("Turn cancelled.", style="yellow")
                continue
            pending = []
            if turn.interrupted:
                renderer.note("Interrupted: the session keeps its variables and files; the model will read "
                              "that you stopped the code.", style="yellow")
    finally:
        if saving is not None and save_at_end:
            _save(session, renderer, quitting=quitting)
        session.close()
        if log is not None:
            log.close()
