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

import base64
import contextlib
import functools
import hashlib
import io
import json
import os
import re
import shutil
import stat
import tempfile
import time
import uuid
import zipfile
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Protocol, TypeVar

from . import _jupyter
from ._snapshot_io import STAGING, Budget, SnapshotFiles, TooLarge, repack
from ._snapshot_manifest import (MAX_MANIFEST_BYTES, Manifest, ManifestError, VariableInfo, parse_json, printable,
                                 validate)
from .errors import KernelStartError, SandboxError
from .limits import Limits

if TYPE_CHECKING:
    from .packages import SessionPackages

#: The snapshot file format this version writes for a delta (a whole snapshot is written as format 1, which
#: older versions read too). Files of a format not in READABLE_FORMATS are refused.
FORMAT_VERSION = 2
WHOLE_FORMAT = 1
READABLE_FORMATS = (1, 2)
#: Links a delta's chain may have when it is saved; a save past it is whole again (the chain is compacted).
MAX_DELTA_LINKS = 4
#: Links a chain may have when it is read (a file crafted with a longer one is refused).
MAX_CHAIN = 32
#: Bytes of new variable data a save takes in the kernel's answer instead of through the engine (a small change).
INLINE_BYTES = 256 * 1024
#: The store's directory of deleted snapshots that a delta still needs (removed once none does).
HELD = ".held"
#: Seconds one step of saving or restoring may take in the sandbox (pickling runs the session's code).
DEFAULT_SNAPSHOT_TIMEOUT = 300.0
#: A half-written snapshot file untouched this long belongs to a save whose process died (see remove_partials).
STALE_PARTIAL_SECONDS = 3600.0
_ID = re.compile(r"^[0-9]{8}T[0-9]{6}-[0-9a-f]{12}$")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}(\.[A-Za-z_][A-Za-z0-9_]{0,99}){0,9}")
_HEADER = "snapshot.json"
_WORKSPACE = "workspace.tar"

__all__ = ["FORMAT_VERSION", "Manifest", "RestoreReport", "Snapshot", "SnapshotError", "SnapshotKernel",
           "SnapshotStore", "VariableInfo", "restore", "take"]


class SnapshotError(SandboxError):
    """A snapshot could not be made, read or restored; the message says why and what to do."""


class SnapshotKernel(Protocol):
    """What saving and restoring need of a session: :class:`~sandbox.kernel.KernelSandbox` has it.

    The kernel's half (``sandbox_snapshot`` in the runtime) is called with
    bookkeeping code while the session is held with :meth:`exclusive_kernel`;
    the files and the pickled variables move through :meth:`snapshot_files`.
    """

    #: What :func:`restore_into` brought back, once it has.
    restored: RestoreReport | None

    @property
    def backend(self) -> str:
        """The backend's name: only ``"docker"`` and ``"local"`` sessions save and restore."""
        ...

    @property
    def workdir(self) -> str:
        """The working directory, as the kernel names it."""
        ...

    @property
    def limits(self) -> Limits:
        """The session's limits (a snapshot's size is ``max_snapshot_bytes``)."""
        ...

    @property
    def packages(self) -> SessionPackages | None:
        """The session's installed packages, when it can install any."""
        ...

    def start(self) -> object:
        """Start the session's kernel now."""
        ...

    def close(self) -> None:
        """End the session."""
        ...

    def exclusive_kernel(self) -> AbstractContextManager[None]:
        """Hold the session (nothing else runs in it meanwhile) with its kernel up."""
        ...

    def start_silent(self, code: str,
                     user_expressions: dict[str, str] | None = None) -> Callable[[float], dict[str, Any]]:
        """Start bookkeeping code; the function returned waits for its reply (KernelStartError when none)."""
        ...

    def execute_silent(self, code: str, timeout: float,
                       user_expressions: dict[str, str] | None = None) -> dict[str, Any]:
        """Run bookkeeping code and return its reply (KernelStartError when none)."""
        ...

    def interrupt_and_settle(self) -> None:
        """Interrupt code the host gave up waiting for, and wait for the kernel to be idle (or restart it)."""
        ...

    def snapshot_files(self) -> SnapshotFiles:
        """The session's working directory and staging directory, as a snapshot moves them."""
        ...


