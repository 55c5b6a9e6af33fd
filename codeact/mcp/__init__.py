"""MCP both ways: any MCP server's tools as sandbox functions, and the sandbox served over MCP.

Client: :class:`MCPToolset` (a context manager; :func:`open_mcp_tools` is its
async form) connects to the servers of an ``mcpServers`` configuration, the
JSON that Claude Desktop and Cursor use, and offers their tools as
:class:`~codeact.tools.Tool` objects for ``CodeActAgent(tools=...)``. The
connections stay on the host; the code in the sandbox calls stubs.

Example::

    from codeact import CodeActAgent
    from codeact.mcp import MCPToolset

    with MCPToolset({"mcpServers": {"time": {"command": "mcp-server-time"}}}) as tools:
        print(tools[0].python_stub())          # def get_current_time(timezone: str) -> TimeResult: ...
        CodeActAgent(model, tools=tools).run("What time is it in Tokyo and in Lima?")

Server: :func:`serve` (``codeact mcp serve``) offers a sandbox to any MCP
host: ``execute_python``, files in ``/workspace``, ``reset_session`` and,
with a model, ``run_task``. See docs/mcp.md.
"""

from __future__ import annotations

from typing import Any

from ._config import MCPServerConfig, expand_env, load_config, parse_config, parse_server_spec
from ._toolset import MCPToolset, ServerStatus, open_mcp_tools

__all__ = [
    "MCPServerConfig",
    "MCPToolset",
    "ServerStatus",
    "open_mcp_tools",
    "load_config",
    "parse_config",
    "parse_server_spec",
    "expand_env",
    "ServeOptions",
    "build_server",
    "serve",
]


def __getattr__(name: str) -> Any:  # the server side imports the sandbox and starlette: only when used
    if name in ("ServeOptions", "build_server", "serve"):
        from . import _server

        return getattr(_server, name)
    raise AttributeError(f"module 'codeact.mcp' has no attribute {name!r}")
