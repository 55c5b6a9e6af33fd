"""The bench and ``codeact doctor`` against a real model server (llama.cpp's, the ``llama_server`` fixture).

The bench test runs the CLI as a user would (a subprocess, the real ``openai`` client over HTTP, the Docker
backend) on a small slice of both shipped suites with the three prompted agents. The model is tiny and
mostly wrong: the test asserts that every episode got an outcome the model earned (never the sandbox's,
the harness's or a context overflow) and that the report's counts add up, never a score.

``codeact doctor`` is checked against the same server (listed, window unknown until it refuses a request,
image parts refused: llama.cpp's Python server answers them with HTTP 500), against the scripted
server for an endpoint that takes images, and against a port where nothing listens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from codeact.cli import cli
from tests.openai_server import OpenAITestServer
from tests.mcp_servers.helpers import free_port

ROOT = Path(__file__).resolve().parents[1]
#: One task of each suite: short instructions, the first a chain of shop tools, the second a CSV question.
TASKS = ("tool-chains/shop-audio-average-stars", "data-analysis/da-total-revenue")
AGENTS = ("codeact", "react-json", "react-text")
SYSTEM_SIDE = {"sandbox_error", "harness_error", "context_overflow"}
RAN = {"solved", "wrong_answer", "turn_limit", "context_overflow"}
OUTCOMES = RAN | {"model_error", "sandbox_error", "timeout", "harness_error"}


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), CODEACT_DB=str(tmp_path / "runs.db"),
               CODEACT_OUTPUT_DIR=str(tmp_path / "artifacts"))
    for name in ("CODEACT_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY", "CODEACT_IMAGES"):
        env.pop(name, None)
    return env


@pytest.mark.docker
@pytest.mark.timeout(900)  # a loaded machine makes the small model take up to a minute a request
def test_bench_against_a_real_server_classifies_every_episode(llama_server: Any, tmp_path: Path) -> None:
    out = tmp_path / "results"
    command = [sys.executable, "-m", "codeact.cli", "bench", "run", "--suite", "tool-chains,data-analysis",
               "--agents", ",".join(AGENTS), "--model", llama_server.model, "--base-url", llama_server.base_url,
               "--api-key", "none", "--concurrency", "1", "--max-turns", "1", "--model-timeout", "300",
               "--max-reply-tokens", "48", "--out", str(out)]  # short replies: this model reads ~100 tokens/s
    for task in TASKS:
        command += ["--task", task]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=_env(tmp_path), cwd=tmp_path)
    said = f"exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}\n{llama_server.log_tail()}"
    assert done.returncode == 0, said
    assert "Traceback" not in done.stderr, said

    lines = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines() if line.strip()]
    keys = sorted(line["key"] for line in lines)
    assert keys == sorted(f"{task}/{agent}/0" for task in TASKS for agent in AGENTS), said  # each episode once
    for line in lines:
        assert line["outcome"] in OUTCOMES, line
        assert line["outcome"] not in SYSTEM_SIDE, (line["key"], line["outcome"], line["error_kind"], line["error"])
        # the endpoint answered every request: a model error here is a failure of codeact or of the server
        assert line["outcome"] != "model_error", (line["key"], line["error_kind"], line["error"])
        assert line["model_calls"] >= 1 and line["turns"] <= line["turn_limit"] == 1, line
        assert line["input_tokens"] > 0 and line["output_tokens"] > 0, line  # llama.cpp's own usage
        assert line["model"] == llama_server.model and line["run_id"], line

    report = json.loads((out / "report.json").read_text())
    overall = report["overall"]
    assert sorted(overall) == sorted(AGENTS), overall
    for agent in AGENTS:
        metrics = overall[agent]
        mine = [line for line in lines if line["key"].split("/")[2] == agent]
        assert metrics["episodes"] == len(TASKS) == len(mine), metrics
        assert metrics["ran"] + metrics["excluded"] == metrics["episodes"], metrics
        assert metrics["ran"] == len(TASKS), metrics  # nothing excluded
        assert sum(metrics["outcomes"].values()) == metrics["episodes"], metrics
        for outcome, n in metrics["outcomes"].items():
            assert n == sum(1 for line in mine if line["outcome"] == outcome), (agent, outcome)
        solved = sum(1 for line in mine if line["outcome"] == "solved")
        assert metrics["success_rate"]["mean"] == pytest.approx(solved / len(TASKS)), metrics
    for suite in ("tool-chains", "data-analysis"):
        assert sum(m["episodes"] for m in report["by_suite"][suite].values()) == len(AGENTS), report["by_suite"]
    assert sum(m["episodes"] for m in overall.values()) == len(AGENTS) * len(TASKS)
    assert "report.md" in {p.name for p in out.iterdir()}


def _doctor(*args: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in _env(tmp_path).items():
        if name.startswith("CODEACT_"):
            monkeypatch.setenv(name, value)
    for name in ("CODEACT_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY", "CODEACT_IMAGES"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(cli, ["doctor", *args])
    assert "Traceback" not in result.output, result.output
    return result.stdout


def _line(out: str, what: str) -> str:
    found = [line for line in out.splitlines() if line[6:].startswith(what + ":")]
    assert len(found) == 1, out
    return found[0]


def test_doctor_checks_a_real_llama_server(llama_server: Any, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    out = _doctor("--model", llama_server.model, "--base-url", llama_server.base_url, "--api-key", "none",
                  tmp_path=tmp_path, monkeypatch=monkeypatch)
    assert _line(out, "model").startswith(f"OK    model: {llama_server.model} at {llama_server.base_url}"), out
    assert "listed by GET /models" in _line(out, "model")
    # llama.cpp's Python server lists no window: known only once it refuses a request as too long
    window = _line(out, "context window")
    assert window.startswith("INFO  context window: unknown"), out
    assert "-c/--n_ctx" in out
    images = _line(out, "images")
    assert images.startswith("INFO  images: refused (") and "HTTP 500" in images, out
    assert "--no-images" in out


def test_doctor_checks_an_endpoint_that_takes_images(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with OpenAITestServer(models=["vision-model"], context_window=32768, announce_window=True) as server:
        out = _doctor("--model", "vision-model", "--base-url", server.base_url, "--api-key", "none",
                      tmp_path=tmp_path, monkeypatch=monkeypatch)
        probes = [r for r in server.chat_requests if r.image_urls]
    assert _line(out, "model").startswith("OK    model: vision-model"), out
    assert _line(out, "context window") == "OK    context window: 32,768 tokens (stated by GET /models)", out
    assert _line(out, "images").startswith("OK    images: accepted"), out
    assert len(probes) == 1 and probes[0].image_urls[0].startswith("data:image/png;base64,"), probes


def test_doctor_says_which_endpoint_refuses_images_in_words(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    with OpenAITestServer(models=["text-model"], reject_images="Invalid content type. image_url is only supported "
                          "by certain models.") as server:
        out = _doctor("--model", "text-model", "--base-url", server.base_url, "--api-key", "none",
                      tmp_path=tmp_path, monkeypatch=monkeypatch)
    assert _line(out, "context window").startswith("INFO  context window: unknown"), out
    assert _line(out, "images").startswith("INFO  images: refused (") and "image_url is only supported" in out, out


def test_doctor_with_an_unreachable_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    out = _doctor("--model", "some-model", "--base-url", url, "--api-key", "none",
                  tmp_path=tmp_path, monkeypatch=monkeypatch)
    assert _line(out, "model").startswith(f"FAIL  model: some-model at {url}"), out
    assert "connection" in out.lower()
    assert "context window:" not in out and "images:" not in out  # nothing more to ask a server that is not there


@pytest.mark.parametrize(("given", "sent"), [((), 1024), (("--max-reply-tokens", "64"), 64),
                                             (("--max-reply-tokens", "0"), None)])
def test_bench_caps_each_reply(given: tuple[str, ...], sent: int | None, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Every request of a bench run carries the reply cap (a model that never stops costs at most that)."""
    monkeypatch.setenv("CODEACT_DB", str(tmp_path / "runs.db"))
    out = tmp_path / "results"
    with OpenAITestServer(models=["m"], default_reply="Final Answer: 3") as server:
        result = CliRunner().invoke(cli, ["bench", "run", "--suite", "tool-chains", "--agents", "react-text",
                                          "--task", TASKS[0], "--model", "m", "--base-url", server.base_url,
                                          "--api-key", "none", "--max-turns", "1", "--out", str(out), *given])
        requests = server.chat_requests
    assert result.exit_code == 0, result.output
    assert len(requests) >= 2  # the pre-flight and the episode's
    assert [r.body.get("max_tokens") for r in requests[1:]] == [sent] * (len(requests) - 1)
    assert json.loads((out / "run.json").read_text())["max_reply_tokens"] == sent
