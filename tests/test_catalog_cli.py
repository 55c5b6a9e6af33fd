"""The command line's tool options end to end: `codeact run` against the OpenAI test server, on Docker.

--tool-disclosure, --skills-dir and --private reach the agent; the model's
requests (recorded by the server) show what it was given.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from codeact.cli import cli
from codeact.skills import SkillStore

pytestmark = pytest.mark.docker

TOOLS = '''
from codeact.tools import tool


@tool(group="crm")
def get_contact(name: str) -> dict:
    """A contact's details by name."""
    return {"name": name, "email": "grace@example.com"}
'''


def test_run_with_tools_on_demand_skills_and_privacy(tmp_path: Path, openai_server: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "crm_tools.py").write_text(TOOLS)
    skills_dir = tmp_path / "skills"
    openai_server.plan_text("```python\nprint(search_tools('contact details'))\n"
                            "from tools.crm import get_contact\nprint(get_contact('Grace'))\n"
                            "def greet(name):\n    '''Say hello.'''\n    return 'hello ' + name\n"
                            "save_skill(greet)\n```")
    openai_server.plan_text("```python\nfinal_answer('done')\n```")
    result = CliRunner().invoke(cli, [
        "run", "Find Grace", "--json", "--model", "test-model", "--base-url", openai_server.base_url,
        "--api-key", "sk-test", "--tools", "crm_tools.py:get_contact", "--tool-disclosure", "on-demand",
        "--skills-dir", str(skills_dir), "--approve-skills", "--private", "email", "--no-log"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "success"
    requests = openai_server.chat_requests
    system = requests[0].body["messages"][0]["content"]
    assert "def get_contact" not in system and "search_tools" in system and "- tools.crm (1 tool)" in system
    observation = requests[1].body["messages"][-1]["content"]
    assert "tools.crm.get_contact(name: str) -> dict" in observation
    assert "<EMAIL_1>" in observation and "grace@example.com" not in observation
    assert [s.name for s in SkillStore(skills_dir).list()] == ["greet"]


def test_a_bad_disclosure_is_one_clear_error() -> None:
    result = CliRunner().invoke(cli, ["run", "x", "--tool-disclosure", "sometimes"])
    assert result.exit_code == 2 and "sometimes" in result.output
