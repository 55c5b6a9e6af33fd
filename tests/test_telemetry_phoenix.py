"""A real run's OpenTelemetry trace, received by Arize Phoenix (a real OTLP receiver) and read back from it.

The run is real end to end: the Docker sandbox, the OpenAI-compatible test
server (tests/openai_server.py) behind the real ``openai`` client, and the
toolbox MCP server (tests/mcp_servers) started over stdio with its own
OpenTelemetry SDK, so that the trace context the client sends in ``_meta``
shows up as the server's span in the same trace. Only the model's text is
scripted. Phoenix is the session fixture ``phoenix`` (tests/phoenix_server.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.mcp_servers.helpers import assert_no_leftovers
from tests.phoenix_server import trace_of

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.docker


#: The MCP server's process: the toolbox server with an OpenTelemetry SDK of its own, exporting to Phoenix.
MCP_SERVER_BOOT = """
import os, runpy, sys
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
provider = TracerProvider(resource=Resource.create({"service.name": "toolbox-mcp"}))
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=os.environ["PHOENIX"] + "/v1/traces")))
trace.set_tracer_provider(provider)
sys.argv = [os.environ["TOOLBOX"]]
runpy.run_path(os.environ["TOOLBOX"], run_name="__main__")
"""

#: The run, in a process of its own (a process has one global TracerProvider; the unit tests use theirs).
RUN = """
import json, os, sys
from codeact import CodeActAgent, OpenAIModel, telemetry, tool
from codeact.mcp import MCPServerConfig, MCPToolset
from tests.mcp_servers.helpers import TOOLBOX
from tests.openai_server import OpenAITestServer

@tool
def add(a: int, b: int) -> int:
    "Add two numbers."
    return a + b

telemetry.configure(endpoint=os.environ["PHOENIX"], service_name="codeact-test")
boot = MCPServerConfig("tb", command=sys.executable, args=("-c", os.environ["BOOT"]),
                       env={"PHOENIX": os.environ["PHOENIX"], "TOOLBOX": TOOLBOX, "PYTHONPATH": os.getcwd()})
with OpenAITestServer() as server, MCPToolset([boot]) as mcp_tools:
    server.plan_text("Adding first.\\n```python\\nprint(add(2, 3))\\nprint(echo('traced'))\\n```", usage=(120, 30))
    server.plan_text("```python\\nfinal_answer(add(40, 2))\\n```", usage=(200, 12))
    model = OpenAIModel("trace-test-model", base_url=server.base_url, api_key="x")
    agent = CodeActAgent(model, [add, *mcp_tools], log=False, output_dir=os.environ["OUT"], stream_model=True)
    result = agent.run("Add some numbers")
telemetry.shutdown()
print(json.dumps({"run_id": result.run_id, "status": result.status, "answer": result.answer, "error": result.error}))
"""


def _spans(base: str, run_id: str, want: int, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Every span of the trace whose invoke_agent span has ``codeact.run.id == run_id``, read from Phoenix."""
    return trace_of(base, lambda s: (s.get("attributes") or {}).get("codeact.run.id") == run_id, want, timeout)


def test_a_real_run_reaches_phoenix_as_one_trace(phoenix: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PHOENIX=phoenix, BOOT=MCP_SERVER_BOOT, OUT=str(tmp_path / "out"), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", RUN], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["status"] == "success", outcome
    assert outcome["answer"] == 42

    # run, sandbox start, 2 chats, 2 code actions, 3 tool calls, MCP client (ours and the SDK's), MCP server
    spans = _spans(phoenix, outcome["run_id"], want=12)
    by_id = {s["context"]["span_id"]: s for s in spans}
    names = sorted(s["name"] for s in spans)

    def one(name: str) -> dict[str, Any]:
        matches = [s for s in spans if s["name"] == name]
        assert len(matches) == 1, (name, names)
        return matches[0]

    def parent(span: dict[str, Any]) -> dict[str, Any]:
        return by_id[span["parent_id"]]

    run = one("invoke_agent codeact")
    assert run.get("parent_id") is None
    attrs = run["attributes"]
    assert attrs["gen_ai.operation.name"] == "invoke_agent" and attrs["codeact.run.status"] == "success"
    assert attrs["gen_ai.request.model"] == "trace-test-model" and attrs["codeact.sandbox.backend"] == "docker"
    assert attrs["gen_ai.usage.input_tokens"] == 320 and attrs["gen_ai.usage.output_tokens"] == 42
    assert parent(one("sandbox.start"))["name"] == "invoke_agent codeact"

    chats = [s for s in spans if s["name"] == "chat trace-test-model"]
    assert len(chats) == 2 and all(parent(c) is run for c in chats), names
    first = min(chats, key=lambda s: s["start_time"])["attributes"]
    assert first["gen_ai.request.model"] == "trace-test-model" and first["gen_ai.provider.name"] == "openai"
    assert first["gen_ai.usage.input_tokens"] == 120 and first["gen_ai.usage.output_tokens"] == 30
    assert list(first["gen_ai.response.finish_reasons"]) == ["stop"]
    assert 0 < first["gen_ai.response.time_to_first_chunk"] < 60
    assert first["server.address"] == "127.0.0.1"
    assert "gen_ai.input.messages" not in first  # content is recorded only when asked for

    actions = sorted((s for s in spans if s["name"] == "execute_code"), key=lambda s: s["attributes"]["codeact.step"])
    assert [a["attributes"]["codeact.step"] for a in actions] == [1, 2] and all(parent(a) is run for a in actions)
    assert actions[0]["attributes"]["codeact.code.outcome"] == "ok"
    assert actions[0]["attributes"]["codeact.output.chars"] == len("5\ntraced\n")

    tools = [s for s in spans if s["name"].startswith("execute_tool ")]
    assert sorted(t["name"] for t in tools) == ["execute_tool add", "execute_tool add", "execute_tool echo"]
    for t in tools:  # each tool call is a child of the code action that made it, parented by the host
        step = t["attributes"]["codeact.step"]
        assert parent(t) is actions[step - 1], (t["name"], step)
        assert t["attributes"]["gen_ai.tool.call.id"]
    echo = one("execute_tool echo")
    assert echo["attributes"]["gen_ai.tool.name"] == "echo"

    # Two spans are named "tools/call echo" (the MCP conventions' name): our client span under the tool call,
    # and the MCP server's, in the same trace because the server continued the context sent in _meta.
    calls = [s for s in spans if s["name"] == "tools/call echo"]
    assert len(calls) == 2, names
    mcp_call = next(s for s in calls if s.get("parent_id") == echo["context"]["span_id"])
    assert mcp_call["attributes"]["mcp.method.name"] == "tools/call"
    assert mcp_call["attributes"]["gen_ai.tool.name"] == "echo"
    assert mcp_call["attributes"]["network.transport"] == "pipe"
    sdk_send = one("MCP send tools/call echo")  # the MCP SDK's client span, which writes the context into _meta
    assert parent(sdk_send) is mcp_call
    served = next(s for s in calls if s is not mcp_call)
    assert parent(served) is sdk_send, "the MCP server did not continue the trace sent in _meta"
    assert served["attributes"]["mcp.method.name"] == "tools/call"
    assert_no_leftovers()
