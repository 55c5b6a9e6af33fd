"""Durable chat sessions: a conversation saved with its sandbox, resumed later (in another process, on any engine).

A saved session is two things: a snapshot of the sandbox (one file in a
:class:`sandbox.SnapshotStore`: files, variables, packages; see
:mod:`sandbox.snapshot`) and the conversation, which is not copied but
rebuilt from the run log's events of the session's runs. The run log keeps
one row per snapshot (:class:`codeact.runlog.SnapshotRecord`): which chat
session saved it, which runs its conversation holds and up to which step,
its size, parent and validated manifest.

Example::

    from codeact import CodeActAgent
    from codeact.sessions import SaveOptions

    agent = CodeActAgent(model, tools)
    with agent.session(save=SaveOptions(autosave=True)) as chat:   # a save after every step, and at the end
        chat.send("Load sales.csv into df", files=["sales.csv"])
        print(chat.session_id)

    with agent.session(resume=run_id) as chat:   # a run, chat session or snapshot id (or a unique prefix)
        print(chat.restored.describe())          # what came back, what did not
        chat.send("Now plot monthly totals")     # the model is told what was restored and what was lost

Saving is incremental: unchanged variables are not pickled or copied again,
and a save that finds nothing changed in the sandbox writes no file (the
row moves on to the newer conversation). Each session keeps its newest
``keep`` snapshots. A session resumed from a snapshot is a new session
whose snapshots have that one as ``parent``, so resuming one snapshot twice
gives two independent branches.

The trust boundary does not move: the host never unpickles a snapshot and
reads only its validated manifest (bounded, control and bidi characters
escaped by :mod:`sandbox._snapshot_manifest`). Its text reaches people as
plain text: ``codeact sessions`` prints it through
:func:`codeact.terminal.safe` (no console markup), the web page puts it in
text nodes, and the run log keeps it only as JSON in the ``snapshots`` table
(the notebook export does not show it).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from . import telemetry
from .errors import RunNotFound, SavedSessionError
from . import transcript
from .messages import Message

#: Seconds one save may take in the sandbox (pickling runs the session's own code).
SAVE_TIMEOUT = 300.0
#: Characters of a step's code quoted in the resume note when that step's effects were lost.
#: The largest image file a resumed session reads back from a run's artifacts.
MAX_IMAGE_FILE = 50 * 1024 * 1024
LOST_CODE_CHARS = 1500
#: Names listed in the resume note before "and N more".
NOTE_NAMES = 40


def _object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (a log may hold what another version wrote)."""
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class SaveOptions:
    """When and where a chat session saves itself.

    Args:
        store: the directory of snapshot files (default: ``$CODEACT_SNAPSHOT_DIR`` or
            ``<user data dir>/codeact/snapshots``, see :func:`codeact.config.snapshot_dir`).
        keep: snapshots of one session kept (the newest); older ones are deleted
            after each save, file and row. None keeps every one.
        autosave: save after every step that ran code and at the end of every
            turn (incremental: only what changed is saved again).
        on_close: save when the session closes.
    """

    store: str | os.PathLike[str] | None = None
    keep: int | None = 3
    autosave: bool = False
    on_close: bool = True

    def __post_init__(self) -> None:
        if self.keep is not None and self.keep < 1:
            raise ValueError("keep must be at least 1 (or None to keep every snapshot)")


def save_options(spec: "SaveOptions | bool | None") -> SaveOptions | None:
    """``save=`` of :meth:`CodeActAgent.session`: None/False (save only on request), True (defaults), or options."""
    if spec is None or spec is False:
        return None
    if spec is True:
        return SaveOptions()
    if isinstance(spec, SaveOptions):
        return spec
    raise TypeError(f"save= takes a SaveOptions, True or None, not {type(spec).__name__}")


def store_root(options: SaveOptions | None) -> Path:
    from . import settings

    return settings.snapshot_dir(options.store if options is not None else None)


# --- saving ------------------------------------------------------------------------------------------------


