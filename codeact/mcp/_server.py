"""``codeact mcp serve``: a sandbox for any MCP host (Claude Desktop, Cursor, IDEs, other agents).

Tools:

* ``execute_python(code)``: run code in the client session's stateful kernel;
  returns the output as the agent's observations read (stdout, stderr, the
  error, truncated the same way) and figures as MCP image content;
* ``upload_file``, ``download_file``, ``list_files``: files in the session's ``/workspace``;
* ``reset_session``: a fresh sandbox for this session;
* ``save_session`` / ``restore_session(snapshot_id)``: save the session's
  sandbox (files, variables, packages) to one snapshot file in the server's
  store, and later, from any client session, replace the sandbox with a new
  one holding a snapshot (see :mod:`sandbox.snapshot`; the host never
  unpickles it, only its validated manifest is read and reported);
* ``run_task(task, files)``: the whole CodeAct agent with the server's model
  and tools, progress notifications as it goes; offered only when a model is
  configured. It answers with the run's id, status and answer (structured
  content); ``get_run(run_id)`` and the resources ``codeact://runs/{run_id}``
  (the run log as JSON lines) and ``codeact://runs/{run_id}/artifacts/{name}``
  give the run's steps, log and artifacts afterwards (see :mod:`._runs`).
  The agent has no one to ask: MCP tools among its tools that need approval
  are refused unless allowed (see :mod:`._toolset`).

Each client session gets its own sandbox, created on its first call and
closed when the session ends (the client disconnects, the HTTP session is
deleted or expires, or its client's event stream closed and it did not come
back within ``disconnect_grace``, see :mod:`._streams`) or has been idle too long. At most ``max_sessions``
sandboxes live at once; a call beyond that fails with a clear message.

A session is a connection: a stdio pipe, an SSE stream, a streamable-HTTP
``Mcp-Session-Id``. The 2026 single-exchange HTTP wire (one POST per
request) has no session to keep a Python kernel in, so over HTTP
``server/discover`` is refused: clients in ``auto`` mode (the SDK's default)
then open a handshake session, and a tool call on that wire is refused with
a message saying so.
"""

# No `from __future__ import annotations`: the SDK reads the tools' annotations, defined in build_server.
import asyncio
import base64
import contextlib
import hmac
import logging
import mimetypes
import threading
import time
import warnings
import weakref
from urllib.parse import unquote
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Literal

from ..errors import ConfigError
from .. import telemetry
from ..observation import ObservationParts, format_observation, truncate_middle
from ._runs import RunAccessError, ServedRuns
from ._streams import LostClients

if TYPE_CHECKING:  # pragma: no cover
    from sandbox import BackendName

#: Files larger than this are not returned by download_file (bytes).
MAX_DOWNLOAD = 20 * 1024 * 1024

Transport = Literal["stdio", "http", "sse"]


