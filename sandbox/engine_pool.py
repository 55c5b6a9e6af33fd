"""A pool of Docker engines: sessions spread over several engines, each with a cap and warm sessions.

Each engine has a session cap; a new session goes to the healthy engine with
the most free capacity; engines are health-checked on a thread; a session on
an engine that goes away ends with an error naming the engine, and new
sessions go elsewhere.

Example::

    from sandbox.engine_pool import EnginePool
    from sandbox.engines import Engine

    pool = EnginePool([Engine("local", "unix:///var/run/docker.sock", max_sessions=8),
                       Engine("gpu-box", "tcp://10.0.0.7:2376", tls_dir="~/.docker/gpu-box", max_sessions=16)])
    with pool.sandbox(functions=[my_tool]) as sb:   # a DockerSandbox on the engine with most room
        sb.run("print(1)")
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .container import DockerSandbox
from .engines import Engine, connect
from .errors import BackendUnavailable, SandboxError
from .image import ensure_image

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
            sb.close_callbacks.clear()
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
            full = state.sessions + len(state.warm) + state.warming >= state.engine.max_sessions
            if sb is None and state.warm and full:
                surplus = state.warm.pop()  # a warm session of other options gives its place up
            state.sessions += 1
        if surplus is not None:
            surplus.close_callbacks.clear()
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

        image = options.get("image") or self._image
        if image:
            ensure_image(state.client, image, log=self._log)
        sb = DockerSandbox(functions, client=state.client, **options)
        released = threading.Event()

        def release() -> None:
            if not released.is_set():
                released.set()
                with self._lock:
                    state.sessions -= 1
                self._wake.set()

        sb.close_callbacks.append(release)
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
