"""The CodeAct loop: the model writes Python, the sandbox runs it, the output is the next observation.

The agent yields :mod:`codeact.events` and never prints; the CLI renders them.

Example::

    from codeact import CodeActAgent, OpenAIModel, tool

    @tool
    def get_daily_weather(city: str) -> str:
        "Weather for today, tomorrow and the day after in a city."
        return "sunny, 22°C; rain; sunny"

    agent = CodeActAgent(model=OpenAIModel("gpt-4o-mini"), tools=[get_daily_weather])
    result = agent.run("Is tomorrow good for a run in Beijing?")
    print(result.status, result.answer)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator, Sequence

from sandbox.errors import SandboxError
from sandbox.functions import HostFunction, current_call
from sandbox.hostfiles import UnsafePath, check_relative_path, write_confined
from sandbox.result import ExecutionResult

from .errors import ApprovalDenied, CodeActError, ModelError, RunCancelled
from .events import (
    CodeAction,
    CodeOutput,
    ErrorEvent,
    Event,
    FinalAnswer,
    ModelOutput,
    Observation,
    RunFinished,
    RunResult,
    RunStarted,
    Step,
    TextDelta,
    ToolCall,
)
from .messages import Message, ModelResponse
from .observation import NOTHING_PRINTED, ObservationParts, format_observation, truncate_middle
from .parsing import parse_reply
from .prompting import FileDescription, render_system_prompt
from .tools import RunContext, Tool, ensure_tools
from .values import preview

#: Name of the function that ends a run from inside the code.
FINAL_ANSWER = "final_answer"


@dataclass(frozen=True)
class ApprovalRequest:
    """A tool call waiting for a human's yes or no."""

    tool: str
    arguments: dict[str, Any]
    run_id: str
    step: int


Approver = Callable[[ApprovalRequest], bool]


@dataclass(frozen=True)
class RunLimits:
    """Budgets of one run that the code in the sandbox could otherwise run up.

    Files the code writes in the working directory are copied to the run's
    output directory after each step, within these caps (beyond them, the
    observation says what was not copied).
    """

    max_artifact_files_per_step: int = 20
    max_artifact_bytes_per_step: int = 50 * 1024 * 1024
    max_artifact_files_per_run: int = 200
    max_artifact_bytes_per_run: int = 200 * 1024 * 1024


def _default_output_root() -> Path:
    import platformdirs

    return Path(os.environ.get("CODEACT_OUTPUT_DIR") or Path(platformdirs.user_data_dir("codeact")) / "artifacts")


@dataclass
class _RunState:
    """Mutable state of one run, shared with the host-function callbacks."""

    run_id: str
    step: int = 0
    answer: Any = None
    answered: bool = False
    #: Where tool-call events go as calls complete (set for the duration of a code action).
    tool_events: "queue.Queue[Any] | None" = None

    def report(self, event: ToolCall) -> None:
        if self.tool_events is not None:
            self.tool_events.put(event)


