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

import collections
import contextlib
import hashlib
import os
import queue
import threading
import time
import uuid
from contextlib import nullcontext as _nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterator, Mapping, Sequence, TypeVar, get_args, overload

from sandbox.errors import SandboxError
from sandbox.functions import HostFunction
from sandbox.hostfiles import UnsafePath, check_relative_path, write_confined
from sandbox.result import ExecutionResult

from ._run import (
    tools_to_add,
    AgentRuns,
    ApprovalRequest,
    Approvals,
    Approver,
    ainvoke_tool,
    invoke_tool,
    model_turn,
    open_log,
    recorder,
)
from ._run import result_of as _result_of
from .agent_tool import begin_run
from .compaction import Compactor, Condenser, compacted_call, compaction_events
from .compaction import check_options as check_compaction
from .errors import BudgetExceeded, CodeActError, ModelError, RunCancelled, SavedSessionError
from .events import (
    CodeAction,
    CodeOutput,
    ErrorEvent,
    Event,
    FinalAnswer,
    Observation,
    RunFinished,
    RunResult,
    RunStarted,
    Step,
    ToolCall,
)
from .config import images_enabled
from .images import StepImages, image_suffix, is_image_mime, is_image_name, step_images, wants_images
from .messages import Message
from .observation import NOTHING_PRINTED, ObservationParts, format_observation, truncate_middle
from .output import DEFAULT_RETRIES, AnswerCheck, OutputSpec, gave_up
from .parsing import parse_reply
from .prompting import FileDescription, render_system_prompt
from .prompts import Prompt, load_prompt
from .events import NetworkRequest, PackageInstall, ToolProgress
from .tools import Tool, ensure_tools
from .tools._context import RunHooks, run_hooks
from .catalog import DEFAULT_TOOL_BUDGET, Disclosure, ToolSurface, check_disclosure
from . import telemetry
from .values import preview

if TYPE_CHECKING:  # pragma: no cover
    from sandbox import BackendName
    from sandbox.base import Sandbox, SessionSource
    from sandbox.packages import PackagePolicy

    from .budget import Prices
    from .models import Model
    from .privacy import PrivacyFilter
    from .runlog import RunLog
    from .skills import SkillStore

#: An answer's type (``output_type=``).
T = TypeVar("T")

#: Name of the function that ends a run from inside the code.
FINAL_ANSWER = "final_answer"

#: Added to the observation of a code action :meth:`ChatSession.interrupt` stopped, so that the model
#: knows the KeyboardInterrupt came from the user (Ctrl-C, Stop) and not from its own code.
USER_INTERRUPT_NOTE = ("Note: the user interrupted this code (Ctrl-C / Stop). Variables it set before the "
                       "interruption are kept.")


