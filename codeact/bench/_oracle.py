"""The oracle model: a perfect, zero-latency model that replays a task's reference solution.

It plays one agent kind on one task. For ``codeact`` it answers with the
oracle's code action in one turn. For the ReAct kinds it first runs the
task's plan against its own fresh copy of the tools (a *shadow*: same
factory, its own working directory) to learn every call and its result, then
answers turn by turn in the agent's action format: function calling sends
each plan turn's calls together; the json and text formats one call per turn.
Before each turn it checks that the agent showed it exactly the observations
the shadow predicts; on any difference it gives up with a plain-text answer
that says what differed (so the episode fails with a reason).

So an oracle run measures the harness end to end, and the fewest model
calls and tokens each format needs: the measured upper bound of what
collapsing ReAct steps into code actions saves.

Token usage is estimated at 4 characters a token over the messages, the
function schemas (which a function-calling request sends) and the reply.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..messages import Message, ModelResponse, ToolCallRequest, Usage
from ..models import estimate_tokens
from ..react import observation_text, python_literal
from ._plan import FINAL_ANSWER, PlanTrace, TracedCall, run_plan
from ._task import Oracle, Task, TaskContext

#: The model name that selects the oracle (``codeact bench run --model oracle``).
ORACLE = "oracle"


class WholeReplies:
    """``stream`` and ``acomplete`` of a zero-latency model that only implements ``complete``:
    the whole reply as one chunk, then the response."""

    def complete(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None) -> ModelResponse:
        raise NotImplementedError  # pragma: no cover - each model has its own

    def stream(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None
               ) -> Iterator[str | ModelResponse]:
        response = self.complete(messages, tools=tools)
        if response.text:
            yield response.text
        yield response

    async def acomplete(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None) -> ModelResponse:
        return self.complete(messages, tools=tools)


class OracleModel(WholeReplies):
    """Replays ``task``'s oracle as agent ``kind`` (``codeact``, ``react-fc``, ``react-json``, ``react-text``).

    Args:
        task: a task with an :class:`~codeact.bench.Oracle`.
        kind: the agent kind this model will drive.
        context: the episode's :class:`TaskContext`; the shadow gets a copy
            with its own working directory.
        observation_limit: the agent's observation limit (to predict observations exactly).

    Raises:
        BenchError: the task has no oracle (here), or its plan fails on the shadow tools
            (on the first model call, so the agent reports it as the run's error).

    Example::

        model = OracleModel(task, "react-json", context=ctx)
        ReActAgent(model, task.build_tools(ctx), format="json").run(task.instruction)
    """

    def __init__(self, task: Task, kind: str, *, context: TaskContext, observation_limit: int = 8000) -> None:
        from ..errors import BenchError

        found = [task.turn_oracle(i) for i in range(max(1, len(task.turns)))]
        oracles = [o for o in found if o is not None]
        if len(oracles) != len(found):
            raise BenchError(f"task {task.key} has no oracle solution; run it with a real model")
        self.name = ORACLE
        self.kind = kind
        self.task = task
        self.observation_limit = observation_limit
        self._oracles: list[Oracle] = oracles
        self._user = 0  # the user turn being answered (multi-turn tasks)
        self._turn = 0  # model calls within this user turn
        self._turns: list[list[tuple[TracedCall, ...]]] = []  # per user turn: the model turns of calls
        self._answers: list[Any] = []
        self._context = context
        self._planned = False

    def start_turn(self, index: int) -> None:
        """The harness sends user turn ``index`` next (multi-turn tasks): answer that turn's plan from its start."""
        self._user, self._turn = index, 0

    def _plan(self) -> None:
        """Run the plans on the shadow tools (on the first model call: its cost is the model's, not the harness's).

        A multi-turn task's plans run one after another on the same shadow tools, as its turns do."""
        if self._planned or self.kind == "codeact":
            return
        context = self._context
        with tempfile.TemporaryDirectory(prefix="oracle-shadow-", dir=context.workdir.parent) as shadow_dir:
            shadow = TaskContext(task_id=context.task_id, workdir=Path(shadow_dir), files=dict(context.files),
                                 repeat=context.repeat, seed=context.seed)
            tools = {t.name: t for t in self.task.build_tools(shadow)}
            for oracle in self._oracles:
                if oracle.reply is not None:
                    self._turns.append([])
                    self._answers.append(oracle.reply)
                    continue
                trace: PlanTrace = run_plan(oracle.plan, tools)
                turns = list(trace.turns)
                if self.kind != "react-fc":  # one action per turn
                    turns = [(c,) for turn in turns for c in turn]
                self._turns.append(turns)
                self._answers.append(trace.answer)
        self._planned = True

    def __repr__(self) -> str:
        return f"OracleModel(task={self.task.key!r}, kind={self.kind!r})"

    @property
    def planned_turns(self) -> int:
        """Model calls this oracle needs (over every user turn): its tool-call turns plus each final answer."""
        self._plan()
        if self.kind == "codeact":
            return len(self._oracles)
        return sum(len(turns) + 1 for turns in self._turns)

    # --- the Model protocol ----------------------------------------------------------------

    def complete(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None) -> ModelResponse:
        self._plan()
        reply = self._reply(list(messages))
        self._turn += 1
        return self._response(messages, tools, reply)

    # --- replies ---------------------------------------------------------------------------

    def _reply(self, messages: list[Message]) -> Message:
        oracle = self._oracles[min(self._user, len(self._oracles) - 1)]
        if self.kind == "codeact":
            if self._turn == 0:
                if oracle.reply is not None:  # prose, no code: the agent's answer for this turn
                    return Message("assistant", oracle.reply)
                return Message("assistant", f"```python\n{oracle.code_action()}\n```")
            last = next((m.content for m in reversed(messages) if m.role == "user"), "")
            return Message("assistant", "The oracle's code action did not finish the task. Its output:\n"
                           + last[:2000])
        turns = self._turns[self._user] if self._user < len(self._turns) else []
        if self._turn > 0:
            problem = self._check_observations(messages, turns[self._turn - 1] if self._turn <= len(turns) else ())
            if problem:
                return Message("assistant", f"Final Answer: oracle stopped: {problem}")
        if oracle.reply is not None and self._turn == 0:
            return Message("assistant", oracle.reply if self.kind == "react-fc" else f"Final Answer: {oracle.reply}")
        if self._turn < len(turns):
            return self._action(turns[self._turn])
        if self._turn == len(turns):
            return self._final()
        return Message("assistant", "Final Answer: oracle stopped: the agent asked for more turns than the plan has")

    def _call_id(self, turn: int, index: int) -> str:
        return f"call_{self._user}_{turn}_{index}" if self.task.turns else f"call_{turn}_{index}"

    def _action(self, calls: tuple[TracedCall, ...]) -> Message:
        if self.kind == "react-fc":
            requests = tuple(
                ToolCallRequest(self._call_id(self._turn, i), c.call.name, json.dumps(c.arguments, ensure_ascii=False))
                for i, c in enumerate(calls)
            )
            return Message("assistant", "", tool_calls=requests)
        (c,) = calls
        if self.kind == "react-json":
            action = json.dumps({"name": c.call.name, "arguments": c.arguments}, ensure_ascii=False)
            return Message("assistant", f"Action: {action}")
        parts = [python_literal(a) for a in c.call.args] + [f"{k}={python_literal(v)}"
                                                            for k, v in c.call.kwargs.items()]
        return Message("assistant", f"Action: {c.call.name}({', '.join(parts)})")

    def _final(self) -> Message:
        answer = self._answers[self._user] if self._user < len(self._answers) else None
        if self.kind == "react-fc":
            request = ToolCallRequest(self._call_id(self._turn, 0), FINAL_ANSWER,
                                      json.dumps({"answer": answer}, ensure_ascii=False))
            return Message("assistant", "", tool_calls=(request,))
        if self.kind == "react-json":
            return Message("assistant", "Action: " + json.dumps(
                {"name": FINAL_ANSWER, "arguments": {"answer": answer}}, ensure_ascii=False))
        return Message("assistant", f"Action: {FINAL_ANSWER}(answer={python_literal(answer)})")

    def _check_observations(self, messages: list[Message], calls: tuple[TracedCall, ...]) -> str | None:
        """None when the agent showed exactly what the shadow's calls returned; else what differs."""
        expected = [observation_text(c.value, self.observation_limit) for c in calls]
        if self.kind == "react-fc":
            got: dict[str, str] = {}
            for m in reversed(messages):
                if m.role == "assistant":
                    break
                if m.role == "tool" and m.tool_call_id is not None:
                    got[m.tool_call_id] = m.content
            for i, (c, want) in enumerate(zip(calls, expected, strict=True)):
                have = got.get(self._call_id(self._turn - 1, i))
                if have != want:
                    return f"the result of {c.call.name} was {_clip(have)}, the plan expected {_clip(want)}"
            return None
        last = next((m for m in reversed(messages) if m.role == "user"), None)
        want = "Observation: " + expected[0]
        if last is None or last.content != want:
            return (f"the result of {calls[0].call.name} was {_clip(last.content if last else None)}, "
                    f"the plan expected {_clip(want)}")
        return None

    def _response(self, messages: Sequence[Message], tools: Sequence[dict] | None, reply: Message) -> ModelResponse:
        prompt_chars = sum(len(m.content) + sum(len(c.name) + len(c.arguments) for c in m.tool_calls)
                           for m in messages)
        if tools:
            prompt_chars += len(json.dumps(list(tools), ensure_ascii=False))
        reply_chars = len(reply.content) + sum(len(c.name) + len(c.arguments) for c in reply.tool_calls)
        usage = Usage(estimate_tokens(prompt_chars), estimate_tokens(reply_chars), 1)
        return ModelResponse(message=reply, usage=usage, duration=0.0, model=ORACLE,
                             finish_reason="tool_calls" if reply.tool_calls else "stop")


def _clip(text: str | None, limit: int = 300) -> str:
    if text is None:
        return "nothing"
    text = repr(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
