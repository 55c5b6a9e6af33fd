"""Benchmark sweeps on a Ray cluster: episodes as Ray tasks, results back into the driver's results directory.

The driver (the process that called :func:`~codeact.bench.run_bench`) submits
one Ray task per episode. A task runs on whichever node has the CPUs and
memory it asks for (:class:`RayOptions`), loads the suites there, builds the
episode's tools, model and agent exactly as a local run does (the same
``Runner`` episode code), runs CodeAct sandboxes on that node's Docker
engine, and returns everything the episode produced: the
:class:`~codeact.bench.Episode`, its run-log events and its files. Workers
write nothing but a private scratch directory; only the driver writes the
results directory (``episodes.jsonl``, ``runs.db``, ``artifacts/``,
``work/``), so a sweep moves between local and Ray runs without losing or
duplicating finished episodes.

Failures: a task whose worker or node dies is run again by Ray on another
node (``max_retries``); when those retries run out the episode is recorded
as a ``harness_error`` (``--retry-errors`` runs it again). The driver keeps the
first completion of each episode and ignores any later one.

Secrets: the API key never travels in a task's payload. A worker's model
reads ``OPENAI_API_KEY`` from its node's environment; with
``pass_api_key=True`` the driver's key is set there through the task's Ray
``runtime_env`` (then anyone who can query the cluster can read it).

Tracing: when it is on in the driver, the sweep is one trace. The driver's
``bench.run`` span travels with each task as a W3C carrier and the worker's
``bench.episode`` span (and the run under it) continues it; the driver's
``OTEL_*`` variables (and the endpoint and service name given to
``telemetry.configure``) travel in the task's ``runtime_env`` so that the
workers export where the driver does. ``OTEL_EXPORTER_OTLP_(TRACES_)HEADERS``
often hold a token: they travel only with ``pass_api_key=True``, else the
nodes need their own.

``ray`` is imported only here, and only when a sweep uses it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BenchError
from ._ray_options import NODE_LABEL, RayOptions, host_port, import_ray, parse_size  # noqa: F401 - parse_size: re-export
from ._episode import Spec, is_factory
from ._runner import Runner, sweep_span

#: Bytes of files (artifacts and work-directory files) one episode may send back to the driver.
MAX_EPISODE_FILES_BYTES = 64 * 1024 * 1024


# --- what travels to the workers ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Sweep:
    """What every episode of a sweep shares; put in Ray's object store once. Holds no secret."""

    config: Any  # a BenchConfig without api_key, ray or out
    suites: list[str]  # suite specs as the workers load them (files as absolute paths)
    model: Any  # run_bench's model= (an object or a factory), or None
    engines: dict[str, Any]  # node key -> sandbox.engines.Engine


@dataclass
class _Outcome:
    """What one episode sends back: the episode, its run-log events, its files, where it ran."""

    episode: Any  # an Episode
    events: list[Any]
    links: list[tuple[str, str]]  # (run id, episode key) for RunLog.link_episode
    files: list[tuple[str, str, bytes]]  # ("artifacts" | "work", relative path, content)
    scratch: str  # the worker's scratch directory (paths in the events point into it)
    node: str = ""
    skipped_files: int = 0


