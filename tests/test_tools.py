"""codeact.tools: schemas, validation, context injection, stubs, host functions and loaders."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import enum
import functools
import inspect
import json
import subprocess
import sys
import textwrap
import threading
import time
from typing import Annotated, Any, Literal, Optional, Union

import pydantic
import pytest
import typing_extensions

from codeact.errors import ConfigError, ToolArgumentError, ToolDefinitionError, UnknownToolError
from codeact.tools import RunContext, Tool, ensure_tools, load_tools, tool
from sandbox.functions import HostFunction

# Types used by the tools below live at module level: with `from __future__
# import annotations`, hints are resolved against the module's globals.


class Unit(enum.Enum):
    CELSIUS = "C"
    FAHRENHEIT = "F"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0


class Filter(typing_extensions.TypedDict):
    column: str
    op: Literal["==", ">", "<"]
    value: typing_extensions.NotRequired[float]


class Person(pydantic.BaseModel):
    """A person."""

    name: str
    age: int = pydantic.Field(ge=0, description="age in years")


class TreeNode(pydantic.BaseModel):
    value: int
    children: list[TreeNode] = []


class Opaque:
    """An arbitrary class: no JSON schema."""


@dataclasses.dataclass
class Deps:
    user_id: str


@tool
def get_daily_weather(city: str, days: int = 3, unit: Literal["C", "F"] = "C") -> str:
    """Weather for today, tomorrow and the day after in a city.

    Data comes from the national weather service.

    Args:
        city: city name, e.g. 北京
        days: how many days to report,
            starting today
        unit: temperature unit
    """
    return f"{city}: sunny for {days} days ({unit})"


def walk(node: Any, path: str = "") -> list[tuple[str, str, Any]]:
    """Every (path, key, value) in a JSON-like tree."""
    out = []
    if isinstance(node, dict):
        for key, value in node.items():
            out.append((path, key, value))
            out.extend(walk(value, f"{path}/{key}"))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out.extend(walk(value, f"{path}/{i}"))
    return out


# --------------------------------------------------------------------------- decorator and Tool basics


def test_bare_decorator_builds_a_tool_that_is_still_the_function() -> None:
    assert isinstance(get_daily_weather, Tool)
    assert get_daily_weather.name == "get_daily_weather"
    assert get_daily_weather("Paris", days=2) == "Paris: sunny for 2 days (C)"
    assert get_daily_weather.func.__name__ == "get_daily_weather"
    assert get_daily_weather.__name__ == "get_daily_weather"
    assert "Weather for today" in (get_daily_weather.__doc__ or "")
    assert get_daily_weather.is_async is False
    assert get_daily_weather.context_param is None
    assert get_daily_weather.return_direct is False
    assert get_daily_weather.requires_approval is False
    assert get_daily_weather.timeout is None


def test_decorator_with_options() -> None:
    @tool(name="finish", description="Give the final answer.", return_direct=True, requires_approval=True, timeout=5)
    def final(answer: str) -> str:
        """Ignored because description= is given."""
        return answer

    assert isinstance(final, Tool)
    assert final.name == "finish"
    assert final.description == "Give the final answer."
    assert final.return_direct is True
    assert final.requires_approval is True
    assert final.timeout == 5.0
    assert final("x") == "x"
    assert final.openai_schema()["function"]["name"] == "finish"


def test_description_is_summary_and_body_without_args() -> None:
    assert get_daily_weather.description == (
        "Weather for today, tomorrow and the day after in a city.\n\nData comes from the national weather service."
    )


def test_returns_section_is_appended_to_description() -> None:
    @tool
    def area(w: float, h: float) -> float:
        """Area of a rectangle.

        Args:
            w: width
            h: height

        Returns:
            the area in square units
        """
        return w * h

    assert area.description == "Area of a rectangle.\n\nReturns: the area in square units"
    assert "Returns:\n        the area in square units" in area.python_stub()


def test_tool_names_must_be_identifiers_and_not_keywords() -> None:
    with pytest.raises(ToolDefinitionError, match="valid identifier"):
        tool(lambda x: x)
    with pytest.raises(ToolDefinitionError, match="not a keyword"):
        tool(name="class")(lambda x: x)
    with pytest.raises(ToolDefinitionError, match="valid identifier"):
        tool(name="get-weather")(lambda x: x)
    assert tool(name="double")(lambda x: x * 2)(4) == 8


def test_bad_definitions_are_rejected_with_a_reason() -> None:
    def star_args(*items: int) -> int:
        """Sum."""
        return sum(items)

    # *args is ordinary Python in a code action: accepted (tests/test_tools_variadics.py has the details).
    assert tool(star_args).call(tool(star_args).bind((1, 2), {})) == 3

    def gen(n: int):  # type: ignore[no-untyped-def]
        """Generate."""
        yield n

    with pytest.raises(ToolDefinitionError, match="generator"):
        tool(gen)

    with pytest.raises(ToolDefinitionError, match="timeout"):
        tool(timeout=0)(get_daily_weather.func)

    with pytest.raises(ToolDefinitionError, match="not callable"):
        Tool(42)  # type: ignore[arg-type]

    def two_contexts(a: RunContext, b: RunContext) -> None:
        """Two."""

    with pytest.raises(ToolDefinitionError, match="two RunContext parameters"):
        tool(two_contexts)


def test_unsupported_annotation_names_the_parameter_and_the_fix() -> None:
    def takes_opaque(city: str, thing: Opaque) -> None:
        """Bad."""

    with pytest.raises(ToolDefinitionError) as info:
        tool(takes_opaque)
    message = str(info.value)
    assert "tool 'takes_opaque'" in message
    assert "parameter 'thing'" in message
    assert "Opaque" in message
    assert "JSON-compatible type" in message
    assert "RunContext" in message
    assert "arbitrary_types_allowed" not in message  # pydantic's advice does not apply to tool authors


def test_unresolvable_annotation_is_a_definition_error() -> None:
    def uses_undefined(x: NotDefinedAnywhere) -> None:  # type: ignore[name-defined]  # noqa: F821
        """Bad."""

    with pytest.raises(ToolDefinitionError, match=r"parameter 'x'.*NotDefinedAnywhere.*module level"):
        tool(uses_undefined)


# --------------------------------------------------------------------------- JSON schemas


def test_google_docstring_schema() -> None:
    assert get_daily_weather.parameters == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "city name, e.g. 北京"},
            "days": {"type": "integer", "default": 3, "description": "how many days to report,\nstarting today"},
            "unit": {"type": "string", "enum": ["C", "F"], "default": "C", "description": "temperature unit"},
        },
        "required": ["city"],
        "additionalProperties": False,
    }


def test_numpy_docstring_schema() -> None:
    @tool
    def scale(values: list[float], factor: float = 2.0) -> list[float]:
        """Multiply every value by a factor.

        Values are not modified in place.

        Parameters
        ----------
        values : list of float
            The numbers to scale.
        factor : float, optional
            What to multiply by.

        Returns
        -------
        list of float
            The scaled numbers.
        """
        return [v * factor for v in values]

    assert scale.description.startswith("Multiply every value by a factor.\n\nValues are not modified in place.")
    assert "Parameters" not in scale.description
    props = scale.parameters["properties"]
    assert props["values"] == {"type": "array", "items": {"type": "number"}, "description": "The numbers to scale."}
    assert props["factor"] == {"type": "number", "default": 2.0, "description": "What to multiply by."}
    assert scale.parameters["required"] == ["values"]


def test_rest_docstring_params_are_read_too() -> None:
    @tool
    def greet(name: str) -> str:
        """Say hello.

        :param name: who to greet
        """
        return f"hello {name}"

    assert greet.parameters["properties"]["name"]["description"] == "who to greet"


def test_annotated_descriptions_and_field_constraints() -> None:
    @tool
    def search(
        query: Annotated[str, "full-text query"],
        limit: Annotated[int, pydantic.Field(description="max results", ge=1, le=50)] = 10,
        lang: Annotated[str, "language code"] = "en",
    ) -> list[str]:
        """Search documents.

        Args:
            query: overridden by the Annotated description
            lang: overridden too
        """
        return []

    props = search.parameters["properties"]
    assert props["query"] == {"type": "string", "description": "full-text query"}
    assert props["limit"] == {"type": "integer", "description": "max results", "minimum": 1, "maximum": 50,
                              "default": 10}
    assert props["lang"]["description"] == "language code"
    with pytest.raises(ToolArgumentError, match="limit"):
        search.validate({"query": "x", "limit": 100})
    # Annotated descriptions show up in the prompt stub too; the Annotated wrapper does not.
    stub = search.python_stub()
    assert "query: str" in stub and "Annotated" not in stub
    assert "query: full-text query" in stub


def test_literal_and_enum_become_enums() -> None:
    @tool
    def convert(
        value: float, unit: Unit = Unit.CELSIUS, priority: Priority = Priority.LOW, mode: Literal[1, 2] = 1
    ) -> str:
        """Convert."""
        return f"{value}{unit.value}{priority.name}{mode}"

    props = convert.parameters["properties"]
    assert props["unit"] == {"type": "string", "enum": ["C", "F"], "default": "C"}
    assert props["priority"] == {"type": "integer", "enum": [1, 2], "default": 1}
    assert props["mode"] == {"type": "integer", "enum": [1, 2], "default": 1}
    assert "$defs" not in convert.parameters  # enums are inlined
    values = convert.validate({"value": "1.5", "unit": "F", "priority": 2})
    assert values == {"value": 1.5, "unit": Unit.FAHRENHEIT, "priority": Priority.HIGH}
    # An int is a fine float: it reaches the function as passed (as a direct call would), the string becomes the member.
    assert convert.call({"value": 1, "unit": "F"}) == "1FLOW1"
    assert convert.call({"value": "1.5", "unit": "F"}) == "1.5FLOW1"  # a string is converted
    # The sandbox has no Unit class: the stub shows the values.
    assert "unit: Literal['C', 'F'] = 'C'" in convert.python_stub()
    assert "priority: Literal[1, 2] = 1" in convert.python_stub()


def test_optional_union_and_defaults() -> None:
    @tool
    def pick(a: Optional[int], b: Union[int, str] = 1, c: str | None = None, d: bool = False) -> None:
        """Pick."""

    p = pick.parameters
    assert p["properties"]["a"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert p["properties"]["b"] == {"anyOf": [{"type": "integer"}, {"type": "string"}], "default": 1}
    assert p["properties"]["c"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    assert p["properties"]["d"] == {"type": "boolean", "default": False}
    assert p["required"] == ["a"]
    stub = pick.python_stub()
    assert "def pick(a: int | None, b: int | str = 1, c: str | None = None, d: bool = False) -> None:" in stub


def test_containers() -> None:
    @tool
    def load(rows: list[dict[str, int]], pair: tuple[str, int], tags: set[str], anything: dict) -> None:
        """Load."""

    props = load.parameters["properties"]
    assert props["rows"] == {"type": "array", "items": {"type": "object", "additionalProperties": {"type": "integer"}}}
    assert props["pair"] == {
        "type": "array",
        "prefixItems": [{"type": "string"}, {"type": "integer"}],
        "minItems": 2,
        "maxItems": 2,
    }
    assert props["tags"] == {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    assert props["anything"] == {"type": "object", "additionalProperties": True}
    values = load.validate({"rows": [{"a": "1"}], "pair": ["x", "2"], "tags": ["a", "a"], "anything": {}})
    assert values == {"rows": [{"a": 1}], "pair": ("x", 2), "tags": {"a"}, "anything": {}}


def test_typeddict_dataclass_and_model_are_inlined_objects() -> None:
    @tool
    def analyse(where: Point, filters: list[Filter], owner: Person) -> str:
        """Analyse.

        Args:
            where: the origin
        """
        return "ok"

    p = analyse.parameters
    assert "$defs" not in p
    assert p["properties"]["where"] == {
        "type": "object",
        "description": "the origin",
        "properties": {"x": {"type": "number"}, "y": {"type": "number", "default": 0.0}},
        "required": ["x"],
        "additionalProperties": False,
    }
    filt = p["properties"]["filters"]["items"]
    assert filt["type"] == "object"
    assert filt["properties"]["op"] == {"type": "string", "enum": ["==", ">", "<"]}
    assert filt["required"] == ["column", "op"]
    owner = p["properties"]["owner"]
    assert owner["description"] == "A person."
    assert owner["properties"]["age"] == {"type": "integer", "minimum": 0, "description": "age in years"}
    assert owner["required"] == ["name", "age"]

    # Validation constructs the declared types.
    values = analyse.validate(
        {"where": {"x": "1"}, "filters": [{"column": "a", "op": ">", "value": 3}], "owner": {"name": "Ann", "age": 30}}
    )
    assert values["where"] == Point(1.0, 0.0)
    assert values["filters"] == [{"column": "a", "op": ">", "value": 3.0}]
    assert values["owner"] == Person(name="Ann", age=30)

    # The stub tells the model which keys the dicts take.
    stub = analyse.python_stub()
    assert "def analyse(where: Point, filters: list[Filter], owner: Person) -> str:" in stub
    assert 'Point: {"x": float, "y": float = 0.0}' in stub
    assert "Filter: {\"column\": str, \"op\": Literal['==', '>', '<'], \"value\": float = ...}" in stub
    assert 'Person: {"name": str, "age": int}' in stub
    ast.parse(stub)


def test_recursive_model_keeps_defs() -> None:
    @tool
    def plant(tree: TreeNode) -> int:
        """Count nodes."""

        def count(n: TreeNode) -> int:
            return 1 + sum(count(c) for c in n.children)

        return count(tree)

    p = plant.parameters
    assert p["properties"]["tree"] == {"$ref": "#/$defs/TreeNode"}
    assert p["$defs"]["TreeNode"]["properties"]["children"]["items"] == {"$ref": "#/$defs/TreeNode"}
    assert plant.call({"tree": {"value": 1, "children": [{"value": 2}, {"value": 3, "children": [{"value": 4}]}]}}) == 4


def test_schemas_have_no_auto_titles_but_keep_a_property_named_title() -> None:
    @tool
    def publish(title: str, author: Person, where: Point) -> None:
        """Publish."""

    p = publish.parameters
    assert "title" in p["properties"]
    assert all(key != "title" for path, key, _ in walk(p) if not path.endswith("/properties"))


def test_missing_annotations_mean_any() -> None:
    @tool
    def echo(value, times=2):  # type: ignore[no-untyped-def]
        """Echo."""
        return [value] * times

    assert echo.parameters["properties"] == {"value": {}, "times": {"default": 2}}
    assert echo.call({"value": {"a": [1]}}) == [{"a": [1]}, {"a": [1]}]
    assert "def echo(value, times=2):" in echo.python_stub()


def test_parameter_names_that_clash_with_pydantic_attributes() -> None:
    @tool
    def odd(json: str, copy: int = 1, model_config: str = "x", schema: bool = False) -> str:
        """Odd names."""
        return f"{json}{copy}{model_config}{schema}"

    assert list(odd.parameters["properties"]) == ["json", "copy", "model_config", "schema"]
    assert odd.call({"json": "j", "copy": "3"}) == "j3xFalse"


def test_non_json_default_is_left_out_of_schema_but_applied() -> None:
    sentinel = object()

    @tool
    def maybe(x: int = sentinel) -> bool:  # type: ignore[assignment]
        """Maybe."""
        return x is sentinel

    assert maybe.parameters["properties"]["x"] == {"type": "integer"}
    assert maybe.parameters.get("required", []) == []
    assert maybe.call({}) is True  # the very same default object, not a copy
    assert "x: int = ..." in maybe.python_stub()


def test_var_keyword_arguments() -> None:
    @tool
    def tag(name: str, **labels: int) -> dict[str, int]:
        """Tag."""
        return labels

    # **labels is an object property of its own (the issue: "**kwargs -> an object").
    assert tag.parameters["properties"]["labels"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert tag.parameters["additionalProperties"] is False
    assert tag.call({"name": "n", "labels": {"a": "1", "b": 2}}) == {"a": 1, "b": 2}
    with pytest.raises(ToolArgumentError, match=r"labels\['a'\]: .*valid integer.*received 'x'"):
        tag.call({"name": "n", "labels": {"a": "x"}})
    assert tag.bind(("n",), {"z": 3}) == {"name": "n", "labels": {"z": 3}}


def test_parameters_property_returns_a_copy() -> None:
    schema = get_daily_weather.parameters
    schema["properties"].clear()
    assert get_daily_weather.parameters["properties"]


# --------------------------------------------------------------------------- hidden run context


@tool
def whoami(ctx: RunContext[Deps], greeting: str = "hi") -> str:
    """Greet the current user.

    Args:
        ctx: the run context (hidden)
        greeting: what to say
    """
    return f"{greeting} {ctx.deps.user_id} (run {ctx.run_id}, step {ctx.step}, {ctx.metadata.get('k')})"


def test_context_parameter_is_hidden() -> None:
    assert whoami.context_param == "ctx"
    assert list(whoami.parameters["properties"]) == ["greeting"]
    assert "ctx" not in json.dumps(whoami.openai_schema())
    assert list(whoami.signature.parameters) == ["greeting"]
    stub = whoami.python_stub()
    assert "ctx" not in stub
    assert stub.startswith('def whoami(greeting: str = \'hi\') -> str:\n    """Greet the current user.')
    spec = whoami.host_function(lambda a, k: None).spec
    assert [p.name for p in spec.parameters] == ["greeting"]


