"""The run log's SQLite connection: WAL, a busy timeout, short ``BEGIN IMMEDIATE`` write transactions.

One connection per :class:`Database`, guarded by a lock (SQLite serialises
writers anyway); a forked child opens its own. Several threads and several
processes can write the same file at once.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import RunLogError
from ._schema import SCHEMA_VERSION, migrate, schema_version

#: Environment variable that overrides the database location.
DB_ENV_VAR = "CODEACT_DB"

#: Seconds a writer waits for another writer's lock before giving up.
BUSY_TIMEOUT = 10.0


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


def retry(fn: Callable[[], Any], attempts: int = 5) -> Any:
    """Call ``fn``, retrying briefly when SQLite reports the database busy.

    busy_timeout covers almost every contention case; this covers the few
    SQLite reports as SQLITE_BUSY without calling the busy handler (WAL
    recovery, journal-mode switches).
    """
    for attempt in range(attempts):
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or attempt == attempts - 1:
                raise
            time.sleep(0.05 * 2**attempt)
    return None  # unreachable


class Database:
    """One SQLite file (or ``":memory:"``), migrated to the current schema when opened.

    Raises:
        RunLogError: The file cannot be opened or was written by a newer codeact.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = path
        self.lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self.closed = False
        with self.lock:
            self._connect()

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
                check_same_thread=False,  # guarded by self.lock
            )
        except sqlite3.Error as exc:
            raise RunLogError(
                f"Cannot open the run log {self.path}: {exc}. Set {DB_ENV_VAR} to a writable file."
            ) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            # WAL: readers never block writers, and commits are cheap. Switching
            # modes needs a lock, so retry if another process is doing the same.
            retry(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
            # NORMAL is crash-safe in WAL mode (may lose the last commits on power loss).
            conn.execute("PRAGMA synchronous = NORMAL")
            version = schema_version(conn)
            if version > SCHEMA_VERSION:
                raise RunLogError(
                    f"The run log {self.path} has schema version {version}, newer than this codeact "
                    f"understands ({SCHEMA_VERSION}). Upgrade codeact or set {DB_ENV_VAR} to another file."
                )
            migrate(conn, retry)
        except sqlite3.Error as exc:
            conn.close()
            raise RunLogError(f"Cannot initialise the run log {self.path}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._pid = os.getpid()
        return conn

    def connection(self) -> sqlite3.Connection:
        """The open connection (reopened in a forked child); the caller holds :attr:`lock`."""
        if self.closed:
            raise RunLogError(f"The run log {self.path} is closed.")
        if self._conn is None or self._pid != os.getpid():
            # A SQLite connection must not cross fork(); a child opens its own.
            self._conn = None
            return self._connect()
        return self._conn

    def write(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``fn`` in one short write transaction (taken with BEGIN IMMEDIATE).

        IMMEDIATE takes the write lock up front: a deferred transaction that
        reads and then writes can fail with "database is locked" at once,
        without waiting, when another connection wrote in between.
        """
        with self.lock:
            conn = self.connection()

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
                return retry(attempt)
            except sqlite3.Error as exc:
                raise RunLogError(f"Cannot write to the run log {self.path}: {exc}") from exc

    def read(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``fn`` in one read transaction: a consistent snapshot, never blocked in WAL mode."""
        with self.lock:
            conn = self.connection()
            try:
                conn.execute("BEGIN")
                try:
                    return fn(conn)
                finally:
                    if conn.in_transaction:
                        conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise RunLogError(f"Cannot read the run log {self.path}: {exc}") from exc

    def close(self) -> None:
        with self.lock:
            self.closed = True
            conn, self._conn = self._conn, None
            if conn is not None and self._pid == os.getpid():
                conn.close()
