"""Who may talk to the web UI: a token on every request, the Host header checked, strict headers.

The page can make tools run on the host, so the server trusts no request
without the token (``secrets.token_urlsafe``, compared in constant time):

* ``GET``/``HEAD`` (the page, assets, the event stream, downloads) carry it in
  the ``X-CodeAct-Token`` header, the session cookie or a ``?token=`` query.
  Opening ``/?token=...`` sets the cookie (``HttpOnly``, ``SameSite=Strict``)
  and redirects to ``/``, so the token leaves the address bar, as Jupyter does.
* Every other method (send, stop, approve, upload, close) needs the header:
  a cookie alone is refused, so another site cannot forge a request (CSRF), and
  a request whose ``Origin`` is not this server is refused too.
* The ``Host`` header must name this server (``127.0.0.1``, ``localhost``,
  ``[::1]`` or an allowed name): a DNS-rebinding page, whose requests carry its
  own host name, gets nothing.

Every response carries a Content-Security-Policy that allows scripts from
this server only (no inline script, no ``eval``), so markup that slipped
through sanitising cannot run; downloads and sandbox images get a policy that
runs nothing at all.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TOKEN_HEADER = "x-codeact-token"
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})

#: The page's policy: scripts, styles and images from this server only.
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'; object-src 'none'"
)
#: For bytes from the sandbox (images, downloads): nothing runs, even when opened directly.
INERT_CSP = "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; sandbox"


def new_token() -> str:
    """A fresh random token (32 URL-safe characters)."""
    return secrets.token_urlsafe(24)


@dataclass
class Guard:
    """The checks every request goes through (see the module docstring).

    Args:
        token: the secret; requests without it are refused.
        port: the port the server listens on (part of the cookie name:
            cookies are shared between ports of one host).
        allowed_hosts: host names (no port) the ``Host`` header may carry;
            ``None`` accepts any (a server bound to all interfaces without
            ``--allow-host``: then the token is the only check).
    """

    token: str
    port: int
    allowed_hosts: frozenset[str] | None = field(default=LOOPBACK_NAMES)

    @property
    def cookie_name(self) -> str:
        return f"codeact_ui_{self.port}"

    def host_allowed(self, host_header: str | None) -> bool:
        if self.allowed_hosts is None:
            return True
        if not host_header:
            return False
        host = host_header.strip().lower()
        if host.startswith("["):  # [::1]:8765
            name = host.split("]", 1)[0] + "]"
        else:
            name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
        return name in self.allowed_hosts or name.strip("[]") in self.allowed_hosts

    def matches(self, candidate: str | None) -> bool:
        if not candidate:
            return False
        return hmac.compare_digest(candidate.encode(), self.token.encode())

    def cookie_header(self) -> str:
        return f"{self.cookie_name}={self.token}; Path=/; HttpOnly; SameSite=Strict"


def allowed_hosts_for(host: str, extra: Iterable[str] = ()) -> frozenset[str] | None:
    """The Host names a server bound to ``host`` answers: loopback names, ``host`` and ``extra``.

    A wildcard bind (``0.0.0.0``) without ``extra`` answers any name (``None``).
    """
    extra = {h.strip().lower() for h in extra if h.strip()}
    if host in WILDCARD_HOSTS:
        return frozenset(LOOPBACK_NAMES | extra) if extra else None
    return frozenset(LOOPBACK_NAMES | {host.lower()} | extra)


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _query_token(scope: Scope) -> str | None:
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
    return values[0] if values else None


def _cookie_token(headers: dict[str, str], name: str) -> str | None:
    raw = headers.get("cookie")
    if not raw:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw)
    except Exception:  # a malformed cookie header is simply no token
        return None
    morsel = jar.get(name)
    return morsel.value if morsel is not None else None


_SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


class GuardMiddleware:
    """ASGI middleware applying a :class:`Guard` to every HTTP request (streams included)."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":  # the UI uses none: refuse
                await send({"type": "websocket.close", "code": 1008})
                return
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        guard = self.guard
        if not guard.host_allowed(headers.get("host")):
            await _plain(send, 403, "This server answers only to its own host name (Host header refused).")
            return
        method = scope["method"].upper()
        query_token = _query_token(scope)
        header_token = headers.get(TOKEN_HEADER)
        bearer = headers.get("authorization", "")
        if bearer.lower().startswith("bearer "):
            header_token = header_token or bearer[7:].strip()
        if method in ("GET", "HEAD"):
            if scope["path"] == "/" and query_token is not None and guard.matches(query_token):
                # Trade the token in the address bar for a cookie, then drop it from the URL.
                await send({"type": "http.response.start", "status": 303,
                            "headers": [(b"location", b"/"), (b"set-cookie", guard.cookie_header().encode()),
                                        (b"cache-control", b"no-store"), *_SECURITY_HEADERS]})
                await send({"type": "http.response.body", "body": b""})
                return
            ok = any(guard.matches(t) for t in (header_token, query_token,
                                                _cookie_token(headers, guard.cookie_name)))
        else:
            origin = headers.get("origin")
            same_origin = origin is None or origin.lower() in (
                f"http://{headers.get('host', '').lower()}", f"https://{headers.get('host', '').lower()}")
            ok = same_origin and guard.matches(header_token)
        if not ok:
            await _plain(send, 403, "Forbidden: this request needs the token. Open the URL that `codeact ui` "
                                    "printed (it carries ?token=...), or send the X-CodeAct-Token header.")
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                extra = [h for h in _SECURITY_HEADERS if h[0] not in present]
                if b"content-security-policy" not in present:
                    extra.append((b"content-security-policy", PAGE_CSP.encode()))
                if b"cache-control" not in present:
                    extra.append((b"cache-control", b"no-store"))
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def _plain(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()),
                            (b"content-security-policy", b"default-src 'none'"), *_SECURITY_HEADERS]})
    await send({"type": "http.response.body", "body": body})