def test_context_is_filled_on_call_with_deps() -> None:
    ctx = RunContext(run_id="r1", step=2, deps=Deps("u42"), metadata={"k": "v"})
    assert whoami.call({"greeting": "hello"}, context=ctx) == "hello u42 (run r1, step 2, v)"
    assert asyncio.run(whoami.acall({}, ctx)) == "hi u42 (run r1, step 2, v)"
    # Positional calls from the sandbox bind to the public signature.
    assert whoami.call(whoami.bind(("hey",), {}), ctx) == "hey u42 (run r1, step 2, v)"


def test_default_context_when_none_given() -> None:
    seen: list[RunContext[Any]] = []

    @tool
    def record(x: int, context: Optional[RunContext] = None) -> int:
        """Record."""
        assert context is not None
        seen.append(context)
        return x

    assert record.context_param == "context"
    assert record.call({"x": 1}) == 1
    assert seen[0].run_id == "" and seen[0].step == 0 and seen[0].deps is None and seen[0].metadata == {}


def test_model_cannot_pass_the_context() -> None:
    with pytest.raises(ToolArgumentError) as info:
        whoami.validate({"ctx": {"run_id": "x"}})
    assert "'ctx' (filled in by the agent; do not pass it)" in str(info.value)


def test_positional_only_context_and_parameters() -> None:
    @tool
    def pos(ctx: RunContext, a: int, b: int = 5, /, c: int = 0) -> str:
        """Positional only."""
        return f"{ctx.run_id}:{a}:{b}:{c}"

    assert pos.call({"a": "1", "c": 2}, RunContext(run_id="r")) == "r:1:5:2"
    assert pos.bind((1, 2), {"c": 3}) == {"a": 1, "b": 2, "c": 3}
    assert "def pos(a: int, b: int = 5, /, c: int = 0) -> str:" in pos.python_stub()


