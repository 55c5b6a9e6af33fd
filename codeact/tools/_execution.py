"""Execution: turn validated arguments into a call, run it with a timeout, sync or async.

:func:`call_layout` decides how the arguments dict (see :mod:`._signature`)
becomes ``func(*args, **kwargs)``: positional-only parameters and ``*args``
positionally (a gap before them filled with the function's own default, on
the host), the rest by keyword, ``**kwargs`` spread as keywords, the hidden
:class:`RunContext` where the function declares it.

:func:`run` and :func:`arun` run a call: an async tool to completion from
sync code, a sync tool on a worker thread from async code, either within the
tool's timeout. A call that overruns is abandoned on a daemon thread (Python
cannot kill a thread) and never holds up the process's exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import threading
from typing import Any, Awaitable, Callable, Mapping

from ._context import RunContext
from ._render import EMPTY
from ._signature import POSITIONAL

#: How a tool runs once its arguments are valid: ``invoke(values, context)``
#: returns the result, or an awaitable of it.
Invoke = Callable[[Mapping[str, Any], "RunContext[Any] | None"], Any]


def call_layout(
    signature: inspect.Signature,
    context_param: str | None,
    values: Mapping[str, Any],
    context: RunContext[Any] | None,
) -> tuple[list[Any], dict[str, Any]]:
    """``(args, kwargs)`` to call a function of ``signature`` with the validated ``values``.

    Example::

        def f(a, /, b, *rest, c, d=3, **options): ...

        call_layout(inspect.signature(f), None, {"a": 1, "b": 2, "rest": [3], "c": 4, "options": {"x": 5}}, None)
        # ([1, 2, 3], {'c': 4, 'x': 5})
    """
    if context_param is not None and context is None:
        context = RunContext(run_id="", step=0)
    params = list(signature.parameters.values())
    positional = [p for p in params if p.kind in POSITIONAL]
    var_positional = next((p for p in params if p.kind is p.VAR_POSITIONAL), None)
    extra = list(values.get(var_positional.name, ())) if var_positional is not None else []

    def present(p: inspect.Parameter) -> bool:
        return p.name == context_param or p.name in values

    def value(p: inspect.Parameter) -> Any:
        return context if p.name == context_param else values[p.name]

    # Everything up to the last value that must go by position goes by position.
    if extra:
        by_position = len(positional)
    else:
        by_position = max((i + 1 for i, p in enumerate(positional) if p.kind is p.POSITIONAL_ONLY and present(p)),
                          default=0)
    args: list[Any] = []
    for p in positional[:by_position]:
        if present(p):
            args.append(value(p))
        elif p.default is not EMPTY:
            args.append(p.default)  # a gap: the function's own default, applied here on the host
        else:  # validation requires every parameter without a default
            raise TypeError(f"missing required argument {p.name!r}")
    args.extend(extra)
    kwargs: dict[str, Any] = {}
    for p in positional[by_position:] + [p for p in params if p.kind is p.KEYWORD_ONLY]:
        if p.kind is not p.POSITIONAL_ONLY and present(p):
            kwargs[p.name] = value(p)
    var_keyword = next((p for p in params if p.kind is p.VAR_KEYWORD), None)
    if var_keyword is not None:
        kwargs.update(values.get(var_keyword.name) or {})
    return args, kwargs


def function_invoker(func: Callable[..., Any], signature: inspect.Signature, context_param: str | None) -> Invoke:
    """The :data:`Invoke` of a Python callable with this (full) signature."""

    def invoke(values: Mapping[str, Any], context: RunContext[Any] | None) -> Any:
        args, kwargs = call_layout(signature, context_param, values, context)
        return func(*args, **kwargs)

    return invoke


def run(call: Callable[[], Any], *, is_async: bool, timeout: float | None, name: str) -> Any:
    """Run ``call()`` to completion from sync code; awaitables are awaited.

    Raises:
        TimeoutError: it did not finish within ``timeout`` seconds.
    """
    if is_async:
        return run_sync(with_timeout(call(), timeout, name))
    result = call() if timeout is None else call_in_thread(call, timeout, name)
    if inspect.isawaitable(result):  # a sync wrapper around a coroutine function
        result = run_sync(with_timeout(result, timeout, name))
    return result


async def arun(call: Callable[[], Any], *, is_async: bool, timeout: float | None, name: str) -> Any:
    """Async :func:`run`: a sync call runs on a worker thread so the event loop stays free."""
    if is_async:
        return await with_timeout(call(), timeout, name)
    result = await with_timeout(to_daemon_thread(call, name), timeout, name)
    if inspect.isawaitable(result):
        result = await with_timeout(result, timeout, name)
    return result


async def with_timeout(awaitable: Awaitable[Any], timeout: float | None, name: str) -> Any:
    if timeout is None:
        return await awaitable
    try:
        return await asyncio.wait_for(awaitable, timeout)
    except asyncio.TimeoutError:
        raise TimeoutError(f"tool {name!r} did not finish within {timeout:g} s") from None


def run_sync(coroutine: Awaitable[Any]) -> Any:
    """Run a coroutine to completion from sync code, whether or not a loop runs here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_as_coroutine(coroutine))
    # A loop already runs in this thread (we are called from async code through a
    # sync API); asyncio.run would fail, so use a private loop on another thread.
    return call_in_thread(lambda: asyncio.run(_as_coroutine(coroutine)), None, "")


async def to_daemon_thread(fn: Callable[[], Any], tool_name: str) -> Any:
    """Await ``fn()`` run on a daemon thread.

    Not ``asyncio.to_thread``: the loop's executor is joined when the loop
    closes, so a sync tool abandoned after its timeout would hold up
    ``asyncio.run`` until it finished anyway.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():  # it may have been cancelled by a timeout
            (future.set_result if ok else future.set_exception)(value)

    def target() -> None:
        try:
            outcome = (True, context.run(fn))
        except BaseException as exc:  # handed to the awaiting task
            outcome = (False, exc)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits for this result any more
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=target, name=f"tool-{tool_name}", daemon=True).start()
    return await future


async def _as_coroutine(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def call_in_thread(fn: Callable[[], Any], timeout: float | None, tool_name: str) -> Any:
    """Run ``fn`` on a daemon thread and wait at most ``timeout`` seconds.

    A daemon thread (not an executor) because Python cannot kill a thread: a
    call that overruns its timeout is abandoned and must not keep the process
    alive at exit.
    """
    outcome: dict[str, Any] = {}
    done = threading.Event()
    context = contextvars.copy_context()

    def target() -> None:
        try:
            outcome["value"] = context.run(fn)
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc
        finally:
            done.set()

    thread = threading.Thread(target=target, name=f"tool-{tool_name or 'async'}", daemon=True)
    thread.start()
    if not done.wait(timeout):
        raise TimeoutError(f"tool {tool_name!r} did not finish within {timeout:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")