@dataclass
class ServeOptions:
    """How ``codeact mcp serve`` runs its sandboxes.

    Attributes:
        backend: ``docker`` (hardened container, the default), ``local`` or
            ``restricted`` (not isolated).
        sandbox_options: options for the backend (``memory``, ``cpus``, ``network``...).
        execution_timeout: seconds one ``execute_python`` call may run.
        max_sessions: sandboxes alive at once (one per client session).
        idle_timeout: seconds a session may stay unused before its sandbox is closed.
        disconnect_grace: streamable HTTP: seconds after a client's event stream closed (the client
            went away without ending its session) before the session is ended and its sandbox
            closed, unless the client opens a stream or sends a request meanwhile (see :mod:`._streams`).
        output_limit: characters of output one call returns (head and tail kept).
        model: a :class:`~codeact.models.Model` for ``run_task`` (None: no ``run_task``).
        tools: tools the ``run_task`` agent may call.
        max_steps: model turns of one ``run_task``.
        output_dir: where ``run_task`` keeps its artifacts.
        log: the run log ``run_task`` records its runs in: a :class:`~codeact.runlog.RunLog`, a
            database path, ``True`` for the default database, or ``None``/``False`` for none
            (``get_run`` still reports the steps; the ``codeact://runs/{id}`` log is then unavailable).
        token: a bearer token HTTP clients must send (``Authorization: Bearer ...``).
        tool_disclosure: what ``run_task``'s prompt says about its tools: ``auto`` (default),
            ``all`` or ``on_demand`` (see :mod:`codeact.catalog`); a call may choose its own.
        tool_budget: tokens of stubs ``auto`` still puts in the prompt.
        condenser: how ``run_task``'s agent folds old turns: ``fold`` or ``summary`` (see
            :class:`~codeact.agent.CodeActAgent`).
        snapshot_dir: where ``save_session`` writes snapshots (default: ``$CODEACT_SNAPSHOT_DIR``
            or the data dir's ``snapshots``); ``restore_session`` reads only from there.
    """

    backend: "BackendName" = "docker"
    sandbox_options: dict[str, Any] = field(default_factory=dict)
    execution_timeout: float = 60.0
    max_sessions: int = 8
    idle_timeout: float = 900.0
    disconnect_grace: float = 30.0
    output_limit: int = 8000
    model: Any = None
    tools: list[Any] = field(default_factory=list)
    max_steps: int = 10
    output_dir: str | None = None
    log: Any = None
    token: str | None = None
    tool_disclosure: str = "auto"
    tool_budget: int = 2000
    snapshot_dir: str | None = None
    condenser: str = "fold"

    def __post_init__(self) -> None:
        if self.max_sessions < 1:
            raise ConfigError("max_sessions must be at least 1")
        from ..catalog import check_disclosure

        check_disclosure(self.tool_disclosure, self.tool_budget)
        if self.condenser not in ("fold", "summary"):
            raise ConfigError(f"unknown condenser {self.condenser!r}: choose fold or summary")
        if self.idle_timeout <= 0 or self.execution_timeout <= 0 or self.disconnect_grace <= 0:
            raise ConfigError("idle_timeout, disconnect_grace and execution_timeout must be positive numbers of "
                              "seconds")


class _Session:
    """One client session's sandbox."""

    def __init__(self, key: int) -> None:
        self.key = key
        self.sandbox: Any = None
        self.lock = asyncio.Lock()  # one call at a time per session: a kernel runs one thing at once
        self.last_used = time.monotonic()
        self.closed = False
        #: The snapshot this session last saved or was restored from: the next save is incremental against it.
        self.snapshot: Any = None


