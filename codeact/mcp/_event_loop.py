"""The event loop an :class:`~._toolset.MCPToolset` runs its connections on, on a thread of its own.

The SDK's sessions are async (anyio), so all of a toolset's connections live
on one loop. A synchronous call from another thread (a tool called outside
the sandbox, a resource read) is handed to that loop and waited for; closing
stops the connections first, then the loop, and answers every caller still
waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from typing import Any

from .. import telemetry
from ..errors import MCPServerError

#: Seconds closing waits for the servers to stop (the SDK bounds each stdio shutdown to a few seconds).
CLOSE_TIMEOUT = 20.0


class LoopCall:
    """One coroutine run on the loop for a caller on another thread, which waits on ``done``."""

    __slots__ = ("coroutine", "done", "task", "outcome", "cancelled")

    def __init__(self, coroutine: Any) -> None:
        self.coroutine = coroutine
        self.done = threading.Lock()
        self.done.acquire()
        self.task: asyncio.Task[Any] | None = None
        self.outcome: tuple[bool, Any] | None = None  # (ok, value or exception), set once
        self.cancelled = False


class EventLoopThread:
    """The event loop on a thread of its own where a toolset's connections live; closing it stops them first.

    A caller on any other thread runs a coroutine there with :meth:`call`.
    """

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.tasks: list[asyncio.Future[Any]] = []
        self.closed = False
        self._lock = threading.Lock()
        self._answer_lock = threading.Lock()
        self._calls: set[LoopCall] = set()  # callers waiting now; close() answers the ones the loop left

    # A synchronous MCP tool call crosses from its thread to this loop and back, so the
    # crossing is kept to one wake-up each way and as little work as possible in between:
    # call_soon_threadsafe wakes the loop, which starts a task; the task releases the caller's
    # lock the moment the result is there, not a loop iteration later from a done-callback.
    # (run_coroutine_threadsafe with concurrent.futures takes about twice as long per call.)

    def call(self, coroutine: Any, timeout: float | None) -> Any:
        """Run ``coroutine`` on the loop and return its result (call from any thread but the loop's).

        ``coroutine`` enforces its own ``timeout``; the wait here is bounded a
        little longer only to survive a stuck loop.

        Raises:
            MCPServerError: the toolset is closed or closes during the call.
            TimeoutError: the loop did not answer within ``timeout`` + 30 s.
            Exception: whatever the coroutine raised.
        """
        loop = self.loop
        call = LoopCall(coroutine)
        self._calls.add(call)
        try:
            if loop is None or self.closed:
                coroutine.close()
                raise MCPServerError("the MCP connections are closed (the toolset was closed)")
            try:
                # With tracing on, the call's task runs in the caller's context: its spans (the MCP SDK's
                # client span, the trace context it sends in _meta) nest under the caller's tool call.
                loop.call_soon_threadsafe(self._start, call,
                                          context=contextvars.copy_context() if telemetry.active() else None)
            except RuntimeError:  # the loop closed in between
                coroutine.close()
                raise MCPServerError("the MCP connections are closed (the toolset was closed)") from None
            try:
                finished = call.done.acquire(timeout=-1 if timeout is None else timeout + 30.0)
            except BaseException:
                self._cancel(call)  # the caller gave up (an interrupt): stop the call on the server too
                raise
        finally:
            self._calls.discard(call)
        if not finished:
            self._cancel(call)
            raise TimeoutError("the MCP connection did not answer")
        ok, value = call.outcome  # type: ignore[misc]
        if ok:
            return value
        raise value

    def _start(self, call: LoopCall) -> None:  # on the loop
        if call.cancelled:
            call.coroutine.close()
            return
        call.task = asyncio.ensure_future(self._run(call))

    async def _run(self, call: LoopCall) -> None:  # on the loop
        try:
            value = await call.coroutine
        except asyncio.CancelledError:
            self._answer(call, (False, MCPServerError("the MCP call was stopped (the toolset was closed)")))
            raise
        except BaseException as exc:  # handed to the caller, who raises it
            self._answer(call, (False, exc))
        else:
            self._answer(call, (True, value))

    def _answer(self, call: LoopCall, outcome: tuple[bool, Any]) -> None:
        with self._answer_lock:
            if call.outcome is not None:
                return
            call.outcome = outcome
        call.done.release()

    def _cancel(self, call: LoopCall) -> None:
        call.cancelled = True
        loop = self.loop

        def cancel() -> None:
            if call.task is not None:
                call.task.cancel()

        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing runs any more
                loop.call_soon_threadsafe(cancel)

    def start(self) -> asyncio.AbstractEventLoop:
        """Start the loop's thread (once); returns the loop.

        Raises:
            MCPServerError: it was closed.
        """
        with self._lock:
            if self.closed:
                raise MCPServerError("this MCP toolset was closed; create a new one")
            if self.loop is None:
                loop = asyncio.new_event_loop()
                started = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    loop.run_forever()

                self.thread = threading.Thread(target=run, name="codeact-mcp", daemon=True)
                self.thread.start()
                started.wait()
                self.loop = loop
            return self.loop

    def close(self, connections: Any = ()) -> None:
        """Stop ``connections`` (their tasks are in :attr:`tasks`), then the loop; idempotent, never raises."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            loop, thread = self.loop, self.thread
        if loop is None or thread is None:
            return
        conns = list(connections)

        async def shutdown() -> None:
            for conn in conns:
                conn.stop()
            pending = [t for t in self.tasks if not t.done()]
            if pending:
                _, still = await asyncio.wait(pending, timeout=CLOSE_TIMEOUT)
                for task in still:  # a connection that did not stop: cancel it (the SDK kills the process)
                    task.cancel()
                if still:
                    await asyncio.wait(still, timeout=10.0)
            # Anything else still running (an open() in progress, calls) ends now, so no caller waits on a stopped loop.
            current = asyncio.current_task()
            for task in asyncio.all_tasks():
                if task is not current:
                    task.cancel()

        if thread is not threading.current_thread():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(shutdown(), loop).result(CLOSE_TIMEOUT + 15.0)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not threading.current_thread():
            thread.join(10.0)
        if not thread.is_alive():
            with contextlib.suppress(Exception):
                loop.close()
        # Callers whose call the stopped loop never finished must not wait for it.
        for call in list(self._calls):
            closed = MCPServerError("the MCP connections were closed during the call (the toolset was closed)")
            self._answer(call, (False, closed))
