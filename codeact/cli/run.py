"""``codeact run`` and ``demo``: an agent on a task, with the run shown as it happens (``chat`` is in .chat)."""

from __future__ import annotations

import sys

import click

from .. import config as cfg

from ._app import (
    CONTEXT_SETTINGS,
    RunCancelledByUser,
    cli,
    model_options,
    backend_option,
    db_option,
    agent_options,
    images_option,
    images_setting,
    compaction_settings,
    load_tools,
    resolve_backend,
    open_log,
    stdin_is_tty,
    make_approver,
    drive,
    result_json,
    cancelled_message,
    make_agent,
    load_output_schema,
    output_schema_option,
    renderers,
)
from .mcp import open_mcp


@cli.command(context_settings=CONTEXT_SETTINGS)
@click.argument("task", required=False)
@agent_options
@click.option("--json", "as_json", is_flag=True, help="Print only the final RunResult as JSON.")
@output_schema_option
def run(task: str | None, files: tuple[str, ...], tool_specs: tuple[str, ...], model: str | None,
        base_url: str | None, api_key: str | None, backend: str, yes: bool, max_steps: int, timeout: float,
        output_dir: str | None, db: str | None, no_log: bool, as_json: bool, output_schema: str | None = None,
        mcp_files: tuple[str, ...] = (), mcp_specs: tuple[str, ...] = (), mcp_on_error: str = "stop") -> None:
    """Run TASK to the end and print each step as it happens.

    TASK is read from stdin when it is not given and stdin is not a terminal.
    Exit status: 0 when the run succeeds; 1 on an error, at max steps, when
    cancelled (Ctrl-C) or when no answer matched --output-schema (status
    invalid_output); 2 for bad options or configuration (a schema file that
    is not a valid JSON Schema, found before any sandbox starts).

    With --output-schema and --json, "answer" is the validated JSON value.

    \b
    Examples:
      codeact run "What is the 20th Fibonacci number?"
      codeact run "Summarise sales.csv and plot revenue by month" -f sales.csv
      codeact run "Book a table for two" --tools mytools.py:ALL --yes
      codeact run "What changed in the last 3 commits?" --mcp servers.json
      echo "2**100?" | codeact run --json --backend local
      codeact run "Top 3 regions by growth" -f sales.csv --output-schema regions.json --json

    Testing and replays: with CODEACT_SCRIPTED_REPLIES=replies.json (a JSON
    list of strings) the model is not called; its replies are replayed in order.
    """
    if task is None:
        if not stdin_is_tty():
            task = sys.stdin.read().strip()
        if not task:
            raise click.UsageError("Missing argument 'TASK' (give it as an argument or on stdin).")
    output = load_output_schema(output_schema) if output_schema is not None else None  # before any sandbox
    output_root = cfg.output_root(output_dir)
    renderer, notes = renderers(output_root, as_json)
    tools = load_tools(tool_specs)
    model_obj = cfg.build_model(model, base_url=base_url, api_key=api_key, images=images_setting(),
                                context_window=compaction_settings()[0])
    backend = resolve_backend(backend, notes)
    # MCP servers: connected once for the whole run, closed (their processes stopped) however it ends.
    toolset = open_mcp(mcp_files, mcp_specs, mcp_on_error, notes.warning)
    log = open_log(db, no_log)
    stream = renderer is not None and renderer.live_enabled
    try:
        agent = make_agent(model_obj, tools + list(toolset or ()), backend, max_steps=max_steps, timeout=timeout,
                           output_root=output_root, log=log, approve=make_approver(notes, yes), stream=stream)
        result = drive(agent.stream(task, files=list(files), output_type=output), renderer, log, task,
                       quiet_renderer=notes)
    except RunCancelledByUser as exc:
        click.secho(cancelled_message(exc, log), fg="yellow", err=True)
        raise click.exceptions.Exit(1) from None
    finally:
        if toolset is not None:
            toolset.close()
        if log is not None:
            log.close()
    if as_json:
        click.echo(result_json(result))
    raise click.exceptions.Exit(0 if result.ok else 1)


# --------------------------------------------------------------------------- demo


@cli.command(context_settings=CONTEXT_SETTINGS)
@backend_option
@model_options
@click.option("--max-steps", type=click.IntRange(min=1), default=10, show_default=True,
              help="Model turns before the run stops.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=120.0, show_default=True,
              metavar="S", help="Seconds one code action may run.")
@click.option("-o", "--output-dir", metavar="DIR", type=click.Path(file_okay=False),
              help="Artifacts go to DIR/<run id>/ [env: CODEACT_OUTPUT_DIR].")
@db_option
@click.option("--no-log", is_flag=True, help="Do not record the run in the run log.")
@images_option
def demo(backend: str, model: str | None, base_url: str | None, api_key: str | None, max_steps: int,
         timeout: float, output_dir: str | None, db: str | None, no_log: bool) -> None:
    """Analyse a bundled sales data set end to end: growth by region and a chart.

    Asks "Which region grew fastest? Plot monthly sales by region." about
    codeact/data/sales.csv (24 months, 4 regions, 3 products) in the best
    available sandbox. Without a model (no --model and no CODEACT_MODEL) it
    replays hand-written model replies, so the code, the sandbox, the chart
    and the run log are all real; only the model's text is canned.
    """
    from ..demo import DEMO_TASK, demo_csv, scripted_demo_model

    if cfg.model_configured(model):
        model_obj = cfg.build_model(model, base_url=base_url, api_key=api_key, scripted=False,
                                    images=images_setting())
        click.echo(f"Running the demo with model {model_obj.name} at {model_obj.base_url}.")
    else:
        click.echo("No model configured (set CODEACT_MODEL or pass --model): replaying a scripted demo model.")
        model_obj = scripted_demo_model()
        model_obj.vision = cfg.images_enabled(images_setting())
    output_root = cfg.output_root(output_dir)
    renderer, _ = renderers(output_root)
    assert renderer is not None
    data = demo_csv()
    renderer.note(f"Task: {DEMO_TASK}", style="bold")
    renderer.note(f"Data: {data}")
    backend = resolve_backend(backend, renderer)
    log = open_log(db, no_log)
    agent = make_agent(model_obj, [], backend, max_steps=max_steps, timeout=timeout, output_root=output_root,
                        log=log, approve=lambda request: False, stream=renderer.live_enabled)
    try:
        result = drive(agent.stream(DEMO_TASK, files=[data]), renderer, log, DEMO_TASK)
    except RunCancelledByUser as exc:
        click.secho(cancelled_message(exc, log), fg="yellow", err=True)
        raise click.exceptions.Exit(1) from None
    finally:
        if log is not None:
            log.close()
    if result.artifacts:
        click.echo(f"Artifacts are in {output_root / result.run_id}:")
        for path in result.artifacts:
            click.echo(f"  {path}")
    if log is not None:
        click.echo(f"Replay the steps with: codeact logs show {result.run_id}")
    raise click.exceptions.Exit(0 if result.ok else 1)


# --------------------------------------------------------------------------- logs
