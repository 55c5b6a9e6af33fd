"""Reading the run log: runs by id or prefix, summaries, whole runs, raw events. Each runs in a read transaction."""

from __future__ import annotations

import difflib
import sqlite3
from typing import Any

from ..errors import AmbiguousRunId, RunNotFound
from ..messages import Usage
from ._json import loads
from ._records import ArtifactRecord, ErrorRecord, RunRecord, RunSummary, StepRecord, ToolCallRecord

_SUMMARY_COLUMNS = """id, task, model, backend, status, started, finished, duration, steps,
                      input_tokens, output_tokens, requests, error, agent, parent_run_id, parent_step, cost"""


def _summary(r: Any) -> RunSummary:
    return RunSummary(
        id=r[0], task=r[1] or "", model=r[2], backend=r[3], status=r[4], started=r[5], finished=r[6],
        duration=r[7], step_count=r[8] or 0, usage=Usage(r[9] or 0, r[10] or 0, r[11] or 0, r[16]), error=r[12],
        agent=r[13], parent_run_id=r[14], parent_step=r[15],
    )


def get_summary(conn: sqlite3.Connection, key: str) -> RunSummary:
    rid = resolve(conn, key)
    return _summary(conn.execute(f"SELECT {_SUMMARY_COLUMNS} FROM runs WHERE id = ?", (rid,)).fetchone())


def list_children(conn: sqlite3.Connection, key: str) -> list[RunSummary]:
    """The runs started by tool calls of run ``key`` (agents called as tools), in the order they started."""
    rid = resolve(conn, key)
    return [_summary(r) for r in conn.execute(
        f"SELECT {_SUMMARY_COLUMNS} FROM runs WHERE parent_run_id = ? ORDER BY started, rowid", (rid,)).fetchall()]


def tree_usage(conn: sqlite3.Connection, key: str) -> tuple[Usage, int]:
    """What run ``key`` and every run below it (agents called as tools, at any depth) spent, and how many runs
    that is. The cost is the sum of the known costs (None when no run's is known)."""
    rid = resolve(conn, key)
    row = conn.execute(
        """WITH RECURSIVE tree(id) AS (
               SELECT ? UNION SELECT runs.id FROM runs JOIN tree ON runs.parent_run_id = tree.id)
           SELECT SUM(input_tokens), SUM(output_tokens), SUM(requests), SUM(cost), COUNT(*)
           FROM runs WHERE id IN (SELECT id FROM tree)""",  # UNION, not UNION ALL: a hand-edited loop ends
        (rid,)).fetchone()
    return Usage(row[0] or 0, row[1] or 0, row[2] or 0, row[3]), int(row[4] or 0)


def list_runs(conn: sqlite3.Connection, limit: int | None, status: str | None,
              bench_episode: str | None = None) -> list[RunSummary]:
    sql = f"SELECT {_SUMMARY_COLUMNS} FROM runs"
    where: list[str] = []
    params: list[Any] = []
    if status is not None:
        where.append("status = ?")
        params.append(status)
    if bench_episode is not None:
        where.append("bench_episode = ?")
        params.append(bench_episode)
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY started DESC, rowid DESC"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(max(int(limit), 0))
    return [_summary(r) for r in conn.execute(sql, params).fetchall()]


def resolve(conn: sqlite3.Connection, key: str) -> str:
    """The full id of the run ``key`` names (an id or a unique prefix)."""
    key = str(key).strip()
    if not key:
        raise RunNotFound("No run id given. List runs with `codeact logs` to find one.")
    if conn.execute("SELECT 1 FROM runs WHERE id = ?", (key,)).fetchone():
        return key
    # substr() rather than LIKE: LIKE is case-insensitive and treats % and _ as wildcards.
    matches = [
        r[0]
        for r in conn.execute(
            "SELECT id FROM runs WHERE substr(id, 1, ?) = ? ORDER BY started DESC LIMIT 11", (len(key), key)
        )
    ]
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(matches[:10]) + (", ..." if len(matches) > 10 else "")
        raise AmbiguousRunId(
            f"Run id prefix {key!r} is ambiguous: it matches {shown}. Give more characters.", matches[:10]
        )
    recent = [r[0] for r in conn.execute("SELECT id FROM runs ORDER BY started DESC LIMIT 2000")]
    # Compare against same-length prefixes too, so "abc12" finds "abd12xyz...".
    by_prefix = {rid[: len(key)]: rid for rid in reversed(recent)}
    close = difflib.get_close_matches(key, list(by_prefix), n=3, cutoff=0.5)
    candidates = list(dict.fromkeys(by_prefix[c] for c in close))
    if candidates:
        hint = "Closest ids: " + ", ".join(candidates) + "."
    elif recent:
        candidates = recent[:3]
        hint = "Most recent runs: " + ", ".join(candidates) + "."
    else:
        hint = "The run log is empty."
    raise RunNotFound(f"No run with id {key!r}. {hint}", candidates)


