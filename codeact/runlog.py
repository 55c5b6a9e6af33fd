"""The run log: every run, step, tool call and image, recorded in SQLite.

In the spirit of Simon Willison's ``llm`` (which logs every prompt), each
event an agent yields can be handed to :meth:`RunLog.record`; the run is
stored incrementally, so a crashed or cancelled run still leaves everything
up to the crash. Runs are read back with :meth:`RunLog.list_runs` and
:meth:`RunLog.get_run`, and exported with :mod:`codeact.export` (JSONL,
Jupyter notebook).

Example::

    with RunLog() as log:
        for event in log.tee(agent.run("How many rows in data.csv?")):
            ...
        print(log.list_runs(limit=5))

The database lives at ``$CODEACT_DB`` or, when unset,
``platformdirs.user_data_dir("codeact")/runs.db``. It uses WAL journaling,
a busy timeout and short ``BEGIN IMMEDIATE`` transactions, so several threads
and several processes can record runs into the same file at once.

Schema (version :data:`SCHEMA_VERSION`, kept in ``PRAGMA user_version``):

``runs``
    one row per run: task, model, backend, tools/files (JSON), status,
    answer (JSON) and its original Python type name, error, timestamps,
    duration, token usage totals, step count.
``steps``
    one row per (run, step): model output, prompt size, model time, code,
    observation, stdout, stderr, error, sandbox time, truncation flag,
    tokens, start time and duration.
``tool_calls``
    host tool calls made by a step: name, arguments/result (JSON), error,
    duration, time.
``artifacts``
    file references (path, guessed MIME type, size when the file exists);
    step 0 holds the run's final artifacts from :class:`RunResult`.
``images``
    PNG bytes displayed by a step, so a notebook export works even after
    the artifact files are gone.
``events``
    the raw event log (type, step, time, JSON payload) in arrival order;
    image bytes and the full RunResult steps are summarised there because
    ``images`` and ``steps`` already hold them. ``TextDelta`` events are
    streaming noise and are not stored.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import difflib
import enum
import json
import math
import mimetypes
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import IO, Any, Literal

from .errors import CodeActError
from .events import (
    CodeAction,
    CodeOutput,
    ErrorEvent,
    Event,
    FinalAnswer,
    ModelOutput,
    Observation,
    RunFinished,
    RunResult,
    RunStarted,
    TextDelta,
    ToolCall,
)
from .messages import Usage

__all__ = [
    "SCHEMA_VERSION",
    "ArtifactRecord",
    "ErrorRecord",
    "RunLog",
    "RunLogError",
    "RunNotFound",
    "RunRecord",
    "RunSummary",
    "StepRecord",
    "ToolCallRecord",
    "default_db_path",
    "jsonable",
    "to_json",
]

#: Current schema version, stored in ``PRAGMA user_version``.
SCHEMA_VERSION = 2
#: Characters of a step's live output kept until its observation arrives.
PARTIAL_OUTPUT_LIMIT = 64_000

#: Environment variable that overrides the database location.
DB_ENV_VAR = "CODEACT_DB"

#: Seconds a writer waits for another writer's lock before giving up.
BUSY_TIMEOUT = 10.0

#: Bytes values up to this size are stored inline (base64) in JSON columns.
_INLINE_BYTES = 64 * 1024
#: Cap on the text of objects that are stored via ``str()``.
_MAX_REPR = 100_000
#: Nesting beyond this is cut (protects against pathological structures).
_MAX_DEPTH = 64


# --------------------------------------------------------------------------- errors


class RunLogError(CodeActError):
    """The run log database cannot be opened, read or written."""


class RunNotFound(CodeActError, KeyError):
    """No run matches the given id or prefix, or the prefix matches several runs.

    It is also a :class:`KeyError`, so ``except KeyError`` works for callers
    that treat the log like a mapping.
    """

    def __init__(self, message: str, candidates: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: Run ids the caller may have meant (closest matches or the ambiguous ones).
        self.candidates: list[str] = list(candidates or [])

    def __str__(self) -> str:
        # KeyError.__str__ would print the repr of the message (quoted).
        return self.message


class AmbiguousRunId(RunNotFound):
    """A run id prefix matches more than one run."""


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, kw_only=True)
class ToolCallRecord:
    """One host tool call made by a step's code."""

    step: int
    name: str
    arguments: Any = None
    result: Any = None
    error: str | None = None
    duration: float = 0.0
    time: float | None = None


@dataclass(frozen=True, kw_only=True)
class ArtifactRecord:
    """A reference to a file a run produced (the file itself is not stored)."""

    step: int  # 0 for the run's final artifacts
    path: str
    mime: str | None = None
    size: int | None = None  # None when the file did not exist when recorded


