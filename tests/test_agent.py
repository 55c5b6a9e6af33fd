"""The CodeAct loop (codeact.agent) against real sandboxes and real model clients.

Most tests use the ``local`` backend (a real Jupyter kernel subprocess) for
speed; the ``docker``-marked ones run the same loop in the container. Models
are either a :class:`ScriptedModel` or the real :class:`OpenAIModel` talking
HTTP to the local OpenAI-compatible test server with replies queued on it.
Only the model's text is scripted; everything else is real.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import threading
import time
from pathlib import Path
from textwrap import dedent
from typing import Any

import pytest

from codeact import CodeActAgent, OpenAIModel, RunContext, RunLog, ScriptedModel, tool
from codeact.agent import ApprovalRequest
from codeact.errors import CodeActError
from codeact.events import (
    CodeAction,
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
from codeact.messages import Message
from tests.openai_server import OpenAITestServer, free_port

pytestmark = pytest.mark.timeout(120)


# --------------------------------------------------------------------------- helpers


def py(code: str, thought: str = "Let me do that.") -> str:
    """A model reply: a thought and one ```python block."""
    return f"{thought}\n```python\n{dedent(code).strip()}\n```"


def make_agent(tmp_path: Path, model: Any, tools: Any = (), **options: Any) -> CodeActAgent:
    options.setdefault("sandbox", "local")
    return CodeActAgent(model, tools, log=tmp_path / "runs.db", output_dir=tmp_path / "out", **options)


def collect(agent: CodeActAgent, task: str, **kwargs: Any) -> tuple[list[Event], RunResult]:
    events = list(agent.stream(task, **kwargs))
    finished = events[-1]
    assert isinstance(finished, RunFinished)
    return events, finished.result


def of_type(events: list[Event], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def last_user(messages: list[Message]) -> str:
    return next(m.content for m in reversed(messages) if m.role == "user")


def stored(tmp_path: Path, run_id: str):
    log = RunLog(tmp_path / "runs.db")
    try:
        return log.get_run(run_id)
    finally:
        log.close()


def openai_model(server: OpenAITestServer, **options: Any) -> OpenAIModel:
    options.setdefault("max_retries", 2)
    options.setdefault("backoff", 0.01)
    options.setdefault("timeout", 20)
    return OpenAIModel("test-model", base_url=server.base_url, api_key="test-key", **options)


WEATHER = {
    "北京": [{"day": "today", "sky": "sunny", "high": 24, "aqi": 80},
           {"day": "tomorrow", "sky": "light rain", "high": 19, "aqi": 40}],
    "上海": [{"day": "today", "sky": "cloudy", "high": 26, "aqi": 60},
           {"day": "tomorrow", "sky": "sunny", "high": 27, "aqi": 55}],
}


@tool
def get_daily_weather(city: str) -> list[dict]:
    """Daily weather for a city, today first.

    Args:
        city: city name, e.g. 北京
    """
    if city not in WEATHER:
        raise KeyError(f"no weather for {city!r}; known: {', '.join(WEATHER)}")
    return WEATHER[city]


@pytest.fixture
def docker_backend(request: pytest.FixtureRequest) -> None:
    """Skip unless Docker and the sandbox image are there (conftest's docker_ready when present)."""
    try:
        request.getfixturevalue("docker_ready")
    except pytest.FixtureLookupError:
        from sandbox import docker_available

        reason = docker_available()
        if reason is not None:
            pytest.skip(f"docker backend unavailable: {reason}")


# --------------------------------------------------------------------------- the basic loop


def test_multi_step_run_with_tool_calls(tmp_path: Path) -> None:
    model = ScriptedModel([
        py("""
            report = {}
            for city in ["北京", "上海"]:
                days = get_daily_weather(city)
                report[city] = days[1]["sky"]
            print(report)
        """, "I'll look up both cities in one go."),
        py("final_answer({'best_city': '上海', 'skies': report, 'count': len(report)})"),
    ])
    agent = make_agent(tmp_path, model, [get_daily_weather])
    events, result = collect(agent, "Where is tomorrow sunny, 北京 or 上海?")

    assert result.status == "success"
    assert result.answer == {"best_city": "上海", "skies": {"北京": "light rain", "上海": "sunny"}, "count": 2}
    assert isinstance(result.answer, dict)  # a structured answer stays structured
    assert len(result.steps) == 2

    calls = of_type(events, ToolCall)
    assert [c.name for c in calls] == ["get_daily_weather", "get_daily_weather"]
    assert [c.arguments for c in calls] == [{"city": "北京"}, {"city": "上海"}]
    assert calls[0].result == WEATHER["北京"]
    assert all(c.error is None and c.step == 1 and c.duration >= 0 for c in calls)
    assert result.steps[0].tool_calls == calls
    assert "light rain" in result.steps[0].observation

    # The model saw the tool's stub in the system prompt and the observation after step 1.
    system = model.requests[0][0]
    assert system.role == "system" and "def get_daily_weather(city: str) -> list[dict]:" in system.content
    assert "def final_answer(answer):" in system.content
    assert last_user(model.requests[1]).startswith("Observation:")
    assert "'北京': 'light rain'" in last_user(model.requests[1])

    final = of_type(events, FinalAnswer)
    assert len(final) == 1 and final[0].answer == result.answer and final[0].status == "success"


def test_run_log_has_steps_tool_calls_and_usage(tmp_path: Path) -> None:
    model = ScriptedModel([
        py("w = get_daily_weather('北京')\nprint(w[0]['sky'])"),
        py("final_answer(w[0]['high'])"),
    ])
    result = make_agent(tmp_path, model, [get_daily_weather]).run("How warm is Beijing today?")
    assert result.status == "success" and result.answer == 24

    record = stored(tmp_path, result.run_id)
    assert record.status == "success"
    assert record.answer == 24
    assert record.task == "How warm is Beijing today?"
    assert record.tools == ["get_daily_weather"]
    assert record.backend == "local"
    assert [s.step for s in record.steps] == [1, 2]
    assert "get_daily_weather('北京')" in record.steps[0].code
    assert record.steps[0].observation.strip() == "sunny"
    [call] = record.steps[0].tool_calls
    assert call.name == "get_daily_weather" and call.arguments == {"city": "北京"}
    assert call.result[0]["sky"] == "sunny"
    assert record.usage == result.usage
    assert record.usage.requests == 2 and record.usage.input_tokens > 0 and record.usage.output_tokens > 0
    assert all(s.usage.requests == 1 for s in record.steps)


def test_reply_without_code_is_the_final_answer(tmp_path: Path) -> None:
    model = ScriptedModel([py("x = 6 * 7\nprint(x)"), "The answer is 42."])
    events, result = collect(make_agent(tmp_path, model), "What is 6*7?")
    assert result.status == "success"
    assert result.answer == "The answer is 42."
    assert len(result.steps) == 2 and result.steps[1].code is None
    assert not of_type(events, ErrorEvent)


def test_state_persists_across_steps(tmp_path: Path) -> None:
    model = ScriptedModel([
        py("import math\ndef area(r):\n    return math.pi * r * r\nradius = 2"),
        py("a = area(radius)\nprint(round(a, 2))"),
        py("final_answer(round(a, 2))"),
    ])
    result = make_agent(tmp_path, model).run("Area of a circle of radius 2")
    assert result.status == "success"
    assert result.answer == 12.57
    assert result.steps[1].observation.strip() == "12.57"


def test_max_steps_gives_status_and_best_answer(tmp_path: Path) -> None:
    model = ScriptedModel([
        py("print('partial: 3 of 10 files done')"),
        py("print('partial: 6 of 10 files done')"),
        py("done = 6"),  # prints nothing: the hint the model gets is no answer
    ])
    events, result = collect(make_agent(tmp_path, model, max_steps=3), "Process ten files")
    assert result.status == "max_steps"
    assert len(result.steps) == 3
    assert result.answer == "partial: 6 of 10 files done"
    final = of_type(events, FinalAnswer)
    assert final and final[0].status == "max_steps"
    assert stored(tmp_path, result.run_id).status == "max_steps"


def test_events_stream_in_order(tmp_path: Path) -> None:
    model = ScriptedModel([py("print(get_daily_weather('上海')[1]['sky'])"), py("final_answer('sunny')")])
    events, result = collect(make_agent(tmp_path, model, [get_daily_weather]), "Shanghai tomorrow?")
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "RunStarted",
        "ModelOutput", "CodeAction", "ToolCall", "CodeOutput", "Observation",
        "ModelOutput", "CodeAction", "Observation",
        "FinalAnswer", "RunFinished",
    ]
    (live,) = [e for e in events if type(e).__name__ == "CodeOutput"]
    assert (live.stream, live.text, live.step) == ("stdout", "sunny\n", 1)
    assert {e.run_id for e in events} == {result.run_id}
    started = events[0]
    assert isinstance(started, RunStarted)
    assert started.task == "Shanghai tomorrow?" and started.tools == ["get_daily_weather"]
    assert started.backend == "local" and started.model == "scripted"
    assert [e.step for e in events if isinstance(e, (ModelOutput, CodeAction, Observation))] == [1, 1, 1, 2, 2, 2]
    times = [e.time for e in events]
    assert times == sorted(times)


# --------------------------------------------------------------------------- malformed model output


def test_unclosed_fence_still_runs(tmp_path: Path) -> None:
    model = ScriptedModel(["Let me count.\n```python\nprint(sum(range(5)))", "It is 10."])
    result = make_agent(tmp_path, model).run("sum 0..4")
    assert result.steps[0].code == "print(sum(range(5)))"
    assert result.steps[0].observation.strip() == "10"
    assert result.status == "success" and result.answer == "It is 10."


