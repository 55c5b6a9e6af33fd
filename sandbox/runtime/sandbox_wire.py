"""The framing spoken between the host and the sandbox over byte streams.

Standard library only: the same file runs inside the sandbox and on the host
(imported as ``sandbox.runtime.sandbox_wire``).

Two streams per session, both the sandbox processes' own stdin/stdout (a
container's attach stream and a ``docker exec`` stream, or a local
subprocess's pipes): no socket directory, no network, no file shared with the
host. Every frame is::

    kind: 1 byte | length: 4 bytes, big-endian | body: ``length`` bytes

The supervisor's stream (:mod:`sandbox_init`):

``K`` host: prepare a kernel (JSON: the parent of its directory); the supervisor
      kills the previous kernel and what it left, and answers ``P`` (JSON: connection file).
``H`` a prepared kernel's messages reach the host (JSON: its pid, and ``watch``: whether
      the supervisor will say ``D`` when it ends).
``D`` the watched kernel process ended (JSON: its pid, ``oom``: whether the container's
      memory cgroup counted an out-of-memory kill since it was ready, and ``code``, its exit
      code, where the supervisor started it). A hint: the host bounds it, and uses it only
      to say why the kernel ended.
``J`` a Jupyter message, both ways: one channel byte (``s`` shell, ``i`` iopub,
      ``n`` stdin, ``c`` control) and the message's ZMQ parts (:func:`pack_parts`).
``X`` host: interrupt the kernel (SIGINT).

The kernel's stream (host-function calls; :mod:`sandbox_runtime`):

``F`` kernel: a call: call id (u32), name (u16 length + UTF-8), codec payload.
``A`` kernel: a call it abandoned (interrupted while waiting): call id (u32).
``R`` host: a call's reply: call id (u32), status byte (0 value, 1 error), codec payload.
``S`` kernel: the code of a run is about to start (empty): written before the first line of the
      code runs, so the host knows not to run that code again on another kernel.
``E`` kernel: the code of a run has ended (its Jupyter message id, ASCII, at most 63 bytes):
      written after the code's last line and before the kernel's reply, so the host reads
      everything the code wrote on this stream before it takes the run as over (the reply
      comes on the supervisor's stream, which is not ordered with this one).
``P`` host: the host functions and settings a kernel installs before it answers anything
      (JSON), where the supervisor started the kernel: the first frame on its stream, once.

A receiver refuses frames longer than its limit: the host treats everything
the sandbox sends as hostile (see :class:`FrameParser`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

#: A piece of a frame: bytes, bytearray or memoryview (any buffer; viewed as bytes).
Chunk = bytes | bytearray | memoryview

KIND_HELLO = b"H"
KIND_JUPYTER = b"J"
KIND_CALL = b"F"
KIND_ABANDON = b"A"
KIND_REPLY = b"R"
KIND_INTERRUPT = b"X"
KIND_RESTART = b"K"
KIND_PREPARED = b"P"
KIND_DIED = b"D"
KIND_STARTED = b"S"
KIND_ENDED = b"E"

CHANNELS = {b"s": "shell", b"i": "iopub", b"n": "stdin", b"c": "control"}
CHANNEL_BYTES = {name: code for code, name in CHANNELS.items()}

REPLY_VALUE = 0
REPLY_ERROR = 1

_HEADER = struct.Struct(">cI")
HEADER_SIZE = _HEADER.size
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
#: Largest frame body the format can express.
MAX_FRAME = 2**32 - 1


class WireError(ValueError):
    """A frame that breaks the format (too long, truncated, wrong shape)."""


def as_bytes_view(chunk: Chunk) -> memoryview:
    """A byte-sized view of any bytes-like chunk (no copy)."""
    view = chunk if isinstance(chunk, memoryview) else memoryview(chunk)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def frame(kind: bytes, *chunks: Chunk) -> list[bytes | memoryview]:
    """The chunks of one frame: a header, then ``chunks`` as they are (no copy)."""
    views = [as_bytes_view(c) for c in chunks]
    size = sum(len(v) for v in views)
    if size > MAX_FRAME:
        raise WireError("a frame of %d bytes is longer than the format allows" % size)
    return [_HEADER.pack(kind, size)] + [v for v in views if len(v)]


def pack_parts(channel: str, parts: Sequence[Chunk]) -> list[bytes | memoryview]:
    """The body chunks of a ``J`` frame: channel byte, part count, then each part with its length."""
    chunks: list[bytes | memoryview] = [CHANNEL_BYTES[channel], _U32.pack(len(parts))]
    for part in parts:
        view = as_bytes_view(part)
        chunks.append(_U32.pack(len(view)))
        chunks.append(view)
    return chunks


def unpack_parts(body: Chunk, *, max_parts: int = 64) -> tuple[str, list[bytes]]:
    """``(channel name, [bytes, ...])`` from a ``J`` frame's body; raises :class:`WireError`."""
    view = memoryview(body)
    if len(view) < 5:
        raise WireError("a Jupyter frame shorter than its header")
    channel = CHANNELS.get(bytes(view[:1]))
    if channel is None:
        raise WireError("a Jupyter frame for an unknown channel %r" % bytes(view[:1]))
    (count,) = _U32.unpack_from(view, 1)
    if count > max_parts:
        raise WireError("a Jupyter frame with %d parts (at most %d)" % (count, max_parts))
    parts = []
    offset = 5
    for _ in range(count):
        if offset + 4 > len(view):
            raise WireError("a Jupyter frame cut short")
        (size,) = _U32.unpack_from(view, offset)
        offset += 4
        if offset + size > len(view):
            raise WireError("a Jupyter frame part longer than the frame")
        parts.append(bytes(view[offset:offset + size]))
        offset += size
    if offset != len(view):
        raise WireError("trailing bytes after a Jupyter frame's parts")
    return channel, parts