#: A session class :func:`restore` makes.
K = TypeVar("K", bound=SnapshotKernel)


@functools.cache  # importlib.metadata reads the installed distributions: 4 ms of every save
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
    #: The snapshot this one was saved incrementally against, else None (a delta's ``base`` is that one too).
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
    #: The snapshot whose data this one refers to for what it does not hold itself (a delta), else None.
    base: str | None = None
    #: The id of the whole snapshot at the root of its chain (its own id when it stands alone).
    lineage: str = ""
    #: The files of its chain of bases, nearest first (resolved and checked when it was opened).
    chain: tuple[Path, ...] = ()

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> "Snapshot":
        """Read a snapshot file's header (bounded, validated); refuses other format versions and broken files.

        A delta's chain of base snapshots is resolved and checked too (each
        base present, of the same lineage, no cycle, at most :data:`MAX_CHAIN`
        links), and every variable's data must be in the file or its chain.
        """
        path = Path(path)
        header, members = _read_header(path)
        return cls._validated(path, header, members)

    @classmethod
    def _validated(cls, path: Path, header: dict[str, Any], members: set[str],
                   chain: list[tuple[Path, set[str]]] | None = None) -> "Snapshot":
        """The snapshot of a decoded header, validated; ``chain``: its bases' (file, entries) when known."""
        try:
            manifest = validate(header.get("manifest"), from_kernel=False)
            snap_id = _header_id(header, "id")
            parent, since, base = (_header_id(header, k, optional=True) for k in ("parent", "since", "base"))
            lineage = _header_id(header, "lineage", optional=True) or snap_id
            if base is None and lineage != snap_id:
                raise ManifestError("a whole snapshot names another lineage")
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
        if chain is None:
            chain = _resolve_chain(path, snap_id, base, lineage)
        present = set(members).union(*(m for _, m in chain))
        for blob in manifest.blobs():
            if f"ns/{blob}" not in present:
                raise SnapshotError(f"{path} is not a usable snapshot: variable data {blob[:12]}... is missing")
        if _WORKSPACE not in present:
            raise SnapshotError(f"{path} is not a usable snapshot: it has no files entry")
        return cls(snap_id, path, manifest, parent, since, float(created), backend, tuple(packages),
                   path.stat().st_size, int(header["format"]), printable(str(header.get("codeact", "")), 50),
                   base=base, lineage=lineage, chain=tuple(p for p, _ in chain))

    def _current(self) -> "Snapshot":
        """This snapshot with its chain as the store holds it now (a delta's bases may have been held since)."""
        return Snapshot.open(self.path) if self.base else self

    @property
    def depth(self) -> int:
        """Base snapshots this one needs (0: it stands alone)."""
        return len(self.chain)

    def fork(self, store: "SnapshotStore | None" = None) -> "Snapshot":
        """A whole copy with a new id whose parent is this one (in ``store``, default: this snapshot's directory).

        Restoring a snapshot twice also gives two independent sessions; a
        fork records the branch point for the caller's log. A fork of a delta
        holds its chain's data itself (it stands alone).
        """
        directory = store.root if store is not None else self.path.parent
        new_id = _new_id()
        fresh = self._current()
        with _opened(fresh) as files:
            header = json.loads(files[0].read(_HEADER))
            header.update(id=new_id, parent=self.id, created=time.time(), format=WHOLE_FORMAT)
            header.pop("base", None)
            header.pop("lineage", None)

            def fill(zf: zipfile.ZipFile) -> None:
                for name in [_WORKSPACE] + [f"ns/{b}" for b in sorted(fresh.manifest.blobs())]:
                    with _holder(files, name).open(name) as a, zf.open(name, "w", force_zip64=True) as b:
                        shutil.copyfileobj(a, b, 1024 * 1024)
                zf.writestr(_HEADER, json.dumps(header))

            path = _write_atomically(Path(directory), new_id, fill)
        return Snapshot.open(path)

    def describe(self) -> str:
        """A short text for people (every name escaped)."""
        head = f"snapshot {self.id} ({self.size / 1e6:.1f} MB, from {self.backend}"
        head += f", forked from {self.parent}" if self.parent else ""
        head += f", only what changed since {self.base})" if self.base else ")"
        return head + "\n" + self.manifest.describe()

    def to_json(self) -> dict[str, Any]:
        """What a run log records: ids, size, packages and the manifest."""
        return {"id": self.id, "path": str(self.path), "parent": self.parent, "since": self.since,
                "created": self.created, "backend": self.backend, "packages": list(self.packages),
                "size": self.size, "format": self.format, "base": self.base,
                "manifest": self.manifest.to_json()}


