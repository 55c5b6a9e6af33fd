"""``codeact mcp``: serve the sandbox over MCP (``serve``), and show configured servers' tools (``tools``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import click

from .. import config as cfg
from ._app import (
    CONTEXT_SETTINGS,
    UserError,
    check_runtime,
    cli,
    compaction_options,
    compaction_settings,
    disclosure_options,
    load_tools,
    model_options,
    network_options,
    network_settings,
    runtime_option,
    runtime_setting,
    tool_settings,
)

if TYPE_CHECKING:
    from ..mcp import MCPServerConfig, MCPToolset


def mcp_servers(files: tuple[str, ...], specs: tuple[str, ...]) -> list[MCPServerConfig]:
    """The servers named by ``--mcp FILE`` and ``--mcp-server NAME=COMMAND`` options."""
    from ..mcp import load_config, parse_server_spec

    servers: list[MCPServerConfig] = []
    for path in files:
        servers.extend(load_config(path))
    servers.extend(parse_server_spec(spec) for spec in specs)
    names = [s.name for s in servers]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UserError(f"MCP server name{'s' if len(dupes) > 1 else ''} {', '.join(map(repr, dupes))} given twice "
                        "(in --mcp files or --mcp-server); names must be unique", exit_code=2)
    return servers


def open_mcp(files: tuple[str, ...], specs: tuple[str, ...], on_error: str,
             warn: Callable[[str], object] | None = None) -> MCPToolset | None:
    """An open :class:`~codeact.mcp.MCPToolset` for the options, or None when none are given.

    ``--allow-mcp-tools`` (read from the command's context) lets every tool run without asking, with a warning.
    """
    servers = mcp_servers(files, specs)
    if not servers:
        return None
    import warnings

    from ..mcp import MCPToolset

    allow_all = _allow_all_tools()
    if allow_all:
        message = ("--allow-mcp-tools: every tool of the MCP servers runs without asking, including ones that "
                   "write files or send messages; list trusted tools in a server's \"alwaysAllow\" instead")
        if warn is not None:
            warn(message)
        else:
            click.secho(f"Warning: {message}", fg="yellow", err=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the toolset's own warning about allow_all_tools was just shown
        toolset = MCPToolset(servers, on_error="skip" if on_error == "skip" else "raise", allow_all_tools=allow_all)
    toolset.open()
    for failure in toolset.failures:
        message = f"skipping MCP server {failure.server!r}: {failure}"
        if warn is not None:
            warn(message)
        else:
            click.secho(f"Warning: {message}", fg="yellow", err=True)
    return toolset


def _allow_all_tools() -> bool:
    """The command was given ``--allow-mcp-tools``."""
    from ._app import MCP_META

    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        if MCP_META in ctx.meta:
            return bool(ctx.meta[MCP_META].get("allow_all_tools"))
        ctx = ctx.parent
    return False


@cli.group(context_settings=CONTEXT_SETTINGS)
def mcp() -> None:
    """MCP both ways: the sandbox as an MCP server, and MCP servers' tools for the agent.

    \b
    Give the agent MCP servers' tools (run and chat):
      codeact run "..." --mcp servers.json            the mcpServers JSON of Claude Desktop and Cursor
      codeact run "..." --mcp-server "time=mcp-server-time"
    Offer the sandbox to an MCP host (Claude Desktop, Cursor, other agents):
      codeact mcp serve                               stdio
      codeact mcp serve --transport http --port 8765 --token SECRET
    """


@mcp.command(context_settings=CONTEXT_SETTINGS)
@click.option("--transport", type=click.Choice(["stdio", "http", "sse"]), default="stdio", show_default=True,
              help="stdio (a host starts this command), http (streamable HTTP at /mcp) or sse (at /sse).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (http and sse).")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True, help="Port (http and sse).")
@click.option("--token", envvar="CODEACT_MCP_TOKEN", metavar="TOKEN",
              help="Bearer token HTTP clients must send [env: CODEACT_MCP_TOKEN].")
@click.option("-b", "--backend", type=click.Choice(["docker", "local", "restricted"]), default=None,
              help="Sandbox backend: docker (the default: hardened container), local or restricted (NOT isolated) "
                   "[env: CODEACT_BACKEND].")
@runtime_option
@click.option("--memory", metavar="SIZE", help="Memory limit of each sandbox, e.g. 1g (docker).")
@click.option("--cpus", type=click.FloatRange(min=0, min_open=True), help="CPUs of each sandbox (docker).")
@click.option("--packages", "packages", multiple=True, metavar="LIST",
              help="Python packages every sandbox starts with, e.g. scikit-learn,seaborn (fetched by the host, "
                   "materialised once and shared read-only; the code can install more with install()).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
              metavar="S", help="Seconds one execute_python call may run.")
@click.option("--max-sessions", type=click.IntRange(min=1), default=8, show_default=True,
              help="Sandboxes alive at once (one per client session).")
@click.option("--idle-timeout", type=click.FloatRange(min=0, min_open=True), default=900.0, show_default=True,
              metavar="S", help="Close a session's sandbox after this many idle seconds.")
@click.option("--disconnect-grace", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True,
              metavar="S", help="HTTP: end a session (and close its sandbox) this many seconds after its client's "
                                "event stream closed, unless the client comes back (a client that went away).")
@click.option("--output-limit", type=click.IntRange(min=200), default=8000, show_default=True,
              help="Characters of output one call returns (head and tail kept).")
@model_options
@compaction_options
@disclosure_options
@click.option("-t", "--tools", "tool_specs", multiple=True, metavar="SPEC",
              help="Tools for run_task's agent: module:ALL, path/to/file.py:ALL (repeatable).")
@click.option("--max-steps", type=click.IntRange(min=1), default=10, show_default=True,
              help="Model turns of one run_task.")
@click.option("--db", metavar="PATH", type=click.Path(dir_okay=False),
              help="Run log database run_task records its runs in [env: CODEACT_DB].")
@click.option("--no-log", is_flag=True, help="Do not record run_task's runs in the run log.")
@network_options()
def serve(transport: Literal["stdio", "http", "sse"], host: str, port: int, token: str | None, backend: str | None,
          memory: str | None, cpus: float | None, timeout: float, max_sessions: int, idle_timeout: float,
          disconnect_grace: float, output_limit: int, model: str | None, base_url: str | None,
          api_key: str | None, tool_specs: tuple[str, ...], max_steps: int, packages: tuple[str, ...] = (),
          db: str | None = None, no_log: bool = False) -> None:
    """Serve a stateful Python sandbox over MCP.

    Tools: execute_python(code), upload_file, download_file, list_files,
    reset_session, save_session, restore_session, and run_task(task, files)
    and get_run(run_id) when a model is configured (--model or
    CODEACT_MODEL). Each client session gets its own sandbox (hardened
    Docker by default), closed when the session ends or idles. run_task
    answers with the run's id; get_run and the resources
    codeact://runs/{id} (its log) and codeact://runs/{id}/artifacts/{name}
    read the run afterwards.

    \b
    Claude Desktop (claude_desktop_config.json):
      {"mcpServers": {"codeact": {"command": "codeact", "args": ["mcp", "serve"]}}}
    """
    from ..mcp import ServeOptions, serve as run_server

    name = cfg.backend(backend)
    runtime = runtime_setting(name)
    if name == "docker":
        from sandbox import docker_available

        reason = docker_available()
        if reason is not None:
            raise UserError(f"the Docker sandbox is not ready: {reason}; `codeact doctor` shows what to fix "
                            "(or choose --backend local knowingly: it is NOT isolated)")
        check_runtime(runtime)
    else:
        click.secho(f"Warning: the {name} backend is not isolated; use it only for trusted clients.", fg="yellow",
                    err=True)
    sandbox_options: dict[str, object] = {}
    if runtime:
        sandbox_options["runtime"] = runtime
    if memory:
        sandbox_options["memory"] = memory
    if cpus:
        sandbox_options["cpus"] = cpus
    wanted = [part.strip() for item in packages for part in item.split(",") if part.strip()]
    if wanted:
        if name == "restricted":
            raise UserError("--packages needs the docker (or local) backend; the restricted one cannot install")
        sandbox_options["packages"] = wanted
    policy = network_settings(backend=name)
    if policy is not None:
        sandbox_options["network"] = policy
    model_obj = None
    window, condenser = compaction_settings()
    if cfg.model_configured(model) or cfg.scripted_replies_path() is not None:
        model_obj = cfg.build_model(model, base_url=base_url, api_key=api_key, context_window=window)
    options = ServeOptions(backend=name, sandbox_options=sandbox_options, execution_timeout=timeout,
                           max_sessions=max_sessions, idle_timeout=idle_timeout, disconnect_grace=disconnect_grace,
                           output_limit=output_limit,
                           model=model_obj, tools=load_tools(tool_specs), max_steps=max_steps,
                           output_dir=str(cfg.output_root(None)), token=token or None,
                           log=None if no_log else str(cfg.db_path(db)), condenser=condenser,
                           **{k: v for k, v in tool_settings().items() if k in ("tool_disclosure", "tool_budget")})

    def ready(url: str) -> None:
        click.echo(f"codeact MCP server ({transport}) listening on {url}"
                   + (" (bearer token required)" if token else ""), err=True)

    with contextlib.suppress(KeyboardInterrupt):
        run_server(options, transport, host=host, port=port, ready=ready)


@mcp.command(context_settings=CONTEXT_SETTINGS)
@click.option("--mcp", "mcp_files", multiple=True, metavar="FILE", type=click.Path(dir_okay=False),
              help="An mcpServers JSON file (repeatable).")
@click.option("--mcp-server", "mcp_specs", multiple=True, metavar="NAME=COMMAND",
              help='A server given inline, e.g. "time=mcp-server-time" (repeatable).')
def tools(mcp_files: tuple[str, ...], mcp_specs: tuple[str, ...]) -> None:
    """Connect to MCP servers and print their tools as the model sees them (Python stubs)."""
    from ..terminal import safe

    if not mcp_files and not mcp_specs:
        raise click.UsageError("give --mcp FILE or --mcp-server NAME=COMMAND")
    toolset = open_mcp(mcp_files, mcp_specs, "raise")
    if toolset is None:
        raise UserError("the --mcp files name no servers (their \"mcpServers\" is empty); add a server to one, "
                        "or give --mcp-server NAME=COMMAND", exit_code=2)
    try:
        for t in toolset:
            click.echo(safe(t.python_stub()))
            click.echo()
    finally:
        toolset.close()
