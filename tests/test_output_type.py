"""Typed answers (codeact.output): ``output_type=`` on runs and chat turns, CodeAct and ReAct, the CLI's
``--output-schema`` and ``mcp serve``'s ``run_task(output_schema=...)``.

Only the model's text is scripted (a :class:`ScriptedModel` or replies planned on the OpenAI-compatible test
server, reached with the real ``openai`` client); the sandboxes, the validation and the CLI are real.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import subprocess
import sys
from pathlib import Path
from textwrap import dedent
from typing import Any, Callable, Literal

from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

import pytest
from click.testing import CliRunner
from pydantic import BaseModel, Field

from codeact import CodeActAgent, OpenAIModel, ReActAgent, ScriptedModel
from codeact.cli import cli
from codeact.errors import ConfigError, OutputTypeError, OutputValidationError
from codeact.events import ErrorEvent, FinalAnswer, Observation
from codeact.output import AnswerCheck, OutputSpec
from tests.openai_server import OpenAITestServer
from tests.openai_server import ToolCall as PlannedCall

pytestmark = pytest.mark.timeout(180)
REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- the types


class Item(BaseModel):
    name: str
    price: float = Field(description="in euros")


class Report(BaseModel):
    """Sales by item."""

    items: list[Item]
    total: float


@dataclasses.dataclass
class Weather:
    city: str
    temp_c: float
    rain: bool = False


class Sky(enum.Enum):
    SUNNY = "sunny"
    RAIN = "rain"


class Forecast(TypedDict):
    day: str
    sky: Sky


def py(code: str) -> str:
    return f"Here goes.\n```python\n{dedent(code).strip()}\n```"


def agent_for(tmp_path: Path, model: Any, backend: str, **options: Any) -> CodeActAgent:
    return CodeActAgent(model, sandbox=backend, log=tmp_path / "runs.db", output_dir=tmp_path / "out", **options)


def openai_model(server: OpenAITestServer) -> OpenAIModel:
    return OpenAIModel("test-model", base_url=server.base_url, api_key="k", timeout=10, max_retries=0)


def last_user_text(messages: list[Any]) -> str:
    return next(m.content for m in reversed(messages) if m.role in ("user", "tool"))


class Tripwire:
    """A sandbox that fails the test when anything touches it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the sandbox was touched ({name}) before the bad output type was reported")


# --------------------------------------------------------------------------- the spec on its own


def test_the_prompt_shows_the_classes_as_stubs_and_problems_name_field_paths() -> None:
    spec = OutputSpec.of(Report)
    assert spec is not None and spec.name == "Report"
    text = spec.prompt_text(constructors=True)
    assert "class Report:\n    \"\"\"Sales by item.\"\"\"\n    items: list[Item]\n    total: float" in text
    assert "class Item:\n    name: str\n    price: float  # in euros" in text
    assert "final_answer(value)" in text and "defined in your session" in text
    assert "defined in your session" not in spec.prompt_text(constructors=False)

    value, problems = spec.check({"items": [{"name": "tea", "price": "cheap"}]})
    assert [str(p) for p in problems] == [
        "items[0].price: Input should be a valid number, unable to parse string as a number (got 'cheap')",
        "total: Field required"]
    value, problems = spec.check({"items": [{"name": "tea", "price": "2.5"}], "total": 2})  # lax mode
    assert problems == [] and value == Report(items=[Item(name="tea", price=2.5)], total=2.0)

    # an Enum inside a TypedDict: the model passes the value, the host builds the member
    forecast = OutputSpec.of(list[Forecast])
    assert forecast is not None
    assert "sky: Literal['sunny', 'rain']" in forecast.prompt_text()
    assert forecast.check([{"day": "mon", "sky": "rain"}]) == ([{"day": "mon", "sky": Sky.RAIN}], [])
    literal = OutputSpec.of(Literal["yes", "no"])
    assert literal is not None and literal.check("maybe")[1][0].path == ""