@dataclass(frozen=True, kw_only=True)
class ErrorRecord:
    """An :class:`~codeact.events.ErrorEvent` as recorded."""

    step: int
    message: str
    kind: str = "error"
    fatal: bool = False
    time: float | None = None


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """One model turn and the action it took, as stored."""

    step: int
    model_output: str = ""
    code: str | None = None
    observation: str | None = None
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    truncated: bool = False
    usage: Usage = field(default_factory=Usage)
    model_time: float = 0.0
    sandbox_time: float = 0.0
    input_messages: int = 0
    input_chars: int = 0
    started: float | None = None
    duration: float = 0.0
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    artifacts: list[ArtifactRecord] = field(default_factory=list)
    images: list[bytes] = field(default_factory=list, repr=False)


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """A run without its steps: what :meth:`RunLog.list_runs` returns."""

    id: str
    task: str
    model: str | None
    backend: str | None
    status: str
    started: float | None
    finished: float | None
    duration: float | None
    step_count: int
    usage: Usage
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """A whole run: its fields, steps (with tool calls, artifacts, images) and errors.

    ``answer`` is the JSON-decoded form of what the run answered: dicts,
    lists, numbers and strings come back as such; other objects (a
    DataFrame, say) come back as their ``str()``; ``answer_type`` names the
    original Python type. ``artifacts`` holds the run's final artifacts;
    per-step artifacts are on each :class:`StepRecord`.
    """

    id: str
    task: str
    model: str | None
    backend: str | None
    tools: list[str]
    files: list[str]
    status: str
    answer: Any
    answer_type: str | None
    error: str | None
    started: float | None
    finished: float | None
    duration: float | None
    usage: Usage
    steps: list[StepRecord] = field(default_factory=list)
    artifacts: list[ArtifactRecord] = field(default_factory=list)
    errors: list[ErrorRecord] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "success"

    @property
    def step_count(self) -> int:
        return len(self.steps)


# --------------------------------------------------------------------------- JSON


def jsonable(obj: Any, *, inline_bytes: int = _INLINE_BYTES) -> Any:
    """Convert any Python value into something :func:`json.dumps` accepts. Never raises.

    Dataclasses and mappings become dicts (keys as strings), sequences and
    sets become lists, bytes become ``{"type": "bytes", "size": n, "base64": ...}``
    (the data is left out above ``inline_bytes``), NaN/infinity become
    strings, numpy scalars/arrays and pydantic models are unwrapped, and
    anything else is stored as its ``str()`` (capped), so logging a run never
    fails because of what it answered.
    """
    return _jsonable(obj, inline_bytes, set(), 0)


def _jsonable(obj: Any, inline_bytes: int, seen: set[int], depth: int) -> Any:
    try:
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, int):
            return int(obj)  # int subclasses (IntEnum...) as plain ints
        if isinstance(obj, float):
            return float(obj) if math.isfinite(obj) else str(obj)
        if depth > _MAX_DEPTH:
            return "<too deeply nested>"
        if isinstance(obj, (bytes, bytearray, memoryview)):
            data = bytes(obj)
            out: dict[str, Any] = {"type": "bytes", "size": len(data)}
            if len(data) <= inline_bytes:
                out["base64"] = base64.b64encode(data).decode("ascii")
            else:
                out["note"] = "bytes not stored"
            return out
        if isinstance(obj, enum.Enum):
            return _jsonable(obj.value, inline_bytes, seen, depth + 1)
        if isinstance(obj, PurePath):
            return str(obj)
        if isinstance(obj, (_dt.datetime, _dt.date, _dt.time)):
            return obj.isoformat()
        if isinstance(obj, BaseException):
            return f"{type(obj).__name__}: {obj}"
        # Containers: guard against cycles (a list that contains itself).
        if id(obj) in seen:
            return "<cycle>"
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            seen.add(id(obj))
            try:
                return {
                    f.name: _jsonable(getattr(obj, f.name, None), inline_bytes, seen, depth + 1)
                    for f in dataclasses.fields(obj)
                }
            finally:
                seen.discard(id(obj))
        if isinstance(obj, Mapping):
            seen.add(id(obj))
            try:
                return {
                    (k if isinstance(k, str) else _key(k)): _jsonable(v, inline_bytes, seen, depth + 1)
                    for k, v in obj.items()
                }
            finally:
                seen.discard(id(obj))
        if isinstance(obj, (list, tuple, set, frozenset)):
            seen.add(id(obj))
            try:
                return [_jsonable(v, inline_bytes, seen, depth + 1) for v in obj]
            finally:
                seen.discard(id(obj))
        module = type(obj).__module__ or ""
        if module.startswith("numpy"):
            # numpy scalars -> Python scalars; small arrays -> lists; big ones via str (summarised).
            if getattr(obj, "shape", None) == () and hasattr(obj, "item"):
                return _jsonable(obj.item(), inline_bytes, seen, depth + 1)
            if hasattr(obj, "tolist") and getattr(obj, "size", _MAX_REPR + 1) <= 10_000:
                return _jsonable(obj.tolist(), inline_bytes, seen, depth + 1)
        if hasattr(obj, "model_dump") and callable(obj.model_dump):  # pydantic v2
            return _jsonable(obj.model_dump(), inline_bytes, seen, depth + 1)
    except Exception:  # noqa: BLE001 - a weird object must not stop the log
        pass
    return _as_text(obj)