# --------------------------------------------------------------------------- validation


def test_validate_coerces_and_leaves_defaults_to_the_function() -> None:
    assert get_daily_weather.validate({"city": "Oslo", "days": "4"}) == {"city": "Oslo", "days": 4}
    assert get_daily_weather.validate({"city": "Oslo"}) == {"city": "Oslo"}


def test_wrong_type_message() -> None:
    with pytest.raises(ToolArgumentError) as info:
        get_daily_weather.validate({"city": "Oslo", "days": "three"})
    message = str(info.value)
    assert "tool 'get_daily_weather'" in message
    assert "- days:" in message
    assert "valid integer" in message
    assert "expected int" in message
    assert "received 'three' (str)" in message
    assert "get_daily_weather(city: str, days: int = 3, unit: Literal['C', 'F'] = 'C') -> str" in message


def test_missing_and_unknown_arguments_message() -> None:
    with pytest.raises(ToolArgumentError) as info:
        get_daily_weather.validate({"cty": "Oslo", "units": "C", "foo": 1})
    message = str(info.value)
    assert "- city: missing required argument (expected str)" in message
    assert "unknown arguments 'cty' (did you mean 'city'?), 'units' (did you mean 'unit'?), 'foo'" in message
    assert "valid arguments: city, days, unit" in message


