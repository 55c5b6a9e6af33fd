"""Moving a snapshot's bytes between a sandbox and the host, bounded, without interpreting them.

Two kinds of bytes cross: the working directory's files, and the pickled
variables the kernel wrote into a staging directory. Both are untrusted.
The host reads archives as a stream, keeps regular files with safe relative
names only (no links, devices, ``..``, absolute paths; counted and sized
against the session's :class:`~sandbox.limits.Limits`), and re-packs them
into a tar of its own (fixed owner and modes). Pickled variables are copied
as opaque blobs whose names must be the 64 hex digits the manifest lists.

Docker sessions move files through the engine's archive API (local socket,
TCP+TLS or SSH alike); local sessions through the host's file system.
"""

from __future__ import annotations

import io
import os
import re
import stat
import tarfile
import tempfile
import time
from collections.abc import Iterator
from typing import IO, Any, Callable, Protocol

from .hostfiles import UnsafePath, check_relative_path

#: The staging directory's name (Docker: under /workspace, left out of the files; local: the private directory).
STAGING = ".codeact-snapshot"
BLOB_NAME = re.compile(r"^[0-9a-f]{64}$")
CHUNK = 1024 * 1024


class TooLarge(Exception):
    """More bytes than the snapshot may hold."""


class Budget:
    """Bytes and files a snapshot may still take."""

    def __init__(self, max_bytes: int, max_files: int) -> None:
        self.max_bytes, self.left, self.files_left = max_bytes, max_bytes, max_files

    def take(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise TooLarge(f"the snapshot is larger than its limit of {self.max_bytes:,} bytes "
                           "(Limits.max_snapshot_bytes)")


class _ChunkReader(io.RawIOBase):
    """A file over an iterator of byte chunks (the engine's archive stream), charged to a budget."""

    def __init__(self, chunks: Iterator[bytes], budget: Budget, slack: int) -> None:
        self._chunks, self._budget, self._slack, self._buf = chunks, budget, slack, b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buf:
            try:
                chunk = next(self._chunks)
            except StopIteration:
                return 0
            self._slack -= len(chunk)  # tar headers and padding: the payload is charged by the caller
            if self._slack < -self._budget.left:
                raise TooLarge(f"the archive is larger than the snapshot's limit of {self._budget.max_bytes:,} bytes")
            self._buf = chunk
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def repack(source: IO[bytes], out: IO[bytes], budget: Budget, *, strip: str = "", skip_prefix: str | None = None,
           skipped: list[tuple[str, str]] | None = None, max_skipped: int = 1000) -> list[tuple[str, int]]:
    """Copy the regular files of the tar stream ``source`` into a new tar on ``out``; return (path, size) of each.

    Names lose the leading ``strip`` directory; those under ``skip_prefix`` are
    left out silently; anything that is not a regular file with a safe relative
    name is left out and listed in ``skipped`` with why.
    """
    kept: list[tuple[str, int]] = []
    now = int(time.time())

    def skip(name: str, why: str) -> None:
        if skipped is not None and len(skipped) < max_skipped:
            skipped.append((name[:300], why))

    with tarfile.open(fileobj=source, mode="r|") as tar_in, \
            tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar_out:
        for member in tar_in:
            name = member.name
            if strip:
                if name == strip or name == strip + "/":
                    continue
                if not name.startswith(strip + "/"):
                    skip(name, "outside the directory")
                    continue
                name = name[len(strip) + 1:]
            name = name.rstrip("/")
            if skip_prefix and (name == skip_prefix or name.startswith(skip_prefix)):
                continue
            if member.isdir():
                continue
            if not member.isreg():
                skip(name, "a link or special file (only regular files are saved)")
                continue
            try:
                check_relative_path(name)
            except UnsafePath as exc:
                skip(name, f"unsafe name: {exc}")
                continue
            budget.files_left -= 1
            if budget.files_left < 0:
                raise TooLarge("the working directory has more files than a snapshot may hold")
            budget.take(member.size)
            data = tar_in.extractfile(member)
            info = tarfile.TarInfo(name)
            info.size, info.mode = member.size, 0o644
            info.mtime = member.mtime if isinstance(member.mtime, (int, float)) and 0 <= member.mtime < 2**33 else now
            info.uid = info.gid = 1000
            tar_out.addfile(info, data)
            kept.append((name, member.size))
    return kept


def blobs_from_tar(source: IO[bytes], wanted: set[str], budget: Budget, write: Callable[[str, IO[bytes], int], None],
                   *, strip: str) -> set[str]:
    """Hand each wanted blob in the tar stream ``source`` to ``write(name, file, size)``; return the names found."""
    found: set[str] = set()
    with tarfile.open(fileobj=source, mode="r|") as tar:
        for member in tar:
            name = member.name
            if not name.startswith(strip + "/"):
                continue
            name = name[len(strip) + 1:]
            if not member.isreg() or name not in wanted or name in found or not BLOB_NAME.fullmatch(name):
                continue
            budget.take(member.size)
            data = tar.extractfile(member)
            assert data is not None
            write(name, data, member.size)
            found.add(name)
    return found


def tar_stream_of_blobs(blobs: list[tuple[str, Callable[[], IO[bytes]], int]], directory: str,
                        uid: int = 1000) -> Iterator[bytes]:
    """A tar of ``directory/`` and its blobs, as chunks made while they are sent (no copy on the host's disk).

    Each blob must have the size given (a shorter or longer one raises
    ``OSError``: the tar would be malformed).
    """
    now = int(time.time())
    info = tarfile.TarInfo(directory)
    info.type, info.mode, info.mtime, info.uid, info.gid = tarfile.DIRTYPE, 0o700, now, uid, uid
    yield info.tobuf(tarfile.PAX_FORMAT)
    for name, opener, size in blobs:
        info = tarfile.TarInfo(f"{directory}/{name}")
        info.size, info.mode, info.mtime, info.uid, info.gid = size, 0o600, now, uid, uid
        yield info.tobuf(tarfile.PAX_FORMAT)
        left = size
        with opener() as f:
            while left:
                chunk = f.read(min(CHUNK, left))
                if not chunk:
                    raise OSError(f"variable data {name[:12]}... is shorter than its {size:,} bytes")
                left -= len(chunk)
                yield chunk
            if f.read(1):
                raise OSError(f"variable data {name[:12]}... is longer than its {size:,} bytes")
        if size % tarfile.BLOCKSIZE:
            yield tarfile.NUL * (tarfile.BLOCKSIZE - size % tarfile.BLOCKSIZE)
    yield tarfile.NUL * (2 * tarfile.BLOCKSIZE)


def coalesce(chunks: Iterator[bytes], size: int) -> Iterator[bytes]:
    """The same bytes in chunks of at least ``size`` (but the last); a chunk that large passes as it is."""
    pending = bytearray()
    for chunk in chunks:
        if not pending and len(chunk) >= size:
            yield chunk
            continue
        pending += chunk
        if len(pending) >= size:
            yield bytes(pending)
            pending = bytearray()
    if pending:
        yield bytes(pending)


class SnapshotFiles(Protocol):
    """A session's files and staging directory, as a snapshot moves them (see :class:`DockerFiles`,
    :class:`LocalFiles`)."""

    #: Where the kernel writes the pickled variables, and reads them back from, as the kernel names it.
    staging: str

    def read_workspace(self, out: IO[bytes], budget: Budget, skipped: list[tuple[str, str]]) -> list[tuple[str, int]]:
        """The working directory's regular files as a tar on ``out``; (path, size) of each kept."""
        ...

    def read_blobs(self, wanted: set[str], budget: Budget, write: Callable[[str, IO[bytes], int], None]) -> set[str]:
        """Hand each wanted blob of the staging directory to ``write``; the names found."""
        ...

    def write_workspace(self, tar: IO[bytes]) -> None:
        """Unpack ``tar`` (checked, re-packed by the host) into the working directory."""
        ...

    def write_blobs(self, blobs: list[tuple[str, Callable[[], IO[bytes]], int]]) -> None:
        """Copy (name, opener, size) blobs into the staging directory."""
        ...


class DockerFiles:
    """A Docker session's files, through the engine's archive API."""

    def __init__(self, kernel: Any, workdir: str) -> None:
        """``kernel``: the session's :class:`~sandbox.container.DockerKernel` (its engine client, container, uid)."""
        self.kernel = kernel
        self.workdir = workdir
        self.staging = f"{self.workdir}/{STAGING}"

    def _stream(self, path: str) -> Iterator[bytes]:
        stream, _ = self.kernel.client.api.get_archive(self.kernel.container_id, path, chunk_size=CHUNK)
        return iter(stream)

    def read_workspace(self, out: IO[bytes], budget: Budget, skipped: list[tuple[str, str]]) -> list[tuple[str, int]]:
        reader = io.BufferedReader(_ChunkReader(self._stream(self.workdir), budget, 64 * CHUNK), CHUNK)
        return repack(reader, out, budget, strip=os.path.basename(self.workdir), skip_prefix=STAGING, skipped=skipped)

    def read_blobs(self, wanted: set[str], budget: Budget, write: Callable[[str, IO[bytes], int], None]) -> set[str]:
        import docker.errors

        if not wanted:
            return set()
        try:
            stream = self._stream(self.staging)
        except docker.errors.NotFound:  # the kernel wrote nothing (its manifest lists what is not there)
            return set()
        reader = io.BufferedReader(_ChunkReader(stream, budget, 64 * CHUNK), CHUNK)
        return blobs_from_tar(reader, wanted, budget, write, strip=STAGING)

    def write_workspace(self, tar: IO[bytes]) -> None:
        if not self.kernel.client.api.put_archive(self.kernel.container_id, self.workdir, tar):
            raise OSError("the engine refused the working directory's files")

    def write_blobs(self, blobs: list[tuple[str, Callable[[], IO[bytes]], int]]) -> None:
        # Streamed (chunked upload): copying 100 MB into a temporary tar first cost as much as sending it.
        # Coalesced: a session of many small variables made thousands of tiny chunks, each a send and a
        # chunk for the engine to decode.
        stream = coalesce(tar_stream_of_blobs(blobs, STAGING, self.kernel.uid), CHUNK)
        if not self.kernel.client.api.put_archive(self.kernel.container_id, self.workdir, stream):
            raise OSError("the engine refused the snapshot's variables")


class LocalFiles:
    """A local session's files, on this machine (its working directory and private directory)."""

    def __init__(self, workdir: str, private: str) -> None:
        """``private``: the session's private directory on this machine (the staging directory goes there)."""
        self.workdir = workdir
        self.staging = os.path.join(private, STAGING)

    def read_workspace(self, out: IO[bytes], budget: Budget, skipped: list[tuple[str, str]]) -> list[tuple[str, int]]:
        with tempfile.TemporaryFile() as spool:
            with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for dirpath, dirnames, filenames in os.walk(self.workdir):
                    dirnames.sort()
                    for fn in sorted(filenames):
                        full = os.path.join(dirpath, fn)
                        rel = os.path.relpath(full, self.workdir).replace(os.sep, "/")
                        try:
                            st = os.lstat(full)
                        except OSError:
                            continue
                        if not stat.S_ISREG(st.st_mode):
                            skipped.append((rel[:300], "a link or special file (only regular files are saved)"))
                            continue
                        if st.st_size > budget.left:
                            budget.take(st.st_size)  # raises: the limit, said once
                        try:
                            fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
                        except OSError as exc:
                            skipped.append((rel[:300], f"unreadable: {exc.strerror}"))
                            continue
                        with os.fdopen(fd, "rb") as f:
                            info = tarfile.TarInfo(rel)
                            info.size, info.mtime, info.mode = os.fstat(f.fileno()).st_size, int(st.st_mtime), 0o644
                            tar.addfile(info, f)
            spool.seek(0)
            return repack(spool, out, budget, skipped=skipped)

    def read_blobs(self, wanted: set[str], budget: Budget, write: Callable[[str, IO[bytes], int], None]) -> set[str]:
        found: set[str] = set()
        for name in sorted(wanted):
            if not BLOB_NAME.fullmatch(name):
                continue
            try:
                fd = os.open(os.path.join(self.staging, name), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            except OSError:
                continue
            with os.fdopen(fd, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                budget.take(size)
                write(name, f, size)
            found.add(name)
        return found

    def write_workspace(self, tar: IO[bytes]) -> None:
        from .hostfiles import write_confined

        with tarfile.open(fileobj=tar, mode="r|") as t:
            for member in t:
                if member.isreg():
                    data = t.extractfile(member)
                    assert data is not None
                    write_confined(self.workdir, member.name, data.read())

    def write_blobs(self, blobs: list[tuple[str, Callable[[], IO[bytes]], int]]) -> None:
        os.makedirs(self.staging, mode=0o700, exist_ok=True)
        for name, opener, _ in blobs:
            with opener() as src, open(os.path.join(self.staging, name), "wb") as dst:
                while chunk := src.read(CHUNK):
                    dst.write(chunk)

