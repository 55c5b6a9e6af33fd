"""The system prompt: a template file, the tool stubs and the files a run was given."""

from __future__ import annotations

import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Sequence

from .tools import Tool

DEFAULT_TEMPLATE = "codeact.md"


def load_template(path: str | Path | None = None) -> str:
    """The template text: ``path`` if given, else the packaged ``prompts/codeact.md``."""
    if path is not None:
        return Path(path).read_text(encoding="utf-8")
    return resources.files("codeact").joinpath("prompts", DEFAULT_TEMPLATE).read_text(encoding="utf-8")


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
) -> str:
    """Fill the template: ``$tools`` (Python stubs), ``$files``, ``$workdir``."""
    stubs = "\n\n".join(t.python_stub() for t in tools)
    files_text = ""
    if files:
        files_text = "\nFiles in the working directory for this task:\n" + "\n".join(f.render() for f in files) + "\n"
    return string.Template(template or load_template()).safe_substitute(
        tools=(stubs + "\n\n") if stubs else "", files=files_text, workdir=workdir
    )
