"""Fuzzing the host from the sandbox's side of the bridge, for a fixed time budget.

A fake sandbox plays the supervisor and the kernel on real pipes: it answers
the host's requests sometimes correctly and sometimes with random or
malformed frames, Jupyter messages and calls. The host must never raise out
of ``run()`` (a start that fails may raise ``KernelStartError``, a sandbox
error, never anything else), must return within the run's time limit plus a
stated grace, and must not grow without bound. A second test does the same
from inside a real Docker sandbox.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import struct
import threading
import time
import uuid
from typing import Any

import pytest

from sandbox.errors import SandboxError
from sandbox.functions import HostFunction
from sandbox.kernel import KernelSandbox
from sandbox.limits import Limits
from sandbox.runtime import sandbox_codec as codec
from sandbox.runtime import sandbox_wire as wire
from sandbox._transport import PipeStream

BUDGET = float(os.environ.get("CODEACT_FUZZ_SECONDS", "20"))


def _frame(kind: bytes, *chunks: Any) -> bytes:
    return b"".join(bytes(c) for c in wire.frame(kind, *chunks))


def _message(msg_type: str, parent: str, content: Any) -> list[bytes]:
    header = {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "session": "fuzz", "username": "fuzz",
              "date": "2026-01-01T00:00:00Z", "version": "5.3"}
    return [b"<IDS|MSG>", b"", json.dumps(header).encode(), json.dumps({"msg_id": parent}).encode(), b"{}",
            json.dumps(content).encode() if not isinstance(content, bytes) else content]


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 4 or roll < 0.3:
        return rng.choice([None, True, 1, -2**70, 1.5, "x" * rng.randint(0, 50), "\x1b[2J", "\ud800"])
    if roll < 0.6:
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(["name", "text", "data", "ename", "evalue", "traceback", "execution_state", "status",
                        "user_expressions", "image/png", "text/plain", "x"]): _random_json(rng, depth + 1)
            for _ in range(rng.randint(0, 4))}


class FuzzSandbox:
    """The sandbox's side, on pipes: a supervisor that answers, and a kernel that calls, both misbehaving at random."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.workdir = "/fuzz"
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []
        self.kernel_out: int | None = None

    # --- KernelProcess --------------------------------------------------------------------

    def _pipes(self) -> tuple[PipeStream, int, int]:
        host_to_sb_r, host_to_sb_w = os.pipe()
        sb_to_host_r, sb_to_host_w = os.pipe()
        return PipeStream(host_to_sb_w, sb_to_host_r, None), host_to_sb_r, sb_to_host_w

    def start(self) -> PipeStream:
        stream, read_fd, write_fd = self._pipes()
        t = threading.Thread(target=self._supervisor, args=(read_fd, write_fd), daemon=True)
        t.start()
        self.threads.append(t)
        return stream

    def kernel_parent(self) -> str:
        return "/fuzz"

    def start_kernel(self, connection: str) -> PipeStream:
        stream, read_fd, write_fd = self._pipes()
        self.kernel_out = write_fd
        t = threading.Thread(target=self._kernel, args=(read_fd, write_fd), daemon=True)
        t.start()
        self.threads.append(t)
        return stream

    def stop_kernel(self) -> None:
        pass

    def interrupt_kernel(self) -> bool:
        return False

    def kernel_exit_code(self) -> int | None:
        return self.rng.choice([None, 0, 1, 137, -9])

    def stop(self) -> None:
        pass

    def oom_since(self, started: float) -> bool:
        return self.rng.random() < 0.5

    def memory_limit(self) -> str | None:
        return "1g"

    def close(self) -> None:
        self.stop_event.set()

    # --- the misbehaving sandbox --------------------------------------------------------------

    def _write(self, fd: int, data: bytes) -> bool:
        try:
            view = memoryview(data)
            while len(view):
                view = view[os.write(fd, view):]
            return True
        except OSError:
            return False

    def _garbage(self) -> bytes:
        rng = self.rng
        roll = rng.random()
        if roll < 0.2:
            return rng.randbytes(rng.randint(1, 200))
        if roll < 0.4:  # a header announcing more than the limit
            return rng.choice([b"J", b"F", b"H", b"Q"]) + struct.pack(">I", rng.choice([2**31, 2**32 - 1, 10**9]))
        if roll < 0.6:  # a well-framed Jupyter frame with a malformed message
            parts = [rng.randbytes(rng.randint(0, 30)) for _ in range(rng.randint(0, 8))]
            if rng.random() < 0.5:
                parts = [b"<IDS|MSG>", b""] + [json.dumps(_random_json(rng)).encode() for _ in range(4)]
            return _frame(wire.KIND_JUPYTER, *wire.pack_parts(rng.choice(["shell", "iopub"]), parts))
        if roll < 0.8:  # a framed call with a random payload
            return _frame(wire.KIND_CALL, *wire.pack_call(rng.randint(0, 2**32 - 1), rng.choice(["echo", "nope", "é"]),
                                                          [rng.randbytes(rng.randint(0, 100))]))
        return _frame(wire.KIND_ABANDON, rng.randbytes(rng.choice([0, 3, 4, 5])))

    def _supervisor(self, read_fd: int, write_fd: int) -> None:
        rng = self.rng
        parser = wire.FrameParser(2**31)
        try:
            while not self.stop_event.is_set():
                data = os.read(read_fd, 65536)
                if not data:
                    return
                for kind, body in parser.feed(data):
                    if kind == wire.KIND_RESTART:
                        if rng.random() < 0.9:
                            prepared = json.dumps({"connection": "/fuzz/k.json"}).encode()
                            self._write(write_fd, _frame(wire.KIND_PREPARED, prepared))
                        if rng.random() < 0.9:
                            self._write(write_fd, _frame(wire.KIND_HELLO, b"{}"))
                    elif kind == wire.KIND_JUPYTER:
                        channel, parts = wire.unpack_parts(body)
                        header = json.loads(parts[2])
                        self._answer(write_fd, header["msg_id"], json.loads(parts[5]))
                    if rng.random() < 0.15:
                        self._write(write_fd, self._garbage())
        except Exception:
            pass
        finally:
            for fd in (read_fd, write_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _answer(self, fd: int, msg_id: str, content: dict) -> None:
        rng = self.rng
        out = []
        if rng.random() < 0.8:
            out.append(("iopub", _message("status", msg_id, {"execution_state": "busy"})))
        for _ in range(rng.randint(0, 5)):
            kind = rng.choice(["stream", "display_data", "error", "execute_result", "weird"])
            payload = {"stream": {"name": rng.choice(["stdout", "stderr", 7]), "text": rng.choice(["hi\n", 5, "\x1b"])},
                       "display_data": {"data": rng.choice([{"text/plain": "x"}, {"image/png": "!!"}, [1], None])},
                       "error": {"ename": rng.choice(["E", None]), "evalue": "v",
                                 "traceback": rng.choice([["t"], "t"])},
                       "execute_result": {"data": {"text/plain": "1"}},
                       "weird": _random_json(rng)}[kind]
            out.append(("iopub", _message(kind, msg_id, payload)))
        if content.get("user_expressions"):
            files = rng.choice([
                {"status": "ok", "data": {"text/plain": repr(json.dumps([["a.txt", 1, 1.0], ["../../x", 2, 2.0]]))}},
                {"status": "ok", "data": {"text/plain": "not a literal"}},
                {"status": "ok", "data": {"text/plain": repr("[" * 5000 + "]" * 5000)}},
                [1, 2], None,
            ])
            reply = {"status": "ok", "user_expressions": {"files": files}}
        else:
            reply = {"status": rng.choice(["ok", "error", None])}
        if rng.random() < 0.9:
            out.append(("shell", _message("execute_reply", msg_id, reply)))
        if rng.random() < 0.85:  # sometimes the run never ends: the host's clock ends it
            out.append(("iopub", _message("status", msg_id, {"execution_state": "idle"})))
        rng.shuffle(out)
        for channel, parts in out:
            if not self._write(fd, _frame(wire.KIND_JUPYTER, *wire.pack_parts(channel, parts))):
                return

    def _kernel(self, read_fd: int, write_fd: int) -> None:
        rng = self.rng
        call_id = 0
        try:
            while not self.stop_event.is_set():
                time.sleep(rng.random() * 0.02)
                call_id += 1
                if rng.random() < 0.7:
                    args = ((rng.choice([1, "x", b"\x00", (1, 2)]),), {})
                    payload = b"".join(bytes(c) for c in codec.encode(args))
                    name = rng.choice(["echo", "echo", "nope"])
                    data = _frame(wire.KIND_CALL, *wire.pack_call(call_id, name, [payload]))
                else:
                    data = self._garbage()
                if not self._write(write_fd, data):
                    return
        finally:
            for fd in (read_fd, write_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


@pytest.mark.timeout(int(BUDGET) + 120)
def test_random_and_malformed_frames_never_break_the_host() -> None:
    def echo(x: Any = None) -> Any:
        return x

    seed = int(os.environ.get("CODEACT_FUZZ_SEED", str(time.time_ns() % 10**6)))
    fake = FuzzSandbox(seed)
    sandbox = KernelSandbox(fake, [HostFunction(echo)], timeout=0.5, max_run_time=1.5, start_timeout=2.0,
                            limits=Limits(max_payload=1 << 20, write_stall=2.0))
    runs = errors = 0
    worst = 0.0
    base = _rss()
    deadline = time.monotonic() + BUDGET
    try:
        while time.monotonic() < deadline:
            started = time.monotonic()
            try:
                result = sandbox.run("x = 1", list_files=fake.rng.random() < 0.3)
                runs += 1
                if result.files is not None:
                    assert all(not f.path.startswith(("/", "..")) and ".." not in f.path.split("/")
                               for f in result.files)
            except SandboxError:  # a kernel that never says hello: a start error, never anything else
                errors += 1
            worst = max(worst, time.monotonic() - started)
    finally:
        sandbox.close()
        fake.close()
    assert runs + errors >= 5 and runs >= 1, f"seed {seed}: only {runs} runs and {errors} start errors in {BUDGET} s"
    # Stated grace: a run ends within max_run_time + interrupt grace + a restart's start timeout, twice.
    assert worst < 1.5 + sandbox.interrupt_grace + 2 * 2.0 + 2.0, f"seed {seed}: a run took {worst:.1f} s"
    assert _rss() - base < 200 * 2**20, f"seed {seed}: host memory grew by {(_rss() - base) / 2**20:.0f} MB"


@pytest.mark.docker
@pytest.mark.timeout(int(BUDGET) + 180)
def test_hostile_kernel_writing_random_frames_in_docker() -> None:
    from sandbox import DockerSandbox

    def echo(x: Any = None) -> Any:
        return x

    code = """
import os, random, struct, time
import sandbox_runtime as s, sandbox_wire as w, sandbox_codec as c
rng = random.Random(os.getpid())
fd = s._state.link.fd_out
end = time.monotonic() + 2
while time.monotonic() < end:
    roll = rng.random()
    if roll < 0.3:
        data = os.urandom(rng.randint(1, 300))
    elif roll < 0.6:
        payload = b''.join(bytes(x) for x in c.encode(((rng.random(),), {})))
        call = w.pack_call(rng.randint(0, 2**32 - 1), 'echo', [payload])
        data = b''.join(bytes(x) for x in w.frame(w.KIND_CALL, *call))
    else:
        data = rng.choice([b'F', b'A', b'Z']) + struct.pack('>I', rng.randint(0, 2**32 - 1)) + os.urandom(64)
    try:
        os.write(fd, data)
    except OSError:
        break
"""
    deadline = time.monotonic() + BUDGET
    rounds = 0
    with DockerSandbox(functions=[echo], timeout=10) as sb:
        while time.monotonic() < deadline:
            started = time.monotonic()
            r = sb.run(code)
            assert time.monotonic() - started < 10 + 3 + 60
            assert r.error is None or r.error.type in ("ProtocolError", "KernelDied", "TimeoutError", "OSError",
                                                      "BrokenPipeError"), r.error
            rounds += 1
        assert rounds >= 2
        after = sb.run("print(echo('still fine'))")
        assert after.stdout == "still fine\n", after
