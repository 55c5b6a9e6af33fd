"""The bfcl-multi-turn suite: BFCL's own data, APIs and checker (bfcl-eval, installed without its dependencies).

* Our checker (live instances, :mod:`codeact.bench.suites._bfcl_world`) gives the verdict of the package's
  ``multi_turn_checker`` (which re-executes call strings) on the ground truth and on deliberately wrong call
  sequences, entry by entry.
* A sample of 20 tasks (5 per category) x all four agents, solved by the oracle: CodeAct on Docker with one
  model call per user turn, ReAct on the host; the report's multi-turn table.
* The same sample on the two-node Ray test cluster.

The package comes from ``scripts/dev.sh`` (ensure_bfcl) or is prepared here on first use (PyPI).
"""

from __future__ import annotations

import contextlib
import copy
import textwrap
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.ci import unavailable

from codeact.bench import BenchConfig, BenchRun, load_suite, run_bench
from codeact.bench._progress import NoProgress
from codeact.bench.suites import _bfcl_package as package
from codeact.bench.suites import _bfcl_world as bfcl

AGENTS = ["codeact", "react-fc", "react-json", "react-text"]
#: 5 entries per category: 173's reference passes a string id to an int parameter; 90 and 147 post a tweet
#: whose mention list a later call extends (the API keeps the list it is given).
SAMPLE = [f"multi_turn_{c}_{i}" for c in bfcl.CATEGORIES for i in (0, 60, 90, 147, 173)]


@pytest.fixture(scope="module")
def prepared() -> Path:
    return package.ensure_importable()


# --- the checker agrees with BFCL's ----------------------------------------------------------------------


def _raw_entries(category: str) -> dict[str, dict[str, Any]]:
    data = package.data_dir()
    return {e["id"]: e for e in package.read_jsonl(data / f"BFCL_v4_multi_turn_{category}.json")}


def _ours(entry: bfcl.Entry, turns: list[list[str]]) -> bool:
    """Our verdict: the calls run through the episode's tools (as an agent's would), BFCL's rule after each turn."""
    world = bfcl.World(entry)
    tools = {t.name: t for t in world.tools()}
    ok = True
    for index, calls in enumerate(turns):
        for text in calls:
            c = bfcl.parse_call(text)
            with contextlib.suppress(Exception):  # a failing call is recorded by the world, as BFCL records it
                tools[c.name].call(tools[c.name].bind(*c.fresh()))
        ok = bfcl.check_turn(world, index, made_calls=bool(calls)).ok and ok
        if not ok:
            return False
    return ok


_names = itertools.count()


