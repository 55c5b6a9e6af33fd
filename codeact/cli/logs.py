"""``codeact logs``: list, show and export recorded runs."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from .. import config as cfg

if TYPE_CHECKING:  # pragma: no cover
    from ..runlog import RunLog
from ._app import (
    STATUSES,
    CONTEXT_SETTINGS,
    UserError,
    cli,
    db_option,
)


def _log_for_reading(db: str | None) -> RunLog:
    from ..runlog import RunLog

    return RunLog(cfg.db_path(db))


def _list_runs(db: str | None, limit: int, status: str | None, as_json: bool) -> None:
    log = _log_for_reading(db)
    try:
        runs = log.list_runs(limit=limit or None, status=status)
    finally:
        log.close()
    if as_json:
        import json

        from ..runlog import jsonable
        from ..terminal import safe_json

        click.echo(safe_json(json.dumps(jsonable(runs), ensure_ascii=False, indent=2)))
        return
    if not runs:
        where = cfg.db_path(db)
        click.echo(f"No runs{f' with status {status}' if status else ''} in {where}.")
        return
    from .render import Renderer

    Renderer().runs_table(runs)


def _list_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")(f)
    f = click.option("--status", type=click.Choice(STATUSES), help="Only runs with this status.")(f)
    f = click.option("-n", "--limit", type=click.IntRange(min=0), default=20, show_default=True,
                     help="How many runs (0 for all).")(f)
    return f


@cli.group(invoke_without_command=True, context_settings=CONTEXT_SETTINGS)
@db_option
@_list_options
@click.pass_context
def logs(ctx: click.Context, db: str | None, limit: int, status: str | None, as_json: bool) -> None:
    """The run log: every run, step, tool call and image, in SQLite.

    Without a subcommand, lists recent runs (like `codeact logs list`).

    \b
    Examples:
      codeact logs -n 5 --status error
      codeact logs show 3f2a              (an id or a unique prefix; default: the last run)
      codeact logs export 3f2a --ipynb run.ipynb
      codeact logs export 3f2a --jsonl -  (to stdout)
    """
    ctx.obj = {"db": db}
    if ctx.invoked_subcommand is None:
        _list_runs(db, limit, status, as_json)


def _group_db(ctx: click.Context, db: str | None) -> str | None:
    return db or (ctx.obj or {}).get("db")


@logs.command("list", context_settings=CONTEXT_SETTINGS)
@db_option
@_list_options
@click.pass_context
def logs_list(ctx: click.Context, db: str | None, limit: int, status: str | None, as_json: bool) -> None:
    """List recent runs, newest first."""
    _list_runs(_group_db(ctx, db), limit, status, as_json)


@logs.command("show", context_settings=CONTEXT_SETTINGS)
@click.argument("run_id", metavar="RUN", required=False)
@click.option("--tree", "as_tree", is_flag=True,
              help="Draw the run and the runs its tool calls started (agents called as tools), as a tree.")
@db_option
@click.pass_context
def logs_show(ctx: click.Context, run_id: str | None, db: str | None, as_tree: bool) -> None:
    """Show a run step by step: thoughts, code, tool calls, observations, answer, and its child runs.

    Tokens and cost (when the model's prices were known) per step and for the run; a run that called
    agents also shows what the whole tree of runs spent. RUN is a run id or a unique prefix of one;
    without it, the last run.
    """
    from .render import Renderer

    log = _log_for_reading(_group_db(ctx, db))
    try:
        if run_id is None:
            record = log.last_run()
            if record is None:
                raise UserError(f"the run log {log.path} is empty; run something first (try `codeact demo`)")
        else:
            record = log.get_run(run_id)
        tree = log.tree_usage(record.id)  # the run's own usage and cost, and that of the runs below it
        if as_tree:
            Renderer(live=False).run_tree(log.summary(record.id),
                                          lambda run: (log.children(run.id), _tool_names(log, run.id)), tree)
            return
        children = log.children(record.id)
        names = _tool_names(log, record.id) if children else {}
        events = log.get_events(record.id)  # what the steps table does not hold: compactions of the history
    finally:
        log.close()
    renderer = Renderer(live=False)
    renderer.run_record(record, events, tree)
    renderer.child_runs(children, names)


def _tool_names(log: RunLog, run_id: str) -> dict[str, str]:
    """The tool each child run of ``run_id`` was called as (its ToolCall events name the child run)."""
    names: dict[str, str] = {}
    for event in log.get_events(run_id):
        payload = event["payload"]
        if event["type"] == "ToolCall" and isinstance(payload, dict) and payload.get("child_run_id"):
            names[str(payload["child_run_id"])] = str(payload.get("name", ""))[:100]
    return names


@logs.command("export", context_settings=CONTEXT_SETTINGS)
@click.argument("run_id", metavar="RUN")
@click.option("--jsonl", "jsonl_out", metavar="OUT", help="Write JSON Lines to OUT ('-' for stdout).")
@click.option("--ipynb", "ipynb_out", metavar="OUT", help="Write a Jupyter notebook to OUT ('-' for stdout).")
@click.option("--no-images", is_flag=True, help="JSONL: leave image bytes out (hashes and sizes stay).")
@db_option
@click.pass_context
def logs_export(ctx: click.Context, run_id: str, jsonl_out: str | None, ipynb_out: str | None, no_images: bool,
                db: str | None) -> None:
    """Export a run as JSON Lines (for machines) or a Jupyter notebook (for people)."""
    if bool(jsonl_out) == bool(ipynb_out):
        raise click.UsageError("give exactly one of --jsonl OUT or --ipynb OUT")
    from .. import export as _export

    log = _log_for_reading(_group_db(ctx, db))
    try:
        record = log.get_run(run_id)
        children = log.children(record.id)
    finally:
        log.close()
    out = jsonl_out or ipynb_out
    assert out is not None
    if jsonl_out:
        if out == "-":
            _export.export_jsonl(record, sys.stdout, include_images=not no_images)
            return
        with open(out, "w", encoding="utf-8") as fp:
            _export.export_jsonl(record, fp, include_images=not no_images)
        fmt = "JSON Lines"
    else:
        if out == "-":
            import nbformat

            click.echo(nbformat.writes(_export.to_notebook(record, children)))
            return
        _export.export_notebook(record, out, children)
        fmt = "a notebook"
    click.echo(f"Exported run {record.id} ({len(record.steps)} steps) as {fmt} to {out}")


@logs.command("path", context_settings=CONTEXT_SETTINGS)
@db_option
@click.pass_context
def logs_path(ctx: click.Context, db: str | None) -> None:
    """Print the run log's database path."""
    click.echo(str(cfg.db_path(_group_db(ctx, db))))


# --------------------------------------------------------------------------- doctor
