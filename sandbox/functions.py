"""Host functions: Python callables that run on the host and are called from sandboxed code.

The sandbox never receives a function's source. It receives a
:class:`FunctionSpec` — name, docstring and signature as data — and builds a
stub with that signature. Calling the stub sends the arguments to the host,
which runs the real function and sends back the result or the error. Values
cross through one codec (:mod:`sandbox.runtime.sandbox_codec`) that keeps
Python types: a tuple stays a tuple, ``{1: 'a'}`` keeps its int key, bytes,
sets, dates, Decimals, numpy arrays and DataFrames arrive as themselves.

Defaults are applied on the host: the spec shows only literal defaults
(numbers, strings, small containers of them), anything else as ``...``, so a
default such as an API client never reaches the sandbox, not even as text.

Calls made from several threads in the sandbox run concurrently on the host.
Inside a host function, :func:`current_call` gives the call's handle: a human
approving the call should happen inside ``with current_call().paused():`` so
that the wait counts against neither the call's timeout nor the run's clock.

A coroutine function bound to an event loop (``HostFunction(f, loop=loop)``)
runs as a task on that loop: the call is handed straight to the loop, and the
task writes the reply itself, with no worker thread in between. Use it for a
function whose work already lives on a loop (an async client's connection);
the loop must not be blocked by the function, or by anything else.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import contextvars
import inspect
import json
import keyword
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from .errors import FunctionRegistrationError
from .limits import Limits
from .result import Elided, ExecutionError, FunctionCall
from .runtime import sandbox_codec as codec

_KIND_NAMES = {
    inspect.Parameter.POSITIONAL_ONLY: "positional_only",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional_or_keyword",
    inspect.Parameter.VAR_POSITIONAL: "var_positional",
    inspect.Parameter.KEYWORD_ONLY: "keyword_only",
    inspect.Parameter.VAR_KEYWORD: "var_keyword",
}

#: A default longer than this is shown as ``...`` even when it is a literal.
MAX_DEFAULT_TEXT = 60


def literal_default_text(value: Any) -> str | None:
    """The text of ``value`` if it is a short Python literal, else None.

    Literals are None, bools, numbers, strings, bytes and tuples, lists, dicts,
    sets and frozensets of them whose ``repr`` reads back as an equal value.
    ``repr`` is only called on values already known to be built from those
    types, so a non-literal default's own ``__repr__`` never runs.
    """
    if not _is_literal(value, 0):
        return None
    text = repr(value)
    if len(text) > MAX_DEFAULT_TEXT:
        return None
    if isinstance(value, frozenset):
        return text  # frozenset({...}) is not literal_eval-able but is plain to read
    try:
        if ast.literal_eval(text) != value and value == value:  # nan != nan
            return None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return text


def _is_literal(value: Any, depth: int) -> bool:
    if depth > 4:
        return False
    if value is None or type(value) in (bool, int, float, complex, str, bytes):
        return True
    if type(value) in (tuple, list, set, frozenset):
        return len(value) <= 16 and all(_is_literal(v, depth + 1) for v in value)
    if type(value) is dict:
        return len(value) <= 16 and all(_is_literal(k, depth + 1) and _is_literal(v, depth + 1)
                                        for k, v in value.items())
    return False


def _annotation_text(annotation: Any) -> str | None:
    if annotation is inspect.Parameter.empty:
        return None
    if isinstance(annotation, str):
        return annotation
    if isinstance(annotation, type) and annotation.__module__ == "builtins":
        return annotation.__qualname__
    text = inspect.formatannotation(annotation)
    return text.replace("typing.", "")


@dataclass(frozen=True)
class ParameterSpec:
    """One parameter of a host function, as data the sandbox can rebuild."""

    name: str
    kind: str = "positional_or_keyword"
    annotation: str | None = None
    has_default: bool = False
    #: How the default is shown: a literal's repr, or "..." (the host applies the real value).
    default_text: str | None = None


@dataclass(frozen=True)
class FunctionSpec:
    """What the sandbox needs to build a stub: name, docstring, signature."""

    name: str
    doc: str = ""
    parameters: tuple[ParameterSpec, ...] = ()
    returns: str | None = None
    is_async: bool = False
    #: Where else the stub lives (see :meth:`HostFunction.place`): a dotted module path such as
    #: ``"tools.github"``, the attribute name there, and whether ``name`` is also a global.
    namespace: str | None = None
    local_name: str | None = None
    exported: bool = True
    #: Python source of the stub's face in the kernel (see :meth:`HostFunction.place`).
    wrapper: str | None = None

    @classmethod
    def from_signature(cls, name: str, signature: inspect.Signature, doc: str = "",
                       *, is_async: bool = False) -> "FunctionSpec":
        params = []
        for p in signature.parameters.values():
            has_default = p.default is not inspect.Parameter.empty
            text = None
            if has_default:
                text = literal_default_text(p.default) or "..."
            params.append(ParameterSpec(p.name, _KIND_NAMES[p.kind], _annotation_text(p.annotation),
                                        has_default, text))
        return cls(name, inspect.cleandoc(doc or ""), tuple(params), _annotation_text(signature.return_annotation),
                   is_async)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "doc": self.doc, "returns": self.returns, "is_async": self.is_async,
            "parameters": [
                {"name": p.name, "kind": p.kind, "annotation": p.annotation, "has_default": p.has_default,
                 "default_text": p.default_text}
                for p in self.parameters
            ],
            # Only when set, so that the specs of plain functions stay as they were.
            **({"namespace": self.namespace, "local_name": self.local_name or self.name}
               if self.namespace else {}),
            **({"exported": False} if not self.exported else {}),
            **({"wrapper": self.wrapper} if self.wrapper else {}),
        }


_VARIADIC = inspect.Signature([
    inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
    inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
])


class HostFunction:
    """A callable offered to sandboxed code; it runs on the host.

    Example::

        def add(a: int, b: int = 1) -> int:
            "Add two numbers."
            return a + b

        with open_sandbox(functions=[add]) as sb:
            sb.run("print(add(2))").stdout   # '3\\n'

    ``name``, ``doc`` and ``signature`` default to the callable's own (a
    builtin without a readable signature gets ``(*args, **kwargs)``).
    ``timeout`` (seconds) bounds one call; ``None`` uses the sandbox default.
    ``is_async`` makes the sandbox stub awaitable (default: the callable is a
    coroutine function); the host runs coroutines to completion either way.
    ``loop``: run each call of the coroutine function ``func`` as a task on
    this event loop (it must run on another thread for as long as calls come);
    timeouts and interrupts cancel the task.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        doc: str | None = None,
        signature: inspect.Signature | None = None,
        timeout: float | None = None,
        is_async: bool | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.func = func
        self.name = name or getattr(func, "__name__", None) or type(func).__name__
        if not isinstance(self.name, str) or not self.name.isidentifier() or keyword.iskeyword(self.name):
            raise FunctionRegistrationError(
                f"{self.name!r} is not a valid Python identifier; pass name=... to HostFunction"
            )
        if signature is None:
            try:
                signature = inspect.signature(func)
            except (TypeError, ValueError):
                signature = _VARIADIC
        self.signature = signature
        self.doc = doc if doc is not None else (inspect.getdoc(func) or "")
        self.timeout = timeout
        if loop is not None and not inspect.iscoroutinefunction(func):
            raise FunctionRegistrationError(
                f"host function {self.name!r} is bound to an event loop (loop=...), so it must be a coroutine "
                "function (async def); drop loop=... for a plain function")
        #: The event loop each call runs on as a task (None: calls run on worker threads).
        self.loop = loop
        self.is_async = inspect.iscoroutinefunction(func) if is_async is None else bool(is_async)
        self.spec = FunctionSpec.from_signature(self.name, signature, self.doc, is_async=self.is_async)

    def place(self, namespace: str | None = None, *, local_name: str | None = None, exported: bool = True,
              wrapper: str | None = None) -> "HostFunction":
        """Say where the stub lives in the sandbox; returns ``self``.

        ``namespace`` (a dotted path of identifiers, e.g. ``"tools.github"``)
        makes the stub importable: ``from tools.github import create_issue``,
        ``import tools.github``, ``dir(tools.github)``; ``local_name`` is its
        attribute name there (default: ``name``). ``exported=False`` keeps
        ``name`` out of the global namespace. ``wrapper`` is Python source the
        sandbox runs to build the stub's face: its globals hold ``__host__``
        (the bare stub) and it must define ``local_name`` (or ``name``); use it
        for behaviour that belongs in the kernel (printing, turning objects
        into names). The host still receives only data.

        Example::

            HostFunction(create_issue).place("tools.github", exported=False)

        Raises:
            FunctionRegistrationError: a namespace part or ``local_name`` is not an identifier.
        """
        if namespace is not None:
            parts = namespace.split(".")
            if not all(p.isidentifier() and not keyword.iskeyword(p) for p in parts):
                raise FunctionRegistrationError(f"namespace {namespace!r} must be dotted Python identifiers")
        if local_name is not None and (not local_name.isidentifier() or keyword.iskeyword(local_name)):
            raise FunctionRegistrationError(f"{local_name!r} is not a valid Python identifier")
        from dataclasses import replace

        self.spec = replace(self.spec, namespace=namespace, local_name=local_name, exported=bool(exported),
                            wrapper=wrapper)
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = self.func(*args, **kwargs)
        if self.loop is not None:
            return _run_on(self.loop, result, self.name)
        if inspect.isawaitable(result):
            return asyncio.run(_await(result))
        return result

    def __repr__(self) -> str:
        return f"HostFunction({self.name}{self.signature})"


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _run_on(loop: asyncio.AbstractEventLoop, coroutine: Any, name: str) -> Any:
    """Run ``coroutine`` on ``loop`` (another thread's) and wait for its result."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        coroutine.close()
        raise RuntimeError(f"host function {name!r} runs on this event loop: await it instead of calling it")
    try:
        future = asyncio.run_coroutine_threadsafe(coroutine, loop)
    except RuntimeError:  # the loop is closed
        coroutine.close()
        raise RuntimeError(f"host function {name!r} cannot run: its event loop is closed") from None
    return future.result()


def as_host_functions(functions: Iterable[Callable[..., Any] | HostFunction]) -> dict[str, HostFunction]:
    """Normalise a list of callables into a name -> HostFunction mapping."""
    out: dict[str, HostFunction] = {}
    for f in functions:
        hf = f if isinstance(f, HostFunction) else HostFunction(f)
        if hf.name in out:
            raise FunctionRegistrationError(f"two host functions are named {hf.name!r}; rename one")
        out[hf.name] = hf
    return out


def error_info(exc: BaseException) -> ExecutionError:
    return ExecutionError(type(exc).__name__, str(exc))


# --- the clock of a run -----------------------------------------------------------------


class RunClock:
    """Time accounting for one run, on the host's clock only.

    *Code time* is wall time minus the time during which at least one host
    call was running (a tool's time is not the code's). *Run time* is wall
    time minus the time a human spent approving calls. The kernel session
    stops a run when either passes its limit; nothing the sandbox sends
    changes these clocks.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = time.monotonic()
        self._busy = 0
        self._busy_since = 0.0
        self._busy_total = 0.0
        self._paused = 0
        self._paused_since = 0.0
        self._paused_total = 0.0

    def _enter(self, attr: str) -> None:
        with self._lock:
            count = getattr(self, f"_{attr}")
            if count == 0:
                setattr(self, f"_{attr}_since", time.monotonic())
            setattr(self, f"_{attr}", count + 1)

    def _leave(self, attr: str) -> None:
        with self._lock:
            count = getattr(self, f"_{attr}") - 1
            setattr(self, f"_{attr}", count)
            if count == 0:
                total = getattr(self, f"_{attr}_total") + time.monotonic() - getattr(self, f"_{attr}_since")
                setattr(self, f"_{attr}_total", total)

    def call_started(self) -> None:
        self._enter("busy")

    def call_ended(self) -> None:
        self._leave("busy")

    def pause(self) -> None:
        self._enter("paused")

    def resume(self) -> None:
        self._leave("paused")

    def code_time(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        with self._lock:
            busy = self._busy_total + (now - self._busy_since if self._busy else 0.0)
        return now - self.started - busy

    def run_time(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        with self._lock:
            paused = self._paused_total + (now - self._paused_since if self._paused else 0.0)
        return now - self.started - paused


# --- one call ------------------------------------------------------------------------------


_current: contextvars.ContextVar["HostCall | None"] = contextvars.ContextVar("sandbox_host_call", default=None)


def current_call() -> "HostCall | None":
    """The host-function call running in this thread (None outside a call)."""
    return _current.get()


class CallTimedOut(TimeoutError):
    """The call was already answered with a timeout: its work must not happen now."""


class HostCall:
    """One call from the sandbox, as its host function sees it (see :func:`current_call`)."""

    def __init__(self, call_id: int, name: str, timeout: float | None, clock: RunClock | None) -> None:
        self.id = call_id
        self.name = name
        self.timeout = timeout
        self._clock = clock
        self._lock = threading.Lock()
        self.started = time.monotonic()
        self._paused = 0
        self._paused_since = 0.0
        self._paused_total = 0.0
        #: "running", "done", "timed_out" or "abandoned" (the sandbox gave up waiting).
        self.state = "running"
        # Filled in by the dispatcher, for the call's record.
        self.args: Any = ()
        self.kwargs: Any = {}
        self.started_wall = time.time()
        self.payload_size = 0
        self._record: Callable[[BaseException | None, Any, int], None] | None = None
        #: Stops the call's work once it has been answered otherwise (set for calls run as tasks).
        self._cancel: Callable[[], None] | None = None

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Stop this call's timeout clock and the run's clocks (a human is deciding)."""
        with self._lock:
            if self._paused == 0:
                self._paused_since = time.monotonic()
            self._paused += 1
        if self._clock is not None:
            self._clock.pause()
        try:
            yield
        finally:
            if self._clock is not None:
                self._clock.resume()
            with self._lock:
                self._paused -= 1
                if self._paused == 0:
                    self._paused_total += time.monotonic() - self._paused_since

    def elapsed(self, now: float | None = None) -> float:
        """Seconds this call has counted against its timeout."""
        now = time.monotonic() if now is None else now
        with self._lock:
            paused = self._paused_total + (now - self._paused_since if self._paused else 0.0)
        return now - self.started - paused

    def record(self, error: BaseException | None, result: Any, result_size: int) -> None:
        """Hand the call's record to the session, once; then drop the values the call held."""
        recorder, self._record = self._record, None
        if recorder is not None:
            recorder(error, result, result_size)
        self.args, self.kwargs = (), {}

    def remaining(self, now: float) -> float | None:
        """Seconds left before the timeout; None without a timeout or while paused."""
        if self.timeout is None or self._paused:
            return None
        return self.timeout - self.elapsed(now)

    def overdue(self, now: float) -> bool:
        return self.timeout is not None and self.state == "running" and self.elapsed(now) >= self.timeout

    def checkpoint(self) -> None:
        """Raise :class:`CallTimedOut` if the sandbox was already told this call failed."""
        if self.state in ("timed_out", "abandoned"):
            raise CallTimedOut(f"the call to {self.name!r} was already reported as failed ({self.state})")

    def finish(self, state: str) -> bool:
        """Move from running to ``state``; False if another outcome got there first."""
        with self._lock:
            if self.state != "running":
                return False
            self.state = state
            cancel = self._cancel if state != "done" else None
        if cancel is not None:  # timed out or abandoned: a task can be stopped (a thread cannot)
            cancel()
        return True


# --- the dispatcher --------------------------------------------------------------------------


ReplySender = Callable[[int, int, list[Any]], None]
#: Arguments larger than this (bytes) are decoded on a thread, not on a loop-bound function's loop.
DECODE_ON_LOOP = 64 * 1024
#: Names listed when a call names an unregistered function.
_NAMES_SHOWN = 20


@dataclass
class CallBudget:
    """Per-run limits on host calls (counts and bytes the host keeps in call records)."""

    max_calls: int = 100_000
    max_kept_bytes: int = 64 * 1024 * 1024
    calls: int = 0
    kept_bytes: int = 0
    records_dropped: int = 0

    def keep(self, size: int) -> bool:
        if self.kept_bytes + size > self.max_kept_bytes:
            return False
        self.kept_bytes += size
        return True


@dataclass
class _Job:
    call: HostCall
    function: HostFunction
    payload: memoryview
    send: ReplySender
    max_payload: int
    #: Host memory charged to this call's arguments until its thread lets them go.
    memory: int = 0


class FunctionDispatcher:
    """The host functions of one session, and the calls running now.

    Calls run on worker threads (reused; at most ``max_concurrent`` at a
    time, counting calls that overran their timeout and are still running:
    Python cannot stop a thread), or, for a function bound to an event loop,
    as tasks on that loop (counted alike; a timeout or an interrupt cancels
    the task). A call over the limit, to an unknown
    name, or over the run's budget is refused at once with an error the
    sandbox code can read. Refused calls count against the run's budget
    too: a refusal costs the host a reply like any other call.
    """

    def __init__(self, functions: Iterable[Callable[..., Any] | HostFunction] = (), *,
                 default_timeout: float | None = 60.0, max_concurrent: int = 32,
                 limits: Limits | None = None) -> None:
        self.functions = as_host_functions(functions)
        self.default_timeout = default_timeout
        self.max_concurrent = max_concurrent
        self.limits = limits or Limits()
        #: Estimated host memory held by the arguments of the calls on worker threads now.
        self._held_memory = 0
        self._lock = threading.Lock()
        self._running: dict[int, HostCall] = {}
        self._busy_threads = 0
        self._idle: list[_WorkerThread] = []
        self._closed = False

    # --- registry ---------------------------------------------------------------------

    def register(self, *functions: Callable[..., Any] | HostFunction) -> list[HostFunction]:
        added = list(as_host_functions(functions).values())
        for hf in added:
            self.functions[hf.name] = hf
        return added

    def unregister(self, *names: str) -> None:
        for name in names:
            if name not in self.functions:
                raise FunctionRegistrationError(f"no host function named {name!r} is registered")
            del self.functions[name]

    def unknown_name_message(self, name: str) -> str:
        """What a call to an unregistered ``name`` is told (short: it is sent for every such call)."""
        names = sorted(self.functions)
        known = ", ".join(names[:_NAMES_SHOWN]) or "none"
        if len(names) > _NAMES_SHOWN:
            known += f", and {len(names) - _NAMES_SHOWN} more"
        return f"host function {name[:100]!r} is not registered (available: {known})"

    def specs_json(self) -> str:
        return json.dumps([f.spec.to_json() for f in self.functions.values()])

    def timeout_of(self, hf: HostFunction) -> float | None:
        return hf.timeout if hf.timeout is not None else self.default_timeout

    # --- calls from a kernel ------------------------------------------------------------------

    def submit(self, call_id: int, name: str, payload: memoryview, *, send: ReplySender,
               on_done: Callable[[FunctionCall, HostCall], None], clock: RunClock | None,
               budget: CallBudget, max_payload: int) -> HostCall | None:
        """Start a call that arrived from the sandbox; errors are answered at once (returns None)."""
        hf = self.functions.get(name)
        refusal: BaseException | None = None
        if budget.calls >= budget.max_calls:
            refusal = RuntimeError(f"this run made {budget.max_calls} host-function calls, the most one run may make")
        elif hf is None:
            refusal = NameError(self.unknown_name_message(name))
        budget.calls += 1
        cost = self.limits.call_memory(payload.nbytes)
        if refusal is None:
            with self._lock:
                if self._closed:
                    refusal = RuntimeError("the sandbox session is closing")
                elif self._busy_threads >= self.max_concurrent:
                    refusal = RuntimeError(
                        f"too many host-function calls at once (at most {self.max_concurrent}, counting calls "
                        "that timed out but are still running); wait for some to finish")
                elif self._held_memory and self._held_memory + cost > self.limits.max_call_memory:
                    refusal = MemoryError(
                        f"the arguments of the host-function calls running now hold up to "
                        f"{self._held_memory / 2**20:.0f} MiB of the host's memory; this call's would add "
                        f"{cost / 2**20:.0f} MiB, over Limits.max_call_memory: wait for some to finish")
                else:
                    self._busy_threads += 1
                    self._held_memory += cost
        if refusal is not None:
            send(call_id, 1, encode_error(refusal))
            return None
        assert hf is not None
        call = HostCall(call_id, name, self.timeout_of(hf), clock)
        call.payload_size = payload.nbytes

        def record(error: BaseException | None, result: Any, result_size: int) -> None:
            duration = time.monotonic() - call.started
            rec = _record(call, call.args, call.kwargs, result, error, duration, call.started_wall,
                          call.payload_size, result_size, budget)
            with contextlib.suppress(Exception):
                on_done(rec, call)

        call._record = record
        if clock is not None:
            clock.call_started()
        job = _Job(call, hf, payload, send, max_payload, cost)
        if hf.loop is not None:
            with self._lock:
                self._running[call_id] = call
            self._start_task(hf.loop, job)
            return call
        with self._lock:
            self._running[call_id] = call
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = _WorkerThread(self)
        worker.jobs.put(job)
        return call

    def overdue(self, now: float) -> list[HostCall]:
        with self._lock:
            return [c for c in self._running.values() if c.overdue(now)]

    def next_deadline(self) -> float | None:
        """Monotonic time at which the earliest running call times out (None: none will)."""
        now = time.monotonic()
        with self._lock:
            calls = [c for c in self._running.values() if c.state == "running"]
        times = [now + left for left in (c.remaining(now) for c in calls) if left is not None]
        return min(times) if times else None

    def expire(self, call: HostCall, send: ReplySender, clock: RunClock | None) -> None:
        """Answer an overdue call with a TimeoutError; its thread's result will be dropped."""
        if call.finish("timed_out"):
            error = TimeoutError(f"host function {call.name!r} did not return within {call.timeout:g} s")
            send(call.id, 1, encode_error(error))
            if clock is not None:
                clock.call_ended()
            call.record(error, None, 0)

    def abandon(self, call_id: int, clock: RunClock | None) -> None:
        """The sandbox stopped waiting for ``call_id`` (interrupted): drop its result."""
        with self._lock:
            call = self._running.get(call_id)
        if call is not None:
            self._abandon(call, clock)

    def abandon_all(self, clock: RunClock | None) -> None:
        with self._lock:
            calls = list(self._running.values())
        for call in calls:
            self._abandon(call, clock)

    def _abandon(self, call: HostCall, clock: RunClock | None) -> None:
        if call.finish("abandoned"):
            if clock is not None:
                clock.call_ended()
            call.record(RuntimeError(f"the sandbox stopped waiting for {call.name!r} (interrupted)"), None, 0)

    @property
    def running(self) -> int:
        with self._lock:
            return sum(1 for c in self._running.values() if c.state == "running")

    def _run_job(self, job: _Job) -> None:
        call, hf = job.call, job.function
        result: Any = None
        error: BaseException | None = None
        status, chunks = 1, []
        try:
            self._decode_arguments(job)
            token = _current.set(call)
            try:
                result = hf(*call.args, **call.kwargs)
            finally:
                _current.reset(token)
            status, chunks = 0, self._encode_result(job, result)
        except BaseException as exc:  # every failure goes back to the sandbox; the host keeps running
            error = exc
            status, chunks = 1, encode_error(exc)
        self._answer(job, status, chunks, error, result)

    def _decode_arguments(self, job: _Job) -> None:
        """Decode the call's ``(args, kwargs)`` within the run's limits into ``job.call``."""
        call = job.call
        try:
            decoded = codec.decode(job.payload, max_bytes=job.max_payload, max_items=self.limits.max_call_items)
            if not (isinstance(decoded, tuple) and len(decoded) == 2 and isinstance(decoded[0], tuple)
                    and isinstance(decoded[1], dict) and all(isinstance(k, str) for k in decoded[1])):
                raise codec.CodecError("a call's arguments must be (tuple, dict of str)")
            call.args, call.kwargs = decoded
        except codec.CodecError as exc:
            raise ValueError(f"malformed arguments for {call.name!r}: {exc}") from None

    @staticmethod
    def _encode_result(job: _Job, result: Any) -> list[Any]:
        try:
            return codec.encode(result, max_bytes=job.max_payload)
        except codec.CodecError as exc:
            raise ValueError(
                f"the result of {job.call.name!r} cannot be sent to the sandbox: {exc} "
                "(the limit is the sandbox's Limits.max_payload; raise it, or return less data)"
            ) from None

    def _answer(self, job: _Job, status: int, chunks: list[Any], error: BaseException | None, result: Any) -> None:
        """Send the call's reply and record it, unless it was already answered (timed out, abandoned)."""
        call = job.call
        with self._lock:
            self._running.pop(call.id, None)
        if not call.finish("done"):
            return  # already answered (timed out, abandoned) and recorded
        if call._clock is not None:
            call._clock.call_ended()
        with contextlib.suppress(Exception):  # the stream is gone; the session reports that
            job.send(call.id, status, chunks)
        call.record(error, result, codec.encoded_size(chunks) if error is None else 0)

    # --- calls run as tasks on a function's event loop -------------------------------------------

    def _start_task(self, loop: asyncio.AbstractEventLoop, job: _Job) -> None:
        """Hand the call to its function's loop: one wake-up; the task answers the sandbox itself."""
        try:
            loop.call_soon_threadsafe(self._begin_task, job)
        except RuntimeError:  # the loop is closed: nothing will ever run the call
            error = RuntimeError(f"host function {job.call.name!r} cannot run now: its event loop is closed")
            self._answer(job, 1, encode_error(error), error, None)
            self._release(job.memory)

    def _begin_task(self, job: _Job) -> None:  # on the loop
        call = job.call
        task = asyncio.ensure_future(self._run_task(job))
        loop = task.get_loop()

        def cancel() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: the task ended with it
                loop.call_soon_threadsafe(task.cancel)

        call._cancel = cancel
        if call.state != "running":  # timed out or abandoned before the task existed
            task.cancel()

    async def _run_task(self, job: _Job) -> None:  # on the loop, in a task of its own
        call, hf = job.call, job.function
        result: Any = None
        error: BaseException | None = None
        status, chunks = 1, []
        try:
            try:
                if job.payload.nbytes > DECODE_ON_LOOP:  # the sandbox's sizes must not stall the loop
                    await asyncio.to_thread(self._decode_arguments, job)
                else:
                    self._decode_arguments(job)
                _current.set(call)  # the task's own context: nothing to reset
                result = await hf.func(*call.args, **call.kwargs)
                status, chunks = 0, self._encode_result(job, result)
            except asyncio.CancelledError:
                # Timed out or abandoned (already answered), or the loop is shutting down (answered here).
                error = RuntimeError(f"the call to {call.name!r} was cancelled on the host (its event loop "
                                     "is shutting down)")
                self._answer(job, 1, encode_error(error), error, None)
                raise
            except Exception as exc:  # every failure goes back to the sandbox; the loop keeps running
                error = exc
                status, chunks = 1, encode_error(exc)
            self._answer(job, status, chunks, error, result)
        finally:
            self._release(job.memory)

    def _release(self, memory: int) -> None:
        with self._lock:
            self._busy_threads -= 1
            self._held_memory -= memory

    def _worker_idle(self, worker: "_WorkerThread", memory: int = 0) -> bool:
        """A worker finished a job (and let go of its arguments); True if it should wait for another."""
        with self._lock:
            self._busy_threads -= 1
            self._held_memory -= memory
            if self._closed or len(self._idle) >= 4:
                return False
            self._idle.append(worker)
            return True

    # --- calls made on the host (the in-process backend) --------------------------------------

    def call(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> FunctionCall:
        """Run one call on this thread and return its record (never raises)."""
        return self.call_in_process(name, args, kwargs)[0]

    def call_in_process(self, name: str, args: list[Any], kwargs: dict[str, Any]
                        ) -> tuple[FunctionCall, BaseException | None]:
        """Run one call on this thread: its record, and the exception it raised (never raises)."""
        started_wall, started = time.time(), time.perf_counter()
        hf = self.functions.get(name)
        result: Any = None
        exc: BaseException | None = None
        if hf is None:
            exc = NameError(self.unknown_name_message(name))
        else:
            timeout = self.timeout_of(hf)
            try:
                result = hf(*args, **kwargs) if timeout is None else _call_with_timeout(hf, args, kwargs, timeout)
            except Exception as caught:
                exc = caught
        error = error_info(exc) if exc is not None else None
        return FunctionCall(name, args, kwargs, result, error, time.perf_counter() - started, started_wall), exc

    def close(self) -> None:
        """Stop idle workers; calls still running finish in their daemon threads, unanswered."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.jobs.put(None)


class _WorkerThread:
    def __init__(self, dispatcher: FunctionDispatcher) -> None:
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._dispatcher = dispatcher
        threading.Thread(target=self._loop, daemon=True, name="host-call").start()

    def _loop(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            self._dispatcher._run_job(job)
            memory = job.memory
            del job  # an idle worker must not hold the last call's payload and values
            if not self._dispatcher._worker_idle(self, memory):
                return


def _call_with_timeout(hf: HostFunction, args: list[Any], kwargs: dict[str, Any], timeout: float) -> Any:
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = hf(*args, **kwargs)
        except BaseException as exc:
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, daemon=True, name=f"host-fn-{hf.name}").start()
    if not done.wait(timeout):
        raise TimeoutError(f"host function {hf.name!r} did not return within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def encode_error(exc: BaseException) -> list[Any]:
    """The codec chunks of an error reply (the host traceback never goes along)."""
    try:
        return codec.encode(codec.encode_exception(exc))
    except Exception:  # an exception whose args cannot be encoded: keep type and message
        return codec.encode({"type": type(exc).__name__, "message": str(exc)[:10_000]})


def _record(call: HostCall, args: Any, kwargs: Any, result: Any, error: BaseException | None, duration: float,
            started_wall: float, args_size: int, result_size: int, budget: CallBudget) -> FunctionCall:
    """The call's record, keeping its values only while the run's byte budget allows."""
    if not budget.keep(args_size):
        args, kwargs = (Elided("arguments", args_size),), {}
    if error is None and not budget.keep(result_size):
        result = Elided("result", result_size)
    err = ExecutionError(type(error).__name__, str(error)) if error is not None else None
    return FunctionCall(call.name, list(args), dict(kwargs), result, err, duration, started_wall)
