"""Docker engines: reaching one (local socket, TCP+TLS, SSH, a Docker context) and naming several.

:func:`connect` reaches an engine the way the ``docker`` CLI does: the
engine's own CA for TLS (never a CA bundle from the environment:
``REQUESTS_CA_BUNDLE`` is set machine-wide in many company setups and would
replace the engine's CA under docker-py's HTTP layer), proxies from the
environment for TCP engines, ``DOCKER_HOST``/``DOCKER_TLS_VERIFY``/
``DOCKER_CERT_PATH`` and the current Docker context when no engine is named.
``ssh://user@host`` engines are reached through OpenSSH with the engine's
socket forwarded to a private Unix socket here (:mod:`sandbox._ssh`).

:func:`load_engines` reads a list of engines (``$CODEACT_ENGINES``) for
:class:`sandbox.engine_pool.EnginePool`; :func:`sandbox.image.ensure_image`
puts the sandbox image on an engine.

Example::

    from sandbox.engines import Engine, connect

    client = connect(Engine("gpu-box", "tcp://10.0.0.7:2376", tls_dir="~/.docker/gpu-box"))
"""

from __future__ import annotations

import contextlib
import json
import os
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import BackendUnavailable, SandboxError

#: The Docker API version requested until the engine's own is known (Docker 20.10 and later).
_BOOTSTRAP_API = "1.41"
#: Environment variable naming several engines (a JSON file path, or inline JSON).
ENGINES_ENV = "CODEACT_ENGINES"


@dataclass(frozen=True)
class Engine:
    """One Docker engine: where it is, how to trust it, how many sessions it may hold."""

    name: str
    url: str
    #: A directory with ``ca.pem``, ``cert.pem`` and ``key.pem`` (as ``DOCKER_CERT_PATH``); TLS when set.
    tls_dir: str | None = None
    #: Verify the engine's certificate against ``tls_dir/ca.pem`` (as ``DOCKER_TLS_VERIFY``).
    tls_verify: bool = True
    max_sessions: int = 16
    #: Started sessions kept ready on this engine by an :class:`EnginePool`.
    warm: int = 0
    #: For ``ssh://`` engines: an OpenSSH config file (``ssh -F``); default: the user's own.
    ssh_config: str | None = None

    def describe(self) -> str:
        return f"{self.name} ({self.url})"


def engine_from_environment() -> Engine:
    """The engine the ``docker`` CLI would use here: ``DOCKER_HOST`` & co., else the current context."""
    host = os.environ.get("DOCKER_HOST", "").strip()
    if host:
        cert = os.environ.get("DOCKER_CERT_PATH", "").strip() or None
        verify = os.environ.get("DOCKER_TLS_VERIFY", "").strip() not in ("", "0")
        tls_dir = cert or (str(Path("~/.docker").expanduser()) if verify else None)
        return Engine("default", host, tls_dir=tls_dir if (verify or cert) else None, tls_verify=verify)
    context = _current_context()
    if context is not None:
        return context
    return Engine("default", "unix:///var/run/docker.sock")


def _current_context() -> Engine | None:
    """The engine of the current Docker context (``docker context use``), if it is not the default."""
    try:
        from docker.context import ContextAPI

        ctx = ContextAPI.get_current_context()
    except Exception:
        return None
    if ctx is None or ctx.name == "default":
        return None
    endpoint = (ctx.endpoints or {}).get("docker", {})
    host = endpoint.get("Host")
    if not host:
        return None
    tls = getattr(ctx, "tls_cfg", {}) or {}
    tls_dir = None
    docker_tls = tls.get("docker") if isinstance(tls, dict) else None
    if docker_tls is not None and getattr(docker_tls, "ca_cert", None):
        tls_dir = str(Path(docker_tls.ca_cert).parent)
    return Engine(f"context {ctx.name}", host, tls_dir=tls_dir, tls_verify=not endpoint.get("SkipTLSVerify", False))


