"""Metrics over episodes: per agent, per suite, per task; confidence intervals; paired comparisons.

Every metric is a mean over the episodes that *ran* (the model had its
chance: solved, wrong answer, turn limit, context overflow); episodes that
ended in a model, sandbox or harness error or a timeout are excluded and
counted beside them (``excluded``, ``outcomes``). ``turns`` and
``model_calls`` are shown twice: over every episode that ran, where a
failed one counts at its task's turn limit, and over the solved ones only
(``turns_solved``, ``model_calls_solved``). With more than one repeat per
task, means carry a 95 % confidence interval: Wilson's for the success rate
(always inside [0, 1] and around the rate), Student's t for the others (both
over episodes). A paired comparison of two agents looks at the
tasks both ran: per task, the difference of their success rates; its mean
with a t interval over tasks, the tasks each one won, and a two-sided sign
test; and the ratio of their mean model calls and tokens.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from ._store import Episode

# Student's t, two-sided 95 %, for 1..30 degrees of freedom.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t95(df: int) -> float:
    """The two-sided 95 % quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        return math.inf
    if df <= 30:
        return _T95[df - 1]
    if df <= 60:
        return 2.042 + (2.000 - 2.042) * (df - 30) / 30
    if df <= 120:
        return 2.000 + (1.980 - 2.000) * (df - 60) / 60
    return 1.960


@dataclass(frozen=True)
class Stat:
    """A mean over ``n`` values, with a 95 % interval (``low``/``high``) when one was computed."""

    mean: float
    n: int
    low: float | None = None
    high: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mean": _round(self.mean), "n": self.n}
        if self.low is not None and self.high is not None:
            out["ci95"] = [_round(self.low), _round(self.high)]
        return out


def _round(x: float) -> float:
    return round(x, 6) if math.isfinite(x) else x


def mean_stat(values: Sequence[float], ci: bool, lowest: float = -math.inf, highest: float = math.inf) -> Stat:
    """The mean with Student's t interval, clipped to the values the quantity can take (``lowest``, ``highest``)."""
    if not values:
        return Stat(math.nan, 0)
    mean = statistics.fmean(values)
    if not ci or len(values) < 2:
        return Stat(mean, len(values))
    half = t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return Stat(mean, len(values), max(lowest, mean - half), min(highest, mean + half))


def wilson(successes: int, n: int, ci: bool) -> Stat:
    """The success rate with Wilson's 95 % interval."""
    if n == 0:
        return Stat(math.nan, 0)
    p = successes / n
    if not ci:
        return Stat(p, n)
    z = 1.959964
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # In exact arithmetic low <= p <= high and both lie in [0, 1]; rounding can put a bound a hair past
    # the rate (1 - 1e-16 above a perfect score), and a plot's error bar then has a negative half.
    low = 0.0 if successes == 0 else min(p, max(0.0, centre - half))
    high = 1.0 if successes == n else max(p, min(1.0, centre + half))
    return Stat(p, n, low, high)


#: The metrics reported for a group of episodes (over those that ran): (name, value of one episode).
METRICS: tuple[tuple[str, Callable[[Episode], float]], ...] = (
    ("turns", lambda e: float(e.turns_counted)),
    ("model_calls", lambda e: float(e.model_calls)),
    ("input_tokens", lambda e: float(e.input_tokens)),
    ("output_tokens", lambda e: float(e.output_tokens)),
    ("tool_calls", lambda e: float(e.tool_calls)),
    ("invalid_actions", lambda e: float(e.invalid_actions)),
    ("wall_time", lambda e: e.wall_time),
    ("sandbox_time", lambda e: e.sandbox_time),
    ("harness_time", lambda e: e.harness_time),
)


#: The metrics also reported over the solved episodes only: (name, value of one episode).
SOLVED_METRICS: tuple[tuple[str, Callable[[Episode], float]], ...] = (
    ("turns_solved", lambda e: float(e.turns)),
    ("model_calls_solved", lambda e: float(e.model_calls)),
)


@dataclass(frozen=True)
class GroupMetrics:
    """Metrics of one group of episodes (an agent, overall or on one suite or task).

    ``episodes`` counts them all; ``ran`` those that count in the success rate
    and the means; ``excluded`` the others (infrastructure and harness errors,
    timeouts). ``outcomes`` counts each outcome.
    """

    episodes: int
    success_rate: Stat
    values: dict[str, Stat]
    cost: float | None = None  # total estimated cost (of every episode), when prices were given
    ran: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def excluded(self) -> int:
        """Episodes that did not count: the model never had its chance."""
        return self.episodes - self.ran

    @property
    def errors(self) -> int:  # the name reports used before outcomes
        return self.excluded

    def __getitem__(self, name: str) -> Stat:
        return self.success_rate if name == "success_rate" else self.values[name]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"episodes": self.episodes, "ran": self.ran, "excluded": self.excluded,
                               "outcomes": dict(self.outcomes), "success_rate": self.success_rate.to_json()}
        out.update({k: v.to_json() for k, v in self.values.items()})
        if self.cost is not None:
            out["cost"] = round(self.cost, 6)
        return out


