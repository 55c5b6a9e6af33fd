"""The web UI's open sessions: created up to a cap (or resumed from a saved one), found by id, freed (saved)
when idle, closed (saved) at exit."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from ..errors import SessionLimitReached, SessionNotFound
from ._options import AgentFactory, UIOptions
from ._session import UISession


class Workspace:
    """The sessions (tabs) of one UI server.

    Each session gets its own agent from ``factory`` and so its own sandbox.
    A background thread frees the sandboxes of sessions idle for
    ``options.idle_timeout`` seconds (:meth:`UISession.free_if_idle`).
    """

    def __init__(self, factory: AgentFactory, options: UIOptions) -> None:
        self.factory = factory
        self.options = options
        self._sessions: dict[str, UISession] = {}
        self._lock = threading.Lock()
        self._counter = 0
        self.closing = threading.Event()
        self._reaper: threading.Thread | None = None

    def start(self) -> None:
        """Start the idle reaper (checks every few seconds, at most every tenth of the timeout)."""
        if self._reaper is None:
            self._reaper = threading.Thread(target=self._reap_loop, daemon=True, name="codeact-ui-reaper")
            self._reaper.start()

    def _reap_loop(self) -> None:
        interval = min(5.0, max(0.2, self.options.idle_timeout / 10))
        while not self.closing.wait(interval):
            self.free_idle()

    def free_idle(self, now: float | None = None) -> list[str]:
        """Free the sandboxes of idle sessions; returns their ids."""
        now = time.monotonic() if now is None else now
        freed = []
        for session in self.sessions():
            try:
                if session.free_if_idle(now):
                    freed.append(session.id)
            except Exception:  # one broken sandbox must not stop the reaper
                pass
        return freed

    def sessions(self) -> list[UISession]:
        with self._lock:
            return list(self._sessions.values())

    def create(self) -> UISession:
        with self._lock:
            if self.closing.is_set():
                raise SessionNotFound("the server is shutting down")
            if len(self._sessions) >= self.options.max_sessions:
                raise SessionLimitReached(
                    f"{len(self._sessions)} sessions are open, the most this server allows (--max-sessions "
                    f"{self.options.max_sessions}); close one (×) before opening another")
            self._counter += 1
            session = UISession(uuid.uuid4().hex[:12], f"Session {self._counter}", self.factory, self.options)
            self._sessions[session.id] = session
            return session

    def resume(self, key: str, history: Any) -> UISession:
        """A new session restored from the saved session ``key`` names (a run, chat session or snapshot id).

        Raises:
            SavedSessionError: nothing saved for ``key``, or it cannot be restored; no session is left open.
        """
        session = self.create()
        try:
            session.resume(key, history)
        except BaseException:
            with self._lock:
                self._sessions.pop(session.id, None)
            session.close("could not be resumed")
            raise
        return session

    def get(self, sid: str) -> UISession:
        with self._lock:
            session = self._sessions.get(sid)
        if session is None or session.closed:
            raise SessionNotFound(f"no open session {sid!r}; it was closed (or the server restarted): "
                                  "open a new one (+)")
        return session

    def close(self, sid: str, reason: str = "closed from the page") -> None:
        session = self.get(sid)
        with self._lock:
            self._sessions.pop(sid, None)
        session.close(reason)

    def close_all(self, reason: str = "the server stopped") -> None:
        self.closing.set()
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        threads = [threading.Thread(target=s.close, args=(reason,), daemon=True) for s in sessions]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)

    def summaries(self) -> list[dict[str, Any]]:
        return [s.summary() for s in self.sessions()]
