"""The helpers every :class:`~._toolset.MCPToolset` offers beside its servers' tools: resources and prompts.

MCP servers offer more than tools: resources (files, records, documents, and
the links some tools return) and prompt templates. Four functions reach them
from the sandbox, under these names, on every server of the toolset.
"""

from __future__ import annotations

from typing import Any

from ..tools import Tool
from ._calls import ServerCalls

#: Names the toolset's own helper functions take in the sandbox.
HELPERS = ("mcp_list_resources", "mcp_read_resource", "mcp_list_prompts", "mcp_get_prompt")


def helper_tools(calls: ServerCalls, toolset: Any) -> list[Tool[..., Any]]:
    """The four helpers (:data:`HELPERS`) over the servers ``calls`` reaches, as tools of ``toolset``."""
    def mcp_list_resources(server: str | None = None) -> list[dict[str, Any]]:
        """List the resources (files, records, documents) the MCP servers offer.

        Args:
            server: one server's name; all servers when omitted.
        """
        return calls.list_resources(server)

    def mcp_read_resource(server: str, uri: str) -> Any:
        """Read a resource of an MCP server (also the links some tools return): str for text, bytes for binary.

        Args:
            server: the server's name.
            uri: the resource's URI.
        """
        return calls.read_resource(server, uri)

    def mcp_list_prompts(server: str | None = None) -> list[dict[str, Any]]:
        """List the prompt templates the MCP servers offer (name, description, arguments).

        Args:
            server: one server's name; all servers when omitted.
        """
        return calls.list_prompts(server)

    def mcp_get_prompt(server: str, name: str, arguments: dict[str, str] | None = None) -> list[dict[str, str]]:
        """Fill in an MCP prompt template; returns its messages as {"role", "content"} dicts.

        Args:
            server: the server's name.
            name: the prompt's name.
            arguments: the prompt's arguments (strings).
        """
        return calls.get_prompt(server, name, arguments)

    tools = []
    for f in (mcp_list_resources, mcp_read_resource, mcp_list_prompts, mcp_get_prompt):
        t = Tool(f)
        t.toolset = toolset
        tools.append(t)
    return tools