class _EventBuffer:
    """A run log that keeps the events in memory (a worker must not write the results directory)."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.links: list[tuple[str, str]] = []

    def record(self, event: Any) -> None:
        if type(event).__name__ != "TextDelta":
            self.events.append(event)

    def link_episode(self, run_id: str, episode: str) -> None:
        self.links.append((run_id, episode))

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class _Node:
    node_id: str
    ip: str
    hostname: str
    labels: dict[str, str]

    def engine_keys(self) -> list[str]:
        """Keys of :attr:`RayOptions.engines` that name this node, most specific first."""
        keys = [self.node_id, self.ip, self.hostname]
        if self.labels.get(NODE_LABEL):
            keys.append(self.labels[NODE_LABEL])
        keys += [f"{k}={v}" for k, v in sorted(self.labels.items())]
        return keys + ["*"]

    def describe(self) -> str:
        return f"{self.ip} ({self.node_id[:8]})"


def _this_node() -> _Node:
    import ray

    ctx = ray.get_runtime_context()
    labels: dict[str, str] = {}
    with contextlib.suppress(Exception):  # older Ray: no labels
        labels = {str(k): str(v) for k, v in (ctx.get_node_labels() or {}).items()}
    return _Node(node_id=ctx.get_node_id(), ip=ray.util.get_node_ip_address(), hostname=socket.gethostname(),
                 labels=labels)


class _NodeSandboxes:
    """Fresh started Docker sandboxes on this node's engine; what ``Runner`` calls its pool."""

    def __init__(self, engine: Any, timeout: float, runtime: str | None = None) -> None:
        self.engine = engine
        self.timeout = timeout
        self.runtime = runtime
        self._client: Any = None
        self._pool: Any = None

    def acquire(self) -> Any:
        from sandbox import DockerSandbox
        from sandbox.engine_pool import EnginePool
        from sandbox.engines import connect, load_engines

        if self.engine is None and self._pool is None and self._client is None:
            engines = load_engines()  # CODEACT_ENGINES of this node, if set
            if engines:
                self._pool = EnginePool(engines)
        if self._pool is not None:
            extra = {"runtime": self.runtime} if self.runtime else {}
            return self._pool.sandbox(timeout=self.timeout, **extra).start()
        if self._client is None:
            self._client = connect(self.engine)
        return DockerSandbox(client=self._client, timeout=self.timeout, runtime=self.runtime).start()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()


def run_episode(sweep: _Sweep, suite: str, task_id: str, agent: str, repeat: int, model: str = "",
                keyed: bool = False, trace: dict[str, str] | None = None) -> _Outcome:
    """The Ray task: one episode on this node, in a scratch directory; everything comes back to the driver.

    ``trace`` is the driver's W3C trace context (its ``bench.run`` span): the episode's spans continue it.
    """
    from .. import telemetry
    from ._progress import NoProgress
    from ._store import ResultsDir
    from ._suites import load_suites

    node = _this_node()
    tasks = {(t.suite, t.id): t for s in load_suites(sweep.suites) for t in s.tasks}
    task = tasks.get((suite, task_id))
    if task is None:
        raise BenchError(f"suite {suite} has no task {task_id!r} on Ray node {node.describe()}: "
                         "is the same suite version installed on every node?")
    scratch = Path(tempfile.mkdtemp(prefix="codeact-ray-"))
    buffer = _EventBuffer()
    runner = Runner(sweep.config, ResultsDir(scratch), sweep.model, NoProgress(), log=buffer)
    runner.node = node.describe()
    if agent == "codeact" and sweep.config.backend == "docker":
        engine = next((sweep.engines[k] for k in node.engine_keys() if k in sweep.engines), None)
        runner.pool = _NodeSandboxes(engine, sweep.config.execution_timeout, sweep.config.runtime)
    tracing = telemetry.tracing()  # on when the driver sent its OTEL_* variables (or the node has its own)
    if tracing is not None:
        runner.parent = tracing.extract(trace)
    try:
        episode = runner.attempt(Spec(task, agent, repeat, model, keyed))
    finally:
        runner.close()
        if tracing is not None:
            tracing.flush()  # this worker process lives on: its batch would leave only when full
    assert episode is not None  # only a stopped runner returns None, and nothing stops this one
    files, skipped = _collect_files(scratch, episode)
    outcome = _Outcome(episode=episode, events=_portable(buffer.events), links=buffer.links, files=files,
                       scratch=str(scratch), node=node.describe(), skipped_files=skipped)
    shutil.rmtree(scratch, ignore_errors=True)
    return outcome


