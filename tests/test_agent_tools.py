"""Agents as tools (``agent.as_tool``) and run budgets that hold across the tree of runs.

Real sandboxes (docker for the acceptance run, the local kernel or the restricted backend elsewhere), a real
run log and the real CLI; only the models' text is scripted.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from textwrap import dedent
from typing import Any

import pytest
from click.testing import CliRunner

from codeact.agent import CodeActAgent, RunLimits
from codeact.budget import Prices
from codeact.errors import ConfigError
from codeact.events import ToolCall
from codeact.messages import Message
from codeact.models import ScriptedModel
from codeact.react import ReActAgent
from codeact.runlog import RunLog
from codeact.tools import tool

pytestmark = [pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::UserWarning")]


def py(code: str) -> str:
    return f"Let me do that.\n```python\n{dedent(code).strip()}\n```"


def task_of(messages: list[Message]) -> str:
    """The task of the run a scripted reply answers (the first user message)."""
    return next(str(m.content) for m in messages if m.role == "user")


def answered(messages: list[Message]) -> bool:
    """Whether the run already saw an observation (its code ran): time for the final answer."""
    return any(m.role in ("user", "tool") for m in messages[2:])


def react_leaf(log: Any, answer: Any = "leaf done", n: int = 50, **options: Any) -> ReActAgent:
    """A ReAct agent that answers at once (no sandbox: cheap), ``n`` times."""
    replies = [ScriptedModel.tool_calls(("final_answer", {"answer": answer})) for _ in range(n)]
    return ReActAgent(ScriptedModel(replies, name="leaf-model"), log=log, **options)


def doubler(log: Any, sandbox: str = "local") -> CodeActAgent:
    """A CodeAct child whose code doubles the number in its task."""

    def reply(messages: list[Message]) -> str:
        n = int(re.findall(r"\d+", task_of(messages))[0])
        return py(f"final_answer({n} * 2)")

    return CodeActAgent(ScriptedModel([reply] * 10, name="child-model"), sandbox=sandbox, log=log)


# --------------------------------------------------------------------------- the acceptance check


@pytest.mark.docker
def test_parent_code_calls_a_child_three_times_and_the_runs_are_linked(tmp_path, docker_ready):
    log = RunLog(tmp_path / "runs.db")
    child = doubler(log)
    parent = CodeActAgent(ScriptedModel([
        py("""
            total = 0
            for n in [1, 2, 3]:
                total += doubler(f"double {n}")
            print(total)
        """),
        py("final_answer(total)"),
    ], name="parent-model"), [child.as_tool(name="doubler", description="Doubles the number in the task.")],
        sandbox="docker", log=log, output_dir=tmp_path / "out")
    result = parent.run("Add up the doubles of 1, 2 and 3")
    assert result.status == "success", result.error
    assert result.answer == 12
    children = log.children(result.run_id)
    assert len(children) == 3
    assert [(c.parent_run_id, c.parent_step, c.status) for c in children] == [(result.run_id, 1, "success")] * 3
    assert {log.get_run(c.id).answer for c in children} == {2, 4, 6}
    calls = log.get_run(result.run_id).steps[0].tool_calls
    assert [c.name for c in calls] == ["doubler"] * 3 and [c.result for c in calls] == [2, 4, 6]

    from codeact.cli import cli

    shown = CliRunner().invoke(cli, ["logs", "show", result.run_id, "--db", str(tmp_path / "runs.db")])
    assert shown.exit_code == 0, shown.output
    assert "Child runs" in shown.output and all(c.id in shown.output for c in children)
    tree = CliRunner().invoke(cli, ["logs", "show", "--tree", result.run_id, "--db", str(tmp_path / "runs.db")])
    assert tree.exit_code == 0, tree.output
    print(tree.output)  # the closing note of issue 32 shows it
    lines = tree.output.splitlines()
    assert result.run_id in lines[0] and "success" in lines[0]
    assert sum(1 for line in lines if any(c.id in line for c in children) and "step 1 → doubler" in line) == 3

    # The parent's tool-call events name the child runs; the web page and an exported notebook show them.
    from codeact.export import to_notebook
    from codeact.ui._wire import event_wire

    recorded = [e["payload"] for e in log.get_events(result.run_id) if e["type"] == "ToolCall"]
    assert [(e["child_run_id"], e["child_status"]) for e in recorded] == [(c.id, "success") for c in children]
    wire = event_wire(ToolCall(run_id=result.run_id, step=1, name="doubler", arguments={"task": "double 1"},
                               result=2, child_run_id=children[0].id, child_status="success"), lambda m, d: "")
    assert (wire["child_run_id"], wire["child_status"]) == (children[0].id, "success")
    notebook = to_notebook(log.get_run(result.run_id), children)
    marks = [c.source for c in notebook.cells if c.cell_type == "markdown" and "child run" in c.source]
    assert len(marks) == 3
    assert all(m.startswith(f"**child run `{c.id}` of codeact**") for m, c in zip(marks, children, strict=True))
    assert "A child run of run" in to_notebook(log.get_run(children[0].id)).cells[1].source


# --------------------------------------------------------------------------- budgets across a tree


def _tree(log: Any, limits: RunLimits | None) -> CodeActAgent:
    """codeact (local kernel) -> 3 parallel ``mid`` runs (threads in its code) -> 4 ``leaf`` runs each."""
    leaf = react_leaf(log, n=200)

    def mid_reply(messages: list[Message]) -> str:
        if answered(messages):
            return py("final_answer(len(done))")
        return py("done = [leaf(f'part {i}') for i in range(4)]\nprint(done)")

    mid = CodeActAgent(ScriptedModel([mid_reply] * 200, name="mid-model"), [
        leaf.as_tool(name="leaf", description="Does one small part.", max_parallel=8)], sandbox="local", log=log)
    root_code = py("""
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(3) as pool:
            parts = list(pool.map(lambda i: mid(f"section {i}"), range(3)))
        print(parts)
    """)
    return CodeActAgent(ScriptedModel([root_code, py("final_answer(sum(parts))")], name="root-model"),
                        [mid.as_tool(name="mid", description="Handles one section.")], sandbox="local", log=log,
                        limits=limits)


def _spent(log: RunLog) -> tuple[int, int]:
    runs = log.list_runs(limit=None)
    return sum(r.usage.requests for r in runs), sum(r.usage.total_tokens for r in runs)


def test_a_tree_of_three_levels_with_parallel_children_runs_to_the_end_within_its_budget(tmp_path):
    log = RunLog(tmp_path / "runs.db")
    prices = {name: Prices(1.0, 2.0) for name in ("root-model", "mid-model", "leaf-model")}
    result = _tree(log, RunLimits(max_model_calls=100, prices=prices)).run("Do the three sections")
    assert result.status == "success", result.error
    assert result.answer == 12
    assert result.usage.cost is not None and result.usage.cost > 0  # priced from the table
    mids = log.children(result.run_id)
    assert len(mids) == 3 and all(m.parent_step == 1 for m in mids)
    assert [len(log.children(m.id)) for m in mids] == [4, 4, 4]
    calls, _ = _spent(log)
    assert calls == 2 + 3 * 2 + 12


@pytest.mark.parametrize("kind", ["max_model_calls", "max_tokens", "max_cost"])
def test_a_budget_spent_anywhere_in_the_tree_ends_the_whole_tree(tmp_path, kind):
    # The whole tree's spending without limits, to set each limit at about half of it.
    free = RunLog(tmp_path / "free.db")
    unlimited = _tree(free, None).run("Do the three sections")
    # On failure, what each run of the tree said (one such run failed once in CI, too briefly to see why).
    assert unlimited.status == "success", [(r.agent, r.status, r.error) for r in free.list_runs(limit=None)]
    calls, tokens = _spent(free)
    prices = {name: Prices(1.0, 1.0) for name in ("root-model", "mid-model", "leaf-model")}
    limit: dict[str, Any] = {"max_model_calls": calls // 2, "max_tokens": tokens // 2,
                             "max_cost": tokens / 2 / 1e6}
    log = RunLog(tmp_path / "runs.db")
    result = _tree(log, RunLimits(prices=prices, **{kind: limit[kind]})).run("Do the three sections")
    assert result.status == "budget_exceeded", (result.status, result.error)
    assert f"{kind}=" in result.error
    assert "codeact > mid > leaf:" in result.error and "codeact > mid:" in result.error  # spent on what
    assert "model calls" in result.error and "tokens" in result.error and "$" in result.error
    spent_calls, spent_tokens = _spent(log)
    assert spent_calls < calls and spent_tokens < tokens  # it stopped early
    if kind == "max_model_calls":  # parallel runs reserve a call before they make it: never one too many
        assert spent_calls == limit[kind]
    statuses = {r.status for r in log.list_runs(limit=None)}
    assert "running" not in statuses and "budget_exceeded" in statuses


def test_a_model_with_prices_puts_the_cost_on_the_usage_and_a_dollar_budget_holds(tmp_path, openai_server):
    from codeact.models import OpenAIModel

    def model() -> OpenAIModel:
        return OpenAIModel("test-model", base_url=openai_server.base_url, api_key="k", prices=Prices(1.0, 2.0))

    openai_server.plan_text("The answer is 4.", usage=(1000, 100))
    result = CodeActAgent(model(), sandbox="local", log=False).run("2+2?")
    assert result.status == "success" and result.usage.cost == pytest.approx(0.0012)

    openai_server.plan_text(py("print(1)"), usage=(1000, 100))
    result = CodeActAgent(model(), sandbox="local", log=False, limits=RunLimits(max_cost=0.001)).run("2+2?")
    assert result.status == "budget_exceeded" and "max_cost=$0.001: $0.0012 spent" in result.error
    assert "print(1)" in result.steps[0].model_output and result.steps[0].observation is None  # not run


def test_the_summary_line_shows_the_cost_when_it_is_known():
    from codeact.cli.render import Renderer

    renderer = Renderer(live=False)
    assert "$0.0012" in renderer.summary_text("success", 2, 1000, 100, 1.0, "abc", cost=0.0012).plain
    assert "$" not in renderer.summary_text("success", 2, 1000, 100, 1.0, "abc").plain


def test_the_run_log_keeps_each_calls_cost_and_logs_show_gives_the_trees_total_beside_the_runs_own(tmp_path):
    from codeact.cli import cli
    from codeact.cli.render import fmt_tokens

    db = tmp_path / "runs.db"
    log = RunLog(db)
    leaf = react_leaf(log, answer=7)
    prices = {"root-model": Prices(1.0, 2.0), "leaf-model": Prices(3.0, 4.0)}  # a child uses the table above it
    parent = CodeActAgent(ScriptedModel([py("print(leaf('a') + leaf('b'))"), "The sum is 14."], name="root-model"),
                          [leaf.as_tool(name="leaf", description="Answers 7.")], sandbox="restricted", log=log,
                          limits=RunLimits(prices=prices))
    result = parent.run("add two sevens")
    assert result.status == "success", result.error
    children = log.children(result.run_id)
    assert len(children) == 2 and all(c.usage.cost for c in children)
    own, tree = result.usage, result.tree_usage
    assert own.requests == 2 and tree.requests == 2 + 2  # each leaf answered in one model call
    assert own.cost is not None and tree.cost == pytest.approx(own.cost + sum(c.usage.cost for c in children))
    assert tree.total_tokens == own.total_tokens + sum(c.usage.total_tokens for c in children)

    # Stored per model call and per run, whatever the prices' source (here: the table, after the call).
    record = log.get_run(result.run_id)
    assert record.usage.cost == pytest.approx(own.cost)
    assert [s.usage.cost for s in record.steps] == pytest.approx([s.usage.cost for s in result.steps])
    assert all(s.usage.cost for s in record.steps)
    expected = Prices(1.0, 2.0).cost(record.steps[0].usage)
    assert record.steps[0].usage.cost == pytest.approx(expected)
    logged, runs = log.tree_usage(result.run_id)
    assert runs == 3 and (logged.requests, logged.total_tokens) == (tree.requests, tree.total_tokens)
    assert logged.cost == pytest.approx(tree.cost)
    model_outputs = [e["payload"]["usage"] for e in log.get_events(result.run_id) if e["type"] == "ModelOutput"]
    assert all(u["cost"] for u in model_outputs)  # the event carries it (a live view shows it too)

    shown = CliRunner().invoke(cli, ["logs", "show", result.run_id, "--db", str(db)])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    for step in record.steps:
        assert f"Step {step.step} ·" in text and f"${step.usage.cost:.4f}" in text
    assert f"${own.cost:.4f} · " in text  # the run's own, on its summary line
    assert f"whole tree (3 runs): 4 model calls · {fmt_tokens(tree.total_tokens)} tokens · ${tree.cost:.4f}" in text
    assert f"(this run alone: 2 model calls · {fmt_tokens(own.total_tokens)} tokens · ${own.cost:.4f})" in text

    drawn = CliRunner().invoke(cli, ["logs", "show", "--tree", result.run_id, "--db", str(db)])
    assert drawn.exit_code == 0, drawn.output
    text = " ".join(drawn.output.split())
    assert f"whole tree (3 runs): 4 model calls · {fmt_tokens(tree.total_tokens)} tokens · ${tree.cost:.4f}" in text
    assert all(f"${c.usage.cost:.4f}" in text for c in children)

    from io import StringIO

    from rich.console import Console

    from codeact.cli.render import Renderer

    live = Console(file=StringIO(), width=200)
    Renderer(live, live=False).summary(result)  # what `codeact run` prints at the end
    assert f"with the agents it called: 4 model calls · {fmt_tokens(tree.total_tokens)} tokens · ${tree.cost:.4f}" \
        in live.file.getvalue()

    # Without prices nothing is made up: no "$" anywhere, the tokens still add up.
    free = CodeActAgent(ScriptedModel([py("print(leaf('a'))"), "7"], name="root-model"),
                        [leaf.as_tool(name="leaf", description="Answers 7.")], sandbox="restricted", log=log)
    unpriced = free.run("one seven")
    assert unpriced.tree_usage.cost is None and unpriced.tree_usage.requests == 3
    assert log.get_run(unpriced.run_id).usage.cost is None
    shown = CliRunner().invoke(cli, ["logs", "show", unpriced.run_id, "--db", str(db)])
    assert shown.exit_code == 0 and "$" not in shown.output and "whole tree (2 runs): 3 model calls" in shown.output


def test_a_budget_of_dollars_needs_prices(tmp_path):
    agent = CodeActAgent(ScriptedModel(["done"]), sandbox="local", log=False, limits=RunLimits(max_cost=1.0))
    result = agent.run("anything")
    assert result.status == "error" and "needs the prices of model 'scripted'" in result.error
    with pytest.raises(Exception, match="max_tokens"):
        RunLimits(max_tokens=0)


# --------------------------------------------------------------------------- failures, depth, cycles


def test_a_failing_child_raises_in_the_parents_code_with_its_status(tmp_path):
    log = RunLog(tmp_path / "runs.db")
    broken = ReActAgent(ScriptedModel([], name="empty"), log=log)  # no reply: its run ends with status error
    parent = CodeActAgent(ScriptedModel([
        py("""
            try:
                helper("anything")
            except Exception as e:
                print(type(e).__name__, "|", e)
        """),
        "It failed.",
    ]), [broken.as_tool(name="helper", description="Helps.")], sandbox="local", log=log)
    result = parent.run("use the helper")
    assert result.status == "success"
    observation = result.steps[0].observation
    assert "AgentToolError: helper (run " in observation and "ended with status error" in observation
    assert "no reply left" in observation
    [child] = log.children(result.run_id)
    assert child.status == "error" and child.id in observation


def test_the_depth_limit_refuses_a_call_too_deep_and_a_tree_too_deep(tmp_path):
    leaf = react_leaf(False)
    mid = CodeActAgent(ScriptedModel([
        py("try:\n    msg = leaf('x')\nexcept Exception as e:\n    msg = str(e)\nfinal_answer(msg)")]),
        [leaf.as_tool(name="leaf", description="Leaf.")], sandbox="local", log=False)
    root = CodeActAgent(ScriptedModel([py("print(mid('go'))"), "done"]),
                        [mid.as_tool(name="mid", description="Mid.")], sandbox="local", log=False,
                        limits=RunLimits(max_depth=1))
    result = root.run("go")
    assert result.status == "success"
    assert "would run 2 levels deep (codeact > mid > leaf), past the limit of 1" in result.steps[0].observation

    a4 = react_leaf(False)
    a3 = ReActAgent(ScriptedModel([]), [a4.as_tool(name="a4", description="d")], log=False)
    a2 = ReActAgent(ScriptedModel([]), [a3.as_tool(name="a3", description="d")], log=False)
    a1 = ReActAgent(ScriptedModel([]), [a2.as_tool(name="a2", description="d")], log=False)
    with pytest.raises(ConfigError, match="deeper than 3 levels"):
        a1.as_tool(name="a1", description="d")


def test_an_agent_that_would_call_itself_is_refused(tmp_path):
    me = ReActAgent(ScriptedModel([ScriptedModel.tool_calls(("me", {"task": "again"})),
                                   ScriptedModel.tool_calls(("final_answer", {"answer": "stopped"}))]), log=False)
    me.tools.append(me.as_tool(name="me", description="Calls me."))
    result = me.run("recurse")
    assert result.status == "success"
    assert "me would call itself (react-fc > me)" in result.steps[0].observation

    a = ReActAgent(ScriptedModel([]), log=False)
    b = ReActAgent(ScriptedModel([]), [a.as_tool(name="a", description="d")], log=False)
    a.tools.append(b.as_tool(name="b", description="d"))
    with pytest.raises(ConfigError, match="would call itself"):
        a.as_tool(name="a_again", description="d")


def test_too_many_calls_at_once_get_a_clear_error_not_a_wait(tmp_path):
    release = threading.Event()

    def slow(messages: list[Message]) -> Message:
        release.wait(60)  # until the parent's second call was refused
        return ScriptedModel.tool_calls(("final_answer", {"answer": "slow done"}))

    child = ReActAgent(ScriptedModel([slow, slow]), log=False)
    parent = CodeActAgent(ScriptedModel([py("""
        from concurrent.futures import ThreadPoolExecutor
        def attempt(t):
            try:
                return slow(t)
            except Exception as e:
                return f"{type(e).__name__}: {e}"
        with ThreadPoolExecutor(2) as pool:
            print(sorted(pool.map(attempt, ["a", "b"])))
    """), "done"]), [child.as_tool(name="slow", description="Slow.", max_parallel=1)], sandbox="local", log=False)
    observation = ""
    for event in parent.stream("two at once"):
        if isinstance(event, ToolCall) and event.error:
            release.set()
        if hasattr(event, "result") and getattr(event, "result", None) is not None and not isinstance(event, ToolCall):
            observation = event.result.steps[0].observation
    assert "slow done" in observation
    assert "AgentToolError: slow is already running 1 calls at once, its limit" in observation


# --------------------------------------------------------------------------- approvals, state, tracing


def test_a_childs_approvals_go_to_the_parents_approver_naming_the_agent(tmp_path):
    asked: list[Any] = []

    @tool(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    child = ReActAgent(ScriptedModel([ScriptedModel.tool_calls(("delete", {"path": "a.txt"})),
                                      ScriptedModel.tool_calls(("final_answer", {"answer": "ok"}))]),
                       [delete], log=False)  # no approver of its own: alone, its calls would be denied
    parent = CodeActAgent(ScriptedModel([py("print(cleaner('clean up'))"), "done"]),
                          [child.as_tool(name="cleaner", description="Cleans.")], sandbox="local", log=False,
                          approve=lambda request: asked.append(request) or True)
    result = parent.run("clean")
    assert result.status == "success"
    [request] = asked
    assert (request.tool, request.arguments, request.agent) == ("delete", {"path": "a.txt"}, "codeact > cleaner")
    assert request.run_id != result.run_id and "ok" in result.steps[0].observation


def test_a_childs_installs_and_skill_saves_ask_the_top_runs_approver_naming_the_agent(tmp_path):
    from sandbox.packages import PackagePolicy

    from codeact.skills import SkillApproval, SkillStore
    from tests.test_packages import make_wheel

    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    make_wheel(wheelhouse, "codeact_child_demo", "3.0")
    store = SkillStore(tmp_path / "skills")
    asked: list[Any] = []
    # No approver of its own: alone, its installs would be denied and saving skills switched off.
    child = CodeActAgent(ScriptedModel([py("""
        install('codeact-child-demo')
        import codeact_child_demo
        def triple(x):
            '''Three times x.'''
            return 3 * x
        print(codeact_child_demo.VALUE, save_skill(triple))
    """), "saved"], name="child-model"), sandbox="local", log=False, skills=store, approve_installs=True,
        package_policy=PackagePolicy(cache_dir=str(tmp_path / "cache"), wheelhouse=str(wheelhouse), offline=True))
    parent = CodeActAgent(ScriptedModel([py("print(helper('install it and keep triple'))"), "done"]),
                          [child.as_tool(name="helper", description="Installs and saves.")], sandbox="restricted",
                          log=False, approve=lambda request: asked.append(request) or True)
    result = parent.run("go")
    assert result.status == "success", result.error
    install, save = asked
    assert (install.tool, install.agent, install.arguments["requirements"]) == \
        ("install", "codeact > helper", ["codeact-child-demo"])
    assert isinstance(save, SkillApproval) and (save.name, save.agent) == ("triple", "codeact > helper")
    assert install.run_id == save.run_id != result.run_id
    assert [s.name for s in store.list()] == ["triple"]


@dataclass
class Point:
    x: int
    y: int


def test_a_typed_child_answers_the_parents_code_with_a_value_of_that_type(tmp_path):
    log = RunLog(tmp_path / "runs.db")
    locate = react_leaf(log, answer={"x": "3", "y": 4})  # checked against Point: "3" becomes 3
    count = CodeActAgent(ScriptedModel(["41"]), sandbox="restricted", log=log)  # a text reply, parsed as int
    vague = CodeActAgent(ScriptedModel(["lots"] * 5), sandbox="restricted", log=log, output_retries=1)
    parent = CodeActAgent(ScriptedModel([py("""
        p = locate("where is it?")
        n = count("how many?")
        try:
            vague("how many, roughly?")
        except Exception as e:
            print(e)
        final_answer({"point": p, "sum": p["x"] + p["y"], "next": n + 1})
    """)]), [locate.as_tool(name="locate", description="Finds a point.", output_type=Point),
             count.as_tool(name="count", description="Counts.", output_type=int),
             vague.as_tool(name="vague", description="Counts, vaguely.", output_type=int)],
        sandbox="restricted", log=log)
    result = parent.run("where and how many")
    assert result.status == "success", result.error
    # A dataclass answer crosses into the sandbox as the dict of its checked fields (the codec's plain data).
    assert result.answer == {"point": {"x": 3, "y": 4}, "sum": 7, "next": 42}
    observation = result.steps[0].observation
    assert "vague (run " in observation and "ended with status invalid_output" in observation
    assert "did not fit the type `int`" in observation
    answers = {c.status: log.get_run(c.id).answer for c in log.children(result.run_id) if c.status != "success"}
    assert answers == {"invalid_output": "lots"}
    assert sorted(c.status for c in log.children(result.run_id)) == ["invalid_output", "success", "success"]


class WarmSource:
    """A sandbox source (like an engine pool) that hands out one local sandbox started beforehand, so that a
    test's clock starts with the code, not the kernel's start."""

    def __init__(self) -> None:
        from sandbox import open_sandbox

        self.handed: Any = open_sandbox("local", timeout=120).start()

    def sandbox(self, functions: Any = (), **options: Any) -> Any:
        self.handed.register(*functions)
        return self.handed


def test_a_child_whose_call_timed_out_is_cancelled_at_once_and_its_sandbox_closed(tmp_path):
    log = RunLog(tmp_path / "runs.db")
    source = WarmSource()
    child = CodeActAgent(ScriptedModel([py("print('sleeping', flush=True)\nimport time\ntime.sleep(90)")] * 3,
                                       name="child-model"), sandbox=source, log=log)
    seen: dict[str, Any] = {}

    def after_the_timeout(messages: list[Message]) -> str:
        # The parent's next model call, on the host: the child must be over already, not when the parent ends.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            [run] = [r for r in log.list_runs(limit=None) if r.parent_run_id]
            if run.status != "running":
                break
            time.sleep(0.1)
        seen.update(child=run, closed=source.handed.closed)
        return "It took too long."

    parent = CodeActAgent(ScriptedModel([py("""
        try:
            sleeper("take your time")
        except Exception as e:
            print(type(e).__name__, e)
    """), after_the_timeout], name="parent-model"),
        [child.as_tool(name="sleeper", description="Sleeps.", timeout=3)], sandbox="restricted", log=log)
    result = parent.run("ask the sleeper")
    assert result.status == "success", result.error
    assert "TimeoutError" in result.steps[0].observation and "3 s" in result.steps[0].observation
    run = seen["child"]
    assert run.status == "cancelled" and run.parent_run_id == result.run_id
    assert run.duration < 15  # its code would have slept 90 s
    assert seen["closed"]  # its sandbox too, before the parent went on
    record = log.get_run(run.id)
    assert "sleeping" in record.steps[0].observation and "KeyboardInterrupt" in record.steps[0].observation
    [finished] = [e for e in log.get_events(run.id) if e["type"] == "RunFinished"]
    assert finished["payload"]["result"]["status"] == "cancelled"


def test_a_stateful_child_keeps_its_variables_across_the_calls_of_one_parent_run(tmp_path):
    log = RunLog(tmp_path / "runs.db")
    child = CodeActAgent(ScriptedModel([
        py("counter = 10\nfinal_answer(counter)"),
        py("counter += 1\nfinal_answer(counter)"),
        py("final_answer('counter' in globals())"),  # a later parent run: a new session
    ]), sandbox="local", log=log)
    keeper = child.as_tool(name="keeper", description="Keeps a counter.", stateful=True)
    parent = CodeActAgent(ScriptedModel([
        py("print(keeper('start'), keeper('again'))"), "done",
        py("print(keeper('fresh?'))"), "done",
    ]), [keeper], sandbox="local", log=log)
    first = parent.run("count")
    assert first.status == "success" and "10 11" in first.steps[0].observation
    second = parent.run("count again")
    assert second.status == "success" and "False" in second.steps[0].observation
    assert [c.parent_step for c in log.children(first.run_id)] == [1, 1]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_childs_invoke_agent_span_sits_under_the_parents_tool_call(spans, tmp_path):
    child = react_leaf(False, answer=7)
    parent = CodeActAgent(ScriptedModel([py("final_answer(helper('go') * 6)")]),
                          [child.as_tool(name="helper", description="Helps.")], sandbox="restricted", log=False)
    result = parent.run("go")
    assert result.status == "success" and result.answer == 42
    finished = list(spans.get_finished_spans())
    by_id = {s.context.span_id: s for s in finished}
    [root] = [s for s in finished if s.name == "invoke_agent codeact"]
    [call] = [s for s in finished if s.name == "execute_tool helper"]
    [child_run] = [s for s in finished if s.name == "invoke_agent react-fc"]
    assert child_run.parent is not None and child_run.parent.span_id == call.context.span_id
    assert child_run.context.trace_id == root.context.trace_id
    assert by_id[call.parent.span_id].name == "execute_code"
