"""PNG plots of a report (matplotlib's object API with the Agg canvas: headless, no pyplot state)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Protocol

from ..errors import BenchError
from ._metrics import GroupMetrics


class Plotted(Protocol):
    """What the plots read of a report (:class:`._report.Report` is one; declared here, below the report)."""

    @property
    def overall(self) -> Mapping[str, GroupMetrics]: ...

    @property
    def by_task(self) -> Mapping[str, Mapping[str, GroupMetrics]]: ...

    @property
    def ci(self) -> bool: ...

    @property
    def model_label(self) -> str: ...


def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise BenchError("plots need matplotlib: pip install 'codeact[bench]' (or report with --no-plots)") from exc
    return Figure(figsize=(width, height), dpi=100)


def write_plots(report: Plotted, directory: Path) -> list[Path]:
    """success_rate.png (per agent, 95 % interval bars), turns_per_task.png, tokens_per_task.png."""
    directory.mkdir(parents=True, exist_ok=True)
    return [_success(report, directory / "success_rate.png"),
            _per_task(report, directory / "turns_per_task.png", "turns",
                      "turns (episodes that ran; failures at the limit)"),
            _per_task(report, directory / "tokens_per_task.png", "tokens", "tokens per episode (prompt + completion)")]


def _success(report: Plotted, path: Path) -> Path:
    agents = list(report.overall)
    fig = _figure(max(4.0, 1.4 * len(agents) + 1.5), 4.0)
    ax = fig.add_subplot()
    rates = [report.overall[a].success_rate for a in agents]
    means, low, high = [], [], []
    for r in rates:
        mean = r.mean if math.isfinite(r.mean) else 0.0  # no episode ran: an empty bar, labelled n/a
        means.append(mean * 100)
        # Error bars are distances from the bar's top: never negative, whatever rounding did to the bounds.
        low.append(max(0.0, mean - r.low) * 100 if r.low is not None and math.isfinite(r.mean) else 0.0)
        high.append(max(0.0, r.high - mean) * 100 if r.high is not None and math.isfinite(r.mean) else 0.0)
    ax.bar(agents, means, yerr=[low, high], capsize=6, color="#4C72B0")
    for i, (m, r) in enumerate(zip(means, rates, strict=True)):
        text = f"{m:.0f}%" if math.isfinite(r.mean) else "n/a"
        ax.text(i, min(m + 2, 103), text, ha="center", va="bottom", fontsize=9)
    ax.set_ylim(0, 110)
    ax.set_ylabel("success rate (%) over the episodes that ran")
    note = " (95% CI)" if report.ci else ""
    ax.set_title(f"Success rate per agent{note} · model {report.model_label}")
    if len(agents) > 4:
        for label in ax.get_xticklabels():
            label.set_rotation(30)
            label.set_ha("right")
    fig.tight_layout()
    fig.savefig(path)
    return path


def _per_task(report: Plotted, path: Path, what: str, label: str) -> Path:
    tasks = list(report.by_task)
    agents = list(report.overall)
    height = max(3.0, 0.28 * len(tasks) * max(1, len(agents)) / 2 + 1.5)
    fig = _figure(9.0, min(height, 60.0))
    ax = fig.add_subplot()
    bar = 0.8 / max(1, len(agents))
    for j, agent in enumerate(agents):
        values = []
        for task in tasks:
            m = report.by_task[task].get(agent)
            if m is None:
                values.append(math.nan)
            elif what == "turns":
                values.append(m["turns"].mean)
            else:
                values.append(m["input_tokens"].mean + m["output_tokens"].mean)
        ax.barh([i + j * bar for i in range(len(tasks))], values, height=bar, label=agent)
    ax.set_yticks([i + bar * (len(agents) - 1) / 2 for i in range(len(tasks))])
    ax.set_yticklabels(tasks, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(label)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(f"{label} per task")
    fig.tight_layout()
    fig.savefig(path)
    return path