def _collect_files(scratch: Path, episode: Any) -> tuple[list[tuple[str, str, bytes]], int]:
    """The episode's artifacts and work-directory files (regular files only), up to the byte budget."""
    roots = [("work", scratch / "work", scratch / "work" / episode.key.replace("/", "__"))]
    if episode.run_id:
        roots.append(("artifacts", scratch / "artifacts", scratch / "artifacts" / episode.run_id))
    files: list[tuple[str, str, bytes]] = []
    budget, skipped = MAX_EPISODE_FILES_BYTES, 0
    for area, base, top in roots:
        for dirpath, _dirs, names in os.walk(top):
            for name in sorted(names):
                path = Path(dirpath) / name
                try:
                    st = path.lstat()
                    if not path.is_file() or path.is_symlink():
                        continue
                    if st.st_size > budget:
                        skipped += 1
                        continue
                    data = path.read_bytes()
                except OSError:
                    continue
                budget -= len(data)
                files.append((area, path.relative_to(base).as_posix(), data))
    return files, skipped


def _portable(events: list[Any]) -> list[Any]:
    """The events that can travel to the driver: an answer that cannot be pickled is sent as its preview."""
    from ray import cloudpickle

    from ..values import preview

    out = []
    for event in events:
        try:
            cloudpickle.dumps(event)
        except Exception:  # any pickling failure: send what can be sent
            if hasattr(event, "answer"):
                event = dataclasses.replace(event, answer=preview(event.answer))
            elif hasattr(event, "result"):
                event = dataclasses.replace(event, result=dataclasses.replace(
                    event.result, answer=preview(event.result.answer)))
            else:
                continue
            try:
                cloudpickle.dumps(event)
            except Exception:
                continue
        out.append(event)
    return out


# --- the driver -------------------------------------------------------------------------------------------


