"""MCPToolset against real MCP servers started here: the SDK test server over stdio, streamable HTTP
and SSE, and published servers from PyPI (mcp-server-time) and npm (server-filesystem, via npx)."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from codeact.errors import MCPServerError, MCPToolError
from codeact.mcp import MCPServerConfig, MCPToolset, open_mcp_tools
from codeact.tools import RunContext
from tests.mcp_servers.helpers import (
    NPM_PREFIX,
    PYTHON,
    TOOLBOX,
    assert_no_leftovers,
    free_port,
    npx_available,
    running,
)


def toolbox(name: str = "tb", **options: object) -> MCPServerConfig:
    return MCPServerConfig(name, command=PYTHON, args=(TOOLBOX,), **options)  # type: ignore[arg-type]


@pytest.fixture(autouse=True, scope="module")
def _no_leftover_servers():
    yield
    assert_no_leftovers()


@pytest.fixture(scope="module")
def stdio_tools(tmp_path_factory):
    with MCPToolset([toolbox()], artifact_dir=tmp_path_factory.mktemp("mcp-artifacts")) as tools:
        yield tools


@pytest.fixture(scope="module")
def http_url():
    port = free_port()
    with running([PYTHON, TOOLBOX, "http", "--port", str(port)], port):
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.fixture(scope="module")
def sse_url():
    port = free_port()
    with running([PYTHON, TOOLBOX, "sse", "--port", str(port)], port):
        yield f"http://127.0.0.1:{port}/sse"


def by_name(tools):
    return {t.name: t for t in tools}


def test_tools_become_typed_functions_with_identifier_names(stdio_tools):
    tools = by_name(stdio_tools)
    assert {"echo", "weather", "chart", "get_user_info", "place_order", "mcp_read_resource"} <= set(tools)
    assert tools["weather"].python_stub().startswith("def weather(city: str) -> Weather:")
    assert 'Weather: {"city": str, "temperature": float, "conditions": Literal' in tools["weather"].python_stub()
    assert tools["echo"].python_stub().startswith("def echo(text: str) -> str:")  # the wrapper schema is unwrapped
    assert "text: what to echo" in tools["echo"].python_stub()
    info = tools["get_user_info"].python_stub()
    assert "MCP tool 'get-user.info' of server 'tb'" in info


def test_results_structured_text_image_link_and_error(stdio_tools, tmp_path):
    tools = by_name(stdio_tools)
    assert tools["echo"].call({"text": "hi"}) == "hi"
    assert tools["shout"].call({"text": "hi"}) == "HI"
    assert tools["weather"].call({"city": "Oslo"}) == {"city": "Oslo", "temperature": 21.5, "conditions": "sunny"}
    saved = {}
    ctx = RunContext(add_artifact=lambda name, data, mime: saved.setdefault(name, (data, mime)) and name)
    text = tools["chart"].call({}, ctx)
    (name, (data, mime)), = saved.items()
    assert data.startswith(b"\x89PNG") and mime == "image/png"
    assert text == f"[image/png, {len(data)} bytes, saved as {name}]"
    assert "saved as" in tools["beep"].call({})  # outside a run: the toolset's artifact_dir
    link = tools["link"].call({})
    assert "note://hello" in link and "mcp_read_resource('tb', 'note://hello')" in link
    assert stdio_tools.read_resource("tb", "note://hello") == "Hello from a resource."
    with pytest.raises(MCPToolError, match="nope"):
        tools["fail"].call({"message": "nope"})


def test_json_text_results_arrive_parsed_and_everything_else_as_text(stdio_tools):
    tools = by_name(stdio_tools)
    blocks = tools["text_blocks"]
    # the SDK's own server sends a `-> dict` tool's value as JSON text, without structured content
    assert tools["get_user_info"].call({"user_id": 7}) == {"id": 7, "name": "Ada"}
    assert blocks.call({"texts": ['[1, {"a": [2, 3]}]']}) == [1, {"a": [2, 3]}]
    assert blocks.call({"texts": [' \n {"k": null, "f": 1.5}\n']}) == {"k": None, "f": 1.5}
    for text in ["42", '"quoted"', "true", "null", "", "  ", "hello", '{"a": 1', "[1, 2,]", "{not json}",
                 '{"a": 1} trailing', "[" + "9" * 5000 + "]"]:  # scalars, invalid JSON, a number Python refuses
        assert blocks.call({"texts": [text]}) == text
    assert blocks.call({"texts": ['{"a": 1}', '{"b": 2}']}) == '{"a": 1}\n{"b": 2}'  # two blocks: one str
    with_image = blocks.call({"texts": ['{"a": 1}'], "image": True})
    assert isinstance(with_image, str) and with_image.startswith('{"a": 1}\n[image/png, ')
    assert tools["echo"].call({"text": '{"a": 1}'}) == '{"a": 1}'  # an output schema says str: it stays str


def test_json_text_that_is_too_deep_or_too_big_stays_text(stdio_tools):
    from codeact.mcp._results import MAX_JSON_DEPTH, MAX_JSON_TEXT

    blocks = by_name(stdio_tools)["text_blocks"]
    at_limit = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert blocks.call({"texts": [at_limit]}) == eval(at_limit)  # brackets only
    for text in ["[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1),
                 '{"a": ' * (MAX_JSON_DEPTH + 1) + "1" + "}" * (MAX_JSON_DEPTH + 1),
                 "[" * 200_000 + "]" * 200_000,  # deeper than the parser's recursion limit
                 "[" + "0," * (MAX_JSON_TEXT // 2) + "0]"]:  # over the size bound
        assert blocks.call({"texts": [text]}) == text


def test_parse_json_text_off_keeps_text_and_says_so_in_the_stub():
    config = {"mcpServers": {"tb": {"command": PYTHON, "args": [TOOLBOX], "parseJsonText": False}}}
    with MCPToolset(config) as tools:
        info = by_name(tools)["get_user_info"]
        text = info.call({"user_id": 7})
        assert isinstance(text, str) and '"name": "Ada"' in text
        assert info.python_stub().startswith("def get_user_info(user_id: int) -> str:")
        assert "JSON" not in info.python_stub()


def test_stubs_say_what_a_json_text_result_becomes(stdio_tools):
    tools = by_name(stdio_tools)
    stub = tools["get_user_info"].python_stub()
    assert stub.startswith("def get_user_info(user_id: int) -> dict[str, Any] | list[Any] | str:")
    assert "Returns: a dict or list when the server answers with a JSON object or array, else a str." in stub
    assert "Returns:" not in tools["echo"].python_stub() and "Returns:" not in tools["weather"].python_stub()


def test_nested_arguments_are_validated_then_sent(stdio_tools):
    order = {"customer": "Ada", "address": {"street": "1 Main St", "city": "Oslo"},
             "items": [{"sku": "a", "quantity": 2}, {"sku": "b", "quantity": 3}],
             "payment": {"kind": "card", "number": "4"}}
    result = by_name(stdio_tools)["place_order"].call({"order": order})
    assert result == {"total_items": 5, "payment": "card", "city": "Oslo", "dry_run": True}  # JSON text, parsed
    from codeact.errors import ToolArgumentError

    with pytest.raises(ToolArgumentError, match=r"order\['items'\]\[0\]\['quantity'\]"):
        by_name(stdio_tools)["place_order"].call({"order": {**order, "items": [{"sku": "a", "quantity": 0}]}})


def test_progress_reaches_the_run_context(stdio_tools):
    seen = []
    ctx = RunContext(report_progress=lambda p, total, message: seen.append((p, total, message)))
    assert by_name(stdio_tools)["work"].call({"steps": 3}, ctx) == "did 3 steps"
    assert seen == [(1.0, 3.0, "step 1 of 3"), (2.0, 3.0, "step 2 of 3"), (3.0, 3.0, "step 3 of 3")]


def test_resources_and_prompts(stdio_tools):
    hello = [r for r in stdio_tools.list_resources() if r["uri"] == "note://hello"]
    assert hello and hello[0]["server"] == "tb" and hello[0]["mime_type"] == "text/plain"
    prompts = stdio_tools.list_prompts("tb")
    assert prompts[0]["name"] == "review" and prompts[0]["arguments"][0]["name"] == "code"
    messages = stdio_tools.get_prompt("tb", "review", {"code": "x = 1"})
    assert messages[0]["role"] == "user" and "x = 1" in messages[0]["content"]


def test_a_server_that_changes_its_tools_is_relisted():
    with MCPToolset([toolbox()]) as tools:
        version = tools.version
        assert "brand_new" not in by_name(tools)
        by_name(tools)["add_tool"].call({"name": "brand_new"})
        deadline = time.monotonic() + 10
        while tools.version == version and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tools.version > version
        assert by_name(tools)["brand_new"].call({}) == "brand_new is new"


@pytest.mark.parametrize("transport", ["http", "sse"])
def test_http_transports(transport, http_url, sse_url):
    url = http_url if transport == "http" else sse_url
    with MCPToolset({"mcpServers": {"remote": {"url": url}}}) as tools:
        assert tools.configs[0].transport == transport
        assert by_name(tools)["echo"].call({"text": transport}) == transport
        seen = []
        by_name(tools)["work"].call({"steps": 2}, RunContext(report_progress=lambda *a: seen.append(a)))
        assert len(seen) == 2


def test_collisions_get_the_server_name_as_prefix():
    with MCPToolset([toolbox("one"), toolbox("two")]) as tools:
        names = set(by_name(tools))
        assert {"one_echo", "two_echo"} <= names and "echo" not in names
        assert by_name(tools)["two_echo"].call({"text": "x"}) == "x"


def test_a_call_timing_out_is_cancelled_and_the_connection_stays_usable():
    with MCPToolset([toolbox(timeout=0.5)]) as tools:
        with pytest.raises(TimeoutError, match=r"'slow' of server 'tb' did not answer within 0.5 s"):
            by_name(tools)["slow"].call({"seconds": 5})
        assert by_name(tools)["echo"].call({"text": "still here"}) == "still here"


def test_a_server_exiting_mid_call_names_it_with_its_stderr():
    with MCPToolset([toolbox()]) as tools:
        with pytest.raises(MCPServerError) as err:
            by_name(tools)["crash"].call({})
        text = str(err.value)
        assert "MCP server 'tb'" in text and "went away during the call to 'crash'" in text
        assert "crashing on purpose" in text  # the stderr tail
        with pytest.raises(MCPServerError, match="'tb'"):
            by_name(tools)["echo"].call({"text": "x"})  # later calls fail fast with the same story


def test_a_missing_command_is_one_clear_error():
    with pytest.raises(MCPServerError) as err:
        ghost = MCPServerConfig("ghost", command="no-such-mcp-server-xyz", source="servers.json: mcpServers.ghost")
        MCPToolset([ghost]).open()
    text = str(err.value)
    assert "MCP server 'ghost'" in text and "'no-such-mcp-server-xyz' was not found" in text
    assert "servers.json: mcpServers.ghost" in text


def test_a_server_crashing_at_start_shows_its_stderr_and_can_be_skipped():
    broken = MCPServerConfig("broken", command=PYTHON,
                             args=("-c", "import sys; sys.stderr.write('fatal: API_KEY is not set\\n'); sys.exit(2)"))
    with pytest.raises(MCPServerError, match=r"(?s)MCP server 'broken'.*fatal: API_KEY is not set"):
        MCPToolset([broken, toolbox()]).open()
    with MCPToolset([broken, toolbox()], on_error="skip") as tools:
        assert "echo" in by_name(tools)
        assert [f.server for f in tools.failures] == ["broken"]
        status = {s.name: s for s in tools.status()}
        assert status["tb"].ok and not status["broken"].ok and "API_KEY" in (status["broken"].error or "")


def test_closing_stops_every_server_process():
    tools = MCPToolset([toolbox("a"), toolbox("b")]).open()
    pids = [by_name(tools)[f"{s}_pid"].call({}) for s in ("a", "b")]
    tools.close()
    import psutil

    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert len(MCPToolset([toolbox()])) == 0  # never opened: no tools, no process
    with pytest.raises(MCPServerError, match="closed"):
        tools._calls.submit(asyncio.sleep(0), 1)


def test_closing_during_a_call_ends_the_call_with_an_error():
    import threading

    tools = MCPToolset([toolbox()]).open()
    slow = by_name(tools)["slow"]
    outcome: list[BaseException | str] = []

    def call() -> None:
        try:
            outcome.append(slow.call({"seconds": 60}))
        except BaseException as exc:  # the test looks at it
            outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    time.sleep(0.5)  # the call is running on the server
    tools.close()
    caller.join(60)  # generous: "did not hang", not a speed check
    assert not caller.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], MCPServerError), outcome
    assert "(the toolset was closed)" in str(outcome[0])


def test_async_context_manager():
    async def main() -> str:
        async with open_mcp_tools([toolbox()]) as tools:
            return await asyncio.to_thread(by_name(tools)["echo"].call, {"text": "async"})

    assert asyncio.run(main()) == "async"


def test_cancelling_while_servers_start_leaves_no_process():
    from tests.mcp_servers.helpers import leftover_processes

    before = set(leftover_processes())

    async def main() -> None:
        task = asyncio.ensure_future(_open_forever())
        await asyncio.sleep(0.3)  # the servers are starting
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async def _open_forever() -> None:
        async with open_mcp_tools([toolbox("x"), toolbox("y")]):
            await asyncio.sleep(3600)

    asyncio.run(main())
    deadline = time.monotonic() + 10
    while set(leftover_processes()) - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not set(leftover_processes()) - before


# --------------------------------------------------------------------------- published servers


def test_published_python_server_from_pypi():
    exe = str(__import__("pathlib").Path(sys.executable).with_name("mcp-server-time"))
    with MCPToolset({"mcpServers": {"time": {"command": exe, "args": ["--local-timezone", "UTC"]}}}) as tools:
        get = by_name(tools)["get_current_time"]
        assert get.python_stub().startswith("def get_current_time(timezone: str) -> TimeResult:")
        assert get.call({"timezone": "Asia/Tokyo"})["timezone"] == "Asia/Tokyo"


@pytest.mark.skipif(not npx_available(),
                    reason="the npm servers are not installed (scripts/dev.sh setup installs them)")
def test_published_node_server_via_npx(tmp_path):
    (tmp_path / "notes.txt").write_text("from npm")
    config = {"mcpServers": {"files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem",
                                                                  str(tmp_path)],
                                       "cwd": str(NPM_PREFIX), "env": {"npm_config_offline": "true"}}}}
    with MCPToolset(config) as tools:
        read = by_name(tools)["read_text_file"] if "read_text_file" in by_name(tools) else by_name(tools)["read_file"]
        assert "from npm" in str(read.call({"path": str(tmp_path / "notes.txt")}))
