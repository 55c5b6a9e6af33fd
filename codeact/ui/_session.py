"""One tab of the web UI: a chat session, the events it produced, its approvals and files.

A :class:`UISession` wraps a :class:`~codeact.agent.ChatSession` and is what
the web server calls. Its parts live apart: the turns and cells, one at a
time on a thread of their own, in :mod:`._turns`; the numbered events a page
replays from any number on, in :mod:`._feed`; the questions to the page in
:mod:`._approvals`; the chat session's opening, saving, freeing and
restoring in :mod:`._chat_keeper`; the runs' files in :mod:`._artifacts`.
The session holds them together under one lock and checks each request
against its state (closed, busy).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from sandbox.hostfiles import UnsafePath, check_relative_path

from ..errors import CodeActError, SessionBusy, SessionNotFound, UIError
from ._approvals import Approvals
from ._artifacts import list_artifacts, read_artifact
from ._chat_keeper import ChatKeeper
from ._feed import EventFeed
from ._options import AgentFactory, UIOptions
from ._turns import TurnRunner
from ._variables import VariableListing

__all__ = ["AgentFactory", "UIOptions", "UISession"]


class UISession:
    """One conversation in the web UI (see the module docstring)."""

    def __init__(self, sid: str, title: str, factory: AgentFactory, options: UIOptions) -> None:
        self.id = sid
        self.title = title
        self.created = time.time()
        self.closed = False
        self.last_active = time.monotonic()
        self._options = options
        #: Guards the busy flag, the chat session, the files waiting to go in and the last listing.
        self._lock = threading.RLock()
        self._pending_files = list(options.files)
        self._last_listing: list[dict[str, Any]] = []
        self._feed = EventFeed(sid, event_bytes=options.event_buffer_bytes, blob_bytes=options.blob_bytes)
        self._approvals = Approvals(self._feed.publish, auto_approve=options.auto_approve,
                                    timeout=options.idle_timeout)
        self._keeper = ChatKeeper(factory, self._approve, options, self._feed.publish)
        self._turns = TurnRunner(f"codeact-ui-{sid}", self._lock, self._keeper, self._feed,
                                 live_output_chars=options.live_output_chars, touch=self.touch)

    # --- state -----------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """A turn or a cell runs (or the kernel restarts)."""
        return self._turns.busy

    @property
    def run_ids(self) -> list[str]:
        """The runs of this conversation, oldest first."""
        return list(self._turns.run_ids)

    def touch(self) -> None:
        self.last_active = time.monotonic()

    def summary(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "busy": self._turns.busy, "created": self.created,
                "sandbox_open": self._keeper.sandbox_open, "pending_approvals": self._approvals.waiting}

    def _check_open(self) -> None:
        if self.closed:
            raise SessionNotFound(f"session {self.id} is closed; open a new one (+)")

    # --- events (see EventFeed) ------------------------------------------------------------

    def publish(self, payload: dict[str, Any]) -> int:
        """Number ``payload``, keep it for replay and wake the streams. Returns its number."""
        return self._feed.publish(payload)

    @property
    def last_seq(self) -> int:
        return self._feed.last_seq

    def events_after(self, after: int) -> tuple[int, list[tuple[int, str]]]:
        """(events lost to the buffer cap after ``after``, the kept events numbered above ``after``)."""
        return self._feed.events_after(after)

    def add_waiter(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
        self._feed.add_waiter(loop, event)

    def remove_waiter(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
        self._feed.remove_waiter(loop, event)

    def wake_all(self) -> None:
        self._feed.wake_all()

    def blob(self, number: int) -> tuple[str, bytes]:
        """An image the page shows: (mime type, bytes)."""
        return self._feed.blob(number)

    # --- turns -----------------------------------------------------------------------------

    def send(self, text: str, output: Any = None) -> None:
        """Start a turn on ``text`` (on a thread of its own); its events follow on the stream.

        ``output``: an :class:`~codeact.output.OutputSpec` the answer must match (the page's schema box); the
        answer then goes to the page as pretty-printed JSON too.
        """
        if not text.strip():
            raise UIError("the message is empty")
        with self._lock:
            self._check_open()
            cancel = self._turns.begin("a turn is running in this session; wait for it to end or press Stop")
            files, self._pending_files = self._pending_files, []
            if self.title.startswith("Session ") and not self._turns.run_ids:
                self.title = " ".join(text.split())[:40] or self.title
            self._turns.start(lambda chat: chat.stream(text, files=files, cancel=cancel, output_type=output), cancel,
                              answer_schema=output.label.removeprefix("the ") if output is not None else None)

    def run_code(self, code: str) -> None:
        """Run the analyst's own ``code`` in the session's kernel (a thread of its own), as a code action runs.

        Its events follow on the stream; the model is told what ran and what it showed with the next message.
        """
        if not code.strip():
            raise UIError("the cell is empty")
        with self._lock:
            self._check_open()
            cancel = self._turns.begin("code is running in this session; wait for it to end or press Stop")
            files, self._pending_files = self._pending_files, []

            def cell(chat: Any) -> Any:
                if not hasattr(chat, "run_cell"):
                    raise UIError("this session's agent cannot run your code (it is not a CodeAct agent)")
                for path in files:  # --file files go in with the first thing that runs, as with a message
                    chat.upload(path)
                return chat.run_cell(code, cancel=cancel)

            self._turns.start(cell, cancel)

    def stop(self) -> bool:
        """Stop the running turn: interrupt its code (the kernel keeps its variables), end the turn.

        Returns False when no turn runs.
        """
        with self._lock:
            self._check_open()
        return self._turns.stop()

    # --- the kernel ------------------------------------------------------------------------

    def restart(self) -> bool:
        """Restart the kernel (the page asked for confirmation): variables go, files stay.

        Returns False when the session has no sandbox yet. The model is told with the next message.
        """
        with self._lock:
            self._check_open()
            busy = "code is running in this session; press Stop (or wait) before restarting"
            if self._turns.busy:
                raise SessionBusy(busy)
            chat = self._keeper.chat
            if chat is None:
                return False
            if not hasattr(chat, "restart"):
                raise UIError("this session's agent cannot restart its kernel (it is not a CodeAct agent)")
            self._turns.hold(busy)  # nothing else may use the sandbox while its kernel restarts
        self.touch()
        try:
            restarted = chat.restart()
        finally:
            self._turns.release()
        if restarted:
            self.publish({"type": "KernelRestarted",
                          "message": "Kernel restarted: variables, imports and definitions are gone; files were "
                                     "kept. The model is told with your next message."})
        return restarted

    def variables(self) -> dict[str, Any]:
        """The kernel's variables after the last code that ran (the model's or the analyst's)."""
        with self._lock:
            self._check_open()
            chat, busy = self._keeper.chat, self._turns.busy
        listing = getattr(chat, "variables", None) if chat is not None else VariableListing()
        if not isinstance(listing, VariableListing):
            listing = VariableListing(error="this session's agent has no variables panel (not a CodeAct agent)")
        return {**listing.wire(), "busy": busy, "sandbox_open": chat is not None}

    # --- approvals (see Approvals) -----------------------------------------------------------

    def _approve(self, request: Any) -> bool:
        """The agent's approver: ask the page and wait for its answer (on the agent's worker thread)."""
        with self._lock:
            cancel = self._turns.cancel
        allowed = self._approvals.ask(request, cancel=cancel, closed=lambda: self.closed)
        self.touch()
        return allowed

    def decide(self, aid: str, allow: bool) -> None:
        """The page's answer to an approval request."""
        with self._lock:
            self._check_open()
            self._approvals.decide(aid, allow)
        self.touch()

    # --- files ------------------------------------------------------------------------------

    def upload(self, name: str, source: Path) -> dict[str, Any]:
        """Copy an uploaded file (a host temp file) into the sandbox's working directory."""
        with self._lock:
            self._check_open()
            if self._turns.busy:
                raise SessionBusy("a turn is running; upload when it has ended (or press Stop)")
            self.touch()
            chat = self._keeper.open()
            where = chat.upload(source, name)
            size = source.stat().st_size
        self.publish({"type": "FileUploaded", "name": name, "size": size, "path": str(where)})
        return {"name": name, "size": size, "path": str(where)}

    def files(self) -> dict[str, Any]:
        """The working directory's files (the last listing while a turn runs) and the runs' artifacts."""
        with self._lock:
            self._check_open()
            busy, chat = self._turns.busy, self._keeper.chat
            if not busy and chat is not None:
                try:
                    listing = chat.list_files()
                    self._last_listing = [{"path": f.path, "size": f.size, "mtime": f.mtime}
                                          for f in listing[:2000]]
                except Exception:  # a listing failure leaves the last one shown
                    pass
            workspace = list(self._last_listing) if chat is not None else []
            run_ids = list(self._turns.run_ids)
        return {"workspace": workspace, "stale": busy, "artifacts": list_artifacts(self._options.output_root, run_ids),
                "pending": [p.name for p in self._pending_files]}

    def download(self, path: str) -> bytes:
        """A file from the sandbox's working directory."""
        try:
            check_relative_path(path)
        except UnsafePath as exc:
            raise UIError(f"not a file name in the working directory: {exc}") from None
        with self._lock:
            self._check_open()
            if self._turns.busy:
                raise SessionBusy("a turn is running; download when it has ended (artifacts can be "
                                  "downloaded at any time)")
            chat = self._keeper.chat
            if chat is None:
                raise SessionNotFound(f"no such file: {path} (this session has no sandbox yet)")
            self.touch()
            return chat.download(path)

    def artifact(self, run_id: str, path: str) -> bytes:
        return read_artifact(self._options.output_root, run_id, path, self._options.download_limit)

    # --- lifecycle ---------------------------------------------------------------------------

    def resume(self, key: str, history: Any) -> None:
        """Open this (new) session from a saved one (History's Resume): the sandbox restored, the conversation
        shown again as History has it, and a note of what came back.

        Raises:
            SavedSessionError: nothing saved for ``key``, or it cannot be restored (the message says why).
        """
        with self._lock:
            self._check_open()
            chat = self._keeper.resume(key)
            runs = list(chat.saver.runs)
            self._turns.run_ids.extend(runs)  # their files belong to this conversation
        for run_id in runs:  # the conversation so far, read-only, as it looked
            try:
                for event in history.events(run_id)["events"]:
                    event.pop("seq", None)
                    self.publish(event)
            except CodeActError:
                continue
        if runs and self.title.startswith("Session "):
            try:
                task = history.events(runs[0])["run"]["task"]
                self.title = ("↻ " + " ".join(str(task).split()))[:40] or self.title
            except CodeActError:
                pass
        self.publish({"type": "Notice", "message": "Resumed: " + chat.restored.describe()
                                                   + "\nThe model is told what was restored with your next message."})
        self.publish({"type": "Idle"})  # the replayed runs ended long ago: the page may send again

    def free_if_idle(self, now: float) -> bool:
        """Save and close the sandbox when nothing happened for the idle timeout; the tab stays, with its events.

        The next message restores the saved session (variables, files, the conversation); a session that
        cannot be saved (no run log, the restricted backend) starts afresh then.
        """
        with self._lock:  # held while saving: a message sent meanwhile waits for the save, then restores
            if self.closed or self._turns.busy or self._keeper.chat is None \
                    or now - self.last_active < self._options.idle_timeout:
                return False
            chat, saved = self._keeper.free()
        self._keeper.close_freed(chat, saved)
        return True

    def close(self, reason: str = "closed") -> None:
        """End the session: stop its turn, close its sandbox, end its event streams. Idempotent."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            turn = self._turns.end()
            chat = self._keeper.chat
        self.publish({"type": "SessionClosed", "message": reason})
        if chat is not None:
            chat.interrupt()
        if turn is not None:
            turn.join(30)
        if chat is not None:
            self._keeper.save(chat)  # History's Resume continues it (after a restart of the server too)
            chat.close()
        self._keeper.chat = None
        self.wake_all()

