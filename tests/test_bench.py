"""The bench harness (codeact.bench): task format, plans, checkers, oracle, runner, resume, reports, CLI.

The shipped suites' oracle episodes on every agent are in test_bench_oracle.py
(Docker); here a small external suite (a Python file written by the test)
exercises the harness on the host with the ReAct agents, real tools, the
oracle or scripted models, and the real run log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from codeact import ScriptedModel, tool
from codeact.bench import (
    BenchConfig,
    CheckContext,
    OracleModel,
    ResultsDir,
    Task,
    TaskContext,
    all_of,
    artifact,
    build_report,
    call,
    custom,
    exact,
    load_suite,
    numeric,
    plan_code,
    run_bench,
    run_plan,
    unordered,
)
from codeact.bench._checkers import run_check
from codeact.bench._metrics import paired, sign_test, wilson
from codeact.bench._progress import NoProgress
from codeact.cli import cli
from codeact.errors import BenchError
from codeact.react import ReActAgent
from codeact.runlog import RunLog

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parents[1]

MINI_SUITE = '''
"""A tiny suite for the harness tests."""
import os
import threading
import time

from codeact import tool
from codeact.bench import Oracle, Task, call, numeric

NAME = "mini"
DESCRIPTION = "three lookups, a broken task, a crashing tool"
SLOW = float(os.environ.get("MINI_SLOW", "0"))  # seconds per tool call (for the kill-and-resume test)


def make_tools(ctx):
    visits = []  # per episode: fresh state

    @tool
    def lookup(key: str) -> int:
        """The value stored under key (a, b or c)."""
        time.sleep(SLOW)
        visits.append(key)
        return {"a": 1, "b": 2, "c": 3}[key]

    @tool
    def pair(key: str) -> tuple:
        """(key, value) for a key."""
        return key, {"a": 1, "b": 2, "c": 3}[key]

    @tool
    def visited() -> list:
        """Keys looked up so far in this episode."""
        return list(visits)

    @tool
    def crash(x: int) -> int:
        """Always raises."""
        raise RuntimeError("the tool crashed")

    return [lookup, pair, visited, crash]


def _sum():
    a, b, c = yield [call("lookup", key=k) for k in ["a", "b", "c"]]
    return a + b + c


def _chain():
    a = yield call("lookup", key="a")
    b = yield call("lookup", key="b" if a == 1 else "c")
    seen = yield call("visited")
    return [a + b, seen]


def _pair():
    p = yield call("pair", key="c")
    return p[1] * 10


def _crash():
    value = yield call("crash", x=1)
    return value


def _broken_tools(ctx):
    raise OSError("the fixture data is missing")


def tasks():
    return [
        Task(id="sum", instruction="Add the values of a, b and c.", tools=make_tools, expected=6,
             check=numeric(), oracle=Oracle(_sum), tags=("math",)),
        Task(id="chain", instruction="Look up a, then b, then list the visited keys.", tools=make_tools,
             expected=[3, ["a", "b"]], oracle=Oracle(_chain)),
        Task(id="pair", instruction="Ten times the value of c.", tools=make_tools, expected=30, oracle=Oracle(_pair)),
        Task(id="crashes", instruction="Call crash(1).", tools=make_tools, expected=1, oracle=Oracle(_crash)),
        Task(id="broken", instruction="Anything.", tools=_broken_tools, expected=1, oracle=Oracle(_sum)),
    ]
'''


@pytest.fixture
def mini(tmp_path: Path) -> Path:
    path = tmp_path / "mini_suite.py"
    path.write_text(MINI_SUITE)
    return path


def config(mini: Path, out: Path, **options: Any) -> BenchConfig:
    options.setdefault("agents", ["react-fc", "react-json", "react-text"])
    options.setdefault("concurrency", 2)
    return BenchConfig(suites=[str(mini)], out=out, **options)


# --------------------------------------------------------------------------- plans and checkers


def _plan():
    hits = yield call("search", query="lamp")
    details = yield [call("get", product_id=h["id"]) for h in hits]
    total = yield call("add", *[d["price"] for d in details])
    return round(total, 2)


def test_a_plan_becomes_a_code_action_and_a_call_sequence() -> None:
    assert plan_code(_plan) == (
        "hits = search(query='lamp')\n"
        "details = [get(product_id=h['id']) for h in hits]\n"
        "total = add(*[d['price'] for d in details])\n"
        "final_answer(round(total, 2))"
    )
    products = {1: 2.5, 2: 4.25}

    @tool
    def search(query: str) -> list:
        """Search."""
        return [{"id": i} for i in products]

    @tool
    def get(product_id: int) -> dict:
        """Get."""
        return {"id": product_id, "price": products[product_id]}

    @tool
    def add(*values: float) -> float:
        """Add."""
        return sum(values)

    trace = run_plan(_plan, {t.name: t for t in (search, get, add)})
    assert trace.answer == 6.75
    assert [[c.call.name for c in turn] for turn in trace.turns] == [["search"], ["get", "get"], ["add"]]
    assert trace.turns[2][0].arguments == {"values": [2.5, 4.25]}  # bound like a model's JSON would be


def test_plans_that_have_no_code_form_are_refused() -> None:
    def early_return():
        x = yield call("a")
        if x:
            return 1
        return 2

    def not_a_call():
        yield 3
        return 1

    with pytest.raises(BenchError, match="must end with its one `return answer`"):
        plan_code(early_return)
    with pytest.raises(BenchError, match="yield call"):
        plan_code(not_a_call)
    with pytest.raises(BenchError, match="yielded 3"):
        run_plan(not_a_call, {})


@pytest.mark.parametrize("checker, answer, expected, ok", [
    (exact(), " Paris. ", "paris", True),
    (exact(), "Lyon", "Paris", False),
    (exact(), "[3, ['a', 'b']]", [3, ["a", "b"]], True),  # a text answer read as a literal
    (exact(), 6.0000000001, 6, True),
    (exact(), {"Region": "north"}, {"region": "North"}, True),
    (exact(), "yes", True, True),
    (numeric(abs_tol=0.01), "The total is 1,234.50 EUR", 1234.5, True),
    (numeric(abs_tol=0.01), 1234.6, 1234.5, False),
    (numeric(rel_tol=0.01), [100, 201], [101, 200], True),
    (unordered(), ["b", "a"], ["a", "b"], True),
    (unordered(), "a, b", ["a", "b"], True),
    (unordered(), ["a", "a"], ["a", "b"], False),
    (custom(lambda a, e, ctx: a % 2 == 0), 4, None, True),
])
def test_checkers(checker: Any, answer: Any, expected: Any, ok: bool) -> None:
    assert run_check(checker, answer, expected, CheckContext()).ok is ok


def test_artifact_checker_wants_a_real_png(tmp_path: Path) -> None:
    fake = tmp_path / "plot.png"
    fake.write_bytes(b"not a png" * 50)
    check = all_of(numeric(), artifact("plot.png"))
    assert not run_check(check, 1, 1, CheckContext(artifacts=(fake,))).ok
    from matplotlib.figure import Figure

    fig = Figure()
    fig.add_subplot().plot([1, 2])
    fig.savefig(fake)
    verdict = run_check(check, 1, 1, CheckContext(artifacts=(fake,)))
    assert verdict.ok and "plot.png" in verdict.detail
    assert not run_check(check, 2, 1, CheckContext(artifacts=(fake,))).ok
    assert "raised ZeroDivisionError" in run_check(lambda a, e, c: 1 / 0, 1, 1, CheckContext()).detail


def test_statistics() -> None:
    assert sign_test(0, 0) == 1.0 and sign_test(6, 0) == pytest.approx(0.03125)
    rate = wilson(8, 10, ci=True)
    assert rate.mean == 0.8
    assert rate.low == pytest.approx(0.4902, abs=1e-3) and rate.high == pytest.approx(0.9433, abs=1e-3)
    assert wilson(8, 10, ci=False).low is None


# --------------------------------------------------------------------------- suites


def test_external_suites_load_from_a_file_and_say_what_is_wrong(mini: Path, tmp_path: Path) -> None:
    suite = load_suite(str(mini))
    assert suite.name == "mini" and [t.key for t in suite.tasks][:2] == ["mini/sum", "mini/chain"]
    assert load_suite(f"{mini}:tasks").name == "mini"
    with pytest.raises(BenchError, match="not found"):
        load_suite(str(tmp_path / "nope.py"))
    with pytest.raises(BenchError, match="no function other"):
        load_suite(f"{mini}:other")
    bad = tmp_path / "bad_suite.py"
    bad.write_text("from codeact.bench import Task\ndef tasks():\n    return [Task(id='x', instruction='a'), "
                   "Task(id='x', instruction='b')]\n")
    with pytest.raises(BenchError, match="two tasks have the id 'x'"):
        load_suite(str(bad))
    bad.write_text("def tasks():\n    return [1]\n")
    with pytest.raises(BenchError, match="returned int; return Task objects"):
        load_suite(str(bad))
    with pytest.raises(BenchError, match="cannot import suite module"):
        load_suite("no_such_module_xyz")
    with pytest.raises(BenchError, match="task id"):
        Task(id="bad id!", instruction="x")
    with pytest.raises(BenchError, match="unknown checker 'fuzzy'"):
        Task(id="t", instruction="x", check="fuzzy")


def test_shipped_suites_have_the_promised_shape() -> None:
    chains, data = load_suite("tool-chains"), load_suite("data-analysis")
    assert len(chains.tasks) >= 30 and len(data.tasks) >= 15
    for task in chains.tasks:
        with TaskContextDir(task) as ctx:
            trace = run_plan(task.oracle.plan, {t.name: t for t in task.build_tools(ctx)})
            assert len(trace.calls) >= 3, task.id
            assert len(trace.calls) + 1 <= task.max_turns, task.id  # one action per turn fits
            assert run_check(task.checker(), trace.answer, task.expected, CheckContext()).ok, task.id
    assert {"stateful", "variadic", "tuple"} <= {tag for t in chains.tasks for tag in t.tags}
    assert any("plot" in t.tags for t in data.tasks) and all(t.files for t in data.tasks)


class TaskContextDir:
    def __init__(self, task: Task) -> None:
        import tempfile

        self.task = task
        self._tmp = tempfile.TemporaryDirectory()

    def __enter__(self) -> TaskContext:
        return TaskContext(task_id=self.task.id, workdir=Path(self._tmp.name),
                           files={f.name: f for f in self.task.files})

    def __exit__(self, *exc: object) -> None:
        self._tmp.cleanup()


# --------------------------------------------------------------------------- the oracle model


@pytest.mark.parametrize("kind, turns", [("react-fc", 2), ("react-json", 4), ("react-text", 4)])
def test_the_oracle_replays_the_plan_in_each_format(mini: Path, tmp_path: Path, kind: str, turns: int) -> None:
    task = load_suite(str(mini)).task("sum")
    ctx = TaskContext(task_id="sum", workdir=tmp_path / "w")
    ctx.workdir.mkdir()
    model = OracleModel(task, kind, context=ctx)
    assert model.planned_turns == turns
    agent = ReActAgent(model, task.build_tools(ctx), format=kind, log=False)
    result = agent.run(task.instruction)
    assert result.status == "success" and result.answer == 6 and len(result.steps) == turns


def test_the_oracle_stops_when_the_agent_shows_something_else(mini: Path, tmp_path: Path) -> None:
    task = load_suite(str(mini)).task("sum")
    ctx = TaskContext(task_id="sum", workdir=tmp_path / "w")
    ctx.workdir.mkdir()

    @tool
    def lookup(key: str) -> int:
        """A tool that disagrees with the shadow's."""
        return 100

    result = ReActAgent(OracleModel(task, "react-json", context=ctx), [lookup], format="json", log=False).run("x")
    assert result.status == "success"  # the oracle gives up with a text answer that says why
    assert "oracle stopped: the result of lookup was 'Observation: 100'" in result.answer


