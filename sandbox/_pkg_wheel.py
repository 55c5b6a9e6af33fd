"""Unpack a wheel without running anything from it: a zip becomes a tar of checked paths.

Installing a wheel (PEP 427) is copying files: the ``purelib``/``platlib``
parts of its ``.data`` directory go to the top, everything else stays where
it is. Scripts, headers and ``data`` files are left out: the sandbox runs no
console scripts and builds nothing. Every name is checked (relative, no
``..``, no links, no odd characters) because a wheel is a file from the
internet; the tar this produces is what goes into a sandbox, or into the
image, and nothing else ever reads the zip.

Tars hold paths relative to the install directory, owner root, modes 0644
(0755 for directories and files marked executable), a fixed mtime: the
sandbox's user can read them and change nothing.

A bundle's bytecode (:func:`bytecode_tar`) is a second tar, made from what
the sandbox image's own ``compileall`` wrote in a helper container: only
``.pyc`` files of the bundle's own ``.py`` files are kept, under
``.bytecode/<bundle>/``, and each package directory gets a ``__pycache__``
symlink to its part, after its files. Extracted into a live session, a
directory's bytecode therefore appears whole or not at all (a half-written
``.pyc`` that an import read would fail it, not merely slow it).
"""

from __future__ import annotations

import io
import os
import re
import stat
import tarfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

#: Every file of every tar gets this mtime: the same wheel gives the same bytes.
FIXED_MTIME = 1_600_000_000
#: Bounds on one wheel: more entries or bytes than this is not a Python package.
MAX_ENTRIES = 200_000
MAX_UNPACKED_BYTES = 4 * 1024**3
#: Where a bundle's bytecode lives, next to the bundles in the package directory (not importable: a dot).
BYTECODE_DIR = ".bytecode"
#: The largest .pyc kept: a module's bytecode is rarely over a few MB.
MAX_PYC_BYTES = 256 * 1024**2
#: What compileall names a module's bytecode: <stem>.<implementation>-<version>.pyc (no optimisation level).
_PYC_NAME = re.compile(r"^(?P<stem>.+)\.(?P<tag>[a-z]+-[0-9]{2,4})\.pyc$")
#: A tmpfs keeps every file in whole pages: what a file of n bytes takes.
_PAGE = 4096

_WHEEL_NAME = re.compile(
    r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?)-(?P<version>[A-Za-z0-9_.!+]+)"
    r"(?:-(?P<build>\d[A-Za-z0-9_.]*))?-(?P<tags>[A-Za-z0-9_.]+-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+)\.whl$")
_SAFE_PART = re.compile(r"^[A-Za-z0-9_.+@~=,%-][A-Za-z0-9 _.+@~=,%#!()\[\]{}'&$-]*$")


class WheelError(Exception):
    """A wheel that cannot be installed safely (bad name, bad entry, too big, not a zip)."""


@dataclass(frozen=True)
class WheelName:
    """The parts of a wheel's file name."""

    name: str
    version: str
    tags: str

    @classmethod
    def parse(cls, filename: str) -> WheelName:
        m = _WHEEL_NAME.match(filename)
        if not m:
            raise WheelError(f"{filename!r} is not a wheel file name")
        return cls(m["name"], m["version"], m["tags"])


def _target(name: str, data_dir: str) -> str | None:
    """Where a zip entry goes, relative to the install directory; None to leave it out."""
    if not name or "\\" in name or "\x00" in name or name.startswith("/") or len(name) > 1024:
        raise WheelError(f"unsafe entry name {name!r}")
    parts = tuple(name.split("/"))  # not PurePosixPath: it would quietly drop "." parts
    for part in parts:
        if part in ("", ".", "..") or not _SAFE_PART.match(part):
            raise WheelError(f"unsafe entry name {name!r}")
    if parts[0] == data_dir:
        if len(parts) < 3:
            return None
        if parts[1] in ("purelib", "platlib"):
            parts = parts[2:]
        else:
            return None  # scripts, headers, data: not needed to import the package
    return "/".join(parts)


