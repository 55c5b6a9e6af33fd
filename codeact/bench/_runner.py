"""The bench runner: a sweep's episodes on N threads with a pool of sandboxes, resumable.

Each episode gets fresh tools (the task's factory, its own working
directory), a model (the oracle, or the one shared endpoint), an agent and,
for CodeAct on Docker, a fresh started sandbox from a
:class:`sandbox.SandboxPool`. ReAct episodes need no sandbox. An episode
runs on its own thread under a wall-clock limit: a stalled model or tool
costs that episode (recorded as ``timeout``), never the run. Whatever goes
wrong inside an episode (a tool factory that raises, a broken oracle, a
crashed sandbox, an endpoint that fails) is recorded as that episode's
outcome (see :mod:`codeact.bench._outcomes`). When too many recent episodes
fail in the infrastructure, the run stops (``stopped`` says why). Finished
episodes are appended to ``episodes.jsonl`` as they finish; a run restarted
on the same directory skips them.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from typing import Any, Iterator, Sequence

from ..errors import BenchError
from ..values import preview
from ._agents import agent_base
from ._config import BenchConfig, ModelSpec
from ._episode import EpisodeRunner, Spec, close_quietly
from ._outcomes import ErrorGuard
from ._progress import Progress
from ._store import Episode, ResultsDir


class Runner(EpisodeRunner):
    """Runs a sweep's episodes on ``config.concurrency`` threads, each under the episode time limit; stops
    when too many recent episodes failed in the infrastructure (``stopped`` says why)."""

    def __init__(self, config: BenchConfig, results: ResultsDir, model: ModelSpec, progress: Progress,
                 log: Any = None) -> None:
        super().__init__(config, results, model, log)
        self.progress = progress
        self.stop = threading.Event()
        #: Episodes finished (and recorded) so far.
        self.finished = 0
        self.stopped: str | None = None
        self._guard: ErrorGuard | None = None
        self._queue: queue.Queue[Spec] = queue.Queue()

    # --- the run ----------------------------------------------------------------------------

    def run(self, specs: list[Spec], already: int) -> None:
        if not specs:
            return
        with sweep_span(self, specs, already, "local") as parent:
            self.parent = parent
            self._run(specs, already)

    def _run(self, specs: list[Spec], already: int) -> None:
        codeact = sum(1 for s in specs if agent_base(s.agent) == "codeact")
        if codeact and self.config.backend == "docker":
            self._open_pool(min(self.config.concurrency, codeact))
            if self.config.preflight:
                self._check_sandbox()
        self._guard = ErrorGuard(self.config.max_error_share, window=max(10, 2 * self.config.concurrency),
                                 expected=len(specs))
        for spec in specs:
            self._queue.put(spec)
        self.progress.start(total=len(specs) + already, done=already)
        workers = [threading.Thread(target=self._work, name=f"bench-worker-{i}", daemon=True)
                   for i in range(min(self.config.concurrency, len(specs)))]
        for w in workers:
            w.start()
        try:
            while any(w.is_alive() for w in workers):
                for w in workers:
                    w.join(0.2)
        except KeyboardInterrupt:
            # Running episodes are cancelled (they run again on resume); finished ones are saved.
            self.stop.set()
            deadline = time.monotonic() + 20
            while any(w.is_alive() for w in workers) and time.monotonic() < deadline:
                for w in workers:
                    w.join(0.2)
            raise
        finally:
            self.progress.stop()


    def _open_pool(self, size: int) -> None:
        from sandbox import docker_available

        reason = docker_available()
        if reason is not None:
            from .. import config as cfg

            if cfg.env("DOCKER_HOST") and "no Docker engine answers" in reason:
                reason = reason.split("; ")[0] + "; " + cfg.docker_fix_hint()  # not "install Docker"
            raise BenchError(f"CodeAct episodes need the Docker sandbox, which is not ready: {reason}; "
                             "`codeact doctor` shows what to fix (or choose --backend local knowingly)")
        runtime = self.config.runtime
        if runtime:
            from sandbox import runtime_problem

            problem = runtime_problem(runtime)
            if problem is not None:
                raise BenchError(f"CodeAct episodes cannot use the runtime {runtime!r}: {problem}")
        from sandbox import DockerSandbox, SandboxPool

        timeout = self.config.execution_timeout
        network = self.config.network
        self.pool = SandboxPool(lambda: DockerSandbox(timeout=timeout, runtime=runtime, network=network or False),
                                size=size)

    #: Seconds the pre-flight waits for the pool's first sandbox (an image pull or a slow engine).
    SANDBOX_PREFLIGHT_TIMEOUT = 120.0

    def _check_sandbox(self) -> None:
        """Pre-flight: one sandbox from the pool starts and runs code, or the run stops before its first episode."""
        try:
            sandbox = self.pool.acquire(timeout=self.SANDBOX_PREFLIGHT_TIMEOUT)
        except Exception as exc:  # TimeoutError with the pool's last error as its cause
            cause = exc.__cause__ or exc
            raise BenchError(f"pre-flight: the Docker sandbox did not start ({type(cause).__name__}: "
                             f"{str(cause)[:300]}); no episode was run. `codeact doctor` shows what to fix") from None
        try:
            result = sandbox.run("print(6 * 7)")
            if result.error or "42" not in result.stdout:
                raise BenchError(f"pre-flight: the Docker sandbox started but does not run code ("
                                 f"{result.error or repr(result.stdout[:200])}); no episode was run")
        finally:
            self._closer.submit(close_quietly, sandbox)

    def _work(self) -> None:
        while not self.stop.is_set():
            try:
                spec = self._queue.get_nowait()
            except queue.Empty:
                return
            episode = self.attempt(spec)
            if episode is None:
                continue  # cancelled by Ctrl-C: not finished, runs again on resume
            self.results.append(episode)
            with self._lock:
                self.finished += 1
                reason = self._guard.add(episode) if self._guard is not None else None
                if reason is not None:
                    # Running episodes are cancelled (they run again on resume), queued ones never start.
                    self.stopped = reason
                    self.stop.set()
            self.progress.advance(episode)

    def attempt(self, spec: Spec) -> Episode | None:
        """Run one episode on its own thread, under the episode time limit."""
        cancel = threading.Event()
        box: dict[str, Episode] = {}
        thread = threading.Thread(target=lambda: box.setdefault("episode", self.run_episode(spec, cancel)),
                                  name=f"bench-{spec.key}", daemon=True)
        started = time.monotonic()
        thread.start()
        while thread.is_alive():
            thread.join(0.1)
            if self.stop.is_set():
                cancel.set()
            if time.monotonic() - started > self.config.episode_timeout:
                cancel.set()
                thread.join(2.0)  # a cooperative stop (between steps) ends it now
                if "episode" in box and box["episode"].status != "cancelled":
                    return box["episode"]
                return self._timed_out(spec, time.monotonic() - started)
        episode = box.get("episode")
        if episode is None or (self.stop.is_set() and episode.status == "cancelled"):
            return None
        return episode

    def _timed_out(self, spec: Spec, seconds: float) -> Episode:
        task = spec.task
        return Episode(key=spec.key, suite=task.suite, task=task.id, agent=spec.agent, repeat=spec.repeat,
                       status="timeout", outcome="timeout", check="did not finish",
                       error=f"the episode did not finish within {self.config.episode_timeout:g} s (a stalled model "
                             "or tool?); it was abandoned",
                       turn_limit=self.turn_limit(task), wall_time=seconds, model=self.model_name(spec),
                       temperature=self.config.temperature, seed=self.config.seed, tags=list(task.tags),
                       started=time.time() - seconds, finished=time.time(), expected=preview(task.expected))


@contextlib.contextmanager
def sweep_span(executor: Any, specs: Sequence[Spec], already: int, kind: str) -> Iterator[Any]:
    """A ``bench.run`` span around a sweep's episodes (when tracing is on), made current on this thread.

    Yields the context the episodes' ``bench.episode`` spans must be children of (None when tracing is off):
    episodes run on threads (or Ray workers) of their own, where this thread's context does not follow.
    ``executor`` has ``config``, ``finished`` and ``stopped`` (read when the sweep ends).
    """
    from .. import telemetry

    tracing = telemetry.tracing()
    if tracing is None:
        yield None
        return
    config = executor.config
    models = sorted({s.model for s in specs if s.model}) or list(config.models)
    attributes = {"codeact.bench.suites": [str(s) for s in config.suites],
                  "codeact.bench.agents": [str(a) for a in config.agents],
                  "codeact.bench.models": [str(m) for m in models],
                  "codeact.bench.episodes": len(specs),
                  "codeact.bench.already_done": already,
                  "codeact.bench.executor": kind,
                  "codeact.sandbox.backend": str(config.backend)}
    with tracing.span("bench.run", attributes) as span:
        try:
            yield tracing.current()
        finally:
            span.set_attribute("codeact.bench.finished", int(executor.finished))
            if getattr(executor, "stopped", None):
                span.set_attribute("codeact.bench.stopped", str(executor.stopped)[:500])
