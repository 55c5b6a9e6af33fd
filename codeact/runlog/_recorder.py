"""Writing events into the run log: one handler per event type, dispatched on the type's name.

Each handler runs inside the write transaction :meth:`RunLog.record` opens.
``RunStarted`` creates the run; ``ModelOutput``, ``CodeAction``, ``ToolCall``
and ``Observation`` fill in their step; ``FinalAnswer`` sets the answer and
status; ``ErrorEvent`` marks its step (or the run when fatal); ``RunFinished``
finalises the run from its :class:`RunResult`. ``CodeOutput`` keeps a step's
live output until its observation arrives; ``Compacted`` adds a summary call's
usage to the run's; the cost of a model call (dollars, when its prices are known)
goes with its tokens into the step and the run; ``TextDelta`` is not stored.
Every other event (and an event type this version does not know) goes to
the raw ``events`` table only.

Values (answers, tool arguments and results) are stored as
:func:`codeact.values.preview` JSON (see :mod:`._json`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import mimetypes
import os
import socket
import sqlite3
from collections.abc import Callable
from typing import Any

from ..events import (
    CodeAction,
    CodeOutput,
    Compacted,
    ErrorEvent,
    Event,
    FinalAnswer,
    ModelOutput,
    Observation,
    RunFinished,
    RunResult,
    RunStarted,
    ToolCall,
)
from ._json import clean, to_json, type_name

#: Characters of a step's live output kept until its observation arrives.
PARTIAL_OUTPUT_LIMIT = 64_000

Handler = Callable[[sqlite3.Connection, Any], None]


def process_start(pid: int) -> str:
    """A process's start time in clock ticks ('' when it is gone): tells a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def record(conn: sqlite3.Connection, event: Event) -> None:
    """Store ``event`` (inside the caller's transaction)."""
    name = type(event).__name__
    if name == "TextDelta":
        return
    if isinstance(event, CodeOutput):
        _code_output(conn, event)
        return
    if not isinstance(event, RunStarted):
        # Events may arrive for a run whose start was not recorded (a log
        # attached mid-run); keep them rather than break on the foreign key.
        conn.execute("INSERT OR IGNORE INTO runs (id, status, started) VALUES (?, 'running', ?)",
                     (event.run_id, event.time))
    handler = HANDLERS.get(name)
    if handler is not None:
        handler(conn, event)
    if event.step > 0:
        # Step duration grows with each event until the step's last one.
        conn.execute(
            """UPDATE steps SET duration = MAX(duration, ? - started)
               WHERE run_id = ? AND step = ? AND started IS NOT NULL""",
            (event.time, event.run_id, event.step),
        )
    _append_event(conn, event)


# --------------------------------------------------------------------------- one handler per event type


def _run_started(conn: sqlite3.Connection, event: RunStarted) -> None:
    conn.execute(
        """INSERT INTO runs (id, task, model, backend, tools, files, status, started,
                             owner_host, owner_pid, owner_start, agent, prompt, prompt_version,
                             parent_run_id, parent_step)
           VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (id) DO UPDATE SET task = excluded.task, model = excluded.model,
             backend = excluded.backend, tools = excluded.tools, files = excluded.files,
             started = COALESCE(runs.started, excluded.started), owner_host = excluded.owner_host,
             owner_pid = excluded.owner_pid, owner_start = excluded.owner_start, agent = excluded.agent,
             prompt = excluded.prompt, prompt_version = excluded.prompt_version,
             parent_run_id = excluded.parent_run_id, parent_step = excluded.parent_step""",
        (
            event.run_id,
            clean(event.task),
            clean(event.model),
            clean(event.backend),
            to_json([str(t) for t in event.tools]),
            to_json([str(f) for f in event.files]),
            event.time,
            socket.gethostname(),
            os.getpid(),
            process_start(os.getpid()),
            clean(getattr(event, "agent", None)),
            clean(getattr(event, "prompt", None)) or None,
            clean(getattr(event, "prompt_version", None)) or None,
            clean(getattr(event, "parent_run_id", None)) or None,
            getattr(event, "parent_step", None),
        ),
    )