def test_bash_only_block_gets_feedback_and_the_next_step(tmp_path: Path) -> None:
    model = ScriptedModel([
        "I'll list the files.\n```bash\nls -la\n```",
        py("import os\nprint(sorted(os.listdir('.')))"),
        "Listed.",
    ])
    events, result = collect(make_agent(tmp_path, model), "List the files")
    assert result.status == "success"
    [error] = of_type(events, ErrorEvent)
    assert error.kind == "parse" and error.step == 1 and not error.fatal
    assert "bash" in error.message and "Python" in error.message
    assert result.steps[0].code is None and result.steps[0].error == error.message
    feedback = last_user(model.requests[1])
    assert feedback == error.message
    assert result.steps[1].code is not None and result.steps[1].error is None


def test_empty_reply_gets_feedback(tmp_path: Path) -> None:
    model = ScriptedModel(["", py("final_answer('ok')")])
    events, result = collect(make_agent(tmp_path, model), "Say ok")
    assert result.status == "success" and result.answer == "ok"
    [error] = of_type(events, ErrorEvent)
    assert error.kind == "parse" and "empty" in error.message
    assert "empty" in last_user(model.requests[1])


def test_syntax_error_is_observed_and_the_model_recovers(tmp_path: Path) -> None:
    def fix(messages: list[Message]) -> str:
        observation = last_user(messages)
        assert "SyntaxError" in observation and "line 2" in observation
        return py("total = 0\nfor n in [1, 2, 3]:\n    total += n\nfinal_answer(total)", "Missing colon; fixed.")

    model = ScriptedModel([py("total = 0\nfor n in [1, 2, 3]\n    total += n"), fix])
    result = make_agent(tmp_path, model).run("Add 1, 2 and 3")
    assert result.status == "success" and result.answer == 6
    assert "SyntaxError" in result.steps[0].error
    assert "line 2" in result.steps[0].observation
    assert result.steps[0].observation.count("SyntaxError") == 1  # said once, not twice


