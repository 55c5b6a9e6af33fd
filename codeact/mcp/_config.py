"""The ``mcpServers`` configuration that Claude Desktop, Cursor and most MCP hosts use.

Example file::

    {
      "mcpServers": {
        "git":   {"command": "uvx", "args": ["mcp-server-git", "--repository", "."]},
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/data"],
                  "env": {"API_KEY": "${env:FILES_API_KEY}"}, "cwd": "/srv"},
        "tasks": {"url": "https://tasks.example.com/mcp", "headers": {"Authorization": "Bearer ${env:TASKS_TOKEN}"}},
        "old":   {"url": "http://localhost:9000/sse", "type": "sse"}
      }
    }

A server with ``command`` runs over stdio; one with ``url`` over streamable
HTTP, or SSE when ``"type": "sse"`` (``"transport"`` is accepted too) or the
URL's path ends in ``/sse``. ``${env:VAR}`` in any string is replaced by the
environment variable (``${env:VAR:-default}`` gives a default), so secrets
stay out of the file. codeact also reads ``timeout`` (seconds one call may
take), ``connect_timeout``, ``disabled`` (skip the server) and
``parseJsonText`` (default true: a result that is one text block holding a
JSON object or array reaches the code parsed; false keeps it a ``str``) and
``alwaysAllow`` / ``autoApprove`` (the tools, by the server's names for them,
that run without asking the user; see :mod:`codeact.mcp._toolset`).
Any mistake is a :class:`~codeact.errors.ConfigError` naming the file and
the key.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

from ..errors import ConfigError

Transport = Literal["stdio", "http", "sse"]

#: Seconds one tool call may take unless the server's config says otherwise.
DEFAULT_CALL_TIMEOUT = 120.0
#: Seconds a server has to start and list its tools.
DEFAULT_CONNECT_TIMEOUT = 30.0

_TRANSPORTS: dict[str, Transport] = {
    "stdio": "stdio", "http": "http", "streamable-http": "http", "streamable_http": "http",
    "streamablehttp": "http", "sse": "sse",
}
_KNOWN_KEYS = {"command", "args", "env", "cwd", "url", "headers", "type", "transport", "timeout", "disabled",
               "connect_timeout", "parseJsonText", "description", "autoApprove", "alwaysAllow", "envFile"}
_ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass(frozen=True)
class MCPServerConfig:
    """How to reach one MCP server.

    Example::

        MCPServerConfig("time", command="mcp-server-time")
        MCPServerConfig("tasks", url="http://127.0.0.1:8000/mcp", headers={"Authorization": "Bearer x"})

    Attributes:
        name: the server's name in the configuration (prefixes its tools' names on a collision).
        command, args, env, cwd: how to start a stdio server (``env`` is added to
            a minimal inherited environment: PATH, HOME, USER, SHELL, TERM, LOGNAME).
        url, headers: where a streamable-HTTP or SSE server listens, and the headers to send.
        transport: ``"stdio"``, ``"http"`` (streamable HTTP) or ``"sse"``; inferred when omitted.
        timeout: seconds one tool call may take.
        connect_timeout: seconds the server has to start and list its tools.
        parse_json_text: a tool without an output schema whose result is one
            text block holding a JSON object or array returns the parsed
            ``dict``/``list`` instead of the text (``"parseJsonText"`` in the file).
        always_allow: names of the server's tools (as the server names them) that run without
            asking the user (``"alwaysAllow"`` or ``"autoApprove"`` in the file, as Cline, Roo
            and Claude Desktop extensions write it); ``"*"`` allows every tool of the server.
            Other tools ask first unless the server marks them ``readOnlyHint``.
        source: where this entry came from, for messages (``servers.json: mcpServers.git``).
    """

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    transport: Transport | None = None
    timeout: float | None = DEFAULT_CALL_TIMEOUT
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    parse_json_text: bool = True
    always_allow: tuple[str, ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        where = self.source or f"MCP server {self.name!r}"
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigError(f"{where}: an MCP server needs a non-empty name")
        if (self.command is None) == (self.url is None):
            raise ConfigError(f"{where}: give either \"command\" (a stdio server) or \"url\" (an HTTP server), not "
                              + ("both" if self.command is not None else "neither"))
        transport = self.transport
        if transport is None:
            transport = "stdio" if self.command is not None else (
                "sse" if (self.url or "").split("?")[0].rstrip("/").endswith("/sse") else "http")
        if transport == "stdio" and self.command is None:
            raise ConfigError(f"{where}: transport \"stdio\" needs \"command\"")
        if transport != "stdio" and self.url is None:
            raise ConfigError(f"{where}: transport {transport!r} needs \"url\"")
        if not isinstance(self.parse_json_text, bool):
            raise ConfigError(f"{where}: parse_json_text must be True or False, got {self.parse_json_text!r}")
        if self.url is not None and not re.match(r"^https?://", self.url):
            raise ConfigError(f"{where}: \"url\" must start with http:// or https://, got {self.url!r}")
        if isinstance(self.always_allow, str) or not all(isinstance(n, str) for n in self.always_allow):
            raise ConfigError(f"{where}: always_allow must be a list of tool names, got {self.always_allow!r}")
        object.__setattr__(self, "transport", transport)
        object.__setattr__(self, "always_allow", tuple(self.always_allow))
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "env", dict(self.env))
        object.__setattr__(self, "headers", dict(self.headers))

    def allows(self, tool: str) -> bool:
        """``tool`` (the server's name for it) is listed in ``always_allow`` (or ``"*"`` is)."""
        return tool in self.always_allow or "*" in self.always_allow

    @property
    def where(self) -> str:
        return self.source or f"MCP server {self.name!r}"

    def describe(self) -> str:
        """``stdio: mcp-server-time --local-timezone UTC`` / ``http: https://...`` (no header values)."""
        if self.transport == "stdio":
            return f"stdio: {shlex.join([self.command or '', *self.args])}"
        return f"{self.transport}: {self.url}"


def expand_env(value: str, where: str, environ: Mapping[str, str] | None = None) -> str:
    """Replace ``${env:VAR}`` (and ``${env:VAR:-default}``) in ``value``.

    Raises:
        ConfigError: a variable is not set and has no default (``where`` names the key).
    """
    environ = os.environ if environ is None else environ

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        raise ConfigError(f"{where}: the environment variable {name} is not set (it is used as ${{env:{name}}}); "
                          "set it, or write ${env:" + name + ":-default} to give a default")

    return _ENV_REF.sub(substitute, value)


def parse_config(data: Any, source: str = "<mcpServers>", environ: Mapping[str, str] | None = None,
                 base_dir: Path | None = None) -> list[MCPServerConfig]:
    """The servers of an ``mcpServers`` JSON document (the whole document, or just its ``mcpServers`` object).

    Disabled servers (``"disabled": true``) are left out. Relative ``cwd``
    paths are taken from ``base_dir`` (the file's directory).

    Raises:
        ConfigError: naming ``source`` and the key at fault.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a JSON object with \"mcpServers\", got {type(data).__name__}")
    if "mcpServers" in data:
        servers = data["mcpServers"]
        prefix = "mcpServers"
    elif "servers" in data and isinstance(data["servers"], Mapping):  # VS Code's spelling
        servers = data["servers"]
        prefix = "servers"
    else:
        raise ConfigError(f"{source}: no \"mcpServers\" key; the file should look like "
                          '{"mcpServers": {"name": {"command": "...", "args": [...]}}}')
    if not isinstance(servers, Mapping):
        raise ConfigError(f"{source}: {prefix} must be an object mapping server names to settings, "
                          f"got {type(servers).__name__}")
    out = []
    for name, entry in servers.items():
        where = f"{source}: {prefix}.{name}"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: expected an object like {{\"command\": ..., \"args\": [...]}}, "
                              f"got {type(entry).__name__}")
        unknown = sorted(set(entry) - _KNOWN_KEYS)
        if unknown:
            raise ConfigError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                              "known keys: command, args, env, cwd, url, headers, type, timeout, connect_timeout, "
                              "disabled, parseJsonText, alwaysAllow, autoApprove")
        disabled = entry.get("disabled", False)
        if not isinstance(disabled, bool):
            raise ConfigError(f"{where}.disabled: expected true or false, got {disabled!r}")
        if disabled:
            continue
        out.append(_server(str(name), entry, where, environ, base_dir))
    return out


def _server(name: str, entry: Mapping[str, Any], where: str, environ: Mapping[str, str] | None,
            base_dir: Path | None) -> MCPServerConfig:
    def text(key: str) -> str | None:
        value = entry.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise ConfigError(f"{where}.{key}: expected a string, got {type(value).__name__} {value!r}")
        return expand_env(value, f"{where}.{key}", environ)

    def strings(key: str) -> list[str]:
        value = entry.get(key, [])
        if not isinstance(value, list):
            raise ConfigError(f"{where}.{key}: expected a list of strings, got {type(value).__name__}")
        items = []
        for i, item in enumerate(value):
            if not isinstance(item, (str, int, float)) or isinstance(item, bool):
                raise ConfigError(f"{where}.{key}[{i}]: expected a string, got {type(item).__name__} {item!r}")
            items.append(expand_env(str(item), f"{where}.{key}[{i}]", environ))
        return items

    def mapping(key: str) -> dict[str, str]:
        value = entry.get(key, {})
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}.{key}: expected an object of name -> string, got {type(value).__name__}")
        out = {}
        for k, v in value.items():
            if not isinstance(v, (str, int, float)) or isinstance(v, bool):
                raise ConfigError(f"{where}.{key}.{k}: expected a string, got {type(v).__name__} {v!r}")
            out[str(k)] = expand_env(str(v), f"{where}.{key}.{k}", environ)
        return out

    def seconds(key: str, default: float | None) -> float | None:
        value = entry.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ConfigError(f"{where}.{key}: expected a positive number of seconds, got {value!r}")
        return float(value)

    kind = entry.get("type", entry.get("transport"))
    transport: Transport | None = None
    if kind is not None:
        key = "type" if "type" in entry else "transport"
        if not isinstance(kind, str) or kind.lower() not in _TRANSPORTS:
            raise ConfigError(f"{where}.{key}: unknown transport {kind!r}; use \"stdio\", \"http\" or \"sse\"")
        transport = _TRANSPORTS[kind.lower()]
    cwd = text("cwd")
    if cwd is not None and base_dir is not None and not os.path.isabs(cwd):
        cwd = str(base_dir / cwd)
    command = text("command")
    if command is not None and not command.strip():
        raise ConfigError(f"{where}.command: is empty")
    parse_json_text = entry.get("parseJsonText", True)
    if not isinstance(parse_json_text, bool):
        raise ConfigError(f"{where}.parseJsonText: expected true or false, got {parse_json_text!r} "
                          "(true: a JSON object or array sent as text reaches the code parsed; false: as a str)")
    always_allow: list[str] = []
    for key in ("alwaysAllow", "autoApprove"):  # Cline/Roo write alwaysAllow, others autoApprove: both mean it
        if key in entry:
            always_allow.extend(n for n in strings(key) if n not in always_allow)
    return MCPServerConfig(
        name=name, command=command, args=tuple(strings("args")), env=mapping("env"), cwd=cwd,
        url=text("url"), headers=mapping("headers"), transport=transport,
        timeout=seconds("timeout", DEFAULT_CALL_TIMEOUT),
        connect_timeout=seconds("connect_timeout", DEFAULT_CONNECT_TIMEOUT) or DEFAULT_CONNECT_TIMEOUT,
        parse_json_text=parse_json_text, always_allow=tuple(always_allow), source=where,
    )


def load_config(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> list[MCPServerConfig]:
    """The servers of an ``mcpServers`` JSON file.

    Raises:
        ConfigError: the file is missing or not JSON (with the line and column),
            or an entry is wrong (with the key).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{p}: MCP configuration file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read the MCP configuration: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{p}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    return parse_config(data, str(p), environ, p.parent)


def parse_server_spec(spec: str, environ: Mapping[str, str] | None = None) -> MCPServerConfig:
    """``NAME=COMMAND ARGS`` (shell-style quoting) or ``NAME=URL`` as a server, for ``--mcp-server``.

    Example::

        parse_server_spec("time=mcp-server-time --local-timezone UTC")
        parse_server_spec("tasks=http://127.0.0.1:8000/mcp")

    Raises:
        ConfigError: no ``=``, an empty name or command, unbalanced quotes.
    """
    where = f"--mcp-server {spec!r}"
    name, sep, rest = spec.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ConfigError(f"{where}: expected NAME=COMMAND ARGS, e.g. --mcp-server \"time=mcp-server-time\"")
    rest = rest.strip()
    if re.match(r"^https?://", rest):
        return MCPServerConfig(name=name, url=expand_env(rest, where, environ), source=where)
    try:
        words = shlex.split(rest)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if not words:
        raise ConfigError(f"{where}: no command after {name}=")
    words = [expand_env(w, where, environ) for w in words]
    return MCPServerConfig(name=name, command=words[0], args=tuple(words[1:]), source=where)
