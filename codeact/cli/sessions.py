"""``codeact sessions``: list, show and remove saved chat sessions (see :mod:`codeact.sessions`).

Everything shown from a snapshot's manifest (variable names, types, reasons)
is the sandbox's word, validated by the host: it is printed through
:func:`codeact.terminal.safe` as plain text, never as console markup.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from .. import config as cfg
from ._app import CONTEXT_SETTINGS, UserError, cli, db_option


def _log(db: str | None) -> Any:
    from ..runlog import RunLog

    return RunLog(cfg.db_path(db))


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def _echo(text: str) -> None:
    from ..terminal import safe

    click.echo(safe(text))


@cli.group(invoke_without_command=True, context_settings=CONTEXT_SETTINGS)
@db_option
@click.option("-n", "--limit", type=click.IntRange(min=0), default=20, show_default=True,
              help="How many saved sessions (0 for all).")
@click.option("--json", "as_json", is_flag=True, help="Print them as JSON.")
@click.pass_context
def sessions(ctx: click.Context, db: str | None, limit: int, as_json: bool) -> None:
    """Saved chat sessions: a sandbox snapshot plus the conversation in the run log.

    A chat saves itself when it ends, on /save, and with --autosave after
    every step. Without a subcommand, lists them (newest first).

    \b
    Examples:
      codeact sessions                   (list)
      codeact sessions show 3f2a         (a run, chat session or snapshot id, or a unique prefix)
      codeact chat --resume 3f2a         (continue it)
      codeact sessions rm 3f2a           (delete the snapshot file and its entry)
    """
    ctx.obj = {"db": db}
    if ctx.invoked_subcommand is None:
        _list(db, limit, as_json)


def _group_db(ctx: click.Context, db: str | None) -> str | None:
    return db or (ctx.obj or {}).get("db")


def _list(db: str | None, limit: int, as_json: bool) -> None:
    from ..sessions import summary

    log = _log(db)
    try:
        rows = log.list_snapshots(limit=limit or None)
        tasks = {}
        for row in rows:
            if row.run_id and row.run_id not in tasks:
                try:
                    tasks[row.run_id] = log.get_run(row.run_id).task
                except KeyError:
                    tasks[row.run_id] = ""
    finally:
        log.close()
    if as_json:
        from ..terminal import safe_json

        click.echo(safe_json(json.dumps([summary(r) for r in rows], ensure_ascii=False, indent=2)))
        return
    if not rows:
        click.echo("No saved sessions. `codeact chat` saves its session when it ends (and on /save).")
        return
    _echo(f"{'SESSION':<13} {'SNAPSHOT':<29} {'SAVED':<19} {'SIZE':>9} {'VARS':>5} {'TURNS':>5}  LAST TASK")
    for row in rows:
        s = summary(row)
        task = " ".join((tasks.get(row.run_id or "", "") or "").split())[:50]
        _echo(f"{row.session:<13} {row.id:<29} {_when(row.saved):<19} {row.size / 1e6:>7.1f}MB "
              f"{len(s['variables']):>5} {s['runs']:>5}  {task}")


@sessions.command("list", context_settings=CONTEXT_SETTINGS)
@db_option
@click.option("-n", "--limit", type=click.IntRange(min=0), default=20, show_default=True,
              help="How many saved sessions (0 for all).")
@click.option("--json", "as_json", is_flag=True, help="Print them as JSON.")
@click.pass_context
def sessions_list(ctx: click.Context, db: str | None, limit: int, as_json: bool) -> None:
    """List saved sessions, newest first."""
    _list(_group_db(ctx, db), limit, as_json)


def _find(log: Any, key: str) -> Any:
    from ..errors import RunNotFound

    try:
        return log.find_snapshot(key)
    except RunNotFound as exc:
        raise UserError(str(exc)) from None


@sessions.command("show", context_settings=CONTEXT_SETTINGS)
@click.argument("key", metavar="ID")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print it as JSON.")
@click.pass_context
def sessions_show(ctx: click.Context, key: str, db: str | None, as_json: bool) -> None:
    """Show a saved session: its turns, variables, what could not be saved, files, packages.

    ID is a run id, a chat session id or a snapshot id (or a unique prefix);
    a run or session means its newest snapshot.
    """
    from pathlib import Path

    from ..sessions import summary

    log = _log(_group_db(ctx, db))
    try:
        row = _find(log, key)
        turns = []
        for run_id in row.runs:
            try:
                run = log.get_run(run_id)
                turns.append((run_id, " ".join(run.task.split())[:100], run.status))
            except KeyError:
                turns.append((run_id, "(no longer in the run log)", "-"))
    finally:
        log.close()
    s = summary(row)
    if as_json:
        from ..terminal import safe_json

        click.echo(safe_json(json.dumps({**s, "path": row.path, "turns": [list(t) for t in turns]},
                                        ensure_ascii=False, indent=2)))
        return
    present = "" if Path(row.path).exists() else "  (the file is gone)"
    _echo(f"snapshot {row.id} of session {row.session}, saved {_when(row.saved)}, {row.size / 1e6:.1f} MB, "
          f"from {row.backend}")
    _echo(f"file: {row.path}{present}")
    if row.parent:
        _echo(f"continues: {row.parent}")
    _echo(f"conversation: {len(row.runs)} turns, up to step {row.step} of run {row.run_id}")
    for run_id, task, status in turns:
        _echo(f"  {run_id}  {status:<11} {task}")
    _echo(f"variables ({len(s['variables'])}):")
    for v in s["variables"][:200]:
        _echo(f"  {v['name']}: {v['type']}")
    if s["not_saved"]:
        _echo(f"not saved ({len(s['not_saved'])}):")
        for v in s["not_saved"][:200]:
            _echo(f"  {v['name']} ({v['type']}): {v['reason']}")
    _echo(f"files: {s['files']}")
    if s["packages"]:
        _echo("packages: " + ", ".join(s["packages"]))
    _echo(f"resume with: codeact chat --resume {row.id}")


@sessions.command("rm", context_settings=CONTEXT_SETTINGS)
@click.argument("keys", metavar="ID...", nargs=-1, required=True)
@click.option("--all-of-session", is_flag=True, help="Remove every snapshot of the session ID names.")
@db_option
@click.pass_context
def sessions_rm(ctx: click.Context, keys: tuple[str, ...], all_of_session: bool, db: str | None) -> None:
    """Delete saved sessions: the snapshot file and its entry in the run log (the runs stay).

    ID is a snapshot id (a run or chat session id means its newest snapshot;
    --all-of-session: all of that session's).
    """
    from ..sessions import delete

    log = _log(_group_db(ctx, db))
    try:
        for key in keys:
            row = _find(log, key)
            rows = log.list_snapshots(session=row.session) if all_of_session else [row]
            for r in rows:
                delete(log, r)
                _echo(f"removed snapshot {r.id} of session {r.session}")
    finally:
        log.close()
