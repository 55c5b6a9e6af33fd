"""What every agent shares: approvals, tool calls on the host, the run log, history, async streaming.

:class:`~codeact.agent.CodeActAgent` (tools called from code in a sandbox) and
:class:`~codeact.react.ReActAgent` (tools called one action at a time) run the
same :class:`~codeact.tools.Tool` objects the same way: ask for approval when
the tool requires it (one approval open at a time, the human's time off every
clock), pass the hidden :class:`~codeact.tools.RunContext`, report a
:class:`~codeact.events.ToolCall` event with bounded previews. This module is
that one way, plus the run-level pieces both loops need.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import queue
import threading
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Generator, Iterator, Sequence, TypeVar, overload

from sandbox.functions import current_call

from .agent_tool import RunLink, calling
from .errors import ApprovalDenied, CodeActError, ModelError, RunCancelled
from .events import Event, ModelOutput, RunFinished, RunResult, Step, TextDelta, ToolCall
from .messages import Message, ModelResponse
from .output import OutputSpec
from .tools import RunContext, Tool, ensure_tools
from .tools._execution import to_daemon_thread
from .values import preview

if TYPE_CHECKING:  # pragma: no cover
    from .runlog import RunLog
    from .telemetry._spans import RunTrace


#: An answer's type (``output_type=``).
T = TypeVar("T")


def tools_to_add(tools: Sequence[Any], taken: Any, reserved: str) -> list[Tool[Any, Any]]:
    """``tools`` as Tools for a session's ``add_tools``: CodeActError when a name is in ``taken``, is
    ``reserved`` (the final-answer name) or comes twice."""
    new = ensure_tools(tools)
    clashes = [t.name for t in new if t.name in taken or t.name == reserved]
    if clashes or len({t.name for t in new}) != len(new):
        raise CodeActError(f"cannot add tool(s) {', '.join(clashes) or 'with one name twice'}: the name is taken")
    return new


@dataclass(frozen=True)
class ApprovalRequest:
    """A tool call waiting for a human's yes or no."""

    tool: str
    arguments: dict[str, Any]
    run_id: str
    step: int
    #: Which agent asks: its path from the top run, e.g. ``"codeact > researcher"`` for a child run of an
    #: agent called as a tool (whose approvals go to the top run's approver); "" when not known.
    agent: str = ""


Approver = Callable[[ApprovalRequest], bool]


class Approvals:
    """Asks an :data:`Approver` about calls of tools that require approval, one request at a time.

    The time a human takes (waiting for the turn included) counts against
    neither the call's timeout nor a code action's time limit. A call the
    sandbox was already told had failed is never run after a late yes.
    Without an approver every such call is denied.
    """

    def __init__(self, approver: Approver | None) -> None:
        self.approver = approver
        self._one_at_a_time = threading.Lock()

    def check(self, tool: Tool[Any, Any], arguments: dict[str, Any], run_id: str, step: int,
              link: RunLink | None = None) -> None:
        """Return if the approver allows the call; raise :class:`ApprovalDenied` otherwise.

        ``link``: the run's place in a tree of agents; a child run asks the top run's approver (one
        question at a time for the whole tree) and the request names the agent asking.
        """
        call = current_call()  # set when a sandbox's code made this call; None for ReAct
        approver, lock, agent = (self.approver, self._one_at_a_time, "") if link is None or link.depth == 0 else \
            (link.approver, link.approval_lock, link.path)
        request = ApprovalRequest(tool.name, {k: preview(v) for k, v in arguments.items()}, run_id, step, agent)
        with contextlib.ExitStack() as paused:
            # The human's time is off the clocks of this call and of the calls above waiting for this run.
            for waiting in (*(link.waiting_calls if link is not None else ()), call):
                if waiting is not None:
                    paused.enter_context(waiting.paused())
            with lock:
                allowed = approver is not None and approver(request)
        if call is not None:
            call.checkpoint()
        if not allowed:
            raise ApprovalDenied(f"the user did not allow this call to {tool.name}; "
                                 "do not retry it, find another way or explain in the final answer")


