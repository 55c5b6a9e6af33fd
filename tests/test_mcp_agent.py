"""MCP tools called from code running in the Docker sandbox, through the real CodeAct loop.

Only the model's text is scripted; the servers (the SDK test server, the
published mcp-server-time from PyPI and server-filesystem from npm), the
sandbox and the host-function bridge are real.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from codeact.agent import CodeActAgent
from codeact.events import Observation, ToolCall, ToolProgress
from codeact.mcp import MCPServerConfig, MCPToolset
from codeact.models import ScriptedModel
from tests.mcp_servers.helpers import NPM_PREFIX, PYTHON, TOOLBOX, assert_no_leftovers, npx_available

pytestmark = pytest.mark.docker


def code(text: str) -> str:
    return f"```python\n{text}\n```"


@pytest.fixture(autouse=True, scope="module")
def _no_leftover_servers():
    yield
    assert_no_leftovers()


def run(tools, replies, tmp_path, task="do it"):
    agent = CodeActAgent(ScriptedModel(replies), tools=tools, log=False, output_dir=tmp_path)
    events = list(agent.stream(task))
    return events, events[-1].result


def test_mcp_tools_from_sandbox_code(tmp_path):
    script = code(
        "w = weather('Oslo')\n"
        "print(type(w).__name__, w['temperature'])\n"
        "print(echo('hi'))\n"
        "print(chart())\n"
        "try:\n"
        "    fail('bad input')\n"
        "except Exception as e:\n"
        "    print('caught:', e)\n"
        "print(work(3))\n"
        "print(mcp_read_resource('tb', 'note://hello'))\n"
        "print(add_tool('fresh'))"
    )
    finish = code("print(fresh())\nfinal_answer(get_user_info(7))")
    # add_tool and the tool it adds are not read-only: listed, they run without an approver (see test_mcp_approval)
    allowed = ("add_tool", "fresh")
    with MCPToolset([MCPServerConfig("tb", command=PYTHON, args=(TOOLBOX,), always_allow=allowed)]) as tools:
        events, result = run(tools, [script, finish], tmp_path)
    assert result.ok, result.error
    first = [e for e in events if isinstance(e, Observation)][0]
    assert "dict 21.5" in first.text and "\nhi\n" in first.text
    assert "caught: " in first.text and "bad input" in first.text
    assert "did 3 steps" in first.text and "Hello from a resource." in first.text
    # the image reached the run's artifacts, the code got a stand-in
    png = [p for p in result.artifacts if p.name.startswith("mcp_tb_")]
    assert png and Path(png[0]).read_bytes().startswith(b"\x89PNG")
    assert f"saved as {png[0].name}" in first.text and png[0].name in first.artifacts
    # progress notifications became events of the run
    progress = [e for e in events if isinstance(e, ToolProgress)]
    assert [(p.name, p.progress, p.total) for p in progress] == [
        ("work", 1.0, 3.0), ("work", 2.0, 3.0), ("work", 3.0, 3.0)]
    # the tool list changed mid-run: the model was told, and the new tool works in the next step
    assert "Note: an MCP server changed its tools." in first.text and "def fresh() -> str" in first.text
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert any(c.name == "fresh" and c.result == "fresh is new" for c in calls)
    assert "Ada" in str(result.answer)


def test_json_text_results_reach_sandbox_code_as_values(tmp_path):
    """`tb` parses JSON text (the default), `raw` has "parseJsonText": false; both are the SDK's own server."""
    import psutil

    script = code(
        "import inspect\n"
        "u = tb_get_user_info(7)\n"
        "print('user', type(u).__name__, u['name'], u['id'] + 1)\n"
        "order = tb_place_order({'customer': 'Ada', 'address': {'street': '1 Main St', 'city': 'Oslo'},\n"
        "                        'items': [{'sku': 'a', 'quantity': 2}], 'payment': {'kind': 'card', 'number': '4'}})\n"
        "print('order', order['total_items'] * 10, order['city'])\n"
        "rows = tb_text_blocks(['[{\"n\": 1}, {\"n\": 2}]'])\n"
        "print('rows', sum(r['n'] for r in rows))\n"
        "print('kept', [type(tb_text_blocks([t])).__name__ for t in ['42', '\"q\"', 'null', '{bad']],\n"
        "      type(tb_text_blocks(['{\"a\": 1}', '{\"b\": 2}'])).__name__)\n"
        "raw = raw_get_user_info(7)\n"
        "print('raw', type(raw).__name__, raw.replace(chr(10), ' '))\n"
        "print('stub', inspect.signature(tb_get_user_info).return_annotation, '|', "
        "inspect.signature(raw_get_user_info).return_annotation)\n"
        "final_answer(u)"
    )
    servers = [MCPServerConfig("tb", command=PYTHON, args=(TOOLBOX,), always_allow=("place_order",)),
               MCPServerConfig("raw", command=PYTHON, args=(TOOLBOX,), parse_json_text=False)]
    with MCPToolset(servers) as tools:
        model = ScriptedModel([script])
        agent = CodeActAgent(model, tools=tools, log=False, output_dir=tmp_path, tool_disclosure="all")
        events = list(agent.stream("do it"))
    result = events[-1].result
    assert result.ok, result.error
    text = [e for e in events if isinstance(e, Observation)][0].text
    assert "user dict Ada 8" in text and "order 20 Oslo" in text and "rows 3" in text
    assert "kept ['str', 'str', 'str', 'str'] str" in text
    assert 'raw str { "id": 7, "name": "Ada" }'.replace(" ", "") in text.replace(" ", "")
    assert "stub dict[str, Any] | list[Any] | str | str" in text
    assert result.answer == {"id": 7, "name": "Ada"}
    prompt = model.requests[0][0].content
    assert "def tb_get_user_info(user_id: int) -> dict[str, Any] | list[Any] | str:" in prompt
    assert "def raw_get_user_info(user_id: int) -> str:" in prompt
    assert psutil.Process().is_running()


