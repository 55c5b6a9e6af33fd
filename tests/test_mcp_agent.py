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
    with MCPToolset([MCPServerConfig("tb", command=PYTHON, args=(TOOLBOX,))]) as tools:
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
    assert [(p.name, p.progress, p.total) for p in progress] == [("work", 1.0, 3.0), ("work", 2.0, 3.0), ("work", 3.0, 3.0)]
    # the tool list changed mid-run: the model was told, and the new tool works in the next step
    assert "Note: an MCP server changed its tools." in first.text and "def fresh() -> str" in first.text
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert any(c.name == "fresh" and c.result == "fresh is new" for c in calls)
    assert "Ada" in str(result.answer)


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
