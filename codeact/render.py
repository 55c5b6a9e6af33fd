"""Rendering of agent events and run records in the terminal, with rich.

The agent never prints: it yields :mod:`codeact.events`. The CLI hands each
event to :meth:`Renderer.event`, which prints the step as it happens: the
model's thought, the code with syntax highlighting, the tool calls, the
observation, the paths of saved images, the final answer and a one-line
summary. On a terminal a spinner (and the model's streamed text) shows while
the model thinks or the code runs; elsewhere output is plain text.

Example::

    from codeact.render import Renderer

    r = Renderer(output_root=Path("out"))
    for event in agent.stream("Plot y = x**2"):
        r.event(event)
    r.close()
"""

from __future__ import annotations

import time
from pathlib import Path
from collections.abc import Iterable, Sequence
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.markdown import Markdown
from rich.panel import Panel
from rich.rule import Rule
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from .terminal import safe
from .values import show
from .events import (
    CodeAction,
    CodeOutput,
    Compacted,
    ErrorEvent,
    Event,
    FinalAnswer,
    ModelOutput,
    Observation,
    NetworkRequest,
    PackageInstall,
    RunFinished,
    RunResult,
    RunStarted,
    TextDelta,
    ToolCall,
    ToolProgress,
)

#: Lines of an observation shown on screen (the run log keeps all of it).
OBSERVATION_LINES = 60
#: Lines of streamed model text kept visible while it arrives.
STREAM_LINES = 12
#: Characters of a running code action's output kept for the live view (its tail; the observation has it all).
LIVE_OUTPUT_CHARS = 16_000
#: Characters of one line of live output shown (a line with no newline can be any length).
LIVE_LINE_CHARS = 1_000

STATUS_STYLE = {
    "success": "green",
    "max_steps": "yellow",
    "cancelled": "yellow",
    "error": "red",
    "invalid_output": "red",
    "running": "cyan",
    "budget_exceeded": "red",
}
STATUS_ICON = {"success": "✔", "max_steps": "●", "cancelled": "■", "error": "✘", "invalid_output": "✘",
               "running": "…", "budget_exceeded": "$"}


# --------------------------------------------------------------------------- small formatters


def fmt_tokens(n: int) -> str:
    if n >= 10_000:
        return f"{n / 1000:.0f}k"
    if n >= 1000:
        return f"{n / 1000:.1f}k"
    return str(n)


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
    from .export import model_prose

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


# --------------------------------------------------------------------------- renderer


