"""Agents as tools: ``agent.as_tool(...)`` and the link between a run and the runs it calls.

A run started while a tool call of another run is on the stack (a parent's
code calling ``researcher("...")``) is that run's child: :func:`begin_run`
finds the calling run through a context variable that :func:`calling` sets
around every tool call (on the thread the call runs on), and the child's
:class:`RunLink` records its parent run and step, draws from the parent's
:class:`~codeact.budget.Budget`, sends approvals to the parent's approver
and knows its depth and the agents above it. No global state: the link
travels with the call.

Example::

    researcher = CodeActAgent(model, tools=[search], sandbox=pool)
    analyst = CodeActAgent(model, tools=[researcher.as_tool(
        name="researcher", description="Finds facts on the web and answers with a short summary.")])
    analyst.run("Summarise what each of these three companies sells: ...")
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..budget import Budget
from ..errors import AgentToolError, ConfigError
from ..messages import Usage
from ..tools import RunContext, Tool

if TYPE_CHECKING:  # pragma: no cover
    from ..events import RunResult, Step

#: How deep agents may call agents when the top run's RunLimits do not say (the top run is depth 0).
DEFAULT_MAX_DEPTH = 3
#: Calls of one agent tool that may run at once (threads in the parent's code) unless as_tool says.
DEFAULT_MAX_PARALLEL = 4


@dataclass
class RunLink:
    """One run's place in a tree of runs: its parent, budget, approver and depth. Made by :func:`begin_run`."""

    run_id: str
    #: The agents from the top run down to this one: ``"codeact > analyst > researcher"``.
    path: str
    depth: int
    budget: Budget
    approver: Any
    approval_lock: threading.Lock
    max_depth: int
    parent_run_id: str | None = None
    parent_step: int | None = None
    #: ``id()`` of the agents from the top run down to this one (a call of one of them is a cycle).
    agents: tuple[int, ...] = ()
    #: The host calls of the runs above that wait for this one (paused while a human approves).
    waiting_calls: tuple[Any, ...] = ()
    _on_finish: list[Callable[[], None]] = field(default_factory=list)
    _reserved: bool = False  # a model call was allowed and not yet charged

    # --- what the loops call ---------------------------------------------------------------------

    def before_model_call(self, model: Any) -> None:
        """Raise when the budget (this run's or one above) has nothing left for another model call."""
        problem = self.budget.needs_prices(model)
        if problem is not None:
            raise ConfigError(problem)
        self._settle()
        self.budget.check(before_call=True)
        self._reserved = True

    def price(self, usage: Usage, model: Any) -> Usage:
        """``usage`` (one model call of ``model``) with its cost, when the model's prices are known (its own, or
        the ``RunLimits.prices`` table of this run or the nearest run above that has one)."""
        return self.budget.price(usage, model)

    def spent(self, step: Step, result: RunResult, model: Any) -> None:
        """Count the step's model call: its cost filled in, added to the run's usage and to the budgets;
        raise :class:`~codeact.errors.BudgetExceeded` when that went past a limit."""
        step.usage = self.budget.price(step.usage, model)
        result.usage = result.usage + step.usage
        self.budget.charge(self.path, step.usage, reserved=self._reserved)
        self._reserved = False
        self.budget.check(before_call=False)

    def tree_usage(self) -> Usage:
        """What this run and the runs below it spent so far (its budget counts every charge below it)."""
        return self.budget.spent

    def finish(self) -> None:
        """The run ended: close what it kept open for its calls (stateful child sessions). Idempotent."""
        self._settle()
        hooks, self._on_finish = self._on_finish, []
        for hook in reversed(hooks):  # the last first: a child's cancel before the close of its session
            with contextlib.suppress(Exception):  # one failing close must not keep the others open
                hook()

    def _settle(self) -> None:
        """A reserved model call that was never charged (the call failed) goes back to the budget."""
        if self._reserved:
            self._reserved = False
            self.budget.release()

    def on_finish(self, hook: Callable[[], None]) -> None:
        self._on_finish.append(hook)

    def started_fields(self) -> dict[str, Any]:
        """The :class:`~codeact.events.RunStarted` fields that link this run to its parent."""
        return {"parent_run_id": self.parent_run_id, "parent_step": self.parent_step}


@dataclass(frozen=True)
class _Caller:
    link: RunLink
    step: int
    tool: str
    host_call: Any  # the sandbox's HostCall of this tool call (None for ReAct)
    #: ``(run id, status)`` of the runs this call started, for its ToolCall event.
    children: list[tuple[str, str]]


