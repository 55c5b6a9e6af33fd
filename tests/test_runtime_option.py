"""The container runtime as a choice on every surface: ``--runtime`` / ``CODEACT_RUNTIME`` (the real CLI in a
subprocess, the real engine), reaching ``DockerSandbox(runtime=...)``, with one clean error for a runtime the
engine lacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)
REPO = Path(__file__).resolve().parents[1]
SURFACES = [("run",), ("chat",), ("ui",), ("demo",), ("bench", "run"), ("mcp", "serve"), ("doctor",)]


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEACT_MODEL", "CODEACT_RUNTIME", "CODEACT_BACKEND",
                        "CODEACT_SCRIPTED_REPLIES")}
    out["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    out.update(extra)
    return out


def codeact(*argv: str, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "codeact.cli", *argv], env=environ, capture_output=True, text=True,
                          timeout=150)


def test_every_surface_lists_the_option_and_its_variable() -> None:
    from click.testing import CliRunner

    from codeact.cli import cli

    runner = CliRunner()
    for argv in SURFACES:
        result = runner.invoke(cli, [*argv, "--help"])
        assert result.exit_code == 0, (argv, result.output)
        text = " ".join(result.output.split())
        assert "--runtime NAME" in text and "CODEACT_RUNTIME" in text and "runsc" in text, argv


def test_a_runtime_needs_the_docker_backend(tmp_path: Path) -> None:
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(["done"]))
    proc = codeact("run", "x", "--backend", "local", "--runtime", "runsc", "--db", str(tmp_path / "runs.db"),
                   environ=env(CODEACT_SCRIPTED_REPLIES=str(replies)))
    assert proc.returncode == 2, proc.stderr
    assert "--runtime=runsc: a container runtime needs the docker backend" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_malformed_runtime_name_from_the_environment_is_named(tmp_path: Path) -> None:
    proc = codeact("mcp", "serve", environ=env(CODEACT_RUNTIME="runsc --debug"))
    assert proc.returncode == 2, proc.stderr
    assert "CODEACT_RUNTIME='runsc --debug' is not a runtime name" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.docker
@pytest.mark.parametrize("argv", [("run", "x"), ("mcp", "serve"), ("bench", "run", "--model", "oracle",
                                                                     "--suite", "tool-chains", "--agents", "codeact")])
def test_a_runtime_the_engine_lacks_is_one_clean_error(tmp_path: Path, argv: tuple[str, ...]) -> None:
    extra = ("--out", str(tmp_path / "results")) if argv[0] == "bench" else ()
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(["done"]))
    proc = codeact(*argv, *extra, "--runtime", "no-such-runtime",
                   environ=env(CODEACT_SCRIPTED_REPLIES=str(replies), CODEACT_DB=str(tmp_path / "runs.db")))
    assert proc.returncode == 1, proc.stderr
    assert "has no runtime 'no-such-runtime' (it has: " in proc.stderr and "runc" in proc.stderr, proc.stderr
    assert "daemon.json" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.docker
def test_the_runtime_reaches_the_sandbox_from_the_environment(tmp_path: Path, runtime: str) -> None:
    """``codeact run`` with ``CODEACT_RUNTIME``: the code runs on that runtime's kernel (gVisor's says 4.4.0)."""
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(["```python\nimport platform\nprint('kernel', platform.release())\n```",
                                   "done"]))
    proc = codeact("run", "which kernel?", "--json", "--db", str(tmp_path / "runs.db"), "-o", str(tmp_path / "out"),
                   environ=env(CODEACT_SCRIPTED_REPLIES=str(replies), CODEACT_RUNTIME=runtime))
    assert proc.returncode == 0, proc.stderr
    observation = json.loads(proc.stdout)["steps"][0]["observation"]
    release = observation.split("kernel ", 1)[1].split()[0]
    assert (release == os.uname().release) == (runtime == "runc"), (release, observation)


@pytest.mark.docker
def test_doctor_lists_the_runtimes_and_starts_a_sandbox_on_the_chosen_one(runtime: str) -> None:
    proc = codeact("doctor", "--runtime", runtime, environ=env())
    out = proc.stdout
    assert "container runtimes: " in out and "runc" in out, out
    assert f"runtime {runtime}: a sandbox started and ran code in" in out, out
