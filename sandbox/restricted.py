"""The ``restricted`` backend: RestrictedPython, in this process, no kernel.

.. warning::

   **This backend is NOT a security boundary.** The code runs inside the host
   process, in a thread, with the host's memory, modules and privileges.
   RestrictedPython rewrites the code so that attribute access, item access,
   writes, imports and printing go through guards, and this module adds an
   import allowlist, a guarded ``open`` and time limits. That stops honest
   mistakes and casual misuse; it does not stop a determined attacker. Use it
   for fast orchestration of *trusted* tools by code you would be willing to
   run yourself. For anything untrusted use the ``docker`` backend.

Known ways out of the restrictions (and reasons this is not a boundary):

* Allowed modules expose their whole public API. ``typing.get_type_hints``,
  ``pandas.eval``/``DataFrame.query`` and ``dataclasses`` evaluate strings as
  unrestricted Python; ``numpy``/``pandas`` can read and write any host path
  through functions this module does not know about (``pd.ExcelWriter``,
  ``np.memmap``, ...), unpickle data (``read_pickle``, ``np.load(...,
  allow_pickle=True)``), run subprocesses (``read_clipboard``) and touch raw
  memory (``np.ctypeslib``). Allowing a module means trusting everything in it.
* Module-level state is shared with the host: ``random.seed()``,
  ``pd.set_option()``, ``decimal.DefaultContext`` and the like change the
  host process too.
* Memory is not limited: ``[0] * 10**10`` takes the whole process down.

Known limitations of the time limit:

* A loop in sandbox code (``while``/``for``/comprehensions), every call of a
  sandbox function or lambda, ``time.sleep`` and waiting for a host function
  are interruption points: past the deadline each of them raises again, so
  even ``while True: try: ... except BaseException: pass`` stops.
* Long calls into C code that hold the GIL (``sum(range(10**12))``,
  ``10**10**8``, a catastrophic regular expression, a huge ``sorted``) cannot
  be interrupted and freeze *the whole host process* until they return: no
  other Python thread runs, not even the one waiting for the deadline.
* C calls that release the GIL (blocking file I/O, some numpy/pandas work)
  cannot be interrupted either, but the host does not wait for them: after
  the deadline plus a short grace period :meth:`RestrictedSandbox.run`
  returns a ``TimeoutError`` result, abandons the worker thread (it keeps
  running until its C call returns, then stops at the next interruption
  point) and restarts the session: variables are lost, files stay, the
  result says ``restarted=True``. This mirrors the kernel backends, which
  restart a kernel that does not answer an interrupt.

What the sandboxed code sees:

* Python without names or attributes that start with ``_`` (except reading
  ``__name__``, ``__doc__``, ``__qualname__``, ``__version__`` and
  ``__init__``, so ``super().__init__(...)`` works), without ``exec``,
  ``eval``, ``compile``, ``globals``, ``vars``, ``async``, ``match`` and
  ``except*``. Classes may define the common special methods (``__repr__``,
  ``__len__``, ``__iter__``, operators, ``__enter__``/``__exit__``, ...).
* ``import`` of the allowlisted modules only (see :data:`DEFAULT_ALLOWED_IMPORTS`).
  ``time.sleep`` is interruptible; ``io`` offers ``StringIO``/``BytesIO``
  /``TextIOWrapper`` and the guarded ``open`` only.
* ``open()`` confined to the working directory; relative paths are relative
  to it (the host process's cwd is never changed). The path arguments of the
  common pandas/numpy readers and writers (``pd.read_csv``, ``df.to_csv``,
  ``np.load``, ...) are resolved the same way.
* Writes (``x.attr = v``, ``x[k] = v``, ``del``) are allowed on containers,
  on instances and classes defined in the sandbox, and on objects of the
  allowed libraries (DataFrames, arrays, ...); modules, library classes and
  functions are read-only.
* ``print`` goes to the result's stdout; library output to ``sys.stdout`` /
  ``sys.stderr`` (``df.info()``, warnings) made by the sandbox thread is
  captured too, without disturbing other threads.
* ``input()`` fails at once: nobody is there to type.
* Host functions are plain functions with the real signature. Values cross
  through the same codec as in the kernel backends (copies, with the same
  types); a host error of a builtin type arrives as that type, also a
  :class:`ToolError` (``except ValueError`` and ``except ToolError`` work),
  any other as a :class:`ToolError` naming the host's type.
"""

from __future__ import annotations

import _string  # the C helpers behind str.format's field parsing
import ast
import builtins
import concurrent.futures
import contextlib
import importlib.util
import io
import operator
import os
import queue
import shutil
import string
import sys
import tempfile
import threading
import time
import types
import weakref
from collections.abc import MutableMapping, MutableSequence, MutableSet
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NoReturn, cast

from RestrictedPython import compile_restricted_exec, safe_builtins
from RestrictedPython.Guards import (
    guarded_iter_unpack_sequence,
    guarded_unpack_sequence,
    raise_,
    safer_getattr,
)
from RestrictedPython.transformer import (
    FORBIDDEN_FUNC_NAMES,
    INSPECT_ATTRIBUTES,
    IOPERATOR_TO_STR,
    RestrictingNodeTransformer,
    copy_locations,
)

from .base import DEFAULT_OUTPUT_LIMIT, DEFAULT_TIMEOUT, FileInfo, StreamCallback, walk_files
from .errors import FileTransferError, FunctionRegistrationError, SandboxClosed
from .functions import FunctionDispatcher, HostFunction, as_host_functions
from .pyparse import AST_LOCK, parse
from .result import (CappedText, ExecutionError, ExecutionResult, FunctionCall, KernelRestart, Output,
                     timed_restart)
from .runtime import sandbox_codec as codec

__all__ = [
    "DEFAULT_ALLOWED_IMPORTS",
    "HostFunctionError",
    "ToolError",
    "RestrictedSandbox",
    "SANDBOX_FILENAME",
    "TimeLimitExceeded",
]

#: The file name of sandboxed code in tracebacks.
SANDBOX_FILENAME = "<sandbox>"

#: Modules importable when ``allowed_imports`` is None (plus numpy and pandas
#: when installed). A listed package allows its submodules too.
DEFAULT_ALLOWED_IMPORTS: tuple[str, ...] = (
    "base64",
    "bisect",
    "collections",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "enum",
    "fractions",
    "functools",
    "hashlib",
    "heapq",
    "io",  # a proxy: StringIO, BytesIO, TextIOWrapper and the guarded open
    "itertools",
    "json",
    "math",
    "random",
    "re",
    "statistics",
    "string",
    "textwrap",
    "time",  # a proxy: sleep is interruptible
    "typing",
    "uuid",
)
_OPTIONAL_DATA_MODULES = ("numpy", "pandas")

#: How long the host waits, after the deadline, for the code to stop before
#: abandoning the worker thread and restarting the session.
_INTERRUPT_GRACE = 1.0
#: How often a thread waiting for a host function checks for cancellation.
_CALL_POLL = 0.05

# Special methods that sandbox classes may define, on top of RestrictedPython's
# own short list. Left out on purpose: attribute hooks (__getattr__,
# __getattribute__, __setattr__, __delattr__), descriptors and class-creation
# hooks (they run on attribute access or class creation in code that does not
# expect it), __new__, __reduce__ and __del__ (runs on whatever thread the
# garbage collector picks, outside any time limit).
_EXTRA_MAGIC_METHODS = frozenset(
    {"__repr__", "__str__", "__format__", "__len__", "__iter__", "__next__", "__reversed__", "__getitem__",
     "__setitem__", "__delitem__", "__missing__", "__call__", "__hash__", "__bool__", "__enter__", "__exit__",
     "__post_init__", "__int__", "__float__", "__index__", "__round__", "__neg__", "__pos__", "__abs__", "__invert__",
     "__add__", "__radd__", "__iadd__", "__sub__", "__rsub__", "__isub__", "__mul__", "__rmul__", "__imul__",
     "__truediv__", "__rtruediv__", "__itruediv__", "__floordiv__", "__rfloordiv__", "__ifloordiv__", "__mod__",
     "__rmod__", "__imod__", "__pow__", "__rpow__", "__ipow__", "__matmul__", "__rmatmul__", "__and__", "__rand__",
     "__iand__", "__or__", "__ror__", "__ior__", "__xor__", "__rxor__", "__ixor__", "__lshift__", "__rlshift__",
     "__rshift__", "__rrshift__"}
)

