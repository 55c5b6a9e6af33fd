"""``codeact chat``: a multi-turn session in the terminal, and what Ctrl-C does in it.

Ctrl-C while the code runs interrupts that code (it gets a ``KeyboardInterrupt``),
ends the turn and keeps the session: variables, files and history stay, and the
model's observation says that the user interrupted it. Ctrl-C while the model
writes cancels the turn. A second Ctrl-C within :data:`QUIT_WINDOW` seconds of
the first quits, as does Ctrl-D or ``/exit`` at the prompt.
"""

from __future__ import annotations

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
    agent_options,
    cli,
    drive,
    load_tools,
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
  /reset   start a new session (history and kernel state cleared)
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
@agent_options
def chat(files: tuple[str, ...], tool_specs: tuple[str, ...], model: str | None, base_url: str | None,
         api_key: str | None, backend: str, yes: bool, max_steps: int, timeout: float, output_dir: str | None,
         db: str | None, no_log: bool, mcp_files: tuple[str, ...] = (), mcp_specs: tuple[str, ...] = (),
         mcp_on_error: str = "stop") -> None:
    """A multi-turn session: variables and files survive between turns.

    Each turn is a run of its own in the run log. Files given with --file are
    copied in before the first turn. Commands: /reset, /help, /exit (or Ctrl-D).
    Ctrl-C while code runs interrupts it and keeps the session (variables stay);
    Ctrl-C twice in a row quits.

    \b
    Example:
      codeact chat -f sales.csv
      > load sales.csv into df and show the columns
      > now plot revenue by region
    """
    output_root = cfg.output_root(output_dir)
    renderer, _ = renderers(output_root)
    assert renderer is not None
    tools = load_tools(tool_specs)
    model_obj = cfg.build_model(model, base_url=base_url, api_key=api_key)
    backend = resolve_backend(backend, renderer)
    # MCP servers: connected once for the whole chat (all turns), closed when it ends.
    toolset = open_mcp(mcp_files, mcp_specs, mcp_on_error, renderer.warning)
    try:
        _chat(renderer, model_obj, tools + list(toolset or ()), backend, files, max_steps, timeout, output_root,
              db, no_log, yes)
    finally:
        if toolset is not None:
            toolset.close()


def _chat(renderer: Any, model_obj: Any, tools: list[Any], backend: str, files: tuple[str, ...], max_steps: int,
          timeout: float, output_root: Any, db: str | None, no_log: bool, yes: bool) -> None:
    log = open_log(db, no_log)
    agent = make_agent(model_obj, tools, backend, max_steps=max_steps, timeout=timeout, output_root=output_root,
                       log=log, approve=make_approver(renderer, yes), stream=renderer.live_enabled)
    interactive = stdin_is_tty()
    pending = list(files)
    presses = CtrlC()
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
                if presses.press():
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
            if text == "/reset":
                session.close()
                session = agent.session()
                pending = list(files)
                renderer.note("New session: history and kernel state cleared.")
                continue
            if text.startswith("/"):
                renderer.warning(f"unknown command {text.split()[0]}; try /help")
                continue
            turn = Turn(session, renderer, presses)
            try:
                drive(turn.events(session.stream(text, files=pending, cancel=turn.cancel)), renderer, log, text,
                      on_ctrl_c=turn.on_ctrl_c)
            except RunCancelledByUser as exc:
                if presses.quitting:
                    raise KeyboardInterrupt from None  # the second Ctrl-C: "Interrupted.", exit 130
                if exc.during_code:
                    # Not the interrupt above (no terminal to take it over): the code may still run. Start clean.
                    session.close()
                    session = agent.session()
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
        session.close()
        if log is not None:
            log.close()
