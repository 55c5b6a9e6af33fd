"""What a web-UI session shows its page: numbered events kept for replay, and the images they point to.

Every event of a session is turned into page JSON, numbered and kept in a
bounded buffer, so that a page that reloads or loses its connection replays
what it missed from any number on; the open event streams wait on it. Images
(plots, SVG) are kept apart, within their own byte budget, and served by URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections import OrderedDict, deque
from typing import Any

from ..errors import UIError
from ._wire import dumps


class EventFeed:
    """One session's page events (a bounded replay buffer), the streams waiting for them, and its images.

    Args:
        session_id: the session's id, for the images' URLs.
        event_bytes: bytes of events kept; older ones are dropped (the run log has them).
        blob_bytes: bytes of images kept; older ones are dropped.
    """

    def __init__(self, session_id: str, *, event_bytes: int, blob_bytes: int) -> None:
        self._session_id = session_id
        self._event_budget = event_bytes
        self._blob_budget = blob_bytes
        # One lock for the buffer, the waiters and the images: a publish holds it for one append.
        self._lock = threading.Lock()
        self._events: deque[tuple[int, str]] = deque()
        self._events_bytes = 0
        self._seq = 0
        self._dropped_upto = 0
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._blobs: OrderedDict[int, tuple[str, bytes]] = OrderedDict()
        self._blobs_bytes = 0
        self._blob_seq = 0

    # --- events ----------------------------------------------------------------------------

    def publish(self, payload: dict[str, Any]) -> int:
        """Number ``payload``, keep it for replay and wake the streams. Returns its number."""
        with self._lock:
            self._seq += 1
            payload["seq"] = self._seq
            data = dumps(payload)
            self._events.append((self._seq, data))
            self._events_bytes += len(data)
            while self._events_bytes > self._event_budget and len(self._events) > 1:
                seq, old = self._events.popleft()
                self._events_bytes -= len(old)
                self._dropped_upto = seq
            waiters = list(self._waiters)
            seq = self._seq
        self._wake(waiters)
        return seq

    @property
    def last_seq(self) -> int:
        """The number of the newest event (0 before any)."""
        return self._seq

    def events_after(self, after: int) -> tuple[int, list[tuple[int, str]]]:
        """(events lost to the buffer cap after ``after``, the kept events numbered above ``after``)."""
        with self._lock:
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
        """Set ``event`` (on ``loop``) at every publish until :meth:`remove_waiter`."""
        with self._lock:
            self._waiters.add((loop, event))

    def remove_waiter(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
        with self._lock:
            self._waiters.discard((loop, event))

    def wake_all(self) -> None:
        """Wake every waiting stream (to look again, e.g. because the session closed)."""
        with self._lock:
            waiters = list(self._waiters)
        self._wake(waiters)

    @staticmethod
    def _wake(waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]) -> None:
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # that stream's loop is gone
                loop.call_soon_threadsafe(event.set)

    # --- blobs: images for <img> -----------------------------------------------------------

    def store_blob(self, mime: str, data: bytes) -> str:
        """Keep ``data`` for the page; returns the URL it is served at."""
        with self._lock:
            self._blob_seq += 1
            self._blobs[self._blob_seq] = (mime, data)
            self._blobs_bytes += len(data)
            while self._blobs_bytes > self._blob_budget and len(self._blobs) > 1:
                _, (_, old) = self._blobs.popitem(last=False)
                self._blobs_bytes -= len(old)
            return f"/api/sessions/{self._session_id}/blobs/{self._blob_seq}"

    def blob(self, number: int) -> tuple[str, bytes]:
        """(mime type, bytes) of the image :meth:`store_blob` numbered ``number``.

        Raises:
            UIError: it is no longer kept (the image budget dropped it).
        """
        with self._lock:
            found = self._blobs.get(number)
        if found is None:
            raise UIError("this image is no longer kept (the session's image memory is full); "
                          "History has the run's images")
        return found