class Person(BaseModel):
    name: str = Field(description="full name")
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


def test_validate_returns_the_type_or_raises_with_the_problems() -> None:
    spec = OutputSpec(Person)
    value = spec.validate({"name": "Ada", "age": "36"})
    assert isinstance(value, Person) and value.age == 36
    with pytest.raises(OutputValidationError) as info:
        spec.validate({"name": "Ada", "age": "old"})
    assert info.value.errors == ["age: Input should be a valid integer, unable to parse string as an integer "
                                 "(got 'old')"]
    assert [p.path for p in info.value.problems] == ["age"]
    assert spec.json_schema()["properties"]["age"]["type"] == "integer"
    with pytest.raises(OutputValidationError, match=r"\[1\]\.age: Field required"):
        OutputSpec(list[Person]).validate([{"name": "a", "age": 1}, {"name": "b"}])
    assert OutputSpec(Point).validate({"x": 1, "y": 2}) == Point(1, 2)
    assert "class Point:\n    x: int\n    y: int" in OutputSpec(Point).prompt_text()
    assert "class Movie:\n    title: str\n    year: int" in OutputSpec(Movie).prompt_text()
    assert "`list[int]`" in OutputSpec(list[int]).prompt_text()
    assert OutputSpec(Literal["a", "b"]).validate("a") == "a"
    assert OutputSpec(Color).validate("red") is Color.RED
    with pytest.raises(OutputValidationError):
        OutputSpec(Color).validate("green")


def test_a_json_schema_dict_is_an_output_type() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    spec = OutputSpec.of(schema)
    assert spec is not None and spec.validate({"n": 3}) == {"n": 3}
    assert spec.json_schema() == schema and spec.kernel_source() == ""
    assert '"required": ["n"]' in spec.prompt_text()
    with pytest.raises(OutputValidationError, match="^n: 'x' is not of type 'integer'$"):
        spec.validate({"n": "x"})
    assert OutputSpec.of(spec) is spec and OutputSpec.of(None) is None


def test_answer_check_counts_retries_and_keeps_the_last_value() -> None:
    check = AnswerCheck(OutputSpec.of(list[int]), retries=1)
    first = check.check_text("one, two")
    assert not first.ok and "1 more try" in first.feedback and not check.exhausted
    assert check.check_text("[1, 2]").value == [1, 2]  # a reply that is JSON counts
    second = check.check(["x"])
    assert not second.ok and check.exhausted and check.last == ["x"]
    assert check.error is not None and "[0]: Input should be a valid integer" in check.error
    assert AnswerCheck(None).check(object).ok
    with pytest.raises(OutputTypeError, match="output_retries must be 0 or more"):
        AnswerCheck(None, retries=-1)


class Opaque:
    """A plain class: no fields pydantic can read."""

    def __init__(self, secret: Any) -> None:
        self.secret = secret


@pytest.mark.parametrize("bad", [Opaque, Callable[[int], int], {"type": "nope"}])
def test_a_type_that_cannot_describe_an_answer_fails_before_the_sandbox(tmp_path: Path, bad: Any) -> None:
    model = ScriptedModel([])
    agent = CodeActAgent(model, sandbox=Tripwire(), log=False)  # type: ignore[arg-type]
    with pytest.raises(OutputTypeError) as info:
        agent.run("anything", output_type=bad)
    assert isinstance(info.value, ConfigError)
    assert "cannot be used as an answer type" in str(info.value) or "not a valid JSON Schema" in str(info.value)
    with pytest.raises(OutputTypeError):
        agent.stream("anything", output_type=bad)  # at the call, not at the first event
    react = ReActAgent(model, log=False)
    with pytest.raises(OutputTypeError):
        react.run("anything", output_type=bad)
    assert model.requests == []


