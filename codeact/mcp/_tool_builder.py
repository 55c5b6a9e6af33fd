"""The tools of an :class:`~._toolset.MCPToolset`, built from its servers' listings.

Each MCP tool becomes a :class:`~codeact.tools.Tool` named after the tool (a
valid identifier; prefixed with the server's name when two servers offer the
same name, or when the name is a helper's, the agent's own ``final_answer``
or a builtin's), with a typed stub built from its schema, in the namespace
``tools.<server>`` in the sandbox. A tool whose listing did not change is
kept as it was when a server announces a new list. A tool that may change
things outside the sandbox asks for approval first (see :mod:`._toolset`).
"""

from __future__ import annotations

import asyncio
import builtins
import inspect
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..errors import ApprovalDenied, MCPServerError, ToolDefinitionError
from ..tools import RunContext, Tool, python_name
from ._calls import ServerCalls
from ._config import MCPServerConfig
from ._connection import ServerConnection
from ._event_loop import EventLoopThread
from ._helpers import HELPERS
from ._results import is_result_wrapper, shown_output_schema

#: Names an MCP tool never gets unprefixed: the agent's own function and the helpers.
RESERVED = frozenset({"final_answer", *HELPERS})


class BuiltTools(NamedTuple):
    """What :meth:`ToolBuilder.build` made of the listings."""

    #: The servers' tools, in the order of the configuration and of each listing.
    tools: list[Tool[..., Any]]
    #: The same tools by server name, then by tool name.
    by_server: dict[str, dict[str, Tool[..., Any]]]
    #: Tools left out (their schema is not usable), each as the server's error.
    skipped: list[MCPServerError]


class ToolBuilder:
    """Makes the tools of a toolset's connected servers (see the module docstring).

    Args:
        toolset: the toolset the tools belong to (each tool's ``toolset``).
        configs: the configured servers, in order (their namespaces are named in this order).
        calls: where the tools' calls go.
        runtime: the loop the connections live on (each tool's ``loop``).
        allow_all_tools: no tool asks for approval.
    """

    def __init__(self, toolset: Any, configs: Sequence[MCPServerConfig], calls: ServerCalls,
                 runtime: EventLoopThread, *, allow_all_tools: bool) -> None:
        self._toolset = toolset
        self._configs = list(configs)
        self._calls = calls
        self._runtime = runtime
        self._allow_all_tools = allow_all_tools
        #: The tools of the last build by what they were made from: a tool whose listing is unchanged is kept.
        self._built: dict[tuple[Any, ...], Tool[..., Any]] = {}

    def build(self, connections: Mapping[str, ServerConnection]) -> BuiltTools:
        """(Re)build every tool from the connections' listings; names are assigned across servers."""
        listed = [(name, conn, t) for name, conn in connections.items() if conn.failure is None
                  for t in conn.tools]
        bases = [python_name(t.name) for _, _, t in listed]
        clashes = {b for b in bases if bases.count(b) > 1 or b in RESERVED or _shadows_builtin(b)}
        taken: set[str] = set(HELPERS) | {"final_answer"}
        built: dict[tuple[Any, ...], Tool[..., Any]] = {}
        by_server: dict[str, dict[str, Tool[..., Any]]] = {}
        tools: list[Tool[..., Any]] = []
        skipped: list[MCPServerError] = []
        groups = self.group_names()
        local_taken: dict[str, set[str]] = {}  # per server: names inside its namespace tools.<group>
        for (server, conn, spec), base in zip(listed, bases, strict=True):
            name = python_name(f"{python_name(server)}_{base}" if base in clashes else base, taken)
            taken.add(name)
            local = python_name(base, local_taken.setdefault(server, set()))
            local_taken[server].add(local)
            key = (server, spec.name, name, repr(spec.input_schema), repr(spec.output_schema), spec.description,
                   repr(getattr(spec, "annotations", None)))
            tool = self._built.get(key)
            if tool is None:
                try:
                    tool = self.make_tool(name, conn, spec)
                except ToolDefinitionError as exc:
                    skipped.append(MCPServerError(f"MCP server {server!r}: tool {spec.name!r} skipped: {exc}",
                                                  server=server))
                    continue
            built[key] = tool
            tool.group, tool.local_name = groups[server], local  # the sandbox's tools.<group>.<local>
            by_server.setdefault(server, {})[name] = tool
            tools.append(tool)
        self._built = built
        return BuiltTools(tools, by_server, skipped)

    def forget(self) -> None:
        """Drop the tools of the last build (the toolset closed)."""
        self._built = {}

    def group_names(self) -> dict[str, str]:
        """Each configured server's namespace name in the sandbox (``tools.<name>``): a unique identifier."""
        out: dict[str, str] = {}
        for cfg in self._configs:
            out[cfg.name] = python_name(cfg.name, set(out.values()))
        return out

    def make_tool(self, name: str, conn: ServerConnection, spec: Any) -> Tool[..., Any]:
        """The tool ``name`` for the tool ``spec`` (from ``conn``'s listing): its calls go through that server."""
        server, original = conn.name, spec.name
        # Decided once per tool, not per call (see _results): the SDK's {"result": x} wrapper is
        # unwrapped; without an output schema the result is the text, or its JSON parsed.
        unwrap = is_result_wrapper(spec.output_schema)
        parse_json = spec.output_schema is None and conn.config.parse_json_text
        output_schema = shown_output_schema(spec.output_schema) or (
            {"type": ["object", "array", "string"]} if parse_json else {"type": "string"})
        timeout = conn.config.timeout
        calls = self._calls

        def call(arguments: dict[str, Any], context: RunContext[Any] | None) -> Any:
            return calls.call(server, original, arguments, context, unwrap, parse_json, timeout)

        async def call_here(arguments: dict[str, Any], context: RunContext[Any] | None) -> Any:  # on the loop
            return await calls.acall(server, original, arguments, context, unwrap, parse_json, timeout)

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
        tool.toolset = self._toolset
        return tool

    def _needs_approval(self, conn: ServerConnection, spec: Any) -> bool:
        """Whether each call of ``spec`` asks first: not when allowed in the config or by the toolset's flag, nor
        when the server says the tool only reads. That annotation is the server's word, so it can only spare
        the question; nothing else in the annotations (destructiveHint false, ...) spares it."""
        if self._allow_all_tools or conn.config.allows(spec.name):
            return False
        annotations = getattr(spec, "annotations", None)
        return getattr(annotations, "read_only_hint", None) is not True

    @staticmethod
    def _refusal(conn: ServerConnection, tool: str) -> str:
        return (f"MCP tool {tool!r} of server {conn.name!r} may change things outside the sandbox, so each call "
                f"needs the user's approval; to let it run without asking, add {tool!r} to \"alwaysAllow\" in "
                f"{conn.config.where}, or start the run with --allow-mcp-tools (MCPToolset(..., allow_all_tools=True))")


def _shadows_builtin(name: str) -> bool:
    return not name.startswith("_") and name in vars(builtins)