def connect(engine: Engine | str | None = None, *, timeout: float = 120) -> Any:
    """A docker-py client for ``engine`` (an :class:`Engine`, a URL, or None for the environment's).

    Raises :class:`BackendUnavailable` naming the engine and what to do.
    """
    try:
        import docker
        import docker.tls
    except ImportError as exc:  # pragma: no cover - docker is a dependency
        raise BackendUnavailable("the 'docker' package is missing: pip install docker") from exc
    if engine is None:
        engine = engine_from_environment()
    elif isinstance(engine, str):
        engine = Engine(engine, engine)
    url = engine.url
    tls: Any = False
    if engine.tls_dir:
        base = Path(engine.tls_dir).expanduser()
        cert, key, ca = base / "cert.pem", base / "key.pem", base / "ca.pem"
        missing = [str(p) for p in (cert, key) + ((ca,) if engine.tls_verify else ()) if not p.is_file()]
        if missing:
            raise BackendUnavailable(f"Docker engine {engine.describe()}: TLS files missing: {', '.join(missing)}")
        tls = docker.tls.TLSConfig(client_cert=(str(cert), str(key)), ca_cert=str(ca) if engine.tls_verify else None,
                                   verify=str(ca) if engine.tls_verify else False)
        if url.startswith("tcp://"):
            url = "https://" + url[len("tcp://"):]
    tunnel = None
    if url.startswith("ssh://"):
        from ._ssh import SSHTunnel

        tunnel = SSHTunnel(url, ssh_config=engine.ssh_config, timeout=min(timeout, 60))
        url = tunnel.base_url
    try:
        # A fixed API version first: asking the engine for its own would already go through
        # requests' environment settings, before they can be turned off.
        client = docker.DockerClient(base_url=url, tls=tls, timeout=timeout, version=_BOOTSTRAP_API)
        if tunnel is not None:
            weakref.finalize(client, tunnel.close)  # the tunnel lives as long as the client
        _trust_only_the_engine(client.api, url)
        server = client.api.version(api_version=False)
        client.api._version = _lower_version(server.get("ApiVersion", _BOOTSTRAP_API),
                                             docker.constants.DEFAULT_DOCKER_API_VERSION)
        client.ping()
    except BackendUnavailable:
        if tunnel is not None:
            tunnel.close()
        raise
    except Exception as exc:
        if tunnel is not None:
            tunnel.close()
        hint = ("install and start Docker (e.g. `apt-get install docker.io && dockerd &`)" if url.startswith("unix:")
                else "start the engine, or check the URL and its TLS files (`codeact doctor` checks every engine)")
        raise BackendUnavailable(
            f"no Docker engine answers at {engine.describe()} ({type(exc).__name__}: {str(exc)[:200]}); {hint}"
        ) from exc
    client._codeact_engine = engine
    client._codeact_tunnel = tunnel
    client._codeact_podman = _names_podman(server)
    return client


def _trust_only_the_engine(api: Any, url: str) -> None:
    """Ignore CA bundles and netrc from the environment; keep proxies for TCP engines, as the CLI does."""
    api.trust_env = False
    if url.startswith(("http://", "https://")):
        try:
            from requests.utils import get_environ_proxies

            api.proxies.update(get_environ_proxies(url))
        except Exception:
            pass


def _lower_version(a: str, b: str) -> str:
    def key(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in v.split(".") if x.isdigit())

    return a if key(a) <= key(b) else b


def engine_of(client: Any) -> Engine | None:
    """The :class:`Engine` a client from :func:`connect` talks to."""
    return getattr(client, "_codeact_engine", None)


def load_engines(source: str | os.PathLike[str] | None = None) -> list[Engine]:
    """Engines from a JSON file or inline JSON (``$CODEACT_ENGINES`` when None).

    Format: ``{"engines": [{"name": "a", "url": "tcp://h:2376", "tls_dir": "...", "max_sessions": 8, "warm": 2}, ...]}``
    (or just the list). Raises :class:`SandboxError` naming the file and the bad key.
    """
    text = os.environ.get(ENGINES_ENV, "") if source is None else str(source)
    if not text.strip():
        return []
    where = "inline JSON"
    if not text.lstrip().startswith(("{", "[")):
        where = text
        try:
            text = Path(text).expanduser().read_text()
        except OSError as exc:
            raise SandboxError(f"cannot read the engines file {where}: {exc.strerror}") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SandboxError(f"the engines file {where} is not valid JSON: {exc}") from exc
    items = data.get("engines") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise SandboxError(f"the engines file {where} needs a list under \"engines\"")
    engines = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            raise SandboxError(f"the engines file {where}: engines[{i}] needs a \"url\" string")
        unknown = set(item) - {"name", "url", "tls_dir", "tls_verify", "max_sessions", "warm", "ssh_config"}
        if unknown:
            raise SandboxError(f"the engines file {where}: engines[{i}] has unknown keys {sorted(unknown)}")
        cap = item.get("max_sessions", 16)
        if not isinstance(cap, int) or cap < 1:
            raise SandboxError(f"the engines file {where}: engines[{i}].max_sessions must be a positive integer")
        warm = item.get("warm", 0)
        if not isinstance(warm, int) or not 0 <= warm <= cap:
            raise SandboxError(f"the engines file {where}: engines[{i}].warm must be an integer from 0 to max_sessions")
        engines.append(Engine(item.get("name") or item["url"], item["url"], item.get("tls_dir"),
                              bool(item.get("tls_verify", True)), cap, warm, item.get("ssh_config")))
    return engines