def test_execute_tags_are_run(tmp_path: Path) -> None:
    model = ScriptedModel(["Computing.\n<execute>\nprint(2 + 3)\n</execute>", "<execute>final_answer(5)"])
    result = make_agent(tmp_path, model).run("2+3")
    assert result.steps[0].observation.strip() == "5"
    assert result.status == "success" and result.answer == 5


def test_unknown_function_is_a_name_error_observation(tmp_path: Path) -> None:
    model = ScriptedModel([py("print(get_stock_price('AAPL'))"), "I have no stock tool."])
    result = make_agent(tmp_path, model, [get_daily_weather]).run("AAPL price?")
    observation = result.steps[0].observation
    assert "NameError" in observation and "get_stock_price" in observation
    assert result.steps[0].error.startswith("NameError")
    assert result.status == "success"


# --------------------------------------------------------------------------- tools


def test_tool_error_can_be_caught_in_code(tmp_path: Path) -> None:
    model = ScriptedModel([
        py("""
            try:
                get_daily_weather('Atlantis')
            except KeyError as e:
                print('caught:', e)
        """),
        "No data for Atlantis.",
    ])
    events, result = collect(make_agent(tmp_path, model, [get_daily_weather]), "Atlantis weather")
    assert "caught:" in result.steps[0].observation and "Atlantis" in result.steps[0].observation
    assert result.steps[0].error is None
    [call] = of_type(events, ToolCall)
    assert call.error is not None and call.error.startswith("KeyError") and call.result is None


def test_uncaught_tool_error_is_an_error_observation(tmp_path: Path) -> None:
    @tool
    def flaky_sensor() -> float:
        """Read the sensor."""
        raise RuntimeError("sensor offline since 07:00")

    model = ScriptedModel([py("print(flaky_sensor())"), "The sensor is offline."])
    result = make_agent(tmp_path, model, [flaky_sensor]).run("Read the sensor")
    assert "RuntimeError" in result.steps[0].observation
    assert "sensor offline since 07:00" in result.steps[0].observation
    assert "sensor offline" in last_user(model.requests[1])
    assert result.status == "success"


def test_tool_results_keep_their_types_and_odd_objects_print_the_same(tmp_path: Path) -> None:
    class Reading:
        def __str__(self) -> str:
            return "Reading(21.5 °C)"

    @tool
    def last_reading() -> dict:
        """The last sensor reading."""
        return {"at": dt.datetime(2024, 5, 1, 7, 30), "value": Reading(), "tags": {"a"}, "raw": b"\x00\x01"}

    model = ScriptedModel([
        py("r = last_reading()\nprint(r['at'], r['value'], r['tags'], r['raw'], type(r['at']).__name__)"),
        "ok",
    ])
    events, result = collect(make_agent(tmp_path, model, [last_reading]), "Last reading?")
    assert result.steps[0].error is None, result.steps[0].observation
    assert result.steps[0].observation.strip() == "2024-05-01 07:30:00 Reading(21.5 °C) {'a'} b'\\x00\\x01' datetime"
    [call] = of_type(events, ToolCall)
    from codeact.values import restore

    shown = restore(call.result)
    assert shown["at"] == dt.datetime(2024, 5, 1, 7, 30) and str(shown["value"]) == "Reading(21.5 °C)"
    record = stored(tmp_path, result.run_id)
    assert str(restore(record.steps[0].tool_calls[0].result)["value"]) == "Reading(21.5 °C)"


