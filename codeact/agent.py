"""The CodeAct agent and its chat session: the model writes Python, the sandbox runs it, the output is the next
observation.

The agent yields :mod:`codeact.events` and never prints; the CLI renders them.
A :class:`ChatSession` is made of parts, each with one job: the step
(:mod:`codeact.code_step`), the sandbox's lifecycle (:mod:`codeact.chat_sandbox`),
the tools as the sandbox calls them (:mod:`codeact.chat_tools`), the
artifacts (:mod:`codeact.code_artifacts`); the turn itself is the one every
agent kind shares (:mod:`codeact.run`).

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

import contextlib
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, TypeVar

from . import telemetry, transcript
from .action_state import ActionState
from .catalog import DEFAULT_TOOL_BUDGET, Disclosure, check_disclosure
from .code_step import USER_INTERRUPT_NOTE, CodeActTurn
from .compaction import Compactor, Condenser, restore_folded
from .compaction import check_options as check_compaction
from .errors import CodeActError, SavedSessionError
from .events import ErrorEvent, Event, RunStarted
from .messages import Message
from .output import DEFAULT_RETRIES, AnswerCheck, OutputSpec
from .privacy import ChatPrivacy
from .prompting import FileDescription, render_system_prompt
from .prompts import Prompt, load_prompt
from .run import (
    AgentRuns,
    Turns,
    ApprovalRequest,
    Approvals,
    Approver,
    RunLimits,
    Turn,
    begin_run,
    check_max_steps,
    drive,
    recorder,
)
from .chat_recovery import Recovery
from .chat_sandbox import ChatSandbox
from .chat_tools import FINAL_ANSWER, ChatTools, change_note
from .tools import Tool, ensure_tools

if TYPE_CHECKING:  # pragma: no cover
    from sandbox.base import Sandbox, SessionSource
    from sandbox.packages import PackagePolicy

    from .models import Model
    from .privacy import PrivacyFilter
    from .runlog import RunLog
    from .skills import SkillStore

#: An answer's type (``output_type=``).
T = TypeVar("T")

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
        self.max_steps = check_max_steps(max_steps)
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
        self._log: RunLog | None = None

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


class ChatSession(Turns):
    """One conversation with a :class:`CodeActAgent`: history and sandbox persist across turns.

    Example::

        with agent.session() as chat:
            chat.send("Load sales.csv into df", files=["sales.csv"])
            chat.send("Now plot monthly totals")
    """

    def __init__(self, agent: CodeActAgent, *, save: Any = None, resume: str | None = None) -> None:
        from .sessions import Saver, save_options

        self.agent = agent
        #: The conversation as the session holds it (compaction folds a view of it, never the list itself).
        self.messages: list[Message] = []
        #: Index in ``messages`` of each turn's task (compaction folds whole turns).
        self.turn_starts: list[int] = []
        self._compactor: Compactor | None = None
        #: The files the system prompt names, and those upload() put in that the next task names.
        self._files: list[FileDescription] = []
        self._uploaded: list[FileDescription] = []
        self._closed = False
        self._approvals = Approvals(agent.approve)
        #: The privacy filter as this session applies it (placeholders to the model, values to the tools).
        self.privacy = ChatPrivacy(agent.privacy)
        #: The run in progress (or the last one), as the host-function callbacks see it.
        self._state: ActionState | None = None
        restricted = agent.sandbox == "restricted" if isinstance(agent.sandbox, str) else \
            getattr(agent.sandbox, "backend", "") == "restricted"
        #: The tools as the sandbox calls them and the prompt shows them.
        self.tools = ChatTools(agent, self._approvals, self.current_run, self.privacy, restricted=restricted)
        #: The sandbox's lifecycle: opening, restoring, recovering, closing.
        self.box = ChatSandbox(agent, self._approvals, self.current_run)
        # Durable sessions (codeact.sessions): saving, and the note the next message carries after a resume.
        self.saver = Saver(None, save_options(save))
        self._resume_note = ""
        #: A lost kernel brought back from the last save (codeact.chat_recovery).
        self.recovery = Recovery(self.box, self.saver, self.tools.host_functions)
        if self.saver.options is not None or resume is not None:
            self.saver.log = agent.run_log()
            if self.saver.log is None:
                raise SavedSessionError("a saved or resumed session needs the run log (its conversation is "
                                        "rebuilt from it); pass log=True or a RunLog")
        if resume is not None:
            self._resume(resume)

    # --- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> ChatSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def sandbox(self) -> Any:
        """The session's sandbox (None before the first turn opens it, and after :meth:`close`)."""
        return self.box.sandbox

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def restored(self) -> Any:
        """What the last resume or recovery brought back (a :class:`sandbox.snapshot.RestoreReport`), else None."""
        return self.box.restored

    @property
    def session_id(self) -> str:
        """This conversation's id in the run log (its saved snapshots carry it; ``codeact sessions``)."""
        return self.saver.session_id

    def current_run(self) -> ActionState | None:
        """The run in progress (or the last one that ran), None before the first."""
        return self._state

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
        self.box.wait()
        if self.box.sandbox is None:
            raise SavedSessionError("nothing to save yet: the session has no sandbox before its first turn")
        if self.saver.log is None:
            self.saver.log = self.agent.run_log()
        state = self._state  # the last turn (ended: not while a turn runs); else where a resume left off
        run_id, step = (state.run_id, state.step) if state is not None else self.saver.point
        return self.saver.save(self.box.sandbox, run_id, step, timeout=timeout or SAVE_TIMEOUT)

    def _resume(self, key: str) -> None:
        from .sessions import conversation, open_saved, resume_note

        record, snap = open_saved(self.saver.log, key)
        conv = conversation(self.saver.log, record, output_root=self.agent.output_root_path(),
                            observation_limit=self.agent.observation_limit, limits=self.agent.limits)
        self.box.reopen_from(self.tools.host_functions, snap)
        saver = self.saver
        saver.runs, saver.last, saver.restored_from = list(record.runs), snap, record.id
        saver.point = saver.last_point = (record.run_id, record.step)
        self._files = [FileDescription(path, size) for path, size in snap.manifest.files[:50]]
        self.messages = [Message("system", conv.system or self.system_prompt()), *conv.messages]
        self.turn_starts = [1 + i for i in conv.turn_starts]
        restore_folded(self.compactor, conv.folded)  # folded as the live session had it
        if self.box.restored is not None:
            self._resume_note = resume_note(record, conv, self.box.restored)

    def recover_lost_sandbox(self, trace: Any = None) -> None:
        """The session's sandbox or its kernel went away since the last turn (its engine restarted, its container
        was removed, its kernel was killed while idle) and the session was saved: open a new sandbox restored
        from the newest save, and tell the model with the next message what came back and what was lost.
        Without a save, the sandbox starts afresh and says so.
        (A kernel lost during a turn comes back within it: :mod:`codeact.chat_recovery`.)

        Raises what the restore raises (the engine is still away): the next turn tries again.
        """
        state = self._state
        note = self.recovery.before_action(state.run_id, 0, state.turn.cancel) if state else \
            self.recovery.before_action("", 0)
        self._resume_note = note + self._resume_note

    def autosave(self, state: ActionState) -> Iterator[Event]:
        """Save after a step when autosave is on; a failure is a (non-fatal) error event, the turn goes on."""
        options = self.saver.options
        if options is None or not options.autosave or self.box.sandbox is None:
            return
        try:
            self.saver.save(self.box.sandbox, state.run_id, state.step, delta=True)
        except CodeActError as exc:
            yield ErrorEvent(run_id=state.run_id, step=state.step, message=f"autosave: {exc}", kind="session")

    def close(self) -> None:
        if self._closed:
            return
        with contextlib.suppress(Exception):  # a start that failed has nothing to close or save
            self.box.wait()
        options = self.saver.options
        if options is not None and options.on_close and self.box.sandbox is not None and self.box.owned:
            try:
                self.save()
            except CodeActError as exc:  # close() must close: say why the save failed, go on
                import warnings

                warnings.warn(f"the chat session was not saved: {exc}", stacklevel=2)
        self._closed = True
        self.box.close()

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
        self.box.interrupt()

    # --- files in the sandbox's working directory -------------------------------------------

    def upload(self, source: str | os.PathLike[str], name: str | None = None) -> str:
        """Copy a host file into the working directory now (opening the sandbox if needed).

        The model is told about it with the next task, as with ``send(files=...)``.
        Returns the path in the sandbox. Not while a turn runs (the sandbox runs one thing at a time).

        Example::

            chat.upload("sales.csv")
            chat.send("Plot revenue by month from sales.csv")
        """
        self._check_open()
        path = Path(source)
        if not path.is_file():
            raise CodeActError(f"file not found: {path}")
        self.box.ensure(self.tools.host_functions)
        where = self.box.sandbox.upload(path, name)
        self._uploaded.append(FileDescription.of(path, name))
        return str(where)

    def list_files(self) -> list[Any]:
        """The files in the working directory (``sandbox.result.FileInfo``); none before the sandbox opens."""
        if self._closed or self.box.sandbox is None:
            return []
        self.box.wait()
        sandbox = self.box.sandbox  # None if its start failed (another thread was told why)
        return sandbox.list_files() if sandbox is not None else []

    def download(self, path: str) -> bytes:
        """A file from the working directory (a relative path, as :meth:`list_files` names it)."""
        if self._closed or self.box.sandbox is None:
            raise CodeActError(f"no such file in the sandbox: {path} (no sandbox is open)")
        self.box.wait()
        sandbox = self.box.sandbox
        if sandbox is None:
            raise CodeActError(f"no such file in the sandbox: {path} (its sandbox did not start)")
        data: bytes = sandbox.download(path)
        return data

    # --- tools added during the conversation ---------------------------------------------------

    def add_tools(self, tools: Sequence[Tool[Any, Any] | Callable[..., Any]]) -> str:
        """Offer more tools from now on (the sandbox gets them at once); returns a note naming them for the model.

        Send the note with the next message: the system prompt is not rewritten.
        Not while a turn runs.

        Example::

            note = chat.add_tools([sort_file])
            chat.send(note + "\\n\\nNow sort report.txt")

        Raises:
            CodeActError: the session is closed, or a tool's name is taken.
        """
        self._check_open()
        if not ensure_tools(tools):
            return ""
        self.box.ensure(self.tools.host_functions)
        new = self.tools.add(self.box.sandbox, tools)
        if not new:
            return ""
        note = self._catalog_note(new, [])
        if note is not None:
            return note.replace("an MCP server changed its tools", "new tools were added")
        stubs = "\n\n".join(t.python_stub() for t in new)
        return f"New tools (call them like the others):\n```python\n{stubs}\n```"

    def tool_changes_note(self) -> str:
        """Offer the tools a live source (an MCP server) added or changed since the last look, withdraw the ones
        it removed, and return a note for the model ("" when nothing changed)."""
        added, removed, problem = self.tools.changes(self.box.sandbox)
        if problem or not (added or removed):
            return problem
        note = self._catalog_note(added, removed)
        return note if note is not None else change_note(added, removed)

    def _catalog_note(self, added: list[Tool[Any, Any]], removed: list[str]) -> str | None:
        note = self.tools.catalog_note(added, removed)
        if self.tools.on_demand and self.messages and self.messages[0].role == "system":
            self.messages[0] = Message("system", self.system_prompt())  # the next prompt's catalogue
        return note

    # --- turns ------------------------------------------------------------------------------

    def stream(self, task: str, *, files: Sequence[str | os.PathLike[str]] = (),
               cancel: threading.Event | None = None, output_type: Any = None,
               output_retries: int | None = None) -> Iterator[Event]:
        """One turn: run ``task`` in this conversation, yielding events.

        ``output_type``: the type the answer must have (:mod:`codeact.output`); ``output_retries``: how many
        misfits go back to the model (default: the agent's).
        """
        # A closed session would silently open a new sandbox that nobody closes.
        self._check_open()
        agent = self.agent
        output = OutputSpec.of(output_type)  # raises OutputTypeError before anything starts
        check = AnswerCheck(output, agent.output_retries if output_retries is None else output_retries)
        turn = self.new_turn(task, cancel=cancel, check=check, files=files, agent_kind="codeact")
        started = RunStarted(run_id=turn.run_id, task=task, model=getattr(agent.model, "name", "?"),
                             backend=self.box.backend_name(), tools=self.tool_names(),
                             files=[p.name for p in turn.files], agent="codeact",
                             prompt=agent.prompt.name, prompt_version=agent.prompt.version,
                             **turn.link.started_fields())
        return drive(turn, CodeActTurn(self, self._state, output, check), started)  # type: ignore[arg-type]

    def new_turn(self, task: str, *, cancel: threading.Event | None = None, check: AnswerCheck | None = None,
                 files: Sequence[str | os.PathLike[str]] = (), agent_kind: str | None = "codeact",
                 max_steps: int | None = None) -> Turn:
        """A run of this session starting now (its id, log, trace, artifacts): ``agent_kind`` None for a run
        that is not an agent's (the web workspace's cells: no place in a tree of agents)."""
        agent = self.agent
        emit = recorder(agent.run_log(), self.privacy.log_transform())
        turn = Turn(task, emit=emit, limits=agent.limits, max_steps=max_steps or agent.max_steps, cancel=cancel,
                    check=check, files=[Path(f) for f in files], output_root=agent.output_root_path())
        if agent_kind is not None:
            turn.link = begin_run(agent, turn.run_id, agent_kind)
        turn.trace = telemetry.start_run(agent=agent_kind or "user", run_id=turn.run_id, model=agent.model,
                                         task=task, backend=self.box.backend_name(),
                                         redact=self.privacy.content_filter())
        self._state = ActionState(turn)
        self.saver.begin_run(turn.run_id)
        return turn

    def tool_names(self) -> list[str]:
        """The tools' names as the sandbox has them now."""
        return list(self.tools.now)

    # --- what a turn's step needs of the session -----------------------------------------------

    def take_announced_files(self, paths: Sequence[Path]) -> list[FileDescription]:
        """The files the next message names (uploaded since the last turn, then the task's), now in the prompt's
        list too."""
        announced, self._uploaded = self._uploaded, []
        announced.extend(FileDescription.of(path) for path in paths)
        self._files.extend(announced)
        return announced

    def start_turn(self, task: str, files: Sequence[FileDescription], answer_note: str) -> str:
        """Add the turn's user message (the system prompt first, on the first turn); returns its text."""
        first = not self.messages
        if first:
            self.messages.append(Message("system", self.system_prompt()))
        # What the analyst did by hand (the web workspace), then after a resume what came back and what was lost.
        note, self._resume_note = self.user_work_note() + self._resume_note, ""
        text = transcript.task_text(task, first=first, files=[f.render() for f in files], answer_note=answer_note,
                                    note=note)
        self.messages.append(transcript.task_message(text))
        self.turn_starts.append(len(self.messages) - 1)
        return text

    def answer_types(self, output: OutputSpec | None) -> tuple[str, str]:
        """(kernel source defining the answer's classes, the note for the task) for ``output`` ("" and "" for none).

        The classes are defined where code runs in a kernel (not on the restricted backend)."""
        if output is None:
            return "", ""
        source = ""
        if self.box.backend_name() != "restricted":
            source = output.kernel_source(self.tools.answer_names())
        return source, "\n\n" + output.prompt_text(final="final_answer(value)", constructors=bool(source))

    def system_prompt(self) -> str:
        shown, extra, catalog = self.tools.prompt_parts()
        return render_system_prompt(shown, files=self._files, workdir=self.box.sandbox.workdir,
                                    template=self.agent.prompt.text, packages=self.box.packages_text(),
                                    extra_stubs=extra, catalog=catalog)

    @property
    def compactor(self) -> Compactor:
        """How this history is folded when it outgrows the context (made when first needed)."""
        if self._compactor is None:
            agent = self.agent
            self._compactor = Compactor(
                agent.model, history_budget=agent.history_budget, condenser=agent.condenser,
                namespace=self._namespace, files=self.list_files,
                redact=self.privacy.content_filter())
        return self._compactor

    def _namespace(self) -> Any:
        """The kernel's variables now (for the "session so far" block), read as the web UI's panel reads them."""
        from ._namespace import VariableListing, read_namespace

        if self.box.starting or self.box.sandbox is None:
            return VariableListing(error="the sandbox is not running")
        return read_namespace(self.box.sandbox)

    def context_messages(self) -> list[Message]:
        """The history as the model sees it now: what compaction folded so far, with the privacy placeholders."""
        return self.privacy.redact_user_messages(self.compactor.view(self.messages, self.turn_starts))

    def user_work_note(self) -> str:
        """A hook for subclasses: what the next message tells the model first (the web workspace: what the
        analyst ran by hand since the model's last turn); taken once."""
        return ""

    def after_action(self) -> list[str]:
        """A hook for subclasses: look at the kernel after each code action; returns notices for its observation
        (the web workspace lists the variables)."""
        return []

    def _check_open(self) -> None:
        if self._closed:
            raise CodeActError("this chat session is closed; start a new one with agent.session()")


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


__all__ = ["CodeActAgent", "ChatSession", "ApprovalRequest", "Approver", "RunLimits", "FINAL_ANSWER",
           "USER_INTERRUPT_NOTE"]
