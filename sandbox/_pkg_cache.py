"""The host's package cache: wheels by content, their unpacked form, and resolutions.

Layout under the root (default ``~/.cache/codeact/packages``)::

    wheels/<sha256>/<file name>.whl     as downloaded; the hash is checked before it lands here
    unpacked/<sha256>.tar               the wheel's installed form (see _pkg_wheel)
    unpacked/<sha256>.json              {"installed_bytes": ...}
    bundles/<set hash>.tar              a set's unpacked wheels under one directory, as copied into sandboxes
    resolutions/<key>.json              what a request resolved to, and when
    envs/<hash>/                        materialised environments of the local backend
    locks/                              one lock file per thing being written

Everything is written to a temporary name and renamed into place, so a
reader sees a whole file or none, and several processes (sessions) can share
the cache: what two of them write under one name is the same content.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from . import _pkg_pip as pip
from ._pkg_wheel import WheelError, prefixed_tar, wheel_to_tar


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

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    def _dir(self, name: str) -> Path:
        d = self.root / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    @contextlib.contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """An exclusive lock between processes of this host (an flock on ``locks/<name>``)."""
        path = self._dir("locks") / (hashlib.sha256(name.encode()).hexdigest()[:32] + ".lock")
        with open(path, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _write_atomic(self, path: Path, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    # --- resolutions -----------------------------------------------------------------------

    def get_resolution(self, key: str, max_age: float) -> list[pip.Pick] | None:
        path = self._dir("resolutions") / f"{key}.json"
        try:
            data = json.loads(path.read_text())
            if time.time() - float(data["created"]) > max_age:
                return None
            return [pip.Pick(**p) for p in data["picks"]]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put_resolution(self, key: str, picks: Sequence[pip.Pick]) -> None:
        data = {"created": time.time(), "picks": [asdict(p) for p in picks]}
        self._write_atomic(self._dir("resolutions") / f"{key}.json", json.dumps(data).encode())

    # --- wheels ---------------------------------------------------------------------------

    def _wheel_path(self, sha256: str, filename: str) -> Path:
        return self.root / "wheels" / sha256 / filename

    def cached_wheel(self, pick: pip.Pick) -> Path | None:
        if pick.sha256 is None:
            return None
        path = self._wheel_path(pick.sha256, pick.filename)
        return path if path.is_file() else None

    def fetch(self, picks: Sequence[pip.Pick], target: pip.Target, sources: pip.Sources) -> tuple[list[CachedWheel], int]:
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
            tar, installed = self.unpacked(sha, path)
            wheels.append(CachedWheel(p, path, sha, path.stat().st_size, tar, installed))
        return wheels, downloaded

    def _download(self, picks: Sequence[pip.Pick], target: pip.Target, sources: pip.Sources
                  ) -> dict[str, tuple[Path, str]]:
        tmp = Path(tempfile.mkdtemp(prefix="download-", dir=self._dir("tmp")))
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
        d = self._dir("unpacked")
        tar, meta = d / f"{sha256}.tar", d / f"{sha256}.json"
        try:
            return tar, int(json.loads(meta.read_text())["installed_bytes"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        with self.lock("unpack-" + sha256):
            if tar.is_file() and meta.is_file():
                return tar, int(json.loads(meta.read_text())["installed_bytes"])
            fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    installed = wheel_to_tar(wheel, f)
                os.replace(tmp, tar)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            self._write_atomic(meta, json.dumps({"installed_bytes": installed, "wheel": wheel.name}).encode())
            return tar, installed

    def bundle(self, name: str, wheels: Sequence[CachedWheel]) -> Path:
        """One tar of ``wheels`` under the directory ``name`` (made once): what is copied into a sandbox."""
        path = self._dir("bundles") / f"{name}.tar"
        if path.is_file():
            return path
        with self.lock("bundle-" + name):
            if path.is_file():
                return path
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    prefixed_tar([w.tar for w in wheels], name, f)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        return path

    # --- materialised environments of the local backend -----------------------------------------

    def local_env(self, env_hash: str) -> Path:
        return self._dir("envs") / env_hash


__all__ = ["CachedWheel", "PackageCache", "WheelError", "default_root", "sha256_of"]
