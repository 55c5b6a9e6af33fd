"""The run log (codeact.runlog) and its exports (codeact.export), on real SQLite files."""

from __future__ import annotations

import base64
import io
import json
import math
import multiprocessing
import os
import sqlite3
import struct
import subprocess
import sys
import threading
import traceback
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

import nbformat
import platformdirs
import pytest

from codeact.errors import CodeActError
from codeact.events import (
    CodeAction,
    ErrorEvent,
    Event,
    FinalAnswer,
    ModelOutput,
    Observation,
    RunFinished,
    RunResult,
    RunStarted,
    Step,
    TextDelta,
    ToolCall,
)
from codeact.export import export_jsonl, export_notebook, export_run, model_prose
from codeact.messages import Usage
from codeact.runlog import (
    SCHEMA_VERSION,
    AmbiguousRunId,
    RunLog,
    RunLogError,
    RunNotFound,
    default_db_path,
    jsonable,
    to_json,
)
from codeact.runlog._schema import MIGRATIONS
from codeact.values import preview, restore, show

REPO = Path(__file__).resolve().parents[1]
T0 = 1_700_000_000.0


def make_png(width: int = 3, height: int = 2) -> bytes:
    """A real (tiny, red) PNG built by hand: signature, IHDR, IDAT, IEND."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


PNG = make_png()

CODE1 = """import pandas as pd
df = pd.read_csv("sales.csv")
price = lookup_price("widget")
print("total:", (df.qty * price).sum())
df.plot()"""

CODE2 = "final_answer(total / zero)"

CODE3 = 'final_answer({"total": 42.5, "unit": "EUR"})'

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "<cell>", line 1, in <module>\n'
    "    final_answer(total / zero)\n"
    "ZeroDivisionError: division by zero"
)

ANSWER = {"total": 42.5, "unit": "EUR"}


def run_events(run_id: str, t0: float = T0, *, artifact: str = "/tmp/plot.png", answer=ANSWER) -> list:
    """A realistic three-step run: tool call + image, an error, then the final answer."""
    steps = [
        Step(index=1, model_output="m1", code=CODE1, observation="total: 42.5", usage=Usage(120, 40, 1)),
        Step(index=2, model_output="m2", code=CODE2, observation=TRACEBACK, usage=Usage(200, 30, 1), error=TRACEBACK),
        Step(index=3, model_output="m3", code=CODE3, observation="", usage=Usage(260, 20, 1)),
    ]
    result = RunResult(
        run_id=run_id,
        task="Plot sales.csv and report the total in EUR",
        answer=answer,
        status="success",
        steps=steps,
        usage=Usage(580, 90, 3),
        duration=9.0,
        artifacts=[Path(artifact)],
    )
    return [
        RunStarted(
            run_id=run_id,
            time=t0,
            task="Plot sales.csv and report the total in EUR",
            model="test-model",
            backend="local",
            tools=["lookup_price"],
            files=["sales.csv"],
        ),
        TextDelta(run_id=run_id, step=1, time=t0 + 0.5, text="I'll load "),
        ModelOutput(
            run_id=run_id,
            step=1,
            time=t0 + 1.5,
            text=f"I'll load the data and plot it.\n\n```python\n{CODE1}\n```\n",
            usage=Usage(120, 40, 1),
            duration=1.5,
            input_messages=2,
            input_chars=900,
        ),
        CodeAction(run_id=run_id, step=1, time=t0 + 1.6, code=CODE1),
        ToolCall(
            run_id=run_id,
            step=1,
            time=t0 + 1.7,
            name="lookup_price",
            arguments={"item": "widget"},
            result=2.5,
            duration=0.01,
        ),
        Observation(
            run_id=run_id,
            step=1,
            time=t0 + 2.5,
            text="total: 42.5\n[1 image]",
            stdout="total: 42.5\n",
            duration=0.8,
            artifacts=[artifact],
            images=[PNG],
        ),
        ModelOutput(
            run_id=run_id,
            step=2,
            time=t0 + 4.0,
            text=f"Now I answer.\n```python\n{CODE2}\n```",
            usage=Usage(200, 30, 1),
            duration=1.4,
            input_messages=4,
            input_chars=1500,
        ),
        CodeAction(run_id=run_id, step=2, time=t0 + 4.1, code=CODE2),
        ToolCall(
            run_id=run_id,
            step=2,
            time=t0 + 4.2,
            name="lookup_price",
            arguments={"item": "gadget"},
            error="UnknownItem: gadget",
            duration=0.02,
        ),
        Observation(
            run_id=run_id,
            step=2,
            time=t0 + 4.5,
            text=TRACEBACK,
            stderr="warning: zero is zero\n",
            error=TRACEBACK,
            duration=0.3,
        ),
        ErrorEvent(run_id=run_id, step=2, time=t0 + 4.6, message=TRACEBACK, kind="sandbox"),
        ModelOutput(
            run_id=run_id,
            step=3,
            time=t0 + 6.0,
            text=f"```python\n{CODE3}\n```",
            usage=Usage(260, 20, 1),
            duration=1.3,
        ),
        CodeAction(run_id=run_id, step=3, time=t0 + 6.1, code=CODE3),
        Observation(run_id=run_id, step=3, time=t0 + 6.3, text="", duration=0.1),
        FinalAnswer(run_id=run_id, step=3, time=t0 + 6.4, answer=answer, status="success"),
        RunFinished(run_id=run_id, time=t0 + 9.0, result=result),
    ]


def record_all(log: RunLog, events: list) -> None:
    for event in events:
        log.record(event)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "logs" / "runs.db"


@pytest.fixture
def log(db: Path):
    with RunLog(db) as runlog:
        yield runlog


@pytest.fixture
def recorded(log: RunLog, tmp_path: Path) -> RunLog:
    artifact = tmp_path / "plot.png"
    artifact.write_bytes(PNG)
    record_all(log, run_events("run-abc123", artifact=str(artifact)))
    return log


# --------------------------------------------------------------------------- recording


def test_full_run_is_recorded(recorded: RunLog, tmp_path: Path) -> None:
    (summary,) = recorded.list_runs()
    assert summary.id == "run-abc123"
    assert summary.status == "success"
    assert summary.model == "test-model" and summary.backend == "local"
    assert summary.step_count == 3
    assert summary.usage == Usage(580, 90, 3)
    assert summary.duration == 9.0
    assert summary.started == T0 and summary.finished == T0 + 9.0

    run = recorded.get_run("run-abc123")
    assert run.task == "Plot sales.csv and report the total in EUR"
    assert run.tools == ["lookup_price"] and run.files == ["sales.csv"]
    assert run.answer == ANSWER and run.answer_type == "dict"
    assert run.ok and run.error is None
    assert [s.step for s in run.steps] == [1, 2, 3]

    s1, s2, s3 = run.steps
    assert s1.code == CODE1
    assert s1.model_output.startswith("I'll load the data")
    assert s1.stdout == "total: 42.5\n"
    assert s1.observation == "total: 42.5\n[1 image]"
    assert s1.usage == Usage(120, 40, 1)
    assert s1.input_messages == 2 and s1.input_chars == 900
    assert s1.model_time == 1.5 and s1.sandbox_time == 0.8
    assert s1.started == pytest.approx(T0) and s1.duration == pytest.approx(2.5)
    assert s1.images == [PNG]
    (a1,) = s1.artifacts
    assert a1.path == str(tmp_path / "plot.png") and a1.mime == "image/png" and a1.size == len(PNG)
    (call,) = s1.tool_calls
    assert call.name == "lookup_price" and call.arguments == {"item": "widget"} and call.result == 2.5
    assert call.error is None and call.duration == 0.01

    assert s2.error == TRACEBACK and s2.stderr == "warning: zero is zero\n"
    assert s2.tool_calls[0].error == "UnknownItem: gadget"
    assert s2.images == []
    assert s3.code == CODE3 and s3.error is None

    # The run's final artifacts are kept at run level (step 0).
    assert [a.path for a in run.artifacts] == [str(tmp_path / "plot.png")]
    (err,) = run.errors
    assert err.step == 2 and err.kind == "sandbox" and not err.fatal and "ZeroDivisionError" in err.message


def test_raw_events_skip_text_deltas_and_image_bytes(recorded: RunLog) -> None:
    events = recorded.get_events("run-abc")
    types = [e["type"] for e in events]
    assert "TextDelta" not in types
    assert types[0] == "RunStarted" and types[-1] == "RunFinished"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    obs = next(e for e in events if e["type"] == "Observation")
    assert obs["payload"]["images"] == [{"type": "bytes", "size": len(PNG), "stored": "images"}]
    finished = events[-1]["payload"]["result"]
    assert finished["status"] == "success" and finished["steps"] == 3


def test_run_is_visible_while_it_runs(log: RunLog) -> None:
    events = run_events("live-1")
    record_all(log, events[:6])  # started, step 1 done
    run = log.get_run("live-1")
    assert run.status == "running" and run.finished is None
    assert len(run.steps) == 1 and run.steps[0].images == [PNG]
    assert run.usage == Usage(120, 40, 1)  # running totals from model outputs
    assert log.list_runs(status="running")[0].id == "live-1"

    record_all(log, events[6:])
    assert log.get_run("live-1").status == "success"
    assert log.list_runs(status="running") == []


def test_events_for_an_unstarted_run_are_kept(log: RunLog) -> None:
    # A log attached mid-run (or only given the RunFinished) still keeps a consistent run.
    finished = run_events("late-1")[-1]
    log.record(finished)
    run = log.get_run("late-1")
    assert run.status == "success" and run.answer == ANSWER
    assert [s.step for s in run.steps] == [1, 2, 3]
    assert run.steps[1].error == TRACEBACK
    assert run.usage == Usage(580, 90, 3)


def test_fatal_error_marks_the_run(log: RunLog) -> None:
    log.record(RunStarted(run_id="bad", task="t", model="m", backend="docker"))
    log.record(ErrorEvent(run_id="bad", message="Docker is not running. Start it.", kind="sandbox", fatal=True))
    result = RunResult(run_id="bad", task="t", status="error", error="Docker is not running. Start it.")
    log.record(RunFinished(run_id="bad", result=result))
    run = log.get_run("bad")
    assert run.status == "error" and run.error == "Docker is not running. Start it."
    assert run.errors[0].fatal and run.steps == []


def test_list_runs_newest_first_limit_and_status(log: RunLog) -> None:
    for i in range(5):
        events = run_events(f"r{i}", T0 + 100 * i)
        if i == 3:
            events[-1] = RunFinished(
                run_id="r3", time=T0 + 309, result=RunResult(run_id="r3", task="x", status="max_steps")
            )
        record_all(log, events)
    assert [r.id for r in log.list_runs()] == ["r4", "r3", "r2", "r1", "r0"]
    assert [r.id for r in log.list_runs(limit=2)] == ["r4", "r3"]
    assert [r.id for r in log.list_runs(status="max_steps")] == ["r3"]
    assert len(log.list_runs(limit=None)) == 5


def test_prefix_lookup_and_messages(log: RunLog) -> None:
    for i, rid in enumerate(["abc123", "abd456", "xyz789"]):
        record_all(log, run_events(rid, T0 + i))
    assert log.get_run("abc").id == "abc123"
    assert log.get_run("abc123").id == "abc123"
    assert log.resolve("xy") == "xyz789"

    with pytest.raises(AmbiguousRunId) as ambiguous:
        log.get_run("ab")
    assert "ambiguous" in str(ambiguous.value)
    assert "abc123" in str(ambiguous.value) and "abd456" in str(ambiguous.value)
    assert sorted(ambiguous.value.candidates) == ["abc123", "abd456"]

    with pytest.raises(RunNotFound) as missing:
        log.get_run("abc124")
    message = str(missing.value)
    assert "No run with id 'abc124'" in message and "abc123" in message
    assert not message.startswith("'")  # not KeyError's quoted repr
    assert isinstance(missing.value, KeyError) and isinstance(missing.value, CodeActError)

    with pytest.raises(RunNotFound, match="No run id given"):
        log.get_run("  ")
    # Prefixes are literal: SQL wildcards do not match anything.
    with pytest.raises(RunNotFound):
        log.get_run("a%")
    with pytest.raises(RunNotFound):
        log.get_run("ABC")


def test_not_found_in_empty_log(log: RunLog) -> None:
    with pytest.raises(RunNotFound, match="empty"):
        log.get_run("nope")
    assert log.last_run() is None


def test_delete_run_removes_everything(recorded: RunLog, db: Path) -> None:
    record_all(recorded, run_events("other", T0 + 50))
    assert recorded.delete_run("run-abc") == "run-abc123"
    assert [r.id for r in recorded.list_runs()] == ["other"]
    with pytest.raises(RunNotFound):
        recorded.get_run("run-abc123")
    with sqlite3.connect(db) as conn:
        for table in ("steps", "tool_calls", "artifacts", "images", "events"):
            n = conn.execute(f"SELECT COUNT(*) FROM {table} WHERE run_id = 'run-abc123'").fetchone()[0]
            assert n == 0, table
            assert conn.execute(f"SELECT COUNT(*) FROM {table} WHERE run_id = 'other'").fetchone()[0] > 0
    with pytest.raises(RunNotFound):
        recorded.delete_run("run-abc123")
    assert recorded.last_run().id == "other"


# --------------------------------------------------------------------------- odd values


@dataclass
class Point:
    x: int
    y: float


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class Custom:
    def __str__(self) -> str:
        return "Custom<42>"


def test_non_json_answers_are_logged_through_the_codec(log: RunLog) -> None:
    # Answers, tool arguments and results are stored as the sandbox codec's previews:
    # types survive (tuple keys, sets, bytes, paths, nan), oddities become opaque nodes.
    cyclic: list = [1]
    cyclic.append(cyclic)
    answer = {
        "point": Point(1, math.nan),
        "ints": {1, 2},
        ("tuple", "key"): (1, 2),
        "path": Path("/tmp/x.csv"),
        "blob": b"\x00\x01",
        "custom": Custom(),
        "weird": Unprintable(),
        "cycle": cyclic,
        "inf": math.inf,
        "bad_text": "caf\udce9",  # a lone surrogate (undecodable byte)
    }
    record_all(log, run_events("odd", answer=answer))
    run = log.get_run("odd")
    assert run.answer_type == "dict"
    assert run.answer["$"] == "dict"  # tuple keys: the codec's tagged dict, not JSON with str() keys
    got = restore(run.answer)
    assert got["point"]["x"] == 1 and math.isnan(got["point"]["y"])
    assert got["ints"] == {1, 2}
    assert got[("tuple", "key")] == (1, 2)
    assert got["path"] == Path("/tmp/x.csv")
    assert got["blob"] == b"\x00\x01"
    assert "Custom" in repr(got["custom"])
    assert "Unprintable" in repr(got["weird"])
    assert got["cycle"][0] == 1 and repr(got["cycle"][1]) == "[...]"
    assert got["inf"] == math.inf
    assert got["bad_text"].startswith("caf")
    assert "('tuple', 'key'): (1, 2)" in run.answer_text

    # Tool results and arguments go through the same codec; previews arrive unchanged.
    log.record(ToolCall(run_id="odd", step=1, name="f", arguments={"p": Point(2, 3.0), "t": preview((1, 2))},
                        result=Custom()))
    call = log.get_run("odd").steps[0].tool_calls[-1]
    assert call.arguments["p"] == {"x": 2, "y": 3.0}
    assert restore(call.arguments["t"]) == (1, 2)  # a preview is not encoded twice
    assert call.result["$"] == "opaque" and "Custom" in show(call.result)


def test_scalar_and_string_answers_keep_their_type(log: RunLog) -> None:
    for rid, answer, kind in [("s", "forty-two", "str"), ("i", 42, "int"), ("l", [1, "a"], "list"), ("n", None, None)]:
        events = run_events(rid, answer=answer)
        if answer is None:
            events = [e for e in events if not isinstance(e, FinalAnswer)]
        record_all(log, events)
        run = log.get_run(rid)
        assert run.answer == answer and run.answer_type == kind


def test_dataframe_answer(log: RunLog) -> None:
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"region": ["north", "south"], "total": [10.5, 32.0]})
    record_all(log, run_events("df", answer=df))
    run = log.get_run("df")
    assert run.answer_type == "pandas.DataFrame"
    assert "north" in run.answer_text and "32.0" in run.answer_text
    assert restore(run.answer).equals(df)


def test_to_json_never_raises() -> None:
    assert json.loads(to_json(Unprintable()))["$"] == "opaque"
    assert json.loads(to_json({"a": math.nan})) == {"a": {"$": "float", "v": "nan"}}
    big = json.loads(to_json(b"x" * 100_000))
    assert big["$"] == "opaque" and big["size"] == 100_000  # summarised, not stored


def test_jsonable_serialises_records_field_by_field() -> None:
    result = RunResult(run_id="r", task="t", answer=(1, 2), status="success",
                       steps=[Step(index=1, usage=Usage(3, 4, 1))], artifacts=[Path("/tmp/a.png")])
    data = jsonable(result)
    assert data["run_id"] == "r" and data["status"] == "success"
    assert data["answer"] == {"$": "tuple", "v": [1, 2]}
    assert data["steps"][0]["usage"] == {"input_tokens": 3, "output_tokens": 4, "requests": 1, "cost": None}
    assert data["artifacts"] == ["/tmp/a.png"]
    json.dumps(data)  # all of it is JSON


# --------------------------------------------------------------------------- agent, prompt, bench episode


def test_agent_and_prompt_are_recorded(log: RunLog) -> None:
    log.record(RunStarted(run_id="re1", task="t", model="m", backend="host", agent="react-json",
                          prompt="react-json", prompt_version="1"))
    log.record(ModelOutput(run_id="re1", step=1, text="Action: ...", usage=Usage(10, 2, 1),
                           tool_calls=[{"id": "c1", "name": "f", "arguments": "{}"}]))
    log.record(ErrorEvent(run_id="re1", step=1, message="there is no tool named 'g'", kind="action"))
    log.record(RunFinished(run_id="re1", result=RunResult(run_id="re1", task="t", status="success", answer=3)))
    run = log.get_run("re1")
    assert (run.agent, run.prompt, run.prompt_version, run.backend) == ("react-json", "react-json", "1", "host")
    assert run.invalid_actions == 1
    assert log.list_runs()[0].agent == "react-json"
    payload = next(e["payload"] for e in log.get_events("re1") if e["type"] == "ModelOutput")
    assert payload["tool_calls"] == [{"id": "c1", "name": "f", "arguments": "{}"}]


def test_bench_episode_link(log: RunLog) -> None:
    record_all(log, run_events("ep-run-1"))
    record_all(log, run_events("ep-run-2", T0 + 10))
    assert log.get_run("ep-run-1").bench_episode is None
    log.link_episode("ep-run-1", "tool-chains/shop-1/codeact/0")
    assert log.get_run("ep-run-1").bench_episode == "tool-chains/shop-1/codeact/0"
    assert [r.id for r in log.list_runs(bench_episode="tool-chains/shop-1/codeact/0")] == ["ep-run-1"]


def test_unknown_event_types_go_to_the_raw_log(log: RunLog) -> None:
    @dataclass(frozen=True, kw_only=True)
    class SomethingNew(Event):
        detail: str

    record_all(log, run_events("new-1"))
    log.record(SomethingNew(run_id="new-1", step=2, detail="x"))
    events = log.get_events("new-1")
    assert events[-1]["type"] == "SomethingNew" and events[-1]["payload"] == {"detail": "x"}
    assert log.get_run("new-1").status == "success"


def test_migration_from_version_2_keeps_runs(db: Path) -> None:
    db.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(db) as conn:
        for statements in MIGRATIONS[:2]:
            for statement in statements:
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 2")
        conn.execute("INSERT INTO runs (id, task, status, started, answer, answer_type) "
                     "VALUES ('old-1', 'old task', 'success', 1.0, '42', 'int')")
    with RunLog(db) as log:
        old = log.get_run("old-1")
        assert old.task == "old task" and old.answer == 42 and old.agent is None and old.bench_episode is None
        log.record(RunStarted(run_id="new-1", task="t", model="m", backend="docker", agent="codeact",
                              prompt="codeact", prompt_version="1"))
        assert log.get_run("new-1").agent == "codeact"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
        columns = {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
        step_columns = {r[1] for r in conn.execute("PRAGMA table_info(steps)")}
    assert {"agent", "prompt", "prompt_version", "bench_episode", "owner_pid", "cost"} <= columns
    assert "cost" in step_columns
    with RunLog(db) as log:
        assert log.get_run("old-1").usage.cost is None  # a run recorded before costs were: unknown, not $0


def test_a_killed_writer_is_marked_interrupted(db: Path, tmp_path: Path) -> None:
    # A child process starts a run, writes some live output and dies: the next open marks it.
    code = (
        "import os, sys; from codeact.runlog import RunLog; from codeact.events import *\n"
        f"log = RunLog({str(db)!r})\n"
        "log.record(RunStarted(run_id='dead-1', task='t', model='m', backend='local'))\n"
        "log.record(CodeAction(run_id='dead-1', step=1, code='print(1)'))\n"
        "log.record(CodeOutput(run_id='dead-1', step=1, stream='stdout', text='partial line\\n'))\n"
        "os._exit(0)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    with RunLog(db) as log:
        run = log.get_run("dead-1")
    assert run.status == "interrupted" and "process" in (run.error or "")
    assert run.steps[0].observation.startswith("partial line")


# --------------------------------------------------------------------------- database


def test_wal_schema_version_and_foreign_keys(recorded: RunLog, db: Path) -> None:
    assert recorded.journal_mode == "wal"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"runs", "steps", "tool_calls", "artifacts", "images", "events"} <= tables


def test_reopening_keeps_runs(db: Path) -> None:
    with RunLog(db) as first:
        record_all(first, run_events("keep"))
    with RunLog(db) as second:
        assert second.get_run("keep").steps[0].images == [PNG]


def test_newer_schema_is_refused(db: Path) -> None:
    RunLog(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(RunLogError, match="newer"):
        RunLog(db)


def test_closed_log_raises(db: Path) -> None:
    log = RunLog(db)
    log.close()
    with pytest.raises(RunLogError, match="closed"):
        log.list_runs()
    with pytest.raises(RunLogError, match="closed"):
        log.record(RunStarted(run_id="x", task="t", model="m", backend="b"))


def test_default_path_honours_codeact_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "deep" / "dir" / "my.db"
    monkeypatch.setenv("CODEACT_DB", str(target))
    assert default_db_path() == target
    with RunLog() as log:
        assert log.path == target
        record_all(log, run_events("env"))
    assert target.exists()
    with RunLog(target) as again:
        assert again.get_run("env").ok

    monkeypatch.delenv("CODEACT_DB")
    assert default_db_path() == Path(platformdirs.user_data_dir("codeact")) / "runs.db"


def test_importing_runlog_does_not_import_nbformat() -> None:
    code = (
        "import sys, codeact.runlog, codeact.export; "
        "assert 'nbformat' not in sys.modules, 'nbformat imported'; print('ok')"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# --------------------------------------------------------------------------- concurrency

RUNS_PER_WORKER = 12


def _record_runs(db: str, prefix: str, count: int, log: RunLog | None = None) -> None:
    own = log is None
    runlog = RunLog(db) if own else log
    try:
        for n in range(count):
            record_all(runlog, run_events(f"{prefix}-{n:03d}-{uuid.uuid4().hex[:8]}", T0 + n))
    finally:
        if own:
            runlog.close()


def _process_worker(db: str, prefix: str, count: int, start, error_file: str) -> None:
    """Runs in a separate process (spawned): records full runs into the shared DB."""
    try:
        start.wait(60)
        _record_runs(db, prefix, count)
    except BaseException:
        Path(error_file).write_text(traceback.format_exc())
        raise


def _assert_all_runs(db: Path, prefixes: list[str]) -> None:
    with RunLog(db) as log:
        runs = log.list_runs(limit=None)
        assert len(runs) == len(prefixes) * RUNS_PER_WORKER
        assert all(r.status == "success" and r.step_count == 3 for r in runs)
        for prefix in prefixes:
            assert sum(r.id.startswith(prefix + "-") for r in runs) == RUNS_PER_WORKER
        sample = log.get_run(runs[0].id)
        assert [len(s.tool_calls) for s in sample.steps] == [1, 1, 0]
        assert sample.steps[0].images == [PNG]
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_concurrent_threads(db: Path) -> None:
    shared = RunLog(db)
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            barrier.wait(30)
            # Half the threads share one RunLog, half open their own connection.
            _record_runs(str(db), f"t{i}", RUNS_PER_WORKER, shared if i % 2 else None)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    shared.close()
    assert not errors, errors
    _assert_all_runs(db, [f"t{i}" for i in range(8)])


def test_concurrent_processes(db: Path, tmp_path: Path) -> None:
    RunLog(db).close()  # create the schema once, as the first `codeact run` would
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(4)  # three children and the parent start writing together
    procs = []
    for i in range(3):
        p = ctx.Process(
            target=_process_worker,
            args=(str(db), f"p{i}", RUNS_PER_WORKER, start, str(tmp_path / f"err{i}.txt")),
        )
        p.start()
        procs.append(p)
    # The parent writes at the same time as the children.
    start.wait(60)
    _record_runs(str(db), "parent", RUNS_PER_WORKER)
    for p in procs:
        p.join(120)
    failures = [f.read_text() for f in tmp_path.glob("err*.txt")]
    assert not failures, failures
    assert [p.exitcode for p in procs] == [0, 0, 0]
    _assert_all_runs(db, ["parent", "p0", "p1", "p2"])


def test_concurrent_processes_on_a_fresh_file(tmp_path: Path) -> None:
    # Two processes creating the schema at the same moment must not trip over each other.
    db = tmp_path / "fresh.db"
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(2)
    procs = [
        ctx.Process(target=_process_worker,
                    args=(str(db), f"f{i}", RUNS_PER_WORKER, start, str(tmp_path / f"err{i}.txt")))
        for i in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    failures = [f.read_text() for f in tmp_path.glob("err*.txt")]
    assert not failures, failures
    assert [p.exitcode for p in procs] == [0, 0]
    _assert_all_runs(db, ["f0", "f1"])


# --------------------------------------------------------------------------- export


def test_export_jsonl(recorded: RunLog) -> None:
    buf = io.StringIO()
    export_jsonl(recorded.get_run("run-abc123"), buf)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 1 + 3 + 1
    objs = [json.loads(line) for line in lines]
    assert [o["type"] for o in objs] == ["run", "step", "step", "step", "result"]

    run = objs[0]
    assert run["id"] == "run-abc123" and run["task"].startswith("Plot sales.csv")
    assert run["usage"] == {"input_tokens": 580, "output_tokens": 90, "requests": 3}

    s1, s2, s3 = objs[1:4]
    assert s1["code"] == CODE1 and s2["code"] == CODE2 and s3["code"] == CODE3
    assert s1["tool_calls"][0]["arguments"] == {"item": "widget"}
    (img,) = s1["images"]
    assert base64.b64decode(img["base64"]) == PNG and img["size"] == len(PNG)
    assert s2["error"] == TRACEBACK

    result = objs[-1]
    assert result["answer"] == ANSWER and result["status"] == "success"
    assert result["errors"][0]["kind"] == "sandbox"

    # Without images: size and hash stay, the bytes do not; the artifact path is still named.
    buf = io.StringIO()
    export_jsonl(recorded.get_run("run-abc123"), buf, include_images=False)
    s1 = json.loads(buf.getvalue().splitlines()[1])
    assert "base64" not in s1["images"][0] and s1["images"][0]["size"] == len(PNG)
    assert s1["artifacts"][0]["path"].endswith("plot.png")


def _text(source) -> str:
    return source if isinstance(source, str) else "".join(source)


def test_export_notebook(recorded: RunLog, tmp_path: Path) -> None:
    path = tmp_path / "out" / "run.ipynb"
    # The artifact file is gone: the notebook still has the image (from the images table).
    (tmp_path / "plot.png").unlink()
    export_notebook(recorded.get_run("run-abc"), path)
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)

    kinds = [c.cell_type for c in nb.cells]
    # The task, the set-up cell (final_answer and the tools' stand-ins), then the steps and the answer.
    assert kinds == ["markdown", "code", "markdown", "code", "markdown", "code", "code", "markdown"]
    first = _text(nb.cells[0].source)
    assert "Plot sales.csv and report the total in EUR" in first
    assert "test-model" in first and "local" in first and "success" in first
    setup = nb.cells[1]
    assert setup.metadata["codeact"]["setup"] and "def final_answer(answer):" in _text(setup.source)

    prose1 = _text(nb.cells[2].source)
    assert "I'll load the data and plot it." in prose1 and "read_csv" not in prose1 and "```" not in prose1

    code_cells = [c for c in nb.cells if c.cell_type == "code" and "setup" not in c.metadata["codeact"]]
    assert [c.execution_count for c in code_cells] == [1, 2, 3]
    # The step that failed in the run is tagged so that running the notebook goes on past it.
    assert [c.metadata.get("tags", []) for c in code_cells] == [[], ["raises-exception"], []]
    assert [_text(c.source) for c in code_cells] == [CODE1, CODE2, CODE3]

    out1 = code_cells[0].outputs
    assert out1[0].output_type == "stream" and out1[0].name == "stdout" and _text(out1[0].text) == "total: 42.5\n"
    (image,) = [o for o in out1 if o.output_type == "display_data"]
    assert base64.b64decode(image.data["image/png"]) == PNG

    out2 = code_cells[1].outputs
    assert [o.output_type for o in out2] == ["stream", "error"]
    assert out2[0].name == "stderr"
    error = out2[1]
    assert error.ename == "ZeroDivisionError" and error.evalue == "division by zero"
    assert error.traceback[0].startswith("Traceback")

    assert code_cells[2].outputs == []
    last = _text(nb.cells[-1].source)
    assert "Answer" in last and '"total": 42.5' in last and "success" in last


def test_export_notebook_odd_steps(log: RunLog, tmp_path: Path) -> None:
    # A reply without code (a plain answer) and a step that only has an observation.
    rid = "plain"
    log.record(RunStarted(run_id=rid, task="Say hi", model="m", backend="restricted"))
    log.record(ModelOutput(run_id=rid, step=1, text="```python\nprint('hi')\n```"))
    log.record(CodeAction(run_id=rid, step=1, code="print('hi')"))
    log.record(Observation(run_id=rid, step=1, text="hi"))
    log.record(ModelOutput(run_id=rid, step=2, text="Hello there! " * 400))
    log.record(FinalAnswer(run_id=rid, step=2, answer="Hello there!", status="success"))
    log.record(RunFinished(run_id=rid,
                           result=RunResult(run_id=rid, task="Say hi", answer="Hello there!", status="success")))
    path = tmp_path / "plain.ipynb"
    export_run(log.get_run(rid), path)
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert [c.cell_type for c in nb.cells] == ["markdown", "code", "code", "markdown", "markdown", "markdown"]
    # No raw output recorded: what the model saw is shown, as markdown (it is written for the model).
    assert nb.cells[2].outputs == [] and "hi" in _text(nb.cells[3].source)
    assert len(_text(nb.cells[4].source)) < 2100  # long prose is cut
    assert "Hello there!" in _text(nb.cells[-1].source)

    # export_run picks the format from the suffix: JSONL too.
    jsonl = tmp_path / "plain.jsonl"
    export_run(log.get_run(rid), jsonl)
    assert [json.loads(line)["type"] for line in jsonl.read_text().splitlines()] == ["run", "step", "step", "result"]


def test_model_prose() -> None:
    assert model_prose("Let me check.\n```python\nx = 1\n```\nThen done.") == "Let me check.\n\nThen done."
    assert model_prose("<execute>x = 1</execute>") == ""
    assert model_prose("Cut off:\n```python\nx = (") == "Cut off:"


def test_rich_outputs_keep_their_text_and_note_image_bytes(log: RunLog) -> None:
    log.record(RunStarted(run_id="rich-1", task="t", model="m", backend="local"))
    log.record(Observation(run_id="rich-1", step=1, text="[1 image]", images=[PNG],
                           outputs=[{"text/html": "<b>table</b>", "image/png": PNG, "text/plain": "<Figure>"}]))
    (obs,) = [e for e in log.get_events("rich-1") if e["type"] == "Observation"]
    (bundle,) = obs["payload"]["outputs"]
    assert bundle == {"text/html": "<b>table</b>", "image/png": {"type": "bytes", "size": len(PNG), "stored": "images"},
                      "text/plain": "<Figure>"}
    assert log.get_run("rich-1").steps[0].images == [PNG]
