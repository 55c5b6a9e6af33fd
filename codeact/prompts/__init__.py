"""The system prompts of the four agents, versioned, shipped as package data.

Each agent's prompt is a template file here (``codeact.md``, ``react_fc.md``,
``react_json.md``, ``react_text.md``) whose first line is a version marker::

    <!-- codeact-prompt: react-json v1 -->

The marker is not part of the prompt: :func:`load_prompt` strips it and
returns a :class:`Prompt` with the name and version, which every run records
(``RunStarted.prompt`` / ``prompt_version``, the run log, bench results), so a
published number can always be traced to the exact prompt that produced it.
Change a prompt's text, change its version.

Your own template (``system_prompt=...``) is recorded as ``custom`` with a
hash of its text as the version.

Example::

    from codeact.prompts import load_prompt

    prompt = load_prompt("react-json")
    prompt.id                  # 'react-json@1'
    prompt.text.startswith("You are")
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

from ..errors import ConfigError

__all__ = ["PROMPT_NAMES", "Prompt", "load_prompt", "parse_prompt"]

#: The shipped prompts, one per agent kind.
PROMPT_NAMES = ("codeact", "react-fc", "react-json", "react-text")

_MARKER = re.compile(r"\A<!--\s*codeact-prompt:\s*(?P<name>[\w.-]+)\s+v(?P<version>[\w.-]+)\s*-->[ \t]*\r?\n?")


@dataclass(frozen=True)
class Prompt:
    """A system prompt template and the name and version it is recorded under."""

    name: str
    version: str
    text: str

    @property
    def id(self) -> str:
        """``name@version``, as results print it."""
        return f"{self.name}@{self.version}"

    @classmethod
    def custom(cls, text: str) -> Prompt:
        """A user's own template: name ``custom``, version ``sha256:<12 hex digits of its text>``.

        A template that carries a marker keeps the name and version it declares.
        """
        declared = _MARKER.match(text)
        if declared:
            return parse_prompt(text, declared.group("name"))
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        return cls("custom", f"sha256:{digest}", text)


def parse_prompt(text: str, name: str) -> Prompt:
    """Split a template file's text into its marker and the template.

    Raises:
        ConfigError: the marker is missing or names another prompt.
    """
    m = _MARKER.match(text)
    if m is None:
        raise ConfigError(
            f"prompt {name!r} has no version marker; its first line must be "
            f"'<!-- codeact-prompt: {name} v1 -->'"
        )
    if m.group("name") != name:
        raise ConfigError(f"prompt file for {name!r} declares the name {m.group('name')!r}; fix its first line")
    return Prompt(name, m.group("version"), text[m.end():])


def load_prompt(name: str) -> Prompt:
    """The shipped prompt ``name`` (one of :data:`PROMPT_NAMES`), marker removed.

    Raises:
        ConfigError: no such prompt.
    """
    if name not in PROMPT_NAMES:
        raise ConfigError(f"no prompt named {name!r}; the shipped prompts are {', '.join(PROMPT_NAMES)}")
    text = resources.files(__name__).joinpath(name.replace("-", "_") + ".md").read_text(encoding="utf-8")
    return parse_prompt(text, name)
