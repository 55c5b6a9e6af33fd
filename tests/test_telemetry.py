"""OpenTelemetry spans of runs, checked with the SDK's in-memory exporter (tests/test_telemetry_phoenix.py
sends a real Docker run to a real OTLP receiver), and the promise that tracing off costs no import."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra (opentelemetry-sdk) is part of the test extras")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from codeact import telemetry
from codeact.agent import CodeActAgent
from codeact.models import ScriptedModel
from codeact.tools import tool

ROOT = Path(__file__).resolve().parents[1]


def py(code: str) -> str:
    return f"```python\n{code}\n```"


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    if key == "missing":
        raise KeyError(key)
    return f"value of {key}"


def _tree(exporter: InMemorySpanExporter) -> tuple[list[Any], dict[int, Any]]:
    finished = list(exporter.get_finished_spans())
    return finished, {s.context.span_id: s for s in finished}


def _agent(tmp_path: Path, replies: list[str], **options: Any) -> CodeActAgent:
    return CodeActAgent(ScriptedModel(replies), [lookup], sandbox="restricted", log=False,
                        output_dir=tmp_path / "out", **options)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_codeact_run_is_one_trace_with_tools_under_their_code_action(spans, tmp_path):
    replies = [py("print(lookup('a'))\ntry:\n    lookup('missing')\nexcept Exception as e:\n    print('no')"),
               py("1/0"), py("final_answer(lookup('b'))")]
    result = _agent(tmp_path, replies).run("look things up")
    assert result.status == "success"
    finished, by_id = _tree(spans)
    [run] = [s for s in finished if s.name == "invoke_agent codeact"]
    assert run.parent is None and run.attributes["codeact.run.id"] == result.run_id
    assert run.attributes["codeact.run.status"] == "success" and run.attributes["gen_ai.agent.name"] == "codeact"
    assert len({s.context.trace_id for s in finished}) == 1
    chats = [s for s in finished if s.name == "chat scripted"]
    assert len(chats) == 3 and all(c.parent.span_id == run.context.span_id for c in chats)
    assert chats[0].attributes["gen_ai.operation.name"] == "chat"
    assert chats[0].attributes["gen_ai.usage.input_tokens"] > 0
    actions = sorted((s for s in finished if s.name == "execute_code"), key=lambda s: s.attributes["codeact.step"])
    assert [a.attributes["codeact.code.outcome"] for a in actions] == ["ok", "error", "ok"]
    assert actions[1].attributes["error.type"] == "ZeroDivisionError"
    tools = [s for s in finished if s.name == "execute_tool lookup"]
    assert len(tools) == 3
    for t in tools:
        assert by_id[t.parent.span_id] is actions[t.attributes["codeact.step"] - 1]
    failed = [t for t in tools if t.attributes.get("error.type")]
    assert [t.attributes["error.type"] for t in failed] == ["KeyError"]
    assert len({t.attributes["gen_ai.tool.call.id"] for t in tools}) == 3
    assert not any("gen_ai.tool.call.arguments" in t.attributes for t in tools)  # no content unless asked


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_content_is_recorded_only_when_asked_and_then_through_the_privacy_filter(spans, tmp_path, monkeypatch):
    from codeact.privacy import PrivacyFilter

    @tool
    def contact() -> dict:
        """The customer's contact."""
        return {"name": "Ann", "email": "ann@example.com"}

    monkeypatch.setattr(telemetry._tracing, "capture_content", True)
    agent = CodeActAgent(ScriptedModel([py("c = contact()\nprint(c['email'])"), "Mailed them."]), [contact],
                         sandbox="restricted", log=False, output_dir=tmp_path / "out", privacy=PrivacyFilter())
    assert agent.run("Write to the customer at bob@example.org").status == "success"
    finished, _ = _tree(spans)
    everything = repr([dict(s.attributes) for s in finished])
    assert "ann@example.com" not in everything and "bob@example.org" not in everything
    [call] = [s for s in finished if s.name == "execute_tool contact"]
    assert "<EMAIL_" in call.attributes["gen_ai.tool.call.result"]
    [run] = [s for s in finished if s.name.startswith("invoke_agent")]
    assert "<EMAIL_" in run.attributes["gen_ai.input.messages"]
    assert any("c = contact()" in s.attributes.get("codeact.code", "") for s in finished)