def _model_output(conn: sqlite3.Connection, event: ModelOutput) -> None:
    ensure_step(conn, event.run_id, event.step, event.time - max(event.duration, 0.0))
    u = event.usage
    # A step normally has one model output; if it has several (a retry after
    # a parse error), keep the last text and add up the cost.
    conn.execute(
        f"""UPDATE steps SET model_output = ?, input_messages = ?, input_chars = ?,
             model_time = model_time + ?, input_tokens = input_tokens + ?,
             output_tokens = output_tokens + ?, requests = requests + ?, {_ADD_COST}
           WHERE run_id = ? AND step = ?""",
        (clean(event.text), event.input_messages, event.input_chars, event.duration, u.input_tokens,
         u.output_tokens, u.requests, *_cost(u), event.run_id, event.step),
    )
    _add_to_run(conn, event.run_id, u)


def _code_action(conn: sqlite3.Connection, event: CodeAction) -> None:
    ensure_step(conn, event.run_id, event.step, event.time)
    conn.execute("UPDATE steps SET code = ? WHERE run_id = ? AND step = ?",
                 (clean(event.code), event.run_id, event.step))


def _tool_call(conn: sqlite3.Connection, event: ToolCall) -> None:
    ensure_step(conn, event.run_id, event.step, event.time)
    insert_tool_call(conn, event.run_id, event.step, event)


def _observation(conn: sqlite3.Connection, event: Observation) -> None:
    run_id = event.run_id
    ensure_step(conn, run_id, event.step, event.time)
    conn.execute(
        """UPDATE steps SET observation = ?, stdout = ?, stderr = ?, error = ?,
             truncated = ?, sandbox_time = sandbox_time + ?
           WHERE run_id = ? AND step = ?""",
        (clean(event.text), clean(event.stdout), clean(event.stderr), clean(event.error), int(event.truncated),
         event.duration, run_id, event.step),
    )
    for path in event.artifacts:
        insert_artifact(conn, run_id, event.step, path)
    if event.images:
        (last,) = conn.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM images WHERE run_id = ? AND step = ?", (run_id, event.step)
        ).fetchone()
        conn.executemany(
            "INSERT INTO images (run_id, step, seq, mime, png) VALUES (?, ?, ?, ?, ?)",
            [(run_id, event.step, last + i, image_mime(bytes(img)), bytes(img))
             for i, img in enumerate(event.images, 1)],
        )


def _final_answer(conn: sqlite3.Connection, event: FinalAnswer) -> None:
    conn.execute("UPDATE runs SET answer = ?, answer_type = ?, status = ? WHERE id = ?",
                 (to_json(event.answer), type_name(event.answer), event.status, event.run_id))


def _error_event(conn: sqlite3.Connection, event: ErrorEvent) -> None:
    if event.step > 0 and event.kind != "session":  # a failed autosave is not the step's error (events keep it)
        ensure_step(conn, event.run_id, event.step, event.time)
        conn.execute("UPDATE steps SET error = COALESCE(error, ?) WHERE run_id = ? AND step = ?",
                     (clean(event.message), event.run_id, event.step))
    if event.fatal:
        conn.execute("UPDATE runs SET error = COALESCE(error, ?) WHERE id = ?", (clean(event.message), event.run_id))


def _compacted(conn: sqlite3.Connection, event: Compacted) -> None:
    # A summary's model call (condenser="summary") counts in the run's usage; the event itself is in `events`.
    u = event.usage
    if u.requests or u.total_tokens:
        _add_to_run(conn, event.run_id, u)


#: Adds the dollars of one model call (a parameter: NULL when unknown) to a row's ``cost``; an unknown cost
#: leaves it as it is (NULL stays NULL: "not known" is never shown as $0).
_ADD_COST = "cost = CASE WHEN ? IS NULL THEN cost ELSE COALESCE(cost, 0) + ? END"


def _cost(u: Any) -> tuple[float | None, float | None]:
    return u.cost, u.cost


def _add_to_run(conn: sqlite3.Connection, run_id: str, u: Any) -> None:
    conn.execute(
        f"""UPDATE runs SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ?,
             requests = requests + ?, {_ADD_COST} WHERE id = ?""",
        (u.input_tokens, u.output_tokens, u.requests, *_cost(u), run_id),
    )


