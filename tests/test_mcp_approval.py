"""MCP tools ask before they act: readOnlyHint runs, anything else asks the approver (refused without one)
unless the server's entry lists it in alwaysAllow/autoApprove or the toolset allows every tool.

Real servers (the SDK's toolbox, the published server-filesystem from npm), the real Docker sandbox and
the CodeAct loop; only the model's text is scripted.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from codeact.agent import ApprovalRequest, CodeActAgent
from codeact.errors import ConfigError
from codeact.events import ToolCall
from codeact.mcp import MCPServerConfig, MCPToolset, parse_config
from codeact.models import ScriptedModel
from tests.mcp_servers.helpers import NPM_PREFIX, PYTHON, TOOLBOX, assert_no_leftovers, npx_available

ORDER = {"customer": "Ada", "address": {"street": "1 Main St", "city": "Oslo"},
         "items": [{"sku": "a", "quantity": 2}], "payment": {"kind": "card", "number": "4"}}


def code(text: str) -> str:
    return f"```python\n{text}\n```"


@pytest.fixture(autouse=True, scope="module")
def _no_leftover_servers():
    yield
    assert_no_leftovers()


def toolbox(**options) -> MCPServerConfig:
    return MCPServerConfig("tb", command=PYTHON, args=(TOOLBOX,), **options)


def run(tools, script: str, tmp_path: Path, approve=None):
    agent = CodeActAgent(ScriptedModel([code(script)]), tools=tools, log=False, output_dir=tmp_path / "out",
                         approve=approve)
    events = list(agent.stream("do it"))
    return events, events[-1].result


# --------------------------------------------------------------------------- configuration


def test_always_allow_and_auto_approve_are_read_from_the_config():
    servers = parse_config({"mcpServers": {
        "a": {"command": "x", "alwaysAllow": ["write_file", "move_file"]},
        "b": {"command": "x", "autoApprove": ["create_issue"], "alwaysAllow": ["create_issue", "close"]},
        "c": {"command": "x"},
    }})
    assert [s.always_allow for s in servers] == [("write_file", "move_file"), ("create_issue", "close"), ()]
    assert servers[0].allows("write_file") and not servers[0].allows("delete")
    assert MCPServerConfig("d", command="x", always_allow=("*",)).allows("anything")
    with pytest.raises(ConfigError, match=r"mcpServers\.a\.alwaysAllow: expected a list of strings"):
        parse_config({"mcpServers": {"a": {"command": "x", "alwaysAllow": "write_file"}}})
    with pytest.raises(ConfigError, match="always_allow must be a list of tool names"):
        MCPServerConfig("e", command="x", always_allow="write_file")  # type: ignore[arg-type]


def test_which_tools_ask_follows_the_servers_read_only_hint_and_the_config():
    """The toolbox marks echo read-only, not place_order or add_tool."""
    with MCPToolset([toolbox()]) as tools:
        asks = {t.name: t.requires_approval for t in tools}
    assert asks["echo"] is False and asks["get_user_info"] is False
    assert asks["place_order"] is True and asks["add_tool"] is True and asks["crash"] is True
    with MCPToolset([toolbox(always_allow=("place_order",))]) as tools:
        asks = {t.name: t.requires_approval for t in tools}
    assert asks["place_order"] is False and asks["add_tool"] is True
    with pytest.warns(UserWarning, match="allow_all_tools=True: every tool of these MCP servers runs without asking"):
        toolset = MCPToolset([toolbox()], allow_all_tools=True)
    with toolset as tools:
        assert not any(t.requires_approval for t in tools)


# --------------------------------------------------------------------------- through the sandbox


@pytest.mark.docker
def test_a_tool_that_is_not_read_only_asks_and_a_refusal_is_a_permission_error(tmp_path):
    script = (
        "print('echo:', echo('free'))\n"
        "try:\n"
        f"    print('order:', place_order({ORDER!r})['total_items'])\n"
        "except PermissionError as e:\n"
        "    print('refused:', e)\n"
        "final_answer('ok')"
    )
    with MCPToolset([toolbox()]) as tools:
        _, refused = run(tools, script, tmp_path / "none")  # no approver: a script, a benchmark, run_task
        asked: list[ApprovalRequest] = []
        _, allowed = run(tools, script, tmp_path / "yes", approve=lambda r: asked.append(r) or True)
    text = refused.steps[0].observation
    assert "echo: free" in text  # readOnlyHint: ran without a question
    assert "refused: the user did not allow this call to place_order" in text
    assert "add 'place_order' to \"alwaysAllow\" in MCP server 'tb'" in text and "--allow-mcp-tools" in text
    assert "order: 2" in allowed.steps[0].observation
    assert [r.tool for r in asked] == ["place_order"]  # echo never asked; place_order asked once
    assert asked[0].arguments["order"]["customer"] == "Ada"


@pytest.mark.docker
@pytest.mark.skipif(not npx_available(), reason="server-filesystem from npm is not installed (scripts/dev.sh setup)")
@pytest.mark.parametrize("how", ["no approver", "denied", "alwaysAllow", "allow_all_tools"])
def test_hostile_code_cannot_write_host_files_through_the_filesystem_server_unless_allowed(tmp_path, how):
    """The attacker: model code in the Docker sandbox calls the filesystem server's write_file on a host file."""
    served = tmp_path / "served"
    served.mkdir()
    target = served / "notes.txt"
    target.write_text("original")
    entry = {"command": "npx", "cwd": str(NPM_PREFIX), "env": {"npm_config_offline": "true"},
             "args": ["-y", "@modelcontextprotocol/server-filesystem", str(served)]}
    if how == "alwaysAllow":
        entry["alwaysAllow"] = ["write_file"]
    config = {"mcpServers": {"files": entry}}
    asked: list[ApprovalRequest] = []
    approve = (lambda r: asked.append(r) or False) if how == "denied" else None
    script = (
        f"print(read_text_file({str(target)!r}))\n"  # readOnlyHint: no question
        "try:\n"
        f"    write_file({str(target)!r}, 'pwned by the model')\n"
        "    print('WROTE')\n"
        "except PermissionError as e:\n"
        "    print('PermissionError:', e)\n"
        "final_answer('done')"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        toolset = MCPToolset(config, allow_all_tools=how == "allow_all_tools")
    with toolset as tools:
        events, result = run(tools, script, tmp_path, approve=approve)
    assert result.ok, result.error
    text = result.steps[0].observation
    assert "original" in text  # the read ran
    writes = [e for e in events if isinstance(e, ToolCall) and e.name == "write_file"]
    assert len(writes) == 1
    if how in ("no approver", "denied"):
        assert target.read_text() == "original"
        assert "PermissionError: the user did not allow this call to write_file" in text
        assert "alwaysAllow" in text and "WROTE" not in text
        assert writes[0].error is not None and "ApprovalDenied" in writes[0].error
        assert [r.tool for r in asked] == (["write_file"] if how == "denied" else [])
    else:
        assert target.read_text() == "pwned by the model"
        assert "WROTE" in text and writes[0].error is None


# --------------------------------------------------------------------------- the CLI


@pytest.mark.docker
def test_cli_run_without_a_terminal_refuses_unless_allowed(tmp_path, monkeypatch, capsys):
    from codeact.cli import main

    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"tb": {"command": PYTHON, "args": [TOOLBOX]}}}))
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([code(
        "try:\n"
        f"    final_answer(place_order({ORDER!r})['total_items'])\n"
        "except PermissionError as e:\n"
        "    final_answer('refused')")]))
    monkeypatch.setenv("CODEACT_SCRIPTED_REPLIES", str(replies))

    def cli(*extra: str) -> tuple[dict, str]:
        with pytest.raises(SystemExit) as done:
            main(["run", "task", "--mcp", str(config), "--no-log", "-o", str(tmp_path / "out"), "--json", *extra])
        assert done.value.code == 0
        out, err = capsys.readouterr()
        return json.loads(out[out.index("{"):]), err

    result, err = cli()  # pytest's stdin is no terminal
    assert result["answer"] == "refused"
    assert "no terminal to ask" in err and "--allow-mcp-tools" in err
    result, err = cli("--allow-mcp-tools")
    assert result["answer"] == 2
    assert "Warning: --allow-mcp-tools: every tool of the MCP servers runs without asking" in err
