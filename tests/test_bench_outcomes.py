"""A failure of the system is not a failure of the model: outcomes, pre-flight, early stop, plots, compare, models.

The model is the real ``openai`` client talking HTTP to the local test server
(tests/openai_server.py), whose replies and faults depend on the task; the
user-facing behaviour (exit codes, messages, how long a dead endpoint costs)
is checked on the real CLI in a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from codeact.bench import BenchConfig, Episode, ResultsDir, build_report, compare, run_bench
from codeact.bench._metrics import wilson
from codeact.bench._progress import NoProgress
from codeact.errors import BenchError
from tests.openai_server import Fault, OpenAITestServer, RecordedRequest, Reply, free_port

pytestmark = pytest.mark.timeout(180)
REPO = Path(__file__).resolve().parents[1]

SUITE = '''
from codeact import tool
from codeact.bench import Oracle, Task, call

NAME = "probe"
VERSION = "1"


def make_tools(ctx):
    @tool
    def lookup(key: str) -> int:
        """The value stored under key (a, b or c)."""
        return {"a": 1, "b": 2, "c": 3}[key]

    return [lookup]


def _plan():
    c = yield call("lookup", key="c")
    return c * 10


TAGS = ["right", "wrong", "loops", "overflow", "auth", "limited", "stalls"]


def tasks():
    return [Task(id=tag, instruction=f"[{tag}] Ten times the value of c.", tools=make_tools, expected=30,
                 max_turns=2, oracle=Oracle(_plan)) for tag in TAGS]
'''


def first_user_text(req: RecordedRequest) -> str:
    return next((m.get("content") or "" for m in req.messages if m.get("role") == "user"), "")


def behave(req: RecordedRequest) -> Any:
    """Each task's model: the tag in its instruction says how the endpoint (or the model) behaves."""
    text = first_user_text(req)
    model = req.body.get("model")
    system = next((m.get("content") or "" for m in req.messages if m.get("role") == "system"), "")
    json_format = '"name"' in system  # react-json; else react-text

    def answer(value: int) -> str:
        if json_format:
            return 'Action: {"name": "final_answer", "arguments": {"answer": %d}}' % value
        return f"Action: final_answer(answer={value})"

    if model in ("alpha", "beta") and "[" in text:  # two models, one right and one wrong, whatever the task
        return answer(30 if model == "alpha" else 29)
    if "[right]" in text:
        return answer(30)
    if "[wrong]" in text:
        return answer(29)
    if "[loops]" in text:
        return 'Action: {"name": "lookup", "arguments": {"key": "c"}}'
    if "[overflow]" in text:
        return Fault("error", status=400, body={"error": {"message": "maximum context length is 10 tokens",
                                                          "code": "context_length_exceeded"}})
    if "[auth]" in text:
        return Fault("error", status=401, body={"error": {"message": "bad key", "code": "invalid_api_key"}})
    if "[limited]" in text:
        return Fault("error", status=429, body={"error": {"message": "slow down", "code": "rate_limit_exceeded"}},
                     headers={"Retry-After": "0"})
    if "[stalls]" in text:
        return Reply(text="late", delay=8)
    return "OK"  # the pre-flight's request


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    path = tmp_path / "probe_suite.py"
    path.write_text(SUITE)
    return path


@pytest.fixture
def server() -> Any:
    with OpenAITestServer(default_reply=behave) as s:
        yield s


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEACT_MODEL")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def codeact(*argv: str, env: dict[str, str] | None = None,
            timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "codeact.cli", *argv], env=env or cli_env(), capture_output=True,
                          text=True, timeout=timeout)
    return proc, time.monotonic() - started


# --------------------------------------------------------------------------- one outcome per episode


