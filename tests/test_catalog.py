"""The tool catalogue on the host: entries and namespaces, BM25 search, describe, tokens, disclosure.

No sandbox here (see tests/test_catalog_docker.py for the same through the real loop).
"""

from __future__ import annotations

import pytest

from codeact.catalog import (
    DEFAULT_TOOL_BUDGET,
    ToolCatalog,
    ToolSurface,
    check_disclosure,
    count_tokens,
    resolve_disclosure,
    tokenizer_name,
)
from codeact.catalog._search import SearchIndex, query_parts
from codeact.errors import CodeActError, ConfigError, ToolDefinitionError
from codeact.tools import Tool, tool


@tool(group="crm")
def find_customer(name: str) -> dict:
    """Find a customer by (part of) their name.

    Args:
        name: words of the customer's name
    """
    return {}


@tool(group="crm")
def list_invoices(customer_id: str, status: str = "open") -> list[dict]:
    """List a customer's invoices.

    Args:
        customer_id: the customer's id (from find_customer)
        status: open, paid or overdue
    """
    return []


@tool(group="weather")
def forecast(city: str, days: int = 3) -> list[dict]:
    """Weather forecast for a city."""
    return []


@tool
def convert_currency(amount: float, source: str, target: str) -> float:
    """Convert an amount of money between currencies."""
    return amount


TOOLS = [find_customer, list_invoices, forecast, convert_currency]


def test_entries_place_grouped_tools_in_namespaces_and_keep_the_rest_global() -> None:
    catalog = ToolCatalog(TOOLS, descriptions={"crm": "Customers, deals and invoices"})
    names = [e.qualified_name for e in catalog]
    assert names == ["tools.crm.find_customer", "tools.crm.list_invoices", "tools.weather.forecast",
                     "convert_currency"]
    assert catalog.resolve("crm.list_invoices").import_line == "from tools.crm import list_invoices"
    assert catalog.resolve("convert_currency").import_line == ""
    assert [(ns.path, len(ns.tools)) for ns in catalog.namespaces] == [
        ("tools.crm", 2), ("tools.weather", 1), ("(global)", 1)]
    rendered = catalog.render()
    assert "- tools.crm (2 tools): Customers, deals and invoices" in rendered
    assert "- tools.weather (1 tool): e.g. forecast" in rendered


def test_a_group_must_be_an_identifier() -> None:
    with pytest.raises(ToolDefinitionError, match="identifier"):
        tool(group="my shop")(lambda x: x)
    with pytest.raises(ToolDefinitionError, match="identifier"):
        Tool(lambda x: x, name="f", group="class")


def test_two_tools_in_one_place_are_refused() -> None:
    @tool(name="forecast", group="weather")
    def other(city: str) -> str:
        """Another forecast."""
        return city

    with pytest.raises(ToolDefinitionError, match="tools.weather.forecast"):
        ToolCatalog([forecast, other])


def test_search_ranks_by_names_descriptions_and_parameters() -> None:
    catalog = ToolCatalog(TOOLS)
    assert catalog.search("weather in Oslo")[0].qualified_name == "tools.weather.forecast"
    assert catalog.search("convert euros to dollars money")[0].name == "convert_currency"
    # a parameter's description is indexed ("overdue" is only there); stemming: invoices -> invoice
    assert catalog.search("overdue")[0].name == "list_invoices"
    assert catalog.search("invoice")[0].name == "list_invoices"
    assert catalog.search("zebra quantum") == []
    assert len(catalog.search("customer", limit=1)) == 1


def test_search_of_a_request_with_several_needs_finds_each_need() -> None:
    assert query_parts("Find the customer Acme, list their invoices and then total them.") == [
        "Find the customer Acme", "list their invoices", "total them"]
    catalog = ToolCatalog(TOOLS)
    top = [e.name for e in catalog.search("Find the customer Acme, then give the weather forecast in Oslo", limit=2)]
    assert sorted(top) == ["find_customer", "forecast"]


