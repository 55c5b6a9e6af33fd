"""The ReAct loop: the model asks for tool calls one turn at a time; each result is the next observation."""

from __future__ import annotations

import difflib
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterator, Sequence, TypeVar, overload

from .._run import (
    tools_to_add,
    AgentRuns,
    Approvals,
    Approver,
    invoke_tool,
    model_turn,
    open_log,
    recorder,
    result_of,
)
from ..agent_tool import begin_run
from ..compaction import Compactor, Condenser, compacted_call, compaction_events
from ..compaction import check_options as check_compaction
from ..errors import BudgetExceeded, CodeActError, ConfigError, ModelError, RunCancelled, ToolArgumentError
from ..events import (
    ErrorEvent,
    Event,
    FinalAnswer,
    Observation,
    RunFinished,
    RunResult,
    RunStarted,
    Step,
    ToolCall,
    ToolProgress,
)
from ..config import images_enabled
from ..images import StepImages, attach_images, is_image_mime, step_images, wants_images
from ..messages import Message, ModelResponse
from ..observation import truncate_middle
from ..output import DEFAULT_RETRIES, AnswerCheck, OutputSpec, gave_up
from ..prompting import FileDescription
from ..prompts import Prompt, load_prompt
from ..tools import Tool, ensure_tools
from ..tools._context import RunHooks, run_hooks
from .. import telemetry
from ..values import preview, show
from ._formats import FINAL_ANSWER, ActionCall, ActionFormat, CallOutcome, final_answer_value, make_format

if TYPE_CHECKING:  # pragma: no cover
    from ..agent import RunLimits
    from ..models import Model
    from ..runlog import RunLog

#: The backend name ReAct runs record: tools run in this process, there is no sandbox.
HOST = "host"

#: An answer's type (``output_type=``).
T = TypeVar("T")


@dataclass
class _TurnState:
    run_id: str
    step: int = 0
    answer: Any = None
    answered: bool = False
    result: RunResult | None = None
    artifact_files: int = 0
    artifact_bytes: int = 0
    #: (name, bytes) of the images tools saved during the current step, for the model (codeact.images).
    images: list[tuple[str, bytes]] = field(default_factory=list)
    trace: Any = None  # the run's OpenTelemetry spans (codeact.telemetry); None when tracing is off
    link: Any = None  # the run's place in a tree of agents (codeact.agent_tool.RunLink)
    check: AnswerCheck = field(default_factory=lambda: AnswerCheck(None))  # the answer against output_type