def _read_header(path: Path) -> tuple[dict[str, Any], set[str]]:
    """The decoded header of the snapshot file ``path`` (bounded; format checked) and the names of its entries."""
    try:
        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo(_HEADER)
            if info.file_size > MAX_MANIFEST_BYTES + 1_000_000:
                raise SnapshotError(f"{path} is not a usable snapshot: its header is too large")
            header = parse_json(zf.read(info), MAX_MANIFEST_BYTES + 1_000_000)
            members = {i.filename for i in zf.infolist()}
    except (OSError, zipfile.BadZipFile, KeyError) as exc:
        raise SnapshotError(f"{path} is not a snapshot file ({type(exc).__name__}: "
                            f"{printable(str(exc), 200)})") from None
    except ManifestError as exc:
        raise SnapshotError(f"{path} is not a usable snapshot: {exc}") from None
    if not isinstance(header, dict):
        raise SnapshotError(f"{path} is not a usable snapshot: its header is not an object")
    fmt = header.get("format")
    if type(fmt) is not int or fmt not in READABLE_FORMATS:
        made_by = printable(str(header.get("codeact", "an unknown version")), 50)
        raise SnapshotError(
            f"{path} has snapshot format {printable(str(fmt), 20)} (made by codeact {made_by}); this codeact "
            f"({_version()}) reads formats {', '.join(map(str, READABLE_FORMATS))} only: restore it with a codeact "
            "that reads that format")
    return header, members


def _header_id(header: dict[str, Any], key: str, *, optional: bool = False) -> Any:
    value = header.get(key)
    if value is None and optional:
        return None
    if type(value) is not str or not _ID.fullmatch(value):
        raise ManifestError(f"the header's {key} is not a snapshot id")
    return value


def _base_path(directory: Path, snapshot_id: str) -> Path | None:
    """The file of snapshot ``snapshot_id`` in ``directory`` or among its held ones, else None."""
    for candidate in (directory / f"{snapshot_id}.snap", directory / HELD / f"{snapshot_id}.snap"):
        if candidate.is_file() and not candidate.is_symlink():
            return candidate
    return None


def _resolve_chain(path: Path, snap_id: str, base: str | None, lineage: str) -> list[tuple[Path, set[str]]]:
    """(file, entries) of each base of a delta, nearest first: present, same lineage, no cycle, bounded."""
    chain: list[tuple[Path, set[str]]] = []
    seen = {snap_id}
    directory = path.parent.parent if path.parent.name == HELD else path.parent
    while base is not None:
        if len(chain) >= MAX_CHAIN:
            raise SnapshotError(f"{path} is not a usable snapshot: its chain of base snapshots is longer than "
                                f"{MAX_CHAIN}")
        if base in seen:
            raise SnapshotError(f"{path} is not a usable snapshot: its base snapshots form a cycle (at {base})")
        seen.add(base)
        found = _base_path(directory, base)
        if found is None:
            raise SnapshotError(f"{path} is not a usable snapshot: it holds only what changed since snapshot {base}, "
                                f"which is not in {directory} (copy that file next to it, or restore from a whole "
                                "snapshot)")
        header, members = _read_header(found)
        try:
            if _header_id(header, "id") != base:
                raise ManifestError(f"the file of base snapshot {base} holds another snapshot")
            if (_header_id(header, "lineage", optional=True) or base) != lineage:
                raise ManifestError(f"its base snapshot {base} belongs to another session's snapshots")
            next_base = _header_id(header, "base", optional=True)
            if next_base is None and base != lineage:
                raise ManifestError(f"its chain ends at {base}, not at the whole snapshot it names")
        except ManifestError as exc:
            raise SnapshotError(f"{path} is not a usable snapshot: {exc}") from None
        chain.append((found, members))
        base = next_base
    return chain


