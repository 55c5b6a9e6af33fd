"""ReAct agents (codeact.react): three action formats over the same tools, events and run log as CodeAct.

Models are a :class:`ScriptedModel` (only the text is scripted) or the real
:class:`OpenAIModel` talking HTTP to the local test server; tools are real
``@tool`` functions run on the host.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import nbformat
import pytest

from codeact import ReActAgent, RunContext, RunLog, ScriptedModel, tool
from codeact.agent import ApprovalRequest
from codeact.errors import CodeActError, ConfigError
from codeact.events import (
    ErrorEvent,
    Event,
    FinalAnswer,
    ModelOutput,
    Observation,
    RunFinished,
    RunResult,
    RunStarted,
    TextDelta,
    ToolCall,
)
from codeact.export import export_notebook
from codeact.messages import Message
from codeact.models import OpenAIModel
from codeact.prompts import PROMPT_NAMES, Prompt, load_prompt, parse_prompt
from codeact.react import AGENT_KINDS, format_name
from tests.openai_server import OpenAITestServer, Reply
from tests.openai_server import ToolCall as PlannedCall

pytestmark = pytest.mark.timeout(60)

WEATHER = {"Paris": {"high": 17, "sky": "sunny"}, "Oslo": {"high": 6, "sky": "snow"}}


@tool
def get_weather(city: str) -> dict:
    """Tomorrow's forecast for a city.

    Args:
        city: the city, e.g. Paris
    """
    if city not in WEATHER:
        raise KeyError(f"no forecast for {city!r}")
    return WEATHER[city]


@tool
def add_all(*values: float) -> float:
    """The sum of the numbers given."""
    return sum(values)


@tool
def city_facts(city: str) -> tuple[str, int]:
    """(country, population) of a city."""
    return {"Oslo": ("Norway", 709_000), "Paris": ("France", 2_102_000)}[city]


@tool
def explode(x: int) -> int:
    """Always fails."""
    raise RuntimeError(f"boom at {x}")


TOOLS = [get_weather, add_all, city_facts, explode]


def make(model: Any, fmt: str, tmp_path: Path, tools: Any = TOOLS, **options: Any) -> ReActAgent:
    return ReActAgent(model, tools, format=fmt, log=tmp_path / "runs.db", **options)


def collect(agent: ReActAgent, task: str, **kw: Any) -> tuple[list[Event], RunResult]:
    events = list(agent.stream(task, **kw))
    assert isinstance(events[-1], RunFinished)
    return events, events[-1].result


def of(events: list[Event], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def stored(tmp_path: Path, run_id: str):
    with RunLog(tmp_path / "runs.db") as log:
        return log.get_run(run_id)


def json_action(name: str, **arguments: Any) -> str:
    return "Thought: next.\nAction: " + json.dumps({"name": name, "arguments": arguments})


# --------------------------------------------------------------------------- function calling, real client


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
def test_function_calling_parallel_calls_through_the_real_client(openai_server: OpenAITestServer, tmp_path: Path,
                                                                 stream: bool) -> None:
    openai_server.plan(
        Reply(text="Checking both.", tool_calls=(PlannedCall("get_weather", {"city": "Paris"}, "call_p"),
                                                 PlannedCall("get_weather", {"city": "Oslo"}, "call_o")),
              interleave_tool_calls=True, fragment_size=4),
        Reply(tool_calls=(PlannedCall("final_answer", {"answer": "Paris"}, "call_f"),)),
    )
    model = OpenAIModel("test-model", base_url=openai_server.base_url, api_key="k", timeout=10, max_retries=0)
    agent = make(model, "function-calling", tmp_path, stream_model=stream)
    events, result = collect(agent, "Where is it warmer tomorrow, Paris or Oslo?")

    assert result.status == "success" and result.answer == "Paris" and len(result.steps) == 2
    calls = of(events, ToolCall)
    assert [(c.name, c.arguments, c.result) for c in calls] == [
        ("get_weather", {"city": "Paris"}, {"high": 17, "sky": "sunny"}),
        ("get_weather", {"city": "Oslo"}, {"high": 6, "sky": "snow"}),
    ]
    first_output = of(events, ModelOutput)[0]
    assert [c["id"] for c in first_output.tool_calls] == ["call_p", "call_o"]
    if stream:
        assert "".join(e.text for e in of(events, TextDelta) if e.step == 1) == "Checking both."

    # The second request carries the assistant's calls and one tool message per call id.
    first, second = openai_server.chat_requests
    assert {t["function"]["name"] for t in first.body["tools"]} == {"get_weather", "add_all", "city_facts", "explode",
                                                                     "final_answer"}
    assistant, *tool_messages = [m for m in second.messages if m["role"] in ("assistant", "tool")]
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_p", "call_o"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [
        ("call_p", "{'high': 17, 'sky': 'sunny'}"), ("call_o", "{'high': 6, 'sky': 'snow'}")]

    run = stored(tmp_path, result.run_id)
    assert (run.agent, run.prompt, run.prompt_version, run.backend) == ("react-fc", "react-fc", "1", "host")
    assert [c.name for c in run.steps[0].tool_calls] == ["get_weather", "get_weather"]
    assert run.answer == "Paris" and run.usage.requests == 2


def test_function_calling_bad_arguments_and_unknown_function(openai_server: OpenAITestServer, tmp_path: Path) -> None:
    openai_server.plan(
        Reply(tool_calls=(PlannedCall("get_weather", '{"city": "Paris"', "c1"),  # cut-off JSON
                          PlannedCall("get_wether", {"city": "Oslo"}, "c2"),
                          PlannedCall("get_weather", {"city": "Oslo"}, "c3"))),
        Reply(tool_calls=(PlannedCall("final_answer", {"answer": 6}, "c4"),)),
    )
    model = OpenAIModel("test-model", base_url=openai_server.base_url, api_key="k", timeout=10, max_retries=0)
    events, result = collect(make(model, "fc", tmp_path), "Oslo's high?")
    assert result.status == "success" and result.answer == 6
    invalid = [e for e in of(events, ErrorEvent) if e.kind == "action"]
    assert len(invalid) == 2
    assert "not valid JSON" in invalid[0].message and "Did you mean 'get_weather'" in invalid[1].message
    tool_messages = {m["tool_call_id"]: m["content"] for m in openai_server.chat_requests[1].messages
                     if m["role"] == "tool"}
    assert tool_messages["c1"].startswith("Error: the arguments of your call to get_weather are not valid JSON")
    assert tool_messages["c2"].startswith("Error: there is no tool named 'get_wether'")
    assert tool_messages["c3"] == "{'high': 6, 'sky': 'snow'}"  # the good call of the same turn still ran
    assert stored(tmp_path, result.run_id).invalid_actions == 2


def test_a_stalled_model_ends_the_run_with_a_model_error(openai_server: OpenAITestServer, tmp_path: Path) -> None:
    openai_server.plan_stall(5)
    model = OpenAIModel("test-model", base_url=openai_server.base_url, api_key="k", timeout=0.5, max_retries=0)
    events, result = collect(make(model, "json", tmp_path), "anything")
    assert result.status == "error" and "timed out" in result.error
    (error,) = of(events, ErrorEvent)
    assert error.kind == "model" and error.fatal


# --------------------------------------------------------------------------- prompted formats


def test_json_format_solves_a_task(tmp_path: Path) -> None:
    model = ScriptedModel([
        json_action("get_weather", city="Paris"),
        json_action("get_weather", city="Oslo"),
        json_action("final_answer", answer={"warmer": "Paris", "by": 11}),
    ])
    agent = make(model, "json", tmp_path)
    events, result = collect(agent, "Warmer tomorrow: Paris or Oslo? By how much?")
    assert result.status == "success" and result.answer == {"warmer": "Paris", "by": 11}
    assert [type(e).__name__ for e in events[:5]] == ["RunStarted", "ModelOutput", "ToolCall", "Observation",
                                                      "ModelOutput"]
    started = events[0]
    assert isinstance(started, RunStarted) and started.agent == "react-json" and started.prompt_version == "1"
    system = model.requests[0][0].content
    assert '"name": "get_weather"' in system and '"name": "final_answer"' in system and "Action:" in system
    assert model.tool_schemas[0] is None  # prompted formats send no tools parameter
    assert model.requests[1][-1] == Message("user", "Observation: {'high': 17, 'sky': 'sunny'}")
    assert of(events, FinalAnswer)[0].answer == {"warmer": "Paris", "by": 11}


def test_text_format_variadics_and_tuples(tmp_path: Path) -> None:
    model = ScriptedModel([
        "Thought: add.\nAction: add_all(1, 2, 3.5)",
        'Thought: facts.\nAction: city_facts(city="Oslo")',
        "Action: final_answer(answer=['Norway', 6.5])",
    ])
    events, result = collect(make(model, "text", tmp_path), "Sum 1, 2, 3.5; Oslo's country?")
    assert result.status == "success" and result.answer == ["Norway", 6.5]
    add, facts = of(events, ToolCall)
    assert add.arguments == {"values": [1, 2, 3.5]} and add.result == 6.5
    assert facts.result == {"$": "tuple", "v": ["Norway", 709000]}  # a preview: the tuple is kept
    assert of(events, Observation)[1].text == "('Norway', 709000)"
    system = model.requests[0][0].content
    assert "- add_all(*values: float) -> float: The sum of the numbers given." in system


def test_json_variadic_arguments_by_name(tmp_path: Path) -> None:
    model = ScriptedModel([json_action("add_all", values=[1, 2, 3]), "Final Answer: 6"])
    events, result = collect(make(model, "json", tmp_path), "1+2+3?")
    assert of(events, ToolCall)[0].result == 6 and result.answer == "6"


def test_malformed_actions_are_answered_and_counted(tmp_path: Path) -> None:
    model = ScriptedModel([
        'Action: {"name": "get_weather", "arguments": {"city": "Paris"',  # bad JSON
        json_action("get_wether", city="Paris"),  # unknown tool
        json_action("get_weather", town="Paris"),  # wrong arguments
        json_action("get_weather", city="Paris"),
        "Final Answer: sunny",
    ])
    events, result = collect(make(model, "json", tmp_path), "Paris tomorrow?")
    assert result.status == "success" and result.answer == "sunny"
    invalid = [e for e in of(events, ErrorEvent) if e.kind == "action"]
    assert len(invalid) == 3
    seen = [m.content for m in model.requests[-1] if m.role == "user"][1:]
    assert seen[0].startswith("Observation: Error: the Action is not valid JSON")
    assert "there is no tool named 'get_wether'. Did you mean 'get_weather'?" in seen[1]
    assert "get_weather" in seen[2] and "city" in seen[2] and "town" in seen[2]  # names the bad and the valid
    assert seen[3] == "Observation: {'high': 17, 'sky': 'sunny'}"
    assert stored(tmp_path, result.run_id).invalid_actions == 3


def test_text_format_rejects_variables_and_expressions(tmp_path: Path) -> None:
    model = ScriptedModel(["Action: get_weather(city=paris)", "Action: get_weather(*cities)",
                           'Action: get_weather("Oslo")', "Action: final_answer(6)"])
    events, result = collect(make(model, "text", tmp_path), "Oslo?")
    assert result.answer == 6
    first, second = [e.message for e in of(events, ErrorEvent)]
    assert "`paris` is not" in first and "literals" in first
    assert "unpacking" in second


def test_only_the_first_action_of_a_reply_runs(tmp_path: Path) -> None:
    model = ScriptedModel([json_action("get_weather", city="Paris") + "\n" + json_action("get_weather", city="Oslo"),
                           "Final Answer: done"])
    events, _ = collect(make(model, "json", tmp_path), "x")
    assert [c.arguments for c in of(events, ToolCall)] == [{"city": "Paris"}]
    assert "one action per turn" in model.requests[1][-1].content


def test_a_crashing_tool_is_an_observation_not_an_invalid_action(tmp_path: Path) -> None:
    model = ScriptedModel([json_action("explode", x=3), "Final Answer: it failed"])
    events, result = collect(make(model, "json", tmp_path), "x")
    (call,) = of(events, ToolCall)
    assert call.error == "RuntimeError: boom at 3"
    assert of(events, Observation)[0].text == "Error: RuntimeError: boom at 3"
    assert not [e for e in of(events, ErrorEvent) if e.kind == "action"]
    assert result.status == "success"


# --------------------------------------------------------------------------- behaviour shared with CodeAct


@tool(requires_approval=True)
def send_email(to: str, body: str) -> str:
    """Send an email."""
    return f"sent to {to}"


@pytest.mark.parametrize("fmt", ["function-calling", "json", "text"])
def test_approvals_behave_as_in_codeact(tmp_path: Path, fmt: str) -> None:
    def reply(answer: str) -> Any:
        if fmt == "function-calling":
            return ScriptedModel.tool_calls(("send_email", {"to": "a@b.c", "body": answer}))
        if fmt == "json":
            return json_action("send_email", to="a@b.c", body=answer)
        return f'Action: send_email(to="a@b.c", body="{answer}")'

    # Without an approver, the call is denied and the model is told so.
    model = ScriptedModel([reply("hi"), "Final Answer: could not send"])
    events, _ = collect(make(model, fmt, tmp_path, tools=[send_email]), "email a@b.c")
    (call,) = of(events, ToolCall)
    assert call.error.startswith("ApprovalDenied: the user did not allow this call to send_email")
    # With one, it receives the request (bounded previews, run id, step) and the call runs.
    asked: list[ApprovalRequest] = []
    model = ScriptedModel([reply("hello"), "Final Answer: sent"])
    agent = make(model, fmt, tmp_path, tools=[send_email], approve=lambda r: asked.append(r) or True)
    events, result = collect(agent, "email a@b.c")
    assert of(events, ToolCall)[0].result == "sent to a@b.c"
    (request,) = asked
    assert request.tool == "send_email" and request.arguments == {"to": "a@b.c", "body": "hello"}
    assert request.run_id == result.run_id and request.step == 1


def test_return_direct_ends_the_run_with_the_tool_result(tmp_path: Path) -> None:
    @tool(return_direct=True)
    def report(region: str) -> dict:
        """The finished report."""
        return {"region": region, "total": 42}

    model = ScriptedModel([json_action("report", region="north")])
    events, result = collect(make(model, "json", tmp_path, tools=[report]), "report north")
    assert result.status == "success" and result.answer == {"region": "north", "total": 42}
    assert model.remaining == 0 and len(result.steps) == 1


def test_run_context_is_hidden_and_filled(tmp_path: Path) -> None:
    seen: list[RunContext] = []

    @tool
    def whoami(ctx: RunContext[dict], greeting: str = "hi") -> str:
        """Greet the user."""
        seen.append(ctx)
        return f"{greeting} {ctx.deps['user']}"

    assert "ctx" not in json.dumps(whoami.openai_schema())
    model = ScriptedModel([ScriptedModel.tool_calls(("whoami", {"greeting": "hello"})), "done"])
    events, result = collect(make(model, "fc", tmp_path, tools=[whoami], deps={"user": "ana"}), "greet")
    assert of(events, ToolCall)[0].result == "hello ana"
    assert seen[0].run_id == result.run_id and seen[0].step == 1 and seen[0].deps == {"user": "ana"}


def test_max_steps_ends_with_the_best_answer(tmp_path: Path) -> None:
    model = ScriptedModel([json_action("get_weather", city="Paris")] * 2)
    events, result = collect(make(model, "json", tmp_path, max_steps=2), "loop")
    assert result.status == "max_steps" and result.answer == "{'high': 17, 'sky': 'sunny'}"
    assert of(events, FinalAnswer)[0].status == "max_steps"


def test_history_elision_keeps_tool_messages_paired(tmp_path: Path) -> None:
    big = {"city": "Paris", "text": "x" * 3000}

    @tool
    def page(n: int) -> dict:
        """A big page."""
        return big

    replies = [ScriptedModel.tool_calls(("page", {"n": i})) for i in range(4)] + ["done"]
    model = ScriptedModel(replies)
    collect(make(model, "fc", tmp_path, tools=[page], history_budget=1500), "read")
    last = model.requests[-1]
    tool_messages = [m for m in last if m.role == "tool"]
    assert len(tool_messages) == 4 and all(m.tool_call_id for m in tool_messages)
    assert tool_messages[0].content.startswith("[elided to fit the context")
    assert tool_messages[-1].content.startswith("{'city': 'Paris'")  # the latest is kept whole


def test_cancel_before_the_first_step(tmp_path: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    _, result = collect(make(ScriptedModel([]), "json", tmp_path), "x", cancel=cancel)
    assert result.status == "cancelled"


def test_files_are_described_and_kept_on_the_host(tmp_path: Path) -> None:
    data = tmp_path / "sales.csv"
    data.write_text("region,total\nnorth,3\n")
    model = ScriptedModel(["Final Answer: ok"])
    collect(make(model, "text", tmp_path), "read it", files=[data])
    assert "- sales.csv (21 bytes); header: region,total" in model.requests[0][0].content
    _, result = collect(make(ScriptedModel([]), "text", tmp_path), "x", files=[tmp_path / "missing.csv"])
    assert result.status == "error" and "file not found" in result.error


def test_a_session_keeps_the_history(tmp_path: Path) -> None:
    model = ScriptedModel([json_action("get_weather", city="Paris"), "Final Answer: sunny", "Final Answer: still"])
    with make(model, "json", tmp_path).session() as chat:
        assert chat.send("Paris?").answer == "sunny"
        assert chat.send("And now?").answer == "still"
    assert [m.role for m in model.requests[-1]] == ["system", "user", "assistant", "user", "assistant", "user"]
    with pytest.raises(CodeActError, match="closed"):
        chat.send("again")


def test_arun(tmp_path: Path) -> None:
    model = ScriptedModel([ScriptedModel.tool_calls(("add_all", {"values": [2, 3]})),
                           ScriptedModel.tool_calls(("final_answer", {"answer": 5}))])
    result = asyncio.run(make(model, "fc", tmp_path).arun("2+3"))
    assert result.answer == 5


def test_notebook_export_of_a_react_run(tmp_path: Path) -> None:
    model = ScriptedModel([json_action("city_facts", city="Paris"), "Final Answer: France"])
    _, result = collect(make(model, "json", tmp_path), "Paris?")
    path = tmp_path / "run.ipynb"
    export_notebook(stored(tmp_path, result.run_id), path)
    nb = nbformat.read(path, as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    assert "agent `react-json`" in text and "prompt `react-json@1`" in text
    assert "`city_facts(city=Paris)` → ('France', 2102000)" in text
    assert nb.metadata["codeact"]["agent"] == "react-json"


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown ReAct action format 'xml'"):
        ReActAgent(ScriptedModel([]), format="xml")

    @tool(name="final_answer")
    def clash(answer: str) -> str:
        """Clash."""
        return answer

    with pytest.raises(CodeActError, match="may not be named 'final_answer'"):
        ReActAgent(ScriptedModel([]), [clash])
    assert format_name("react-json") == "json" and format_name("FC") == "function-calling"
    assert AGENT_KINDS == ("codeact", "react-fc", "react-json", "react-text")


# --------------------------------------------------------------------------- prompts


def test_every_shipped_prompt_is_versioned() -> None:
    for name in PROMPT_NAMES:
        prompt = load_prompt(name)
        assert prompt.name == name and prompt.version.isdigit() and prompt.id == f"{name}@{prompt.version}"
        assert not prompt.text.startswith("<!--") and "$files" in prompt.text
    with pytest.raises(ConfigError, match="no version marker"):
        parse_prompt("You are...", "react-json")
    with pytest.raises(ConfigError, match="declares the name"):
        parse_prompt("<!-- codeact-prompt: codeact v2 -->\nx", "react-json")


def test_a_custom_prompt_is_recorded_by_its_hash(tmp_path: Path) -> None:
    model = ScriptedModel(["Final Answer: ok"])
    agent = make(model, "json", tmp_path, system_prompt="Be brief. Tools:\n$tools")
    assert agent.prompt.name == "custom" and agent.prompt.version.startswith("sha256:")
    events, result = collect(agent, "x")
    assert model.requests[0][0].content.startswith("Be brief. Tools:\n{\"name\": \"get_weather\"")
    assert stored(tmp_path, result.run_id).prompt == "custom"
    assert Prompt.custom("<!-- codeact-prompt: mine v3 -->\nHello").id == "mine@3"


def test_tools_can_save_artifacts_and_report_progress(tmp_path: Path) -> None:
    from codeact.events import ToolProgress

    @tool
    def render_chart(ctx: RunContext, title: str) -> str:
        """Draw a chart and keep it."""
        ctx.report_progress(1, 2, "drawing")
        return ctx.add_artifact(f"{title}.png", b"\x89PNG\r\n\x1a\n" + b"0" * 100, "image/png")

    model = ScriptedModel([ScriptedModel.tool_calls(("render_chart", {"title": "sales"})), "done"])
    agent = make(model, "fc", tmp_path, tools=[render_chart], output_dir=tmp_path / "out")
    events, result = collect(agent, "chart")
    (progress,) = of(events, ToolProgress)
    assert (progress.name, progress.progress, progress.total, progress.message) == ("render_chart", 1.0, 2.0, "drawing")
    assert of(events, ToolCall)[0].result == "sales.png"
    (saved,) = result.artifacts
    assert saved == tmp_path / "out" / result.run_id / "sales.png" and saved.read_bytes().startswith(b"\x89PNG")
    assert len(result.steps[0].tool_calls) == 1  # progress is not a call
    assert [a.path for a in stored(tmp_path, result.run_id).artifacts] == [str(saved)]