def test_each_episode_gets_one_outcome_and_success_is_over_the_episodes_that_ran(
        suite: Path, server: OpenAITestServer, tmp_path: Path) -> None:
    out = tmp_path / "results"
    run = run_bench(BenchConfig(suites=[str(suite)], agents=["react-json"], model="probe-model",
                                base_url=server.base_url, api_key="sk-test", out=out, concurrency=7,
                                episode_timeout=3, max_error_share=1.0),
                    progress=NoProgress(), plots=False)
    by_task = {e.task: e for e in run.episodes}
    assert {t: (e.outcome, e.error_kind) for t, e in by_task.items()} == {
        "right": ("solved", ""), "wrong": ("wrong_answer", ""), "loops": ("turn_limit", ""),
        "overflow": ("context_overflow", "context_overflow"), "auth": ("model_error", "auth"),
        "limited": ("model_error", "rate_limit"), "stalls": ("timeout", ""),
    }
    # The per-episode file agrees with itself: success only where solved, an infrastructure failure never a success.
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert {r["task"]: r["success"] for r in rows} == {t: t == "right" for t in by_task}
    assert {r["task"]: r["status"] for r in rows if r["outcome"] in ("model_error", "timeout")} == {
        "auth": "error", "limited": "error", "stalls": "timeout"}
    m = run.report.overall["react-json"]
    assert (m.episodes, m.ran, m.excluded) == (7, 4, 3)
    assert m.success_rate.mean == pytest.approx(1 / 4)  # not 1/7: three episodes never gave the model its chance
    assert m.outcomes == {"solved": 1, "wrong_answer": 1, "turn_limit": 1, "context_overflow": 1,
                          "model_error": 2, "timeout": 1}
    # Turns over the solved episodes, and over all that ran with each failure at its turn limit (2).
    assert m["turns_solved"].mean == 1.0 and m["turns"].mean == pytest.approx((1 + 2 + 2 + 2) / 4)
    md = (out / "report.md").read_text()
    assert ("| agent | episodes | solved | wrong answer | turn limit | context overflow | model error * | timeout * |"
            in md)
    assert "| react-json | 7 | 1 | 1 | 1 | 1 | 2 | 1 |" in md
    assert "3 of 7 episodes did not run to an answer or a turn limit" in md
    summary = json.loads((out / "report.json").read_text())["overall"]["react-json"]
    assert summary["ran"] == 4 and summary["excluded"] == 3 and summary["outcomes"]["model_error"] == 2


def test_old_episode_lines_get_an_outcome(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path)
    old = {"key": "s/t/a/0", "suite": "s", "task": "t", "agent": "a", "repeat": 0}
    with open(results.episodes_file, "w") as f:
        for status, success in (("success", True), ("success", False), ("max_steps", False), ("timeout", False)):
            f.write(json.dumps({**old, "key": f"s/t/a/{status}{success}", "status": status, "success": success}) + "\n")
    assert [e.outcome for e in results.episodes()] == ["solved", "wrong_answer", "turn_limit", "timeout"]


