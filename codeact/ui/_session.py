"""One tab of the web UI: a chat session, the events it produced, its approvals and files.

A :class:`UISession` wraps a :class:`~codeact.agent.ChatSession`. A turn runs
on a thread of its own and every event it yields is turned into page JSON
(:mod:`._wire`), numbered and kept in a bounded buffer, so that a page that
reloads or loses its connection replays what it missed from any number on.
Approvals block the agent's worker thread until the page decides (or the
turn is stopped, the session closed, or nobody answers within the idle
timeout: then the call is denied and the model reads that as an error).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import contextvars
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.hostfiles import UnsafePath, check_relative_path, read_confined

from ..errors import CodeActError, SessionBusy, SessionNotFound, UIError
from ..events import CodeAction, CodeOutput, Observation, RunStarted
from ._chat import workspace_chat
from ._variables import VariableListing
from ._wire import dumps, event_wire, shown

#: Characters of each text field of a skill-save approval (its code, diff, docstring) sent to the
#: page: far above what the skill store accepts (64 kB of code), so the page shows them whole.
SKILL_TEXT_LIMIT = 1_000_000

#: Builds the agent of one UI session; it must pass ``approve`` on to :class:`CodeActAgent`.
AgentFactory = Callable[[Callable[[Any], bool]], Any]


@dataclass(frozen=True)
class UIOptions:
    """Limits and behaviour of the web UI's sessions.

    Example::

        UIOptions(max_sessions=2, idle_timeout=600, upload_limit=10 * 2**20)
    """

    #: Sessions (tabs) open at once, each with its own sandbox.
    max_sessions: int = 4
    #: Seconds without a request or a running turn after which a session's sandbox is closed.
    idle_timeout: float = 30 * 60
    #: Bytes of one uploaded file.
    upload_limit: int = 100 * 1024 * 1024
    #: Approve every call of tools that require approval (``--yes``); the page shows each.
    auto_approve: bool = False
    #: Host files copied into every session with its first message (``--file``).
    files: tuple[Path, ...] = ()
    #: Where the agent writes artifacts (``<output_root>/<run id>/``), for downloads.
    output_root: Path = field(default_factory=lambda: Path("artifacts"))
    #: Bytes of page events a session keeps for replay; older ones are dropped (History has them).
    event_buffer_bytes: int = 32 * 1024 * 1024
    #: Bytes of images (plots, SVG) a session keeps for the page.
    blob_bytes: int = 256 * 1024 * 1024
    #: Characters of live output per step sent to the page (the observation still has the rest).
    live_output_chars: int = 1_000_000
    #: Bytes of one file downloaded through the page.
    download_limit: int = 256 * 1024 * 1024
    #: Save a session (sandbox snapshot + its place in the run log) when it closes, when the server stops
    #: and when the idle timeout frees its sandbox (then the next message restores it). Needs the run log.
    save_sessions: bool = True
    #: Where saved sessions go (None: ``$CODEACT_SNAPSHOT_DIR`` or the data dir's ``snapshots``).
    snapshot_dir: Path | None = None
    #: Snapshots kept per session (None: all).
    keep_snapshots: int | None = 3
    #: Save after every step as well (so that even a killed server resumes at the last step).
    autosave: bool = False


@dataclass
class _Approval:
    request: Any
    decided: threading.Event = field(default_factory=threading.Event)
    allowed: bool = False


class UISession:
    """One conversation in the web UI (see the module docstring)."""

    def __init__(self, sid: str, title: str, factory: AgentFactory, options: UIOptions) -> None:
        self.id = sid
        self.title = title
        self.created = time.time()
        self._factory = factory
        self._options = options
        self._lock = threading.RLock()
        self._chat: Any = None
        self._sandbox_freed = False
        #: The snapshot the idle timeout saved the sandbox to; the next message restores it.
        self._saved: str | None = None
        self._busy = False
        self._cancel: threading.Event | None = None
        self._turn: threading.Thread | None = None
        self._in_code = False
        self._approvals: dict[str, _Approval] = {}
        self._pending_files = list(options.files)
        self._run_ids: list[str] = []
        self._last_listing: list[dict[str, Any]] = []
        self.closed = False
        self.last_active = time.monotonic()
        # The replay buffer and the waiters of open event streams.
        self._events_lock = threading.Lock()
        self._events: deque[tuple[int, str]] = deque()
        self._events_bytes = 0
        self._seq = 0
        self._dropped_upto = 0
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._blobs: OrderedDict[int, tuple[str, bytes]] = OrderedDict()
        self._blob_bytes = 0
        self._blob_seq = 0

    # --- state -----------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._busy

    def touch(self) -> None:
        self.last_active = time.monotonic()

    def summary(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "busy": self._busy, "created": self.created,
                "sandbox_open": self._chat is not None and not self._sandbox_freed,
                "pending_approvals": len(self._approvals)}

    def _check_open(self) -> None:
        if self.closed:
            raise SessionNotFound(f"session {self.id} is closed; open a new one (+)")

    # --- events ----------------------------------------------------------------------------

    def publish(self, payload: dict[str, Any]) -> int:
        """Number ``payload``, keep it for replay and wake the streams. Returns its number."""
        with self._events_lock:
            self._seq += 1
            payload["seq"] = self._seq
            data = dumps(payload)
            self._events.append((self._seq, data))
            self._events_bytes += len(data)
            while self._events_bytes > self._options.event_buffer_bytes and len(self._events) > 1:
                seq, old = self._events.popleft()
                self._events_bytes -= len(old)
                self._dropped_upto = seq
            waiters = list(self._waiters)
            seq = self._seq
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # that stream's loop is gone
                loop.call_soon_threadsafe(event.set)
        return seq

    @property
    def last_seq(self) -> int:
        return self._seq

    def events_after(self, after: int) -> tuple[int, list[tuple[int, str]]]:
        """(events lost to the buffer cap after ``after``, the kept events numbered above ``after``)."""
        with self._events_lock:
            lost = max(0, self._dropped_upto - after)
            # The kept events are numbered without gaps up to the last one, so the wanted ones are the
            # newest ``last - after``: taken from the right end, this lock (which every publish of the
            # turn needs) is held for the new events only, not for the whole buffer, however many
            # streams and polls ask.
            wanted = min(len(self._events), max(0, self._seq - after))
            batch = list(itertools.islice(reversed(self._events), wanted))
        batch.reverse()
        return lost, batch

    def add_waiter(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
        with self._events_lock:
            self._waiters.add((loop, event))

    def remove_waiter(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
        with self._events_lock:
            self._waiters.discard((loop, event))

    def wake_all(self) -> None:
        with self._events_lock:
            waiters = list(self._waiters)
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # that stream's loop is gone
                loop.call_soon_threadsafe(event.set)

    # --- blobs (images for <img>) --------------------------------------------------------------

    def store_blob(self, mime: str, data: bytes) -> str:
        """Keep ``data`` for the page; returns the URL it is served at."""
        with self._events_lock:
            self._blob_seq += 1
            self._blobs[self._blob_seq] = (mime, data)
            self._blob_bytes += len(data)
            while self._blob_bytes > self._options.blob_bytes and len(self._blobs) > 1:
                _, (_, old) = self._blobs.popitem(last=False)
                self._blob_bytes -= len(old)
            return f"/api/sessions/{self.id}/blobs/{self._blob_seq}"

    def blob(self, number: int) -> tuple[str, bytes]:
        with self._events_lock:
            found = self._blobs.get(number)
        if found is None:
            raise UIError("this image is no longer kept (the session's image memory is full); "
                          "History has the run's images")
        return found

    # --- turns -----------------------------------------------------------------------------

    def send(self, text: str) -> None:
        """Start a turn on ``text`` (on a thread of its own); its events follow on the stream."""
        if not text.strip():
            raise UIError("the message is empty")
        with self._lock:
            cancel = self._begin("a turn is running in this session; wait for it to end or press Stop")
            files, self._pending_files = self._pending_files, []
            if self.title.startswith("Session ") and not self._run_ids:
                self.title = " ".join(text.split())[:40] or self.title
            self._start(lambda chat: chat.stream(text, files=files, cancel=cancel), cancel)

    def run_code(self, code: str) -> None:
        """Run the analyst's own ``code`` in the session's kernel (a thread of its own), as a code action runs.

        Its events follow on the stream; the model is told what ran and what it showed with the next message.
        """
        if not code.strip():
            raise UIError("the cell is empty")
        with self._lock:
            cancel = self._begin("code is running in this session; wait for it to end or press Stop")
            files, self._pending_files = self._pending_files, []

            def cell(chat: Any) -> Any:
                if not hasattr(chat, "run_cell"):
                    raise UIError("this session's agent cannot run your code (it is not a CodeAct agent)")
                for path in files:  # --file files go in with the first thing that runs, as with a message
                    chat.upload(path)
                return chat.run_cell(code, cancel=cancel)

            self._start(cell, cancel)

    def _begin(self, busy_message: str) -> threading.Event:
        """Mark the session busy for a turn or a cell (holding ``self._lock``); returns its cancel event."""
        self._check_open()
        if self._busy:
            raise SessionBusy(busy_message)
        self._busy = True
        self.touch()
        cancel = threading.Event()
        self._cancel = cancel
        return cancel

    def _start(self, events: Callable[[Any], Any], cancel: threading.Event) -> None:
        # The turn runs in the request's context (its trace, when tracing is on: the run continues it).
        self._turn = threading.Thread(target=contextvars.copy_context().run, args=(self._run_turn, events, cancel),
                                      daemon=True, name=f"codeact-ui-{self.id}")
        self._turn.start()

    def _save_options(self) -> Any:
        if not self._options.save_sessions:
            return None
        from ..sessions import SaveOptions

        return SaveOptions(store=self._options.snapshot_dir, keep=self._options.keep_snapshots,
                           autosave=self._options.autosave, on_close=False)

    def _open_chat(self) -> Any:
        """The chat session, opened on first use (and again after the idle timeout freed it: restored)."""
        if self._chat is None:
            saved, self._saved = self._saved, None
            if saved is not None:
                try:
                    self._chat = workspace_chat(self._factory(self._approve), save=self._save_options(),
                                                resume=saved)
                except CodeActError as exc:
                    self.publish({"type": "Notice", "message": f"The saved session could not be restored "
                                                               f"({exc}); a new sandbox was started."})
                else:
                    self._sandbox_freed = False
                    self.publish({"type": "Notice", "message": "The sandbox was restored from the snapshot taken "
                                                               "at the idle timeout: "
                                                               + self._chat.restored.describe()})
            if self._chat is None:
                self._chat = workspace_chat(self._factory(self._approve), save=self._save_options())
            if self._sandbox_freed:
                self._sandbox_freed = False
                self.publish({"type": "Notice", "message": "A new sandbox was started: variables, files and "
                                                           "history from before the idle timeout are gone."})
        return self._chat

    def resume(self, key: str, history: Any) -> None:
        """Open this (new) session from a saved one (History's Resume): the sandbox restored, the conversation
        shown again as History has it, and a note of what came back.

        Raises:
            SavedSessionError: nothing saved for ``key``, or it cannot be restored (the message says why).
        """
        with self._lock:
            self._check_open()
            chat = workspace_chat(self._factory(self._approve), save=self._save_options(), resume=key)
            self._chat = chat
            runs = list(chat.saver.runs)
            self._run_ids.extend(runs)  # their files belong to this conversation
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

    def _save(self, chat: Any) -> str | None:
        """Save ``chat`` if it can be (a CodeAct session with a kernel and the run log); its snapshot id or None."""
        saver = getattr(chat, "saver", None)
        sandbox = getattr(chat, "sandbox", None)
        if saver is None or saver.options is None or saver.log is None or sandbox is None \
                or getattr(sandbox, "backend", None) not in ("docker", "local"):
            return None
        try:
            return str(chat.save().id)
        except CodeActError as exc:
            self.publish({"type": "Notice", "message": f"The session could not be saved: {exc}"})
            return None

    def _run_turn(self, events: Callable[[Any], Any], cancel: threading.Event) -> None:
        live_chars: dict[int, int] = {}
        try:
            with self._lock:
                chat = self._open_chat()
            for event in events(chat):
                self.touch()
                if isinstance(event, RunStarted):
                    self._run_ids.append(event.run_id)
                elif isinstance(event, CodeAction):
                    self._in_code = True
                elif isinstance(event, Observation):
                    self._in_code = False
                elif isinstance(event, CodeOutput):
                    used = live_chars.get(event.step, 0)
                    live_chars[event.step] = used + len(event.text)
                    limit = self._options.live_output_chars
                    if used >= limit:
                        continue
                    if used + len(event.text) > limit:
                        self.publish({"type": "Notice", "run_id": event.run_id, "step": event.step,
                                      "message": f"Live output of step {event.step} passed {limit:,} characters; "
                                                 "the rest is not streamed (the observation keeps its head and "
                                                 "tail)."})
                        continue
                self.publish(event_wire(event, self.store_blob))
        except Exception as exc:  # the page must learn why the turn ended
            self.publish({"type": "ErrorEvent", "message": _message(exc), "kind": "ui", "fatal": True,
                          "step": 0, "run_id": self._run_ids[-1] if self._run_ids else ""})
        finally:
            with self._lock:
                self._busy = False
                self._in_code = False
                self._cancel = None
                self._turn = None
            self.touch()
            self.publish({"type": "Idle"})

    def stop(self) -> bool:
        """Stop the running turn: interrupt its code (the kernel keeps its variables), end the turn.

        Returns False when no turn runs.
        """
        with self._lock:
            self._check_open()
            if not self._busy or self._cancel is None:
                return False
            self._cancel.set()
            chat = self._chat
        self.touch()
        self.publish({"type": "Notice", "message": "Stopping: the running code is interrupted; "
                                                   "the session keeps its variables."})
        if chat is not None:
            chat.interrupt()
            threading.Thread(target=self._interrupt_again, args=(chat,), daemon=True).start()
        return True

    def restart(self) -> bool:
        """Restart the kernel (the page asked for confirmation): variables go, files stay.

        Returns False when the session has no sandbox yet. The model is told with the next message.
        """
        with self._lock:
            self._check_open()
            if self._busy:
                raise SessionBusy("code is running in this session; press Stop (or wait) before restarting")
            chat = self._chat
            if chat is None:
                return False
            if not hasattr(chat, "restart"):
                raise UIError("this session's agent cannot restart its kernel (it is not a CodeAct agent)")
            self._busy = True  # nothing else may use the sandbox while its kernel restarts
        self.touch()
        try:
            restarted = chat.restart()
        finally:
            with self._lock:
                self._busy = False
        if restarted:
            self.publish({"type": "KernelRestarted",
                          "message": "Kernel restarted: variables, imports and definitions are gone; files were "
                                     "kept. The model is told with your next message."})
        return restarted

    def variables(self) -> dict[str, Any]:
        """The kernel's variables after the last code that ran (the model's or the analyst's)."""
        with self._lock:
            self._check_open()
            chat, busy = self._chat, self._busy
        listing = getattr(chat, "variables", None) if chat is not None else VariableListing()
        if not isinstance(listing, VariableListing):
            listing = VariableListing(error="this session's agent has no variables panel (not a CodeAct agent)")
        return {**listing.wire(), "busy": busy, "sandbox_open": chat is not None}

    def _interrupt_again(self, chat: Any) -> None:
        """Code that started just after Stop missed the first interrupt: send it again (a few times)."""
        for _ in range(5):
            time.sleep(1.0)
            with self._lock:
                if not self._busy or not self._in_code or self._chat is not chat:
                    return
            chat.interrupt()

    # --- approvals ---------------------------------------------------------------------------

    def _approve(self, request: Any) -> bool:
        """The agent's approver: ask the page and wait for its answer (on the agent's worker thread)."""
        aid = uuid.uuid4().hex[:12]
        call = {"id": aid, "run_id": request.run_id, "step": request.step, "tool": request.tool,
                "agent": getattr(request, "agent", ""), **_approval_details(request)}
        if self._options.auto_approve:
            self.publish({"type": "ApprovalResolved", **call, "allowed": True,
                          "reason": "approved automatically (--yes)"})
            return True
        approval = _Approval(request)
        with self._lock:
            self._approvals[aid] = approval
            cancel = self._cancel
        self.publish({"type": "ApprovalRequested", **call})
        deadline = time.monotonic() + self._options.idle_timeout
        reason = None
        while not approval.decided.wait(0.2):
            if self.closed:
                reason = "denied: the session was closed"
            elif cancel is not None and cancel.is_set():
                reason = "denied: the turn was stopped"
            elif time.monotonic() > deadline:
                reason = f"denied: no answer within {self._options.idle_timeout / 60:g} minutes"
            if reason:
                break
        with self._lock:
            self._approvals.pop(aid, None)
        allowed = approval.allowed if reason is None else False
        self.touch()
        self.publish({"type": "ApprovalResolved", **call, "allowed": allowed,
                      "reason": reason or ("approved" if allowed else "denied")})
        return allowed

    def decide(self, aid: str, allow: bool) -> None:
        """The page's answer to an approval request."""
        with self._lock:
            self._check_open()
            approval = self._approvals.get(aid)
            if approval is None or approval.decided.is_set():
                raise SessionBusy("this approval is no longer open (already answered, stopped or timed out)")
            approval.allowed = bool(allow)
            approval.decided.set()
        self.touch()

    # --- files ------------------------------------------------------------------------------

    def upload(self, name: str, source: Path) -> dict[str, Any]:
        """Copy an uploaded file (a host temp file) into the sandbox's working directory."""
        with self._lock:
            self._check_open()
            if self._busy:
                raise SessionBusy("a turn is running; upload when it has ended (or press Stop)")
            self.touch()
            chat = self._open_chat()
            where = chat.upload(source, name)
            size = source.stat().st_size
        self.publish({"type": "FileUploaded", "name": name, "size": size, "path": str(where)})
        return {"name": name, "size": size, "path": str(where)}

    def files(self) -> dict[str, Any]:
        """The working directory's files (the last listing while a turn runs) and the runs' artifacts."""
        with self._lock:
            self._check_open()
            busy = self._busy
            if not busy and self._chat is not None:
                try:
                    listing = self._chat.list_files()
                    self._last_listing = [{"path": f.path, "size": f.size, "mtime": f.mtime}
                                          for f in listing[:2000]]
                except Exception:  # a listing failure leaves the last one shown
                    pass
            workspace = list(self._last_listing) if self._chat is not None else []
            run_ids = list(self._run_ids)
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
            if self._busy:
                raise SessionBusy("a turn is running; download when it has ended (artifacts can be "
                                  "downloaded at any time)")
            if self._chat is None:
                raise SessionNotFound(f"no such file: {path} (this session has no sandbox yet)")
            self.touch()
            return self._chat.download(path)

    # --- lifecycle ---------------------------------------------------------------------------

    def free_if_idle(self, now: float) -> bool:
        """Save and close the sandbox when nothing happened for the idle timeout; the tab stays, with its events.

        The next message restores the saved session (variables, files, the conversation); a session that
        cannot be saved (no run log, the restricted backend) starts afresh then.
        """
        with self._lock:  # held while saving: a message sent meanwhile waits for the save, then restores
            if self.closed or self._busy or self._chat is None or now - self.last_active < self._options.idle_timeout:
                return False
            chat = self._chat
            saved = self._save(chat)
            self._chat, self._saved = None, saved
            self._sandbox_freed = saved is None
        try:
            chat.close()
        finally:
            minutes = self._options.idle_timeout / 60
            if saved is not None:
                message = (f"Idle for {minutes:g} minutes: this session's sandbox was saved and closed to free "
                           "resources. The next message restores it (variables, files and the conversation).")
            else:
                message = (f"Idle for {minutes:g} minutes: this session's sandbox was closed to free "
                           "resources. The next message starts a new one (variables, files and the "
                           "conversation so far are gone; History keeps the runs).")
            self.publish({"type": "SandboxFreed", "message": message})
        return True

    def close(self, reason: str = "closed") -> None:
        """End the session: stop its turn, close its sandbox, end its event streams. Idempotent."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            if self._cancel is not None:
                self._cancel.set()
            chat, turn = self._chat, self._turn
        self.publish({"type": "SessionClosed", "message": reason})
        if chat is not None:
            chat.interrupt()
        if turn is not None:
            turn.join(30)
        if chat is not None:
            self._save(chat)  # History's Resume continues it (after a restart of the server too)
            chat.close()
        self._chat = None
        self.wake_all()

    def artifact(self, run_id: str, path: str) -> bytes:
        return read_artifact(self._options.output_root, run_id, path, self._options.download_limit)


def list_artifacts(output_root: Path, run_ids: list[str], limit: int = 1000) -> list[dict[str, Any]]:
    """The files the runs saved (``<output_root>/<run id>/...``), without following links, at most ``limit``."""
    found: list[dict[str, Any]] = []
    for rid in run_ids:
        try:
            check_relative_path(rid)
        except UnsafePath:
            continue
        root = output_root / rid
        if "/" in rid or root.is_symlink() or not root.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(root):  # os.walk does not follow links
            dirnames.sort()
            for filename in sorted(filenames):
                full = Path(dirpath) / filename
                if full.is_symlink() or not full.is_file():
                    continue
                found.append({"run_id": rid, "path": full.relative_to(root).as_posix(),
                              "size": full.stat().st_size})
                if len(found) >= limit:
                    return found
    return found


def read_artifact(output_root: Path, run_id: str, path: str, limit: int) -> bytes:
    """A file a run saved (``<output_root>/<run id>/<path>``), read without following links."""
    try:
        check_relative_path(run_id)
        check_relative_path(path)
    except UnsafePath as exc:
        raise UIError(f"not an artifact name: {exc}") from None
    if "/" in run_id:
        raise UIError("not a run id")
    root = output_root / run_id
    if not root.is_dir():
        raise SessionNotFound(f"run {run_id} has no artifacts here")
    try:
        return read_confined(root, path, max_bytes=limit)
    except CodeActError:
        raise
    except Exception as exc:  # FileTransferError and OSError: say which file
        raise SessionNotFound(f"no artifact {path} in run {run_id}: {exc}") from None


def _approval_details(request: Any) -> dict[str, Any]:
    """What the page shows of an approval request: the arguments, each cut to 2,000 characters; a skill
    save (:class:`~codeact.skills.SkillApproval`) also whole, its code and diff to read before saying yes."""
    from ..skills import SkillApproval

    if not isinstance(request, SkillApproval):
        return {"arguments": {str(k): shown(v, 2000) for k, v in request.arguments.items()}}

    def text(value: Any) -> str:
        value = value if isinstance(value, str) else ""
        if len(value) <= SKILL_TEXT_LIMIT:
            return value
        return value[:SKILL_TEXT_LIMIT] + f"\n[... {len(value) - SKILL_TEXT_LIMIT:,} more characters not shown]"

    return {"arguments": {"name": shown(request.name, 200), "signature": shown(request.signature, 2000)},
            "skill": {"name": text(request.name)[:200], "signature": text(request.signature),
                      "docstring": text(request.docstring), "code": text(request.code), "diff": text(request.diff),
                      "replaces": request.previous is not None, "store": text(request.store)[:1000]}}


def _message(exc: BaseException) -> str:
    if isinstance(exc, CodeActError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