def test_literal_violation_and_nested_locations() -> None:
    with pytest.raises(ToolArgumentError) as info:
        get_daily_weather.validate({"city": "Oslo", "unit": "K"})
    assert "- unit: Input should be 'C' or 'F'" in str(info.value)
    assert "received 'K' (str)" in str(info.value)

    @tool
    def plot(points: list[Point]) -> None:
        """Plot."""

    with pytest.raises(ToolArgumentError) as info:
        plot.validate({"points": [{"x": 1}, {"y": 2}, {"x": "far"}]})
    message = str(info.value)
    assert "- points[1].x: missing required key" in message
    assert "- points[2].x: Input should be a valid number" in message


def test_arguments_must_be_a_mapping_with_string_keys() -> None:
    with pytest.raises(ToolArgumentError, match="JSON object"):
        get_daily_weather.validate(["Oslo"])  # type: ignore[arg-type]
    with pytest.raises(ToolArgumentError, match="names must be strings"):
        get_daily_weather.validate({1: "Oslo"})  # type: ignore[dict-item]


def test_tool_without_parameters() -> None:
    @tool
    def now() -> str:
        """The time."""
        return "noon"

    assert now.parameters == {"type": "object", "properties": {}, "additionalProperties": False}
    assert now.call({}) == "noon"
    with pytest.raises(ToolArgumentError, match="this tool takes no arguments"):
        now.call({"tz": "UTC"})


