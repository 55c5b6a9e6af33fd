"""Past runs from the run log, for the page: the list, one run as page events, exports.

A recorded run is replayed through the same :func:`._wire.event_wire` as a
live one (its raw event log holds every event but the streamed pieces), so
History shows a run as it looked when it ran, read-only. Images come from
the log's ``images`` table.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace
import threading
from collections import OrderedDict
from typing import Any

from ..compaction import compacted_from
from ..errors import UIError
from ..events import CodeAction, ErrorEvent, Event, ModelOutput, Observation, RunStarted, ToolCall
from ..messages import Usage
from ..values import restore
from ._wire import answer_wire, event_wire

_REBUILT: dict[str, type[Event]] = {
    "RunStarted": RunStarted, "ModelOutput": ModelOutput, "CodeAction": CodeAction,
    "ToolCall": ToolCall, "Observation": Observation, "ErrorEvent": ErrorEvent,
}
#: Bytes of history images kept for the page at once (oldest dropped first).
BLOB_CACHE_BYTES = 64 * 1024 * 1024


def _object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (a log may hold what another version wrote)."""
    return value if isinstance(value, dict) else {}


class History:
    """Read access to the run log for the page (``log`` None: history is off).

    Example::

        history = History(RunLog())
        history.runs(limit=20)
        history.events("3f2a")      # a run's page events, by id or unique prefix
    """

    def __init__(self, log: Any) -> None:
        self.log = log
        self._blobs: OrderedDict[int, tuple[str, bytes]] = OrderedDict()
        self._blob_bytes = 0
        self._blob_seq = 0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.log is not None

    def _need_log(self) -> Any:
        if self.log is None:
            raise UIError("the run log is off (--no-log): there is no history to show")
        return self.log

    def runs(self, limit: int = 200) -> list[dict[str, Any]]:
        if self.log is None:
            return []
        saved = self._saved_runs()
        return [{"id": r.id, "task": r.task[:300], "model": r.model, "backend": r.backend, "status": r.status,
                 "agent": r.agent, "parent_run_id": r.parent_run_id,
                 "started": r.started, "duration": r.duration, "steps": r.step_count,
                 "input_tokens": r.usage.input_tokens, "output_tokens": r.usage.output_tokens,
                 "resumable": r.id in saved}
                for r in _children_under_parents(self.log.list_runs(limit=limit))]

    def _saved_runs(self, limit: int = 1000) -> set[str]:
        """Runs that belong to a saved session (History offers "Resume" for them)."""
        reader = getattr(self.log, "saved_runs", None)
        return reader(limit) if reader is not None else set()

    # --- one run ----------------------------------------------------------------------------

    def resolve(self, run_id: str) -> str:
        """The full id of a run named by id or unique prefix (``run_id`` itself with no log)."""
        if self.log is None:
            return run_id
        return str(self.log.get_run(run_id).id)

    def store_blob(self, mime: str, data: bytes) -> str:
        with self._lock:
            self._blob_seq += 1
            self._blobs[self._blob_seq] = (mime, data)
            self._blob_bytes += len(data)
            while self._blob_bytes > BLOB_CACHE_BYTES and len(self._blobs) > 1:
                _, (_, old) = self._blobs.popitem(last=False)
                self._blob_bytes -= len(old)
            return f"/api/history/blobs/{self._blob_seq}"

    def blob(self, number: int) -> tuple[str, bytes]:
        with self._lock:
            found = self._blobs.get(number)
        if found is None:
            raise UIError("this image is no longer cached; open the run again")
        return found

    def events(self, run_id: str) -> dict[str, Any]:
        """The run's page events (``{"run": summary, "events": [...]}``)."""
        log = self._need_log()
        record = log.get_run(run_id)
        images = {s.step: list(s.images) for s in record.steps}
        events: list[dict[str, Any]] = []
        for raw in log.get_events(record.id):
            payload = _object(raw.get("payload"))
            wire = self._rebuild(record.id, raw, payload, images)
            if wire is not None:
                wire["seq"] = raw.get("seq", 0)
                events.append(wire)
        return {"run": {"id": record.id, "task": record.task, "status": record.status, "model": record.model,
                        "agent": record.agent, "resumable": record.id in self._saved_runs(),
                        "backend": record.backend, "started": record.started, "steps": record.step_count},
                "events": events}

    def _rebuild(self, run_id: str, raw: dict[str, Any], payload: dict[str, Any],
                 images: dict[int, list[bytes]]) -> dict[str, Any] | None:
        kind, step, when = str(raw.get("type")), int(raw.get("step") or 0), float(raw.get("time") or 0)
        base = {"type": kind, "run_id": run_id, "step": step, "time": when}
        if kind == "FinalAnswer":
            answer = payload.get("answer")
            value = answer.get("value") if isinstance(answer, dict) else answer
            # the log keeps the codec preview: restore it, so a stored DataFrame is a table again
            return {**base, "status": payload.get("status"), "answer": answer_wire(restore(value))}
        if kind == "RunFinished":
            result = _object(payload.get("result"))
            usage = _object(result.get("usage"))
            return {**base, "status": result.get("status"), "error": result.get("error"),
                    "duration": result.get("duration"), "steps": result.get("steps"),
                    "input_tokens": usage.get("input_tokens", 0), "output_tokens": usage.get("output_tokens", 0),
                    "artifacts": [str(a).rsplit("/", 1)[-1] for a in result.get("artifacts") or []]}
        if kind == "Compacted":  # the "earlier turns condensed" line
            compacted = compacted_from(payload, run_id=run_id, step=step)
            return event_wire(replace(compacted, time=when), self.store_blob) if compacted is not None else None
        cls = _REBUILT.get(kind)
        if cls is None:
            return None
        names = {f.name for f in dataclasses.fields(cls)} - {"run_id", "step", "time"}
        fields = {k: v for k, v in payload.items() if k in names}
        if cls is ModelOutput and isinstance(fields.get("usage"), dict):
            u = fields["usage"]
            fields["usage"] = Usage(int(u.get("input_tokens") or 0), int(u.get("output_tokens") or 0),
                                    int(u.get("requests") or 0))
        if cls is Observation:
            pngs = iter(images.get(step, []))
            fields["images"] = []
            fields["outputs"] = [_restore_bundle(b, pngs) for b in fields.get("outputs") or [] if isinstance(b, dict)]
            if not fields["outputs"]:
                fields["images"] = images.get(step, [])
        try:
            event = cls(run_id=run_id, step=step, time=when, **fields)
        except (TypeError, ValueError):  # a payload written by another version
            return {**base, "unknown": True}
        return event_wire(event, self.store_blob)

    # --- exports ----------------------------------------------------------------------------

    def notebook(self, run_id: str) -> tuple[str, bytes]:
        """(file name, .ipynb bytes) of a run."""
        import nbformat

        from ..export import to_notebook

        record = self._need_log().get_run(run_id)
        nb = to_notebook(record)
        return f"codeact-{record.id}.ipynb", nbformat.writes(nb).encode("utf-8")

    def script(self, run_id: str) -> tuple[str, str]:
        """(file name, text): the run's code actions as one Python script, in order."""
        record = self._need_log().get_run(run_id)
        task = " ".join((record.task or "").split())
        lines = [f"# codeact run {record.id}: {task[:200]}", f"# model {record.model}, status {record.status}", ""]
        for step in record.steps:
            if step.code:
                lines += [f"# --- step {step.step} ---", step.code.rstrip(), ""]
        return f"codeact-{record.id}.py", "\n".join(lines)


def _children_under_parents(runs: list[Any]) -> list[Any]:
    """``runs`` (newest first) with each child run (an agent called as a tool) right under its parent, when the
    parent is in the list: the tree as it ran, not the order the runs started in."""
    listed = {r.id for r in runs}
    children: dict[str, list[Any]] = {}
    for r in runs:
        if r.parent_run_id in listed:
            children.setdefault(r.parent_run_id, []).append(r)
    ordered: list[Any] = []

    def add(run: Any, depth: int) -> None:
        ordered.append(run)
        if depth < 32:  # a log cannot hold a cycle, but a bound costs nothing
            for child in reversed(children.get(run.id, [])):  # oldest first, as they were called
                add(child, depth + 1)

    for r in runs:
        if r.parent_run_id not in listed:
            add(r, 0)
    return ordered


def _restore_bundle(bundle: dict[str, Any], pngs: Any) -> dict[str, Any]:
    """A logged MIME bundle: its image bytes were not stored there, the ``images`` table has them."""
    restored: dict[str, Any] = {}
    for mime, value in bundle.items():
        if isinstance(value, str):
            restored[mime] = value
        elif mime == "image/png":
            png = next(pngs, None)
            if png is not None:
                restored[mime] = png
    return restored
