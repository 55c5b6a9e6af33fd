"""codeact.tools: *args and **kwargs: binding, validation errors, call layout, schema round trips."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import jsonschema
import pytest

from codeact.errors import ToolArgumentError
from codeact.tools import RunContext, Tool, tool


@tool
def minimum_value(*values: float, precision: int = 2) -> float:
    """The smallest of some numbers.

    Args:
        *values: the numbers
        precision: decimal places of the result
    """
    return round(min(values), precision)


@tool
def tag(name: str, **labels: int) -> dict[str, Any]:
    """Tag a resource."""
    return {"name": name, "labels": labels}


def test_stub_and_schema_of_a_variadic_tool() -> None:
    stub = minimum_value.python_stub()
    assert stub.startswith("def minimum_value(*values: float, precision: int = 2) -> float:")
    assert "*values: the numbers" in stub
    schema = minimum_value.parameters
    assert schema == {
        "type": "object",
        "properties": {
            "values": {"type": "array", "items": {"type": "number"}, "description": "the numbers"},
            "precision": {"type": "integer", "default": 2, "description": "decimal places of the result"},
        },
        "additionalProperties": False,
    }
    jsonschema.Draft202012Validator.check_schema(schema)


def test_bind_and_call_agree_on_the_arguments_dict() -> None:
    arguments = minimum_value.bind((3, 1.256, 2), {"precision": 1})
    assert arguments == {"values": [3, 1.256, 2], "precision": 1}
    assert minimum_value.call(arguments) == 1.3
    # What a function-calling model sends for the same call.
    assert minimum_value.call(json.loads('{"values": [3, 1.256, 2], "precision": 1}')) == 1.3
    assert minimum_value.call({"values": ["3", "1"]}) == 1.0  # items are coerced one by one
    assert tag.bind(("db",), {"env": 1, "tier": 2}) == {"name": "db", "labels": {"env": 1, "tier": 2}}
    assert tag.call({"name": "db", "labels": {"env": "1"}}) == {"name": "db", "labels": {"env": 1}}
    assert tag.call({"name": "db"}) == {"name": "db", "labels": {}}


def test_function_calling_round_trip_validates_against_the_schema() -> None:
    for t, args, kwargs in [(minimum_value, (5, 4), {}), (tag, ("x",), {"a": 1})]:
        wire = json.loads(json.dumps(t.bind(args, kwargs)))
        jsonschema.validate(wire, t.parameters)
        assert t.call(wire) == t.func(*args, **kwargs)


def test_wrong_count_names_the_signature() -> None:
    @tool
    def pair(a: int, b: int, /) -> int:
        """Pair."""
        return a + b

    with pytest.raises(ToolArgumentError, match="takes 2 positional arguments but 3 were given") as info:
        pair.bind((1, 2, 3), {})
    assert "its signature is pair(a: int, b: int, /) -> int" in str(info.value)

    @tool
    def at_least_two(a: int, b: int, *rest: int) -> int:
        """At least two."""
        return a + b + sum(rest)

    with pytest.raises(ToolArgumentError) as info:
        at_least_two.call(at_least_two.bind((1,), {}))
    message = str(info.value)
    assert "- b: missing required argument (expected int)" in message
    assert "expected: at_least_two(a: int, b: int, *rest: int) -> int" in message


def test_unknown_keyword_suggests_close_names() -> None:
    with pytest.raises(ToolArgumentError) as info:
        minimum_value.call(minimum_value.bind((3, 1), {"precison": 1}))
    message = str(info.value)
    assert "unknown argument 'precison' (did you mean 'precision'?)" in message
    assert "valid arguments: values (a list of extra positional arguments), precision" in message
    assert "expected: minimum_value(*values: float, precision: int = 2) -> float" in message


def test_extra_keywords_outside_the_kwargs_object_are_explained() -> None:
    # A function-calling model that flattens **labels into the top level.
    with pytest.raises(ToolArgumentError) as info:
        tag.call({"name": "db", "env": 1})
    message = str(info.value)
    assert "unknown argument 'env'" in message
    assert "extra keyword arguments go inside 'labels': {'labels': {'env': ...}}" in message


def test_bad_types_in_variadics_are_located_precisely() -> None:
    with pytest.raises(ToolArgumentError) as info:
        minimum_value.call(minimum_value.bind((3, "x"), {}))
    message = str(info.value)
    assert "- values[1]: Input should be a valid number" in message
    assert "expected float; received 'x' (str)" in message

    with pytest.raises(ToolArgumentError) as info:
        tag.call(tag.bind(("db",), {"env": "prod"}))
    assert "- labels['env']: Input should be a valid integer" in str(info.value)
    assert "expected int; received 'prod' (str)" in str(info.value)

    with pytest.raises(ToolArgumentError, match=r"- values: Input should be a valid list.*expected a list of float"):
        minimum_value.call({"values": 3})
    with pytest.raises(ToolArgumentError, match=r"- labels: Input should be a valid dictionary.*expected an object"):
        tag.call({"name": "db", "labels": [1]})


def test_calls_python_would_refuse_are_refused() -> None:
    with pytest.raises(ToolArgumentError, match=r"unexpected keyword argument 'values'.*pass them by position"):
        minimum_value.bind((), {"values": [1, 2]})
    # A keyword inside **labels that names a parameter of its own.
    with pytest.raises(ToolArgumentError, match=r"labels\['name'\]: 'name' is a parameter of its own"):
        tag.call({"name": "db", "labels": {"name": 1}})
    with pytest.raises(ToolArgumentError, match="multiple values for argument 'name'"):
        tag.bind(("db",), {"name": "other"})


def test_positional_only_names_may_be_keywords_of_kwargs() -> None:
    def f(a: int, /, **kw: int) -> tuple[int, dict[str, int]]:
        """As in Python: f(1, a=2) is allowed."""
        return a, kw

    t = Tool(f)
    arguments = t.bind((1,), {"a": 2})
    assert arguments == {"a": 1, "kw": {"a": 2}}
    assert t.call(arguments) == f(1, a=2) == (1, {"a": 2})


def test_call_layout_fills_positional_gaps_with_the_real_default() -> None:
    marker = object()

    def f(a: int, b: Any = marker, /, *rest: int) -> tuple[Any, ...]:
        """Gap."""
        return a, b, rest

    t = Tool(f)
    assert t.call({"a": 1, "rest": [5, 6]}) == (1, marker, (5, 6))
    assert t.call({"a": 1}) == f(1)

    def g(a: int, b: int = 2, *rest: int, c: int = 0) -> tuple[Any, ...]:
        """Positional-or-keyword before *rest."""
        return a, b, rest, c

    u = Tool(g)
    assert u.call(u.bind((1, 2, 3, 4), {"c": 9})) == g(1, 2, 3, 4, c=9)
    assert u.call({"a": 1, "b": 7}) == g(1, 7)


def test_context_parameter_with_variadics() -> None:
    @tool
    def collect(ctx: RunContext, *items: str, sep: str = ",", **extra: str) -> str:
        """Join items for the current run."""
        return f"{ctx.run_id}:{sep.join(items)}:{sorted(extra.items())}"

    assert collect.context_param == "ctx"
    assert "ctx" not in collect.python_stub()
    ctx = RunContext(run_id="r1")
    assert collect.call(collect.bind(("a", "b"), {"z": "1"}), ctx) == "r1:a,b:[('z', '1')]"
    assert asyncio.run(collect.acall({"items": ["x"]}, ctx)) == "r1:x:[]"
    # The context parameter cannot be smuggled in, neither on top nor inside **extra.
    with pytest.raises(ToolArgumentError, match="filled in by the agent"):
        collect.call(collect.bind((), {"ctx": "x"}))
    with pytest.raises(ToolArgumentError, match=r"extra\['ctx'\]: 'ctx' is filled in by the agent"):
        collect.call({"extra": {"ctx": "x"}})


def test_annotated_variadics() -> None:
    @tool
    def scores(*points: Annotated[int, "one score per player"], **bonus: Annotated[float, "bonus by name"]) -> float:
        """Total score."""
        return sum(points) + sum(bonus.values())

    props = scores.parameters["properties"]
    assert props["points"] == {"type": "array", "items": {"type": "integer"}, "description": "one score per player"}
    assert props["bonus"]["description"] == "bonus by name"
    assert "def scores(*points: int, **bonus: float) -> float:" in scores.python_stub()
    assert scores.call(scores.bind((1, 2), {"ann": 0.5})) == 3.5


def test_async_variadic_tool() -> None:
    @tool
    async def gather(*names: str) -> list[str]:
        """Gather names."""
        await asyncio.sleep(0)
        return list(names)

    assert gather.call(gather.bind(("a", "b"), {})) == ["a", "b"]
    assert asyncio.run(gather.acall({"names": ["c"]})) == ["c"]