@contextlib.contextmanager
def _opened(snap: Snapshot) -> Any:
    """The open ZIP files of ``snap`` and its chain, nearest first."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(zipfile.ZipFile(p)) for p in (snap.path, *snap.chain)]


def _holder(files: list[zipfile.ZipFile], name: str) -> zipfile.ZipFile:
    """The nearest file of a chain that holds entry ``name`` (Snapshot.open checked that one does)."""
    for zf in files:
        if name in zf.NameToInfo:
            return zf
    raise SnapshotError(f"the snapshot's entry {name[:20]}... is missing from its chain (a base file changed)")


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
        def key(p: Path) -> tuple[str, int]:  # ids tell the second only: the file's time orders within one
            try:
                return p.stem[:15], p.stat().st_mtime_ns
            except OSError:
                return p.stem[:15], 0

        return [p.stem for p in sorted((p for p in self.root.glob("*.snap") if _ID.fullmatch(p.stem)), key=key)]

    def delete(self, snapshot_id: str) -> None:
        """Delete a snapshot. One that a delta still needs is held (hidden in ``.held``) until none does."""
        if self._hold(snapshot_id):
            self.collect()

    def _hold(self, snapshot_id: str) -> bool:
        """Move a snapshot among the held ones (``collect`` then removes it unless a delta needs it)."""
        path = self.path(snapshot_id)
        if not path.is_file():
            return False
        held = self.root / HELD
        held.mkdir(exist_ok=True)
        os.replace(path, held / path.name)
        return True

    def collect(self) -> list[str]:
        """Remove held snapshots no snapshot of the store needs any more; returns their ids."""
        held = self.root / HELD
        if not held.is_dir() or self._saving():
            return []  # a save in progress may be writing a delta on a snapshot deleted meanwhile
        needed: set[str] = set()
        todo = [p for p in self.root.glob("*.snap") if _ID.fullmatch(p.stem)]
        while todo:
            base = _base_of(todo.pop())
            if base is not None and base not in needed:
                needed.add(base)
                todo.append(held / f"{base}.snap")
        removed = []
        for p in held.glob("*.snap"):
            if p.stem not in needed and not (self.root / p.name).exists():
                p.unlink(missing_ok=True)
                removed.append(p.stem)
        return removed

    def remove_partials(self, older_than: float = STALE_PARTIAL_SECONDS) -> list[Path]:
        """Remove files a save left half-written when its process was killed (``.ID.*.tmp``, not modified
        for ``older_than`` seconds: a save in progress writes to its file all along). Returns them."""
        removed: list[Path] = []
        for partial, stale in self._partials(older_than):
            if stale:
                with contextlib.suppress(OSError):
                    partial.unlink()
                    removed.append(partial)
        return removed

    def _saving(self) -> bool:
        """Whether a save may be in progress: a partial file modified lately, or one that could not be read."""
        return any(stale is not True for _, stale in self._partials(STALE_PARTIAL_SECONDS))

    def _partials(self, older_than: float) -> Iterator[tuple[Path, bool | None]]:
        """The store's partial files (regular files only), each with whether it is stale (None: unreadable)."""
        if not self.root.is_dir():
            return
        cutoff = time.time() - older_than
        for partial in self.root.glob(".*.tmp"):
            try:
                st = partial.lstat()
            except FileNotFoundError:
                continue  # finished (renamed) or removed since the listing
            except OSError:
                yield partial, None
                continue
            if stat.S_ISREG(st.st_mode):
                yield partial, st.st_mtime < cutoff

    def prune(self) -> list[str]:
        """Delete all but the newest ``keep`` snapshots; returns the ids deleted."""
        if self.keep is None:
            return []
        doomed = self.ids()[:-self.keep]
        held = [snapshot_id for snapshot_id in doomed if self._hold(snapshot_id)]
        if held:
            self.collect()  # once, not per snapshot: it reads the header of every snapshot in the store
        return doomed


