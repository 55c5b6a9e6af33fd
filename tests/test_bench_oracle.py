"""Every agent x every shipped task, solved by the oracle model: CodeAct on Docker, ReAct on the host.

One bench run over both shipped suites and all four agents (concurrency 4,
Docker sandboxes from a pool), shared by the tests of this module. It checks
the whole harness end to end: suites, tools, the oracle's replay in every
action format, the agents, the sandbox pool, checkers, the results directory,
the run log and the report.
"""

from __future__ import annotations

import json

import pytest

from codeact.bench import BenchConfig, BenchRun, load_suite, run_bench
from codeact.bench._progress import NoProgress
from codeact.runlog import RunLog
from tests.test_bench import assert_report_matches_the_run_log

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

AGENTS = ["codeact", "react-fc", "react-json", "react-text"]


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory: pytest.TempPathFactory, docker_ready: None) -> BenchRun:
    out = tmp_path_factory.mktemp("bench") / "results"
    return run_bench(BenchConfig(suites=["tool-chains", "data-analysis"], agents=AGENTS, model="oracle",
                                 concurrency=4, backend="docker", out=out), progress=NoProgress())


def test_every_agent_solves_every_shipped_task(oracle_run: BenchRun) -> None:
    tasks = [t.key for name in ("tool-chains", "data-analysis") for t in load_suite(name).tasks]
    by_key = {e.key: e for e in oracle_run.episodes}
    assert set(by_key) == {f"{task}/{agent}/0" for task in tasks for agent in AGENTS}
    failed = {k: (e.status, e.check, e.error) for k, e in by_key.items() if not e.success}
    assert not failed, json.dumps(failed, indent=1)


def test_the_oracle_needs_the_fewest_calls_in_code(oracle_run: BenchRun) -> None:
    per_task: dict[str, dict[str, int]] = {}
    for e in oracle_run.episodes:
        per_task.setdefault(e.task_key, {})[e.agent] = e.model_calls
        assert e.invalid_actions == 0 and e.turns == e.model_calls
    for task, calls in per_task.items():
        assert calls["codeact"] == 1, task
        assert 2 <= calls["react-fc"] <= calls["react-json"] == calls["react-text"], task
    overall = oracle_run.report.overall
    assert overall["codeact"]["model_calls"].mean == 1.0
    assert overall["react-json"]["model_calls"].mean > overall["react-fc"]["model_calls"].mean > 2


def test_codeact_ran_in_docker_and_react_on_the_host(oracle_run: BenchRun) -> None:
    out = oracle_run.results.path
    with RunLog(out / "runs.db") as log:
        for e in oracle_run.episodes:
            run = log.get_run(e.run_id)
            assert run.backend == ("docker" if e.agent == "codeact" else "host"), e.key
            assert run.prompt == e.agent and run.bench_episode == e.key
    plots = [e for e in oracle_run.episodes if e.agent == "codeact" and e.task.startswith("da-plot")]
    assert plots and all(any(a.endswith(".png") for a in e.artifacts) for e in plots)


def test_report_numbers_recomputed_from_the_stored_episodes(oracle_run: BenchRun) -> None:
    assert_report_matches_the_run_log(oracle_run.results.path)


def test_report_files(oracle_run: BenchRun) -> None:
    out = oracle_run.results.path
    for name in ("success_rate.png", "turns_per_task.png", "tokens_per_task.png"):
        assert (out / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = (out / "episodes.csv").read_text().splitlines()
    assert len(lines) == 1 + len(oracle_run.episodes)
    assert "| tool-chains | codeact | 100.0% | 1.00 | 1.00x |" in (out / "report.md").read_text()
