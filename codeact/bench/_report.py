"""Reports over a results directory: a terminal table, JSON, CSV, Markdown, plots; and comparisons.

Everything here is computed from the stored episodes (``episodes.jsonl``),
so ``codeact bench report DIR`` gives the same numbers as the run that
wrote them, and a test can recompute them.
"""

from __future__ import annotations

import csv
import io
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ._metrics import GroupMetrics, Paired, by, group_metrics, needs_ci, paired
from ._store import Episode, ResultsDir

REPORT_FORMAT = "codeact.bench.report/1"

#: Columns of the summary tables: (metric, header, how to show a Stat's mean).
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("success_rate", "success", "pct"),
    ("turns", "turns", "f1"),
    ("model_calls", "model calls", "f2"),
    ("input_tokens", "prompt tok", "int"),
    ("output_tokens", "completion tok", "int"),
    ("tool_calls", "tool calls", "f1"),
    ("invalid_actions", "invalid", "f2"),
    ("wall_time", "wall s", "f2"),
    ("sandbox_time", "sandbox s", "f2"),
)


@dataclass
class Report:
    """The numbers of one results directory."""

    settings: dict[str, Any]
    agents: list[str]
    episodes: list[Episode]
    overall: dict[str, GroupMetrics]
    by_suite: dict[str, dict[str, GroupMetrics]]
    by_task: dict[str, dict[str, GroupMetrics]]
    paired: list[Paired] = field(default_factory=list)
    ci: bool = False

    def to_json(self) -> dict[str, Any]:
        settings = {k: v for k, v in self.settings.items() if k != "api_key"}
        return {
            "format": REPORT_FORMAT,
            "generated": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "settings": settings,
            "agents": self.agents,
            "episodes": len(self.episodes),
            "confidence_intervals": self.ci,
            "overall": {a: m.to_json() for a, m in self.overall.items()},
            "by_suite": {s: {a: m.to_json() for a, m in ms.items()} for s, ms in self.by_suite.items()},
            "by_task": {t: {a: m.to_json() for a, m in ms.items()} for t, ms in self.by_task.items()},
            "paired": [p.to_json() for p in self.paired],
        }


def _agent_order(episodes: Sequence[Episode], preferred: Sequence[str]) -> list[str]:
    seen = list(dict.fromkeys(e.agent for e in episodes))
    return [a for a in preferred if a in seen] + [a for a in seen if a not in preferred]


def build_report(episodes: Sequence[Episode], settings: dict[str, Any] | None = None) -> Report:
    """Compute every table of the report from the episodes."""
    settings = dict(settings or {})
    episodes = list(episodes)
    agents = _agent_order(episodes, settings.get("agents") or ["codeact", "react-fc", "react-json", "react-text"])
    ci = needs_ci(episodes)
    overall = {a: group_metrics(g, ci) for (a,), g in sorted(by(episodes, lambda e: e.agent).items(),
                                                             key=lambda kv: agents.index(kv[0][0]))}
    by_suite: dict[str, dict[str, GroupMetrics]] = {}
    for (suite, agent), g in by(episodes, lambda e: e.suite, lambda e: e.agent).items():
        by_suite.setdefault(suite, {})[agent] = group_metrics(g, ci)
    by_task: dict[str, dict[str, GroupMetrics]] = {}
    for (task, agent), g in by(episodes, lambda e: e.task_key, lambda e: e.agent).items():
        by_task.setdefault(task, {})[agent] = group_metrics(g, ci)
    for table in (by_suite, by_task):
        for key in list(table):
            table[key] = {a: table[key][a] for a in agents if a in table[key]}
    baseline = agents[0] if agents else None
    pairs = [paired(episodes, baseline, other) for other in agents[1:]] if baseline else []
    return Report(settings=settings, agents=agents, episodes=episodes, overall=overall,
                  by_suite=dict(sorted(by_suite.items())), by_task=dict(sorted(by_task.items())), paired=pairs, ci=ci)


