"""One MCP server, connected through the official SDK's ``mcp.Client`` on the toolset's event loop.

A :class:`ServerConnection` lives in one long task (:meth:`run`): it opens
the transport (a stdio process, streamable HTTP or SSE), lists the tools,
reports ready, then waits until it is told to close, so the SDK's cancel
scopes are entered and left in the same task and the server process is
always stopped by the SDK's own shutdown (stdin closed, then the process
group terminated). Calls are coroutines run on the same loop from other
tasks. A stdio server's stderr goes to a temporary file whose tail names
what went wrong when the server fails to start or dies mid-call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import tempfile
import time
from typing import Any, Awaitable, Callable

from ..errors import MCPServerError
from ._config import MCPServerConfig

logger = logging.getLogger(__name__)

#: Characters of a server's stderr quoted in an error.
STDERR_TAIL = 2000
#: Pages of a listing read at most (a server that paginates forever cannot hang us).
MAX_PAGES = 100

ProgressCallback = Callable[[float, "float | None", "str | None"], None]


class ServerConnection:
    """The connection to one MCP server (state on the toolset's loop thread).

    Attributes:
        config: how to reach the server.
        tools: the server's tools as listed (``mcp_types.Tool``), refreshed on a change.
        capabilities: what the server offers (``mcp_types.ServerCapabilities``).
        protocol_version: the negotiated MCP protocol version.
        list_seconds: how long starting and listing the tools took.
        failure: why the connection is gone, once it is.
    """

    def __init__(self, config: MCPServerConfig, on_tools_changed: Callable[["ServerConnection"], None]) -> None:
        self.config = config
        self.name = config.name
        self._tools: list[Any] = []
        #: The names of :attr:`tools`, for the check each call makes.
        self.tool_names: frozenset[str] = frozenset()
        self.capabilities: Any = None
        self.protocol_version = ""
        self.server_info: Any = None
        self.instructions: str | None = None
        self.list_seconds = 0.0
        self.failure: MCPServerError | None = None
        self._on_tools_changed = on_tools_changed
        self._client: Any = None
        self._ready: asyncio.Future[None] | None = None
        self._stop: asyncio.Event | None = None
        self._stderr: Any = None
        self._refreshing: asyncio.Task[None] | None = None
        self._closing = False

    @property
    def tools(self) -> list[Any]:
        return self._tools

    @tools.setter
    def tools(self, tools: list[Any]) -> None:
        self._tools = tools
        self.tool_names = frozenset(t.name for t in tools)

    # ------------------------------------------------------------------ lifetime

    async def run(self, ready: asyncio.Future[None]) -> None:
        """Connect, list, set ``ready``, serve until :meth:`stop`; set ``ready``'s exception on failure."""
        from mcp import Client
        from mcp.types import Implementation

        from .. import __version__

        self._ready = ready
        self._stop = asyncio.Event()
        started = time.perf_counter()
        try:
            async with contextlib.AsyncExitStack() as stack:
                transport = await self._transport(stack)
                client = Client(transport, message_handler=self._on_message, cache=None,
                                client_info=Implementation(name="codeact", version=__version__))
                try:
                    async with asyncio.timeout(self.config.connect_timeout) if hasattr(asyncio, "timeout") \
                            else _no_timeout():
                        await stack.enter_async_context(client)
                        self._client = client
                        self.protocol_version = client.protocol_version
                        self.capabilities = client.server_capabilities
                        self.server_info = client.server_info
                        self.instructions = client.instructions
                        self.tools = await self._list_tools()
                except TimeoutError:
                    raise self._error(f"did not start and list its tools within {self.config.connect_timeout:g} s "
                                      "(raise \"connect_timeout\" in its configuration if it is just slow)") from None
                self.list_seconds = time.perf_counter() - started
                listener = None
                if self._wants_listen():
                    listener = asyncio.ensure_future(self._listen())
                if not ready.done():
                    ready.set_result(None)
                try:
                    await self._stop.wait()
                finally:
                    self._closing = True
                    for task in (listener, self._refreshing):
                        if task is not None:
                            task.cancel()
                            with contextlib.suppress(BaseException):
                                await task
        except BaseException as exc:
            if isinstance(exc, MCPServerError):
                failure = exc
            elif isinstance(exc, asyncio.CancelledError):
                failure = self._error("was closed")
            else:
                failure = self._describe_failure(exc, starting=not ready.done())
            if not self._closing:
                self.failure = failure
            if not ready.done():
                ready.set_exception(failure)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._client = None
            if self.failure is None and not self._closing:
                self.failure = self._error("closed the connection")
            if self._stderr is not None:
                with contextlib.suppress(Exception):
                    self._stderr.close()

    def stop(self) -> None:
        """Ask :meth:`run` to close the connection (call on the loop thread)."""
        self._closing = True
        if self._stop is not None:
            self._stop.set()

    async def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        cfg = self.config
        if cfg.transport == "stdio":
            from mcp.client.stdio import StdioServerParameters, stdio_client

            # A real file: the SDK hands it to the child process as its stderr. Not a `with`: it outlives this
            # call and the exit stack (failures quote its tail after the stack closed); run() closes it last.
            self._stderr = tempfile.TemporaryFile(  # noqa: SIM115  # closed in run()'s finally, see above
                mode="w+", encoding="utf-8", errors="replace")
            params = StdioServerParameters(command=cfg.command or "", args=list(cfg.args), env=dict(cfg.env) or None,
                                           cwd=cfg.cwd)
            return stdio_client(params, errlog=self._stderr)
        if cfg.transport == "sse":
            from mcp.client.sse import sse_client

            return sse_client(cfg.url or "", headers=dict(cfg.headers) or None, timeout=cfg.connect_timeout)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, create_mcp_http_client

        http = create_mcp_http_client(headers=dict(cfg.headers) or None,
                                      timeout=httpx2.Timeout(cfg.connect_timeout, read=MCP_DEFAULT_SSE_READ_TIMEOUT))
        await stack.enter_async_context(http)
        return streamable_http_client(cfg.url or "", http_client=http)

    # ------------------------------------------------------------------ listings

    async def _list_tools(self) -> list[Any]:
        return await self._all_pages(lambda cursor: self._client.list_tools(cursor=cursor), "tools")

    async def _all_pages(self, fetch: Callable[[str | None], Awaitable[Any]], field: str) -> list[Any]:
        items: list[Any] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await fetch(cursor)
            items.extend(getattr(page, field))
            cursor = page.next_cursor
            if not cursor:
                break
        return items

    def _wants_listen(self) -> bool:
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        tools = getattr(self.capabilities, "tools", None)
        return self.protocol_version in MODERN_PROTOCOL_VERSIONS and bool(getattr(tools, "list_changed", False))

    async def _listen(self) -> None:
        """2026-era servers announce changes on a ``subscriptions/listen`` stream."""
        try:
            async with self._client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self._schedule_refresh()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the server does not serve listen after all: no live updates
            logger.debug("MCP server %r: no change notifications (%s)", self.name, exc)

    async def _on_message(self, message: Any) -> None:
        """Handshake-era servers send ``notifications/tools/list_changed`` on the session."""
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self._schedule_refresh()

    async def _settle_refresh(self) -> None:
        """Let a tool-list change the server announced while answering reach the tool list before the answer does.

        The SDK dispatches notifications in tasks of their own, queued before the response that follows them: one
        turn of the loop runs them (a refresh starts), then the refresh is awaited, bounded by the connect timeout.
        Without this, a tool that adds tools ("add_tool") could return before the agent sees the new ones, and the
        next code action would call a name that is not there yet.
        """
        await asyncio.sleep(0)
        refreshing = self._refreshing
        if refreshing is not None and not refreshing.done():
            await asyncio.wait({refreshing}, timeout=self.config.connect_timeout)

    def _schedule_refresh(self) -> None:
        if self._closing or (self._refreshing is not None and not self._refreshing.done()):
            return
        self._refreshing = asyncio.ensure_future(self._refresh())

    async def _refresh(self) -> None:
        try:
            tools = await asyncio.wait_for(self._list_tools(), self.config.connect_timeout)
        except Exception as exc:  # keep the old list; the next change tries again
            logger.debug("MCP server %r: refreshing the tool list failed: %s", self.name, exc)
            return
        self.tools = tools
        self._on_tools_changed(self)

    # ------------------------------------------------------------------ calls

    def _require(self) -> Any:
        if self.failure is not None:
            raise self.failure
        if self._client is None:
            raise self._error("is not connected")
        return self._client

    async def call_tool(self, tool: str, arguments: dict[str, Any], timeout: float | None,
                        progress: ProgressCallback | None = None) -> Any:
        """``tools/call``; returns the SDK's ``CallToolResult``.

        Raises:
            TimeoutError: no answer within ``timeout`` seconds (the call is cancelled on the server).
            MCPServerError: the server is gone or went away during the call (with its stderr tail).
        """
        client = self._require()

        on_progress = None
        if progress is not None:
            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                with contextlib.suppress(Exception):  # a progress consumer must not break the call
                    progress(value, total, message)

        try:
            if _timeout is not None:  # no extra task per call, unlike wait_for (3.11+)
                async with _timeout(timeout):
                    result = await client.call_tool(tool, arguments, progress_callback=on_progress)
            else:
                result = await asyncio.wait_for(client.call_tool(tool, arguments, progress_callback=on_progress),
                                                timeout)
            await self._settle_refresh()
            return result
        except asyncio.TimeoutError:
            raise TimeoutError(
                f"MCP tool {tool!r} of server {self.name!r} did not answer within {timeout:g} s "
                f"(the call was cancelled; raise \"timeout\" for {self.name!r} if it needs longer)") from None
        except Exception as exc:
            raise self._call_failure(exc, f"the call to {tool!r}") from None

    async def request(self, what: str, make: Callable[[Any], Awaitable[Any]], timeout: float | None) -> Any:
        """Any other request (resources, prompts), with the same error handling as calls."""
        client = self._require()
        try:
            return await asyncio.wait_for(make(client), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"MCP server {self.name!r} did not answer {what} within {timeout:g} s") from None
        except Exception as exc:
            raise self._call_failure(exc, what) from None

    async def list_all(self, kind: str) -> list[Any]:
        """``resources`` or ``prompts`` of the server, all pages."""
        method = {"resources": "list_resources", "prompts": "list_prompts"}[kind]
        return await self.request(f"the {kind} list", lambda c: self._all_pages(
            lambda cursor: getattr(c, method)(cursor=cursor), kind), self.config.connect_timeout)

    # ------------------------------------------------------------------ errors

    def stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.flush()
            size = os.fstat(self._stderr.fileno()).st_size
            with open(os.dup(self._stderr.fileno()), "rb", closefd=True) as f:
                f.seek(max(size - STDERR_TAIL * 4, 0))
                text = f.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""
        text = text.strip()
        return text[-STDERR_TAIL:]

    def _error(self, what: str, hint: str = "") -> MCPServerError:
        tail = self.stderr_tail()
        text = f"MCP server {self.name!r} ({self.config.describe()}) {what}"
        if hint:
            text += f"; {hint}"
        if tail:
            text += f"\nits stderr ends with:\n{tail}"
        return MCPServerError(text, server=self.name, stderr=tail)

    def _describe_failure(self, exc: BaseException, *, starting: bool) -> MCPServerError:
        cfg = self.config
        leaf = _leaf(exc)
        if isinstance(leaf, FileNotFoundError) and cfg.transport == "stdio":
            return self._error(f"cannot start: the command {cfg.command!r} was not found",
                               f"check \"command\" in {cfg.where} (is it installed and on PATH?)")
        if isinstance(leaf, PermissionError) and cfg.transport == "stdio":
            return self._error(f"cannot start: permission denied running {shlex.quote(cfg.command or '')}",
                               f"check \"command\" in {cfg.where}")
        if isinstance(leaf, OSError) and cfg.transport == "stdio":
            return self._error(f"cannot start: {leaf}", f"check {cfg.where}")
        name = type(leaf).__name__
        if cfg.transport != "stdio" and ("Connect" in name or "HTTPStatus" in name or isinstance(leaf, OSError)):
            return self._error(f"cannot be reached: {_one_line(leaf)}", f"check \"url\" and \"headers\" in {cfg.where}")
        if starting:
            return self._error(f"failed while starting: {_one_line(leaf)}",
                               "it exited or does not speak MCP on its stdout" if cfg.transport == "stdio" else "")
        return self._error(f"failed: {_one_line(leaf)}")

    def _call_failure(self, exc: BaseException, what: str) -> BaseException:
        from mcp.shared.exceptions import MCPError as SdkError
        from mcp_types import CONNECTION_CLOSED

        if isinstance(exc, MCPServerError):
            return exc
        if isinstance(exc, SdkError) and exc.code != CONNECTION_CLOSED:
            return MCPServerError(f"MCP server {self.name!r} refused {what}: {exc.error.message}", server=self.name)
        if self.failure is not None and not isinstance(exc, SdkError):
            return self.failure
        if self._closing:  # we closed it (the toolset is closing), the server did nothing wrong
            return MCPServerError(f"MCP server {self.name!r}: the connection was closed during {what} "
                                  "(the toolset was closed)", server=self.name)
        failure = self._error(f"went away during {what} (it exited, crashed or closed the connection)")
        if not self._closing:
            self.failure = failure
        return failure


_timeout = getattr(asyncio, "timeout", None)  # Python 3.11+


@contextlib.asynccontextmanager
async def _no_timeout() -> Any:  # Python 3.10 has no asyncio.timeout; the caller bounds the wait
    yield


def _leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside (anyio wraps task failures in ExceptionGroups)."""
    for _ in range(20):
        inner = getattr(exc, "exceptions", None)  # an ExceptionGroup's (duck-typed: the 3.10 backport too)
        if not isinstance(inner, (list, tuple)) or not inner:
            break
        exc = inner[0]
    cause = exc.__cause__ or exc.__context__
    if isinstance(exc, (RuntimeError,)) and isinstance(cause, OSError):
        return cause
    return exc


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]
