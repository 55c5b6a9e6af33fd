"""Approvals in the web UI: a tool call that needs the user's yes waits for the page's answer.

The agent's approver runs on the agent's worker thread and blocks there until
the page decides, or the turn is stopped, the session closed, or nobody
answers within the idle timeout: then the call is denied and the model reads
that as an error. With ``--yes`` every call is approved at once (the page
still shows each).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import SessionBusy
from ._wire import shown

#: Characters of each text field of a skill-save approval (its code, diff, docstring) sent to the
#: page: far above what the skill store accepts (64 kB of code), so the page shows them whole.
SKILL_TEXT_LIMIT = 1_000_000
#: Characters of each argument of a tool call shown on the page.
ARGUMENT_LIMIT = 2000


@dataclass
class PendingApproval:
    """One open question to the page: the agent's request, and the page's answer once it is in."""

    request: Any
    decided: threading.Event = field(default_factory=threading.Event)
    allowed: bool = False


class Approvals:
    """The approval requests of one UI session that wait for the page (see the module docstring).

    Args:
        publish: sends an event to the session's page.
        auto_approve: approve every call at once (``--yes``).
        timeout: seconds a request waits for an answer before it is denied.
    """

    def __init__(self, publish: Callable[[dict[str, Any]], Any], *, auto_approve: bool, timeout: float) -> None:
        self._publish = publish
        self._auto_approve = auto_approve
        self._timeout = timeout
        self._lock = threading.Lock()
        self._pending: dict[str, PendingApproval] = {}

    @property
    def waiting(self) -> int:
        """Requests waiting for an answer now."""
        with self._lock:
            return len(self._pending)

    def ask(self, request: Any, *, cancel: threading.Event | None, closed: Callable[[], bool]) -> bool:
        """Ask the page about ``request`` and wait for its answer (on the agent's worker thread).

        Denied when ``cancel`` is set (the turn was stopped), ``closed()`` is true (the session was closed)
        or nobody answers within the timeout.
        """
        aid = uuid.uuid4().hex[:12]
        call = {"id": aid, "run_id": request.run_id, "step": request.step, "tool": request.tool,
                "agent": getattr(request, "agent", ""), **approval_details(request)}
        if self._auto_approve:
            self._publish({"type": "ApprovalResolved", **call, "allowed": True,
                           "reason": "approved automatically (--yes)"})
            return True
        approval = PendingApproval(request)
        with self._lock:
            self._pending[aid] = approval
        self._publish({"type": "ApprovalRequested", **call})
        deadline = time.monotonic() + self._timeout
        reason = None
        while not approval.decided.wait(0.2):
            if closed():
                reason = "denied: the session was closed"
            elif cancel is not None and cancel.is_set():
                reason = "denied: the turn was stopped"
            elif time.monotonic() > deadline:
                reason = f"denied: no answer within {self._timeout / 60:g} minutes"
            if reason:
                break
        with self._lock:
            self._pending.pop(aid, None)
        allowed = approval.allowed if reason is None else False
        self._publish({"type": "ApprovalResolved", **call, "allowed": allowed,
                       "reason": reason or ("approved" if allowed else "denied")})
        return allowed

    def decide(self, aid: str, allow: bool) -> None:
        """The page's answer to the request ``aid``.

        Raises:
            SessionBusy: that request is no longer open (already answered, stopped or timed out).
        """
        with self._lock:
            approval = self._pending.get(aid)
            if approval is None or approval.decided.is_set():
                raise SessionBusy("this approval is no longer open (already answered, stopped or timed out)")
            approval.allowed = bool(allow)
            approval.decided.set()


def approval_details(request: Any) -> dict[str, Any]:
    """What the page shows of an approval request: the arguments, each cut to 2,000 characters; a skill
    save (:class:`~codeact.skills.SkillApproval`) also whole, its code and diff to read before saying yes."""
    from ..skills import SkillApproval

    if not isinstance(request, SkillApproval):
        return {"arguments": {str(k): shown(v, ARGUMENT_LIMIT) for k, v in request.arguments.items()}}

    def text(value: Any) -> str:
        value = value if isinstance(value, str) else ""
        if len(value) <= SKILL_TEXT_LIMIT:
            return value
        return value[:SKILL_TEXT_LIMIT] + f"\n[... {len(value) - SKILL_TEXT_LIMIT:,} more characters not shown]"

    return {"arguments": {"name": shown(request.name, 200), "signature": shown(request.signature, ARGUMENT_LIMIT)},
            "skill": {"name": text(request.name)[:200], "signature": text(request.signature),
                      "docstring": text(request.docstring), "code": text(request.code), "diff": text(request.diff),
                      "replaces": request.previous is not None, "store": text(request.store)[:1000]}}