# Dunder attributes sandbox code may *read*: strings, and __init__ so that
# super().__init__(...) works. Everything else starting with "_" stays blocked
# (that is what stops ().__class__.__bases__[0].__subclasses__()).
_READABLE_DUNDERS = frozenset({"__init__", "__name__", "__qualname__", "__doc__", "__version__"})

_INPLACE_OPS: types.MappingProxyType[str, Callable[[Any, Any], Any]] = types.MappingProxyType(
    {
        "+=": operator.iadd,
        "-=": operator.isub,
        "*=": operator.imul,
        "/=": operator.itruediv,
        "//=": operator.ifloordiv,
        "%=": operator.imod,
        "**=": operator.ipow,
        "<<=": operator.ilshift,
        ">>=": operator.irshift,
        "&=": operator.iand,
        "|=": operator.ior,
        "^=": operator.ixor,
        "@=": operator.imatmul,
    }
)

# pandas/numpy functions and methods whose first argument (or one of these
# keywords) is a file path: the path is resolved inside the working directory
# exactly like open(). A heuristic list, not a guarantee (see module docs).
_PANDAS_READERS = frozenset(
    {"read_csv", "read_table", "read_fwf", "read_excel", "read_json", "read_parquet", "read_feather", "read_pickle",
     "read_html", "read_xml", "read_hdf", "read_orc", "read_sas", "read_spss", "read_stata"}
)
_PANDAS_WRITERS = frozenset(
    {"to_csv", "to_json", "to_parquet", "to_excel", "to_feather", "to_pickle", "to_html", "to_markdown", "to_string",
     "to_latex", "to_xml", "to_stata", "to_hdf", "to_orc"}
)
_NUMPY_IO = frozenset(
    {"load", "save", "savez", "savez_compressed", "loadtxt", "savetxt", "genfromtxt", "fromfile", "tofile"}
)
_IO_NAMES = _PANDAS_READERS | _PANDAS_WRITERS | _NUMPY_IO
_PATH_KEYWORDS = frozenset(
    {"filepath_or_buffer", "path_or_buf", "path_or_buffer", "path", "io", "buf", "excel_writer", "fname", "file", "fid"}
)

_INPUT_MESSAGE = (
    "input() is not available in the sandbox: no one is there to type. "
    "Put the data in a variable or get it from a host function."
)

_MISSING: Any = object()


ToolError = codec.ToolError
#: The name earlier versions used; ``except HostFunctionError`` still catches every host error.
HostFunctionError = ToolError


class TimeLimitExceeded(BaseException):
    """Raised inside the sandbox at interruption points once the run's time is up.

    A ``BaseException`` (like ``KeyboardInterrupt``) so that ``except
    Exception`` does not swallow it; code that catches it anyway is stopped
    at the next interruption point.
    """


# --------------------------------------------------------------------------
# Compile-time policy
# --------------------------------------------------------------------------


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _contains_slice(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Slice) for n in ast.walk(node))


class _SandboxPolicy(RestrictingNodeTransformer):
    """RestrictedPython's policy plus interruption points and a few conveniences.

    Additions, each noted where it is made: ``_tick_()`` calls in every loop,
    function and lambda (the time limit), the trailing expression's value
    handed to ``_display_``, augmented assignment to items and attributes
    (``counts[k] += 1``), annotated assignments, ``nonlocal``, more special
    methods in classes, and reading ``__name__``.
    """

    # Set on the last statement of a module by RestrictedSandbox when it is an
    # expression whose value should be displayed (ast nodes accept attributes).
    DISPLAY_MARK = "sandbox_display"

    # An interruption point is `if _stop_[0]: _tick_()` (statement) or
    # `(not _stop_[0] or _tick_())` (expression, always true): a list lookup
    # costs a fraction of a call, and loops run at near-native speed.

    def _stop_flag(self, location: ast.stmt | ast.expr) -> ast.Subscript:
        flag = ast.Subscript(value=ast.Name("_stop_", ast.Load()), slice=ast.Constant(0), ctx=ast.Load())
        copy_locations(flag, location)
        return flag

    def _tick_call(self, location: ast.stmt | ast.expr) -> ast.expr:
        call = ast.Call(func=ast.Name("_tick_", ast.Load()), args=[], keywords=[])
        check = ast.BoolOp(op=ast.Or(), values=[ast.UnaryOp(op=ast.Not(), operand=self._stop_flag(location)), call])
        copy_locations(call, location)
        copy_locations(check, location)
        return check

    def _tick_stmt(self, location: ast.stmt | ast.expr) -> ast.If:
        call = ast.Expr(ast.Call(func=ast.Name("_tick_", ast.Load()), args=[], keywords=[]))
        stmt = ast.If(test=self._stop_flag(location), body=[call], orelse=[])
        copy_locations(call, location)
        copy_locations(stmt, location)
        return stmt

    # -- names ------------------------------------------------------------

    def check_name(self, node: Any, name: str | None, allow_magic_methods: bool = False) -> None:
        # RestrictedPython allows only __init__ and comparisons as special
        # methods; LLM-written classes routinely define __repr__, __len__, ...
        if allow_magic_methods and name in _EXTRA_MAGIC_METHODS and node.col_offset != 0:
            return
        super().check_name(node, name, allow_magic_methods)

    def visit_Name(self, node: ast.Name) -> Any:
        # `if __name__ == "__main__":` is common in generated scripts; reading
        # the name is harmless, assigning it stays forbidden.
        if node.id == "__name__" and isinstance(node.ctx, ast.Load):
            return node
        return super().visit_Name(node)

    def visit_Attribute(self, node: ast.Attribute) -> Any:
        if node.attr in _READABLE_DUNDERS and isinstance(node.ctx, ast.Load):
            node = self.node_contents_visit(node)
            call = ast.Call(
                func=ast.Name("_getattr_", ast.Load()),
                args=[node.value, ast.Constant(node.attr)],
                keywords=[],
            )
            copy_locations(call, node)
            return call
        return super().visit_Attribute(node)

    # -- interruption points ------------------------------------------------
    # RestrictedPython's visit_* return the node they were given, changed in place (their declared
    # return type is wider): the casts below say so to the type checker.

    def visit_While(self, node: ast.While) -> Any:
        node = cast(ast.While, super().visit_While(node))
        # First statement of the body, outside any try the body may contain,
        # so that a loop which catches BaseException still cannot continue.
        node.body.insert(0, self._tick_stmt(node))
        return node

    def visit_For(self, node: ast.For) -> Any:
        node = cast(ast.For, super().visit_For(node))
        node.body.insert(0, self._tick_stmt(node))
        return node

    def visit_comprehension(self, node: ast.comprehension) -> Any:
        node = cast(ast.comprehension, super().visit_comprehension(node))
        # An always-true condition that makes every item an interruption point.
        node.ifs.insert(0, self._tick_call(node.iter))
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> Any:
        node = cast(ast.FunctionDef, super().visit_FunctionDef(node))
        body = node.body
        # RestrictedPython inserts `_print = _print_(...)` before the
        # docstring when the function prints, which loses the docstring.
        if len(body) > 1 and _is_docstring(body[1]) and not _is_docstring(body[0]):
            body.insert(0, body.pop(1))
        body.insert(1 if body and _is_docstring(body[0]) else 0, self._tick_stmt(node))
        return node

    def visit_Lambda(self, node: ast.Lambda) -> Any:
        node = cast(ast.Lambda, super().visit_Lambda(node))
        # `<check> and <body>` evaluates to <body>: the check is always true.
        new_body = ast.BoolOp(op=ast.And(), values=[self._tick_call(node.body), node.body])
        copy_locations(new_body, node.body)
        node.body = new_body
        return node

    # -- statements RestrictedPython rejects that are safe here -------------

    def visit_AnnAssign(self, node: ast.AnnAssign) -> Any:
        # Needed for dataclasses and typed variables; target and annotation
        # are visited (and guarded) like any other expression.
        return self.node_contents_visit(node)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> Any:
        for name in node.names:
            if name.startswith("_"):
                self.error(node, f'"{name}" is an invalid variable name because it starts with "_"')
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> Any:
        # RestrictedPython forbids `d[k] += 1` and `obj.n += 1`; rewrite them to
        # helpers that read through _getitem_/_getattr_ and write through
        # _write_. (The right-hand side is evaluated before the current value
        # is read, which only matters if it changes that very item.)
        target = node.target
        op = _aug_op(node.op)
        if isinstance(target, ast.Name):
            # `n += 1` stays native: RestrictedPython routes it through
            # _inplacevar_ for Zope's security hooks, which we do not have, and
            # the extra call per loop iteration is the largest overhead.
            return self.node_contents_visit(node)
        if isinstance(target, ast.Subscript) and not _contains_slice(target.slice):
            call = ast.Call(
                func=ast.Name("_inplaceitem_", ast.Load()),
                args=[self.visit(target.value), self.visit(target.slice), ast.Constant(op), self.visit(node.value)],
                keywords=[],
            )
        elif isinstance(target, ast.Attribute):
            attr = target.attr
            if attr.startswith("_") or attr.endswith("__roles__") or attr in INSPECT_ATTRIBUTES:
                self.error(node, f'"{attr}" is an invalid attribute name because it starts with "_" or is restricted.')
                return node
            call = ast.Call(
                func=ast.Name("_inplaceattr_", ast.Load()),
                args=[self.visit(target.value), ast.Constant(target.attr), ast.Constant(op), self.visit(node.value)],
                keywords=[],
            )
        else:
            return super().visit_AugAssign(node)
        stmt = ast.Expr(call)
        copy_locations(call, node)
        copy_locations(stmt, node)
        return stmt

    # -- the trailing expression --------------------------------------------

    def visit_Module(self, node: ast.Module) -> Any:
        last = node.body[-1] if node.body else None
        display = bool(getattr(last, self.DISPLAY_MARK, False))
        node = cast(ast.Module, super().visit_Module(node))
        if display and isinstance(last, ast.Expr) and node.body and node.body[-1] is last:
            call = ast.Call(func=ast.Name("_display_", ast.Load()), args=[last.value], keywords=[])
            copy_locations(call, last.value)
            last.value = call
        return node


