"""Oracle plans: one solution per task, written once, replayed in both styles.

A plan is a generator function. Each ``yield`` is one model turn of tool
calls: ``yield call("name", ...)`` for one call, ``yield [call(...), ...]``
for calls that do not depend on each other (one turn with function calling).
The generator receives the results and finally ``return``\\ s the answer::

    def plan():
        hits = yield call("search_products", query="lamp")
        details = yield [call("get_product", product_id=h["id"]) for h in hits]
        return min(details, key=lambda d: d["price"])["name"]

:func:`plan_code` turns the same function into a CodeAct code action
(``hits = search_products(query='lamp')`` ..., ``final_answer(...)``), and
:func:`run_plan` runs it against a task's tools to get the exact tool-call
sequence a ReAct agent needs. So the two oracle solutions cannot drift
apart. Plans must be self-contained (no helpers from the module around
them) and end with their one ``return``.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Mapping, Sequence

from sandbox.pyparse import parse

from ..errors import BenchError
from ..tools import Tool

FINAL_ANSWER = "final_answer"


@dataclass(frozen=True)
class Call:
    """One tool call in a plan: the tool's name and the Python call's arguments."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def call(name: str, /, *args: Any, **kwargs: Any) -> Call:
    """A tool call for a plan to ``yield``: ``call("get_product", product_id=3)``."""
    return Call(name, args, kwargs)


#: What a plan function returns: a generator that yields one call or a list of calls per turn, is sent
#: their results, and returns the answer.
PlanSteps = Generator[Call | list[Call], Any, Any]
Plan = Callable[[], PlanSteps]


@dataclass(frozen=True)
class TracedCall:
    """A call of a plan as run: the arguments dict (bound), the result and what a ReAct agent shows of it."""

    call: Call
    arguments: dict[str, Any]
    value: Any


@dataclass(frozen=True)
class PlanTrace:
    """A plan run against real tools: its turns of calls and its answer."""

    turns: tuple[tuple[TracedCall, ...], ...]
    answer: Any

    @property
    def calls(self) -> list[TracedCall]:
        return [c for turn in self.turns for c in turn]


def run_plan(plan: Plan, tools: Mapping[str, Tool[Any, Any]]) -> PlanTrace:
    """Run ``plan`` against ``tools`` (called directly, in order); return every turn and the answer.

    Raises:
        BenchError: the plan yields something that is not a call, names an
            unknown tool, or a call fails.
    """
    gen = plan()
    if not inspect.isgenerator(gen):
        raise BenchError(f"oracle plan {_name(plan)} must be a generator function (it yields tool calls)")
    turns: list[tuple[TracedCall, ...]] = []
    sent: Any = None
    while True:
        try:
            request = gen.send(sent)
        except StopIteration as stop:
            return PlanTrace(tuple(turns), stop.value)
        group = request if isinstance(request, (list, tuple)) else [request]
        traced = []
        for item in group:
            if not isinstance(item, Call):
                raise BenchError(f"oracle plan {_name(plan)} yielded {item!r}; yield call(...) or a list of them")
            tool = tools.get(item.name)
            if tool is None:
                raise BenchError(f"oracle plan {_name(plan)} calls {item.name!r}, which is not one of the task's "
                                 f"tools ({', '.join(tools)})")
            try:
                arguments = tool.bind(item.args, item.kwargs)
                # What the agent will be asked to send, as it is now: a tool may keep and later change it.
                as_sent = _as_returned(item), _as_returned(arguments)
                value = tool.call(arguments)
            except Exception as exc:
                raise BenchError(f"oracle plan {_name(plan)}: {item.name} failed: {type(exc).__name__}: {exc}") from exc
            traced.append(TracedCall(as_sent[0], as_sent[1], _as_returned(value)))
        turns.append(tuple(traced))
        sent = [t.value for t in traced] if isinstance(request, (list, tuple)) else traced[0].value


def _as_returned(value: Any) -> Any:
    """A copy of a call's arguments or result as they are now: a stateful tool may keep the lists it is given
    and return its own, and later calls change them; the trace keeps what the agent sends and is shown."""
    import copy

    try:
        return copy.deepcopy(value)
    except Exception:  # a value that cannot be copied is kept as it is
        return value


def plan_code(plan: Plan) -> str:
    """The plan as a CodeAct code action: calls become plain function calls, ``return x`` ``final_answer(x)``.

    Raises:
        BenchError: the plan's source is not available or uses yield or
            return in a way that has no code form.
    """
    try:
        source = textwrap.dedent(inspect.getsource(plan))
    except (OSError, TypeError) as exc:
        raise BenchError(f"cannot read the source of oracle plan {_name(plan)}: {exc}") from exc
    module = parse(source)
    func = next((n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if func is None:
        raise BenchError(f"oracle plan {_name(plan)} is not a function")
    body = list(func.body)
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        body = body[1:]  # the docstring
    returns = [n for n in _own_nodes(body) if isinstance(n, ast.Return)]
    if len(returns) != 1 or body[-1] is not returns[0] or returns[0].value is None:
        raise BenchError(f"oracle plan {_name(plan)} must end with its one `return answer`")
    transformed = [_CallsToCode(_name(plan)).visit(node) for node in body]
    last = transformed[-1]
    assert isinstance(last, ast.Return) and last.value is not None
    transformed[-1] = ast.Expr(ast.Call(func=ast.Name(FINAL_ANSWER, ast.Load()), args=[last.value], keywords=[]))
    code = ast.unparse(ast.fix_missing_locations(ast.Module(body=transformed, type_ignores=[])))
    return code


def _own_nodes(body: Sequence[ast.stmt]) -> list[ast.AST]:
    """Nodes of ``body``, not descending into nested functions, lambdas or classes."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    out: list[ast.AST] = []
    stack: list[ast.AST] = [n for n in body if not isinstance(n, nested)]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(child for child in ast.iter_child_nodes(node) if not isinstance(child, nested))
    return out


class _CallsToCode(ast.NodeTransformer):
    def __init__(self, plan: str) -> None:
        self.plan = plan

    def visit_Yield(self, node: ast.Yield) -> ast.AST:
        value = node.value
        if value is None:
            raise BenchError(f"oracle plan {self.plan}: a bare `yield`; yield call(...) or a list of calls")
        if isinstance(value, (ast.List, ast.Tuple)):
            return ast.List(elts=[self._call(e) for e in value.elts], ctx=ast.Load())
        if isinstance(value, (ast.ListComp, ast.GeneratorExp)):
            return ast.ListComp(elt=self._call(value.elt), generators=[self.visit(g) for g in value.generators])
        return self._call(value)

    def _call(self, node: ast.AST) -> ast.Call:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "call"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            raise BenchError(f"oracle plan {self.plan}: yield call('tool', ...) with the tool's name as a literal, "
                             f"got `{ast.unparse(node)}`")
        return ast.Call(func=ast.Name(node.args[0].value, ast.Load()), args=[self.visit(a) for a in node.args[1:]],
                        keywords=[self.visit(k) for k in node.keywords])


def _name(plan: Any) -> str:
    return getattr(plan, "__qualname__", None) or repr(plan)