def _key(key: Any) -> str:
    return key if isinstance(key, str) else _as_text(key)


def _as_text(obj: Any) -> str:
    """``str(obj)`` (then ``repr``), capped; a placeholder if both raise."""
    for render in (str, repr):
        try:
            text = render(obj)
        except Exception:  # noqa: BLE001
            continue
        if isinstance(text, str):
            if len(text) > _MAX_REPR:
                text = text[:_MAX_REPR] + f"... [{len(text) - _MAX_REPR} characters cut]"
            return text
    return f"<unprintable {type(obj).__name__}>"


def to_json(obj: Any, *, inline_bytes: int = _INLINE_BYTES) -> str:
    """Serialise any value to JSON text via :func:`jsonable`. Never raises."""
    try:
        text = json.dumps(jsonable(obj, inline_bytes=inline_bytes), ensure_ascii=False, allow_nan=False)
    except Exception:  # noqa: BLE001 - last resort: the value as a string
        text = json.dumps(_as_text(obj), ensure_ascii=False)
    return _clean(text)


def _clean(text: str | None) -> str | None:
    """Make text storable: lone surrogates (from undecodable bytes) cannot be UTF-8 encoded."""
    if text is None:
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _loads(text: str | None, default: Any = None) -> Any:
    if text is None:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return text  # written by something else; hand back the raw text


def _type_name(obj: Any) -> str:
    cls = type(obj)
    module = cls.__module__
    if module in ("builtins", None):
        return cls.__qualname__
    return f"{module.split('.')[0]}.{cls.__qualname__}"


# --------------------------------------------------------------------------- schema

# One entry per version: _MIGRATIONS[i] upgrades a database from version i to
# i + 1. Each is a tuple of single statements (not a script) because
# executescript() would commit the surrounding transaction.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
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
)
assert len(_MIGRATIONS) == SCHEMA_VERSION


