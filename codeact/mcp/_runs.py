"""The runs ``run_task`` started in ``codeact mcp serve``, for a client to fetch afterwards.

``run_task`` answers with the run's id; with it a client reads the run
(``get_run``: status, answer, each step's code and observation, the
artifacts), its whole log (the resource ``codeact://runs/{run_id}``, JSON
lines, when the server keeps a run log) and each artifact
(``codeact://runs/{run_id}/artifacts/{name}``).

Only runs this server process started are served: the run log is the host
user's, shared with ``codeact run`` and ``chat``, and an MCP client must not
read those. The server remembers its last :data:`MAX_RUNS` runs.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..errors import CodeActError
from ..observation import truncate_middle

#: Runs a server remembers (their results: steps and artifact paths); older ones are forgotten.
MAX_RUNS = 200
#: Bytes of one artifact a client may read.
MAX_ARTIFACT = 20 * 1024 * 1024


class RunAccessError(CodeActError):
    """A run or artifact this server did not make, forgot, or cannot read; the message says which."""


def run_uri(run_id: str) -> str:
    return f"codeact://runs/{run_id}"


def artifact_uri(run_id: str, name: str) -> str:
    return f"codeact://runs/{run_id}/artifacts/{quote(name, safe='')}"


class ServedRuns:
    """The results of the runs this server started, and the run log they were recorded in."""

    def __init__(self, log_spec: Any, output_limit: int) -> None:
        self._log_spec = log_spec
        self._log: Any = None
        self._opened = False
        self._output_limit = output_limit
        self._results: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def log(self) -> Any:
        """The :class:`~codeact.runlog.RunLog` run_task records into, or None (opened on first use)."""
        with self._lock:
            if not self._opened:
                from ..run import open_log

                self._log, self._opened = open_log(self._log_spec), True
            return self._log

    def add(self, result: Any) -> None:
        """Remember a finished run's :class:`~codeact.events.RunResult`."""
        with self._lock:
            self._results[result.run_id] = result
            while len(self._results) > MAX_RUNS:
                self._results.popitem(last=False)

    def summary(self, result: Any) -> dict[str, Any]:
        """What ``run_task`` answers: the run's id, outcome and where to read more."""
        from ..runlog import jsonable

        return {"run_id": result.run_id, "status": result.status, "answer": jsonable(result.answer),
                "error": result.error, "steps": len(result.steps),
                "artifacts": [_name(result, p) for p in result.artifacts],
                "log": run_uri(result.run_id) if self.log is not None else None}

    def get(self, run_id: str) -> Any:
        """The result of run ``run_id``.

        Raises:
            RunAccessError: this server did not start it (or has forgotten it).
        """
        with self._lock:
            result = self._results.get(str(run_id).strip())
        if result is None:
            raise RunAccessError(f"no run {run_id!r} was started by this server (only the last {MAX_RUNS} runs of "
                                 "run_task since the server started can be read; on the server's host, "
                                 "`codeact logs show <run id>` reads older ones)")
        return result

    def report(self, run_id: str) -> dict[str, Any]:
        """``get_run``'s answer: the summary, the task, each step's code and observation, the artifacts."""
        result = self.get(run_id)
        out = self.summary(result)
        out["task"] = result.task
        out["step_details"] = [
            {"step": s.index, "code": s.code, "observation": truncate_middle(s.observation or "", self._output_limit),
             "error": s.error}
            for s in result.steps]
        out["artifacts"] = [{"name": _name(result, p), "uri": artifact_uri(result.run_id, _name(result, p)),
                             "size": _size(p)} for p in result.artifacts]
        return out

    def jsonl(self, run_id: str) -> str:
        """The run's whole log as JSON lines (``codeact logs export --format jsonl``)."""
        result = self.get(run_id)
        log = self.log
        if log is None:
            raise RunAccessError("this server keeps no run log (it was started with --no-log); get_run "
                                 "still reports the run's steps")
        from ..export import export_jsonl  # only this call needs the exporter

        out = io.StringIO()
        export_jsonl(log.get_run(result.run_id), out)
        return out.getvalue()

    def artifact(self, run_id: str, name: str) -> bytes:
        """The bytes of the artifact called ``name`` (as ``get_run`` lists it) of run ``run_id``.

        Only a file the run reported, found by its exact name, is read: never a path the client makes up.
        """
        result = self.get(run_id)
        for path in result.artifacts:
            if _name(result, path) == name:
                break
        else:
            known = ", ".join(_name(result, p) for p in result.artifacts) or "none"
            raise RunAccessError(f"run {run_id} has no artifact {name!r} (it has: {known})")
        p = Path(path)
        try:
            if p.is_symlink() or not p.is_file():
                raise RunAccessError(f"the artifact {name!r} of run {run_id} is no longer a file on the server")
            if p.stat().st_size > MAX_ARTIFACT:
                raise RunAccessError(f"the artifact {name!r} has {p.stat().st_size:,} bytes; at most "
                                     f"{MAX_ARTIFACT:,} are served")
            return p.read_bytes()
        except OSError as exc:
            raise RunAccessError(f"the artifact {name!r} of run {run_id} cannot be read: {exc}") from None


def _name(result: Any, path: Any) -> str:
    """An artifact's name: its path under the run's output directory (``<root>/<run id>/``), else its file name."""
    p = Path(path)
    parts = p.parts
    if result.run_id in parts:
        rest = parts[len(parts) - parts[::-1].index(result.run_id):]
        if rest:
            return "/".join(rest)
    return p.name


def _size(path: Any) -> int | None:
    try:
        return Path(path).stat().st_size
    except OSError:
        return None
