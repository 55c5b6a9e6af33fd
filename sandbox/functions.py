"""Host functions: Python callables that run on the host and are called from sandboxed code.

The sandbox never receives a function's source. It receives a
:class:`FunctionSpec` — name, docstring and signature as data — and builds a
stub with that signature. Calling the stub sends a request to the host, which
runs the real function and sends back the result or the error.

Values cross the boundary as JSON, with these conversions (both directions):

* ``bytes`` travel as ``{"__bytes__": "<base64>"}`` and arrive as ``bytes``;
* tuples and sets become lists; dict keys become strings;
* dataclasses become dicts, pydantic models ``model_dump()``, enums their value;
* ``datetime``/``date``/``time`` become ISO strings, ``Path`` and ``Decimal`` strings;
* numpy scalars and arrays, pandas objects: ``.item()``/``.tolist()``/``to_dict("records")``;
* anything else becomes ``str(value)`` (documented loss; the call does not fail).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import dataclasses
import datetime as _dt
import decimal
import enum
import inspect
import json
import keyword
import pathlib
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from .errors import FunctionRegistrationError
from .result import ExecutionError, FunctionCall

#: Prefix of an ``input_request`` prompt that carries a host-function call.
CALL_PREFIX = "\x1esandbox-call:"

_KIND_NAMES = {
    inspect.Parameter.POSITIONAL_ONLY: "positional_only",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional_or_keyword",
    inspect.Parameter.VAR_POSITIONAL: "var_positional",
    inspect.Parameter.KEYWORD_ONLY: "keyword_only",
    inspect.Parameter.VAR_KEYWORD: "var_keyword",
}


def to_json_value(value: Any) -> Any:
    """Convert ``value`` to something ``json.dumps`` accepts (see module docs)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"__bytes__": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Mapping):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json_value(v) for v in value]
    if isinstance(value, enum.Enum):
        return to_json_value(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json_value(dataclasses.asdict(value))
    if hasattr(value, "model_dump") and callable(value.model_dump):  # pydantic v2
        return to_json_value(value.model_dump(mode="json"))
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, (pathlib.PurePath, decimal.Decimal)):
        return str(value)
    if type(value).__module__.startswith("pandas") and hasattr(value, "to_dict"):
        try:
            return to_json_value(value.to_dict("records"))
        except TypeError:
            return to_json_value(value.to_dict())
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return to_json_value(value.tolist())
    return str(value)


def from_json_value(value: Any) -> Any:
    """Undo the ``bytes`` encoding of :func:`to_json_value`."""
    if isinstance(value, dict):
        if len(value) == 1 and "__bytes__" in value:
            return base64.b64decode(value["__bytes__"])
        return {k: from_json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json_value(v) for v in value]
    return value


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
    default: Any = None  # JSON value; meaningful when default_repr is None
    default_repr: str | None = None  # set when the default is not JSON (shown, never sent)


