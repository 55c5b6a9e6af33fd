"""Where a run's events go: the run log (never breaking the run), and the result they end with."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..events import Event, RunFinished, RunResult

if TYPE_CHECKING:  # pragma: no cover
    from ..runlog import RunLog


def open_log(spec: Any) -> RunLog | None:
    """The run log an agent's ``log=`` option names: a RunLog, a path, True (the default file) or None/False."""
    if spec is None or spec is False:
        return None
    if spec is not True and not isinstance(spec, (str, os.PathLike)):
        return spec  # a RunLog (or anything with record()) the caller owns
    from ..runlog import RunLog

    return RunLog(spec if isinstance(spec, (str, os.PathLike)) else None)


def recorder(log: Any, transform: Callable[[Event], Event] | None = None) -> Callable[[Event], Event]:
    """``emit(event) -> event``: record the event in ``log`` (if any); the log never breaks a run.

    ``transform`` changes what is recorded (not what ``emit`` returns): the
    privacy filter records a copy with placeholders for hidden values. When
    the log cannot be written (a full disk, a broken file), the run goes on
    and one :class:`RuntimeWarning` per run says so, with the first error.
    """
    failed = False

    def emit(event: Event) -> Event:
        nonlocal failed
        if log is not None:
            try:
                log.record(transform(event) if transform is not None else event)
            except Exception as exc:  # the log must never break a run: say so once, go on
                if not failed:
                    failed = True
                    import warnings

                    warnings.warn(f"the run log {getattr(log, 'path', '')} could not record this run "
                                  f"({type(exc).__name__}: {exc}); the run goes on, its record may be "
                                  "incomplete", RuntimeWarning, stacklevel=2)
        return event

    return emit


def result_of(events: Iterator[Event]) -> RunResult[Any]:
    """Consume a run's events; return the result its final RunFinished carries."""
    result: RunResult[Any] | None = None
    for event in events:
        if isinstance(event, RunFinished):
            result = event.result
    assert result is not None, "a run always ends with RunFinished"
    return result