class Saver:
    """The saving half of one chat session: its id, its conversation's runs, its newest snapshot."""

    def __init__(self, log: Any, options: SaveOptions | None, *, agent: str = "codeact") -> None:
        self.log = log
        self.options = options
        self.agent = agent
        self.session_id = uuid.uuid4().hex[:12]
        #: The conversation's runs, oldest first: those of the session it resumed, then its own.
        self.runs: list[str] = []
        self.own_runs: list[str] = []
        #: The newest snapshot of this session (or the one it was restored from): the base of the next save.
        self.last: Any = None
        #: (run id, step) the conversation was at when ``last`` was saved.
        self.last_point: tuple[str | None, int] = (None, 0)
        self.restored_from: str | None = None
        #: (run id, step) a resumed session's conversation ends at, until its first turn.
        self.point: tuple[str | None, int] = (None, 0)
        self._own: set[str] = set()

    def begin_run(self, run_id: str) -> None:
        self.runs.append(run_id)
        self.own_runs.append(run_id)

    def save(self, sandbox: Any, run_id: str | None, step: int, *, timeout: float = SAVE_TIMEOUT,
             delta: bool = False) -> Any:
        """Snapshot ``sandbox`` and record it with the conversation up to ``step`` of ``run_id``.

        ``delta`` (autosave): the file holds only what changed since this
        session's previous snapshot; explicit saves and the save at the end
        are whole files (each stands alone, see docs/sessions.md).

        Returns the :class:`~codeact.runlog.SnapshotRecord`.

        Raises:
            SavedSessionError: no run log, or the sandbox could not be saved (the message says why).
        """
        from sandbox.snapshot import SnapshotError, SnapshotStore

        from .runlog import SnapshotRecord

        if self.log is None:
            raise SavedSessionError("saving a session needs the run log (the conversation is rebuilt from it); "
                                    "turn the log on (drop --no-log, or pass log=True)")
        store = SnapshotStore(store_root(self.options))
        since = self.last
        if since is not None and not Path(since.path).exists():
            since = None  # deleted meanwhile (sessions rm): a whole save
        with telemetry.span("sandbox.snapshot", {"codeact.session.id": self.session_id,
                                                 "codeact.snapshot.incremental": since is not None}) as span:
            try:
                snap = sandbox.snapshot(since=since, store=store, timeout=timeout,
                                        delta=delta and since is not None and since.id in self._own)
                if since is not None and snap.id == since.id and snap.id not in self._own:
                    # Nothing changed since the restore: this session's own copy (the host copies the file).
                    snap = since.fork(store)
            except SnapshotError as exc:
                telemetry.span_failed(span, exc)
                raise SavedSessionError(f"the session could not be saved: {exc}") from None
            except OSError as exc:
                telemetry.span_failed(span, exc)
                raise SavedSessionError(f"the session could not be saved in {store.root}: {exc}") from None
            if span is not None:
                span.set_attribute("codeact.snapshot.id", snap.id)
                span.set_attribute("codeact.snapshot.bytes", int(snap.size))
                span.set_attribute("codeact.snapshot.variables", len(snap.manifest.variables))
        previous = next(iter(self._newest_rows()), None)
        parent = snap.parent or (previous.id if previous is not None and previous.id != snap.id
                                 else self.restored_from)
        now = time.time()
        record = SnapshotRecord(id=snap.id, session=self.session_id, agent=self.agent, run_id=run_id, step=step,
                                runs=list(self.runs), path=str(snap.path), size=snap.size, created=snap.created,
                                saved=now, parent=parent, since=snap.since, backend=snap.backend,
                                packages=list(snap.packages), manifest=snap.manifest.to_json())
        self.log.save_snapshot(record, self.own_runs)
        self.last, self.last_point = snap, (run_id, step)
        self._own.add(snap.id)
        self._prune(keep_id=snap.id)
        return record

    def _newest_rows(self) -> list[Any]:
        return self.log.list_snapshots(session=self.session_id) if self.log is not None else []

    def _prune(self, keep_id: str) -> None:
        keep = self.options.keep if self.options is not None else SaveOptions().keep
        if keep is None:
            return
        for row in self._newest_rows()[keep:]:
            if row.id != keep_id:
                delete(self.log, row)