class SandboxSessions:
    """The sandboxes of the server's client sessions: lazily created, capped, closed with their session."""

    def __init__(self, options: ServeOptions) -> None:
        self.options = options
        self._sessions: dict[int, _Session] = {}
        self._by_stream: weakref.WeakKeyDictionary[Any, _Session] = weakref.WeakKeyDictionary()
        #: Sessions whose sandbox is starting (a first start or a restore).
        self._starting: list[_Session] = []

    @property
    def count(self) -> int:
        return len(self._sessions)

    def _in_use(self) -> int:
        """Sandboxes held or starting: a session counts once; a start counts on its own only for a session that
        ended meanwhile or one that keeps its old sandbox while a restore starts the new one."""
        extra = sum(1 for s in self._starting if s.closed or s.sandbox is not None)
        return len(self._sessions) + extra

    async def for_request(self, ctx: Any) -> _Session:
        """The calling session's sandbox, started on first use.

        Raises:
            ToolError: the request has no session (2026 single-exchange HTTP), or the cap is reached.
        """
        from mcp.server.mcpserver.exceptions import ToolError

        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        connection = _connection_of(ctx)
        if connection is None or not getattr(connection, "has_standalone_channel", True):
            raise ToolError("this server keeps a Python session per MCP session, and this request has none "
                            "(the 2026-07-28 single-exchange HTTP wire); connect with the initialize handshake "
                            "(protocol 2025-11-25), as MCP clients in 'auto' mode do")
        modern = connection.protocol_version in MODERN_PROTOCOL_VERSIONS
        # Handshake era: one Connection per client, torn down when it leaves. 2026 era over a pipe or an
        # SSE stream: a Connection per request, but one outbound channel per stream, which lives as long.
        anchor = connection.outbound if modern else connection
        session = self._by_stream.get(anchor) if modern else connection.state.get("codeact_session")
        if session is None or session.closed:
            if self._in_use() >= self.options.max_sessions:
                raise ToolError(f"all {self.options.max_sessions} sandboxes of this server are in use (one per client "
                                "session); close another session, wait for idle ones to expire, or restart the server "
                                "with a higher --max-sessions")
            session = _Session(id(anchor))
            self._sessions[session.key] = session
            if modern:
                self._by_stream[anchor] = session
                loop = asyncio.get_running_loop()
                weakref.finalize(anchor, _close_later, loop, self, session)  # the stream ended
            else:
                connection.state["codeact_session"] = session
                connection.exit_stack.push_async_callback(self.close, session)
        session.last_used = time.monotonic()
        return session

    async def sandbox(self, session: _Session) -> Any:
        """The session's sandbox (started here on first use; call with ``session.lock`` held)."""
        if session.sandbox is None:
            self._starting.append(session)
            try:
                session.sandbox = await asyncio.to_thread(self._open)
            finally:
                self._starting.remove(session)
            if session.closed:  # the client went away while its sandbox started
                await close_sandbox(session.sandbox)
                session.sandbox = None
                raise RuntimeError("the session ended")
        session.last_used = time.monotonic()
        return session.sandbox

    def _open(self) -> Any:
        from sandbox import open_sandbox

        options = {"timeout": self.options.execution_timeout, **self.options.sandbox_options}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the CLI warned about an unsafe backend once, at start
            sb = open_sandbox(self.options.backend, **options)
        with telemetry.span("sandbox.start", {"codeact.sandbox.backend": str(self.options.backend)}):
            if hasattr(sb, "start"):
                sb.start()
            elif hasattr(sb, "__enter__"):
                sb.__enter__()
        return sb

    async def close(self, session: _Session) -> None:
        """Close a session's sandbox (its client disconnected, reset, or idle)."""
        session.closed = True
        self._sessions.pop(session.key, None)
        sb, session.sandbox = session.sandbox, None
        if sb is not None:
            await close_sandbox(sb)

    def _store(self) -> Any:
        from sandbox.snapshot import SnapshotStore

        from .. import settings

        return SnapshotStore(settings.snapshot_dir(self.options.snapshot_dir))

    async def save(self, session: _Session) -> Any:
        """Snapshot the session's sandbox (call with ``session.lock`` held); returns the Snapshot."""
        sb = await self.sandbox(session)
        since = session.snapshot if session.snapshot is not None and session.snapshot.path.exists() else None
        snap = await asyncio.to_thread(sb.snapshot, since=since, store=self._store())
        session.snapshot = snap
        return snap

    async def restore(self, session: _Session, snapshot_id: str) -> Any:
        """Replace the session's sandbox by a new one holding snapshot ``snapshot_id`` of the store; its report."""
        from sandbox.snapshot import SnapshotError

        snap = await asyncio.to_thread(self._store().get, snapshot_id)  # only ids of this store; validated
        if self.options.backend not in ("docker", "local"):
            raise SnapshotError(f"the {self.options.backend} backend cannot restore sessions; serve with the "
                                "docker (or local) backend")
        from sandbox import DockerSandbox, LocalSandbox

        factory = DockerSandbox if self.options.backend == "docker" else LocalSandbox
        options = {"timeout": self.options.execution_timeout, **self.options.sandbox_options}
        self._starting.append(session)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the CLI warned about an unsafe backend once, at start
                new = await asyncio.to_thread(factory.restore, snap, (), **options)
        finally:
            self._starting.remove(session)
        await self.reset(session)
        if session.closed:
            await close_sandbox(new)
            raise RuntimeError("the session ended")
        session.sandbox, session.snapshot, session.last_used = new, snap, time.monotonic()
        return new.restored

    async def reset(self, session: _Session) -> None:
        session.snapshot = None
        sb, session.sandbox = session.sandbox, None
        if sb is not None:
            await close_sandbox(sb)

    async def reap_idle(self) -> None:
        """Close the sandboxes of sessions idle longer than ``idle_timeout`` (not while they run code)."""
        now = time.monotonic()
        for session in list(self._sessions.values()):
            if now - session.last_used > self.options.idle_timeout and not session.lock.locked():
                await self.reset(session)  # the session itself may come back: it then gets a new sandbox

    async def close_all(self) -> None:
        await asyncio.gather(*(self.close(s) for s in list(self._sessions.values())), return_exceptions=True)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Reap idle sessions while the server runs; close every sandbox when it stops."""
        async def reaper() -> None:
            while True:
                await asyncio.sleep(min(max(self.options.idle_timeout / 4, 0.5), 30.0))
                await self.reap_idle()

        # One blocking sandbox call per session may run at once: the loop's worker threads must not be fewer
        # than the sessions, or one session's long run queues every other session's calls behind it.
        from concurrent.futures import ThreadPoolExecutor

        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(max_workers=self.options.max_sessions + 8, thread_name_prefix="codeact-mcp"))
        task = asyncio.ensure_future(reaper())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            await self.close_all()


async def close_sandbox(sb: Any) -> None:
    """Close ``sb`` on a thread of its own, started now, that finishes even if the awaiting task is cancelled.

    Not ``asyncio.to_thread``: a client that disappears has its cleanup cut off by the MCP SDK after 5 s,
    and a close still queued for the loop's shared worker threads (busy with the runs of other sessions,
    or of this one) would then never run, leaving the sandbox's container behind for good.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def finished() -> None:
        if not done.done():
            done.set_result(None)

    def work() -> None:
        try:
            sb.close()
        except Exception:  # gone already, or its engine is: nothing more to do from here
            pass
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(finished)

    threading.Thread(target=work, name="codeact-sandbox-close", daemon=True).start()
    await asyncio.shield(done)


