"""Reports over a results directory: a terminal table, JSON, CSV, Markdown, plots; and comparisons.

Everything here is computed from the stored episodes (``episodes.jsonl``),
so ``codeact bench report DIR`` gives the same numbers as the run that
wrote them, and a test can recompute them.

The columns are *systems*: the agents, or with several models each
``model · agent`` pair. Success rates and means are over the episodes that
ran; the others are counted beside them, by outcome (see
:mod:`codeact.bench._outcomes`).
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

from ..errors import BenchError
from ._metrics import GroupMetrics, Paired, by, group_metrics, needs_ci, paired
from ._outcomes import OUTCOMES, RAN
from ._plots import write_plots
from ._store import Episode, ResultsDir

REPORT_FORMAT = "codeact.bench.report/1"

#: Columns of the summary tables: (metric, header, how to show a Stat's mean).
#: "(ran)": over every episode that ran, a failure counted at its turn limit; "(solved)": over the solved ones.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("success_rate", "success", "pct"),
    ("turns", "turns (ran)", "f1"),
    ("turns_solved", "turns (solved)", "f1"),
    ("model_calls", "calls (ran)", "f2"),
    ("model_calls_solved", "calls (solved)", "f2"),
    ("input_tokens", "prompt tok", "int"),
    ("output_tokens", "completion tok", "int"),
    ("tool_calls", "tool calls", "f1"),
    ("invalid_actions", "invalid", "f2"),
    ("wall_time", "wall s", "f2"),
    ("sandbox_time", "sandbox s", "f2"),
)


@dataclass
class Report:
    """The numbers of one results directory.

    ``agents`` are the report's columns: agent kinds, or ``model · agent``
    labels when the episodes come from several ``models``.
    """

    settings: dict[str, Any]
    agents: list[str]
    episodes: list[Episode]
    overall: dict[str, GroupMetrics]
    by_suite: dict[str, dict[str, GroupMetrics]]
    by_task: dict[str, dict[str, GroupMetrics]]
    paired: list[Paired] = field(default_factory=list)
    ci: bool = False
    models: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what a reader must know (tasks left out of a comparison)

    @property
    def model_label(self) -> str:
        return ", ".join(self.models) or str(self.settings.get("model", "?"))

    def label(self, episode: Episode) -> str:
        """The column an episode belongs to."""
        return system_label(episode, len(self.models) > 1)

    def to_json(self) -> dict[str, Any]:
        settings = {k: v for k, v in self.settings.items() if k != "api_key"}
        return {
            "format": REPORT_FORMAT,
            "generated": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "settings": settings,
            "models": self.models,
            "agents": self.agents,
            "episodes": len(self.episodes),
            "ran": sum(1 for e in self.episodes if e.ran),
            "notes": list(self.notes),
            "confidence_intervals": self.ci,
            "overall": {a: m.to_json() for a, m in self.overall.items()},
            "by_suite": {s: {a: m.to_json() for a, m in ms.items()} for s, ms in self.by_suite.items()},
            "by_task": {t: {a: m.to_json() for a, m in ms.items()} for t, ms in self.by_task.items()},
            "paired": [p.to_json() for p in self.paired],
            "multi_turn": multi_turn_summary(self),
        }


def system_label(episode: Episode, several_models: bool) -> str:
    """``agent``, or ``model · agent`` when a report holds several models."""
    return f"{episode.model} · {episode.agent}" if several_models else episode.agent


def _ordered(seen: Sequence[str], preferred: Sequence[str]) -> list[str]:
    return [a for a in preferred if a in seen] + [a for a in seen if a not in preferred]


def build_report(episodes: Sequence[Episode], settings: dict[str, Any] | None = None,
                 notes: Sequence[str] = ()) -> Report:
    """Compute every table of the report from the episodes."""
    settings = dict(settings or {})
    episodes = list(episodes)
    models = _ordered(list(dict.fromkeys(e.model for e in episodes)), settings.get("models") or [])
    several = len(models) > 1
    kinds = _ordered(list(dict.fromkeys(e.agent for e in episodes)),
                     settings.get("agents") or ["codeact", "react-fc", "react-json", "react-text"])
    agents = [f"{m} · {k}" if several else k for m in (models if several else [""]) for k in kinds]
    present = {system_label(e, several) for e in episodes}
    agents = [a for a in agents if a in present]

    def label(e: Episode) -> str:
        return system_label(e, several)

    ci = needs_ci(episodes)
    overall = {a: group_metrics(g, ci) for (a,), g in sorted(by(episodes, label).items(),
                                                             key=lambda kv: agents.index(kv[0][0]))}
    by_suite: dict[str, dict[str, GroupMetrics]] = {}
    for (suite, agent), g in by(episodes, lambda e: e.suite, label).items():
        by_suite.setdefault(suite, {})[agent] = group_metrics(g, ci)
    by_task: dict[str, dict[str, GroupMetrics]] = {}
    for (task, agent), g in by(episodes, lambda e: e.task_key, label).items():
        by_task.setdefault(task, {})[agent] = group_metrics(g, ci)
    for table in (by_suite, by_task):
        for key in list(table):
            table[key] = {a: table[key][a] for a in agents if a in table[key]}
    pairs: list[Paired] = []
    # Each model's agents against its first agent; with several models, each agent's models against the first.
    for model in (models if several else [""]):
        mine = [f"{model} · {k}" if several else k for k in kinds if (f"{model} · {k}" if several else k) in present]
        pairs += [paired(episodes, mine[0], other, label) for other in mine[1:]]
    if several:
        for kind in kinds:
            mine = [f"{m} · {kind}" for m in models if f"{m} · {kind}" in present]
            pairs += [paired(episodes, mine[0], other, label) for other in mine[1:]]
    return Report(settings=settings, agents=agents, episodes=episodes, overall=overall,
                  by_suite=dict(sorted(by_suite.items())), by_task=dict(sorted(by_task.items())), paired=pairs, ci=ci,
                  models=models, notes=list(notes))


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
        row = [agent, str(m.ran), str(m.excluded)] + [cell(m, metric, how) for metric, _, how in COLUMNS]
        if with_cost:
            row.append("-" if m.cost is None else f"${m.cost:.4f}")
        rows.append(row)
    return rows


def summary_headers(with_cost: bool) -> list[str]:
    return ["agent", "ran", "excluded"] + [h for _, h, _ in COLUMNS] + (["cost"] if with_cost else [])


def _present_outcomes(metrics: dict[str, GroupMetrics]) -> list[str]:
    return [o for o in OUTCOMES if any(m.outcomes.get(o) for m in metrics.values())]


def outcome_headers(report: Report) -> list[str]:
    return ["agent", "episodes"] + [o.replace("_", " ") + ("" if o in RAN else " *") for o in
                                    _present_outcomes(report.overall)]


def outcome_rows(report: Report) -> list[list[str]]:
    """Per agent: how its episodes ended (``*``: not counted in the success rate)."""
    present = _present_outcomes(report.overall)
    return [[agent, str(m.episodes)] + [str(m.outcomes.get(o, 0)) for o in present]
            for agent, m in report.overall.items()]


def _excluded_note(report: Report) -> str:
    excluded = sum(m.excluded for m in report.overall.values())
    if not excluded:
        return ""
    return (f"{excluded} of {len(report.episodes)} episodes did not run to an answer or a turn limit "
            "(outcomes marked *: model, sandbox or harness errors, timeouts): they are excluded from the success "
            "rates and means and counted beside them; `codeact bench run ... --retry-errors` runs them again.")


def leaderboard_headers(report: Report) -> list[str]:
    return ["suite"] + report.agents


def leaderboard_rows(report: Report) -> list[list[str]]:
    """Success rate per suite (rows) and agent, or model x agent (columns), as papers and leaderboards set them out."""
    rows = [[suite] + [cell(ms[a], "success_rate", "pct") if a in ms else "-" for a in report.agents]
            for suite, ms in report.by_suite.items()]
    if len(report.by_suite) > 1:
        rows.append(["all"] + [cell(report.overall[a], "success_rate", "pct") for a in report.agents])
    return rows


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


def multi_turn_summary(report: Report) -> list[dict[str, Any]]:
    """Per agent, over the multi-turn episodes that ran: success per task category and overall, and costs per
    user turn.

    A task's category is its ``category:<name>`` tag (BFCL's: base, miss_func, ...). ``overall`` is the
    mean of the categories' success rates, as BFCL's leaderboard sets its multi-turn headline (with equal
    categories, the plain success rate). Per user turn: model calls, turns and tokens are ratios of totals
    (every user turn the episodes sent)."""
    out = []
    episodes = [e for e in report.episodes if e.user_turns and e.ran]
    for agent in report.agents:
        mine = [e for e in episodes if report.label(e) == agent]
        if not mine:
            continue
        categories: dict[str, list[bool]] = {}
        for e in mine:
            for tag in e.tags:
                if tag.startswith("category:"):
                    categories.setdefault(tag.split(":", 1)[1], []).append(e.success)
        per = {c: sum(v) / len(v) for c, v in categories.items()}
        user_turns = sum(e.user_turns for e in mine)
        out.append({
            "agent": agent, "episodes": len(mine),
            "success": sum(e.success for e in mine) / len(mine),
            "categories": per,
            "overall": sum(per.values()) / len(per) if per else sum(e.success for e in mine) / len(mine),
            "user_turns": user_turns,
            "model_calls_per_user_turn": sum(e.model_calls for e in mine) / user_turns,
            "turns_per_user_turn": sum(e.turns for e in mine) / user_turns,
            "tokens_per_user_turn": sum(e.input_tokens + e.output_tokens for e in mine) / user_turns,
            "user_turns_passed": sum(e.user_turns_passed for e in mine) / user_turns,
        })
    return out


def multi_turn_headers(report: Report) -> list[str]:
    categories = _categories(report)
    return (["agent", "tasks"] + categories + (["overall"] if categories else ["success"])
            + ["calls / user turn", "turns / user turn", "tokens / user turn", "user turns passed"])


def _categories(report: Report) -> list[str]:
    seen: list[str] = []
    for row in multi_turn_summary(report):
        seen += [c for c in row["categories"] if c not in seen]
    return seen


def multi_turn_rows(report: Report) -> list[list[str]]:
    """The multi-turn headline (success per category, overall, as BFCL reports it) next to the costs per user turn."""
    categories = _categories(report)
    rows = []
    for row in multi_turn_summary(report):
        rows.append([row["agent"], str(row["episodes"])]
                    + [fmt(row["categories"][c], "pct") if c in row["categories"] else "-" for c in categories]
                    + [fmt(row["overall"], "pct"), f"{row['model_calls_per_user_turn']:.2f}",
                       f"{row['turns_per_user_turn']:.2f}", fmt(row["tokens_per_user_turn"], "int"),
                       fmt(row["user_turns_passed"], "pct")])
    return rows


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
    models = ", ".join(f"`{m}`" for m in report.models) or f"`{s.get('model', '?')}`"
    lines.append(f"Model{'s' if len(report.models) > 1 else ''} {models} · temperature {s.get('temperature', '?')}"
                 f" · seed {s.get('seed', '?')} · backend {s.get('backend', '?')} · {len(report.episodes)} episodes"
                 f" · suites {', '.join(s.get('suites', [])) or '?'}")
    versions = s.get("suite_versions") or {}
    if versions:
        lines.append("Suite versions: " + ", ".join(f"{n} {v}" for n, v in versions.items()))
    prompts = s.get("prompts") or {}
    if prompts:
        lines.append("Prompts: " + ", ".join(f"`{a}`: {p}" for a, p in prompts.items()))
    lines.append("Success rates and means are over the episodes that ran; turns (ran) counts a failure at its "
                 "turn limit, turns (solved) only the solved episodes.")
    if report.ci:
        lines.append("Brackets: 95% confidence intervals over episodes (Wilson for success, t for means).")
    for note in [*report.notes, _excluded_note(report)]:
        if note:
            lines += ["", f"**Note:** {note}"]
    lines += ["", "## Success rate per suite", "", _md_table(leaderboard_headers(report), leaderboard_rows(report))]
    lines += ["", "## Overall", "", _md_table(summary_headers(with_cost), summary_rows(report.overall, with_cost))]
    lines += ["", "## Outcomes (* not counted in the success rate)", "",
              _md_table(outcome_headers(report), outcome_rows(report))]
    lines += ["", "## Per suite: model calls and tokens per episode", "",
              _md_table(FEWEST_HEADERS, fewest_calls_rows(report))]
    multi = multi_turn_rows(report)
    if multi:
        lines += ["", "## Multi-turn: success per category and costs per user turn", "",
                  _md_table(multi_turn_headers(report), multi)]
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
    writer.writerow(["scope", "name", "agent", "episodes", "ran", "excluded", *metric_names, "cost",
                     *[f"n_{o}" for o in OUTCOMES]])
    scopes = [("overall", "all", report.overall)]
    scopes += [("suite", s, ms) for s, ms in report.by_suite.items()]
    scopes += [("task", t, ms) for t, ms in report.by_task.items()]
    for scope, name, metrics in scopes:
        for agent, m in metrics.items():
            writer.writerow([scope, name, agent, m.episodes, m.ran, m.excluded,
                             *[round(m[k].mean, 6) for k in metric_names],
                             "" if m.cost is None else round(m.cost, 6), *[m.outcomes.get(o, 0) for o in OUTCOMES]])
    return buf.getvalue()


def print_report(report: Report, console: Any) -> None:
    """Print the summary, per-suite and paired tables with rich."""
    from rich.markup import escape
    from rich.table import Table

    with_cost = any(m.cost is not None for m in report.overall.values())
    several = len(report.models) > 1
    title = f"{len(report.episodes)} episodes · model{'s' if several else ''} {report.model_label}"
    for note in report.notes:
        console.print(f"[yellow]Note:[/yellow] {escape(note)}")
    for caption, headers, rows in (
        ("Success rate per suite", leaderboard_headers(report), leaderboard_rows(report)),
        (f"Overall ({title}; means over the episodes that ran)", summary_headers(with_cost),
         summary_rows(report.overall, with_cost)),
        ("Outcomes (* not counted in the success rate)", outcome_headers(report), outcome_rows(report)),
        ("Per suite: model calls and tokens per episode", FEWEST_HEADERS, fewest_calls_rows(report)),
        ("Multi-turn: success per category and costs per user turn", multi_turn_headers(report),
         multi_turn_rows(report)),
        ("Paired comparisons (same tasks)", PAIRED_HEADERS, paired_rows(report)),
    ):
        if not rows:
            continue
        table = Table(title=caption, title_justify="left", header_style="bold")
        for i, h in enumerate(headers):
            table.add_column(escape(h), justify="left" if i < 2 else "right")
        for row in rows:
            table.add_row(*[escape(c) for c in row])
        console.print(table)
    note = _excluded_note(report)
    if note:
        console.print(f"[yellow]Note:[/yellow] {escape(note)}")


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
        written += write_plots(report, out / "plots")
    return written


# --------------------------------------------------------------------------- comparing two result sets


@dataclass
class Comparison:
    """Two result sets side by side: per agent, each one's metrics and the difference.

    Both reports cover the same tasks (:func:`compare` leaves out the others and says so in ``notes``).
    """

    a: Report
    b: Report
    a_name: str
    b_name: str
    notes: list[str] = field(default_factory=list)

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
            "notes": list(self.notes),
            "tasks": len({e.task_key for e in self.a.episodes}),
            "a": {"path": self.a_name, "settings": self.a.settings, "overall": {k: m.to_json() for k, m in
                                                                               self.a.overall.items()}},
            "b": {"path": self.b_name, "settings": self.b.settings, "overall": {k: m.to_json() for k, m in
                                                                               self.b.overall.items()}},
            "changed_tasks": [{"agent": a, "task": t, "a": sa, "b": sb} for a, t, sa, sb in self.changed_tasks()],
        }

    def to_markdown(self) -> str:
        lines = [f"# {self.a_name} vs {self.b_name}", "",
                 f"A: model `{self.a.model_label}`, {len(self.a.episodes)} episodes · "
                 f"B: model `{self.b.model_label}`, {len(self.b.episodes)} episodes", ""]
        lines += [f"**Note:** {note}\n" for note in self.notes]
        lines += [_md_table(["agent", "metric", "A", "B", "B - A"], self.rows())]
        changed = self.changed_tasks()
        if changed:
            lines += ["", "Tasks whose success rate changed:", "",
                      _md_table(["agent", "task", "A", "B"],
                                [[a, t, fmt(x, "pct"), fmt(y, "pct")] for a, t, x, y in changed])]
        return "\n".join(lines) + "\n"

    def render(self, console: Any) -> None:
        from rich.markup import escape
        from rich.table import Table

        for note in self.notes:
            console.print(f"[yellow]Note:[/yellow] {escape(note)}")
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
    """Compare two results directories (``codeact bench compare A B``) on the tasks both ran.

    Tasks only one of them ran are left out, and the comparison's ``notes`` say which.

    Raises:
        BenchError: they ran different versions of a suite (the same task names may not be the same
            tasks), or no task in common.
    """
    ra, rb = ResultsDir(a), ResultsDir(b)
    sa, sb = ra.read_settings(), rb.read_settings()
    ea, eb = ra.episodes(), rb.episodes()
    va, vb = sa.get("suite_versions") or {}, sb.get("suite_versions") or {}
    suites = sorted({e.suite for e in ea} & {e.suite for e in eb})
    differ = [n for n in suites if n in va and n in vb and va[n] != vb[n]]
    if differ:
        what = "; ".join(f"{n}: {va[n]} in A, {vb[n]} in B" for n in differ)
        raise BenchError(f"{a} and {b} ran different versions of suite {', '.join(differ)} ({what}): tasks of the "
                         "same name may differ, so their numbers are not comparable; run both on the same version")
    notes: list[str] = []
    unknown = [n for n in suites if n not in va or n not in vb]
    if unknown:
        notes.append(f"the version of suite {', '.join(unknown)} was not recorded in "
                     f"{'A and B' if all(n not in va and n not in vb for n in unknown) else 'one of them'} "
                     "(written by an older codeact): whether both ran the same tasks cannot be checked")
    ta, tb = {e.task_key for e in ea}, {e.task_key for e in eb}
    common = ta & tb
    if not common:
        raise BenchError(f"{a} and {b} have no task in common (A: suites {', '.join(sa.get('suites', [])) or '?'}, "
                         f"{len(ta)} tasks; B: suites {', '.join(sb.get('suites', [])) or '?'}, {len(tb)} tasks); "
                         "nothing to compare")
    if ta != tb:
        def some(keys: set[str]) -> str:
            shown = sorted(keys)[:5]
            return ", ".join(shown) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")

        left = []
        if ta - common:
            left.append(f"{len(ta - common)} only in A ({some(ta - common)})")
        if tb - common:
            left.append(f"{len(tb - common)} only in B ({some(tb - common)})")
        notes.append(f"compared on the {len(common)} tasks both ran; left out: {'; '.join(left)}")
        ea = [e for e in ea if e.task_key in common]
        eb = [e for e in eb if e.task_key in common]
    return Comparison(build_report(ea, sa, notes), build_report(eb, sb, notes), str(a), str(b), notes)
