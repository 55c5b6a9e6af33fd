"""Benchmarks: CodeAct against ReAct on the same tasks, tools and model.

A *suite* is a list of :class:`Task` objects; :func:`run_bench` runs agents x
tasks x repeats with N workers (CodeAct on a pool of Docker sandboxes, ReAct
on the host), records every episode in a results directory and the run log,
resumes after a crash, and reports success rate, turns, model calls, tokens,
tool calls, invalid actions, wall and sandbox time and cost, per agent, per
suite and per task, with confidence intervals and paired comparisons
(terminal table, JSON, CSV, Markdown, PNG plots). The oracle model replays
each task's reference solution in every agent's format: an end-to-end test
of the harness, and the fewest model calls and tokens each format needs.

Example::

    from codeact.bench import BenchConfig, run_bench

    run = run_bench(BenchConfig(suites=["tool-chains"], model="oracle", concurrency=4, out="results"))
    for agent, m in run.report.overall.items():
        print(agent, m.success_rate.mean, m["model_calls"].mean)

Your own suite is a Python file or module with a ``tasks()`` function
returning :class:`Task` objects (see :mod:`codeact.bench._suites`); the
command line is ``codeact bench run --suite path/to/suite.py ...``.

A sweep runs on a Ray cluster with ``BenchConfig(ray=RayOptions(...))`` (or
``codeact bench run --ray``): episodes become Ray tasks, each node runs their
sandboxes on its own Docker engine, and results come back into the same
results directory (see :mod:`codeact.bench._ray`).
"""

from __future__ import annotations

from ._checkers import (
    CheckContext,
    Checker,
    CheckResult,
    all_of,
    artifact,
    custom,
    exact,
    numeric,
    unordered,
)
from ._metrics import GroupMetrics, Paired, Stat
from ._oracle import ORACLE, OracleModel
from ._plan import Call, PlanTrace, call, plan_code, run_plan
from ._ray_options import RayOptions
from ._report import (
    Comparison,
    Report,
    build_report,
    compare,
    load_report,
    print_report,
    summary_csv,
    to_markdown,
    write_report,
)
from ._config import BenchConfig, BenchRun, select_tasks
from ._sweep import run_bench
from ._store import Episode, ResultsDir
from ._suites import BUILTIN_SUITES, list_suites, load_suite, load_suites
from ._task import DEFAULT_MAX_TURNS, Oracle, Suite, Task, TaskContext, UserTurn, reply_oracle

__all__ = [
    "BUILTIN_SUITES",
    "DEFAULT_MAX_TURNS",
    "ORACLE",
    "BenchConfig",
    "BenchRun",
    "Call",
    "CheckContext",
    "CheckResult",
    "Checker",
    "Comparison",
    "Episode",
    "GroupMetrics",
    "Oracle",
    "OracleModel",
    "Paired",
    "PlanTrace",
    "RayOptions",
    "Report",
    "ResultsDir",
    "Stat",
    "Suite",
    "Task",
    "TaskContext",
    "UserTurn",
    "all_of",
    "artifact",
    "build_report",
    "call",
    "compare",
    "custom",
    "exact",
    "list_suites",
    "load_report",
    "load_suite",
    "load_suites",
    "numeric",
    "plan_code",
    "print_report",
    "reply_oracle",
    "run_bench",
    "run_plan",
    "select_tasks",
    "summary_csv",
    "to_markdown",
    "unordered",
    "write_report",
]
