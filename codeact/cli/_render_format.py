"""How the terminal shows values, times, token counts and run statuses: small formatters, no console."""

from __future__ import annotations

import time
from typing import Any, get_args

from rich.console import RenderableType
from rich.markdown import Markdown
from rich.syntax import Syntax
from rich.text import Text

from ..events import RunStatus
from ..terminal import safe
from ..values import show

#: Lines of an observation shown on screen (the run log keeps all of it).
OBSERVATION_LINES = 60
#: Lines of streamed model text kept visible while it arrives.
STREAM_LINES = 12
#: Characters of a running code action's output kept for the live view (its tail; the observation has it all).
LIVE_OUTPUT_CHARS = 16_000
#: Characters of one line of live output shown (a line with no newline can be any length).
LIVE_LINE_CHARS = 1_000

#: The colour and the icon of each run status (:data:`codeact.events.RunStatus`; every one has both).
STATUS_STYLE: dict[str, str] = {
    "success": "green",
    "max_steps": "yellow",
    "cancelled": "yellow",
    "interrupted": "yellow",
    "error": "red",
    "invalid_output": "red",
    "running": "cyan",
    "budget_exceeded": "red",
}
STATUS_ICON: dict[str, str] = {"success": "✔", "max_steps": "●", "cancelled": "■", "interrupted": "↯", "error": "✘",
                               "invalid_output": "✘", "running": "…", "budget_exceeded": "$"}
#: Every run status, in the order the type lists them.
STATUSES: tuple[str, ...] = get_args(RunStatus)


def fmt_tokens(n: int) -> str:
    if n >= 10_000:
        return f"{n / 1000:.0f}k"
    if n >= 1000:
        return f"{n / 1000:.1f}k"
    return str(n)


def fmt_cost(cost: float | None) -> str:
    """Dollars as ``$0.0123`` ("" when the prices were not known: never shown as $0)."""
    return f"${cost:.4f}" if cost is not None else ""


def fmt_usage(usage: Any) -> str:
    """A :class:`~codeact.messages.Usage` in one phrase: ``3 model calls · 1.2k tokens · $0.0012``."""
    calls = f"{usage.requests} model call{'s' if usage.requests != 1 else ''}"
    return " · ".join(p for p in (calls, f"{fmt_tokens(usage.total_tokens)} tokens", fmt_cost(usage.cost)) if p)


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s"
    m, sec = divmod(int(round(s)), 60)
    return f"{m}m{sec:02d}s"


def fmt_time(t: float | None, *, short: bool = False) -> str:
    """Local time of ``t``; ``short`` leaves the year out when it is this year."""
    if not t:
        return "-"
    local = time.localtime(t)
    if short and local.tm_year == time.localtime().tm_year:
        return time.strftime("%m-%d %H:%M", local)
    return time.strftime("%Y-%m-%d %H:%M", local)


def short(text: str, limit: int = 160) -> str:
    text = " ".join(safe(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def value_text(value: Any, limit: int | None = None) -> str:
    """A value from an event (a :mod:`codeact.values` preview) as readable, terminal-safe text."""
    return safe(show(value, limit))


def call_text(name: str, arguments: dict[str, Any] | None) -> str:
    args = ", ".join(f"{safe(k)}={value_text(v, 400)}" for k, v in (arguments or {}).items())
    return f"{safe(name)}({args})"


def elide_lines(text: str, limit: int = OBSERVATION_LINES) -> tuple[str, int]:
    """``text`` with middle lines cut to ``limit`` lines; returns (text, lines hidden)."""
    lines = text.splitlines()
    if len(lines) <= limit:
        return text, 0
    head = limit * 2 // 3
    tail = limit - head
    hidden = len(lines) - head - tail
    return "\n".join(lines[:head] + [f"… {hidden} lines hidden …"] + lines[-tail:]), hidden


def prose_of(model_output: str) -> str:
    """The model's words without its code block(s)."""
    from ..export import model_prose

    return model_prose(model_output, limit=4000)


def live_tail(text: str, lines: int = STREAM_LINES, width: int = LIVE_LINE_CHARS) -> str:
    """The last ``lines`` lines of a running code's output as a terminal shows them.

    A carriage return starts its line over (progress bars), each line is cut
    to ``width`` characters, and the result is terminal-safe (:func:`safe`).
    """
    shown = []
    for line in text.splitlines()[-lines:]:
        line = line.rstrip("\r").rsplit("\r", 1)[-1]
        shown.append(line if len(line) <= width else line[: width - 1] + "…")
    return safe("\n".join(shown))


def answer_renderable(answer: Any) -> RenderableType:
    if answer is None:
        return Text("(no answer)", style="dim")
    if isinstance(answer, str):
        return Markdown(safe(answer)) if answer.strip() else Text("(empty answer)", style="dim")
    return Syntax(value_text(answer), "python", theme="ansi_dark", background_color="default", word_wrap=True)
