"""The kernel stream's I/O thread (sandbox._transport.Connection) over real pipes, as a local kernel's are."""

from __future__ import annotations

import contextlib
import os
import threading
import time

from sandbox._transport import Connection, PipeStream
from sandbox.runtime import sandbox_wire as wire


def thread_cpu_seconds(native_id: int) -> float:
    """User + system CPU time of one thread of this process, from /proc."""
    with open(f"/proc/self/task/{native_id}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_kernel_that_closes_its_stderr_does_not_make_the_host_spin() -> None:
    to_kernel_r, to_kernel_w = os.pipe()
    from_kernel_r, from_kernel_w = os.pipe()
    err_r, err_w = os.pipe()
    frames: list[tuple[bytes, bytes]] = []
    closed = threading.Event()
    reasons: list[str | None] = []

    def on_closed(reason: str | None) -> None:
        reasons.append(reason)
        closed.set()

    conn = Connection(PipeStream(to_kernel_w, from_kernel_r, err_r), max_frame=1 << 20,
                      on_frame=lambda kind, body: frames.append((kind, bytes(body))), on_closed=on_closed)
    try:
        os.write(err_w, b"last words\n")
        os.close(err_w)  # stderr ends; stdout (the frames) goes on
        time.sleep(0.2)
        native_id = conn._thread.native_id
        assert native_id is not None
        before = thread_cpu_seconds(native_id)
        time.sleep(1.0)
        assert thread_cpu_seconds(native_id) - before < 0.2  # a spinning I/O thread would use the whole second
        assert bytes(conn.stderr_tail) == b"last words\n"
        for chunk in wire.frame(wire.KIND_CALL, b"still here"):
            os.write(from_kernel_w, chunk)
        deadline = time.monotonic() + 5
        while not frames and time.monotonic() < deadline:
            time.sleep(0.01)
        assert frames == [(wire.KIND_CALL, b"still here")]
        assert not conn.closed
        os.close(from_kernel_w)  # stdout ends: the stream does
        assert closed.wait(5) and reasons == [None]
    finally:
        conn.close()
        for fd in (to_kernel_r, from_kernel_w):
            with contextlib.suppress(OSError):
                os.close(fd)
