"""The ReAct loop: the model asks for tool calls one turn at a time; each result is the next observation.

ReAct supplies its step (:class:`ReActTurn`) to the turn driver every agent kind
shares (:func:`codeact.run.drive`); the tools run on the host, in this process.
"""

from __future__ import annotations

import difflib
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterator, Sequence, TypeVar

from .. import telemetry, transcript
from ..compaction import Compactor, Condenser, compacted_call, compaction_events
from ..compaction import check_options as check_compaction
from ..settings import images_enabled
from ..errors import CodeActError, ConfigError, ToolArgumentError
from ..events import ErrorEvent, Event, Observation, RunStarted, Step, ToolCall, TurnMessage
from ..images import StepImages, attach_images, step_images, wants_images, withheld_images
from ..messages import Message, ModelResponse, Usage
from ..observation import truncate_middle
from ..output import DEFAULT_RETRIES, AnswerCheck, OutputSpec
from ..privacy import REACT_PROMPT_NOTE, ChatPrivacy
from ..prompting import FileDescription, fill_template
from ..prompts import Prompt, load_prompt
from ..run import (
    AgentRuns,
    Turns,
    Approvals,
    Approver,
    RunLimits,
    Turn,
    begin_run,
    check_max_steps,
    drive,
    invoke_tool,
    model_turn,
    recorder,
    tools_to_add,
)
from ..tools import Tool, ensure_tools, run_hooks
from ..values import preview, show
from ._formats import FINAL_ANSWER, ActionCall, ActionFormat, CallOutcome, final_answer_value, make_format

if TYPE_CHECKING:  # pragma: no cover
    from ..models import Model
    from ..privacy import PrivacyFilter
    from ..runlog import RunLog

#: The backend name ReAct runs record: tools run in this process, there is no sandbox.
HOST = "host"