def test_react_runs_get_the_same_spans(spans, tmp_path):
    from codeact.react import ReActAgent

    model = ScriptedModel([ScriptedModel.tool_calls(("lookup", {"key": "a"})),
                           ScriptedModel.tool_calls(("final_answer", {"answer": "done"}))])
    result = ReActAgent(model, [lookup], log=False, output_dir=tmp_path).run("look up a")
    assert result.status == "success"
    finished, by_id = _tree(spans)
    [run] = [s for s in finished if s.name.startswith("invoke_agent ")]
    assert run.attributes["gen_ai.agent.name"] == "react-fc"
    [call] = [s for s in finished if s.name == "execute_tool lookup"]
    assert by_id[call.parent.span_id] is run
    assert call.attributes["gen_ai.tool.call.id"]  # the model's call id
    assert len([s for s in finished if s.name == "chat scripted"]) == 2


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_run_continues_the_trace_it_starts_in(spans, tmp_path):
    """A bench episode, an HTTP request or an MCP request around a run is its parent."""
    tracing = telemetry.tracing()
    with tracing.span("bench.episode demo/t1/codeact/0") as outer:
        _agent(tmp_path, ["Nothing to run."]).run("hi")
    finished, _ = _tree(spans)
    [run] = [s for s in finished if s.name == "invoke_agent codeact"]
    assert run.parent.span_id == outer.get_span_context().span_id


def test_http_requests_continue_the_callers_traceparent(spans):
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from codeact.telemetry import TraceparentMiddleware

    seen: dict[str, Any] = {}

    def work(request):
        def in_thread():  # work handed to a thread keeps the request's context (the web UI's turns do)
            from opentelemetry import trace

            seen["trace_id"] = trace.get_current_span().get_span_context().trace_id
        import contextvars

        t = threading.Thread(target=contextvars.copy_context().run, args=(in_thread,))
        t.start()
        t.join()
        return PlainTextResponse("ok")

    app = TraceparentMiddleware(Starlette(routes=[Route("/x", work)]))
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    with TestClient(app) as client:
        assert client.get("/x", headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}).text == "ok"
        client.get("/x", headers={"traceparent": "garbage"})
    finished, _ = _tree(spans)
    first, second = finished
    assert f"{first.context.trace_id:032x}" == trace_id and f"{first.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert seen["trace_id"] == second.context.trace_id  # the malformed header started a new trace
    assert second.parent is None