def _aug_op(op: ast.operator) -> str:
    return IOPERATOR_TO_STR[type(op)]


# --------------------------------------------------------------------------
# Per-run state, output capture
# --------------------------------------------------------------------------


class _RunState:
    """Everything one run produces; shared by the worker thread and the host.

    Writes after :meth:`close` are dropped, so a worker that the host has
    given up on cannot change a result that was already returned.
    """

    def __init__(
        self,
        *,
        timeout: float | None,
        output_limit: int,
        events: queue.SimpleQueue[tuple[str, Any]] | None,
        stream: bool,
        report_calls: bool,
        stop_flag: list[bool] | None = None,
    ) -> None:
        self.timeout = timeout
        self._stop_flag = stop_flag
        self.stdout = CappedText(output_limit)
        self.stderr = CappedText(output_limit)
        self.outputs: list[Output] = []
        self.outputs_truncated = False
        self.calls: list[FunctionCall] = []
        self.exc: BaseException | None = None
        self.error: ExecutionError | None = None
        self.cancelled = False
        self.closed_by_host = False  # cancelled by close(), not by the deadline
        self.by_request = False  # cancelled by RestrictedSandbox.interrupt()
        self.interrupted = False
        self.cancel_event = threading.Event()
        self._events = events
        self._stream = stream and events is not None
        self._report_calls = report_calls and events is not None
        self._stream_limit = output_limit
        self._streamed = {"stdout": 0, "stderr": 0}
        self.stream_cut = False
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def idle(cls) -> "_RunState":
        """The state between runs: never cancelled, discards output."""
        state = cls(timeout=None, output_limit=2, events=None, stream=False, report_calls=False)
        state._closed = True
        return state

    def write(self, name: str, text: str) -> None:
        with self._lock:
            if self._closed:
                return
            (self.stdout if name == "stdout" else self.stderr).write(text)
            if self._stream and self._events is not None:
                # Stream at most output_limit characters per stream so that a
                # print loop cannot flood the host's callback; the result
                # still holds head and tail.
                budget = self._stream_limit - self._streamed[name]
                if budget <= 0:
                    self.stream_cut = True
                    return
                piece = text[:budget]
                self._streamed[name] += len(piece)
                if len(piece) < len(text):
                    self.stream_cut = True
                self._events.put((name, piece))

    def stdout_text(self) -> str:
        with self._lock:
            return self.stdout.getvalue()

    def record_call(self, record: FunctionCall) -> None:
        with self._lock:
            if self._closed:
                return
            self.calls.append(record)
            if self._report_calls and self._events is not None:
                self._events.put(("call", record))

    def add_output(self, output: Output, truncated: bool) -> None:
        with self._lock:
            if self._closed:
                return
            self.outputs.append(output)
            self.outputs_truncated = self.outputs_truncated or truncated

    def cancel(self, *, closing: bool = False) -> None:
        self.closed_by_host = self.closed_by_host or closing
        self.cancelled = True
        if self._stop_flag is not None:
            self._stop_flag[0] = True  # makes the code's interruption points call _tick_
        self.cancel_event.set()

    def interrupt(self) -> NoReturn:
        """Raise :class:`TimeLimitExceeded` in the calling (sandbox) thread."""
        self.interrupted = True
        limit = f"{self.timeout:g} s" if self.timeout is not None else "the time limit"
        raise TimeLimitExceeded(f"time limit of {limit} exceeded")

    def close(self) -> None:
        with self._lock:
            self._closed = True


class _StreamWriter:
    """A minimal text file that appends to a run's stdout or stderr."""

    encoding = "utf-8"
    errors = "strict"

    def __init__(self, state: _RunState, name: str) -> None:
        self._state = state
        self._name = name

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self._state.write(self._name, text)
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False


class _ThreadRoutedStream:
    """Stands in for ``sys.stdout``/``sys.stderr`` while sandbox threads run.

    Writes from a registered thread go to that thread's writer; every other
    thread keeps writing to the original stream. This captures library output
    (``df.info()``, warnings) of sandboxed code without redirecting the host.
    """

    def __init__(self, original: Any) -> None:
        self.original = original
        self.routes: dict[int, _StreamWriter] = {}

    def _target(self) -> Any:
        return self.routes.get(threading.get_ident(), self.original)

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        flush = getattr(self._target(), "flush", None)
        if flush is not None:
            flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)


# sys.stdout and sys.stderr are process-wide: installing and removing the
# routers must not interleave between sessions. This lock is the only
# module-level mutable object and guards nothing but that swap.
_ROUTING_LOCK = threading.Lock()


@contextlib.contextmanager
def _routed_output(stdout: _StreamWriter, stderr: _StreamWriter) -> Iterator[None]:
    ident = threading.get_ident()
    installed: list[tuple[str, _ThreadRoutedStream]] = []
    with _ROUTING_LOCK:
        for attr, writer in (("stdout", stdout), ("stderr", stderr)):
            current = getattr(sys, attr)
            if current is None:  # e.g. pythonw: nothing to route around
                continue
            if not isinstance(current, _ThreadRoutedStream):
                current = _ThreadRoutedStream(current)
                setattr(sys, attr, current)
            current.routes[ident] = writer
            installed.append((attr, current))
    try:
        yield
    finally:
        with _ROUTING_LOCK:
            for attr, router in installed:
                router.routes.pop(ident, None)
                if not router.routes and getattr(sys, attr) is router:
                    setattr(sys, attr, router.original)


# --------------------------------------------------------------------------
# Helpers injected into the sandbox
# --------------------------------------------------------------------------


class _Printer:
    """What RestrictedPython's ``_print_`` factory returns: ``print`` lands here."""

    __slots__ = ("_runtime",)

    def __init__(self, runtime: "_Runtime") -> None:
        self._runtime = runtime

    def _call_print(
        self, *objects: Any, sep: str | None = " ", end: str | None = "\n", file: Any = None, flush: bool = False
    ) -> None:
        if file is not None:
            self._runtime.guarded_getattr(file, "write")  # the file must be accessible to the code
            builtins.print(*objects, sep=sep, end=end, file=file, flush=flush)
            return
        sep = " " if sep is None else sep
        end = "\n" if end is None else end
        if not isinstance(sep, str):
            raise TypeError(f"sep must be None or a string, not {type(sep).__name__}")
        if not isinstance(end, str):
            raise TypeError(f"end must be None or a string, not {type(end).__name__}")
        # One write per print call: streamed output arrives in whole lines.
        self._runtime.current.write("stdout", sep.join(map(str, objects)) + end)

    def __call__(self) -> str:  # the value of RestrictedPython's `printed`
        return self._runtime.current.stdout_text()


