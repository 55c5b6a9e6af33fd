"""Durable sessions: save a sandbox session to one file, and start a new session from it on any engine.

Process snapshots (CRIU) are not available, so a snapshot is made at the
Python level, inside the sandbox: the working directory's files, the user
namespace saved variable by variable with ``cloudpickle`` (functions and
classes defined in the session by value), the packages installed at run time
(re-installed from the host's cache on restore, not carried), the working
directory, and a manifest listing every variable with its type and size and,
for each one that could not be saved (open files, sockets, generators,
threads, objects whose pickling raised), why.

Example::

    from sandbox import DockerSandbox, SnapshotStore

    store = SnapshotStore()                          # <data dir>/codeact/snapshots, or SnapshotStore("/some/dir")
    with DockerSandbox() as sb:
        sb.run("import pandas as pd\\ndf = pd.DataFrame({'a': [1, 2]})\\ndef f(): return df.a.sum()")
        snap = sb.snapshot(store=store)
        print(snap.manifest.describe())              # 2 variables saved, 0 not; 0 files
        sb.run("df.loc[2] = [3]")
        later = sb.snapshot(since=snap, store=store)  # only what changed is pickled and copied again

    with DockerSandbox.restore(snap, engine="tcp://build-2:2376") as sb:   # any engine; LocalSandbox too
        print(sb.restored.restored, sb.restored.failed)                   # ('df', 'f') ()
        print(sb.run("print(f())").stdout)                               # 3

The trust boundary does not move. The pickled namespace is written by the
code in the sandbox, so the host never unpickles it, imports from it or
trusts it: it is an opaque blob, bounded by :attr:`Limits.max_snapshot_bytes`,
carried from one sandbox to another. The host decodes only the manifest,
validates it (size, nesting, field types, names; see
:mod:`sandbox._snapshot_manifest`) and escapes its text. Files are copied as
regular files with safe names only. A snapshot crafted by hostile code can
harm only the sandbox it is restored into.

The file: a ZIP archive (stored, not compressed) holding ``snapshot.json``
(the format version, ids, packages and the validated manifest),
``workspace.tar`` and one ``ns/<sha256>`` entry per pickled variable. It is
written under a temporary name and renamed, so a store never holds half a
snapshot. Files of another :data:`FORMAT_VERSION` are refused with a message
that says which codeact reads them.

Limits: identity between variables is kept (two names for one object stay
one object), except around a cycle of references between top-level
variables (saved by value); objects that hold OS resources are reported, not
saved; C extension objects that cannot be pickled are reported with the
pickling error; a module-level function referenced from inside a container
(a lambda in a list) keeps the globals it saw when it was saved.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import tempfile
import time
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable

from . import _jupyter
from ._snapshot_io import STAGING, Budget, TooLarge, files_of, repack
from ._snapshot_manifest import (MAX_MANIFEST_BYTES, Manifest, ManifestError, VariableInfo, parse_json, printable,
                                 validate)
from .errors import KernelStartError, SandboxError

#: The snapshot file format this version reads and writes. Files of another version are refused.
FORMAT_VERSION = 1
#: Seconds one step of saving or restoring may take in the sandbox (pickling runs the session's code).
DEFAULT_SNAPSHOT_TIMEOUT = 300.0
#: A half-written snapshot file untouched this long belongs to a save whose process died (see remove_partials).
STALE_PARTIAL_SECONDS = 3600.0
_ID = re.compile(r"^[0-9]{8}T[0-9]{6}-[0-9a-f]{12}$")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}(\.[A-Za-z_][A-Za-z0-9_]{0,99}){0,9}")
_HEADER = "snapshot.json"
_WORKSPACE = "workspace.tar"

__all__ = ["FORMAT_VERSION", "Manifest", "RestoreReport", "Snapshot", "SnapshotError", "SnapshotStore",
           "VariableInfo", "restore", "take"]


class SnapshotError(SandboxError):
    """A snapshot could not be made, read or restored; the message says why and what to do."""


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("codeact")
    except Exception:
        return "unknown"


def default_store_dir() -> Path:
    """``$CODEACT_SNAPSHOT_DIR`` is not read here (the caller's configuration decides): the data dir's ``snapshots``."""
    import platformdirs

    return Path(platformdirs.user_data_dir("codeact")) / "snapshots"


def _new_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class Snapshot:
    """One saved session: a file in a store, and what the host knows of it (validated).

    Make one with :meth:`sandbox.DockerSandbox.snapshot` (or LocalSandbox),
    open one with :meth:`open` or :meth:`SnapshotStore.get`, start a session
    from it with ``DockerSandbox.restore(snap)``.
    """

    id: str
    path: Path
    manifest: Manifest
    #: The snapshot this one was forked from (``fork()``), else None.
    parent: str | None
    #: The snapshot this one was saved incrementally against, else None (for the record only: each file stands alone).
    since: str | None
    created: float
    #: The backend it was taken from ("docker", "local").
    backend: str
    #: Packages installed in the session (``name==version``), re-installed on restore.
    packages: tuple[str, ...]
    #: Bytes of the file.
    size: int
    format: int = FORMAT_VERSION
    codeact_version: str = ""

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> "Snapshot":
        """Read a snapshot file's header (bounded, validated); refuses other format versions and broken files."""
        path = Path(path)
        try:
            with zipfile.ZipFile(path) as zf:
                info = zf.getinfo(_HEADER)
                if info.file_size > MAX_MANIFEST_BYTES + 1_000_000:
                    raise SnapshotError(f"{path} is not a usable snapshot: its header is too large")
                header = parse_json(zf.read(info), MAX_MANIFEST_BYTES + 1_000_000)
                members = {i.filename: i for i in zf.infolist()}
        except (OSError, zipfile.BadZipFile, KeyError) as exc:
            raise SnapshotError(f"{path} is not a snapshot file ({type(exc).__name__}: "
                                f"{printable(str(exc), 200)})") from None
        except ManifestError as exc:
            raise SnapshotError(f"{path} is not a usable snapshot: {exc}") from None
        if not isinstance(header, dict):
            raise SnapshotError(f"{path} is not a usable snapshot: its header is not an object")
        fmt = header.get("format")
        if fmt != FORMAT_VERSION:
            made_by = printable(str(header.get("codeact", "an unknown version")), 50)
            raise SnapshotError(
                f"{path} has snapshot format {printable(str(fmt), 20)} (made by codeact {made_by}); this codeact "
                f"({_version()}) reads format {FORMAT_VERSION} only: restore it with a codeact that reads that format")
        try:
            manifest = validate(header.get("manifest"), from_kernel=False)
            snap_id = header.get("id")
            if type(snap_id) is not str or not _ID.fullmatch(snap_id):
                raise ManifestError("the snapshot's id is malformed")
            parent, since = header.get("parent"), header.get("since")
            for ref in (parent, since):
                if ref is not None and (type(ref) is not str or not _ID.fullmatch(ref)):
                    raise ManifestError("a parent id is malformed")
            packages = header.get("packages", [])
            if not isinstance(packages, list) or len(packages) > 1000 or any(
                    type(p) is not str or not re.fullmatch(r"[A-Za-z0-9._-]{1,100}==[A-Za-z0-9._+!-]{1,64}", p)
                    for p in packages):
                raise ManifestError("the package list is malformed")
            created: Any = header.get("created")  # checked below: an int or a float
            backend = header.get("backend")
            if type(created) not in (int, float) or backend not in ("docker", "local"):
                raise ManifestError("the header's fields are malformed")
        except ManifestError as exc:
            raise SnapshotError(f"{path} is not a usable snapshot: {exc}") from None
        for blob in manifest.blobs():
            if f"ns/{blob}" not in members:
                raise SnapshotError(f"{path} is not a usable snapshot: variable data {blob[:12]}... is missing")
        if _WORKSPACE not in members:
            raise SnapshotError(f"{path} is not a usable snapshot: it has no files entry")
        return cls(snap_id, path, manifest, parent, since, float(created), backend, tuple(packages),
                   path.stat().st_size, FORMAT_VERSION, printable(str(header.get("codeact", "")), 50))

    def fork(self, store: "SnapshotStore | None" = None) -> "Snapshot":
        """A copy with a new id whose parent is this one (in ``store``, default: this snapshot's directory).

        Restoring a snapshot twice also gives two independent sessions; a
        fork records the branch point for the caller's log.
        """
        directory = store.root if store is not None else self.path.parent
        new_id = _new_id()
        with zipfile.ZipFile(self.path) as src:
            header = json.loads(src.read(_HEADER))
            header.update(id=new_id, parent=self.id, created=time.time())

            def fill(zf: zipfile.ZipFile) -> None:
                for info in src.infolist():
                    if info.filename == _HEADER:
                        continue
                    with src.open(info) as a, zf.open(info.filename, "w", force_zip64=True) as b:
                        shutil.copyfileobj(a, b, 1024 * 1024)
                zf.writestr(_HEADER, json.dumps(header))

            path = _write_atomically(Path(directory), new_id, fill)
        return Snapshot.open(path)

    def describe(self) -> str:
        """A short text for people (every name escaped)."""
        head = f"snapshot {self.id} ({self.size / 1e6:.1f} MB, from {self.backend}"
        head += f", forked from {self.parent})" if self.parent else ")"
        return head + "\n" + self.manifest.describe()

    def to_json(self) -> dict[str, Any]:
        """What a run log records: ids, size, packages and the manifest."""
        return {"id": self.id, "path": str(self.path), "parent": self.parent, "since": self.since,
                "created": self.created, "backend": self.backend, "packages": list(self.packages),
                "size": self.size, "format": self.format, "manifest": self.manifest.to_json()}


@dataclass(frozen=True)
class RestoreReport:
    """What :func:`restore` brought back, as ``sandbox.restored``."""

    snapshot: str
    #: Variables now in the namespace.
    restored: tuple[str, ...]
    #: (name, why) of saved variables that did not load (a missing package, an error while unpickling).
    failed: tuple[tuple[str, str], ...]
    #: (name, why) of variables the snapshot could not save in the first place.
    not_saved: tuple[tuple[str, str], ...]
    files: int
    packages: tuple[str, ...]
    notices: tuple[str, ...] = ()

    def describe(self) -> str:
        lines = [f"restored {len(self.restored)} variables and {self.files} files from snapshot {self.snapshot}"]
        lines += [f"  not restored: {n}: {why}" for n, why in self.failed[:50]]
        lines += [f"  not in the snapshot: {n}: {why}" for n, why in self.not_saved[:50]]
        lines += [f"  {n}" for n in self.notices]
        return "\n".join(lines)


class SnapshotStore:
    """A directory of snapshot files, one per snapshot, named by id; keeps the newest ``keep`` (None: all).

    Example::

        store = SnapshotStore("/data/snapshots", keep=20)
        snap = sb.snapshot(store=store)
        assert store.get(snap.id).manifest == snap.manifest
    """

    def __init__(self, root: str | os.PathLike[str] | None = None, *, keep: int | None = None) -> None:
        self.root = Path(root) if root is not None else default_store_dir()
        if keep is not None and keep < 1:
            raise ValueError("keep must be at least 1 (or None to keep every snapshot)")
        self.keep = keep

    def path(self, snapshot_id: str) -> Path:
        if not _ID.fullmatch(snapshot_id):
            raise SnapshotError(f"{printable(snapshot_id, 80)!r} is not a snapshot id")
        return self.root / f"{snapshot_id}.snap"

    def get(self, snapshot_id: str) -> Snapshot:
        path = self.path(snapshot_id)
        if not path.exists():
            raise SnapshotError(f"no snapshot {snapshot_id} in {self.root}")
        return Snapshot.open(path)

    def ids(self) -> list[str]:
        """Ids of the snapshots here, oldest first."""
        if not self.root.is_dir():
            return []
        return sorted(p.stem for p in self.root.glob("*.snap") if _ID.fullmatch(p.stem))

    def delete(self, snapshot_id: str) -> None:
        self.path(snapshot_id).unlink(missing_ok=True)

    def remove_partials(self, older_than: float = STALE_PARTIAL_SECONDS) -> list[Path]:
        """Remove files a save left half-written when its process was killed (``.ID.*.tmp``, not modified
        for ``older_than`` seconds: a save in progress writes to its file all along). Returns them."""
        removed: list[Path] = []
        if not self.root.is_dir():
            return removed
        cutoff = time.time() - older_than
        for partial in self.root.glob(".*.tmp"):
            try:
                if partial.is_file() and not partial.is_symlink() and partial.stat().st_mtime < cutoff:
                    partial.unlink()
                    removed.append(partial)
            except OSError:
                continue
        return removed

    def prune(self) -> list[str]:
        """Delete all but the newest ``keep`` snapshots; returns the ids deleted."""
        if self.keep is None:
            return []
        doomed = self.ids()[:-self.keep]
        for snapshot_id in doomed:
            self.delete(snapshot_id)
        return doomed


def _write_atomically(directory: Path, snapshot_id: str, fill: Callable[[zipfile.ZipFile], None]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{snapshot_id}.snap"
    fd, tmp = tempfile.mkstemp(prefix=f".{snapshot_id}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
                fill(zf)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return final


# --- the kernel's half, called with a JSON argument -----------------------------------------------------


def _call(sb: Any, function: str, spec: dict[str, Any], timeout: float, what: str) -> Any:
    """Run ``sandbox_snapshot.<function>(spec)`` in the kernel; its JSON answer (untrusted, only parsed)."""
    return _finish(sb, _begin(sb, function, spec), timeout, what)


def _begin(sb: Any, function: str, spec: dict[str, Any]) -> Any:
    """Start ``sandbox_snapshot.<function>(spec)`` in the kernel and return at once; :func:`_finish` waits for it."""
    expression = f"__import__('sandbox_snapshot').{function}({json.dumps(spec)!r})"
    return sb._start_execute("", user=False, user_expressions={"r": expression})


def _finish(sb: Any, execution: Any, timeout: float, what: str) -> Any:
    """The JSON answer of a call :func:`_begin` started (untrusted, only parsed)."""
    try:
        try:
            if not execution.done.wait(max(timeout, 0.1)):
                raise KernelStartError(f"the kernel did not answer within {timeout:g} s")
            if execution.reply is None:
                raise KernelStartError(f"the kernel stopped: {sb._start_failure_detail()}")
            reply = execution.reply
        finally:
            sb._exec = None
    except KernelStartError as exc:
        sb._settle_after_host_interrupt()
        raise SnapshotError(f"the sandbox did not finish {what} within {timeout:g} s ({exc}); the code was "
                            "interrupted. A variable whose pickling never ends can cause this: delete it, or "
                            "pass a longer timeout=") from None
    value = reply.get("user_expressions", {}).get("r") if isinstance(reply, dict) else None
    if not isinstance(value, dict):
        raise SnapshotError(f"the sandbox gave no answer while {what}")
    if value.get("status") != "ok":
        name = printable(_jupyter.text_field(value, "ename", "Error"), 100)
        message = printable(_jupyter.text_field(value, "evalue"), 500)
        raise SnapshotError(f"the sandbox failed while {what}: {name}: {message}")
    try:
        text = value["data"]["text/plain"]
        if not isinstance(text, str) or len(text) > 4 * MAX_MANIFEST_BYTES:
            raise ValueError("too large")
        return _jupyter.json_in_repr(text)
    except (KeyError, TypeError, ValueError, RecursionError, MemoryError) as exc:
        raise SnapshotError(f"the sandbox's answer while {what} is malformed ({type(exc).__name__})") from None


def _staging_dir(sb: Any) -> str:
    return files_of(sb).staging


def _check_backend(sb: Any) -> None:
    if getattr(sb, "backend", None) not in ("docker", "local"):
        raise SnapshotError(f"the {getattr(sb, 'backend', '?')!r} backend cannot save or restore sessions; "
                            "use the docker (or local) backend")


def take(sb: Any, *, since: Snapshot | None = None, store: SnapshotStore | str | os.PathLike[str] | None = None,
         timeout: float = DEFAULT_SNAPSHOT_TIMEOUT) -> Snapshot:
    """Save the session ``sb`` to a new file in ``store``; see :meth:`KernelSandbox.snapshot`."""
    _check_backend(sb)
    if not isinstance(store, SnapshotStore):
        store = SnapshotStore(store) if store is not None else (SnapshotStore(since.path.parent) if since else
                                                                 SnapshotStore())
    if since is not None and not since.path.is_file():
        since = None  # deleted or pruned since: nothing to build on, so this save stands on its own
    store.remove_partials()
    with sb._lock:
        sb._check_open()
        sb._ensure_kernel()
        io_ = files_of(sb)
        token = _new_id()
        scan = _call(sb, "scan", {"since": since.id if since else None, "workdir": sb.workdir, "exclude": STAGING},
                     timeout, "scanning the session")
        if not isinstance(scan, dict) or type(scan.get("changed")) is not bool or type(scan.get("files")) is not str:
            raise SnapshotError("the sandbox's scan answer is malformed")
        if since is not None and not scan["changed"]:
            return since  # nothing changed: the same snapshot
        committed = False
        try:
            budget = Budget(sb.limits.max_snapshot_bytes, 100_000)
            files: list[tuple[str, int]] = []
            skipped: list[tuple[str, str]] = []
            reuse_files = since is not None and scan["files"] == since.manifest.files_digest

            def fill(zf: zipfile.ZipFile) -> None:
                nonlocal files
                src = zipfile.ZipFile(since.path) if since is not None else None
                try:
                    if reuse_files and since is not None and src is not None:
                        with src.open(_WORKSPACE) as a, zf.open(_WORKSPACE, "w", force_zip64=True) as b:
                            shutil.copyfileobj(a, b, 1024 * 1024)
                        files = list(since.manifest.files)
                        skipped.extend(since.manifest.skipped_files)
                        budget.take(sum(size for _, size in files))
                    else:
                        with zf.open(_WORKSPACE, "w", force_zip64=True) as out:
                            files = io_.read_workspace(out, budget, skipped)
                    raw = _call(sb, "save", {"token": token, "dir": io_.staging, "since": since.id if since else None,
                                             "workdir": sb.workdir,
                                             "reuse": sorted(since.manifest.blobs()) if since else []},
                                timeout, "saving the variables")
                    if isinstance(raw, dict):
                        raw = {**raw, "files": scan["files"]}
                    manifest = validate(raw, files=tuple(files), skipped_files=tuple(skipped))
                    reused = {v.blob for v in manifest.saved if v.reused}
                    if reused and (src is None or since is None or not reused <= since.manifest.blobs()):
                        raise ManifestError("it names variable data the earlier snapshot does not have")
                    if since is not None and reuse_files and _same(manifest, since.manifest):
                        raise _Unchanged  # every variable pickled to the same bytes: no new file

                    written: set[str] = set()
                    for blob in sorted(reused):
                        assert src is not None  # reused blobs come from the earlier snapshot (checked above)
                        with src.open(f"ns/{blob}") as a, zf.open(f"ns/{blob}", "w", force_zip64=True) as b:
                            shutil.copyfileobj(a, b, 1024 * 1024)
                        written.add(blob)

                    def write(name: str, data: IO[bytes], size: int) -> None:
                        with zf.open(f"ns/{name}", "w", force_zip64=True) as b:
                            shutil.copyfileobj(data, b, 1024 * 1024)
                        written.add(name)

                    wanted = manifest.blobs() - written
                    io_.read_blobs(wanted, budget, write)
                    missing = manifest.blobs() - written
                    if missing:
                        raise ManifestError(f"{len(missing)} of the variables it lists were not written")
                    header = {"format": FORMAT_VERSION, "id": token, "parent": None,
                              "since": since.id if since else None, "created": time.time(), "backend": sb.backend,
                              "codeact": _version(), "packages": _packages(sb), "manifest": manifest.to_json()}
                    zf.writestr(_HEADER, json.dumps(header))
                finally:
                    if src is not None:
                        src.close()

            try:
                path = _write_atomically(store.root, token, fill)
            except _Unchanged:
                assert since is not None  # raised only when compared with an earlier snapshot
                return since
            except TooLarge as exc:
                raise SnapshotError(f"{exc}; delete large variables or files, or raise the limit") from None
            except ManifestError as exc:
                raise SnapshotError(f"the sandbox's manifest was refused: {exc}") from None
            except OSError as exc:
                raise SnapshotError(f"could not copy the session out of the sandbox: "
                                    f"{type(exc).__name__}: {printable(str(exc), 300)}") from None
            snap = Snapshot.open(path)
            _call(sb, "done", {"dir": io_.staging, "token": token, "commit": True}, 30.0, "cleaning up")
            committed = True
        finally:
            if not committed:
                with contextlib.suppress(SnapshotError):
                    _call(sb, "done", {"dir": io_.staging, "token": token, "commit": False}, 30.0, "cleaning up")
    store.prune()
    return snap


class _Unchanged(Exception):
    """The new snapshot would hold exactly what ``since`` holds."""


def _same(new: Manifest, old: Manifest) -> bool:
    return all(v.reused for v in new.saved) and [(v.name, v.blob, v.refs) for v in new.saved] == \
        [(v.name, v.blob, v.refs) for v in old.saved] and new.unsaved == old.unsaved and new.cwd == old.cwd


def _packages(sb: Any) -> list[str]:
    """``name==version`` of every distribution added to the session (host-side records, not the sandbox's word)."""
    packages = getattr(sb, "packages", None)
    try:
        added = packages.added() if packages is not None else {}
    except Exception:
        return []
    return sorted(f"{name}=={version}" for name, version in added.items())


def restore(cls: Any, snap: Snapshot | str | os.PathLike[str], functions: Any = (), *,
            timeout: float = DEFAULT_SNAPSHOT_TIMEOUT, **options: Any) -> Any:
    """A new started session of ``cls`` holding ``snap``; see :meth:`KernelSandbox.restore`."""
    if not isinstance(snap, Snapshot):
        snap = Snapshot.open(snap)
    upfront = bool(snap.packages) and "packages" not in options
    if upfront:
        # Materialised once per engine (a shared read-only volume, see sandbox.packages): later restores mount it.
        options["packages"] = list(snap.packages)
    sb = cls(functions, **options)
    try:
        _check_backend(sb)
        sb.start()
        sb.restored = _restore_into(sb, snap, timeout, install=not upfront)
    except BaseException:
        sb.close()
        raise
    return sb


def _restore_into(sb: Any, snap: Snapshot, timeout: float, install: bool = True) -> RestoreReport:
    notices: list[str] = []
    io_ = files_of(sb)
    with sb._lock:
        sb._check_open()
        sb._ensure_kernel()
        if snap.packages and install:
            try:
                _, path = sb.packages._install(list(snap.packages), "restore")
                if path:  # the running kernel imports from it at once (later kernels get it at start)
                    sb._execute_silent(f"__import__('sandbox_runtime').use_packages({[path]!r})", 60.0)
            except SandboxError as exc:
                notices.append(f"the packages were not re-installed ({printable(str(exc), 300)}); variables "
                               "that need them did not load")
        budget = Budget(sb.limits.max_snapshot_bytes, 100_000)
        _copy_files_in(io_, snap, budget)  # first: the session's own modules may be among these files
        # The kernel imports what the variables need while their bytes are copied in (both take a while).
        preparing = _begin(sb, "prepare", {"modules": _modules(snap.manifest)})
        try:
            _copy_blobs_in(io_, snap, budget)
        except BaseException:
            with contextlib.suppress(SnapshotError):  # the kernel settles; the copy's error is the one to tell
                _finish(sb, preparing, timeout, "importing the variables' modules")
            raise
        _finish(sb, preparing, timeout, "importing the variables' modules")
        saved = snap.manifest.saved
        answer = _call(sb, "load", {
            "dir": io_.staging, "token": snap.id, "cwd": snap.manifest.cwd, "files": snap.manifest.files_digest,
            "workdir": sb.workdir,
            "variables": [{"name": v.name, "blob": v.blob, "bytes": v.nbytes, "refs": list(v.refs)} for v in saved],
        }, timeout, "loading the variables")
    names = {v.name for v in saved}
    restored: list[str] = []
    failed: list[tuple[str, str]] = []
    if isinstance(answer, dict):
        for name in answer.get("restored", [])[: len(names)] if isinstance(answer.get("restored"), list) else []:
            if isinstance(name, str) and name in names:
                restored.append(name)
        answered = answer.get("failed")
        rows = answered if isinstance(answered, list) else []
        for row in rows[: len(names)]:
            if isinstance(row, list) and len(row) == 2 and row[0] in names and isinstance(row[1], str):
                failed.append((row[0], printable(row[1])))
        if answer.get("cwd") is False:
            notices.append(f"the working directory {snap.manifest.cwd} does not exist here")
    return RestoreReport(snap.id, tuple(sorted(restored)), tuple(failed),
                         tuple((v.name, v.reason) for v in snap.manifest.unsaved), len(snap.manifest.files),
                         snap.packages, tuple(notices))


def _copy_files_in(io_: Any, snap: Snapshot, budget: Budget) -> None:
    """The snapshot's files into the working directory."""
    with zipfile.ZipFile(snap.path) as zf, zf.open(_WORKSPACE) as src, tempfile.TemporaryFile() as clean:
        try:
            repack(src, clean, budget)  # the file may come from anywhere: only regular, safe files
        except TooLarge as exc:
            raise SnapshotError(f"{exc}; raise the limit to restore this snapshot") from None
        except Exception as exc:
            raise SnapshotError(f"the snapshot's files are unreadable ({type(exc).__name__})") from None
        clean.seek(0)
        io_.write_workspace(clean)


def _copy_blobs_in(io_: Any, snap: Snapshot, budget: Budget) -> None:
    """The snapshot's variables' blobs into the staging directory."""
    with zipfile.ZipFile(snap.path) as zf:
        sizes = {i.filename: i.file_size for i in zf.infolist()}
        blobs = sorted({v.blob for v in snap.manifest.saved})
        if sum(sizes[f"ns/{b}"] for b in blobs) > budget.left:
            _too_large(budget)
        io_.write_blobs([(b, functools.partial(zf.open, f"ns/{b}"), sizes[f"ns/{b}"]) for b in blobs])


def _modules(manifest: Manifest) -> list[str]:
    """The modules of the saved variables' types, as the manifest names them (imported in the sandbox only)."""
    out: set[str] = set()
    for v in manifest.saved:
        module = v.type.rsplit(".", 1)[0] if "." in v.type else ""
        if _MODULE.fullmatch(module) and module.split(".")[0] not in ("builtins", "__main__"):
            out.add(module)
    return sorted(out)[:200]


def _too_large(budget: Budget) -> None:
    raise SnapshotError(f"the snapshot is larger than this session's limit of {budget.max_bytes:,} bytes "
                        "(Limits.max_snapshot_bytes); raise it to restore this snapshot")
