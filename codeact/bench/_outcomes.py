"""What an episode's ending means: one outcome each, the model's doing or the infrastructure's.

Every episode gets exactly one outcome:

=================  =======  ==========================================================================
outcome            counts   meaning
=================  =======  ==========================================================================
``solved``         ran      the checker accepted the answer
``wrong_answer``   ran      the agent answered; the checker refused the answer
``turn_limit``     ran      the turn limit was reached without an answer
``context_overflow`` ran    the conversation outgrew the model's context window (the model's limit)
``model_error``    no       the endpoint failed: unreachable, auth, rate limit, bad reply, ... (``error_kind``)
``sandbox_error``  no       the sandbox could not start or died
``timeout``        no       the episode was abandoned at ``--episode-timeout`` (a stalled model or tool)
``harness_error``  no       the task's own code (tool factory, oracle) or the harness failed
=================  =======  ==========================================================================

Success rates are over the episodes that *ran* (the model had its chance);
the others are counted beside them, never scored as wrong answers.
:class:`ErrorGuard` stops a run early when too many recent episodes end in
infrastructure errors (model, sandbox, timeout): a down endpoint should cost
seconds, not a sweep.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Sequence

SOLVED = "solved"
WRONG_ANSWER = "wrong_answer"
TURN_LIMIT = "turn_limit"
CONTEXT_OVERFLOW = "context_overflow"
MODEL_ERROR = "model_error"
SANDBOX_ERROR = "sandbox_error"
TIMEOUT = "timeout"
HARNESS_ERROR = "harness_error"

#: Every outcome, in the order reports list them.
OUTCOMES = (SOLVED, WRONG_ANSWER, TURN_LIMIT, CONTEXT_OVERFLOW, MODEL_ERROR, SANDBOX_ERROR, TIMEOUT, HARNESS_ERROR)
#: Outcomes of episodes that ran: the model had its chance; success rates are over these.
RAN = frozenset({SOLVED, WRONG_ANSWER, TURN_LIMIT, CONTEXT_OVERFLOW})
#: Failures of the services a run depends on (endpoint, sandbox, time): they stop a run early.
INFRASTRUCTURE = frozenset({MODEL_ERROR, SANDBOX_ERROR, TIMEOUT})


def ran(outcome: str) -> bool:
    """True when an episode with this outcome counts in success rates."""
    return outcome in RAN


def from_legacy(data: dict[str, Any]) -> str:
    """The outcome of an episode line written before outcomes were recorded (best effort)."""
    if data.get("success"):
        return SOLVED
    status = data.get("status")
    if status == "success":
        return WRONG_ANSWER
    if status == "max_steps":
        return TURN_LIMIT
    if status == "timeout":
        return TIMEOUT
    return HARNESS_ERROR


def classify_exception(exc: BaseException) -> tuple[str, str]:
    """``(outcome, error_kind)`` of an exception raised around an episode (not inside the agent's run)."""
    from ..errors import ContextOverflowError, ModelError

    if isinstance(exc, ContextOverflowError):
        return CONTEXT_OVERFLOW, exc.reason
    if isinstance(exc, ModelError):
        return MODEL_ERROR, exc.reason
    names = {c.__name__ for c in type(exc).__mro__}
    modules = {c.__module__.split(".")[0] for c in type(exc).__mro__}
    if "SandboxError" in names or "docker" in modules or isinstance(exc, TimeoutError):
        return SANDBOX_ERROR, type(exc).__name__  # a pool that cannot start a sandbox raises TimeoutError
    return HARNESS_ERROR, type(exc).__name__


class WatchedModel:
    """A model wrapper that remembers the last :class:`~codeact.errors.ModelError` it raised.

    The agents turn a model's exception into an error event with a message;
    the bench needs its kind (``reason``) to sort the episode, so each episode
    talks to the model through one of these.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self.name = getattr(model, "name", "?")
        self.error: BaseException | None = None

    def __getattr__(self, name: str) -> Any:  # everything else is the model's
        if name == "model":
            raise AttributeError(name)
        return getattr(self.model, name)

    def _seen(self, exc: BaseException) -> None:
        from ..errors import ModelError

        if isinstance(exc, ModelError):
            self.error = exc

    def complete(self, messages: Any, **options: Any) -> Any:
        try:
            return self.model.complete(messages, **options)
        except Exception as exc:
            self._seen(exc)
            raise

    def stream(self, messages: Any, **options: Any) -> Any:
        try:
            yield from self.model.stream(messages, **options)
        except Exception as exc:
            self._seen(exc)
            raise

    async def acomplete(self, messages: Any, **options: Any) -> Any:
        try:
            return await self.model.acomplete(messages, **options)
        except Exception as exc:
            self._seen(exc)
            raise


def classify_run(status: str | None, fatal_kind: str | None, model_error: BaseException | None,
                 checked_ok: bool) -> tuple[str, str]:
    """``(outcome, error_kind)`` of an agent run that ended with ``status``.

    Args:
        status: the run's status (``success``, ``max_steps``, ``error``, ...), None if there was no run.
        fatal_kind: the ``kind`` of the run's fatal error event (``model``, ``sandbox``, ``agent``, ``internal``).
        model_error: the ModelError the model raised last in this episode, if any.
        checked_ok: the checker's verdict (for a run that answered).
    """
    if status == "success":
        return (SOLVED if checked_ok else WRONG_ANSWER), ""
    if status == "max_steps":
        return TURN_LIMIT, ""
    if fatal_kind == "model" or (model_error is not None and fatal_kind is None and status == "error"):
        reason = getattr(model_error, "reason", "error") if model_error is not None else "error"
        return (CONTEXT_OVERFLOW if reason == "context_overflow" else MODEL_ERROR), reason
    if fatal_kind == "sandbox":
        return SANDBOX_ERROR, "sandbox"
    return HARNESS_ERROR, fatal_kind or "error"


class ErrorGuard:
    """Decides when a run must stop: more than ``share`` of the last ``window`` episodes failed in infrastructure.

    It judges once ``min(window, expected)`` episodes finished in this run,
    so a small run is judged on all of its episodes.
    """

    def __init__(self, share: float, window: int, expected: int) -> None:
        self.share = share
        self.window = max(1, window)
        self.judge_after = max(1, min(self.window, expected))
        self._recent: deque[tuple[str, str, str]] = deque(maxlen=self.window)
        self.seen = 0
        self.reason: str | None = None

    def add(self, episode: Any) -> str | None:
        """Record a finished episode; returns why the run must stop (once), else None."""
        self.seen += 1
        self._recent.append((episode.outcome, episode.error_kind, episode.error or ""))
        if self.reason is not None or self.seen < self.judge_after:
            return None
        bad = [r for r in self._recent if r[0] in INFRASTRUCTURE]
        if len(bad) > self.share * len(self._recent):
            self.reason = self._describe(bad)
            return self.reason
        return None

    def _describe(self, bad: Sequence[tuple[str, str, str]]) -> str:
        counts: dict[str, int] = {}
        for outcome, kind, _ in bad:
            label = f"{outcome} ({kind})" if kind else outcome
            counts[label] = counts.get(label, 0) + 1
        what = ", ".join(f"{n} {label}" for label, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        last = bad[-1][2]
        last = last if len(last) <= 400 else last[:399] + "…"
        return (f"{len(bad)} of the last {len(self._recent)} episodes failed in the infrastructure, not the model "
                f"({what}; more than {self.share:.0%} allowed); last error: {last}")
