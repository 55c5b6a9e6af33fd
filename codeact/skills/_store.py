"""Where skills live on the host: one ``<name>.py`` file per skill in a directory, stored as text.

A skill is model-written code. The host never imports or runs it: it parses
it (:mod:`ast`, bounded input) to check that it defines the function it is
named after and to read its docstring and parameters, and stores the text.
Only the sandbox runs it (``from skills import name``). Names are plain
identifiers, sizes and counts are capped, and what a skill says is untrusted
text wherever it is shown (the CLI escapes it for the terminal; prompts quote
it as data, :mod:`codeact.skills._prompt`).

Each project has its own store by default: ``<user data dir>/codeact/projects/
<dir name>-<hash of its path>/skills``, where the project is the nearest
directory (from the working directory up) that holds ``.git``, else the
working directory. The store lives outside the project on purpose: a cloned
repository cannot ship skills into your sessions, and the sandbox never
writes there. A store shared by several projects is chosen by giving them the
same directory (``SkillStore(path)``, ``--skills-dir``, ``CODEACT_SKILLS_DIR``).

Example::

    store = SkillStore()                                # this project's skills
    store.save("double", "def double(x):\\n    '''Twice x.'''\\n    return 2 * x\\n")
    [s.name for s in store.list()]                      # ['double']
    store.get("double").summary                         # 'Twice x.'
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import keyword
import os
import re
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from sandbox.pyparse import parse

from ..errors import SkillError
from ._text import clean, first_line, signature_of

#: Largest source of one skill (bytes of UTF-8).
MAX_SKILL_BYTES = 64 * 1024
#: Most skills one directory holds.
MAX_SKILLS = 1000
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


def _data_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("codeact"))


def user_skills_dir() -> Path:
    """``<user data dir>/codeact/skills`` (``~/.local/share/codeact/skills`` on Linux): a store for every
    project, used only when chosen (``SkillStore(user_skills_dir())``, ``--skills-dir``)."""
    return _data_dir() / "skills"


def project_root(start: str | os.PathLike[str] | None = None) -> Path:
    """The project ``start`` (default: the working directory) belongs to: the nearest of it and its parents
    that holds ``.git`` (as git finds a work tree's top), else ``start`` itself; resolved."""
    here = Path(start if start is not None else os.getcwd()).expanduser().resolve()
    for candidate in (here, *here.parents):
        if (candidate / ".git").exists():
            return candidate
    return here


def default_skills_dir(start: str | os.PathLike[str] | None = None) -> Path:
    """The skills directory of the project ``start`` is in (see :func:`project_root`):
    ``<user data dir>/codeact/projects/<its name>-<hash of its path>/skills``."""
    root = project_root(start)
    slug = re.sub(r"[^A-Za-z0-9_.-]", "_", root.name)[:40].lstrip(".") or "root"
    digest = hashlib.sha256(os.fsencode(str(root))).hexdigest()[:16]
    return _data_dir() / "projects" / f"{slug}-{digest}" / "skills"


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
        summary: the first line of its docstring, one clean line ("" without one).
        signature: its parameters, e.g. ``(df, column='revenue')``: plain annotations and
            short literal defaults only (:func:`codeact.skills._text.signature_of`).
        saved: when it was saved (seconds since the epoch).
        error: why it cannot be used (it does not parse, or defines no ``name``), else None.
        docstring: its whole docstring (untrusted text).
    """

    name: str
    source: str
    summary: str = ""
    signature: str = "()"
    saved: float = 0.0
    error: str | None = None
    docstring: str = ""


def _read(name: str, source: str) -> tuple[str, str, str]:
    """``(summary, signature, docstring)`` of the function (or class) ``name`` in ``source``; never runs it."""
    try:
        tree = parse(source, f"<skill {name}>")
    except (SyntaxError, ValueError) as exc:
        raise SkillError(f"skill {name!r} is not valid Python: {exc}") from None
    except (RecursionError, MemoryError):
        raise SkillError(f"skill {name!r} is nested too deeply to read") from None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            doc = ast.get_docstring(node) or ""
            summary = clean(first_line(doc), 200)
            if isinstance(node, ast.ClassDef):
                return summary, "(...)", doc
            try:
                signature = signature_of(node.args)
            except Exception:  # odd trees; the skill is still usable
                signature = "(...)"
            return summary, signature, doc
    raise SkillError(f"the source of skill {name!r} defines no top-level function named {name!r}")


def inspect_source(name: str, source: str) -> tuple[str, str]:
    """``(summary, signature)`` of the function (or class) ``name`` that ``source`` defines; never runs it.

    Raises:
        SkillError: the source does not parse, or does not define ``name`` at the top level.
    """
    summary, signature, _ = _read(name, source)
    return summary, signature


class SkillStore:
    """The skills of a project (or of whoever shares the directory): a directory of ``<name>.py`` files.

    Args:
        path: the directory (created on the first save); default: the store of
            the project the working directory is in (:func:`default_skills_dir`).
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path).expanduser() if path is not None else default_skills_dir()

    @classmethod
    def user(cls) -> "SkillStore":
        """The user-wide store (:func:`user_skills_dir`), shared by every project that chooses it."""
        return cls(user_skills_dir())

    def __repr__(self) -> str:
        return f"SkillStore({str(self.path)!r})"

    def _file(self, name: str) -> Path:
        return self.path / f"{check_name(name)}.py"

    def check(self, name: str, source: object) -> Skill:
        """The skill ``source`` would be, checked but not stored: name, size, that it defines ``name``.

        Raises:
            SkillError: a bad name, a source over :data:`MAX_SKILL_BYTES` or one that does not define ``name``.
        """
        check_name(name)
        if not isinstance(source, str):
            raise SkillError("a skill's source must be text")
        size = len(source.encode("utf-8", "replace"))
        if size > MAX_SKILL_BYTES:
            raise SkillError(f"skill {name!r} is {size:,} bytes; a skill may have at most "
                             f"{MAX_SKILL_BYTES:,} (save the function, not the data it works on)")
        summary, signature, doc = _read(name, source)
        return Skill(name, source, summary, signature, 0.0, None, doc)

    def current_source(self, name: str) -> str | None:
        """The text stored under ``name`` now (even if it cannot be used), or None when there is none."""
        path = self._file(name)
        try:
            if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_SKILL_BYTES:
                return None if not path.exists() else ""
            return path.read_bytes().decode("utf-8", "replace")
        except OSError:
            return None

    def save(self, name: str, source: str, *, replacing: str | None | bool = True) -> Skill:
        """Store ``source`` as skill ``name``; returns it.

        Args:
            replacing: ``True`` replaces whatever is there; otherwise the save
                happens only if what is stored now is exactly this text (None:
                nothing), so an approval given for one version never replaces another.

        Raises:
            SkillError: a bad name, a source over :data:`MAX_SKILL_BYTES`, one
                that does not define ``name``, a full directory, a name that
                differs only in case from another skill's, or (``replacing``)
                a skill that changed since it was read.
        """
        skill = self.check(name, source)
        clash = [n for n in self._names() if n.lower() == name.lower() and n != name]
        if clash:
            raise SkillError(f"skill {clash[0]!r} already exists; a name that differs only in case "
                             f"({name!r}) would be the same file on some systems: choose another name")
        target = self._file(name)
        if replacing is not True and self.current_source(name) != replacing:
            raise SkillError(f"skill {name!r} changed while the save waited for approval; not saved "
                             "(save it again to see the new version)")
        if not target.exists() and len(self._names()) >= MAX_SKILLS:
            raise SkillError(f"{self.path} already holds {MAX_SKILLS} skills; remove some first "
                             "(codeact skills rm NAME)")
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}-", suffix=".tmp", dir=self.path)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(source.encode("utf-8", "replace"))
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return replace(skill, saved=time.time())

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
            summary, signature, doc = _read(name, source)
        except SkillError as exc:
            return Skill(name, source, saved=path.stat().st_mtime, error=str(exc))
        return Skill(name, source, summary, signature, path.stat().st_mtime, None, doc)

    # builtins.list: inside this class, a bare `list` is the method below.
    def list(self) -> builtins.list[Skill]:
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

    def _names(self) -> builtins.list[str]:
        try:
            files = sorted(p.name for p in self.path.iterdir())
        except OSError:
            return []
        names = [f[:-3] for f in files if f.endswith(".py")]
        return [n for n in names if _NAME.match(n) and not keyword.iskeyword(n)]