def test_call_does_not_run_the_function_on_bad_arguments() -> None:
    ran = []

    @tool
    def side_effect(n: int) -> None:
        """Side effect."""
        ran.append(n)

    with pytest.raises(ToolArgumentError):
        side_effect.call({"n": "x"})
    assert ran == []


# --------------------------------------------------------------------------- bind


def test_bind_maps_positional_and_keyword_calls() -> None:
    assert get_daily_weather.bind(("Oslo", 2), {}) == {"city": "Oslo", "days": 2}
    assert get_daily_weather.bind(("Oslo",), {"unit": "F"}) == {"city": "Oslo", "unit": "F"}
    assert get_daily_weather.bind((), {"city": "Oslo"}) == {"city": "Oslo"}


def test_bind_errors_are_argument_errors() -> None:
    with pytest.raises(ToolArgumentError, match="takes 3 positional arguments but 4 were given") as info:
        get_daily_weather.bind(("a", 1, "C", "extra"), {})
    assert "get_daily_weather(city: str, days: int = 3" in str(info.value)
    with pytest.raises(ToolArgumentError, match="multiple values for argument 'city'"):
        get_daily_weather.bind(("Oslo",), {"city": "Bergen"})

    @tool
    def pos_only(a: int, /, b: int = 0) -> int:
        """Positional only."""
        return a + b

    with pytest.raises(ToolArgumentError, match="'a' is positional-only"):
        pos_only.bind((), {"a": 1})


def test_bind_leaves_missing_and_unknown_names_to_validate() -> None:
    # validate() reports every problem at once, with suggestions, which helps the model more.
    arguments = get_daily_weather.bind((), {"cty": "Oslo", "days": 1})
    assert arguments == {"cty": "Oslo", "days": 1}
    with pytest.raises(ToolArgumentError) as info:
        get_daily_weather.validate(arguments)
    assert "city: missing required argument" in str(info.value)
    assert "'cty' (did you mean 'city'?)" in str(info.value)