class CodeActAgent:
    """A CodeAct agent over a model, tools and a sandbox.

    Args:
        model: anything implementing :class:`codeact.models.Model`.
        tools: :class:`Tool` objects or plain functions (converted with ``@tool``).
        sandbox: ``"docker"`` (the default: isolated; an error with what to do
            when Docker is not ready, never a silent fallback), ``"local"`` or
            ``"restricted"`` (not isolated: explicit choices that warn), or a
            started sandbox object you own (reused across runs, not closed).
        sandbox_options: keyword options for the sandbox backend (``timeout``, ``memory``...).
        max_steps: model turns per run before it ends with status ``max_steps``.
        approve: called before each call of a ``requires_approval`` tool; return
            True to allow. Without it, such calls are denied.
        deps: user context handed to tools through :class:`RunContext.deps`.
        log: a :class:`codeact.runlog.RunLog`, a database path, ``True`` for the
            default database, or ``None``/``False`` to keep no log.
        output_dir: where artifacts go (``<output_dir>/<run id>/``).
        stream_model: ask the model for streamed output (``TextDelta`` events).
        observation_limit: characters of one observation the model sees (head and tail kept).
        history_budget: approximate tokens of history; beyond it older observations are elided.
        system_prompt: a template overriding ``prompts/codeact.md`` (``$tools``, ``$files``, ``$workdir``).
        execution_timeout: seconds one code action may run.
        limits: artifact caps per step and per run (:class:`RunLimits`).
    """

    def __init__(
        self,
        model: Any,
        tools: Sequence[Tool[Any, Any] | Callable[..., Any]] = (),
        *,
        sandbox: Any = "docker",
        sandbox_options: dict[str, Any] | None = None,
        max_steps: int = 10,
        approve: Approver | None = None,
        deps: Any = None,
        log: Any = True,
        output_dir: str | os.PathLike[str] | None = None,
        stream_model: bool = False,
        observation_limit: int = 8000,
        history_budget: int = 60_000,
        system_prompt: str | None = None,
        execution_timeout: float = 60.0,
        limits: RunLimits | None = None,
    ) -> None:
        self.model = model
        self.tools = ensure_tools(tools)
        if any(t.name == FINAL_ANSWER for t in self.tools):
            raise CodeActError(f"a tool may not be named {FINAL_ANSWER!r}; the agent defines it")
        self.sandbox = sandbox
        self.sandbox_options = dict(sandbox_options or {})
        self.max_steps = max_steps
        self.approve = approve
        self.deps = deps
        self.output_root = Path(output_dir) if output_dir else None
        self.stream_model = stream_model
        self.observation_limit = observation_limit
        self.history_budget = history_budget
        self.system_prompt = system_prompt
        self.execution_timeout = execution_timeout
        self.limits = limits or RunLimits()
        self._log_spec = log
        self._log: Any = None

    # --- public API -------------------------------------------------------------------------

    def run(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (),
            cancel: threading.Event | None = None) -> RunResult:
        """Run ``task`` to the end and return the result (never raises for model or code errors)."""
        return _result_of(self.stream(task, files=files, cancel=cancel))

    def stream(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (),
               cancel: threading.Event | None = None) -> Iterator[Event]:
        """Run ``task``, yielding every event as it happens; the last is :class:`RunFinished`.

        Closing the generator early (``break``) cancels the run; it is logged as ``cancelled``.
        """
        with self.session() as chat:
            yield from chat.stream(task, files=files, cancel=cancel)

    async def arun(self, task: str, *, files: Sequence[str | os.PathLike[str]] = ()) -> RunResult:
        """Async :meth:`run`; cancelling the awaiting task cancels the run."""
        result: RunResult | None = None
        async for event in self.astream(task, files=files):
            if isinstance(event, RunFinished):
                result = event.result
        assert result is not None
        return result

    async def astream(self, task: str, *, files: Sequence[str | os.PathLike[str]] = ()) -> AsyncIterator[Event]:
        """Async :meth:`stream`. The loop runs on a worker thread; events arrive as they happen."""
        cancel = threading.Event()
        events: queue.Queue[Event | BaseException | None] = queue.Queue()

        def work() -> None:
            try:
                for event in self.stream(task, files=files, cancel=cancel):
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

    def session(self) -> "ChatSession":
        """A multi-turn conversation: history and kernel state survive between turns."""
        return ChatSession(self)

    # --- shared pieces --------------------------------------------------------------------

    def _runlog(self) -> Any:
        if self._log is None and self._log_spec not in (None, False):
            from .runlog import RunLog

            spec = self._log_spec
            self._log = spec if not isinstance(spec, (bool, str, os.PathLike)) else RunLog(
                None if spec is True else spec
            )
        return self._log

    def _open_sandbox(self, functions: list[HostFunction]) -> tuple[Any, bool]:
        """(sandbox, owned): a new session we must close, or the user's own."""
        if not isinstance(self.sandbox, str):
            self.sandbox.register(*functions)
            return self.sandbox, False
        from sandbox import open_sandbox

        options = {"timeout": self.execution_timeout, **self.sandbox_options}
        sb = open_sandbox(self.sandbox, functions=functions, **options)
        if hasattr(sb, "start"):
            sb.start()
        elif hasattr(sb, "__enter__"):
            sb.__enter__()
        return sb, True