def test_tool_argument_validation_error_reaches_the_model(tmp_path: Path) -> None:
    @tool
    def forecast(city: str, days: int = 3) -> str:
        """Forecast for the next days."""
        return f"{city}: {days} days of sun"

    def retry(messages: list[Message]) -> str:
        observation = last_user(messages)
        assert "invalid arguments for tool 'forecast'" in observation
        assert "days" in observation and "valid integer" in observation
        return py("print(forecast('北京', days=2))")

    model = ScriptedModel([py("print(forecast('北京', days='a few'))"), retry, "Two days of sun."])
    events, result = collect(make_agent(tmp_path, model, [forecast]), "Forecast")
    assert result.status == "success"
    first, second = of_type(events, ToolCall)
    assert first.error is not None and "ToolArgumentError" in first.error
    assert first.arguments == {"city": "北京", "days": "a few"}
    assert second.result == "北京: 2 days of sun"


class _Outbox:
    def __init__(self) -> None:
        self.sent: list[str] = []


def _send_tool(outbox: _Outbox):
    @tool(requires_approval=True)
    def send_message(to: str, text: str) -> str:
        """Send a message (needs the user's approval)."""
        outbox.sent.append(f"{to}: {text}")
        return "sent"

    return send_message


SEND_CODE = py("""
    try:
        print(send_message('ops', 'disk full'))
    except Exception as e:
        print(type(e).__name__, '-', e)
""")


def test_approval_without_approver_is_denied(tmp_path: Path) -> None:
    outbox = _Outbox()
    model = ScriptedModel([SEND_CODE, "I was not allowed to send it."])
    events, result = collect(make_agent(tmp_path, model, [_send_tool(outbox)]), "Tell ops")
    assert outbox.sent == []
    assert "ApprovalDenied" in result.steps[0].observation
    assert "did not allow" in result.steps[0].observation
    [call] = of_type(events, ToolCall)
    assert call.error is not None and "ApprovalDenied" in call.error


def test_approval_refused_by_approver(tmp_path: Path) -> None:
    outbox = _Outbox()
    asked: list[ApprovalRequest] = []

    def approver(request: ApprovalRequest) -> bool:
        asked.append(request)
        return False

    model = ScriptedModel([SEND_CODE, "Not sent."])
    result = make_agent(tmp_path, model, [_send_tool(outbox)], approve=approver).run("Tell ops")
    assert outbox.sent == []
    assert "did not allow" in result.steps[0].observation
    [request] = asked
    assert request.tool == "send_message"
    assert request.arguments == {"to": "ops", "text": "disk full"}
    assert request.run_id == result.run_id and request.step == 1


def test_approval_granted_runs_the_tool(tmp_path: Path) -> None:
    outbox = _Outbox()
    model = ScriptedModel([SEND_CODE, "Sent."])
    result = make_agent(tmp_path, model, [_send_tool(outbox)], approve=lambda request: True).run("Tell ops")
    assert outbox.sent == ["ops: disk full"]
    assert result.steps[0].observation.strip() == "sent"


def test_return_direct_tool_ends_the_run_with_its_result(tmp_path: Path) -> None:
    @tool(return_direct=True)
    def open_ticket(title: str, priority: int = 3) -> dict:
        """Open a support ticket; its record is the answer."""
        return {"id": "T-17", "title": title, "priority": priority}

    model = ScriptedModel([py("open_ticket('Printer on fire', priority=1)"), "never used"])
    result = make_agent(tmp_path, model, [open_ticket]).run("File a ticket")
    assert result.status == "success"
    assert result.answer == {"id": "T-17", "title": "Printer on fire", "priority": 1}
    assert len(model.requests) == 1 and model.remaining == 1


def test_run_context_deps_reach_the_tool(tmp_path: Path) -> None:
    seen: list[RunContext] = []

    @tool
    def whoami(ctx: RunContext[dict], greeting: str = "hi") -> str:
        """Who is the current user."""
        seen.append(ctx)
        return f"{greeting} {ctx.deps['user']}"

    model = ScriptedModel([py("print(whoami('hello'))"), "done"])
    agent = make_agent(tmp_path, model, [whoami], deps={"user": "alice", "secret": "s3"})
    result = agent.run("Who am I?")
    assert result.steps[0].observation.strip() == "hello alice"
    [ctx] = seen
    assert ctx.run_id == result.run_id and ctx.step == 1 and ctx.deps["user"] == "alice"
    system = model.requests[0][0].content
    assert "ctx" not in system.split("def whoami", 1)[1].split("\n", 1)[0]  # hidden from the model


# --------------------------------------------------------------------------- files and artifacts


def test_files_are_uploaded_and_described(tmp_path: Path) -> None:
    data = tmp_path / "sales.csv"
    data.write_text("date,region,amount\n2024-01-01,north,120\n2024-01-02,south,80\n2024-01-03,north,50\n")
    model = ScriptedModel([
        py("""
            import csv
            rows = list(csv.DictReader(open('sales.csv')))
            north = sum(int(r['amount']) for r in rows if r['region'] == 'north')
            print(len(rows), north)
        """),
        py("final_answer({'rows': len(rows), 'north': north})"),
    ])
    events, result = collect(make_agent(tmp_path, model), "Total north sales", files=[data])
    assert result.answer == {"rows": 3, "north": 170}
    system = model.requests[0][0].content
    assert "sales.csv" in system and "header: date,region,amount" in system
    assert events[0].files == ["sales.csv"]
    assert not result.artifacts  # an uploaded file is input, not an artifact


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    model = ScriptedModel(["never used"])
    result = make_agent(tmp_path, model).run("Read it", files=[tmp_path / "nope.csv"])
    assert result.status == "error"
    assert "file not found" in result.error and "nope.csv" in result.error
    assert model.requests == []


