"""The system prompt: a template file, the tool stubs and the files a run was given.

Text that came from data rather than from the user's own words (a file's
name and first line, a skill's docstring) reaches the prompt through
:func:`one_line`: one line, no control or invisible formatting characters, no
code fence, bounded; and quoted where it is shown.
"""

from __future__ import annotations

import re
import string
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .prompts import load_prompt
from .tools import Tool


_DROP = {"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"}
_FENCE = re.compile(r"`{3,}|~{3,}")
_SPACE = re.compile(r"\s+")


def one_line(text: object, limit: int) -> str:
    """``text`` as one line of at most ``limit`` characters, safe to quote in a prompt.

    Control, format (bidi, zero-width), private-use and line/paragraph separator
    characters become spaces, a run of backticks or tildes one character (no
    fence can open or close), whitespace one space; cut with ``…``.
    """
    s = "".join(" " if unicodedata.category(c) in _DROP else c for c in str(text)[: limit * 4 + 16])
    s = _FENCE.sub(lambda m: m.group(0)[0], s)
    s = _SPACE.sub(" ", s).strip()
    return s if len(s) <= limit else s[: max(limit - 1, 0)].rstrip() + "…"


def load_template(path: str | Path | None = None) -> str:
    """The template text: ``path`` if given, else the shipped ``codeact`` prompt (its version marker removed)."""
    if path is not None:
        return Path(path).read_text(encoding="utf-8")
    return load_prompt("codeact").text


@dataclass(frozen=True)
class FileDescription:
    """A file given to a run, as the model is told about it."""

    name: str
    size: int
    preview: str = ""  # a CSV's header line, a text file's first line

    @classmethod
    def of(cls, path: Path, name: str | None = None) -> "FileDescription":
        preview = ""
        if path.suffix.lower() in {".csv", ".tsv", ".txt", ".json", ".jsonl", ".md"}:
            try:
                with path.open("r", encoding="utf-8", errors="replace") as f:
                    preview = f.readline().strip()[:300]
            except OSError:
                preview = ""
        return cls(name or path.name, path.stat().st_size, preview)

    def render(self) -> str:
        """``- name (size bytes); header: ...``, the name and the line each made one clean, bounded
        line (:func:`one_line`): a file's name or first line cannot start a new line of the prompt."""
        name = one_line(self.name, 200)
        what = "header" if name.lower().endswith((".csv", ".tsv")) else "first line"
        line = f"- {name} ({self.size:,} bytes)"
        preview = one_line(self.preview, 300)
        return line + (f"; {what}: {preview}" if preview else "")


def render_system_prompt(
    tools: Sequence[Tool],
    *,
    files: Sequence[FileDescription] = (),
    workdir: str = "/workspace",
    template: str | None = None,
    packages: str = "",
    extra_stubs: str = "",
    catalog: str = "",
) -> str:
    """Fill the template: ``$tools`` (Python stubs), ``$files``, ``$workdir``, ``$packages`` (what is
    installed and how to install more: ``sandbox.packages.SessionPackages.describe()``).

    ``extra_stubs`` are more function stubs for ``$tools`` (the catalogue's
    ``search_tools``, ``save_skill``); ``catalog`` is the text about tools found
    on demand, skills and privacy (``$catalog``; appended to a template without it).
    """
    stubs = "\n\n".join([t.python_stub() for t in tools] + ([extra_stubs.strip()] if extra_stubs.strip() else []))
    files_text = ""
    if files:
        files_text = "\nFiles in the working directory for this task:\n" + "\n".join(f.render() for f in files) + "\n"
    text = template or load_template()
    catalog_text = ("\n" + catalog.strip() + "\n") if catalog.strip() else ""
    if catalog_text and "$catalog" not in text and "${catalog}" not in text:
        text += "\n$catalog"
    return fill_template(text, tools=(stubs + "\n\n") if stubs else "", files=files_text, workdir=workdir,
                         packages=("\n" + packages.strip() + "\n") if packages.strip() else "",
                         catalog=catalog_text)


#: The placeholders a system prompt template may use, for every agent kind.
PLACEHOLDERS = ("tools", "files", "workdir", "packages", "catalog")


def fill_template(template: str, **values: str) -> str:
    """``template`` with its placeholders filled: every one of :data:`PLACEHOLDERS` (those the agent has no value
    for become ""), any other ``$name`` left as it is (a template may show a shell variable)."""
    return string.Template(template).safe_substitute({name: values.get(name, "") for name in PLACEHOLDERS})