def test_hostile_code_sending_deep_or_huge_json_through_a_server_gets_text_back(tmp_path):
    """The attacker: code that makes a server echo JSON built to blow up the host's parser or memory."""
    import psutil

    from codeact.mcp._results import MAX_JSON_TEXT

    script = code(
        "deep = '[' * 300000 + ']' * 300000\n"
        "r = text_blocks([deep]); print('deep', type(r).__name__, len(r))\n"
        "wide = '[' + '[],' * (%d // 3) + '[]]'\n"
        "r = text_blocks([wide]); print('wide', type(r).__name__, len(r) > %d)\n"
        "nested = '{\"a\": ' * 5000 + '1' + '}' * 5000\n"
        "r = text_blocks([nested]); print('nested', type(r).__name__)\n"
        "final_answer('survived')" % (MAX_JSON_TEXT, MAX_JSON_TEXT)
    )
    rss = psutil.Process().memory_info().rss
    with MCPToolset([MCPServerConfig("tb", command=PYTHON, args=(TOOLBOX,))]) as tools:
        events, result = run(tools, [script], tmp_path)
        assert by_name_call(tools, "echo", {"text": "still here"}) == "still here"  # the connection is fine
    assert result.ok and result.answer == "survived", result.error
    text = [e for e in events if isinstance(e, Observation)][0].text
    assert "deep str 600000" in text and "wide str True" in text and "nested str" in text
    # a 4 MiB `[[],[],...]` parsed would be ~100 MB of lists on the host; it was never parsed
    assert psutil.Process().memory_info().rss - rss < 200 * 2**20


def by_name_call(tools, name, arguments):
    return {t.name: t for t in tools}[name].call(arguments)


def test_published_servers_from_sandbox_code(tmp_path):
    servers = [MCPServerConfig("time", command=str(Path(sys.executable).with_name("mcp-server-time")),
                               args=("--local-timezone", "UTC"))]
    script = "t = get_current_time('Asia/Tokyo')\nprint(t['timezone'])\n"
    if npx_available():
        (tmp_path / "data").mkdir()
        (tmp_path / "data" / "hello.txt").write_text("hello from the host")
        servers.append(MCPServerConfig("files", command="npx", cwd=str(NPM_PREFIX), env={"npm_config_offline": "true"},
                                       args=("-y", "@modelcontextprotocol/server-filesystem", str(tmp_path / "data"))))
        script += f"print(read_text_file({str(tmp_path / 'data' / 'hello.txt')!r}))\n"
    script += "final_answer('done')"
    with MCPToolset(servers) as tools:
        events, result = run(tools, [code(script)], tmp_path / "out")
    assert result.ok, result.error
    text = [e for e in events if isinstance(e, Observation)][0].text
    assert "Asia/Tokyo" in text
    if npx_available():
        assert "hello from the host" in text


def test_cli_run_with_mcp_config(tmp_path, monkeypatch, capsys):
    import json

    from codeact.cli import main

    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"tb": {"command": PYTHON, "args": [TOOLBOX]}}}))
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([code("final_answer(echo('from the cli'))")]))
    monkeypatch.setenv("CODEACT_SCRIPTED_REPLIES", str(replies))
    with pytest.raises(SystemExit) as done:
        main(["run", "task", "--mcp", str(config), "--no-log", "-o", str(tmp_path / "out"), "--json"])
    assert done.value.code == 0
    assert '"answer": "from the cli"' in capsys.readouterr().out