@dataclass(frozen=True)
class RunLimits:
    """Budgets of one run that the code in the sandbox could otherwise run up.

    Files the code writes in the working directory are copied to the run's
    output directory after each step, within these caps (beyond them, the
    observation says what was not copied).

    ``max_model_calls``, ``max_tokens`` and ``max_cost`` (dollars) hold for the
    run and every agent it calls (``agent.as_tool``): checked after each model
    call and before the next, they end the whole tree with status
    ``budget_exceeded`` (see :mod:`codeact.budget`). ``prices`` maps model names
    to :class:`~codeact.budget.Prices` for models that do not know their own.
    ``max_depth``: how deep agents may call agents below a top-level run.
    """

    max_artifact_files_per_step: int = 20
    max_artifact_bytes_per_step: int = 50 * 1024 * 1024
    max_artifact_files_per_run: int = 200
    max_artifact_bytes_per_run: int = 200 * 1024 * 1024
    #: Images (figures, image files, tool images) sent to the model with one observation; the rest are named.
    max_images_per_step: int = 4
    #: Longest side, in pixels, of an image sent to the model (it is downscaled and re-encoded).
    max_image_side: int = 1024
    max_model_calls: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    prices: Mapping[str, Prices] | None = None
    max_depth: int = 3

    def __post_init__(self) -> None:
        for name in ("max_model_calls", "max_tokens", "max_cost"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise CodeActError(f"RunLimits({name}={value!r}): a budget must be > 0 (or None for no limit)")
        if self.max_depth < 0:
            raise CodeActError(f"RunLimits(max_depth={self.max_depth}): must be >= 0")


#: Characters of text (HTML, SVG, Markdown...) the rich outputs of one Observation event carry;
#: beyond it an output is replaced by a one-line note, so events and the run log stay small.
MAX_OUTPUT_TEXT = 2_000_000


def _output_bundles(outputs: Sequence[Any], limit: int = MAX_OUTPUT_TEXT) -> list[dict[str, str | bytes]]:
    """The code's rich outputs as MIME bundles for :class:`Observation`, their text within ``limit``.

    Image bytes are kept as they are: the sandbox's output limits already bound them.
    """
    bundles: list[dict[str, str | bytes]] = []
    room = limit
    for out in outputs:
        size = sum(len(v) for v in out.data.values() if isinstance(v, str))
        if size <= room:
            room -= size
            bundles.append(dict(out.data))
        else:
            bundles.append({"text/plain": f"[{out.mime} output of {size:,} characters not kept for display]"})
    return bundles


#: Tools of several threads may save artifacts at once; the budget and the names are shared.
_ARTIFACT_LOCK = threading.Lock()


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
    #: Where tool-call events go as calls complete (set for the duration of a code action; the
    #: code action puts its output and its end there too).
    tool_events: "queue.Queue[Any] | None" = None
    #: Where tools' binary results go (RunContext.add_artifact), within the run's artifact budget.
    output_dir: Path | None = None
    budget: Any = None
    result: Any = None
    #: Names of the artifacts tools saved during the current step (for its Observation).
    tool_artifacts: list[str] = field(default_factory=list)
    #: (name, bytes) of the images among them, for the model (codeact.images).
    tool_images: list[tuple[str, bytes]] = field(default_factory=list)
    #: A code action is running in the sandbox now (set by ``_run_code``).
    running_code: bool = False
    #: The user interrupted the running code action (:meth:`ChatSession.interrupt`).
    user_interrupted: bool = False
    #: The run's OpenTelemetry spans (codeact.telemetry), None when tracing is off; ``action_ctx``
    #: is the running code action's context, the parent of the tool calls its code makes.
    trace: Any = None
    action_ctx: Any = None
    #: The run's place in a tree of agents: parent, budget, approver (codeact.agent_tool.RunLink).
    link: Any = None

    def report(self, event: ToolCall | ToolProgress) -> None:
        if self.tool_events is not None:
            self.tool_events.put(event)


class CodeActAgent(AgentRuns):
    """A CodeAct agent over a model, tools and a sandbox.

    Args:
        model: anything implementing :class:`codeact.models.Model`.
        tools: :class:`Tool` objects or plain functions (converted with ``@tool``).
        sandbox: ``"docker"`` (the default: isolated; an error with what to do
            when Docker is not ready, never a silent fallback), ``"local"`` or
            ``"restricted"`` (not isolated: explicit choices that warn), a
            started sandbox object you own (reused across runs, not closed),
            or a session source such as :class:`sandbox.EnginePool` (each run
            or chat gets a session on the engine with the most room).
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
        history_budget: tokens the prompt may take before compaction folds old steps (None: no budget of
            its own). With a known context window the budget is the smaller of this and 75% of the window
            (less the reply's ``max_tokens``); see :mod:`codeact.compaction`.
        condenser: how old turns are folded: ``"fold"`` (a "session so far" block with the user's
            messages, the answers, the workspace's files and the kernel's variables) or ``"summary"``
            (the same, plus a summary the model writes; its calls count in the run's usage).
        system_prompt: a template overriding ``prompts/codeact.md`` (``$tools``, ``$files``, ``$workdir``).
        execution_timeout: seconds one code action may run.
        limits: artifact caps per step and per run, and the images per step the model gets and their
            size (:class:`RunLimits`; images go to the model unless ``model.vision`` is false, see
            :mod:`codeact.images`).
        packages: Python packages to install before the first step (e.g.
            ``["scikit-learn", "seaborn>=0.13"]``): resolved and fetched by the
            host, materialised once and shared read-only (docker and local
            backends; see :mod:`sandbox.packages`). The code can also call
            ``install("name")`` or ``%pip install name``; the system prompt says so.
        package_policy: a :class:`sandbox.packages.PackagePolicy` (allow/deny
            lists, size cap, index or offline wheelhouse, approval hook).
        approve_installs: installs the code asks for go through ``approve`` first
            (an :class:`ApprovalRequest` for the tool ``"install"``), as tools that
            require approval do; without ``approve`` they are denied.
        tool_disclosure: what the prompt says about the tools (see :mod:`codeact.catalog`):
            ``"all"`` every stub; ``"on_demand"`` a catalogue of the namespaces
            (``tools.<server>``, ``tools.<group>``) and ``search_tools``/``describe``;
            ``"auto"`` (default) ``all`` while the stubs fit ``tool_budget`` tokens.
        tool_budget: tokens of stubs ``auto`` still puts in the prompt (default 2,000).
        skills: skills kept across sessions (:mod:`codeact.skills`): a
            :class:`~codeact.skills.SkillStore`, a directory, ``True`` for the
            store of the project the working directory is in, or None (default: off).
            The code gets ``save_skill(func)`` and ``from skills import name``.
            Each save asks ``approve`` (a :class:`~codeact.skills.SkillApproval`
            with the whole code); without ``approve`` saves are refused.
        auto_approve_skills: save skills without asking (warns): code a model
            wrote then reaches every later session of the store unseen.
        privacy: a :class:`codeact.privacy.PrivacyFilter`: values it names reach the
            model (and the run log) as placeholders such as ``<EMAIL_1>``.
        output_retries: with ``output_type=`` (:mod:`codeact.output`), how many times an
            answer that does not fit goes back to the model before the run ends with
            status ``invalid_output`` (a run's own ``output_retries=`` wins).
    """

    def __init__(
        self,
        model: Model,
        tools: Sequence[Tool[Any, Any] | Callable[..., Any]] = (),
        *,
        sandbox: str | Sandbox | SessionSource = "docker",
        sandbox_options: dict[str, Any] | None = None,
        max_steps: int = 10,
        output_retries: int = DEFAULT_RETRIES,
        approve: Approver | None = None,
        deps: Any = None,
        log: RunLog | str | os.PathLike[str] | bool | None = True,
        output_dir: str | os.PathLike[str] | None = None,
        stream_model: bool = False,
        observation_limit: int = 8000,
        history_budget: int | None = 60_000,
        condenser: Condenser = "fold",
        system_prompt: str | None = None,
        execution_timeout: float = 60.0,
        limits: RunLimits | None = None,
        packages: Sequence[str] = (),
        package_policy: PackagePolicy | None = None,
        approve_installs: bool = False,
        tool_disclosure: Disclosure = "auto",
        tool_budget: int = DEFAULT_TOOL_BUDGET,
        skills: SkillStore | str | os.PathLike[str] | bool | None = None,
        privacy: PrivacyFilter | None = None,
        auto_approve_skills: bool = False,
    ) -> None:
        self.model = model
        self.tools = ensure_tools(tools)
        if any(t.name == FINAL_ANSWER for t in self.tools):
            raise CodeActError(f"a tool may not be named {FINAL_ANSWER!r}; the agent defines it")
        check_disclosure(tool_disclosure, tool_budget)
        self.tool_disclosure: Disclosure = tool_disclosure
        self.tool_budget = tool_budget
        self.skills = _skill_store(skills)
        if self.skills is not None:
            from .skills import SKILL_NAMES

            taken = sorted({t.name for t in self.tools} & set(SKILL_NAMES))
            if taken:
                raise CodeActError(f"a tool is named {taken[0]!r}, which skills need; rename it or leave skills off")
            if sandbox == "restricted":
                raise CodeActError("skills need the docker or local backend (they are modules the code imports)")
            if auto_approve_skills:
                import warnings

                warnings.warn(f"auto_approve_skills=True: code the model writes is saved to {self.skills.path} "
                              "without asking and offered to every later session that uses that store",
                              stacklevel=2)
        self.auto_approve_skills = bool(auto_approve_skills)
        self.privacy = privacy
        self.sandbox = sandbox
        self.sandbox_options = dict(sandbox_options or {})
        self.max_steps = max_steps
        self.output_retries = output_retries
        self.approve = approve
        self.deps = deps
        self.output_root = Path(output_dir) if output_dir else None
        self.stream_model = stream_model
        self.observation_limit = observation_limit
        check_compaction(condenser, history_budget=history_budget)
        self.history_budget = history_budget
        self.condenser: Condenser = condenser
        self.system_prompt = system_prompt
        #: The system prompt's recorded name and version (codeact.prompts).
        self.prompt = load_prompt("codeact") if system_prompt is None else Prompt.custom(system_prompt)
        self.execution_timeout = execution_timeout
        self.limits = limits or RunLimits()
        self.packages = [packages] if isinstance(packages, str) else list(packages)
        self.package_policy = package_policy
        self.approve_installs = approve_installs
        if self.packages and sandbox == "restricted":
            raise CodeActError("the restricted backend cannot install packages; use the docker backend "
                               "(or local) with packages=")
        self._log_spec = log
        self._log: Any = None

    # --- public API -------------------------------------------------------------------------

    def session(self, *, save: Any = None, resume: str | None = None) -> "ChatSession":
        """A multi-turn conversation: history and kernel state survive between turns.

        Args:
            save: when the session saves itself (:mod:`codeact.sessions`): None (only
                on :meth:`ChatSession.save`), True (when it closes), or a
                :class:`~codeact.sessions.SaveOptions` (``autosave=True``: after every
                step as well; ``store``, ``keep``).
            resume: continue a saved session: a run id, a chat session id or a snapshot
                id (or a unique prefix) from the run log. The sandbox is restored now;
                the model is told what was restored and what was lost with the next
                message. Raises :class:`~codeact.errors.SavedSessionError` when it cannot.
        """
        return ChatSession(self, save=save, resume=resume)

    # --- shared pieces --------------------------------------------------------------------

    def _runlog(self) -> Any:
        if self._log is None:
            self._log = open_log(self._log_spec)
        return self._log

    def _open_sandbox(self, functions: list[HostFunction], package_policy: Any = None,
                      restore: Any = None, start: bool = True) -> tuple[Any, bool]:
        """(sandbox, owned): a new session we must close, or the user's own; ``restore``: from this snapshot.
        ``start=False``: a new kernel sandbox is made but not started (the caller starts it)."""
        from sandbox import SessionSource, open_sandbox

        spec = self.sandbox
        if not isinstance(spec, (str, SessionSource)):  # a started sandbox the user owns
            if restore is not None:
                raise SavedSessionError("a session can be resumed only into a sandbox the agent opens itself "
                                        "(sandbox='docker', 'local' or an engine pool), not into one you pass in")
            spec.register(*functions)
            return spec, False
        options = {"timeout": self.execution_timeout, **self.sandbox_options}
        if spec != "restricted" and (self.packages or package_policy is not None):
            options.setdefault("packages", self.packages)
            options.setdefault("package_policy", package_policy)
        if restore is not None:
            return _restore_sandbox(spec, restore, functions, options), True
        if isinstance(spec, SessionSource):  # an engine pool: the session lands on the engine with the most room
            sb = spec.sandbox(functions, **options)
        else:
            # A tuple: open_sandbox's list[Callable | HostFunction] does not take our list[HostFunction].
            sb = open_sandbox(_backend_name(spec), functions=tuple(functions), **options)
        if not start:
            return sb, True
        if hasattr(sb, "start"):
            sb.start()
        elif hasattr(sb, "__enter__"):
            sb.__enter__()
        return sb, True


class _Opening:
    """A new sandbox starting on a thread of its own (its ``start()``), and how that went."""

    def __init__(self, sandbox: Any, span: Any) -> None:
        self.sandbox = sandbox
        self.error: BaseException | None = None
        self.done = threading.Event()
        threading.Thread(target=self._start, args=(span,), name="sandbox-start", daemon=True).start()

    def _start(self, span: Any) -> None:
        try:
            with span:
                self.sandbox.start()
        except BaseException as exc:  # handed to whoever waits (ChatSession._await_sandbox)
            self.error = exc
        finally:
            self.done.set()


class ChatSession:
    """One conversation with a :class:`CodeActAgent`: history and sandbox persist across turns.

    Example::

        with agent.session() as chat:
            chat.send("Load sales.csv into df", files=["sales.csv"])
            chat.send("Now plot monthly totals")
    """

    def __init__(self, agent: CodeActAgent, *, save: Any = None, resume: str | None = None) -> None:
        from .sessions import Saver, save_options

        self.agent = agent
        self.messages: list[Message] = []
        self._sandbox: Any = None
        self._owned = False
        #: The sandbox's start, running on a thread while the turn's first model call runs (see _ensure_sandbox).
        self._opening: _Opening | None = None
        self._opening_lock = threading.Lock()
        self._state: _RunState | None = None
        #: Index in ``messages`` of each turn's task, and the compaction of this history (made when first needed).
        self._turn_starts: list[int] = []
        self._compactor: Compactor | None = None
        self._files: list[FileDescription] = []
        self._uploaded: list[FileDescription] = []  # put in by upload(); the next task names them
        self._closed = False
        self._approvals = Approvals(agent.approve)
        self._installs_seen: set[int] = set()  # package install records already reported as events
        #: Network records that ended while no code ran (a tunnel a session kept open): reported with the next
        #: action. Bounded: a flood of them keeps the newest.
        self._network_pending: collections.deque[Any] = collections.deque(maxlen=1000)
        #: The privacy filter's placeholders of this session (host side only), or None.
        self._redactor = agent.privacy.session() if agent.privacy is not None else None
        #: How the tools appear in the sandbox and the prompt (set when the sandbox opens).
        self._surface: ToolSurface | None = None
        # Durable sessions (codeact.sessions): saving, and the resume note the next message carries.
        self._saver = Saver(None, save_options(save))
        self._restore_from: Any = None
        self._resume_note = ""
        #: (snapshot, why): the sandbox went away and is to be restored from that save (_recover_lost_sandbox).
        self._lost: tuple[Any, str] | None = None
        #: What a resume brought back (a :class:`sandbox.snapshot.RestoreReport`), else None.
        self.restored: Any = None
        if self._saver.options is not None or resume is not None:
            self._saver.log = agent._runlog()
            if self._saver.log is None:
                raise SavedSessionError("a saved or resumed session needs the run log (its conversation is "
                                        "rebuilt from it); pass log=True or a RunLog")
        if resume is not None:
            self._resume(resume)

    # --- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> "ChatSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def session_id(self) -> str:
        """This conversation's id in the run log (its saved snapshots carry it; ``codeact sessions``)."""
        return self._saver.session_id

    def save(self, *, timeout: float | None = None) -> Any:
        """Save the session now (sandbox snapshot + the conversation's place in the run log); not while a turn runs.

        Incremental: what did not change since this session's last save is
        not pickled or copied again. Returns the run log's
        :class:`~codeact.runlog.SnapshotRecord`.

        Raises:
            SavedSessionError: closed, nothing to save yet, no run log, or the sandbox could not be saved.
        """
        from .sessions import SAVE_TIMEOUT

        if self._closed:
            raise SavedSessionError("this chat session is closed; nothing to save")
        self._await_sandbox()
        if self._sandbox is None:
            raise SavedSessionError("nothing to save yet: the session has no sandbox before its first turn")
        if self._saver.log is None:
            self._saver.log = self.agent._runlog()
        state = self._state  # the last turn (ended: not while a turn runs); else where a resume left off
        run_id, step = (state.run_id, state.step) if state is not None else self._saver.point
        return self._saver.save(self._sandbox, run_id, step, timeout=timeout or SAVE_TIMEOUT)

    def _resume(self, key: str) -> None:
        from .prompting import FileDescription
        from .sessions import conversation, open_saved, resume_note

        record, snap = open_saved(self._saver.log, key)
        conv = conversation(self._saver.log, record)
        self._restore_from = snap
        try:
            self._ensure_sandbox()
        finally:
            self._restore_from = None
        self.restored = getattr(self._sandbox, "restored", None)
        saver = self._saver
        saver.runs, saver.last, saver.restored_from = list(record.runs), snap, record.id
        saver.point = (record.run_id, record.step)
        self._files = [FileDescription(path, size) for path, size in snap.manifest.files[:50]]
        self.messages = [Message("system", self._system_prompt()), *conv.messages]
        self._turn_starts = [1 + i for i in conv.turn_starts]
        if self.restored is not None:
            self._resume_note = resume_note(record, conv, self.restored)

    def _recover_lost_sandbox(self) -> None:
        """The session's sandbox went away since the last turn (its engine restarted, its container was removed)
        and the session was saved: open a new sandbox restored from the newest save, and tell the model with the
        next message what came back and what was lost. Without a save, the sandbox starts afresh and says so.

        Raises what the restore raises (the engine is still away): the next turn tries again.
        """
        from .sessions import recovery_note

        if self._lost is None:
            sb = self._sandbox
            why = getattr(sb, "environment_lost", None) if sb is not None and self._opening is None else None
            if not why or not self._owned or self._saver.last is None:
                return
            self._lost = (self._saver.last, str(why))
            listeners = getattr(getattr(sb, "packages", None), "listeners", None)
            if listeners is not None and self._on_install in listeners:
                listeners.remove(self._on_install)
            self._forget_network(sb)
            with contextlib.suppress(Exception):  # gone already: closing only forgets it
                sb.close()
            self._sandbox = None
        snap, why = self._lost
        self._restore_from = snap
        try:
            self._ensure_sandbox()
        finally:
            self._restore_from = None
        self._lost = None
        self.restored = getattr(self._sandbox, "restored", None)
        self._resume_note = recovery_note(snap, why, self.restored) + self._resume_note

    def _autosave(self, state: _RunState) -> Iterator[Event]:
        """Save after a step when autosave is on; a failure is a (non-fatal) error event, the turn goes on."""
        options = self._saver.options
        if options is None or not options.autosave or self._sandbox is None:
            return
        try:
            self._saver.save(self._sandbox, state.run_id, state.step, delta=True)
        except CodeActError as exc:
            yield ErrorEvent(run_id=state.run_id, step=state.step, message=f"autosave: {exc}", kind="session")

    def close(self) -> None:
        if self._closed:
            return
        with contextlib.suppress(Exception):  # a start that failed has nothing to close or save
            self._await_sandbox()
        options = self._saver.options
        if options is not None and options.on_close and self._sandbox is not None and self._owned:
            try:
                self.save()
            except CodeActError as exc:  # close() must close: say why the save failed, go on
                import warnings

                warnings.warn(f"the chat session was not saved: {exc}", stacklevel=2)
        self._closed = True
        listeners = getattr(getattr(self._sandbox, "packages", None), "listeners", None)
        if listeners is not None and self._on_install in listeners:  # a sandbox the caller owns outlives us
            listeners.remove(self._on_install)
        self._forget_network(self._sandbox)
        if self._sandbox is not None and self._owned:
            self._sandbox.close()
        self._sandbox = None

    def interrupt(self) -> None:
        """Interrupt the code action running now (callable from another thread).

        The code gets a KeyboardInterrupt, the model sees that as the
        observation with a note that the user interrupted it, and the kernel
        keeps its state. To end the turn as well, set the ``cancel`` event
        given to :meth:`stream` first (as ``codeact chat`` and the web UI do).
        """
        state = self._state
        if state is not None and state.running_code:
            state.user_interrupted = True
        interrupt = getattr(self._sandbox, "interrupt", None)
        if interrupt is not None:
            interrupt()

    # --- files in the sandbox's working directory -------------------------------------------

    def upload(self, source: str | os.PathLike[str], name: str | None = None) -> str:
        """Copy a host file into the working directory now (opening the sandbox if needed).

        The model is told about it with the next task, as with ``send(files=...)``.
        Returns the path in the sandbox. Not while a turn runs (the sandbox runs one thing at a time).

        Example::

            chat.upload("sales.csv")
            chat.send("Plot revenue by month from sales.csv")
        """
        if self._closed:
            raise CodeActError("this chat session is closed; start a new one with agent.session()")
        path = Path(source)
        if not path.is_file():
            raise CodeActError(f"file not found: {path}")
        self._ensure_sandbox()
        where = self._sandbox.upload(path, name)
        self._uploaded.append(FileDescription.of(path, name))
        return where

    def list_files(self) -> list[Any]:
        """The files in the working directory (``sandbox.result.FileInfo``); none before the sandbox opens."""
        if self._closed or self._sandbox is None:
            return []
        self._await_sandbox()
        sandbox = self._sandbox  # None if its start failed (another thread was told why)
        return sandbox.list_files() if sandbox is not None else []

    def download(self, path: str) -> bytes:
        """A file from the working directory (a relative path, as :meth:`list_files` names it)."""
        if self._closed or self._sandbox is None:
            raise CodeActError(f"no such file in the sandbox: {path} (no sandbox is open)")
        self._await_sandbox()
        sandbox = self._sandbox
        if sandbox is None:
            raise CodeActError(f"no such file in the sandbox: {path} (its sandbox did not start)")
        return sandbox.download(path)

    # --- tools added during the conversation ---------------------------------------------------

    def add_tools(self, tools: Sequence[Tool[Any, Any] | Callable[..., Any]]) -> str:
        """Offer more tools from now on (the sandbox gets them at once); returns a note naming them for the model.

        Send the note with the next message: the system prompt is not rewritten.
        Not while a turn runs.

        Example::

            note = chat.add_tools([sort_file])
            chat.send(note + "\n\nNow sort report.txt")

        Raises:
            CodeActError: the session is closed, or a tool's name is taken.
        """
        if self._closed:
            raise CodeActError("this chat session is closed; start a new one with agent.session()")
        new = tools_to_add(tools, self._tools_now, FINAL_ANSWER)
        if not new:
            return ""
        self._ensure_sandbox()
        surface = self._surface
        self._sandbox.register(*[surface.host_function(t, self._invoker) if surface is not None
                                 else t.host_function(self._invoker(t)) for t in new])
        for t in new:
            self._tools_now[t.name] = t
        note = self._catalog_changed(new, [])
        if note is not None:
            return note.replace("an MCP server changed its tools", "new tools were added")
        stubs = "\n\n".join(t.python_stub() for t in new)
        return f"New tools (call them like the others):\n```python\n{stubs}\n```"

    # --- turns ------------------------------------------------------------------------------

    @overload
    def send(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (), cancel: threading.Event | None = None,
             output_type: None = None, output_retries: int | None = None) -> RunResult[Any]: ...

    @overload
    def send(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (), cancel: threading.Event | None = None,
             output_type: type[T], output_retries: int | None = None) -> RunResult[T]: ...

    @overload
    def send(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (), cancel: threading.Event | None = None,
             output_type: Any, output_retries: int | None = None) -> RunResult[Any]: ...

    def send(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (), cancel: threading.Event | None = None,
             output_type: Any = None, output_retries: int | None = None) -> RunResult[Any]:
        """One turn to the end; returns its result. ``output_type``: as :meth:`CodeActAgent.run`'s."""
        return _result_of(self.stream(task, files=files, cancel=cancel, output_type=output_type,
                                      output_retries=output_retries))

    def stream(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (),
               cancel: threading.Event | None = None, output_type: Any = None,
               output_retries: int | None = None) -> Iterator[Event]:
        """One turn: run ``task`` in this conversation, yielding events.

        ``output_type``: the type the answer must have (:mod:`codeact.output`); ``output_retries``: how many
        misfits go back to the model (default: the agent's).
        """
        if self._closed:
            # A closed session would silently open a new sandbox that nobody closes.
            raise CodeActError("this chat session is closed; start a new one with agent.session()")
        agent = self.agent
        output = OutputSpec.of(output_type)  # raises OutputTypeError before anything starts
        check = AnswerCheck(output, agent.output_retries if output_retries is None else output_retries)
        run_id = uuid.uuid4().hex[:12]
        state = _RunState(run_id)
        state.link = begin_run(agent, run_id, "codeact")
        self._state = state
        self._saver.begin_run(run_id)
        result = RunResult(run_id=run_id, task=task)
        started = time.perf_counter()
        log = agent._runlog()
        output_dir = (agent.output_root or _default_output_root()) / run_id
        file_paths = [Path(f) for f in files]

        emit = recorder(log, self._log_transform())
        missing = [str(p) for p in file_paths if not p.is_file()]
        state.trace = telemetry.start_run(agent="codeact", run_id=run_id, model=agent.model, task=task,
                                          backend=self._backend_name(), redact=self._content_filter())
        yield emit(RunStarted(run_id=run_id, task=task, model=getattr(agent.model, "name", "?"),
                              backend=self._backend_name(),
                              tools=list(getattr(self, "_tools_now", None) or [t.name for t in agent.tools]),
                              files=[p.name for p in file_paths], agent="codeact",
                              prompt=agent.prompt.name, prompt_version=agent.prompt.version,
                              **state.link.started_fields()))
        pending_uploads: list[Path] = []  # the task's files, put in once the sandbox is up
        try:
            if missing:
                raise CodeActError(f"file not found: {', '.join(missing)}")
            if cancel is not None and cancel.is_set():
                raise RunCancelled("cancelled before the first step")
            self._recover_lost_sandbox()  # its engine restarted since the last turn: back from the last save
            # A new sandbox starts while the model writes its first reply; the first code action waits for it.
            self._ensure_sandbox(background=True)
            pending_uploads.extend(file_paths)
            if self._opening is None:
                yield from (emit(e) for e in self._sandbox_ready(state, pending_uploads))
            announced, self._uploaded = self._uploaded, []
            announced.extend(FileDescription.of(path) for path in file_paths)
            self._files.extend(announced)
            answer_types, answer_note = self._answer_types(output)  # the type the answer must have, if any
            if not self.messages:
                self.messages.append(Message("system", self._system_prompt()))
                self.messages.append(Message("user", task + answer_note))
            else:
                extra = ""
                if announced:
                    extra = "\n\nNew files in the working directory:\n" + "\n".join(
                        f.render() for f in announced)
                note, self._resume_note = self._resume_note, ""  # after a resume: what came back, what was lost
                self.messages.append(Message("user", note + task + extra + answer_note))
            self._turn_starts.append(len(self.messages) - 1)  # where each turn starts: compaction folds turns
            snapshot = self._file_snapshot() if not pending_uploads and self._opening is None else None
            budget = _ArtifactBudget(agent.limits)
            state.output_dir, state.budget, state.result = output_dir, budget, result
            for index in range(1, agent.max_steps + 1):
                if cancel is not None and cancel.is_set():
                    raise RunCancelled(f"cancelled before step {index}")
                state.step = index
                state.link.before_model_call(agent.model)  # the budget (the whole tree's) has room for it
                step = Step(index=index)
                result.steps.append(step)
                step_started = time.perf_counter()
                yield from (emit(e) for e in self._model_turn(step, cancel, state))
                state.link.spent(step, result, agent.model)  # result.usage; BudgetExceeded when spent
                parsed = parse_reply(step.model_output)
                code = parsed.code if parsed.has_code else None
                if code is None:
                    if parsed.other_blocks or not step.model_output.strip():
                        feedback = self._no_code_feedback(parsed.other_blocks, step.model_output)
                        step.error = feedback
                        yield emit(ErrorEvent(run_id=run_id, step=index, message=feedback, kind="parse"))
                        self.messages.append(Message("assistant", step.model_output))
                        self.messages.append(Message("user", feedback))
                        step.duration = time.perf_counter() - step_started
                        continue
                    # A reply without code is the final answer.
                    said = check.check_text(self._restored(step.model_output.strip()))
                    self.messages.append(Message("assistant", step.model_output))
                    step.duration = time.perf_counter() - step_started
                    if not said.ok:  # it does not fit output_type: the model hears why
                        step.error = said.feedback
                        yield emit(ErrorEvent(run_id=run_id, step=index, message=said.feedback, kind="output"))
                        self.messages.append(Message("user", self._redact_text(said.feedback)))
                        if check.exhausted:
                            break
                        continue
                    result.answer, result.status = said.value, "success"
                    break
                step.code = code
                yield emit(CodeAction(run_id=run_id, step=index, code=code))
                if cancel is not None and cancel.is_set():  # stopped while the model wrote it: do not run it
                    raise RunCancelled(f"cancelled before the code of step {index} ran")
                if snapshot is None:  # the sandbox started on a thread: wait for it, put the files in
                    yield from (emit(e) for e in self._sandbox_ready(state, pending_uploads))
                    snapshot = self._file_snapshot()
                exec_started = time.perf_counter()
                exec_result: ExecutionResult | None = None
                if answer_types:  # the answer's classes, defined before the turn's first code runs
                    self._sandbox.run(answer_types)
                    answer_types = ""
                for item in self._run_code(code, state):
                    if isinstance(item, ToolCall):
                        step.tool_calls.append(item)
                        yield emit(item)
                    elif isinstance(item, (CodeOutput, ToolProgress, PackageInstall, NetworkRequest)):
                        yield emit(item)
                    else:
                        exec_result = item
                assert exec_result is not None
                step.sandbox_time = time.perf_counter() - exec_started
                parts, images = self._collect_artifacts(exec_result, index, output_dir, snapshot, result, budget)
                full_text = format_observation(exec_result, parts, limit=None)
                if self._redactor is not None:  # the model sees placeholders; the sandbox keeps the values
                    full_text = self._redactor.redact(full_text)
                text = truncate_middle(full_text, agent.observation_limit)
                tool_changes = self._tool_changes()  # an MCP server added or removed tools
                if tool_changes:
                    text += "\n\n" + tool_changes
                if state.user_interrupted:  # after the cut, so the model always learns who stopped it
                    text += "\n\n" + USER_INTERRUPT_NOTE
                verdict = check.check(self._restored(state.answer)) if state.answered else None
                if verdict is not None and not verdict.ok:  # it does not fit output_type: the model hears why
                    state.answered = False
                    text += "\n\n" + self._redact_text(verdict.feedback)
                shown = self._step_images(parts.images + state.tool_images)
                if shown.note:
                    text += "\n\n" + shown.note
                step.observation = text
                step.error = str(exec_result.error) if exec_result.error else None
                if verdict is not None and not verdict.ok:
                    step.error = step.error or verdict.feedback
                yield emit(Observation(run_id=run_id, step=index, text=text, stdout=exec_result.stdout,
                                       stderr=exec_result.stderr, error=step.error,
                                       duration=exec_result.duration,
                                       truncated=exec_result.truncated or len(full_text) > agent.observation_limit,
                                       artifacts=list(dict.fromkeys(  # a figure saved as a file: named once
                                           parts.artifacts + parts.saved_files() + state.tool_artifacts)),
                                       images=images, outputs=_output_bundles(exec_result.outputs)))
                self.messages.append(Message("assistant", step.model_output))
                self.messages.append(Message("user", f"Observation:\n{text}", images=shown.parts))
                step.duration = time.perf_counter() - step_started
                state.tool_artifacts, state.tool_images = [], []
                yield from (emit(e) for e in self._autosave(state))
                if verdict is not None and verdict.ok:
                    result.answer, result.status = verdict.value, "success"
                    break
                if check.exhausted:
                    break
            else:
                result.status = "max_steps"
                result.answer = self._restored(self._best_answer(result)) if output is None else check.last
            if check.exhausted:
                yield emit(gave_up(result, check, state.step))
        except RunCancelled as exc:
            result.status, result.error = "cancelled", str(exc)
        except (GeneratorExit, KeyboardInterrupt) as exc:
            # The caller stopped consuming, or Ctrl-C: log the run as cancelled, then let it propagate.
            result.status = "cancelled"
            result.error = "the caller stopped the run" if isinstance(exc, GeneratorExit) else "interrupted (Ctrl-C)"
            result.duration = time.perf_counter() - started
            state.link.finish()
            emit(RunFinished(run_id=run_id, result=result))
            if state.trace is not None:
                state.trace.end(result)
            raise
        except BudgetExceeded as exc:
            result.status, result.error = "budget_exceeded", str(exc)
            yield emit(ErrorEvent(run_id=run_id, step=state.step, message=str(exc), kind="budget", fatal=True))
        except (ModelError, CodeActError) as exc:
            result.status, result.error = "error", str(exc)
            yield emit(ErrorEvent(run_id=run_id, step=state.step, message=str(exc),
                                  kind="model" if isinstance(exc, ModelError) else "agent", fatal=True))
        except Exception as exc:  # a bug or a sandbox failure: report it, keep the log consistent
            result.status, result.error = "error", f"{type(exc).__name__}: {exc}"
            kind = "sandbox" if isinstance(exc, SandboxError) else "internal"
            yield emit(ErrorEvent(run_id=run_id, step=state.step, message=result.error, kind=kind, fatal=True))
        # The turn ended before any code ran: the sandbox must still come up, with the files the model was told
        # of (not when its start already failed this turn: that was reported).
        if self._opening is not None or (pending_uploads and self._sandbox is not None):
            try:
                for event in self._sandbox_ready(state, pending_uploads):
                    yield emit(event)
            except Exception as exc:  # the next turn tries again; this one did not need it
                yield emit(ErrorEvent(run_id=run_id, step=state.step, kind="sandbox", fatal=False,
                                      message=f"the sandbox is not ready: {type(exc).__name__}: {exc}"))
        result.duration = time.perf_counter() - started
        if result.status in ("success", "max_steps"):
            yield emit(FinalAnswer(run_id=run_id, step=state.step, answer=result.answer, status=result.status))
            yield from (emit(e) for e in self._autosave(state))  # the final reply: the conversation moved on
        state.link.finish()
        if state.trace is not None:
            state.trace.end(result)
        yield emit(RunFinished(run_id=run_id, result=result))

    # --- pieces of a turn ----------------------------------------------------------------

    def _backend_name(self) -> str:
        # Once a sandbox is open (later chat turns), name the backend it really is ("auto" resolved).
        sb = self._sandbox if self._sandbox is not None else self.agent.sandbox
        return sb if isinstance(sb, str) else getattr(sb, "backend", type(sb).__name__)

    def _ensure_sandbox(self, background: bool = False) -> None:
        """Open the session's sandbox if it is not open. ``background``: only make it here, and start it on a
        thread (where that is worth it, see :meth:`_starts_in_background`); :meth:`_await_sandbox` waits."""
        if self._sandbox is None:
            self._surface = self._make_surface()
            functions = self._surface.host_functions(self.agent.tools, self._invoker)
            functions.append(HostFunction(self._final_answer, name=FINAL_ANSWER,
                                          doc="Finish the task and return `answer` to the user."))
            trace = self._state.trace if self._state is not None else None
            background = background and self._starts_in_background()
            span = trace.sandbox("start", {"codeact.sandbox.backend": self._backend_name()}) if trace is not None \
                else _nullcontext()
            if background:
                self._sandbox, self._owned = self.agent._open_sandbox(functions, self._package_policy(), start=False)
                self._opening = _Opening(self._sandbox, span)
            else:
                with span:
                    self._sandbox, self._owned = self.agent._open_sandbox(functions, self._package_policy(),
                                                                          restore=self._restore_from)
            packages = getattr(self._sandbox, "packages", None)
            if packages is not None and hasattr(packages, "listeners"):
                packages.listeners.append(self._on_install)
            network = getattr(self._sandbox, "network_listeners", None)
            if isinstance(network, list):
                network.append(self._on_network)
            self._tools_now = {t.name: t for t in self.agent.tools}
            self._sources = {id(t.toolset): (t.toolset, t.toolset.version) for t in self.agent.tools
                             if getattr(t, "toolset", None) is not None}
        if not background:
            self._await_sandbox()
            if self._sandbox is None:  # it failed to start on its thread, and another caller was told: try here
                self._ensure_sandbox()

    def _sandbox_ready(self, state: _RunState, uploads: list[Path]) -> Iterator[Event]:
        """Wait for the sandbox; the installs it made as it opened, as events; ``uploads`` put in (and emptied)."""
        self._ensure_sandbox()  # waits for a start on its thread (raising what it raised), or opens one here
        yield from self._package_events(state)  # packages= installed as the sandbox opened
        while uploads:
            self._sandbox.upload(uploads.pop(0))

    def _starts_in_background(self) -> bool:
        """Whether the sandbox about to open may start while the model thinks: a new docker or local kernel with
        nothing to install first (their start is most of a cold first step) and nothing to restore."""
        spec = self.agent.sandbox
        return (isinstance(spec, str) and _backend_name(spec) in ("docker", "local") and not self.agent.packages
                and self._restore_from is None)

    def _await_sandbox(self) -> None:
        """Wait until a sandbox started on a thread is up; raise what its start raised (the session then has no
        sandbox, and the next turn opens one again). Safe from any thread."""
        opening = self._opening
        if opening is None:
            return
        opening.done.wait()
        with self._opening_lock:
            if self._opening is not opening:
                return  # another thread took the outcome
            self._opening = None
            if opening.error is None:
                return
            if self._sandbox is opening.sandbox:
                self._sandbox = None
                self._surface = None
        with contextlib.suppress(Exception):
            opening.sandbox.close()
        raise opening.error

    # --- packages ---------------------------------------------------------------------------

    def _package_policy(self) -> Any:
        """The agent's package policy, with installs the code asks for routed through ``approve``."""
        policy = self.agent.package_policy
        if self.agent.approve_installs and getattr(policy, "approve", None) is None:
            from dataclasses import replace

            from sandbox.packages import PackagePolicy

            policy = replace(policy or PackagePolicy(), approve=self._approve_install)
        return policy

    def _approve_install(self, request: Any) -> bool:
        state = self._state
        approval = ApprovalRequest("install", {"packages": request.summary(),
                                               "requirements": list(request.requirements)},
                                   state.run_id if state else "", state.step if state else 0)
        approver = self.agent.approve
        with self._approvals._one_at_a_time:  # one question to the human at a time, tools' included
            return approver is not None and bool(approver(approval))

    def _approve_skill(self, request: Any) -> bool:
        """Ask about saving a skill (:class:`~codeact.skills.SkillApproval`) as tools that require approval are
        asked: one question at a time, the human's time off the code's clock, no save after a late yes."""
        from sandbox.functions import current_call

        state = self._state
        request = replace(request, run_id=state.run_id if state else "", step=state.step if state else 0)
        if self.agent.auto_approve_skills:
            return True
        approver = self.agent.approve
        call = current_call()
        with call.paused() if call is not None else _nullcontext(), self._approvals._one_at_a_time:
            allowed = approver is not None and bool(approver(request))
        if call is not None:
            call.checkpoint()
        return allowed

    def _on_install(self, record: Any) -> None:
        """A package install the code asked for (a worker thread): an event among the step's tool calls."""
        state = self._state
        if state is not None and record.source == "runtime":
            self._installs_seen.add(id(record))
            state.report(_install_event(record, state.run_id, state.step))  # type: ignore[arg-type]
            _trace_install(state.trace, record, state.action_ctx)

    def _on_network(self, record: Any) -> None:
        """A request through the sandbox's network proxy ended (the proxy's thread): an event of the running
        action, or of the next one."""
        state = self._state
        if state is not None and state.tool_events is not None:
            state.report(_network_event(record, state.run_id, state.step))  # type: ignore[arg-type]
        else:
            self._network_pending.append(record)

    def _forget_network(self, sb: Any) -> None:
        listeners = getattr(sb, "network_listeners", None)
        if isinstance(listeners, list) and self._on_network in listeners:
            listeners.remove(self._on_network)

    def _package_events(self, state: _RunState) -> list[PackageInstall]:
        """Installs not yet reported (those of ``packages=``, made while the sandbox opened)."""
        records = getattr(getattr(self._sandbox, "packages", None), "records", None) or []
        fresh = [r for r in list(records) if id(r) not in self._installs_seen]
        self._installs_seen.update(id(r) for r in fresh)
        for r in fresh:
            _trace_install(state.trace, r, None)
        return [_install_event(r, state.run_id, 0) for r in fresh]

    def _packages_text(self) -> str:
        packages = getattr(self._sandbox, "packages", None)
        try:
            return packages.describe() if packages is not None and hasattr(packages, "describe") else ""
        except Exception:  # the prompt goes without the list; installs still report errors
            return ""

    def _final_answer(self, answer: Any) -> None:
        assert self._state is not None
        self._state.answer, self._state.answered = answer, True

    def _invoker(self, tool: Tool[Any, Any]) -> Callable[[tuple[Any, ...], dict[str, Any]], Any]:
        """The host side of a tool called from sandboxed code: bind, approve, call, record.

        For a tool with an event loop of its own (``Tool.loop``: an MCP tool) the invoker is async and
        each call runs as a task on that loop, with no worker thread in between.
        """

        def invoke(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            state, arguments = self._bind_call(tool, args, kwargs)
            with run_hooks(self._run_hooks(state, tool)):
                value = invoke_tool(tool, arguments, run_id=state.run_id, step=state.step, deps=self.agent.deps,
                                    approvals=self._approvals, report=state.report,
                                    trace=state.trace, trace_parent=state.action_ctx, link=state.link)
            return self._call_returned(state, tool, value)

        async def ainvoke(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            state, arguments = self._bind_call(tool, args, kwargs)
            with run_hooks(self._run_hooks(state, tool)):
                value = await ainvoke_tool(tool, arguments, run_id=state.run_id, step=state.step,
                                           deps=self.agent.deps, approvals=self._approvals, report=state.report,
                                           trace=state.trace, trace_parent=state.action_ctx, link=state.link)
            return self._call_returned(state, tool, value)

        return ainvoke if tool.loop is not None else invoke

    def _bind_call(self, tool: Tool[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
                   ) -> tuple[_RunState, dict[str, Any]]:
        """The run a sandbox call belongs to and the call's arguments dict (reported when they do not bind)."""
        state = self._state
        assert state is not None
        try:
            arguments = tool.bind(args, kwargs)
            if self._redactor is not None:  # placeholders the model wrote become the values again
                arguments = self._redactor.restore(arguments)
        except Exception as exc:
            shown = {"args": list(args), **kwargs}
            state.report(ToolCall(run_id=state.run_id, step=state.step, name=tool.name,
                                  arguments={k: preview(v) for k, v in shown.items()},
                                  error=f"{type(exc).__name__}: {exc}"))
            raise
        return state, arguments

    def _call_returned(self, state: _RunState, tool: Tool[Any, Any], value: Any) -> Any:
        if self._redactor is not None:
            self._redactor.learn(tool.name, value)
        if tool.return_direct:
            state.answer, state.answered = value, True
        return value

    # --- what a running tool may do: artifacts, progress; tools that come and go ----------

    def _run_hooks(self, state: _RunState, tool: Tool[Any, Any]) -> RunHooks:
        """``RunContext.add_artifact`` and ``report_progress`` for a call of ``tool`` in this run."""

        def add_artifact(name: str, data: bytes, mime: str) -> str:
            check_relative_path(name)
            if state.output_dir is None or state.result is None:
                raise CodeActError("no run is in progress to keep the artifact")
            with _ARTIFACT_LOCK:
                if state.budget is not None and not state.budget.take(len(data), state.step):
                    raise CodeActError(state.budget.reason(len(data)))
                state.output_dir.mkdir(parents=True, exist_ok=True)
                path = write_confined(state.output_dir, name, bytes(data))
                state.tool_artifacts.append(name)
                if is_image_mime(mime):
                    state.tool_images.append((name, bytes(data)))
                state.result.artifacts.append(path)
            return name

        def report_progress(progress: float, total: float | None = None, message: str | None = None) -> None:
            state.report(ToolProgress(run_id=state.run_id, step=state.step, name=tool.name, progress=float(progress),
                                      total=None if total is None else float(total),
                                      message=None if message is None else str(message)[:500]))

        return RunHooks(add_artifact=add_artifact, report_progress=report_progress)

    def _tool_changes(self) -> str:
        """Offer the tools a live source (an MCP server) added or changed since the last look, withdraw
        the ones it removed, and return a note for the model ("" when nothing changed)."""
        sources = getattr(self, "_sources", {})
        changed = [src for src, seen in sources.values() if getattr(src, "version", seen) != seen]
        if not changed or self._sandbox is None:
            return ""
        added: list[Tool[Any, Any]] = []
        removed: list[str] = []
        for src in changed:
            sources[id(src)] = (src, src.version)
            now = {t.name: t for t in list(src)}
            before = {n: t for n, t in self._tools_now.items() if getattr(t, "toolset", None) is src}
            removed.extend(n for n in before if n not in now)
            added.extend(t for n, t in now.items() if before.get(n) is not t
                         and getattr(self._tools_now.get(n), "toolset", src) is src)
        try:
            if removed:
                self._sandbox.unregister(*removed)
            if added:
                surface = self._surface
                self._sandbox.register(*[surface.host_function(t, self._invoker) if surface is not None
                                         else t.host_function(self._invoker(t)) for t in added])
        except Exception as exc:  # the model hears about it; the run goes on
            return f"Note: the tools changed but the sandbox could not be updated: {exc}"
        for name in removed:
            self._tools_now.pop(name, None)
        for t in added:
            self._tools_now[t.name] = t
        note = self._catalog_changed(added, removed)
        if note is not None:
            return note
        lines = ["Note: an MCP server changed its tools."]
        if added:
            stubs = "\n\n".join(t.python_stub() for t in added)
            lines.append("New or changed tools (call them like the others):\n" + truncate_middle(stubs, 4000))
        if removed:
            lines.append("Removed tools (no longer callable): " + ", ".join(removed))
        return "\n".join(lines)

    # --- the tools as the code and the model meet them (codeact.catalog), privacy --------------

    def _make_surface(self) -> ToolSurface:
        agent = self.agent
        sandbox = agent.sandbox
        restricted = (sandbox == "restricted") if isinstance(sandbox, str) else \
            getattr(sandbox, "backend", "") == "restricted"
        from .privacy import PROMPT_NOTE

        skills = None
        if agent.skills is not None:
            from .skills import SessionSkills

            can_ask = agent.approve is not None or agent.auto_approve_skills
            skills = SessionSkills(agent.skills, self._approve_skill if can_ask else None)
        return ToolSurface(agent.tools, disclosure=agent.tool_disclosure, budget=agent.tool_budget,
                           descriptions=self._group_descriptions(agent.tools), skills=skills,
                           namespaces=not restricted, privacy_note=PROMPT_NOTE if self._redactor is not None else "")

    @staticmethod
    def _group_descriptions(tools: Sequence[Tool[Any, Any]]) -> dict[str, str]:
        out: dict[str, str] = {}
        for source in {id(t.toolset): t.toolset for t in tools if getattr(t, "toolset", None) is not None}.values():
            out.update(getattr(source, "group_descriptions", None) or {})
        return out

    def _system_prompt(self) -> str:
        agent = self.agent
        tools = list(getattr(self, "_tools_now", {}).values()) or agent.tools
        shown, extra, catalog = (self._surface.prompt_parts(tools) if self._surface is not None
                                 else (tools, "", ""))
        return render_system_prompt(shown, files=self._files, workdir=self._sandbox.workdir,
                                    template=agent.prompt.text, packages=self._packages_text(),
                                    extra_stubs=extra, catalog=catalog)

    def _catalog_changed(self, added: list[Tool[Any, Any]], removed: list[str]) -> str | None:
        """Bring the catalogue (and the system prompt, whose catalogue it is) up to date with the tools.

        Returns the on-demand note for the observation, or None to use the note with stubs."""
        surface = self._surface
        if surface is None:
            return None
        tools = list(self._tools_now.values())
        surface.update(tools, self._group_descriptions(tools))
        if surface.mode == "on_demand" and self.messages and self.messages[0].role == "system":
            self.messages[0] = Message("system", self._system_prompt())  # the next prompt's catalogue
        return surface.change_note(added, removed)

    def _log_transform(self) -> Callable[[Event], Event] | None:
        """What the run log records instead of each event: placeholders for hidden values (privacy)."""
        redactor = self._redactor
        if redactor is None or redactor.config.log_real_values:
            return None
        from .privacy import redact_event

        return lambda event: redact_event(event, redactor)

    def _content_filter(self) -> Callable[[str], str] | None:
        """What captured trace content passes first: the privacy filter's placeholders (host side)."""
        return self._redactor.redact if self._redactor is not None else None

    def _answer_types(self, output: OutputSpec | None) -> tuple[str, str]:
        """(kernel source defining the answer's classes, the note for the task) for ``output`` ("" and "" for none).

        The classes are defined where code runs in a kernel (not on the restricted backend)."""
        if output is None:
            return "", ""
        source = ""
        if self._backend_name() != "restricted":
            source = output.kernel_source({*getattr(self, "_tools_now", {}), FINAL_ANSWER})
        return source, "\n\n" + output.prompt_text(final="final_answer(value)", constructors=bool(source))

    def _redact_text(self, text: str) -> str:
        """``text`` as the model may see it: placeholders for the values the privacy filter hides."""
        return self._redactor.redact(text) if self._redactor is not None else text

    def _restored(self, answer: Any) -> Any:
        """The model's answer for the caller: placeholders it wrote become the values (privacy)."""
        if self._redactor is None or not self._redactor.config.restore_answers:
            return answer
        return self._redactor.restore(answer)

    def _run_code(self, code: str, state: _RunState) -> Iterator[ToolCall | CodeOutput | ExecutionResult]:
        """Run a code action, yielding its output and each tool call as they come, then the result.

        The sandbox runs on a worker thread so that tool-call events reach the
        caller while the code is still running. If the caller stops (Ctrl-C,
        closing the generator), the code in the sandbox is interrupted first.
        """
        events: queue.Queue[Any] = queue.Queue()
        while self._network_pending:  # requests that ended between actions
            events.put(_network_event(self._network_pending.popleft(), state.run_id, state.step))
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
            state.running_code = False
            if action is not None:
                state.action_ctx = None
                action.end(outcome.get("result"), outcome.get("error"))
        if "error" in outcome:
            raise outcome["error"]
        yield outcome["result"]

    def _model_turn(self, step: Step, cancel: threading.Event | None, state: _RunState) -> Iterator[Event]:
        """One model call on the history as compaction folds it (:mod:`codeact.compaction`)."""
        self._before_model_call()

        def call(messages: list[Message]) -> Generator[Event, None, Any]:
            return model_turn(self.agent.model, self._redacted(messages), step, run_id=state.run_id,
                              stream=self.agent.stream_model, cancel=cancel, trace=state.trace)

        yield from compaction_events(compacted_call(self._compaction(), self.messages, self._turn_starts, call,
                                                    run_id=state.run_id, step=step.index), step, state.trace)

    def _step_images(self, candidates: list[tuple[str, bytes]]) -> StepImages:
        """The step's images as the model gets them (none when the model takes none)."""
        if not candidates or not wants_images(self.agent.model, images_enabled()):
            return StepImages()
        limits = self.agent.limits
        return step_images(candidates, max_side=limits.max_image_side, max_images=limits.max_images_per_step)

    def _before_model_call(self) -> None:
        """A hook for subclasses: change the history before the model sees it (the web UI adds its notes)."""

    def _compaction(self) -> Compactor:
        if self._compactor is None:
            agent = self.agent
            self._compactor = Compactor(
                agent.model, history_budget=agent.history_budget, condenser=agent.condenser,
                elide_observation=_elide_observation, namespace=self._namespace, files=self.list_files,
                redact=self._redactor.redact if self._redactor is not None else None)
        return self._compactor

    def _namespace(self) -> Any:
        """The kernel's variables now (for the "session so far" block), read as the web UI's panel reads them."""
        from ._namespace import VariableListing, read_namespace

        if self._opening is not None or self._sandbox is None:
            return VariableListing(error="the sandbox is not running")
        return read_namespace(self._sandbox)

    def _context_messages(self) -> list[Message]:
        """The history as the model sees it now: what compaction folded so far, with the privacy placeholders."""
        return self._redacted(self._compaction().view(self.messages, self._turn_starts))

    def _redacted(self, messages: list[Message]) -> list[Message]:
        redactor = self._redactor
        if redactor is None:
            return messages
        # The user's own words (the task, notes about files) reach the model with placeholders too;
        # observations already have them (redacting twice changes nothing).
        return [replace(m, content=redactor.redact(m.content)) if m.role == "user" and isinstance(m.content, str)
                else m for m in messages]

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
        # Raster images the code showed (PNG figures, display(Image(...)) of a JPEG...), in order.
        shown = [raster[0] for out in exec_result.outputs
                 if (raster := [(m, d) for m, d in out.data.items() if isinstance(d, bytes) and is_image_mime(m)])]
        images = exec_result.images  # for the Observation event and the run log: the PNGs, as before
        if shown or exec_result.files:
            with contextlib.suppress(OSError):  # a full or read-only disk: each file below says it was not saved
                output_dir.mkdir(parents=True, exist_ok=True)
                output_dir.mkdir(parents=True, exist_ok=True)
        # What this step kept, by content: a plot both saved (plt.savefig) and shown is kept once, under
        # the name the code gave it. Files go first for that reason.
        kept: dict[bytes, str] = {}
        image_files: list[tuple[str, bytes]] = []
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
            kept.setdefault(hashlib.sha256(data).digest(), rel)
            if is_image_name(rel):
                image_files.append((rel, data))
        for k, (mime, png) in enumerate(shown, 1):
            digest = hashlib.sha256(png).digest()
            if digest in kept:  # the same picture is already kept (a saved file, or shown twice)
                parts.artifacts.append(kept[digest])
                parts.images.append((kept[digest], png))
                continue
            name = f"step{step}_figure{k}{image_suffix(mime)}"
            if not budget.take(len(png), step):
                parts.skipped.append((name, budget.reason(len(png))))
                continue
            try:
                path = write_confined(output_dir, name, png)
            except Exception as exc:  # a full disk: say so, keep the step
                parts.skipped.append((name, f"not saved: {exc}"))
                continue
            parts.artifacts.append(name)
            parts.images.append((name, png))
            result.artifacts.append(path)
            kept[digest] = name
        # For the model: what the code showed first, then the image files it wrote (step_images drops repeats).
        parts.images.extend(image_files)
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


def _restore_sandbox(spec: Any, snap: Any, functions: list[HostFunction], options: dict[str, Any]) -> Any:
    """A started sandbox holding snapshot ``snap``: on the engine pool ``spec``, or a new docker/local session."""
    from sandbox import SessionSource
    from sandbox.snapshot import SnapshotError, restore

    if isinstance(spec, SessionSource):
        factory: Any = spec.sandbox  # the pool places it on the engine with the most room
    elif spec in ("docker", "auto"):
        from sandbox import DockerSandbox

        factory = DockerSandbox
    elif spec == "local":
        from sandbox import LocalSandbox, warn_unsafe

        factory = LocalSandbox

        warn_unsafe("local")
    else:
        raise SavedSessionError(f"the {spec!r} backend has no kernel to restore a session into; resume it with "
                                "the docker (or local) backend")
    with telemetry.span("sandbox.restore", {"codeact.snapshot.id": str(getattr(snap, "id", snap))[:64]}) as span:
        try:
            sandbox = restore(factory, snap, functions, **options)
        except SnapshotError as exc:
            telemetry.span_failed(span, exc)
            raise SavedSessionError(f"the session could not be restored: {exc}") from None
        report = getattr(sandbox, "restored", None)
        if span is not None and report is not None:
            span.set_attribute("codeact.snapshot.restored_variables", len(report.restored))
            span.set_attribute("codeact.snapshot.failed_variables", len(report.failed))
        return sandbox


def _network_event(record: Any, run_id: str, step: int) -> NetworkRequest:
    data = record.to_json()
    return NetworkRequest(run_id=run_id, step=step, host=data["host"], method=data["method"],
                          allowed=data["allowed"], status=data["status"], record=data)


def _install_event(record: Any, run_id: str, step: int) -> PackageInstall:
    data = record.to_json()
    return PackageInstall(run_id=run_id, step=step, requirements=data["requirements"], source=data["source"],
                          packages=data["packages"], present=data["present"], seconds=data["seconds"],
                          resolved_from_cache=data["resolved_from_cache"], downloaded=data["downloaded"],
                          error_kind=data["error_kind"], error=data["error"])


def _trace_install(trace: Any, record: Any, parent: Any) -> None:
    """A ``sandbox.install`` span for a package install (the record says how long it took)."""
    if trace is None:
        return
    data = record.to_json()
    trace.sandbox_done("install", float(data["seconds"] or 0.0), {
        "codeact.packages.requirements": [str(r)[:200] for r in data["requirements"]][:50],
        "codeact.packages.source": str(data["source"]),
        "codeact.packages.downloaded": int(data["downloaded"] or 0),
    }, parent=parent, error=data["error_kind"] or None)


def _backend_name(name: str) -> BackendName:
    """``name`` as one of the sandbox's backend names.

    Raises:
        SandboxError: not a backend name (the message open_sandbox gives).
    """
    from sandbox import BackendName

    for known in get_args(BackendName):
        if name == known:
            return known
    raise SandboxError(f"unknown sandbox backend {name!r}; choose docker, local or restricted")


def _skill_store(spec: Any) -> Any:
    """The :class:`~codeact.skills.SkillStore` that ``CodeActAgent(skills=...)`` names, or None."""
    if spec is None or spec is False:
        return None
    from .skills import SkillStore

    if isinstance(spec, SkillStore):
        return spec
    if spec is True:
        return SkillStore()
    if isinstance(spec, (str, os.PathLike)):
        return SkillStore(spec)
    raise CodeActError(f"skills= takes a SkillStore, a directory, True or None, not {type(spec).__name__}")


def _elide_observation(message: Message) -> Message | None:
    if message.role != "user" or not message.content.startswith("Observation:"):
        return None
    return Message("user", f"Observation: [elided to fit the context: {len(message.content)} characters]")


__all__ = ["CodeActAgent", "ChatSession", "ApprovalRequest", "Approver", "RunLimits"]