class _SafeFormatter(string.Formatter):
    """``str.format`` whose field lookups (``{0.attr}``, ``{0[key]}``) are guarded."""

    def __init__(self, getattr_: Callable[[Any, str], Any]) -> None:
        self._getattr = getattr_

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> tuple[Any, Any]:
        first, rest = _string.formatter_field_name_split(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attr, key in rest:
            obj = self._getattr(obj, key) if is_attr else obj[key]
        return obj, first


class _ClassFactory:
    """The ``__metaclass__`` of every sandbox ``class`` statement.

    RestrictedPython rewrites ``class C(B):`` to ``class C(B,
    metaclass=__metaclass__)``. This object picks the metaclass Python would
    have picked (so Enum, NamedTuple and Generic work) and remembers the class,
    which is how the write guard recognises instances of sandbox classes.
    """

    def __init__(self) -> None:
        self.classes: weakref.WeakSet[type] = weakref.WeakSet()

    @staticmethod
    def _metaclass(bases: tuple[Any, ...]) -> type:
        winner: type = type
        for base in bases:
            candidate = type(base)
            if issubclass(winner, candidate):
                continue
            if issubclass(candidate, winner):
                winner = candidate
                continue
            raise TypeError(
                "metaclass conflict: the metaclass of a derived class must be a "
                "(non-strict) subclass of the metaclasses of all its bases"
            )
        return winner

    def __prepare__(self, name: str, bases: tuple[Any, ...], **kwds: Any) -> Any:
        return self._metaclass(bases).__prepare__(name, bases, **kwds)

    def __call__(self, name: str, bases: tuple[Any, ...], namespace: Any, **kwds: Any) -> Any:
        cls = self._metaclass(bases)(name, bases, namespace, **kwds)
        with contextlib.suppress(TypeError):
            self.classes.add(cls)
        return cls

    def owns(self, cls: type) -> bool:
        return any(c in self.classes for c in getattr(cls, "__mro__", (cls,)))


class _TypeMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, type)

    def __subclasscheck__(cls, sub: Any) -> bool:
        return issubclass(sub, type)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) != 1 or kwargs:
            raise TypeError("only type(obj) is available in the sandbox; define classes with a class statement")
        return type(args[0])


class _RestrictedType(metaclass=_TypeMeta):
    """``type`` for sandbox code: ``type(x)`` and ``isinstance(x, type)``, no class creation."""


def _make_host_stub(runtime: "_Runtime", hf: HostFunction) -> Callable[..., Any]:
    name, signature = hf.name, hf.signature

    def stub(*args: Any, **kwargs: Any) -> Any:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{name}(): {exc}") from None
        return runtime.call_host(name, args, kwargs)

    stub.__name__ = stub.__qualname__ = name
    stub.__doc__ = hf.doc or None
    vars(stub)["__signature__"] = signature  # what inspect.signature() shows (a function attribute)
    return stub


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not hide the error itself
        return f"<{type(exc).__name__} object; str() failed>"


def _cap_chain(exc: BaseException, limit: int = 50) -> None:
    """Cut an exception's cause/context chain after ``limit`` links.

    Code that catches everything and fails again (``except BaseException: return f(n + 1)``) builds
    chains as deep as the recursion limit; anything that formats such a chain recursively (our traceback,
    a test runner's report) would itself fail with RecursionError. The first links say what happened.
    """
    seen: set[int] = set()
    e: BaseException | None = exc
    depth = 0
    try:
        while e is not None and id(e) not in seen:
            seen.add(id(e))
            depth += 1
            nxt = e.__cause__ if e.__cause__ is not None else (None if e.__suppress_context__ else e.__context__)
            if depth >= limit and nxt is not None:
                e.__cause__ = None
                e.__context__ = None
                e.__suppress_context__ = True
                return
            e = nxt
    except Exception:  # an exception class of the code's own making may refuse: keep what it has
        return


