"""A CodeAct step: ask the model, parse its reply, run the code in the sandbox, observe what it did.

:class:`CodeActTurn` is what CodeAct supplies to the turn driver
(:func:`codeact.run.drive`); :class:`CodeActions` runs one code action and
turns it into an observation, for the model's steps and for the web
workspace's cells alike.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generator, Iterator, Protocol, Sequence

from sandbox.result import ExecutionResult

from . import transcript
from .action_state import ActionState
from .code_artifacts import FileListing, collect_artifacts, file_listing, output_bundles
from .chat_recovery import Recovery
from .chat_sandbox import ChatSandbox
from .chat_tools import ChatTools
from .compaction import Compactor, compacted_call, compaction_events
from .settings import images_enabled
from .events import (
    CodeAction,
    CodeOutput,
    ErrorEvent,
    Event,
    NetworkRequest,
    Observation,
    PackageInstall,
    Step,
    ToolCall,
    ToolProgress,
    TurnMessage,
)
from .images import StepImages, step_images, wants_images, withheld_images
from .messages import Message, Usage
from .observation import NOTHING_PRINTED, ObservationParts, format_observation, truncate_middle
from .output import AnswerCheck, OutputSpec
from .parsing import parse_reply
from .privacy import ChatPrivacy
from .run import Turn, model_turn



class CodeActChat(Protocol):
    """What a CodeAct step needs of its chat session (:class:`~codeact.agent.ChatSession` is one)."""

    agent: Any  # observation_limit, model, limits, stream_model
    messages: list[Message]
    turn_starts: list[int]
    privacy: ChatPrivacy
    tools: ChatTools
    box: ChatSandbox
    recovery: Recovery

    @property
    def sandbox(self) -> Any: ...
    @property
    def compactor(self) -> Compactor: ...
    def interrupt(self) -> None: ...
    def after_action(self) -> list[str]: ...
    def tool_changes_note(self) -> str: ...
    def recover_lost_sandbox(self, trace: Any = None) -> None: ...
    def take_announced_files(self, paths: Sequence[Path]) -> list[Any]: ...
    def answer_types(self, output: OutputSpec | None) -> tuple[str, str]: ...
    def start_turn(self, task: str, files: Sequence[Any], answer_note: str) -> str: ...
    def autosave(self, state: ActionState) -> Iterator[Event]: ...

#: Seconds a code action may still run once its run's cancel event is set, before it is interrupted.
CANCEL_GRACE = 1.0

#: Added to the observation of a code action :meth:`ChatSession.interrupt` stopped, so that the model
#: knows the KeyboardInterrupt came from the user (Ctrl-C / Stop) and not from its own code.
USER_INTERRUPT_NOTE = ("Note: the user interrupted this code (Ctrl-C / Stop). Variables it set before the "
                       "interruption are kept.")


@dataclass
class Executed:
    """One code action that ran: its result, what it left on the host, and the observation text so far."""

    result: ExecutionResult
    parts: ObservationParts
    #: The PNGs the code showed (for the Observation event and the run log).
    pngs: list[bytes]
    #: The observation before the cut (for ``truncated``) and after it, with the notes that follow the cut.
    full_text: str
    text: str
    #: (name, bytes) of the images tools saved during the action.
    tool_images: list[tuple[str, bytes]]
    tool_artifacts: list[str]


class CodeActions:
    """Runs code actions in a chat session's sandbox and observes them (see the module docstring)."""

    def __init__(self, chat: CodeActChat) -> None:
        self.chat = chat

    def execute(self, code: str, state: ActionState, step: Step,
                before: FileListing) -> Generator[Event, None, Executed]:
        """Run ``code``: yield its output, tool calls and installs as they come; return what it did.

        Sets ``step.sandbox_time`` (the action's wall time on the host, tool calls included) and
        ``step.tool_calls``.
        """
        chat = self.chat
        started = time.perf_counter()
        result: ExecutionResult | None = None
        for item in self._run(code, state):
            if isinstance(item, ToolCall):
                step.tool_calls.append(item)
                yield item
            elif isinstance(item, (CodeOutput, ToolProgress, PackageInstall, NetworkRequest)):
                yield item
            else:
                result = item
        assert result is not None
        result.notices.extend(chat.after_action())  # a subclass's look at the kernel (the variables panel)
        step.sandbox_time = time.perf_counter() - started
        parts, pngs = collect_artifacts(result, step.index, chat.sandbox, before, state.turn.artifacts)
        full_text = chat.privacy.redact(format_observation(result, parts, limit=None))
        text = truncate_middle(full_text, chat.agent.observation_limit)
        tool_changes = chat.tool_changes_note()  # an MCP server added or removed tools
        if tool_changes:
            text += "\n\n" + tool_changes
        if state.user_interrupted:  # after the cut, so the model always learns who stopped it
            text += "\n\n" + USER_INTERRUPT_NOTE
        names, images = state.turn.artifacts.take_step()
        return Executed(result, parts, pngs, full_text, text, images, names)

    def observation(self, executed: Executed, state: ActionState, step: Step, text: str,
                    sent: StepImages) -> Observation:
        """The Observation event of an action, ``text`` being what the model reads."""
        result, parts = executed.result, executed.parts
        step.observation = text
        return Observation(run_id=state.run_id, step=step.index, text=text, stdout=result.stdout,
                           stderr=result.stderr, error=step.error, duration=result.duration,
                           truncated=result.truncated or len(executed.full_text) > self.chat.agent.observation_limit,
                           # the files the host kept and the figures, a figure saved as a file named once
                           artifacts=list(dict.fromkeys(parts.artifacts + parts.saved_files()
                                                        + executed.tool_artifacts)),
                           images=executed.pngs, outputs=output_bundles(result.outputs),
                           sent_images=list(sent.names))

    def step_images(self, candidates: list[tuple[str, bytes]]) -> StepImages:
        """The step's images as the model gets them (none when the model takes none)."""
        agent = self.chat.agent
        if not candidates or not wants_images(agent.model, images_enabled()):
            return StepImages()
        why = self.chat.privacy.images_withheld()
        if why:
            return withheld_images(candidates, why)
        limits = agent.limits
        return step_images(candidates, max_side=limits.max_image_side, max_images=limits.max_images_per_step)

    def _run(self, code: str, state: ActionState) -> Iterator[ToolCall | CodeOutput | ExecutionResult]:
        """Run a code action on a worker thread, yielding its output and each tool call as they come, then the
        result. If the caller stops (Ctrl-C, closing the generator), the code is interrupted first; when the
        run's cancel event is set meanwhile (an agent tool's call timed out, the calling run ended), the code is
        interrupted and the run ends ``cancelled`` before its next step."""
        chat = self.chat
        sandbox = chat.sandbox
        events: queue.Queue[Any] = queue.Queue()
        for request in chat.box.pending_network_events(state):  # requests that ended between actions
            events.put(request)
        state.tool_events = events
        state.user_interrupted = False
        state.running_code = True
        done = object()
        outcome: dict[str, Any] = {}
        action = state.trace.action(state.step, code) if state.trace is not None else None
        state.action_ctx = action.ctx if action is not None else None  # the host parents the code's tool calls

        def on_output(stream: str, text: str) -> None:
            events.put(CodeOutput(run_id=state.run_id, step=state.step, stream=stream, text=text))

        def work() -> None:
            try:
                outcome["result"] = sandbox.run(code, list_files=True, on_output=on_output)
            except BaseException as exc:  # re-raised on the caller's thread
                outcome["error"] = exc
            finally:
                events.put(done)

        worker = threading.Thread(target=work, daemon=True, name="codeact-action")
        worker.start()
        cancel, cancelled_at, interrupted = state.turn.cancel, 0.0, False
        try:
            while True:
                try:
                    item = events.get(timeout=0.2)
                except queue.Empty:
                    if cancel is not None and cancel.is_set() and not interrupted:
                        # The run is over for its caller: code still running after a moment's grace (code that
                        # set the flag itself ends on its own) is stopped now.
                        cancelled_at = cancelled_at or time.monotonic()
                        if time.monotonic() - cancelled_at >= CANCEL_GRACE:
                            interrupted = True
                            chat.box.interrupt()
                    continue
                if item is done:
                    break
                yield item
        except BaseException:
            chat.interrupt()
            worker.join(30)
            raise
        finally:
            state.tool_events = None
            state.running_code = False
            if action is not None:
                state.action_ctx = None
                action.end(outcome.get("result"), outcome.get("error"))
        if "error" in outcome:
            raise outcome["error"]
        yield outcome["result"]


