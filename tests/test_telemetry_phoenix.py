"""A real run's OpenTelemetry trace, received by Arize Phoenix (a real OTLP receiver) and read back from it.

The run is real end to end: the Docker sandbox, the OpenAI-compatible test
server (tests/openai_server.py) behind the real ``openai`` client, and the
toolbox MCP server (tests/mcp_servers) started over stdio with its own
OpenTelemetry SDK, so that the trace context the client sends in ``_meta``
shows up as the server's span in the same trace. Only the model's text is
scripted. Phoenix (``arize-phoenix``) lives in a venv of its own
(``.venv/phoenix``, made by ``scripts/dev.sh setup``: it pins versions of its
own); one Phoenix serves the whole session, on 127.0.0.1 with a temporary
working directory. Without it the tests skip, and in CI they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.mcp_servers.helpers import assert_no_leftovers, free_port

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.docker


def _phoenix_command() -> Path | None:
    given = os.environ.get("CODEACT_PHOENIX")
    candidates = [Path(given)] if given else []
    candidates += [Path(sys.prefix) / "phoenix" / "bin" / "phoenix", ROOT / ".venv" / "phoenix" / "bin" / "phoenix"]
    return next((c for c in candidates if c.is_file()), None)


def _get(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback only
        return json.loads(response.read() or b"null")


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory):
    """Phoenix on 127.0.0.1 (HTTP: UI, REST, OTLP /v1/traces); its base URL."""
    command = _phoenix_command()
    if command is None:
        message = ("arize-phoenix is not installed (scripts/dev.sh setup installs it into .venv/phoenix; "
                   "or set CODEACT_PHOENIX to its `phoenix` command)")
        if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
            pytest.fail(f"the tracing tests must run in CI: {message}", pytrace=False)
        pytest.skip(message)
    workdir = tmp_path_factory.mktemp("phoenix")
    port, grpc_port = free_port(), free_port()
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(workdir), "PHOENIX_HOST": "127.0.0.1",
           "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(grpc_port), "PHOENIX_TELEMETRY_ENABLED": "false"}
    for name in [k for k in env if k.startswith("OTEL_")]:
        env.pop(name)
    with open(workdir / "phoenix.log", "wb") as log:  # the child writes to its own copy of the descriptor
        proc = subprocess.Popen([str(command), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=workdir)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"Phoenix exited ({proc.returncode}): {(workdir / 'phoenix.log').read_text()[-2000:]}")
            try:
                urllib.request.urlopen(base + "/healthz", timeout=2).close()  # noqa: S310
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("Phoenix did not answer within 180 s")
                time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
    deadline = time.monotonic() + timeout
    found: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        spans: list[dict[str, Any]] = []
        cursor = None
        for _ in range(20):  # pages
            url = f"{base}/v1/projects/default/spans?limit=500" + (f"&cursor={cursor}" if cursor else "")
            page = _get(url)
            spans += page.get("data") or []
            cursor = page.get("next_cursor")
            if not cursor:
                break
        roots = [s for s in spans if (s.get("attributes") or {}).get("codeact.run.id") == run_id]
        if roots:
            trace_id = roots[0]["context"]["trace_id"]
            found = [s for s in spans if s["context"]["trace_id"] == trace_id]
            if len(found) >= want:
                return found
        time.sleep(1.0)
    return found


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