def load_report(path: str | Path) -> Report:
    """The report of a results directory (read from its episodes)."""
    results = ResultsDir(path)
    settings = results.read_settings()
    return build_report(results.episodes(), settings)


# --------------------------------------------------------------------------- formatting


def fmt(value: float, how: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if how == "pct":
        return f"{value * 100:.1f}%"
    if how == "int":
        return f"{value:,.0f}"
    if how == "f1":
        return f"{value:.1f}"
    return f"{value:.2f}"


def cell(m: GroupMetrics, metric: str, how: str) -> str:
    stat = m[metric]
    text = fmt(stat.mean, how)
    if stat.low is not None and stat.high is not None:
        text += f" [{fmt(stat.low, how)}, {fmt(stat.high, how)}]"
    return text


def summary_rows(metrics: dict[str, GroupMetrics], with_cost: bool) -> list[list[str]]:
    rows = []
    for agent, m in metrics.items():
        row = [agent, str(m.episodes)] + [cell(m, metric, how) for metric, _, how in COLUMNS]
        if with_cost:
            row.append("-" if m.cost is None else f"${m.cost:.4f}")
        rows.append(row)
    return rows


def summary_headers(with_cost: bool) -> list[str]:
    return ["agent", "episodes"] + [h for _, h, _ in COLUMNS] + (["cost"] if with_cost else [])


def fewest_calls_rows(report: Report) -> list[list[str]]:
    """Per suite and agent: mean model calls and tokens, and the multiple of the first agent's calls."""
    rows = []
    for suite, metrics in report.by_suite.items():
        base = next(iter(metrics.values()), None)
        for agent, m in metrics.items():
            calls = m["model_calls"].mean
            times = calls / base["model_calls"].mean if base is not None and base["model_calls"].mean else math.nan
            rows.append([suite, agent, fmt(m.success_rate.mean, "pct"), fmt(calls, "f2"),
                         "-" if math.isnan(times) else f"{times:.2f}x",
                         fmt(m["input_tokens"].mean, "int"), fmt(m["output_tokens"].mean, "int"),
                         fmt(m["tool_calls"].mean, "f1")])
    return rows


FEWEST_HEADERS = ["suite", "agent", "success", "model calls", "vs first", "prompt tok", "completion tok", "tool calls"]


def paired_rows(report: Report) -> list[list[str]]:
    rows = []
    for p in report.paired:
        d = p.success_diff
        diff = f"{d.mean * 100:+.1f} pts" if not math.isnan(d.mean) else "-"
        if d.low is not None and d.high is not None and math.isfinite(d.low):
            diff += f" [{d.low * 100:+.1f}, {d.high * 100:+.1f}]"
        rows.append([f"{p.b} vs {p.a}", str(p.tasks), diff, f"{p.b_better}/{p.a_better}/{p.ties}",
                     f"{p.sign_test_p:.3f}", "-" if math.isnan(p.calls_ratio) else f"{p.calls_ratio:.2f}x",
                     "-" if math.isnan(p.tokens_ratio) else f"{p.tokens_ratio:.2f}x"])
    return rows


PAIRED_HEADERS = ["comparison", "tasks", "success diff", "better/worse/tie", "sign test p", "model calls",
                  "tokens"]


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    def esc(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(esc(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def to_markdown(report: Report) -> str:
    """The report as Markdown tables, ready to paste."""
    s = report.settings
    with_cost = any(m.cost is not None for m in report.overall.values())
    lines = ["# Benchmark results", ""]
    lines.append(f"Model `{s.get('model', '?')}` · temperature {s.get('temperature', '?')} · seed {s.get('seed', '?')}"
                 f" · backend {s.get('backend', '?')} · {len(report.episodes)} episodes · suites "
                 f"{', '.join(s.get('suites', [])) or '?'}")
    prompts = s.get("prompts") or {}
    if prompts:
        lines.append("Prompts: " + ", ".join(f"`{a}`: {p}" for a, p in prompts.items()))
    if report.ci:
        lines.append("Brackets: 95% confidence intervals over episodes (Wilson for success, t for means).")
    lines += ["", "## Overall", "", _md_table(summary_headers(with_cost), summary_rows(report.overall, with_cost))]
    lines += ["", "## Per suite: model calls and tokens per episode", "",
              _md_table(FEWEST_HEADERS, fewest_calls_rows(report))]
    if report.paired:
        lines += ["", "## Paired comparisons (same tasks)", "", _md_table(PAIRED_HEADERS, paired_rows(report))]
    lines += ["", "## Per task: success rate", ""]
    headers = ["task"] + report.agents
    rows = [[task] + [fmt(ms[a].success_rate.mean, "pct") if a in ms else "-" for a in report.agents]
            for task, ms in report.by_task.items()]
    lines += [_md_table(headers, rows), ""]
    return "\n".join(lines)


def episodes_csv(episodes: Sequence[Episode]) -> str:
    """One row per episode, every field."""
    buf = io.StringIO()
    fields = list(Episode.__dataclass_fields__)
    writer = csv.DictWriter(buf, fieldnames=fields)
    writer.writeheader()
    for e in episodes:
        row = e.to_json()
        for k in ("answer", "expected", "tags", "artifacts"):
            row[k] = json.dumps(row[k], ensure_ascii=False)
        writer.writerow(row)
    return buf.getvalue()


def summary_csv(report: Report) -> str:
    """One row per (scope, agent): overall, each suite, each task; the mean of each metric."""
    buf = io.StringIO()
    metric_names = ["success_rate"] + [name for name, _, _ in COLUMNS if name != "success_rate"] + ["harness_time"]
    writer = csv.writer(buf)
    writer.writerow(["scope", "name", "agent", "episodes", *metric_names, "cost"])
    scopes = [("overall", "all", report.overall)]
    scopes += [("suite", s, ms) for s, ms in report.by_suite.items()]
    scopes += [("task", t, ms) for t, ms in report.by_task.items()]
    for scope, name, metrics in scopes:
        for agent, m in metrics.items():
            writer.writerow([scope, name, agent, m.episodes, *[round(m[k].mean, 6) for k in metric_names],
                             "" if m.cost is None else round(m.cost, 6)])
    return buf.getvalue()


def render(report: Report, console: Any) -> None:
    """Print the summary, per-suite and paired tables with rich."""
    from rich.table import Table

    with_cost = any(m.cost is not None for m in report.overall.values())
    title = f"{len(report.episodes)} episodes · model {report.settings.get('model', '?')}"
    for caption, headers, rows in (
        (f"Overall ({title})", summary_headers(with_cost), summary_rows(report.overall, with_cost)),
        ("Per suite: model calls and tokens per episode", FEWEST_HEADERS, fewest_calls_rows(report)),
        ("Paired comparisons (same tasks)", PAIRED_HEADERS, paired_rows(report)),
    ):
        if not rows:
            continue
        table = Table(title=caption, title_justify="left", header_style="bold")
        for i, h in enumerate(headers):
            table.add_column(h, justify="left" if i < 2 else "right")
        for row in rows:
            table.add_row(*row)
        console.print(table)


def write_report(results: ResultsDir, report: Report, *, plots: bool = True) -> list[Path]:
    """Write report.json, report.md, summary.csv, episodes.csv and (with matplotlib) plots/*.png."""
    out = results.path
    written = []
    for name, text in (("report.json", json.dumps(report.to_json(), indent=2, ensure_ascii=False)),
                       ("report.md", to_markdown(report)), ("summary.csv", summary_csv(report)),
                       ("episodes.csv", episodes_csv(report.episodes))):
        path = out / name
        tmp = out / (name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        written.append(path)
    if plots and report.episodes:
        from ._plots import write_plots

        written += write_plots(report, out / "plots")
    return written


# --------------------------------------------------------------------------- comparing two result sets


@dataclass
class Comparison:
    """Two result sets side by side: per agent, each one's metrics and the difference."""

    a: Report
    b: Report
    a_name: str
    b_name: str

    def rows(self) -> list[list[str]]:
        rows = []
        for agent in dict.fromkeys([*self.a.agents, *self.b.agents]):
            ma, mb = self.a.overall.get(agent), self.b.overall.get(agent)
            for metric, header, how in COLUMNS:
                va = ma[metric].mean if ma else math.nan
                vb = mb[metric].mean if mb else math.nan
                delta = vb - va
                shown = "-" if math.isnan(delta) else (f"{delta * 100:+.1f} pts" if how == "pct" else
                                                       f"{delta:+.2f}")
                rows.append([agent, header, fmt(va, how), fmt(vb, how), shown])
        return rows

    def changed_tasks(self) -> list[tuple[str, str, float, float]]:
        """(agent, task, success in A, success in B) where they differ."""
        out = []
        for task in sorted(set(self.a.by_task) | set(self.b.by_task)):
            for agent in dict.fromkeys([*self.a.agents, *self.b.agents]):
                ma = self.a.by_task.get(task, {}).get(agent)
                mb = self.b.by_task.get(task, {}).get(agent)
                if ma is None or mb is None:
                    continue
                if ma.success_rate.mean != mb.success_rate.mean:
                    out.append((agent, task, ma.success_rate.mean, mb.success_rate.mean))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "codeact.bench.compare/1",
            "a": {"path": self.a_name, "settings": self.a.settings, "overall": {k: m.to_json() for k, m in
                                                                               self.a.overall.items()}},
            "b": {"path": self.b_name, "settings": self.b.settings, "overall": {k: m.to_json() for k, m in
                                                                               self.b.overall.items()}},
            "changed_tasks": [{"agent": a, "task": t, "a": sa, "b": sb} for a, t, sa, sb in self.changed_tasks()],
        }

    def to_markdown(self) -> str:
        lines = [f"# {self.a_name} vs {self.b_name}", "",
                 f"A: model `{self.a.settings.get('model')}`, {len(self.a.episodes)} episodes · "
                 f"B: model `{self.b.settings.get('model')}`, {len(self.b.episodes)} episodes", "",
                 _md_table(["agent", "metric", "A", "B", "B - A"], self.rows())]
        changed = self.changed_tasks()
        if changed:
            lines += ["", "Tasks whose success rate changed:", "",
                      _md_table(["agent", "task", "A", "B"],
                                [[a, t, fmt(x, "pct"), fmt(y, "pct")] for a, t, x, y in changed])]
        return "\n".join(lines) + "\n"

    def render(self, console: Any) -> None:
        from rich.table import Table

        table = Table(title=f"A: {self.a_name}  vs  B: {self.b_name}", title_justify="left", header_style="bold")
        for i, h in enumerate(["agent", "metric", "A", "B", "B - A"]):
            table.add_column(h, justify="left" if i < 2 else "right")
        last = None
        for row in self.rows():
            if last is not None and row[0] != last:
                table.add_section()
            last = row[0]
            table.add_row(*row)
        console.print(table)
        changed = self.changed_tasks()
        if changed:
            t2 = Table(title="Tasks whose success rate changed", title_justify="left", header_style="bold")
            for h in ("agent", "task", "A", "B"):
                t2.add_column(h)
            for a, t, x, y in changed:
                t2.add_row(a, t, fmt(x, "pct"), fmt(y, "pct"))
            console.print(t2)


def compare(a: str | Path, b: str | Path) -> Comparison:
    """Compare two results directories (``codeact bench compare A B``)."""
    return Comparison(load_report(a), load_report(b), str(a), str(b))
