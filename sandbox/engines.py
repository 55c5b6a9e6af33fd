"""Docker engines: connecting to one (local socket, TCP+TLS, SSH, a Docker context) and pooling several.

:func:`connect` reaches an engine the way the ``docker`` CLI does: the
engine's own CA for TLS (never a CA bundle from the environment:
``REQUESTS_CA_BUNDLE`` is set machine-wide in many company setups and would
replace the engine's CA under docker-py's HTTP layer), proxies from the
environment for TCP engines, ``DOCKER_HOST``/``DOCKER_TLS_VERIFY``/
``DOCKER_CERT_PATH`` and the current Docker context when no engine is named.
``ssh://user@host`` engines are reached through OpenSSH with the engine's
socket forwarded to a private Unix socket here (:mod:`sandbox._ssh`).

:class:`EnginePool` spreads sessions over several engines: each engine has a
session cap; a new session goes to the healthy engine with the most free
capacity; engines are health-checked; a session on an engine that goes away
ends with an error naming the engine, and new sessions go elsewhere.

Example::

    from sandbox.engines import Engine, EnginePool

    pool = EnginePool([Engine("local", "unix:///var/run/docker.sock", max_sessions=8),
                       Engine("gpu-box", "tcp://10.0.0.7:2376", tls_dir="~/.docker/gpu-box", max_sessions=16)])
    with pool.sandbox(functions=[my_tool]) as sb:   # a DockerSandbox on the engine with most room
        sb.run("print(1)")
"""

from __future__ import annotations

import json
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

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
        client.api._version = _lower_version(server.get("ApiVersion", _BOOTSTRAP_API), docker.constants.DEFAULT_DOCKER_API_VERSION)
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


# --- images on an engine -------------------------------------------------------------------------------


def ensure_image(client: Any, tag: str, *, source: Any = None, log: Callable[[str], None] = lambda line: None) -> str:
    """Make the sandbox image ``tag`` present on ``client``'s engine; returns how ("present", "copied", "built").

    The tag carries the recipe's hash, so an image already there is never sent
    again. Otherwise it is streamed from ``source`` (default: the local engine),
    building it there first if needed (``codeact image build``).
    """
    import docker.errors

    try:
        client.images.get(tag)
        return "present"
    except docker.errors.ImageNotFound:
        pass
    if source is None:
        source = connect(Engine("local", "unix:///var/run/docker.sock"))
    try:
        source.images.get(tag)
    except docker.errors.ImageNotFound:
        from .image import build_image

        log(f"building {tag} on the local engine first")
        build_image(tag=tag, client=source, log=log)
    except Exception as exc:
        raise BackendUnavailable(
            f"the sandbox image {tag} is not on {describe(client)}, and it cannot be copied there from the local "
            f"engine ({exc}); build it on that engine (`DOCKER_HOST=... codeact image build`)"
        ) from exc
    log(f"copying {tag} to {describe(client)}")
    started = time.monotonic()
    stream = source.api.get_image(tag)  # a tar stream, chunk by chunk
    # The engine answers a load only when it has unpacked every layer: no short read timeout here.
    loader = connect(engine_of(client), timeout=3600) if engine_of(client) is not None else client
    loader.api.load_image(_chunks(stream))
    client.images.get(tag)
    log(f"copied {tag} in {time.monotonic() - started:.1f} s")
    return "copied"


def _chunks(stream: Any) -> Any:
    for chunk in stream:
        if chunk:
            yield chunk


def is_local(client: Any) -> bool:
    """Whether ``client`` talks to an engine on this machine (a Unix socket)."""
    engine = engine_of(client)
    url = engine.url if engine is not None else str(getattr(client.api, "base_url", ""))
    return url.startswith(("unix:", "http+unix:", "npipe:", "http+docker://"))


def describe(client: Any) -> str:
    engine = engine_of(client)
    return engine.describe() if engine is not None else str(getattr(client.api, "base_url", "an engine"))


# --- a pool of engines ---------------------------------------------------------------------------------------


@dataclass
class _EngineState:
    engine: Engine
    client: Any = None
    healthy: bool = False
    error: str = ""
    sessions: int = 0  # handed out and not yet closed (warm ones not counted)
    version: str = ""
    checked: float = 0.0
    image: str = ""
    warm: list[Any] = field(default_factory=list)  # started sessions waiting for a caller
    warming: int = 0


