"""The manifest of a snapshot: what the kernel says it saved, validated before the host keeps a word of it.

The kernel writes it, so it is attacker input: its size, its nesting, the
type of every field, the count of every list are checked, strings are
bounded and made printable (control and bidi characters escaped), names
must be identifiers, blob names 64 hex digits, and references between
variables must name variables of the same manifest. A manifest that breaks
any rule is refused as a whole (:class:`ManifestError`); nothing in it is
ever executed or imported.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

#: Bounds on what the host accepts.
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
MAX_VARIABLES = 100_000
MAX_FILES = 100_000
MAX_TEXT = 500
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class ManifestError(ValueError):
    """The manifest is malformed or breaks a bound."""


def printable(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut to ``limit`` characters, with every non-printable character (controls, bidi) escaped."""
    text = text[:limit]
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


@dataclass(frozen=True)
class VariableInfo:
    """One variable of the session, as the snapshot holds it.

    ``saved`` variables have a ``blob`` (the sha256 of their pickle, ``nbytes``
    long) and ``refs`` (other variables they refer to, restored first);
    the others have the ``reason`` they could not be saved (an open file, a
    generator, a socket, a pickling error). ``type`` is ``module.QualName``
    and ``size`` is ``sys.getsizeof`` in the sandbox (shallow), both as the
    sandbox reported them.
    """

    name: str
    type: str
    size: int
    saved: bool
    reason: str = ""
    blob: str = ""
    nbytes: int = 0
    refs: tuple[str, ...] = ()
    #: Carried over from the snapshot this one was made ``since`` (not pickled or copied again).
    reused: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "size": self.size, "saved": self.saved}
        if self.saved:
            out.update(blob=self.blob, bytes=self.nbytes, refs=list(self.refs), reused=self.reused)
        else:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class Manifest:
    """What a snapshot holds: variables (in restore order), files, the working directory."""

    variables: tuple[VariableInfo, ...]
    cwd: str
    python: str
    pickler: str
    #: The sandbox's digest of its working directory (names, sizes, times) when it was saved.
    files_digest: str
    #: (path, size) of each file kept, and (path, why) of each left out.
    files: tuple[tuple[str, int], ...] = ()
    skipped_files: tuple[tuple[str, str], ...] = ()

    @property
    def saved(self) -> tuple[VariableInfo, ...]:
        return tuple(v for v in self.variables if v.saved)

    @property
    def unsaved(self) -> tuple[VariableInfo, ...]:
        return tuple(v for v in self.variables if not v.saved)

    def blobs(self) -> set[str]:
        return {v.blob for v in self.variables if v.saved}

    def to_json(self) -> dict[str, Any]:
        return {"variables": [v.to_json() for v in self.variables], "cwd": self.cwd, "python": self.python,
                "pickler": self.pickler, "files_digest": self.files_digest,
                "files": [list(f) for f in self.files], "skipped_files": [list(f) for f in self.skipped_files]}

    def describe(self) -> str:
        """A few lines for people: counts, then each variable that was not saved and why (escaped)."""
        lines = [f"{len(self.saved)} variables saved, {len(self.unsaved)} not; {len(self.files)} files"
                 + (f" ({len(self.skipped_files)} left out)" if self.skipped_files else "")]
        for v in self.unsaved[:50]:
            lines.append(f"  not saved: {v.name} ({v.type}): {v.reason}")
        for path, why in self.skipped_files[:20]:
            lines.append(f"  file left out: {path}: {why}")
        return "\n".join(lines)


def _text(value: Any, what: str, limit: int = MAX_TEXT) -> str:
    if type(value) is not str:
        raise ManifestError(f"{what} is not a string")
    return printable(value, limit)


def _int(value: Any, what: str) -> int:
    if type(value) is not int or not 0 <= value < 2**63:
        raise ManifestError(f"{what} is not a size")
    return value


def _name(value: Any, what: str) -> str:
    if type(value) is not str or not value.isidentifier() or len(value) > 200 or not value.isascii() \
            and not value.isprintable():
        raise ManifestError(f"{what} is not a variable name")
    return value


