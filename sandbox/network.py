"""A network allow-list for the Docker sandbox: the container's only route is a proxy on the host.

``DockerSandbox(network=NetworkPolicy(allow=["api.example.com", "*.data.example.org"]))``
gives the code HTTP and HTTPS to the listed host names and nothing else. The
default stays no network at all; ``network=True`` is still a full bridge (and
warns).

How the container reaches the proxy
-----------------------------------

The container keeps ``network_mode=none``: its network namespace has a
loopback interface and no other, so no route leads anywhere. The host (the
process that owns the session, on an engine on this machine, allowed to enter
other network namespaces: root) creates ONE listening TCP socket *inside the
container's namespace*, on ``127.0.0.1:3128`` (:data:`PROXY_PORT`), from a
thread that joins that namespace only to create the socket (as
:mod:`sandbox._netns` does for the kernel's call socket). A socket keeps the
namespace it was made in, so the proxy in this process accepts the container's
connections on the container's own loopback, and opens the upstream
connections from the host's namespace, after its checks. The kernel gets
``HTTP_PROXY``/``HTTPS_PROXY`` (and the lowercase forms) set to that address,
and ``NO_PROXY`` for the container's own loopback; ``requests``, ``urllib``,
``httpx`` and ``pip`` honour them.

Why not the alternatives: an *internal* Docker network (no egress) with the
proxy on its gateway address exposes every service of the host that listens on
all addresses to the container (the gateway *is* the host), unless firewall
rules are added and kept right; a proxy container needs a second container,
a network between the two, and an image that holds the proxy; relaying over the
engine's exec/attach streams costs two extra relays per byte. The namespace
socket adds no interface, no route, no firewall rule and no container, and
nothing in the container can reach anything but that one port. It needs what
the direct kernel link needs: a local engine, a runtime that uses the host's
network namespaces (runc; not gVisor, whose network stack is its own) and
root. Where that is missing, the session does not start and says so
(:class:`~sandbox.errors.BackendUnavailable`).

What the proxy checks
---------------------

Every request is ``CONNECT host:port`` (HTTPS, a tunnel) or an absolute-form
``GET http://host/...`` (plain HTTP). The host name must match ``allow``
(exact names, or ``*.suffix`` for any name below ``suffix``) and the port
``ports``. The proxy then resolves the name itself (``resolve=`` first, a
mapping meant for tests; else the host's resolver) and keeps only public
addresses: private, loopback, link-local, multicast, reserved and unspecified
addresses are refused unless the host name or the address is listed in
``allow_private``, so a name that resolves (or rebinds) to the host's own
network cannot reach it. It connects to the address it checked: there is no
second resolution. A refusal is an HTTP 403 whose reason and body name the
policy, which the code sees as ``requests``' ``ProxyError``/``HTTPError``
text, ``urllib``'s ``HTTPError`` and so on.

Secrets
-------

``secrets={"api.example.com": {"Authorization": "Bearer sk-..."}}`` are headers
the proxy sets (replacing any the code sent) on requests to that host. A
``CONNECT`` tunnel carries TLS the proxy cannot read, so for a host with
secrets the code uses ``http://api.example.com/...``: the proxy terminates that
plain HTTP (on the container's loopback, never on a wire), adds the headers and
opens TLS toward the real host, verified against ``ca_bundle`` or the host's
CA store (``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE``, the system's). A
``CONNECT`` to a host with secrets is refused with a 403 that says to use
``http://``. The key exists only in this process: the container's
environment carries the proxy address and the names of the hosts that have
secrets (:data:`SECRET_HOSTS_ENV`), never a value.

Bounds
------

Code in the sandbox is hostile. Per sandbox the proxy holds at most
``max_connections`` connections (more are answered 503 and closed), reads at
most ``max_header_bytes`` of request (and response) head (431), gives a client
``header_timeout`` seconds to send its whole head (slow senders get 408),
drops a connection idle in both directions for ``idle_timeout`` seconds, and
waits at most ``connect_timeout`` seconds for DNS and the upstream connection.
All of it runs on one event-loop thread per sandbox.

Records
-------

Every request (allowed or refused) becomes a :class:`NetworkRecord` (host,
port, method, allowed, status, bytes each way, duration, why refused) when its
connection ends, kept on the sandbox (``DockerSandbox.network_requests``) and
handed to its listeners (``DockerSandbox.network_listeners``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
import ssl
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

from .errors import NetworkPolicyError, SandboxError

#: The port the proxy listens on, on the container's loopback (each container has a namespace of its own).
PROXY_PORT = 3128
#: The proxy's address as the code sees it.
PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"
#: The environment variable that lists the hosts whose requests get secrets (names only, comma-separated).
SECRET_HOSTS_ENV = "SANDBOX_NETWORK_SECRET_HOSTS"
__all__ = ["NetworkPolicy", "NetworkPolicyError", "NetworkRecord", "NetworkProxy", "NetworkLog", "PROXY_PORT",
           "PROXY_URL", "SECRET_HOSTS_ENV", "public"]

#: Records kept on a sandbox (the oldest go first); listeners see every one.
MAX_RECORDS = 10_000

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
#: Headers the proxy owns: a secret may not set them.
_RESERVED_HEADERS = frozenset({
    "host", "connection", "content-length", "transfer-encoding", "te", "trailer", "upgrade", "keep-alive",
    "proxy-connection", "proxy-authorization", "proxy-authenticate", "expect",
})
#: Hop-by-hop request headers the proxy drops before forwarding.
_HOP_HEADERS = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te",
                          "trailer", "upgrade"})


def _normal_host(host: str) -> str:
    return host.strip().lower().rstrip(".")


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def _check_name(name: str, what: str) -> str:
    """``name`` as a lower-case DNS name, or NetworkPolicyError."""
    host = _normal_host(name)
    if "://" in host or "/" in host:
        raise NetworkPolicyError(f"{what} {name!r}: give a host name such as 'api.example.com', not a URL")
    if ":" in host and _ip(host) is None:
        raise NetworkPolicyError(f"{what} {name!r}: give the host name without a port; ports go in ports=")
    if _ip(host) is not None:
        return str(_ip(host))
    if not host or len(host) > 253 or not all(_LABEL.match(label) for label in host.split(".")):
        raise NetworkPolicyError(f"{what} {name!r} is not a host name: letters, digits and '-' in dot-separated "
                                 "labels, e.g. 'api.example.com'")
    return host


def _check_pattern(pattern: str) -> str:
    if not isinstance(pattern, str):
        raise NetworkPolicyError(f"allow: {pattern!r} is not a string")
    p = _normal_host(pattern)
    if p.startswith("*."):
        rest = _check_name(p[2:], "allow")
        if _ip(rest) is not None or "." not in rest:
            raise NetworkPolicyError(f"allow {pattern!r}: a wildcard needs a domain of at least two labels, "
                                     "e.g. '*.example.org'")
        return "*." + rest
    if "*" in p:
        raise NetworkPolicyError(f"allow {pattern!r}: '*' is allowed only as the whole first label ('*.example.org')")
    return _check_name(p, "allow")


def _check_header(host: str, name: Any, value: Any) -> tuple[str, str]:
    if not isinstance(name, str) or not _TOKEN.match(name):
        raise NetworkPolicyError(f"secrets[{host!r}]: {name!r} is not a header name (letters, digits and "
                                 "!#$%&'*+-.^_`|~)")
    if name.lower() in _RESERVED_HEADERS:
        raise NetworkPolicyError(f"secrets[{host!r}]: the proxy sets the header {name!r} itself; "
                                 "give headers such as Authorization or X-Api-Key")
    if not isinstance(value, str) or any(ord(c) < 0x20 and c != "\t" or ord(c) == 0x7F for c in value) \
            or not value.isascii():
        raise NetworkPolicyError(f"secrets[{host!r}][{name!r}]: a header value must be printable ASCII on "
                                 "one line")
    return name, value


@dataclass(frozen=True)
class NetworkPolicy:
    """Which hosts the sandboxed code may reach over HTTP(S), through a proxy on the host.

    Args:
        allow: host names (``"api.example.com"``), wildcards (``"*.example.org"``: any name below
            ``example.org``, not ``example.org`` itself) or IP addresses the code may reach.
        secrets: ``{host: {header: value}}``: headers the proxy adds to plain-HTTP requests to
            ``host`` (an exact name in ``allow``) and that the sandbox never sees. The code uses
            ``http://host/...``; the proxy speaks TLS to the host (see the module docs).
        ports: the ports the code may reach (``None``: any port).
        allow_private: host names, addresses or networks (``"10.0.0.0/8"``) that may resolve to
            private, loopback, link-local or other non-public addresses. Nothing else may.
        resolve: ``{host: address}``: names the proxy resolves from this mapping and never from DNS.
            Meant for tests (test host names mapped to servers on loopback).
        ca_bundle: a PEM file the proxy verifies upstream TLS against (for hosts with secrets);
            default: the host's store (``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE``, the system's).
        max_connections: connections one sandbox may hold open through the proxy at once.
        max_header_bytes: bytes of a request's (or response's) head the proxy reads.
        header_timeout: seconds a client has to send a request's whole head.
        idle_timeout: seconds a connection may stay silent in both directions.
        connect_timeout: seconds for resolving a name and connecting upstream.
        name: how refusals name the policy (``"the sandbox network policy"``).

    Example::

        policy = NetworkPolicy(allow=["api.example.com", "*.data.example.org"],
                               secrets={"api.example.com": {"Authorization": "Bearer sk-..."}})
        with DockerSandbox(network=policy) as sb:
            sb.run("import requests; print(requests.get('http://api.example.com/v1/me').json())")
    """

    allow: tuple[str, ...] = ()
    secrets: Mapping[str, Mapping[str, str]] = field(default_factory=dict, repr=False)
    ports: tuple[int, ...] | None = (80, 443)
    allow_private: tuple[str, ...] = ()
    resolve: Mapping[str, str] = field(default_factory=dict)
    ca_bundle: str | None = None
    max_connections: int = 32
    max_header_bytes: int = 32 * 1024
    header_timeout: float = 10.0
    idle_timeout: float = 60.0
    connect_timeout: float = 10.0
    name: str = "the sandbox network policy"

    def __post_init__(self) -> None:
        put = object.__setattr__
        if isinstance(self.allow, str):
            raise NetworkPolicyError("allow= takes a list of host names, e.g. allow=['api.example.com']")
        put(self, "allow", tuple(dict.fromkeys(_check_pattern(p) for p in self.allow)))
        if not self.allow:
            raise NetworkPolicyError("allow= is empty: list the hosts the code may reach (or leave network= off)")
        if self.ports is not None:
            ports = tuple(self.ports) if not isinstance(self.ports, int) else (self.ports,)
            for port in ports:
                if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
                    raise NetworkPolicyError(f"ports: {port!r} is not a port number (1-65535)")
            put(self, "ports", ports)
        if isinstance(self.allow_private, str):
            put(self, "allow_private", (self.allow_private,))
        private: list[str] = []
        for entry in self.allow_private:
            text = str(entry).strip()
            try:
                private.append(str(ipaddress.ip_network(text, strict=False)))
            except ValueError:
                if "*" in text:
                    raise NetworkPolicyError(f"allow_private {entry!r}: list exact host names or addresses, "
                                             "not wildcards") from None
                private.append(_check_name(text, "allow_private"))
        put(self, "allow_private", tuple(private))
        resolve: dict[str, str] = {}
        for host, address in dict(self.resolve).items():
            ip = _ip(str(address))
            if ip is None:
                raise NetworkPolicyError(f"resolve[{host!r}]: {address!r} is not an IP address")
            resolve[_check_name(str(host), "resolve")] = str(ip)
        put(self, "resolve", MappingProxyType(resolve))
        secrets: dict[str, Mapping[str, str]] = {}
        for host, headers in dict(self.secrets).items():
            key = _check_name(str(host), "secrets")
            if not self.allows(key):
                raise NetworkPolicyError(f"secrets: {host!r} is not in allow=; list it there too")
            if not isinstance(headers, Mapping) or not headers:
                raise NetworkPolicyError(f"secrets[{host!r}] must be a non-empty {{header: value}} mapping")
            checked = dict(_check_header(key, n, v) for n, v in headers.items())
            secrets[key] = MappingProxyType(checked)
        put(self, "secrets", MappingProxyType(secrets))
        for attr in ("max_connections", "max_header_bytes"):
            value = getattr(self, attr)
            if not isinstance(value, int) or value < 1:
                raise NetworkPolicyError(f"{attr} must be a positive integer, not {value!r}")
        if self.max_header_bytes < 1024:
            raise NetworkPolicyError("max_header_bytes must be at least 1024")
        for attr in ("header_timeout", "idle_timeout", "connect_timeout"):
            value = getattr(self, attr)
            if not isinstance(value, (int, float)) or not value > 0:
                raise NetworkPolicyError(f"{attr} must be a positive number of seconds, not {value!r}")
        if not isinstance(self.name, str) or not self.name.isprintable() or not self.name.isascii() \
                or not 0 < len(self.name) <= 100:
            raise NetworkPolicyError("name must be printable ASCII on one line, at most 100 characters")
        if self.ca_bundle is not None:
            put(self, "ca_bundle", str(self.ca_bundle))
            try:
                ssl.create_default_context(cafile=self.ca_bundle)
            except (OSError, ssl.SSLError) as exc:
                raise NetworkPolicyError(f"ca_bundle {self.ca_bundle!r} is not a readable PEM file of CA "
                                         f"certificates ({exc})") from None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:  # picklable (Ray workers, process pools)
        fields = {f: getattr(self, f) for f in self.__dataclass_fields__}
        fields["secrets"] = {h: dict(v) for h, v in self.secrets.items()}
        fields["resolve"] = dict(self.resolve)
        return (_policy_from, (fields,))

    def __repr__(self) -> str:  # the secrets' values never appear in a repr, a log or a traceback
        hidden = {host: sorted(headers) for host, headers in self.secrets.items()}
        return (f"NetworkPolicy(allow={list(self.allow)!r}, secrets={hidden!r} (values hidden), "
                f"ports={self.ports!r}, allow_private={list(self.allow_private)!r})")

    def allows(self, host: str) -> bool:
        """Whether the (normalised) host name or address ``host`` matches ``allow``."""
        host = _normal_host(host)
        literal = _ip(host) is not None  # an address matches only itself, never a wildcard
        return any(pattern == host or (not literal and pattern.startswith("*.") and host.endswith(pattern[1:]))
                   for pattern in self.allow)

    def port_allowed(self, port: int) -> bool:
        return self.ports is None or port in self.ports

    def private_allowed(self, host: str, address: str) -> bool:
        """Whether ``host`` may use the non-public ``address`` (listed by name, address or network)."""
        ip = ipaddress.ip_address(address)
        for entry in self.allow_private:
            if entry == host:
                return True
            with contextlib.suppress(ValueError):
                if ip in ipaddress.ip_network(entry, strict=False):
                    return True
        return False

    @classmethod
    def from_options(cls, allow: Iterable[str], secrets_file: str | None = None,
                     **options: Any) -> NetworkPolicy | None:
        """The policy of command-line style options: host patterns (comma-separated items allowed) and a JSON file
        ``{"host": {"Header": "value"}}`` of secrets; None when neither is given.

        Raises:
            NetworkPolicyError: a bad pattern, an unreadable or malformed file, a secret for an unlisted host.
        """
        hosts = [part.strip() for item in allow for part in str(item).replace(" ", ",").split(",") if part.strip()]
        secrets: dict[str, Any] = {}
        if secrets_file:
            import json

            try:
                with open(secrets_file, encoding="utf-8") as f:
                    secrets = json.load(f)
            except OSError as exc:
                raise NetworkPolicyError(f"cannot read the secrets file {secrets_file}: {exc.strerror}") from None
            except ValueError as exc:
                raise NetworkPolicyError(f"the secrets file {secrets_file} is not JSON: {exc}") from None
            if not isinstance(secrets, dict):
                raise NetworkPolicyError(f"the secrets file {secrets_file} must hold an object "
                                         '{"host": {"Header": "value"}}')
            hosts += [h for h in secrets if isinstance(h, str) and _normal_host(h) not in
                      {_normal_host(x) for x in hosts}]
        if not hosts:
            return None
        return cls(allow=tuple(hosts), secrets=secrets, **options)

    def environment(self) -> dict[str, str]:
        """The variables the kernel gets: the proxy's address, and the hosts that have secrets (names only)."""
        env = {name: PROXY_URL for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
        env["NO_PROXY"] = env["no_proxy"] = "localhost,127.0.0.1,::1"
        if self.secrets:
            env[SECRET_HOSTS_ENV] = ",".join(sorted(self.secrets))
        return env


def _policy_from(fields: dict[str, Any]) -> NetworkPolicy:
    return NetworkPolicy(**fields)


def public(address: str) -> bool:
    """Whether ``address`` is a global unicast address (not private, loopback, link-local, multicast,
    reserved or unspecified; IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return bool(ip.is_global) and not (ip.is_multicast or ip.is_private or ip.is_loopback or ip.is_link_local
                                      or ip.is_reserved or ip.is_unspecified)


@dataclass(frozen=True)
class NetworkRecord:
    """One request through the proxy. ``kind``: ``"tunnel"`` (CONNECT), ``"http"`` (plain HTTP upstream),
    ``"https"`` (plain HTTP from the code, TLS upstream: a host with secrets). ``status`` is the HTTP status
    the code got (200 for an open tunnel; None when the connection ended before one). ``reason`` says why a
    request was refused or failed. ``secrets`` lists the header names the proxy added (never values)."""

    host: str
    port: int
    method: str
    allowed: bool
    status: int | None
    bytes_sent: int
    bytes_received: int
    duration: float
    started: float
    kind: str = "http"
    address: str | None = None
    reason: str = ""
    secrets: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "port": self.port, "method": self.method, "allowed": self.allowed,
                "status": self.status, "bytes_sent": self.bytes_sent, "bytes_received": self.bytes_received,
                "duration": round(self.duration, 6), "started": self.started, "kind": self.kind,
                "address": self.address, "reason": self.reason, "secrets": list(self.secrets)}


class _Refused(Exception):
    def __init__(self, status: int, reason: str, text: str) -> None:
        super().__init__(text)
        self.status, self.reason, self.text = status, reason, text


class _Conn:
    """What one client connection did, for its record."""

    def __init__(self) -> None:
        self.started = time.time()
        self.clock = time.monotonic()
        self.host, self.port, self.method, self.kind = "", 0, "", "http"
        self.address: str | None = None
        self.status: int | None = None
        self.allowed = False
        self.sent = self.received = 0
        self.reason = ""
        self.secrets: tuple[str, ...] = ()
        self.last = time.monotonic()


class NetworkProxy:
    """The HTTP proxy of one sandbox: an event loop on a thread of its own, serving the listening sockets
    handed to :meth:`listen` (made in a container's network namespace) under ``policy``.

    ``on_record`` is called (on the proxy's thread) with each :class:`NetworkRecord`; it must not block.
    """

    def __init__(self, policy: NetworkPolicy, on_record: Callable[[NetworkRecord], None] | None = None) -> None:
        self.policy = policy
        self.on_record = on_record
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._active = 0
        #: The most connections open at once so far (never above the policy's max_connections).
        self.peak = 0
        self._closed = False
        self._tls: ssl.SSLContext | None = None
        #: Started by the first listen(): a sandbox that never starts leaves no thread.
        self._thread = threading.Thread(target=self._run, name="sandbox-network-proxy", daemon=True)

    @property
    def active(self) -> int:
        """Connections open now."""
        return self._active

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()
        # Closing: end every connection, then the loop.
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            self._loop.run_until_complete(asyncio.gather(*self._tasks, return_exceptions=True))
        self._loop.run_until_complete(self._loop.shutdown_default_executor())
        self._loop.close()

    def _call(self, coro: Any, timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def listen(self, sock: socket.socket) -> None:
        """Serve the listening socket ``sock`` (the proxy owns it from now on)."""
        if self._closed:
            sock.close()
            raise SandboxError("the network proxy is closed")
        sock.setblocking(False)
        if not self._thread.is_alive():
            self._thread.start()

        async def start() -> None:
            server = await asyncio.start_server(self._client, sock=sock, limit=self.policy.max_header_bytes)
            self._servers.append(server)

        self._call(start())

    def stop_listening(self) -> None:
        """Close the listening sockets (a container that goes away); open connections end too."""
        if self._closed or not self._thread.is_alive():
            return

        async def stop() -> None:
            servers, self._servers = self._servers, []
            for server in servers:
                server.close()
            for task in list(self._tasks):
                task.cancel()

        with contextlib.suppress(Exception):
            self._call(stop())

    def close(self) -> None:
        if self._closed:
            return
        self.stop_listening()
        self._closed = True
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        else:
            self._loop.close()

    # --- one connection ---------------------------------------------------------------------------

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        conn = _Conn()
        if self._active >= self.policy.max_connections:
            conn.reason = f"more than {self.policy.max_connections} connections at once"
            await self._answer(writer, conn, _Refused(503, "Too many connections",
                                                      f"{self.policy.name}: {conn.reason}; close some first"),
                               record=False)
            return
        self._active += 1
        self.peak = max(self.peak, self._active)
        self._tasks.add(task)
        upstream: asyncio.StreamWriter | None = None
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.policy.header_timeout)
            except asyncio.LimitOverrunError:
                raise _Refused(431, "Request header fields too large",
                               f"{self.policy.name}: a request head may have at most "
                               f"{self.policy.max_header_bytes} bytes") from None
            except (asyncio.TimeoutError, TimeoutError):
                raise _Refused(408, "Request timeout", f"{self.policy.name}: the request head did not arrive "
                                                       f"within {self.policy.header_timeout:g} s") from None
            except (asyncio.IncompleteReadError, ConnectionError):
                conn.reason = "the client closed before a whole request"
                return
            method, target, headers = _parse_head(head)
            conn.method = method
            if method == "CONNECT":
                conn.kind = "tunnel"
                host, port = _split_host_port(target, None)
                body = None  # a tunnel: bytes both ways until either end closes
            else:
                host, port, path = _absolute_url(target)
                body = _body_length(headers)
            conn.host, conn.port = host, port
            secrets = self.policy.secrets.get(host)
            if conn.kind == "tunnel" and secrets:
                raise _Refused(403, f"Forbidden by {self.policy.name}: use http://{host}/ (the proxy adds its "
                                    "credentials and speaks TLS)",
                               f"{self.policy.name}: {host} gets credentials from the proxy, which cannot add "
                               f"them inside a TLS tunnel; use http://{host}/... (the proxy speaks HTTPS to "
                               f"{host} for you)")
            tls = None
            if conn.kind != "tunnel" and secrets:
                conn.kind = "https"
                try:
                    tls = self._tls_context()
                except (OSError, ssl.SSLError) as exc:
                    raise _Refused(502, "Bad gateway", f"the host's CA certificates cannot be loaded: {exc}") \
                        from None
                if port == 80 and not _explicit_port(target):
                    port = conn.port = 443
            address = await self._check(host, port)
            conn.address = address
            try:
                up_reader, up_writer = await asyncio.wait_for(
                    asyncio.open_connection(address, port, ssl=tls, server_hostname=host if tls else None,
                                            limit=self.policy.max_header_bytes),
                    self.policy.connect_timeout)
            except (asyncio.TimeoutError, TimeoutError):
                raise _Refused(504, "Gateway timeout", f"{host}:{port} did not answer within "
                                                       f"{self.policy.connect_timeout:g} s") from None
            except ssl.SSLError as exc:
                raise _Refused(502, "Bad gateway", f"TLS to {host}:{port} failed: {exc.reason or exc}") from None
            except OSError as exc:
                raise _Refused(502, "Bad gateway", f"cannot connect to {host}:{port}: {exc.strerror or exc}") \
                    from None
            upstream = up_writer
            conn.allowed = True
            if conn.kind == "tunnel":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                conn.status = 200
                await writer.drain()
            else:
                conn.secrets = tuple(secrets or ())
                forwarded = _request_head(method, path, host, conn.port, headers, secrets or {})
                up_writer.write(forwarded)
                conn.sent += len(forwarded)
            await self._relay(reader, writer, up_reader, up_writer, conn, parse_response=conn.kind != "tunnel",
                              body=body)
        except _Refused as refused:
            await self._answer(writer, conn, refused)
            return
        except asyncio.CancelledError:
            conn.reason = conn.reason or "the sandbox closed"
        except Exception as exc:  # never let one connection take the proxy down
            conn.reason = conn.reason or f"{type(exc).__name__}: {exc}"
        finally:
            if upstream is not None:
                upstream.close()
            writer.close()
            self._active -= 1
            self._tasks.discard(task)
        self._record(conn)

    async def _check(self, host: str, port: int) -> str:
        """The address to connect to for ``host``, after every check; _Refused otherwise."""
        policy = self.policy
        refuse = f"Forbidden by {policy.name}"
        if not policy.allows(host):
            raise _Refused(403, f"{refuse}: {host} is not allowed",
                           f"{policy.name} does not allow {host}: the allowed hosts are "
                           f"{', '.join(policy.allow)}")
        if not policy.port_allowed(port):
            raise _Refused(403, f"{refuse}: port {port} is not allowed",
                           f"{policy.name} does not allow port {port} (allowed: "
                           f"{', '.join(map(str, policy.ports or ()))})")
        literal = _ip(host)
        if literal is not None:
            addresses = [str(literal)]
        elif host in policy.resolve:
            addresses = [policy.resolve[host]]
        else:
            try:
                infos = await asyncio.wait_for(
                    self._loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), policy.connect_timeout)
            except (asyncio.TimeoutError, TimeoutError):
                raise _Refused(504, "Gateway timeout", f"resolving {host} took longer than "
                                                       f"{policy.connect_timeout:g} s") from None
            except OSError as exc:
                raise _Refused(502, "Bad gateway", f"cannot resolve {host}: {exc}") from None
            addresses = list(dict.fromkeys(str(info[4][0]).split("%")[0] for info in infos))
        usable = [a for a in addresses if public(a) or policy.private_allowed(host, a)]
        if not usable:
            raise _Refused(403, f"{refuse}: {host} resolves to a non-public address",
                           f"{policy.name} refuses {host}: it resolves to {', '.join(addresses)}, a "
                           "private, loopback or otherwise non-public address (list it in "
                           "allow_private to allow that)")
        return usable[0]

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context(cafile=self.policy.ca_bundle) if self.policy.ca_bundle \
                else _default_tls()
        return self._tls

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter,
                     up_r: asyncio.StreamReader, up_w: asyncio.StreamWriter, conn: _Conn,
                     parse_response: bool, body: int | None = None) -> None:
        """Relay until the answer ends. ``body``: bytes of request body to pass on (then nothing more from the
        client: no second request rides on the first), :data:`CHUNKED` for a chunked body (passed on to its last
        chunk, no further), or None for everything the client sends (a tunnel)."""
        idle = self.policy.idle_timeout

        async def line(src: asyncio.StreamReader) -> bytes:
            try:
                data = await asyncio.wait_for(src.readuntil(b"\r\n"), idle)
            except asyncio.LimitOverrunError:
                raise _Refused(400, "Bad request", "a chunk line is too long") from None
            conn.last = time.monotonic()
            return data

        async def chunked(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            """A chunked body, chunk by chunk, through its trailer; then nothing more."""
            while True:
                size_line = await line(src)
                size_text = size_line.split(b";", 1)[0].strip()
                if not size_text or len(size_text) > 15 or any(c not in b"0123456789abcdefABCDEF" for c in size_text):
                    return  # not a chunk: the rest goes nowhere, the server sees a short body
                size = int(size_text, 16)
                dst.write(size_line)
                conn.sent += len(size_line)
                if size == 0:
                    while True:  # trailer lines, then the empty line that ends the body
                        trailer = await line(src)
                        dst.write(trailer)
                        conn.sent += len(trailer)
                        if trailer == b"\r\n":
                            await dst.drain()
                            return
                left = size + 2  # the data and its CRLF
                while left > 0:
                    data = await asyncio.wait_for(src.read(min(left, 65536)), idle)
                    if not data:
                        return
                    left -= len(data)
                    conn.last = time.monotonic()
                    conn.sent += len(data)
                    dst.write(data)
                    await dst.drain()

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, upward: bool) -> None:
            left = body if upward else None
            while True:
                if left is not None and left <= 0:
                    return
                try:
                    data = await asyncio.wait_for(src.read(65536 if left is None else min(left, 65536)), idle)
                except (asyncio.TimeoutError, TimeoutError):
                    if time.monotonic() - conn.last >= idle:
                        conn.reason = conn.reason or f"idle for {idle:g} s"
                        return
                    continue
                if not data:
                    if upward:  # the client finished sending: tell the upstream, keep reading its answer
                        with contextlib.suppress(OSError, RuntimeError):
                            if dst.can_write_eof():
                                dst.write_eof()
                    return
                conn.last = time.monotonic()
                if left is not None:
                    left -= len(data)
                if upward:
                    conn.sent += len(data)
                else:
                    conn.received += len(data)
                dst.write(data)
                await dst.drain()

        # The body goes up while the answer's head is awaited (a client that sent "Expect: 100-continue"
        # sends it after the 100, which is passed on as it is).
        up = asyncio.ensure_future(chunked(client_r, up_w) if body == CHUNKED else pipe(client_r, up_w, True))
        down: asyncio.Future[None] | None = None
        try:
            while parse_response:
                try:
                    head = await asyncio.wait_for(up_r.readuntil(b"\r\n\r\n"), idle)
                except asyncio.LimitOverrunError:
                    raise _Refused(502, "Bad gateway", f"{conn.host} answered with a head over "
                                                       f"{self.policy.max_header_bytes} bytes") from None
                except (asyncio.TimeoutError, TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                    raise _Refused(502, "Bad gateway", f"{conn.host} did not answer") from None
                conn.status, rewritten = _response_head(head)
                interim = conn.status is not None and 100 <= conn.status < 200
                out = head if interim else rewritten
                conn.received += len(out)
                client_w.write(out)
                await client_w.drain()
                parse_response = interim
            down = asyncio.ensure_future(pipe(up_r, client_w, False))
            # The answer's end ends the connection; a client that stops sending does not.
            await down
        finally:
            for t in (up, down):
                if t is not None and not t.done():
                    t.cancel()
            await asyncio.gather(*(t for t in (up, down) if t is not None), return_exceptions=True)

    async def _answer(self, writer: asyncio.StreamWriter, conn: _Conn, refused: _Refused,
                      record: bool = True) -> None:
        conn.status = refused.status
        conn.reason = conn.reason or refused.text
        body = (refused.text + "\n").encode("utf-8", "replace")
        reason = refused.reason.encode("ascii", "replace")
        head = (b"HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n"
                b"Connection: close\r\n\r\n" % (refused.status, reason, len(body)))
        with contextlib.suppress(Exception):
            writer.write(head + body)
            await asyncio.wait_for(writer.drain(), 5)
        conn.received = len(head) + len(body)
        with contextlib.suppress(Exception):
            writer.close()
        if record:
            self._record(conn)

    def _record(self, conn: _Conn) -> None:
        if self.on_record is None:
            return
        rec = NetworkRecord(host=conn.host, port=conn.port, method=conn.method, allowed=conn.allowed,
                            status=conn.status, bytes_sent=conn.sent, bytes_received=conn.received,
                            duration=time.monotonic() - conn.clock, started=conn.started, kind=conn.kind,
                            address=conn.address, reason=conn.reason, secrets=conn.secrets)
        with contextlib.suppress(Exception):
            self.on_record(rec)


def _default_tls() -> ssl.SSLContext:
    import os

    cafile = os.environ.get("SSL_CERT_FILE") or os.environ.get("REQUESTS_CA_BUNDLE") or None
    return ssl.create_default_context(cafile=cafile)


def _bad(text: str) -> _Refused:
    return _Refused(400, "Bad request", text)


def _parse_head(head: bytes) -> tuple[str, str, list[tuple[str, str]]]:
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise _bad("the request head is not text") from None
    lines = text[:-4].split("\r\n")
    if any(c in line for line in lines for c in "\r\n\0"):  # a bare CR or LF: two parsers, two requests
        raise _bad("a request head may break lines only with CRLF")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not _TOKEN.match(parts[0]):
        raise _bad("not an HTTP/1.x request line")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.match(name):
            raise _bad(f"a malformed header line: {line[:80]!r}")
        headers.append((name, value.strip()))
    return parts[0].upper(), parts[1], headers


#: ``_body_length`` of a chunked body.
CHUNKED = -1


def _body_length(headers: list[tuple[str, str]]) -> int:
    """Bytes of request body after the head (:data:`CHUNKED`: chunk by chunk); 400 for framing that two
    parsers could read differently (the stuff of request smuggling)."""
    lengths = {v.strip() for n, v in headers if n.lower() == "content-length"}
    codings = [v.strip().lower() for n, v in headers if n.lower() == "transfer-encoding"]
    if codings and lengths:
        raise _bad("a request may not have both Content-Length and Transfer-Encoding")
    if codings:
        if codings != ["chunked"]:
            raise _bad("the only Transfer-Encoding the proxy passes on is chunked")
        return CHUNKED
    if len(lengths) > 1 or any(not v.isdigit() or len(v) > 15 for v in lengths):
        raise _bad("a request needs one Content-Length, a number")
    return int(lengths.pop()) if lengths else 0


def _split_host_port(text: str, default: int | None) -> tuple[str, int]:
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = text.rpartition(":") if ":" in text else (text, "", "")
    if not port_text:
        if default is None:
            raise _bad(f"CONNECT needs host:port, not {text[:100]!r}")
        port = default
    elif port_text.isdigit() and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        raise _bad(f"not a port: {port_text[:20]!r}")
    host = _normal_host(host)
    if not host or (_ip(host) is None and not all(_LABEL.match(label) for label in host.split("."))):
        raise _bad(f"not a host name: {host[:100]!r}")
    return (str(_ip(host)) if _ip(host) is not None else host), port


def _absolute_url(target: str) -> tuple[str, int, str]:
    if target.lower().startswith("https://"):
        raise _bad("send https:// requests as CONNECT (any HTTP client does through HTTPS_PROXY)")
    if not target.lower().startswith("http://"):
        raise _bad("this is a proxy: send absolute http:// URLs (set HTTP_PROXY), or CONNECT host:port")
    rest = target[7:]
    slash = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, path = rest[:slash], rest[slash:] or "/"
    if path.startswith("?"):
        path = "/" + path
    if "@" in authority:
        raise _bad("user:password@ in a URL is not supported through the proxy")
    host, port = _split_host_port(authority, 80)
    return host, port, path


def _explicit_port(target: str) -> bool:
    authority = target[7:].split("/", 1)[0].split("?", 1)[0]
    return bool(re.search(r":\d+$", authority))


def _request_head(method: str, path: str, host: str, port: int, headers: Iterable[tuple[str, str]],
                  secrets: Mapping[str, str]) -> bytes:
    named = {v.strip().lower() for n, v in headers if n.lower() == "connection" for v in v.split(",")}
    drop = _HOP_HEADERS | named | {"host"} | {n.lower() for n in secrets}
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}" + (f":{port}" if port not in (80, 443) else "")]
    lines += [f"{n}: {v}" for n, v in headers if n.lower() not in drop]
    lines += [f"{n}: {v}" for n, v in secrets.items()]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")


def _response_head(head: bytes) -> tuple[int | None, bytes]:
    """(status, the head with ``Connection: close``): each client connection carries one request."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
    kept = [lines[0]] + [line for line in lines[1:] if line
                         and line.split(":", 1)[0].strip().lower() not in ("connection", "keep-alive")]
    kept.append("Connection: close")
    return status, ("\r\n".join(kept) + "\r\n\r\n").encode("latin-1")


class NetworkLog:
    """The records of one sandbox's requests (the newest :data:`MAX_RECORDS`) and its listeners."""

    def __init__(self) -> None:
        self.records: deque[NetworkRecord] = deque(maxlen=MAX_RECORDS)
        self.listeners: list[Callable[[NetworkRecord], None]] = []

    def add(self, record: NetworkRecord) -> None:
        self.records.append(record)
        for listener in list(self.listeners):
            with contextlib.suppress(Exception):
                listener(record)
