"""`codeact mcp serve`'s run_task with tool disclosure: the SDK's client over stdio, the OpenAI test server as
the model, a Docker sandbox behind it."""

from __future__ import annotations

import json

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.mcp_servers.helpers import CODEACT, assert_no_leftovers

pytestmark = pytest.mark.docker

TOOLS = '''
from codeact.tools import tool


@tool(group="shop")
def get_price(product: str) -> float:
    """The price of a product in euros."""
    return {"red shoe": 40.0}[product]
'''


def test_run_task_follows_the_servers_disclosure_and_the_calls_own(tmp_path: Path,
                                                                   openai_server: Any) -> None:
    (tmp_path / "shop_tools.py").write_text(TOOLS)
    openai_server.plan_text("```python\nprint(search_tools('price of a product', limit=1))\n```")
    openai_server.plan_text("```python\nfrom tools.shop import get_price\nfinal_answer(get_price('red shoe'))\n```")
    openai_server.plan_text("```python\nfinal_answer(get_price('red shoe'))\n```")
    params = StdioServerParameters(command=CODEACT, cwd=str(tmp_path), args=[
        "mcp", "serve", "--model", "test-model", "--base-url", openai_server.base_url, "--api-key", "sk-test",
        "--tools", "shop_tools.py:get_price", "--tool-disclosure", "on-demand"])

    async def main() -> list[str]:
        async with Client(stdio_client(params)) as client:
            first = await client.call_tool("run_task", {"task": "What does the red shoe cost?"})
            second = await client.call_tool("run_task", {"task": "Again", "tool_disclosure": "all"})
            return [first.content[0].text, second.content[0].text]

    first, second = anyio.run(main)
    assert_no_leftovers(20)
    for text in (first, second):  # run_task answers with its structured result, as JSON text too
        result = json.loads(text)
        assert result["status"] == "success" and result["answer"] == 40.0 and result["run_id"]
    requests = [r.body["messages"] for r in openai_server.chat_requests]
    on_demand, everything = requests[0][0]["content"], requests[2][0]["content"]
    assert "def get_price" not in on_demand and "- tools.shop (1 tool)" in on_demand
    assert "def get_price(product: str) -> float:" in everything
    assert "tools.shop.get_price(product: str) -> float" in requests[1][-1]["content"]
