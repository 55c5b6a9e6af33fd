"""codeact.tools: any Python callable is a tool (builtins, C functions, methods, partials, objects, classes).

One table of third-party and unusual callables; each becomes a Tool whose
stub shows its real parameters, whose bind()+call() gives what calling it
directly gives, and whose openai_schema() is valid JSON Schema that a
function-calling model's arguments round-trip through.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import json
import math
import operator
from typing import Any, Callable

import jsonschema
import numpy as np
import pytest

from codeact.errors import ToolDefinitionError
from codeact.tools import Tool, ensure_tools, tool
from sandbox.functions import FunctionDispatcher, HostFunction

# --------------------------------------------------------------------------- callables under test


class Greeter:
    def __init__(self, greeting: str) -> None:
        self.greeting = greeting

    def greet(self, name: str, punctuation: str = ".") -> str:
        """Greet someone.

        Args:
            name: who to greet
        """
        return f"{self.greeting}, {name}{punctuation}"


@dataclasses.dataclass
class Temperature:
    """A temperature in degrees Celsius."""

    celsius: float
    label: str = "air"

    @classmethod
    def from_fahrenheit(cls, fahrenheit: float) -> Temperature:
        """A temperature given in degrees Fahrenheit."""
        return cls((fahrenheit - 32) * 5 / 9)

    @staticmethod
    def c_to_f(celsius: float) -> float:
        """Degrees Celsius in Fahrenheit."""
        return celsius * 9 / 5 + 32


class Scaler:
    """Multiplies numbers by a factor."""

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def __call__(self, x: float, *more: float) -> list[float]:
        """Scale one or more numbers."""
        return [v * self.factor for v in (x, *more)]


def every_kind(a: int, /, b: str, *args: float, c: bool, d: int = 3, **kw: str) -> dict[str, Any]:
    """Every parameter kind at once."""
    return {"a": a, "b": b, "args": args, "c": c, "d": d, "kw": kw}


def no_hints(x, y=2, *rest, **opts):  # type: ignore[no-untyped-def]
    """A function without type hints."""
    return [x, y, list(rest), opts]


@dataclasses.dataclass
class Case:
    id: str
    make: Callable[[], Any]  # a fresh callable: stateful ones must not share state between the two calls
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    stub: tuple[str, ...]  # substrings the prompt stub must contain
    name: str | None = None
    state: Callable[[Any], Any] | None = None  # what to compare after a call with side effects


CASES = [
    Case("max", lambda: max, (3, 1, 2), {},
         ("def max(*args, **kwargs):", "max(iterable, *[, default=obj, key=func]) -> value")),
    Case("min", lambda: min, ([4, 2, 8],), {"default": 0}, ("def min(*args, **kwargs):",)),
    Case("sum", lambda: sum, ([1, 2, 3],), {"start": 10}, ("def sum(iterable, /, start=0):",)),
    Case("len", lambda: len, (["a", "b"],), {}, ("def len(obj, /):", "Return the number of items in a container.")),
    Case("sorted", lambda: sorted, ([3, 1, 2],), {"reverse": True},
         ("def sorted(iterable, /, *, key=None, reverse=False):",)),
    Case("math.hypot", lambda: math.hypot, (3, 4), {}, ("def hypot(*args, **kwargs):", "hypot(*coordinates) -> value")),
    Case("math.pow", lambda: math.pow, (2, 10), {}, ("def pow(x, y, /):",)),
    Case("itemgetter", lambda: operator.itemgetter(1), (["a", "b", "c"],), {}, ("def second(*args, **kwargs):",),
         name="second"),
    Case("operator.add", lambda: operator.add, (2, 3), {}, ("def add(a, b, /):",)),
    Case("partial(pow, 2)", lambda: functools.partial(pow, 2), (10,), {}, ("def two_to_the(exp, mod=None):",),
         name="two_to_the"),
    Case(
        "bound method",
        lambda: Greeter("Hello").greet,
        ("Ann",),
        {"punctuation": "!"},
        ("def greet(name: str, punctuation: str = '.') -> str:", "name: who to greet"),
    ),
    Case("list.append bound", lambda: [0].append, (1,), {}, ("def append(object, /):",), state=lambda f: f.__self__),
    Case("classmethod", lambda: Temperature.from_fahrenheit, (212,), {},
         ("def from_fahrenheit(fahrenheit: float) -> Temperature:",)),
    Case("staticmethod", lambda: Temperature.c_to_f, (100.0,), {}, ("def c_to_f(celsius: float) -> float:",)),
    Case("staticmethod object", lambda: vars(Temperature)["c_to_f"], (0.0,), {},
         ("def c_to_f(celsius: float) -> float:",)),
    Case("callable instance", lambda: Scaler(3), (2.0, 4.0), {},
         ("def scale(x: float, *more: float) -> list[float]:", "Scale one or more"), name="scale"),
    Case("class", lambda: Temperature, (21.5,), {"label": "water"},
         ("def Temperature(celsius: float, label: str = 'air') -> Temperature:",)),
    Case("numpy.add", lambda: np.add, (1, 2), {}, ("def add(x1, x2, /, out=None, *, where=True",)),
    Case("numpy.mean", lambda: np.mean, ([1, 2, 3, 4],), {},
         ("def mean(a, axis=None, dtype=None, out=None, keepdims=..., *, where=...):",)),
    Case("str.upper", lambda: str.upper, ("abc",), {}, ("def upper(self, /):",)),
    Case("dict.fromkeys", lambda: dict.fromkeys, (["a", "b"], 0), {}, ("def fromkeys(iterable, value=None, /):",)),
    Case(
        "every kind",
        lambda: every_kind,
        (1, "b", 3.5, 4.5),
        {"c": True, "e": "x"},
        ("def every_kind(a: int, /, b: str, *args: float, c: bool, d: int = 3, **kw: str) -> dict[str, Any]:",),
    ),
    Case("no hints", lambda: no_hints, ("x", "y", 1, 2), {"k": "v"}, ("def no_hints(x, y=2, *rest, **opts):",)),
]


def same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(a, b))
    return bool(a == b)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_callable_becomes_a_tool(case: Case) -> None:
    t = Tool(case.make(), name=case.name)

    stub = t.python_stub()
    ast.parse(stub)
    for text in case.stub:
        assert text in stub, stub

    # A call from sandboxed code: bind, then call, against calling the function directly.
    direct_callable, tool_callable = case.make(), case.make()
    t = Tool(tool_callable, name=case.name)
    arguments = t.bind(case.args, case.kwargs)
    result = t.call(arguments)
    expected = direct_callable(*case.args, **case.kwargs)
    assert same(result, expected)
    assert type(result) is type(expected)
    if case.state is not None:
        assert case.state(tool_callable) == case.state(direct_callable)

    # The same call from a function-calling model: JSON arguments valid against the schema.
    schema = t.openai_schema()
    json.dumps(schema)
    parameters = schema["function"]["parameters"]
    jsonschema.Draft202012Validator.check_schema(parameters)
    wire = json.loads(json.dumps(arguments))
    jsonschema.validate(wire, parameters)
    again = Tool(case.make(), name=case.name).call(wire)
    assert same(again, case.make()(*case.args, **case.kwargs))


def test_the_arguments_dict_of_every_parameter_kind() -> None:
    t = Tool(every_kind)
    arguments = t.bind((1, "b", 3.5, 4.5), {"c": True, "e": "x"})
    assert arguments == {"a": 1, "b": "b", "args": [3.5, 4.5], "c": True, "kw": {"e": "x"}}
    props = t.parameters["properties"]
    assert props["args"] == {"type": "array", "items": {"type": "number"}}
    assert props["kw"] == {"type": "object", "additionalProperties": {"type": "string"}}
    assert t.parameters["required"] == ["a", "b", "c"]
    assert t.call(arguments) == {"a": 1, "b": "b", "args": (3.5, 4.5), "c": True, "d": 3, "kw": {"e": "x"}}


def test_builtins_without_a_signature_get_variadics_and_their_docstring() -> None:
    t = Tool(max)
    assert list(t.signature.parameters) == ["args", "kwargs"]
    assert t.description.startswith("With a single iterable argument, return its biggest item.")
    assert "max(iterable" not in t.description  # the call-form lines are not the description
    assert t.call({"args": [[1, 5, 2]], "kwargs": {"key": None}}) == 5
    assert t.call({"args": [[]], "kwargs": {"default": "empty"}}) == "empty"
    # numpy ufuncs start their docstring with their signature line; the summary is the sentence after it.
    assert Tool(np.add).description.startswith("Add arguments element-wise.")
    renamed = Tool(max, name="largest")
    assert "largest(iterable, *[, default=obj, key=func]) -> value" in renamed.python_stub()


def test_numpy_arrays_through_a_ufunc_tool() -> None:
    t = Tool(np.add)
    result = t.call(t.bind(([1, 2], [3, 4]), {}))
    assert isinstance(result, np.ndarray) and result.tolist() == [4, 6]


def test_objects_without_a_name_need_name() -> None:
    for obj in (operator.itemgetter(1), functools.partial(pow, 2), Scaler(2)):
        with pytest.raises(ToolDefinitionError, match=r"no __name__.*pass name=\.\.\."):
            Tool(obj)
    assert tool(name="first")(operator.itemgetter(0)).call({"args": ["xyz"]}) == "x"
    with pytest.raises(ToolDefinitionError, match="take it from its class"):
        Tool(vars(Temperature)["from_fahrenheit"])


def test_a_class_is_a_tool_that_builds_instances() -> None:
    t = Tool(Temperature)
    assert t.parameters["properties"]["celsius"] == {"type": "number"}
    assert t.description == "A temperature in degrees Celsius."
    assert t.call({"celsius": "20"}) == Temperature(20.0)


def test_callable_objects_use_their_call_docstring_and_async_call() -> None:
    class Pinger:
        """The class docstring."""

        async def __call__(self, host: str) -> str:
            return f"pong {host}"

    scale = Tool(Scaler(2), name="scale")
    assert scale.description == "Scale one or more numbers."
    ping = Tool(Pinger(), name="ping")
    assert ping.is_async and ping.description == "The class docstring."
    assert ping.call({"host": "h"}) == "pong h"


# --------------------------------------------------------------------------- names that shadow builtins


@pytest.mark.parametrize("func", [sum, max, len, print])
def test_tools_may_shadow_builtins_and_the_stub_says_so(func: Callable[..., Any]) -> None:
    t = Tool(func)
    name = func.__name__
    note = f"it shadows Python's built-in `{name}`"
    stub = t.python_stub()
    assert note in stub
    assert f"import builtins; builtins.{name}(...)" in stub
    assert note in t.host_function(lambda a, k: None).spec.doc  # the sandbox stub's docstring too
    assert note not in t.description  # function-calling models call tools by name, nothing is shadowed
    ast.parse(stub)


def test_user_functions_named_like_builtins_and_others() -> None:
    @tool
    def sum(values: list[float]) -> float:  # the point of the test
        """Add numbers exactly."""
        return math.fsum(values)

    assert "shadows Python's built-in `sum`" in sum.python_stub()

    @tool
    def total(values: list[float]) -> float:
        """Add numbers."""
        return math.fsum(values)

    assert "shadows" not in total.python_stub()
    with pytest.raises(ToolDefinitionError, match="not a keyword"):
        Tool(max, name="lambda")
    assert [t.name for t in ensure_tools([max, min, len])] == ["max", "min", "len"]


# --------------------------------------------------------------------------- the sandbox side


def test_builtin_tools_through_the_sandbox_dispatcher() -> None:
    tools = [Tool(max), Tool(math.hypot), Tool(every_kind)]
    functions = [t.host_function(lambda a, k, t=t: t.call(t.bind(a, k))) for t in tools]
    dispatcher = FunctionDispatcher(functions)
    try:
        assert dispatcher.call("max", [3, 9, 2], {}).result == 9
        assert dispatcher.call("hypot", [3, 4], {}).result == 5.0
        record = dispatcher.call("every_kind", [1, "b", 2.5], {"c": False, "z": "q"})
        assert record.error is None
        assert record.result["args"] in ([2.5], (2.5,))
        assert record.result["kw"] == {"z": "q"}
        bad = dispatcher.call("every_kind", [1, "b", "x"], {"c": False})
        assert bad.error is not None and bad.error.type == "ToolArgumentError"
        assert "args[0]" in bad.error.message
    finally:
        dispatcher.close()
    spec = functions[2].spec
    assert [(p.name, p.kind) for p in spec.parameters] == [
        ("a", "positional_only"),
        ("b", "positional_or_keyword"),
        ("args", "var_positional"),
        ("c", "keyword_only"),
        ("d", "keyword_only"),
        ("kw", "var_keyword"),
    ]
    assert isinstance(functions[0], HostFunction)


def test_host_function_knows_async_tools() -> None:
    async def fetch(url: str) -> str:
        """Fetch."""
        return url

    if "is_async" not in inspect.signature(HostFunction.__init__).parameters:
        pytest.skip("this sandbox.functions.HostFunction has no is_async yet")
    assert Tool(fetch).host_function(lambda a, k: None).is_async is True
    assert Tool(max).host_function(lambda a, k: None).is_async is False
