"""Calls to an :class:`~._toolset.MCPToolset`'s servers: tools, resources and prompts, from any thread.

A tool call goes to the server that offers the tool now (a server may have
dropped it since the tools were built), inside a telemetry span, with the
tool's own time limit; its result becomes Python values (:mod:`._results`),
and binary content (images, audio, files) is saved as a run artifact (or
under the toolset's ``artifact_dir`` outside a run), leaving a short
stand-in in the text.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .. import telemetry
from ..errors import MCPServerError
from ..tools import RunContext, python_name
from ._connection import ServerConnection
from ._event_loop import EventLoopThread
from ._results import content_text, convert_result, extension_for, stand_in


class ArtifactSaver:
    """Saves the binary content of one server's results; called as ``save(data, mime, kind) -> stand-in text``.

    Args:
        server: the server's name (in the files' names, and in the hints of links to its resources).
        numbers: gives each file its number (one counter per toolset).
        add: the run's ``add_artifact(name, data, mime)``, or None outside a run.
        directory: where files go outside a run (None: they are not saved, and the stand-in says so).
    """

    def __init__(self, server: str, numbers: Callable[[], int], add: Callable[[str, bytes, str], str] | None,
                 directory: Path | None) -> None:
        self.server = server
        self._numbers = numbers
        self._add = add
        self._directory = directory

    def __call__(self, data: bytes, mime: str, kind: str) -> str:
        name = f"mcp_{python_name(self.server)}_{self._numbers()}{extension_for(mime)}"
        saved: str | None = None
        try:
            if self._add is not None:
                saved = self._add(name, data, mime)
            elif self._directory is not None:
                from sandbox.hostfiles import write_confined

                saved = str(write_confined(self._directory, name, data))
        except Exception as exc:  # the stand-in says why
            return f"[{mime}, {len(data):,} bytes, not saved: {exc}]"
        return stand_in(mime, len(data), saved)


class ServerCalls:
    """The requests a toolset sends its servers (see the module docstring).

    Args:
        runtime: the loop the connections live on.
        connections: the toolset's connections by server name (the same dict: the toolset adds and drops them).
        artifact_dir: where binary results go outside a run.
    """

    def __init__(self, runtime: EventLoopThread, connections: dict[str, ServerConnection],
                 artifact_dir: Path | None) -> None:
        self._runtime = runtime
        self._connections = connections
        self._artifact_dir = artifact_dir
        self._artifact_numbers = itertools.count(1)

    def submit(self, coroutine: Any, timeout: float | None) -> Any:
        """Run ``coroutine`` on the connections' loop and wait for it (from any other thread)."""
        return self._runtime.call(coroutine, timeout)

    def connection(self, server: str) -> ServerConnection:
        """The connection to ``server``.

        Raises:
            MCPServerError: no such server is connected.
        """
        conn = self._connections.get(server)
        if conn is None:
            known = ", ".join(self._connections) or "none"
            raise MCPServerError(f"no MCP server named {server!r} is connected (connected: {known})", server=server)
        return conn

    # ------------------------------------------------------------------ tools

    def call(self, server: str, tool: str, arguments: dict[str, Any], context: RunContext[Any] | None,
             unwrap: bool, parse_json: bool, timeout: float | None) -> Any:
        """Call ``tool`` of ``server`` from any thread but the loop's; its result as Python values."""
        conn = self._offering(server, tool)
        progress = context.report_progress if context is not None else None
        with telemetry.mcp_call(server, conn.config.transport, tool):
            result = self._runtime.call(conn.call_tool(tool, arguments, timeout, progress), timeout)
        return convert_result(result, server=server, tool=tool, unwrap=unwrap, parse_json=parse_json,
                              save=self.saver(server, context))

    async def acall(self, server: str, tool: str, arguments: dict[str, Any], context: RunContext[Any] | None,
                    unwrap: bool, parse_json: bool, timeout: float | None) -> Any:
        """:meth:`call` on the toolset's loop itself: the same call, span and result, awaited."""
        conn = self._offering(server, tool)
        progress = context.report_progress if context is not None else None
        with telemetry.mcp_call(server, conn.config.transport, tool):
            result = await conn.call_tool(tool, arguments, timeout, progress)
        return convert_result(result, server=server, tool=tool, unwrap=unwrap, parse_json=parse_json,
                              save=self.saver(server, context))

    def _offering(self, server: str, tool: str) -> ServerConnection:
        conn = self.connection(server)
        if conn.failure is None and tool not in conn.tool_names:
            raise MCPServerError(f"MCP server {server!r} no longer offers the tool {tool!r} "
                                 f"(it now offers: {', '.join(t.name for t in conn.tools) or 'none'})", server=server)
        return conn

    def saver(self, server: str, context: RunContext[Any] | None) -> ArtifactSaver:
        """Saves the binary content of a result of ``server``: into the run of ``context``, else the artifact dir."""
        add = context.add_artifact if context is not None else None
        return ArtifactSaver(server, self._artifact_numbers.__next__, add, self._artifact_dir)

    # ------------------------------------------------------------------ resources and prompts

    def list_resources(self, server: str | None = None) -> list[dict[str, Any]]:
        """Resources of one server (or all), as dicts: server, uri, name, description, mime_type."""
        out = []
        for conn in self._servers(server, "resources"):
            for r in self.submit(conn.list_all("resources"), conn.config.connect_timeout):
                out.append({"server": conn.name, "uri": str(r.uri), "name": r.name, "description": r.description,
                            "mime_type": r.mime_type})
        return out

    def read_resource(self, server: str, uri: str) -> Any:
        """The contents of a resource: ``str`` for text, ``bytes`` for binary (a list when there are several)."""
        conn = self.connection(server)
        result = self.submit(conn.request(f"the resource {uri!r}", lambda c: c.read_resource(uri),
                                          conn.config.timeout), conn.config.timeout)
        values = []
        for item in result.contents:
            text = getattr(item, "text", None)
            values.append(text if text is not None else base64.b64decode(getattr(item, "blob", "") or ""))
        return values[0] if len(values) == 1 else values

    def list_prompts(self, server: str | None = None) -> list[dict[str, Any]]:
        """Prompts of one server (or all), as dicts: server, name, description, arguments."""
        out = []
        for conn in self._servers(server, "prompts"):
            for p in self.submit(conn.list_all("prompts"), conn.config.connect_timeout):
                args = [{"name": a.name, "description": a.description, "required": bool(a.required)}
                        for a in (p.arguments or [])]
                out.append({"server": conn.name, "name": p.name, "description": p.description, "arguments": args})
        return out

    def get_prompt(self, server: str, name: str, arguments: Mapping[str, str] | None = None) -> list[dict[str, str]]:
        """A prompt's messages as ``{"role", "content"}`` dicts (content as text)."""
        conn = self.connection(server)
        args = {str(k): str(v) for k, v in (arguments or {}).items()}
        result = self.submit(conn.request(f"the prompt {name!r}", lambda c: c.get_prompt(name, args),
                                          conn.config.timeout), conn.config.timeout)
        return [{"role": m.role, "content": content_text([m.content], self.saver(server, None))}
                for m in result.messages]

    def _servers(self, server: str | None, capability: str) -> list[ServerConnection]:
        if server is not None:
            return [self.connection(server)]
        return [c for c in self._connections.values()
                if c.failure is None and getattr(c.capabilities, capability, None) is not None]