#: An answer's type (``output_type=``).
T = TypeVar("T")


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
        limits: a :class:`~codeact.run.RunLimits` (its artifact caps apply, per step and per run, and its image
            limits: images tools save go to the model after the step's tool results, see :mod:`codeact.images`).
        output_retries: with ``output_type=`` (:mod:`codeact.output`), how many times an
            answer that does not fit goes back to the model before the run ends with
            status ``invalid_output`` (a run's own ``output_retries=`` wins).
        privacy: a :class:`codeact.privacy.PrivacyFilter`, as for :class:`~codeact.CodeActAgent`: the values it
            names reach the model (and the run log) as placeholders; the model writes placeholders in its tool
            calls, and the tools get the values.

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
        privacy: PrivacyFilter | None = None,
    ) -> None:
        try:
            self.format: ActionFormat = make_format(format)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.model = model
        self.tools = ensure_tools(tools)
        if any(t.name == FINAL_ANSWER for t in self.tools):
            raise CodeActError(f"a tool may not be named {FINAL_ANSWER!r}; the agent defines it")
        self.max_steps = check_max_steps(max_steps)
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
        self.privacy = privacy
        self._log_spec = log
        self._log: RunLog | None = None

    @property
    def kind(self) -> str:
        """The agent kind runs record: ``react-fc``, ``react-json`` or ``react-text``."""
        return self.format.kind

    def __repr__(self) -> str:
        return f"ReActAgent(format={self.format.name!r}, tools={[t.name for t in self.tools]})"

    def session(self) -> ReActSession:
        """A multi-turn conversation: the history survives between turns."""
        return ReActSession(self)


class ReActSession(Turns):
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
        self.turn_starts: list[int] = []
        self._files: list[FileDescription] = []
        self.compactor = Compactor(agent.model, history_budget=agent.history_budget, condenser=agent.condenser,
                                   files=lambda: self._files)
        self.approvals = Approvals(agent.approve)
        self.privacy = ChatPrivacy(agent.privacy)
        self.tools = {t.name: t for t in agent.tools}  # the agent's, plus those add_tools offered later
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
        new = tools_to_add(tools, self.tools, FINAL_ANSWER)
        if not new:
            return ""
        for t in new:
            self.tools[t.name] = t
        if self.agent.format.tools_param(new) is not None:
            return ""
        return "New tools you can use from now on:\n" + self.agent.format.render_tools(new).rsplit("\n", 1)[0]

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
        check = AnswerCheck(output, agent.output_retries if output_retries is None else output_retries,
                            final="final_answer(answer=...)")
        emit = recorder(agent.run_log(), self.privacy.log_transform())
        turn = Turn(task, emit=emit, limits=agent.limits, max_steps=agent.max_steps,
                    cancel=cancel, check=check, files=[Path(f) for f in files],
                    output_root=agent.output_root_path())
        turn.link = begin_run(agent, turn.run_id, agent.kind)
        turn.trace = telemetry.start_run(agent=agent.kind, run_id=turn.run_id, model=agent.model, backend=HOST,
                                         task=task, redact=self.privacy.content_filter())
        started = RunStarted(run_id=turn.run_id, task=task, model=getattr(agent.model, "name", "?"), backend=HOST,
                             tools=list(self.tools), files=[p.name for p in turn.files], agent=agent.kind,
                             prompt=agent.prompt.name, prompt_version=agent.prompt.version,
                             **turn.link.started_fields())
        return drive(turn, ReActTurn(self, output), started)

    # --- what a turn needs of the session ------------------------------------------------------

    def start_turn(self, task: str, file_paths: list[Path]) -> str:
        """Add the turn's user message (the system prompt first, on the first turn); returns its text."""
        new_files = [FileDescription.of(p) for p in file_paths]
        self._files.extend(new_files)
        first = not self.messages
        if first:
            self.messages.append(Message("system", self.system_prompt()))
        text = transcript.task_text(task, first=first, files=[f.render() for f in new_files],
                                    files_header=transcript.HOST_FILES_HEADER)
        self.messages.append(transcript.task_message(text))
        self.turn_starts.append(len(self.messages) - 1)
        return text

    def system_prompt(self) -> str:
        agent = self.agent
        files = ""
        if self._files:
            files = ("\nFiles given with this task (your tools can read them):\n"
                     + "\n".join(f.render() for f in self._files) + "\n")
        prompt = fill_template(agent.prompt.text, tools=agent.format.render_tools(list(self.tools.values())),
                               files=files, workdir=".")
        return prompt + "\n\n" + REACT_PROMPT_NOTE if self.privacy.on else prompt

    def context_messages(self) -> list[Message]:
        """The history as the model sees it now (what compaction folded so far applied)."""
        return self.compactor.view(self.messages, self.turn_starts)

    def unknown_tool(self, name: str) -> str:
        names = [*self.tools, FINAL_ANSWER]
        close = difflib.get_close_matches(name, names, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return f"there is no tool named {name!r}.{hint} The tools are: {', '.join(names)}."


class ReActTurn:
    """One turn of a ReAct chat: what ReAct supplies to :func:`codeact.run.drive`."""

    gives_answers = True

    def __init__(self, chat: ReActSession, output: OutputSpec | None) -> None:
        self.chat = chat
        self.output = output

    def begin(self, turn: Turn) -> Iterator[Event]:
        fmt = self.chat.agent.format
        note = "" if self.output is None else "\n\n" + self.output.react_prompt(
            function_calling=fmt.tools_param([]) is not None)
        first = not self.chat.messages
        text = self.chat.start_turn(turn.task + note, turn.files)
        # In the run log only (what the model read); not one of the turn's events.
        turn.emit(TurnMessage(run_id=turn.run_id, text=text, system=self.chat.messages[0].content if first else ""))
        return iter(())

    def best_answer(self, turn: Turn) -> Any:
        """At max_steps: the last result a tool returned, else the model's last words."""
        restore = self.chat.privacy.restore_answer
        for step in reversed(turn.result.steps):
            if step.observation and not step.error and step.observation.strip():
                return restore(step.observation.strip())
        for step in reversed(turn.result.steps):
            if step.model_output.strip():
                return restore(truncate_middle(step.model_output.strip(), 2000))
        return None

    def after(self, turn: Turn) -> Iterator[Event]:
        return iter(())

    def answered(self, turn: Turn) -> Iterator[Event]:
        return iter(())

    def step(self, turn: Turn, step: Step) -> Iterator[Event]:
        chat = self.chat
        agent = chat.agent
        fmt = agent.format
        check = turn.check
        assert check is not None
        turn.link.before_model_call(agent.model)  # the budget (the whole tree's) has room for it
        schema = check.spec.json_schema() if check.spec is not None else None

        def price(usage: Usage) -> Usage:  # the cost of each call, in its event and the run log
            return turn.link.price(usage, agent.model)

        def ask(messages: list[Message]) -> Generator[Event, None, ModelResponse]:
            return model_turn(agent.model, chat.privacy.redact_user_messages(messages), step, run_id=turn.run_id,
                              stream=agent.stream_model, cancel=turn.cancel, trace=turn.trace, price=price,
                              tools=fmt.tools_param(list(chat.tools.values()), schema))

        response: ModelResponse = yield from compaction_events(compacted_call(
            chat.compactor, chat.messages, chat.turn_starts, ask, run_id=turn.run_id, step=step.index),
            step, turn.trace, price)
        turn.link.spent(step, turn.result, agent.model)  # result.usage; BudgetExceeded when spent
        decision = fmt.parse(response)
        if decision.problem is not None:
            step.error = decision.problem
            yield ErrorEvent(run_id=turn.run_id, step=step.index, message=decision.problem, kind="action")
            chat.messages.extend(fmt.feedback_messages(response, decision.problem))
            return
        if decision.final:
            said = check.check_text(chat.privacy.restore_answer(decision.answer))
            if not said.ok:  # it does not fit output_type: the model hears why
                step.error = feedback = chat.privacy.redact(said.feedback)
                yield ErrorEvent(run_id=turn.run_id, step=step.index, message=feedback, kind="output")
                chat.messages.extend(fmt.feedback_messages(response, feedback))
                return
            chat.messages.append(transcript.reply_message(response.text))
            turn.end("success", said.value)
            return
        turn.stop_if_cancelled(f"before the calls of step {step.index} ran")  # stopped while the model wrote them
        outcomes: list[CallOutcome] = []
        calls_started = time.perf_counter()
        for call in decision.calls:
            if turn.ended:
                outcomes.append(CallOutcome(call, "Not run: the run had already ended."))
                continue
            outcome = yield from self._call(call, step, turn)
            outcomes.append(outcome)
        outcomes = [CallOutcome(o.call, chat.privacy.redact(o.text), failed=o.failed) for o in outcomes]
        errors = [o.text for o in outcomes if o.failed]
        text = outcomes[0].text if len(outcomes) == 1 else "\n".join(f"[{o.call.name}] {o.text}" for o in outcomes)
        if decision.note:
            text += "\n" + decision.note
        shown = self._step_images(turn)
        if shown.note:
            text += "\n" + shown.note
        step.observation = text
        step.error = errors[-1] if errors else None
        yield Observation(run_id=turn.run_id, step=step.index, text=text, error=step.error,
                          duration=time.perf_counter() - calls_started, sent_images=list(shown.names))
        chat.messages.extend(attach_images(fmt.turn_messages(response, outcomes, decision.note), shown))

    def _call(self, call: ActionCall, step: Step, turn: Turn) -> Generator[Event, None, CallOutcome]:
        """Run one requested call; yield its events; return what the model is told."""
        chat = self.chat
        agent = chat.agent
        check = turn.check
        assert check is not None

        def invalid(message: str) -> Generator[Event, None, CallOutcome]:
            yield ErrorEvent(run_id=turn.run_id, step=step.index, message=message, kind="action")
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
            verdict = check.check(chat.privacy.restore_answer(answer))
            if not verdict.ok:  # it does not fit output_type: the call's result says why
                return CallOutcome(call, verdict.feedback, failed=True)
            turn.end("success", verdict.value)
            return CallOutcome(call, "Done.")
        tool = chat.tools.get(call.name)
        if tool is None:
            return (yield from invalid(chat.unknown_tool(call.name)))
        if call.problem is not None:
            return (yield from invalid(call.problem))
        reported: list[Any] = []
        try:
            if call.python is not None:
                try:
                    arguments = tool.bind(*call.python)
                except ToolArgumentError as exc:
                    args, kwargs = call.python
                    given = {"args": list(args), **kwargs}
                    reported.append(ToolCall(run_id=turn.run_id, step=step.index, name=tool.name,
                                             arguments={k: preview(v) for k, v in given.items()},
                                             error=f"{type(exc).__name__}: {exc}"))
                    raise
            else:
                arguments = dict(call.arguments or {})
            arguments = chat.privacy.restore_arguments(arguments)  # placeholders the model wrote: the values
            hooks = turn.artifacts.tool_hooks(tool.name, turn.run_id, lambda: turn.step, reported.append)
            with run_hooks(hooks):
                value = invoke_tool(tool, arguments, run_id=turn.run_id, step=step.index, deps=agent.deps,
                                    approvals=chat.approvals, report=reported.append,
                                    trace=turn.trace, call_id=call.call_id, link=turn.link)
        except ToolArgumentError as exc:
            yield from _flush(reported, step)
            return (yield from invalid(str(exc)))
        except Exception as exc:  # the tool failed (or was not approved): the model reads why
            yield from _flush(reported, step)
            return CallOutcome(call, f"Error: {type(exc).__name__}: {exc}", failed=True)
        chat.privacy.learn(tool.name, value)  # before its event is logged: the values it hides get placeholders
        yield from _flush(reported, step)
        text = observation_text(value, agent.observation_limit)
        if tool.return_direct:
            verdict = check.check(value)
            if not verdict.ok:
                return CallOutcome(call, f"{text}\n\n{verdict.feedback}", failed=True)
            turn.end("success", verdict.value)
        return CallOutcome(call, text)

    def _step_images(self, turn: Turn) -> StepImages:
        """The images the step's tools saved, as the model gets them (none when the model takes none)."""
        _, candidates = turn.artifacts.take_step()
        agent = self.chat.agent
        if not candidates or not wants_images(agent.model, images_enabled()):
            return StepImages()
        why = self.chat.privacy.images_withheld()
        if why:
            return withheld_images(candidates, why)
        limits = agent.limits
        return step_images(candidates, max_side=limits.max_image_side, max_images=limits.max_images_per_step)


def observation_text(value: Any, limit: int) -> str:
    """What the model sees of a tool's result: a string as it is, anything else as its repr, capped."""
    text = value if isinstance(value, str) else show(preview(value))
    return truncate_middle(text, limit)


def _flush(reported: list[Any], step: Step) -> Iterator[Event]:
    """A call's events (progress, then the call); the calls go on the step too."""
    for event in reported:
        if isinstance(event, ToolCall):
            step.tool_calls.append(event)
        yield event