# --------------------------------------------------------------------------- plots and intervals


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 10, 33, 66, 100, 1000])
def test_the_success_interval_stays_inside_0_1_and_around_the_rate(n: int) -> None:
    for successes in (0, n // 3, n):
        r = wilson(successes, n, ci=True)
        assert 0.0 <= r.low <= r.mean <= r.high <= 1.0, (successes, n, r)
    assert wilson(n, n, ci=True).high == 1.0 and wilson(0, n, ci=True).low == 0.0


def test_plots_of_a_perfect_and_a_zero_agent(suite: Path, server: OpenAITestServer, tmp_path: Path) -> None:
    """Four repeats of a perfect agent put Wilson's upper bound a rounding error below 100 %: that crashed the plot."""
    from codeact.bench._task import Task  # noqa: F401 - the factory below sees tasks

    def models(task: Any, kind: str, ctx: Any) -> Any:
        from codeact import ScriptedModel
        from codeact.bench import OracleModel

        if kind == "react-json":
            return OracleModel(task, kind, context=ctx)  # perfect
        return ScriptedModel(["Action: final_answer(answer=29)"], name="oracle")  # always wrong

    out = tmp_path / "results"
    run = run_bench(BenchConfig(suites=[str(suite)], agents=["react-json", "react-text"], model="oracle",
                                tasks=["right", "wrong"], repeats=4, out=out, concurrency=4),
                    model=models, progress=NoProgress())
    rates = {a: m.success_rate for a, m in run.report.overall.items()}
    assert (rates["react-json"].mean, rates["react-text"].mean) == (1.0, 0.0)
    for name in ("success_rate.png", "turns_per_task.png", "tokens_per_task.png"):
        assert (out / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_run_with_repeats_and_a_perfect_agent_draws_its_plots(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc, _ = codeact("bench", "run", "--suite", str(suite), "--model", "oracle", "--agents", "react-json,react-fc",
                      "--task", "right", "--task", "wrong", "--repeats", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "plots" / "success_rate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- pre-flight and early stop


def test_preflight_stops_at_once_when_the_endpoint_is_down(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    proc, seconds = codeact("bench", "run", "--suite", str(suite), "--model", "m", "--base-url", base_url,
                            "--agents", "react-json", "--out", str(out))
    assert proc.returncode == 1, proc.stderr
    assert "pre-flight: model 'm' does not answer" in proc.stderr and "Connection refused" in proc.stderr
    assert "2 attempts" in proc.stderr and "No episode was run" in proc.stderr and "Traceback" not in proc.stderr
    spent = float(re.search(r"after 2 attempts in ([0-9.]+)s", proc.stderr).group(1))
    assert spent < 5, spent  # one retry, not ~12 s of them per episode
    assert seconds < 60, seconds  # the whole command, on a loaded machine
    assert not (out / "episodes.jsonl").exists()


def test_preflight_names_a_rejected_key(suite: Path, tmp_path: Path) -> None:
    with OpenAITestServer(default_reply=lambda req: Fault("error", status=401, body={
            "error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}})) as server:
        proc, _ = codeact("bench", "run", "--suite", str(suite), "--model", "m", "--base-url", server.base_url,
                          "--agents", "react-json", "--out", str(tmp_path / "results"))
        assert len(server.chat_requests) == 1  # one tiny request, not retried
    assert proc.returncode == 1
    assert "none was given (OPENAI_API_KEY is not set)" in proc.stderr and "No episode was run" in proc.stderr


@pytest.mark.docker
def test_preflight_stops_when_the_sandbox_engine_is_down(suite: Path, tmp_path: Path) -> None:
    address = f"tcp://127.0.0.1:{free_port()}"
    proc, seconds = codeact("bench", "run", "--suite", str(suite), "--model", "oracle", "--agents", "codeact",
                            "--out", str(tmp_path / "results"), env=cli_env(DOCKER_HOST=address))
    assert proc.returncode == 1 and seconds < 30
    assert f"DOCKER_HOST is set to {address}" in proc.stderr and "install" not in proc.stderr
    assert not (tmp_path / "results" / "episodes.jsonl").exists()


def test_a_run_stops_early_when_the_endpoint_fails_midway(suite: Path, tmp_path: Path) -> None:
    answered: list[int] = []

    def once_then_refuse(req: RecordedRequest) -> Any:
        answered.append(1)
        if len(answered) == 1:
            return "OK"  # the pre-flight passes; then the key is revoked
        return Fault("error", status=401, body={"error": {"message": "key revoked", "code": "invalid_api_key"}})

    out = tmp_path / "results"
    with OpenAITestServer(default_reply=once_then_refuse) as server:
        proc, _ = codeact("bench", "run", "--suite", str(suite), "--model", "m", "--base-url", server.base_url,
                          "--api-key", "sk-test", "--agents", "react-json", "--task", "right", "--repeats", "30",
                          "--concurrency", "1", "--out", str(out), "--no-plots")
    assert proc.returncode == 1, proc.stderr
    assert "stopped early: 10 of the last 10 episodes failed in the infrastructure" in proc.stderr
    assert "model_error (auth)" in proc.stderr and "--retry-errors" in proc.stderr
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(rows) == 10 and {r["outcome"] for r in rows} == {"model_error"}
    assert "Outcomes" in proc.stdout  # the report is still printed


# --------------------------------------------------------------------------- several models, one table


def test_several_models_in_one_table(suite: Path, server: OpenAITestServer, tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc, _ = codeact("bench", "run", "--suite", str(suite), "--model", "alpha", "--model", "beta",
                      "--base-url", server.base_url, "--agents", "react-json,react-text", "--task", "right",
                      "--task", "wrong", "--out", str(out), "--no-plots")
    assert proc.returncode == 0, proc.stderr
    preflight = [r for r in server.chat_requests if "single word OK" in first_user_text(r)]
    assert sorted(r.body["model"] for r in preflight) == ["alpha", "beta"]  # one tiny request per model
    report = json.loads((out / "report.json").read_text())
    assert report["models"] == ["alpha", "beta"]
    assert report["agents"] == ["alpha · react-json", "alpha · react-text",
                                "beta · react-json", "beta · react-text"]
    assert {a: m["success_rate"]["mean"] for a, m in report["overall"].items()} == {
        "alpha · react-json": 1.0, "alpha · react-text": 1.0, "beta · react-json": 0.0, "beta · react-text": 0.0}
    md = (out / "report.md").read_text()
    assert "| suite | alpha · react-json | alpha · react-text | beta · react-json | beta · react-text |" in md
    assert "| probe | 100.0% | 100.0% | 0.0% | 0.0% |" in md
    keys = {json.loads(line)["key"] for line in (out / "episodes.jsonl").read_text().splitlines()}
    assert "probe/right/react-json/0@alpha" in keys and len(keys) == 8
    # Resuming with the same models runs nothing again; another set of models is refused.
    again, _ = codeact("bench", "run", "--suite", str(suite), "--model", "alpha,beta", "--base-url", server.base_url,
                       "--agents", "react-json,react-text", "--task", "right", "--task", "wrong", "--out", str(out),
                       "--no-plots")
    assert again.returncode == 0 and "0 episodes run, 8 already done" in again.stderr
    other, _ = codeact("bench", "run", "--suite", str(suite), "--model", "alpha", "--base-url", server.base_url,
                       "--agents", "react-json", "--out", str(out), "--no-plots")
    assert other.returncode == 1 and "holds a run with other settings: models=" in other.stderr


# --------------------------------------------------------------------------- compare


def _oracle_run(suite: Path, out: Path, tasks: list[str]) -> None:
    run_bench(BenchConfig(suites=[str(suite)], agents=["react-json"], model="oracle", tasks=tasks, out=out),
              progress=NoProgress(), plots=False)


def test_compare_uses_only_the_common_tasks_and_says_so(suite: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _oracle_run(suite, a, ["right", "wrong", "loops"])
    _oracle_run(suite, b, ["right", "wrong", "auth"])
    comparison = compare(a, b)
    assert {e.task for e in comparison.a.episodes} == {e.task for e in comparison.b.episodes} == {"right", "wrong"}
    assert comparison.notes == ["compared on the 2 tasks both ran; left out: 1 only in A (probe/loops); "
                                "1 only in B (probe/auth)"]
    proc, _ = codeact("bench", "compare", str(a), str(b), "--format", "md")
    assert proc.returncode == 0 and "compared on the 2 tasks both ran" in proc.stdout
    table, _ = codeact("bench", "compare", str(a), str(b))
    assert "compared on the 2 tasks both ran" in table.stdout


def test_compare_refuses_two_versions_of_a_suite(suite: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _oracle_run(suite, a, ["right"])
    suite.write_text(SUITE.replace("Ten times the value of c.", "Ten times c, please."))  # same task ids, new tasks
    _oracle_run(suite, b, ["right"])
    with pytest.raises(BenchError, match="ran different versions of suite probe"):
        compare(a, b)
    proc, _ = codeact("bench", "compare", str(a), str(b))
    assert proc.returncode == 1 and "different versions of suite probe" in proc.stderr
    assert "Traceback" not in proc.stderr
    # Nor does a results directory take episodes of another version of its suite.
    with pytest.raises(BenchError, match="another version of suite"):
        _oracle_run(suite, a, ["right", "wrong"])


def test_compare_refuses_results_with_no_task_in_common(suite: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _oracle_run(suite, a, ["right"])
    _oracle_run(suite, b, ["wrong"])
    with pytest.raises(BenchError, match="no task in common"):
        compare(a, b)


def test_a_report_of_only_failed_infrastructure_has_no_rate(tmp_path: Path) -> None:
    episodes = [Episode(key=f"s/t/a/{i}", suite="s", task="t", agent="a", repeat=i, outcome="model_error")
                for i in range(3)]
    report = build_report(episodes, {"model": "m"})
    m = report.overall["a"]
    assert (m.ran, m.excluded) == (0, 3) and m.success_rate.n == 0
    from codeact.bench._plots import write_plots

    assert all(p.exists() for p in write_plots(report, tmp_path / "plots"))