class ReActAgent(AgentRuns):
    """A ReAct agent over the same tools, model, events and run log as :class:`~codeact.CodeActAgent`.

    The model acts by asking for one tool call at a time (several in one turn
    with native function calling); every result is the next observation. Tools
    run on the host, in this process: no sandbox is involved, because the
    model never writes code.

    Args:
        model: anything implementing :class:`codeact.models.Model` (function
            calling needs an endpoint that supports ``tools=``).
        tools: :class:`Tool` objects or plain functions, the same ones a
            CodeActAgent takes.
        format: ``"function-calling"`` (agent kind ``react-fc``; ``"fc"`` too),
            ``"json"`` (``react-json``) or ``"text"`` (``react-text``); see
            :mod:`codeact.react`.
        max_steps: model turns per run before it ends with status ``max_steps``.
        approve: called before each call of a ``requires_approval`` tool with an
            :class:`~codeact.agent.ApprovalRequest`; return True to allow.
            Without it, such calls are denied.
        deps: user context handed to tools through :class:`RunContext.deps`.
        log: a :class:`codeact.runlog.RunLog`, a database path, ``True`` for the
            default database, or ``None``/``False`` to keep no log.
        stream_model: ask the model for streamed output (``TextDelta`` events).
        observation_limit: characters of one tool result the model sees (head and tail kept).
        history_budget: tokens the prompt may take before compaction folds old steps (None: no budget of
            its own); with a known context window, the smaller of this and 75% of the window
            (see :mod:`codeact.compaction`).
        condenser: ``"fold"`` or ``"summary"`` (as for :class:`~codeact.agent.CodeActAgent`).
        system_prompt: a template overriding the format's prompt (``$tools``, ``$files``).
        output_dir: where files tools save with ``RunContext.add_artifact`` go
            (``<output_dir>/<run id>/``), within ``limits``' per-run caps.
        limits: a :class:`~codeact.agent.RunLimits` (its per-run artifact caps apply, and its image
            limits: images tools save go to the model after the step's tool results, see :mod:`codeact.images`).
        output_retries: with ``output_type=`` (:mod:`codeact.output`), how many times an
            answer that does not fit goes back to the model before the run ends with
            status ``invalid_output`` (a run's own ``output_retries=`` wins).

    Example::

        from codeact import OpenAIModel, ReActAgent, tool

        @tool
        def get_daily_weather(city: str) -> str:
            "Weather for today, tomorrow and the day after in a city."
            return "sunny, 22°C; rain; sunny"

        agent = ReActAgent(OpenAIModel("gpt-4o-mini"), [get_daily_weather], format="json")
        result = agent.run("Is tomorrow good for a run in Beijing?")
        print(result.status, result.answer, len(result.steps))
    """

    def __init__(
        self,
        model: Model,
        tools: Sequence[Tool[Any, Any] | Callable[..., Any]] = (),
        *,
        format: str = "function-calling",
        max_steps: int = 10,
        approve: Approver | None = None,
        deps: Any = None,
        log: RunLog | str | os.PathLike[str] | bool | None = True,
        stream_model: bool = False,
        observation_limit: int = 8000,
        history_budget: int | None = 60_000,
        condenser: Condenser = "fold",
        system_prompt: str | None = None,
        output_dir: str | os.PathLike[str] | None = None,
        limits: RunLimits | None = None,
        output_retries: int = DEFAULT_RETRIES,
    ) -> None:
        from ..agent import RunLimits

        try:
            self.format: ActionFormat = make_format(format)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if max_steps < 1:
            raise ConfigError(f"max_steps must be at least 1, got {max_steps}")
        self.model = model
        self.tools = ensure_tools(tools)
        if any(t.name == FINAL_ANSWER for t in self.tools):
            raise CodeActError(f"a tool may not be named {FINAL_ANSWER!r}; the agent defines it")
        self.max_steps = max_steps
        self.output_retries = output_retries
        self.approve = approve
        self.deps = deps
        self.stream_model = stream_model
        self.observation_limit = observation_limit
        check_compaction(condenser, history_budget=history_budget)
        self.history_budget = history_budget
        self.condenser: Condenser = condenser
        self.system_prompt = system_prompt
        #: The system prompt's recorded name and version (codeact.prompts).
        self.prompt = load_prompt(self.kind) if system_prompt is None else Prompt.custom(system_prompt)
        self.output_root = Path(output_dir) if output_dir else None
        self.limits = limits or RunLimits()
        self._log_spec = log
        self._log: Any = None

    @property
    def kind(self) -> str:
        """The agent kind runs record: ``react-fc``, ``react-json`` or ``react-text``."""
        return self.format.kind

    def __repr__(self) -> str:
        return f"ReActAgent(format={self.format.name!r}, tools={[t.name for t in self.tools]})"

    # --- public API -------------------------------------------------------------------------

    def session(self) -> ReActSession:
        """A multi-turn conversation: the history survives between turns."""
        return ReActSession(self)

    def _runlog(self) -> Any:
        if self._log is None:
            self._log = open_log(self._log_spec)
        return self._log