class _Runtime:
    """One interpreter lifetime: the namespace, its builtins and helpers.

    A restart makes a new runtime; an abandoned worker thread keeps its old
    one (whose run state stays cancelled), so it can never touch the new
    namespace.
    """

    def __init__(self, sandbox: "RestrictedSandbox") -> None:
        self.sandbox = sandbox
        self.current: _RunState = _RunState.idle()
        # Read by the interruption points compiled into the code; set when the
        # current run is cancelled. One list per runtime, mutated in place.
        self.stop_flag: list[bool] = [False]
        self.class_factory = _ClassFactory()
        self._sources: dict[int, tuple[types.CodeType, list[str]]] = {}
        self._stubs: dict[str, Callable[..., Any]] = {}
        self._formatter = _SafeFormatter(self.guarded_getattr)
        self.proxies = self._make_proxies()
        self.builtins = self._make_builtins()
        self.ns: dict[str, Any] = {
            "__builtins__": self.builtins,
            "__name__": "__main__",
            "__doc__": None,
            # Also in the globals because module-level code looks names up in
            # the namespace before the builtins; these run on every iteration.
            # Code cannot rebind them: names starting with "_" are rejected.
            "_stop_": self.stop_flag,
            "_tick_": self.tick,
        }
        for hf in sandbox._dispatcher.functions.values():
            self.install_stub(hf)

    # -- namespace setup ------------------------------------------------------

    def _make_builtins(self) -> dict[str, Any]:
        b: dict[str, Any] = dict(safe_builtins)
        for name in dir(builtins):  # every builtin exception; safe_builtins misses many (TimeoutError, ...)
            value = getattr(builtins, name)
            if isinstance(value, type) and issubclass(value, BaseException):
                b[name] = value
        for name in (
            "all", "any", "ascii", "bin", "bytearray", "bytes", "dict", "dir", "enumerate", "filter", "format",
            "frozenset", "iter", "list", "map", "max", "min", "next", "object", "property", "reversed", "set",
            "sorted", "staticmethod", "classmethod", "sum", "super", "tuple", "zip"
        ):
            # RestrictedPython leaves these out because they iterate in C past
            # its _getiter_ hook; our _getiter_ enforces nothing, so they are safe.
            b[name] = getattr(builtins, name)
        b.update(
            {
                "NotImplemented": NotImplemented,
                "HostFunctionError": ToolError,
                "ToolError": ToolError,
                "type": _RestrictedType,
                "range": range,
                "getattr": self.guarded_getattr,
                "hasattr": self.guarded_hasattr,
                "setattr": self.guarded_setattr,
                "delattr": self.guarded_delattr,
                "open": self.guarded_open,
                "input": self.no_input,
                "__import__": self.guarded_import,
                "__metaclass__": self.class_factory,
                # RestrictedPython's hooks, named as its transformer expects.
                "_getattr_": self.guarded_getattr,
                "_getitem_": operator.getitem,
                "_getiter_": _identity,
                "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
                "_unpack_sequence_": guarded_unpack_sequence,
                "_write_": self.guarded_write,
                "_inplacevar_": _inplacevar,
                "_inplaceitem_": self.inplace_item,
                "_inplaceattr_": self.inplace_attr,
                "_apply_": _apply,
                "_print_": self.make_printer,
                "_tick_": self.tick,
                "_stop_": self.stop_flag,
                "_display_": self.display,
            }
        )
        return b

    def _make_proxies(self) -> dict[str, types.ModuleType]:
        time_proxy = types.ModuleType("time", time.__doc__)
        for name in dir(time):
            if not name.startswith("_"):
                setattr(time_proxy, name, getattr(time, name))
        vars(time_proxy)["sleep"] = self.sleep

        io_proxy = types.ModuleType("io", "StringIO, BytesIO, TextIOWrapper and a working-directory-bound open().")
        for name in (
            "StringIO", "BytesIO", "TextIOWrapper", "IOBase", "TextIOBase", "BufferedIOBase", "RawIOBase",
            "UnsupportedOperation", "SEEK_SET", "SEEK_CUR", "SEEK_END", "DEFAULT_BUFFER_SIZE"
        ):
            setattr(io_proxy, name, getattr(io, name))
        vars(io_proxy)["open"] = self.guarded_open
        return {"time": time_proxy, "io": io_proxy}

    def install_stub(self, hf: HostFunction) -> None:
        stub = _make_host_stub(self, hf)
        self._stubs[hf.name] = stub
        self.ns[hf.name] = stub

    def remove_stub(self, name: str) -> None:
        stub = self._stubs.pop(name, None)
        if stub is not None and self.ns.get(name) is stub:  # never delete the user's own variable
            del self.ns[name]

    # -- compiling -----------------------------------------------------------

    def compile(self, source: str) -> tuple[types.CodeType | None, ExecutionError | None]:
        try:
            tree = parse(source, SANDBOX_FILENAME, "exec")
        except SyntaxError as exc:
            return None, _syntax_error(exc)
        except ValueError as exc:  # e.g. null bytes in the source
            return None, ExecutionError("SyntaxError", str(exc))
        lines = source.splitlines()
        if tree.body and isinstance(tree.body[-1], ast.Expr) and not _ends_with_semicolon(tree.body[-1], lines):
            setattr(tree.body[-1], _SandboxPolicy.DISPLAY_MARK, True)
        try:
            with AST_LOCK:  # it walks and compiles the tree: see sandbox.pyparse
                compiled = compile_restricted_exec(tree, filename=SANDBOX_FILENAME, policy=_SandboxPolicy)
        except SyntaxError as exc:  # found by compile() after the policy (e.g. 'return' outside function)
            return None, _syntax_error(exc)
        if compiled.errors or compiled.code is None:
            message = "\n".join(compiled.errors) or "the code was rejected by RestrictedPython"
            hint = (
                "The restricted sandbox rejects names and attributes starting with '_', exec/eval, "
                "async code, match statements and except*."
            )
            return None, ExecutionError("SyntaxError", message, f"{message}\n{hint}")
        self._register_source(compiled.code, lines)
        return compiled.code, None

    def _register_source(self, code: types.CodeType, lines: list[str]) -> None:
        # Tracebacks need the source of every code object, including
        # functions defined by earlier runs and called now.
        self._sources[id(code)] = (code, lines)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                self._register_source(const, lines)

    # -- running (worker thread) ---------------------------------------------

    def execute(self, code: types.CodeType, state: _RunState, events: queue.SimpleQueue[tuple[str, Any]]) -> None:
        try:
            with _routed_output(_StreamWriter(state, "stdout"), _StreamWriter(state, "stderr")):
                try:
                    exec(code, self.ns)
                except BaseException as exc:  # everything the code raises is the result's error
                    _cap_chain(exc)
                    state.exc = exc
                    try:
                        # Formatting may run sandbox code (__str__), so it
                        # happens here, under the time limit, not on the host.
                        state.error = self.describe(exc)
                    except BaseException:
                        state.error = ExecutionError(type(exc).__name__, "")
        except BaseException as late:
            # A cancellation that lands while the error above is handled (the code caught the first one and
            # failed again) must not end this thread with an uncaught exception: Python's thread hook (and a
            # test runner's) would format its chain, as deep as the recursion limit.
            _cap_chain(late)
            if state.error is None:
                state.error = ExecutionError(type(late).__name__, "")
        finally:
            events.put(("done", None))

    def describe(self, exc: BaseException) -> ExecutionError:
        return ExecutionError(type(exc).__name__, _safe_str(exc), self.format_exception(exc))

    def format_exception(self, exc: BaseException) -> str:
        """A Python-style traceback with only the sandbox's own frames."""
        parts: list[str] = []
        seen: set[int] = set()

        def walk(e: BaseException) -> None:
            seen.add(id(e))
            if e.__cause__ is not None and id(e.__cause__) not in seen:
                walk(e.__cause__)
                parts.append("\nThe above exception was the direct cause of the following exception:\n\n")
            elif e.__context__ is not None and not e.__suppress_context__ and id(e.__context__) not in seen:
                walk(e.__context__)
                parts.append("\nDuring handling of the above exception, another exception occurred:\n\n")
            frames = self._frames(e.__traceback__)
            if frames:
                parts.append("Traceback (most recent call last):\n" + "".join(frames))
            name = "TimeoutError" if isinstance(e, TimeLimitExceeded) else type(e).__name__
            message = _safe_str(e)
            parts.append(f"{name}: {message}\n" if message else f"{name}\n")

        walk(exc)
        return "".join(parts).rstrip("\n")

    def _frames(self, tb: types.TracebackType | None) -> list[str]:
        entries: list[tuple[int, str, str]] = []
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_filename == SANDBOX_FILENAME:
                lineno = tb.tb_lineno or 0
                known = self._sources.get(id(code))
                lines = known[1] if known is not None and known[0] is code else []
                line = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
                entries.append((lineno, code.co_name, line))
            tb = tb.tb_next
        out: list[str] = []
        previous, repeats = None, 0
        for entry in entries + [None]:
            if entry is not None and entry == previous:
                repeats += 1
                if repeats < 3:
                    out.append(_frame_text(entry))
                continue
            if repeats >= 3:
                out.append(f"  [Previous line repeated {repeats - 2} more times]\n")
            if entry is None:
                break
            previous, repeats = entry, 0
            out.append(_frame_text(entry))
        return out

    # -- hooks called by sandbox code ------------------------------------------

    def tick(self) -> bool:
        state = self.current
        if state.cancelled:
            state.interrupt()
        return True

    def sleep(self, seconds: float) -> None:
        """``time.sleep`` that wakes up when the run is cancelled."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(f"'{type(seconds).__name__}' object cannot be interpreted as a number of seconds")
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        state = self.current
        if state.cancel_event.wait(min(float(seconds), threading.TIMEOUT_MAX)) or state.cancelled:
            state.interrupt()

    def make_printer(self, _getattr: Any = None) -> _Printer:
        return _Printer(self)

    def display(self, value: Any) -> None:
        """Record the value of the trailing expression, like a notebook cell."""
        if value is None:
            return
        limit = self.sandbox.output_limit
        text = repr(value)
        truncated = len(text) > limit
        if truncated:
            capped = CappedText(limit)
            capped.write(text)
            text = capped.getvalue()
        data: dict[str, str | bytes] = {}
        repr_html = getattr(type(value), "_repr_html_", None)
        if callable(repr_html) and not self.class_factory.owns(type(value)):
            try:
                html = value._repr_html_()
            except Exception:  # a failing rich repr must not fail the run; text/plain remains
                html = None
            if isinstance(html, str) and html:
                if len(html) <= limit:
                    data["text/html"] = html
                else:
                    truncated = True
        data["text/plain"] = text
        self.current.add_output(Output(data=data, kind="result"), truncated)

    def no_input(self, prompt: Any = "") -> NoReturn:
        raise RuntimeError(_INPUT_MESSAGE)

    def call_host(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        state = self.current
        if state.cancelled:
            state.interrupt()
        # The same codec as the kernel backends: the host never sees sandbox
        # objects, the sandbox never sees host objects, and the types are the same.
        try:
            call_args, call_kwargs = codec.loads(codec.dumps((tuple(args), dict(kwargs))))
        except codec.CodecError as exc:
            raise ValueError(f"{name}(): the arguments cannot be sent to the host: {exc}") from None
        future = self.sandbox._submit_call(name, list(call_args), call_kwargs)
        while True:
            try:
                record, error = future.result(timeout=_CALL_POLL)
                break
            except concurrent.futures.TimeoutError:
                if state.cancelled:  # the call keeps running on the host; we stop waiting
                    state.interrupt()
        state.record_call(record)
        if error is not None:
            raise codec.as_tool_error(codec.decode_exception(codec.encode_exception(error)))
        try:
            return codec.loads(codec.dumps(record.result))
        except codec.CodecError as exc:
            raise ValueError(f"the result of {name!r} cannot be sent to the sandbox: {exc}") from None

    # -- guards -----------------------------------------------------------------

    def guarded_getattr(self, obj: Any, name: str, default: Any = _MISSING) -> Any:
        """``getattr`` for sandbox code: no ``_`` names, no disallowed modules."""
        if type(name) is not str:
            raise TypeError("attribute name must be a string")
        if name in _READABLE_DUNDERS:
            return getattr(obj, name) if default is _MISSING else getattr(obj, name, default)
        if name in ("format", "format_map") and isinstance(obj, str):
            if name == "format":
                return lambda *args, **kwargs: self._formatter.vformat(obj, args, kwargs)
            return lambda mapping: self._formatter.vformat(obj, (), mapping)
        try:
            value = safer_getattr(obj, name, raise_)
        except AttributeError:
            if default is _MISSING:
                raise
            return default
        if isinstance(value, types.ModuleType):
            return self.checked_module(value)
        if name in _IO_NAMES:
            return self._maybe_confine_io(obj, name, value)
        return value

    def guarded_hasattr(self, obj: Any, name: str) -> bool:
        try:
            self.guarded_getattr(obj, name)
        except AttributeError:
            return False
        return True

    def guarded_setattr(self, obj: Any, name: str, value: Any) -> None:
        if type(name) is not str:
            raise TypeError("attribute name must be a string")
        if name.startswith("_"):
            raise AttributeError(f'"{name}" is an invalid attribute name because it starts with "_"')
        setattr(self.guarded_write(obj), name, value)

    def guarded_delattr(self, obj: Any, name: str) -> None:
        if type(name) is not str:
            raise TypeError("attribute name must be a string")
        if name.startswith("_"):
            raise AttributeError(f'"{name}" is an invalid attribute name because it starts with "_"')
        delattr(self.guarded_write(obj), name)

    def guarded_write(self, obj: Any) -> Any:
        """``_write_``: return ``obj`` if sandbox code may modify it, else raise TypeError."""
        kind = type(obj)
        if kind in (dict, list, set, bytearray):
            return obj
        if isinstance(obj, types.ModuleType):
            raise TypeError(f"modules are read-only in the sandbox (tried to modify {obj.__name__!r})")
        if isinstance(obj, type):
            if self.class_factory.owns(obj):
                return obj
            raise TypeError(f"cannot modify class {obj.__name__!r}: only classes defined in the sandbox can change")
        if isinstance(obj, types.FunctionType):
            if obj.__globals__ is self.ns:
                return obj
            raise TypeError(f"cannot modify function {obj.__name__!r}: it was not defined in the sandbox")
        if isinstance(obj, (MutableMapping, MutableSequence, MutableSet)) or self.class_factory.owns(kind):
            return obj
        module = getattr(kind, "__module__", "") or ""
        if self.sandbox._module_allowed(module) and not isinstance(
            obj, (types.BuiltinFunctionType, types.MethodType, property)
        ):
            return obj  # DataFrames, arrays, Counters, Decimal contexts, ...
        raise TypeError(
            f"cannot modify {kind.__name__!r} objects in the sandbox: only containers, instances of "
            "classes defined in the sandbox and objects of the allowed libraries can change"
        )

    def inplace_item(self, obj: Any, key: Any, op: str, value: Any) -> None:
        target = self.guarded_write(obj)
        target[key] = _inplacevar(op, obj[key], value)

    def inplace_attr(self, obj: Any, name: str, op: str, value: Any) -> None:
        current = self.guarded_getattr(obj, name)
        self.guarded_setattr(obj, name, _inplacevar(op, current, value))

    def checked_module(self, module: types.ModuleType) -> types.ModuleType:
        """A module reached as an attribute (``typing.sys``) must be importable too."""
        if any(module is proxy for proxy in self.proxies.values()):
            return module
        name = module.__name__
        if name in self.proxies and self.sandbox._module_allowed(name):
            return self.proxies[name]
        if self.sandbox._module_allowed(name):
            return module
        raise AttributeError(f"module {name!r} is not available in the restricted sandbox")

    def guarded_import(
        self,
        name: str,
        globals: Any = None,
        locals: Any = None,
        fromlist: Iterable[str] | None = (),
        level: int = 0,
    ) -> Any:
        """``__import__`` limited to the allowlist (and ``__future__``)."""
        if level != 0:
            raise ImportError("relative imports are not available in the restricted sandbox")
        fromlist = tuple(fromlist or ())
        allowed = self.sandbox._module_allowed
        if name == "__future__":
            return builtins.__import__(name, None, None, fromlist, 0)
        if name in self.proxies and allowed(name):
            return self.proxies[name]
        # `from pkg import sub` is fine when only "pkg.sub" is listed.
        if not allowed(name) and not (fromlist and all(allowed(f"{name}.{item}") for item in fromlist)):
            raise ImportError(
                f"import of {name!r} is not allowed in the restricted sandbox; "
                f"allowed modules: {', '.join(self.sandbox.allowed_imports)}"
            )
        top = name.partition(".")[0]
        if not fromlist:
            if not allowed(top):
                parent, _, leaf = name.rpartition(".")
                raise ImportError(f"only {name!r} is allowed, not {top!r}: write 'from {parent} import {leaf}'")
            return builtins.__import__(name, None, None, (), 0)
        module = builtins.__import__(name, None, None, fromlist, 0)
        # `from typing import sys` must not hand out a module that `import sys`
        # would refuse, so the names are fetched and checked here.
        names: dict[str, Any] = {}
        for item in fromlist:
            try:
                value = getattr(module, item)
            except AttributeError:
                raise ImportError(f"cannot import name {item!r} from {name!r}") from None
            if isinstance(value, types.ModuleType):
                try:
                    value = self.checked_module(value)
                except AttributeError as exc:
                    raise ImportError(str(exc)) from None
            names[item] = value
        return types.SimpleNamespace(**names)

    def guarded_open(
        self,
        file: str | os.PathLike[str],
        mode: str = "r",
        buffering: int = -1,
        encoding: str | None = None,
        errors: str | None = None,
        newline: str | None = None,
    ) -> Any:
        """``open`` limited to paths inside the working directory (relative paths start there)."""
        if not isinstance(file, (str, os.PathLike)):
            raise TypeError("open() needs a path (str); file descriptors are not available in the sandbox")
        path = self.sandbox._resolve_for_code(file)
        return builtins.open(path, mode, buffering, encoding, errors, newline)

    def _maybe_confine_io(self, obj: Any, name: str, func: Any) -> Any:
        owner = obj.__name__ if isinstance(obj, types.ModuleType) else (type(obj).__module__ or "")
        top = owner.partition(".")[0]
        if top == "pandas":
            applies = name in _PANDAS_READERS if isinstance(obj, types.ModuleType) else name in _PANDAS_WRITERS
        elif top == "numpy":
            applies = name in _NUMPY_IO
        else:
            applies = False
        if not applies or not callable(func):
            return func
        resolve = self.sandbox._resolve_for_code

        def confined(*args: Any, **kwargs: Any) -> Any:
            if args and isinstance(args[0], (str, os.PathLike)):
                args = (str(resolve(args[0], urls=False)),) + args[1:]
            for key in _PATH_KEYWORDS & kwargs.keys():
                if isinstance(kwargs[key], (str, os.PathLike)):
                    kwargs[key] = str(resolve(kwargs[key], urls=False))
            return func(*args, **kwargs)

        confined.__name__ = confined.__qualname__ = name
        confined.__doc__ = getattr(func, "__doc__", None)
        return confined


def _identity(obj: Any) -> Any:
    return obj


def _apply(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return func(*args, **kwargs)


def _inplacevar(op: str, target: Any, value: Any) -> Any:
    try:
        fn = _INPLACE_OPS[op]
    except KeyError:
        raise SyntaxError(f"unsupported augmented assignment {op!r}") from None
    return fn(target, value)


def _frame_text(entry: tuple[int, str, str]) -> str:
    lineno, name, line = entry
    text = f'  File "{SANDBOX_FILENAME}", line {lineno}, in {name}\n'
    return text + (f"    {line}\n" if line else "")


def _ends_with_semicolon(stmt: ast.stmt, lines: list[str]) -> bool:
    # Like a notebook, `expr;` on the last line suppresses the displayed value.
    end_line, end_col = stmt.end_lineno, stmt.end_col_offset
    if end_line is None or end_col is None or end_line > len(lines):
        return False
    return lines[end_line - 1][end_col:].lstrip().startswith(";")


def _syntax_error(exc: SyntaxError) -> ExecutionError:
    lineno = exc.lineno or 0
    message = f"{exc.msg} (line {lineno})" if lineno else str(exc.msg)
    tb = [f'  File "{SANDBOX_FILENAME}", line {lineno}']
    if exc.text:
        text = exc.text.rstrip("\n")
        stripped = text.lstrip()
        tb.append(f"    {stripped}")
        if exc.offset:
            column = max(exc.offset - 1 - (len(text) - len(stripped)), 0)
            tb.append("    " + " " * column + "^")
    tb.append(f"{type(exc).__name__}: {exc.msg}")
    return ExecutionError(type(exc).__name__, message, "\n".join(tb))


def _pump(
    events: queue.SimpleQueue[tuple[str, Any]],
    deadline: float | None,
    on_output: StreamCallback | None,
    on_call: Callable[[FunctionCall], None] | None,
) -> bool:
    """Deliver the worker's events on the calling thread; True once it is done."""
    while True:
        wait = None if deadline is None else deadline - time.monotonic()
        if wait is not None and wait <= 0:
            return False
        try:
            kind, payload = events.get(timeout=wait)
        except queue.Empty:
            return False
        if kind == "done":
            return True
        if kind == "call":
            if on_call is not None:
                on_call(payload)
        elif on_output is not None:
            on_output(kind, payload)