def _run_finished(conn: sqlite3.Connection, event: RunFinished) -> None:
    result: RunResult = event.result
    run_id = event.run_id
    started, requests, in_tok, out_tok, cost, task = conn.execute(
        "SELECT started, requests, input_tokens, output_tokens, cost, task FROM runs WHERE id = ?", (run_id,)
    ).fetchone()
    u = result.usage
    if u.requests or u.total_tokens:  # the result's totals are authoritative when present
        requests, in_tok, out_tok = u.requests, u.input_tokens, u.output_tokens
        cost = u.cost if u.cost is not None else cost
    duration = result.duration or (event.time - started if started is not None else None)
    conn.execute(
        """UPDATE runs SET status = ?, error = COALESCE(?, error), finished = ?, duration = ?,
             requests = ?, input_tokens = ?, output_tokens = ?, cost = ?, task = ?,
             steps = MAX(steps, ?) WHERE id = ?""",
        (result.status, clean(result.error), event.time, duration, requests, in_tok, out_tok, cost,
         task or clean(result.task) or "", len(result.steps), run_id),
    )
    if result.answer is not None:
        conn.execute("UPDATE runs SET answer = ?, answer_type = ? WHERE id = ?",
                     (to_json(result.answer), type_name(result.answer), run_id))
    # Fill in steps the event stream did not deliver (a log attached late),
    # never overwriting what was recorded as it happened.
    for step in result.steps:
        conn.execute("INSERT OR IGNORE INTO steps (run_id, step, started) VALUES (?, ?, NULL)", (run_id, step.index))
        conn.execute(
            """UPDATE steps SET model_output = COALESCE(model_output, ?), code = COALESCE(code, ?),
                 observation = COALESCE(observation, ?), error = COALESCE(error, ?),
                 model_time = CASE WHEN model_time = 0 THEN ? ELSE model_time END,
                 sandbox_time = CASE WHEN sandbox_time = 0 THEN ? ELSE sandbox_time END,
                 duration = CASE WHEN ? > 0 THEN ? ELSE duration END,
                 input_tokens = CASE WHEN requests = 0 THEN ? ELSE input_tokens END,
                 output_tokens = CASE WHEN requests = 0 THEN ? ELSE output_tokens END,
                 cost = CASE WHEN requests = 0 THEN ? ELSE cost END,
                 requests = CASE WHEN requests = 0 THEN ? ELSE requests END
               WHERE run_id = ? AND step = ?""",
            (clean(step.model_output), clean(step.code), clean(step.observation), clean(step.error), step.model_time,
             step.sandbox_time, step.duration, step.duration, step.usage.input_tokens, step.usage.output_tokens,
             step.usage.cost, step.usage.requests, run_id, step.index),
        )
        if step.tool_calls:
            (have,) = conn.execute(
                "SELECT COUNT(*) FROM tool_calls WHERE run_id = ? AND step = ?", (run_id, step.index)
            ).fetchone()
            if not have:
                for call in step.tool_calls:
                    insert_tool_call(conn, run_id, step.index, call)
    for path in result.artifacts:
        insert_artifact(conn, run_id, 0, path)


def _code_output(conn: sqlite3.Connection, event: CodeOutput) -> None:
    """Keep a step's live output (capped) until its observation: what survives if the process dies."""
    conn.execute("INSERT OR IGNORE INTO runs (id, status, started) VALUES (?, 'running', ?)",
                 (event.run_id, event.time))
    ensure_step(conn, event.run_id, event.step, event.time)
    text = event.text if event.stream == "stdout" else f"[stderr] {event.text}"
    conn.execute(
        """UPDATE steps SET partial_output = substr(COALESCE(partial_output, '') || ?, 1, ?)
           WHERE run_id = ? AND step = ? AND length(COALESCE(partial_output, '')) < ?""",
        (clean(text), PARTIAL_OUTPUT_LIMIT, event.run_id, event.step, PARTIAL_OUTPUT_LIMIT),
    )


#: The handler of each event type, by the type's name (as :mod:`codeact.cli.render` dispatches).
HANDLERS: dict[str, Handler] = {
    "RunStarted": _run_started,
    "ModelOutput": _model_output,
    "CodeAction": _code_action,
    "ToolCall": _tool_call,
    "Observation": _observation,
    "FinalAnswer": _final_answer,
    "ErrorEvent": _error_event,
    "Compacted": _compacted,
    "RunFinished": _run_finished,
}


# --------------------------------------------------------------------------- run-level writes


