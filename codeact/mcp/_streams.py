"""Ending the streamable-HTTP sessions of clients that went away without saying so.

A streamable-HTTP client ends its session with ``DELETE`` (the server then closes
its sandbox at once); a client that is killed, or whose machine drops off the
network, sends nothing, and its session would hold a sandbox until the idle
timeout. What the transport does tell is that the client's event stream (the
``GET`` it keeps open for server messages) ended. :class:`LostClients` watches
those streams: once a session's stream has ended and the session has had no
open stream and no request for ``grace`` seconds, it ends the session as the
client's ``DELETE`` would (so the SDK closes it and its sandbox goes), and a
client that does come back is told its session is gone (404) and starts a new one.

Clients that never open an event stream give no such sign: their sessions end
with the idle timeout. Over stdio the server process ends with its client, and
an SSE session ends with its stream.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

#: The header that names a streamable-HTTP session.
SESSION_HEADER = b"mcp-session-id"
#: Sessions watched at once (an entry lives while its session has a stream, then ``grace`` seconds):
#: streams opened under made-up session ids beyond it are not watched.
MAX_WATCHED = 10_000


@dataclass
class _Watched:
    """A session seen with an event stream: its open requests and streams, and when it was last busy."""

    headers: list[tuple[bytes, bytes]]
    path: str
    streams: int = 0
    in_flight: int = 0
    last: float = 0.0
    waiting: bool = False


class LostClients:
    """ASGI middleware before the SDK's streamable-HTTP app (see the module docs).

    Example::

        app = LostClients(server.streamable_http_app(...), grace=30.0)
    """

    def __init__(self, app: Any, grace: float) -> None:
        self.app = app
        self.grace = grace
        self._watched: dict[str, _Watched] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        session_id = _header(scope, SESSION_HEADER)
        method = scope.get("method")
        if session_id is None or method == "DELETE":
            if session_id is not None:
                self._watched.pop(session_id, None)
            await self.app(scope, receive, send)
            return
        watched = self._watched.get(session_id)
        if watched is None and method == "GET" and len(self._watched) < MAX_WATCHED:
            watched = self._watched[session_id] = _Watched(list(scope.get("headers") or ()), scope.get("path", ""))
        if watched is None:  # a session without an event stream so far: nothing to watch
            await self.app(scope, receive, send)
            return
        watched.in_flight += 1
        watched.streams += method == "GET"
        try:
            await self.app(scope, receive, send)
        finally:
            watched.in_flight -= 1
            watched.streams -= method == "GET"
            watched.last = time.monotonic()
            if method == "GET" and not watched.waiting:
                watched.waiting = True
                task = asyncio.ensure_future(self._end_when_gone(session_id, watched))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _end_when_gone(self, session_id: str, watched: _Watched) -> None:
        """Wait until the session has had no stream and no request for ``grace`` seconds, then end it."""
        try:
            while self._watched.get(session_id) is watched:
                quiet = time.monotonic() - watched.last
                if watched.in_flight == 0 and quiet >= self.grace:
                    self._watched.pop(session_id, None)
                    await self._delete(watched)
                    return
                if watched.streams:  # the client opened its stream again: its end starts a new wait
                    return
                await asyncio.sleep(max(self.grace - quiet, 0.05) if watched.in_flight == 0 else self.grace)
        finally:
            watched.waiting = False

    async def _delete(self, watched: _Watched) -> None:
        """End the session through the SDK's app, as the client's own ``DELETE`` would (the answer is dropped)."""
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "DELETE",
                 "scheme": "http", "path": watched.path, "raw_path": watched.path.encode(), "query_string": b"",
                 "root_path": "", "headers": watched.headers, "client": ("127.0.0.1", 0), "server": None}
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await asyncio.sleep(3600)  # nothing more comes; the app answers without waiting for it
            return {"type": "http.disconnect"}

        async def drop(message: Any) -> None:
            return None

        try:
            await asyncio.wait_for(self.app(scope, receive, drop), timeout=30)
        except Exception:  # the session ended meanwhile, or the server is stopping: nothing to free
            return


def _header(scope: Any, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            try:
                return bytes(value).decode("ascii")
            except UnicodeDecodeError:
                return None
    return None
