"""The chat session of a web-UI tab: the agent's conversation plus the analyst's own hand.

:class:`WorkspaceChat` is a :class:`~codeact.agent.ChatSession` that the
analyst can also work in directly, as in a notebook:

* :meth:`~WorkspaceChat.run_cell` runs the analyst's code through the same
  path as a code action (the sandbox's time limit, live output, tool calls
  and approvals, artifacts, interrupts), recorded in the run log as a run of
  its own whose agent is ``"user"`` (the model's runs are ``"codeact"``);
* :meth:`~WorkspaceChat.restart` restarts the kernel (files are kept);
* after every code action, the model's or the analyst's, the kernel's
  variables are listed (:mod:`._variables`) for the variables panel.

The model is not left behind: what the analyst ran and saw, and a restart,
become a note at the top of the model's next message.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from sandbox.result import ExecutionResult

from .. import telemetry
from .._run import recorder
from ..agent import (
    USER_INTERRUPT_NOTE,
    ChatSession,
    _ArtifactBudget,
    _default_output_root,
    _output_bundles,
    _RunState,
)
from ..errors import CodeActError, RunCancelled, SavedSessionError
from ..events import CodeAction, CodeOutput, ErrorEvent, Event, Observation, RunFinished, RunResult, RunStarted, Step
from ..events import NetworkRequest, PackageInstall, ToolCall, ToolProgress
from ..observation import format_observation, truncate_middle
from ._variables import LISTING_CODE, LISTING_TIMEOUT, VariableListing, parse_listing

#: ``RunStarted.agent`` of a run that is the analyst's own code.
USER_AGENT = "user"
#: Told to the model with its next message after the analyst restarted the kernel.
RESTART_NOTE = ("The user restarted the kernel: variables, imports and definitions from before are gone "
                "(files in the working directory were kept).")


class WorkspaceChat(ChatSession):
    """A chat session the analyst can also run code in, restart, and look into (see the module docstring)."""

    def __init__(self, agent: Any, *, save: Any = None, resume: str | None = None) -> None:
        # Before the base class: a resume opens the sandbox from there.
        self._notes: list[str] = []
        self._notes_lock = threading.Lock()
        self._listing = VariableListing()
        super().__init__(agent, save=save, resume=resume)
        if resume is not None:
            self._list_variables(keep_notices=False)  # the panel shows what came back

    # --- what the analyst does ----------------------------------------------------------------

    @property
    def variables(self) -> VariableListing:
        """The kernel's variables after the last code that ran (empty before any)."""
        return self._listing

    @property
    def pending_notes(self) -> list[str]:
        """What the model will be told with the next message."""
        with self._notes_lock:
            return list(self._notes)

    def run_cell(self, code: str, *, cancel: threading.Event | None = None) -> Iterator[Event]:
        """Run the analyst's ``code`` in the session's kernel, yielding the same events as a code action.

        The run is one step with no model output; its observation (exactly
        what the model would have seen) and the code are told to the model
        with the next message.
        """
        if self._closed:
            raise CodeActError("this chat session is closed; start a new one")
        agent = self.agent
        run_id = uuid.uuid4().hex[:12]
        state = _RunState(run_id)
        self._state = state
        self._saver.begin_run(run_id)
        result = RunResult(run_id=run_id, task=code)
        started = time.perf_counter()
        output_dir = (agent.output_root or _default_output_root()) / run_id
        emit = recorder(agent._runlog(), self._log_transform())
        state.trace = telemetry.start_run(agent=USER_AGENT, run_id=run_id, model=agent.model, task=code,
                                          backend=self._backend_name(), redact=self._content_filter())
        yield emit(RunStarted(run_id=run_id, task=code, model="", backend=self._backend_name(),
                              tools=list(getattr(self, "_tools_now", None) or [t.name for t in agent.tools]),
                              agent=USER_AGENT))
        try:
            if cancel is not None and cancel.is_set():
                raise RunCancelled("cancelled before the code ran")
            self._ensure_sandbox()
            for install in self._package_events(state):
                yield emit(install)
            snapshot = self._file_snapshot()
            budget = _ArtifactBudget(agent.limits)
            state.output_dir, state.budget, state.result = output_dir, budget, result
            state.step = 1
            step = Step(index=1, code=code)
            result.steps.append(step)
            yield emit(CodeAction(run_id=run_id, step=1, code=code))
            exec_result: ExecutionResult | None = None
            for item in self._run_code(code, state):
                if isinstance(item, ToolCall):
                    step.tool_calls.append(item)
                    yield emit(item)
                elif isinstance(item, (CodeOutput, ToolProgress, PackageInstall, NetworkRequest)):
                    yield emit(item)
                else:
                    exec_result = item
            assert exec_result is not None
            step.sandbox_time = exec_result.duration
            parts, images = self._collect_artifacts(exec_result, 1, output_dir, snapshot, result, budget)
            full_text = format_observation(exec_result, parts, limit=None)
            if self._redactor is not None:
                full_text = self._redactor.redact(full_text)
            text = truncate_middle(full_text, agent.observation_limit)
            tool_changes = self._tool_changes()
            if tool_changes:
                text += "\n\n" + tool_changes
            if state.user_interrupted:
                text += "\n\n" + USER_INTERRUPT_NOTE
            step.observation = text
            step.error = str(exec_result.error) if exec_result.error else None
            step.duration = time.perf_counter() - started
            yield emit(Observation(run_id=run_id, step=1, text=text, stdout=exec_result.stdout,
                                   stderr=exec_result.stderr, error=step.error, duration=exec_result.duration,
                                   truncated=exec_result.truncated or len(full_text) > agent.observation_limit,
                                   artifacts=list(dict.fromkeys(parts.artifacts + [p for p, _ in parts.changed_files]
                                                                + state.tool_artifacts)),
                                   images=images, outputs=_output_bundles(exec_result.outputs)))
            self._note(self._cell_note(code, text))
            yield from (emit(e) for e in self._autosave(state))
            if cancel is not None and cancel.is_set():
                result.status, result.error = "cancelled", "stopped by the user"
            elif step.error:
                result.status, result.error = "error", step.error
            else:
                result.status = "success"
        except RunCancelled as exc:
            result.status, result.error = "cancelled", str(exc)
        except (GeneratorExit, KeyboardInterrupt):
            result.status, result.error = "cancelled", "the caller stopped the run"
            result.duration = time.perf_counter() - started
            emit(RunFinished(run_id=run_id, result=result))
            if state.trace is not None:
                state.trace.end(result)
            raise
        except Exception as exc:  # a sandbox failure ends this run, as it ends a turn
            result.status = "error"
            result.error = str(exc) if isinstance(exc, CodeActError) else f"{type(exc).__name__}: {exc}"
            yield emit(ErrorEvent(run_id=run_id, step=state.step, message=result.error, kind="sandbox", fatal=True))
        result.duration = time.perf_counter() - started
        if state.trace is not None:
            state.trace.end(result)
        yield emit(RunFinished(run_id=run_id, result=result))

    def restart(self) -> bool:
        """Restart the kernel: variables go, files stay; the model is told with the next message.

        Returns False when there is no sandbox yet (nothing to restart).
        """
        if self._closed:
            raise CodeActError("this chat session is closed; start a new one")
        if self._sandbox is None:
            return False
        self._sandbox.restart()
        self._note(RESTART_NOTE)
        self._list_variables(keep_notices=False)  # the kernel's own "restarted" notice: the note says it
        return True

    # --- the model hears about it ---------------------------------------------------------------

    def _note(self, text: str) -> None:
        with self._notes_lock:
            self._notes.append(text)

    def _cell_note(self, code: str, observation: str) -> str:
        half = max(200, self.agent.observation_limit // 2)
        return (f"The user ran this code in the session's kernel themselves:\n```python\n"
                f"{truncate_middle(code, half)}\n```\nWhat it showed (as an observation would):\n"
                f"{truncate_middle(observation, half)}")

    def _take_notes(self) -> str:
        with self._notes_lock:
            notes, self._notes = self._notes, []
        if not notes:
            return ""
        text = "\n\n".join(f"{n}. {note}" if len(notes) > 1 else note for n, note in enumerate(notes, 1))
        text = truncate_middle(text, 4 * self.agent.observation_limit)
        return ("[Note: between your last turn and this message, the user worked in the session directly.]\n"
                f"{text}\n[End of note.]\n\n")

    def stream(self, task: str, *, files: Any = (), cancel: threading.Event | None = None, output_type: Any = None,
               output_retries: int | None = None) -> Iterator[Event]:
        self._note_due = True
        try:
            yield from super().stream(task, files=files, cancel=cancel, output_type=output_type,
                                      output_retries=output_retries)
        finally:
            self._note_due = False

    def _before_model_call(self) -> None:
        # The turn's first request: the user's message is the last one; the notes go on top of it (and
        # stay there, so later turns still see what the user did).
        if getattr(self, "_note_due", False) and self.messages and self.messages[-1].role == "user":
            self._note_due = False
            notes = self._take_notes()
            if notes and isinstance(self.messages[-1].content, str):
                self.messages[-1] = replace(self.messages[-1], content=notes + self.messages[-1].content)

    # --- the variables panel --------------------------------------------------------------------

    def _run_code(self, code: str, state: _RunState) -> Iterator[Any]:
        for item in super()._run_code(code, state):
            if isinstance(item, ExecutionResult):
                # What the listing's run says (a kernel restarted between the two) belongs to this step.
                item.notices.extend(self._list_variables())
            yield item

    def _list_variables(self, keep_notices: bool = True) -> list[str]:
        """List the kernel's variables (for the panel); returns the sandbox's notices of that run."""
        sandbox = self._sandbox
        if sandbox is None or getattr(sandbox, "backend", "") == "restricted":
            self._listing = VariableListing(error="the variables panel needs a kernel (the docker or local "
                                                  "backend)")
            return []
        try:
            listing = sandbox.run(LISTING_CODE, timeout=LISTING_TIMEOUT)
        except Exception as exc:  # the panel says so; the step goes on
            self._listing = VariableListing(error=f"could not list the variables: {type(exc).__name__}")
            return []
        if listing.error is not None:
            self._listing = VariableListing(error=f"could not list the variables: {listing.error.type}")
        else:
            self._listing = parse_listing(listing.stdout)
        return [n for n in listing.notices if n.strip()] if keep_notices else []


def workspace_chat(agent: Any, *, save: Any = None, resume: str | None = None) -> Any:
    """The session of one tab: a :class:`WorkspaceChat` for a CodeAct agent, else the agent's own session.

    ``save`` (:class:`codeact.sessions.SaveOptions`) applies when the agent keeps a run log;
    ``resume`` restores a saved session (CodeAct only: a ReAct session has no kernel).
    """
    from ..agent import CodeActAgent

    if isinstance(agent, CodeActAgent):
        return WorkspaceChat(agent, save=save if agent._runlog() is not None else None, resume=resume)
    if resume is not None:
        raise SavedSessionError("this workspace's agent is not a CodeAct agent: it has no kernel to restore a "
                                "saved session into (resume works for CodeAct sessions)")
    return agent.session()


__all__ = ["WorkspaceChat", "workspace_chat", "USER_AGENT", "RESTART_NOTE"]
