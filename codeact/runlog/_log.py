"""The :class:`RunLog`: record events as they happen, read runs back."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..errors import RunLogError
from ..events import Event
from ..messages import Usage
from . import _queries, _recorder, _snapshots
from ._db import Database, default_db_path
from ._records import RunRecord, RunSummary, SnapshotRecord


class RunLog:
    """A SQLite database of runs. Thread-safe; several processes may share the file.

    Args:
        path: The database file. Defaults to :func:`default_db_path`
            (``$CODEACT_DB`` or the user data directory). Parent directories
            are created. ``":memory:"`` gives a private in-memory log.

    Raises:
        RunLogError: The file cannot be opened or was written by a newer codeact.

    Example::

        with RunLog("runs.db") as log:
            for event in agent.stream("How many rows in data.csv?", files=["data.csv"]):
                log.record(event)
            print(log.list_runs(limit=5))
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        if path is None:
            path = default_db_path()
        self.path: Path | str = ":memory:" if str(path) == ":memory:" else Path(path).expanduser()
        self._db = Database(self.path)
        with contextlib.suppress(RunLogError):  # a read-only or busy log still reads
            self.mark_interrupted()

    # -- lifecycle -------------------------------------------------------------------

    @property
    def journal_mode(self) -> str:
        """SQLite's journal mode for this database ("wal" unless the filesystem cannot do WAL)."""
        with self._db.lock:
            return str(self._db.connection().execute("PRAGMA journal_mode").fetchone()[0])

    def close(self) -> None:
        """Close the database connection. Further calls raise :class:`RunLogError`."""
        self._db.close()

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunLog({str(self.path)!r})"

    # -- recording -----------------------------------------------------------------

    def record(self, event: Event) -> None:
        """Store one event of a run, as it happens (see :mod:`codeact.runlog._recorder` for what each does).

        Values that are not JSON (any answer, tool result) are stored as
        :func:`codeact.values.preview` trees, so this never fails because of them.

        Raises:
            RunLogError: The database cannot be written (disk full, locked for
                longer than the busy timeout, closed log).
        """
        self._db.write(lambda conn: _recorder.record(conn, event))

    def tee(self, events: Iterable[Event]) -> Iterator[Event]:
        """Record each event of ``events`` and pass it on: ``for ev in log.tee(agent.stream(task))``."""
        for event in events:
            self.record(event)
            yield event

    def mark_interrupted(self) -> list[str]:
        """Mark runs whose process died mid-run (on this host) as ``interrupted``; returns their ids.

        Their last step keeps the output it had produced so far as its
        observation. Called when a log is opened, so the next ``codeact``
        start tidies up after a killed one.
        """
        if not self._db.read(_queries.count_running):
            return []
        return self._db.write(_recorder.mark_interrupted)

    def link_episode(self, run_id: str, episode: str) -> None:
        """Record that run ``run_id`` was benchmark episode ``episode`` (see ``codeact bench``)."""
        self._db.write(lambda conn: _recorder.link_episode(conn, run_id, episode))

    # -- reading -------------------------------------------------------------------

    def list_runs(self, limit: int | None = 20, status: str | None = None, *,
                  bench_episode: str | None = None) -> list[RunSummary]:
        """The most recent runs, newest first.

        Args:
            limit: At most this many runs (``None`` for all).
            status: Only runs with this status ("running", "success", "error", ...).
            bench_episode: Only the runs of this benchmark episode.
        """
        return self._db.read(lambda conn: _queries.list_runs(conn, limit, status, bench_episode))

    def summary(self, run_id: str) -> RunSummary:
        """A run without its steps, by id or unique prefix (RunNotFound when there is none)."""
        return self._db.read(lambda conn: _queries.get_summary(conn, run_id))

    def children(self, run_id: str) -> list[RunSummary]:
        """The runs that tool calls of run ``run_id`` (id or unique prefix) started: agents called as tools
        (``agent.as_tool``), oldest first; each names its ``parent_step``."""
        return self._db.read(lambda conn: _queries.list_children(conn, run_id))

    def tree_usage(self, run_id: str) -> tuple[Usage, int]:
        """What run ``run_id`` and all the runs below it (agents it called as tools, at any depth) spent
        together, and how many runs that is (1: no children). ``summary(run_id).usage`` is the run's own."""
        return self._db.read(lambda conn: _queries.tree_usage(conn, run_id))

    def resolve(self, run_id_or_prefix: str) -> str:
        """The full id of the run that ``run_id_or_prefix`` names (an id or a unique prefix).

        Raises:
            RunNotFound: No run matches (the message lists the closest ids).
            AmbiguousRunId: The prefix matches several runs (the message lists them).
        """
        return self._db.read(lambda conn: _queries.resolve(conn, run_id_or_prefix))

    def get_run(self, run_id: str) -> RunRecord:
        """A whole run by its id or a unique prefix of it.

        Raises:
            RunNotFound: No run matches (the message lists the closest ids).
            AmbiguousRunId: The prefix matches several runs.
        """
        return self._db.read(lambda conn: _queries.get_run(conn, run_id))

    def last_run(self) -> RunRecord | None:
        """The most recently started run, or ``None`` when the log is empty."""

        def read(conn: sqlite3.Connection) -> RunRecord | None:
            rid = _queries.last_run_id(conn)
            return _queries.get_run(conn, rid) if rid else None

        return self._db.read(read)

    def get_events(self, run_id: str) -> list[dict[str, Any]]:
        """The raw event log of a run (id or unique prefix), in arrival order.

        Each item is ``{"seq", "type", "step", "time", "payload"}`` with the
        payload JSON-decoded.
        """
        return self._db.read(lambda conn: _queries.get_events(conn, run_id))

    def delete_run(self, run_id: str) -> str:
        """Delete a run (id or unique prefix) and everything recorded for it; returns the full id.

        Raises:
            RunNotFound: No run matches, or the prefix is ambiguous.
        """

        def delete(conn: sqlite3.Connection) -> str:
            rid = _queries.resolve(conn, run_id)
            conn.execute("DELETE FROM runs WHERE id = ?", (rid,))  # children go by ON DELETE CASCADE
            return rid

        return self._db.write(delete)

    # -- saved sessions (codeact.sessions) -------------------------------------------

    def save_snapshot(self, record: SnapshotRecord, own_runs: Iterable[str] = ()) -> None:
        """Record a saved chat session (or move its row on when the snapshot is the same file).

        ``own_runs`` are the runs the saving session made itself: they are
        linked to ``record.session`` (runs it inherited from the session it
        resumed keep theirs).
        """

        def write(conn: sqlite3.Connection) -> None:
            _snapshots.save(conn, record)
            _snapshots.link_runs(conn, record.session, list(own_runs))

        self._db.write(write)

    def get_snapshot(self, snapshot_id: str) -> SnapshotRecord | None:
        """The saved session whose snapshot id is exactly ``snapshot_id``, or None."""
        return self._db.read(lambda conn: _snapshots.get(conn, snapshot_id))

    def list_snapshots(self, session: str | None = None, limit: int | None = None) -> list[SnapshotRecord]:
        """Saved sessions, newest first (only chat session ``session``'s when given)."""
        return self._db.read(lambda conn: _snapshots.listed(conn, session, limit))

    def find_snapshot(self, key: str) -> SnapshotRecord:
        """The saved session ``key`` names: a snapshot id, a chat session id or a run id (or unique prefixes).

        A session or a run means the newest snapshot of that session.

        Raises:
            RunNotFound: nothing matches, or a prefix matches several.
        """
        return self._db.read(lambda conn: _snapshots.find(conn, key))

    def saved_runs(self, limit: int = 1000) -> set[str]:
        """Ids of the runs that the newest ``limit`` saved sessions hold (a cheap read: no manifests)."""
        return self._db.read(lambda conn: _snapshots.saved_runs(conn, limit))

    def delete_snapshot(self, snapshot_id: str) -> bool:
        """Delete a saved session's row (not its file: see :func:`codeact.sessions.delete`); False if none."""
        return bool(self._db.write(lambda conn: _snapshots.delete(conn, snapshot_id)))
