"""Events a run yields, and the records it leaves: Step and RunResult.

The agent never prints; it yields these. The CLI renders them, the run log
stores them, a UI can stream them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal

from typing_extensions import TypeVar

from .messages import Usage

#: ``interrupted``: the process running it ended before it could (found and marked later).
#: ``budget_exceeded``: a RunLimits budget (model calls, tokens, dollars) was spent, by this run or the tree it is in.
#: ``invalid_output``: the run had an ``output_type`` and no answer fitted it (:mod:`codeact.output`;
#: ``RunResult.answer`` keeps the last value).
RunStatus = Literal["running", "success", "max_steps", "error", "cancelled", "interrupted", "budget_exceeded",
                    "invalid_output"]

#: The type of a run's answer (``output_type=``); Any when the run asked for none.
AnswerT = TypeVar("AnswerT", default=Any)


@dataclass(frozen=True, kw_only=True)
class Event:
    run_id: str
    step: int = 0  # 1-based step number; 0 for run-level events
    time: float = field(default_factory=time.time)


@dataclass(frozen=True, kw_only=True)
class RunStarted(Event):
    task: str
    model: str
    backend: str  # the sandbox backend; "host" for agents that run no code (ReAct)
    tools: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    #: Which agent: "codeact", "react-fc", "react-json" or "react-text".
    agent: str = "codeact"
    #: The system prompt's name and version (``codeact.prompts``); "custom" and a hash for your own.
    prompt: str = ""
    prompt_version: str = ""
    #: The run (and its step) whose tool call started this one (``agent.as_tool``); None for a top-level run.
    parent_run_id: str | None = None
    parent_step: int | None = None


@dataclass(frozen=True, kw_only=True)
class TurnMessage(Event):
    """The user message a turn added to the conversation, exactly as the model reads it: the task with what the
    agent added (new files, the answer's type, what a restore brought back, the analyst's own work). Recorded in
    the run log, not yielded to the run's caller: a resumed session rebuilds its history from these
    (:mod:`codeact.transcript`)."""

    text: str
    #: The system prompt, on the conversation's first turn ("" after).
    system: str = ""


@dataclass(frozen=True, kw_only=True)
class ModelOutput(Event):
    text: str
    usage: Usage = field(default_factory=Usage)
    duration: float = 0.0
    input_messages: int = 0
    input_chars: int = 0
    #: Native function calls the model asked for (function calling): ``{"id", "name", "arguments"}``
    #: with ``arguments`` the JSON text exactly as the model produced it.
    tool_calls: list[dict[str, str]] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class TextDelta(Event):
    """A streamed piece of model output (only when the model streams)."""

    text: str


@dataclass(frozen=True, kw_only=True)
class CodeAction(Event):
    code: str


@dataclass(frozen=True, kw_only=True)
class CodeOutput(Event):
    """Output of the running code action as it arrives (stdout or stderr)."""

    stream: str
    text: str


@dataclass(frozen=True, kw_only=True)
class ToolCall(Event):
    """A tool call made by the code action; ``arguments`` and ``result`` are
    :func:`codeact.values.preview` values (bounded JSON)."""

    name: str
    arguments: dict[str, Any]
    result: Any = None
    error: str | None = None
    duration: float = 0.0
    #: The run this call started, when the tool is an agent (``agent.as_tool``), and how it ended.
    child_run_id: str | None = None
    child_status: str | None = None


@dataclass(frozen=True, kw_only=True)
class ToolProgress(Event):
    """A tool call still running says how far it got (an MCP server's progress notification)."""

    name: str
    progress: float
    total: float | None = None
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class PackageInstall(Event):
    """Packages installed into the sandbox (or refused): up front (``packages=``, step 0) or by the code.

    ``packages`` are ``{"name", "version", "size", "installed_bytes", "requested"}`` dicts (what was
    added), ``present`` ``[name, version]`` pairs that were already there; ``error_kind`` is one of
    ``sandbox.packages.PackageInstallError``'s kinds when it failed.
    """

    requirements: list[str]
    source: str  # "upfront" or "runtime"
    packages: list[dict[str, Any]] = field(default_factory=list)
    present: list[list[str]] = field(default_factory=list)
    seconds: float = 0.0
    resolved_from_cache: bool = False
    downloaded: int = 0
    error_kind: str | None = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class NetworkRequest(Event):
    """A request the code made through the sandbox's network policy (``sandbox.NetworkPolicy``), allowed or
    refused. ``record`` is the proxy's record as JSON (``sandbox.network.NetworkRecord.to_json``): host, port,
    method, allowed, status, bytes each way, duration, kind, reason, and the names (never the values) of the
    secret headers it added. A request whose connection outlived its code action is reported with the next one.
    """

    host: str
    method: str
    allowed: bool
    status: int | None = None
    record: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Observation(Event):
    text: str  # exactly what the model will see
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    duration: float = 0.0
    truncated: bool = False
    artifacts: list[str] = field(default_factory=list)
    images: list[bytes] = field(default_factory=list, repr=False)
    #: The code's rich outputs in display order, as MIME bundles (``{"text/html": str,
    #: "image/png": bytes, "text/plain": str, ...}``), for UIs: tables, plots, SVG, HTML.
    #: Sent by the sandbox, so hostile: render them sanitised. Bounded (see ``code_artifacts.MAX_OUTPUT_TEXT``).
    outputs: list[dict[str, str | bytes]] = field(default_factory=list, repr=False)
    #: The images sent to the model with this observation, in order: names of the run's artifacts.
    sent_images: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class FinalAnswer(Event):
    answer: Any
    status: RunStatus


@dataclass(frozen=True, kw_only=True)
class ErrorEvent(Event):
    message: str
    kind: str = "error"  # parse, model, sandbox, tool, internal
    fatal: bool = False


@dataclass(frozen=True, kw_only=True)
class Compacted(Event):
    """The history was folded to fit the model's context window (:mod:`codeact.compaction`).

    ``reason``: ``"budget"`` (the prompt would pass its share of the window) or ``"overflow"``
    (the endpoint refused a prompt as too long; the call is retried). The counts are what this
    compaction folded; ``turns_folded_total`` how many turns the "session so far" block holds.
    ``usage`` is the summary call's (``condenser="summary"``), counted in the run's usage.
    """

    reason: str = "budget"
    observations_masked: int = 0
    actions_shortened: int = 0
    #: Earlier turns' user messages cut to their head and a line saying where their content went.
    messages_shortened: int = 0
    turns_folded: int = 0
    turns_folded_total: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    budget: int = 0
    window: int | None = None
    seconds: float = 0.0
    summary: bool = False
    usage: Usage = field(default_factory=Usage)
    #: What is folded after this compaction, as plain data (:func:`codeact.compaction.folded_state`):
    #: a resumed session folds its rebuilt history the same way.
    folded: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Step:
    """One model turn and the action it took."""

    index: int
    model_output: str = ""
    code: str | None = None
    observation: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model_time: float = 0.0
    sandbox_time: float = 0.0
    duration: float = 0.0
    error: str | None = None


@dataclass
class RunResult(Generic[AnswerT]):
    """How a run ended: ``status``, ``answer``, its steps, usage and artifacts.

    ``answer`` is what ``final_answer()`` was given (or the reply's text). With
    ``output_type=T`` it is a validated ``T`` when :attr:`ok`; at status
    ``invalid_output`` it is the last value the model gave (not a ``T``) and
    ``error`` says why it did not fit; at ``max_steps`` the last value tried
    (None when there was none).
    """

    run_id: str
    task: str
    answer: AnswerT = None  # type: ignore[assignment]  # None until the run answers
    status: RunStatus = "running"
    steps: list[Step] = field(default_factory=list)
    #: What this run's own model calls spent (tokens, and dollars when prices are known).
    usage: Usage = field(default_factory=Usage)
    duration: float = 0.0
    artifacts: list[Path] = field(default_factory=list)
    error: str | None = None
    #: What this run and every run it started spent together: agents it called as tools
    #: (``agent.as_tool``), and the agents they called, at any depth. Equal to ``usage`` for a run
    #: that called no agent; set when the run ends.
    tree_usage: Usage = field(default_factory=Usage)

    @property
    def ok(self) -> bool:
        return self.status == "success"


@dataclass(frozen=True, kw_only=True)
class RunFinished(Event):
    result: RunResult
