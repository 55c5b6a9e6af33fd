"""The turn driver: one run of any agent kind, from ``RunStarted`` to ``RunFinished``, written once.

An agent kind supplies the step (:class:`TurnBody`); :func:`drive` does the
rest the same way for CodeAct, ReAct and the web workspace's cells: the
cancel checks, the step loop and its limit, the answer's checks running out,
the one ``except`` chain that classifies how a run ended, the final answer,
the tree link and the trace closed, every event through the recorder.

Example (an agent kind of one step that always answers)::

    class Echo:
        gives_answers = True
        def begin(self, turn): return iter(())
        def step(self, turn, step):
            turn.end("success", turn.result.task)
            return iter(())
        def best_answer(self, turn): return None
        def after(self, turn): return iter(())
        def answered(self, turn): return iter(())
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, Sequence

from sandbox.errors import SandboxError

from ..errors import BudgetExceeded, CodeActError, ModelError, RunCancelled
from ..events import ErrorEvent, Event, FinalAnswer, RunFinished, RunResult, RunStarted, Step
from ..output import AnswerCheck, gave_up
from .artifacts import RunArtifacts
from .limits import RunLimits, default_output_root


class TurnBody(Protocol):
    """What an agent kind supplies to :func:`drive`: its steps, and the few moments around them."""

    #: Whether a run that ends with ``success`` or ``max_steps`` yields a :class:`FinalAnswer` (a cell does not).
    gives_answers: bool

    def begin(self, turn: Turn) -> Iterator[Event]:
        """After ``RunStarted``, before the first step: the task into the conversation, the sandbox opening."""
        ...

    def step(self, turn: Turn, step: Step) -> Iterator[Event]:
        """One step; :meth:`Turn.end` when it ends the run (an answer, a cell's result)."""
        ...

    def best_answer(self, turn: Turn) -> Any:
        """The answer of a run that reached ``max_steps`` without one."""
        ...

    def after(self, turn: Turn) -> Iterator[Event]:
        """After the run ended, however it did (the ``except`` chain included): loose ends, as events."""
        ...

    def answered(self, turn: Turn) -> Iterator[Event]:
        """After the :class:`FinalAnswer` event (a saved session saves here)."""
        ...


class Turn:
    """One run in progress: its id, result, events' way to the log, cancel flag, answer check and place in a tree.

    Built by the agent kind, driven by :func:`drive`; the kind's step reads and
    sets what it needs here (the step index, the artifacts, :meth:`end`).
    """

    def __init__(self, task: str, *, emit: Callable[[Event], Event], limits: RunLimits, max_steps: int,
                 cancel: threading.Event | None = None, check: AnswerCheck | None = None, link: Any = None,
                 trace: Any = None, files: Sequence[str | Path] = (), output_root: Path | None = None,
                 run_id: str | None = None) -> None:
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.result: RunResult[Any] = RunResult(run_id=self.run_id, task=task)
        self.emit = emit
        self.limits = limits
        self.max_steps = max_steps
        self.cancel = cancel
        self.check = check
        #: The run's place in a tree of agents (:class:`codeact.run.tree.RunLink`), None for a cell.
        self.link = link
        #: The run's OpenTelemetry spans (:mod:`codeact.telemetry`), None when tracing is off.
        self.trace = trace
        self.files = [Path(f) for f in files]
        self.artifacts = RunArtifacts(output_root or default_output_root(), self.run_id, limits, self.result)
        #: The step running now (1-based; 0 before the first).
        self.step = 0
        self.ended = False
        self.started = time.perf_counter()

    @property
    def task(self) -> str:
        return self.result.task

    def stop_if_cancelled(self, when: str) -> None:
        """Raise :class:`RunCancelled` ("cancelled <when>") if the caller asked to stop."""
        if self.cancel is not None and self.cancel.is_set():
            raise RunCancelled(f"cancelled {when}")

    def end(self, status: str, answer: Any = None, error: str | None = None) -> None:
        """End the run after this step with ``status`` (``success`` for an answer)."""
        self.result.status, self.result.answer, self.result.error = status, answer, error  # type: ignore[assignment]
        self.ended = True

    def elapsed(self) -> float:
        return time.perf_counter() - self.started


def drive(turn: Turn, body: TurnBody, started: RunStarted) -> Iterator[Event]:
    """Run ``turn`` with ``body``'s steps, yielding every event (each through ``turn.emit``); the last is
    :class:`RunFinished`. Never raises for a model, tool, sandbox or budget failure: the run's status says
    how it ended. Closing the generator (or Ctrl-C) records the run as ``cancelled`` and propagates."""
    emit, result = turn.emit, turn.result
    yield emit(started)
    try:
        missing = [str(p) for p in turn.files if not p.is_file()]
        if missing:
            raise CodeActError(f"file not found: {', '.join(missing)}")
        turn.stop_if_cancelled("before the first step")
        yield from _emitted(body.begin(turn), emit)
        for index in range(1, turn.max_steps + 1):
            turn.stop_if_cancelled(f"before step {index}")
            turn.step = index
            step = Step(index=index)
            result.steps.append(step)
            step_started = time.perf_counter()
            yield from _emitted(body.step(turn, step), emit)
            if not step.duration:
                step.duration = time.perf_counter() - step_started
            if turn.ended or (turn.check is not None and turn.check.exhausted):
                break
        else:
            result.status = "max_steps"
            result.answer = body.best_answer(turn) if turn.check is None or turn.check.spec is None \
                else turn.check.last
        if turn.check is not None and turn.check.exhausted:
            yield emit(gave_up(result, turn.check, turn.step))
    except RunCancelled as exc:
        result.status, result.error = "cancelled", str(exc)
    except (GeneratorExit, KeyboardInterrupt) as exc:
        # The caller stopped consuming, or Ctrl-C: record the run as cancelled, then let it propagate.
        result.status = "cancelled"
        result.error = "the caller stopped the run" if isinstance(exc, GeneratorExit) else "interrupted (Ctrl-C)"
        _close(turn)
        emit(RunFinished(run_id=turn.run_id, result=result))
        raise
    except BudgetExceeded as exc:
        result.status, result.error = "budget_exceeded", str(exc)
        yield emit(ErrorEvent(run_id=turn.run_id, step=turn.step, message=str(exc), kind="budget", fatal=True))
    except Exception as exc:  # a model, agent or sandbox failure, or a bug: report it, keep the log consistent
        kind = ("model" if isinstance(exc, ModelError) else "agent" if isinstance(exc, CodeActError)
                else "sandbox" if isinstance(exc, SandboxError) else "internal")
        result.status = "error"
        result.error = str(exc) if isinstance(exc, (ModelError, CodeActError)) else f"{type(exc).__name__}: {exc}"
        yield emit(ErrorEvent(run_id=turn.run_id, step=turn.step, message=result.error, kind=kind, fatal=True))
    yield from _emitted(body.after(turn), emit)
    if result.status in ("success", "max_steps") and body.gives_answers:
        result.duration = turn.elapsed()
        yield emit(FinalAnswer(run_id=turn.run_id, step=turn.step, answer=result.answer, status=result.status))
        yield from _emitted(body.answered(turn), emit)
    _close(turn)
    yield emit(RunFinished(run_id=turn.run_id, result=result))


def _emitted(events: Iterator[Event], emit: Callable[[Event], Event]) -> Iterator[Event]:
    """``events`` through ``emit``; closing this closes ``events`` at once (a running code action is stopped)."""
    try:
        for event in events:
            yield emit(event)
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()


def _close(turn: Turn) -> None:
    turn.result.duration = turn.elapsed()
    turn.result.tree_usage = turn.result.usage
    if turn.link is not None:
        turn.link.finish()
        turn.result.tree_usage = turn.link.tree_usage()
    if turn.trace is not None:
        turn.trace.end(turn.result)