def invoke_tool(tool: Tool[Any, Any], arguments: dict[str, Any], *, run_id: str, step: int, deps: Any,
                approvals: Approvals, report: Callable[[ToolCall], None], trace: RunTrace | None = None,
                trace_parent: Any = None, call_id: str | None = None, link: RunLink | None = None) -> Any:
    """Run one call of ``tool`` on the host: approve, call with a :class:`RunContext`, report it.

    ``arguments`` is the tool's arguments dict (:meth:`Tool.bind` of a Python
    call, or a function-calling model's JSON). The call is reported through
    ``report`` as a :class:`ToolCall` event, failed or not; exceptions (a
    denied approval, bad arguments, the tool's own error) propagate.
    ``trace`` (the run's :class:`~codeact.telemetry._spans.RunTrace`, None when
    tracing is off) gets an ``execute_tool`` span under ``trace_parent``.
    ``link``: the run's :class:`~codeact.agent_tool.RunLink`; a run the tool starts is its child.
    """
    with _reported_call(tool, arguments, run_id, step, report, trace, trace_parent, call_id) as outcome:
        if tool.requires_approval:
            approvals.check(tool, arguments, run_id, step, link)
        with calling(link, step, tool.name, outcome.children):
            outcome.value = tool.call(arguments, RunContext(run_id=run_id, step=step, deps=deps))
    return outcome.value


async def ainvoke_tool(tool: Tool[Any, Any], arguments: dict[str, Any], *, run_id: str, step: int, deps: Any,
                       approvals: Approvals, report: Callable[[ToolCall], None], trace: RunTrace | None = None,
                       trace_parent: Any = None, link: RunLink | None = None) -> Any:
    """:func:`invoke_tool` for a tool whose calls run on the event loop running now (``Tool.loop``).

    The same approval, :class:`RunContext`, span and report; the call is awaited
    (:meth:`Tool.acall`), and only the approval, which may wait for a human,
    runs on a thread of its own, so the loop never blocks.
    """
    with _reported_call(tool, arguments, run_id, step, report, trace, trace_parent) as outcome:
        if tool.requires_approval:
            await to_daemon_thread(functools.partial(approvals.check, tool, arguments, run_id, step, link),
                                   f"approve-{tool.name}")
        with calling(link, step, tool.name, outcome.children):
            outcome.value = await tool.acall(arguments, RunContext(run_id=run_id, step=step, deps=deps))
    return outcome.value


@dataclass
class _Outcome:
    value: Any = None
    children: list[tuple[str, str]] = field(default_factory=list)  # agent runs the call started


@contextlib.contextmanager
def _reported_call(tool: Tool[Any, Any], arguments: dict[str, Any], run_id: str, step: int,
                   report: Callable[[ToolCall], None], trace: RunTrace | None, trace_parent: Any,
                   call_id: str | None = None) -> Iterator[_Outcome]:
    """What every tool call shares, sync or awaited: its ``execute_tool`` span and its :class:`ToolCall` report
    (failed or not; the exception propagates). The body sets ``outcome.value``."""
    started = time.perf_counter()
    span = trace.tool(tool.name, arguments, parent=trace_parent, call_id=call_id, step=step) \
        if trace is not None else None
    outcome = _Outcome()
    try:
        with span if span is not None else contextlib.nullcontext():
            yield outcome
            if span is not None:
                span.result(outcome.value)
    except Exception as exc:
        _report_call(report, tool, arguments, run_id, step, started, outcome.children, error=exc)
        raise
    _report_call(report, tool, arguments, run_id, step, started, outcome.children, value=outcome.value)


def _report_call(report: Callable[[ToolCall], None], tool: Tool[Any, Any], arguments: dict[str, Any], run_id: str,
                 step: int, started: float, children: list[tuple[str, str]], *, value: Any = None,
                 error: BaseException | None = None) -> None:
    shown = {k: preview(v) for k, v in arguments.items()}
    child_run_id, child_status = children[-1] if children else (None, None)
    if error is not None:
        report(ToolCall(run_id=run_id, step=step, name=tool.name, arguments=shown,
                        error=f"{type(error).__name__}: {error}", duration=time.perf_counter() - started,
                        child_run_id=child_run_id, child_status=child_status))
    else:
        report(ToolCall(run_id=run_id, step=step, name=tool.name, arguments=shown, result=preview(value),
                        duration=time.perf_counter() - started, child_run_id=child_run_id,
                        child_status=child_status))


