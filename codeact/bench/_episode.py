"""One benchmark episode: fresh tools, a model, an agent (and a sandbox from the pool), its run(s), its verdict.

Whatever goes wrong inside an episode (a tool factory that raises, a broken oracle, a crashed sandbox,
an endpoint that fails) is recorded as that episode's outcome (see :mod:`codeact.bench._outcomes`).
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import BenchError
from ..events import ErrorEvent, RunFinished, RunResult, RunStarted, ToolCall
from ..values import preview
from ._agents import CODEACT_VARIANTS, agent_base
from ._checkers import CheckContext, CheckResult, run_check
from ._config import BenchConfig, ModelSpec
from ._oracle import ORACLE, OracleModel
from ._outcomes import WatchedModel, classify_exception, classify_run
from ._store import Episode, ResultsDir, episode_key
from ._task import Task, TaskContext

if TYPE_CHECKING:
    from ..catalog import Disclosure


@dataclass
class Spec:
    """Which episode: a task, an agent kind, a repeat and (for a run of several models) the model."""

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



def close_quietly(sandbox: Any) -> None:
    """Close an episode's sandbox; a failure to close changes nothing of its outcome."""
    with contextlib.suppress(Exception):  # the episode's outcome is recorded already
        sandbox.close()


def _on_demand(kind: str, tools: Sequence[Any], task: Task | None = None) -> bool:
    """Whether a CodeAct kind will show its tools on demand (``auto`` decides by the stubs' size)."""
    mode = _disclosure(kind, task)
    if mode != "auto" or not tools:
        return mode == "on_demand"
    from ..catalog import DEFAULT_TOOL_BUDGET, ToolCatalog, resolve_disclosure

    return resolve_disclosure("auto", ToolCatalog(list(tools)).stubs(), DEFAULT_TOOL_BUDGET) == "on_demand"


def is_factory(model: Any) -> bool:
    """Whether a run's ``model`` is a factory ``(task, agent kind, context) -> model`` rather than a model."""
    return callable(model) and not hasattr(model, "complete")


class EpisodeRunner:
    """Runs single episodes of a sweep (:meth:`run_episode`), each with what it needs.

    Args:
        config: the sweep.
        results: where the episodes' work directories and artifacts go.
        model: a model for every episode, a factory, or None (``config.model``).
        log: the run log the agents record into (default: the results directory's).
    """

    def __init__(self, config: BenchConfig, results: ResultsDir, model: ModelSpec, log: Any = None) -> None:
        from ..runlog import RunLog

        self.config = config
        self.results = results
        # A Ray worker passes a log that keeps the events for the driver (it must not write the results).
        self.log = log if log is not None else RunLog(results.runlog_path)
        self.model_spec = model
        self._shared_models: dict[str, Any] = {}
        #: Started sandboxes for CodeAct episodes (``acquire()``), or None: each agent opens its own.
        self.pool: Any = None
        self._lock = threading.Lock()
        # Closing a container takes a few hundred ms: done off the workers' path.
        self._closer = ThreadPoolExecutor(max_workers=2, thread_name_prefix="bench-close")
        #: The OpenTelemetry context the episodes' spans are children of: the ``bench.run`` span here, the
        #: driver's on a Ray worker (None: tracing off). Passed by hand: episodes run on threads of their own.
        self.parent: Any = None
        #: The Ray node an episode runs on (a worker's runner), named on its span.
        self.node: str | None = None

    def close(self) -> None:
        """Close what the episodes shared: the sandbox closer, the pool, the shared models, the log."""
        self._closer.shutdown(wait=True)
        if self.pool is not None:
            with contextlib.suppress(Exception):  # closing must not hide the run's outcome
                self.pool.close()
        for model in self._shared_models.values():
            if hasattr(model, "close"):
                model.close()
        self.log.close()


    def turn_limit(self, task: Task) -> int:
        """The most steps an episode of ``task`` may take (``config.max_turns`` wins over the task's)."""
        return self.config.max_turns or task.max_turns

    def model_name(self, spec: Spec) -> str:
        """The model an episode is recorded under."""
        given = self.model_spec
        if given is None or is_factory(given):
            return spec.model or self.config.models[0]
        return getattr(given, "name", None) or spec.model or self.config.models[0]

    def _model(self, spec: Spec, ctx: TaskContext, tools: Sequence[Any] = ()) -> Any:
        task, kind = spec.task, spec.agent
        given = self.model_spec
        if given is not None:
            return given(task, kind, ctx) if is_factory(given) else given
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
                                                        max_tokens=self.config.max_reply_tokens,
                                                        context_window=self.config.context_window)
            return self._shared_models[name]

    def run_episode(self, spec: Spec, cancel: threading.Event) -> Episode:
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

    def _episode(self, spec: Spec, cancel: threading.Event) -> Episode:
        t0 = time.perf_counter()
        task, kind = spec.task, spec.agent
        limit = self.turn_limit(task)
        episode = Episode(key=spec.key, suite=task.suite, task=task.id, agent=kind, repeat=spec.repeat,
                          turn_limit=limit, model=self.model_name(spec), temperature=self.config.temperature,
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
                    self._closer.submit(close_quietly, sandbox)
                except RuntimeError:  # an abandoned episode ending after the run closed its closer
                    close_quietly(sandbox)
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
                                tool_disclosure=_disclosure(kind, task),
                                condenser=self.config.condenser)  # type: ignore[arg-type]
        from ..react import ReActAgent

        return ReActAgent(model, tools, format=kind, max_steps=limit, log=self.log, stream_model=self.config.stream,
                          condenser=self.config.condenser)  # type: ignore[arg-type]

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
