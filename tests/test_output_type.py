"""Typed final answers: OutputSpec from Python types and JSON Schemas."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any, Literal

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


def _code(src: str) -> str:
    return f"```python\n{src}\n```"


def _local_agent(tmp_path: object, replies: list[str], **kw: object) -> object:
    from pathlib import Path

    from codeact.agent import CodeActAgent
    from codeact.models import ScriptedModel

    model = ScriptedModel(replies)
    return CodeActAgent(model, sandbox="local", log=False, output_dir=Path(str(tmp_path)) / "out", **kw), model


@pytest.mark.parametrize(("output_type", "bad", "good", "path", "expected"), [
    (Person, '{"name": "Ada", "age": "old"}', '{"name": "Ada", "age": 36}', "age", Person(name="Ada", age=36)),
    (Point, '{"x": 1}', '{"x": 1, "y": 2}', "y", Point(1, 2)),
    (list[int], '[1, "b"]', "[1, 2]", "1", [1, 2]),
])
def test_local_answer_fits_after_one_retry(tmp_path: object, output_type: object, bad: str, good: str, path: str,
                                           expected: object) -> None:
    agent, model = _local_agent(tmp_path, [_code(f"final_answer({bad})"), _code(f"final_answer({good})")])
    with agent.session() as chat:  # type: ignore[attr-defined]
        result = chat.send("give it", output_type=output_type)
        retry = [m.content for m in chat.messages if "does not fit the expected type" in str(m.content)]
    assert result.status == "success" and result.answer == expected
    assert len(result.steps) == 2 and len(retry) == 1 and f"{path}:" in retry[0]
    assert "final_answer()" in str(chat.messages[1].content)


def test_local_never_fits_ends_invalid_output(tmp_path: object) -> None:
    replies = [_code("final_answer({'age': 'x'})")] * 3
    agent, _ = _local_agent(tmp_path, replies, output_retries=2)
    with agent.session() as chat:  # type: ignore[attr-defined]
        result = chat.send("give it", output_type=Person)
    assert result.status == "invalid_output" and result.answer == {"age": "x"}
    assert "name" in result.error and len(result.steps) == 3


def test_unsupported_type_raises_before_sandbox(tmp_path: object) -> None:
    agent, model = _local_agent(tmp_path, [])
    with agent.session() as chat, pytest.raises(ConfigError):  # type: ignore[attr-defined]
        chat.send("x", output_type=Callable[[int], int])


def test_agent_run_and_arun_validate(tmp_path: object) -> None:
    import asyncio

    agent, _ = _local_agent(tmp_path, [_code("final_answer([1, 'b'])"), _code("final_answer([1, 2])")])
    result = agent.run("numbers", output_type=list[int])  # type: ignore[attr-defined]
    assert result.status == "success" and result.answer == [1, 2] and len(result.steps) == 2
    agent, _ = _local_agent(tmp_path, [_code("final_answer({'x': 1, 'y': 2})")])
    result = asyncio.run(agent.arun("point", output_type=Point))  # type: ignore[attr-defined]
    assert result.answer == Point(1, 2)
    with pytest.raises(ConfigError):
        agent.run("x", output_type=Callable[[int], int])  # type: ignore[attr-defined]


def test_docker_openai_answer_fits_after_one_retry(tmp_path: object, openai_server: object) -> None:
    from pathlib import Path

    from codeact.agent import CodeActAgent
    from codeact.models import OpenAIModel

    server: Any = openai_server
    server.plan_text(_code("final_answer({'name': 'Ada'})"))
    server.plan_text(_code("final_answer({'name': 'Ada', 'age': 36})"))
    model = OpenAIModel("test-model", base_url=server.base_url, api_key="test-key", max_retries=2, timeout=20)
    agent = CodeActAgent(model, sandbox="docker", log=False, output_dir=Path(str(tmp_path)) / "out")
    result = agent.run("who?", output_type=Person)
    assert result.status == "success" and result.answer == Person(name="Ada", age=36)
    requests = server.chat_requests
    assert len(requests) == 2 and "class Person:" in requests[0].messages[1]["content"]
    last = requests[1].messages[-1]["content"]
    assert "does not fit the expected type: age: Field required" in last


def test_react_says_output_type_is_not_supported_yet() -> None:
    from codeact.models import ScriptedModel
    from codeact.react import ReActAgent

    agent = ReActAgent(ScriptedModel(["never asked"]), tools=[], log=False)
    with pytest.raises(ConfigError, match="CodeActAgent only"):
        agent.run("x", output_type=list[int])