def test_a_schema_that_is_not_a_json_schema_is_an_error() -> None:
    with pytest.raises(OutputTypeError, match="not a valid JSON Schema: 'strin' is not valid"):
        OutputSpec.from_json_schema({"type": "object", "properties": {"a": {"type": "strin"}}})
    with pytest.raises(OutputTypeError, match="must be a JSON object"):
        OutputSpec.from_json_schema(["not", "a", "schema"])
    spec = OutputSpec.from_json_schema({"title": "Pair", "type": "array", "items": {"type": "integer"},
                                        "minItems": 2})
    assert spec.name == "Pair"
    assert spec.check((1, 2)) == ([1, 2], [])  # a tuple is JSON's array
    _, problems = spec.check([1, "b"])
    assert [str(p) for p in problems] == ["[1]: 'b' is not of type 'integer'"]


# --------------------------------------------------------------------------- CodeAct, one retry each


CASES = {
    # type, a wrong final_answer, the field path the model is told about, a right one, the answer expected
    "pydantic": (Report, "final_answer({'items': [{'name': 'tea', 'price': 'cheap'}], 'total': 2.5})",
                 "items[0].price", "final_answer(Report(items=[Item('tea', 2.5)], total=2.5))",
                 Report(items=[Item(name="tea", price=2.5)], total=2.5)),
    "dataclass": (Weather, "final_answer({'city': 'Oslo'})", "temp_c: Field required",
                  "final_answer(Weather(city='Oslo', temp_c=-3))", Weather("Oslo", -3.0)),
    "list[int]": (list[int], "final_answer([1, 'two', 3])", "[1]: Input should be a valid integer",
                  "final_answer([1, 2, 3])", [1, 2, 3]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_codeact_answer_is_retried_once_then_typed_local(tmp_path: Path, case: str) -> None:
    output_type, wrong, path, right, expected = CASES[case]
    model = ScriptedModel([py(wrong), py(right)])
    events = list(agent_for(tmp_path, model, "local").stream("Report it", output_type=output_type))
    result = events[-1].result  # type: ignore[attr-defined]
    assert result.status == "success", result.error
    assert result.answer == expected and type(result.answer) is type(expected)
    told = last_user_text(model.requests[1])
    assert told.startswith("Observation:") and path in told and "2 more tries" in told
    first_observation = next(e for e in events if isinstance(e, Observation))
    assert path in first_observation.text  # the event says what the model saw
    assert result.steps[0].error is not None and path in result.steps[0].error
    final = next(e for e in events if isinstance(e, FinalAnswer))
    assert final.answer == expected and final.status == "success"
    # the task carried the type; the classes were defined in the kernel (the right answer used them)
    task = model.requests[0][1].content
    assert task.startswith("Report it\n\nThe answer must be of type ")


def test_codeact_restricted_backend_offers_dicts_and_reads_a_text_answer(tmp_path: Path) -> None:
    model = ScriptedModel(["The answer is sunny.", py("final_answer({'day': 'mon', 'sky': 'sunny'})")])
    result = agent_for(tmp_path, model, "restricted").run("Sky on Monday?", output_type=Forecast)
    assert result.status == "success" and result.answer == {"day": "mon", "sky": Sky.SUNNY}
    task = model.requests[0][1].content
    assert "Pass plain data: dicts with these keys" in task and "defined in your session" not in task
    told = model.requests[1][-1].content
    assert "no code or action, so its text was taken as the final answer" in told
    assert "(the answer): Input should be a valid dictionary" in told


def test_codeact_never_right_ends_invalid_output_with_the_last_value(tmp_path: Path) -> None:
    model = ScriptedModel([py("final_answer({'city': 'Oslo'})"), "It is cold in Oslo.",
                           py("final_answer({'city': 'Oslo', 'temp_c': 'freezing'})"), py("final_answer(1)")])
    events = list(agent_for(tmp_path, model, "restricted", output_retries=5).stream(
        "Weather?", output_type=Weather, output_retries=2))  # the run's option wins over the agent's
    result = events[-1].result  # type: ignore[attr-defined]
    assert result.status == "invalid_output" and not result.ok
    assert result.answer == {"city": "Oslo", "temp_c": "freezing"}  # the last value, as the model gave it
    assert len(result.steps) == 3 and len(model.requests) == 3
    assert "after 3 tries" in result.error and "temp_c: Input should be a valid number" in result.error
    fatal = [e for e in events if isinstance(e, ErrorEvent) and e.fatal]
    assert [(e.kind, e.message) for e in fatal] == [("output", result.error)]
    assert not any(isinstance(e, FinalAnswer) for e in events)
    from codeact import RunLog

    with RunLog(tmp_path / "runs.db") as log:
        stored = log.get_run(result.run_id)
    assert stored.status == "invalid_output" and stored.error == result.error


def test_a_chat_turn_takes_its_own_type_and_the_next_turn_none(tmp_path: Path) -> None:
    model = ScriptedModel([py("x = 41\nfinal_answer(x + 1)"), "Done, x is 41.", py("final_answer(str(x))")])
    with agent_for(tmp_path, model, "local").session() as chat:
        typed = chat.send("Compute it", output_type=int)
        plain = chat.send("Say something")
        text = chat.send("x as text?", output_type=str)
    assert (typed.status, typed.answer) == ("success", 42)
    assert (plain.status, plain.answer) == ("success", "Done, x is 41.")
    assert (text.status, text.answer) == ("success", "41")
    assert "The answer must be of type `int`" in model.requests[0][1].content
    assert "The answer must be" not in model.requests[1][-1].content


def test_arun_takes_output_type(tmp_path: Path) -> None:
    import asyncio

    model = ScriptedModel([py("final_answer(['3', 4])")])
    result = asyncio.run(agent_for(tmp_path, model, "restricted").arun("Numbers?", output_type=list[int]))
    assert result.status == "success" and result.answer == [3, 4]


# --------------------------------------------------------------------------- docker, the real openai client


@pytest.mark.docker
def test_docker_chat_with_the_openai_client_pydantic_dataclass_and_list(tmp_path: Path,
                                                                        openai_server: OpenAITestServer) -> None:
    for case in CASES.values():
        openai_server.plan_text(py(case[1]))
        openai_server.plan_text(py(case[3]))
    agent = agent_for(tmp_path, openai_model(openai_server), "docker")
    with agent.session() as chat:
        results = [chat.send(f"Turn {name}", output_type=case[0]) for name, case in CASES.items()]
    for result, (name, case) in zip(results, CASES.items(), strict=True):
        assert result.status == "success", (name, result.error)
        assert result.answer == case[4] and type(result.answer) is type(case[4]), name
    requests = openai_server.chat_requests
    assert len(requests) == 6
    for n, case in enumerate(CASES.values()):
        retry = requests[2 * n + 1].messages[-1]
        assert retry["role"] == "user" and case[2] in retry["content"], retry
    first_task = requests[0].messages[1]["content"]
    assert "class Report:" in first_task and "defined in your session" in first_task


# --------------------------------------------------------------------------- ReAct


def test_react_function_calling_final_answer_takes_the_types_schema(tmp_path: Path,
                                                                   openai_server: OpenAITestServer) -> None:
    openai_server.plan_tool_calls([PlannedCall("final_answer", {"answer": {"items": [{"name": "tea"}],
                                                                           "total": 2}}, id="c1")])
    openai_server.plan_tool_calls([PlannedCall("final_answer", {"answer": {"items": [{"name": "tea", "price": 2}],
                                                                           "total": 2}}, id="c2")])
    agent = ReActAgent(openai_model(openai_server), log=tmp_path / "runs.db")
    result = agent.run("Sales?", output_type=Report)
    assert result.status == "success", result.error
    assert result.answer == Report(items=[Item(name="tea", price=2)], total=2)
    first, second = openai_server.chat_requests
    (final,) = [t for t in first.body["tools"] if t["function"]["name"] == "final_answer"]
    answer_schema = final["function"]["parameters"]["properties"]["answer"]
    assert answer_schema == OutputSpec(Report).json_schema()
    assert answer_schema["properties"]["items"]["items"]["properties"]["price"] == {"description": "in euros",
                                                                                     "type": "number"}
    tool_reply = [m for m in second.messages if m["role"] == "tool"][-1]
    assert tool_reply["tool_call_id"] == "c1" and "items[0].price: Field required" in tool_reply["content"]
    # without output_type the final answer takes anything, as before
    openai_server.plan_text("plain words")
    assert agent.run("Anything?").answer == "plain words"
    (final,) = [t for t in openai_server.chat_requests[-1].body["tools"] if t["function"]["name"] == "final_answer"]
    assert "type" not in final["function"]["parameters"]["properties"]["answer"]


def test_react_prompted_json_format_shows_the_schema_and_ends_invalid_output(tmp_path: Path) -> None:
    action = 'Action: {"name": "final_answer", "arguments": {"answer": {"city": "Oslo", "temp_c": "cold"}}}'
    model = ScriptedModel([action, "Final Answer: cold", action])
    agent = ReActAgent(model, format="json", log=False)
    result = agent.run("Weather?", output_type=Weather, output_retries=2)
    task = model.requests[0][1].content
    assert '"temp_c": {"type": "number"}' in task and "final_answer(answer=...)" in task
    assert "temp_c: Input should be a valid number" in model.requests[1][-1].content
    assert "no code or action" in model.requests[2][-1].content
    assert result.status == "invalid_output" and result.answer == {"city": "Oslo", "temp_c": "cold"}


# --------------------------------------------------------------------------- the CLI


SCHEMA = {"type": "object", "required": ["region", "growth"], "additionalProperties": False,
          "properties": {"region": {"type": "string"}, "growth": {"type": "number"}}}


def cli_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replies: list[str], *extra: str) -> Any:
    replies_file = tmp_path / "replies.json"
    replies_file.write_text(json.dumps(replies))
    monkeypatch.setenv("CODEACT_SCRIPTED_REPLIES", str(replies_file))
    monkeypatch.setenv("CODEACT_DB", str(tmp_path / "runs.db"))
    monkeypatch.setenv("CODEACT_OUTPUT_DIR", str(tmp_path / "out"))
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    return CliRunner().invoke(cli, ["run", "Fastest region?", "--backend", "restricted", "--json",
                                    "--output-schema", str(schema), *extra])


def test_cli_output_schema_json_prints_the_validated_object(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = cli_run(tmp_path, monkeypatch, [py("final_answer({'region': 'West'})"),
                                             py("final_answer({'region': 'West', 'growth': 12})")])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["status"] == "success" and data["ok"] is True
    assert data["answer"] == {"region": "West", "growth": 12}


def test_cli_output_schema_exits_1_without_a_valid_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = cli_run(tmp_path, monkeypatch, [py("final_answer({'region': 'West', 'growth': 'fast'})")] * 3)
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["status"] == "invalid_output" and data["ok"] is False
    assert data["answer"] == {"region": "West", "growth": "fast"}
    assert "growth: 'fast' is not of type 'number'" in data["error"]
    assert "growth: 'fast' is not of type 'number'" in result.stderr  # the fatal error, one line on stderr


@pytest.mark.parametrize("content, needle", [
    ("{not json", "not valid JSON"),
    (json.dumps({"type": "object", "properties": {"a": {"type": 5}}}), "not a valid JSON Schema"),
])
def test_cli_bad_schema_file_errors_before_any_sandbox(tmp_path: Path, content: str, needle: str) -> None:
    schema = tmp_path / "bad.json"
    schema.write_text(content)
    # Docker at an address where nothing answers: had the CLI looked for a sandbox first, it would say so.
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock", "CODEACT_DB": str(tmp_path / "r.db"),
           "CODEACT_SCRIPTED_REPLIES": "", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "codeact.cli", "run", "hi", "--backend", "docker", "--model", "m",
               "--base-url", "http://127.0.0.1:9/v1", "--api-key", "x"]
    without = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert without.returncode == 1 and "Docker sandbox is not ready" in without.stderr  # the probe: no engine
    proc = subprocess.run([*command, "--output-schema", str(schema)], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and needle in errors[0] and str(schema) in errors[0], proc.stderr
    assert "Docker" not in proc.stderr and "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- typing


def test_run_result_is_typed_by_output_type_for_mypy(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    snippet = tmp_path / "typed_answers.py"
    snippet.write_text(dedent('''
        from dataclasses import dataclass
        from typing import Any, Literal

        from pydantic import BaseModel
        from typing_extensions import assert_type

        from codeact import CodeActAgent, ReActAgent, RunResult


        class Report(BaseModel):
            region: str


        @dataclass
        class Point:
            x: int


        async def check(agent: CodeActAgent, react: ReActAgent) -> None:
            assert_type(agent.run("t", output_type=Report).answer, Report)
            assert_type(agent.run("t", output_type=Point), RunResult[Point])
            assert_type(agent.run("t", output_type=list[int]).answer, list[int])
            assert_type(agent.run("t").answer, Any)
            assert_type((await agent.arun("t", output_type=Report)).answer, Report)
            with agent.session() as chat:
                assert_type(chat.send("t", output_type=Report).answer, Report)
            assert_type(react.run("t", output_type=Report).answer, Report)
            with react.session() as rchat:
                assert_type(rchat.send("t", output_type=Point).answer, Point)
            agent.run("t", output_type=Literal["a", "b"])
            plain: RunResult = agent.run("t")
            plain.answer.anything
        '''))
    wrong = tmp_path / "typed_wrong.py"
    wrong.write_text(snippet.read_text().replace("assert_type(agent.run(\"t\", output_type=Report).answer, Report)",
                                                 "assert_type(agent.run(\"t\", output_type=Report).answer, Point)"))
    command = [sys.executable, "-m", "mypy", "--cache-dir", str(REPO / ".mypy_cache"), "--no-error-summary"]
    ok = subprocess.run([*command, str(snippet)], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = subprocess.run([*command, str(wrong)], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert bad.returncode == 1 and 'Expression is of type "Report", not "Point"' in bad.stdout, bad.stdout


# --------------------------------------------------------------------------- mcp serve


@pytest.mark.docker
def test_mcp_serve_run_task_validates_against_output_schema(tmp_path: Path) -> None:
    """`codeact mcp serve` (a process of its own, the SDK's client over stdio) with a real model endpoint."""
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from tests.mcp_servers.helpers import CODEACT

    with OpenAITestServer() as model:
        model.plan_text(py("final_answer({'region': 'West', 'growth': 'fast'})"))
        model.plan_text(py("final_answer({'region': 'West', 'growth': 12.5})"))
        params = StdioServerParameters(
            command=CODEACT, args=["mcp", "serve", "--model", "test-model", "--base-url", model.base_url,
                                   "--api-key", "x", "--no-log"],
            env={**os.environ, "CODEACT_OUTPUT_DIR": str(tmp_path / "out"), "PYTHONPATH": str(REPO)})

        async def main() -> None:
            with (tmp_path / "serve.stderr").open("w") as errlog:
                async with Client(stdio_client(params, errlog=errlog)) as client:
                    done = await client.call_tool("run_task", {"task": "Fastest region?", "output_schema": SCHEMA})
                    summary = done.structured_content
                    assert not done.is_error and summary["status"] == "success", done.content
                    assert summary["answer"] == {"region": "West", "growth": 12.5} and summary["steps"] == 2
                    bad = await client.call_tool("run_task", {"task": "x", "output_schema": {"type": "nope"}})
                    assert bad.is_error and "output_schema: the output schema is not a valid JSON Schema" in \
                        bad.content[0].text

        anyio.run(main)
        first, retry = model.chat_requests
        assert '"growth": {"type": "number"}' in first.messages[1]["content"]
        assert "growth: 'fast' is not of type 'number'" in retry.messages[-1]["content"]