def model_turn(model: Any, messages: Sequence[Message], step: Step, *, run_id: str, stream: bool,
               cancel: threading.Event | None, tools: Sequence[dict[str, Any]] | None = None,
               trace: RunTrace | None = None) -> Generator[Event, None, ModelResponse]:
    """Ask the model once: yield TextDelta events (when streaming) and the ModelOutput; return the response.

    Fills ``step.model_output``, ``model_time`` and ``usage`` (one request at
    least). ``tools`` are function schemas for native function calling.
    ``trace`` (the run's RunTrace, None when tracing is off) gets a ``chat`` span.
    """
    started = time.perf_counter()
    response: ModelResponse | None = None
    options = {"tools": list(tools)} if tools else {}
    chat = trace.chat(model, messages, stream=stream) if trace is not None else None
    try:
        if stream:
            for piece in model.stream(messages, **options):
                if isinstance(piece, str):
                    if chat is not None:
                        chat.first_chunk()
                    if cancel is not None and cancel.is_set():
                        raise RunCancelled(f"cancelled during step {step.index}")
                    yield TextDelta(run_id=run_id, step=step.index, text=piece)
                else:
                    response = piece
        else:
            response = model.complete(messages, **options)
        if response is None:
            raise ModelError("the model's stream ended without a final response")
    except BaseException as exc:
        if chat is not None:
            chat.fail(exc)
        raise
    if chat is not None:
        chat.end(response)
    step.model_time = time.perf_counter() - started
    step.model_output = response.text or ""
    step.usage = response.usage if response.usage.requests else replace(response.usage, requests=1)
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in response.message.tool_calls]
    yield ModelOutput(run_id=run_id, step=step.index, text=step.model_output, usage=step.usage,
                      duration=step.model_time, input_messages=len(messages),
                      input_chars=sum(len(m.content) for m in messages), tool_calls=calls)
    return response


def open_log(spec: Any) -> RunLog | None:
    """The run log an agent's ``log=`` option names: a RunLog, a path, True (the default file) or None/False."""
    if spec is None or spec is False:
        return None
    if spec is not True and not isinstance(spec, (str, os.PathLike)):
        return spec  # a RunLog (or anything with record()) the caller owns
    from .runlog import RunLog

    return RunLog(spec if isinstance(spec, (str, os.PathLike)) else None)


def recorder(log: Any, transform: Callable[[Event], Event] | None = None) -> Callable[[Event], Event]:
    """``emit(event) -> event``: record the event in ``log`` (if any); the log never breaks a run.

    ``transform`` changes what is recorded (not what ``emit`` returns): the
    privacy filter records a copy with placeholders for hidden values. When
    the log cannot be written (a full disk, a broken file), the run goes on
    and one :class:`RuntimeWarning` per run says so, with the first error.
    """
    failed = False

    def emit(event: Event) -> Event:
        nonlocal failed
        if log is not None:
            try:
                log.record(transform(event) if transform is not None else event)
            except Exception as exc:  # the log must never break a run: say so once, go on
                if not failed:
                    failed = True
                    import warnings

                    warnings.warn(f"the run log {getattr(log, 'path', '')} could not record this run "
                                  f"({type(exc).__name__}: {exc}); the run goes on, its record may be "
                                  "incomplete", RuntimeWarning, stacklevel=2)
        return event

    return emit


def result_of(events: Iterator[Event]) -> RunResult[Any]:
    """Consume a run's events; return the result its final RunFinished carries."""
    result: RunResult[Any] | None = None
    for event in events:
        if isinstance(event, RunFinished):
            result = event.result
    assert result is not None, "a run always ends with RunFinished"
    return result