def _close_later(loop: asyncio.AbstractEventLoop, sessions: SandboxSessions, session: _Session) -> None:
    """Close a session's sandbox on the server's loop (called when its stream is garbage)."""
    with contextlib.suppress(RuntimeError):  # the loop is closed: close_all already ran
        loop.call_soon_threadsafe(lambda: asyncio.ensure_future(sessions.close(session)))


def _connection_of(ctx: Any) -> Any:
    """The SDK's per-client ``Connection`` of a tool call.

    The 2.x SDK builds a ``Connection`` per client (with ``state`` and an
    ``exit_stack`` unwound on disconnect) but does not expose it to MCPServer
    tools yet (``mcp.server.context.Context.connection`` is not constructed by
    the runner), so it is read from the request's session.
    """
    try:
        return ctx.request_context.session._connection
    except AttributeError:
        return None


def build_server(options: ServeOptions) -> tuple[Any, SandboxSessions]:
    """The ``MCPServer`` with the sandbox tools, and its session registry."""
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError
    from mcp.shared.exceptions import MCPError
    from mcp.types import CallToolResult, EmbeddedResource, ImageContent, TextContent
    from mcp_types import METHOD_NOT_FOUND, BlobResourceContents, RequestParams

    from .. import __version__

    sessions = SandboxSessions(options)
    runs = ServedRuns(options.log, options.output_limit)
    # The SDK's MCPServer configures the root logger (logging.basicConfig) at the level given here, INFO by
    # default, so every library's INFO lines (httpx's "HTTP Request: POST ..." on each model call, the SDK's
    # "Processing request ..." on each call) reached the host's stderr. Warnings and errors still do.
    before = set(logging.getLogger().handlers)
    server = MCPServer(
        "codeact", version=__version__, log_level="WARNING",
        instructions=("A stateful Python sandbox: execute_python runs code in a Jupyter kernel that keeps its "
                      "variables between calls; files live in /workspace (upload_file, download_file, list_files)."),
    )
    # The level above is the root LOGGER's; a library whose own logger is set lower (bm25s logs at DEBUG) still
    # reaches the handler the SDK added. Its handler gets the level too (handlers the program had are left alone).
    for handler in set(logging.getLogger().handlers) - before:
        handler.setLevel(max(handler.level, logging.WARNING))

    default_discover = server._lowlevel_server._handle_discover

    async def discover(ctx: Any, params: Any) -> Any:
        # A 2026 connection over a pipe or an SSE stream is a session; a single-exchange HTTP POST is not.
        connection = getattr(ctx.session, "_connection", None)
        if connection is not None and not connection.has_standalone_channel:
            raise MCPError(code=METHOD_NOT_FOUND, message="codeact keeps a Python session per MCP session; over "
                                                          "HTTP use the initialize handshake (Mcp-Session-Id)")
        return await default_discover(ctx, params)

    server._lowlevel_server.add_request_handler("server/discover", RequestParams, discover)

    async def with_sandbox(ctx: Any, work: Any) -> Any:
        session = await sessions.for_request(ctx)
        async with session.lock:
            try:
                sb = await sessions.sandbox(session)
            except ToolError:
                raise
            except Exception as exc:  # Docker not ready, image missing...
                raise ToolError(f"the sandbox could not start: {exc}") from None
            try:
                return await work(sb)
            finally:
                session.last_used = time.monotonic()

    @server.tool(description="Run Python code in this session's sandbox (a Jupyter kernel: variables, imports and "
                 "files persist between calls; the working directory is /workspace). Returns what the code printed, "
                 "its last expression's value, the error if it raised, and figures as images.")
    async def execute_python(code: str, ctx: Context) -> CallToolResult:
        async def work(sb: Any) -> CallToolResult:
            with telemetry.span("execute_code", {"codeact.code.chars": len(code)}) as span:  # under the request's
                result = await asyncio.to_thread(sb.run, code)
                telemetry.code_result(span, result)
            text = truncate_middle(format_observation(result, ObservationParts(), limit=None), options.output_limit)
            content: list[Any] = [TextContent(type="text", text=text)]
            for png in result.images:
                content.append(ImageContent(type="image", data=base64.b64encode(png).decode(), mime_type="image/png"))
            return CallToolResult(content=content, is_error=result.error is not None)

        return await with_sandbox(ctx, work)

    @server.tool(description="Write a file into /workspace. `content` is text, or base64 when encoding='base64'.")
    async def upload_file(path: str, content: str, ctx: Context,
                          encoding: Literal["text", "base64"] = "text") -> str:
        data = content.encode("utf-8") if encoding == "text" else _b64(content)

        async def work(sb: Any) -> str:
            where = await asyncio.to_thread(sb.upload, data, path)
            return f"wrote {len(data):,} bytes to {where}"

        return await with_sandbox(ctx, work)

    @server.tool(description="Read a file from /workspace: text as text, images as images, other files as base64.")
    async def download_file(path: str, ctx: Context) -> CallToolResult:
        async def work(sb: Any) -> CallToolResult:
            data = await asyncio.to_thread(sb.download, path)
            if len(data) > MAX_DOWNLOAD:
                raise ToolError(f"{path} has {len(data):,} bytes; download_file returns at most {MAX_DOWNLOAD:,}")
            mime = mimetypes.guess_type(path)[0] or "application/octet-stream"
            if mime.startswith("image/"):
                return CallToolResult(content=[ImageContent(type="image", data=base64.b64encode(data).decode(),
                                                            mime_type=mime)])
            try:
                return CallToolResult(content=[TextContent(type="text", text=data.decode("utf-8"))])
            except UnicodeDecodeError:
                blob = BlobResourceContents(uri=f"file:///workspace/{path.lstrip('/')}", mime_type=mime,
                                            blob=base64.b64encode(data).decode())
                return CallToolResult(content=[EmbeddedResource(type="resource", resource=blob)])

        return await with_sandbox(ctx, work)

    @server.tool(description="List the files in /workspace (path and size in bytes).")
    async def list_files(ctx: Context) -> list[dict[str, Any]]:
        async def work(sb: Any) -> list[dict[str, Any]]:
            files = await asyncio.to_thread(sb.list_files)
            return [{"path": f.path, "size": f.size} for f in files]

        return await with_sandbox(ctx, work)

    @server.tool(description="Start over: a new, empty sandbox for this session (variables and files are gone).")
    async def reset_session(ctx: Context) -> str:
        session = await sessions.for_request(ctx)
        async with session.lock:
            await sessions.reset(session)
        return "the session was reset; the next call starts a fresh sandbox"

    @server.tool(description="Save this session's sandbox (files, variables, installed packages) as a snapshot; "
                 "returns its id for restore_session, what was saved and what could not be (open files, sockets, "
                 "generators...). Saving again saves only what changed.")
    async def save_session(ctx: Context) -> str:
        from sandbox.snapshot import SnapshotError

        async def work(sb: Any) -> str:
            session = await sessions.for_request(ctx)
            try:
                snap = await sessions.save(session)
            except SnapshotError as exc:
                raise ToolError(str(exc)) from None
            return (f"saved snapshot {snap.id} ({snap.size / 1e6:.1f} MB); restore it with "
                    f"restore_session(snapshot_id={snap.id!r})\n{snap.manifest.describe()}")

        return await with_sandbox(ctx, work)

    @server.tool(description="Replace this session's sandbox with a new one holding a snapshot that save_session "
                 "made (in this or another session): its files, variables and packages. Returns what was "
                 "restored and what was not.")
    async def restore_session(snapshot_id: str, ctx: Context) -> str:
        from sandbox.snapshot import SnapshotError

        session = await sessions.for_request(ctx)
        async with session.lock:
            try:
                report = await sessions.restore(session, snapshot_id.strip())
            except SnapshotError as exc:
                raise ToolError(str(exc)) from None
            except Exception as exc:  # Docker not ready, image missing...
                raise ToolError(f"the sandbox could not start: {exc}") from None
        return report.describe()

    if options.model is not None:
        @server.tool(description="Give a task to a CodeAct agent that works in this session's sandbox (it writes and "
                     "runs Python, calling its tools) until it has an answer. `files` names files already in "
                     "/workspace that the task is about. Progress is reported as it goes. `tool_disclosure` "
                     "(all, on_demand, auto) chooses whether the agent's prompt lists every tool or a catalogue "
                     "it searches. `output_schema` (a JSON Schema object) is what the answer must match: the "
                     "agent is shown it, and `answer` is the validated value (status invalid_output when none "
                     "matched). The schema may have at most 64 KiB as JSON, 32 levels of nesting and 64 "
                     "references, all inside the schema (#/$defs/...).")
        async def run_task(task: str, ctx: Context, files: list[str] | None = None,
                           tool_disclosure: Literal["auto", "all", "on_demand"] | None = None,
                           output_schema: dict[str, Any] | None = None) -> dict[str, Any]:
            output = None
            if output_schema is not None:  # a bad or hostile schema fails here, before the sandbox is touched
                from ..errors import OutputTypeError
                from ..output import schema_output

                try:
                    output = schema_output(output_schema)
                except OutputTypeError as exc:
                    raise ToolError(f"output_schema: {exc}") from None

            async def work(sb: Any) -> dict[str, Any]:
                return await _run_task(options, runs, sb, task, files or [], ctx, tool_disclosure, output)

            return await with_sandbox(ctx, work)

        @server.tool(description="A run that run_task started on this server, by its run_id: status, answer, "
                     "error, each step's code and observation (truncated), and its artifacts with the "
                     "codeact://runs/{run_id}/artifacts/{name} URI to read each one.")
        async def get_run(run_id: str) -> dict[str, Any]:
            try:
                return await asyncio.to_thread(runs.report, run_id)
            except RunAccessError as exc:
                raise ToolError(str(exc)) from None

        @server.resource("codeact://runs/{run_id}", name="run_log", mime_type="application/x-ndjson",
                         description="The whole log of a run that run_task started (JSON lines: the run, "
                                     "then each step, tool call and artifact).")
        async def run_log(run_id: str) -> str:
            try:
                return await asyncio.to_thread(runs.jsonl, run_id)
            except RunAccessError as exc:  # the SDK shows a ResourceError's message, hides any other
                raise ResourceError(str(exc)) from None

        @server.resource("codeact://runs/{run_id}/artifacts/{name}", name="run_artifact",
                         mime_type="application/octet-stream",
                         description="A file a run_task run produced (name as get_run lists it, URL-encoded).")
        async def run_artifact(run_id: str, name: str) -> bytes:
            try:
                return await asyncio.to_thread(runs.artifact, run_id, unquote(name))
            except RunAccessError as exc:
                raise ResourceError(str(exc)) from None

    return server, sessions