# --------------------------------------------------------------------------- the runner


def test_a_run_survives_broken_tasks_and_crashing_tools(mini: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    run = run_bench(config(mini, out), progress=NoProgress(), plots=False)
    by_key = {e.key: e for e in run.episodes}
    assert len(by_key) == 5 * 3 and run.ran == 15
    for kind in ("react-fc", "react-json", "react-text"):
        assert by_key[f"mini/sum/{kind}/0"].success and by_key[f"mini/chain/{kind}/0"].success
        assert by_key[f"mini/pair/{kind}/0"].success
        broken = by_key[f"mini/broken/{kind}/0"]
        assert not broken.success and "the fixture data is missing" in broken.error and broken.run_id is None
        crashed = by_key[f"mini/crashes/{kind}/0"]
        assert not crashed.success and "the tool crashed" in crashed.error  # the oracle's plan hit the crash
        # Neither is the model's doing: both are excluded from the success rate, not scored as wrong answers.
        assert (broken.outcome, crashed.outcome) == ("harness_error", "harness_error")
        assert by_key[f"mini/sum/{kind}/0"].outcome == "solved"
    for m in run.report.overall.values():
        assert (m.ran, m.excluded, m.success_rate.mean) == (3, 2, 1.0)
        assert m.outcomes == {"solved": 3, "harness_error": 2}
    fc, text = by_key["mini/sum/react-fc/0"], by_key["mini/sum/react-text/0"]
    assert (fc.turns, fc.model_calls, fc.tool_calls) == (2, 2, 3)
    assert (text.turns, text.model_calls, text.tool_calls) == (4, 4, 3)
    assert fc.prompt == "react-fc" and fc.prompt_version == "1" and fc.model == "oracle"
    # Every episode is in the run log and linked both ways.
    with RunLog(out / "runs.db") as log:
        record = log.get_run(fc.run_id)
        assert record.bench_episode == fc.key and record.agent == "react-fc"
    settings = json.loads((out / "run.json").read_text())
    assert settings["prompts"] == {"react-fc": "react-fc@1", "react-json": "react-json@1", "react-text": "react-text@1"}
    assert settings["temperature"] == 0.0 and settings["seed"] == 0 and "api_key" not in settings
    assert {p.name for p in out.iterdir()} >= {"run.json", "episodes.jsonl", "runs.db", "report.json", "report.md",
                                              "summary.csv", "episodes.csv"}


def test_resume_skips_finished_episodes_and_checks_the_settings(mini: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    first = run_bench(config(mini, out, tasks=["sum", "pair"]), progress=NoProgress(), report=False)
    assert first.ran == 6
    again = run_bench(config(mini, out, tasks=["sum", "pair"]), progress=NoProgress(), report=False)
    assert again.ran == 0 and again.skipped == 6
    more = run_bench(config(mini, out, tasks=["sum", "pair", "chain"]), progress=NoProgress(), report=False)
    assert more.ran == 3 and len(more.episodes) == 9
    assert sorted(json.loads((out / "run.json").read_text())["resumed"]) != []
    with pytest.raises(BenchError, match="holds a run with other settings: temperature=0.0"):
        run_bench(config(mini, out, temperature=0.7), progress=NoProgress(), report=False)


def test_a_stalled_model_costs_only_its_episode(mini: Path, tmp_path: Path) -> None:
    release = threading.Event()

    def stall(messages: list) -> str:
        release.wait(60)
        return "Final Answer: late"

    def models(task: Task, kind: str, ctx: TaskContext) -> Any:
        if task.id == "pair":
            return ScriptedModel([stall], name="oracle")
        return OracleModel(task, kind, context=ctx)

    out = tmp_path / "results"
    try:
        run = run_bench(config(mini, out, agents=["react-json"], tasks=["sum", "pair", "chain"], episode_timeout=1.5),
                        model=models, progress=NoProgress(), plots=False)
    finally:
        release.set()
    by_task = {e.task: e for e in run.episodes}
    assert by_task["sum"].success and by_task["chain"].success
    stalled = by_task["pair"]
    assert stalled.status == "timeout" and not stalled.success and "did not finish within 1.5 s" in stalled.error
    # A resumed run with --retry-errors runs it again (and now it finishes).
    rerun = run_bench(config(mini, out, agents=["react-json"], tasks=["sum", "pair", "chain"], retry_errors=True),
                      progress=NoProgress(), plots=False)
    assert rerun.ran == 1 and {e.task: e for e in rerun.episodes}["pair"].success


def test_a_killed_run_resumes_without_rerunning_finished_episodes(mini: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    env = {**os.environ, "MINI_SLOW": "0.15",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "codeact.cli", "bench", "run", "--suite", str(mini), "--model", "oracle",
            "--agents", "react-json,react-text", "--task", "sum", "--task", "chain", "--task", "pair",
            "--concurrency", "1", "--out", str(out), "--no-plots"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    lines = out / "episodes.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if lines.exists() and len(lines.read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    before = {json.loads(line)["key"]: json.loads(line)["run_id"] for line in lines.read_text().splitlines()}
    assert 2 <= len(before) < 6

    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "already done" in done.stderr
    rows = [json.loads(line) for line in lines.read_text().splitlines()]
    assert len(rows) == 6 and len({r["key"] for r in rows}) == 6  # nothing ran twice
    assert {r["key"]: r["run_id"] for r in rows if r["key"] in before} == before
    assert all(r["success"] for r in rows)
    with RunLog(out / "runs.db") as log:
        statuses = [r.status for r in log.list_runs(limit=None)]
    # The episode the kill cut short (if one was running) was marked interrupted when the log reopened.
    assert statuses.count("success") == 6 and statuses.count("interrupted") <= 1 and "running" not in statuses


def test_ctrl_c_saves_finished_episodes_and_says_how_to_resume(mini: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    env = {**os.environ, "MINI_SLOW": "0.15",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "codeact.cli", "bench", "run", "--suite", str(mini), "--model", "oracle",
            "--agents", "react-json,react-text", "--task", "sum", "--task", "chain", "--task", "pair",
            "--concurrency", "1", "--out", str(out), "--no-plots"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = out / "episodes.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (lines.exists() and lines.read_text().strip()):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    saved = len(lines.read_text().splitlines())
    assert f"interrupted: {saved} finished episodes are saved in {out}" in stderr and "resume" in stderr
    assert "Traceback" not in stderr
    with RunLog(out / "runs.db") as log:  # the cut-off episode's run ended as cancelled, not running
        assert "running" not in {r.status for r in log.list_runs(limit=None)}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and len(lines.read_text().splitlines()) == 6


# --------------------------------------------------------------------------- reports


def test_report_numbers_recomputed_from_the_stored_episodes(mini: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    run_bench(config(mini, out, repeats=2, tasks=["sum", "chain", "pair", "crashes"]), progress=NoProgress(),
              plots=False)
    assert_report_matches_the_run_log(out)


def assert_report_matches_the_run_log(out: Path) -> None:
    """Recompute report.json from episodes.jsonl and from the run log's own records of each run."""
    report = json.loads((out / "report.json").read_text())
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert report["episodes"] == len(episodes)
    with RunLog(out / "runs.db") as log:
        for e in episodes:
            if e["run_id"] is None:
                continue
            run = log.get_run(e["run_id"])
            assert run.bench_episode == e["key"] and run.agent == e["agent"]
            assert (run.usage.requests, run.usage.input_tokens, run.usage.output_tokens) == (
                e["model_calls"], e["input_tokens"], e["output_tokens"])
            assert len(run.steps) == e["turns"]
            assert sum(len(s.tool_calls) for s in run.steps) == e["tool_calls"]
            assert run.invalid_actions == e["invalid_actions"]
            assert (run.status == "success") >= e["success"]
    ran_outcomes = {"solved", "wrong_answer", "turn_limit", "context_overflow"}
    for agent, metrics in report["overall"].items():
        everything = [e for e in episodes if e["agent"] == agent]
        mine = [e for e in everything if e["outcome"] in ran_outcomes]  # the means are over the episodes that ran
        assert metrics["episodes"] == len(everything) and metrics["ran"] == len(mine)
        assert metrics["excluded"] == len(everything) - len(mine) == sum(
            n for o, n in metrics["outcomes"].items() if o not in ran_outcomes)
        assert all(e["success"] == (e["outcome"] == "solved") for e in everything)
        assert metrics["success_rate"]["mean"] == pytest.approx(sum(e["success"] for e in mine) / len(mine))
        turns = [e["turns"] if e["success"] else max(e["turn_limit"], e["turns"]) for e in mine]
        assert metrics["turns"]["mean"] == pytest.approx(sum(turns) / len(mine))
        solved = [e for e in mine if e["success"]]
        assert metrics["turns_solved"]["mean"] == pytest.approx(sum(e["turns"] for e in solved) / len(solved))
        assert metrics["model_calls_solved"]["mean"] == pytest.approx(
            sum(e["model_calls"] for e in solved) / len(solved))
        for name in ("model_calls", "input_tokens", "output_tokens", "tool_calls", "invalid_actions"):
            assert metrics[name]["mean"] == pytest.approx(sum(e[name] for e in mine) / len(mine)), name
        if report["confidence_intervals"]:
            low, high = metrics["success_rate"]["ci95"]
            assert low <= metrics["success_rate"]["mean"] <= high
    for suite, agents in report["by_suite"].items():
        for agent, metrics in agents.items():
            mine = [e for e in episodes if e["agent"] == agent and e["suite"] == suite and e["outcome"] in ran_outcomes]
            assert metrics["model_calls"]["mean"] == pytest.approx(sum(e["model_calls"] for e in mine) / len(mine))


def test_paired_comparison_and_markdown(mini: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    run = run_bench(config(mini, out, tasks=["sum", "chain", "pair"]), progress=NoProgress(), plots=False)
    fc_vs_json = paired(run.episodes, "react-fc", "react-json")
    assert fc_vs_json.tasks == 3 and fc_vs_json.ties == 3 and fc_vs_json.sign_test_p == 1.0
    assert fc_vs_json.calls_ratio > 1  # one call per turn needs more turns
    md = (out / "report.md").read_text()
    assert "| agent | ran | excluded | success | turns (ran) | turns (solved) |" in md
    assert "react-json vs react-fc" in md and "mini/sum" in md


def test_report_from_episodes_only(mini: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    run_bench(config(mini, out, agents=["react-fc"], tasks=["sum"]), progress=NoProgress(), report=False)
    report = build_report(ResultsDir(out).episodes(), {"model": "oracle"})
    assert list(report.overall) == ["react-fc"] and report.overall["react-fc"].success_rate.mean == 1.0


def test_episodes_file_survives_a_cut_off_line(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path)
    from codeact.bench import Episode

    results.append(Episode(key="s/t/a/0", suite="s", task="t", agent="a", repeat=0, success=True))
    with open(results.episodes_file, "a") as f:
        f.write('{"key": "s/t/a/1", "suite": "s", "ta')  # the process died mid-write
    results.append(Episode(key="s/t/a/2", suite="s", task="t", agent="a", repeat=2, success=False))
    assert [e.key for e in results.episodes()] == ["s/t/a/0", "s/t/a/2"]


# --------------------------------------------------------------------------- CLI


def test_cli_list_run_report_compare(mini: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    listed = runner.invoke(cli, ["bench", "list"])
    assert listed.exit_code == 0 and "tool-chains" in listed.output and "data-analysis" in listed.output
    tasks = runner.invoke(cli, ["bench", "list", "--suite", str(mini), "--json"])
    assert [t["id"] for t in json.loads(tasks.output)[0]["tasks"]] == ["sum", "chain", "pair", "crashes", "broken"]

    a, b = tmp_path / "a", tmp_path / "b"
    for out, agents in ((a, "react-fc,react-json"), (b, "react-json")):
        result = runner.invoke(cli, ["bench", "run", "--suite", str(mini), "--model", "oracle", "--agents", agents,
                                     "--task", "sum", "--task", "pair", "--out", str(out), "--no-plots",
                                     "--price-in", "2.5", "--price-out", "10"])
        assert result.exit_code == 0, result.output
        assert "Overall" in result.stdout
    assert (a / "report.json").exists() and not (a / "plots").exists()
    assert json.loads((a / "report.json").read_text())["overall"]["react-json"]["cost"] > 0

    report = runner.invoke(cli, ["bench", "report", str(a), "--format", "json"])
    assert report.exit_code == 0 and json.loads(report.stdout)["episodes"] == 4
    assert (a / "plots" / "success_rate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = runner.invoke(cli, ["bench", "report", str(a), "--format", "md", "--no-plots"])
    assert md.stdout.startswith("# Benchmark results")

    compared = runner.invoke(cli, ["bench", "compare", str(a), str(b), "--format", "json"])
    assert compared.exit_code == 0
    data = json.loads(compared.stdout)
    assert set(data["a"]["overall"]) == {"react-fc", "react-json"} and set(data["b"]["overall"]) == {"react-json"}
    table = runner.invoke(cli, ["bench", "compare", str(a), str(b)])
    assert "react-json" in table.stdout and "B - A" in table.stdout


def test_cli_errors_are_one_line(mini: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    monkeypatch.delenv("CODEACT_MODEL", raising=False)
    cases = [
        (["bench", "run", "--suite", str(mini), "--out", str(tmp_path / "x")], "--model oracle"),
        (["bench", "run", "--suite", str(mini), "--model", "oracle", "--agents", "react-xml", "--out",
          str(tmp_path / "x")], "unknown agent(s) react-xml"),
        (["bench", "run", "--suite", "nope.py", "--model", "oracle", "--out", str(tmp_path / "x")], "not found"),
        (["bench", "report", str(tmp_path)], "not a results directory"),
        (["bench", "run", "--suite", str(mini), "--model", "oracle", "--price-in", "1", "--out",
          str(tmp_path / "x")], "give both prices"),
    ]
    for argv, message in cases:
        result = runner.invoke(cli, argv)
        assert result.exit_code != 0, argv
        assert "Error: " in result.stderr and message in result.stderr, (argv, result.stderr)
        assert "Traceback" not in result.stderr


def test_progress_bar_shows_eta_and_running_success() -> None:
    import io

    from rich.console import Console

    from codeact.bench import Episode
    from codeact.bench._progress import BarProgress, default_progress

    buf = io.StringIO()
    bar = BarProgress(Console(file=buf, force_terminal=True, width=160))
    bar.start(total=4, done=1)
    bar.advance(Episode(key="s/t/codeact/0", suite="s", task="t", agent="codeact", repeat=0, success=True))
    bar.advance(Episode(key="s/t/react-fc/0", suite="s", task="t", agent="react-fc", repeat=0, success=False,
                        outcome="wrong_answer"))
    bar.advance(Episode(key="s/t/react-fc/1", suite="s", task="t", agent="react-fc", repeat=1, success=False,
                        outcome="model_error"))
    bar.stop()
    text = buf.getvalue()
    assert "3/4" in text and "ETA" in text and "codeact 1/1" in text and "react-fc 0/1 (+1 errors)" in text
    assert isinstance(default_progress(), NoProgress)  # pytest's stderr is not a terminal


def test_bench_list_shows_a_suite_that_cannot_load_here_without_hiding_the_others(monkeypatch: pytest.MonkeyPatch
                                                                                   ) -> None:
    import codeact.bench as bench_pkg

    # A shipped suite whose data cannot be had on this machine (as bfcl-multi-turn offline on first use).
    monkeypatch.setattr(bench_pkg, "list_suites", lambda: ["tool-chains", "no_such_suite_module_here"])
    result = CliRunner().invoke(cli, ["bench", "list"])
    assert result.exit_code == 0, result.output
    assert "tool-chains" in result.output and "no_such_suite_module_here" in result.output
    assert "unavailable here" in result.output
    result = CliRunner().invoke(cli, ["bench", "list", "--json"])
    rows = {row["name"]: row for row in json.loads(result.output)}
    assert rows["tool-chains"]["tasks"] and "error" in rows["no_such_suite_module_here"]