def _process_start(pid: int) -> str:
    """A process's start time in clock ticks ('' when it is gone): tells a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def default_db_path() -> Path:
    """Where the run log lives: ``$CODEACT_DB`` or ``<user data dir>/codeact/runs.db``."""
    env = os.environ.get(DB_ENV_VAR, "").strip()
    if env:
        return Path(env).expanduser()
    import platformdirs  # imported here: only needed when no path is given

    return Path(platformdirs.user_data_dir("codeact")) / "runs.db"


def _is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


# --------------------------------------------------------------------------- the log


class RunLog:
    """A SQLite database of runs. Thread-safe; several processes may share the file.

    Args:
        path: The database file. Defaults to :func:`default_db_path`
            (``$CODEACT_DB`` or the user data directory). Parent directories
            are created. ``":memory:"`` gives a private in-memory log.

    Raises:
        RunLogError: The file cannot be opened or was written by a newer codeact.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        if path is None:
            path = default_db_path()
        self.path: Path | str = path if str(path) == ":memory:" else Path(path).expanduser()
        # One connection guarded by a lock: SQLite serialises writers anyway,
        # and a single connection keeps per-thread bookkeeping out of the way.
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._closed = False
        with self._lock:
            self._connect()
        try:
            self.mark_interrupted()
        except RunLogError:
            pass  # a read-only or busy log still reads

    # -- connection management -------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if isinstance(self.path, Path):
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise RunLogError(
                    f"Cannot create the directory for the run log {self.path}: {exc}. "
                    f"Set {DB_ENV_VAR} to a writable location."
                ) from exc
        try:
            conn = sqlite3.connect(
                str(self.path),
                timeout=BUSY_TIMEOUT,
                isolation_level=None,  # autocommit: we open transactions explicitly
                check_same_thread=False,  # guarded by self._lock
            )
        except sqlite3.Error as exc:
            raise RunLogError(f"Cannot open the run log {self.path}: {exc}. Set {DB_ENV_VAR} to a writable file.") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            # WAL: readers never block writers, and commits are cheap. Switching
            # modes needs a lock, so retry if another process is doing the same.
            self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
            # NORMAL is crash-safe in WAL mode (may lose the last commits on power loss).
            conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise RunLogError(f"Cannot initialise the run log {self.path}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._pid = os.getpid()
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            raise RunLogError(
                f"The run log {self.path} has schema version {version}, newer than this codeact "
                f"understands ({SCHEMA_VERSION}). Upgrade codeact or set {DB_ENV_VAR} to another file."
            )

        def upgrade() -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                # Re-read inside the write lock: another process may have migrated meanwhile.
                current = conn.execute("PRAGMA user_version").fetchone()[0]
                for step in range(current, SCHEMA_VERSION):
                    for statement in _MIGRATIONS[step]:
                        conn.execute(statement)
                if current < SCHEMA_VERSION:
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

        self._retry(upgrade)

    @staticmethod
    def _retry(fn: Callable[[], Any], attempts: int = 5) -> Any:
        # busy_timeout covers almost every contention case; this covers the
        # few SQLite reports as SQLITE_BUSY without calling the busy handler
        # (e.g. WAL recovery, journal-mode switches).
        for attempt in range(attempts):
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or attempt == attempts - 1:
                    raise
                time.sleep(0.05 * 2**attempt)
        return None  # unreachable

    def _connection(self) -> sqlite3.Connection:
        if self._closed:
            raise RunLogError(f"The run log {self.path} is closed.")
        if self._conn is None or self._pid != os.getpid():
            # A SQLite connection must not cross fork(); a child opens its own.
            self._conn = None
            return self._connect()
        return self._conn

    def _write(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``fn`` in one short write transaction (taken with BEGIN IMMEDIATE).

        IMMEDIATE takes the write lock up front: a deferred transaction that
        reads and then writes can fail with "database is locked" at once,
        without waiting, when another connection wrote in between.
        """
        with self._lock:
            conn = self._connection()

            def attempt() -> Any:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = fn(conn)
                    conn.execute("COMMIT")
                    return result
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise

            try:
                return self._retry(attempt)
            except sqlite3.Error as exc:
                raise RunLogError(f"Cannot write to the run log {self.path}: {exc}") from exc

    def _read(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``fn`` in one read transaction: a consistent snapshot, never blocked in WAL mode."""
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN")
                try:
                    return fn(conn)
                finally:
                    if conn.in_transaction:
                        conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise RunLogError(f"Cannot read the run log {self.path}: {exc}") from exc

    @property
    def journal_mode(self) -> str:
        """SQLite's journal mode for this database ("wal" unless the filesystem cannot do WAL)."""
        with self._lock:
            return str(self._connection().execute("PRAGMA journal_mode").fetchone()[0])

    def close(self) -> None:
        """Close the database connection. Further calls raise :class:`RunLogError`."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None and self._pid == os.getpid():
                conn.close()

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunLog({str(self.path)!r})"

    # -- recording -----------------------------------------------------------------

    def record(self, event: Event) -> None:
        """Store one event of a run, as it happens.

        ``RunStarted`` creates the run (status "running"); ``ModelOutput``,
        ``CodeAction``, ``ToolCall`` and ``Observation`` fill in their step;
        ``FinalAnswer`` sets the answer and status; ``ErrorEvent`` is
        appended (and marks its step, or the run when fatal); ``RunFinished``
        finalises the run from its :class:`RunResult`. ``TextDelta`` is
        ignored. Every stored event is also appended to the raw ``events``
        table. Values that are not JSON (any answer, tool result) are
        converted with :func:`jsonable`, so this never fails because of them.

        Raises:
            RunLogError: The database cannot be written (disk full, locked for
                longer than the busy timeout, closed log).
        """
        if isinstance(event, TextDelta):
            return
        if isinstance(event, CodeOutput):
            self._write(lambda conn: self._record_output(conn, event))
            return
        self._write(lambda conn: self._record(conn, event))

    def _record_output(self, conn: sqlite3.Connection, event: CodeOutput) -> None:
        """Keep a step's live output (capped) until its observation: what survives if the process dies."""
        conn.execute("INSERT OR IGNORE INTO runs (id, status, started) VALUES (?, 'running', ?)",
                     (event.run_id, event.time))
        self._ensure_step(conn, event.run_id, event.step, event.time)
        text = event.text if event.stream == "stdout" else f"[stderr] {event.text}"
        conn.execute(
            """UPDATE steps SET partial_output = substr(COALESCE(partial_output, '') || ?, 1, ?)
               WHERE run_id = ? AND step = ? AND length(COALESCE(partial_output, '')) < ?""",
            (_clean(text), PARTIAL_OUTPUT_LIMIT, event.run_id, event.step, PARTIAL_OUTPUT_LIMIT),
        )

    def mark_interrupted(self) -> list[str]:
        """Mark runs whose process died mid-run (on this host) as ``interrupted``; returns their ids.

        Their last step keeps the output it had produced so far as its
        observation. Called when a log is opened, so the next ``codeact``
        start tidies up after a killed one.
        """
        host = socket.gethostname()

        def mark(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "SELECT id, owner_pid, owner_start FROM runs WHERE status = 'running' AND owner_host = ?",
                (host,),
            ).fetchall()
            dead = [r[0] for r in rows if r[1] and _process_start(int(r[1])) != (r[2] or "")]
            for run_id in dead:
                conn.execute(
                    """UPDATE runs SET status = 'interrupted', error = COALESCE(error, ?) WHERE id = ?""",
                    ("the process running this run ended before the run finished (killed, or the machine "
                     "stopped)", run_id),
                )
                conn.execute(
                    """UPDATE steps SET observation = COALESCE(partial_output, '') ||
                         '\n[the run was interrupted here: its process ended]'
                       WHERE run_id = ? AND observation IS NULL AND code IS NOT NULL""",
                    (run_id,),
                )
            return dead

        with self._lock:
            conn = self._connection()
            running = conn.execute("SELECT COUNT(*) FROM runs WHERE status = 'running'").fetchone()[0]
        if not running:
            return []
        return self._write(mark)

    def tee(self, events: Iterable[Event]) -> Iterator[Event]:
        """Record each event of ``events`` and pass it on: ``for ev in log.tee(agent.run(task))``."""
        for event in events:
            self.record(event)
            yield event

    def _record(self, conn: sqlite3.Connection, event: Event) -> None:
        run_id = event.run_id
        if isinstance(event, RunStarted):
            conn.execute(
                """INSERT INTO runs (id, task, model, backend, tools, files, status, started,
                                     owner_host, owner_pid, owner_start)
                   VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?)
                   ON CONFLICT (id) DO UPDATE SET task = excluded.task, model = excluded.model,
                     backend = excluded.backend, tools = excluded.tools, files = excluded.files,
                     started = COALESCE(runs.started, excluded.started), owner_host = excluded.owner_host,
                     owner_pid = excluded.owner_pid, owner_start = excluded.owner_start""",
                (
                    run_id,
                    _clean(event.task),
                    _clean(event.model),
                    _clean(event.backend),
                    to_json(list(event.tools)),
                    to_json([str(f) for f in event.files]),
                    event.time,
                    socket.gethostname(),
                    os.getpid(),
                    _process_start(os.getpid()),
                ),
            )
        else:
            # Events may arrive for a run whose start was not recorded (a log
            # attached mid-run); keep them rather than break on the foreign key.
            conn.execute(
                "INSERT OR IGNORE INTO runs (id, status, started) VALUES (?, 'running', ?)",
                (run_id, event.time),
            )

        if isinstance(event, ModelOutput):
            self._ensure_step(conn, run_id, event.step, event.time - max(event.duration, 0.0))
            u = event.usage
            # A step normally has one model output; if it has several (a
            # retry after a parse error), keep the last text and add up the cost.
            conn.execute(
                """UPDATE steps SET model_output = ?, input_messages = ?, input_chars = ?,
                     model_time = model_time + ?, input_tokens = input_tokens + ?,
                     output_tokens = output_tokens + ?, requests = requests + ?
                   WHERE run_id = ? AND step = ?""",
                (
                    _clean(event.text),
                    event.input_messages,
                    event.input_chars,
                    event.duration,
                    u.input_tokens,
                    u.output_tokens,
                    u.requests,
                    run_id,
                    event.step,
                ),
            )
            conn.execute(
                """UPDATE runs SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ?,
                     requests = requests + ? WHERE id = ?""",
                (u.input_tokens, u.output_tokens, u.requests, run_id),
            )
        elif isinstance(event, CodeAction):
            self._ensure_step(conn, run_id, event.step, event.time)
            conn.execute(
                "UPDATE steps SET code = ? WHERE run_id = ? AND step = ?",
                (_clean(event.code), run_id, event.step),
            )
        elif isinstance(event, ToolCall):
            self._ensure_step(conn, run_id, event.step, event.time)
            self._insert_tool_call(conn, run_id, event.step, event)
        elif isinstance(event, Observation):
            self._ensure_step(conn, run_id, event.step, event.time)
            conn.execute(
                """UPDATE steps SET observation = ?, stdout = ?, stderr = ?, error = ?,
                     truncated = ?, sandbox_time = sandbox_time + ?
                   WHERE run_id = ? AND step = ?""",
                (
                    _clean(event.text),
                    _clean(event.stdout),
                    _clean(event.stderr),
                    _clean(event.error),
                    int(event.truncated),
                    event.duration,
                    run_id,
                    event.step,
                ),
            )
            for path in event.artifacts:
                self._insert_artifact(conn, run_id, event.step, path)
            if event.images:
                (last,) = conn.execute(
                    "SELECT COALESCE(MAX(seq), 0) FROM images WHERE run_id = ? AND step = ?",
                    (run_id, event.step),
                ).fetchone()
                conn.executemany(
                    "INSERT INTO images (run_id, step, seq, mime, png) VALUES (?, ?, ?, ?, ?)",
                    [
                        (run_id, event.step, last + i, _image_mime(bytes(img)), bytes(img))
                        for i, img in enumerate(event.images, 1)
                    ],
                )
        elif isinstance(event, FinalAnswer):
            conn.execute(
                "UPDATE runs SET answer = ?, answer_type = ?, status = ? WHERE id = ?",
                (to_json(event.answer), _type_name(event.answer), event.status, run_id),
            )
        elif isinstance(event, ErrorEvent):
            if event.step > 0:
                self._ensure_step(conn, run_id, event.step, event.time)
                conn.execute(
                    "UPDATE steps SET error = COALESCE(error, ?) WHERE run_id = ? AND step = ?",
                    (_clean(event.message), run_id, event.step),
                )
            if event.fatal:
                conn.execute(
                    "UPDATE runs SET error = COALESCE(error, ?) WHERE id = ?",
                    (_clean(event.message), run_id),
                )
        elif isinstance(event, RunFinished):
            self._finish(conn, event)

        if event.step > 0:
            # Step duration grows with each event until the step's last one.
            conn.execute(
                """UPDATE steps SET duration = MAX(duration, ? - started)
                   WHERE run_id = ? AND step = ? AND started IS NOT NULL""",
                (event.time, run_id, event.step),
            )
        self._append_event(conn, event)

    @staticmethod
    def _ensure_step(conn: sqlite3.Connection, run_id: str, step: int, started: float) -> None:
        conn.execute(
            "INSERT OR IGNORE INTO steps (run_id, step, started) VALUES (?, ?, ?)",
            (run_id, step, started),
        )
        conn.execute("UPDATE runs SET steps = MAX(steps, ?) WHERE id = ?", (step, run_id))

    @staticmethod
    def _insert_tool_call(conn: sqlite3.Connection, run_id: str, step: int, call: ToolCall) -> None:
        conn.execute(
            """INSERT INTO tool_calls (run_id, step, name, arguments, result, error, duration, time)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
            (
                run_id,
                step,
                _clean(call.name),
                to_json(call.arguments),
                to_json(call.result),
                _clean(call.error),
                call.duration,
                call.time,
            ),
        )

    @staticmethod
    def _insert_artifact(conn: sqlite3.Connection, run_id: str, step: int, path: str | os.PathLike[str]) -> None:
        text = os.fspath(path)
        size: int | None = None
        if os.path.isabs(text):  # a file the agent wrote; relative names come from the sandbox: never stat them
            try:
                size = os.lstat(text).st_size
            except (OSError, ValueError):
                pass
        conn.execute(
            "INSERT OR IGNORE INTO artifacts (run_id, step, path, mime, size) VALUES (?, ?, ?, ?, ?)",
            (run_id, step, _clean(text), mimetypes.guess_type(text)[0], size),
        )

    def _finish(self, conn: sqlite3.Connection, event: RunFinished) -> None:
        result: RunResult = event.result
        run_id = event.run_id
        row = conn.execute(
            "SELECT started, requests, input_tokens, output_tokens, task FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
        started, requests, in_tok, out_tok, task = row
        u = result.usage
        if u.requests or u.total_tokens:  # the result's totals are authoritative when present
            requests, in_tok, out_tok = u.requests, u.input_tokens, u.output_tokens
        duration = result.duration or (event.time - started if started is not None else None)
        conn.execute(
            """UPDATE runs SET status = ?, error = COALESCE(?, error), finished = ?, duration = ?,
                 requests = ?, input_tokens = ?, output_tokens = ?, task = ?,
                 steps = MAX(steps, ?) WHERE id = ?""",
            (
                result.status,
                _clean(result.error),
                event.time,
                duration,
                requests,
                in_tok,
                out_tok,
                task or _clean(result.task) or "",
                len(result.steps),
                run_id,
            ),
        )
        if result.answer is not None:
            conn.execute(
                "UPDATE runs SET answer = ?, answer_type = ? WHERE id = ?",
                (to_json(result.answer), _type_name(result.answer), run_id),
            )
        # Fill in steps the event stream did not deliver (a log attached late),
        # never overwriting what was recorded as it happened.
        for step in result.steps:
            conn.execute(
                "INSERT OR IGNORE INTO steps (run_id, step, started) VALUES (?, ?, NULL)",
                (run_id, step.index),
            )
            conn.execute(
                """UPDATE steps SET model_output = COALESCE(model_output, ?), code = COALESCE(code, ?),
                     observation = COALESCE(observation, ?), error = COALESCE(error, ?),
                     model_time = CASE WHEN model_time = 0 THEN ? ELSE model_time END,
                     sandbox_time = CASE WHEN sandbox_time = 0 THEN ? ELSE sandbox_time END,
                     duration = CASE WHEN ? > 0 THEN ? ELSE duration END,
                     input_tokens = CASE WHEN requests = 0 THEN ? ELSE input_tokens END,
                     output_tokens = CASE WHEN requests = 0 THEN ? ELSE output_tokens END,
                     requests = CASE WHEN requests = 0 THEN ? ELSE requests END
                   WHERE run_id = ? AND step = ?""",
                (
                    _clean(step.model_output),
                    _clean(step.code),
                    _clean(step.observation),
                    _clean(step.error),
                    step.model_time,
                    step.sandbox_time,
                    step.duration,
                    step.duration,
                    step.usage.input_tokens,
                    step.usage.output_tokens,
                    step.usage.requests,
                    run_id,
                    step.index,
                ),
            )
            if step.tool_calls:
                (have,) = conn.execute(
                    "SELECT COUNT(*) FROM tool_calls WHERE run_id = ? AND step = ?", (run_id, step.index)
                ).fetchone()
                if not have:
                    for call in step.tool_calls:
                        self._insert_tool_call(conn, run_id, step.index, call)
        for path in result.artifacts:
            self._insert_artifact(conn, run_id, 0, path)

    @staticmethod
    def _append_event(conn: sqlite3.Connection, event: Event) -> None:
        (last,) = conn.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?", (event.run_id,)
        ).fetchone()
        conn.execute(
            "INSERT INTO events (run_id, seq, type, step, time, payload) VALUES (?, ?, ?, ?, ?, ?)",
            (event.run_id, last + 1, type(event).__name__, event.step, event.time, to_json(_event_payload(event), inline_bytes=0)),
        )

    # -- reading -------------------------------------------------------------------

    def list_runs(self, limit: int | None = 20, status: str | None = None) -> list[RunSummary]:
        """The most recent runs, newest first.

        Args:
            limit: At most this many runs (``None`` for all).
            status: Only runs with this status ("running", "success", "error", ...).
        """
        sql = """SELECT id, task, model, backend, status, started, finished, duration, steps,
                        input_tokens, output_tokens, requests, error FROM runs"""
        params: list[Any] = []
        if status is not None:
            sql += " WHERE status = ?"
            params.append(status)
        sql += " ORDER BY started DESC, rowid DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(int(limit), 0))
        rows = self._read(lambda conn: conn.execute(sql, params).fetchall())
        return [
            RunSummary(
                id=r[0],
                task=r[1] or "",
                model=r[2],
                backend=r[3],
                status=r[4],
                started=r[5],
                finished=r[6],
                duration=r[7],
                step_count=r[8] or 0,
                usage=Usage(r[9] or 0, r[10] or 0, r[11] or 0),
                error=r[12],
            )
            for r in rows
        ]

    def resolve(self, run_id_or_prefix: str) -> str:
        """The full id of the run that ``run_id_or_prefix`` names (an id or a unique prefix).

        Raises:
            RunNotFound: No run matches (the message lists the closest ids).
            AmbiguousRunId: The prefix matches several runs (the message lists them).
        """
        return self._read(lambda conn: self._resolve(conn, run_id_or_prefix))

    @staticmethod
    def _resolve(conn: sqlite3.Connection, key: str) -> str:
        key = str(key).strip()
        if not key:
            raise RunNotFound("No run id given. List runs with `codeact logs` to find one.")
        if conn.execute("SELECT 1 FROM runs WHERE id = ?", (key,)).fetchone():
            return key
        # substr() rather than LIKE: LIKE is case-insensitive and treats % and _ as wildcards.
        matches = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM runs WHERE substr(id, 1, ?) = ? ORDER BY started DESC LIMIT 11",
                (len(key), key),
            )
        ]
        if len(matches) == 1:
            return matches[0]
        if matches:
            shown = ", ".join(matches[:10]) + (", ..." if len(matches) > 10 else "")
            raise AmbiguousRunId(
                f"Run id prefix {key!r} is ambiguous: it matches {shown}. Give more characters.",
                matches[:10],
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

    def get_run(self, run_id: str) -> RunRecord:
        """A whole run by its id or a unique prefix of it.

        Raises:
            RunNotFound: No run matches (the message lists the closest ids).
            AmbiguousRunId: The prefix matches several runs.
        """
        return self._read(lambda conn: self._get_run(conn, run_id))

    def last_run(self) -> RunRecord | None:
        """The most recently started run, or ``None`` when the log is empty."""

        def read(conn: sqlite3.Connection) -> RunRecord | None:
            row = conn.execute("SELECT id FROM runs ORDER BY started DESC, rowid DESC LIMIT 1").fetchone()
            return self._get_run(conn, row[0]) if row else None

        return self._read(read)

    def _get_run(self, conn: sqlite3.Connection, key: str) -> RunRecord:
        run_id = self._resolve(conn, key)
        r = conn.execute(
            """SELECT id, task, model, backend, tools, files, status, answer, answer_type, error,
                      started, finished, duration, input_tokens, output_tokens, requests
               FROM runs WHERE id = ?""",
            (run_id,),
        ).fetchone()

        calls: dict[int, list[ToolCallRecord]] = {}
        for c in conn.execute(
            "SELECT step, name, arguments, result, error, duration, time FROM tool_calls WHERE run_id = ? ORDER BY id",
            (run_id,),
        ):
            calls.setdefault(c[0], []).append(
                ToolCallRecord(
                    step=c[0], name=c[1], arguments=_loads(c[2]), result=_loads(c[3]), error=c[4],
                    duration=c[5] or 0.0, time=c[6],
                )
            )
        artifacts: dict[int, list[ArtifactRecord]] = {}
        for a in conn.execute(
            "SELECT step, path, mime, size FROM artifacts WHERE run_id = ? ORDER BY id", (run_id,)
        ):
            artifacts.setdefault(a[0], []).append(ArtifactRecord(step=a[0], path=a[1], mime=a[2], size=a[3]))
        images: dict[int, list[bytes]] = {}
        for i in conn.execute("SELECT step, png FROM images WHERE run_id = ? ORDER BY step, seq", (run_id,)):
            images.setdefault(i[0], []).append(bytes(i[1]))
        errors = [
            ErrorRecord(
                step=e[0],
                message=str(p.get("message", "")),
                kind=str(p.get("kind", "error")),
                fatal=bool(p.get("fatal", False)),
                time=e[1],
            )
            for e in conn.execute(
                "SELECT step, time, payload FROM events WHERE run_id = ? AND type = 'ErrorEvent' ORDER BY seq",
                (run_id,),
            )
            if isinstance(p := _loads(e[2], {}), dict)
        ]
        steps = [
            StepRecord(
                step=s[0],
                model_output=s[1] or "",
                input_messages=s[2] or 0,
                input_chars=s[3] or 0,
                model_time=s[4] or 0.0,
                code=s[5],
                observation=s[6],
                stdout=s[7] or "",
                stderr=s[8] or "",
                error=s[9],
                sandbox_time=s[10] or 0.0,
                truncated=bool(s[11]),
                usage=Usage(s[12] or 0, s[13] or 0, s[14] or 0),
                started=s[15],
                duration=s[16] or 0.0,
                tool_calls=calls.get(s[0], []),
                artifacts=artifacts.get(s[0], []),
                images=images.get(s[0], []),
            )
            for s in conn.execute(
                """SELECT step, model_output, input_messages, input_chars, model_time, code, observation,
                          stdout, stderr, error, sandbox_time, truncated, input_tokens, output_tokens,
                          requests, started, duration
                   FROM steps WHERE run_id = ? ORDER BY step""",
                (run_id,),
            )
        ]
        return RunRecord(
            id=r[0],
            task=r[1] or "",
            model=r[2],
            backend=r[3],
            tools=_loads(r[4], []) or [],
            files=_loads(r[5], []) or [],
            status=r[6],
            answer=_loads(r[7]),
            answer_type=r[8],
            error=r[9],
            started=r[10],
            finished=r[11],
            duration=r[12],
            usage=Usage(r[13] or 0, r[14] or 0, r[15] or 0),
            steps=steps,
            artifacts=artifacts.get(0, []),
            errors=errors,
        )

    def get_events(self, run_id: str) -> list[dict[str, Any]]:
        """The raw event log of a run (id or unique prefix), in arrival order.

        Each item is ``{"seq", "type", "step", "time", "payload"}`` with the
        payload JSON-decoded.
        """

        def read(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            rid = self._resolve(conn, run_id)
            return [
                {"seq": e[0], "type": e[1], "step": e[2], "time": e[3], "payload": _loads(e[4], {})}
                for e in conn.execute(
                    "SELECT seq, type, step, time, payload FROM events WHERE run_id = ? ORDER BY seq", (rid,)
                )
            ]

        return self._read(read)

    def delete_run(self, run_id: str) -> str:
        """Delete a run (id or unique prefix) and everything recorded for it; returns the full id.

        Raises:
            RunNotFound: No run matches, or the prefix is ambiguous.
        """

        def delete(conn: sqlite3.Connection) -> str:
            rid = self._resolve(conn, run_id)
            conn.execute("DELETE FROM runs WHERE id = ?", (rid,))  # children go by ON DELETE CASCADE
            return rid

        return self._write(delete)

    # -- export conveniences -------------------------------------------------------

    def export(
        self,
        run_id: str,
        dest: str | os.PathLike[str] | IO[str],
        format: Literal["jsonl", "ipynb"] | None = None,
    ) -> None:
        """Export a run to JSONL or a Jupyter notebook (see :mod:`codeact.export`).

        ``format`` defaults to "ipynb" when ``dest`` is a path ending in
        ``.ipynb`` and to "jsonl" otherwise; a text stream is always JSONL.
        """
        from . import export as _export

        record = self.get_run(run_id)
        if hasattr(dest, "write"):
            if format == "ipynb":
                raise RunLogError("Notebook export needs a file path, not a stream.")
            _export.export_jsonl(record, dest)  # type: ignore[arg-type]
            return
        path = Path(os.fspath(dest))  # type: ignore[arg-type]
        fmt = format or ("ipynb" if path.suffix.lower() == ".ipynb" else "jsonl")
        if fmt == "ipynb":
            _export.export_notebook(record, path)
        elif fmt == "jsonl":
            with path.open("w", encoding="utf-8") as fp:
                _export.export_jsonl(record, fp)
        else:
            raise RunLogError(f"Unknown export format {fmt!r}: use 'jsonl' or 'ipynb'.")


# --------------------------------------------------------------------------- helpers


def _image_mime(data: bytes) -> str:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    return "image/png"  # the sandbox only reports PNGs; assume so


def _event_payload(event: Event) -> dict[str, Any]:
    """The event's own fields for the raw log (run_id, step and time are columns)."""
    skip = {"run_id", "step", "time"}
    payload: dict[str, Any] = {}
    for f in dataclasses.fields(event):
        if f.name in skip:
            continue
        value = getattr(event, f.name)
        if isinstance(event, Observation) and f.name == "images":
            # The bytes are in the images table; note their sizes only.
            value = [{"type": "bytes", "size": len(img), "stored": "images"} for img in value]
        elif isinstance(event, RunFinished) and f.name == "result":
            # Steps are in the steps table; keep the outcome only.
            value = {
                "status": value.status,
                "answer": value.answer,
                "error": value.error,
                "duration": value.duration,
                "usage": value.usage,
                "steps": len(value.steps),
                "artifacts": [str(p) for p in value.artifacts],
            }
        elif f.name == "answer":
            value = {"value": value, "type": _type_name(value)}
        payload[f.name] = value
    return payload
