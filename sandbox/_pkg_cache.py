"""The host's package cache: wheels by content, their unpacked form, and resolutions.

Layout under the root (default ``~/.cache/codeact/packages``)::

    wheels/<sha256>/<file name>.whl     as downloaded; the hash is checked before it lands here
    unpacked/<sha256>.tar               the wheel's installed form (see _pkg_wheel)
    unpacked/<sha256>.json              {"installed_bytes": ...}
    bundles/<set hash>.tar              a set's unpacked wheels under one directory, as copied into sandboxes
    bytecode/<set hash>.tar             that set's bytecode, compiled by the sandbox image's python (Docker);
                                        apart from the bundle, so bundles made before it existed stay good
    resolutions/<key>.json              what a request resolved to, and when
    envs/<hash>/                        materialised environments of the local backend
    leases/<pid>-<id>.json              what a live session uses (held with an flock while it lives)
    locks/                              one lock file per thing being written

Everything is written to a temporary name and renamed into place, so a
reader sees a whole file or none, and several processes (sessions) can share
the cache: what two of them write under one name is the same content.

The cache is bounded (``max_bytes``, ``max_age``): after a download or a new
bundle, :meth:`PackageCache.evict` removes what was used least recently (a
wheel goes with its unpacked form) until the cache fits. It never removes
what a live session holds a lease on (:meth:`PackageCache.lease`), what was
used in the last :data:`GRACE_SECONDS` (another process may be between its
download and its lease), nor anything another process has locked. A lease
whose process died is found by its lock being free, and dropped.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, TypeVar

from . import _pkg_pip as pip
from ._pkg_wheel import WheelError, prefixed_tar, wheel_to_tar


#: The cache's default bounds: 10 GiB, and 30 days since an entry was last used.
DEFAULT_CACHE_MAX_BYTES = 10 * 1024**3
DEFAULT_CACHE_MAX_AGE = 30 * 24 * 3600.0
#: Entries used this recently are never evicted.
GRACE_SECONDS = 600.0
#: Seconds after which a temporary file in the cache is taken for one a killed process left.
PARTIAL_SECONDS = 3600.0

T = TypeVar("T")


def default_root() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("codeact")) / "packages"


@dataclass(frozen=True)
class CachedWheel:
    """A wheel in the cache, with its unpacked form."""

    pick: pip.Pick
    path: Path
    sha256: str
    size: int
    tar: Path
    installed_bytes: int


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class PackageCache:
    """Wheels, unpacked wheels and resolutions on the host, shared by every session and the image build.

    Example::

        cache = PackageCache()                       # ~/.cache/codeact/packages
        wheels = cache.fetch(picks, target, sources)  # downloads only what is missing
    """

    def __init__(self, root: str | os.PathLike[str] | None = None, *, max_bytes: int | None = DEFAULT_CACHE_MAX_BYTES,
                 max_age: float | None = DEFAULT_CACHE_MAX_AGE) -> None:
        self.root = Path(root) if root is not None else default_root()
        self.max_bytes = max_bytes
        self.max_age = max_age

    def subdir(self, name: str) -> Path:
        """The cache's directory ``name`` (``tmp``, ``locks``, ``envs``, ...), made when missing."""
        d = self.root / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    @contextlib.contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """An exclusive lock between processes of this host (an flock on ``locks/<name>``)."""
        path = self.subdir("locks") / (hashlib.sha256(name.encode()).hexdigest()[:32] + ".lock")
        with open(path, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def try_lock(self, name: str) -> Iterator[bool]:
        """The lock of :meth:`lock` if it is free now (yields True), else yields False at once."""
        path = self.subdir("locks") / (hashlib.sha256(name.encode()).hexdigest()[:32] + ".lock")
        with open(path, "a+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _write_atomic(self, path: Path, data: bytes) -> None:
        _write_file_atomically(path, lambda f: f.write(data))

    def _made_once(self, path: Path, lock: str, write: Callable[[IO[bytes]], object]) -> Path:
        """``path``, written by ``write`` unless it exists (under the lock ``lock``: another process making it
        is waited for); a ``write`` that raises leaves nothing behind."""
        if path.is_file():
            _touch(path)
            return path
        with self.lock(lock):
            if path.is_file():
                _touch(path)
                return path
            _write_file_atomically(path, write)
        self.evict()
        return path

    # --- resolutions -----------------------------------------------------------------------

    def get_resolution(self, key: str, max_age: float) -> list[pip.Pick] | None:
        path = self.subdir("resolutions") / f"{key}.json"
        try:
            data = json.loads(path.read_text())
            if time.time() - float(data["created"]) > max_age:
                return None
            return [pip.Pick(**p) for p in data["picks"]]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put_resolution(self, key: str, picks: Sequence[pip.Pick]) -> None:
        data = {"created": time.time(), "picks": [asdict(p) for p in picks]}
        self._write_atomic(self.subdir("resolutions") / f"{key}.json", json.dumps(data).encode())

    # --- wheels ---------------------------------------------------------------------------

    def _wheel_path(self, sha256: str, filename: str) -> Path:
        return self.root / "wheels" / sha256 / filename

    def cached_wheel(self, pick: pip.Pick) -> Path | None:
        if pick.sha256 is None:
            return None
        path = self._wheel_path(pick.sha256, pick.filename)
        return path if path.is_file() else None

    def installed_size(self, pick: pip.Pick) -> int | None:
        """The unpacked size of ``pick``'s wheel when the cache has unpacked it; else None."""
        if pick.sha256 is None:
            return None
        try:
            return int(json.loads((self.root / "unpacked" / f"{pick.sha256}.json").read_text())["installed_bytes"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def fetch(self, picks: Sequence[pip.Pick], target: pip.Target,
              sources: pip.Sources) -> tuple[list[CachedWheel], int]:
        """Every wheel of ``picks`` in the cache, unpacked; returns them and how many were downloaded.

        Wheels another process is downloading right now are waited for, not
        downloaded twice.
        """
        found: dict[str, tuple[Path, str]] = {}
        missing = []
        for p in picks:
            path = self.cached_wheel(p)
            if path is not None:
                found[p.filename] = (path, p.sha256 or "")
            else:
                missing.append(p)
        downloaded = 0
        if missing:
            with contextlib.ExitStack() as stack:
                for name in sorted({p.sha256 or p.filename for p in missing}):
                    stack.enter_context(self.lock("wheel-" + name))
                still = [p for p in missing if self.cached_wheel(p) is None]
                if still:
                    downloaded = len(still)
                    found.update(self._download(still, target, sources))
                for p in missing:
                    if p.filename not in found:
                        path = self.cached_wheel(p)
                        if path is not None:
                            found[p.filename] = (path, p.sha256 or "")
        wheels = []
        for p in picks:
            path, sha = found[p.filename]
            _touch(path)
            tar, installed = self.unpacked(sha, path)
            wheels.append(CachedWheel(p, path, sha, path.stat().st_size, tar, installed))
        if downloaded:
            self.evict()
        return wheels, downloaded

    def _download(self, picks: Sequence[pip.Pick], target: pip.Target, sources: pip.Sources
                  ) -> dict[str, tuple[Path, str]]:
        tmp = Path(tempfile.mkdtemp(prefix="download-", dir=self.subdir("tmp")))
        try:
            pip.download(picks, target, sources, tmp)
            out = {}
            for p in picks:
                got = tmp / p.filename
                if not got.is_file():
                    raise pip.PipFailure("unreachable", f"pip did not download {p.filename}", [p.name])
                sha = sha256_of(got)
                if p.sha256 is not None and sha != p.sha256:
                    raise pip.PipFailure("unreachable", f"{p.filename} does not match the hash the index gave")
                dest = self._wheel_path(sha, p.filename)
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(got, dest)
                out[p.filename] = (dest, sha)
            return out
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def unpacked(self, sha256: str, wheel: Path) -> tuple[Path, int]:
        """The unpacked tar of a cached wheel (made once) and its installed size."""
        d = self.subdir("unpacked")
        tar, meta = d / f"{sha256}.tar", d / f"{sha256}.json"
        try:
            installed = int(json.loads(meta.read_text())["installed_bytes"])
            _touch(tar)
            return tar, installed
        except (OSError, ValueError, KeyError, TypeError):
            pass
        with self.lock("unpack-" + sha256):
            if tar.is_file() and meta.is_file():
                return tar, int(json.loads(meta.read_text())["installed_bytes"])
            installed = _write_file_atomically(tar, lambda f: wheel_to_tar(wheel, f))
            self._write_atomic(meta, json.dumps({"installed_bytes": installed, "wheel": wheel.name}).encode())
            return tar, installed

    def bundle(self, name: str, wheels: Sequence[CachedWheel]) -> Path:
        """One tar of ``wheels`` under the directory ``name`` (made once): what is copied into a sandbox."""
        return self._made_once(self.subdir("bundles") / f"{name}.tar", "bundle-" + name,
                               lambda f: prefixed_tar([w.tar for w in wheels], name, f))

    def bytecode(self, name: str) -> Path | None:
        """The bytecode tar of the bundle ``name`` (see ``_pkg_wheel.bytecode_tar``) if it was made; else None."""
        path = self.root / "bytecode" / f"{name}.tar"
        if path.is_file():
            _touch(path)
            return path
        return None

    def make_bytecode(self, name: str, write: Callable[[IO[bytes]], object]) -> Path:
        """The bytecode tar of the bundle ``name``, made once by ``write`` (another process making it is waited
        for); a ``write`` that raises leaves nothing behind."""
        return self._made_once(self.subdir("bytecode") / f"{name}.tar", "bytecode-" + name, write)

    # --- materialised environments of the local backend -----------------------------------------

    def local_env(self, env_hash: str) -> Path:
        return self.subdir("envs") / env_hash

    # --- leases and eviction -----------------------------------------------------------------------

    def lease(self) -> CacheLease:
        """A lease for a live session: what it names (wheels, bundles, environments) is never evicted."""
        return CacheLease(self)

    @contextlib.contextmanager
    def using(self, keys: Iterable[str]) -> Iterator[None]:
        """Hold a lease on wheels (by sha256 or file name) while they are fetched and unpacked."""
        lease = CacheLease(self)
        try:
            lease.add(wheels=keys)
            yield
        finally:
            lease.close()

    def _leased(self) -> tuple[set[str], set[str]] | None:
        """(wheel keys, bundle/environment names) held by live leases; None when a lease could not be read."""
        wheels: set[str] = set()
        names: set[str] = set()
        for path in self.subdir("leases").glob("*.json"):
            try:
                f = open(path, "r+")  # noqa: SIM115  # apart from its `with` below: its errors are told apart
            except FileNotFoundError:
                continue  # replaced by its holder since the listing
            except OSError:
                return None
            with f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:  # held: a live session
                    try:
                        data = json.loads(f.read())
                        wheels.update(map(str, data.get("wheels", [])))
                        names.update(map(str, data.get("names", [])))
                    except (OSError, ValueError, AttributeError):
                        return None
                    continue
                # Free: its holder died or let go without removing it (or replaced it: then it is unlinked).
                with contextlib.suppress(OSError):
                    if os.path.samestat(os.fstat(f.fileno()), os.stat(path)):
                        os.unlink(path)
        return wheels, names

    def _entries(self) -> list[_Entry]:
        entries: list[_Entry] = []
        unpacked = self.root / "unpacked"
        for d in _listdir(self.root / "wheels"):
            if d.is_dir() and not d.name.startswith("."):
                paths = [d, unpacked / f"{d.name}.tar", unpacked / f"{d.name}.json"]
                files = [p for p in d.iterdir()]
                entries.append(_Entry("wheel", d.name, paths, {f.name for f in files}))
        for f in _listdir(self.root / "bundles"):
            if f.suffix == ".tar" and not f.name.startswith("."):
                entries.append(_Entry("name", f.stem, [f]))
        for f in _listdir(self.root / "bytecode"):
            if f.suffix == ".tar" and not f.name.startswith("."):
                entries.append(_Entry("bytecode", f.stem, [f]))
        for d in _listdir(self.root / "envs"):
            if d.is_dir() and not d.name.startswith("."):
                entries.append(_Entry("env", d.name, [d]))
        for f in _listdir(self.root / "resolutions"):
            if f.suffix == ".json":
                entries.append(_Entry("resolution", f.stem, [f]))
        for entry in entries:
            entry.measure()
        return entries

    def size(self) -> int:
        """Bytes the cache's wheels, unpacked wheels, bundles and their bytecode, environments and resolutions
        take."""
        return sum(e.size for e in self._entries())

    def evict(self, *, now: float | None = None) -> list[str]:
        """Remove entries over the cache's bounds, least recently used first; returns what went (kind:key).

        Best effort: a busy cache (another process evicting, a lease being
        written) is left alone until the next time.
        """
        now = time.time() if now is None else now
        self._remove_partials(now)
        if self.max_bytes is None and self.max_age is None:
            return []
        removed: list[str] = []
        with _EVICTING, self.try_lock("evict") as mine:
            if not mine:
                return removed
            leased = self._leased()
            if leased is None:
                return removed
            wheels_held, names_held = leased
            entries = self._entries()
            total = sum(e.size for e in entries)
            old = now - self.max_age if self.max_age is not None else None
            for entry in sorted(entries, key=lambda e: e.last_used):
                over_size = self.max_bytes is not None and total > self.max_bytes
                too_old = old is not None and entry.last_used < old
                if not (over_size or too_old) or entry.last_used > now - GRACE_SECONDS:
                    continue
                if entry.kind == "wheel" and (entry.key in wheels_held or entry.files & wheels_held):
                    continue
                if entry.kind in ("name", "bytecode", "env") and entry.key in names_held:
                    continue
                if self._remove(entry):
                    total -= entry.size
                    removed.append(f"{entry.kind}:{entry.key}")
        return removed

    def _remove_partials(self, now: float) -> None:
        """Temporary files a killed process left half written (their rename never came; a bytecode tar may be
        tens of MB), once an hour old: a live writer writes on, and its file stays young."""
        for pattern in (".tmp-*", "*/.tmp-*", "*/*/.tmp-*"):
            for tmp in self.root.glob(pattern):
                with contextlib.suppress(OSError):
                    if tmp.is_file() and tmp.stat().st_mtime < now - PARTIAL_SECONDS:
                        tmp.unlink()

    def _remove(self, entry: _Entry) -> bool:
        lock = {"wheel": "wheel-", "name": "bundle-", "bytecode": "bytecode-", "env": "local-env-",
                "resolution": "resolution-"}[entry.kind] + entry.key
        with self.try_lock(lock) as free, self.try_lock("unpack-" + entry.key) as free_unpack:
            if not (free and free_unpack):
                return False
            for path in entry.paths:
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
        return True


#: One eviction at a time in this process (the flock is per open file, so threads need their own guard).
_EVICTING = threading.Lock()


@dataclass
class _Entry:
    kind: str  # "wheel" (keyed by sha256), "name" (a bundle), "bytecode" (a bundle's), "env" (local), "resolution"
    key: str
    paths: list[Path]
    files: set[str] = field(default_factory=set)  # a wheel's file names (leases taken before its hash is known)
    size: int = 0
    last_used: float = 0.0

    def measure(self) -> None:
        for path in self.paths:
            for f in _walk(path):
                try:
                    st = f.lstat()
                except OSError:
                    continue
                self.size += st.st_size
                self.last_used = max(self.last_used, st.st_mtime)


def _walk(path: Path) -> Iterator[Path]:
    if path.is_dir() and not path.is_symlink():
        for root, _, files in os.walk(path):  # files only: a directory's mtime is not a use
            for name in files:
                yield Path(root, name)
    elif path.exists():
        yield path


def _listdir(path: Path) -> list[Path]:
    try:
        return list(path.iterdir())
    except OSError:
        return []


def _write_file_atomically(path: Path, write: Callable[[IO[bytes]], T]) -> T:
    """``write`` into a temporary file next to ``path``, then rename it there: readers see all of it or none;
    a ``write`` that raises leaves nothing behind. Returns what ``write`` returned."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            result = write(f)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return result


def _touch(path: Path) -> None:
    """Mark ``path`` as used now (its mtime is the cache's "last used": atime is often not kept)."""
    with contextlib.suppress(OSError):
        os.utime(path)


class CacheLease:
    """What one live session uses from the cache; evicting skips it while the lease is held.

    A lease is a JSON file under ``leases/`` that its holder keeps flock'ed:
    when the holder dies the lock goes with it and the next eviction drops the
    lease. An update writes a new file, locks it and renames it over the old
    one, so a reader never sees a half-written lease.
    """

    def __init__(self, cache: PackageCache) -> None:
        self.cache = cache
        self.path = cache.subdir("leases") / f"{os.getpid()}-{uuid.uuid4().hex[:12]}.json"
        self.wheels: set[str] = set()
        self.names: set[str] = set()
        self._file: IO[str] | None = None
        self._lock = threading.Lock()

    def add(self, wheels: Iterable[str] = (), names: Iterable[str] = ()) -> None:
        """Protect these wheels (sha256 or file name) and bundles/environments (their names)."""
        with self._lock:
            self.wheels.update(wheels)
            self.names.update(names)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-")
            f = os.fdopen(fd, "w")
            try:
                fcntl.flock(f, fcntl.LOCK_EX)
                f.write(json.dumps({"pid": os.getpid(), "wheels": sorted(self.wheels), "names": sorted(self.names)}))
                f.flush()
                os.replace(tmp, self.path)
            except BaseException:
                f.close()
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            old, self._file = self._file, f
            if old is not None:
                old.close()

    def close(self) -> None:
        """Let go: remove the lease (what it named may now be evicted)."""
        with self._lock:
            if self._file is not None:
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
                self._file.close()
                self._file = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


__all__ = ["DEFAULT_CACHE_MAX_AGE", "DEFAULT_CACHE_MAX_BYTES", "CacheLease", "CachedWheel", "PackageCache",
           "WheelError", "default_root", "sha256_of"]
