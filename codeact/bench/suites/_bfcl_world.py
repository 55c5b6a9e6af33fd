"""BFCL multi-turn tasks as codeact sees them: the entries, the API instances of an episode, and BFCL's check.

An *entry* is one BFCL task: user turns, the initial state of the API classes
it involves, functions held back until a later turn (``miss_func``), and the
ground truth (a list of call strings per user turn, such as
``mv(source='a.txt', destination='temp')``).

A :class:`World` is one episode's set of API instances (BFCL's own classes,
loaded from the package): its tools are the instances' public methods, run on
the host, each call's result recorded as BFCL records it. The same world
holds a second set of instances that the ground truth drives, turn by turn.

:func:`check_turn` is BFCL's multi-turn rule (``multi_turn_checker``), applied
to the live instances instead of a re-execution of decoded call strings:
after a turn whose ground truth is not empty, the agent must have made a call
in it, every involved instance must have the state (its public attributes)
the ground truth reached, and every result of the turn's ground-truth calls
must be among the results of the agent's calls so far (a multiset, in any
order). A turn whose ground truth is empty (the function is missing, a
parameter is missing) is not checked. Ground-truth strings are parsed with
``ast`` and their literal arguments read with ``ast.literal_eval``: nothing
is evaluated.
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from sandbox.pyparse import parse

from ...errors import BenchError
from ...tools import Tool, tool
from .._checkers import CheckResult
from . import _bfcl_package as package

#: The four multi-turn categories, 200 entries each.
CATEGORIES = ("base", "miss_func", "miss_param", "long_context")

#: API class -> (module in func_source_code, function-doc file in data/multi_turn_func_doc).
CLASSES = {
    "GorillaFileSystem": ("gorilla_file_system", "gorilla_file_system.json"),
    "MathAPI": ("math_api", "math_api.json"),
    "MessageAPI": ("message_api", "message_api.json"),
    "TwitterAPI": ("posting_api", "posting_api.json"),
    "TicketAPI": ("ticket_api", "ticket_api.json"),
    "TradingBot": ("trading_bot", "trading_bot.json"),
    "TravelAPI": ("travel_booking", "travel_booking.json"),
    "VehicleControlAPI": ("vehicle_control", "vehicle_control.json"),
}
#: Classes without a scenario to load (BFCL's STATELESS_CLASSES).
STATELESS = frozenset({"MathAPI"})
#: What BFCL's multi-turn handler says when it adds the held-back functions
#: (DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC).
MORE_FUNCTIONS = "I have updated some more functions you can choose from. What about now?"
#: Calls BFCL refuses to execute (multi_turn_utils.execute_multi_turn_func_call).
_REFUSED = frozenset({"kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"})


@dataclass(frozen=True)
class GroundCall:
    """One ground-truth call: the function's name and its literal arguments."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    text: str = ""

    def fresh(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Copies of the arguments: an API instance keeps the lists it is given, and entries are shared."""
        return copy.deepcopy(self.args), copy.deepcopy(self.kwargs)


@dataclass(frozen=True)
class Entry:
    """One BFCL multi-turn task.

    ``messages[i]`` is the user's message of turn ``i``, or None for a turn
    where held-back functions are added (BFCL then says :data:`MORE_FUNCTIONS`).
    ``held_back[i]`` names the functions offered from turn ``i`` on.
    """

    id: str
    category: str
    messages: tuple[str | None, ...]
    initial_config: dict[str, Any]
    classes: tuple[str, ...]
    held_back: dict[int, tuple[str, ...]]
    ground_truth: tuple[tuple[GroundCall, ...], ...]

    @property
    def long_context(self) -> bool:
        return self.category == "long_context"


def parse_call(text: str) -> GroundCall:
    """``"mv(source='a', destination='b')"`` -> GroundCall; literals only (nothing is evaluated).

    Raises:
        BenchError: not a single call of a plain name with literal arguments.
    """
    try:
        node = parse(text.strip(), mode="eval").body
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            raise ValueError("not a call of a function name")
        args = tuple(ast.literal_eval(a) for a in node.args)
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
        if len(kwargs) != len(node.keywords):
            raise ValueError("**kwargs")
    except (SyntaxError, ValueError) as exc:
        raise BenchError(f"BFCL ground truth {text!r} is not a call with literal arguments: {exc}") from exc
    return GroundCall(node.func.id, args, kwargs, text)


@functools.lru_cache(maxsize=None)
def load_entries(category: str) -> tuple[Entry, ...]:
    """The entries of one category, in the package's order."""
    if category not in CATEGORIES:
        raise BenchError(f"unknown BFCL multi-turn category {category!r}; choose from {', '.join(CATEGORIES)}")
    data = package.data_dir()
    questions = package.read_jsonl(data / f"BFCL_v4_multi_turn_{category}.json")
    answers = {a["id"]: a["ground_truth"] for a in
               package.read_jsonl(data / "possible_answer" / f"BFCL_v4_multi_turn_{category}.json")}
    entries = []
    for q in questions:
        truth = answers.get(q["id"])
        if truth is None or len(truth) != len(q["question"]):
            raise BenchError(f"BFCL entry {q['id']}: its ground truth is missing or has another number of turns")
        messages = []
        for turn in q["question"]:
            users = [m["content"] for m in turn if m.get("role") == "user"]
            messages.append("\n".join(users) if users else None)
        held = {int(k): tuple(v) for k, v in (q.get("missed_function") or {}).items()}
        unknown = [c for c in q["involved_classes"] if c not in CLASSES]
        if unknown:
            raise BenchError(f"BFCL entry {q['id']} involves unknown API classes {unknown}")
        entries.append(Entry(id=q["id"], category=category, messages=tuple(messages),
                             initial_config=q.get("initial_config") or {}, classes=tuple(q["involved_classes"]),
                             held_back=held,
                             ground_truth=tuple(tuple(parse_call(c) for c in turn) for turn in truth)))
    return tuple(entries)


@functools.lru_cache(maxsize=None)
def function_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    """BFCL's function documentation of one class (what the leaderboard shows models)."""
    return tuple(package.read_jsonl(package.data_dir() / "multi_turn_func_doc" / CLASSES[class_name][1]))


def new_instances(entry: Entry) -> dict[str, Any]:
    """Fresh instances of the entry's classes, loaded with its initial state (as BFCL does it)."""
    out = {}
    for name in entry.classes:
        instance = package.import_class(CLASSES[name][0], name)()
        if name not in STATELESS:
            instance._load_scenario(copy.deepcopy(entry.initial_config.get(name, {})),
                                    long_context=entry.long_context)
        out[name] = instance
    return out


def result_text(value: Any) -> str:
    """A call's result as BFCL records it: a str as is, a dict as JSON (else str()), anything else str()."""
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except Exception:  # BFCL falls back to str() for anything json cannot write
            return str(value)
    return str(value)


def _methods(instances: dict[str, Any]) -> dict[str, Any]:
    """Public method name -> bound method, over the instances (BFCL maps names to instances the same way)."""
    out = {}
    for instance in instances.values():
        for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
            if not name.startswith("_"):
                out[name] = method
    return out


def execute(instances: dict[str, Any], calls: tuple[GroundCall, ...]) -> list[str]:
    """Run calls on ``instances`` as BFCL's executor does; return each result as BFCL records it."""
    methods = _methods(instances)
    results = []
    for c in calls:
        try:
            if c.name in _REFUSED:
                raise Exception(f"Function call {c.name} is not allowed.")
            method = methods.get(c.name)
            if method is None:
                raise NameError(f"name '{c.name}' is not defined")
            args, kwargs = c.fresh()  # the APIs keep (and may change) what they are given
            results.append(result_text(_guarded(method, args, kwargs)))
        except Exception as exc:  # BFCL records any failure as text
            results.append(f"Error during execution: {exc}")
    return results


#: The math API sets mpmath's precision, a process-wide setting, before it computes: one call at a time.
_MATH_LOCK = threading.Lock()
#: Bounds on what the math API is asked (the arguments come from the agent's code: hostile input). An
#: integer power or an mpmath precision past these would hold a host CPU for minutes and gigabytes of memory;
#: BFCL's references stay far below them (precision <= 10, small numbers).
MAX_PRECISION = 1_000
MAX_INT_DIGITS = 30
MAX_EXPONENT = 10_000


def _guarded(method: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call an API method; the math API's calls one at a time, within :data:`MAX_PRECISION` and friends."""
    if type(getattr(method, "__self__", None)).__name__ != "MathAPI":
        return method(*args, **kwargs)
    values = [*args, *kwargs.values()]
    for value in _numbers(values):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** MAX_INT_DIGITS:
            raise ValueError(f"numbers of more than {MAX_INT_DIGITS} digits are not accepted")
    precision = kwargs.get("precision", args[2] if method.__name__ == "logarithm" and len(args) > 2
                           else args[1] if method.__name__ == "square_root" and len(args) > 1 else None)
    if isinstance(precision, (int, float)) and not isinstance(precision, bool) and precision > MAX_PRECISION:
        raise ValueError(f"precision is at most {MAX_PRECISION} digits")
    if method.__name__ == "power":
        exponent = kwargs.get("exponent", args[1] if len(args) > 1 else None)
        if isinstance(exponent, (int, float)) and not isinstance(exponent, bool) and abs(exponent) > MAX_EXPONENT:
            raise ValueError(f"the exponent is at most {MAX_EXPONENT} in size")
    with _MATH_LOCK:
        return method(*args, **kwargs)


def _numbers(values: list[Any], depth: int = 0) -> list[Any]:
    out: list[Any] = []
    for value in values:
        if isinstance(value, (int, float)):
            out.append(value)
        elif isinstance(value, (list, tuple)) and depth < 5:
            out.extend(_numbers(list(value), depth + 1))
    return out


class _Budget:
    """What one episode's calls may put into the host's API instances (they keep every string they are given):
    the agent's code is hostile input, and a loop of large writes would otherwise grow the host's memory."""

    MAX_CALLS = 20_000
    MAX_TEXT = 64 * 1024 * 1024  # characters of strings in arguments, over the episode

    def __init__(self) -> None:
        self.calls = 0
        self.text = 0
        self._lock = threading.Lock()

    def spend(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        size = _text_size([*args, *kwargs.values()])
        with self._lock:
            if self.calls + 1 > self.MAX_CALLS or self.text + size > self.MAX_TEXT:
                raise RuntimeError(f"this episode's calls are over their budget ({self.MAX_CALLS:,} calls, "
                                   f"{self.MAX_TEXT:,} characters of arguments)")
            self.calls += 1
            self.text += size


def _text_size(values: list[Any], depth: int = 0) -> int:
    total = 0
    for value in values:
        if isinstance(value, (str, bytes)):
            total += len(value)
        elif isinstance(value, dict) and depth < 10:
            total += _text_size([*value.keys(), *value.values()], depth + 1)
        elif isinstance(value, (list, tuple, set)) and depth < 10:
            total += _text_size(list(value), depth + 1)
    return total


class World:
    """One episode's API instances (the agent's), its calls' results, and the ground truth's instances.

    Args:
        entry: the BFCL entry.
    """

    def __init__(self, entry: Entry) -> None:
        self.entry = entry
        self.instances = new_instances(entry)
        #: Every result of the agent's calls so far, as BFCL records it.
        self.results: list[str] = []
        self._budget = _Budget()
        self._truth: dict[str, Any] | None = None
        self._truth_turns = 0
        self._truth_results: list[list[str]] = []

    def tools(self) -> list[Tool[Any, Any]]:
        """Every function of the entry's classes as a tool (held-back ones too: the harness offers those later)."""
        methods = _methods(self.instances)
        out = []
        for class_name in self.entry.classes:
            for doc in function_docs(class_name):
                method = methods.get(doc["name"])
                if method is None:
                    raise BenchError(f"BFCL's {class_name} documents {doc['name']} but has no such method")
                out.append(_bound(_template(class_name, doc["name"]), self._recorded(method)))
        return out

    def _recorded(self, method: Any) -> Any:
        results = self.results
        budget = self._budget

        def call(*args: Any, **kwargs: Any) -> Any:
            budget.spend(args, kwargs)
            try:
                value = _guarded(method, args, kwargs)
            except Exception as exc:
                results.append(f"Error during execution: {exc}")
                raise
            results.append(result_text(value))
            return value

        return call

    def truth_through(self, turn: int) -> tuple[dict[str, Any], list[str]]:
        """The ground truth's instances after turns 0..``turn``, and the results of turn ``turn``'s calls."""
        if self._truth is None:
            self._truth = new_instances(self.entry)
        while self._truth_turns <= turn:
            self._truth_results.append(execute(self._truth, self.entry.ground_truth[self._truth_turns]))
            self._truth_turns += 1
        return self._truth, self._truth_results[turn]


@functools.lru_cache(maxsize=None)
def _template(class_name: str, function: str) -> Tool[Any, Any]:
    """The tool of one API function, built once per process (building a tool's validator is the slow part).

    Its signature, types and parameter texts are the method's own; its
    description is the leaderboard's. :func:`_bound` gives each episode a copy
    that calls that episode's instance.
    """
    doc = next((d for d in function_docs(class_name) if d["name"] == function), None)
    if doc is None:
        raise BenchError(f"BFCL's {class_name} has no documented function {function}")
    specimen = package.import_class(CLASSES[class_name][0], class_name)()  # no scenario: only its signatures
    method = getattr(specimen, function)

    @functools.wraps(method)
    def unbound(*args: Any, **kwargs: Any) -> Any:
        raise BenchError(f"the template of {function} was called; tools come from World.tools()")

    typed = tool(name=function, description=_description(doc))(unbound)

    def untyped(*args: Any, **kwargs: Any) -> Any:
        raise BenchError(f"the template of {function} was called; tools come from World.tools()")

    signature = inspect.signature(method)
    # inspect reads a function's __signature__; typeshed does not declare the attribute on functions
    untyped.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()],
        return_annotation=inspect.Signature.empty)
    typed._arguments = _AsGiven(typed._arguments, tool(name=function)(untyped)._arguments)
    return typed


class _AsGiven:
    """Arguments as BFCL's executor passes them: names checked, values as given (a method's type hints are not
    enforced there, and one reference call passes a string id where the API declares an integer); the schema
    the model sees keeps the declared types."""

    def __init__(self, typed: Any, untyped: Any) -> None:
        self._typed, self._untyped = typed, untyped

    @property
    def json_schema(self) -> dict[str, Any]:
        return self._typed.json_schema

    def validate(self, arguments: Any) -> dict[str, Any]:
        return self._untyped.validate(arguments)


def _bound(template: Tool[Any, Any], call: Any) -> Tool[Any, Any]:
    """A copy of ``template`` that runs ``call`` (same signature, validator and texts)."""
    return template.calling(call)


def _description(doc: dict[str, Any]) -> str:
    """The leaderboard's description, plus what the function returns (its documented response keys)."""
    text = str(doc.get("description", "")).strip()
    props = (doc.get("response") or {}).get("properties") or {}
    if props:
        keys = "; ".join(f"{k} ({v.get('type', 'any')}): {str(v.get('description', '')).strip()}".rstrip(": ")
                         for k, v in props.items())
        text += f"\n\nReturns a dict with: {keys}"
    return text


def compare_state(model: Any, truth: Any) -> dict[str, tuple[Any, Any]]:
    """Public attributes of ``truth`` whose value differs in ``model``: name -> (model's, truth's)."""
    differences = {}
    for name, want in vars(truth).items():
        if name.startswith("_"):
            continue
        have = getattr(model, name, _MISSING)
        if have != want:
            differences[name] = (have, want)
    return differences


_MISSING = object()


def missing_results(results: list[str], expected: list[str]) -> list[str]:
    """The expected results not found among ``results`` (each found one used once, any order)."""
    pool = list(results)
    missing = []
    for item in expected:
        try:
            pool.remove(item)
        except ValueError:
            missing.append(item)
    return missing


def check_turn(world: World, turn: int, made_calls: bool) -> CheckResult:
    """BFCL's check after user turn ``turn`` (see the module's docstring)."""
    truth, expected = world.truth_through(turn)
    if not world.entry.ground_truth[turn]:
        return CheckResult(True, f"turn {turn}: nothing to check (the ground truth makes no call)")
    if not made_calls:
        return CheckResult(False, f"turn {turn}: no function call (the ground truth makes "
                                  f"{len(world.entry.ground_truth[turn])})")
    for class_name, instance in truth.items():
        differences = compare_state(world.instances[class_name], instance)
        if differences:
            name, (have, want) = next(iter(differences.items()))
            return CheckResult(False, f"turn {turn}: the state of {class_name} differs from the ground truth's "
                                      f"({', '.join(differences)}); {name}: {_clip(have)} != {_clip(want)}")
    missing = missing_results(world.results, expected)
    if missing:
        return CheckResult(False, f"turn {turn}: {len(missing)} ground-truth result(s) missing from the agent's "
                                  f"calls' results, e.g. {_clip(missing[0])}")
    return CheckResult(True, f"turn {turn}: state and results match the ground truth")


def _clip(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
