"""The run log's SQLite schema and its migrations, one per version (kept in ``PRAGMA user_version``).

``runs``
    one row per run: task, model, backend, tools/files (JSON), status,
    answer (JSON: the codec preview) and its original Python type name,
    error, timestamps, duration, token usage totals and cost (dollars, NULL when
    the model's prices are unknown), step count; who runs it
    (host, pid, process start: to find runs whose process died); which agent
    and prompt (name, version) produced it, and its bench episode.
``steps``
    one row per (run, step): model output, prompt size, model time, code,
    observation, stdout, stderr, error, sandbox time, truncation flag,
    tokens, cost, start time, duration, and the live output so far.
``tool_calls``
    host tool calls made by a step: name, arguments/result (JSON previews),
    error, duration, time.
``artifacts``
    file references (path, guessed MIME type, size when the file exists);
    step 0 holds the run's final artifacts from :class:`RunResult`.
``images``
    PNG bytes displayed by a step, so a notebook export works even after
    the artifact files are gone.
``events``
    the raw event log (type, step, time, JSON payload) in arrival order;
    image bytes and the full RunResult steps are summarised there because
    ``images`` and ``steps`` already hold them. ``TextDelta`` and
    ``CodeOutput`` events are streaming noise and are not stored there.
``snapshots``
    saved chat sessions (:mod:`codeact.sessions`): one row per snapshot
    file (id, path, size, creation time, the snapshot it continues), the
    chat session that saved it, the conversation it belongs to (the runs,
    oldest first, and the last completed step of the last one) and the
    snapshot's manifest as the host validated it (never the sandbox's raw
    words). ``runs.session`` names the chat session a run was a turn of.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any


#: Current schema version, stored in ``PRAGMA user_version``.
SCHEMA_VERSION = 6

# One entry per version: MIGRATIONS[i] upgrades a database from version i to
# i + 1. Each is a tuple of single statements (not a script) because
# executescript() would commit the surrounding transaction.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE IF NOT EXISTS runs (
            id TEXT PRIMARY KEY,
            task TEXT NOT NULL DEFAULT '',
            model TEXT,
            backend TEXT,
            tools TEXT,            -- JSON list
            files TEXT,            -- JSON list
            status TEXT NOT NULL DEFAULT 'running',
            answer TEXT,           -- JSON
            answer_type TEXT,
            error TEXT,
            started REAL,
            finished REAL,
            duration REAL,
            input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0,
            requests INTEGER NOT NULL DEFAULT 0,
            steps INTEGER NOT NULL DEFAULT 0
        )""",
        "CREATE INDEX IF NOT EXISTS runs_started ON runs (started)",
        "CREATE INDEX IF NOT EXISTS runs_status ON runs (status)",
        """CREATE TABLE IF NOT EXISTS steps (
            run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            model_output TEXT,
            input_messages INTEGER NOT NULL DEFAULT 0,
            input_chars INTEGER NOT NULL DEFAULT 0,
            model_time REAL NOT NULL DEFAULT 0,
            code TEXT,
            observation TEXT,
            stdout TEXT,
            stderr TEXT,
            error TEXT,
            sandbox_time REAL NOT NULL DEFAULT 0,
            truncated INTEGER NOT NULL DEFAULT 0,
            input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0,
            requests INTEGER NOT NULL DEFAULT 0,
            started REAL,
            duration REAL NOT NULL DEFAULT 0,
            PRIMARY KEY (run_id, step)
        )""",
        """CREATE TABLE IF NOT EXISTS tool_calls (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            name TEXT NOT NULL,
            arguments TEXT,        -- JSON
            result TEXT,           -- JSON
            error TEXT,
            duration REAL NOT NULL DEFAULT 0,
            time REAL
        )""",
        "CREATE INDEX IF NOT EXISTS tool_calls_run ON tool_calls (run_id, step)",
        """CREATE TABLE IF NOT EXISTS artifacts (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            path TEXT NOT NULL,
            mime TEXT,
            size INTEGER,
            UNIQUE (run_id, step, path)
        )""",
        """CREATE TABLE IF NOT EXISTS images (
            run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            mime TEXT NOT NULL DEFAULT 'image/png',
            png BLOB NOT NULL,
            PRIMARY KEY (run_id, step, seq)
        )""",
        """CREATE TABLE IF NOT EXISTS events (
            run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            type TEXT NOT NULL,
            step INTEGER NOT NULL DEFAULT 0,
            time REAL,
            payload TEXT,          -- JSON
            PRIMARY KEY (run_id, seq)
        )""",
    ),
    (
        # Version 2: who runs a run (to mark it interrupted when that process died), and the
        # output a step had produced so far (kept if its process dies before the observation).
        "ALTER TABLE runs ADD COLUMN owner_host TEXT",
        "ALTER TABLE runs ADD COLUMN owner_pid INTEGER",
        "ALTER TABLE runs ADD COLUMN owner_start TEXT",
        "ALTER TABLE steps ADD COLUMN partial_output TEXT",
    ),
    (
        # Version 3: which agent (codeact, react-fc, react-json, react-text) and which prompt
        # (name, version) produced a run, and the benchmark episode it was.
        "ALTER TABLE runs ADD COLUMN agent TEXT",
        "ALTER TABLE runs ADD COLUMN prompt TEXT",
        "ALTER TABLE runs ADD COLUMN prompt_version TEXT",
        "ALTER TABLE runs ADD COLUMN bench_episode TEXT",
        "CREATE INDEX IF NOT EXISTS runs_bench_episode ON runs (bench_episode)",
    ),
    (
        # Version 4: durable sessions. A row per snapshot file; no foreign key to runs, so that deleting
        # a run (logs rm) keeps the saved session it was part of.
        """CREATE TABLE IF NOT EXISTS snapshots (
            id TEXT PRIMARY KEY,   -- the snapshot file's id (sandbox.snapshot)
            session TEXT NOT NULL, -- the chat session that saved it
            agent TEXT,
            run_id TEXT,           -- the run of the last completed step it holds
            step INTEGER NOT NULL DEFAULT 0,
            runs TEXT NOT NULL,    -- JSON list: the conversation's runs, oldest first
            path TEXT NOT NULL,
            size INTEGER NOT NULL DEFAULT 0,
            created REAL NOT NULL, -- when the file was written
            saved REAL NOT NULL,   -- when the row last moved (a save that changed nothing moves it on)
            parent TEXT,           -- the snapshot this one continues (a fork, or the one a session resumed)
            since TEXT,            -- the snapshot it was saved incrementally against
            backend TEXT,
            packages TEXT,         -- JSON list
            manifest TEXT          -- JSON: the validated manifest
        )""",
        "CREATE INDEX IF NOT EXISTS snapshots_session ON snapshots (session, saved)",
        "ALTER TABLE runs ADD COLUMN session TEXT",
        "CREATE INDEX IF NOT EXISTS runs_session ON runs (session)",
    ),
    (
        # Version 5: agents as tools. A child run names the run (and step) whose tool call started it;
        # no foreign key, so that a child outlives a parent deleted with `logs rm`.
        "ALTER TABLE runs ADD COLUMN parent_run_id TEXT",
        "ALTER TABLE runs ADD COLUMN parent_step INTEGER",
        "CREATE INDEX IF NOT EXISTS runs_parent ON runs (parent_run_id)",
    ),
    (
        # Version 6: money. The dollars a step's model calls and a run's cost, when the model's prices are
        # known (NULL when they are not: unknown, never zero).
        "ALTER TABLE runs ADD COLUMN cost REAL",
        "ALTER TABLE steps ADD COLUMN cost REAL",
    ),
)
assert len(MIGRATIONS) == SCHEMA_VERSION


def schema_version(conn: sqlite3.Connection) -> int:
    """The schema version of the database on ``conn`` (0 for a new file)."""
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection, retry: Callable[[Callable[[], Any]], Any]) -> None:
    """Bring an older database on ``conn`` to :data:`SCHEMA_VERSION` (one transaction; safe against races).

    A database at a newer version is left as it is: the caller refuses it
    (:class:`codeact.runlog._db.Database` says which setting picks another file).
    """
    if schema_version(conn) >= SCHEMA_VERSION:
        return

    def upgrade() -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Re-read inside the write lock: another process may have migrated meanwhile.
            current = schema_version(conn)
            for step in range(current, SCHEMA_VERSION):
                for statement in MIGRATIONS[step]:
                    conn.execute(statement)
            if current < SCHEMA_VERSION:
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    retry(upgrade)