def parse_json(text: str | bytes, max_bytes: int = MAX_MANIFEST_BYTES) -> Any:
    """JSON of at most ``max_bytes``; nesting beyond the parser's recursion limit is refused, not raised."""
    if len(text) > max_bytes:
        raise ManifestError(f"the manifest is larger than {max_bytes:,} bytes")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ManifestError(f"the manifest is not JSON ({type(exc).__name__})") from None


def validate(raw: Any, *, files: tuple[tuple[str, int], ...] = (), skipped_files: tuple[tuple[str, str], ...] = (),
             from_kernel: bool = True) -> Manifest:
    """A :class:`Manifest` from decoded JSON ``raw`` (from the kernel, or from a snapshot file), or ManifestError.

    ``files`` and ``skipped_files`` are what the host itself found when it
    copied the files (a snapshot file carries them in ``raw`` instead).
    """
    if not isinstance(raw, dict):
        raise ManifestError("the manifest is not an object")
    rows = raw.get("variables")
    if not isinstance(rows, list) or len(rows) > MAX_VARIABLES:
        raise ManifestError(f"the manifest's variables are not a list of at most {MAX_VARIABLES:,}")
    variables: list[VariableInfo] = []
    seen: set[str] = set()
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ManifestError(f"variable {i} is not an object")
        name = _name(row.get("name"), f"variable {i}'s name")
        if name in seen:
            raise ManifestError(f"variable {name} is listed twice")
        seen.add(name)
        saved = row.get("saved")
        if type(saved) is not bool:
            raise ManifestError(f"variable {name}: 'saved' is not true or false")
        kind = _text(row.get("type"), f"variable {name}'s type", 300)
        size = _int(row.get("size", 0), f"variable {name}'s size")
        if saved:
            blob = row.get("blob")
            if type(blob) is not str or not _HEX64.fullmatch(blob):
                raise ManifestError(f"variable {name}'s blob is not a sha256")
            refs = row.get("refs", [])
            if not isinstance(refs, list) or len(refs) > MAX_VARIABLES:
                raise ManifestError(f"variable {name}'s references are not a list")
            refs_t = tuple(_name(r, f"a reference of {name}") for r in refs)
            for ref in refs_t:  # restore order: what a variable refers to comes before it
                if ref not in seen or ref == name:
                    raise ManifestError(f"variable {name} refers to {ref}, which is not saved before it")
            reused = row.get("reused", False)
            variables.append(VariableInfo(name, kind, size, True, "", blob, _int(row.get("bytes", 0), "bytes"),
                                          refs_t, reused is True))
        else:
            variables.append(VariableInfo(name, kind, size, False, _text(row.get("reason", ""), "a reason")))
    saved_names = {v.name for v in variables if v.saved}
    for v in variables:
        if any(r not in saved_names for r in v.refs):
            raise ManifestError(f"variable {v.name} refers to a variable that was not saved")
    cwd = _text(raw.get("cwd", ""), "the working directory", 4096)
    digest = raw.get("files_digest" if not from_kernel else "files", "")
    if type(digest) is not str or not (digest == "" or re.fullmatch(r"[0-9a-f]{64}", digest)):
        raise ManifestError("the files' digest is not a sha256")
    if not from_kernel:
        files = tuple(_file_row(f) for f in _bounded_list(raw.get("files", []), "files"))
        skipped_files = tuple((_text(p, "a file name", 300), _text(w, "a reason"))
                              for p, w in (_pair(f) for f in _bounded_list(raw.get("skipped_files", []), "files")))
    return Manifest(tuple(variables), cwd, _text(raw.get("python", ""), "python", 50),
                    _text(raw.get("pickler", ""), "pickler", 100), digest, files, skipped_files)


def _bounded_list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list) or len(value) > MAX_FILES:
        raise ManifestError(f"the manifest's {what} are not a list of at most {MAX_FILES:,}")
    return value


def _pair(value: Any) -> tuple[Any, Any]:
    if not isinstance(value, list) or len(value) != 2:
        raise ManifestError("a file entry is not a pair")
    return value[0], value[1]


def _file_row(value: Any) -> tuple[str, int]:
    path, size = _pair(value)
    from .hostfiles import UnsafePath, check_relative_path

    if type(path) is not str:
        raise ManifestError("a file name is not a string")
    try:
        check_relative_path(path)
    except UnsafePath:
        raise ManifestError(f"a file name is unsafe: {printable(path, 200)}") from None
    return path, _int(size, "a file's size")
