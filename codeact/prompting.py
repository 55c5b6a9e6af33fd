"""The system prompt: a template file, the tool stubs and the files a run was given."""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .prompts import load_prompt
from .tools import Tool


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
        what = "header" if self.name.lower().endswith((".csv", ".tsv")) else "first line"
        line = f"- {self.name} ({self.size:,} bytes)"
        return line + (f"; {what}: {self.preview}" if self.preview else "")


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
    return string.Template(text).safe_substitute(
        tools=(stubs + "\n\n") if stubs else "", files=files_text, workdir=workdir,
        packages=("\n" + packages.strip() + "\n") if packages.strip() else "", catalog=catalog_text,
    )
