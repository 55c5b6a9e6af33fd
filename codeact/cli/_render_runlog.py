"""The run log on the terminal: the table of runs, a run's child runs as a tree, a recorded run step by step."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from ..terminal import safe
from ._render_blocks import Blocks
from ._render_format import (
    STATUS_ICON,
    STATUS_STYLE,
    fmt_cost,
    fmt_seconds,
    fmt_time,
    fmt_tokens,
    fmt_usage,
    prose_of,
    short,
)


class RunLogViews(Blocks):
    """What ``codeact logs`` shows: :class:`codeact.runlog.RunSummary` and :class:`codeact.runlog.RunRecord`."""

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


    def child_runs(self, children: list[Any], names: dict[str, str] | None = None) -> None:
        """The runs a run's tool calls started (agents called as tools): :class:`codeact.runlog.RunSummary`;
        ``names``: the tool each was called as, by run id."""
        if not children:
            return
        self.console.print(Text("Child runs", style="bold"))
        for c in children:
            self.console.print(self._run_line(c, (names or {}).get(c.id), with_step=True), soft_wrap=True)

    def run_tree(self, root: Any, children_of: Any, totals: tuple[Any, int] | None = None) -> None:
        """A run and the runs below it as a tree; ``children_of(summary)`` gives a run's child runs and the
        names of the tools they were called as (``(list, {run id: name})``); ``totals``: what the whole tree
        spent and its number of runs (:meth:`codeact.runlog.RunLog.tree_usage`), shown beside the root's own."""
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
        if totals is not None:
            self.console.print(self.tree_total(root.usage, *totals), soft_wrap=True)

    @staticmethod
    def tree_total(own: Any, usage: Any, runs: int) -> Text:
        """What a run and the runs below it spent together, beside what the run spent itself."""
        return Text.assemble(("whole tree", "bold"), safe(f" ({runs} run{'s' if runs != 1 else ''}): "),
                             safe(fmt_usage(usage)), (safe(f"  (this run alone: {fmt_usage(own)})"), "dim"))

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
        cost = f" · {fmt_cost(run.usage.cost)}" if run.usage.cost is not None else ""
        text.append(safe(f" · {run.step_count} steps · {fmt_tokens(run.usage.total_tokens)} tokens{cost} · "
                         f"{short(run.task, 60)}"), style="dim")
        return text

    def run_record(self, record: Any, events: Sequence[Any] = (), tree: tuple[Any, int] | None = None) -> None:
        """A recorded run (:class:`codeact.runlog.RunRecord`), step by step, as it was shown live.

        ``events``: the run's raw events (``RunLog.get_events``); its compactions are shown at their steps.
        ``tree``: what the run and the runs below it spent together and how many runs
        (:meth:`codeact.runlog.RunLog.tree_usage`), shown under the run's own total when it called agents.
        """
        from ..compaction import compacted_from, compacted_text
        from ..observation import NOTHING_PRINTED

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
            self.step_header(s.step, s.model_time, s.usage.total_tokens, s.usage.cost)
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
                                             record.usage.output_tokens, record.duration, record.id, folder,
                                             cost=record.usage.cost),
                           soft_wrap=True)
        if tree is not None and tree[1] > 1:
            self.console.print(self.tree_total(record.usage, *tree), soft_wrap=True)