class EnginePool:
    """Several Docker engines as one place to open sandboxes (see the module docs).

    Each engine keeps up to ``Engine.warm`` started sessions (made with
    ``sandbox_options``) so that :meth:`sandbox` can hand one out at once;
    a warm session counts against its engine's cap. A request whose options
    differ from ``sandbox_options`` gets a new session. The pool is a
    session source for :class:`codeact.CodeActAgent` (``sandbox=pool``).
    """

    def __init__(self, engines: list[Engine], *, health_interval: float = 10.0, image: str | None = None,
                 sandbox_options: dict[str, Any] | None = None,
                 log: Callable[[str], None] = lambda line: None) -> None:
        if not engines:
            raise SandboxError("an engine pool needs at least one engine")
        names = [e.name for e in engines]
        if len(set(names)) != len(names):
            raise SandboxError(f"engine names must be unique: {names}")
        self._states = [_EngineState(e) for e in engines]
        self._lock = threading.Lock()
        self._image = image
        self._options = dict(sandbox_options or {})
        self._log = log
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.health_interval = health_interval
        self.check()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="engine-pool")
        self._thread.start()

    # --- health --------------------------------------------------------------------------

    def check(self) -> None:
        """Check every engine now: reachable, version, the image present."""
        for state in self._states:
            self._check_one(state)

    def _check_one(self, state: _EngineState) -> None:
        try:
            if state.client is None:
                state.client = connect(state.engine, timeout=30)
            state.version = state.client.version().get("Version", "?")
            if self._image:
                state.image = "present" if _has_image(state.client, self._image) else "missing"
            state.healthy, state.error = True, ""
        except Exception as exc:
            state.healthy, state.error = False, str(exc)[:300]
            state.client = None
            self._drop_warm(state)
        state.checked = time.time()

    def _watch(self) -> None:
        next_check = time.monotonic() + self.health_interval
        while not self._stop.is_set():
            if time.monotonic() >= next_check:
                for state in self._states:
                    self._check_one(state)
                next_check = time.monotonic() + self.health_interval
            self._fill_warm()
            self._wake.wait(min(1.0, max(0.05, next_check - time.monotonic())))
            self._wake.clear()

    # --- warm sessions -------------------------------------------------------------------

    def _fill_warm(self) -> None:
        for state in self._states:
            while not self._stop.is_set():
                with self._lock:
                    want = (state.healthy and len(state.warm) + state.warming < state.engine.warm
                            and state.sessions + len(state.warm) + state.warming < state.engine.max_sessions)
                    if not want:
                        break
                    state.warming += 1
                try:
                    sb = self._new(state, dict(self._options)).start()
                except Exception as exc:
                    with self._lock:
                        state.warming -= 1
                    self._log(f"engine {state.engine.name}: a warm session did not start: {exc}")
                    break
                with self._lock:
                    state.warming -= 1
                    state.warm.append(sb)

    def _drop_warm(self, state: _EngineState) -> None:
        with self._lock:
            warm, state.warm = state.warm, []
        for sb in warm:
            sb._on_close.clear()
            sb.close()

    # --- handing out sessions ------------------------------------------------------------

    def _choose(self) -> _EngineState:
        with self._lock:
            def free(s: _EngineState) -> int:
                return s.engine.max_sessions - s.sessions - s.warming  # warm ones are free to hand out

            candidates = [s for s in self._states if s.healthy and free(s) > 0]
            if not candidates:
                details = "; ".join(f"{s.engine.name}: " + (f"{s.sessions}/{s.engine.max_sessions} sessions"
                                                            if s.healthy else f"down ({s.error[:80]})")
                                    for s in self._states)
                raise BackendUnavailable(f"no engine in the pool can take a session now ({details})")
            return max(candidates, key=lambda s: (free(s), -self._states.index(s)))

    def sandbox(self, functions: Any = (), **options: Any) -> Any:
        """A :class:`~sandbox.DockerSandbox` on the engine with the most free capacity.

        A warm (already started) session when the engine has one and
        ``options`` match the pool's ``sandbox_options``; otherwise a new,
        not yet started one. Closing it frees its place on the engine.
        """
        state = self._choose()
        surplus = None
        with self._lock:
            sb = state.warm.pop(0) if state.warm and options == self._options else None
            if sb is None and state.warm and state.sessions + len(state.warm) + state.warming >= state.engine.max_sessions:
                surplus = state.warm.pop()  # a warm session of other options gives its place up
            state.sessions += 1
        if surplus is not None:
            surplus._on_close.clear()
            surplus.close()
        self._wake.set()  # refill
        if sb is not None:
            if functions:
                sb.register(*functions)
            return sb
        try:
            return self._new(state, options, functions)
        except BaseException:
            with self._lock:
                state.sessions -= 1
            raise

    def _new(self, state: _EngineState, options: dict[str, Any], functions: Any = ()) -> Any:
        from .container import DockerSandbox

        if self._image or options.get("image"):
            ensure_image(state.client, options.get("image") or self._image, log=self._log)
        sb = DockerSandbox(functions, client=state.client, **options)
        released = threading.Event()

        def release() -> None:
            if not released.is_set():
                released.set()
                with self._lock:
                    state.sessions -= 1
                self._wake.set()

        sb._on_close.append(release)
        return sb

    def status(self) -> list[dict[str, Any]]:
        """Each engine: name, url, healthy, error, version, sessions, warm, capacity, free, image."""
        with self._lock:
            return [{"name": s.engine.name, "url": s.engine.url, "healthy": s.healthy, "error": s.error,
                     "version": s.version, "sessions": s.sessions, "warm": len(s.warm),
                     "max_sessions": s.engine.max_sessions,
                     "free": s.engine.max_sessions - s.sessions - s.warming, "image": s.image}
                    for s in self._states]

    def close(self) -> None:
        """Stop checking engines and close the warm sessions (sessions handed out are their callers')."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=120)
        for state in self._states:
            self._drop_warm(state)

    def __enter__(self) -> "EnginePool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _has_image(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False