def _theirs(raw: dict[str, Any], truth: list[list[str]], turns: list[list[str]]) -> bool:
    """The package's own multi_turn_checker (one decoded step per turn; a fresh model name: its instances are
    kept in the module's globals by name)."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    decoded = [[calls] if calls else [] for calls in turns]
    category = raw["id"].rsplit("_", 1)[0]
    return multi_turn_checker(decoded, truth, copy.deepcopy(raw), category, f"codeact_test_{next(_names)}")["valid"]


def _variants(truth: list[list[str]]) -> dict[str, list[list[str]]]:
    """The ground truth, and wrong sequences made from it."""
    out = {"ground truth": truth}
    turns = [i for i, t in enumerate(truth) if t]
    last = turns[-1]
    out["last call of a turn dropped"] = [t[:-1] if i == last else t for i, t in enumerate(truth)]
    out["a turn left empty"] = [[] if i == turns[0] else t for i, t in enumerate(truth)]
    for i, calls in enumerate(truth):  # a string argument changed
        for j, text in enumerate(calls):
            if "='" in text:
                changed = text.replace("='", "='x", 1)
                out["a string argument changed"] = [[changed if (a, b) == (i, j) else c for b, c in enumerate(t)]
                                                    for a, t in enumerate(truth)]
                break
        if "a string argument changed" in out:
            break
    out["a call made twice"] = [t + t[-1:] if i == last else t for i, t in enumerate(truth)]
    out["turns in reverse order"] = list(reversed(truth))
    return out


@pytest.mark.timeout(600)
@pytest.mark.parametrize("category", bfcl.CATEGORIES)
def test_our_check_gives_bfcls_verdict(prepared: Path, category: str) -> None:
    raws = _raw_entries(category)
    entries = bfcl.load_entries(category)
    truths = {a["id"]: a["ground_truth"] for a in package.read_jsonl(
        package.data_dir() / "possible_answer" / f"BFCL_v4_multi_turn_{category}.json")}
    step = 1 if category != "long_context" else 4  # long-context states are large: every 4th entry
    disagree = []
    counted: dict[str, list[bool]] = {}
    for entry in entries[::step]:
        raw, truth = raws[entry.id], truths[entry.id]
        for name, turns in _variants(truth).items():
            ours, theirs = _ours(entry, turns), _theirs(raw, truth, turns)
            counted.setdefault(name, []).append(theirs)
            if ours != theirs:
                disagree.append((entry.id, name, ours, theirs))
    assert not disagree, disagree[:10]
    assert all(counted["ground truth"])  # every reference passes both
    for name in ("last call of a turn dropped", "a turn left empty"):
        assert not any(counted[name]), name  # the checks can fail: these always do
    assert not all(counted["a string argument changed"]) and not all(counted["turns in reverse order"])


def test_episodes_never_change_the_shared_ground_truth(prepared: Path) -> None:
    """The APIs keep (and later change) the lists they are given: the checker's and the oracle's runs get copies."""
    from codeact.bench import run_plan

    suite = load_suite("bfcl-multi-turn")
    for entry in (e for c in bfcl.CATEGORIES for e in bfcl.load_entries(c)):
        before = [[bfcl.parse_call(c.text) for c in turn] for turn in entry.ground_truth]
        bfcl.World(entry).truth_through(len(entry.ground_truth) - 1)
        tools = {t.name: t for t in bfcl.World(entry).tools()}
        for turn in suite.task(entry.id).turns:
            if turn.oracle is not None and turn.oracle.reply is None:
                run_plan(turn.oracle.plan, tools)
        assert [list(turn) for turn in entry.ground_truth] == before, entry.id


def test_ground_truth_is_parsed_without_evaluating_anything(prepared: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(Exception, match="literal"):
        bfcl.parse_call(f"ls(a=open({str(marker)!r}, 'w'))")
    with pytest.raises(Exception, match="literal"):
        bfcl.parse_call("__import__('os').system('true')")
    assert not marker.exists()
    assert bfcl.parse_call("sort('a.txt')") == bfcl.GroundCall("sort", ("a.txt",), {}, "sort('a.txt')")


def test_the_suite_has_800_tasks_with_their_source_and_version(prepared: Path) -> None:
    suite = load_suite("bfcl-multi-turn")
    assert len(suite.tasks) == 800 and suite.version == f"bfcl-eval-{package.BFCL_VERSION}"
    assert package.BFCL_VERSION in suite.description and "PyPI" in suite.description
    parts = {c: load_suite(f"bfcl-multi-turn:{c}") for c in bfcl.CATEGORIES}
    assert {c: len(s.tasks) for c, s in parts.items()} == dict.fromkeys(bfcl.CATEGORIES, 200)
    assert parts["base"].name == "bfcl-multi-turn:base"
    miss = parts["miss_func"].task("multi_turn_miss_func_0")
    assert [t.new_tools for t in miss.turns] == [(), (), (), ("sort",), ()]
    assert miss.turns[3].message == bfcl.MORE_FUNCTIONS
    with pytest.raises(Exception, match="no part"):
        load_suite("bfcl-multi-turn:nope")


def test_the_package_never_enters_the_projects_environment(prepared: Path) -> None:
    """bfcl_eval comes from its own directory, at the end of sys.path; none of its heavy dependencies loads."""
    import bfcl_eval

    assert Path(bfcl_eval.__file__).resolve().is_relative_to(prepared.resolve())
    assert sys.path.index(str(prepared)) > sys.path.index(str(Path(__file__).resolve().parents[1])) \
        if str(Path(__file__).resolve().parents[1]) in sys.path else True
    load_suite("bfcl-multi-turn:base")
    for heavy in ("torch", "sentence_transformers", "faiss", "anthropic", "cohere", "mistralai", "tree_sitter"):
        assert heavy not in sys.modules, heavy


# --- the oracle on a sample, every agent ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory: pytest.TempPathFactory, docker_ready: None, prepared: Path) -> BenchRun:
    out = tmp_path_factory.mktemp("bfcl") / "results"
    return run_bench(BenchConfig(suites=["bfcl-multi-turn"], agents=AGENTS, model="oracle", tasks=SAMPLE,
                                 concurrency=4, backend="docker", out=out), progress=NoProgress(), plots=False)


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_every_agent_solves_the_sample(sample_run: BenchRun) -> None:
    by_key = {e.key: e for e in sample_run.episodes}
    assert set(by_key) == {f"bfcl-multi-turn/{t}/{a}/0" for t in SAMPLE for a in AGENTS}
    failed = {k: (e.outcome, e.check, e.error) for k, e in by_key.items() if not e.success}
    assert not failed, json.dumps(failed, indent=1)[:4000]
    suite = load_suite("bfcl-multi-turn")
    for e in sample_run.episodes:
        task = suite.task(e.task)
        assert e.user_turns == e.user_turns_passed == len(task.turns), e.key
        assert len(e.turn_model_calls) == len(task.turns) and sum(e.turn_model_calls) == e.model_calls


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_codeact_needs_one_model_call_per_user_turn(sample_run: BenchRun) -> None:
    rows = {r["agent"]: r for r in sample_run.report.to_json()["multi_turn"]}
    assert rows["codeact"]["model_calls_per_user_turn"] == 1.0
    for e in sample_run.episodes:
        if e.agent == "codeact":
            assert set(e.turn_model_calls) == {1} and e.invalid_actions == 0, e.key
    # ReAct: the turn's calls, then the answer (function calling sends a turn's calls in one request).
    assert 1.0 < rows["react-fc"]["model_calls_per_user_turn"] < rows["react-json"]["model_calls_per_user_turn"]
    assert rows["react-json"]["model_calls_per_user_turn"] == rows["react-text"]["model_calls_per_user_turn"]
    for row in rows.values():
        assert row["categories"] == dict.fromkeys(bfcl.CATEGORIES, 1.0) and row["overall"] == 1.0


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_a_function_held_back_is_missing_until_its_turn(sample_run: BenchRun) -> None:
    """miss_func: `sort` is offered at turn 3 (the oracle's turn 2 only asks); each agent saw it then, not before."""
    from codeact.runlog import RunLog

    with RunLog(sample_run.results.path / "runs.db") as log:
        for e in sample_run.episodes:
            if e.task != "multi_turn_miss_func_0":
                continue
            runs = sorted((log.get_run(r.id) for r in log.list_runs(limit=None, bench_episode=e.key)),
                          key=lambda r: r.started)
            assert len(runs) == 5, e.key  # one run per user turn, each linked to the episode
            assert "sort" not in runs[2].tools and "sort" in runs[3].tools, e.key
            assert bfcl.MORE_FUNCTIONS in runs[3].task, e.key
            if e.agent in ("codeact", "react-text"):
                assert "sort(file_name" in runs[3].task, e.key  # the new function is shown with the message


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_the_report_shows_the_leaderboards_headline(sample_run: BenchRun, tmp_path: Path) -> None:
    from codeact.bench import build_report, to_markdown

    report = build_report(sample_run.episodes, {"suites": ["bfcl-multi-turn"]})
    text = to_markdown(report)
    assert "## Multi-turn: success per category and costs per user turn" in text
    header = next(line for line in text.splitlines() if line.startswith("| agent | tasks | base"))
    assert "miss_func | miss_param | long_context | overall | calls / user turn" in header
    assert "| codeact | 20 | 100.0% | 100.0% | 100.0% | 100.0% | 100.0% | 1.00 |" in text


# --- on the two-node Ray test cluster ------------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_the_sample_runs_unchanged_on_ray(sample_run: BenchRun, tmp_path: Path) -> None:
    from tests.ray_cluster import RayCluster, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        unavailable("the Ray tests", reason)
    out = tmp_path / "results"
    codeact = str(Path(sys.executable).parent / "codeact")
    args = [codeact, "bench", "run", "--suite", "bfcl-multi-turn", "--agents", ",".join(AGENTS), "--model",
            "oracle", "--out", str(out), "--no-plots"]
    for t in SAMPLE[3::5]:  # one task per category (147), every agent
        args += ["--task", t]
    with RayCluster(workers=1, cpus_per_node=2) as cluster:
        proc = cluster.run([*args, "--ray", cluster.address])
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(lines) == 4 * 4 and all(e["success"] for e in lines), [e["check"] for e in lines if not e["success"]]
    local = {e.key: e for e in sample_run.episodes}
    for e in lines:  # the same calls per user turn as the local run
        assert e["turn_model_calls"] == local[e["key"]].turn_model_calls, e["key"]


# --- hostile code against the host's API instances ------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_hostile_code_cannot_hold_the_hosts_cpu_or_memory_through_the_apis(prepared: Path) -> None:
    """The APIs run on the host with the code's arguments: a huge integer power, an mpmath precision of 10**8,
    and a loop of 4 MB writes into the file system come back as errors, quickly, and the host stays small."""
    import resource
    import time

    from codeact import CodeActAgent, ScriptedModel

    entry = next(e for e in bfcl.load_entries("base") if {"MathAPI", "GorillaFileSystem"} <= set(e.classes))
    world = bfcl.World(entry)
    code = textwrap.dedent("""
        out = []
        for call in (lambda: power(base=10, exponent=10**12), lambda: logarithm(value=2, base=10, precision=10**8),
                     lambda: square_root(number=2, precision=10**9), lambda: add(a=10**4000, b=1)):
            try:
                out.append(call())
            except Exception as exc:
                out.append(f"refused: {exc}")
        big = "x" * (4 * 1024 * 1024)
        writes = 0
        try:
            for i in range(100):
                touch(file_name=f"f{i}.txt")
                echo(content=big, file_name=f"f{i}.txt")
                writes += 1
        except Exception as exc:
            out.append(f"writes stopped after {writes}: {exc}")
        final_answer(out)
    """)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    agent = CodeActAgent(ScriptedModel([f"```python\n{code}\n```"]), world.tools(), log=False,
                         execution_timeout=240)
    result = agent.run("go")
    elapsed = time.monotonic() - started
    assert result.status == "success", result.error
    answer = result.answer
    assert all(str(a).startswith("refused:") for a in answer[:4]), answer[:4]
    assert "exponent is at most" in answer[0] and "precision is at most" in answer[1]
    assert "over their budget" in answer[4], answer[4]
    assert 10 <= int(answer[4].split("after ")[1].split(":")[0]) <= 16  # 64 Mi characters of arguments
    assert elapsed < 200  # did not hang (generous: a loaded 2-core machine)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert grown_mb < 1024, grown_mb