# --------------------------------------------------------------------------
# The session
# --------------------------------------------------------------------------


class RestrictedSandbox:
    """A stateful Python session run in-process with RestrictedPython.

    **Not a security boundary** (see the module documentation): use it for
    trusted code that orchestrates host functions quickly, without a kernel.

    Example::

        def add(a: int, b: int = 1) -> int:
            "Add two numbers."
            return a + b

        with RestrictedSandbox([add], timeout=10) as sb:
            sb.run("x = add(2)")
            print(sb.run("x * 10").outputs[0].text)   # 30

    Args:
        functions: host functions (callables or :class:`HostFunction`) offered to the code.
        timeout: default time limit of one :meth:`run`, seconds (``None``: no limit).
        output_limit: characters of stdout and of stderr kept per run (head and tail).
        allowed_imports: module names the code may import (a package allows its
            submodules); ``None`` means :data:`DEFAULT_ALLOWED_IMPORTS` plus
            numpy and pandas when installed.
        workdir: the working directory; ``None`` makes a temporary one that
            :meth:`close` removes. A given directory is created if missing and never removed.
        function_timeout: default time limit of one host-function call, seconds.
    """

    backend = "restricted"

    def __init__(
        self,
        functions: Iterable[Callable[..., Any] | HostFunction] = (),
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        allowed_imports: Iterable[str] | None = None,
        workdir: str | os.PathLike[str] | None = None,
        function_timeout: float | None = 60.0,
    ) -> None:
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout must be positive (or None for no limit)")
        host_functions = as_host_functions(functions)
        _check_function_names(host_functions.values())
        self.timeout = timeout
        self.output_limit = output_limit
        if allowed_imports is None:
            names = set(DEFAULT_ALLOWED_IMPORTS)
            names.update(m for m in _OPTIONAL_DATA_MODULES if importlib.util.find_spec(m) is not None)
        else:
            names = set(allowed_imports)
            bad = [n for n in names if not isinstance(n, str) or not all(p.isidentifier() for p in n.split("."))]
            if bad:
                raise ValueError(f"allowed_imports must be module names, got {bad!r}")
        #: The importable modules, sorted (a package allows its submodules).
        self.allowed_imports: tuple[str, ...] = tuple(sorted(names))
        self._allowed = frozenset(names)

        if workdir is None:
            root = Path(tempfile.mkdtemp(prefix="codeact-restricted-"))
            # Removes the directory even if close() is never called.
            self._cleanup: weakref.finalize | None = weakref.finalize(self, shutil.rmtree, str(root), True)
        else:
            root = Path(workdir).expanduser()
            root.mkdir(parents=True, exist_ok=True)
            self._cleanup = None
        self._root = root.resolve()
        #: The working directory (a host path; the code's relative paths start here).
        self.workdir = str(self._root)

        self._dispatcher = FunctionDispatcher(host_functions.values(), default_timeout=function_timeout)
        self._run_lock = threading.Lock()
        self._state_lock = threading.Lock()  # guards _closed and _runtime
        self._closed = False
        self._restart_notice: str | None = None
        #: Restarts not yet reported (``ExecutionResult.restarts`` of the next run).
        self._restarts: list[KernelRestart] = []
        self._runtime = _Runtime(self)

    # -- running -------------------------------------------------------------

    def run(
        self,
        code: str,
        *,
        timeout: float | None = None,
        on_output: StreamCallback | None = None,
        on_call: Callable[[FunctionCall], None] | None = None,
        list_files: bool = False,
    ) -> ExecutionResult:
        """Run ``code`` in the session's namespace; errors in the code come back in the result.

        ``timeout`` overrides the session's limit for this run. ``on_output``
        receives ``("stdout" | "stderr", text)`` as the code prints (at most
        ``output_limit`` characters per stream are streamed), ``on_call``
        every host-function call record; both are called on this thread.
        Raises :class:`SandboxClosed` after :meth:`close`.
        """
        self._ensure_open()
        with self._run_lock:
            self._ensure_open()
            limit = self.timeout if timeout is None else timeout
            if limit is not None and limit <= 0:
                raise ValueError("timeout must be positive")
            started = time.perf_counter()
            result = ExecutionResult()
            if self._restart_notice is not None:
                result.restarted = True
                result.notices.append(self._restart_notice)
                self._restart_notice = None
            result.restarts, self._restarts = self._restarts, []

            runtime = self._runtime
            code_obj, compile_error = runtime.compile(code)
            if code_obj is None:
                result.error = compile_error
                result.duration = time.perf_counter() - started
                if list_files:
                    result.files = self.list_files()
                return result

            events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
            state = _RunState(
                timeout=limit,
                output_limit=self.output_limit,
                events=events,
                stream=on_output is not None,
                report_calls=on_call is not None,
                stop_flag=runtime.stop_flag,
            )
            runtime.stop_flag[0] = False
            runtime.current = state
            worker = threading.Thread(
                target=runtime.execute, args=(code_obj, state, events), name="restricted-sandbox", daemon=True
            )
            deadline = None if limit is None else time.monotonic() + limit
            worker.start()
            try:
                finished = _pump(events, deadline, on_output, on_call)
                if not finished:
                    state.cancel()
                    finished = _pump(events, time.monotonic() + _INTERRUPT_GRACE, on_output, on_call)
            except BaseException:
                # A callback failed or the host was interrupted (Ctrl-C): stop
                # the code before handing the exception to the caller.
                state.cancel()
                worker.join(_INTERRUPT_GRACE)
                state.close()
                if worker.is_alive():
                    self._abandon(runtime)
                else:
                    runtime.current = _RunState.idle()
                raise
            state.close()

            result.stdout = state.stdout.getvalue()
            result.stderr = state.stderr.getvalue()
            result.outputs = list(state.outputs)
            result.calls = list(state.calls)
            result.truncated = state.stdout.truncated or state.stderr.truncated or state.outputs_truncated
            for name, text in (("stdout", state.stdout), ("stderr", state.stderr)):
                if text.truncated:
                    result.notices.append(
                        f"{name} was longer than {self.output_limit} characters: "
                        f"{text.dropped} characters in the middle were cut (head and tail kept)"
                    )
            if state.outputs_truncated:
                result.notices.append("a displayed value was too long and was cut")
            if state.stream_cut:
                result.notices.append(f"only the first {self.output_limit} characters per stream were streamed")

            if finished and state.by_request:
                runtime.current = _RunState.idle()
                result.error = ExecutionError("KeyboardInterrupt", "the code was interrupted by the host")
            elif not finished or state.interrupted:
                result.timed_out = True
                if state.closed_by_host or limit is None:
                    message = "the run was stopped because the sandbox was closed"
                else:
                    message = f"the code ran longer than the time limit of {limit:g} s and was stopped"
                if not finished:
                    self._abandon(runtime)
                    result.restarts, self._restarts = result.restarts + self._restarts, []
                    message += (
                        "; it could not be interrupted (probably a long call into C code or blocking I/O), "
                        "so the session was restarted: variables, functions and imports are gone, files are kept"
                    )
                    result.restarted = True
                    result.kernel_lost = "the code did not stop when interrupted, so the session was restarted"
                    result.notices.append("The session was restarted after a timeout that could not be "
                                          "interrupted; earlier state is lost.")
                traceback_text = state.error.traceback if state.error is not None else ""
                result.error = ExecutionError("TimeoutError", message, traceback_text)
            else:
                runtime.current = _RunState.idle()
                result.error = state.error
            result.duration = time.perf_counter() - started
            if list_files:
                result.files = self.list_files()
            return result

    def interrupt(self) -> None:
        """Stop the code running now (callable from any thread); the run returns a KeyboardInterrupt error.

        The namespace is kept. Does nothing when no code runs.
        """
        state = self._runtime.current
        if not state.closed_by_host:
            state.by_request = True
            state.cancel()

    def _abandon(self, runtime: _Runtime) -> None:
        # The worker is still inside uninterruptible code. Its runtime keeps
        # the cancelled state, so it stops at its next interruption point and
        # can only ever touch the old namespace.
        with self._state_lock:
            if self._runtime is runtime and not self._closed:
                with timed_restart("the code could not be interrupted", self._restarts):
                    self._runtime = _Runtime(self)

    # -- host functions --------------------------------------------------------

    def register(self, *functions: Callable[..., Any] | HostFunction) -> None:
        """Offer more host functions; they are callable from the next statement on."""
        self._ensure_open()
        host_functions = as_host_functions(functions)
        _check_function_names(host_functions.values())
        for hf in self._dispatcher.register(*host_functions.values()):
            self._runtime.install_stub(hf)

    def unregister(self, *names: str) -> None:
        """Withdraw host functions; calling them afterwards raises NameError in the sandbox."""
        self._ensure_open()
        self._dispatcher.unregister(*names)
        for name in names:
            self._runtime.remove_stub(name)

    def variables(self) -> dict[str, Any]:
        """The session's variables now, by name: what the code bound, as a notebook's variable list shows it.

        Names that start with ``_``, the host functions' stubs, modules, classes and functions are
        left out. The values are the live objects (this backend shares the host process): reading
        them runs no sandbox code, but their ``repr`` may (see :meth:`owns_type`).
        """
        self._ensure_open()
        runtime = self._runtime
        skip = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
        return {name: value for name, value in list(runtime.ns.items())  # the stubs are functions too
                if isinstance(name, str) and not name.startswith("_") and not isinstance(value, skip)}

    def owns_type(self, kind: type) -> bool:
        """True for a class the session's code defined (calling its methods runs sandbox code)."""
        return self._runtime.class_factory.owns(kind)

    def _submit_call(self, name: str, args: list[Any], kwargs: dict[str, Any]
                     ) -> concurrent.futures.Future[tuple[FunctionCall, BaseException | None]]:
        # Each call runs on its own daemon thread so that the sandbox thread
        # can stop waiting when the run is cancelled; a call that never
        # returns then holds up neither later calls nor the host's exit.
        if self._closed:
            raise SandboxClosed("the sandbox was closed")
        future: concurrent.futures.Future[tuple[FunctionCall, BaseException | None]] = concurrent.futures.Future()

        def target() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(self._dispatcher.call_in_process(name, args, kwargs))
            except BaseException as exc:  # dispatcher.call only fails on BaseException; hand it over
                future.set_exception(exc)

        threading.Thread(target=target, daemon=True, name=f"restricted-call-{name}").start()
        return future

    # -- files ---------------------------------------------------------------

    def upload(self, source: str | os.PathLike[str] | bytes, dest: str | None = None) -> str:
        """Copy a host file (or bytes) into the working directory; returns its path.

        ``dest`` is relative to the working directory (default: the source's
        file name); a path that leaves the directory raises FileTransferError.
        """
        self._ensure_open()
        if isinstance(source, (bytes, bytearray, memoryview)):
            if dest is None:
                raise FileTransferError("upload(bytes) needs dest=, the file name to create")
            data: bytes | None = bytes(source)
            src = None
        else:
            src = Path(source).expanduser()
            if not src.is_file():
                raise FileTransferError(f"cannot upload {str(src)!r}: no such file")
            data = None
            dest = dest if dest is not None else src.name
        target = self._resolve_for_transfer(dest)
        if target == self._root or target.is_dir():
            raise FileTransferError(f"cannot upload to {dest!r}: it is a directory")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if src is not None:
                shutil.copyfile(src, target)
            else:
                target.write_bytes(data or b"")
        except OSError as exc:
            raise FileTransferError(f"cannot upload to {dest!r}: {exc}") from exc
        return str(target)

    def download(self, path: str) -> bytes:
        """Read a file from the working directory (relative paths start there)."""
        self._ensure_open()
        target = self._resolve_for_transfer(path)
        if not target.is_file():
            raise FileTransferError(f"cannot download {path!r}: no such file in the sandbox")
        try:
            return target.read_bytes()
        except OSError as exc:
            raise FileTransferError(f"cannot download {path!r}: {exc}") from exc

    def list_files(self) -> list[FileInfo]:
        """Every file under the working directory, sorted by path."""
        self._ensure_open()
        return walk_files(self._root)

    def _resolve(self, path: str | os.PathLike[str]) -> Path | None:
        raw = os.fspath(path)
        if not isinstance(raw, str):
            raise TypeError("paths must be str")
        candidate = Path(raw).expanduser() if raw.startswith("~") else Path(raw)
        if not candidate.is_absolute():
            candidate = self._root / candidate
        resolved = Path(os.path.realpath(candidate))  # symlinks resolved before the check
        if resolved == self._root or resolved.is_relative_to(self._root):
            return resolved
        return None

    def _resolve_for_code(self, path: str | os.PathLike[str], *, urls: bool = True) -> Path:
        if not urls and "://" in os.fspath(path):
            raise PermissionError(
                f"{os.fspath(path)}: URLs cannot be read in the restricted sandbox; fetch data with a host function"
            )
        resolved = self._resolve(path)
        if resolved is None:
            raise PermissionError(f"{os.fspath(path)}: outside the sandbox working directory ({self.workdir})")
        return resolved

    def _resolve_for_transfer(self, path: str) -> Path:
        resolved = self._resolve(path)
        if resolved is None:
            raise FileTransferError(f"{path!r} is outside the sandbox working directory ({self.workdir})")
        return resolved

    def _module_allowed(self, name: str) -> bool:
        parts = name.split(".")
        return any(".".join(parts[:i]) in self._allowed for i in range(1, len(parts) + 1))

    # -- lifecycle ---------------------------------------------------------------

    def restart(self) -> None:
        """Forget all variables: a fresh namespace with the host functions; files stay.

        Waits for a run in progress on another thread to finish. The next
        result has ``restarted=True`` and a notice.
        """
        self._ensure_open()
        with self._run_lock:
            with self._state_lock:
                self._ensure_open()
                self._runtime.current.cancel()  # an abandoned worker, if any, stays stopped
                with timed_restart("asked for", self._restarts):
                    self._runtime = _Runtime(self)
            self._restart_notice = (
                "The session was restarted: variables, functions and imports from earlier runs are gone; "
                "files are kept."
            )

    def close(self) -> None:
        """Stop a run in progress and remove the temporary workdir. Idempotent."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
            self._runtime.current.cancel(closing=True)
        self._dispatcher.close()
        if self._cleanup is not None:
            self._cleanup()

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def snapshot(self, **options: Any) -> NoReturn:
        """Not supported: raises :class:`~sandbox.snapshot.SnapshotError` (use the docker or local backend)."""
        from .snapshot import SnapshotError

        raise SnapshotError("the restricted backend cannot save sessions: its namespace lives in this process, "
                            "among the host's own objects; use the docker (or local) backend for durable sessions")

    @classmethod
    def restore(cls, snapshot: Any, functions: Any = (), **options: Any) -> NoReturn:
        """Not supported: raises :class:`~sandbox.snapshot.SnapshotError` (restore into DockerSandbox instead)."""
        from .snapshot import SnapshotError

        raise SnapshotError("the restricted backend cannot restore sessions: a snapshot's variables are unpickled, "
                            "which runs code the session wrote; restore it with DockerSandbox.restore(...)")

    def _ensure_open(self) -> None:
        if self._closed:
            raise SandboxClosed("this restricted sandbox was closed; open a new one")

    def __enter__(self) -> "RestrictedSandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<RestrictedSandbox {state} workdir={self.workdir!r} functions={sorted(self._dispatcher.functions)}>"


def _check_function_names(functions: Iterable[HostFunction]) -> None:
    for hf in functions:
        if hf.name.startswith("_") or hf.name in FORBIDDEN_FUNC_NAMES or hf.name in ("exec", "eval"):
            raise FunctionRegistrationError(
                f"host function name {hf.name!r} cannot be used by RestrictedPython code "
                "(no leading '_', not print/printed/exec/eval); pass name=... to HostFunction"
            )


