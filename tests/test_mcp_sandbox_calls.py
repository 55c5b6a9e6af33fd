"""MCP tool calls from sandbox code run as tasks on the toolset's event loop (no worker thread in between).

The servers (tests/mcp_servers/toolbox.py), the Docker sandbox and the
bridge are real. What is checked: the call runs on the loop, its record,
errors, the server's timeout and the sandbox's, and that a timeout or an
interrupted run cancels the call on the host (nothing of it is left running).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from codeact.agent import CodeActAgent
from codeact.events import ToolCall
from codeact.mcp import MCPServerConfig, MCPToolset
from codeact.models import ScriptedModel
from sandbox import open_sandbox
from tests.mcp_servers.helpers import PYTHON, TOOLBOX, assert_no_leftovers

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


@pytest.fixture(autouse=True, scope="module")
def _no_leftover_servers():
    yield
    assert_no_leftovers()


def toolbox(**options: Any) -> MCPServerConfig:
    return MCPServerConfig("tb", command=PYTHON, args=(TOOLBOX,), **options)


def host_functions(tools: MCPToolset, *names: str) -> list[Any]:
    """The tools' host functions with an async invoke, as the agent makes them for a tool with a loop."""
    out = []
    for t in tools:
        if t.name in names:
            async def invoke(args: tuple[Any, ...], kwargs: dict[str, Any], t: Any = t) -> Any:
                return await t.acall(t.bind(args, kwargs))
            out.append(t.host_function(invoke))
    return out


