"""The run log: every run, step, tool call and image, recorded in SQLite.

In the spirit of Simon Willison's ``llm`` (which logs every prompt), each
event an agent yields can be handed to :meth:`RunLog.record`; the run is
stored incrementally, so a crashed or cancelled run still leaves everything
up to the crash (and the next start marks it ``interrupted``). Runs are read
back with :meth:`RunLog.list_runs`, :meth:`RunLog.get_run`,
:meth:`RunLog.last_run` and :meth:`RunLog.get_events`, and exported with
:mod:`codeact.export` (JSONL, Jupyter notebook), which only reads.

Example::

    with RunLog() as log:
        for event in log.tee(agent.stream("How many rows in data.csv?", files=["data.csv"])):
            ...
        print(log.list_runs(limit=5))

The database lives at ``$CODEACT_DB`` or, when unset,
``platformdirs.user_data_dir("codeact")/runs.db``. It uses WAL journaling,
a busy timeout and short ``BEGIN IMMEDIATE`` transactions, so several threads
and several processes can record runs into the same file at once.

Every run records which agent produced it (``codeact``, ``react-fc``,
``react-json``, ``react-text``), the name and version of its system prompt,
and, for benchmark runs, the episode it was (:meth:`RunLog.link_episode`).
Values a run produced (answers, tool arguments and results) are stored
through the sandbox's one codec, as :func:`codeact.values.preview` trees.

Saved chat sessions (:mod:`codeact.sessions`) are rows of their own:
:meth:`RunLog.save_snapshot`, :meth:`RunLog.list_snapshots`,
:meth:`RunLog.find_snapshot`, :meth:`RunLog.delete_snapshot`.

Modules: :mod:`._schema` (tables and migrations, schema version
:data:`SCHEMA_VERSION`), :mod:`._db` (the connection and its transactions),
:mod:`._recorder` (one handler per event type), :mod:`._queries` (reads),
:mod:`._records` (what reads return), :mod:`._json` (serialising records),
:mod:`._snapshots` (saved sessions).
"""

from __future__ import annotations

from ..errors import AmbiguousRunId, RunLogError, RunNotFound
from ._db import BUSY_TIMEOUT, DB_ENV_VAR, default_db_path
from ._json import jsonable, to_json
from ._log import RunLog
from ._recorder import PARTIAL_OUTPUT_LIMIT
from ._records import (ArtifactRecord, ErrorRecord, RunRecord, RunSummary, SnapshotRecord, StepRecord,
                       ToolCallRecord)
from ._schema import SCHEMA_VERSION

__all__ = [
    "BUSY_TIMEOUT",
    "DB_ENV_VAR",
    "PARTIAL_OUTPUT_LIMIT",
    "SCHEMA_VERSION",
    "AmbiguousRunId",
    "ArtifactRecord",
    "ErrorRecord",
    "RunLog",
    "RunLogError",
    "RunNotFound",
    "RunRecord",
    "RunSummary",
    "SnapshotRecord",
    "StepRecord",
    "ToolCallRecord",
    "default_db_path",
    "jsonable",
    "to_json",
]
