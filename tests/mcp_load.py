"""MCP clients in numbers against ``codeact mcp serve --transport http``: the load check of
``tests/test_faults.py`` and ``benchmarks/load.py``.

Each client is the SDK's own (streamable HTTP, the initialize handshake) and
keeps its own state over its calls: it sets a variable, reads it back,
writes a file and lists the files, and checks that it sees only its own
variables and files (cross-talk is an error of its own kind). Latencies are
per ``call_tool``, measured here. :func:`kill_mid_call` starts clients in
processes of their own and SIGKILLs them while their call runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from sandbox._labels import LABEL

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "load-token"


@dataclass
class LoadResult:
    clients: int
    calls: int = 0
    latencies: list[float] = field(default_factory=list)  # seconds, one per call
    errors: list[str] = field(default_factory=list)
    crosstalk: list[str] = field(default_factory=list)
    wall: float = 0.0

    def percentile(self, q: float) -> float:
        values = sorted(self.latencies)
        if not values:
            return float("nan")
        return values[min(len(values) - 1, max(0, int(round(q / 100 * len(values) + 0.5)) - 1))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def mcp_server(max_sessions: int, *, idle_timeout: float = 900, timeout: float = 60,
               env: dict[str, str] | None = None) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``codeact mcp serve --transport http`` in a process of its own: (url, process); stopped at the end."""
    import tempfile

    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", prefix="mcp-serve-", suffix=".log")  # noqa: SIM115 - closed below
    # The server's stderr goes to a file: a pipe nobody reads fills up and stops the server.
    proc = subprocess.Popen(
        [sys.executable, "-m", "codeact.cli", "mcp", "serve", "--transport", "http", "--port", str(port),
         "--token", TOKEN, "--max-sessions", str(max_sessions), "--idle-timeout", str(idle_timeout),
         "--timeout", str(timeout), "--no-log"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})})
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"mcp serve exited with {proc.returncode}: {Path(log.name).read_text()[-3000:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError("mcp serve did not listen")
            time.sleep(0.05)
        proc.log_path = log.name  # type: ignore[attr-defined]
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def client(url: str) -> Any:
    """The SDK's client over streamable HTTP with the token; its httpx client closes with it."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})

    class Owned(Client):  # type: ignore[misc]
        async def __aexit__(self, *exc: Any) -> None:
            try:
                await super().__aexit__(*exc)
            finally:
                await http.aclose()

    return Owned(streamable_http_client(url, http_client=http))


def _text(result: Any) -> str:
    return "\n".join(b.text for b in result.content if getattr(b, "type", "") == "text")


async def _one_client(url: str, index: int, calls: int, result: LoadResult) -> None:
    import anyio

    me = f"c{index}"

    async def call(name: str, args: dict[str, Any]) -> Any:
        started = time.perf_counter()
        out = await session.call_tool(name, args)
        result.latencies.append(time.perf_counter() - started)
        result.calls += 1
        if out.is_error:
            raise RuntimeError(f"{me}: {name} failed: {_text(out)[:300]}")
        return out

    async with client(url) as session:
        for k in range(calls):
            kind = k % 4
            if kind == 0:
                await call("execute_python", {"code": f"mine_{me}_{k} = {index * 1000 + k}\nwho = {me!r}"})
            elif kind == 1:
                out = _text(await call("execute_python", {
                    "code": "print(who, sorted(n for n in globals() if n.startswith('mine_')))"}))
                owner, _, names = out.partition(" ")
                seen = set(eval(names)) if names.startswith("[") else set()
                if owner != me or any(not n.startswith(f"mine_{me}_") for n in seen):
                    result.crosstalk.append(f"{me} sees variables {out[:200]}")
            elif kind == 2:
                await call("execute_python", {"code": f"open('{me}_{k}.txt', 'w').write('{me}')"})
            else:
                out = await call("list_files", {})
                names = [f["path"] for f in (out.structured_content or {}).get("result", [])]
                if f"{me}_{k - 1}.txt" not in names:
                    result.crosstalk.append(f"{me} does not see its own file {me}_{k - 1}.txt in {names[:5]}")
                strangers = [n for n in names if n.endswith(".txt") and not n.startswith(f"{me}_")]
                if strangers:
                    result.crosstalk.append(f"{me} sees files {strangers[:5]}")
        await anyio.sleep(0)


def run_load(url: str, clients: int, calls: int = 20) -> LoadResult:
    """``clients`` SDK clients at once, ``calls`` calls each; errors and cross-talk collected, not raised."""
    import anyio

    result = LoadResult(clients)

    async def guarded(i: int) -> None:
        try:
            await _one_client(url, i, calls, result)
        except Exception as exc:
            while getattr(exc, "exceptions", None):  # an ExceptionGroup from the SDK's task groups: its first
                exc = exc.exceptions[0]  # type: ignore[attr-defined]
            result.errors.append(f"c{i}: {type(exc).__name__}: {str(exc)[:300]}")

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for i in range(clients):
                tg.start_soon(guarded, i)

    started = time.perf_counter()
    anyio.run(main)
    result.wall = time.perf_counter() - started
    return result


def our_containers(server_pid: int) -> list[str]:
    """The sandbox containers the server process owns on the machine's engine."""
    import docker

    client = docker.from_env()
    try:
        found = client.api.containers(all=True, filters={"label": [f"{LABEL}.pid={server_pid}"]})
    finally:
        client.close()
    return [c["Names"][0] for c in found]


