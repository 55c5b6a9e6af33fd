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
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import contextvars
import inspect
import itertools
import os
import threading
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Iterator, Literal, Mapping, Sequence

from .. import telemetry
from ..errors import ApprovalDenied, ConfigError, MCPServerError, ToolDefinitionError
from ..tools import RunContext, Tool, python_name
from ._config import MCPServerConfig, load_config, parse_config
from ._connection import ServerConnection
from ._results import convert_result, extension_for, is_result_wrapper, shown_output_schema, stand_in

OnError = Literal["raise", "skip"]

#: Names the toolset's own helper functions take in the sandbox.
HELPERS = ("mcp_list_resources", "mcp_read_resource", "mcp_list_prompts", "mcp_get_prompt")
#: Names an MCP tool never gets unprefixed: the agent's own function and the helpers.
RESERVED = frozenset({"final_answer", *HELPERS})
#: Seconds closing waits for the servers to stop (the SDK bounds each stdio shutdown to a few seconds).
CLOSE_TIMEOUT = 20.0

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
        self._runtime = _Runtime()
        self._finalizer = weakref.finalize(self, self._runtime.close)
        self._artifacts = itertools.count(1)
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
        """(Re)build every tool from the connections' listings; names are assigned across servers."""
        listed = [(name, conn, t) for name, conn in self._connections.items() if conn.failure is None
                  for t in conn.tools]
        bases = [python_name(t.name) for _, _, t in listed]
        clashes = {b for b in bases if bases.count(b) > 1 or b in RESERVED or _shadows_builtin(b)}
        taken: set[str] = set(HELPERS) | {"final_answer"}
        old = {(t.toolset_key if hasattr(t, "toolset_key") else None): t for t in self._tools}
        by_server: dict[str, dict[str, Tool[..., Any]]] = {}
        tools: list[Tool[..., Any]] = []
        groups = self._group_names()
        local_taken: dict[str, set[str]] = {}  # per server: names inside its namespace tools.<group>
        for (server, conn, spec), base in zip(listed, bases, strict=True):
            name = python_name(f"{python_name(server)}_{base}" if base in clashes else base, taken)
            taken.add(name)
            local = python_name(base, local_taken.setdefault(server, set()))
            local_taken[server].add(local)
            key = (server, spec.name, name, repr(spec.input_schema), repr(spec.output_schema), spec.description,
                   repr(getattr(spec, "annotations", None)))
            tool = old.get(key)
            if tool is None:
                try:
                    tool = self._make_tool(name, conn, spec)
                except ToolDefinitionError as exc:
                    self.failures.append(MCPServerError(f"MCP server {server!r}: tool {spec.name!r} skipped: {exc}",
                                                        server=server))
                    continue
                tool.toolset_key = key  # type: ignore[attr-defined]
            tool.group, tool.local_name = groups[server], local  # the sandbox's tools.<group>.<local>
            by_server.setdefault(server, {})[name] = tool
            tools.append(tool)
        tools.extend(self._helpers())
        self._tools = tools
        self._by_server = by_server

    def _group_names(self) -> dict[str, str]:
        """Each configured server's namespace name in the sandbox (``tools.<name>``): a unique identifier."""
        out: dict[str, str] = {}
        for cfg in self.configs:
            out[cfg.name] = python_name(cfg.name, set(out.values()))
        return out

    @property
    def group_descriptions(self) -> dict[str, str]:
        """What each connected server is for, by namespace name: its ``instructions`` (may be empty)."""
        groups = self._group_names()
        return {groups[name]: (conn.instructions or "").strip() for name, conn in self._connections.items()
                if conn.failure is None and name in groups}

    def _make_tool(self, name: str, conn: ServerConnection, spec: Any) -> Tool[..., Any]:
        server, original = conn.name, spec.name
        # Decided once per tool, not per call (see _results): the SDK's {"result": x} wrapper is
        # unwrapped; without an output schema the result is the text, or its JSON parsed.
        unwrap = is_result_wrapper(spec.output_schema)
        parse_json = spec.output_schema is None and conn.config.parse_json_text
        output_schema = shown_output_schema(spec.output_schema) or (
            {"type": ["object", "array", "string"]} if parse_json else {"type": "string"})
        timeout = conn.config.timeout

        def call(arguments: dict[str, Any], context: RunContext[Any] | None) -> Any:
            return self._call(server, original, arguments, context, unwrap, parse_json, timeout)

        async def call_here(arguments: dict[str, Any], context: RunContext[Any] | None) -> Any:  # on the loop
            return await self._acall(server, original, arguments, context, unwrap, parse_json, timeout)

        description = (spec.description or "").strip()
        title = getattr(spec, "title", None)
        if not description:
            description = title or f"The {original!r} tool of MCP server {server!r} (it has no description)."
        if name != original:
            description += f"\n\n(MCP tool {original!r} of server {server!r}.)"
        if parse_json:
            description += ("\n\nReturns: a dict or list when the server answers with a JSON object or array, "
                            "else a str.")
        # The call enforces `timeout` itself (and cancels it on the server), so the Tool has none: a Tool
        # timeout would add a thread hop per call. The sandbox's own limit is set a little after ours.
        ask = self._needs_approval(conn, spec)
        tool = Tool.from_schema(name, description, spec.input_schema or {"type": "object"}, call,
                                output_schema=output_schema, requires_approval=ask)
        make_host_function = tool.host_function
        refusal = self._refusal(conn, original) if ask else ""
        loop = tool.loop = self._runtime.loop
        threaded_acall = tool.acall

        async def acall(arguments: Mapping[str, Any], context: RunContext[Any] | None = None) -> Any:
            # On the toolset's loop the call is a plain await (a sandbox call's task runs here); from
            # any other loop it crosses over as a sync call on a worker thread, as for any sync tool.
            if asyncio.get_running_loop() is not loop:
                return await threaded_acall(arguments, context)
            return await call_here(tool.validate(arguments), context)

        def guarded(invoke: Any) -> Any:
            def run(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
                try:
                    return invoke(args, kwargs)
                except ApprovalDenied as exc:  # the sandbox gets a builtin it can catch, and how to allow it
                    raise PermissionError(f"{exc} ({refusal})") from None
            return run

        def aguarded(invoke: Any) -> Any:
            async def run(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
                try:
                    return await invoke(args, kwargs)
                except ApprovalDenied as exc:
                    raise PermissionError(f"{exc} ({refusal})") from None
            return run

        def host_function(invoke: Any) -> Any:
            # An async invoke (the agent's, for a tool with a loop) runs as a task on the toolset's loop.
            if ask:
                invoke = aguarded(invoke) if inspect.iscoroutinefunction(invoke) else guarded(invoke)
            hf = make_host_function(invoke)
            hf.timeout = (timeout + 10.0) if timeout is not None else None
            return hf

        tool.acall = acall  # type: ignore[method-assign]
        tool.host_function = host_function  # type: ignore[method-assign]
        tool.toolset = self
        return tool

    def _needs_approval(self, conn: ServerConnection, spec: Any) -> bool:
        """Whether each call of ``spec`` asks first: not when allowed in the config or by the toolset's flag, nor
        when the server says the tool only reads. That annotation is the server's word, so it can only spare
        the question; nothing else in the annotations (destructiveHint false, ...) spares it."""
        if self.allow_all_tools or conn.config.allows(spec.name):
            return False
        annotations = getattr(spec, "annotations", None)
        return getattr(annotations, "read_only_hint", None) is not True

    @staticmethod
    def _refusal(conn: ServerConnection, tool: str) -> str:
        return (f"MCP tool {tool!r} of server {conn.name!r} may change things outside the sandbox, so each call "
                f"needs the user's approval; to let it run without asking, add {tool!r} to \"alwaysAllow\" in "
                f"{conn.config.where}, or start the run with --allow-mcp-tools (MCPToolset(..., allow_all_tools=True))")

    def _helpers(self) -> list[Tool[..., Any]]:
        if not hasattr(self, "_helper_tools"):
            self._helper_tools = _helper_tools(self)
        return self._helper_tools

    # ------------------------------------------------------------------ calls (from any thread)

    def _submit(self, coroutine: Any, timeout: float | None) -> Any:
        """Run ``coroutine`` on the connections' loop and wait for it (from any other thread)."""
        return self._runtime.call(coroutine, timeout)

    def _connection(self, server: str) -> ServerConnection:
        conn = self._connections.get(server)
        if conn is None:
            known = ", ".join(self._connections) or "none"
            raise MCPServerError(f"no MCP server named {server!r} is connected (connected: {known})", server=server)
        return conn

    def _call(self, server: str, tool: str, arguments: dict[str, Any], context: RunContext[Any] | None,
              unwrap: bool, parse_json: bool, timeout: float | None) -> Any:
        conn = self._offering(server, tool)
        progress = context.report_progress if context is not None else None
        with telemetry.mcp_call(server, conn.config.transport, tool):
            result = self._runtime.call(conn.call_tool(tool, arguments, timeout, progress), timeout)
        return convert_result(result, server=server, tool=tool, unwrap=unwrap, parse_json=parse_json,
                              save=self._saver(server, context))

    async def _acall(self, server: str, tool: str, arguments: dict[str, Any], context: RunContext[Any] | None,
                     unwrap: bool, parse_json: bool, timeout: float | None) -> Any:
        """:meth:`_call` on the toolset's loop itself: the same call, span and result, awaited."""
        conn = self._offering(server, tool)
        progress = context.report_progress if context is not None else None
        with telemetry.mcp_call(server, conn.config.transport, tool):
            result = await conn.call_tool(tool, arguments, timeout, progress)
        return convert_result(result, server=server, tool=tool, unwrap=unwrap, parse_json=parse_json,
                              save=self._saver(server, context))

    def _offering(self, server: str, tool: str) -> ServerConnection:
        conn = self._connection(server)
        if conn.failure is None and tool not in conn.tool_names:
            raise MCPServerError(f"MCP server {server!r} no longer offers the tool {tool!r} "
                                 f"(it now offers: {', '.join(t.name for t in conn.tools) or 'none'})", server=server)
        return conn

    def _saver(self, server: str, context: RunContext[Any] | None) -> Any:
        add = context.add_artifact if context is not None else None

        def save(data: bytes, mime: str, kind: str) -> str:
            name = f"mcp_{python_name(server)}_{next(self._artifacts)}{extension_for(mime)}"
            saved: str | None = None
            try:
                if add is not None:
                    saved = add(name, data, mime)
                elif self.artifact_dir is not None:
                    from sandbox.hostfiles import write_confined

                    saved = str(write_confined(self.artifact_dir, name, data))
            except Exception as exc:  # the stand-in says why
                return f"[{mime}, {len(data):,} bytes, not saved: {exc}]"
            return stand_in(mime, len(data), saved)

        save.server = server  # type: ignore[attr-defined]
        return save

    # ------------------------------------------------------------------ resources and prompts

    def list_resources(self, server: str | None = None) -> list[dict[str, Any]]:
        """Resources of one server (or all), as dicts: server, uri, name, description, mime_type."""
        out = []
        for conn in self._servers(server, "resources"):
            for r in self._submit(conn.list_all("resources"), conn.config.connect_timeout):
                out.append({"server": conn.name, "uri": str(r.uri), "name": r.name, "description": r.description,
                            "mime_type": r.mime_type})
        return out

    def read_resource(self, server: str, uri: str) -> Any:
        """The contents of a resource: ``str`` for text, ``bytes`` for binary (a list when there are several)."""
        import base64

        conn = self._connection(server)
        result = self._submit(conn.request(f"the resource {uri!r}", lambda c: c.read_resource(uri),
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
            for p in self._submit(conn.list_all("prompts"), conn.config.connect_timeout):
                args = [{"name": a.name, "description": a.description, "required": bool(a.required)}
                        for a in (p.arguments or [])]
                out.append({"server": conn.name, "name": p.name, "description": p.description, "arguments": args})
        return out

    def get_prompt(self, server: str, name: str, arguments: Mapping[str, str] | None = None) -> list[dict[str, str]]:
        """A prompt's messages as ``{"role", "content"}`` dicts (content as text)."""
        conn = self._connection(server)
        args = {str(k): str(v) for k, v in (arguments or {}).items()}
        result = self._submit(conn.request(f"the prompt {name!r}", lambda c: c.get_prompt(name, args),
                                           conn.config.timeout), conn.config.timeout)
        from ._results import content_text

        return [{"role": m.role, "content": content_text([m.content], self._saver(server, None))}
                for m in result.messages]

    def _servers(self, server: str | None, capability: str) -> list[ServerConnection]:
        if server is not None:
            return [self._connection(server)]
        return [c for c in self._connections.values()
                if c.failure is None and getattr(c.capabilities, capability, None) is not None]


def _shadows_builtin(name: str) -> bool:
    return not name.startswith("_") and name in vars(builtins)


def _helper_tools(toolset: MCPToolset) -> list[Tool[..., Any]]:
    def mcp_list_resources(server: str | None = None) -> list[dict[str, Any]]:
        """List the resources (files, records, documents) the MCP servers offer.

        Args:
            server: one server's name; all servers when omitted.
        """
        return toolset.list_resources(server)

    def mcp_read_resource(server: str, uri: str) -> Any:
        """Read a resource of an MCP server (also the links some tools return): str for text, bytes for binary.

        Args:
            server: the server's name.
            uri: the resource's URI.
        """
        return toolset.read_resource(server, uri)

    def mcp_list_prompts(server: str | None = None) -> list[dict[str, Any]]:
        """List the prompt templates the MCP servers offer (name, description, arguments).

        Args:
            server: one server's name; all servers when omitted.
        """
        return toolset.list_prompts(server)

    def mcp_get_prompt(server: str, name: str, arguments: dict[str, str] | None = None) -> list[dict[str, str]]:
        """Fill in an MCP prompt template; returns its messages as {"role", "content"} dicts.

        Args:
            server: the server's name.
            name: the prompt's name.
            arguments: the prompt's arguments (strings).
        """
        return toolset.get_prompt(server, name, arguments)

    tools = []
    for f in (mcp_list_resources, mcp_read_resource, mcp_list_prompts, mcp_get_prompt):
        t = Tool(f)
        t.toolset = toolset
        tools.append(t)
    return tools


class _Call:
    """One coroutine run on the loop for a caller on another thread, which waits on ``done``."""

    __slots__ = ("coroutine", "done", "task", "outcome", "cancelled")

    def __init__(self, coroutine: Any) -> None:
        self.coroutine = coroutine
        self.done = threading.Lock()
        self.done.acquire()
        self.task: asyncio.Task[Any] | None = None
        self.outcome: tuple[bool, Any] | None = None  # (ok, value or exception), set once
        self.cancelled = False


class _Runtime:
    """The toolset's event loop thread; closing it stops every connection first."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.tasks: list[asyncio.Future[Any]] = []
        self.closed = False
        self._lock = threading.Lock()
        self._answer_lock = threading.Lock()
        self._calls: set[_Call] = set()  # callers waiting now; close() answers the ones the loop left

    # A synchronous MCP tool call crosses from its thread to this loop and back, so the
    # crossing is kept to one wake-up each way and as little work as possible in between:
    # call_soon_threadsafe wakes the loop, which starts a task; the task releases the caller's
    # lock the moment the result is there, not a loop iteration later from a done-callback.
    # (run_coroutine_threadsafe with concurrent.futures takes about twice as long per call.)

    def call(self, coroutine: Any, timeout: float | None) -> Any:
        """Run ``coroutine`` on the loop and return its result (call from any thread but the loop's).

        ``coroutine`` enforces its own ``timeout``; the wait here is bounded a
        little longer only to survive a stuck loop.

        Raises:
            MCPServerError: the toolset is closed or closes during the call.
            TimeoutError: the loop did not answer within ``timeout`` + 30 s.
            Exception: whatever the coroutine raised.
        """
        loop = self.loop
        call = _Call(coroutine)
        self._calls.add(call)
        try:
            if loop is None or self.closed:
                coroutine.close()
                raise MCPServerError("the MCP connections are closed (the toolset was closed)")
            try:
                # With tracing on, the call's task runs in the caller's context: its spans (the MCP SDK's
                # client span, the trace context it sends in _meta) nest under the caller's tool call.
                loop.call_soon_threadsafe(self._start, call,
                                          context=contextvars.copy_context() if telemetry.active() else None)
            except RuntimeError:  # the loop closed in between
                coroutine.close()
                raise MCPServerError("the MCP connections are closed (the toolset was closed)") from None
            try:
                finished = call.done.acquire(timeout=-1 if timeout is None else timeout + 30.0)
            except BaseException:
                self._cancel(call)  # the caller gave up (an interrupt): stop the call on the server too
                raise
        finally:
            self._calls.discard(call)
        if not finished:
            self._cancel(call)
            raise TimeoutError("the MCP connection did not answer")
        ok, value = call.outcome  # type: ignore[misc]
        if ok:
            return value
        raise value

    def _start(self, call: _Call) -> None:  # on the loop
        if call.cancelled:
            call.coroutine.close()
            return
        call.task = asyncio.ensure_future(self._run(call))

    async def _run(self, call: _Call) -> None:  # on the loop
        try:
            value = await call.coroutine
        except asyncio.CancelledError:
            self._answer(call, (False, MCPServerError("the MCP call was stopped (the toolset was closed)")))
            raise
        except BaseException as exc:  # handed to the caller, who raises it
            self._answer(call, (False, exc))
        else:
            self._answer(call, (True, value))

    def _answer(self, call: _Call, outcome: tuple[bool, Any]) -> None:
        with self._answer_lock:
            if call.outcome is not None:
                return
            call.outcome = outcome
        call.done.release()

    def _cancel(self, call: _Call) -> None:
        call.cancelled = True
        loop = self.loop

        def cancel() -> None:
            if call.task is not None:
                call.task.cancel()

        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing runs any more
                loop.call_soon_threadsafe(cancel)

    def start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self.closed:
                raise MCPServerError("this MCP toolset was closed; create a new one")
            if self.loop is None:
                loop = asyncio.new_event_loop()
                started = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    loop.run_forever()

                self.thread = threading.Thread(target=run, name="codeact-mcp", daemon=True)
                self.thread.start()
                started.wait()
                self.loop = loop
            return self.loop

    def close(self, connections: Any = ()) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            loop, thread = self.loop, self.thread
        if loop is None or thread is None:
            return
        conns = list(connections)

        async def shutdown() -> None:
            for conn in conns:
                conn.stop()
            pending = [t for t in self.tasks if not t.done()]
            if pending:
                _, still = await asyncio.wait(pending, timeout=CLOSE_TIMEOUT)
                for task in still:  # a connection that did not stop: cancel it (the SDK kills the process)
                    task.cancel()
                if still:
                    await asyncio.wait(still, timeout=10.0)
            # Anything else still running (an open() in progress, calls) ends now, so no caller waits on a stopped loop.
            current = asyncio.current_task()
            for task in asyncio.all_tasks():
                if task is not current:
                    task.cancel()

        if thread is not threading.current_thread():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(shutdown(), loop).result(CLOSE_TIMEOUT + 15.0)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not threading.current_thread():
            thread.join(10.0)
        if not thread.is_alive():
            with contextlib.suppress(Exception):
                loop.close()
        # Callers whose call the stopped loop never finished must not wait for it.
        for call in list(self._calls):
            closed = MCPServerError("the MCP connections were closed during the call (the toolset was closed)")
            self._answer(call, (False, closed))


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