# --------------------------------------------------------------------------- async, timeouts


@tool
async def fetch(url: str, delay: float = 0.0) -> str:
    """Fetch a URL."""
    await asyncio.sleep(delay)
    return f"<html>{url}</html>"


def test_async_tool_call_without_a_running_loop() -> None:
    assert fetch.is_async is True
    assert fetch.call({"url": "a"}) == "<html>a</html>"


def test_async_tool_call_from_inside_a_running_loop() -> None:
    async def main() -> str:
        return fetch.call({"url": "b"})  # sync API used from async code: runs on a worker thread

    assert asyncio.run(main()) == "<html>b</html>"


def test_acall_for_async_and_sync_tools() -> None:
    async def main() -> tuple[str, str, str]:
        thread_of_sync: list[str] = []

        @tool
        def where(x: int) -> str:
            """Where."""
            thread_of_sync.append(threading.current_thread().name)
            return str(x)

        a = await fetch.acall({"url": "c"})
        b = await where.acall({"x": "7"})
        assert thread_of_sync[0] != threading.current_thread().name  # the loop was not blocked
        return a, b, threading.current_thread().name

    a, b, _ = asyncio.run(main())
    assert a == "<html>c</html>" and b == "7"


def test_acall_validates_first() -> None:
    with pytest.raises(ToolArgumentError, match="url: missing required argument"):
        asyncio.run(fetch.acall({}))


def test_timeouts() -> None:
    @tool(timeout=0.2)
    def slow_sync(seconds: float) -> str:
        """Sleep."""
        time.sleep(seconds)
        return "done"

    slow_async = tool(timeout=0.2)(fetch.func)

    assert slow_sync.call({"seconds": 0}) == "done"
    with pytest.raises(TimeoutError, match=r"tool 'slow_sync' did not finish within 0.2 s"):
        slow_sync.call({"seconds": 2})
    with pytest.raises(TimeoutError, match="tool 'fetch'"):
        slow_async.call({"url": "x", "delay": 2})
    with pytest.raises(TimeoutError):
        asyncio.run(slow_async.acall({"url": "x", "delay": 2}))
    with pytest.raises(TimeoutError):
        asyncio.run(slow_sync.acall({"seconds": 2}))


def test_tool_exceptions_propagate() -> None:
    @tool
    def boom(x: int) -> None:
        """Boom."""
        raise ValueError(f"bad {x}")

    with pytest.raises(ValueError, match="bad 1"):
        boom.call({"x": 1})
    with pytest.raises(ValueError, match="bad 2"):
        asyncio.run(boom.acall({"x": 2}))


# --------------------------------------------------------------------------- rendering


def test_python_stub_exact_text() -> None:
    assert get_daily_weather.python_stub() == textwrap.dedent(
        '''\
        def get_daily_weather(city: str, days: int = 3, unit: Literal['C', 'F'] = 'C') -> str:
            """Weather for today, tomorrow and the day after in a city.

            Data comes from the national weather service.

            Args:
                city: city name, e.g. 北京
                days: how many days to report,
                    starting today
                unit: temperature unit
            """'''
    )
    ast.parse(get_daily_weather.python_stub())


def test_python_stub_edge_cases_are_valid_python() -> None:
    @tool
    def tricky(path: str = "C:\\tmp", *, pattern: str = '"""', flag: bool = True) -> None:
        """Quotes \"\"\" and backslashes \\ in a docstring, ending with a quote: "x\""""

    @tool
    def undocumented(a: int) -> int:
        return a

    stub = tricky.python_stub()
    ast.parse(stub)
    assert "def tricky(path: str = 'C:\\\\tmp', *, pattern: str = '\"\"\"', flag: bool = True) -> None:" in stub
    tree = ast.parse(stub)
    func = tree.body[0]
    assert isinstance(func, ast.FunctionDef)
    assert '"""' in (ast.get_docstring(func) or "")
    assert undocumented.python_stub() == "def undocumented(a: int) -> int:\n    ..."
    ast.parse(undocumented.python_stub())


def test_openai_schema_shape() -> None:
    schema = get_daily_weather.openai_schema()
    assert schema == {
        "type": "function",
        "function": {
            "name": "get_daily_weather",
            "description": get_daily_weather.description,
            "parameters": get_daily_weather.parameters,
        },
    }
    json.dumps(schema)  # serialisable as is


def shown_default(p: Any) -> str | None:
    """How the sandbox shows a parameter's default, whichever shape sandbox.functions.ParameterSpec has."""
    if not p.has_default:
        return None
    if hasattr(p, "default_text"):
        return p.default_text  # type: ignore[no-any-return]
    return p.default_repr if p.default_repr is not None else repr(p.default)