def wait_no_containers(server_pid: int, timeout: float) -> tuple[list[str], float]:
    """(containers still there, seconds waited) once none are left or ``timeout`` passed."""
    started = time.monotonic()
    while True:
        left = our_containers(server_pid)
        if not left or time.monotonic() - started > timeout:
            return left, time.monotonic() - started
        time.sleep(0.25)


class MemorySampler:
    """Peak resident memory (MB) of a process and its children, and of the host, sampled on a thread."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        import psutil

        self._proc = psutil.Process(pid)
        self.interval = interval
        self.server_peak_mb = 0.0
        self.host_used_start_mb = psutil.virtual_memory().used / 2**20
        self.host_used_peak_mb = self.host_used_start_mb
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                rss = self._proc.memory_info().rss
                for child in self._proc.children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        rss += child.memory_info().rss
                self.server_peak_mb = max(self.server_peak_mb, rss / 2**20)
            self.host_used_peak_mb = max(self.host_used_peak_mb, psutil.virtual_memory().used / 2**20)
            self._stop.wait(self.interval)

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(5)


_KILLED_CLIENT = """
import sys, anyio
sys.path.insert(0, {root!r})
from tests.mcp_load import client

async def main():
    async with client({url!r}) as session:
        await session.call_tool("execute_python", {{"code": "x = 1"}})
        print("calling", flush=True)
        await session.call_tool("execute_python", {{"code": "import time\\ntime.sleep(120)"}})

anyio.run(main)
"""


def kill_mid_call(url: str, clients: int, timeout: float = 120) -> int:
    """Start ``clients`` client processes, SIGKILL them all while their second call runs; how many got there."""
    procs = [subprocess.Popen([sys.executable, "-c", _KILLED_CLIENT.format(root=str(ROOT), url=url)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for _ in range(clients)]
    calling = 0
    try:
        deadline = time.monotonic() + timeout
        for proc in procs:
            line = ""
            while proc.poll() is None and time.monotonic() < deadline:
                line = proc.stdout.readline()  # type: ignore[union-attr]
                if line.strip() == "calling" or not line:
                    break
            calling += line.strip() == "calling"
        time.sleep(1.0)  # the calls reach the sandboxes
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    return calling


def summary(result: LoadResult) -> dict[str, Any]:
    return {"clients": result.clients, "calls": result.calls, "errors": len(result.errors),
            "crosstalk": len(result.crosstalk), "p50_ms": round(result.percentile(50) * 1000, 1),
            "p99_ms": round(result.percentile(99) * 1000, 1), "wall_s": round(result.wall, 2),
            "first_errors": result.errors[:3] + result.crosstalk[:3]}


if __name__ == "__main__":  # a quick look: python -m tests.mcp_load URL CLIENTS
    print(json.dumps(summary(run_load(sys.argv[1], int(sys.argv[2]))), indent=2))
