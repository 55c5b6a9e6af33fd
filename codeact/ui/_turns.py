"""The turns of a web-UI tab: one thing at a time uses the sandbox, on a thread of its own, and Stop ends it.

A turn (the model answering a message) or a cell (the analyst's own code)
runs on a thread of its own in the request's context (its trace, when
tracing is on). Every event it yields goes to the page as page JSON
(:mod:`._wire`); live output is capped per step (the observation keeps its
head and tail). Whatever ends the turn, the page learns why and gets an
``Idle``. While one runs, the tab is busy: nothing else may use its sandbox.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import CodeActError, SessionBusy
from ..events import CodeAction, CodeOutput, Observation, RunStarted
from ._chat_keeper import ChatKeeper
from ._feed import EventFeed
from ._wire import event_wire

#: Times Stop sends its interrupt again, a second apart, to code that started just after the first.
INTERRUPT_REPEATS = 5


class TurnRunner:
    """Runs one tab's turns and cells, one at a time (see the module docstring).

    Args:
        name: the turns' thread name.
        lock: the tab's lock; it guards the busy flag here and the chat session in ``keeper``.
        keeper: opens the tab's chat session for the first turn.
        feed: where the turns' events go.
        live_output_chars: characters of live output per step sent to the page.
        touch: marks the tab active (each event of a turn does).
    """

    def __init__(self, name: str, lock: threading.RLock, keeper: ChatKeeper, feed: EventFeed, *,
                 live_output_chars: int, touch: Callable[[], None]) -> None:
        self._name = name
        self._lock = lock
        self._keeper = keeper
        self._feed = feed
        self._live_output_chars = live_output_chars
        self._touch = touch
        self._busy = False
        #: Set by Stop (and by closing the tab): the running turn ends, its approvals are denied.
        self.cancel: threading.Event | None = None
        self._thread: threading.Thread | None = None
        self._in_code = False
        #: The runs of this tab, oldest first (its artifacts are theirs).
        self.run_ids: list[str] = []

    @property
    def busy(self) -> bool:
        """A turn or a cell runs (or the kernel restarts): nothing else may use the sandbox."""
        return self._busy

    def begin(self, busy_message: str) -> threading.Event:
        """Mark the tab busy for a turn or a cell (holding the lock); returns its cancel event.

        Raises:
            SessionBusy: something runs already (``busy_message`` says what to do).
        """
        if self._busy:
            raise SessionBusy(busy_message)
        self._busy = True
        self._touch()
        cancel = threading.Event()
        self.cancel = cancel
        return cancel

    def start(self, events: Callable[[Any], Any], cancel: threading.Event, *, answer_schema: str | None = None
              ) -> None:
        """Run ``events(chat)`` on a thread of its own (after :meth:`begin`, holding the lock).

        ``answer_schema``: the turn is typed (how its schema is named): its answer goes to the page as JSON.
        """
        # The turn runs in the request's context (its trace, when tracing is on: the run continues it).
        args = (self._run, events, cancel, answer_schema)
        self._thread = threading.Thread(target=contextvars.copy_context().run, args=args, daemon=True,
                                        name=self._name)
        self._thread.start()

    def hold(self, busy_message: str) -> None:
        """Mark the tab busy for work on the caller's thread (a kernel restart; holding the lock) until
        :meth:`release`.

        Raises:
            SessionBusy: something runs already (``busy_message`` says what to do).
        """
        if self._busy:
            raise SessionBusy(busy_message)
        self._busy = True

    def release(self) -> None:
        """End what :meth:`hold` began."""
        with self._lock:
            self._busy = False

    def stop(self) -> bool:
        """Stop the running turn: set its cancel event and interrupt its code. False when none runs."""
        with self._lock:
            if not self._busy or self.cancel is None:
                return False
            self.cancel.set()
            chat = self._keeper.chat
        self._touch()
        self._feed.publish({"type": "Notice", "message": "Stopping: the running code is interrupted; "
                                                         "the session keeps its variables."})
        if chat is not None:
            chat.interrupt()
            threading.Thread(target=self._interrupt_again, args=(chat,), daemon=True).start()
        return True

    def end(self) -> threading.Thread | None:
        """Cancel the running turn, if any (the tab closes; holding the lock); returns its thread to wait for."""
        if self.cancel is not None:
            self.cancel.set()
        return self._thread

    def _run(self, events: Callable[[Any], Any], cancel: threading.Event, answer_schema: str | None = None) -> None:
        live_chars: dict[int, int] = {}
        try:
            with self._lock:
                chat = self._keeper.open()
            for event in events(chat):
                self._touch()
                if isinstance(event, RunStarted):
                    self.run_ids.append(event.run_id)
                elif isinstance(event, CodeAction):
                    self._in_code = True
                elif isinstance(event, Observation):
                    self._in_code = False
                elif isinstance(event, CodeOutput) and not self._admit_output(event, live_chars):
                    continue
                self._feed.publish(event_wire(event, self._feed.store_blob, answer_schema=answer_schema))
        except Exception as exc:  # the page must learn why the turn ended
            self._feed.publish({"type": "ErrorEvent", "message": _message(exc), "kind": "ui", "fatal": True,
                                "step": 0, "run_id": self.run_ids[-1] if self.run_ids else ""})
        finally:
            with self._lock:
                self._busy = False
                self._in_code = False
                self.cancel = None
                self._thread = None
            self._touch()
            self._feed.publish({"type": "Idle"})

    def _admit_output(self, event: CodeOutput, live_chars: dict[int, int]) -> bool:
        """Whether ``event`` still fits its step's live output (the first one past the cap becomes a notice)."""
        used = live_chars.get(event.step, 0)
        live_chars[event.step] = used + len(event.text)
        limit = self._live_output_chars
        if used >= limit:
            return False
        if used + len(event.text) > limit:
            self._feed.publish({"type": "Notice", "run_id": event.run_id, "step": event.step,
                                "message": f"Live output of step {event.step} passed {limit:,} characters; the "
                                           "rest is not streamed (the observation keeps its head and tail)."})
            return False
        return True

    def _interrupt_again(self, chat: Any) -> None:
        """Code that started just after Stop missed the first interrupt: send it again (a few times)."""
        for _ in range(INTERRUPT_REPEATS):
            time.sleep(1.0)
            with self._lock:
                if not self._busy or not self._in_code or self._keeper.chat is not chat:
                    return
            chat.interrupt()


def _message(exc: BaseException) -> str:
    if isinstance(exc, CodeActError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
