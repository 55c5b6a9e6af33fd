"""Tool calls on the host, the same for every agent: approvals, the call with its RunContext, its report.

:class:`~codeact.agent.CodeActAgent` (tools called from code in a sandbox) and
:class:`~codeact.react.ReActAgent` (tools called one action at a time) run the
same :class:`~codeact.tools.Tool` objects the same way: ask for approval when
the tool requires it (one approval open at a time, the human's time off every
clock), pass the hidden :class:`~codeact.tools.RunContext`, report a
:class:`~codeact.events.ToolCall` event with bounded previews.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from sandbox.functions import current_call

from ..errors import ApprovalDenied, CodeActError
from ..events import ToolCall
from ..tools import RunContext, Tool, ensure_tools, to_daemon_thread
from ..values import preview
from .tree import RunLink, calling

if TYPE_CHECKING:  # pragma: no cover
    from ..telemetry import RunTrace


def tools_to_add(tools: Sequence[Any], taken: Any, reserved: str) -> list[Tool[Any, Any]]:
    """``tools`` as Tools for a session's ``add_tools``: CodeActError when a name is in ``taken``, is
    ``reserved`` (the final-answer name) or comes twice."""
    new = ensure_tools(tools)
    clashes = [t.name for t in new if t.name in taken or t.name == reserved]
    if clashes or len({t.name for t in new}) != len(new):
        raise CodeActError(f"cannot add tool(s) {', '.join(clashes) or 'with one name twice'}: the name is taken")
    return new


@dataclass(frozen=True)
class ApprovalRequest:
    """A tool call waiting for a human's yes or no."""

    tool: str
    arguments: dict[str, Any]
    run_id: str
    step: int
    #: Which agent asks: its path from the top run, e.g. ``"codeact > researcher"`` for a child run of an
    #: agent called as a tool (whose approvals go to the top run's approver); "" when not known.
    agent: str = ""


Approver = Callable[[ApprovalRequest], bool]


class Approvals:
    """Asks an :data:`Approver` about calls of tools that require approval, one request at a time.

    The time a human takes (waiting for the turn included) counts against
    neither the call's timeout nor a code action's time limit. A call the
    sandbox was already told had failed is never run after a late yes.
    Without an approver every such call is denied.
    """

    def __init__(self, approver: Approver | None) -> None:
        self.approver = approver
        #: Held while a human is asked: one question at a time, whoever asks (tools, installs, skill saves).
        self.one_at_a_time = threading.Lock()

    def ask(self, request: Any, link: RunLink | None = None) -> bool:
        """Ask this approver about ``request`` (an install, a skill save: an :class:`ApprovalRequest`) as tool
        calls are asked: one question at a time, the human's time off the calling code's clock, no effect
        after a late yes. False without an approver.

        ``link``: the run's place in a tree of agents; a child run asks the top run's approver (one question
        at a time for the whole tree, the calls above waiting for it paused too) and ``request.agent`` names
        the agent asking.
        """
        approver, lock, waiting = self._who(link)
        if link is not None and link.depth > 0 and not getattr(request, "agent", ""):
            with contextlib.suppress(TypeError, ValueError):  # not a dataclass with ``agent``: asked as it is
                request = dataclasses.replace(request, agent=link.path)
        return self._asked(approver, lock, waiting, request)

    def _who(self, link: RunLink | None) -> tuple[Any, threading.Lock, tuple[Any, ...]]:
        """(approver, its lock, the host calls above that wait for this run): the top run's for a child run."""
        if link is None or link.depth == 0:
            return self.approver, self.one_at_a_time, ()
        return link.approver, link.approval_lock, link.waiting_calls

    @staticmethod
    def _asked(approver: Any, lock: threading.Lock, waiting: tuple[Any, ...], request: Any) -> bool:
        call = current_call()  # set when a sandbox's code made this call; None for ReAct
        with contextlib.ExitStack() as paused:
            # The human's time is off the clocks of this call and of the calls above waiting for this run.
            for held in (*waiting, call):
                if held is not None:
                    paused.enter_context(held.paused())
            with lock:
                allowed = approver is not None and bool(approver(request))
        if call is not None:
            call.checkpoint()
        return allowed

    def check(self, tool: Tool[Any, Any], arguments: dict[str, Any], run_id: str, step: int,
              link: RunLink | None = None) -> None:
        """Return if the approver allows the call; raise :class:`ApprovalDenied` otherwise.

        ``link``: the run's place in a tree of agents; a child run asks the top run's approver (one
        question at a time for the whole tree) and the request names the agent asking.
        """
        approver, lock, waiting = self._who(link)
        agent = link.path if link is not None and link.depth > 0 else ""
        request = ApprovalRequest(tool.name, {k: preview(v) for k, v in arguments.items()}, run_id, step, agent)
        if not self._asked(approver, lock, waiting, request):
            raise ApprovalDenied(f"the user did not allow this call to {tool.name}; "
                                 "do not retry it, find another way or explain in the final answer")