def test_plots_become_artifacts(tmp_path: Path) -> None:
    model = ScriptedModel([
        py("""
            import matplotlib.pyplot as plt
            plt.plot([1, 2, 3], [3, 1, 2])
            plt.title('demo')
            plt.show()
        """),
        "Plotted.",
    ])
    events, result = collect(make_agent(tmp_path, model), "Plot it")
    [png] = [p for p in result.artifacts if p.suffix == ".png"]
    assert png.parent == tmp_path / "out" / result.run_id
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert png.name in result.steps[0].observation
    [observation] = of_type(events, Observation)
    assert png.name in observation.artifacts and len(observation.images) == 1


def test_files_written_by_code_become_artifacts(tmp_path: Path) -> None:
    model = ScriptedModel([
        py("""
            import os
            os.makedirs('reports', exist_ok=True)
            with open('reports/summary.md', 'w') as f:
                f.write('# Summary\\nall good\\n')
            with open('data.csv', 'w') as f:
                f.write('a,b\\n1,2\\n')
        """),
        py("print('unchanged files are not artifacts again')"),
        "Written.",
    ])
    events, result = collect(make_agent(tmp_path, model), "Write a report")
    out = tmp_path / "out" / result.run_id
    assert sorted(result.artifacts) == sorted([out / "reports" / "summary.md", out / "data.csv"])
    assert (out / "reports" / "summary.md").read_text() == "# Summary\nall good\n"
    first, second = of_type(events, Observation)
    assert "reports/summary.md" in first.text and "data.csv" in first.text
    assert set(first.artifacts) == {"reports/summary.md", "data.csv"}
    assert second.artifacts == [] and "Files written" not in second.text


# --------------------------------------------------------------------------- observation size and history


def test_huge_output_is_truncated_head_and_tail(tmp_path: Path) -> None:
    model = ScriptedModel([
        py("print('HEAD-MARK ' + 'x' * 20000 + ' MIDDLE-MARK ' + 'y' * 20000 + ' TAIL-MARK')"),
        "Too long to show.",
    ])
    events, result = collect(make_agent(tmp_path, model, observation_limit=3000), "Print a lot")
    [observation] = of_type(events, Observation)
    text = observation.text
    assert text.startswith("HEAD-MARK")
    assert text.rstrip().endswith("TAIL-MARK")
    assert "MIDDLE-MARK" not in text
    match = re.search(r"\[\.\.\. (\d+) characters cut", text)
    assert match is not None
    # What the model sees (head + tail = the limit) plus what was cut is the whole output.
    assert int(match.group(1)) == len(observation.stdout.rstrip("\n")) - 3000
    assert len(text) < 3100
    assert observation.truncated
    assert last_user(model.requests[1]) == f"Observation:\n{text}"


def test_output_beyond_the_sandbox_cap_says_so(tmp_path: Path) -> None:
    model = ScriptedModel([py("print('HEAD-MARK ' + 'z' * 300000 + ' TAIL-MARK')"), "Huge."])
    agent = make_agent(tmp_path, model, observation_limit=3000, sandbox_options={"output_limit": 50000})
    events, result = collect(agent, "Print too much")
    [observation] = of_type(events, Observation)
    assert observation.truncated
    assert "HEAD-MARK" in observation.text[:300] and observation.text.rstrip().endswith("TAIL-MARK")
    assert "Output was truncated" in observation.text
    assert len(observation.stdout) < 60000  # the host never held the whole output


def test_history_elision_over_budget(tmp_path: Path) -> None:
    model = ScriptedModel([
        py("print('FIRST-OBS ' + 'a' * 4000)"),
        py("print('second observation')"),
        py("print('third observation')"),
        "done",
    ])
    task = "Keep this task text intact"
    result = make_agent(tmp_path, model, history_budget=500).run(task)
    assert result.status == "success"
    final_request = model.requests[3]
    assert final_request[0].role == "system"
    assert final_request[1] == Message("user", task)
    elided = final_request[3]
    assert elided.role == "user" and "elided" in elided.content and "FIRST-OBS" not in elided.content
    # The latest exchanges stay whole.
    assert "third observation" in final_request[-1].content
    assert "second observation" in final_request[-3].content
    # The kept history is not rewritten: the first request saw the whole observation.
    assert "FIRST-OBS" in model.requests[1][3].content


# --------------------------------------------------------------------------- cancellation


def test_cancel_from_a_tool(tmp_path: Path) -> None:
    cancel = threading.Event()

    @tool
    def emergency_stop() -> str:
        """Stop everything."""
        cancel.set()
        return "stopping"

    model = ScriptedModel([py("print(emergency_stop())"), "never used"])
    result = make_agent(tmp_path, model, [emergency_stop]).run("Stop", cancel=cancel)
    assert result.status == "cancelled"
    assert len(model.requests) == 1
    assert result.steps[0].observation.strip() == "stopping"
    assert stored(tmp_path, result.run_id).status == "cancelled"