def _base_of(path: Path) -> str | None:
    """The base id a snapshot file names (None: whole, unreadable or gone; a held base then stays until later)."""
    try:
        header, _ = _read_header(path)
        return _header_id(header, "base", optional=True)
    except (SnapshotError, ManifestError):
        return None


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


def _call(sb: SnapshotKernel, function: str, spec: dict[str, Any], timeout: float, what: str) -> Any:
    """Run ``sandbox_snapshot.<function>(spec)`` in the kernel; its JSON answer (untrusted, only parsed)."""
    return _finish(sb, _begin(sb, function, spec), timeout, what)


def _begin(sb: SnapshotKernel, function: str, spec: dict[str, Any]) -> Callable[[float], dict[str, Any]]:
    """Start ``sandbox_snapshot.<function>(spec)`` in the kernel and return at once; :func:`_finish` waits for it."""
    expression = f"__import__('sandbox_snapshot').{function}({json.dumps(spec)!r})"
    return sb.start_silent("", user_expressions={"r": expression})


def _finish(sb: SnapshotKernel, waiting: Callable[[float], dict[str, Any]], timeout: float, what: str) -> Any:
    """The JSON answer of a call :func:`_begin` started (untrusted, only parsed)."""
    try:
        reply = waiting(timeout)
    except KernelStartError as exc:
        sb.interrupt_and_settle()
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


def _check_backend(sb: SnapshotKernel) -> None:
    if sb.backend not in ("docker", "local"):
        raise SnapshotError(f"the {sb.backend!r} backend cannot save or restore sessions; "
                            "use the docker (or local) backend")