def invoke_tool(tool: Tool[Any, Any], arguments: dict[str, Any], *, run_id: str, step: int, deps: Any,
                approvals: Approvals, report: Callable[[ToolCall], None], trace: RunTrace | None = None,
                trace_parent: Any = None, call_id: str | None = None, link: RunLink | None = None) -> Any:
    """Run one call of ``tool`` on the host: approve, call with a :class:`RunContext`, report it.

    ``arguments`` is the tool's arguments dict (:meth:`Tool.bind` of a Python
    call, or a function-calling model's JSON). The call is reported through
    ``report`` as a :class:`ToolCall` event, failed or not; exceptions (a
    denied approval, bad arguments, the tool's own error) propagate.
    ``trace`` (the run's :class:`~codeact.telemetry._spans.RunTrace`, None when
    tracing is off) gets an ``execute_tool`` span under ``trace_parent``.
    ``link``: the run's :class:`~codeact.agent_tool.RunLink`; a run the tool starts is its child.
    """
    with _reported_call(tool, arguments, run_id, step, report, trace, trace_parent, call_id) as outcome:
        if tool.requires_approval:
            approvals.check(tool, arguments, run_id, step, link)
        with calling(link, step, tool.name, outcome.children):
            outcome.value = tool.call(arguments, RunContext(run_id=run_id, step=step, deps=deps))
    return outcome.value


async def ainvoke_tool(tool: Tool[Any, Any], arguments: dict[str, Any], *, run_id: str, step: int, deps: Any,
                       approvals: Approvals, report: Callable[[ToolCall], None], trace: RunTrace | None = None,
                       trace_parent: Any = None, link: RunLink | None = None) -> Any:
    """:func:`invoke_tool` for a tool whose calls run on the event loop running now (``Tool.loop``).

    The same approval, :class:`RunContext`, span and report; the call is awaited
    (:meth:`Tool.acall`), and only the approval, which may wait for a human,
    runs on a thread of its own, so the loop never blocks.
    """
    with _reported_call(tool, arguments, run_id, step, report, trace, trace_parent) as outcome:
        if tool.requires_approval:
            await to_daemon_thread(functools.partial(approvals.check, tool, arguments, run_id, step, link),
                                   f"approve-{tool.name}")
        with calling(link, step, tool.name, outcome.children):
            outcome.value = await tool.acall(arguments, RunContext(run_id=run_id, step=step, deps=deps))
    return outcome.value


@dataclass
class _Outcome:
    value: Any = None
    children: list[tuple[str, str]] = field(default_factory=list)  # agent runs the call started


@contextlib.contextmanager
def _reported_call(tool: Tool[Any, Any], arguments: dict[str, Any], run_id: str, step: int,
                   report: Callable[[ToolCall], None], trace: RunTrace | None, trace_parent: Any,
                   call_id: str | None = None) -> Iterator[_Outcome]:
    """What every tool call shares, sync or awaited: its ``execute_tool`` span and its :class:`ToolCall` report
    (failed or not; the exception propagates). The body sets ``outcome.value``."""
    started = time.perf_counter()
    span = trace.tool(tool.name, arguments, parent=trace_parent, call_id=call_id, step=step) \
        if trace is not None else None
    outcome = _Outcome()
    try:
        with span if span is not None else contextlib.nullcontext():
            yield outcome
            if span is not None:
                span.result(outcome.value)
    except Exception as exc:
        _report_call(report, tool, arguments, run_id, step, started, outcome.children, error=exc)
        raise
    _report_call(report, tool, arguments, run_id, step, started, outcome.children, value=outcome.value)


def _report_call(report: Callable[[ToolCall], None], tool: Tool[Any, Any], arguments: dict[str, Any], run_id: str,
                 step: int, started: float, children: list[tuple[str, str]], *, value: Any = None,
                 error: BaseException | None = None) -> None:
    shown = {k: preview(v) for k, v in arguments.items()}
    child_run_id, child_status = children[-1] if children else (None, None)
    if error is not None:
        report(ToolCall(run_id=run_id, step=step, name=tool.name, arguments=shown,
                        error=f"{type(error).__name__}: {error}", duration=time.perf_counter() - started,
                        child_run_id=child_run_id, child_status=child_status))
    else:
        report(ToolCall(run_id=run_id, step=step, name=tool.name, arguments=shown, result=preview(value),
                        duration=time.perf_counter() - started, child_run_id=child_run_id,
                        child_status=child_status))
