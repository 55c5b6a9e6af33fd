"""The building blocks of a run on the terminal (a step's header, code, tool calls, observation, answer, summary),
shared by the live view (:class:`codeact.cli.render.Renderer`) and the run log's (``codeact logs show``)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.rule import Rule
from rich.syntax import Syntax
from rich.text import Text

from ..terminal import safe
from ._render_format import (
    STATUS_ICON,
    STATUS_STYLE,
    answer_renderable,
    call_text,
    elide_lines,
    fmt_cost,
    fmt_seconds,
    fmt_tokens,
    short,
    value_text,
)


class Blocks:
    """Prints the parts of a run to ``console``.

    Args:
        console: where they go.
        output_root: artifacts of a run are in ``output_root/<run id>/``; used to print full paths.
    """

    def __init__(self, console: Console, output_root: Path | None = None) -> None:
        self.console = console
        self.output_root = output_root
        self._run_id = ""  # the run being shown: named where an observation's hidden lines are
        #: Set while a typed turn runs (``--output-schema``, ``/type``): how the schema is named; the answer is
        #: then shown as pretty-printed JSON.
        self.answer_schema: str | None = None

    def step_header(self, step: int, seconds: float | None = None, tokens: int | None = None,
                    cost: float | None = None) -> None:
        facts = []
        if seconds and seconds >= 0.001:
            facts.append(fmt_seconds(seconds))
        if tokens:
            facts.append(f"{fmt_tokens(tokens)} tokens")
        if cost is not None:
            facts.append(fmt_cost(cost))
        title = f"Step {step}" + (f" · {' · '.join(facts)}" if facts else "")
        self.console.print(Rule(Text(title, style="bold"), align="left", style="bright_black"))

    def code(self, code: str) -> None:
        syntax = Syntax(safe(code), "python", theme="ansi_dark", background_color="default", word_wrap=True)
        self.console.print(Panel(syntax, title="code", title_align="left", border_style="blue", box=box.ROUNDED))

    def tool_call(self, name: str, arguments: dict[str, Any] | None, result: Any, error: str | None,
                  duration: float = 0.0) -> None:
        head = Text.assemble(("⚙ ", "magenta"), (short(call_text(name, arguments), 200), "magenta"))
        if error:
            head.append(f"  ✘ {short(error, 200)}", style="red")
        else:
            head.append(f"  → {short(value_text(result, 400), 200)}", style="default")
        if duration:
            head.append(f"  ({fmt_seconds(duration)})", style="dim")
        self.console.print(head)

    def observation(self, text: str, *, error: bool = False, duration: float | None = None,
                    run_id: str | None = None) -> None:
        shown, hidden = elide_lines(safe(text or ""))
        subtitle = None
        if hidden:
            subtitle = f"{hidden} lines hidden: codeact logs show {run_id or self._run_id}"
        title = "observation" + (f" · {fmt_seconds(duration)}" if duration else "")
        self.console.print(Panel(Text(shown), title=title, title_align="left", subtitle=subtitle,
                                 subtitle_align="left", border_style="red" if error else "green",
                                 box=box.ROUNDED))

    def artifacts(self, run_id: str, names: Iterable[str]) -> None:
        for name in names:
            path = (self.output_root / run_id / name) if self.output_root else Path(name)
            kind = "image" if name.lower().endswith((".png", ".jpg", ".jpeg", ".svg", ".gif")) else "file"
            if self.output_root and not path.is_file():  # never claim a file the host could not keep
                self.console.print(Text.assemble((f"  ↳ {kind} not saved: ", "yellow"), (safe(path), "yellow")),
                                   soft_wrap=True)
                continue
            self.console.print(Text.assemble((f"  ↳ {kind} saved: ", "cyan"), (safe(path), "cyan underline")),
                               soft_wrap=True)

    def answer(self, answer: Any, status: str) -> None:
        style = STATUS_STYLE.get(status, "white")
        if self.answer_schema is not None and status in ("success", "invalid_output"):
            self.json_answer(answer, status, self.answer_schema)
            return
        title = "Answer" if status == "success" else f"Answer ({status}: best effort, no final_answer)"
        self.console.print(Panel(answer_renderable(answer), title=title, title_align="left",
                                 border_style=style, box=box.ROUNDED))

    def json_answer(self, answer: Any, status: str, schema: str) -> None:
        """A typed answer: JSON, pretty-printed; the title says whether it matched ``schema``."""
        import json

        try:
            text = json.dumps(answer, indent=2, ensure_ascii=False)
        except (TypeError, ValueError):
            text = value_text(answer)
        valid = status == "success"
        title = (f"Answer (JSON, valid against {schema})" if valid
                 else f"Answer ({status}: this last value does NOT match {schema})")
        self.console.print(Panel(Syntax(safe(text), "json", theme="ansi_dark", background_color="default",
                                        word_wrap=True),
                                 title=safe(title), title_align="left", border_style=STATUS_STYLE.get(status, "white"),
                                 box=box.ROUNDED))

    def summary_text(self, status: str, steps: int, input_tokens: int, output_tokens: int,
                     seconds: float | None, run_id: str, artifacts_dir: Path | None = None,
                     cost: float | None = None) -> Text:
        style = STATUS_STYLE.get(status, "white")
        text = Text.assemble((f"{STATUS_ICON.get(status, '?')} {status}", f"bold {style}"))
        total = input_tokens + output_tokens
        parts = [
            f"{steps} step{'s' if steps != 1 else ''}",
            f"{fmt_tokens(total)} tokens ({fmt_tokens(input_tokens)} in, {fmt_tokens(output_tokens)} out)",
            *([fmt_cost(cost)] if cost is not None else []),
            fmt_seconds(seconds),
            f"run {run_id}",
        ]
        if artifacts_dir is not None:
            parts.append(f"artifacts: {artifacts_dir}")
        text.append(safe(" · " + " · ".join(parts)), style="dim")
        return text


    def compacted(self, text: str) -> None:
        """A compaction of the history (:mod:`codeact.compaction`): one dim line."""
        self.console.print(Text(safe("⇣ " + text), style="dim italic"), soft_wrap=True)

