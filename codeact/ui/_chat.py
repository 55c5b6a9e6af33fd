"""The chat session of a web-UI tab: the agent's conversation plus the analyst's own hand.

:class:`WorkspaceChat` is a :class:`~codeact.agent.ChatSession` that the
analyst can also work in directly, as in a notebook:

* :meth:`~WorkspaceChat.run_cell` runs the analyst's code through the same
  path as a code action (the sandbox's time limit, live output, tool calls
  and approvals, artifacts, interrupts), recorded in the run log as a run of
  its own whose agent is ``"user"`` (the model's runs are ``"codeact"``);
* :meth:`~WorkspaceChat.restart` restarts the kernel (files are kept);
* after every code action, the model's or the analyst's, the kernel's
  variables are listed (:mod:`._variables`) for the variables panel.

The model is not left behind: what the analyst ran and saw, and a restart,
become a note at the top of the model's next message.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from .. import transcript
from ..agent import ChatSession
from ..code_artifacts import FileListing, file_listing
from ..code_step import CodeActions
from ..errors import CodeActError, SavedSessionError
from ..events import CodeAction, Event, RunStarted, Step
from ..images import StepImages
from ..run import Turn, drive
from ._variables import LISTING_CODE, LISTING_TIMEOUT, VariableListing, parse_listing

#: ``RunStarted.agent`` of a run that is the analyst's own code.
USER_AGENT = "user"
#: Told to the model with its next message after the analyst restarted the kernel.
RESTART_NOTE = ("The user restarted the kernel: variables, imports and definitions from before are gone "
                "(files in the working directory were kept).")


class WorkspaceChat(ChatSession):
    """A chat session the analyst can also run code in, restart, and look into (see the module docstring)."""

    def __init__(self, agent: Any, *, save: Any = None, resume: str | None = None) -> None:
        # Before the base class: a resume opens the sandbox from there.
        self._notes: list[str] = []
        self._notes_lock = threading.Lock()
        self._listing = VariableListing()
        super().__init__(agent, save=save, resume=resume)
        if resume is not None:
            self._list_variables(keep_notices=False)  # the panel shows what came back

    # --- what the analyst does ----------------------------------------------------------------

    @property
    def variables(self) -> VariableListing:
        """The kernel's variables after the last code that ran (empty before any)."""
        return self._listing

    @property
    def pending_notes(self) -> list[str]:
        """What the model will be told with the next message."""
        with self._notes_lock:
            return list(self._notes)

    def run_cell(self, code: str, *, cancel: threading.Event | None = None) -> Iterator[Event]:
        """Run the analyst's ``code`` in the session's kernel, yielding the same events as a code action.

        The run is one step with no model output; its observation (exactly
        what the model would have seen) and the code are told to the model
        with the next message.
        """
        if self.closed:
            raise CodeActError("this chat session is closed; start a new one")
        turn = self.new_turn(code, cancel=cancel, agent_kind=None, max_steps=1)
        started = RunStarted(run_id=turn.run_id, task=code, model="", backend=self.box.backend_name(),
                             tools=self.tool_names(), agent=USER_AGENT)
        return drive(turn, _CellTurn(self, code), started)

    def restart(self) -> bool:
        """Restart the kernel: variables go, files stay; the model is told with the next message.

        Returns False when there is no sandbox yet (nothing to restart).
        """
        if self.closed:
            raise CodeActError("this chat session is closed; start a new one")
        if self.sandbox is None:
            return False
        self.sandbox.restart()
        self.note(RESTART_NOTE)
        self._list_variables(keep_notices=False)  # the kernel's own "restarted" notice: the note says it
        return True

    # --- the model hears about it ---------------------------------------------------------------

    def note(self, text: str) -> None:
        """Tell the model ``text`` at the top of its next message."""
        with self._notes_lock:
            self._notes.append(text)

    def user_work_note(self) -> str:
        with self._notes_lock:
            notes, self._notes = self._notes, []
        return transcript.user_work_note(notes, self.agent.observation_limit)

    # --- the variables panel --------------------------------------------------------------------

    def after_action(self) -> list[str]:
        # What the listing's run says (a kernel restarted between the two) belongs to this step.
        return self._list_variables()

    def _list_variables(self, keep_notices: bool = True) -> list[str]:
        """List the kernel's variables (for the panel); returns the sandbox's notices of that run."""
        sandbox = self.sandbox
        if sandbox is None or getattr(sandbox, "backend", "") == "restricted":
            self._listing = VariableListing(error="the variables panel needs a kernel (the docker or local "
                                                  "backend)")
            return []
        try:
            listing = sandbox.run(LISTING_CODE, timeout=LISTING_TIMEOUT)
        except Exception as exc:  # the panel says so; the step goes on
            self._listing = VariableListing(error=f"could not list the variables: {type(exc).__name__}")
            return []
        if listing.error is not None:
            self._listing = VariableListing(error=f"could not list the variables: {listing.error.type}")
        else:
            self._listing = parse_listing(listing.stdout)
        return [n for n in listing.notices if n.strip()] if keep_notices else []