class RayExecutor:
    """Runs a sweep's episodes as Ray tasks; the driver side of :mod:`codeact.bench._ray`.

    The same interface as the local runner: ``run(specs, already)``,
    ``close()``, ``finished``.
    """

    def __init__(self, config: Any, results: Any, model: Any, progress: Any) -> None:
        self.config = config
        self.options: RayOptions = config.ray
        self.results = results
        self.model = model
        self.progress = progress
        self.finished = 0
        self._done: set[str] = set()
        self._log: Any = None
        self.stopped: str | None = None
        self._guard: Any = None
        self._ray: Any = None
        self._connected_here = False

    def run(self, specs: list[Any], already: int) -> None:
        if not specs:
            return
        with sweep_span(self, specs, already, "ray") as parent:
            self._run(specs, already, parent)

    def _run(self, specs: list[Any], already: int, parent: Any) -> None:
        from .. import telemetry

        ray = self._connect()
        from ..runlog import RunLog

        self._log = RunLog(self.results.runlog_path)
        from ._outcomes import ErrorGuard

        self._guard = ErrorGuard(self.config.max_error_share, window=max(10, 2 * self.config.concurrency),
                                 expected=len(specs))
        sweep_ref = ray.put(self._sweep())
        task = ray.remote(run_episode).options(**self._task_options())
        tracing = telemetry.tracing() if parent is not None else None
        carrier = tracing.inject(parent) if tracing is not None else None  # the same parent for every episode
        pending: dict[Any, Any] = {}
        for spec in specs:
            pending[task.remote(sweep_ref, spec.task.suite, spec.task.id, spec.agent, spec.repeat, spec.model,
                                spec.keyed, carrier)] = spec
        self.progress.start(total=len(specs) + already, done=already)
        try:
            while pending and self.stopped is None:
                ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0.5)
                for ref in ready:
                    spec = pending.pop(ref)
                    self._collect(ray, ref, spec)
            # Stopped for infrastructure errors: the rest is cancelled and runs again on resume.
            self._cancel(ray, pending)
        except KeyboardInterrupt:
            # Running episodes are cancelled (they run again on resume); finished ones are saved.
            self._cancel(ray, pending)
            raise
        finally:
            self.progress.stop()

    @staticmethod
    def _cancel(ray: Any, pending: dict[Any, Any]) -> None:
        for ref in pending:
            with contextlib.suppress(Exception):  # best effort on the way out
                ray.cancel(ref, force=True)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
        if self._connected_here and self._ray is not None:
            self._ray.shutdown()

    # --- connecting -------------------------------------------------------------------------

    def _connect(self) -> Any:
        ray = import_ray()
        self._ray = ray
        if ray.is_initialized():
            return ray  # the caller's connection
        address = self.options.address or "auto"
        _check_reachable(address)
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING,
                     namespace="codeact-bench")
        except Exception as exc:  # ConnectionError, RuntimeError, ValueError...
            where = "on this machine" if address == "auto" else f"at {address}"
            raise BenchError(f"cannot connect to a Ray cluster {where} ({type(exc).__name__}: "
                             f"{str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}); start one "
                             "with `ray start --head`, give --ray HOST:PORT of its head node, or --ray local "
                             "for a private one on this machine") from None
        self._connected_here = True
        return ray

    def _task_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "num_cpus": self.options.cpus_per_episode,
            "max_retries": int(self.options.max_retries),
            "retry_exceptions": False,
            "scheduling_strategy": "SPREAD",
        }
        memory = self.options.memory_bytes()
        if memory is not None:
            options["memory"] = memory
        from .. import telemetry

        # Tracing on here: the workers trace to the same place (headers, which may hold a token, only with
        # pass_api_key: what travels in runtime_env can be read by anyone who can query the cluster).
        env_vars = telemetry.environment_for_workers(secrets=self.options.pass_api_key)
        if self.options.pass_api_key:
            from .. import config as cfg
            from ..models import API_KEY_ENV

            key = self.config.api_key or cfg.env(API_KEY_ENV)
            if key:
                env_vars[API_KEY_ENV] = key
        if env_vars:
            options["runtime_env"] = {"env_vars": env_vars}
        return options

    def _sweep(self) -> _Sweep:
        """What the workers need, without the key: the model's settings travel, the secret does not."""
        from .. import config as cfg
        from ._oracle import ORACLE

        base_url = self.config.base_url
        if self.model is None and any(m != ORACLE for m in self.config.models):
            base_url = cfg.base_url(base_url)  # the driver's endpoint, not whatever a node's environment says
        config = dataclasses.replace(self.config, api_key=None, base_url=base_url, ray=None, out=".")
        sweep = _Sweep(config=config, suites=[_absolute_suite(s) for s in self.config.suites], model=self.model,
                       engines=self.options.node_engines())
        from ray import cloudpickle

        try:
            cloudpickle.dumps(sweep)
        except Exception as exc:
            raise BenchError(f"the model given to run_bench cannot be sent to Ray workers ({type(exc).__name__}: "
                             f"{exc}); pass a factory function (task, agent_kind, context) -> model, or a model "
                             "name in BenchConfig") from None
        return sweep

    # --- results ---------------------------------------------------------------------------

    def _collect(self, ray: Any, ref: Any, spec: Any) -> None:
        try:
            outcome = ray.get(ref)
        except Exception as exc:  # a lost node after the retries, a worker bug: this episode's error
            self._store_failure(spec, exc)
            return
        self._store(outcome)

    def _store_failure(self, spec: Any, exc: BaseException) -> None:
        from ..values import preview
        from ._store import Episode

        if spec.key in self._done:
            return
        cause = getattr(exc, "cause", None)
        if cause is not None and not isinstance(cause, type(exc)):
            what = f"{type(cause).__name__}: {cause}"
        else:
            what = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        if _is_lost(exc):
            what = (f"the episode's Ray worker or node was lost {int(self.options.max_retries) + 1} times "
                    f"({what[:300]}); run again with --retry-errors")
        task = spec.task
        now = time.time()
        episode = Episode(key=spec.key, suite=task.suite, task=task.id, agent=spec.agent, repeat=spec.repeat,
                          status="error", outcome="harness_error", error_kind="ray", check="did not finish",
                          error=what[:2000], turn_limit=self.config.max_turns or task.max_turns,
                          model=self._model_name(spec),
                          temperature=self.config.temperature, seed=self.config.seed, tags=list(task.tags),
                          started=now, finished=now, expected=preview(task.expected))
        self._append(episode)

    def _model_name(self, spec: Any) -> str:
        given = self.model
        if given is None or is_factory(given):
            return spec.model or self.config.models[0]
        return getattr(given, "name", None) or spec.model or self.config.models[0]

    def _store(self, outcome: _Outcome) -> None:
        episode = outcome.episode
        if episode.key in self._done:
            return  # a second completion of the same episode: the first one stands
        moved = self._write_files(outcome)
        for event in outcome.events:
            event = _relocate(event, moved)
            with contextlib.suppress(Exception):  # the run log must never break a sweep
                self._log.record(event)
        for run_id, key in outcome.links:
            with contextlib.suppress(Exception):  # the link is a convenience
                self._log.link_episode(run_id, key)
        self._append(episode)

    def _append(self, episode: Any) -> None:
        self._done.add(episode.key)
        self.results.append(episode)
        self.finished += 1
        self.progress.advance(episode)
        if self._guard is not None and self.stopped is None:
            self.stopped = self._guard.add(episode)

    def _write_files(self, outcome: _Outcome) -> dict[str, str]:
        """Write the episode's files where a local run puts them; returns worker path -> driver path."""
        from sandbox.hostfiles import write_confined

        moved: dict[str, str] = {}
        for area, rel, data in outcome.files:
            if area not in ("artifacts", "work"):
                continue
            root = self.results.path / area
            try:
                root.mkdir(parents=True, exist_ok=True)
                target = write_confined(root, rel, data)
            except Exception:  # a name that cannot be written here: skip the file
                continue
            moved[str(Path(outcome.scratch) / area / rel)] = str(target)
        return moved