@dataclass(frozen=True)
class FunctionSpec:
    """What the sandbox needs to build a stub: name, docstring, signature."""

    name: str
    doc: str = ""
    parameters: tuple[ParameterSpec, ...] = ()
    returns: str | None = None

    @classmethod
    def from_signature(cls, name: str, signature: inspect.Signature, doc: str = "") -> "FunctionSpec":
        params = []
        for p in signature.parameters.values():
            has_default = p.default is not inspect.Parameter.empty
            default, default_repr = None, None
            if has_default:
                if p.default is None or isinstance(p.default, (bool, int, float, str)):
                    default = p.default
                else:
                    default_repr = repr(p.default)
            params.append(
                ParameterSpec(
                    name=p.name,
                    kind=_KIND_NAMES[p.kind],
                    annotation=_annotation_text(p.annotation),
                    has_default=has_default,
                    default=default,
                    default_repr=default_repr,
                )
            )
        return cls(name, inspect.cleandoc(doc or ""), tuple(params), _annotation_text(signature.return_annotation))

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class HostFunction:
    """A callable offered to sandboxed code; it runs on the host.

    Example::

        def add(a: int, b: int = 1) -> int:
            "Add two numbers."
            return a + b

        with open_sandbox(functions=[add]) as sb:
            sb.run("print(add(2))").stdout   # '3\\n'

    ``name``, ``doc`` and ``signature`` default to the callable's own.
    ``timeout`` (seconds) bounds one call; ``None`` uses the sandbox default.
    Coroutine functions are run to completion on a private event loop.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        doc: str | None = None,
        signature: inspect.Signature | None = None,
        timeout: float | None = None,
    ) -> None:
        self.func = func
        self.name = name or getattr(func, "__name__", None) or type(func).__name__
        if not self.name.isidentifier() or keyword.iskeyword(self.name):
            raise FunctionRegistrationError(
                f"{self.name!r} is not a valid Python identifier; pass name=... to HostFunction"
            )
        if signature is None:
            try:
                signature = inspect.signature(func)
            except (TypeError, ValueError):
                signature = inspect.Signature(
                    [
                        inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
                        inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
                    ]
                )
        self.signature = signature
        self.doc = doc if doc is not None else (inspect.getdoc(func) or "")
        self.timeout = timeout
        self.spec = FunctionSpec.from_signature(self.name, signature, self.doc)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = self.func(*args, **kwargs)
        if inspect.isawaitable(result):
            return asyncio.run(_await(result))
        return result

    def __repr__(self) -> str:
        return f"HostFunction({self.name}{self.signature})"


async def _await(awaitable: Any) -> Any:
    return await awaitable


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


class FunctionDispatcher:
    """Runs host-function calls for one sandbox session.

    Owns the name -> function registry. A call with a timeout runs in its own
    daemon thread so that it can be abandoned after its timeout (the thread
    is left to finish; Python cannot kill it) while the sandbox gets a
    ``TimeoutError``. Abandoned calls never hold up later calls, nor the
    host's exit.
    """

    def __init__(
        self,
        functions: Iterable[Callable[..., Any] | HostFunction] = (),
        *,
        default_timeout: float | None = 60.0,
        on_call: Callable[[FunctionCall], None] | None = None,
    ) -> None:
        self.functions = as_host_functions(functions)
        self.default_timeout = default_timeout
        self.on_call = on_call
        self._worker: _Worker | None = None
        self._worker_lock = threading.Lock()

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

    def specs_json(self) -> str:
        return json.dumps([f.spec.to_json() for f in self.functions.values()])

    def call(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> FunctionCall:
        """Run one call and return its record (result or error, never raises)."""
        started_wall, started = time.time(), time.perf_counter()
        hf = self.functions.get(name)
        result: Any = None
        error: ExecutionError | None = None
        if hf is None:
            known = ", ".join(sorted(self.functions)) or "none"
            error = ExecutionError("NameError", f"host function {name!r} is not registered (available: {known})")
        else:
            timeout = hf.timeout if hf.timeout is not None else self.default_timeout
            try:
                if timeout is None:
                    result = hf(*args, **kwargs)
                else:
                    result = self._call_with_timeout(hf, args, kwargs, timeout)
            except Exception as exc:  # the sandbox gets every error, the host keeps running
                error = error_info(exc)
        record = FunctionCall(name, args, kwargs, result, error, time.perf_counter() - started, started_wall)
        if self.on_call is not None:
            self.on_call(record)
        return record

    def _call_with_timeout(self, hf: HostFunction, args: list[Any], kwargs: dict[str, Any],
                           timeout: float) -> Any:
        # One reusable worker thread (starting a thread per call costs ~0.15 ms);
        # a call that overruns keeps its thread, which is abandoned and replaced.
        if not self._worker_lock.acquire(blocking=False):
            worker = _Worker(f"host-fn-{hf.name}", once=True)  # concurrent call: a one-off thread
            return _wait(worker.submit(hf, args, kwargs), worker, timeout, hf.name)
        try:
            if self._worker is None:
                self._worker = _Worker("host-fn")
            worker = self._worker
            try:
                return _wait(worker.submit(hf, args, kwargs), worker, timeout, hf.name)
            except TimeoutError:
                self._worker = None
                raise
        finally:
            self._worker_lock.release()

    def handle_request(self, payload: str) -> tuple[str, FunctionCall]:
        """Decode a JSON request from the sandbox, run it, encode the reply."""
        try:
            request = json.loads(payload)
            name, args, kwargs = request["name"], from_json_value(request["args"]), from_json_value(request["kwargs"])
        except (ValueError, KeyError, TypeError) as exc:
            record = FunctionCall("?", [], {}, error=ExecutionError("ValueError", f"malformed call request: {exc}"))
        else:
            record = self.call(name, args, kwargs)
        return encode_reply(record), record

    def close(self) -> None:
        """Let the worker thread exit; abandoned calls finish in their own daemon threads."""
        if self._worker is not None:
            self._worker.stop()
            self._worker = None


class _Worker:
    """A daemon thread that runs host-function calls in turn.

    When a call overruns its timeout the worker is marked abandoned: it
    finishes that call (Python cannot kill a thread) and then exits.
    """

    def __init__(self, name: str, *, once: bool = False) -> None:
        self.abandoned = once
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=self._loop, daemon=True, name=name).start()

    def submit(self, fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> "concurrent.futures.Future[Any]":
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._jobs.put((future, fn, args, kwargs))
        return future

    def stop(self) -> None:
        self._jobs.put(None)

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, fn, args, kwargs = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # delivered to the waiting caller
                    future.set_exception(exc)
            if self.abandoned:
                return


def _wait(future: "concurrent.futures.Future[Any]", worker: _Worker, timeout: float, name: str) -> Any:
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        worker.abandoned = True
        worker.stop()
        raise TimeoutError(f"host function {name!r} did not return within {timeout:g} s") from None


def encode_reply(record: FunctionCall) -> str:
    if record.error is not None:
        return json.dumps({"ok": False, "type": record.error.type, "message": record.error.message})
    return json.dumps({"ok": True, "value": to_json_value(record.result)})