def test_search_input_is_bounded() -> None:
    index = SearchIndex([("a", "alpha", "first letter"), ("b", "beta", "second letter")])
    assert [i for i, _ in index.search("beta " * 10_000, limit=5)] == [1]
    assert index.search("alpha", limit=0) == []
    assert SearchIndex([]).search("anything") == []


def test_records_sent_to_the_sandbox_are_plain_data() -> None:
    record = ToolCatalog(TOOLS).search("forecast")[0].record()
    assert record == {"name": "tools.weather.forecast", "signature": "(city: str, days: int = 3) -> list[dict]",
                      "summary": "Weather forecast for a city.", "import": "from tools.weather import forecast"}


def test_describe_gives_the_full_stub_and_suggests_close_names() -> None:
    catalog = ToolCatalog(TOOLS)
    text = catalog.describe("tools.crm.list_invoices")
    assert text.startswith("# tools.crm.list_invoices  (from tools.crm import list_invoices)")
    assert "def list_invoices(customer_id: str, status: str = 'open') -> list[dict]:" in text
    assert "open, paid or overdue" in text
    assert catalog.describe("forecast") == catalog.describe("weather.forecast")
    with pytest.raises(LookupError, match="did you mean tools.crm.list_invoices"):
        catalog.describe("tools.crm.list_invoice")


def test_tokens_are_counted_with_the_bundled_cl100k_vocabulary() -> None:
    assert tokenizer_name() == "cl100k_base"
    assert count_tokens("hello world") == 2
    assert count_tokens("<|endoftext|>") > 1  # special-token text is plain text here


def test_auto_switches_to_on_demand_above_the_budget() -> None:
    stubs = ToolCatalog(TOOLS).stubs()
    tokens = count_tokens(stubs)
    assert resolve_disclosure("auto", stubs, tokens) == "all"
    assert resolve_disclosure("auto", stubs, tokens - 1) == "on_demand"
    assert resolve_disclosure("all", stubs, 0) == "all"
    assert resolve_disclosure("on_demand", stubs, 10**6) == "on_demand"
    assert ToolSurface(TOOLS, budget=tokens).mode == "all"
    assert ToolSurface(TOOLS, budget=tokens - 1).mode == "on_demand"
    assert DEFAULT_TOOL_BUDGET == 2000


def test_bad_disclosure_settings_say_what_to_give() -> None:
    with pytest.raises(ConfigError, match="'all', 'on_demand', 'auto'"):
        check_disclosure("some", 100)
    with pytest.raises(ConfigError, match="int >= 0"):
        check_disclosure("auto", -1)
    with pytest.raises(CodeActError, match="restricted"):
        ToolSurface(TOOLS, disclosure="on_demand", namespaces=False)
    assert ToolSurface(TOOLS, disclosure="auto", budget=0, namespaces=False).mode == "all"


def test_on_demand_prompt_lists_namespaces_not_stubs() -> None:
    surface = ToolSurface(TOOLS, disclosure="on_demand", descriptions={"crm": "Customers"})
    shown, extra, catalog = surface.prompt_parts(TOOLS)
    assert shown == []
    assert "def search_tools(query: str, limit: int = 10)" in extra and "def describe(tool)" in extra
    assert "4 tools are available" in catalog and "- tools.crm (2 tools): Customers" in catalog
    assert "def list_invoices" not in catalog + extra
    shown, extra, catalog = ToolSurface(TOOLS, disclosure="all").prompt_parts(TOOLS)
    assert shown == TOOLS and extra == "" and catalog == ""


def test_a_tool_named_search_tools_conflicts_only_on_demand() -> None:
    @tool
    def search_tools(query: str) -> str:
        """My own search."""
        return query

    with pytest.raises(CodeActError, match="search_tools"):
        ToolSurface([search_tools], disclosure="on_demand")
    assert ToolSurface([search_tools], disclosure="all").mode == "all"