def wheel_to_tar(wheel: Path, out: IO[bytes]) -> int:
    """Write the installed form of ``wheel`` to ``out`` as a tar; return the installed bytes."""
    parsed = WheelName.parse(wheel.name)
    data_dir = f"{parsed.name}-{parsed.version}.data"
    total = 0
    try:
        zf = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise WheelError(f"{wheel.name} is not a valid wheel: {exc}") from None
    with zf, tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        infos = zf.infolist()
        if len(infos) > MAX_ENTRIES:
            raise WheelError(f"{wheel.name} has {len(infos):,} entries")
        dirs: set[str] = set()
        seen: set[str] = set()
        dist_info = None
        for info in infos:
            if info.is_dir():
                continue
            mode = (info.external_attr >> 16) & 0xFFFF
            if mode and stat.S_IFMT(mode) not in (0, stat.S_IFREG):
                raise WheelError(f"{wheel.name}: {info.filename!r} is not a regular file (a link?)")
            target = _target(info.filename, data_dir)
            if target is None or target in seen:
                continue
            seen.add(target)
            total += info.file_size
            if total > MAX_UNPACKED_BYTES:
                raise WheelError(f"{wheel.name} unpacks to more than {MAX_UNPACKED_BYTES:,} bytes")
            top = target.split("/", 1)[0]
            if top.endswith(".dist-info") and dist_info is None:
                dist_info = top
            _add_dirs(tar, target, dirs)
            entry = tarfile.TarInfo(target)
            entry.size = info.file_size
            entry.mode = 0o755 if mode & 0o111 else 0o644
            entry.mtime = FIXED_MTIME
            with zf.open(info) as src:
                tar.addfile(entry, src)  # zipfile checks the size and CRC as it reads
        if dist_info is None:
            raise WheelError(f"{wheel.name} has no .dist-info directory")
        marker = f"{dist_info}/INSTALLER"
        if marker not in seen:
            payload = b"codeact\n"
            entry = tarfile.TarInfo(marker)
            entry.size, entry.mode, entry.mtime = len(payload), 0o644, FIXED_MTIME
            tar.addfile(entry, io.BytesIO(payload))
    return total


def _add_dirs(tar: tarfile.TarFile, target: str, dirs: set[str]) -> None:
    parts = target.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = "/".join(parts[:i])
        if d not in dirs:
            dirs.add(d)
            entry = tarfile.TarInfo(d)
            entry.type, entry.mode, entry.mtime = tarfile.DIRTYPE, 0o755, FIXED_MTIME
            tar.addfile(entry)


def prefixed_tar(parts: Iterable[Path], prefix: str, out: IO[bytes]) -> None:
    """Concatenate unpacked-wheel tars into one tar whose entries sit under ``prefix/`` (a new directory).

    Later wheels do not replace files of earlier ones (two distributions
    claiming one file is their bug; the first wins, as the image's order is
    the resolver's).
    """
    seen: set[str] = set()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        root = tarfile.TarInfo(prefix)
        root.type, root.mode, root.mtime = tarfile.DIRTYPE, 0o755, FIXED_MTIME
        tar.addfile(root)
        for part in parts:
            with tarfile.open(part, mode="r:") as src:
                for member in src:
                    name = f"{prefix}/{member.name}"
                    if name in seen:
                        continue
                    seen.add(name)
                    # A fresh header: the old one's PAX "path" record (long names) would win over a new name.
                    entry = tarfile.TarInfo(name)
                    entry.mode, entry.mtime = member.mode & 0o755, member.mtime
                    if member.isdir():
                        entry.type = tarfile.DIRTYPE
                        tar.addfile(entry)
                    elif member.isfile():
                        entry.size = member.size
                        tar.addfile(entry, src.extractfile(member))


def extract_tar(part: Path, directory: Path) -> None:
    """Unpack one unpacked-wheel tar into ``directory`` (host side: the local backend, the image build)."""
    with tarfile.open(part, mode="r:") as src:
        src.extractall(directory, filter="data")


def safe_filename(name: str) -> bool:
    """True for a plain file name (no directory part, nothing odd) — names pip or an index chose."""
    return bool(name) and name == os.path.basename(name) and _SAFE_PART.match(name) is not None \
        and name not in (".", "..") and len(name) <= 255


