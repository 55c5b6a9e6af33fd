"""Typed final answers: OutputSpec from Python types and JSON Schemas."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Literal

from typing_extensions import TypedDict  # pydantic needs it before Python 3.12

import pydantic
import pytest

from codeact.errors import ConfigError
from codeact.output import OutputSpec, OutputValidationError


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(description="full name")
    age: int


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Movie(TypedDict):
    title: str
    year: int


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


def test_basemodel_validates_and_prompt_has_stub() -> None:
    spec = OutputSpec(Person)
    value = spec.validate({"name": "Ada", "age": 36})
    assert isinstance(value, Person) and value.age == 36
    text = spec.prompt_text()
    assert "class Person:" in text and "name: str  # full name" in text and "age: int" in text
    assert "final_answer()" in text
    with pytest.raises(OutputValidationError) as info:
        spec.validate({"name": "Ada", "age": "old"})
    assert "age:" in str(info.value)
    assert spec.json_schema()["properties"]["age"]["type"] == "integer"


def test_nested_path_and_other_types() -> None:
    with pytest.raises(OutputValidationError) as info:
        OutputSpec(list[Person]).validate([{"name": "a", "age": 1}, {"name": "b"}])
    assert "1.age: Field required" in str(info.value)
    assert OutputSpec(Point).validate({"x": 1, "y": 2}) == Point(1, 2)
    assert "class Point:" in OutputSpec(Point).prompt_text()
    assert "class Movie:" in OutputSpec(Movie).prompt_text()
    assert OutputSpec(list[int]).validate([1, 2]) == [1, 2]
    assert "list[int]" in OutputSpec(list[int]).prompt_text()
    assert OutputSpec(Literal["a", "b"]).validate("a") == "a"
    assert OutputSpec(Color).validate("red") is Color.RED
    with pytest.raises(OutputValidationError):
        OutputSpec(Color).validate("green")


def test_json_schema_spec() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    spec = OutputSpec.of(schema)
    assert spec.validate({"n": 3}) == {"n": 3}
    assert spec.json_schema() == schema
    assert '"required"' in spec.prompt_text()
    with pytest.raises(OutputValidationError) as info:
        spec.validate({"n": "x"})
    assert str(info.value).startswith("n: ")
    assert OutputSpec.of(spec) is spec


def test_unusable_types_and_schemas_raise_config_error() -> None:
    class Opaque:
        pass

    for bad in (Callable[[int], int], Opaque):
        with pytest.raises(ConfigError, match="cannot be used as an answer type"):
            OutputSpec(bad)
    with pytest.raises(ConfigError, match="invalid output JSON Schema"):
        OutputSpec.from_json_schema({"type": "nope"})