class ReActSession:
    """One conversation with a :class:`ReActAgent`; the history persists across turns.

    Example::

        with agent.session() as chat:
            chat.send("Which city is warmer tomorrow, Oslo or Rome?")
            chat.send("And the day after?")
    """

    def __init__(self, agent: ReActAgent) -> None:
        self.agent = agent
        self.messages: list[Message] = []
        #: Index in ``messages`` of each turn's task (compaction folds whole turns); no kernel to list.
        self._turn_starts: list[int] = []
        self._compactor = Compactor(agent.model, history_budget=agent.history_budget, condenser=agent.condenser,
                                    files=lambda: self._files)
        self._files: list[FileDescription] = []
        self._approvals = Approvals(agent.approve)
        self._tools = {t.name: t for t in agent.tools}
        self._tool_list = list(agent.tools)  # the agent's, plus those add_tools offered later
        self._closed = False

    def __enter__(self) -> ReActSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True

    def add_tools(self, tools: Sequence[Tool[Any, Any] | Callable[..., Any]]) -> str:
        """Offer more tools from the next turn on; returns a note for the model ('' for function calling,
        whose requests carry every tool's schema; the new tools as the prompt lists them otherwise).

        Raises:
            CodeActError: the session is closed, or a tool's name is taken.
        """
        if self._closed:
            raise CodeActError("this chat session is closed; start a new one with agent.session()")
        new = tools_to_add(tools, self._tools, FINAL_ANSWER)
        if not new:
            return ""
        for t in new:
            self._tools[t.name] = t
            self._tool_list.append(t)
        if self.agent.format.tools_param(new) is not None:
            return ""
        return "New tools you can use from now on:\n" + self.agent.format.render_tools(new).rsplit("\n", 1)[0]

    @overload
    def send(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (), cancel: threading.Event | None = None,
             output_type: None = None, output_retries: int | None = None) -> RunResult[Any]: ...

    @overload
    def send(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (), cancel: threading.Event | None = None,
             output_type: type[T], output_retries: int | None = None) -> RunResult[T]: ...

    @overload
    def send(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (), cancel: threading.Event | None = None,
             output_type: Any, output_retries: int | None = None) -> RunResult[Any]: ...

    def send(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (), cancel: threading.Event | None = None,
             output_type: Any = None, output_retries: int | None = None) -> RunResult[Any]:
        """One turn to the end; returns its result. ``output_type``: as :meth:`ReActAgent.run`'s."""
        return result_of(self.stream(task, files=files, cancel=cancel, output_type=output_type,
                                     output_retries=output_retries))

    def stream(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (),
               cancel: threading.Event | None = None, output_type: Any = None,
               output_retries: int | None = None) -> Iterator[Event]:
        """One turn: run ``task`` in this conversation, yielding events.

        ``output_type``: the type the answer must have (:mod:`codeact.output`); with function calling it is
        the final_answer tool's schema. ``output_retries``: how many misfits go back to the model.
        """
        if self._closed:
            raise CodeActError("this chat session is closed; start a new one with agent.session()")
        agent = self.agent
        output = OutputSpec.of(output_type)  # raises OutputTypeError before anything starts
        run_id = uuid.uuid4().hex[:12]
        state = _TurnState(run_id, check=AnswerCheck(
            output, agent.output_retries if output_retries is None else output_retries,
            final="final_answer(answer=...)"))
        state.link = begin_run(agent, run_id, agent.kind)
        result = RunResult(run_id=run_id, task=task)
        state.result = result
        started = time.perf_counter()
        emit = recorder(agent._runlog())
        file_paths = [Path(f) for f in files]
        missing = [str(p) for p in file_paths if not p.is_file()]
        state.trace = telemetry.start_run(agent=agent.kind, run_id=run_id, model=agent.model, backend=HOST, task=task)
        yield emit(RunStarted(run_id=run_id, task=task, model=getattr(agent.model, "name", "?"), backend=HOST,
                              tools=[t.name for t in self._tool_list], files=[p.name for p in file_paths],
                              agent=agent.kind, prompt=agent.prompt.name, prompt_version=agent.prompt.version,
                              **state.link.started_fields()))
        try:
            if missing:
                raise CodeActError(f"file not found: {', '.join(missing)}")
            if cancel is not None and cancel.is_set():
                raise RunCancelled("cancelled before the first step")
            note = "" if output is None else "\n\n" + output.react_prompt(
                function_calling=agent.format.tools_param([]) is not None)
            self._start_turn(task + note, file_paths)
            for index in range(1, agent.max_steps + 1):
                if cancel is not None and cancel.is_set():
                    raise RunCancelled(f"cancelled before step {index}")
                state.step = index
                step = Step(index=index)
                result.steps.append(step)
                step_started = time.perf_counter()
                yield from self._step(step, state, result, emit, cancel)
                step.duration = time.perf_counter() - step_started
                if state.answered:
                    result.answer, result.status = state.answer, "success"
                    break
                if state.check.exhausted:
                    break
            else:
                result.status = "max_steps"
                result.answer = _best_answer(result) if output is None else state.check.last
            if state.check.exhausted:
                yield emit(gave_up(result, state.check, state.step))
        except RunCancelled as exc:
            result.status, result.error = "cancelled", str(exc)
        except (GeneratorExit, KeyboardInterrupt) as exc:
            # The caller stopped consuming, or Ctrl-C: log the run as cancelled, then let it propagate.
            result.status = "cancelled"
            result.error = "the caller stopped the run" if isinstance(exc, GeneratorExit) else "interrupted (Ctrl-C)"
            result.duration = time.perf_counter() - started
            state.link.finish()
            emit(RunFinished(run_id=run_id, result=result))
            if state.trace is not None:
                state.trace.end(result)
            raise
        except BudgetExceeded as exc:
            result.status, result.error = "budget_exceeded", str(exc)
            yield emit(ErrorEvent(run_id=run_id, step=state.step, message=str(exc), kind="budget", fatal=True))
        except (ModelError, CodeActError) as exc:
            result.status, result.error = "error", str(exc)
            yield emit(ErrorEvent(run_id=run_id, step=state.step, message=str(exc),
                                  kind="model" if isinstance(exc, ModelError) else "agent", fatal=True))
        except Exception as exc:  # a bug: report it, keep the log consistent
            result.status, result.error = "error", f"{type(exc).__name__}: {exc}"
            yield emit(ErrorEvent(run_id=run_id, step=state.step, message=result.error, kind="internal", fatal=True))
        result.duration = time.perf_counter() - started
        if result.status in ("success", "max_steps"):
            yield emit(FinalAnswer(run_id=run_id, step=state.step, answer=result.answer, status=result.status))
        state.link.finish()
        if state.trace is not None:
            state.trace.end(result)
        yield emit(RunFinished(run_id=run_id, result=result))

    # --- pieces of a turn ----------------------------------------------------------------

    def _start_turn(self, task: str, file_paths: list[Path]) -> None:
        new_files = [FileDescription.of(p) for p in file_paths]
        self._files.extend(new_files)
        if not self.messages:
            self.messages.append(Message("system", self._system_prompt()))
            self.messages.append(Message("user", task))
        else:
            extra = ""
            if new_files:
                extra = "\n\nNew files given with this task:\n" + "\n".join(f.render() for f in new_files)
            self.messages.append(Message("user", task + extra))
        self._turn_starts.append(len(self.messages) - 1)

    def _system_prompt(self) -> str:
        import string

        agent = self.agent
        files = ""
        if self._files:
            files = ("\nFiles given with this task (your tools can read them):\n"
                     + "\n".join(f.render() for f in self._files) + "\n")
        return string.Template(agent.prompt.text).safe_substitute(
            tools=agent.format.render_tools(agent.tools), files=files, workdir=".")

    def _step(self, step: Step, state: _TurnState, result: RunResult, emit: Callable[[Event], Event],
              cancel: threading.Event | None) -> Iterator[Event]:
        agent = self.agent
        fmt = agent.format
        state.link.before_model_call(agent.model)  # the budget (the whole tree's) has room for it

        def ask(messages: list[Message]) -> Generator[Event, None, ModelResponse]:
            return model_turn(agent.model, messages, step, run_id=state.run_id, stream=agent.stream_model,
                              cancel=cancel, trace=state.trace, tools=fmt.tools_param(self._tool_list, _schema(state)))

        response: ModelResponse = yield from _relay(compaction_events(compacted_call(
            self._compactor, self.messages, self._turn_starts, ask, run_id=state.run_id, step=step.index),
            step, state.trace), emit)
        state.link.spent(step, result, agent.model)  # result.usage; BudgetExceeded when spent
        decision = fmt.parse(response)
        if decision.problem is not None:
            step.error = decision.problem
            yield emit(ErrorEvent(run_id=state.run_id, step=step.index, message=decision.problem, kind="action"))
            self.messages.extend(fmt.feedback_messages(response, decision.problem))
            return
        if decision.final:
            said = state.check.check_text(decision.answer)
            if not said.ok:  # it does not fit output_type: the model hears why
                step.error = said.feedback
                yield emit(ErrorEvent(run_id=state.run_id, step=step.index, message=said.feedback, kind="output"))
                self.messages.extend(fmt.feedback_messages(response, said.feedback))
                return
            state.answer, state.answered = said.value, True
            self.messages.append(Message("assistant", response.text))
            return
        if cancel is not None and cancel.is_set():  # stopped while the model wrote it: do not run the calls
            raise RunCancelled(f"cancelled before the calls of step {step.index} ran")
        outcomes: list[CallOutcome] = []
        calls_started = time.perf_counter()
        for call in decision.calls:
            if state.answered:
                outcomes.append(CallOutcome(call, "Not run: the run had already ended."))
                continue
            outcome = yield from self._call(call, step, state, emit)
            outcomes.append(outcome)
        errors = [o.text for o in outcomes if o.failed]
        text = outcomes[0].text if len(outcomes) == 1 else "\n".join(f"[{o.call.name}] {o.text}" for o in outcomes)
        if decision.note:
            text += "\n" + decision.note
        shown = self._step_images(state)
        if shown.note:
            text += "\n" + shown.note
        step.observation = text
        step.error = errors[-1] if errors else None
        yield emit(Observation(run_id=state.run_id, step=step.index, text=text, error=step.error,
                               duration=time.perf_counter() - calls_started))
        self.messages.extend(attach_images(fmt.turn_messages(response, outcomes, decision.note), shown))

    def _call(self, call: ActionCall, step: Step, state: _TurnState,
              emit: Callable[[Event], Event]) -> Generator[Event, None, CallOutcome]:
        """Run one requested call; yield its events; return what the model is told."""
        agent = self.agent

        def invalid(message: str) -> Generator[Event, None, CallOutcome]:
            yield emit(ErrorEvent(run_id=state.run_id, step=step.index, message=message, kind="action"))
            return CallOutcome(call, f"Error: {message}", failed=True)

        if call.name == FINAL_ANSWER:
            if call.problem is not None:
                return (yield from invalid(call.problem))
            if call.python is not None:
                args, kwargs = call.python
                ok, answer = (True, args[0]) if len(args) == 1 and not kwargs else final_answer_value(kwargs)
            else:
                ok, answer = final_answer_value(call.arguments)
            if not ok:
                return (yield from invalid(f"{FINAL_ANSWER} takes one argument, answer: "
                                           f"{FINAL_ANSWER}(answer=...)"))
            verdict = state.check.check(answer)
            if not verdict.ok:  # it does not fit output_type: the call's result says why
                return CallOutcome(call, verdict.feedback, failed=True)
            state.answer, state.answered = verdict.value, True
            return CallOutcome(call, "Done.")
        tool = self._tools.get(call.name)
        if tool is None:
            return (yield from invalid(self._unknown_tool(call.name)))
        if call.problem is not None:
            return (yield from invalid(call.problem))
        reported: list[ToolCall] = []
        try:
            if call.python is not None:
                try:
                    arguments = tool.bind(*call.python)
                except ToolArgumentError as exc:
                    args, kwargs = call.python
                    given = {"args": list(args), **kwargs}
                    reported.append(ToolCall(run_id=state.run_id, step=step.index, name=tool.name,
                                             arguments={k: preview(v) for k, v in given.items()},
                                             error=f"{type(exc).__name__}: {exc}"))
                    raise
            else:
                arguments = dict(call.arguments or {})
            with run_hooks(self._run_hooks(state, tool, reported)):
                value = invoke_tool(tool, arguments, run_id=state.run_id, step=step.index, deps=agent.deps,
                                    approvals=self._approvals, report=reported.append,
                                    trace=state.trace, call_id=call.call_id, link=state.link)
        except ToolArgumentError as exc:
            yield from _flush(reported, step, emit)
            return (yield from invalid(str(exc)))
        except Exception as exc:  # the tool failed (or was not approved): the model reads why
            yield from _flush(reported, step, emit)
            return CallOutcome(call, f"Error: {type(exc).__name__}: {exc}", failed=True)
        yield from _flush(reported, step, emit)
        text = observation_text(value, agent.observation_limit)
        if tool.return_direct:
            verdict = state.check.check(value)
            if not verdict.ok:
                return CallOutcome(call, f"{text}\n\n{verdict.feedback}", failed=True)
            state.answer, state.answered = verdict.value, True
        return CallOutcome(call, text)

    def _run_hooks(self, state: _TurnState, tool: Tool[Any, Any], reported: list[Any]) -> RunHooks:
        """``RunContext.add_artifact`` and ``report_progress`` for one call, as CodeAct offers them."""
        agent = self.agent

        def add_artifact(name: str, data: bytes, mime: str) -> str:
            from sandbox.hostfiles import check_relative_path, write_confined

            from ..agent import _default_output_root

            check_relative_path(name)
            limits = agent.limits
            if (state.artifact_files + 1 > limits.max_artifact_files_per_run
                    or state.artifact_bytes + len(data) > limits.max_artifact_bytes_per_run):
                raise CodeActError(f"over the run's artifact limits ({limits.max_artifact_files_per_run} files, "
                                   f"{limits.max_artifact_bytes_per_run:,} bytes)")
            directory = (agent.output_root or _default_output_root()) / state.run_id
            directory.mkdir(parents=True, exist_ok=True)
            path = write_confined(directory, name, bytes(data))
            state.artifact_files += 1
            state.artifact_bytes += len(data)
            if is_image_mime(mime):
                state.images.append((name, bytes(data)))
            if state.result is not None:
                state.result.artifacts.append(path)
            return name

        def report_progress(progress: float, total: float | None = None, message: str | None = None) -> None:
            reported.append(ToolProgress(run_id=state.run_id, step=state.step, name=tool.name,
                                         progress=float(progress), total=None if total is None else float(total),
                                         message=None if message is None else str(message)[:500]))

        return RunHooks(add_artifact=add_artifact, report_progress=report_progress)

    def _unknown_tool(self, name: str) -> str:
        names = [*self._tools, FINAL_ANSWER]
        close = difflib.get_close_matches(name, names, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return f"there is no tool named {name!r}.{hint} The tools are: {', '.join(names)}."

    def _step_images(self, state: _TurnState) -> StepImages:
        """The images the step's tools saved, as the model gets them (none when the model takes none)."""
        candidates, state.images = state.images, []
        if not candidates or not wants_images(self.agent.model, images_enabled()):
            return StepImages()
        limits = self.agent.limits
        return step_images(candidates, max_side=limits.max_image_side, max_images=limits.max_images_per_step)

    def _context_messages(self) -> list[Message]:
        """The history as the model sees it now (what compaction folded so far applied)."""
        return self._compactor.view(self.messages, self._turn_starts)


def _schema(state: _TurnState) -> dict[str, Any] | None:
    """The JSON Schema of the turn's answer (its ``output_type``), or None."""
    spec = state.check.spec
    return spec.json_schema() if spec is not None else None


def observation_text(value: Any, limit: int) -> str:
    """What the model sees of a tool's result: a string as it is, anything else as its repr, capped."""
    text = value if isinstance(value, str) else show(preview(value))
    return truncate_middle(text, limit)


def _best_answer(result: RunResult) -> Any:
    """At max_steps: the last result a tool returned, else the model's last words."""
    for step in reversed(result.steps):
        if step.observation and not step.error and step.observation.strip():
            return step.observation.strip()
    for step in reversed(result.steps):
        if step.model_output.strip():
            return truncate_middle(step.model_output.strip(), 2000)
    return None


def _flush(reported: list[Any], step: Step, emit: Callable[[Event], Event]) -> Iterator[Event]:
    """Emit a call's events (progress, then the call); the calls go on the step too."""
    for event in reported:
        if isinstance(event, ToolCall):
            step.tool_calls.append(event)
        yield emit(event)


def _relay(events: Generator[Event, None, Any], emit: Callable[[Event], Event]) -> Generator[Event, None, Any]:
    """Yield ``emit(event)`` for each event of ``events``; return its return value."""
    while True:
        try:
            event = next(events)
        except StopIteration as stop:
            return stop.value
        yield emit(event)