class _CellTurn:
    """The analyst's cell as a turn of one step: run, observe, tell the model next time."""

    gives_answers = False

    def __init__(self, chat: WorkspaceChat, code: str) -> None:
        self.chat = chat
        self.code = code
        self.actions = CodeActions(chat)
        self.before: FileListing = {}
        #: The note of a lost sandbox restored from the last save before the cell ran.
        self.restored = ""

    def begin(self, turn: Turn) -> Iterator[Event]:
        chat = self.chat
        # The sandbox went away since the last cell or turn: back from the last save first.
        self.restored = chat.privacy.redact(chat.recovery.before_action(turn.run_id, 0, turn.cancel))
        chat.box.ensure(chat.tools.host_functions)
        state = chat.current_run()
        assert state is not None
        yield from chat.box.package_events(state)
        self.before = file_listing(chat.sandbox)

    def step(self, turn: Turn, step: Step) -> Iterator[Event]:
        chat, code = self.chat, self.code
        state = chat.current_run()
        assert state is not None
        step.code = code
        yield CodeAction(run_id=turn.run_id, step=step.index, code=code)
        executed = yield from self.actions.execute(code, state, step, self.before)
        text = self.restored + executed.text
        # The cell lost the kernel: a saved session comes back from its last save (codeact.chat_recovery).
        lost_note = chat.recovery.after_action(executed.result.kernel_lost, turn.run_id, step.index, turn.cancel)
        if lost_note:
            text += "\n\n" + chat.privacy.redact(lost_note).rstrip()
            chat.after_action()  # the variables panel shows the restored session
        error = executed.result.error
        step.error = str(error) if error else None
        yield self.actions.observation(executed, state, step, text, StepImages())
        chat.note(transcript.cell_note(code, text, transcript.cell_note_half(chat.agent.observation_limit)))
        yield from chat.autosave(state)
        if turn.cancel is not None and turn.cancel.is_set():
            turn.end("cancelled", error="stopped by the user")
        elif step.error:
            turn.end("error", error=step.error)
        else:
            turn.end("success")

    def best_answer(self, turn: Turn) -> Any:
        return None

    def after(self, turn: Turn) -> Iterator[Event]:
        return iter(())

    def answered(self, turn: Turn) -> Iterator[Event]:
        return iter(())


def workspace_chat(agent: Any, *, save: Any = None, resume: str | None = None) -> Any:
    """The session of one tab: a :class:`WorkspaceChat` for a CodeAct agent, else the agent's own session.

    ``save`` (:class:`codeact.sessions.SaveOptions`) applies when the agent keeps a run log;
    ``resume`` restores a saved session (CodeAct only: a ReAct session has no kernel).
    """
    from ..agent import CodeActAgent

    if isinstance(agent, CodeActAgent):
        return WorkspaceChat(agent, save=save if agent.run_log() is not None else None, resume=resume)
    if resume is not None:
        raise SavedSessionError("this workspace's agent is not a CodeAct agent: it has no kernel to restore a "
                                "saved session into (resume works for CodeAct sessions)")
    return agent.session()


__all__ = ["WorkspaceChat", "workspace_chat", "USER_AGENT", "RESTART_NOTE"]