def is_local(client: Any) -> bool:
    """Whether ``client`` talks to an engine on this machine (a Unix socket)."""
    engine = engine_of(client)
    url = engine.url if engine is not None else str(getattr(client.api, "base_url", ""))
    return url.startswith(("unix:", "http+unix:", "npipe:", "http+docker://"))


def is_podman(client: Any) -> bool:
    """Whether ``client`` talks to Podman's Docker-compatible service (``podman system service``), not dockerd.

    Known from the engine's version answer (its component "Podman Engine"); asked once for a client that
    did not come from :func:`connect`.
    """
    known = getattr(client, "_codeact_podman", None)
    if known is None:
        try:
            known = _names_podman(client.api.version())
        except Exception:
            known = False
        with contextlib.suppress(AttributeError):
            client._codeact_podman = known
    return bool(known)


def _names_podman(version: Any) -> bool:
    components = version.get("Components") if isinstance(version, dict) else None
    return any(isinstance(c, dict) and str(c.get("Name", "")).startswith("Podman")
               for c in components or [])


#: A client not asked yet (see :func:`limits_ignored`).
_UNASKED = object()


def limits_ignored(client: Any) -> str | None:
    """Why the engine of ``client`` would ignore a container's memory and process limits, or None when it holds
    them (or does not say). A rootless engine on a cgroup v1 host ignores every resource limit: rootless Docker
    says so by its cgroup driver ("none"); rootless Podman's Docker-compatible answer does not say it at all
    (it reports the host's cgroups), so Podman's own API is asked. Asked once for each client.
    """
    known = getattr(client, "_codeact_limits_ignored", _UNASKED)
    if known is not _UNASKED:
        return str(known) if known is not None else None
    try:
        why = _podman_limits_ignored(client) if is_podman(client) else _docker_limits_ignored(client.info())
    except Exception:  # an engine that does not answer now is reported when its container is created
        return None
    with contextlib.suppress(AttributeError):
        client._codeact_limits_ignored = why
    return why


def _docker_limits_ignored(info: Any) -> str | None:
    if not isinstance(info, dict):
        return None
    if info.get("CgroupDriver") == "none":
        return "it runs without cgroups (rootless Docker on a cgroup v1 host ignores every resource limit)"
    missing = [name for key, name in (("MemoryLimit", "memory"), ("PidsLimit", "pids")) if info.get(key) is False]
    return f"its host has no {' or '.join(missing)} cgroup controller" if missing else None


def _podman_limits_ignored(client: Any) -> str | None:
    answer = client.api.get(f"{client.api.base_url}/v4.0.0/libpod/info", timeout=30)
    answer.raise_for_status()
    host = answer.json().get("host") or {}
    if not (host.get("security") or {}).get("rootless"):
        return None
    if str(host.get("cgroupVersion", "")).lstrip("v") == "1":
        return "rootless Podman on a cgroup v1 host ignores every resource limit"
    missing = [c for c in ("memory", "pids") if c not in (host.get("cgroupControllers") or [])]
    return f"rootless Podman has no {' or '.join(missing)} cgroup controller delegated to its user" if missing \
        else None


def describe(client: Any) -> str:
    engine = engine_of(client)
    return engine.describe() if engine is not None else str(getattr(client.api, "base_url", "an engine"))