class CodeActTurn:
    """One turn of a CodeAct chat: what CodeAct supplies to :func:`codeact.run.drive`."""

    gives_answers = True

    def __init__(self, chat: CodeActChat, state: ActionState, output: OutputSpec | None, check: AnswerCheck) -> None:
        self.chat = chat
        self.state = state
        self.output = output
        self.check = check
        self.actions = CodeActions(chat)
        #: The task's files, put in once the sandbox is up.
        self.uploads: list[Path] = []
        #: The working directory's files before the next action (None until the sandbox is up).
        self.before: FileListing | None = None
        #: Kernel source defining the answer's classes, run before the turn's first code (and again in a
        #: sandbox restored during the turn: ``answer_source``).
        self.answer_types = ""
        self.answer_source = ""
        self._step_started = 0.0

    # --- around the steps -----------------------------------------------------------------------

    def begin(self, turn: Turn) -> Iterator[Event]:
        chat = self.chat
        chat.recover_lost_sandbox(turn.trace)  # its engine restarted since the last turn: back from the last save
        # A new sandbox starts while the model writes its first reply; the first code action waits for it.
        chat.box.ensure(chat.tools.host_functions, background=True, trace=turn.trace)
        self.uploads.extend(turn.files)
        if not chat.box.starting:
            yield from chat.box.ready(chat.tools.host_functions, self.state, self.uploads)
        announced = chat.take_announced_files(turn.files)
        self.answer_types, answer_note = chat.answer_types(self.output)
        self.answer_source = self.answer_types
        first = not chat.messages
        text = chat.start_turn(turn.task, announced, answer_note)
        # In the run log only (a resume rebuilds the conversation from it); not one of the turn's events.
        turn.emit(TurnMessage(run_id=turn.run_id, text=text, system=chat.messages[0].content if first else ""))
        if not self.uploads and not chat.box.starting:
            self.before = file_listing(chat.sandbox)

    def after(self, turn: Turn) -> Iterator[Event]:
        # The turn ended before any code ran: the sandbox must still come up, with the files the model was told
        # of (not when its start already failed this turn: that was reported).
        box = self.chat.box
        if box.starting or (self.uploads and box.sandbox is not None):
            try:
                yield from box.ready(self.chat.tools.host_functions, self.state, self.uploads)
            except Exception as exc:  # the next turn tries again; this one did not need it
                yield ErrorEvent(run_id=turn.run_id, step=turn.step, kind="sandbox", fatal=False,
                                 message=f"the sandbox is not ready: {type(exc).__name__}: {exc}")

    def answered(self, turn: Turn) -> Iterator[Event]:
        yield from self.chat.autosave(self.state)  # the final reply: the conversation moved on

    def best_answer(self, turn: Turn) -> Any:
        """At max_steps: the last thing the code printed, else the model's last words."""
        steps = turn.result.steps
        for step in reversed(steps):
            if step.observation and not step.error and step.observation.strip() not in ("", NOTHING_PRINTED):
                return self.chat.privacy.restore_answer(step.observation.strip())
        for step in reversed(steps):
            if step.model_output.strip():
                return self.chat.privacy.restore_answer(truncate_middle(step.model_output.strip(), 2000))
        return None

    # --- one step -------------------------------------------------------------------------------

    def step(self, turn: Turn, step: Step) -> Iterator[Event]:
        chat, state, check = self.chat, self.state, self.check
        model = chat.agent.model
        turn.link.before_model_call(model)  # the budget (the whole tree's) has room for it
        yield from self._ask(turn, step)
        turn.link.spent(step, turn.result, model)  # result.usage; BudgetExceeded when spent
        parsed = parse_reply(step.model_output)
        code = parsed.code if parsed.has_code else None
        if code is None:
            reply = transcript.reply_message(step.model_output)
            if parsed.other_blocks or not step.model_output.strip():
                feedback = no_code_feedback(parsed.other_blocks, step.model_output)
                step.error = feedback
                yield ErrorEvent(run_id=turn.run_id, step=step.index, message=feedback, kind="parse")
                chat.messages += [reply, transcript.feedback_message(feedback)]
                return
            # A reply without code is the final answer.
            said = check.check_text(chat.privacy.restore_answer(step.model_output.strip()))
            chat.messages.append(reply)
            if not said.ok:  # it does not fit output_type: the model hears why
                step.error = said.feedback
                yield ErrorEvent(run_id=turn.run_id, step=step.index, message=said.feedback, kind="output")
                chat.messages.append(transcript.feedback_message(chat.privacy.redact(said.feedback)))
                return
            turn.end("success", said.value)
            return
        step.code = code
        yield CodeAction(run_id=turn.run_id, step=step.index, code=code)
        turn.stop_if_cancelled(f"before the code of step {step.index} ran")  # stopped while the model wrote it
        # The sandbox went away while the model wrote this (or its restore after the last action failed): back
        # from the last save before the code runs. Raises when it cannot (the turn ends; the next one tries).
        restored = self._restored(chat.recovery.before_action(turn.run_id, step.index, turn.cancel))
        if self.before is None:  # the sandbox started on a thread: wait for it, put the files in
            yield from chat.box.ready(chat.tools.host_functions, state, self.uploads)
            self.before = file_listing(chat.sandbox)
        if self.answer_types:  # the answer's classes, defined before the turn's first code runs
            chat.sandbox.run(self.answer_types)
            self.answer_types = ""
        executed = yield from self.actions.execute(code, state, step, self.before)
        text = restored + executed.text
        # The action lost the kernel (its container removed, its engine restarted, killed for memory): a saved
        # session comes back from its last save now, and the model reads what was lost before its next step.
        lost_note = self._restored(chat.recovery.after_action(executed.result.kernel_lost, turn.run_id, step.index,
                                                               turn.cancel))
        if lost_note:
            text += "\n\n" + lost_note.rstrip()
        verdict = check.check(chat.privacy.restore_answer(state.answer)) if state.answered else None
        if verdict is not None and not verdict.ok:  # it does not fit output_type: the model hears why
            state.answered = False
            text += "\n\n" + chat.privacy.redact(verdict.feedback)
        shown = self.actions.step_images(executed.parts.images + executed.tool_images)
        if shown.note:
            text += "\n\n" + shown.note
        error = executed.result.error
        step.error = str(error) if error else None
        if verdict is not None and not verdict.ok:
            step.error = step.error or verdict.feedback
        yield self.actions.observation(executed, state, step, text, shown)
        chat.messages += [transcript.reply_message(step.model_output),
                          transcript.observation_message(text, shown.parts)]
        step.duration = time.perf_counter() - self._step_started
        yield from chat.autosave(state)
        if verdict is not None and verdict.ok:
            turn.end("success", verdict.value)

    def _restored(self, note: str) -> str:
        """``note`` from :attr:`CodeActChat.recovery` as the model reads it (redacted); when it is one (a new
        sandbox), what the next action needs there: the files listed again, the answer's classes defined again."""
        if note and self.chat.sandbox is not None:
            self.before = None
            self.answer_types = self.answer_source
        return self.chat.privacy.redact(note) if note else ""

    def _ask(self, turn: Turn, step: Step) -> Iterator[Event]:
        """One model call on the history as compaction folds it (:mod:`codeact.compaction`)."""
        chat = self.chat
        self._step_started = time.perf_counter()
        agent = chat.agent

        def price(usage: Usage) -> Usage:  # the cost of each call, in its event and the run log
            return turn.link.price(usage, agent.model)

        def call(messages: list[Message]) -> Generator[Event, None, Any]:
            return model_turn(agent.model, chat.privacy.redact_user_messages(messages), step, run_id=turn.run_id,
                              stream=agent.stream_model, cancel=turn.cancel, trace=turn.trace, price=price)

        yield from compaction_events(compacted_call(chat.compactor, chat.messages, chat.turn_starts, call,
                                                    run_id=turn.run_id, step=step.index), step, turn.trace, price)


def no_code_feedback(other_blocks: tuple[str, ...], text: str) -> str:
    """What the model is told about a reply with no Python to run (empty, or other languages' blocks)."""
    if not text.strip():
        return ("Your reply was empty. Reply with a thought and a ```python code block, "
                "or call final_answer(...) in code when you are done.")
    langs = ", ".join(sorted(set(other_blocks)))
    return (f"Only ```python code blocks are run; your reply had {langs} blocks and no Python. "
            "Rewrite the action in Python (use subprocess from Python if you really need a shell command).")


__all__ = ["CodeActTurn", "CodeActions", "Executed", "USER_INTERRUPT_NOTE", "no_code_feedback"]