class AgentRuns:
    """``run``, ``stream``, ``arun`` and ``astream`` of an agent, each one turn of a fresh :meth:`session`.

    ``files``: CodeAct copies them into the sandbox's working directory; ReAct
    describes them to the model (name, size, first line) and leaves them on
    the host, where the tools read them.

    ``output_type``: the type the answer must have (:mod:`codeact.output`): a
    BaseModel, a dataclass, a TypedDict, ``list[int]``, ``Literal[...]``, an
    Enum..., a JSON Schema dict, or an :class:`~codeact.output.OutputSpec`.
    The model is shown the type; an answer that does not fit goes back to it
    with the problems, up to ``output_retries`` times (default: the agent's),
    then the run ends with status ``invalid_output``. A type that cannot
    describe an answer raises :class:`~codeact.errors.OutputTypeError` at once.
    """

    def session(self) -> Any:  # pragma: no cover - each agent has its own
        raise NotImplementedError

    def as_tool(self, *, name: str, description: str, output_type: Any = None, stateful: bool = False,
                max_parallel: int = 4, timeout: float | None = 600.0) -> Tool[Any, Any]:
        """This agent as a :class:`Tool` another agent calls: ``name(task: str)`` returns this agent's answer.

        Each call is one run of this agent (its own sandbox session: a new one,
        or one from the pool ``sandbox=`` names), linked to the calling run and
        step in the run log, in traces and in the UI; it draws from the caller's
        budget (:class:`~codeact.agent.RunLimits`) and asks the caller's approver.
        A run that does not succeed raises :class:`~codeact.errors.AgentToolError`
        (with its status) in the caller's code.

        Args:
            name: what the calling code calls it (a Python identifier).
            description: what the agent is for; the calling model reads it.
            output_type: the type of answer to ask the child for (passed to its ``run``).
            stateful: keep one conversation with this agent across the calls of one
                calling run (variables and history survive; closed when that run ends).
            max_parallel: calls that may run at once (threads in the calling code);
                one more is refused with a clear error, never queued.
            timeout: seconds one call may take (a whole child run: longer than a plain tool's 60 s
                default; None: the calling sandbox's call timeout). The calling code action's run-time
                limit still holds.

        Raises:
            ConfigError: a bad name or description, a cycle of agents calling each other,
                or a tree of agents deeper than ``RunLimits.max_depth``.

        Example::

            researcher = CodeActAgent(model, tools=[search], sandbox="local")
            analyst = CodeActAgent(model, tools=[researcher.as_tool(
                name="researcher", description="Answers one factual question with a short summary.")])
        """
        from .agent_tool import agent_tool

        return agent_tool(self, name=name, description=description, output_type=output_type, stateful=stateful,
                          max_parallel=max_parallel, timeout=timeout)

    @overload
    def run(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (), cancel: threading.Event | None = None,
            output_type: None = None, output_retries: int | None = None) -> RunResult[Any]: ...

    @overload
    def run(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (), cancel: threading.Event | None = None,
            output_type: type[T], output_retries: int | None = None) -> RunResult[T]: ...

    @overload
    def run(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (), cancel: threading.Event | None = None,
            output_type: Any, output_retries: int | None = None) -> RunResult[Any]: ...

    def run(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (), cancel: threading.Event | None = None,
            output_type: Any = None, output_retries: int | None = None) -> RunResult[Any]:
        """Run ``task`` to the end and return the result (never raises for model, code or tool errors)."""
        return result_of(self.stream(task, files=files, cancel=cancel, output_type=output_type,
                                     output_retries=output_retries))

    def stream(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (),
               cancel: threading.Event | None = None, output_type: Any = None,
               output_retries: int | None = None) -> Iterator[Event]:
        """Run ``task``, yielding every event as it happens; the last is :class:`RunFinished`.

        Closing the generator early (``break``) cancels the run; it is logged as ``cancelled``.
        """
        output = OutputSpec.of(output_type)  # a bad type fails here, before any sandbox starts
        return self._stream(task, files, cancel, output, output_retries)

    def _stream(self, task: str, files: Sequence[str | os.PathLike[str]], cancel: threading.Event | None,
                output: Any, output_retries: int | None) -> Iterator[Event]:
        with self.session() as chat:
            yield from chat.stream(task, files=files, cancel=cancel, output_type=output, output_retries=output_retries)

    @overload
    async def arun(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (), output_type: None = None,
                   output_retries: int | None = None) -> RunResult[Any]: ...

    @overload
    async def arun(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (), output_type: type[T],
                   output_retries: int | None = None) -> RunResult[T]: ...

    @overload
    async def arun(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (), output_type: Any,
                   output_retries: int | None = None) -> RunResult[Any]: ...

    async def arun(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (), output_type: Any = None,
                   output_retries: int | None = None) -> RunResult[Any]:
        """Async :meth:`run`; cancelling the awaiting task cancels the run."""
        result: RunResult[Any] | None = None
        async for event in self.astream(task, files=files, output_type=output_type, output_retries=output_retries):
            if isinstance(event, RunFinished):
                result = event.result
        assert result is not None
        return result

    async def astream(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (), output_type: Any = None,
                      output_retries: int | None = None) -> AsyncIterator[Event]:
        """Async :meth:`stream`. The loop runs on a worker thread; events arrive as they happen."""
        output = OutputSpec.of(output_type)  # a bad type fails here, before any sandbox starts
        async for event in stream_async(lambda cancel: self.stream(task, files=files, cancel=cancel,
                                                                   output_type=output,
                                                                   output_retries=output_retries)):
            yield event


async def stream_async(start: Callable[[threading.Event], Iterator[Event]]) -> AsyncIterator[Event]:
    """Run ``start(cancel)`` (a blocking event stream) on a worker thread; yield its events as they come.

    Cancelling the awaiting task (or closing this generator) sets ``cancel``
    and waits for the worker to end.
    """
    cancel = threading.Event()
    events: queue.Queue[Event | BaseException | None] = queue.Queue()

    def work() -> None:
        try:
            for event in start(cancel):
                events.put(event)
        except BaseException as exc:  # surfaced in the awaiting task
            events.put(exc)
        finally:
            events.put(None)

    worker = threading.Thread(target=work, daemon=True, name="codeact-run")
    worker.start()
    try:
        while True:
            item = await asyncio.to_thread(events.get)
            if item is None:
                break
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        cancel.set()
        await asyncio.to_thread(worker.join)