def test_cancel_between_steps(tmp_path: Path) -> None:
    cancel = threading.Event()
    model = ScriptedModel([py("print('step one')"), "never used"])
    agent = make_agent(tmp_path, model)
    events: list[Event] = []
    for event in agent.stream("Two steps", cancel=cancel):
        events.append(event)
        if isinstance(event, Observation):
            cancel.set()
    result = events[-1].result
    assert result.status == "cancelled" and result.error
    assert len(model.requests) == 1
    assert not of_type(events, FinalAnswer)


def test_cancel_before_start(tmp_path: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    model = ScriptedModel(["never used"])
    result = make_agent(tmp_path, model).run("Nothing", cancel=cancel)
    assert result.status == "cancelled" and model.requests == []


def test_breaking_out_of_stream_logs_cancelled_and_closes_the_sandbox(tmp_path: Path) -> None:
    model = ScriptedModel([py("print('working')"), py("print('more')"), "done"])
    agent = make_agent(tmp_path, model)

    def consume_until_first_observation() -> str:
        for event in agent.stream("Long job"):
            if isinstance(event, Observation):
                return event.run_id  # leaves the loop: the generator is closed
        raise AssertionError("no observation")

    run_id = consume_until_first_observation()
    record = stored(tmp_path, run_id)
    assert record.status == "cancelled"
    assert record.error and "stopped" in record.error
    assert len(model.requests) == 1
    workdir = re.search(r"The working directory is (\S+?)\.\s", model.requests[0][0].content).group(1)
    assert not Path(workdir).exists()  # the local sandbox was closed and cleaned up


# --------------------------------------------------------------------------- async


def test_arun(tmp_path: Path) -> None:
    model = ScriptedModel([py("x = get_daily_weather('北京')[0]['high']"), py("final_answer(x + 1)")])
    agent = make_agent(tmp_path, model, [get_daily_weather])
    result = asyncio.run(agent.arun("Beijing high plus one"))
    assert result.status == "success" and result.answer == 25
    assert stored(tmp_path, result.run_id).status == "success"


def test_astream_yields_events_in_order(tmp_path: Path) -> None:
    model = ScriptedModel([py("print('hi')"), "bye"])
    agent = make_agent(tmp_path, model)

    async def main() -> list[Event]:
        return [event async for event in agent.astream("Say hi")]

    events = asyncio.run(main())
    assert isinstance(events[0], RunStarted) and isinstance(events[-1], RunFinished)
    assert [type(e).__name__ for e in events[1:-1]] == [
        "ModelOutput", "CodeAction", "CodeOutput", "Observation", "ModelOutput", "FinalAnswer"]
    assert events[-1].result.answer == "bye"


def test_leaving_astream_early_cancels_the_run(tmp_path: Path) -> None:
    @tool
    def slow_step() -> str:
        """Takes a moment."""
        time.sleep(1.0)  # the consumer leaves while this runs
        return "slow done"

    model = ScriptedModel([py("print(slow_step())"), "never used"])
    agent = make_agent(tmp_path, model, [slow_step])

    async def main() -> str:
        stream = agent.astream("Slow job")
        async for event in stream:
            if isinstance(event, CodeAction):
                break
        await stream.aclose()
        return event.run_id

    run_id = asyncio.run(main())
    assert stored(tmp_path, run_id).status == "cancelled"
    assert len(model.requests) == 1


def test_cancelling_the_awaiting_task_cancels_the_run(tmp_path: Path) -> None:
    entered = threading.Event()

    @tool
    def slow_step() -> str:
        """Takes a moment."""
        entered.set()
        time.sleep(0.3)
        return "slow done"

    model = ScriptedModel([py("print(slow_step())"), "never used"])
    agent = make_agent(tmp_path, model, [slow_step])

    async def main() -> None:
        task = asyncio.create_task(agent.arun("Slow job"))
        assert await asyncio.to_thread(entered.wait, 60)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    [run] = RunLog(tmp_path / "runs.db").list_runs()
    assert run.status == "cancelled"
    assert len(model.requests) == 1


# --------------------------------------------------------------------------- chat sessions


def test_chat_session_keeps_kernel_state_and_history(tmp_path: Path) -> None:
    model = ScriptedModel([
        py("prices = {'apple': 3, 'pear': 5}\nprint('loaded', len(prices))"),
        "Loaded 2 prices.",
        py("final_answer(sum(prices.values()))"),
    ])
    agent = make_agent(tmp_path, model)
    with agent.session() as chat:
        first = chat.send("Load the prices")
        second = chat.send("What do they add up to?")
    assert first.status == "success" and first.answer == "Loaded 2 prices."
    assert second.status == "success" and second.answer == 8
    assert first.run_id != second.run_id
    turn2 = model.requests[2]
    assert [m.content for m in turn2 if m.role == "user"][0] == "Load the prices"
    assert turn2[-1] == Message("user", "What do they add up to?")
    assert sum(1 for m in turn2 if m.role == "system") == 1
    with pytest.raises(CodeActError, match="closed"):
        chat.send("One more?")


def test_runaway_code_times_out_and_the_session_survives(tmp_path: Path) -> None:
    model = ScriptedModel([
        py("kept = 'still here'\nimport time\nwhile True:\n    time.sleep(0.01)"),
        py("print(kept)"),
        "Recovered.",
    ])
    result = make_agent(tmp_path, model, execution_timeout=1.0).run("Loop forever")
    assert result.status == "success"
    assert "TimeoutError" in result.steps[0].observation
    assert result.steps[1].observation.strip() == "still here"


def test_a_sandbox_you_own_is_reused_and_left_open(tmp_path: Path) -> None:
    from sandbox import open_sandbox

    with open_sandbox("local") as sb:
        agent = make_agent(tmp_path, ScriptedModel([
            py("counter = get_daily_weather('北京')[0]['high']"), "set",
            py("final_answer(counter + 1)"),
        ]), [get_daily_weather], sandbox=sb)
        first = agent.run("Set a counter")
        second = agent.run("Increment it")
        assert first.status == "success" and second.status == "success"
        assert second.answer == 25  # kernel state survived from one run to the next
        assert sb.run("print(counter)").stdout.strip() == "24"  # still open after both runs


# --------------------------------------------------------------------------- real HTTP model


def test_openai_model_multi_step_run(tmp_path: Path, openai_server: OpenAITestServer) -> None:
    openai_server.plan_text(py("days = get_daily_weather('北京')\nprint(days[1]['sky'])"), usage=(300, 20))
    openai_server.plan_text(py("final_answer({'tomorrow': days[1]['sky'], 'run': False})"), usage=(400, 15))
    agent = make_agent(tmp_path, openai_model(openai_server), [get_daily_weather])
    events, result = collect(agent, "明天北京的天气适合跑步吗?")

    assert result.status == "success"
    assert result.answer == {"tomorrow": "light rain", "run": False}
    assert result.usage.input_tokens == 700 and result.usage.output_tokens == 35 and result.usage.requests == 2
    requests = openai_server.chat_requests
    assert len(requests) == 2
    assert requests[0].body["model"] == "test-model" and "stop" not in requests[0].body
    assert requests[0].messages[0]["role"] == "system"
    assert "def get_daily_weather" in requests[0].messages[0]["content"]
    assert requests[0].messages[1] == {"role": "user", "content": "明天北京的天气适合跑步吗?"}
    assert requests[1].messages[-1]["content"] == "Observation:\nlight rain"
    assert requests[1].messages[-2]["role"] == "assistant"

    record = stored(tmp_path, result.run_id)
    assert record.model == "test-model"
    assert record.usage.input_tokens == 700 and record.usage.output_tokens == 35
    assert [s.usage.input_tokens for s in record.steps] == [300, 400]
    assert record.steps[0].tool_calls[0].arguments == {"city": "北京"}


def test_model_endpoint_down_ends_with_error_and_is_logged(tmp_path: Path) -> None:
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    model = OpenAIModel("test-model", base_url=base_url, api_key="x", max_retries=1, backoff=0.01, timeout=5)
    events, result = collect(make_agent(tmp_path, model), "Anything")
    assert result.status == "error"
    assert base_url in result.error and "connection" in result.error.lower()
    assert "2 attempts" in result.error
    errors = of_type(events, ErrorEvent)
    assert len(errors) == 1 and errors[0].fatal and errors[0].kind == "model"
    assert not of_type(events, FinalAnswer)
    record = stored(tmp_path, result.run_id)
    assert record.status == "error" and record.error == result.error
    assert record.errors and record.errors[0].kind == "model"


def test_rate_limit_then_success_through_the_agent(tmp_path: Path, openai_server: OpenAITestServer) -> None:
    openai_server.plan_rate_limit(retry_after=0.05)
    openai_server.plan_text(py("print(2 ** 10)"))
    openai_server.plan_server_error(503)
    openai_server.plan_text("2**10 is 1024.")
    result = make_agent(tmp_path, openai_model(openai_server)).run("2^10?")
    assert result.status == "success" and result.answer == "2**10 is 1024."
    assert result.steps[0].observation.strip() == "1024"
    assert len(openai_server.chat_requests) == 4
    assert result.usage.requests == 2  # one successful request per step


def test_stream_model_yields_text_deltas(tmp_path: Path, openai_server: OpenAITestServer) -> None:
    reply = py("print('streamed ok')", "Streaming a thought first.")
    openai_server.plan_text(reply, usage=(50, 10))
    openai_server.plan_text("All done.", usage=(80, 3))
    agent = make_agent(tmp_path, openai_model(openai_server), stream_model=True)
    events, result = collect(agent, "Stream it")
    assert result.status == "success" and result.answer == "All done."
    deltas = of_type(events, TextDelta)
    assert len(deltas) > 3
    assert "".join(d.text for d in deltas if d.step == 1) == reply
    assert "".join(d.text for d in deltas if d.step == 2) == "All done."
    # Deltas of a step come before that step's ModelOutput.
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("ModelOutput") > kinds.index("TextDelta")
    assert openai_server.chat_requests[0].stream
    assert result.usage.input_tokens == 130 and result.usage.output_tokens == 13
    assert result.steps[0].observation.strip() == "streamed ok"


def test_stream_model_with_scripted_model(tmp_path: Path) -> None:
    reply = py("print(1)")
    model = ScriptedModel([reply, "fine"])
    events, result = collect(make_agent(tmp_path, model, stream_model=True), "Print 1")
    assert result.status == "success"
    assert "".join(d.text for d in of_type(events, TextDelta) if d.step == 1) == reply


def test_scripted_model_running_out_is_an_error(tmp_path: Path) -> None:
    model = ScriptedModel([py("print('only step')")])
    result = make_agent(tmp_path, model).run("Two steps please")
    assert result.status == "error" and "no reply left" in result.error


# --------------------------------------------------------------------------- docker


@pytest.mark.docker
def test_docker_run_with_tools_files_and_artifacts(tmp_path: Path, docker_backend: None) -> None:
    data = tmp_path / "temps.csv"
    data.write_text("day,high\nmon,21\ntue,25\nwed,19\n")
    model = ScriptedModel([
        py("""
            import csv, os
            rows = list(csv.DictReader(open('temps.csv')))
            highs = [int(r['high']) for r in rows]
            sky = get_daily_weather('上海')[1]['sky']
            with open('summary.txt', 'w') as f:
                f.write(f'max={max(highs)} sky={sky}')
            print(os.getcwd(), max(highs), sky)
        """),
        py("""
            import matplotlib.pyplot as plt
            plt.bar([r['day'] for r in rows], highs)
            plt.show()
            final_answer({'max': max(highs), 'sky': sky})
        """),
    ])
    agent = make_agent(tmp_path, model, [get_daily_weather], sandbox="docker")
    events, result = collect(agent, "Hottest day and Shanghai's sky tomorrow", files=[data])
    assert result.status == "success", result.error
    assert result.answer == {"max": 25, "sky": "sunny"}
    assert result.steps[0].observation.startswith("/workspace 25 sunny")
    assert "The working directory is /workspace" in model.requests[0][0].content
    out = tmp_path / "out" / result.run_id
    assert (out / "summary.txt").read_text() == "max=25 sky=sunny"
    assert any(p.suffix == ".png" and p.read_bytes()[:4] == b"\x89PNG" for p in result.artifacts)
    assert [c.name for c in of_type(events, ToolCall)] == ["get_daily_weather"]
    assert stored(tmp_path, result.run_id).backend == "docker"


@pytest.mark.docker
def test_docker_chat_session_and_openai_model(
    tmp_path: Path, openai_server: OpenAITestServer, docker_backend: None
) -> None:
    openai_server.plan_text(py("import secrets\ntoken = secrets.token_hex(4)\nprint(len(token))"))
    openai_server.plan_text("Stored a token.")
    openai_server.plan_text(py("final_answer(len(token) * 2)"))
    agent = make_agent(tmp_path, openai_model(openai_server), sandbox="docker")
    with agent.session() as chat:
        first = chat.send("Make a token")
        second = chat.send("Twice its length?")
    assert first.status == "success" and first.steps[0].observation.strip() == "8"
    assert second.status == "success" and second.answer == 16


@pytest.mark.docker
def test_sandbox_failure_is_a_sandbox_error_event(tmp_path: Path, docker_backend: None) -> None:
    model = ScriptedModel(["never used"])
    agent = make_agent(tmp_path, model, sandbox="docker", sandbox_options={"image": "codeact-sandbox:no-such-tag"})
    events, result = collect(agent, "Anything")
    assert result.status == "error" and "no-such-tag" in result.error
    [error] = of_type(events, ErrorEvent)
    assert error.kind == "sandbox" and error.fatal
    assert model.requests == []
    assert stored(tmp_path, result.run_id).status == "error"


def test_chat_interrupt_stops_a_long_action_and_the_model_sees_it(tmp_path: Path) -> None:
    import threading

    chats: list[Any] = []

    @tool
    def started() -> None:
        """Say that the slow part begins."""
        # interrupt once the code is surely running (a timer from the start would race the sandbox's start)
        threading.Timer(0.3, chats[0].interrupt).start()

    model = ScriptedModel([
        "```python\nimport time\nprogress = 'started'\nstarted()\ntime.sleep(60)\n```",
        lambda msgs: "```python\nprint(progress)\n```" if "KeyboardInterrupt" in msgs[-1].content
        else "```python\nprint('no interrupt seen')\n```",
        "The long step was interrupted.",
    ])
    agent = make_agent(tmp_path, model, [started], execution_timeout=30)
    with agent.session() as chat:
        chats.append(chat)
        result = chat.send("do something slow")
    assert result.status == "success"
    assert "KeyboardInterrupt" in (result.steps[0].observation or "")
    assert result.steps[1].observation == "started"  # the kernel kept its state
    assert result.steps[0].sandbox_time < 10


def test_tool_call_events_arrive_while_the_action_still_runs(tmp_path: Path) -> None:
    @tool
    def ping(n: int) -> int:
        """Echo a number."""
        return n

    model = ScriptedModel([
        "```python\nping(1)\nimport time\ntime.sleep(1.5)\nprint('done')\n```",
        "All done.",
    ])
    agent = make_agent(tmp_path, model, [ping])
    seen: dict[str, float] = {}
    for event in agent.stream("ping then wait"):
        seen.setdefault(type(event).__name__, time.monotonic())
    assert seen["Observation"] - seen["ToolCall"] > 1.0  # not held back until the action ended
    assert seen["CodeAction"] <= seen["ToolCall"] <= seen["Observation"]
