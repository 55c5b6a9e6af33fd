"""Text from runs, made safe to print on a terminal.

Everything the CLI prints from a run — what the code printed, answers, tool
arguments and results, file names, error messages, the run log — may come
from code a prompt-injected model wrote. Raw escape sequences in it could
retitle the window, clear the screen, write the clipboard (OSC 52) or hide
text; bidi controls could make text read differently from what it is.
:func:`safe` shows every control and invisible formatting character
escaped instead (``\\x1b``, ``\\u202e``); newlines and tabs stay. Files and the
run log keep the raw text: only what reaches a terminal is escaped.

Example::

    safe("ok\\x1b]52;c;ZXZpbA==\\x07")   # 'ok\\\\x1b]52;c;ZXZpbA==\\\\x07'
"""

from __future__ import annotations

import re
import unicodedata

# C0 controls but tab and newline, DEL, C1 controls; format characters (bidi embeddings,
# overrides and isolates, zero-width joiners, the BOM...) are found through unicodedata.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_MAYBE_FORMAT = re.compile(r"[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u180e\u200b-\u200f\u202a-\u202e"
                           r"\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U0001bca0-\U0001bca3"
                           r"\U0001d173-\U0001d17a\U000e0001-\U000e007f\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def safe(text: object) -> str:
    """``text`` with control, bidi and other invisible formatting characters shown escaped."""
    if not isinstance(text, str):
        text = str(text)
    text = _CONTROL.sub(_escape, text)
    text = _MAYBE_FORMAT.sub(_escape, text)
    if text.isascii():
        return text
    # Anything else Unicode classes as a format character (Cf) or unassigned-but-invisible.
    return "".join(_escape_char(ch) if unicodedata.category(ch) == "Cf" else ch for ch in text)


def _escape_char(ch: str) -> str:
    code = ord(ch)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def safe_json(text: str) -> str:
    """JSON text for a terminal: the same characters escaped as JSON ``\\uXXXX`` (still valid JSON)."""
    def esc(match: re.Match[str]) -> str:
        code = ord(match.group())
        if code > 0xFFFF:  # JSON needs a surrogate pair
            code -= 0x10000
            return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
        return f"\\u{code:04x}"

    text = _CONTROL.sub(esc, text)
    text = _MAYBE_FORMAT.sub(esc, text)
    if text.isascii():
        return text
    return "".join(esc(re.match(".", ch, re.S)) if unicodedata.category(ch) == "Cf" else ch  # type: ignore[arg-type]
                   for ch in text)