def loop_tasks(tools: MCPToolset) -> list[str]:
    """The tasks on the toolset's loop now (its connections', and the calls running there)."""
    async def names() -> list[str]:
        return [t.get_coro().__qualname__ for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    return asyncio.run_coroutine_threadsafe(names(), tools._runtime.loop).result(10)


def bridge_tasks(tools: MCPToolset) -> list[str]:
    """The sandbox calls running as tasks on the toolset's loop now."""
    return [n for n in loop_tasks(tools) if "FunctionDispatcher._run_task" in n]


class DuringCall:
    """What runs on the toolset's loop 1 s into a call (then, optionally, interrupt the sandbox)."""

    def __init__(self, tools: MCPToolset, interrupt: Any = None) -> None:
        self.seen: list[str] = []

        def look() -> None:
            self.seen = loop_tasks(tools)
            if interrupt is not None:
                interrupt()

        self.timer = threading.Timer(1.0, look)
        self.timer.start()

    def __enter__(self) -> DuringCall:
        return self

    def __exit__(self, *exc: object) -> None:
        self.timer.join()


def wait_until(check: Any, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def test_agent_mcp_calls_run_on_the_toolsets_loop_with_records_and_errors(tmp_path):
    code = ("```python\nprint(echo('hi'))\ntry:\n    fail('bad input')\nexcept Exception as e:\n"
            "    print('caught:', type(e).__name__, e)\n"
            "try:\n    slow(30)\nexcept TimeoutError as e:\n    print('timed out:', e)\n"
            "print(echo('still here'))\n```")
    with MCPToolset([toolbox(timeout=0.5)]) as tools:
        assert all(t.loop is tools._runtime.loop for t in tools if t.name in ("echo", "slow"))
        workers = {t.ident for t in threading.enumerate() if t.name == "host-call"}
        agent = CodeActAgent(ScriptedModel([code, "```python\nfinal_answer('ok')\n```"]), tools=tools, log=False,
                             output_dir=tmp_path)
        events = list(agent.stream("do it"))
        result = events[-1].result
        assert result.ok, result.error
        # no host-call worker thread served these calls: each ran as a task on the loop
        assert {t.ident for t in threading.enumerate() if t.name == "host-call"} <= workers
        assert wait_until(lambda: bridge_tasks(tools) == [])
    text = result.steps[0].observation
    assert "hi\n" in text and "caught: " in text and "bad input" in text
    assert "timed out: " in text and "'slow' of server 'tb' did not answer within 0.5 s" in text
    assert "still here" in text
    calls = [(c.name, c.error.split(":")[0] if c.error else None) for c in events if isinstance(c, ToolCall)]
    assert calls[:4] == [("echo", None), ("fail", "MCPToolError"), ("slow", "TimeoutError"), ("echo", None)]


def test_sandbox_records_of_mcp_calls_on_the_loop():
    with MCPToolset([toolbox()]) as tools, \
            open_sandbox("docker", functions=host_functions(tools, "echo", "fail", "get_user_info")) as sb:
        result = sb.run("print(echo('x' * 5))\nprint(get_user_info(7)['name'])\n"
                        "try:\n    fail('no')\nexcept Exception as e:\n    print(type(e).__name__)\n"
                        "try:\n    get_user_info('not a number')\nexcept Exception as e:\n"
                        "    print(type(e).__name__)\n")
        assert result.error is None, result.error
        assert result.stdout.split() == ["xxxxx", "Ada", "ToolError", "ToolError"]
        records = [(c.name, c.args, c.kwargs, c.error.type if c.error else None) for c in result.calls]
        assert records == [("echo", ["xxxxx"], {}, None), ("get_user_info", [7], {}, None),
                           ("fail", ["no"], {}, "MCPToolError"),
                           ("get_user_info", ["not a number"], {}, "ToolArgumentError")]
        assert result.calls[0].result == "xxxxx"


def test_the_sandboxs_function_timeout_cancels_the_mcp_call_on_the_host():
    # No timeout of the server's own: the sandbox's function_timeout (1 s) is the one that fires.
    with MCPToolset([toolbox(timeout=None)]) as tools, \
            open_sandbox("docker", functions=host_functions(tools, "slow", "echo"), function_timeout=1.0) as sb:
        idle = sorted(loop_tasks(tools))
        started = time.monotonic()
        with DuringCall(tools) as during:
            result = sb.run("try:\n    slow(60)\nexcept TimeoutError as e:\n    print('timed out:', e)\n"
                            "import time; time.sleep(1.5)\nprint(echo('after'))")
        assert result.error is None, result.error
        assert "did not return within 1 s" in result.stdout and "after" in result.stdout
        assert time.monotonic() - started < 30
        assert [c.error.type if c.error else None for c in result.calls] == ["TimeoutError", None]
        assert len(bridge_tasks(tools)) == 0 and len(during.seen) > len(idle)
        # cancelled on the host, not left waiting for the server's answer
        assert wait_until(lambda: sorted(loop_tasks(tools)) == idle), (loop_tasks(tools), idle)


def test_an_interrupted_run_cancels_its_mcp_call_and_the_connection_stays_usable():
    with MCPToolset([toolbox(timeout=None)]) as tools, \
            open_sandbox("docker", functions=host_functions(tools, "slow", "echo"), function_timeout=None) as sb:
        idle = sorted(loop_tasks(tools))
        started = time.monotonic()
        with DuringCall(tools, sb.interrupt):  # a user's Ctrl-C (time in host calls is not code time)
            result = sb.run("slow(60)")
        assert result.error is not None and time.monotonic() - started < 30
        assert wait_until(lambda: sorted(loop_tasks(tools)) == idle), (loop_tasks(tools), idle)
        assert [c.error.type for c in result.calls] == ["RuntimeError"]  # the sandbox stopped waiting
        assert sb.run("print(echo('again'))").stdout == "again\n"


def test_calls_to_a_closed_toolset_are_answered_at_once():
    with MCPToolset([toolbox()]) as tools:
        functions = host_functions(tools, "echo")
    with open_sandbox("docker", functions=functions) as sb:
        result = sb.run("try:\n    echo('x')\nexcept RuntimeError as e:\n    print(e)")
        assert "its event loop is closed" in result.stdout, result.stdout


def test_spans_of_an_mcp_call_on_the_loop_nest_under_its_execute_tool(tmp_path, spans):
    exporter = spans
    with MCPToolset([toolbox()]) as tools:
        agent = CodeActAgent(ScriptedModel(["```python\nprint(echo('traced'))\n```",
                                            "```python\nfinal_answer('ok')\n```"]),
                             tools=tools, log=False, output_dir=tmp_path)
        assert agent.run("do it").ok
    spans = list(exporter.get_finished_spans())
    by_id = {s.context.span_id: s for s in spans}
    [action] = [s for s in spans if s.name == "execute_code" and s.attributes["codeact.step"] == 1]
    [tool_span] = [s for s in spans if s.name == "execute_tool echo"]
    assert tool_span.parent.span_id == action.context.span_id
    ours = [s for s in spans if s.name == "tools/call echo" and s.parent.span_id == tool_span.context.span_id]
    assert len(ours) == 1 and ours[0].attributes["mcp.method.name"] == "tools/call"
    assert len({s.context.trace_id for s in spans}) == 1
    # (the MCP SDK's own span goes to the global tracer provider, not this one: see test_telemetry_phoenix)
    assert by_id[ours[0].parent.span_id] is tool_span
