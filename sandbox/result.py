"""What one execution returns: the same types for every backend."""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal, Mapping

#: MIME types kept from rich outputs, best first.
RICH_MIME_TYPES = ("image/png", "image/svg+xml", "text/html", "text/markdown", "text/plain")

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def strip_ansi(text: str) -> str:
    """Remove terminal colour codes (IPython tracebacks carry them)."""
    return _ANSI.sub("", text)


@dataclass(frozen=True)
class Output:
    """One rich output (a ``display_data`` or an ``execute_result``).

    ``data`` maps MIME type to content: ``bytes`` for images (PNG is decoded
    from base64), ``str`` for text formats.
    """

    data: Mapping[str, str | bytes]
    kind: Literal["display", "result"] = "display"

    @property
    def mime(self) -> str:
        """The richest MIME type present (PNG before SVG before HTML before text)."""
        for mime in RICH_MIME_TYPES:
            if mime in self.data:
                return mime
        return next(iter(self.data), "text/plain")

    @property
    def text(self) -> str | None:
        value = self.data.get("text/plain")
        return value if isinstance(value, str) else None

    @property
    def is_image(self) -> bool:
        return any(m.startswith("image/") for m in self.data)


@dataclass(frozen=True)
class ExecutionError:
    """An exception raised by the sandboxed code (or a fault that ended the run).

    ``traceback`` is plain text without colour codes and without frames from
    the kernel or the sandbox runtime.
    """

    type: str
    message: str
    traceback: str = ""

    def __str__(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type


@dataclass(frozen=True)
class FileInfo:
    """A file in the sandbox's working directory."""

    path: str  # relative to the working directory, "/"-separated
    size: int
    mtime: float


@dataclass(frozen=True)
class Elided:
    """Stands in for a value the host did not keep (the run's byte budget for call records was spent)."""

    what: str
    size: int

    def __repr__(self) -> str:
        return f"<{self.what} not kept: {self.size:,} bytes>"


@dataclass(frozen=True)
class FunctionCall:
    """One call from sandboxed code to a host function."""

    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    result: Any = None
    error: ExecutionError | None = None
    duration: float = 0.0
    started: float = 0.0  # time.time() when the call arrived on the host


@dataclass(frozen=True)
class KernelRestart:
    """A fresh kernel the sandbox started for a run (the old one died, hung, or was asked to restart)."""

    started: float  # time.time() when the restart began
    seconds: float
    reason: str


@contextlib.contextmanager
def timed_restart(reason: str, into: list[KernelRestart]) -> Iterator[None]:
    """Time the restart the block makes and add it to ``into`` as a :class:`KernelRestart`, also if it raises."""
    started, clock = time.time(), time.perf_counter()
    try:
        yield
    finally:
        into.append(KernelRestart(started, time.perf_counter() - clock, reason))


@dataclass
class ExecutionResult:
    """The outcome of :meth:`Sandbox.run`.

    Example::

        r = sb.run("print(1 + 1)")
        assert r.ok and r.stdout == "2\\n"
    """

    stdout: str = ""
    stderr: str = ""
    error: ExecutionError | None = None
    outputs: list[Output] = field(default_factory=list)
    duration: float = 0.0
    #: True when stdout/stderr were cut (head and tail kept) or outputs dropped.
    truncated: bool = False
    #: True when the run hit its time limit.
    timed_out: bool = False
    #: True when the kernel was restarted before or during this run: earlier state is gone.
    restarted: bool = False
    #: Why the session's variables, imports and definitions were lost during this run, else None: its kernel
    #: died (out of memory, killed), its environment went away (container removed, engine restarted), or it was
    #: restarted because the code did not stop. The next run starts a fresh kernel.
    kernel_lost: str | None = None
    #: The kernel restarts this run saw (before it, during it, or asked for since the last run), in order.
    restarts: list[KernelRestart] = field(default_factory=list)
    #: Human-readable remarks from the sandbox (restarts, OOM, truncation, ...).
    notices: list[str] = field(default_factory=list)
    #: Host-function calls made by this run, in order.
    calls: list[FunctionCall] = field(default_factory=list)
    #: Files in the working directory after the run, when ``run(..., list_files=True)``.
    files: list[FileInfo] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def images(self) -> list[bytes]:
        """PNG images displayed by the run."""
        return [png for o in self.outputs if isinstance(png := o.data.get("image/png"), bytes)]


class CappedText:
    """Accumulates a stream of text, keeping a head and a tail within a byte budget.

    The host never holds more than about ``limit`` characters however much
    the sandbox prints; what is cut is counted and reported.
    """

    def __init__(self, limit: int) -> None:
        self.limit = max(limit, 2)
        self._head_limit = self.limit // 2
        self._head: list[str] = []
        self._head_len = 0
        self._tail: list[str] = []
        self._tail_len = 0
        self.dropped = 0

    def write(self, text: str) -> None:
        if self._head_len < self._head_limit:
            take = text[: self._head_limit - self._head_len]
            self._head.append(take)
            self._head_len += len(take)
            text = text[len(take):]
            if not text:
                return
        self._tail.append(text)
        self._tail_len += len(text)
        tail_limit = self.limit - self._head_limit
        if self._tail_len > 2 * tail_limit:
            self._compact(tail_limit)

    def _compact(self, tail_limit: int) -> None:
        joined = "".join(self._tail)
        self.dropped += len(joined) - tail_limit
        self._tail = [joined[-tail_limit:]]
        self._tail_len = tail_limit

    @property
    def truncated(self) -> bool:
        return self.dropped > 0 or self._tail_len > self.limit - self._head_limit

    def getvalue(self) -> str:
        tail_limit = self.limit - self._head_limit
        if self._tail_len > tail_limit:
            self._compact(tail_limit)
        head = "".join(self._head)
        tail = "".join(self._tail)
        if not self.dropped:
            return head + tail
        return f"{head}\n[... {self.dropped} characters cut ...]\n{tail}"