def test_host_function_offers_the_tool_to_the_sandbox() -> None:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def invoke(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        calls.append((args, kwargs))
        return get_daily_weather.call(get_daily_weather.bind(args, kwargs))

    hf = get_daily_weather.host_function(invoke)
    assert isinstance(hf, HostFunction)
    assert hf.name == "get_daily_weather"
    spec = hf.spec
    assert [(p.name, p.annotation, p.has_default, shown_default(p)) for p in spec.parameters] == [
        ("city", "str", False, None),
        ("days", "int", True, "3"),
        ("unit", "Literal['C', 'F']", True, "'C'"),
    ]
    assert spec.returns == "str"
    assert spec.doc.startswith("Weather for today")
    assert "Args:\n    city: city name, e.g. 北京" in spec.doc
    assert hf("Oslo", days=1) == "Oslo: sunny for 1 days (C)"
    assert calls == [(("Oslo",), {"days": 1})]
    json.dumps(spec.to_json())


def test_host_function_carries_timeout_and_enum_defaults_as_values() -> None:
    @tool(timeout=3)
    def convert(value: float, unit: Unit = Unit.CELSIUS) -> str:
        """Convert."""
        return unit.value

    hf = convert.host_function(lambda a, k: convert.call(convert.bind(a, k)))
    assert hf.timeout == 3.0
    unit = hf.spec.parameters[1]
    assert (unit.annotation, shown_default(unit)) == ("Literal['C', 'F']", "'C'")
    assert hf.signature.parameters["unit"].default == "C"  # the enum's value: the sandbox has no Unit class
    assert hf(1.0, "F") == "F"


# --------------------------------------------------------------------------- ensure_tools


def test_ensure_tools_converts_and_rejects_duplicates() -> None:
    def plain(a: int) -> int:
        """Plain."""
        return a

    tools = ensure_tools([get_daily_weather, plain])
    assert [t.name for t in tools] == ["get_daily_weather", "plain"]
    assert tools[0] is get_daily_weather
    assert isinstance(tools[1], Tool)

    other = tool(name="plain")(lambda a: a)
    with pytest.raises(ToolDefinitionError, match=r"two tools are named 'plain'.*rename one with @tool\(name=\.\.\.\)"):
        ensure_tools([plain, other])
    with pytest.raises(ToolDefinitionError, match="listed twice"):
        ensure_tools([get_daily_weather, get_daily_weather])
    with pytest.raises(ToolDefinitionError, match="not callable"):
        ensure_tools(["get_daily_weather"])  # type: ignore[list-item]


# --------------------------------------------------------------------------- load_tools

TOOLS_MODULE = '''
"""Tools for the loader tests."""
from __future__ import annotations

import dataclasses
import json  # an imported module is not a tool
from os.path import join  # an imported function is not a tool

from codeact.tools import RunContext, tool


@dataclasses.dataclass
class Box:
    w: float
    h: float


@tool
def area(box: Box) -> float:
    """Area of a box."""
    return box.w * box.h


@tool(name="shout")
def loud(text: str, ctx: RunContext | None = None) -> str:
    """Upper-case text."""
    return text.upper()


def double(n: int) -> int:
    """Double a number."""
    return n * 2


def helper_without_docstring(n):
    return n


def _private(n: int) -> int:
    """Private helper."""
    return n


halve = tool(lambda n: n / 2, name="halve")
'''


@pytest.fixture()
def tools_package(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    pkg = tmp_path / "mytoolpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "basic.py").write_text(TOOLS_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "mytoolpkg.basic"
    for name in [m for m in sys.modules if m.startswith("mytoolpkg")]:
        del sys.modules[name]


def test_load_tools_module_all(tools_package: str) -> None:
    tools = load_tools(f"{tools_package}:ALL")
    assert [t.name for t in tools] == ["area", "shout", "halve", "double"]
    by_name = {t.name: t for t in tools}
    assert by_name["area"].call({"box": {"w": 2, "h": "3"}}) == 6.0  # dataclass resolved under __future__ annotations
    assert by_name["shout"].context_param == "ctx"
    assert by_name["double"].call({"n": 4}) == 8
    assert by_name["double"].description == "Double a number."


def test_load_tools_module_names(tools_package: str) -> None:
    tools = load_tools(f"{tools_package}: shout , double")
    assert [t.name for t in tools] == ["shout", "double"]
    # A name may be a function without a docstring when asked for explicitly.
    assert load_tools(f"{tools_package}:helper_without_docstring")[0].name == "helper_without_docstring"


def test_load_tools_unknown_name_lists_what_exists(tools_package: str) -> None:
    with pytest.raises(UnknownToolError) as info:
        load_tools(f"{tools_package}:dubble")
    message = str(info.value)
    assert "no tool or function named 'dubble'" in message
    assert "did you mean 'double'?" in message
    assert "available: area, shout, halve, double" in message
    with pytest.raises(ToolDefinitionError, match="not a function or tool"):
        load_tools(f"{tools_package}:json")


def test_load_tools_missing_module() -> None:
    with pytest.raises(ConfigError, match=r"no module named 'no_such_module_xyz'.*install"):
        load_tools("no_such_module_xyz.tools:ALL")
    with pytest.raises(ConfigError, match="neither a module path"):
        load_tools("not a module:ALL")
    with pytest.raises(ConfigError, match="tool names after ':'"):
        load_tools("json:a,,b")
    with pytest.raises(ConfigError, match="empty tool spec"):
        load_tools("  ")


def test_load_tools_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "helpers.py").write_text("FACTOR = 3\n")
    path = tmp_path / "my_tools.py"
    path.write_text(TOOLS_MODULE + "\nfrom helpers import FACTOR\n\n"
                    "@tool\ndef triple(n: int) -> int:\n    \"Triple.\"\n    return n * FACTOR\n")
    [area] = load_tools(f"{path}:area")
    assert area.call({"box": {"w": 1.5, "h": 2}}) == 3.0
    names = [t.name for t in load_tools(f"{path}:ALL")]
    assert names == ["area", "shout", "halve", "triple", "double"]
    assert load_tools(f"{path}:triple")[0].call({"n": 2}) == 6  # sibling imports work
    assert str(tmp_path) not in sys.path  # the file's directory was only on sys.path while importing


def test_load_tools_file_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "present.py").write_text("")
    with pytest.raises(ConfigError) as info:
        load_tools(f"{tmp_path / 'absent.py'}:ALL")
    assert "does not exist" in str(info.value)
    assert "present.py" in str(info.value)

    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_dependency_xyz\n")
    with pytest.raises(ConfigError, match=r"importing .*broken.py.*ModuleNotFoundError.*no_such_dependency_xyz"):
        load_tools(f"{broken}:ALL")

    empty = tmp_path / "empty_tools.py"
    empty.write_text("X = 1\n")
    with pytest.raises(ToolDefinitionError, match="defines no tools"):
        load_tools(f"{empty}:ALL")

    bad = tmp_path / "bad_tools.py"
    bad.write_text("class Opaque: pass\n\ndef public(x: Opaque):\n    'Has a docstring.'\n")
    with pytest.raises(ToolDefinitionError, match=r"parameter 'x'.*make helper functions private \(_public\)"):
        load_tools(f"{bad}:ALL")


