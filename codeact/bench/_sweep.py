"""One sweep: load the suites, skip what the results directory has, run the rest, write the report.

Where the episodes run is the executor's business (:mod:`codeact.bench._executors`):
threads here, or Ray tasks across a cluster.
"""

from __future__ import annotations

import time

from ..errors import BenchError
from ..prompts import load_prompt
from ._agents import agent_base
from ._executors import make_executor
from ._oracle import ORACLE
from ._preflight import check_models
from ._progress import Progress, default_progress
from ._report import build_report, write_report
from ._config import BenchConfig, BenchRun, ModelSpec, select_tasks
from ._episode import Spec, is_factory
from ._store import FORMAT, ResultsDir
from ._suites import load_suites


def plots_available() -> bool:
    """True when matplotlib can be imported (the report's plots need it; nothing else does)."""
    import importlib

    try:
        importlib.import_module("matplotlib.figure")
    except Exception:  # missing or broken: either way no plots
        return False
    return True


def run_bench(config: BenchConfig, *, model: ModelSpec = None, progress: Progress | None = None,
              report: bool = True, plots: bool = True) -> BenchRun:
    """Run (or resume) a benchmark; write its episodes, run log and report under ``config.out``.

    Args:
        config: what to run.
        model: instead of ``config.model``: a model object shared by every
            episode (recorded under its ``name``), or a factory
            ``(task, agent_kind, context) -> model`` (recorded as ``config.model``).
        progress: where progress goes (default: a bar on a terminal's stderr).
        report, plots: write the report files (and the PNG plots) at the end. Without
            matplotlib the report is written without plots and its notes say so.

    Before the first episode, each model endpoint answers one tiny request
    and one sandbox starts (``config.preflight``); during the run, when more
    than ``config.max_error_share`` of the recent episodes fail in the
    infrastructure, the run stops and ``BenchRun.stopped`` says why.

    Raises:
        BenchError: bad options, suites that do not load, a results directory
            of another run, a model endpoint or the Docker sandbox down (pre-flight).
        ConfigError: a model that cannot be configured (no API key for the default endpoint).
        KeyboardInterrupt: Ctrl-C; finished episodes are saved, running ones
            are cancelled and will run again on resume.
    """
    config.validate()
    plots_note = None
    if report and plots and not plots_available():
        # Decided before the first episode: a sweep never ends in an ImportError after its last one.
        plots = False
        plots_note = ("plots were not drawn: matplotlib is not installed (pip install 'codeact[bench]', then "
                      "`codeact bench report DIR` draws them)")
    suites = load_suites(config.suites)
    tasks = select_tasks([t for s in suites for t in s.tasks], config.tasks)
    if not tasks:
        raise BenchError(f"no task matches {', '.join(config.tasks)}; `codeact bench list --suite NAME` lists them")
    results = ResultsDir(config.out)
    model_name = getattr(model, "name", None) if model is not None and not is_factory(model) else None
    models = [model_name] if model_name else config.models  # a factory of models is labelled by config.model
    real = model is None and any(m != ORACLE for m in models)
    settings = {
        "model": ", ".join(models),
        "models": models,
        "base_url": config.base_url if real else None,
        "temperature": config.temperature,
        "seed": config.seed,
        "backend": config.backend,
        "runtime": config.runtime,
        "suites": [s.name for s in suites],
        "agents": list(config.agents),
        "repeats": config.repeats,
        "concurrency": config.concurrency,
        "tasks": list(config.tasks),
        "max_turns": config.max_turns,
        "max_reply_tokens": config.max_reply_tokens if real else None,
        "prices": {"prompt": config.price_in, "completion": config.price_out} if config.price_in is not None else None,
        "prompts": {kind: load_prompt(agent_base(kind)).id for kind in config.agents},
        "suite_versions": {s.name: s.fingerprint() for s in suites},
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "codeact": codeact_version(),
    }
    results.check_run({"format": FORMAT, **settings})
    done = {e.key: e for e in results.episodes()}
    keyed = len(models) > 1
    specs = [Spec(t, a, r, m, keyed) for r in range(config.repeats) for t in tasks for m in models
             for a in config.agents]
    todo = [s for s in specs if s.key not in done or (config.retry_errors and not done[s.key].ran)]
    if todo and config.preflight and real:
        check_models(config)  # before anything is written: a down endpoint costs seconds, not a sweep
    settings = results.open_run(settings)
    runner = make_executor(config, results, model, progress if progress is not None else default_progress())
    started = time.perf_counter()
    try:
        runner.run(todo, already=len(specs) - len(todo))
    finally:
        runner.close()
    wall = time.perf_counter() - started
    episodes = results.episodes()
    rep = build_report(episodes, settings)
    if plots_note is not None:
        rep.notes.append(plots_note)
    written = write_report(results, rep, plots=plots) if report else []
    return BenchRun(results=results, episodes=episodes, ran=runner.finished, skipped=len(specs) - len(todo),
                    wall_time=wall, report=rep, written=written, stopped=getattr(runner, "stopped", None))


def codeact_version() -> str:
    """The installed codeact's version (recorded in the results' settings)."""
    from .. import __version__

    return __version__
