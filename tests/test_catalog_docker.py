"""Namespaces, search_tools/describe/help and tool disclosure through the real CodeAct loop on Docker.

Only the model's text is scripted; the sandbox, the host-function bridge and
the MCP server (tests/mcp_servers/toolbox.py) are real.
"""

from __future__ import annotations

import pytest

from codeact.agent import CodeActAgent
from codeact.catalog import ToolCatalog, count_tokens
from codeact.events import Observation, ToolCall
from codeact.mcp import MCPServerConfig, MCPToolset
from codeact.models import ScriptedModel
from codeact.tools import tool
from tests.mcp_servers.helpers import PYTHON, TOOLBOX, assert_no_leftovers

pytestmark = pytest.mark.docker


def code(text: str) -> str:
    return f"```python\n{text}\n```"


@pytest.fixture(autouse=True, scope="module")
def _no_leftover_servers():
    yield
    assert_no_leftovers()


@tool(group="shop")
def find_product(query: str) -> list[str]:
    """Find products in the catalogue by words of their name."""
    return [p for p in ["red shoe", "blue hat"] if query in p]


@tool(group="shop")
def get_price(product: str) -> float:
    """The price of a product in euros.

    Args:
        product: the product's name, as find_product gives it
    """
    return {"red shoe": 40.0, "blue hat": 12.5}[product]


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


TOOLS = [find_product, get_price, add]


def run(tools, replies, tmp_path, **options):
    model = ScriptedModel(replies)
    agent = CodeActAgent(model, tools=tools, log=False, output_dir=tmp_path, **options)
    events = list(agent.stream("do it"))
    result = events[-1].result
    assert result.ok, result.error
    return model, events, result


def observations(events):
    return [e.text for e in events if isinstance(e, Observation)]


@pytest.mark.parametrize("disclosure", ["all", "on_demand"])
def test_python_tools_in_namespaces_with_search_describe_and_help(tmp_path, disclosure):
    script = code(
        "import tools.shop\n"
        "print(sorted(n for n in dir(tools.shop) if not n.startswith('_')))\n"
        "from tools.shop import get_price\n"
        "found = search_tools('price of a product', limit=1)\n"
        "print(found)\n"
        "print(type(found[0]).__name__, found[0].import_line)\n"
        "describe(get_price)\n"
        "help(tools.shop.find_product)\n"
        "print(tools.shop.get_price(tools.shop.find_product('red')[0]), add(1, 2))\n"
        "print('global find_product:', 'find_product' in globals())"
    )
    model, events, result = run(TOOLS, [script, code("final_answer('ok')")], tmp_path,
                                tool_disclosure=disclosure)
    text = observations(events)[0]
    assert "['find_product', 'get_price']" in text
    assert "tools.shop.get_price(product: str) -> float  # The price of a product in euros." in text
    assert "ToolInfo from tools.shop import get_price" in text
    # describe: the full stub with every parameter; help: the stub's docstring
    assert "# tools.shop.get_price  (from tools.shop import get_price)" in text
    assert "the product's name, as find_product gives it" in text
    assert "Help on function find_product in module tools.shop" in text
    assert "40.0 3" in text
    # a grouped tool is a global function too (as the `all` prompt's stubs show it), in either mode
    assert "global find_product: True" in text
    calls = [e.name for e in events if isinstance(e, ToolCall)]
    assert calls == ["find_product", "get_price", "add"]  # search_tools/describe are not tool calls
    system = model.requests[0][0].content
    if disclosure == "all":
        assert "def get_price(product: str) -> float:" in system and "def search_tools" not in system
    else:
        assert "def get_price" not in system and "def search_tools(query: str, limit: int = 10)" in system
        assert "- tools.shop (2 tools)" in system and "global functions (1 tool" in system


def test_searching_for_nothing_and_describing_an_unknown_tool(tmp_path):
    script = code(
        "print(search_tools('zebra quantum'))\n"
        "try:\n"
        "    describe('tools.shop.get_prise')\n"
        "except LookupError as e:\n"
        "    print('LookupError:', e)\n"
        "try:\n"
        "    search_tools(42)\n"
        "except TypeError as e:\n"
        "    print('TypeError:', e)\n"
        "print(len(search_tools('price ' * 100_000, limit=10_000)) <= 50)"
    )
    _, events, _ = run(TOOLS, [script, "done"], tmp_path, tool_disclosure="on_demand")
    text = observations(events)[0]
    assert "[] (no tool matches; try other words)" in text
    assert "LookupError:" in text and "did you mean tools.shop.get_price" in text
    assert "TypeError: search_tools(query): query must be a string" in text
    assert "True" in text


def test_auto_switches_at_the_token_budget(tmp_path):
    tokens = count_tokens(ToolCatalog(TOOLS).stubs())
    below, _, _ = run(TOOLS, ["done"], tmp_path / "a", tool_budget=tokens)
    above, _, _ = run(TOOLS, ["done"], tmp_path / "b", tool_budget=tokens - 1)
    assert "def get_price(product: str)" in below.requests[0][0].content
    prompt = above.requests[0][0].content
    assert "def get_price" not in prompt and "search_tools" in prompt and "- tools.shop (2 tools)" in prompt


def test_mcp_tools_live_in_their_servers_namespace(tmp_path):
    script = code(
        "from tools.tb import echo, get_user_info\n"
        "import tools.tb\n"
        "print('echo' in dir(tools.tb), 'get_user_info' in dir(tools.tb))\n"
        "print(echo('hi'), get_user_info(7))\n"
        "print(search_tools('information about a user', limit=3)[0].name)\n"
        "describe(echo)"
    )
    with MCPToolset([MCPServerConfig("tb", command=PYTHON, args=(TOOLBOX,))]) as tools:
        model, events, _ = run(tools, [script, "done"], tmp_path, tool_disclosure="on_demand")
    text = observations(events)[0]
    assert "True True" in text and "hi " in text and "Ada" in text
    # the server's "get-user.info" is get_user_info in its namespace, as the MCP mapping names it
    assert "tools.tb.get_user_info" in text
    assert "# tools.tb.echo  (from tools.tb import echo)" in text and "what to echo" in text
    assert "A toolbox for codeact's tests." in model.requests[0][0].content  # the server's instructions


def test_a_tool_list_change_reaches_the_next_prompt(tmp_path):
    first = code("from tools.tb import add_tool\nprint(add_tool('fresh'))")
    second = code("print(search_tools('added at run time', limit=1))\n"
                  "from tools.tb import fresh\nprint(fresh())")
    allowed = ("add_tool", "fresh")  # not read-only: listed, they run without an approver
    with MCPToolset([MCPServerConfig("tb", command=PYTHON, args=(TOOLBOX,), always_allow=allowed)]) as tools:
        before = len(list(tools))
        model, events, _ = run(tools, [first, second, "done"], tmp_path, tool_disclosure="on_demand")
    texts = observations(events)
    assert "Note: an MCP server changed its tools." in texts[0]
    assert "tools.tb.fresh()" in texts[0]
    groups = before - 4  # the four mcp_* resource/prompt helpers are global
    assert f"- tools.tb ({groups} tools)" in model.requests[0][0].content
    assert f"- tools.tb ({groups + 1} tools)" in model.requests[1][0].content  # the next prompt's catalogue
    assert "tools.tb.fresh()" in texts[1] and "fresh is new" in texts[1]
