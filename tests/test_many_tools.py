"""The ``many-tools`` suite: its shape, and a small subset through the oracles on Docker.

The full comparison (25 tasks, three agents, the table) is
``benchmarks/many_tools_bench.py``; here two tasks run through the bench
harness as CodeAct ``all``, CodeAct ``on_demand`` (whose oracle must find its
tools by searching) and ReAct function calling.
"""

from __future__ import annotations

import pytest

from codeact.bench import BenchConfig, BenchRun, load_suite, run_bench
from codeact.bench._progress import NoProgress
from codeact.bench.suites import many_tools
from codeact.bench.suites.many_tools_oracle import SearchingOracle, oracle_factory
from codeact.catalog import ToolCatalog
from codeact.messages import Message

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

SUITE = "many-tools"  # the shipped name
AGENTS = ["codeact-all", "codeact-on-demand", "react-fc"]
TASKS = ["customer-overdue-total", "project-open-risks"]


@pytest.fixture(scope="module")
def toolset():
    yield many_tools.shared_toolset()
    many_tools.close_servers()


@pytest.fixture(scope="module")
def small_run(toolset, tmp_path_factory: pytest.TempPathFactory, docker_ready: None) -> BenchRun:
    out = tmp_path_factory.mktemp("many-tools") / "results"
    return run_bench(BenchConfig(suites=[SUITE], agents=AGENTS, model="oracle", concurrency=3, backend="docker",
                                 out=out, tasks=TASKS, episode_timeout=300),
                     model=oracle_factory, progress=NoProgress(), plots=False)


def test_the_suite_has_hundreds_of_tools_on_a_dozen_servers(toolset) -> None:
    tools = list(toolset)
    groups = {t.group for t in tools if t.group}
    assert len([t for t in tools if t.group]) >= 300 and len(groups) >= 10
    suite = load_suite(SUITE)
    assert len(suite.tasks) >= 20
    assert all(2 <= len(many_tools.NEEDED[t.id]) <= 5 for t in suite.tasks)
    assert all(t.oracle is not None for t in suite.tasks)


def test_the_tools_each_task_needs_are_found_by_its_wording(toolset) -> None:
    catalog = ToolCatalog(list(toolset), descriptions=toolset.group_descriptions)
    suite = {t.id: t for t in load_suite(SUITE).tasks}
    for task_id in TASKS:
        top = [e.name for e in catalog.search(suite[task_id].instruction, limit=5)]
        assert set(many_tools.NEEDED[task_id]) <= set(top), (task_id, top)


def test_on_demand_costs_a_tenth_of_all_at_the_same_success(small_run: BenchRun) -> None:
    by = {(e.task, e.agent): e for e in small_run.episodes}
    assert set(by) == {(t, a) for t in TASKS for a in AGENTS}
    failed = {k: (e.status, e.error) for k, e in by.items() if not e.success}
    assert not failed, failed
    for task in TASKS:
        everything, on_demand = by[(task, "codeact-all")], by[(task, "codeact-on-demand")]
        assert everything.model_calls == 1 and on_demand.model_calls >= 2  # it searched first
        assert everything.input_tokens > 20_000  # every stub, counted with cl100k_base
        assert on_demand.input_tokens <= 0.10 * everything.input_tokens
        assert by[(task, "react-fc")].input_tokens > everything.input_tokens  # schemas with every request


def test_the_searching_oracle_only_uses_names_it_was_shown() -> None:
    task = next(t for t in load_suite(SUITE).tasks if t.id == TASKS[0])
    oracle = SearchingOracle(task)
    first = oracle.complete([Message("system", "s"), Message("user", task.instruction)]).text
    assert "search_tools(" in first and "invoices_for_customer" not in first
    # the searches printed nothing useful: it searches part by part, then gives up without guessing
    history = [Message("system", "s"), Message("user", task.instruction), Message("assistant", first),
               Message("user", "Observation:\n[] (no tool matches; try other words)")]
    second = oracle.complete(history).text
    assert "for part in" in second
    history += [Message("assistant", second), Message("user", "Observation:\n[]")]
    third = oracle.complete(history).text
    assert "```" not in third and "could not find" in third
