"""Writing files that the sandbox named, on the host, without letting it choose where.

A file name that comes from a sandbox is an attacker's input: ``../../x``,
``/etc/x``, ``a/../../x``, names with control or bidi characters, a directory
that is a symbolic link. :func:`check_relative_path` accepts only plain
relative paths; :func:`write_confined` writes below a root directory the
sandbox cannot write, creating directories and the file without following
links, through a temporary file synced and renamed into place (atomic, never
truncating through a link; a full disk leaves no partial file, and raises
:class:`HostDiskFull`).

Example::

    from sandbox.hostfiles import write_confined
    write_confined(out_dir, "plots/p.png", data)     # out_dir/plots/p.png
    write_confined(out_dir, "../x", data)            # UnsafePath
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import unicodedata
from pathlib import Path, PurePosixPath

from .errors import FileTransferError

#: Longest accepted path (characters) and component, and deepest nesting.
MAX_PATH = 1024
MAX_COMPONENT = 255
MAX_DEPTH = 32


class UnsafePath(FileTransferError):
    """A path from the sandbox that may not be used on the host (the message says why)."""


class HostDiskFull(FileTransferError):
    """The host's file system had no room for a file (nothing half-written is left behind)."""


def _bad_char(ch: str) -> bool:
    # Control characters (C0, DEL, C1) and format characters (bidi overrides, zero-width...).
    return unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn") or ch == "\\"


def check_relative_path(path: object) -> PurePosixPath:
    """``path`` as a plain relative POSIX path, or :class:`UnsafePath`.

    Refused: non-strings, empty or over-long paths, absolute paths, ``.`` and
    ``..`` components, empty components, backslashes, and control, format
    (bidi) or unassigned characters.
    """
    if not isinstance(path, str):
        raise UnsafePath(f"a file name must be a string, not {type(path).__name__}")
    if not path or len(path) > MAX_PATH:
        raise UnsafePath("a file name must have 1 to %d characters" % MAX_PATH)
    if "\x00" in path or any(_bad_char(ch) for ch in path):
        raise UnsafePath(f"the file name {ascii(path)[:200]} contains control or invisible characters")
    if path.startswith("/"):
        raise UnsafePath(f"the file name {path[:200]!r} is absolute")
    parts = path.split("/")
    if len(parts) > MAX_DEPTH:
        raise UnsafePath(f"the file name {path[:200]!r} is nested deeper than {MAX_DEPTH} directories")
    for part in parts:
        if part in ("", ".", ".."):
            raise UnsafePath(f"the file name {path[:200]!r} has an empty, '.' or '..' component")
        if len(part.encode("utf-8", "surrogatepass")) > MAX_COMPONENT:
            raise UnsafePath(f"a component of {path[:200]!r} is longer than {MAX_COMPONENT} bytes")
    return PurePosixPath(path)


def _open_dir_nofollow(parent_fd: int, name: str, create: bool) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(name, flags, dir_fd=parent_fd)
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=parent_fd)
    return os.open(name, flags, dir_fd=parent_fd)


def write_confined(root: str | os.PathLike[str], rel: str, data: bytes, *, mode: int = 0o644) -> Path:
    """Write ``data`` to ``root/rel`` (see module docs); returns the path written.

    ``root`` must exist and belong to the host (never a directory the sandbox
    can write). Each directory on the way is opened with ``O_NOFOLLOW`` relative
    to its parent, so a symbolic link anywhere below ``root`` is refused rather
    than followed; the file is created exclusively under a temporary name and
    renamed over the target (a link at the target is replaced, not followed).
    """
    relpath = check_relative_path(rel)
    root_path = Path(root)
    dir_fd = os.open(root_path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        for part in relpath.parts[:-1]:
            try:
                next_fd = _open_dir_nofollow(dir_fd, part, create=True)
            except OSError as exc:
                raise UnsafePath(f"cannot create directory {part!r} for {rel!r}: {exc.strerror}") from None
            os.close(dir_fd)
            dir_fd = next_fd
        name = relpath.name
        try:
            existing = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(existing.st_mode):
                raise UnsafePath(f"{rel!r} is a directory on the host")
        except FileNotFoundError:
            pass
        tmp = f".{name[:200]}.{secrets.token_hex(6)}.part"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                     mode, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                # On disk before the rename: a full disk or a crash leaves the old file or none, never half.
                os.fsync(f.fileno())
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise HostDiskFull(f"the host's disk is full: {rel} ({len(data):,} bytes) was not saved in "
                                   f"{root_path}; free some space there or choose another output directory") from None
            raise
    finally:
        os.close(dir_fd)
    return root_path.joinpath(*relpath.parts)


def read_confined(root: str | os.PathLike[str], rel: str, *, max_bytes: int | None = None) -> bytes:
    """Read ``root/rel`` without following links below ``root``; refuse more than ``max_bytes``."""
    relpath = check_relative_path(rel)
    dir_fd = os.open(Path(root), os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        for part in relpath.parts[:-1]:
            next_fd = _open_dir_nofollow(dir_fd, part, create=False)
            os.close(dir_fd)
            dir_fd = next_fd
        fd = os.open(relpath.name, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=dir_fd)
    except OSError as exc:
        raise FileTransferError(f"no such file in the sandbox: {rel} ({exc.strerror})") from None
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise FileTransferError(f"{rel} is not a regular file")
        if max_bytes is not None and st.st_size > max_bytes:
            raise FileTransferError(f"{rel} is {st.st_size:,} bytes, more than the limit of {max_bytes:,}")
        data = f.read(max_bytes + 1 if max_bytes is not None else -1)
        if max_bytes is not None and len(data) > max_bytes:
            raise FileTransferError(f"{rel} grew beyond the limit of {max_bytes:,} bytes while being read")
        return data
