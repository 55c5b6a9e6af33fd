"""A progress bar for a bench run: done/total, ETA, each agent's running success count (stderr, terminals only)."""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any, Protocol

from ._store import Episode


class Progress(Protocol):
    def start(self, total: int, done: int) -> None: ...

    def advance(self, episode: Episode) -> None: ...

    def stop(self) -> None: ...


class NoProgress:
    """Shows nothing (not a terminal, or turned off)."""

    def start(self, total: int, done: int) -> None:
        pass

    def advance(self, episode: Episode) -> None:
        pass

    def stop(self) -> None:
        pass


class BarProgress:
    """A rich progress bar on stderr."""

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console

        self.console = console or Console(stderr=True)
        self._bar: Any = None
        self._task: Any = None
        self._ok: Counter[str] = Counter()
        self._n: Counter[str] = Counter()
        self._excluded: Counter[str] = Counter()

    def start(self, total: int, done: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
            TimeRemainingColumn

        self._bar = Progress(TextColumn("[bold]bench"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                             TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[rates]}"),
                             console=self.console, transient=False)
        self._bar.start()
        self._task = self._bar.add_task("bench", total=total, rates="")

    def advance(self, episode: Episode) -> None:
        # Solved out of the episodes that ran; those that failed in the infrastructure are shown apart.
        if episode.ran:
            self._n[episode.agent] += 1
        else:
            self._excluded[episode.agent] += 1
            self._n.setdefault(episode.agent, 0)
        self._ok[episode.agent] += int(episode.success)
        rates = "  ".join(f"{a} {self._ok[a]}/{n}" + (f" (+{self._excluded[a]} errors)" if self._excluded[a] else "")
                          for a, n in self._n.items())
        if self._bar is not None:
            self._bar.update(self._task, advance=1, rates=rates)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def default_progress() -> Progress:
    """A bar when stderr is a terminal, else nothing."""
    try:
        tty = sys.stderr is not None and sys.stderr.isatty()
    except (ValueError, AttributeError):
        tty = False
    return BarProgress() if tty else NoProgress()