def test_tracing_off_imports_no_opentelemetry(tmp_path):
    """With no OTEL_* variables and no --otel, a whole run imports no OpenTelemetry module."""
    script = (
        "import warnings; warnings.simplefilter('ignore')\n"
        "from codeact import CodeActAgent, ScriptedModel, tool\n"
        "from codeact.react import ReActAgent\n"
        "@tool\ndef f(x: int) -> int:\n    'Double.'\n    return 2 * x\n"
        f"r = CodeActAgent(ScriptedModel(['```python\\nfinal_answer(f(2))\\n```']), [f], sandbox='restricted', "
        f"log=False, output_dir={str(tmp_path)!r}).run('go')\n"
        "assert r.answer == 4, r\n"
        "m = ScriptedModel([ScriptedModel.tool_calls(('f', {'x': 1})), 'done'])\n"
        f"assert ReActAgent(m, [f], log=False, output_dir={str(tmp_path)!r}).run('go').status == 'success'\n"
        "from codeact.cli import main\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert len(imported) > 50  # -X importtime did report
    assert not [line for line in imported if "opentelemetry" in line]


def test_the_environment_turns_tracing_on(tmp_path):
    assert not telemetry.enabled_by_environment({})
    assert telemetry.enabled_by_environment({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert telemetry.enabled_by_environment({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert not telemetry.enabled_by_environment({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c",
                                                 "OTEL_SDK_DISABLED": "true"})
    assert not telemetry.enabled_by_environment({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"})
    assert telemetry.capture_content_from_environment({"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"})
    assert not telemetry.capture_content_from_environment({})
    # A run in a process whose environment names the console exporter prints its spans: on, with no --otel.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="env-test")
    script = ("import warnings; warnings.simplefilter('ignore')\n"
              "from codeact import CodeActAgent, ScriptedModel, telemetry\n"
              f"CodeActAgent(ScriptedModel(['Hello.']), sandbox='restricted', log=False, output_dir={str(tmp_path)!r})"
              ".run('hi')\ntelemetry.shutdown()\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"name": "invoke_agent codeact"' in done.stdout and '"service.name": "env-test"' in done.stdout


def test_otel_flag_without_the_sdk_says_what_to_install(tmp_path):
    """``codeact --otel`` where the OpenTelemetry SDK is missing: one line that names the extra."""
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\nclass _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.startswith('opentelemetry.sdk'):\n            raise ImportError('blocked for the test')\n"
        "sys.meta_path.insert(0, _Block())\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(blocker)
    done = subprocess.run([sys.executable, "-m", "codeact.cli", "--otel", "logs"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "pip install 'codeact[otel]'" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.docker
def test_saving_and_restoring_a_session_are_spans(spans, tmp_path):
    from codeact.runlog import RunLog
    from codeact.sessions import SaveOptions

    store = tmp_path / "snaps"
    with RunLog(tmp_path / "runs.db") as log:
        first = ScriptedModel([py("x = 41\nprint(x)"), "x is set."])
        agent = CodeActAgent(first, log=log, output_dir=tmp_path / "out")
        with agent.session(save=SaveOptions(store=store)) as chat:
            chat.send("set x")
        (row,) = log.list_snapshots()
        second = ScriptedModel([py("final_answer(x + 1)")])
        agent = CodeActAgent(second, log=log, output_dir=tmp_path / "out")
        with agent.session(resume=row.id, save=SaveOptions(store=store)) as chat:
            assert chat.send("add one").answer == 42
    finished = list(spans.get_finished_spans())
    saves = [s for s in finished if s.name == "sandbox.snapshot"]
    [restore] = [s for s in finished if s.name == "sandbox.restore"]
    assert saves and saves[0].attributes["codeact.snapshot.id"] == row.id
    assert saves[0].attributes["codeact.snapshot.bytes"] > 0 and saves[0].attributes["codeact.snapshot.variables"] >= 1
    assert restore.attributes["codeact.snapshot.id"] == row.id
    assert restore.attributes["codeact.snapshot.restored_variables"] >= 1
    assert restore.attributes["codeact.snapshot.failed_variables"] == 0


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_kernel_restart_is_a_span_under_the_code_action_that_met_it(spans, tmp_path):
    """The kernel dies in step 1; step 2 runs on a fresh one: a sandbox.restart span, timed, with its reason."""
    replies = [py("import os\nos._exit(3)"), py("x = 1\nprint(x)"), py("final_answer('done')")]
    agent = CodeActAgent(ScriptedModel(replies), [lookup], sandbox="local", log=False, output_dir=tmp_path / "out")
    result = agent.run("die, then go on")
    assert result.status == "success"
    finished, by_id = _tree(spans)
    actions = sorted((s for s in finished if s.name == "execute_code"), key=lambda s: s.attributes["codeact.step"])
    [restart] = [s for s in finished if s.name == "sandbox.restart"]
    parent = by_id[restart.parent.span_id]
    assert parent is actions[1] and parent.attributes["codeact.sandbox.restarted"] is True
    assert "the kernel had stopped (KernelDied)" in restart.attributes["codeact.sandbox.restart.reason"]
    # timed where it happened: inside the action that waited for it, and taking real time (a kernel start)
    assert actions[1].start_time <= restart.start_time < restart.end_time <= actions[1].end_time
    assert restart.end_time - restart.start_time > 1_000_000  # > 1 ms


def test_restarts_are_on_the_result_of_the_run_that_follows_them(tmp_path):
    """A restart asked for between runs, and one after a death, each reach the next result once."""
    from sandbox import KernelRestart, open_sandbox

    with pytest.warns(UserWarning), open_sandbox("local", timeout=30) as sb:
        sb.restart()
        first = sb.run("1")
        assert [r.reason for r in first.restarts] == ["asked for"]
        assert isinstance(first.restarts[0], KernelRestart) and first.restarts[0].seconds > 0
        assert sb.run("2").restarts == []
        sb.run("import os\nos._exit(1)")
        after = sb.run("3")
        assert after.restarted and [r.reason for r in after.restarts] == ["the kernel had stopped (KernelDied)"]
