"""Multi-turn tasks in the bench harness: several user messages to one session, each turn limited and checked.

A small suite file written by the tests (a cart whose state the checker reads after each turn) runs through
the real harness: the oracle in all four formats (CodeAct on Docker), scripted models for what the oracle
never does (a turn that fails its check, a turn that runs out of turns), a tool offered only from a later
turn, a non-finite float argument in every format, and a report written without matplotlib.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from codeact import ScriptedModel
from codeact.bench import BenchConfig, UserTurn, reply_oracle, run_bench
from codeact.bench._progress import NoProgress
from codeact.errors import BenchError, CodeActError
from codeact.react import ReActAgent

AGENTS = ["codeact", "react-fc", "react-json", "react-text"]

SUITE = textwrap.dedent('''
    from codeact import tool
    from codeact.bench import CheckResult, Oracle, Task, UserTurn, call, reply_oracle

    NAME = "carts"

    def make_tools(ctx):
        cart = []
        ctx.state["cart"] = cart

        @tool
        def add_item(name: str) -> int:
            """Put an item in the cart; returns how many items it holds."""
            cart.append(name)
            return len(cart)

        @tool
        def remove_item(name: str) -> int:
            """Take an item out of the cart; returns how many items it holds."""
            cart.remove(name)
            return len(cart)

        @tool
        def scale(value: float, factor: float) -> float:
            """value times factor."""
            cart.append(value * factor)
            return value * factor

        return [add_item, remove_item, scale]

    def check(answer, expected, ctx):
        cart = ctx.state["cart"]
        return CheckResult(cart == expected, f"turn {ctx.turn}: the cart holds {cart}, expected {expected}")

    def add_two():
        yield call("add_item", name="tea")
        n = yield call("add_item", name="milk")
        return n

    def remove_milk():
        n = yield call("remove_item", name="milk")
        return n

    def infinite():
        v = yield call("scale", value=float("inf"), factor=2.0)
        return v

    def tasks():
        return [
            Task(id="cart", instruction="", tools=make_tools, check=check, turns=[
                UserTurn("Put tea and milk in the cart.", expected=["tea", "milk"], max_turns=4,
                         oracle=Oracle(add_two)),
                UserTurn("Take something out.", expected=["tea", "milk"], max_turns=3,
                         oracle=reply_oracle("Which item should I take out?")),
                UserTurn("The milk. You can remove items now.", expected=["tea"], max_turns=3,
                         oracle=Oracle(remove_milk), new_tools=("remove_item",)),
            ]),
            Task(id="inf", instruction="", tools=make_tools, check=check, turns=[
                UserTurn("Scale infinity by 2.", expected=[float("inf")], oracle=Oracle(infinite)),
            ]),
        ]
''')


@pytest.fixture()
def suite_file(tmp_path: Path) -> Path:
    path = tmp_path / "carts.py"
    path.write_text(SUITE)
    return path


def _run(suite: Path, out: Path, agents: list[str], model: Any = "oracle", **options: Any) -> Any:
    config = BenchConfig(suites=[str(suite)], agents=agents, model="oracle" if not isinstance(model, str) else model,
                         concurrency=2, backend="docker", out=out, **options)
    return run_bench(config, model=None if isinstance(model, str) else model, progress=NoProgress(), plots=False)


# --- the oracle in every format --------------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_every_agent_solves_a_multi_turn_task_turn_by_turn(suite_file: Path, tmp_path: Path) -> None:
    run = _run(suite_file, tmp_path / "r", AGENTS)
    by_key = {e.key: e for e in run.episodes}
    failed = {k: (e.outcome, e.check, e.error) for k, e in by_key.items() if not e.success}
    assert not failed, failed
    for agent in AGENTS:
        e = by_key[f"carts/cart/{agent}/0"]
        assert e.user_turns == e.user_turns_passed == 3 and e.check == "all 3 user turns passed"
        assert e.turn_limit == 10  # the turns' limits, summed
        expected = {"codeact": [1, 1, 1], "react-fc": [3, 1, 2], "react-json": [3, 1, 2], "react-text": [3, 1, 2]}
        assert e.turn_model_calls == expected[agent], agent
        assert e.model_calls == sum(e.turn_model_calls) and e.tool_calls == 3
    rows = {r["agent"]: r for r in run.report.to_json()["multi_turn"]}
    assert rows["codeact"]["model_calls_per_user_turn"] == 1.0  # 4 user turns, 4 calls


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_a_tool_added_at_a_later_turn_is_not_there_before(suite_file: Path, tmp_path: Path) -> None:
    """Turn 2 tries remove_item before it is offered (fails: no such tool), turn 3 uses it: same kernel, same cart."""
    replies = {
        "codeact": ["```python\nadd_item('tea')\nn = add_item('milk')\nfinal_answer(n)\n```",
                    "```python\nremove_item('milk')\n```", "Not possible yet.",
                    "```python\nfinal_answer(remove_item('milk') + n)\n```"],
        "react-json": ['Action: {"name": "add_item", "arguments": {"name": "tea"}}',
                       'Action: {"name": "add_item", "arguments": {"name": "milk"}}', "Final Answer: 2",
                       'Action: {"name": "remove_item", "arguments": {"name": "milk"}}', "Final Answer: no",
                       'Action: {"name": "remove_item", "arguments": {"name": "milk"}}', "Final Answer: done"],
    }
    models: dict[str, ScriptedModel] = {}

    def factory(task: Any, kind: str, ctx: Any) -> ScriptedModel:
        models[kind] = ScriptedModel(replies[kind])
        return models[kind]

    run = _run(suite_file, tmp_path / "r", ["codeact", "react-json"], model=factory, tasks=["cart"])
    by_agent = {e.agent: e for e in run.episodes}
    assert all(e.success for e in run.episodes), [(e.agent, e.check, e.error) for e in run.episodes]
    assert by_agent["codeact"].answer == 3  # 1 item left + `n` (2) from turn 1: one kernel
    code_turn2 = models["codeact"].requests[2][-1].content
    assert "NameError" in code_turn2 and "remove_item" in code_turn2
    react_turn2 = models["react-json"].requests[4][-1].content
    assert "there is no tool named 'remove_item'" in react_turn2
    turn3 = models["react-json"].requests[5]
    # one conversation
    assert "remove_item" in turn3[-1].content and turn3[1].content == "Put tea and milk in the cart."
    assert "def remove_item(name: str) -> int" in models["codeact"].requests[3][-1].content


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_a_failed_turn_or_a_turn_out_of_turns_fails_the_episode(suite_file: Path, tmp_path: Path) -> None:
    def factory(task: Any, kind: str, ctx: Any) -> ScriptedModel:
        if kind == "codeact":  # turn 1 puts the wrong items in; the others pass (tea kept, milk never there)
            return ScriptedModel(["```python\nadd_item('tea')\nadd_item('tea')\nfinal_answer(2)\n```",
                                  "Which?", "```python\nfinal_answer(remove_item('tea'))\n```"])
        # react-fc: turn 2 never answers within its 3 model calls
        return ScriptedModel([ScriptedModel.tool_calls(("add_item", {"name": "tea"}), ("add_item", {"name": "milk"})),
                              "done", *[ScriptedModel.tool_calls(("add_item", {"name": "x"}))] * 3])

    run = _run(suite_file, tmp_path / "r", ["codeact", "react-fc"], model=factory, tasks=["cart"])
    by_agent = {e.agent: e for e in run.episodes}
    wrong = by_agent["codeact"]
    assert wrong.outcome == "wrong_answer" and wrong.user_turns == 3 and wrong.user_turns_passed == 1
    assert wrong.check.startswith("user turn 0: turn 0: the cart holds ['tea', 'tea']"), wrong.check
    assert "(2 of 3 user turns failed)" in wrong.check
    limit = by_agent["react-fc"]
    assert limit.outcome == "turn_limit" and limit.user_turns == 2 and limit.turn_model_calls == [2, 3]
    assert "user turn 1: the turn limit (3)" in limit.check


# --- non-finite floats in every format ---------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_every_format_passes_infinity(suite_file: Path, tmp_path: Path) -> None:
    run = _run(suite_file, tmp_path / "r", AGENTS, tasks=["inf"])
    assert all(e.success for e in run.episodes), [(e.agent, e.check, e.error) for e in run.episodes]


def test_the_text_format_reads_non_finite_floats_and_nothing_else() -> None:
    from codeact.messages import Message, ModelResponse
    from codeact.react._formats import TextFormat, python_literal

    fmt = TextFormat()

    def read(action: str) -> Any:
        decision = fmt.parse(ModelResponse(message=Message("assistant", f"Action: {action}")))
        return decision.calls[0].python if decision.calls else decision.problem

    for spelling in ("float('inf')", 'float("inf")', "float('Infinity')", "math.inf", "inf"):
        assert read(f"scale(value={spelling}, factor=2)") == ((), {"value": math.inf, "factor": 2})
    assert read("scale(-inf, float('-inf'))")[0] == (-math.inf, -math.inf)
    assert math.isnan(read("scale(value=nan, factor=math.nan)")[1]["value"])
    assert read("scale(value=[float('inf'), {'a': nan}], factor=1)")[1]["value"][0] == math.inf
    assert read("scale(value='inf', factor=1)") == ((), {"value": "inf", "factor": 1})  # a string stays a string
    for hostile in ("float('1e400')", "float(x)", "math.pi", "__import__('os').getpid()", "inf()", "math.inf.real"):
        assert "must be Python literals" in read(f"scale(value={hostile}, factor=1)"), hostile
    for value in (math.inf, -math.inf, [math.inf, 1.0], {"k": (math.inf,)}, {math.inf: 1}):
        assert read(f"scale(value={python_literal(value)}, factor=1)")[1]["value"] == value
    assert python_literal(float("nan")) == "float('nan')" and python_literal("x") == "'x'"


# --- the pieces ---------------------------------------------------------------------------------------------


def test_tools_added_to_a_session_must_have_new_names() -> None:
    from codeact import tool

    @tool
    def ping() -> str:
        """Pong."""
        return "pong"

    @tool
    def pong() -> str:
        """Ping."""
        return "ping"

    session = ReActAgent(ScriptedModel([]), [ping], format="json", log=False).session()
    assert '"name": "pong"' in session.add_tools([pong]) and "final_answer" not in session.add_tools([])
    for taken in ([ping], [pong]):
        with pytest.raises(CodeActError, match="name is taken"):
            session.add_tools(taken)
    assert ReActAgent(ScriptedModel([]), [ping], log=False).session().add_tools([pong]) == ""  # in tools=


def test_a_multi_turn_task_is_checked_when_it_loads() -> None:
    from codeact.bench import Task

    with pytest.raises(BenchError, match="empty"):
        UserTurn("  ")
    with pytest.raises(BenchError, match="first turn cannot add tools"):
        Task(id="t", instruction="", turns=[UserTurn("hi", new_tools=("x",))])
    task = Task(id="t", instruction="", turns=[UserTurn("hi", max_turns=2), UserTurn("again", max_turns=5)])
    assert task.instruction == "hi" and task.max_turns == 7 and task.multi_turn
    assert reply_oracle("Which one?").reply == "Which one?"


def test_without_matplotlib_the_run_writes_its_report_and_exits_0(suite_file: Path, tmp_path: Path) -> None:
    """A plain install (no matplotlib): every episode runs, the report is written without plots and says so."""
    out = tmp_path / "r"
    script = ("import sys; sys.modules['matplotlib'] = None\n"
              "from codeact.cli import main\n"
              f"sys.argv = ['codeact', 'bench', 'run', '--suite', {str(suite_file)!r}, '--agents', "
              f"'react-json,react-text', '--model', 'oracle', '--out', {str(out)!r}]\n"
              "main()\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not (out / "plots").exists()
    assert "plots were not drawn: matplotlib is not installed" in (out / "report.md").read_text()
    assert "matplotlib" in proc.stdout + proc.stderr
    lines = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and all(e["success"] for e in lines)
