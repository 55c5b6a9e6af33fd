"""The few Jupyter messages the host sends, and a defensive reader for what comes back.

The kernel is ipykernel, spoken to in the Jupyter wire format (protocol 5.3)
without signatures: the link to it is private (see :mod:`sandbox._transport`),
so an HMAC would authenticate nothing. What comes back is parsed as hostile
input: every field is checked for type and shape, and anything else raises
:class:`MessageError` (which ends the kernel, never the host).

JSON is counted before it is parsed (``json`` turns 3 bytes of ``[],`` into
~70 bytes of objects): a message's content may hold at most
:data:`MAX_CONTENT_ITEMS` values, its headers :data:`MAX_HEADER_ITEMS`.
"""

from __future__ import annotations

import datetime
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from .runtime.sandbox_codec import json_items_within

DELIM = b"<IDS|MSG>"
PROTOCOL_VERSION = "5.3"
#: Values (JSON items) one message's content may hold: ~140 MB of Python objects at worst.
#: Outputs are a few strings each; the largest real contents are JSON displays (plots).
MAX_CONTENT_ITEMS = 2_000_000
#: Values a header or parent header may hold (ipykernel sends about ten).
MAX_HEADER_ITEMS = 10_000


class MessageError(ValueError):
    """A message from the kernel that is not a well-formed Jupyter message."""


@dataclass(frozen=True)
class Message:
    """The parts of a kernel message the host uses."""

    msg_type: str
    parent_id: str
    content: dict[str, Any]


class Requests:
    """Builds requests for one client session."""

    def __init__(self) -> None:
        self.session = uuid.uuid4().hex

    def build(self, msg_type: str, content: dict[str, Any]) -> tuple[str, list[bytes]]:
        msg_id = uuid.uuid4().hex
        header = {
            "msg_id": msg_id, "msg_type": msg_type, "username": "host", "session": self.session,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "version": PROTOCOL_VERSION,
        }
        parts = [DELIM, b"", _dumps(header), b"{}", b"{}", _dumps(content)]
        return msg_id, parts

    def execute(self, code: str, *, silent: bool = False,
                user_expressions: dict[str, str] | None = None) -> tuple[str, list[bytes]]:
        return self.build("execute_request", {
            "code": code, "silent": silent, "store_history": not silent,
            "user_expressions": user_expressions or {}, "allow_stdin": False,
            # One request at a time: nothing queued behind a failing cell should be aborted.
            "stop_on_error": False,
        })


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def _load_dict(part: bytes, what: str, max_items: int) -> dict[str, Any]:
    # ipykernel writes undecodable output as surrogate escapes, which are not UTF-8: replace them.
    text = part.decode("utf-8", "replace")
    if not json_items_within(text, max_items):
        raise MessageError(f"the {what} holds more than {max_items} JSON values")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError, UnicodeDecodeError) as exc:
        raise MessageError(f"the {what} is not valid JSON ({type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise MessageError(f"the {what} is not a JSON object")
    return value


def parse(parts: list[bytes]) -> Message:
    """The message in ``parts`` (as the relay forwards them); raises :class:`MessageError`."""
    try:
        start = parts.index(DELIM) + 1
    except ValueError:
        raise MessageError("no <IDS|MSG> delimiter") from None
    if len(parts) < start + 5:
        raise MessageError("too few parts")
    header = _load_dict(parts[start + 1], "header", MAX_HEADER_ITEMS)
    parent = _load_dict(parts[start + 2], "parent header", MAX_HEADER_ITEMS)
    content = _load_dict(parts[start + 4], "content", MAX_CONTENT_ITEMS)
    msg_type = header.get("msg_type")
    if not isinstance(msg_type, str):
        raise MessageError("the header has no message type")
    parent_id = parent.get("msg_id", "")
    if not isinstance(parent_id, str):
        raise MessageError("the parent header's msg_id is not a string")
    return Message(msg_type, parent_id, content)


def text_field(content: dict[str, Any], key: str, default: str = "") -> str:
    """A string field of a message's content ("" or ``default`` when absent or not a string)."""
    value = content.get(key, default)
    return value if isinstance(value, str) else default


def json_in_repr(text: str, *, max_items: int = MAX_CONTENT_ITEMS) -> Any:
    """The JSON value inside ``text``, the ``text/plain`` repr of a str (a user expression's value).

    Raises ValueError when ``text`` is not one quoted string or its JSON is
    malformed or over ``max_items`` values. Never ``ast.literal_eval``: the
    kernel chooses the text, and Python's parser builds ~500 bytes of syntax
    tree per byte of ``[[],[],...]`` before it refuses anything.
    """
    if len(text) < 2 or text[0] not in "'\"" or text[-1] != text[0]:
        raise ValueError("not the repr of a str")
    inner = text[1:-1]
    if "\\" in inner:
        inner = _REPR_ESCAPE.sub(_unescape, inner)
    if not json_items_within(inner, max_items):
        raise ValueError(f"more than {max_items} JSON values")
    return json.loads(inner)


# What repr() of a str writes: printable characters as they are, the rest as these escapes.
_REPR_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[\\'\"tnr])")
_SIMPLE_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "t": "\t", "n": "\n", "r": "\r"}


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    simple = _SIMPLE_ESCAPES.get(code)
    if simple is not None:
        return simple
    point = int(code[1:], 16)
    if point > 0x10FFFF:
        raise ValueError("an escape past U+10FFFF")
    return chr(point)
