"""The host end of a kernel's byte stream: one I/O thread, framed messages, hard limits.

A kernel process is reached through a byte stream it cannot see past: a
Docker container's attach stream (stdin in, stdout and stderr multiplexed
out) or a local subprocess's pipes. :class:`Connection` owns that stream:

* one thread reads it, cuts it into frames (:mod:`sandbox_wire`) no longer
  than ``max_frame`` and hands each to the session's ``on_frame``; the
  kernel's own stderr is kept as a short tail for crash reports;
* :meth:`Connection.send` writes without ever blocking the caller for long:
  what the kernel does not read is queued, up to ``max_queued`` bytes, and
  what was queued must be read within ``write_stall`` seconds (plus a second
  per MiB of it): a kernel that reads too little, or too slowly to keep up
  with what it asks for, is reported as broken. Reading a byte now and then
  is not progress: the backlog must go;
* anything malformed, oversized or unexpected ends the connection with a
  reason (``on_closed``); nothing the kernel sends raises out of here.

Everything that arrives is hostile input: the code in the kernel can write
any bytes to the stream.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import selectors
import socket
import ssl
import struct
import threading
import time
from collections import deque
from typing import Any, Callable, Protocol

from .runtime import sandbox_wire as wire

#: Bytes of the kernel's own stderr kept for crash reports.
STDERR_TAIL = 8192
#: Frames up to this size are joined into one buffer before writing.
_COALESCE = 64 * 1024
# Reads stay below malloc's mmap threshold (128 KiB): a larger read buffer is mapped
# and unmapped on every call, which costs more than the message it carries.
_READ_SIZE = 1 << 16
#: What one queued frame costs the host beyond its bytes (the objects that hold it): counted
#: against ``max_queued``, so that a flood of tiny replies is bounded as well as a few large ones.
_ENTRY_COST = 256
#: The slowest a kernel may read a backlog: ``write_stall`` seconds plus one per this many bytes.
_MIN_READ_RATE = 1 << 20


class Stream(Protocol):
    """A kernel's byte stream as the I/O thread sees it (all methods non-blocking)."""

    #: False when only the I/O thread may touch the stream (TLS: one SSL object, one thread).
    direct_send: bool

    def read_fds(self) -> list[int]:
        """The fds to read now: one that ended while the stream goes on (a pipe's stderr) is left out."""
        ...

    def read(self, fd: int) -> tuple[bytes, bytes] | None:
        """``(stdout bytes, stderr bytes)`` from ``fd``; None at end of stream."""
        ...

    def write_fd(self) -> int: ...

    def send(self, data: memoryview) -> int:
        """Write what the stream takes now; raises BlockingIOError when it takes nothing."""
        ...

    def send_many(self, views: list[memoryview | bytearray]) -> int:
        """Like :meth:`send` for several buffers in one call (gathered write where the stream can)."""
        ...

    def close(self) -> None: ...


class _DockerDemux:
    """Splits Docker's multiplexed attach output (8-byte headers) into stdout and stderr."""

    _HEADER = struct.Struct(">BxxxI")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._stream = 0
        self._left = 0

    def feed(self, data: bytes) -> tuple[bytes, bytes]:
        out, err = bytearray(), bytearray()
        view = memoryview(data)
        while len(view):
            if self._left == 0:
                need = 8 - len(self._buf)
                self._buf += view[:need]
                view = view[need:]
                if len(self._buf) < 8:
                    break
                self._stream, self._left = self._HEADER.unpack(bytes(self._buf))
                self._buf.clear()
                continue
            take = min(self._left, len(view))
            (err if self._stream == 2 else out).extend(view[:take])
            self._left -= take
            view = view[take:]
        return bytes(out), bytes(err)


class SocketStream:
    """A Docker attach socket (Unix, TCP or TLS), stdout and stderr multiplexed."""

    def __init__(self, sock: socket.socket, keepalive: Any = None) -> None:
        self.sock = sock
        self._keepalive = keepalive  # whatever must live as long as the socket
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            # Small frames (a call, a reply) must not wait for Nagle's algorithm on remote engines.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.is_tls = isinstance(sock, ssl.SSLSocket)
        self.direct_send = not self.is_tls
        self._demux = _DockerDemux()

    def read_fds(self) -> list[int]:
        return [self.sock.fileno()]

    def read(self, fd: int) -> tuple[bytes, bytes] | None:
        chunks: list[bytes] = []
        while True:
            try:
                data = self.sock.recv(_READ_SIZE)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError, InterruptedError):
                break
            except OSError as exc:
                if exc.errno in (errno.ECONNRESET, errno.EPIPE) or isinstance(exc, ssl.SSLError):
                    data = b""
                else:
                    raise
            if not data:
                if chunks:
                    break
                return None
            chunks.append(data)
            # TLS keeps decrypted bytes that select() cannot see: drain them now.
            if not (isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()) and len(data) < _READ_SIZE:
                break
        return self._demux.feed(b"".join(chunks))

    def write_fd(self) -> int:
        return self.sock.fileno()

    def send(self, data: memoryview | bytearray) -> int:
        try:
            return self.sock.send(data)
        except ssl.SSLWantWriteError:
            raise BlockingIOError(errno.EAGAIN, "TLS would block") from None
        except ssl.SSLWantReadError:
            raise BlockingIOError(errno.EAGAIN, "TLS would block") from None

    def send_many(self, views: list[memoryview | bytearray]) -> int:
        if self.is_tls or len(views) == 1:
            return self.send(views[0])
        return self.sock.sendmsg(views)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()


