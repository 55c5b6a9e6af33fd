"""Thousands of tools for the price of a few: tools as a code API found on demand.

In the sandbox every grouped tool lives in a namespace: ``tools.<server>.<tool>``
for an MCP server's tools, ``tools.<group>.<tool>`` for Python tools given a
``group`` (``@tool(group="shop")``); ungrouped tools stay global. Every
session also has ``search_tools(query, limit=10)`` (BM25 over names,
descriptions and parameters, run on the host), ``describe(tool)`` and
``help(tool)``.

``CodeActAgent(tool_disclosure=...)`` chooses what the prompt carries:
``"all"`` every stub, ``"on_demand"`` only a catalogue of the namespaces and
how to search, ``"auto"`` (the default) ``all`` while the stubs fit
``tool_budget`` tokens (default 2,000; counted with the bundled
``cl100k_base`` tokenizer) and ``on_demand`` above it.

Example::

    from codeact.catalog import ToolCatalog, count_tokens

    catalog = ToolCatalog(mcp_tools, descriptions=toolset.group_descriptions)
    for entry in catalog.search("open a ticket for a customer", limit=5):
        print(entry.qualified_name, entry.signature, entry.summary)
    count_tokens(catalog.stubs())      # what `all` would put in every prompt
"""

from __future__ import annotations

from ._catalog import Namespace, ToolCatalog, ToolEntry
from ._disclosure import DEFAULT_TOOL_BUDGET, DISCLOSURES, Disclosure, check_disclosure, resolve_disclosure
from ._helpers import HELPER_NAMES, catalog_functions
from ._surface import ToolSurface
from ._search import query_parts
from ._tokens import BUNDLED_ENCODINGS, TOKENIZER, bundled_encoding, cl100k_encoding, count_tokens, tokenizer_name

__all__ = [
    "BUNDLED_ENCODINGS",
    "DEFAULT_TOOL_BUDGET",
    "DISCLOSURES",
    "Disclosure",
    "HELPER_NAMES",
    "Namespace",
    "TOKENIZER",
    "ToolCatalog",
    "ToolEntry",
    "ToolSurface",
    "bundled_encoding",
    "catalog_functions",
    "check_disclosure",
    "cl100k_encoding",
    "count_tokens",
    "query_parts",
    "resolve_disclosure",
    "tokenizer_name",
]