class ChatSession:
    """One conversation with a :class:`CodeActAgent`: history and sandbox persist across turns.

    Example::

        with agent.session() as chat:
            chat.send("Load sales.csv into df", files=["sales.csv"])
            chat.send("Now plot monthly totals")
    """

    def __init__(self, agent: CodeActAgent) -> None:
        self.agent = agent
        self.messages: list[Message] = []
        self._sandbox: Any = None
        self._owned = False
        self._state: _RunState | None = None
        self._files: list[FileDescription] = []
        self._closed = False
        self._approval = threading.Lock()  # one approval open at a time

    # --- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> "ChatSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._sandbox is not None and self._owned:
            self._sandbox.close()
        self._sandbox = None

    def interrupt(self) -> None:
        """Interrupt the code action running now (callable from another thread).

        The code gets a KeyboardInterrupt, the model sees that as the
        observation, and the kernel keeps its state.
        """
        interrupt = getattr(self._sandbox, "interrupt", None)
        if interrupt is not None:
            interrupt()

    # --- turns ------------------------------------------------------------------------------

    def send(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (),
             cancel: threading.Event | None = None) -> RunResult:
        """One turn to the end; returns its result."""
        return _result_of(self.stream(task, files=files, cancel=cancel))

    def stream(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (),
               cancel: threading.Event | None = None) -> Iterator[Event]:
        """One turn: run ``task`` in this conversation, yielding events."""
        if self._closed:
            # A closed session would silently open a new sandbox that nobody closes.
            raise CodeActError("this chat session is closed; start a new one with agent.session()")
        agent = self.agent
        run_id = uuid.uuid4().hex[:12]
        state = _RunState(run_id)
        self._state = state
        result = RunResult(run_id=run_id, task=task)
        started = time.perf_counter()
        log = agent._runlog()
        output_dir = (agent.output_root or _default_output_root()) / run_id
        file_paths = [Path(f) for f in files]

        def emit(event: Event) -> Event:
            if log is not None:
                try:
                    log.record(event)
                except Exception:  # the log must never break a run
                    pass
            return event

        missing = [str(p) for p in file_paths if not p.is_file()]
        yield emit(RunStarted(run_id=run_id, task=task, model=getattr(agent.model, "name", "?"),
                              backend=self._backend_name(), tools=[t.name for t in agent.tools],
                              files=[p.name for p in file_paths]))
        try:
            if missing:
                raise CodeActError(f"file not found: {', '.join(missing)}")
            if cancel is not None and cancel.is_set():
                raise RunCancelled("cancelled before the first step")
            self._ensure_sandbox()
            for path in file_paths:
                self._sandbox.upload(path)
                self._files.append(FileDescription.of(path))
            if not self.messages:
                system = render_system_prompt(agent.tools, files=self._files,
                                              workdir=self._sandbox.workdir, template=agent.system_prompt)
                self.messages.append(Message("system", system))
                self.messages.append(Message("user", task))
            else:
                extra = ""
                if file_paths:
                    extra = "\n\nNew files in the working directory:\n" + "\n".join(
                        FileDescription.of(p).render() for p in file_paths)
                self.messages.append(Message("user", task + extra))
            snapshot = self._file_snapshot()
            budget = _ArtifactBudget(agent.limits)
            for index in range(1, agent.max_steps + 1):
                if cancel is not None and cancel.is_set():
                    raise RunCancelled(f"cancelled before step {index}")
                state.step = index
                step = Step(index=index)
                result.steps.append(step)
                step_started = time.perf_counter()
                yield from (emit(e) for e in self._model_turn(step, cancel, state))
                result.usage = result.usage + step.usage
                parsed = parse_reply(step.model_output)
                if not parsed.has_code:
                    if parsed.other_blocks or not step.model_output.strip():
                        feedback = self._no_code_feedback(parsed.other_blocks, step.model_output)
                        step.error = feedback
                        yield emit(ErrorEvent(run_id=run_id, step=index, message=feedback, kind="parse"))
                        self.messages.append(Message("assistant", step.model_output))
                        self.messages.append(Message("user", feedback))
                        step.duration = time.perf_counter() - step_started
                        continue
                    # A reply without code is the final answer.
                    result.answer, result.status = step.model_output.strip(), "success"
                    self.messages.append(Message("assistant", step.model_output))
                    step.duration = time.perf_counter() - step_started
                    break
                step.code = parsed.code
                yield emit(CodeAction(run_id=run_id, step=index, code=parsed.code))
                exec_started = time.perf_counter()
                exec_result: ExecutionResult | None = None
                for item in self._run_code(parsed.code, state):
                    if isinstance(item, ToolCall):
                        step.tool_calls.append(item)
                        yield emit(item)
                    elif isinstance(item, CodeOutput):
                        yield emit(item)
                    else:
                        exec_result = item
                assert exec_result is not None
                step.sandbox_time = time.perf_counter() - exec_started
                parts, images = self._collect_artifacts(exec_result, index, output_dir, snapshot, result, budget)
                full_text = format_observation(exec_result, parts, limit=None)
                text = truncate_middle(full_text, agent.observation_limit)
                step.observation = text
                step.error = str(exec_result.error) if exec_result.error else None
                yield emit(Observation(run_id=run_id, step=index, text=text, stdout=exec_result.stdout,
                                       stderr=exec_result.stderr, error=step.error,
                                       duration=exec_result.duration,
                                       truncated=exec_result.truncated or len(full_text) > agent.observation_limit,
                                       artifacts=parts.artifacts + [p for p, _ in parts.changed_files],
                                       images=images))
                self.messages.append(Message("assistant", step.model_output))
                self.messages.append(Message("user", f"Observation:\n{text}"))
                step.duration = time.perf_counter() - step_started
                if state.answered:
                    result.answer, result.status = state.answer, "success"
                    break
            else:
                result.status = "max_steps"
                result.answer = self._best_answer(result)
        except RunCancelled as exc:
            result.status, result.error = "cancelled", str(exc)
        except (GeneratorExit, KeyboardInterrupt) as exc:
            # The caller stopped consuming, or Ctrl-C: log the run as cancelled, then let it propagate.
            result.status = "cancelled"
            result.error = "the caller stopped the run" if isinstance(exc, GeneratorExit) else "interrupted (Ctrl-C)"
            result.duration = time.perf_counter() - started
            emit(RunFinished(run_id=run_id, result=result))
            raise
        except (ModelError, CodeActError) as exc:
            result.status, result.error = "error", str(exc)
            yield emit(ErrorEvent(run_id=run_id, step=state.step, message=str(exc),
                                  kind="model" if isinstance(exc, ModelError) else "agent", fatal=True))
        except Exception as exc:  # a bug or a sandbox failure: report it, keep the log consistent
            result.status, result.error = "error", f"{type(exc).__name__}: {exc}"
            kind = "sandbox" if isinstance(exc, SandboxError) else "internal"
            yield emit(ErrorEvent(run_id=run_id, step=state.step, message=result.error, kind=kind, fatal=True))
        result.duration = time.perf_counter() - started
        if result.status in ("success", "max_steps"):
            yield emit(FinalAnswer(run_id=run_id, step=state.step, answer=result.answer, status=result.status))
        yield emit(RunFinished(run_id=run_id, result=result))

    # --- pieces of a turn ----------------------------------------------------------------

    def _backend_name(self) -> str:
        # Once a sandbox is open (later chat turns), name the backend it really is ("auto" resolved).
        sb = self._sandbox if self._sandbox is not None else self.agent.sandbox
        return sb if isinstance(sb, str) else getattr(sb, "backend", type(sb).__name__)

    def _ensure_sandbox(self) -> None:
        if self._sandbox is None:
            functions = [t.host_function(self._invoker(t)) for t in self.agent.tools]
            functions.append(HostFunction(self._final_answer, name=FINAL_ANSWER,
                                          doc="Finish the task and return `answer` to the user."))
            self._sandbox, self._owned = self.agent._open_sandbox(functions)

    def _final_answer(self, answer: Any) -> None:
        assert self._state is not None
        self._state.answer, self._state.answered = answer, True

    def _invoker(self, tool: Tool[Any, Any]) -> Callable[[tuple[Any, ...], dict[str, Any]], Any]:
        """The host side of a tool called from sandboxed code: bind, approve, call, record."""

        def invoke(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            state = self._state
            assert state is not None
            started = time.perf_counter()
            arguments: dict[str, Any] = {}
            try:
                arguments = tool.bind(args, kwargs)
                if tool.requires_approval:
                    self._ask_approval(tool, arguments, state)
                ctx = RunContext(run_id=state.run_id, step=state.step, deps=self.agent.deps)
                value = tool.call(arguments, ctx)
            except Exception as exc:
                shown = arguments or {"args": list(args), **kwargs}
                state.report(ToolCall(run_id=state.run_id, step=state.step, name=tool.name,
                                      arguments={k: preview(v) for k, v in shown.items()},
                                      error=f"{type(exc).__name__}: {exc}", duration=time.perf_counter() - started))
                raise
            state.report(ToolCall(run_id=state.run_id, step=state.step, name=tool.name,
                                  arguments={k: preview(v) for k, v in arguments.items()}, result=preview(value),
                                  duration=time.perf_counter() - started))
            if tool.return_direct:
                state.answer, state.answered = value, True
            return value

        return invoke

    def _ask_approval(self, tool: Tool[Any, Any], arguments: dict[str, Any], state: _RunState) -> None:
        """Ask the approver; raise :class:`ApprovalDenied` unless it says yes.

        One approval is open at a time, and the time a human takes (waiting for
        the turn included) counts against neither the call's timeout nor the
        code's time limit. A call the sandbox was already told had failed is
        never run after a late yes.
        """
        call = current_call()
        request = ApprovalRequest(tool.name, {k: preview(v) for k, v in arguments.items()}, state.run_id, state.step)
        approver = self.agent.approve
        with call.paused() if call is not None else contextlib.nullcontext(), self._approval:
            allowed = approver is not None and approver(request)
        if call is not None:
            call.checkpoint()
        if not allowed:
            raise ApprovalDenied(f"the user did not allow this call to {tool.name}; "
                                 "do not retry it, find another way or explain in the final answer")

    def _run_code(self, code: str, state: _RunState) -> Iterator[ToolCall | CodeOutput | ExecutionResult]:
        """Run a code action, yielding its output and each tool call as they come, then the result.

        The sandbox runs on a worker thread so that tool-call events reach the
        caller while the code is still running. If the caller stops (Ctrl-C,
        closing the generator), the code in the sandbox is interrupted first.
        """
        events: queue.Queue[Any] = queue.Queue()
        state.tool_events = events
        done = object()
        outcome: dict[str, Any] = {}

        def on_output(stream: str, text: str) -> None:
            events.put(CodeOutput(run_id=state.run_id, step=state.step, stream=stream, text=text))

        def work() -> None:
            try:
                outcome["result"] = self._sandbox.run(code, list_files=True, on_output=on_output)
            except BaseException as exc:  # re-raised on the caller's thread
                outcome["error"] = exc
            finally:
                events.put(done)

        worker = threading.Thread(target=work, daemon=True, name="codeact-action")
        worker.start()
        try:
            while True:
                try:
                    item = events.get(timeout=0.2)
                except queue.Empty:
                    continue
                if item is done:
                    break
                yield item
        except BaseException:
            self.interrupt()
            worker.join(30)
            raise
        finally:
            state.tool_events = None
        if "error" in outcome:
            raise outcome["error"]
        yield outcome["result"]

    def _model_turn(self, step: Step, cancel: threading.Event | None, state: _RunState) -> Iterator[Event]:
        agent = self.agent
        messages = self._context_messages()
        started = time.perf_counter()
        response: ModelResponse | None = None
        if agent.stream_model:
            for piece in agent.model.stream(messages):
                if isinstance(piece, str):
                    if cancel is not None and cancel.is_set():
                        raise RunCancelled(f"cancelled during step {step.index}")
                    yield TextDelta(run_id=state.run_id, step=step.index, text=piece)
                else:
                    response = piece
        else:
            response = agent.model.complete(messages)
        if response is None:
            raise ModelError("the model's stream ended without a final response")
        step.model_time = time.perf_counter() - started
        step.model_output = response.text or ""
        step.usage = response.usage if response.usage.requests else replace(response.usage, requests=1)
        yield ModelOutput(run_id=state.run_id, step=step.index, text=step.model_output, usage=step.usage,
                          duration=step.model_time, input_messages=len(messages),
                          input_chars=sum(len(m.content) for m in messages))

    def _context_messages(self) -> list[Message]:
        """The history, with older observations elided when it outgrows the token budget."""
        budget_chars = self.agent.history_budget * 4
        messages = list(self.messages)
        total = sum(len(m.content) for m in messages)
        # Keep the system prompt, the first task and the last two exchanges intact.
        protected = {0, 1, *range(max(len(messages) - 4, 0), len(messages))}
        for i, m in enumerate(messages):
            if total <= budget_chars:
                break
            if i in protected or m.role != "user" or not m.content.startswith("Observation:"):
                continue
            short = f"Observation: [elided to fit the context: {len(m.content)} characters]"
            total -= len(m.content) - len(short)
            messages[i] = Message("user", short)
        return messages

    def _no_code_feedback(self, other_blocks: tuple[str, ...], text: str) -> str:
        if not text.strip():
            return ("Your reply was empty. Reply with a thought and a ```python code block, "
                    "or call final_answer(...) in code when you are done.")
        langs = ", ".join(sorted(set(other_blocks)))
        return (f"Only ```python code blocks are run; your reply had {langs} blocks and no Python. "
                "Rewrite the action in Python (use subprocess from Python if you really need a shell command).")

    def _file_snapshot(self) -> dict[str, tuple[int, float]]:
        try:
            return {f.path: (f.size, f.mtime) for f in self._sandbox.list_files()}
        except Exception:
            return {}

    def _collect_artifacts(self, exec_result: ExecutionResult, step: int, output_dir: Path,
                           snapshot: dict[str, tuple[int, float]],
                           result: RunResult, budget: "_ArtifactBudget") -> tuple[ObservationParts, list[bytes]]:
        """Save the step's figures and the files its code wrote into ``output_dir``.

        The file list comes from the sandbox, so every name is checked (plain
        relative paths only) and written without following links, below the
        run's output directory only; per-step and per-run caps bound what is
        copied, and the observation says what was left out.
        """
        parts = ObservationParts()
        images = exec_result.images
        if images or exec_result.files:
            output_dir.mkdir(parents=True, exist_ok=True)
        for k, png in enumerate(images, 1):
            name = f"step{step}_figure{k}.png"
            if not budget.take(len(png), step):
                parts.skipped.append((name, budget.reason(len(png))))
                continue
            path = write_confined(output_dir, name, png)
            parts.artifacts.append(name)
            result.artifacts.append(path)
        current = ({f.path: (f.size, f.mtime) for f in exec_result.files} if exec_result.files is not None
                   else self._file_snapshot())
        for rel, (size, mtime) in sorted(current.items()):
            if snapshot.get(rel) == (size, mtime) or rel.startswith("."):
                continue
            try:
                check_relative_path(rel)
            except UnsafePath as exc:
                parts.skipped.append((rel, f"unsafe name: {exc}"))
                continue
            parts.changed_files.append((rel, size))
            if not budget.take(size, step):
                parts.skipped.append((rel, budget.reason(size)))
                continue
            try:
                data = self._sandbox.download(rel)
                if len(data) != size and not budget.take(len(data) - size, step):
                    parts.skipped.append((rel, budget.reason(len(data))))
                    continue
                target = write_confined(output_dir, rel, data)
            except Exception as exc:  # vanished, grew past the download cap, or a name the host refuses
                parts.skipped.append((rel, f"not copied: {exc}"))
                continue
            if target not in result.artifacts:
                result.artifacts.append(target)
        snapshot.clear()
        snapshot.update(current)
        return parts, images

    def _best_answer(self, result: RunResult) -> Any:
        """At max_steps: the last thing the code printed, else the model's last words."""
        for step in reversed(result.steps):
            if step.observation and not step.error and step.observation.strip() not in ("", NOTHING_PRINTED):
                return step.observation.strip()
        for step in reversed(result.steps):
            if step.model_output.strip():
                return truncate_middle(step.model_output.strip(), 2000)
        return None


class _ArtifactBudget:
    """What one run may still copy out of the sandbox (files and bytes, per step and per run)."""

    def __init__(self, limits: RunLimits) -> None:
        self.limits = limits
        self.files = self.bytes = 0
        self.step = 0
        self.step_files = self.step_bytes = 0

    def take(self, size: int, step: int) -> bool:
        if step != self.step:
            self.step, self.step_files, self.step_bytes = step, 0, 0
        lim = self.limits
        if (self.step_files + 1 > lim.max_artifact_files_per_step or self.files + 1 > lim.max_artifact_files_per_run
                or self.step_bytes + size > lim.max_artifact_bytes_per_step
                or self.bytes + size > lim.max_artifact_bytes_per_run):
            return False
        self.step_files += 1
        self.files += 1
        self.step_bytes += size
        self.bytes += size
        return True

    def reason(self, size: int) -> str:
        lim = self.limits
        if self.step_files + 1 > lim.max_artifact_files_per_step:
            return f"over the limit of {lim.max_artifact_files_per_step} files per step"
        if self.files + 1 > lim.max_artifact_files_per_run:
            return f"over the limit of {lim.max_artifact_files_per_run} files per run"
        if self.step_bytes + size > lim.max_artifact_bytes_per_step:
            return f"over the limit of {lim.max_artifact_bytes_per_step:,} bytes per step"
        return f"over the limit of {lim.max_artifact_bytes_per_run:,} bytes per run"


def _result_of(events: Iterator[Event]) -> RunResult:
    """Consume a run's events; return the result its final RunFinished carries."""
    result: RunResult | None = None
    for event in events:
        if isinstance(event, RunFinished):
            result = event.result
    assert result is not None, "a run always ends with RunFinished"
    return result


__all__ = ["CodeActAgent", "ChatSession", "ApprovalRequest", "Approver", "RunLimits"]
