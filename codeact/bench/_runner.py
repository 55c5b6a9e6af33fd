"""The bench runner: what a sweep is (BenchConfig), and its episodes on N threads with a pool of sandboxes, resumable.

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
import fnmatch
import os
import queue
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from ..errors import BenchError
from ..events import ErrorEvent, RunFinished, RunResult, RunStarted, ToolCall
from ..react import AGENT_KINDS
from ..values import preview
from ._agents import CODEACT_VARIANTS, agent_base
from ._checkers import CheckContext, CheckResult, run_check
from ._oracle import ORACLE, OracleModel
from ._outcomes import ErrorGuard, WatchedModel, classify_exception, classify_run
from ._progress import Progress
from ._ray_options import RayOptions, import_ray
from ._report import Report
from ._store import Episode, ResultsDir, episode_key
from ._task import Task, TaskContext

if TYPE_CHECKING:
    from ..catalog import Disclosure

BACKENDS = ("docker", "local", "restricted")

#: A model for every episode, or a factory ``(task, agent kind, context) -> model``.
ModelSpec = Any


@dataclass
class BenchConfig:
    """What to run. Only ``suites`` is required; see ``codeact bench run --help`` for each option.

    ``model`` is one model name or a list of them (every agent runs every task
    on each; the report has a column per model x agent).

    Example::

        config = BenchConfig(suites=["tool-chains"], agents=["codeact", "react-json"], model="oracle",
                             concurrency=4, out="results/")
        run = run_bench(config)
        print(run.report.overall["codeact"].success_rate.mean)
    """

    suites: Sequence[str]
    agents: Sequence[str] = AGENT_KINDS
    model: str | Sequence[str] = ORACLE
    base_url: str | None = None
    api_key: str | None = None  # never written to the results
    temperature: float = 0.0
    seed: int = 0
    repeats: int = 1
    concurrency: int = 4
    backend: str = "docker"
    #: The Docker engine's container runtime for the CodeAct sandboxes (``runsc`` for gVisor); None: the engine's.
    runtime: str | None = None
    out: str | os.PathLike[str] = "results"
    tasks: Sequence[str] = ()  # glob patterns over task ids or suite/id keys
    max_turns: int | None = None  # overrides every task's turn limit
    episode_timeout: float = 600.0
    model_timeout: float = 120.0
    execution_timeout: float = 60.0
    #: The most tokens one model reply may take (each request's ``max_tokens``); None leaves it to the
    #: endpoint, which for a local server is often the rest of its window: a model that never stops
    #: then writes for minutes per turn, and the reply has no room the conversation's folding can keep.
    max_reply_tokens: int | None = 1024
    price_in: float | None = None  # USD per million prompt tokens
    price_out: float | None = None  # USD per million completion tokens
    retry_errors: bool = False
    stream: bool = False
    #: Stop the run when more than this share of the recent episodes failed in the infrastructure
    #: (model endpoint, sandbox, timeouts); 1.0 never stops.
    max_error_share: float = 0.5
    #: Check the endpoint (one tiny request per model) and the sandbox (one started) before the first episode.
    preflight: bool = True
    #: Run the episodes as Ray tasks across a cluster: a :class:`RayOptions`, or just its address
    #: (``"auto"``, ``"host:port"``, ``"local"``). ``None`` runs them on threads here.
    ray: RayOptions | str | None = None
    #: The CodeAct sandboxes' network allow-list (a :class:`sandbox.NetworkPolicy`; docker backend), or None
    #: for no network. Never written to the results (its secrets stay in this process and the Ray workers).
    network: Any = None

    def __post_init__(self) -> None:
        if isinstance(self.ray, str):
            self.ray = RayOptions(address=self.ray)

    @property
    def models(self) -> list[str]:
        """The model names, in order (one for a single model)."""
        names = [self.model] if isinstance(self.model, str) else list(self.model)
        return [str(n).strip() for n in names]

    def validate(self) -> None:
        """Raises :class:`BenchError` for an option that cannot work, saying which and why."""
        unknown = [a for a in self.agents if a not in AGENT_KINDS and a not in CODEACT_VARIANTS]
        if unknown or not self.agents:
            raise BenchError(f"unknown agent(s) {', '.join(unknown) or '(none given)'}; "
                             f"choose from {', '.join([*AGENT_KINDS, *CODEACT_VARIANTS])}")
        if len(set(self.agents)) != len(self.agents):
            raise BenchError("an agent is listed twice in --agents")
        if self.backend not in BACKENDS:
            raise BenchError(f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}")
        if self.runtime and self.backend != "docker":
            raise BenchError(f"runtime {self.runtime!r} needs the docker backend, not {self.backend}")
        for name in ("repeats", "concurrency"):
            if int(getattr(self, name)) < 1:
                raise BenchError(f"{name} must be at least 1")
        if self.max_turns is not None and self.max_turns < 1:
            raise BenchError("max_turns must be at least 1")
        if self.max_reply_tokens is not None and (isinstance(self.max_reply_tokens, bool)
                                                  or int(self.max_reply_tokens) < 1):
            raise BenchError("max_reply_tokens must be at least 1 (or None: the endpoint's own limit)")
        for name in ("episode_timeout", "model_timeout", "execution_timeout"):
            if float(getattr(self, name)) <= 0:
                raise BenchError(f"{name} must be > 0 seconds")
        if (self.price_in is None) != (self.price_out is None):
            raise BenchError("give both prices (prompt and completion, USD per million tokens) or neither")
        models = self.models
        if not models or not all(models):
            raise BenchError("no model: give --model NAME (or --model oracle to replay the reference solutions)")
        if len(set(models)) != len(models):
            raise BenchError("a model is listed twice in --model")
        if not 0 < float(self.max_error_share) <= 1:
            raise BenchError("max_error_share must be > 0 and <= 1 (1 never stops a run)")
        if self.network is not None and self.ray is not None:
            raise BenchError("network= (--allow-host) applies to episodes run here; with --ray the workers would "
                             "need the policy's secrets: run without --ray")
        if self.network is not None and self.backend != "docker":
            raise BenchError("network= (--allow-host) needs the docker backend")
        if self.ray is not None:
            if not isinstance(self.ray, RayOptions):
                raise BenchError(f"ray must be RayOptions(...) or an address string, not {type(self.ray).__name__}")
            self.ray.validate()
            import_ray()  # fail now, before anything is written, when ray is not installed


@dataclass
class BenchRun:
    """What :func:`run_bench` did: every finished episode in the directory, the report, the files written."""

    results: ResultsDir
    episodes: list[Episode]
    ran: int
    skipped: int
    wall_time: float
    report: Report
    written: list[Path] = field(default_factory=list)
    #: Why the run stopped before its last episode (too many infrastructure errors), or None.
    stopped: str | None = None


@dataclass
class _Spec:
    task: Task
    agent: str
    repeat: int
    model: str = ""
    #: Set when the run has several models: the model is part of the key.
    keyed: bool = False

    @property
    def key(self) -> str:
        return episode_key(self.task.suite, self.task.id, self.agent, self.repeat,
                           self.model if self.keyed else None)


def select_tasks(tasks: Sequence[Task], patterns: Sequence[str]) -> list[Task]:
    """The tasks whose id or ``suite/id`` matches one of the glob ``patterns`` (all when none)."""
    if not patterns:
        return list(tasks)
    return [t for t in tasks if any(fnmatch.fnmatchcase(t.id, p) or fnmatch.fnmatchcase(t.key, p) for p in patterns)]


def _close_quietly(sandbox: Any) -> None:
    with contextlib.suppress(Exception):  # the episode's outcome is recorded already
        sandbox.close()


def _on_demand(kind: str, tools: Sequence[Any], task: Task | None = None) -> bool:
    """Whether a CodeAct kind will show its tools on demand (``auto`` decides by the stubs' size)."""
    mode = _disclosure(kind, task)
    if mode != "auto" or not tools:
        return mode == "on_demand"
    from ..catalog import DEFAULT_TOOL_BUDGET, ToolCatalog, resolve_disclosure

    return resolve_disclosure("auto", ToolCatalog(list(tools)).stubs(), DEFAULT_TOOL_BUDGET) == "on_demand"


def _is_factory(model: Any) -> bool:
    return callable(model) and not hasattr(model, "complete")


def _version() -> str:
    from .. import __version__

    return __version__


class _Runner:
    def __init__(self, config: BenchConfig, results: ResultsDir, model: ModelSpec, progress: Progress,
                 log: Any = None) -> None:
        from ..runlog import RunLog

        self.config = config
        self.results = results
        self.progress = progress
        # A Ray worker passes a log that keeps the events for the driver (it must not write the results).
        self.log = log if log is not None else RunLog(results.runlog_path)
        self.model_spec = model
        self._shared_models: dict[str, Any] = {}
        self.pool: Any = None
        self.stop = threading.Event()
        self.finished = 0
        self.stopped: str | None = None
        self._guard: ErrorGuard | None = None
        self._lock = threading.Lock()
        self._queue: queue.Queue[_Spec] = queue.Queue()
        # Closing a container takes a few hundred ms: done off the workers' path.
        self._closer = ThreadPoolExecutor(max_workers=2, thread_name_prefix="bench-close")
        #: The OpenTelemetry context the episodes' spans are children of: the ``bench.run`` span here, the
        #: driver's on a Ray worker (None: tracing off). Passed by hand: episodes run on threads of their own.
        self.parent: Any = None
        #: The Ray node an episode runs on (a worker's runner), named on its span.
        self.node: str | None = None

    # --- the run ----------------------------------------------------------------------------

    def run(self, specs: list[_Spec], already: int) -> None:
        if not specs:
            return
        with sweep_span(self, specs, already, "local") as parent:
            self.parent = parent
            self._run(specs, already)

    def _run(self, specs: list[_Spec], already: int) -> None:
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

    def close(self) -> None:
        self._closer.shutdown(wait=True)
        if self.pool is not None:
            with contextlib.suppress(Exception):  # closing must not hide the run's outcome
                self.pool.close()
        for model in self._shared_models.values():
            if hasattr(model, "close"):
                model.close()
        self.log.close()

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
            self._closer.submit(_close_quietly, sandbox)

    def _work(self) -> None:
        while not self.stop.is_set():
            try:
                spec = self._queue.get_nowait()
            except queue.Empty:
                return
            episode = self._attempt(spec)
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

    def _attempt(self, spec: _Spec) -> Episode | None:
        """Run one episode on its own thread, under the episode time limit."""
        cancel = threading.Event()
        box: dict[str, Episode] = {}
        thread = threading.Thread(target=lambda: box.setdefault("episode", self._traced_episode(spec, cancel)),
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

    def _timed_out(self, spec: _Spec, seconds: float) -> Episode:
        task = spec.task
        return Episode(key=spec.key, suite=task.suite, task=task.id, agent=spec.agent, repeat=spec.repeat,
                       status="timeout", outcome="timeout", check="did not finish",
                       error=f"the episode did not finish within {self.config.episode_timeout:g} s (a stalled model "
                             "or tool?); it was abandoned",
                       turn_limit=self._turn_limit(task), wall_time=seconds, model=self._model_name(spec),
                       temperature=self.config.temperature, seed=self.config.seed, tags=list(task.tags),
                       started=time.time() - seconds, finished=time.time(), expected=preview(task.expected))

    # --- one episode --------------------------------------------------------------------------

    def _turn_limit(self, task: Task) -> int:
        return self.config.max_turns or task.max_turns

    def _model_name(self, spec: _Spec) -> str:
        given = self.model_spec
        if given is None or _is_factory(given):
            return spec.model or self.config.models[0]
        return getattr(given, "name", None) or spec.model or self.config.models[0]

    def _model(self, spec: _Spec, ctx: TaskContext, tools: Sequence[Any] = ()) -> Any:
        task, kind = spec.task, spec.agent
        given = self.model_spec
        if given is not None:
            return given(task, kind, ctx) if _is_factory(given) else given
        name = spec.model or self.config.models[0]
        if name == ORACLE:
            if agent_base(kind) == "codeact" and _on_demand(kind, tools, task):
                # Tools found on demand: the oracle must search for them as a model would.
                from .suites.many_tools_oracle import SearchingOracle

                return SearchingOracle(task)
            return OracleModel(task, agent_base(kind), context=ctx)
        with self._lock:
            if name not in self._shared_models:
                from ..models import OpenAIModel

                self._shared_models[name] = OpenAIModel(name, base_url=self.config.base_url,
                                                        api_key=self.config.api_key,
                                                        temperature=self.config.temperature, seed=self.config.seed,
                                                        timeout=self.config.model_timeout,
                                                        max_tokens=self.config.max_reply_tokens)
            return self._shared_models[name]

    def _traced_episode(self, spec: _Spec, cancel: threading.Event) -> Episode:
        """:meth:`_episode` under a ``bench.episode`` span, the parent of its runs (when tracing is on)."""
        from .. import telemetry

        tracing = telemetry.tracing()
        if tracing is None:
            return self._episode(spec, cancel)
        attributes: dict[str, Any] = {"codeact.bench.episode": spec.key, "codeact.bench.suite": spec.task.suite,
                                      "codeact.bench.task": spec.task.id, "gen_ai.agent.name": spec.agent,
                                      "codeact.bench.repeat": spec.repeat}
        if self.node:
            attributes["codeact.bench.node"] = self.node
        with tracing.span(f"bench.episode {spec.key}", attributes, parent=self.parent) as span:
            episode = self._episode(spec, cancel)
            span.set_attribute("codeact.bench.outcome", str(episode.outcome or episode.status or ""))
            span.set_attribute("codeact.bench.success", bool(episode.success))
            return episode

    def _episode(self, spec: _Spec, cancel: threading.Event) -> Episode:
        t0 = time.perf_counter()
        task, kind = spec.task, spec.agent
        limit = self._turn_limit(task)
        episode = Episode(key=spec.key, suite=task.suite, task=task.id, agent=kind, repeat=spec.repeat,
                          turn_limit=limit, model=self._model_name(spec), temperature=self.config.temperature,
                          seed=self.config.seed, tags=list(task.tags), started=time.time(),
                          expected=preview(task.expected))
        workdir = self.results.path / "work" / spec.key.replace("/", "__")
        shutil.rmtree(workdir, ignore_errors=True)  # left by an attempt that did not finish
        workdir.mkdir(parents=True, exist_ok=True)
        ctx = TaskContext(task_id=task.id, workdir=workdir, files={f.name: f for f in task.files},
                          repeat=spec.repeat, seed=self.config.seed)
        result: RunResult | None = None
        sandbox: Any = None
        fatal: str | None = None  # the kind of the run's fatal error event
        raised: BaseException | None = None  # what broke the episode outside the agent's run
        watched: WatchedModel | None = None
        turns: _TurnsSeen | None = None
        try:
            tools = task.build_tools(ctx)
            held = {name for turn in task.turns for name in turn.new_tools}
            unknown = held - {t.name for t in tools}
            if unknown:
                raise BenchError(f"task {task.key}: its turns add tools it does not have: {', '.join(sorted(unknown))}")
            offered = [t for t in tools if t.name not in held]
            watched = WatchedModel(self._model(spec, ctx, offered))
            model = watched
            if agent_base(kind) == "codeact" and self.pool is not None:
                waited = time.perf_counter()
                sandbox = self.pool.acquire()
                episode.setup_time = time.perf_counter() - waited
            agent = self._agent(kind, model, offered, limit, sandbox, task)
            episode.prompt, episode.prompt_version = agent.prompt.name, agent.prompt.version
            if task.turns:
                turns = _TurnsSeen()
                result, fatal = self._turns(task, agent, model, tools, ctx, cancel, episode, turns)
            else:
                result, fatal = self._consume(agent.stream(task.instruction, files=task.files, cancel=cancel),
                                              episode)
        except Exception as exc:  # a broken task, tool factory, oracle or sandbox: this episode's error
            episode.error = f"{type(exc).__name__}: {exc}"
            raised = exc
        finally:
            if sandbox is not None:
                try:
                    self._closer.submit(_close_quietly, sandbox)
                except RuntimeError:  # an abandoned episode ending after the run closed its closer
                    _close_quietly(sandbox)
        self._settle(episode, task, result, workdir, ctx, turns)
        if raised is not None:
            episode.outcome, episode.error_kind = classify_exception(raised)
        elif result is None:
            episode.outcome, episode.error_kind = "harness_error", "no result"
        else:
            episode.outcome, episode.error_kind = classify_run(result.status, fatal,
                                                               watched.error if watched else None, episode.success)
        for run_id in (turns.run_ids if turns is not None else [episode.run_id]):
            if run_id:
                with contextlib.suppress(Exception):  # the link is a convenience
                    self.log.link_episode(run_id, episode.key)
        episode.finished = time.time()
        episode.wall_time = time.perf_counter() - t0
        episode.harness_time = max(0.0, episode.wall_time - episode.run_time - episode.setup_time)
        return episode

    def _consume(self, events: Any, episode: Episode) -> tuple[RunResult | None, str | None]:
        """Count one agent run's events into ``episode``; return its result and the kind of its fatal error."""
        result: RunResult | None = None
        fatal: str | None = None
        for event in events:
            if isinstance(event, RunStarted):
                episode.run_id = episode.run_id or event.run_id
            elif isinstance(event, ToolCall):
                episode.tool_calls += 1
                episode.tool_errors += int(event.error is not None)
                episode.tool_time += event.duration
            elif isinstance(event, ErrorEvent) and event.kind in ("parse", "action"):
                episode.invalid_actions += 1
            elif isinstance(event, ErrorEvent) and event.fatal:
                fatal = event.kind
            elif isinstance(event, RunFinished):
                result = event.result
        return result, fatal

    def _turns(self, task: Task, agent: Any, model: Any, tools: list[Any], ctx: TaskContext,
               cancel: threading.Event, episode: Episode, seen: _TurnsSeen) -> tuple[RunResult | None, str | None]:
        """A multi-turn task: every user turn to one session, each under its own turn limit, checked after it.

        Returns the combined result (steps and usage of every turn; the last turn's answer and status).
        A turn that does not end with an answer (turn limit, error, cancel) ends the episode."""
        by_name = {t.name: t for t in tools}
        combined: RunResult | None = None
        fatal: str | None = None
        start_turn = getattr(model, "start_turn", None)  # the oracle follows the user turns
        session = agent.session()
        try:
            for index, turn in enumerate(task.turns):
                message = turn.message
                if turn.new_tools:
                    note = session.add_tools([by_name[n] for n in turn.new_tools])
                    message = f"{note}\n\n{message}" if note else message
                agent.max_steps = self.config.max_turns or turn.max_turns
                if callable(start_turn):
                    start_turn(index)
                run_id_before = episode.run_id
                episode.run_id = None
                result, fatal = self._consume(session.stream(message, files=task.files if index == 0 else (),
                                                             cancel=cancel), episode)
                if episode.run_id:
                    seen.run_ids.append(episode.run_id)
                episode.run_id = run_id_before or episode.run_id
                if result is None:
                    break
                seen.model_calls.append(result.usage.requests)
                combined = result if combined is None else _combine(combined, result)
                if result.status != "success":
                    break
                check = CheckContext(task_id=task.id, workdir=ctx.workdir, result=result, turn=index,
                                     state=ctx.state)
                seen.verdicts.append(run_check(task.checker(), result.answer, turn.expected, check))
        finally:
            session.close()
        return combined, fatal

    def _agent(self, kind: str, model: Any, tools: list[Any], limit: int, sandbox: Any, task: Task | None = None
               ) -> Any:
        if agent_base(kind) == "codeact":
            from ..agent import CodeActAgent

            # A sandbox from the pool is started and ours to close; without a pool the agent opens one.
            options: dict[str, Any] = {}
            if self.config.network is not None:
                options["network"] = self.config.network
            if self.config.runtime:
                options["runtime"] = self.config.runtime
            return CodeActAgent(model, tools, sandbox=sandbox if sandbox is not None else self.config.backend,
                                sandbox_options=options or None, max_steps=limit, log=self.log,
                                output_dir=self.results.path / "artifacts", stream_model=self.config.stream,
                                execution_timeout=self.config.execution_timeout,
                                tool_disclosure=_disclosure(kind, task))
        from ..react import ReActAgent

        return ReActAgent(model, tools, format=kind, max_steps=limit, log=self.log, stream_model=self.config.stream)

    def _settle(self, episode: Episode, task: Task, result: RunResult | None, workdir: Path,
                ctx: TaskContext | None = None, turns: _TurnsSeen | None = None) -> None:
        """Fill in the outcome, the costs and the checker's verdict from the run's result."""
        if result is not None:
            episode.status = result.status
            episode.turns = len(result.steps)
            episode.model_calls = result.usage.requests
            episode.input_tokens = result.usage.input_tokens
            episode.output_tokens = result.usage.output_tokens
            episode.run_time = result.duration
            episode.model_time = sum(s.model_time for s in result.steps)
            episode.sandbox_time = sum(s.sandbox_time for s in result.steps)
            episode.answer = preview(result.answer)
            if result.error and not episode.error:
                episode.error = result.error
        elif episode.error is None:
            episode.error = "the run ended without a result"
        files = [p for p in workdir.rglob("*") if p.is_file()]
        artifacts = [Path(p) for p in (result.artifacts if result is not None else [])] + files
        episode.artifacts = [p.name for p in artifacts]
        if turns is not None:
            episode.user_turns = len(turns.model_calls)
            episode.user_turns_passed = sum(1 for v in turns.verdicts if v.ok)
            episode.turn_model_calls = list(turns.model_calls)
        if turns is not None and result is not None and result.status == "success":
            verdict = turns.verdict(len(task.turns))
        elif turns is not None and result is not None and result.status == "max_steps":
            last = len(turns.model_calls) - 1
            verdict = CheckResult(False, f"user turn {last}: the turn limit "
                                         f"({self.config.max_turns or task.turns[last].max_turns})"
                                         " was reached without an answer")
        elif result is not None and result.status == "success":
            check = CheckContext(task_id=task.id, artifacts=tuple(artifacts), workdir=workdir, result=result,
                                 state=ctx.state if ctx is not None else {})
            verdict = run_check(task.checker(), result.answer, task.expected, check)
        elif result is not None and result.status == "max_steps":
            verdict = CheckResult(False, f"the turn limit ({episode.turn_limit}) was reached without an answer")
        else:
            verdict = CheckResult(False, f"the run ended with status {episode.status}: {episode.error}")
        episode.success, episode.check = verdict.ok, verdict.detail
        if self.config.price_in is not None and self.config.price_out is not None:
            episode.cost = (episode.input_tokens * self.config.price_in
                            + episode.output_tokens * self.config.price_out) / 1_000_000


@contextlib.contextmanager
def sweep_span(executor: Any, specs: Sequence[_Spec], already: int, kind: str) -> Iterator[Any]:
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


def _disclosure(kind: str, task: Task | None) -> Disclosure:
    """What a CodeAct kind shows of the tools: its variant's mode, else the task's (``auto`` by default)."""
    mode = CODEACT_VARIANTS.get(kind, "auto")
    if mode == "auto" and task is not None:
        return task.tool_disclosure
    return mode


@dataclass
class _TurnsSeen:
    """A multi-turn episode as it went: each user turn's model calls, verdict and run id."""

    model_calls: list[int] = field(default_factory=list)
    verdicts: list[CheckResult] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)

    def verdict(self, total: int) -> CheckResult:
        failed = [(i, v) for i, v in enumerate(self.verdicts) if not v.ok]
        if failed:
            index, first = failed[0]
            more = f" ({len(failed)} of {total} user turns failed)" if len(failed) > 1 else ""
            return CheckResult(False, f"user turn {index}: {first.detail}{more}")
        if len(self.verdicts) < total:
            return CheckResult(False, f"only {len(self.verdicts)} of {total} user turns ran")
        return CheckResult(True, f"all {total} user turns passed")


def _combine(first: RunResult, later: RunResult) -> RunResult:
    """One result for several user turns: every step and artifact, summed usage and time, the last answer."""
    from dataclasses import replace

    return replace(later, run_id=first.run_id, task=first.task, steps=[*first.steps, *later.steps],
                   usage=first.usage + later.usage, duration=first.duration + later.duration,
                   artifacts=[*first.artifacts, *later.artifacts])