def take(sb: SnapshotKernel, *, since: Snapshot | None = None,
         store: SnapshotStore | str | os.PathLike[str] | None = None, timeout: float = DEFAULT_SNAPSHOT_TIMEOUT,
         delta: bool = False) -> Snapshot:
    """Save the session ``sb`` to a new file in ``store``; see :meth:`KernelSandbox.snapshot`.

    ``delta`` (with ``since`` in the same store): the file holds only the
    variables and files that changed and refers to ``since`` for the rest;
    past :data:`MAX_DELTA_LINKS` links the save is whole again.
    """
    _check_backend(sb)
    if not isinstance(store, SnapshotStore):
        store = SnapshotStore(store) if store is not None else (SnapshotStore(since.path.parent) if since else
                                                                 SnapshotStore())
    if since is not None and not since.path.is_file():
        since = None  # deleted or pruned since: nothing to build on, so this save stands on its own
    if since is not None and since.base and not all(p.is_file() for p in since.chain):
        try:
            since = Snapshot.open(since.path)  # its chain as it is now (a base was held meanwhile)
        except SnapshotError:
            since = None
    as_delta = (delta and since is not None and since.depth + 1 <= MAX_DELTA_LINKS
                and since.path.parent.resolve() == store.root.resolve())
    store.remove_partials()
    with sb.exclusive_kernel():
        io_ = sb.snapshot_files()
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

            written_header: dict[str, Any] = {}
            members: set[str] = set()
            chain: list[tuple[Path, set[str]]] = []

            def fill(zf: zipfile.ZipFile) -> None:
                with contextlib.ExitStack() as stack:
                    src = stack.enter_context(_opened(since)) if since is not None else None
                    if as_delta and since is not None and src is not None:
                        paths = (since.path, *since.chain)
                        chain.extend((p, set(z.NameToInfo)) for p, z in zip(paths, src, strict=True))
                    fill_from(zf, src)

            def fill_from(zf: zipfile.ZipFile, src: list[zipfile.ZipFile] | None) -> None:
                nonlocal files
                if reuse_files and since is not None and src is not None:
                    if not as_delta:  # a delta's base has them
                        with _holder(src, _WORKSPACE).open(_WORKSPACE) as a, \
                                zf.open(_WORKSPACE, "w", force_zip64=True) as b:
                            shutil.copyfileobj(a, b, 1024 * 1024)
                    files = list(since.manifest.files)
                    skipped.extend(since.manifest.skipped_files)
                    budget.take(sum(size for _, size in files))
                else:
                    with zf.open(_WORKSPACE, "w", force_zip64=True) as out:
                        files = io_.read_workspace(out, budget, skipped)
                raw = _call(sb, "save", {"token": token, "dir": io_.staging, "since": since.id if since else None,
                                         "workdir": sb.workdir, "inline": INLINE_BYTES,
                                         "reuse": sorted(since.manifest.blobs()) if since else []},
                            timeout, "saving the variables")
                inline: Any = None
                if isinstance(raw, dict):
                    inline = raw.get("inline")
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
                    if not as_delta:  # a delta refers to its base's copy
                        with _holder(src, f"ns/{blob}").open(f"ns/{blob}") as a, \
                                zf.open(f"ns/{blob}", "w", force_zip64=True) as b:
                            shutil.copyfileobj(a, b, 1024 * 1024)
                    written.add(blob)

                def write(name: str, data: IO[bytes], size: int) -> None:
                    with zf.open(f"ns/{name}", "w", force_zip64=True) as b:
                        shutil.copyfileobj(data, b, 1024 * 1024)
                    written.add(name)

                for blob, data in _inline_blobs(inline, manifest.blobs() - written).items():
                    budget.take(len(data))
                    write(blob, io.BytesIO(data), len(data))
                wanted = manifest.blobs() - written
                if wanted:  # (a small change came in the answer: no copy through the engine)
                    io_.read_blobs(wanted, budget, write)
                missing = manifest.blobs() - written
                if missing:
                    raise ManifestError(f"{len(missing)} of the variables it lists were not written")
                header = {"format": WHOLE_FORMAT, "id": token, "parent": None,
                          "since": since.id if since else None, "created": time.time(), "backend": sb.backend,
                          "codeact": _version(), "packages": _packages(sb), "manifest": manifest.to_json()}
                if as_delta:
                    assert since is not None
                    header.update(format=FORMAT_VERSION, base=since.id, lineage=since.lineage)
                text = json.dumps(header)
                zf.writestr(_HEADER, text)
                written_header.update(json.loads(text))
                members.update(zf.NameToInfo)

            try:
                path = _write_atomically(store.root, token, fill)
            except _Unchanged:
                assert since is not None  # raised only when compared with an earlier snapshot
                # What the kernel just saved is what ``since`` holds: its fingerprints become since's, or every
                # later autosave would find the same change (an equal value rebound) and save again. (Should that
                # fail, only the saving is lost: `since` is the answer all the same.)
                with contextlib.suppress(SnapshotError):
                    _call(sb, "done", {"dir": io_.staging, "token": token, "commit": True, "as": since.id}, 30.0,
                          "cleaning up")
                    committed = True
                return since
            except TooLarge as exc:
                raise SnapshotError(f"{exc}; delete large variables or files, or raise the limit") from None
            except ManifestError as exc:
                raise SnapshotError(f"the sandbox's manifest was refused: {exc}") from None
            except OSError as exc:
                raise SnapshotError(f"could not copy the session out of the sandbox: "
                                    f"{type(exc).__name__}: {printable(str(exc), 300)}") from None
            # What was just written, checked as Snapshot.open checks it (without reading it back).
            snap = Snapshot._validated(path, written_header, members, chain)
            _call(sb, "done", {"dir": io_.staging, "token": token, "commit": True}, 30.0, "cleaning up")
            committed = True
        finally:
            if not committed:
                with contextlib.suppress(SnapshotError):
                    _call(sb, "done", {"dir": io_.staging, "token": token, "commit": False}, 30.0, "cleaning up")
    store.prune()
    return snap