def bundle_sources(bundle: Path, name: str) -> tuple[set[str], set[str]]:
    """The ``.py`` files of the bundle tar ``bundle`` (paths below ``name/``) and the directories that already
    have a ``__pycache__`` of their own (a wheel that ships bytecode keeps it)."""
    sources: set[str] = set()
    shipped: set[str] = set()
    top = name + "/"
    with tarfile.open(bundle, mode="r:") as tar:
        for member in tar:
            if not member.name.startswith(top):
                continue
            rel = member.name[len(top):]
            parts = rel.split("/")
            if "__pycache__" in parts:
                shipped.add("/".join(parts[:parts.index("__pycache__")]))
            elif member.isfile() and rel.endswith(".py"):
                sources.add(rel)
    return sources, shipped


def bytecode_tar(compiled: Path, compiled_root: str, bundle: Path, name: str, out: IO[bytes]) -> int:
    """Write the bytecode tar of the bundle ``name`` from ``compiled``; return the bytes it takes in a tmpfs.

    ``compiled`` is a tar whose ``.pyc`` files sit under ``compiled_root/name/``
    as ``compileall`` wrote them with a ``pycache_prefix``. Treated as untrusted:
    only regular files named for a ``.py`` of ``bundle`` are taken, bounded,
    with fresh headers (owner root, 0644, the fixed mtime); everything else
    (links, other names, directories that ship their own bytecode) is left out.
    The result holds ``.bytecode/name/<dir>/__pycache__/<file>.pyc`` and, last,
    a symlink ``name/<dir>/__pycache__`` to each such directory.
    """
    sources, shipped = bundle_sources(bundle, name)
    top = f"{compiled_root}/{name}/"
    store = f"{BYTECODE_DIR}/{name}"
    dirs: set[str] = set()
    linked: list[str] = []
    total = entries = 0
    with tarfile.open(compiled, mode="r:") as src, \
            tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in src:
            entries += 1
            if entries > MAX_ENTRIES:
                raise WheelError(f"the compiled bytecode of {name} has more than {MAX_ENTRIES:,} entries")
            if not member.isfile() or not member.name.startswith(top):
                continue
            rel = member.name[len(top):]
            directory, _, filename = rel.rpartition("/")
            m = _PYC_NAME.match(filename)
            if m is None or directory in shipped or f"{directory}/{m['stem']}.py".lstrip("/") not in sources:
                continue
            if member.size > MAX_PYC_BYTES or total + member.size > MAX_UNPACKED_BYTES:
                raise WheelError(f"the compiled bytecode of {name} is too large")
            cache_dir = f"{store}/{directory}/__pycache__" if directory else f"{store}/__pycache__"
            if cache_dir not in dirs:
                linked.append(directory)
                total += _PAGE
            _add_dirs(tar, f"{cache_dir}/{filename}", dirs)  # the file's directories, each once
            entry = tarfile.TarInfo(f"{cache_dir}/{filename}")
            entry.size, entry.mode, entry.mtime = member.size, 0o644, FIXED_MTIME
            tar.addfile(entry, src.extractfile(member))
            total += -(-member.size // _PAGE) * _PAGE
        for directory in linked:  # after every file: a directory's bytecode appears whole
            where = f"{name}/{directory}" if directory else name
            link = tarfile.TarInfo(f"{where}/__pycache__")
            link.type, link.mode, link.mtime = tarfile.SYMTYPE, 0o777, FIXED_MTIME
            up = "../" * len(where.split("/"))
            link.linkname = f"{up}{store}/{directory}/__pycache__" if directory else f"{up}{store}/__pycache__"
            tar.addfile(link)
    return total


def tar_bytes(path: Path) -> int:
    """The bytes a tar's files take in a tmpfs (whole pages), from its headers."""
    total = 0
    with tarfile.open(path, mode="r:") as tar:
        for member in tar:
            total += -(-member.size // _PAGE) * _PAGE if member.isfile() else _PAGE if member.isdir() else 0
    return total
