"""MCP servers' tools as :class:`~codeact.tools.Tool` objects: one connection per server, opened once.

The SDK's sessions are async (anyio). An :class:`MCPToolset` runs one event
loop on a background thread for all its servers; each tool's ``Tool.loop``
is that loop. A call from sandbox code runs as a task there (the agent's
invoker is async for such a tool: the bridge hands the call straight to the
loop and the task answers the sandbox), and a synchronous call
(:meth:`Tool.call`, from any other thread) is handed to the loop and waited
for. The connections (and the credentials in their configuration) stay on
the host, and the sandbox gets ordinary function stubs.

Approval: an MCP tool may change things outside the sandbox (files, tickets,
messages), so it is a ``requires_approval`` tool and each call asks the
agent's ``approve`` callback (the chat and the web page ask the user; without
an approver the call is refused), unless

* the server annotates it ``readOnlyHint: true`` (a hint from the server: it
  lets the tool skip the question, nothing more), or
* the server's entry lists it in ``alwaysAllow`` / ``autoApprove``, or
* the toolset was opened with ``allow_all_tools=True`` (``--allow-mcp-tools``; warns).

A refused call raises :class:`PermissionError` in the sandbox, saying how to allow it.

The toolset's parts: the loop thread (:mod:`._event_loop`), the calls to the
servers (:mod:`._calls`), the tools built from their listings
(:mod:`._tool_builder`) and the resource and prompt helpers (:mod:`._helpers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Iterator, Literal, Mapping, Sequence

from ..errors import ConfigError, MCPServerError
from ..tools import Tool
from ._calls import ServerCalls
from ._config import MCPServerConfig, load_config, parse_config
from ._connection import ServerConnection
from ._event_loop import EventLoopThread
from ._helpers import helper_tools
from ._tool_builder import ToolBuilder

OnError = Literal["raise", "skip"]

ServersSpec = "str | os.PathLike[str] | Mapping[str, Any] | Sequence[MCPServerConfig | str | os.PathLike[str]]"


@dataclass(frozen=True)
class ServerStatus:
    """One configured server after :meth:`MCPToolset.open`.

    Attributes:
        name: the server's name.
        ok: it is connected.
        tools: the Python names of its tools.
        list_seconds: time to start and list its tools.
        error: why it is not connected (with its stderr tail), or None.
        protocol_version: the negotiated MCP protocol version.
    """

    name: str
    ok: bool
    tools: tuple[str, ...] = ()
    list_seconds: float = 0.0
    error: str | None = None
    protocol_version: str = ""


def resolve_servers(servers: Any) -> list[MCPServerConfig]:
    """Server configurations from a path, an ``mcpServers`` dict or a list of configs and paths."""
    if isinstance(servers, (str, os.PathLike)):
        return load_config(servers)
    if isinstance(servers, Mapping):
        return parse_config(servers)
    out: list[MCPServerConfig] = []
    for item in servers:
        if isinstance(item, MCPServerConfig):
            out.append(item)
        elif isinstance(item, (str, os.PathLike)):
            out.extend(load_config(item))
        else:
            raise ConfigError(f"not an MCP server configuration: {item!r} (give MCPServerConfig objects or paths)")
    names = [s.name for s in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"MCP server name{'s' if len(dupes) > 1 else ''} {', '.join(map(repr, dupes))} "
                          "configured twice; server names must be unique")
    return out


class MCPToolset(Sequence[Tool[..., Any]]):
    """The tools of one or more MCP servers, connected for as long as the toolset is open.

    A toolset is a sequence of :class:`~codeact.tools.Tool`: pass it (or its
    items) to ``CodeActAgent(tools=...)``. Each MCP tool becomes a function
    named after the tool (a valid identifier; prefixed with the server's name
    when two servers offer the same name), with a typed stub built from its
    schema. Calls go through the toolset's connections, opened once here, not
    per call. Four helpers come along: ``mcp_list_resources``,
    ``mcp_read_resource``, ``mcp_list_prompts`` and ``mcp_get_prompt``.

    Example::

        from codeact import CodeActAgent
        from codeact.mcp import MCPToolset

        with MCPToolset("servers.json") as tools:          # or MCPToolset([MCPServerConfig(...)])
            agent = CodeActAgent(model, tools=tools)
            agent.run("What time is it in Tokyo?")

    Args:
        servers: a path to an ``mcpServers`` JSON file, the parsed JSON, or a
            list of :class:`MCPServerConfig` (and paths).
        on_error: ``"raise"`` (default): a server that cannot start stops
            :meth:`open` with :class:`~codeact.errors.MCPServerError`;
            ``"skip"``: go on without it (see :attr:`failures`).
        artifact_dir: where images and other binary results go when a call
            is made outside an agent run (inside one they become the run's
            artifacts).
        allow_all_tools: let every tool of these servers run without asking
            (warns). By default a tool asks the agent's ``approve`` callback
            first, unless the server marks it ``readOnlyHint`` or the server's
            entry lists it in ``alwaysAllow``/``autoApprove``; without an
            approver (a script, a benchmark, ``mcp serve``'s ``run_task``) it
            is refused with a :class:`PermissionError` in the sandbox.
    """

    def __init__(self, servers: Any = (), *, on_error: OnError = "raise",
                 artifact_dir: str | os.PathLike[str] | None = None, allow_all_tools: bool = False) -> None:
        if on_error not in ("raise", "skip"):
            raise ConfigError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
        if not isinstance(allow_all_tools, bool):
            raise ConfigError(f"allow_all_tools must be True or False, not {allow_all_tools!r}")
        #: Every tool runs without asking (``allow_all_tools=True``).
        self.allow_all_tools = allow_all_tools
        if allow_all_tools:
            warnings.warn("allow_all_tools=True: every tool of these MCP servers runs without asking, including "
                          "ones that write files or send messages; list only the tools you trust in the server's "
                          "\"alwaysAllow\" instead", stacklevel=2)
        self.configs = resolve_servers(servers)
        self.on_error: OnError = on_error
        self.artifact_dir = Path(artifact_dir) if artifact_dir is not None else None
        #: Servers that could not be connected (with ``on_error="skip"``), and those that went away later.
        self.failures: list[MCPServerError] = []
        #: Increases each time the list of tools changes (a server announced a change).
        self.version = 0
        self._lock = threading.RLock()
        self._tools: list[Tool[..., Any]] = []
        self._by_server: dict[str, dict[str, Tool[..., Any]]] = {}
        self._connections: dict[str, ServerConnection] = {}
        self._runtime = EventLoopThread()
        self._finalizer = weakref.finalize(self, self._runtime.close)
        self._calls = ServerCalls(self._runtime, self._connections, self.artifact_dir)
        self._builder = ToolBuilder(self, self.configs, self._calls, self._runtime, allow_all_tools=allow_all_tools)
        self._helpers = helper_tools(self._calls, self)
        self._opened = False

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> MCPToolset:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> MCPToolset:
        """Start every server at once, list their tools, and build the tools.

        Raises:
            MCPServerError: with ``on_error="raise"``, a server did not start,
                could not be reached or failed to list its tools (all failures
                in one message, each with the server's stderr tail).
        """
        if self._opened:
            return self
        self._opened = True
        loop = self._runtime.start()
        for cfg in self.configs:
            self._connections[cfg.name] = ServerConnection(cfg, self._tools_changed)
        future = asyncio.run_coroutine_threadsafe(self._open_all(), loop)
        longest = max((c.connect_timeout for c in self.configs), default=0.0)
        try:
            failures = future.result(longest + 30.0)
        except BaseException:
            future.cancel()
            self.close()
            raise
        self.failures.extend(failures)
        if failures and self.on_error == "raise":
            self.close()
            if len(failures) == 1:
                raise failures[0]
            raise MCPServerError("\n\n".join(str(f) for f in failures))
        with self._lock:
            self._rebuild()
        return self

    async def _open_all(self) -> list[MCPServerError]:
        loop = asyncio.get_running_loop()
        readies = []
        for conn in self._connections.values():
            ready: asyncio.Future[None] = loop.create_future()
            self._runtime.tasks.append(asyncio.ensure_future(conn.run(ready)))
            readies.append((conn, ready))
        failures = []
        for conn, ready in readies:
            try:
                await ready
            except MCPServerError as exc:
                failures.append(exc)
            except Exception as exc:  # reported with the server's name
                failures.append(MCPServerError(f"MCP server {conn.name!r}: {exc}", server=conn.name))
        for failure in failures:
            self._connections.pop(failure.server, None)
        return failures

    def close(self) -> None:
        """Close every connection and stop the servers' processes (idempotent, never raises)."""
        self._runtime.close(self._connections.values())
        with self._lock:
            self._tools = []
            self._by_server = {}
            self._builder.forget()

    @property
    def closed(self) -> bool:
        return self._runtime.closed

    # ------------------------------------------------------------------ the sequence of tools

    @property
    def tools(self) -> list[Tool[..., Any]]:
        """The tools offered now (MCP tools, then the helpers)."""
        with self._lock:
            return list(self._tools)

    def __iter__(self) -> Iterator[Tool[..., Any]]:
        return iter(self.tools)

    def __len__(self) -> int:
        return len(self.tools)

    def __getitem__(self, index: Any) -> Any:
        return self.tools[index]

    def __repr__(self) -> str:
        servers = ", ".join(self._connections) or "none"
        return f"MCPToolset(servers: {servers}; {len(self)} tools)"

    def status(self) -> list[ServerStatus]:
        """Each configured server: connected or not, its tools, time to list them."""
        out = []
        failed = {f.server: f for f in self.failures}
        for cfg in self.configs:
            conn = self._connections.get(cfg.name)
            if conn is not None and conn.failure is None:
                names = tuple(self._by_server.get(cfg.name, {}))
                out.append(ServerStatus(cfg.name, True, names, conn.list_seconds, None, conn.protocol_version))
            else:
                error = conn.failure if conn is not None else failed.get(cfg.name)
                out.append(ServerStatus(cfg.name, False, error=str(error) if error else "not connected"))
        return out

    # ------------------------------------------------------------------ building tools

    def _tools_changed(self, conn: ServerConnection) -> None:
        with self._lock:
            self._rebuild()
            self.version += 1

    def _rebuild(self) -> None:
        """(Re)build every tool from the connections' listings (holding the lock)."""
        built = self._builder.build(self._connections)
        self.failures.extend(built.skipped)
        self._tools = [*built.tools, *self._helpers]
        self._by_server = built.by_server

    @property
    def group_descriptions(self) -> dict[str, str]:
        """What each connected server is for, by namespace name: its ``instructions`` (may be empty)."""
        groups = self._builder.group_names()
        return {groups[name]: (conn.instructions or "").strip() for name, conn in self._connections.items()
                if conn.failure is None and name in groups}

    # ------------------------------------------------------------------ resources and prompts

    def list_resources(self, server: str | None = None) -> list[dict[str, Any]]:
        """Resources of one server (or all), as dicts: server, uri, name, description, mime_type."""
        return self._calls.list_resources(server)

    def read_resource(self, server: str, uri: str) -> Any:
        """The contents of a resource: ``str`` for text, ``bytes`` for binary (a list when there are several)."""
        return self._calls.read_resource(server, uri)

    def list_prompts(self, server: str | None = None) -> list[dict[str, Any]]:
        """Prompts of one server (or all), as dicts: server, name, description, arguments."""
        return self._calls.list_prompts(server)

    def get_prompt(self, server: str, name: str, arguments: Mapping[str, str] | None = None) -> list[dict[str, str]]:
        """A prompt's messages as ``{"role", "content"}`` dicts (content as text)."""
        return self._calls.get_prompt(server, name, arguments)


@contextlib.asynccontextmanager
async def open_mcp_tools(servers: Any = (), *, on_error: OnError = "raise",
                         artifact_dir: str | os.PathLike[str] | None = None) -> AsyncIterator[MCPToolset]:
    """Async form of :class:`MCPToolset`: ``async with open_mcp_tools("servers.json") as tools: ...``.

    Example::

        async with open_mcp_tools({"mcpServers": {"time": {"command": "mcp-server-time"}}}) as tools:
            result = await CodeActAgent(model, tools=tools).arun("What time is it in Lima?")

    Cancelling the task while the servers start still stops them.
    """
    toolset = MCPToolset(servers, on_error=on_error, artifact_dir=artifact_dir)
    opening = asyncio.ensure_future(asyncio.to_thread(toolset.open))
    try:
        await asyncio.shield(opening)
    except BaseException:
        toolset.close()  # also ends an open still in progress; its thread then returns
        with contextlib.suppress(BaseException):
            await opening
        raise
    try:
        yield toolset
    finally:
        await asyncio.to_thread(toolset.close)