def _inline_blobs(value: Any, wanted: set[str]) -> dict[str, bytes]:
    """The variable data the kernel sent in its answer (base64, at most INLINE_BYTES), each checked against its
    name (its sha256); nothing when it sent none."""
    if value is None or value == {}:
        return {}
    if not isinstance(value, dict) or len(value) > len(wanted):
        raise ManifestError("its inline variable data is malformed")
    out: dict[str, bytes] = {}
    total = 0
    for blob, text in value.items():
        if blob not in wanted or type(text) is not str or len(text) > (INLINE_BYTES // 3 + 1) * 4:
            raise ManifestError("its inline variable data is malformed")
        try:
            data = base64.b64decode(text, validate=True)
        except ValueError:
            raise ManifestError("its inline variable data is not base64") from None
        total += len(data)
        if total > INLINE_BYTES or hashlib.sha256(data).hexdigest() != blob:
            raise ManifestError("its inline variable data is too large or does not match its name")
        out[blob] = data
    return out


class _Unchanged(Exception):
    """The new snapshot would hold exactly what ``since`` holds."""


def _same(new: Manifest, old: Manifest) -> bool:
    return all(v.reused for v in new.saved) and [(v.name, v.blob, v.refs) for v in new.saved] == \
        [(v.name, v.blob, v.refs) for v in old.saved] and new.unsaved == old.unsaved and new.cwd == old.cwd


def _packages(sb: SnapshotKernel) -> list[str]:
    """``name==version`` of every distribution added to the session (host-side records, not the sandbox's word)."""
    packages = sb.packages
    try:
        added = packages.added() if packages is not None else {}
    except Exception:
        return []
    return sorted(f"{name}=={version}" for name, version in added.items())


def current(snap: Snapshot | str | os.PathLike[str]) -> Snapshot:
    """``snap`` (a Snapshot or a snapshot file's path) opened, with its chain as the store holds it now."""
    return snap._current() if isinstance(snap, Snapshot) else Snapshot.open(snap)


def restore(cls: Callable[..., K], snap: Snapshot | str | os.PathLike[str], functions: Any = (), *,
            restore_timeout: float = DEFAULT_SNAPSHOT_TIMEOUT, **options: Any) -> K:
    """A new started session of ``cls`` holding ``snap``; see :meth:`KernelSandbox.restore`. ``options`` are
    the constructor's (``timeout=`` too: the session's time limit per run); ``restore_timeout`` bounds each
    step of loading the snapshot."""
    snap = current(snap)
    upfront = bool(snap.packages) and "packages" not in options
    if upfront:
        # Materialised once per engine (a shared read-only volume, see sandbox.packages): later restores mount it.
        options["packages"] = list(snap.packages)
    sb = cls(functions, **options)
    try:
        _check_backend(sb)  # before a sandbox of a backend that cannot restore is started
        sb.start()
    except BaseException:
        sb.close()
        raise
    restore_into(sb, snap, timeout=restore_timeout, install=not upfront)
    return sb


def restore_into(sb: SnapshotKernel, snap: Snapshot, *, timeout: float = DEFAULT_SNAPSHOT_TIMEOUT,
                 install: bool = True) -> None:
    """Load ``snap`` (see :func:`current`) into ``sb``, a started session that has run nothing yet; sets
    ``sb.restored``. ``install``: the snapshot's packages are installed at run time (else ``sb`` was made
    with them). Closes ``sb`` on failure."""
    try:
        _check_backend(sb)
        sb.restored = _restore_into(sb, snap, timeout, install)
    except BaseException:
        sb.close()
        raise


def _restore_into(sb: SnapshotKernel, snap: Snapshot, timeout: float, install: bool = True) -> RestoreReport:
    notices: list[str] = []
    io_ = sb.snapshot_files()
    with sb.exclusive_kernel():
        if snap.packages and install:
            try:
                if sb.packages is None:
                    raise SandboxError("this session cannot install packages")
                _, path = sb.packages.install_batch(list(snap.packages), source="restore")
                if path:  # the running kernel imports from it at once (later kernels get it at start)
                    sb.execute_silent(f"__import__('sandbox_runtime').use_packages({[path]!r})", 60.0)
            except SandboxError as exc:
                notices.append(f"the packages were not re-installed ({printable(str(exc), 300)}); variables "
                               "that need them did not load")
        budget = Budget(sb.limits.max_snapshot_bytes, 100_000)
        modules = _modules(snap.manifest)
        # The kernel imports what the variables need (the longest part) while the host copies the files and
        # the variables' bytes in. A module that may be one of the session's own files is imported only once
        # the files are there (half written, it would stay broken in sys.modules).
        early = not _shadowed(modules, snap.manifest.files)
        preparing = _begin(sb, "prepare", {"modules": modules}) if early else None
        try:
            _copy_files_in(io_, snap, budget)
            if preparing is None:
                preparing = _begin(sb, "prepare", {"modules": modules})
            _copy_blobs_in(io_, snap, budget)
        except BaseException:
            if preparing is not None:
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


def _copy_files_in(io_: SnapshotFiles, snap: Snapshot, budget: Budget) -> None:
    """The snapshot's files into the working directory."""
    with _opened(snap) as chain, _holder(chain, _WORKSPACE).open(_WORKSPACE) as src, \
            tempfile.TemporaryFile() as clean:
        try:
            repack(src, clean, budget)  # the file may come from anywhere: only regular, safe files
        except TooLarge as exc:
            raise SnapshotError(f"{exc}; raise the limit to restore this snapshot") from None
        except Exception as exc:
            raise SnapshotError(f"the snapshot's files are unreadable ({type(exc).__name__})") from None
        clean.seek(0)
        io_.write_workspace(clean)


def _copy_blobs_in(io_: SnapshotFiles, snap: Snapshot, budget: Budget) -> None:
    """The snapshot's variables' blobs into the staging directory."""
    with _opened(snap) as chain:
        blobs = sorted({v.blob for v in snap.manifest.saved})
        holders = {b: _holder(chain, f"ns/{b}") for b in blobs}  # the nearest file of a delta's chain holding it
        sizes = {b: holders[b].getinfo(f"ns/{b}").file_size for b in blobs}
        if sum(sizes.values()) > budget.left:
            _too_large(budget)
        io_.write_blobs([(b, functools.partial(holders[b].open, f"ns/{b}"), sizes[b]) for b in blobs])


def _modules(manifest: Manifest) -> list[str]:
    """The modules of the saved variables' types, as the manifest names them (imported in the sandbox only)."""
    out: set[str] = set()
    for v in manifest.saved:
        module = v.type.rsplit(".", 1)[0] if "." in v.type else ""
        if _MODULE.fullmatch(module) and module.split(".")[0] not in ("builtins", "__main__"):
            out.add(module)
    return sorted(out)[:200]


def _shadowed(modules: list[str], files: tuple[tuple[str, int], ...]) -> bool:
    """Whether a file of the session could be (part of) one of ``modules``: its first name, up to a dot."""
    tops = {m.split(".")[0] for m in modules}
    return any(path.split("/")[0].split(".")[0] in tops for path, _ in files)


def _too_large(budget: Budget) -> None:
    raise SnapshotError(f"the snapshot is larger than this session's limit of {budget.max_bytes:,} bytes "
                        "(Limits.max_snapshot_bytes); raise it to restore this snapshot")