_calling: contextvars.ContextVar[_Caller | None] = contextvars.ContextVar("codeact_calling_run", default=None)


@contextlib.contextmanager
def calling(link: RunLink | None, step: int, tool: str, children: list[tuple[str, str]]) -> Iterator[None]:
    """Mark the tool call running in this context as one of ``link``'s run (a run started inside is its child);
    ``children`` gets ``(run id, status)`` of each agent run the call made."""
    if link is None:
        yield
        return
    from sandbox.functions import current_call

    token = _calling.set(_Caller(link, step, tool, current_call(), children))
    try:
        yield
    finally:
        _calling.reset(token)


def begin_run(agent: Any, run_id: str, kind: str) -> RunLink:
    """The link of a run of ``agent`` starting now: a child of the tool call running in this context, if any."""
    caller = _calling.get()
    limits = getattr(agent, "limits", None)
    own_approver = getattr(agent, "approve", None)
    if caller is None:
        return RunLink(run_id=run_id, path=kind, depth=0, budget=Budget(limits), approver=own_approver,
                       approval_lock=threading.Lock(), agents=(id(agent),),
                       max_depth=getattr(limits, "max_depth", DEFAULT_MAX_DEPTH))
    parent = caller.link
    return RunLink(run_id=run_id, path=f"{parent.path} > {caller.tool}", depth=parent.depth + 1,
                   budget=Budget(limits, parent.budget),
                   approver=parent.approver if parent.approver is not None else own_approver,
                   approval_lock=parent.approval_lock, max_depth=parent.max_depth,
                   parent_run_id=parent.run_id, parent_step=caller.step, agents=(*parent.agents, id(agent)),
                   waiting_calls=(*parent.waiting_calls, *([caller.host_call] if caller.host_call else [])))


# --- agent.as_tool ---------------------------------------------------------------------------------------


def agent_tool(agent: Any, *, name: str, description: str, output_type: Any = None, stateful: bool = False,
               max_parallel: int = DEFAULT_MAX_PARALLEL, timeout: float | None = 600.0) -> Tool[Any, Any]:
    """The :class:`Tool` :meth:`~codeact._run.AgentRuns.as_tool` returns (see there)."""
    if not name.isidentifier():
        raise ConfigError(f"an agent tool's name must be a Python identifier (the code calls it), got {name!r}")
    if not description.strip():
        raise ConfigError(f"agent tool {name!r} needs a description: the parent model reads it to decide when "
                          "to call the agent")
    if max_parallel < 1:
        raise ConfigError(f"max_parallel must be at least 1, got {max_parallel}")
    _check_tree(agent, name)
    runner = _AgentCalls(agent, name, output_type, stateful, max_parallel, timeout)

    def call(ctx: RunContext, task: str) -> Any:
        return runner.call(ctx, task)

    call.__doc__ = f"""{description.strip()}

    Args:
        task: what to ask {name} to do, in plain words, with everything it needs to know.

    Returns:
        {name}'s answer. A failure raises an error that names {name}'s run status.
    """
    tool: Tool[Any, Any] = Tool(call, name=name, timeout=timeout)
    tool.agent = agent  # type: ignore[attr-defined]  # read by _check_tree: the agents a tool calls
    return tool


def _agents_called(agent: Any) -> list[Any]:
    return [t.agent for t in getattr(agent, "tools", ()) if getattr(t, "agent", None) is not None]


def _check_tree(agent: Any, name: str) -> None:
    """A cycle (``agent`` reachable from its own tools) or a tree deeper than the depth limit: refuse now."""
    limit = getattr(getattr(agent, "limits", None), "max_depth", DEFAULT_MAX_DEPTH)

    def height(a: Any, seen: tuple[int, ...]) -> int:
        below = 0
        for child in _agents_called(a):
            if id(child) in seen:
                raise ConfigError(f"agent tool {name!r} would call itself: its agent is among the agents it calls "
                                  "(directly or through others); give the agents a tree, not a cycle")
            below = max(below, 1 + height(child, (*seen, id(child))))
        return below

    if 1 + height(agent, (id(agent),)) > limit:
        raise ConfigError(f"agent tool {name!r} makes a tree of agents deeper than {limit} levels; "
                          "flatten it or raise RunLimits(max_depth=...)")


