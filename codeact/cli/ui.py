"""``codeact ui``: a local web workspace over chat sessions (the page renders the agent's events)."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import click

from .. import config as cfg
from ._app import (
    CONTEXT_SETTINGS,
    UserError,
    agent_options,
    agent_settings,
    cli,
    compaction_settings,
    images_setting,
    load_tools,
    make_agent,
    open_log,
    renderers,
    resolve_backend,
    skills_auto_approved,
)
from .mcp import open_mcp

#: Environment variable holding the token (required with a non-loopback --host).
TOKEN_ENV = "CODEACT_UI_TOKEN"
DEFAULT_PORT = 8765


@cli.command(context_settings=CONTEXT_SETTINGS)
@agent_options(allow_flag="--sandbox-allow-host")  # --allow-host: the browser's host names (below)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on. Anything but loopback needs an explicit --token (and warns).")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port (0 picks a free one; a busy default port falls back to a free one).")
@click.option("--token", envvar=TOKEN_ENV, metavar="TOKEN",
              help=f"The secret every request must carry (default: a fresh random one) [env: {TOKEN_ENV}].")
@click.option("--no-browser", is_flag=True, help="Print the URL but do not open a browser.")
@click.option("--max-sessions", type=click.IntRange(min=1), default=4, show_default=True,
              help="Sessions (tabs) open at once, each with its own sandbox.")
@click.option("--idle-timeout", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True,
              metavar="MIN", help="Minutes without activity after which a session's sandbox is freed.")
@click.option("--upload-limit", type=click.IntRange(min=1), default=100, show_default=True, metavar="MB",
              help="Largest file the page may upload, in megabytes.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="Another host name the browser may use to reach the server (repeatable).")
def ui(host: str, port: int, token: str | None, no_browser: bool, max_sessions: int, idle_timeout: float,
       upload_limit: int, allow_hosts: tuple[str, ...], **options: Any) -> None:
    """A web page for analysing data with the agent: plots and tables in place.

    Starts a server on 127.0.0.1, prints a URL that carries a fresh token and
    opens it in the browser. The page shows each turn as it happens (the
    model's text, the code, tool calls, live output, plots, DataFrames as
    tables, the answer), takes files by drag and drop, asks before tools that
    require approval, and has a Stop button that interrupts the running code
    but keeps the session's variables. History shows past runs from the run
    log, with .ipynb export. It takes the model, tool and backend options of
    `codeact chat`. Ctrl-C stops the server and closes every sandbox.

    \b
    Examples:
      codeact ui -m gpt-4o-mini
      codeact ui -f sales.csv --tools mytools.py:ALL --no-browser
      CODEACT_UI_TOKEN=$(openssl rand -hex 16) codeact ui --host 0.0.0.0
    """
    if host not in ("127.0.0.1", "localhost", "::1") and not token:
        raise UserError(f"--host {host} makes the page (which can run tools on this machine) reachable from "
                        f"other machines: set a token explicitly with --token or {TOKEN_ENV}", exit_code=2)
    output_root = cfg.output_root(options["output_dir"])
    _, notes = renderers(output_root)
    tools = load_tools(options["tool_specs"])
    model = cfg.build_model(options["model"], base_url=options["base_url"], api_key=options["api_key"],
                            images=images_setting(), context_window=compaction_settings()[0])
    backend = resolve_backend(options["backend"], notes)
    # MCP servers, as `chat` has them: connected once, shared by every session, closed at exit.
    toolset = open_mcp(options.get("mcp_files", ()), options.get("mcp_specs", ()),
                       options.get("mcp_on_error", "stop"), notes.warning)
    try:
        _serve(host, port, token, no_browser, max_sessions, idle_timeout, upload_limit, allow_hosts, options,
               model, tools + list(toolset or ()), backend, output_root, notes, _server_names(toolset))
    finally:
        if toolset is not None:
            toolset.close()


def _skills_apart(approve: Any, *, yes: bool, auto: bool, notes: Any) -> Any:
    """The page's approver, except for skill saves: ``--approve-skills`` saves them; ``--yes`` (which makes
    the page approve everything) does not cover them, so they are refused; otherwise the page asks."""
    from ..skills import SkillApproval

    def decide(request: Any) -> bool:
        if isinstance(request, SkillApproval):
            if auto:
                return True
            if yes:
                notes.warning(f"not saved: skill {request.name}: --yes does not cover skills "
                              "(pass --approve-skills to save them without asking)")
                return False
        return bool(approve(request))

    return decide


def _server_names(toolset: Any) -> list[str]:
    if toolset is None:
        return []
    failed = {getattr(f, "server", None) for f in getattr(toolset, "failures", [])}
    return [c.name for c in getattr(toolset, "configs", []) if c.name not in failed]


def _serve(host: str, port: int, token: str | None, no_browser: bool, max_sessions: int, idle_timeout: float,
           upload_limit: int, allow_hosts: tuple[str, ...], options: dict[str, Any], model: Any, tools: list[Any],
           backend: str, output_root: Path, notes: Any, mcp_servers: list[str]) -> None:
    from ..ui import UIOptions, UIServer

    log = open_log(options["db"], options["no_log"])
    if host not in ("127.0.0.1", "localhost", "::1"):
        notes.warning(f"listening on {host}: anyone who can reach this port and knows the token can run code "
                      "and tools here; the traffic is plain HTTP (put it behind TLS to leave this machine)")

    agent_opts = agent_settings(backend=backend)  # read now: sessions' agents are made on other threads
    auto_skills = skills_auto_approved()

    def agent_factory(approve: Any) -> Any:
        return make_agent(model, tools, backend, max_steps=options["max_steps"], timeout=options["timeout"],
                          output_root=output_root, log=log, stream=True, settings=agent_opts,
                          approve=_skills_apart(approve, yes=options["yes"], auto=auto_skills, notes=notes))

    settings = {
        "model": getattr(model, "name", "?"),
        "base_url": getattr(model, "base_url", None),
        "backend": backend,
        "network": list(policy.allow) if (policy := agent_opts.get("sandbox_options", {}).get("network")) else [],
        "tools": [{"name": t.name, "requires_approval": bool(t.requires_approval)} for t in tools],
        "mcp_servers": mcp_servers,
        "max_steps": options["max_steps"],
        "timeout": options["timeout"],
        "images": bool(getattr(model, "vision", True)),
        "context_window": getattr(model, "context_window", None),
        "condenser": agent_opts.get("condenser", "fold"),
        "db": str(log.path) if log is not None and getattr(log, "path", None) else None,
        "output_dir": str(output_root),
    }
    ui_options = UIOptions(max_sessions=max_sessions, idle_timeout=idle_timeout * 60,
                           upload_limit=upload_limit * 1024 * 1024, auto_approve=options["yes"],
                           files=tuple(Path(f) for f in options["files"]), output_root=output_root)
    try:
        server = _server(UIServer, agent_factory, host, port, token, log, ui_options, settings, allow_hosts, notes)
        click.echo(f"codeact ui: {server.url}", err=True)
        click.echo("Open that URL (it carries the token). Ctrl-C stops the server and closes every sandbox.",
                   err=True)
        if not no_browser:
            threading.Timer(0.5, _open_browser, args=(server.url,)).start()
        server.serve()
    finally:
        if log is not None:
            log.close()


def _server(cls: Any, factory: Any, host: str, port: int, token: str | None, log: Any, options: Any,
            settings: dict[str, Any], allow_hosts: tuple[str, ...], notes: Any) -> Any:
    from ..errors import ConfigError

    try:
        return cls(factory, host=host, port=port, token=token, log=log, options=options, settings=settings,
                   allowed_hosts=allow_hosts)
    except ConfigError:
        if port != DEFAULT_PORT:
            raise
        notes.note(f"port {DEFAULT_PORT} is in use; picking a free one")
        return cls(factory, host=host, port=0, token=token, log=log, options=options, settings=settings,
                   allowed_hosts=allow_hosts)


def _open_browser(url: str) -> None:
    import webbrowser

    with contextlib.suppress(Exception):  # the URL is printed anyway
        webbrowser.open(url)
