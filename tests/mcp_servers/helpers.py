"""Starting the test MCP servers (and `codeact mcp serve`) as real processes, and finding leftovers."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
TOOLBOX = str(HERE / "toolbox.py")
PYTHON = sys.executable
CODEACT = str(Path(sys.executable).with_name("codeact"))
#: Where scripts/dev.sh installs the npm servers (npx runs them from here without the network).
NPM_PREFIX = Path(os.environ.get("CODEACT_MCP_NPM_PREFIX", REPO / ".venv" / "mcp-npm"))
#: Command lines of the processes the MCP tests start; any still alive after a test is a leak.
MARKERS = ("toolbox.py", "mcp-server-time", "server-filesystem", "mcp serve")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port}")


@contextlib.contextmanager
def running(args: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """A server process listening on ``port``; stopped (and reaped) at the end."""
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, **(env or {})}, text=True)
    try:
        wait_port(port, proc)
        yield proc
    finally:
        stop(proc, grace=20)


def stop(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM, ``grace`` seconds to exit, then SIGKILL; reaped either way."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def leftover_processes() -> list[str]:
    """MCP server processes started by this test process (directly or not) that are still alive."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            cmd = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if any(m in cmd for m in MARKERS):
            found.append(f"{child.pid}: {cmd[:150]}")
    return found


def assert_no_leftovers(timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        left = leftover_processes()
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, f"MCP server processes left running: {left}"


def npx_available() -> bool:
    return shutil.which("npx") is not None and (NPM_PREFIX / "node_modules" / "@modelcontextprotocol").is_dir()