class DirectStream:
    """A container kernel's stream on a Unix socket straight into its container (see :mod:`sandbox._netns`).

    Frames go both ways on ``sock``; the kernel's own stderr still arrives on
    the ``docker exec`` stream of its link program (``exec_stream``), whose
    stdout carries nothing (anything there is dropped). The stream ends when
    either ends: the kernel holds both for life. When the socket ends first,
    the kernel's last words may still be on their way through the engine, so
    the exec stream is read on for up to ``drain`` seconds.
    """

    direct_send = True

    def __init__(self, sock: socket.socket, exec_stream: SocketStream, drain: float = 0.5) -> None:
        self.sock = sock
        self.exec = exec_stream
        self.drain = drain
        sock.setblocking(False)
        self._exec_fd = exec_stream.sock.fileno()
        self._socket_ended = False

    def read_fds(self) -> list[int]:
        return [self.sock.fileno(), self._exec_fd]

    def read(self, fd: int) -> tuple[bytes, bytes] | None:
        if fd == self._exec_fd:
            got = self.exec.read(fd)
            return None if got is None else (b"", got[1])
        try:
            data = self.sock.recv(_READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return b"", b""
        except OSError as exc:
            if exc.errno not in (errno.ECONNRESET, errno.EPIPE):
                raise
            data = b""
        if data:
            return data, b""
        if self._socket_ended:
            return None
        # The socket's end is read again at once (the next read ends the stream); first, the kernel's stderr.
        self._socket_ended = True
        return b"", self._drain_exec()

    def _drain_exec(self) -> bytes:
        """The exec stream's stderr until it ends or ``drain`` seconds pass (its tail only)."""
        tail = bytearray()
        deadline = time.monotonic() + self.drain
        with selectors.DefaultSelector() as selector:
            selector.register(self._exec_fd, selectors.EVENT_READ)
            while (left := deadline - time.monotonic()) > 0:
                if not selector.select(left):
                    break
                got = self.exec.read(self._exec_fd)
                if got is None:
                    break
                tail += got[1]
                del tail[:-STDERR_TAIL]
        return bytes(tail)

    def write_fd(self) -> int:
        return self.sock.fileno()

    def send(self, data: memoryview | bytearray) -> int:
        return self.sock.send(data)

    def send_many(self, views: list[memoryview | bytearray]) -> int:
        return self.sock.sendmsg(views) if len(views) > 1 else self.sock.send(views[0])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()
        self.exec.close()


class PipeStream:
    """A local subprocess's stdin, stdout and stderr pipes."""

    direct_send = True

    def __init__(self, stdin: int, stdout: int, stderr: int | None) -> None:
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        for fd in (stdin, stdout) + ((stderr,) if stderr is not None else ()):
            os.set_blocking(fd, False)
        self._open = {stdout} | ({stderr} if stderr is not None else set())

    def read_fds(self) -> list[int]:
        return sorted(self._open)

    def read(self, fd: int) -> tuple[bytes, bytes] | None:
        try:
            data = os.read(fd, _READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return b"", b""
        if not data:
            self._open.discard(fd)
            if fd == self.stdout:
                return None
            return b"", b""
        return (data, b"") if fd == self.stdout else (b"", data)

    def write_fd(self) -> int:
        return self.stdin

    def send(self, data: memoryview) -> int:
        return self.send_many([data])

    def send_many(self, views: list[memoryview | bytearray]) -> int:
        try:
            return os.writev(self.stdin, views)
        except BrokenPipeError:
            raise ConnectionError("the kernel's input is closed") from None

    def close(self) -> None:
        for fd in (self.stdin, self.stdout, self.stderr):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)


FrameHandler = Callable[[bytes, bytearray], None]
CloseHandler = Callable[[str | None], None]


class Connection:
    """One kernel's stream: frames in on an I/O thread, frames out from any thread.

    ``on_frame(kind, body)`` runs on the I/O thread for each complete frame;
    it must not block for long. ``on_closed(reason)`` runs once, when the
    stream ends: ``reason`` is None for an orderly end of stream (the
    process exited, or :meth:`close` was called), else what the kernel did
    wrong (a malformed or oversized frame, a stalled input). An exception in
    ``on_frame`` counts as the kernel's fault too: the host only fails there
    on input it could not make sense of.
    """

    def __init__(self, stream: Stream, *, max_frame: int, on_frame: FrameHandler, on_closed: CloseHandler,
                 kinds: set[bytes] | None = None, write_stall: float = 30.0, max_queued: int | None = None,
                 name: str = "kernel") -> None:
        self.stream = stream
        self.write_stall = write_stall
        self.max_queued = max_queued
        self._on_frame = on_frame
        self._on_closed = on_closed
        self._parser = wire.FrameParser(max_frame, kinds=kinds)
        self._lock = threading.Lock()
        # Frames waiting for the kernel: large ones as views of their own buffers, small ones copied
        # together into bytearrays of up to _COALESCE bytes (one write for many, little overhead each).
        self._out: deque[memoryview | bytearray] = deque()
        self._out_bytes = 0
        self._out_cost = 0  # _out_bytes plus _ENTRY_COST per queued frame
        self._queued_total = 0  # bytes ever queued, and ever written: progress is the second catching up
        self._sent_total = 0
        # (since, target, allowed): every byte queued up to ``target`` must be written within ``allowed``
        # seconds of ``since``; None while nothing waits.
        self._mark: tuple[float, int, float] | None = None
        self._failure: str | None = None  # why this side ended the stream (the kernel's fault)
        self._last_read = time.monotonic()
        self._closed = False
        #: After close(drain=...): read (never write) until the stream ends or this time (monotonic).
        self._drain_until: float | None = None
        self._reason: str | None = None
        self.stderr_tail = bytearray()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"io-{name}")
        self._thread.start()

    # --- writing ------------------------------------------------------------------------

    def send(self, kind: bytes, *chunks: Any) -> None:
        """Queue one frame for the kernel; raises ConnectionError once the stream is closed."""
        views = [memoryview(c) for c in wire.frame(kind, *chunks)]
        total = sum(len(v) for v in views)
        with self._lock:
            if self._closed:
                raise ConnectionError(self._failure or "the kernel's stream is closed")
            if total <= _COALESCE:  # one write, one wake-up on the other side
                tail = self._out[-1] if self._out else None
                if type(tail) is not bytearray or len(tail) + total > _COALESCE:
                    tail = bytearray()
                    self._out.append(tail)
                    self._out_cost += _ENTRY_COST
                for view in views:
                    tail += view
            else:
                self._out.extend(views)
                self._out_cost += _ENTRY_COST * len(views)
            self._out_bytes += total
            self._out_cost += total
            self._queued_total += total
            if self.stream.direct_send:
                self._flush_locked()
            if self._out and self._mark is None:
                self._set_mark_locked()
            failure = None
            if self.max_queued is not None and self._out_cost > self.max_queued:
                failure = self._failure = (
                    f"the kernel left {self._out_bytes:,} bytes of the host's messages unread "
                    f"(at most {self.max_queued:,}: Limits.max_unread_bytes)")
                self._closed = True
            pending = bool(self._out)
        if pending or failure:
            self._wake()
        if failure:
            raise ConnectionError(failure)

    def _set_mark_locked(self) -> None:
        backlog = self._queued_total - self._sent_total
        self._mark = (time.monotonic(), self._queued_total, self.write_stall + backlog / _MIN_READ_RATE)

    def _flush_locked(self) -> None:
        while self._out:
            batch = list(itertools.islice(self._out, 64))
            try:
                written = self.stream.send_many(batch)
            except (BlockingIOError, InterruptedError):
                return
            if written <= 0:
                return
            self._out_bytes -= written
            self._out_cost -= written
            self._sent_total += written
            while written:
                head = self._out[0]
                if written >= len(head):
                    written -= len(head)
                    self._out.popleft()
                    self._out_cost -= _ENTRY_COST
                else:
                    if type(head) is bytearray:
                        del head[:written]  # the write has let go of its buffer: it may shrink
                    else:
                        self._out[0] = head[written:]
                    written = 0
            if self._mark is not None and self._sent_total >= self._mark[1]:
                # Everything that waited at the mark is through: measure what waits now, from now.
                self._mark = None
                if self._out:
                    self._set_mark_locked()

    def _wake(self) -> None:
        with self._lock:
            if self._wake_w < 0:
                return
            with contextlib.suppress(OSError):  # full: the thread is awake anyway
                os.write(self._wake_w, b"\0")

    @property
    def queued(self) -> int:
        """Bytes written but not yet taken by the kernel."""
        return self._out_bytes

    # --- the I/O thread ---------------------------------------------------------------------

    def _run(self) -> None:
        reason: str | None = None
        selector = selectors.DefaultSelector()
        try:
            for fd in self.stream.read_fds():
                selector.register(fd, selectors.EVENT_READ, "read")
            selector.register(self._wake_r, selectors.EVENT_READ, "wake")
            write_fd = self.stream.write_fd()
            shared_fd = write_fd in self.stream.read_fds()  # a socket: one fd both ways
            watching_write = False
            while True:
                with self._lock:
                    if self._failure is not None:
                        reason = self._failure
                        break
                    draining = None
                    if self._closed:
                        if self._drain_until is None or time.monotonic() >= self._drain_until:
                            break
                        draining = self._drain_until - time.monotonic()
                        self._out.clear()
                        self._out_bytes = self._out_cost = 0
                        self._mark = None
                    wants_write = bool(self._out)
                    mark = self._mark
                    if wants_write and mark is not None and time.monotonic() - mark[0] > mark[2]:
                        reason = (f"the kernel did not read the host's messages: "
                                  f"{mark[1] - self._sent_total:,} bytes waited more than {mark[2]:.0f} s")
                        break
                if wants_write != watching_write:
                    if shared_fd:
                        mask = selectors.EVENT_READ | (selectors.EVENT_WRITE if wants_write else 0)
                        selector.modify(write_fd, mask, "read")
                    elif wants_write:
                        selector.register(write_fd, selectors.EVENT_WRITE, "write")
                    else:
                        selector.unregister(write_fd)
                    watching_write = wants_write
                events = selector.select(draining if draining is not None else 1.0 if wants_write else None)
                ended = False
                for key, mask in events:
                    if key.fileobj == self._wake_r:
                        try:
                            while os.read(self._wake_r, 4096):
                                pass
                        except (BlockingIOError, OSError):
                            pass
                        continue
                    if mask & selectors.EVENT_WRITE:
                        with self._lock:
                            self._flush_locked()
                    if mask & selectors.EVENT_READ:
                        got = self.stream.read(key.fd)
                        if got is None:
                            ended = True
                            break
                        out, err = got
                        if not out and not err and key.fd not in self.stream.read_fds():
                            selector.unregister(key.fd)  # that fd ended, the stream goes on (a pipe's stderr):
                            continue  # left registered, it would be "readable" on every select from now on
                        self._last_read = time.monotonic()
                        if err:
                            self.stderr_tail += err
                            del self.stderr_tail[:-STDERR_TAIL]
                        if out:
                            for kind, body in self._parser.feed(out):
                                self._on_frame(kind, body)
                if ended:
                    if self._parser.pending:
                        reason = "the kernel's stream ended in the middle of a message"
                    break
        except wire.WireError as exc:
            reason = f"the kernel sent a malformed stream: {exc}"
        except Exception as exc:  # a handler could not make sense of what arrived
            reason = f"the kernel sent something the host could not handle: {type(exc).__name__}: {exc}"
        finally:
            selector.close()
            with self._lock:
                already = self._closed and self._failure is None  # closed by the host: no one's fault
                self._closed = True
                self._out.clear()
                self._out_bytes = self._out_cost = 0
                self._mark = None
            self.stream.close()
            with self._lock:  # a closed fd number may be reused: never write to it again
                for fd in (self._wake_r, self._wake_w):
                    with contextlib.suppress(OSError):
                        os.close(fd)
                self._wake_r = self._wake_w = -1
            self._reason = None if already else reason
            with contextlib.suppress(Exception):
                self._on_closed(self._reason)

    def torn_frame(self, idle: float, wait: float = 5.0) -> bool:
        """Whether a frame was left half-written: some of its bytes came, then none for ``idle`` seconds.

        Waits (at most ``wait`` seconds) while a frame is still arriving. A writer
        that stopped mid-frame would make the stream swallow the next frames
        as the rest of that one, so the caller treats True as a broken stream.
        """
        deadline = time.monotonic() + wait
        while self._parser.pending and not self._closed:
            now = time.monotonic()
            if now - self._last_read >= idle or now >= deadline:
                return True
            time.sleep(0.02)
        return False

    # --- lifecycle ----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, wait: float = 5.0, drain: float = 0.0) -> None:
        """End the stream (the kernel sees end of input); idempotent.

        With ``drain``, what is already on its way still arrives: the stream is read (and its
        frames handled) until it ends, for at most ``drain`` seconds; nothing more is written.
        """
        with self._lock:
            if drain > 0 and not self._closed:
                self._drain_until = time.monotonic() + drain
            self._closed = True
        self._wake()
        if threading.current_thread() is not self._thread:
            self._thread.join(wait)

    def stderr_text(self) -> str:
        return bytes(self.stderr_tail).decode("utf-8", "replace")