def delete(log: Any, record: Any) -> None:
    """Delete a saved session: its snapshot file (when it is a snapshot file) and its run-log row.

    A file that a newer delta snapshot still needs is held (hidden) by its
    store until no snapshot needs it (see :meth:`sandbox.SnapshotStore.delete`).
    """
    from sandbox.snapshot import SnapshotStore

    path = Path(record.path)
    if path.name == f"{record.id}.snap":  # our own row names the file; never anything else
        SnapshotStore(path.parent).delete(record.id)
    log.delete_snapshot(record.id)


# --- resuming ----------------------------------------------------------------------------------------------


@dataclass
class Conversation:
    """A saved session's conversation rebuilt from the run log, and what it knows was lost."""

    #: The messages after the system prompt.
    messages: list[Message] = field(default_factory=list)
    #: The system prompt as the live session wrote it ("" when the log predates it: written afresh).
    system: str = ""
    #: What compaction had folded at the save (:func:`codeact.compaction.folded_state`), or {}.
    folded: dict[str, Any] = field(default_factory=dict)
    #: What happened after the snapshot (code that ran after the save, runs missing from the log).
    lost: list[str] = field(default_factory=list)
    #: The user's own code cells (web UI) after the last message, for the model's next message.
    notes: list[str] = field(default_factory=list)
    #: The task of the run the snapshot was saved in.
    task: str = ""
    #: Index in ``messages`` of each turn's user message (compaction folds whole turns).
    turn_starts: list[int] = field(default_factory=list)


def open_saved(log: Any, key: str) -> tuple[Any, Any]:
    """(run-log row, :class:`sandbox.Snapshot`) of the saved session ``key`` names (snapshot, session or run id).

    Raises:
        SavedSessionError: no run log, nothing saved for ``key``, or its file is gone or unreadable.
    """
    from sandbox.snapshot import Snapshot, SnapshotError

    if log is None:
        raise SavedSessionError("resuming a session needs the run log (the conversation is rebuilt from it); "
                                "turn the log on (drop --no-log, or pass log=True)")
    try:
        record = log.find_snapshot(key)
    except RunNotFound as exc:
        raise SavedSessionError(str(exc)) from None
    if not Path(record.path).exists():
        raise SavedSessionError(f"the snapshot file of saved session {record.id} is gone ({record.path}); "
                                f"remove the entry with `codeact sessions rm {record.id}`")
    try:
        snap = Snapshot.open(record.path)
    except SnapshotError as exc:
        raise SavedSessionError(str(exc)) from None
    if snap.id != record.id:
        raise SavedSessionError(f"{record.path} holds snapshot {snap.id}, not {record.id}: the file was replaced; "
                                f"remove the entry with `codeact sessions rm {record.id}`")
    return record, snap


def conversation(log: Any, record: Any, *, output_root: Path | None = None, observation_limit: int = 8000,
                 limits: Any = None) -> Conversation:
    """The conversation of a saved session, rebuilt from the run log's events of its runs.

    Each turn's user message exactly as the model read it (its
    :class:`~codeact.events.TurnMessage`), and each step's model reply with its
    observation (and the images sent with it, read back from the run's
    artifacts under ``output_root``) or the feedback on a reply the agent could
    not use, and a final reply without code, up to ``record.step`` of
    ``record.run_id``; steps the model started but that never got their
    observation are left out, as the live conversation leaves them out. Runs
    of the analyst's own code (the web UI's cells) not yet told to the model
    become a note on the next message. The shapes are :mod:`codeact.transcript`'s.
    """
    out = Conversation()
    notes: list[str] = []
    half = transcript.cell_note_half(observation_limit)
    for index, run_id in enumerate(record.runs):
        last = index == len(record.runs) - 1
        try:
            events = log.get_events(run_id)
        except RunNotFound:
            out.lost.append(f"turn {run_id} is no longer in the run log (deleted): the conversation skips it")
            continue
        limit = record.step if last else None
        started = next((e.get("payload") for e in events if e.get("type") == "RunStarted"), None)
        started = started if isinstance(started, dict) else {}
        if last:
            out.task = str(started.get("task") or "")
        if started.get("agent") == "user":
            notes.extend(_cell_note(events, limit, half))
            continue
        told = next((_object(e.get("payload")) for e in events if e.get("type") == "TurnMessage"), None)
        if told is not None:  # the message as the model read it (the notes of the cells before it included)
            task = str(told.get("text") or "")
            out.system = out.system or str(told.get("system") or "")
        else:  # a log from before TurnMessage: the message as it was then
            task = _old_task_text(started, notes)
        notes = []
        out.turn_starts.append(len(out.messages))
        out.messages.append(transcript.task_message(task))
        _steps(out, events, limit, task, Path(output_root) / run_id if output_root is not None else None, limits)
    out.notes = notes
    return out