class Renderer:
    """Prints events as they arrive.

    Args:
        console: where steps go (default: stdout).
        err_console: where warnings, denials and errors go (default: stderr).
        output_root: artifacts of a run are in ``output_root/<run id>/``; used to print full paths.
        live: show a spinner / streamed model text (default: when ``console`` is a terminal).
    """

    def __init__(self, console: Console | None = None, err_console: Console | None = None, *,
                 output_root: Path | None = None, live: bool | None = None) -> None:
        self.console = console or Console(highlight=False)
        self.err = err_console or Console(stderr=True, highlight=False)
        self.output_root = output_root
        self.live_enabled = self.console.is_terminal if live is None else live
        self._live: Any = None
        self._stream = ""
        self._output = ""  # the running code's output so far (its tail), shown live
        self._run_id = ""
        self._step = 0
        self._label = ""
        self._held: Observation | None = None
        self._errors_shown: set[str] = set()

    # -- messages ------------------------------------------------------------------------

    def note(self, message: str, style: str = "dim") -> None:
        self.pause()
        self.console.print(Text(safe(message), style=style), soft_wrap=True)

    def notice(self, message: str) -> None:
        """A yellow diagnostic on stderr (not part of the run's output)."""
        self.pause()
        self.err.print(Text(safe(message), style="yellow"), soft_wrap=True)

    def warning(self, message: str) -> None:
        self.pause()
        self.err.print(Text.assemble(("Warning: ", "bold yellow"), (safe(message), "yellow")), soft_wrap=True)

    def error(self, message: str) -> None:
        self.pause()
        self.err.print(Text.assemble(("Error: ", "bold red"), (safe(message), "red")), soft_wrap=True)

    # -- live region (spinner and streamed text) -------------------------------------------

    def wait(self, label: str) -> None:
        """Show a spinner with ``label`` until the next output (terminals only)."""
        if not self.live_enabled:
            return
        self._label = label
        self._refresh()

    def _refresh(self) -> None:
        from rich.live import Live
        from rich.spinner import Spinner

        spinner = Spinner("dots", text=Text(self._label, style="dim"), style="cyan")
        renderable: RenderableType = spinner
        if self._stream:
            tail = "\n".join(self._stream.splitlines()[-STREAM_LINES:])
            renderable = Group(Text(safe(tail), style="dim italic"), spinner)
        elif self._output:
            renderable = Group(Text(live_tail(self._output)), spinner)
        if self._live is None:
            self._live = Live(renderable, console=self.console, transient=True, refresh_per_second=12)
            self._live.start()
        else:
            self._live.update(renderable)

    def pause(self) -> None:
        """Remove the spinner (before printing or asking something)."""
        if self._live is not None:
            live, self._live = self._live, None
            live.stop()

    def close(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            self._show_observation(held)
        self.pause()

    # -- events --------------------------------------------------------------------------

    def event(self, event: Event) -> None:
        held, self._held = self._held, None
        if held is not None and not isinstance(event, (FinalAnswer, TextDelta)):
            self._show_observation(held)
        elif held is not None and isinstance(event, TextDelta):
            self._held = held
        handler = getattr(self, "_on_" + type(event).__name__, None)
        if handler is not None:
            handler(event)

    def _on_RunStarted(self, e: RunStarted) -> None:
        self._run_id = e.run_id
        bits = [f"run {e.run_id}", f"model {e.model}", f"backend {e.backend}"]
        if e.tools:
            bits.append("tools: " + ", ".join(e.tools))
        if e.files:
            bits.append("files: " + ", ".join(e.files))
        self.pause()
        self.console.print(Text(safe(" · ".join(bits)), style="dim"), soft_wrap=True)
        self._step = 1
        self.wait("step 1: waiting for the model")

    def _on_TextDelta(self, e: TextDelta) -> None:
        if not self.live_enabled:
            return
        self._stream += e.text
        self._refresh()

    def _on_ModelOutput(self, e: ModelOutput) -> None:
        self._stream = ""
        self.pause()
        self.step_header(e.step, e.duration, e.usage.total_tokens)
        from .parsing import parse_reply

        parsed = parse_reply(e.text)
        if not parsed.has_code and not parsed.other_blocks and e.text.strip():
            return  # a plain-text reply is the final answer: shown once, below
        prose = prose_of(e.text)
        if prose:
            self.console.print(Text(safe(prose), style="italic"))

    def _on_CodeAction(self, e: CodeAction) -> None:
        self.pause()
        self._output = ""
        self.code(e.code)
        self.wait(f"step {e.step}: running the code")

    def _on_CodeOutput(self, e: CodeOutput) -> None:
        # What the code prints shows while it runs, above the spinner (terminals only); the
        # observation panel then shows it all once, so piped output stays one copy.
        if not self.live_enabled:
            return
        self._output = (self._output + e.text)[-LIVE_OUTPUT_CHARS:]
        self._refresh()

    def _on_ToolCall(self, e: ToolCall) -> None:
        self.pause()
        self.tool_call(e.name, e.arguments, e.result, e.error, e.duration)

    def _on_ToolProgress(self, e: ToolProgress) -> None:
        # a long call's progress goes into the spinner only: piped output stays one line per call
        done = f"{e.progress / e.total:.0%}" if e.total else f"{e.progress:g}"
        note = f" {e.message}" if e.message else ""
        self.wait(safe(f"step {e.step}: {e.name} {done}{note}"[:200]))

    def _on_PackageInstall(self, e: PackageInstall) -> None:
        self.pause()
        if e.error:
            text = f"packages {', '.join(e.requirements)}: not installed ({e.error_kind or 'error'}): {e.error}"
            self.console.print(Text(safe(text[:2000]), style="red"), soft_wrap=True)
            return
        added = ", ".join(f"{p.get('name')} {p.get('version')}" for p in e.packages) or "nothing new"
        size = sum(int(p.get("installed_bytes") or 0) for p in e.packages)
        origin = "from the host's cache" if e.resolved_from_cache else f"{e.downloaded} downloaded"
        text = f"installed {added} ({size / 1e6:.1f} MB, {origin}, {e.seconds:.1f} s)"
        self.console.print(Text(safe(text[:2000]), style="dim"), soft_wrap=True)

    def _on_NetworkRequest(self, e: NetworkRequest) -> None:
        self.pause()
        port = e.record.get("port")
        if e.allowed:
            text = f"network: {e.method} {e.host}:{port} -> {e.status}"
        else:
            text = f"network: {e.method} {e.host}:{port} refused ({e.record.get('reason') or e.status})"
        self.console.print(Text(safe(text[:500]), style="dim" if e.allowed else "yellow"), soft_wrap=True)

    def _on_Observation(self, e: Observation) -> None:
        from .observation import NOTHING_PRINTED

        self._output = ""
        self._step = e.step + 1
        if e.text.strip() == NOTHING_PRINTED and not e.error and not e.artifacts:
            # Usually the step that called final_answer(): the hint is for the model, not for
            # the reader. Shown only if the run goes on.
            self._held = e
        else:
            self._show_observation(e)
        self.wait(f"step {self._step}: waiting for the model")

    def _show_observation(self, e: Observation) -> None:
        self.pause()
        self.observation(e.text, error=bool(e.error), duration=e.duration)
        self.artifacts(e.run_id, e.artifacts)

    def _on_ErrorEvent(self, e: ErrorEvent) -> None:
        self.pause()
        if e.fatal:
            self.error(e.message)
            self._errors_shown.add(e.message)
            return
        self.console.print(Text.assemble((f"⚠ step {e.step} ({e.kind}): ", "bold yellow"), (safe(e.message), "yellow")))
        self.wait(f"step {e.step + 1}: waiting for the model")

    def _on_Compacted(self, e: Compacted) -> None:
        from .compaction import compacted_text

        self.pause()
        self.compacted(compacted_text(e))

    def _on_FinalAnswer(self, e: FinalAnswer) -> None:
        self.pause()
        self.answer(e.answer, e.status)

    def _on_RunFinished(self, e: RunFinished) -> None:
        self.pause()
        self.summary(e.result)

    # -- building blocks (also used by `codeact logs show`) ---------------------------------

    def step_header(self, step: int, seconds: float | None = None, tokens: int | None = None) -> None:
        facts = []
        if seconds and seconds >= 0.001:
            facts.append(fmt_seconds(seconds))
        if tokens:
            facts.append(f"{fmt_tokens(tokens)} tokens")
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
        title = "Answer" if status == "success" else f"Answer ({status}: best effort, no final_answer)"
        self.console.print(Panel(answer_renderable(answer), title=title, title_align="left",
                                 border_style=style, box=box.ROUNDED))

    def summary_text(self, status: str, steps: int, input_tokens: int, output_tokens: int,
                     seconds: float | None, run_id: str, artifacts_dir: Path | None = None,
                     cost: float | None = None) -> Text:
        style = STATUS_STYLE.get(status, "white")
        text = Text.assemble((f"{STATUS_ICON.get(status, '?')} {status}", f"bold {style}"))
        total = input_tokens + output_tokens
        parts = [
            f"{steps} step{'s' if steps != 1 else ''}",
            f"{fmt_tokens(total)} tokens ({fmt_tokens(input_tokens)} in, {fmt_tokens(output_tokens)} out)",
            *([f"${cost:.4f}"] if cost is not None else []),
            fmt_seconds(seconds),
            f"run {run_id}",
        ]
        if artifacts_dir is not None:
            parts.append(f"artifacts: {artifacts_dir}")
        text.append(safe(" · " + " · ".join(parts)), style="dim")
        return text

    def summary(self, result: RunResult) -> None:
        folder = None
        if result.artifacts:
            folder = Path(result.artifacts[0]).parent
            if self.output_root is not None:
                folder = self.output_root / result.run_id
        if result.status in ("error", "cancelled", "budget_exceeded", "invalid_output") and result.error \
                and result.error not in self._errors_shown:
            self.console.print(Text(safe(f"{result.status}: {result.error}"), style=STATUS_STYLE[result.status]))
        self.console.print(self.summary_text(result.status, len(result.steps), result.usage.input_tokens,
                                             result.usage.output_tokens, result.duration, result.run_id, folder,
                                             cost=result.usage.cost),
                           soft_wrap=True)

    # -- approvals -------------------------------------------------------------------------

    def approval_request(self, tool: str, arguments: dict[str, Any], step: int, agent: str = "") -> None:
        """Ask about a tool call; ``agent``: the path of the agent asking when it is a child run."""
        self.pause()
        lines = "\n".join(f"{safe(k)} = {value_text(v, 2000)}" for k, v in arguments.items()) or "(no arguments)"
        body = Syntax(lines, "python", theme="ansi_dark", background_color="default", word_wrap=True)
        who = f"the agent {agent}" if agent else "the code"
        self.err.print(Panel(body, title=safe(f"step {step}: {who} wants to call {tool}"), title_align="left",
                             border_style="yellow", box=box.ROUNDED))

    # -- the run log -----------------------------------------------------------------------

    def runs_table(self, runs: list[Any]) -> None:
        """A table of :class:`codeact.runlog.RunSummary`; optional columns go first when the terminal is narrow."""
        columns: list[tuple[str, dict[str, Any], Any, bool]] = [
            ("run", {"style": "cyan"}, lambda r: safe(r.id), True),
            ("started", {}, lambda r: fmt_time(r.started, short=True), True),
            ("status", {}, lambda r: Text(r.status, style=STATUS_STYLE.get(r.status, "")), True),
            ("steps", {"justify": "right"}, lambda r: str(r.step_count), True),
            ("tokens", {"justify": "right"}, lambda r: fmt_tokens(r.usage.total_tokens), False),
            ("time", {"justify": "right"}, lambda r: fmt_seconds(r.duration), False),
            ("model", {}, lambda r: short(r.model or "-", 20), False),
        ]
        cells = [[fn(r) for (_, _, fn, _) in columns] for r in runs]
        widths = [max([len(str(row[i])) for row in cells] + [len(name)]) for i, (name, _, _, _) in enumerate(columns)]
        keep = list(range(len(columns)))
        min_task = 24

        def room() -> int:
            return self.console.width - sum(widths[i] + 2 for i in keep) - 1

        for i in (6, 5, 4):  # drop model, then time, then tokens while the task has too little room
            if room() >= min_task:
                break
            keep.remove(i)
        table = Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold underline")
        for i in keep:
            name, kwargs, _, _ = columns[i]
            table.add_column(name, no_wrap=True, **kwargs)
        table.add_column("task", no_wrap=True)
        width = max(room(), 10)
        for r, row in zip(runs, cells, strict=True):
            table.add_row(*[row[i] for i in keep], short(r.task, width))
        self.console.print(table)

    def compacted(self, text: str) -> None:
        """A compaction of the history (:mod:`codeact.compaction`): one dim line."""
        self.console.print(Text(safe("⇣ " + text), style="dim italic"), soft_wrap=True)

    def child_runs(self, children: list[Any], names: dict[str, str] | None = None) -> None:
        """The runs a run's tool calls started (agents called as tools): :class:`codeact.runlog.RunSummary`;
        ``names``: the tool each was called as, by run id."""
        if not children:
            return
        self.console.print(Text("Child runs", style="bold"))
        for c in children:
            self.console.print(self._run_line(c, (names or {}).get(c.id), with_step=True), soft_wrap=True)

    def run_tree(self, root: Any, children_of: Any) -> None:
        """A run and the runs below it as a tree; ``children_of(summary)`` gives a run's child runs and the
        names of the tools they were called as (``(list, {run id: name})``)."""
        from rich.tree import Tree

        tree = Tree(self._run_line(root, None, with_step=False))
        pending = [(tree, root)]
        seen = {root.id}
        while pending:
            node, run = pending.pop(0)
            children, names = children_of(run)
            for child in children:
                if child.id in seen:  # a log edited by hand could loop
                    continue
                seen.add(child.id)
                pending.append((node.add(self._run_line(child, names.get(child.id), with_step=True)), child))
        self.console.print(tree)

    @staticmethod
    def _run_line(run: Any, name: str | None, *, with_step: bool) -> Text:
        style = STATUS_STYLE.get(run.status, "")
        text = Text()
        if with_step:
            text.append(f"step {run.parent_step} → ", style="dim")
        if name:
            text.append(safe(f"{name} "), style="bold")
        text.append(safe(run.id), style="cyan")
        text.append(safe(f" {run.agent or '?'} "), style="dim" if name else "bold")
        text.append(f"{STATUS_ICON.get(run.status, '?')} {safe(run.status)}", style=style)
        text.append(safe(f" · {run.step_count} steps · {fmt_tokens(run.usage.total_tokens)} tokens · "
                         f"{short(run.task, 60)}"), style="dim")
        return text

    def run_record(self, record: Any, events: Sequence[Any] = ()) -> None:
        """A recorded run (:class:`codeact.runlog.RunRecord`), step by step, as it was shown live.

        ``events``: the run's raw events (``RunLog.get_events``); its compactions are shown at their steps.
        """
        from .compaction import compacted_from, compacted_text
        from .observation import NOTHING_PRINTED

        compactions: dict[int, list[str]] = {}
        for raw in events:
            if isinstance(raw, dict) and raw.get("type") == "Compacted":
                event = compacted_from(raw.get("payload"))
                if event is not None:
                    step = raw.get("step")
                    compactions.setdefault(step if isinstance(step, int) else 0, []).append(compacted_text(event))

        meta = Table.grid(padding=(0, 2))
        meta.add_column(style="bold")
        meta.add_column()
        meta.add_row("run", safe(record.id))
        meta.add_row("task", safe(record.task))
        meta.add_row("status", Text(safe(record.status), style=STATUS_STYLE.get(record.status, "")))
        meta.add_row("model", safe(record.model or "-"))
        meta.add_row("backend", safe(record.backend or "-"))
        meta.add_row("started", fmt_time(record.started))
        if getattr(record, "parent_run_id", None):
            meta.add_row("parent", safe(f"run {record.parent_run_id}, step {record.parent_step}"))
        if record.tools:
            meta.add_row("tools", safe(", ".join(record.tools)))
        if record.files:
            meta.add_row("files", safe(", ".join(record.files)))
        self.console.print(meta)
        errors_by_step: dict[int, list[Any]] = {}
        for err in record.errors:
            errors_by_step.setdefault(err.step, []).append(err)
        for s in record.steps:
            for line in compactions.pop(s.step, []):
                self.compacted(line)
            # The same measure as the live header (ModelOutput.duration): the model's time, next to its
            # tokens; the code's time is on the observation, as it is live.
            self.step_header(s.step, s.model_time, s.usage.total_tokens)
            prose = prose_of(s.model_output)
            if s.code is None and not s.error and s.model_output.strip() and s.step == len(record.steps):
                prose = ""  # the plain-text final answer, shown below
            if prose:
                self.console.print(Text(safe(prose), style="italic"))
            if s.code is not None:
                self.code(s.code)
            for c in s.tool_calls:
                self.tool_call(c.name, c.arguments, c.result, c.error, c.duration)
            final_hint = (s.step == len(record.steps) and record.status == "success" and not s.error
                          and not s.artifacts and (s.observation or "").strip() == NOTHING_PRINTED)
            if s.observation is not None and not final_hint:  # live leaves that hint out too (_on_Observation)
                self.observation(s.observation, error=bool(s.error), duration=s.sandbox_time, run_id=record.id)
            for a in s.artifacts:
                self.console.print(Text.assemble(("  ↳ saved: ", "cyan"), (safe(a.path), "cyan underline")),
                                   soft_wrap=True)
            for err in errors_by_step.pop(s.step, []):
                if not err.fatal:
                    self.console.print(Text.assemble((f"⚠ {safe(err.kind)}: ", "bold yellow"),
                                                     (safe(err.message), "yellow")))
        if record.status in ("success", "max_steps"):
            self.answer(record.answer, record.status)
        for errs in errors_by_step.values():
            for err in errs:
                if err.fatal:
                    self.console.print(Text(safe(f"error ({err.kind}): {err.message}"), style="red"))
        if record.error and record.status != "success" \
                and not any(e.fatal and e.message == record.error for e in record.errors):
            self.console.print(Text(safe(f"{record.status}: {record.error}"),
                                    style=STATUS_STYLE.get(record.status, "")))
        folder = None
        if record.artifacts:
            folder = Path(record.artifacts[0].path).parent
        self.console.print(self.summary_text(record.status, len(record.steps), record.usage.input_tokens,
                                             record.usage.output_tokens, record.duration, record.id, folder),
                           soft_wrap=True)
