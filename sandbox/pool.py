"""A warm pool of started sessions, for callers that open many.

Starting a kernel takes most of a second; a pool keeps ``size`` sessions
started in the background so that :meth:`SandboxPool.acquire` returns one at
once. Sessions are never reused: the caller closes what it acquired, and the
pool starts a replacement. A ready session whose engine died or restarted is
closed and replaced (the pool refills once the engine is back), never handed out.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from typing import Any, Callable

from .kernel import KernelSandbox

#: How often (seconds) the filler looks for ready sessions whose engine went away.
SWEEP_INTERVAL = 2.0


class SandboxPool:
    """Keep ``size`` sandbox sessions started, refilled by a background thread.

    Example::

        with SandboxPool(lambda: DockerSandbox(functions=[f]), size=4) as pool:
            with pool.acquire() as sb:
                sb.run("print(1)")
    """

    def __init__(self, factory: Callable[[], KernelSandbox], size: int = 2) -> None:
        if size < 1:
            raise ValueError("a pool needs size >= 1")
        self.factory = factory
        self.size = size
        self._ready: queue.Queue[KernelSandbox] = queue.Queue()
        self._wanted = threading.Semaphore(size)
        self._closed = threading.Event()
        self._errors: list[BaseException] = []
        self._filler = threading.Thread(target=self._fill, daemon=True, name="sandbox-pool")
        self._filler.start()

    def _fill(self) -> None:
        swept = time.monotonic()
        while not self._closed.is_set():
            if not self._wanted.acquire(timeout=0.2):
                if time.monotonic() - swept > SWEEP_INTERVAL:
                    swept = time.monotonic()
                    self._drop_lost()
                continue
            if self._closed.is_set():
                break
            try:
                session = self.factory()
                session.start()
            except BaseException as exc:  # keep the last few errors for acquire() to report
                self._errors = (self._errors + [exc])[-3:]
                self._wanted.release()
                self._closed.wait(1.0)
                continue
            if self._closed.is_set():
                session.close()
                break
            self._ready.put(session)

    def _drop_lost(self) -> None:
        """Close the ready sessions whose environment went away (their engine restarted); replacements start."""
        keep: list[KernelSandbox] = []
        while True:
            try:
                session = self._ready.get_nowait()
            except queue.Empty:
                break
            if session.environment_lost:
                self._discard(session)
            else:
                keep.append(session)
        for session in keep:
            self._ready.put(session)

    def _discard(self, session: KernelSandbox) -> None:
        with contextlib.suppress(Exception):  # gone with its engine: there is nothing left to close
            session.close()
        self._wanted.release()

    def acquire(self, timeout: float | None = None) -> KernelSandbox:
        """A started session. With no ready one: wait up to ``timeout`` s if given, else start one now."""
        session, taken = self._take(timeout)
        if taken:
            self._wanted.release()
        return session

    def _take(self, timeout: float | None) -> tuple[KernelSandbox, bool]:
        """A started session, and whether it came from the pool (then the caller lets the pool refill)."""
        try:
            while True:  # a session whose engine restarted while it waited is no warm session: never handed out
                session = self._ready.get_nowait()
                if not session.environment_lost:
                    return session, True
                self._discard(session)
        except queue.Empty:
            if timeout is None:
                return self.factory().start(), False
            try:
                return self._ready.get(timeout=timeout), True
            except queue.Empty:
                last = self._errors[-1] if self._errors else None
                raise TimeoutError(f"no sandbox became ready within {timeout:g} s") from last

    def restore(self, snapshot: Any, *, restore_timeout: float | None = None,
                wait: float | None = None) -> KernelSandbox:
        """A started session of this pool holding ``snapshot`` (a Snapshot or a snapshot file's path).

        The same as ``DockerSandbox.restore(snapshot)`` without waiting for a
        kernel to start: the snapshot is loaded into a warm session. The
        session keeps the pool's options (engine, limits, functions); the
        packages the snapshot's session had installed are installed into it
        from the host's cache, unless the pool's sessions already have them
        (make the pool with ``packages=`` for the snapshots it restores: a
        set mounted at start is cheaper than one copied in later). ``wait``
        is :meth:`acquire`'s ``timeout``; ``restore_timeout`` bounds each step
        of loading the snapshot (as for ``DockerSandbox.restore``). The
        session's ``restored`` says what came back; the caller closes the
        session. A restore that fails closes the session it took.

        Example::

            with SandboxPool(lambda: DockerSandbox(packages=["scikit-learn"]), size=1) as pool:
                with pool.restore(snap) as sb:
                    print(sb.restored.describe())
        """
        from .snapshot import DEFAULT_SNAPSHOT_TIMEOUT, current, restore_into

        snap = current(snapshot)  # a file that is no snapshot is refused before a warm session is spent on it
        session, taken = self._take(wait)
        try:
            # The replacement starts once the restore is through: on a small machine its start (a container
            # and a kernel) would compete with the restore's imports for the CPU.
            restore_into(session, snap, timeout=restore_timeout or DEFAULT_SNAPSHOT_TIMEOUT)
        finally:
            if taken:
                self._wanted.release()
        return session

    @property
    def ready(self) -> int:
        return self._ready.qsize()

    def close(self) -> None:
        """Close all idle sessions and stop refilling. Acquired sessions are the caller's."""
        self._closed.set()
        self._filler.join(timeout=120)
        while True:
            try:
                self._ready.get_nowait().close()
            except queue.Empty:
                break

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
