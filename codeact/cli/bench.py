"""``codeact bench``: run suites against CodeAct and ReAct agents; report and compare the results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .. import config as cfg
from ._app import (
    CONTEXT_SETTINGS,
    UserError,
    cli,
    compaction_options,
    compaction_settings,
    network_options,
    network_settings,
    runtime_option,
    runtime_setting,
)

AGENTS = ("codeact", "react-fc", "react-json", "react-text")
BACKENDS = ("docker", "local", "restricted")


def _split(values: tuple[str, ...]) -> list[str]:
    """Repeated options and comma-separated lists alike: --suite a,b --suite c -> [a, b, c]."""
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def _stdout_console() -> Any:
    import sys

    from rich.console import Console

    # Tables are wide: when stdout is a file or a pipe, do not squeeze them into 80 columns.
    tty = hasattr(sys.stdout, "isatty") and sys.stdout.isatty()
    return Console(highlight=False, width=None if tty else 160)


@cli.group(context_settings=CONTEXT_SETTINGS)
def bench() -> None:
    """Benchmark CodeAct against ReAct agents on the same tasks, tools and model.

    \b
    Agents: codeact (code actions in a Docker sandbox), react-fc (native function
    calling), react-json and react-text (the prompted formats of the CodeAct paper).
    Suites: tool-chains and data-analysis ship with codeact; yours load from a
    Python file or module with a tasks() function (see docs/bench.md).

    \b
    Examples:
      codeact bench list
      codeact bench run --suite tool-chains --model oracle --out results/
      codeact bench run --suite tool-chains,data-analysis --agents codeact,react-fc \\
          --model gpt-4o-mini --repeats 3 --concurrency 4 --out results/gpt4o-mini
      codeact bench report results/
      codeact bench compare results/a results/b
    """


@bench.command("list")
@click.option("-s", "--suite", "suites", multiple=True, metavar="SUITE",
              help="List this suite's tasks (a shipped name, a .py file or a module; repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def bench_list(suites: tuple[str, ...], as_json: bool) -> None:
    """The shipped suites, or the tasks of the named ones."""
    import json

    from ..bench import list_suites, load_suite

    names = _split(suites)
    if names:
        loaded = [load_suite(n) for n in names]
        unavailable: list[tuple[str, str]] = []
    else:
        # One suite that cannot load here (its data not fetchable, say) must not hide the others.
        loaded, unavailable = [], []
        for name in list_suites():
            try:
                loaded.append(load_suite(name))
            except Exception as exc:  # shown as that suite's row
                unavailable.append((name, f"{type(exc).__name__}: {exc}"))
    if as_json:
        data = [{"name": s.name, "description": s.description, "source": s.source,
                 "tasks": [{"id": t.id, "tags": list(t.tags), "max_turns": t.max_turns, "oracle": t.oracle is not None,
                            "files": [f.name for f in t.files]} for t in s.tasks]} for s in loaded]
        data += [{"name": name, "error": error} for name, error in unavailable]
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return
    from rich.table import Table

    from ..terminal import safe

    console = _stdout_console()
    if not names:
        table = Table(title="Suites", title_justify="left", header_style="bold")
        for h in ("suite", "tasks", "description"):
            table.add_column(h)
        for s in loaded:
            table.add_row(s.name, str(len(s.tasks)), safe(s.description))
        for name, error in unavailable:
            table.add_row(name, "-", safe(f"unavailable here: {error}"[:300]))
        console.print(table)
        console.print("Tasks of a suite: codeact bench list --suite NAME")
        return
    for s in loaded:
        table = Table(title=f"{s.name}: {len(s.tasks)} tasks", title_justify="left", header_style="bold")
        table.add_column("task", no_wrap=True)
        for h in ("tags", "turns", "files", "instruction"):
            table.add_column(h)
        for t in s.tasks:
            instruction = " ".join(t.instruction.split())
            table.add_row(t.id, ", ".join(t.tags), str(t.max_turns), ", ".join(f.name for f in t.files),
                          safe(instruction if len(instruction) <= 90 else instruction[:89] + "…"))
        console.print(table)


@bench.command("run")
@click.option("-s", "--suite", "suites", multiple=True, required=True, metavar="SUITE",
              help="tool-chains, data-analysis, a .py file or a module (FILE.py:function for another function); "
                   "repeatable or comma-separated.")
@click.option("-a", "--agents", default=",".join(AGENTS), show_default=True, metavar="LIST",
              help=f"Comma-separated agents: {', '.join(AGENTS)}.")
@click.option("-m", "--model", "models", multiple=True, metavar="NAME",
              help="Model name; repeatable (or comma-separated) for a table with a column per model x agent "
                   "[env: CODEACT_MODEL].")
@click.option("--base-url", metavar="URL",
              help="OpenAI-compatible API root, e.g. http://localhost:11434/v1 [env: OPENAI_BASE_URL].")
@click.option("--api-key", metavar="KEY", help="API key [env: OPENAI_API_KEY].")
@click.option("--temperature", type=float, default=0.0, show_default=True, help="Sampling temperature (recorded).")
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed sent to the model (recorded).")
@click.option("-r", "--repeats", type=click.IntRange(min=1), default=1, show_default=True,
              help="Episodes per agent and task (confidence intervals need 2 or more).")
@click.option("-j", "--concurrency", type=click.IntRange(min=1), default=4, show_default=True,
              help="Episodes run at once (and Docker sandboxes kept warm).")
@click.option("-o", "--out", default="results", show_default=True, type=click.Path(file_okay=False),
              help="Results directory; rerun with the same one to resume.")
@click.option("-b", "--backend", type=click.Choice(BACKENDS), default="docker", show_default=True,
              help="Sandbox of the CodeAct episodes (local and restricted are NOT isolated).")
@runtime_option
@click.option("-t", "--task", "task_patterns", multiple=True, metavar="GLOB",
              help="Only tasks whose id (or suite/id) matches; repeatable.")
@click.option("--max-turns", type=click.IntRange(min=1), default=None, help="Override every task's turn limit.")
@click.option("--max-reply-tokens", type=click.IntRange(min=0), default=1024, show_default=True,
              help="The most tokens one model reply may take (max_tokens of each request); 0: the endpoint's "
                   "own limit (for a local server often the rest of its window).")
@click.option("--episode-timeout", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True,
              metavar="S", help="Seconds one episode may take before it is abandoned as timed out.")
@click.option("--model-timeout", type=click.FloatRange(min=0, min_open=True), default=120.0, show_default=True,
              metavar="S", help="Seconds per model request.")
@click.option("--timeout", "execution_timeout", type=click.FloatRange(min=0, min_open=True), default=60.0,
              show_default=True, metavar="S", help="Seconds one CodeAct code action may run.")
@click.option("--price-in", type=click.FloatRange(min=0), default=None, metavar="USD",
              help="Price per million prompt tokens (with --price-out: estimated cost).")
@click.option("--price-out", type=click.FloatRange(min=0), default=None, metavar="USD",
              help="Price per million completion tokens.")
@click.option("--retry-errors", is_flag=True,
              help="When resuming, run again the episodes that did not run to an answer or a turn limit (model, "
                   "sandbox or harness errors, timeouts).")
@click.option("--max-error-share", type=click.FloatRange(min=0, max=1, min_open=True), default=0.5,
              show_default=True, metavar="SHARE",
              help="Stop the run (exit 1) when more than this share of the recent episodes failed in the "
                   "infrastructure (model endpoint, sandbox, timeouts); 1 never stops.")
@click.option("--no-preflight", is_flag=True,
              help="Skip the check of each model endpoint and of the sandbox before the first episode.")
@click.option("--no-plots", is_flag=True, help="Do not draw the PNG plots.")
@compaction_options
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of tables.")
@click.option("--ray", "ray_address", is_flag=False, flag_value="auto", default=None, metavar="[ADDRESS]",
              help="Run the episodes as Ray tasks across a Ray cluster: alone or 'auto' for the cluster `ray start` "
                   "made on this machine, HOST:PORT of a head node, or 'local' for a private one. Needs "
                   "pip install 'codeact[ray]'.")
@click.option("--ray-cpus-per-episode", type=click.FloatRange(min=0, min_open=True), default=None, metavar="N",
              help="Ray CPUs each episode reserves (default 1): a node runs as many episodes at once as fit.")
@click.option("--ray-memory-per-episode", default=None, metavar="SIZE",
              help="Ray memory each episode reserves, e.g. 2GiB (default: none).")
@click.option("--ray-engines", default=None, metavar="FILE|JSON",
              help='The Docker engine per node, e.g. \'{"10.0.0.7": "tcp://10.0.0.7:2376"}\' (default: each '
                   "node's own engine, or CODEACT_ENGINES on that node).")
@click.option("--ray-pass-api-key", is_flag=True,
              help="Send the API key to the workers through Ray's runtime_env (default: workers read "
                   "OPENAI_API_KEY from their own environment).")
@click.option("--ray-max-retries", type=click.IntRange(min=0), default=None, metavar="N",
              help="Times an episode whose Ray worker or node died runs again elsewhere (default 3).")
@network_options()
def bench_run(suites: tuple[str, ...], agents: str, models: tuple[str, ...], base_url: str | None,
              api_key: str | None, temperature: float, seed: int, repeats: int, concurrency: int, out: str,
              backend: str, task_patterns: tuple[str, ...], max_turns: int | None, max_reply_tokens: int,
              episode_timeout: float,
              model_timeout: float, execution_timeout: float, price_in: float | None, price_out: float | None,
              retry_errors: bool, max_error_share: float, no_preflight: bool,
              no_plots: bool, as_json: bool, ray_address: str | None, ray_cpus_per_episode: float | None,
              ray_memory_per_episode: str | None, ray_engines: str | None, ray_pass_api_key: bool,
              ray_max_retries: int | None) -> None:
    """Run agents x tasks x repeats and write the results under --out.

    --model oracle replays each task's reference solution (no endpoint needed):
    an end-to-end check of the harness, and the fewest model calls and tokens
    each agent format needs. Any other name is an OpenAI-compatible model
    (--base-url, OPENAI_BASE_URL, OPENAI_API_KEY).

    Before the first episode each model endpoint answers one tiny request and
    one sandbox starts; when either fails, nothing runs (exit 1). Episodes that
    end in a model, sandbox or harness error or a timeout are excluded from
    the success rates and counted beside them; when more than
    --max-error-share of the recent ones do, the run stops (exit 1).

    Finished episodes are saved as they finish; after a crash or Ctrl-C, the
    same command resumes where it stopped (with or without --ray).

    --ray runs the episodes as Ray tasks across a cluster; each node runs its
    CodeAct sandboxes on its own Docker engine; results come back here.
    """
    import time

    from ..bench import ORACLE, BenchConfig, ResultsDir, run_bench
    from ..models import API_KEY_ENV

    names = _split(models) or [n for n in (cfg.model_name(None),) if n]
    if not names:
        raise UserError(cfg.NO_MODEL_HINT + "; or --model oracle to replay the reference solutions", exit_code=2)
    real = any(n != ORACLE for n in names)
    window, condenser = compaction_settings()
    config = BenchConfig(
        suites=_split(suites), agents=_split((agents,)), model=names[0] if len(names) == 1 else names,
        base_url=(base_url or cfg.env(cfg.BASE_URL_ENV) or None) if real else None,
        api_key=api_key or cfg.env(API_KEY_ENV) or None, temperature=temperature, seed=seed, repeats=repeats,
        concurrency=concurrency, backend=backend, runtime=runtime_setting(backend), out=out,
        tasks=list(task_patterns), max_turns=max_turns, max_reply_tokens=max_reply_tokens or None,
        episode_timeout=episode_timeout, model_timeout=model_timeout, execution_timeout=execution_timeout,
        price_in=price_in, price_out=price_out, retry_errors=retry_errors, max_error_share=max_error_share,
        preflight=not no_preflight, network=network_settings(backend=backend), context_window=window,
        condenser=condenser,
        ray=_ray_options(ray_address, ray_cpus_per_episode, ray_memory_per_episode, ray_engines, ray_pass_api_key,
                         ray_max_retries),
    )
    if backend != "docker" and "codeact" in config.agents:
        from sandbox import UNSAFE_BACKENDS

        click.secho(f"Note: the {backend} backend is not isolated ({UNSAFE_BACKENDS[backend]}); "
                    "use it only with a model you trust.", fg="yellow", err=True)
    started = time.perf_counter()
    try:
        run = run_bench(config, plots=not no_plots)
    except KeyboardInterrupt:
        saved = len(ResultsDir(out).episodes()) if Path(out).is_dir() else 0
        raise UserError(f"interrupted: {saved} finished episodes are saved in {out}; run the same command again "
                        "to resume", exit_code=130) from None
    wall = time.perf_counter() - started
    _print_report(run.report, as_json)
    click.echo(f"{run.ran} episodes run, {run.skipped} already done, in {wall:.1f} s. "
               f"Results: {Path(out)}/ (report.md, report.json, summary.csv, episodes.csv"
               f"{', plots/' if not no_plots else ''}); runs: codeact logs --db {Path(out) / 'runs.db'}", err=True)
    if run.stopped:
        raise UserError(f"stopped early: {run.stopped}. Fix the endpoint or the sandbox, then run the same command "
                        "with --retry-errors to run the failed and the remaining episodes", exit_code=1)
    excluded = sum(m.excluded for m in run.report.overall.values())
    if excluded:
        click.secho(f"Warning: {excluded} episodes did not run to an answer or a turn limit (see Outcomes); they are "
                    "excluded from the success rates. Run the same command with --retry-errors to run them again.",
                    fg="yellow", err=True)


def _ray_options(address: str | None, cpus: float | None, memory: str | None, engines: str | None,
                 pass_api_key: bool, max_retries: int | None) -> Any:
    """The RayOptions of --ray and its companions; the companions without --ray are a mistake."""
    given = [name for name, value in (("--ray-cpus-per-episode", cpus), ("--ray-memory-per-episode", memory),
                                      ("--ray-engines", engines), ("--ray-max-retries", max_retries))
             if value is not None] + (["--ray-pass-api-key"] if pass_api_key else [])
    if address is None:
        if given:
            raise UserError(f"{', '.join(given)} only apply with --ray [ADDRESS]", exit_code=2)
        return None
    from ..bench import RayOptions

    options: dict[str, Any] = {"address": address, "pass_api_key": pass_api_key}
    if cpus is not None:
        options["cpus_per_episode"] = cpus
    if memory is not None:
        options["memory_per_episode"] = memory
    if engines is not None:
        options["engines"] = engines
    if max_retries is not None:
        options["max_retries"] = max_retries
    return RayOptions(**options)


def _print_report(report: Any, as_json: bool) -> None:
    if as_json:
        import json

        click.echo(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
        return
    from ..bench import print_report

    print_report(report, _stdout_console())


@bench.command("report")
@click.argument("results", type=click.Path(file_okay=False))
@click.option("-f", "--format", "fmt", type=click.Choice(["table", "json", "md", "csv"]), default="table",
              show_default=True, help="What to print (all files are rewritten either way).")
@click.option("--no-plots", is_flag=True, help="Do not draw the PNG plots.")
def bench_report(results: str, fmt: str, no_plots: bool) -> None:
    """Recompute a results directory's report from its episodes; rewrite its files and print it."""
    from ..bench import ResultsDir, load_report, summary_csv, to_markdown, write_report

    report = load_report(results)
    if not report.episodes:
        raise UserError(f"{results} holds no finished episode yet")
    write_report(ResultsDir(results), report, plots=not no_plots)
    if fmt == "md":
        click.echo(to_markdown(report))
    elif fmt == "csv":
        click.echo(summary_csv(report), nl=False)
    else:
        _print_report(report, fmt == "json")


@bench.command("compare")
@click.argument("a", type=click.Path(file_okay=False))
@click.argument("b", type=click.Path(file_okay=False))
@click.option("-f", "--format", "fmt", type=click.Choice(["table", "json", "md"]), default="table",
              show_default=True)
def bench_compare(a: str, b: str, fmt: str) -> None:
    """Two result sets side by side (e.g. two models, or two prompt versions): per agent, A, B and B - A."""
    import json

    from ..bench import compare

    comparison = compare(a, b)
    if fmt == "json":
        click.echo(json.dumps(comparison.to_json(), indent=2, ensure_ascii=False))
    elif fmt == "md":
        click.echo(comparison.to_markdown())
    else:
        comparison.render(_stdout_console())
