"""The few Jupyter messages the host sends, and a defensive reader for what comes back.

The kernel is ipykernel, spoken to in the Jupyter wire format (protocol 5.3)
without signatures: the link to it is private (see :mod:`sandbox._transport`),
so an HMAC would authenticate nothing. What comes back is parsed as hostile
input: every field is checked for type and shape, and anything else raises
:class:`MessageError` (which ends the kernel, never the host).
"""

from __future__ import annotations

import datetime
import json
import uuid
from dataclasses import dataclass
from typing import Any

DELIM = b"<IDS|MSG>"
PROTOCOL_VERSION = "5.3"


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


def _load_dict(part: bytes, what: str) -> dict[str, Any]:
    try:
        # ipykernel writes undecodable output as surrogate escapes, which are not UTF-8: replace them.
        value = json.loads(part.decode("utf-8", "replace"))
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
    header = _load_dict(parts[start + 1], "header")
    parent = _load_dict(parts[start + 2], "parent header")
    content = _load_dict(parts[start + 4], "content")
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
