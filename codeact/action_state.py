"""The state of a CodeAct run that the host-function callbacks share with the step running it."""

from __future__ import annotations

import queue
from dataclasses import dataclass
from typing import Any

from .events import Event
from .run import Turn


@dataclass
class ActionState:
    """One CodeAct run as its code actions see it: the answer the code gave, where tool events go now.

    The callbacks that reach the host while code runs (tool calls, installs,
    network requests, ``final_answer``) run on other threads; they read this.
    """

    turn: Turn
    #: What ``final_answer(...)`` (or a ``return_direct`` tool) gave, once ``answered``.
    answer: Any = None
    answered: bool = False
    #: Where tool-call events go as calls complete (set while a code action runs; the action puts its
    #: output and its end there too).
    tool_events: queue.Queue[Any] | None = None
    #: A code action is running in the sandbox now.
    running_code: bool = False
    #: The user interrupted the running code action (:meth:`ChatSession.interrupt`).
    user_interrupted: bool = False
    #: The running code action's trace context: the parent of the tool calls its code makes.
    action_ctx: Any = None

    @property
    def run_id(self) -> str:
        return self.turn.run_id

    @property
    def step(self) -> int:
        return self.turn.step

    @property
    def trace(self) -> Any:
        return self.turn.trace

    @property
    def link(self) -> Any:
        return self.turn.link

    def report(self, event: Event) -> None:
        """An event of the running code action (a tool call, progress, an install): to the step's stream."""
        if self.tool_events is not None:
            self.tool_events.put(event)

    def give_answer(self, answer: Any) -> None:
        self.answer, self.answered = answer, True