def test_load_tools_duplicate_names(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "dupes.py"
    path.write_text(
        "from codeact.tools import tool\n\n"
        "@tool(name='same')\ndef a():\n    'A.'\n\n"
        "@tool(name='same')\ndef b():\n    'B.'\n"
    )
    with pytest.raises(ToolDefinitionError, match="two tools are named 'same'"):
        load_tools(f"{path}:ALL")


# --------------------------------------------------------------------------- import cost


def test_import_is_light() -> None:
    code = (
        "import sys, codeact.tools\n"
        "heavy = [m for m in ('openai', 'docker', 'jupyter_client', 'zmq', 'mcp') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_signature_keeps_annotations() -> None:
    sig = get_daily_weather.signature
    assert isinstance(sig, inspect.Signature)
    assert sig.parameters["city"].annotation is str
    assert sig.parameters["days"].default == 3
    assert sig.return_annotation is str


def test_host_function_through_the_sandbox_dispatcher() -> None:
    # The host side of a sandbox call, without a kernel: tool errors reach the
    # sandbox as exceptions of the same type name and message.
    from sandbox.functions import FunctionDispatcher

    hf = get_daily_weather.host_function(lambda a, k: get_daily_weather.call(get_daily_weather.bind(a, k)))
    dispatcher = FunctionDispatcher([hf])
    try:
        ok = dispatcher.call("get_daily_weather", ["Oslo"], {"days": "2"})
        assert ok.error is None and ok.result == "Oslo: sunny for 2 days (C)"
        bad = dispatcher.call("get_daily_weather", [], {"cty": "Oslo"})
        assert bad.error is not None and bad.error.type == "ToolArgumentError"
        assert "did you mean 'city'?" in bad.error.message
    finally:
        dispatcher.close()


def test_methods_callable_objects_and_partials() -> None:
    class Service:
        def search(self, query: str, k: int = 2) -> list[str]:
            """Search the index.

            Args:
                query: what to look for
            """
            return [query] * k

        async def __call__(self, x: int) -> int:
            """Async callable object."""
            return x + 1

    service = Service()
    search = tool(service.search)
    assert list(search.parameters["properties"]) == ["query", "k"]
    assert search.call({"query": "q"}) == ["q", "q"]

    call_me = tool(name="call_me")(service)
    assert call_me.is_async is True
    assert call_me.call({"x": "1"}) == 2

    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    add5 = tool(name="add5")(functools.partial(add, b=5))
    assert add5.call({"a": 1}) == 6
    assert add5.description == "Add."  # the wrapped function's docstring, not functools.partial's
    assert add5.parameters["properties"]["b"]["default"] == 5
