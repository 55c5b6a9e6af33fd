"""The task-suite format: a :class:`Task` says what to do, with which tools and files, and how to check it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Sequence, Union

from ..errors import BenchError
from ..tools import Tool, ensure_tools
from ._checkers import CheckSpec, resolve_checker
from ._plan import Plan, plan_code

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")

#: Default turn limit of a task: model calls before an episode stops (and counts as failed).
DEFAULT_MAX_TURNS = 20


@dataclass(frozen=True)
class TaskContext:
    """What a tool factory gets for one episode: build fresh tools around it.

    Attributes:
        task_id: the task's id.
        workdir: a fresh, empty directory on the host for this episode (tools
            may write there; a checker sees the files it holds).
        files: the task's files by name, as host paths (read-only inputs).
        repeat: which repetition of the task this is (0-based).
        seed: the run's seed, for tools that draw random numbers.
    """

    task_id: str
    workdir: Path
    files: dict[str, Path] = field(default_factory=dict)
    repeat: int = 0
    seed: int = 0
    #: The episode's own scratch space: a tool factory leaves here what its checker needs (the tools'
    #: state, e.g. the API instances of a BFCL task); the checker finds it as ``CheckContext.state``.
    state: dict[str, Any] = field(default_factory=dict)


ToolFactory = Callable[[TaskContext], Sequence[Union[Tool[Any, Any], Callable[..., Any]]]]
ToolsSpec = Union[Sequence[Union[Tool[Any, Any], Callable[..., Any]]], ToolFactory]


@dataclass(frozen=True)
class Oracle:
    """A task's reference solution in both styles.

    ``plan`` is a generator function (see :mod:`codeact.bench._plan`): the
    tool-call sequence, turn by turn, and the answer; ReAct oracles replay it.
    ``code`` is the CodeAct code action; by default it is derived from the plan.
    """

    plan: Plan
    code: str | None = None
    #: A reply in prose instead of acting (every agent kind answers with this text and calls no tool):
    #: a turn the agent cannot do yet, where it should ask for what is missing.
    reply: str | None = None

    def code_action(self) -> str:
        return self.code if self.code is not None else plan_code(self.plan)


def _no_calls() -> Any:
    return None
    yield  # pragma: no cover - makes this a generator function


def reply_oracle(text: str) -> Oracle:
    """An oracle that answers ``text`` without calling a tool (e.g. asks the user for a missing detail)."""
    return Oracle(plan=_no_calls, code="", reply=text)


@dataclass(frozen=True)
class UserTurn:
    """One user message of a multi-turn task, sent to the same session after the previous turn ended.

    Attributes:
        message: what the user says.
        max_turns: model calls allowed in this user turn.
        expected: the expected answer of this turn, handed to the task's checker.
        oracle: the reference solution of this turn (its plan runs on the state
            the earlier turns left).
        new_tools: names of the task's tools first offered in this turn (held
            back before it); the agent is told about them with the message.
    """

    message: str
    max_turns: int = DEFAULT_MAX_TURNS
    expected: Any = None
    oracle: Oracle | None = None
    new_tools: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.message, str) or not self.message.strip():
            raise BenchError("a user turn's message is empty")
        if not isinstance(self.max_turns, int) or self.max_turns < 1:
            raise BenchError(f"a user turn's max_turns must be a positive integer, got {self.max_turns!r}")
        object.__setattr__(self, "new_tools", tuple(self.new_tools))


@dataclass(frozen=True)
class Task:
    """One benchmark task.

    Attributes:
        id: unique within its suite (letters, digits, ``_.-``).
        instruction: what the agent is asked.
        tools: the tools it may use, or a factory ``(TaskContext) -> tools``
            that builds fresh ones per episode (tools can be stateful).
        expected: the expected answer, handed to the checker.
        check: a checker name (``exact``, ``numeric``, ``unordered``,
            ``artifact``) or a callable; see :mod:`codeact.bench._checkers`.
        files: input files, uploaded to the sandbox for CodeAct and described
            to ReAct agents (whose tools read them on the host). Relative
            paths are relative to the suite's directory.
        max_turns: model calls allowed before the episode stops (a failure;
            counted at this limit).
        tags: free-form labels (domain, skill) for filtering and reports.
        oracle: the reference solution (needed for ``--model oracle``).
        suite: the suite's name (filled in when the suite loads).
        turns: a multi-turn task's user turns (:class:`UserTurn`), sent one
            after another to one session (one kernel for CodeAct, one
            conversation for ReAct), each with its own turn limit. The checker
            runs after every user turn (``CheckContext.turn`` says which; the
            answer and expected value are that turn's); the task is solved
            when every turn passes. ``instruction`` may then be empty (it
            becomes the first turn's message), and ``max_turns`` is the sum
            of the turns' limits.
        tool_disclosure: what the ``codeact`` agent shows of the tools:
            ``auto`` (every stub while they fit its budget, else a catalogue
            to search) or ``all`` (every stub, for a benchmark that shows every
            model every function). Agent variants that fix it keep theirs.

    Example::

        Task(
            id="weather-warmest",
            instruction="Which of Oslo, Rome and Cairo is warmest tomorrow? Answer with the city.",
            tools=[get_weather],
            expected="Cairo",
            oracle=Oracle(plan=warmest_plan),
        )
    """

    id: str
    instruction: str
    tools: ToolsSpec = ()
    expected: Any = None
    check: CheckSpec = "exact"
    files: tuple[Path, ...] = ()
    max_turns: int = DEFAULT_MAX_TURNS
    tags: tuple[str, ...] = ()
    oracle: Oracle | None = None
    suite: str = ""
    turns: tuple[UserTurn, ...] = ()
    tool_disclosure: Literal["auto", "all"] = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not _ID.match(self.id):
            raise BenchError(f"task id {self.id!r} must be 1-100 letters, digits, '_', '.' or '-'")
        object.__setattr__(self, "turns", tuple(self.turns))
        if self.turns:
            if not all(isinstance(t, UserTurn) for t in self.turns):
                raise BenchError(f"task {self.id}: turns must be UserTurn objects")
            if not (isinstance(self.instruction, str) and self.instruction.strip()):
                object.__setattr__(self, "instruction", self.turns[0].message)
            object.__setattr__(self, "max_turns", sum(t.max_turns for t in self.turns))
            if self.turns[0].new_tools:
                raise BenchError(f"task {self.id}: the first turn cannot add tools (list them in tools)")
        if not isinstance(self.instruction, str) or not self.instruction.strip():
            raise BenchError(f"task {self.id}: the instruction is empty")
        if not isinstance(self.max_turns, int) or self.max_turns < 1:
            raise BenchError(f"task {self.id}: max_turns must be a positive integer, got {self.max_turns!r}")
        object.__setattr__(self, "files", tuple(Path(f) for f in self.files))
        object.__setattr__(self, "tags", tuple(self.tags))
        if self.tool_disclosure not in ("auto", "all"):
            raise BenchError(f"task {self.id}: tool_disclosure must be 'auto' or 'all', got {self.tool_disclosure!r}")
        resolve_checker(self.check)  # fail at load time, not in the middle of a run

    @property
    def key(self) -> str:
        """``suite/id``: unique across the suites of a run."""
        return f"{self.suite}/{self.id}" if self.suite else self.id

    def build_tools(self, ctx: TaskContext) -> list[Tool[Any, Any]]:
        """Fresh tools for one episode (the factory's, or the listed ones).

        Raises:
            BenchError: the factory failed or returned something that is not a list of tools.
        """
        spec = self.tools
        if isinstance(spec, Tool):  # callable, but not a factory
            raise BenchError(f"task {self.key}: tools= is one tool; give a list of tools (or a factory)")
        try:
            items = spec if isinstance(spec, (list, tuple)) or not callable(spec) else spec(ctx)
            return ensure_tools(items)
        except BenchError:
            raise
        except Exception as exc:
            raise BenchError(f"task {self.key}: building its tools failed: {type(exc).__name__}: {exc}") from exc

    def checker(self) -> Any:
        return resolve_checker(self.check)

    @property
    def multi_turn(self) -> bool:
        """True when the task has user turns (:class:`UserTurn`)."""
        return bool(self.turns)

    def turn_oracle(self, index: int) -> Oracle | None:
        """The reference solution of user turn ``index`` (the task's own for a single-turn task)."""
        if not self.turns:
            return self.oracle
        return self.turns[index].oracle


@dataclass(frozen=True)
class Suite:
    """A named list of tasks (see :func:`codeact.bench.load_suite` for where suites come from).

    ``version`` is the suite module's ``VERSION`` (if it sets one);
    :meth:`fingerprint` tells two versions apart even when nobody bumped it.
    """

    name: str
    tasks: tuple[Task, ...]
    description: str = ""
    source: str = ""  # where it was loaded from
    version: str = ""

    def fingerprint(self) -> str:
        """``[VERSION/]sha:<12 hex>``: a digest of every task's id, instruction, expected answer, checker,
        turn limit, tags and files (their content), so results of a changed suite are never mixed up."""
        import hashlib
        import json

        digest = hashlib.sha256()
        for task in self.tasks:
            files: list[list[str | None]] = []
            for f in task.files:
                try:
                    files.append([f.name, hashlib.sha256(f.read_bytes()).hexdigest()])
                except OSError:
                    files.append([f.name, None])
            record = [task.id, task.instruction, _canon(task.expected), _canon(task.check), task.max_turns,
                      list(task.tags), files]
            if task.turns:  # only then: the digests of single-turn suites stay as they were
                record.append([[t.message, _canon(t.expected), t.max_turns, list(t.new_tools)] for t in task.turns])
            digest.update(json.dumps(record, sort_keys=True, ensure_ascii=False).encode("utf-8"))
        sha = f"sha:{digest.hexdigest()[:12]}"
        return f"{self.version}/{sha}" if self.version else sha

    def task(self, task_id: str) -> Task:
        for t in self.tasks:
            if t.id == task_id:
                return t
        raise BenchError(f"suite {self.name} has no task {task_id!r}")


def _canon(value: Any) -> Any:
    """A JSON-able form of a task value that is the same in every process (no ids, no hash order)."""
    import dataclasses
    import math

    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [_canon(v) for v in value]
    if isinstance(value, dict):
        return [[_canon(k), _canon(v)] for k, v in sorted(value.items(), key=lambda kv: repr(_canon(kv[0])))]
    if isinstance(value, (set, frozenset)):
        return sorted((_canon(v) for v in value), key=repr)
    if isinstance(value, Path):
        return value.name
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"$": type(value).__qualname__,
                **{f.name: _canon(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if callable(value):
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', type(value).__qualname__)}"
    text = repr(value)
    return type(value).__qualname__ if " at 0x" in text else text
