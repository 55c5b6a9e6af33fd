"""``run``, ``stream``, ``arun``, ``astream`` and ``as_tool``: what every agent offers, in one place."""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator, Protocol, Sequence, TypeVar, overload

from ..events import Event, RunFinished, RunResult
from ..output import OutputSpec
from ..tools import Tool
from .limits import default_output_root
from .recording import open_log, result_of

#: An answer's type (``output_type=``).
T = TypeVar("T")


class Streams(Protocol):
    """Anything that runs one turn as a stream of events: a chat session, an agent."""

    def stream(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (),
               cancel: threading.Event | None = None, output_type: Any = None,
               output_retries: int | None = None) -> Iterator[Event]: ...


@overload
def to_the_end(self: Streams, task: str, *, files: Sequence[str | os.PathLike[str]] = (),
               cancel: threading.Event | None = None, output_type: None = None,
               output_retries: int | None = None) -> RunResult[Any]: ...


@overload
def to_the_end(self: Streams, task: str, *, files: Sequence[str | os.PathLike[str]] = (),
               cancel: threading.Event | None = None, output_type: type[T],
               output_retries: int | None = None) -> RunResult[T]: ...


@overload
def to_the_end(self: Streams, task: str, *, files: Sequence[str | os.PathLike[str]] = (),
               cancel: threading.Event | None = None, output_type: Any,
               output_retries: int | None = None) -> RunResult[Any]: ...


def to_the_end(self: Streams, task: str, *, files: Sequence[str | os.PathLike[str]] = (),
               cancel: threading.Event | None = None, output_type: Any = None,
               output_retries: int | None = None) -> RunResult[Any]:
    """Run ``task`` to the end and return the result (never raises for model, code or tool errors).

    ``output_type``: the type the answer must have (:mod:`codeact.output`); ``output_retries``: how many
    answers that do not fit go back to the model (default: the agent's). A chat session's ``send`` and an
    agent's ``run``, written once.
    """
    return result_of(self.stream(task, files=files, cancel=cancel, output_type=output_type,
                                 output_retries=output_retries))


class Turns:
    """``send``: one turn of a chat session to the end (:func:`to_the_end` of the session's ``stream``)."""

    send = to_the_end


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

    #: Set by each agent's ``__init__``: its ``log=`` option, the log once opened, its ``output_dir=``.
    _log_spec: Any
    _log: Any
    output_root: Path | None

    def session(self) -> Any:  # pragma: no cover - each agent has its own
        raise NotImplementedError

    def run_log(self) -> Any:
        """The run log this agent records to (a :class:`~codeact.runlog.RunLog`, opened when first needed), or
        None when ``log=`` is off."""
        if self._log is None:
            self._log = open_log(self._log_spec)
        return self._log

    def output_root_path(self) -> Path:
        """Where runs keep their artifacts: ``output_dir`` or the default (``<root>/<run id>/``)."""
        return self.output_root or default_output_root()

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
            output_type: the type of answer to ask the child for (passed to its ``run``): the
                calling code receives the checked value as the codec carries it into a sandbox
                (``int``, ``list[str]``, ``tuple``, ``datetime`` ... as themselves; a dataclass or
                pydantic answer as the dict of its checked fields); a child whose answer never fits
                raises AgentToolError with status ``invalid_output``.
            stateful: keep one conversation with this agent across the calls of one
                calling run (variables and history survive; closed when that run ends).
            max_parallel: calls that may run at once (threads in the calling code);
                one more is refused with a clear error, never queued.
            timeout: seconds one call may take (a whole child run: longer than a plain tool's 60 s
                default; None: the calling sandbox's call timeout). The calling code action's run-time
                limit still holds. A call that times out raises TimeoutError in the calling code and
                cancels the child's run at once (its running code interrupted, its sandbox closed; a
                ``stateful`` child's session stays open for the next call).

        Raises:
            ConfigError: a bad name or description, a cycle of agents calling each other,
                or a tree of agents deeper than ``RunLimits.max_depth``.

        Example::

            researcher = CodeActAgent(model, tools=[search], sandbox="local")
            analyst = CodeActAgent(model, tools=[researcher.as_tool(
                name="researcher", description="Answers one factual question with a short summary.")])
        """
        from .tree import agent_tool

        return agent_tool(self, name=name, description=description, output_type=output_type, stateful=stateful,
                          max_parallel=max_parallel, timeout=timeout)

    #: Run ``task`` to the end and return the result (never raises for model, code or tool errors).
    run = to_the_end

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