def mark_interrupted(conn: sqlite3.Connection) -> list[str]:
    """Mark this host's runs whose process died mid-run as ``interrupted``; returns their ids."""
    rows = conn.execute(
        "SELECT id, owner_pid, owner_start FROM runs WHERE status = 'running' AND owner_host = ?",
        (socket.gethostname(),),
    ).fetchall()
    dead = [r[0] for r in rows if r[1] and process_start(int(r[1])) != (r[2] or "")]
    for run_id in dead:
        conn.execute(
            "UPDATE runs SET status = 'interrupted', error = COALESCE(error, ?) WHERE id = ?",
            ("the process running this run ended before the run finished (killed, or the machine stopped)", run_id),
        )
        conn.execute(
            """UPDATE steps SET observation = COALESCE(partial_output, '') ||
                 '\n[the run was interrupted here: its process ended]'
               WHERE run_id = ? AND observation IS NULL AND code IS NOT NULL""",
            (run_id,),
        )
    return dead


def link_episode(conn: sqlite3.Connection, run_id: str, episode: str) -> None:
    conn.execute("UPDATE runs SET bench_episode = ? WHERE id = ?", (clean(episode), run_id))


# --------------------------------------------------------------------------- rows


def ensure_step(conn: sqlite3.Connection, run_id: str, step: int, started: float) -> None:
    conn.execute("INSERT OR IGNORE INTO steps (run_id, step, started) VALUES (?, ?, ?)", (run_id, step, started))
    conn.execute("UPDATE runs SET steps = MAX(steps, ?) WHERE id = ?", (step, run_id))


def insert_tool_call(conn: sqlite3.Connection, run_id: str, step: int, call: ToolCall) -> None:
    conn.execute(
        """INSERT INTO tool_calls (run_id, step, name, arguments, result, error, duration, time)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
        (run_id, step, clean(call.name), to_json(call.arguments), to_json(call.result), clean(call.error),
         call.duration, call.time),
    )


def insert_artifact(conn: sqlite3.Connection, run_id: str, step: int, path: str | os.PathLike[str]) -> None:
    text = os.fspath(path)
    size: int | None = None
    if os.path.isabs(text):  # a file the agent wrote; relative names come from the sandbox: never stat them
        with contextlib.suppress(OSError, ValueError):  # gone, or a name the OS refuses: no size
            size = os.lstat(text).st_size
    conn.execute(
        "INSERT OR IGNORE INTO artifacts (run_id, step, path, mime, size) VALUES (?, ?, ?, ?, ?)",
        (run_id, step, clean(text), mimetypes.guess_type(text)[0], size),
    )


def image_mime(data: bytes) -> str:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    return "image/png"  # the sandbox only reports PNGs; assume so


def _append_event(conn: sqlite3.Connection, event: Event) -> None:
    (last,) = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?", (event.run_id,)).fetchone()
    conn.execute(
        "INSERT INTO events (run_id, seq, type, step, time, payload) VALUES (?, ?, ?, ?, ?, ?)",
        (event.run_id, last + 1, type(event).__name__, event.step, event.time, to_json(event_payload(event))),
    )


def event_payload(event: Event) -> dict[str, Any]:
    """The event's own fields for the raw log (run_id, step and time are columns)."""
    payload: dict[str, Any] = {}
    for f in dataclasses.fields(event):
        if f.name in ("run_id", "step", "time"):
            continue
        value = getattr(event, f.name)
        if isinstance(event, Observation) and f.name == "images":
            # The bytes are in the images table; note their sizes only.
            value = [{"type": "bytes", "size": len(img), "stored": "images"} for img in value]
        elif isinstance(event, Observation) and f.name == "outputs":
            # Rich outputs: text kept, image bytes (already in the images table) noted by size.
            value = [{mime: ({"type": "bytes", "size": len(data), "stored": "images"}
                             if isinstance(data, (bytes, bytearray)) else data)
                      for mime, data in bundle.items()} for bundle in value]
        elif isinstance(event, RunFinished) and f.name == "result":
            # Steps are in the steps table; keep the outcome only.
            value = {
                "status": value.status,
                "answer": value.answer,
                "error": value.error,
                "duration": value.duration,
                "usage": value.usage,
                "tree_usage": value.tree_usage,
                "steps": len(value.steps),
                "artifacts": [str(p) for p in value.artifacts],
            }
        elif f.name == "answer":
            value = {"value": value, "type": type_name(value)}
        payload[f.name] = value
    return payload
