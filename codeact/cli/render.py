"""Rendering of agent events and run records in the terminal, with rich (the CLI's view).

The agent never prints: it yields :mod:`codeact.events`. The CLI hands each
event to :meth:`Renderer.event`, which prints the step as it happens: the
model's thought, the code with syntax highlighting, the tool calls, the
observation, the paths of saved images, the final answer and a one-line
summary. On a terminal a spinner (and the model's streamed text) shows while
the model thinks or the code runs; elsewhere output is plain text.

The parts: :mod:`._render_format` (formatters and the status colours),
:mod:`._render_blocks` (a step's parts, shared with the run log),
:mod:`._render_runlog` (what ``codeact logs`` shows) and, here, the live view.

Example::

    from codeact.cli.render import Renderer

    r = Renderer(output_root=Path("out"))
    for event in agent.stream("Plot y = x**2"):
        r.event(event)
    r.close()
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from ..events import (
    CodeAction,
    CodeOutput,
    Compacted,
    ErrorEvent,
    Event,
    FinalAnswer,
    ModelOutput,
    NetworkRequest,
    Observation,
    PackageInstall,
    RunFinished,
    RunResult,
    RunStarted,
    TextDelta,
    ToolCall,
    ToolProgress,
)
from ..terminal import safe
from ._render_format import (
    LIVE_LINE_CHARS,
    LIVE_OUTPUT_CHARS,
    OBSERVATION_LINES,
    STATUS_ICON,
    STATUS_STYLE,
    STATUSES,
    STREAM_LINES,
    answer_renderable,
    call_text,
    elide_lines,
    fmt_seconds,
    fmt_time,
    fmt_tokens,
    fmt_usage,
    live_tail,
    prose_of,
    short,
    value_text,
)
from ._render_runlog import RunLogViews

__all__ = [
    "LIVE_LINE_CHARS",
    "LIVE_OUTPUT_CHARS",
    "OBSERVATION_LINES",
    "STATUSES",
    "STATUS_ICON",
    "STATUS_STYLE",
    "STREAM_LINES",
    "Renderer",
    "answer_renderable",
    "call_text",
    "elide_lines",
    "fmt_seconds",
    "fmt_time",
    "fmt_tokens",
    "live_tail",
    "prose_of",
    "short",
    "value_text",
]

#: The statuses a finished run's one-line error is printed for (above its summary).
ERROR_STATUSES = ("error", "cancelled", "interrupted", "budget_exceeded", "invalid_output")


class Renderer(RunLogViews):
    """Prints events as they arrive (and, through :class:`RunLogViews`, what the run log holds).

    Args:
        console: where steps go (default: stdout).
        err_console: where warnings, denials and errors go (default: stderr).
        output_root: artifacts of a run are in ``output_root/<run id>/``; used to print full paths.
        live: show a spinner / streamed model text (default: when ``console`` is a terminal).
    """

    def __init__(self, console: Console | None = None, err_console: Console | None = None, *,
                 output_root: Path | None = None, live: bool | None = None) -> None:
        super().__init__(console or Console(highlight=False), output_root)
        self.err = err_console or Console(stderr=True, highlight=False)
        self.live_enabled = self.console.is_terminal if live is None else live
        self._live: Any = None
        self._stream = ""
        self._output = ""  # the running code's output so far (its tail), shown live
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
        self.step_header(e.step, e.duration, e.usage.total_tokens, e.usage.cost)
        from ..parsing import parse_reply

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
        from ..observation import NOTHING_PRINTED

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
        from ..compaction import compacted_text

        self.pause()
        self.compacted(compacted_text(e))

    def _on_FinalAnswer(self, e: FinalAnswer) -> None:
        self.pause()
        self.answer(e.answer, e.status)

    def _on_RunFinished(self, e: RunFinished) -> None:
        self.pause()
        self.summary(e.result)

    def summary(self, result: RunResult) -> None:
        folder = None
        if result.artifacts:
            folder = Path(result.artifacts[0]).parent
            if self.output_root is not None:
                folder = self.output_root / result.run_id
        if result.status in ERROR_STATUSES and result.error and result.error not in self._errors_shown:
            self.console.print(Text(safe(f"{result.status}: {result.error}"), style=STATUS_STYLE[result.status]))
        self.console.print(self.summary_text(result.status, len(result.steps), result.usage.input_tokens,
                                             result.usage.output_tokens, result.duration, result.run_id, folder,
                                             cost=result.usage.cost),
                           soft_wrap=True)
        tree = result.tree_usage
        if tree.requests > result.usage.requests:  # it called agents: what the whole tree spent
            self.console.print(Text(safe(f"  with the agents it called: {fmt_usage(tree)}"), style="dim"),
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
