"""The run log's rows of saved chat sessions (the ``snapshots`` table): write, read, delete.

Only the host's own records and the validated manifest are written here
(:meth:`sandbox.snapshot.Snapshot.to_json`); the snapshot file itself stays
in its store.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from ..errors import RunNotFound
from ._records import SnapshotRecord

_COLUMNS = "id, session, agent, run_id, step, runs, path, size, created, saved, parent, since, backend, packages, " \
           "manifest"


def _row(r: Any) -> SnapshotRecord:
    def decoded(text: Any, default: Any) -> Any:
        try:
            value = json.loads(text) if text else default
        except ValueError:
            return default
        return value if isinstance(value, type(default)) else default

    return SnapshotRecord(id=r[0], session=r[1], agent=r[2], run_id=r[3], step=int(r[4] or 0),
                          runs=[str(x) for x in decoded(r[5], [])], path=r[6], size=int(r[7] or 0),
                          created=float(r[8] or 0), saved=float(r[9] or 0), parent=r[10], since=r[11],
                          backend=r[12], packages=[str(x) for x in decoded(r[13], [])],
                          manifest=decoded(r[14], {}))


def save(conn: sqlite3.Connection, record: SnapshotRecord) -> None:
    """Insert the row, or move an existing one on (a save that changed nothing in the sandbox)."""
    conn.execute(
        f"""INSERT INTO snapshots ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (id) DO UPDATE SET run_id = excluded.run_id, step = excluded.step, runs = excluded.runs,
                                           saved = excluded.saved""",
        (record.id, record.session, record.agent, record.run_id, record.step, json.dumps(record.runs),
         record.path, record.size, record.created, record.saved, record.parent, record.since, record.backend,
         json.dumps(record.packages), json.dumps(record.manifest)))


def link_runs(conn: sqlite3.Connection, session: str, run_ids: list[str]) -> None:
    """Record that the runs ``run_ids`` were turns of chat session ``session`` (only runs not linked yet)."""
    conn.executemany("UPDATE runs SET session = ? WHERE id = ? AND session IS NULL",
                     [(session, rid) for rid in run_ids])


def get(conn: sqlite3.Connection, snapshot_id: str) -> SnapshotRecord | None:
    r = conn.execute(f"SELECT {_COLUMNS} FROM snapshots WHERE id = ?", (snapshot_id,)).fetchone()
    return _row(r) if r else None


def listed(conn: sqlite3.Connection, session: str | None, limit: int | None) -> list[SnapshotRecord]:
    sql = f"SELECT {_COLUMNS} FROM snapshots"
    params: list[Any] = []
    if session is not None:
        sql += " WHERE session = ?"
        params.append(session)
    sql += " ORDER BY saved DESC, rowid DESC"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(max(int(limit), 0))
    return [_row(r) for r in conn.execute(sql, params).fetchall()]


def find(conn: sqlite3.Connection, key: str) -> SnapshotRecord:
    """The saved session ``key`` names: a snapshot id, a chat session id, or a run id (each: or a unique prefix).

    A session or a run names the newest snapshot of that session (a run: of the session it was a turn of,
    else the newest snapshot whose conversation holds it).
    """
    key = str(key).strip()
    if not key:
        raise RunNotFound("No session given. List saved sessions with `codeact sessions list`.")
    exact = get(conn, key)
    if exact is not None:
        return exact
    for column in ("id", "session"):
        found = {r[0] for r in conn.execute(f"SELECT {column} FROM snapshots WHERE substr({column}, 1, ?) = ?",
                                             (len(key), key))}
        if len(found) > 1:
            raise RunNotFound(f"{key!r} names more than one saved session ({', '.join(sorted(found)[:5])}); "
                              "give more characters", sorted(found))
        if found:
            value = found.pop()
            r = conn.execute(f"SELECT {_COLUMNS} FROM snapshots WHERE {column} = ? ORDER BY saved DESC, rowid DESC",
                             (value,)).fetchone()
            return _row(r)
    runs = [r[0] for r in conn.execute("SELECT id FROM runs WHERE substr(id, 1, ?) = ? LIMIT 11", (len(key), key))]
    if len(runs) > 1 and key not in runs:
        raise RunNotFound(f"{key!r} names more than one run ({', '.join(runs[:5])}); give more characters", runs)
    run_id = key if key in runs or not runs else runs[0]
    r = conn.execute(f"""SELECT {_COLUMNS} FROM snapshots WHERE session = (SELECT session FROM runs WHERE id = ?)
                         ORDER BY saved DESC, rowid DESC""", (run_id,)).fetchone()
    if r is None:
        r = conn.execute(f"""SELECT {_COLUMNS} FROM snapshots WHERE EXISTS
                             (SELECT 1 FROM json_each(snapshots.runs) WHERE json_each.value = ?)
                             ORDER BY saved DESC, rowid DESC""", (run_id,)).fetchone()
    if r is None:
        what = f"run {run_id}" if runs else repr(key)
        raise RunNotFound(f"No saved session for {what}. A chat saves itself when it ends (or on /save); list "
                          "saved sessions with `codeact sessions list`.")
    return _row(r)


def saved_runs(conn: sqlite3.Connection, limit: int) -> set[str]:
    """Run ids the newest ``limit`` saved sessions hold (without reading their manifests)."""
    out: set[str] = set()
    for (text,) in conn.execute("SELECT runs FROM snapshots ORDER BY saved DESC LIMIT ?", (max(int(limit), 0),)):
        try:
            runs = json.loads(text)
        except ValueError:
            continue
        if isinstance(runs, list):
            out.update(r for r in runs if isinstance(r, str))
    return out


def delete(conn: sqlite3.Connection, snapshot_id: str) -> bool:
    return conn.execute("DELETE FROM snapshots WHERE id = ?", (snapshot_id,)).rowcount > 0
