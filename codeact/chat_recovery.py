"""A saved chat's sandbox brought back from its last save when its kernel was lost.

Whatever took the kernel (its engine restarted, its container was removed, the
kernel was killed for memory or restarted because code would not stop), the
session's variables are gone. A chat session that has a save
(:mod:`codeact.sessions`, e.g. ``SaveOptions(autosave=True)``) then opens a new
sandbox restored from its newest save and tells the model what came back and
what was lost:

- during a turn, in the observation of the action that lost the kernel, so the
  model's next step runs in the restored session (:meth:`Recovery.after_action`);
  a sandbox that went away while the model was writing is restored before the
  next action runs, and said in its observation (:meth:`Recovery.before_action`);
- between turns, with the next message (:meth:`Recovery.before_action` too); this
  includes a kernel that died while no code ran (killed from outside, or out of
  memory in a thread the code left running) in a container that lives on: the
  save holds the variables a fresh kernel would not have.

Without a save (or with a sandbox the user passed in, which the session does
not own) nothing is restored: the next run starts a fresh kernel, as the
action's own notices say.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from sandbox.errors import BackendUnavailable, ImageNotFound
from sandbox.functions import HostFunction

from .chat_sandbox import ChatSandbox
from .sessions import Saver, recovery_note


#: Seconds a restore waits for an engine that does not answer (it is restarting) before it gives up for now.
ENGINE_WAIT = 60.0


@dataclass(frozen=True)
class LostKernel:
    """A lost kernel still to be brought back: from which save, and why it was lost."""

    snapshot: Any
    #: The sandbox's own account of the loss.
    why: str
    #: (run id, step) of the save: the conversation's place when it was made.
    saved_at: tuple[str | None, int]
    #: (run id, step) where the loss was seen (the action that lost it, or the step about to run).
    seen_at: tuple[str, int]
    #: Seen during that step's action (its code's effects are gone), else before it ran.
    during: bool


class Recovery:
    """Brings one chat session's lost sandbox back from its last save (see the module docstring)."""

    def __init__(self, box: ChatSandbox, saver: Saver, functions: Callable[[], list[HostFunction]]) -> None:
        self.box = box
        self.saver = saver
        self.functions = functions
        #: A loss whose restore failed (the engine is still away): the next action or turn tries again.
        self.pending: LostKernel | None = None

    def after_action(self, kernel_lost: str | None, run_id: str, step: int,
                     cancel: threading.Event | None = None) -> str:
        """The action of ``step`` just ran; ``kernel_lost`` is its result's account of a lost kernel (None: the
        kernel is fine). Returns the note for the action's observation ("" when nothing is restored).

        Never raises: a restore that fails now is said in the note and tried again before the next action.
        An engine that does not answer (restarting) is waited for, up to :data:`ENGINE_WAIT` seconds or until
        ``cancel`` is set.
        """
        if not kernel_lost or not self._hold(kernel_lost, (run_id, step), during=True):
            return ""
        try:
            return self._reopen(cancel)
        except Exception as exc:  # the engine is still away, say: the next action tries again
            return (f"[Note: the Python session was lost ({_cut(kernel_lost, 300)}). Restoring it from this "
                    f"session's last save failed for now ({type(exc).__name__}: {_cut(str(exc), 300)}); the next "
                    "action tries again first, and stops the turn if it fails again.]")

    def before_action(self, run_id: str, step: int, cancel: threading.Event | None = None) -> str:
        """Before the code of ``step`` runs (or a turn begins): restore a sandbox that went away since the last
        action, or whose restore failed then. Returns the note for the model ("" when nothing was lost).

        Raises what the restore raises (the engine is still away after :data:`ENGINE_WAIT` seconds).
        """
        if self.pending is None:
            why = self.box.lost_reason()
            if why is None or not self._hold(why, (run_id, step), during=False):
                return ""
        return self._reopen(cancel)

    def _hold(self, why: str, seen_at: tuple[str, int], *, during: bool) -> bool:
        """Note the loss and drop the lost sandbox when there is a save to restore it from; False otherwise."""
        if self.saver.last is None or not self.box.owned or self.box.sandbox is None:
            return False
        self.pending = LostKernel(self.saver.last, why, self.saver.last_point, seen_at, during)
        self.box.drop()
        return True

    def _reopen(self, cancel: threading.Event | None) -> str:
        lost = self.pending
        assert lost is not None
        deadline = time.monotonic() + ENGINE_WAIT
        while True:
            try:
                report = self.box.reopen_from(self.functions, lost.snapshot)
                break
            except BackendUnavailable as exc:  # no engine answers: one that restarts is back within seconds
                stop = cancel or threading.Event()
                if isinstance(exc, ImageNotFound) or time.monotonic() >= deadline or stop.wait(1.0):
                    raise
        self.pending = None
        return recovery_note(lost.snapshot, lost.why, report, where=_where(lost), gone=_gone(lost))


def _where(lost: LostKernel) -> str:
    """Which save the session came back from, as the model knows the conversation."""
    run_id, step = lost.saved_at
    if run_id is None:
        return "this session's last save"
    if run_id == lost.seen_at[0]:
        return f"the save made after step {step} of this turn"
    return f"the save made after step {step} of an earlier turn"


def _gone(lost: LostKernel) -> str:
    """What ran after that save (its effects are gone)."""
    run_id, step = lost.seen_at
    last = step if lost.during else step - 1  # the last step of this turn whose code ran
    first = lost.saved_at[1] + 1 if lost.saved_at[0] == run_id else 1
    if last < first:
        return "nothing, no code ran after that save" if lost.saved_at[0] == run_id else \
            "everything the code did after that save; run again what is still needed"
    steps = f"step {last}" if first == last else f"steps {first} to {last}"
    return f"everything the code did after that save ({steps} of this turn); run again what is still needed"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit // 2] + " ... " + text[-limit // 2:]


__all__ = ["LostKernel", "Recovery"]
