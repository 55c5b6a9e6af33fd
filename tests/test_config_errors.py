"""Configuration errors are fast and named: the real CLI in a subprocess, the real openai client, the test server.

Time bounds are generous "did not hang in a retry loop" checks (the bug was
~12 s of retries per model call), not speed measurements.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.openai_server import OpenAITestServer, free_port

pytestmark = pytest.mark.timeout(180)
REPO = Path(__file__).resolve().parents[1]


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEACT_MODEL", "DOCKER_HOST",
                        "CODEACT_SCRIPTED_REPLIES")}
    out["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    out.update(extra)
    return out


def codeact(*argv: str, environ: dict[str, str],
            cwd: Path | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "codeact.cli", *argv], env=environ, capture_output=True, text=True,
                          timeout=120, cwd=cwd)
    return proc, time.monotonic() - started


def test_run_without_an_api_key_names_the_variable_before_any_sandbox(tmp_path: Path) -> None:
    # A Docker engine address where nothing answers: had the sandbox been opened first, this would be its error.
    docker = f"tcp://127.0.0.1:{free_port()}"
    proc, seconds = codeact("run", "print(1)", "--model", "gpt-4o-mini", "--db", str(tmp_path / "runs.db"),
                            environ=env(DOCKER_HOST=docker))
    assert proc.returncode == 2, proc.stderr
    assert "OPENAI_API_KEY is not set" in proc.stderr and "OPENAI_BASE_URL" in proc.stderr
    assert "Docker" not in proc.stderr and "Traceback" not in proc.stderr
    assert seconds < 10, seconds  # no request at all, let alone ~12 s of retries


def test_bench_without_an_api_key_names_the_variable_at_once(tmp_path: Path) -> None:
    proc, seconds = codeact("bench", "run", "--suite", "tool-chains", "--model", "gpt-4o-mini", "--agents",
                            "react-json", "--out", str(tmp_path / "results"), environ=env())
    assert proc.returncode == 2 and "OPENAI_API_KEY is not set" in proc.stderr
    assert seconds < 10, seconds
    assert not (tmp_path / "results").exists()


def test_a_refused_connection_is_tried_twice_not_five_times(tmp_path: Path) -> None:
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    proc, seconds = codeact("run", "print(1)", "--model", "m", "--base-url", base_url, "--backend", "restricted",
                            "--db", str(tmp_path / "runs.db"), environ=env())
    assert proc.returncode != 0
    assert "after 2 attempts" in proc.stderr and "Connection refused" in proc.stderr, proc.stderr
    # The model's own clock: one retry after a short backoff, not five attempts over ~12 s.
    spent = float(re.search(r"after 2 attempts in ([0-9.]+)s", proc.stderr).group(1))
    assert spent < 5, spent
    assert seconds < 60, seconds  # the whole command, on a loaded machine


# --------------------------------------------------------------------------- doctor


def _an_image_that_exists() -> str | None:
    """Any sandbox image the engine holds: so that the image check passes and the model's FAIL stands alone."""
    from sandbox.container import docker_client
    from sandbox.errors import BackendUnavailable

    try:
        client = docker_client(timeout=10)
    except BackendUnavailable:
        return None
    try:
        for image in client.images.list(name="codeact-sandbox"):
            if image.tags:
                return image.tags[0]
    finally:
        client.close()
    return None


def test_doctor_exits_non_zero_when_the_model_fails(tmp_path: Path) -> None:
    image = _an_image_that_exists()
    if image is None:
        pytest.skip("needs a Docker engine holding a codeact-sandbox image (`codeact image build`)")
    base = env(CODEACT_SANDBOX_IMAGE=image, CODEACT_DB=str(tmp_path / "runs.db"))
    with OpenAITestServer() as server:
        fine, _ = codeact("doctor", "--model", "test-model", "--base-url", server.base_url, environ=base)
    assert fine.returncode == 0, fine.stdout  # the control: every check passes
    assert "FAIL" not in fine.stdout

    down = f"http://127.0.0.1:{free_port()}/v1"
    proc, _ = codeact("doctor", "--model", "m", "--base-url", down, environ=base)
    assert proc.returncode == 1, proc.stdout
    assert f"FAIL  model: m at {down}" in proc.stdout and "1 check FAILED: model" in proc.stdout

    nokey, seconds = codeact("doctor", "--model", "gpt-4o-mini", environ=base)
    assert nokey.returncode == 1 and "OPENAI_API_KEY is not set" in nokey.stdout
    assert seconds < 30


def test_doctor_names_an_unreachable_docker_host(tmp_path: Path) -> None:
    address = f"tcp://127.0.0.1:{free_port()}"
    proc, _ = codeact("doctor", environ=env(DOCKER_HOST=address, CODEACT_DB=str(tmp_path / "runs.db")))
    assert proc.returncode == 1
    docker_lines = [line for line in proc.stdout.splitlines() if "Docker engine" in line or "DOCKER_HOST" in line]
    assert any(f"DOCKER_HOST is set to {address}" in line for line in docker_lines), proc.stdout
    assert "apt-get install docker.io" not in proc.stdout