class _AgentCalls:
    """The calls of one agent tool: each a child run (or a turn of the parent run's child session)."""

    def __init__(self, agent: Any, name: str, output_type: Any, stateful: bool, max_parallel: int,
                 timeout: float | None = None) -> None:
        from sandbox import SessionSource

        self.agent, self.name, self.output_type, self.stateful = agent, name, output_type, stateful
        self.timeout = timeout
        sandbox = getattr(agent, "sandbox", "docker")
        shared = sandbox is not None and not isinstance(sandbox, (str, SessionSource))
        # A started sandbox the user passed in runs one thing at a time: its children cannot overlap.
        self.max_parallel = 1 if shared else max_parallel
        self._slots = threading.BoundedSemaphore(self.max_parallel)
        self._lock = threading.Lock()
        self._sessions: dict[str, tuple[Any, threading.Lock]] = {}

    def call(self, ctx: RunContext, task: str) -> Any:
        caller = _calling.get()
        if caller is not None:
            self._check_call(caller)
        if not self._slots.acquire(blocking=False):
            raise AgentToolError(f"{self.name} is already running {self.max_parallel} calls at once, its limit: "
                                 "wait for one to finish (use fewer threads), or raise as_tool(max_parallel=...)",
                                 agent=self.name, status="refused")
        try:
            result = self._run(ctx, caller, task)
        finally:
            self._slots.release()
        if caller is not None:
            caller.children.append((result.run_id, result.status))
        if result.status != "success":
            raise AgentToolError(f"{self.name} (run {result.run_id}) ended with status {result.status}: "
                                 f"{result.error or 'no answer'}", agent=self.name, status=result.status,
                                 run_id=result.run_id, error=result.error)
        return result.answer

    def _check_call(self, caller: _Caller) -> None:
        link = caller.link
        if id(self.agent) in link.agents:
            raise AgentToolError(f"{self.name} would call itself ({link.path} > {self.name}); an agent may not "
                                 "call itself, directly or through others", agent=self.name, status="refused")
        if link.depth + 1 > link.max_depth:
            raise AgentToolError(f"{self.name} would run {link.depth + 1} levels deep ({link.path} > {self.name}), "
                                 f"past the limit of {link.max_depth}; do the work here instead",
                                 agent=self.name, status="refused")

    def _run(self, ctx: RunContext, caller: _Caller | None, task: str) -> RunResult:
        options: dict[str, Any] = {"output_type": self.output_type} if self.output_type is not None else {}
        if caller is None:  # called outside any run (a test, a script)
            return self.agent.run(task, **options)
        session = self._session_for(caller.link) if self.stateful else None
        # The parent run ends, or the call is over for the parent's code (it timed out, or the calling sandbox
        # gave up on it): the child's run is cancelled (its code interrupted) and its sandbox closed.
        options["cancel"] = cancel = threading.Event()
        caller.link.on_finish(cancel.set)
        with _CallWatch(cancel, self.timeout, caller.host_call):
            if session is None:
                return self.agent.run(task, **options)
            with session[1]:  # a conversation takes one turn at a time
                return session[0].send(task, **options)

    def _session_for(self, link: RunLink) -> tuple[Any, threading.Lock]:
        """The child session kept for the parent run ``link`` (made on its first call, closed when it ends)."""
        with self._lock:
            entry = self._sessions.get(link.run_id)
            if entry is None:
                entry = (self.agent.session(), threading.Lock())
                self._sessions[link.run_id] = entry
                link.on_finish(lambda: self._close(link.run_id))
            return entry

    def _close(self, run_id: str) -> None:
        with self._lock:
            entry = self._sessions.pop(run_id, None)
        if entry is not None:
            entry[0].close()


class _CallWatch:
    """Sets a child run's ``cancel`` event once the call that started it is over for the caller: past the
    agent tool's ``timeout`` (wall time, as :meth:`Tool.call <codeact.tools.Tool.call>` counts it), or its
    host call answered otherwise (the calling sandbox's own timeout, an interrupt of the calling code)."""

    #: Seconds between two looks at the call.
    POLL = 0.1

    def __init__(self, cancel: threading.Event, timeout: float | None, host_call: Any) -> None:
        self._cancel, self._timeout, self._host_call = cancel, timeout, host_call
        self._over = threading.Event()
        self._started = time.monotonic()

    def __enter__(self) -> _CallWatch:
        if self._timeout is not None or self._host_call is not None:
            threading.Thread(target=self._watch, daemon=True, name="agent-call-watch").start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._over.set()

    def _watch(self) -> None:
        while not self._over.wait(self.POLL):
            late = self._timeout is not None and time.monotonic() - self._started >= self._timeout
            if late or getattr(self._host_call, "state", "running") in ("timed_out", "abandoned"):
                self._cancel.set()
                return


__all__ = ["RunLink", "begin_run", "calling", "agent_tool", "DEFAULT_MAX_DEPTH", "DEFAULT_MAX_PARALLEL"]
