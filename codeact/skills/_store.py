"""Where skills live on the host: one ``<name>.py`` file per skill in a directory, stored as text.

A skill is model-written code. The host never imports or runs it: it parses
it (:mod:`ast`, bounded input) to check that it defines the function it is
named after and to read its docstring and parameters, and stores the text.
Only the sandbox runs it (``from skills import name``). Names are plain
identifiers, sizes and counts are capped, and what a skill says is untrusted
text wherever it is shown (the CLI escapes it for the terminal).

Example::

    store = SkillStore("./.codeact/skills")            # a project's skills
    store.save("double", "def double(x):\\n    '''Twice x.'''\\n    return 2 * x\\n")
    [s.name for s in store.list()]                      # ['double']
    store.get("double").summary                         # 'Twice x.'
"""

from __future__ import annotations

import ast
import keyword
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import SkillError

#: Largest source of one skill (bytes of UTF-8).
MAX_SKILL_BYTES = 64 * 1024
#: Most skills one directory holds.
MAX_SKILLS = 1000
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


def default_skills_dir() -> Path:
    """``<user data dir>/codeact/skills`` (e.g. ``~/.local/share/codeact/skills`` on Linux)."""
    import platformdirs

    return Path(platformdirs.user_data_dir("codeact")) / "skills"


def check_name(name: object) -> str:
    """``name`` if it can name a skill (an identifier of up to 64 characters, not private, not a keyword).

    Raises:
        SkillError: saying what a name must look like.
    """
    if not isinstance(name, str) or not _NAME.match(name) or keyword.iskeyword(name):
        shown = repr(name)[:80]
        raise SkillError(f"{shown} cannot name a skill: use a Python identifier of up to 64 characters that "
                         "starts with a letter (the name you import: from skills import name)")
    return name


@dataclass(frozen=True)
class Skill:
    """One stored skill.

    Attributes:
        name: what ``from skills import name`` imports.
        source: its Python source (untrusted text).
        summary: the first line of its docstring ("" without one).
        signature: its parameters as written, e.g. ``(df, column='revenue')``.
        saved: when it was saved (seconds since the epoch).
        error: why it cannot be used (it does not parse, or defines no ``name``), else None.
    """

    name: str
    source: str
    summary: str = ""
    signature: str = "()"
    saved: float = 0.0
    error: str | None = None


def inspect_source(name: str, source: str) -> tuple[str, str]:
    """``(summary, signature)`` of the function (or class) ``name`` that ``source`` defines; never runs it.

    Raises:
        SkillError: the source does not parse, or does not define ``name`` at the top level.
    """
    try:
        tree = ast.parse(source, filename=f"<skill {name}>")
    except (SyntaxError, ValueError) as exc:
        raise SkillError(f"skill {name!r} is not valid Python: {exc}") from None
    except (RecursionError, MemoryError):
        raise SkillError(f"skill {name!r} is nested too deeply to read") from None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            doc = ast.get_docstring(node) or ""
            summary = next((ln.strip() for ln in doc.splitlines() if ln.strip()), "")[:200]
            if isinstance(node, ast.ClassDef):
                return summary, "(...)"
            try:
                signature = f"({ast.unparse(node.args)})"
            except Exception:  # noqa: BLE001 - unparse of odd trees; the skill is still usable
                signature = "(...)"
            return summary, signature[:300]
    raise SkillError(f"the source of skill {name!r} defines no top-level function named {name!r}")


class SkillStore:
    """The skills of a user or a project: a directory of ``<name>.py`` files.

    Args:
        path: the directory (created on the first save); default
            :func:`default_skills_dir`. Give each project its own to keep
            their skills apart.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path).expanduser() if path is not None else default_skills_dir()

    def __repr__(self) -> str:
        return f"SkillStore({str(self.path)!r})"

    def _file(self, name: str) -> Path:
        return self.path / f"{check_name(name)}.py"

    def save(self, name: str, source: str) -> Skill:
        """Store ``source`` as skill ``name`` (replacing one of that name); returns it.

        Raises:
            SkillError: a bad name, a source over :data:`MAX_SKILL_BYTES`, one
                that does not define ``name``, or a full directory.
        """
        check_name(name)
        if not isinstance(source, str):
            raise SkillError("a skill's source must be text")
        data = source.encode("utf-8", "replace")
        if len(data) > MAX_SKILL_BYTES:
            raise SkillError(f"skill {name!r} is {len(data):,} bytes; a skill may have at most "
                             f"{MAX_SKILL_BYTES:,} (save the function, not the data it works on)")
        summary, signature = inspect_source(name, source)
        target = self._file(name)
        if not target.exists() and len(self._names()) >= MAX_SKILLS:
            raise SkillError(f"{self.path} already holds {MAX_SKILLS} skills; remove some first "
                             "(codeact skills rm NAME)")
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}-", suffix=".tmp", dir=self.path)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return Skill(name, source, summary, signature, time.time())

    def get(self, name: str) -> Skill:
        """The skill ``name`` (with ``error`` set when it cannot be used).

        Raises:
            SkillError: a bad name, or no such skill (the message lists close ones).
        """
        path = self._file(name)
        try:
            size = path.lstat().st_size
            if not path.is_file() or path.is_symlink():
                raise FileNotFoundError(path)
        except OSError:
            known = self._names()
            import difflib

            close = difflib.get_close_matches(name, known, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else (
                f"; the skills are: {', '.join(known[:20])}" if known else "; there are no skills yet")
            raise SkillError(f"no skill named {name!r} in {self.path}{hint}") from None
        if size > MAX_SKILL_BYTES:
            return Skill(name, "", saved=path.stat().st_mtime,
                         error=f"{size:,} bytes, over the limit of {MAX_SKILL_BYTES:,}")
        source = path.read_bytes().decode("utf-8", "replace")
        try:
            summary, signature = inspect_source(name, source)
        except SkillError as exc:
            return Skill(name, source, saved=path.stat().st_mtime, error=str(exc))
        return Skill(name, source, summary, signature, path.stat().st_mtime)

    def list(self) -> list[Skill]:
        """Every skill, by name (broken ones too, with ``error`` set)."""
        out = []
        for name in self._names():
            try:
                out.append(self.get(name))
            except SkillError:  # removed meanwhile
                continue
        return out

    def remove(self, name: str) -> None:
        """Delete skill ``name``.

        Raises:
            SkillError: no such skill.
        """
        self.get(name)
        self._file(name).unlink(missing_ok=True)

    def _names(self) -> list[str]:
        try:
            files = sorted(p.name for p in self.path.iterdir())
        except OSError:
            return []
        names = [f[:-3] for f in files if f.endswith(".py")]
        return [n for n in names if _NAME.match(n) and not keyword.iskeyword(n)]