def _steps(out: Conversation, events: list[dict[str, Any]], limit: int | None, task: str,
           directory: Path | None, limits: Any) -> None:
    """One turn's steps into ``out.messages`` (and code that ran after the save into ``out.lost``)."""
    pending: str | None = None
    code_seen = False
    for event in events:
        kind, step = event.get("type"), int(event.get("step") or 0)
        payload = _object(event.get("payload"))
        if limit is not None and step > limit:
            if kind == "CodeAction":
                code = _cut(str(payload.get("code") or ""), LOST_CODE_CHARS)
                out.lost.append(f"step {step} of the turn {_quote(task)} ran this code after the save; "
                                f"whatever it changed is not in the restored session:\n```python\n{code}\n```")
            continue
        if kind == "ModelOutput":
            pending, code_seen = str(payload.get("text") or ""), False
        elif kind == "CodeAction":
            code_seen = True
        elif kind == "Observation" and pending is not None:
            images = _sent_images(directory, payload.get("sent_images"), limits)
            out.messages += [transcript.reply_message(pending),
                             transcript.observation_message(str(payload.get("text") or ""), images)]
            pending = None
        elif kind == "ErrorEvent" and payload.get("kind") in ("parse", "output") and not payload.get("fatal") \
                and pending is not None:
            out.messages += [transcript.reply_message(pending),
                             transcript.feedback_message(str(payload.get("message") or ""))]
            pending = None
        elif kind == "Compacted" and isinstance(payload.get("folded"), dict):
            out.folded = payload["folded"]
        elif kind == "FinalAnswer" and pending is not None and not code_seen:
            out.messages.append(transcript.reply_message(pending))
            pending = None


def _sent_images(directory: Path | None, names: Any, limits: Any) -> tuple[Any, ...]:
    """The images a step sent the model, prepared again from the run's artifacts (none that are gone)."""
    if directory is None or not isinstance(names, list) or not names:
        return ()
    from sandbox.hostfiles import read_confined

    from .images import MAX_SIDE, step_images

    candidates: list[tuple[str, bytes]] = []
    for name in names:
        try:  # names from the log: read below the run's directory only, never through a link
            candidates.append((str(name), read_confined(directory, str(name), max_bytes=MAX_IMAGE_FILE)))
        except Exception:  # gone, or not a plain relative path: the message goes without it
            continue
    side = getattr(limits, "max_image_side", MAX_SIDE)
    return step_images(candidates, max_side=side, max_images=len(candidates)).parts


def _old_task_text(started: dict[str, Any], notes: list[str]) -> str:
    task = str(started.get("task") or "")
    names = [str(f) for f in started.get("files") or [] if isinstance(f, str)]
    if names:
        task += f"\n\n{transcript.SANDBOX_FILES_HEADER}\n" + "\n".join(f"- {n}" for n in names[:100])
    return transcript.user_work_note(notes, 8000) + task


def _cell_note(events: list[dict[str, Any]], limit: int | None, half: int) -> list[str]:
    code = observation = None
    for event in events:
        payload = _object(event.get("payload"))
        if limit is not None and int(event.get("step") or 0) > limit:
            continue
        if event.get("type") == "CodeAction":
            code = str(payload.get("code") or "")
        elif event.get("type") == "Observation":
            observation = str(payload.get("text") or "")
    if code is None or observation is None:
        return []
    return [transcript.cell_note(code, observation, half)]