async def _run_task(options: ServeOptions, runs: ServedRuns, sb: Any, task: str, files: list[str], ctx: Any,
                    tool_disclosure: str | None = None, output: Any = None) -> dict[str, Any]:
    from mcp.server.mcpserver.exceptions import ToolError

    from ..agent import CodeActAgent
    from ..events import CodeAction, FinalAnswer, RunFinished, ToolCall

    log = await asyncio.to_thread(lambda: runs.log)
    agent = CodeActAgent(options.model, options.tools, sandbox=sb, max_steps=options.max_steps, log=log or False,
                         output_dir=options.output_dir, execution_timeout=options.execution_timeout,
                         tool_disclosure=tool_disclosure or options.tool_disclosure,  # type: ignore[arg-type]
                         tool_budget=options.tool_budget, condenser=options.condenser)  # type: ignore[arg-type]
    if files:
        task += "\n\nFiles in the working directory: " + ", ".join(files)
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[Any] = asyncio.Queue()

    def work() -> None:
        try:
            for event in agent.stream(task, output_type=output):
                loop.call_soon_threadsafe(events.put_nowait, event)
        except BaseException as exc:  # surfaced below
            loop.call_soon_threadsafe(events.put_nowait, exc)
        finally:
            loop.call_soon_threadsafe(events.put_nowait, None)

    worker = asyncio.ensure_future(asyncio.to_thread(work))
    result = None
    while True:
        event = await events.get()
        if event is None:
            break
        if isinstance(event, BaseException):
            raise event
        message = None
        if isinstance(event, CodeAction):
            message = f"step {event.step}: running code"
        elif isinstance(event, ToolCall):
            message = f"step {event.step}: called {event.name}"
        elif isinstance(event, FinalAnswer):
            message = "done"
        if message is not None:
            with contextlib.suppress(Exception):
                await ctx.report_progress(event.step, options.max_steps, message)
        if isinstance(event, RunFinished):
            result = event.result
    await worker
    if result is None:
        raise ToolError("the run ended without a result")
    runs.add(result)
    return runs.summary(result)