def group_metrics(episodes: Sequence[Episode], ci: bool) -> GroupMetrics:
    from ._outcomes import OUTCOMES

    costs = [e.cost for e in episodes if e.cost is not None]
    ran = [e for e in episodes if e.ran]
    solved = [e for e in ran if e.success]
    counts = {o: n for o in OUTCOMES if (n := sum(1 for e in episodes if e.outcome == o))}
    # Counts and durations: an interval never reaches below 0.
    values = {name: mean_stat([f(e) for e in ran], ci, lowest=0.0) for name, f in METRICS}
    values.update({name: mean_stat([f(e) for e in solved], ci, lowest=0.0) for name, f in SOLVED_METRICS})
    return GroupMetrics(
        episodes=len(episodes),
        success_rate=wilson(len(solved), len(ran), ci),
        values=values,
        cost=sum(costs) if costs else None,
        ran=len(ran),
        outcomes=counts,
    )


def by(episodes: Iterable[Episode], *keys: Callable[[Episode], str]) -> dict[tuple[str, ...], list[Episode]]:
    groups: dict[tuple[str, ...], list[Episode]] = defaultdict(list)
    for e in episodes:
        groups[tuple(k(e) for k in keys)].append(e)
    return dict(groups)


def needs_ci(episodes: Iterable[Episode]) -> bool:
    """True when some task ran more than once per agent (then intervals are reported)."""
    return any(e.repeat > 0 for e in episodes)


@dataclass(frozen=True)
class Paired:
    """Agent ``b`` against agent ``a`` on the tasks both ran."""

    a: str
    b: str
    tasks: int
    success_diff: Stat  # mean over tasks of (b's success rate - a's)
    b_better: int
    a_better: int
    ties: int
    sign_test_p: float
    calls_ratio: float  # b's mean model calls / a's
    tokens_ratio: float  # b's mean total tokens / a's
    per_task: dict[str, float] = field(default_factory=dict)  # task key -> success diff

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "tasks": self.tasks, "success_diff": self.success_diff.to_json(),
                "b_better": self.b_better, "a_better": self.a_better, "ties": self.ties,
                "sign_test_p": _round(self.sign_test_p), "calls_ratio": _round(self.calls_ratio),
                "tokens_ratio": _round(self.tokens_ratio),
                "per_task": {k: _round(v) for k, v in sorted(self.per_task.items())}}


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test p-value (ties dropped)."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired(episodes: Sequence[Episode], a: str, b: str,
           label: Callable[[Episode], str] = lambda e: e.agent) -> Paired:
    """Compare agent ``b`` with agent ``a`` over the tasks both ran (``label`` names an episode's agent)."""
    per: dict[str, dict[str, list[Episode]]] = defaultdict(lambda: defaultdict(list))
    for e in episodes:
        if label(e) in (a, b) and e.ran:
            per[e.task_key][label(e)].append(e)
    diffs: dict[str, float] = {}
    calls_a: list[float] = []
    calls_b: list[float] = []
    tokens_a: list[float] = []
    tokens_b: list[float] = []
    for task, runs in per.items():
        if not runs.get(a) or not runs.get(b):
            continue
        rate = {k: statistics.fmean(float(e.success) for e in runs[k]) for k in (a, b)}
        diffs[task] = rate[b] - rate[a]
        calls_a += [e.model_calls for e in runs[a]]
        calls_b += [e.model_calls for e in runs[b]]
        tokens_a += [e.input_tokens + e.output_tokens for e in runs[a]]
        tokens_b += [e.input_tokens + e.output_tokens for e in runs[b]]
    values = list(diffs.values())
    better_b = sum(1 for d in values if d > 0)
    better_a = sum(1 for d in values if d < 0)

    def ratio(x: list[float], y: list[float]) -> float:
        return statistics.fmean(y) / statistics.fmean(x) if x and y and statistics.fmean(x) else math.nan

    diff = mean_stat(values, ci=True, lowest=-1.0, highest=1.0)
    return Paired(a=a, b=b, tasks=len(values), success_diff=diff, b_better=better_b,
                  a_better=better_a, ties=len(values) - better_b - better_a, sign_test_p=sign_test(better_b, better_a),
                  calls_ratio=ratio(calls_a, calls_b), tokens_ratio=ratio(tokens_a, tokens_b), per_task=diffs)