def last_run_id(conn: sqlite3.Connection) -> str | None:
    row = conn.execute("SELECT id FROM runs ORDER BY started DESC, rowid DESC LIMIT 1").fetchone()
    return row[0] if row else None


def get_run(conn: sqlite3.Connection, key: str) -> RunRecord:
    run_id = resolve(conn, key)
    r = conn.execute(
        """SELECT id, task, model, backend, tools, files, status, answer, answer_type, error,
                  started, finished, duration, input_tokens, output_tokens, requests,
                  agent, prompt, prompt_version, bench_episode, parent_run_id, parent_step, cost
           FROM runs WHERE id = ?""",
        (run_id,),
    ).fetchone()
    calls: dict[int, list[ToolCallRecord]] = {}
    for c in conn.execute(
        "SELECT step, name, arguments, result, error, duration, time FROM tool_calls WHERE run_id = ? ORDER BY id",
        (run_id,),
    ):
        calls.setdefault(c[0], []).append(ToolCallRecord(
            step=c[0], name=c[1], arguments=loads(c[2]), result=loads(c[3]), error=c[4], duration=c[5] or 0.0,
            time=c[6]))
    artifacts: dict[int, list[ArtifactRecord]] = {}
    for a in conn.execute("SELECT step, path, mime, size FROM artifacts WHERE run_id = ? ORDER BY id", (run_id,)):
        artifacts.setdefault(a[0], []).append(ArtifactRecord(step=a[0], path=a[1], mime=a[2], size=a[3]))
    images: dict[int, list[bytes]] = {}
    for i in conn.execute("SELECT step, png FROM images WHERE run_id = ? ORDER BY step, seq", (run_id,)):
        images.setdefault(i[0], []).append(bytes(i[1]))
    errors = [
        ErrorRecord(step=e[0], message=str(p.get("message", "")), kind=str(p.get("kind", "error")),
                    fatal=bool(p.get("fatal", False)), time=e[1])
        for e in conn.execute(
            "SELECT step, time, payload FROM events WHERE run_id = ? AND type = 'ErrorEvent' ORDER BY seq", (run_id,)
        )
        if isinstance(p := loads(e[2], {}), dict)
    ]
    steps = [
        StepRecord(
            step=s[0], model_output=s[1] or "", input_messages=s[2] or 0, input_chars=s[3] or 0,
            model_time=s[4] or 0.0, code=s[5], observation=s[6], stdout=s[7] or "", stderr=s[8] or "", error=s[9],
            sandbox_time=s[10] or 0.0, truncated=bool(s[11]), usage=Usage(s[12] or 0, s[13] or 0, s[14] or 0, s[17]),
            started=s[15], duration=s[16] or 0.0, tool_calls=calls.get(s[0], []), artifacts=artifacts.get(s[0], []),
            images=images.get(s[0], []),
        )
        for s in conn.execute(
            """SELECT step, model_output, input_messages, input_chars, model_time, code, observation,
                      stdout, stderr, error, sandbox_time, truncated, input_tokens, output_tokens,
                      requests, started, duration, cost
               FROM steps WHERE run_id = ? ORDER BY step""",
            (run_id,),
        )
    ]
    return RunRecord(
        id=r[0], task=r[1] or "", model=r[2], backend=r[3], tools=loads(r[4], []) or [], files=loads(r[5], []) or [],
        status=r[6], answer=loads(r[7]), answer_type=r[8], error=r[9], started=r[10], finished=r[11], duration=r[12],
        usage=Usage(r[13] or 0, r[14] or 0, r[15] or 0, r[22]), steps=steps, artifacts=artifacts.get(0, []),
        errors=errors, agent=r[16], prompt=r[17], prompt_version=r[18], bench_episode=r[19], parent_run_id=r[20],
        parent_step=r[21],
    )


def get_events(conn: sqlite3.Connection, key: str) -> list[dict[str, Any]]:
    rid = resolve(conn, key)
    return [
        {"seq": e[0], "type": e[1], "step": e[2], "time": e[3], "payload": loads(e[4], {})}
        for e in conn.execute("SELECT seq, type, step, time, payload FROM events WHERE run_id = ? ORDER BY seq", (rid,))
    ]


def count_running(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM runs WHERE status = 'running'").fetchone()[0])
