"""BFCL multi-turn: the Berkeley Function Calling Leaderboard's stateful multi-turn categories, as a suite.

Every task is one BFCL v4 multi-turn entry: several user turns over BFCL's
own executable Python APIs (a file system, a trading bot, travel booking,
messaging, posting, tickets, vehicle control, math), sent one after another
to one session. The APIs run on the host as the tools (one fresh set of
instances per episode); CodeAct's code calls them through the bridge.

Categories (200 tasks each; ``--suite bfcl-multi-turn:<category>`` for one):

``base``
    plain multi-turn requests.
``miss_func``
    a function the request needs is held back; the agent should not manage
    that turn, and in a later turn the function is added (BFCL's message:
    "I have updated some more functions ...").
``miss_param``
    a request lacks a detail; the agent should ask rather than guess (the
    user gives it in the next turn).
``long_context``
    the same kinds of requests over large states (many files, long lists).

Checking is BFCL's rule (see :mod:`._bfcl_world`): after each user turn
whose ground truth makes calls, every involved API instance must have the
state the ground truth reaches and the ground truth's results must be among
what the agent's calls returned. A task is solved when every turn passes.
Each user turn may take 21 model calls (BFCL's limit: 20 steps with calls, then
the reply that ends the turn). The oracle
replays the ground truth turn by turn: CodeAct one code action per user turn,
function calling one request with the turn's calls, the json and text
formats one call per request; in a turn whose ground truth is empty it asks
for what is missing, without a call.

The data and the API classes come from the ``bfcl-eval`` package
(Apache-2.0), installed without its dependencies on first use (see
:mod:`._bfcl_package`); nothing of it ships with codeact.
"""

from __future__ import annotations

from typing import Any

from .._checkers import CheckContext, CheckResult
from .._plan import call
from .._task import Oracle, Task, TaskContext, UserTurn, reply_oracle
from ._bfcl_package import BFCL_VERSION, package_dir
from ._bfcl_world import CATEGORIES, MORE_FUNCTIONS, Entry, GroundCall, World, check_turn, load_entries

DESCRIPTION = (f"BFCL v4 multi-turn (base, miss_func, miss_param, long_context; 200 tasks each), from bfcl-eval "
               f"{BFCL_VERSION} (PyPI, Apache-2.0), installed without its dependencies on first use into "
               f"{package_dir()}; BFCL's state-and-response check per user turn")
VERSION = f"bfcl-eval-{BFCL_VERSION}"
#: The parts: ``--suite bfcl-multi-turn:<part>`` runs one category (a suite of its own, named so).
PARTS = CATEGORIES
#: Model calls per user turn: BFCL's MAXIMUM_STEP_LIMIT of 20 steps with calls, then the reply that ends the turn.
TURN_LIMIT = 21
#: What the oracle says in a turn it cannot do (a function or a detail is missing).
ASK = ("I cannot do that yet: a function or a detail it needs is missing. "
       "Please tell me what to use and I will continue.")


def tasks() -> list[Task]:
    """All four categories (800 tasks)."""
    return [_task(e) for category in CATEGORIES for e in load_entries(category)]


def base() -> list[Task]:
    """``bfcl-multi-turn:base``."""
    return [_task(e) for e in load_entries("base")]


def miss_func() -> list[Task]:
    """``bfcl-multi-turn:miss_func``."""
    return [_task(e) for e in load_entries("miss_func")]


def miss_param() -> list[Task]:
    """``bfcl-multi-turn:miss_param``."""
    return [_task(e) for e in load_entries("miss_param")]


def long_context() -> list[Task]:
    """``bfcl-multi-turn:long_context``."""
    return [_task(e) for e in load_entries("long_context")]


class _Tools:
    """The tool factory of one entry: a fresh :class:`World` per episode, left in ``ctx.state`` for the checker."""

    def __init__(self, category: str, entry_id: str) -> None:
        self.category, self.entry_id = category, entry_id

    def __call__(self, ctx: TaskContext) -> list[Any]:
        entry = next(e for e in load_entries(self.category) if e.id == self.entry_id)
        world = World(entry)
        ctx.state["bfcl"] = world
        return world.tools()

    def __repr__(self) -> str:  # the suite's digest names the factory, never an address
        return f"bfcl_tools({self.entry_id})"


def check(answer: Any, expected: Any, ctx: CheckContext) -> CheckResult:
    """BFCL's check after a user turn (the answer is not checked: BFCL checks state and results)."""
    world = ctx.state.get("bfcl")
    if world is None or ctx.turn is None:
        return CheckResult(False, "a BFCL task is checked after each user turn of its episode")
    steps = getattr(ctx.result, "steps", None) or []
    made_calls = any(step.tool_calls for step in steps)
    return check_turn(world, ctx.turn, made_calls)


def _task(entry: Entry) -> Task:
    turns = []
    for index, (message, truth) in enumerate(zip(entry.messages, entry.ground_truth, strict=True)):
        turns.append(UserTurn(message if message is not None else MORE_FUNCTIONS, max_turns=TURN_LIMIT,
                              oracle=_oracle(truth), new_tools=entry.held_back.get(index, ())))
    return Task(id=entry.id, instruction="", tools=_Tools(entry.category, entry.id), check=check,
                turns=tuple(turns), tags=(f"category:{entry.category}", *entry.classes), tool_disclosure="all")


def _oracle(truth: tuple[GroundCall, ...]) -> Oracle:
    """The ground truth of one user turn as an oracle: its calls in one request, then an answer."""
    if not truth:
        return reply_oracle(ASK)

    def plan() -> Any:
        fresh = [(c.name, *c.fresh()) for c in truth]  # the shadow's APIs keep what they are given
        yield [call(name, *args, **kwargs) for name, args, kwargs in fresh]
        return "Done."

    from ...react import python_literal

    lines = []
    for c in truth:
        parts = [python_literal(a) for a in c.args] + [f"{k}={python_literal(v)}" for k, v in c.kwargs.items()]
        lines.append(f"{c.name}({', '.join(parts)})")
    lines.append("final_answer('Done.')")
    return Oracle(plan=plan, code="\n".join(lines))
