"""Find the code action in a model reply.

Accepted, in order of preference: fenced blocks marked ``python``/``py``/
``python3``/``ipython``; bare fences whose content parses as Python;
``<execute>...</execute>`` tags. Several blocks are joined in order. An
unclosed last fence (the model stopped mid-block) counts as closed at the end.
A fence line inside Python code (a string holding Markdown) does not end the
block when a later closing fence makes the code parse.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from sandbox.pyparse import parse

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,}|~{3,})[ \t]*(?P<lang>[\w+#.-]*)[^\n]*$", re.M)
_EXECUTE = re.compile(r"<execute>(.*?)(?:</execute>|\Z)", re.S | re.I)
#: Closing-fence candidates tried for a Python block that does not parse at its first one.
_MAX_CLOSINGS = 16
PYTHON_LANGS = {"python", "py", "python3", "ipython", "pycon"}


@dataclass(frozen=True)
class ParsedReply:
    """What a reply contains: the code to run (or None) and the prose around it."""

    code: str | None
    prose: str
    #: Fenced blocks in other languages (bash, json, ...) that were NOT run.
    other_blocks: tuple[str, ...] = ()

    @property
    def has_code(self) -> bool:
        return bool(self.code and self.code.strip())


def _parses(code: str) -> bool:
    try:
        parse(code)  # behind a lock: CPython 3.11's AST conversion is not thread-safe
        return True
    except (SyntaxError, ValueError):
        return False


def _body(text: str, start: int, end: re.Match[str] | None, indent: str) -> str:
    """The block's text between the opening fence line (ending at ``start``) and ``end``."""
    body_end = end.start() if end else len(text)
    body = text[start + 1 : body_end] if start < len(text) else ""
    if indent:
        body = "\n".join(ln[len(indent):] if ln.startswith(indent) else ln for ln in body.split("\n"))
    return body.rstrip("\n")


def _fenced_blocks(text: str) -> tuple[list[tuple[str, str]], str]:
    """(lang, body) for each fenced block, and the text outside fences."""
    blocks: list[tuple[str, str]] = []
    prose: list[str] = []
    pos = 0
    while True:
        m = _FENCE.search(text, pos)
        if m is None:
            prose.append(text[pos:])
            break
        prose.append(text[pos:m.start()])
        ticks, lang = m.group("ticks"), m.group("lang").lower()
        closing = re.compile(rf"^[ \t]*{re.escape(ticks[0])}{{{len(ticks)},}}[ \t]*$", re.M)
        indent = m.group("indent")
        ends = list(itertools.islice(closing.finditer(text, m.end()), _MAX_CLOSINGS))
        end = ends[0] if ends else None
        body = _body(text, m.end(), end, indent)
        if len(ends) > 1 and (lang in PYTHON_LANGS or not lang) and not _parses(body):
            # A fence line inside the code itself (a string holding Markdown) is not the
            # end of the block: take the first later closing fence that makes the code parse.
            for later in ends[1:]:
                candidate = _body(text, m.end(), later, indent)
                if _parses(candidate):
                    end, body = later, candidate
                    break
        blocks.append((lang, body))
        pos = end.end() if end else len(text)
    return blocks, "".join(prose)


def parse_reply(text: str) -> ParsedReply:
    """Split a model reply into code (joined blocks) and prose.

    >>> parse_reply("Let me look.\\n```python\\nprint(1)\\n```").code
    'print(1)'
    """
    text = text or ""
    code_parts: list[str] = []
    other: list[str] = []
    blocks, prose = _fenced_blocks(text)
    for lang, body in blocks:
        if lang in PYTHON_LANGS or (not lang and body.strip() and _parses(body)):
            code_parts.append(body)
        elif body.strip():
            other.append(lang or "text")
    if not code_parts:
        tagged = [m.group(1).strip("\n") for m in _EXECUTE.finditer(text)]
        if tagged:
            code_parts = tagged
            prose = _EXECUTE.sub("", text)
    code = "\n\n".join(p for p in code_parts if p.strip()) or None
    return ParsedReply(code, prose.strip(), tuple(other))
