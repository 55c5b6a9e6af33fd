"""The run log's saved sessions (schema 4): rows, lookups by snapshot, session or run id, retention's deletes,
and the migration from schema 3. No sandbox: the rows are the host's own records."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from codeact.errors import RunNotFound
from codeact.events import RunStarted
from codeact.runlog import SCHEMA_VERSION, RunLog, SnapshotRecord
from codeact.runlog._schema import MIGRATIONS
from codeact.sessions import delete


def row(snapshot_id: str, session: str, runs: list[str], saved: float, path: str = "/nowhere") -> SnapshotRecord:
    return SnapshotRecord(id=snapshot_id, session=session, path=path, size=10, created=saved, saved=saved,
                          runs=runs, run_id=runs[-1], step=2, manifest={"variables": [{"name": "x"}]})


def test_saved_sessions_are_found_by_snapshot_session_or_run(tmp_path: Path) -> None:
    with RunLog(tmp_path / "runs.db") as log:
        for rid in ("run-a1", "run-a2", "run-b1"):
            log.record(RunStarted(run_id=rid, task=rid, model="m", backend="docker"))
        log.save_snapshot(row("20260101T000000-aaaaaaaaaaaa", "sess-a", ["run-a1"], 1.0), ["run-a1"])
        log.save_snapshot(row("20260101T000001-bbbbbbbbbbbb", "sess-a", ["run-a1", "run-a2"], 2.0), ["run-a2"])
        # a session resumed from sess-a's first snapshot: it holds run-a1 too, but run-a1 stays sess-a's
        log.save_snapshot(row("20260101T000002-cccccccccccc", "sess-b", ["run-a1", "run-b1"], 3.0),
                          ["run-a1", "run-b1"])
        assert log.find_snapshot("20260101T000000-aaaaaaaaaaaa").saved == 1.0
        assert log.find_snapshot("sess-a").id.endswith("bbbb")          # a session: its newest
        assert log.find_snapshot("run-a1").id.endswith("bbbb")          # a run: its own session's newest
        assert log.find_snapshot("run-b").id.endswith("cccc")           # a unique prefix
        with pytest.raises(RunNotFound, match="more than one"):
            log.find_snapshot("sess-")
        with pytest.raises(RunNotFound, match="more than one"):
            log.find_snapshot("run-a")
        with pytest.raises(RunNotFound, match="No saved session"):
            log.find_snapshot("zzz")
        assert log.saved_runs() == {"run-a1", "run-a2", "run-b1"}
        # a save that changed nothing moves the row on (same snapshot id), never duplicates it
        log.save_snapshot(row("20260101T000001-bbbbbbbbbbbb", "sess-a", ["run-a1", "run-a2", "run-a3"], 4.0))
        moved = log.get_snapshot("20260101T000001-bbbbbbbbbbbb")
        assert moved.runs[-1] == "run-a3" and moved.saved == 4.0 and len(log.list_snapshots()) == 3


def test_delete_removes_the_snapshot_file_and_row_only(tmp_path: Path) -> None:
    snap = tmp_path / "20260101T000000-aaaaaaaaaaaa.snap"
    snap.write_bytes(b"x")
    other = tmp_path / "important.txt"   # a row naming another file (a tampered database) must not delete it
    other.write_text("keep")
    with RunLog(tmp_path / "runs.db") as log:
        log.save_snapshot(row(snap.stem, "s", ["r"], 1.0, str(snap)))
        log.save_snapshot(row("20260101T000001-bbbbbbbbbbbb", "s", ["r"], 2.0, str(other)))
        for record in log.list_snapshots():
            delete(log, record)
        assert log.list_snapshots() == []
    assert not snap.exists() and other.read_text() == "keep"


def test_migration_from_version_3_adds_the_snapshots_table(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with sqlite3.connect(db) as conn:
        for statements in MIGRATIONS[:3]:
            for statement in statements:
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 3")
        conn.execute("INSERT INTO runs (id, task, status, started) VALUES ('old-1', 'old', 'success', 1.0)")
    with RunLog(db) as log:
        assert log.get_run("old-1").task == "old" and log.list_snapshots() == []
        log.save_snapshot(row("20260101T000000-aaaaaaaaaaaa", "s", ["old-1"], 1.0), ["old-1"])
        assert log.find_snapshot("old-1").session == "s"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
        assert conn.execute("SELECT session FROM runs WHERE id = 'old-1'").fetchone()[0] == "s"