def resume_note(record: Any, conv: Conversation, report: Any) -> str:
    """What the model is told with its first message after a resume: what was restored and what was lost.

    ``report`` is the sandbox's :class:`sandbox.snapshot.RestoreReport`. Its
    names and reasons are the sandbox's (validated, bounded and escaped by
    the sandbox layer); the model read that sandbox's output all along.
    """
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(record.saved or record.created))
    where = f"after step {record.step}" + (f" of the turn {_quote(conv.task)}" if conv.task else "")
    lines = [f"[Note: this session was restored from a snapshot saved {when}, {where}. The Python session "
             "is a new sandbox holding what the snapshot saved."]
    lines += _restored_lines(report)
    if conv.lost:
        lines.append("Lost:")
        lines += [f"- {item}" for item in conv.lost[:10]]
    else:
        lines.append("Nothing ran after the snapshot was saved.")
    if conv.notes:
        lines.append(transcript.user_work_note(conv.notes, 8000).rstrip())
    lines.append("[End of note.]")
    return "\n".join(lines) + "\n\n"


def recovery_note(snap: Any, why: str, report: Any, *, where: str = "this session's last save",
                  gone: str = "anything the code did after that save") -> str:
    """What the model is told when its kernel was lost and came back from the session's last save.

    ``snap`` is that save (a :class:`sandbox.snapshot.Snapshot`), ``why`` the
    sandbox's own account of the loss, ``report`` the restore's
    :class:`sandbox.snapshot.RestoreReport` (or None); ``where`` names the save
    and ``gone`` what ran after it (see :mod:`codeact.chat_recovery`).
    """
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(getattr(snap, "created", None) or time.time()))
    lines = [f"[Note: the Python session was lost ({_cut(why, 300)}). It was not started afresh: it continues in a "
             f"new sandbox restored from {where} ({when}), with the variables and files saved then. Lost: {gone}."]
    if report is not None:
        lines += _restored_lines(report)
    lines.append("[End of note.]")
    return "\n".join(lines) + "\n\n"


def _restored_lines(report: Any) -> list[str]:
    """What a restore brought back and what it could not (a :class:`sandbox.snapshot.RestoreReport`), as note lines."""
    restored = list(report.restored)
    lines = [f"Restored: {len(restored)} variables" + (f" ({_names(restored)})" if restored else "")
             + f", {report.files} files" + (f", packages {', '.join(report.packages[:20])}"
                                           if report.packages else "") + "."]
    lost_vars = [f"{name} ({_cut(why, 200)})" for name, why in list(report.not_saved) + list(report.failed)]
    if lost_vars:
        lines.append("Not restored (define them again if you need them): " + "; ".join(lost_vars[:NOTE_NAMES])
                     + (f"; and {len(lost_vars) - NOTE_NAMES} more" if len(lost_vars) > NOTE_NAMES else "") + ".")
    return lines + list(report.notices[:10])


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:NOTE_NAMES])
    return shown + (f" and {len(names) - NOTE_NAMES} more" if len(names) > NOTE_NAMES else "")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit // 2] + "\n...\n" + text[-limit // 2:]


def _quote(task: str) -> str:
    one = " ".join(task.split())
    return json.dumps(one[:80] + ("..." if len(one) > 80 else ""), ensure_ascii=False)


# --- showing a saved session --------------------------------------------------------------------------------


def summary(record: Any) -> dict[str, Any]:
    """A saved session as plain, bounded data: counts and names from the validated manifest."""
    variables = record.manifest.get("variables") if isinstance(record.manifest.get("variables"), list) else []
    saved = [v for v in variables if isinstance(v, dict) and v.get("saved") is True]
    unsaved = [v for v in variables if isinstance(v, dict) and v.get("saved") is False]
    files = record.manifest.get("files") if isinstance(record.manifest.get("files"), list) else []
    return {"id": record.id, "session": record.session, "run_id": record.run_id, "step": record.step,
            "runs": len(record.runs), "size": record.size, "created": record.created, "saved": record.saved,
            "parent": record.parent, "backend": record.backend, "packages": list(record.packages),
            "variables": [{"name": str(v.get("name")), "type": str(v.get("type")), "size": v.get("size")}
                          for v in saved],
            "not_saved": [{"name": str(v.get("name")), "type": str(v.get("type")), "reason": str(v.get("reason"))}
                          for v in unsaved],
            "files": len(files)}


__all__ = ["Conversation", "SAVE_TIMEOUT", "SaveOptions", "Saver", "conversation", "delete", "open_saved",
           "recovery_note", "resume_note", "save_options", "summary"]
