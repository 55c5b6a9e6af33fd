"""What the run log hands back: runs, steps, tool calls, artifacts and errors as frozen dataclasses.

Values a run produced (``RunRecord.answer``, ``ToolCallRecord.arguments`` and
``result``) are :func:`codeact.values.preview` trees: JSON values stay
themselves, other types are tagged nodes of the sandbox codec. Use
:func:`codeact.values.show` for readable text and
:func:`codeact.values.restore` for the Python value, as far as it was kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..messages import Usage


@dataclass(frozen=True, kw_only=True)
class ToolCallRecord:
    """One host tool call made by a step (from its code, or as a ReAct action)."""

    step: int
    name: str
    arguments: Any = None
    result: Any = None
    error: str | None = None
    duration: float = 0.0
    time: float | None = None


@dataclass(frozen=True, kw_only=True)
class ArtifactRecord:
    """A reference to a file a run produced (the file itself is not stored)."""

    step: int  # 0 for the run's final artifacts
    path: str
    mime: str | None = None
    size: int | None = None  # None when the file did not exist when recorded


@dataclass(frozen=True, kw_only=True)
class ErrorRecord:
    """An :class:`~codeact.events.ErrorEvent` as recorded (``kind`` "action" or "parse": an invalid action)."""

    step: int
    message: str
    kind: str = "error"
    fatal: bool = False
    time: float | None = None


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """One model turn and the action it took, as stored."""

    step: int
    model_output: str = ""
    code: str | None = None
    observation: str | None = None
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    truncated: bool = False
    usage: Usage = field(default_factory=Usage)
    model_time: float = 0.0
    sandbox_time: float = 0.0
    input_messages: int = 0
    input_chars: int = 0
    started: float | None = None
    duration: float = 0.0
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    artifacts: list[ArtifactRecord] = field(default_factory=list)
    images: list[bytes] = field(default_factory=list, repr=False)


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """A run without its steps: what :meth:`RunLog.list_runs` returns.

    ``agent`` is ``codeact``, ``react-fc``, ``react-json`` or ``react-text``
    (None for runs recorded before the log kept it).
    """

    id: str
    task: str
    model: str | None
    backend: str | None
    status: str
    started: float | None
    finished: float | None
    duration: float | None
    step_count: int
    usage: Usage
    error: str | None = None
    agent: str | None = None
    #: The run whose tool call started this one (an agent called as a tool), and its step; None otherwise.
    parent_run_id: str | None = None
    parent_step: int | None = None


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """A whole run: its fields, steps (with tool calls, artifacts, images) and errors.

    ``answer`` is the :func:`codeact.values.preview` of what the run answered:
    strings, numbers, lists and string-keyed dicts come back as such, other
    values (a tuple, bytes, a DataFrame) as the codec's tagged nodes;
    ``answer_type`` names the original Python type and :attr:`answer_text`
    renders it. ``artifacts`` holds the run's final artifacts; per-step
    artifacts are on each :class:`StepRecord`. ``agent``, ``prompt`` and
    ``prompt_version`` say which agent and prompt produced the run, and
    ``bench_episode`` which benchmark episode it was (see ``codeact bench``).
    """

    id: str
    task: str
    model: str | None
    backend: str | None
    tools: list[str]
    files: list[str]
    status: str
    answer: Any
    answer_type: str | None
    error: str | None
    started: float | None
    finished: float | None
    duration: float | None
    usage: Usage
    steps: list[StepRecord] = field(default_factory=list)
    artifacts: list[ArtifactRecord] = field(default_factory=list)
    errors: list[ErrorRecord] = field(default_factory=list)
    agent: str | None = None
    prompt: str | None = None
    prompt_version: str | None = None
    bench_episode: str | None = None
    #: The run whose tool call started this one (an agent called as a tool), and its step; None otherwise.
    parent_run_id: str | None = None
    parent_step: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "success"

    @property
    def step_count(self) -> int:
        return len(self.steps)

    @property
    def answer_text(self) -> str:
        """The answer as readable text (a string as it is, anything else as its repr)."""
        from ..values import show

        return "" if self.answer is None else show(self.answer)

    @property
    def invalid_actions(self) -> int:
        """Replies that held no usable action: no code (CodeAct), a malformed or unknown call (ReAct)."""
        return sum(1 for e in self.errors if e.kind in ("parse", "action"))


@dataclass(frozen=True, kw_only=True)
class SnapshotRecord:
    """A saved chat session as the run log keeps it (see :mod:`codeact.sessions`).

    ``runs`` are the conversation's runs, oldest first; it holds every step
    of them up to ``step`` of ``run_id`` (the last completed step when it
    was saved). ``manifest`` is the snapshot's manifest as the host
    validated it (:meth:`sandbox.snapshot.Manifest.to_json`): every text in
    it is bounded and escaped, and it is still the sandbox's word, so show
    it escaped for the medium (terminal markup, HTML, Markdown).
    """

    id: str
    session: str
    path: str
    size: int
    created: float
    saved: float
    runs: list[str]
    run_id: str | None = None
    step: int = 0
    agent: str | None = None
    parent: str | None = None
    since: str | None = None
    backend: str | None = None
    packages: list[str] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)