def pack_call(call_id: int, name: str, payload_chunks: Iterable[Chunk]) -> list[Chunk]:
    encoded = name.encode("utf-8")
    return [_U32.pack(call_id), _U16.pack(len(encoded)), encoded] + list(payload_chunks)


def unpack_call(body: Chunk, *, max_name: int = 256) -> tuple[int, str, memoryview]:
    """``(call id, name, payload memoryview)`` from an ``F`` frame's body."""
    view = memoryview(body)
    if len(view) < 6:
        raise WireError("a call frame shorter than its header")
    (call_id,) = _U32.unpack_from(view, 0)
    (name_len,) = _U16.unpack_from(view, 4)
    if name_len > max_name or 6 + name_len > len(view):
        raise WireError("a call frame with a bad name length")
    try:
        name = bytes(view[6:6 + name_len]).decode("utf-8")
    except UnicodeDecodeError:
        raise WireError("a call frame whose name is not UTF-8") from None
    return call_id, name, view[6 + name_len:]


def pack_reply(call_id: int, status: int, payload_chunks: Iterable[Chunk]) -> list[Chunk]:
    return [_U32.pack(call_id), bytes((status,))] + list(payload_chunks)


def unpack_reply(body: Chunk) -> tuple[int, int, memoryview]:
    view = memoryview(body)
    if len(view) < 5:
        raise WireError("a reply frame shorter than its header")
    (call_id,) = _U32.unpack_from(view, 0)
    return call_id, view[4], view[5:]


def pack_u32(value: int) -> bytes:
    return _U32.pack(value)


def unpack_u32(body: Chunk) -> int:
    view = memoryview(body)
    if len(view) != 4:
        raise WireError("expected a 4-byte frame body")
    return _U32.unpack_from(view, 0)[0]


class FrameParser:
    """Cuts a byte stream into frames, refusing any longer than ``max_frame``.

    Feed it what arrives; it returns complete ``(kind, body)`` pairs. A frame's
    body is collected into one buffer of its announced size (checked against
    the limit first), so a large frame costs one allocation, and the parser
    never holds more than one frame plus one read.
    """

    def __init__(self, max_frame: int, kinds: set[bytes] | frozenset[bytes] | None = None) -> None:
        self.max_frame = max_frame
        self.kinds = kinds
        self._header = bytearray()
        self._kind = b""  # of the frame being filled (while _body is not None)
        self._body: bytearray | None = None
        self._filled = 0

    @property
    def pending(self) -> bool:
        """True while a frame is half received."""
        return bool(self._header) or self._body is not None

    def feed(self, data: Chunk) -> list[tuple[bytes, bytearray]]:
        frames: list[tuple[bytes, bytearray]] = []
        view = memoryview(data)
        while len(view):
            if self._body is None:
                need = HEADER_SIZE - len(self._header)
                self._header += view[:need]
                view = view[need:]
                if len(self._header) < HEADER_SIZE:
                    break
                kind, size = _HEADER.unpack(bytes(self._header))
                self._header = bytearray()
                if self.kinds is not None and kind not in self.kinds:
                    raise WireError("unknown frame kind %r" % kind)
                if size > self.max_frame:
                    raise WireError("a frame of %d bytes (the limit is %d)" % (size, self.max_frame))
                self._kind, self._body, self._filled = kind, bytearray(size), 0
            take = min(len(view), len(self._body) - self._filled)
            self._body[self._filled:self._filled + take] = view[:take]
            self._filled += take
            view = view[take:]
            if self._filled == len(self._body):
                frames.append((self._kind, self._body))
                self._kind, self._body = b"", None
        return frames