def _relocate(event: Any, moved: dict[str, str]) -> Any:
    """The event with its result's artifact paths pointing at the driver's copies."""
    result = getattr(event, "result", None)
    if result is None or not getattr(result, "artifacts", None):
        return event
    artifacts = [Path(moved.get(str(p), str(p))) for p in result.artifacts]
    return dataclasses.replace(event, result=dataclasses.replace(result, artifacts=artifacts))


#: Seconds to wait for a head node's port to answer before saying it does not (Ray itself retries for minutes).
CONNECT_PROBE_TIMEOUT = 10.0


def _check_reachable(address: str) -> None:
    """A ``HOST:PORT`` address whose port does not answer fails now, not after Ray's minutes of retries."""
    target = host_port(address)
    if target is None:
        return
    try:
        socket.create_connection(target, timeout=CONNECT_PROBE_TIMEOUT).close()
    except OSError as exc:
        raise BenchError(f"nothing answers at the Ray address {address} ({exc.strerror or type(exc).__name__}); "
                         "is the head node started (`ray start --head --port PORT`) and is the port open "
                         "from here?") from None


def _is_lost(exc: BaseException) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"WorkerCrashedError", "NodeDiedError", "ObjectLostError", "OwnerDiedError",
                         "LocalRayletDiedError", "TaskUnschedulableError", "OutOfMemoryError"})


def _absolute_suite(spec: str) -> str:
    """A suite file named relative to the driver's directory, as an absolute path (workers have another cwd)."""
    target, sep, function = spec.partition(":")
    if function and not function.isidentifier():
        target, sep, function = spec, "", ""
    if target.endswith(".py") or "/" in target or Path(target).is_file():
        return str(Path(target).expanduser().resolve()) + sep + function
    return spec