def _b64(text: str) -> bytes:
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        return base64.b64decode(text, validate=True)
    except Exception:
        raise ToolError("content is not valid base64 (encoding='base64')") from None


class BearerAuth:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>``."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                body = b'{"error": "unauthorized: send Authorization: Bearer <token>"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b"Bearer"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(server: Any, transport: Transport, options: ServeOptions, host: str) -> Any:
    """The Starlette app of an HTTP transport, behind the bearer check when a token is set."""
    if transport == "sse":
        app = server.sse_app(host=host)
    else:
        app = LostClients(server.streamable_http_app(host=host, max_sessions=max(options.max_sessions * 4, 16),
                                                     session_idle_timeout=options.idle_timeout),
                          options.disconnect_grace)
    return BearerAuth(app, options.token) if options.token else app


def serve(options: ServeOptions, transport: Transport = "stdio", *, host: str = "127.0.0.1", port: int = 8000,
          ready: Any = None) -> None:
    """Serve the sandbox over MCP until interrupted (blocks).

    Example::

        serve(ServeOptions(backend="docker", max_sessions=4), "http", port=8765)

    ``ready(url)`` is called once an HTTP server listens. Binding to an
    address other than loopback without a token warns: anyone who can reach
    the port could run code.
    """
    server, sessions = build_server(options)
    if transport == "stdio":
        async def main_stdio() -> None:
            async with sessions.running():
                await server.run_stdio_async()

        import anyio

        anyio.run(main_stdio)
        return
    if host not in ("127.0.0.1", "localhost", "::1") and not options.token:
        warnings.warn(f"serving on {host}:{port} without a token: anyone who can reach this port can run code; "
                      "pass --token (or set CODEACT_MCP_TOKEN)", stacklevel=2)
    import uvicorn

    app = http_app(server, transport, options, host)

    async def main_http() -> None:
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
        web = uvicorn.Server(config)
        async with sessions.running():
            if ready is not None:
                async def announce() -> None:
                    while not web.started:
                        await asyncio.sleep(0.05)
                    path = "/sse" if transport == "sse" else "/mcp"
                    ready(f"http://{host}:{port}{path}")

                asyncio.ensure_future(announce())
            await web.serve()

    asyncio.run(main_http())
