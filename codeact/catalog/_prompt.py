"""What the system prompt says about tools under on-demand disclosure, and when the tools change."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._catalog import ToolCatalog


def on_demand_section(catalog: ToolCatalog) -> str:
    """The catalogue part of the prompt: namespaces with sizes and descriptions, and how to find tools."""
    grouped = [ns for ns in catalog.namespaces if ns.group]
    example = next((e for e in catalog.entries if e.group), None)
    import_example = example.import_line if example is not None else "from tools.<namespace> import <tool>"
    return (
        f"Tools: {len(catalog)} tools are available; they are not listed here. They are grouped "
        f"(import what you need, e.g. `{import_example}`):\n"
        + catalog.render() + "\n\n"
        "Find tools with search_tools(\"what you need\") and print the results (name, signature, summary); "
        "describe(tool) or help(tool) prints one tool's full documentation. Search before you guess a name. "
        "One code action can search, import and call"
        + (f"; `dir(tools.{grouped[0].group})` lists a namespace." if grouped else ".")
    )


def change_note(catalog: ToolCatalog, added: Sequence[Any], removed: Sequence[str]) -> str:
    """The observation's note when a live source (an MCP server) changed its tools, on-demand style."""
    lines = ["Note: an MCP server changed its tools."]
    if added:
        shown = []
        for t in added[:30]:
            try:
                entry = catalog.resolve(t.name)
            except LookupError:
                continue
            comment = f"  # {entry.summary}" if entry.summary else ""
            shown.append(f"- {entry.qualified_name}{entry.signature}{comment}")
        more = f"\n- ... and {len(added) - 30} more (search_tools finds them)" if len(added) > 30 else ""
        lines.append("New or changed tools:\n" + "\n".join(shown) + more)
    if removed:
        lines.append("Removed tools (no longer callable): " + ", ".join(removed))
    return "\n".join(lines)
