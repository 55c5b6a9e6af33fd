"""MCP tool results as Python values for the sandbox.

* ``structuredContent`` comes back as the Python value (dicts, lists,
  numbers...). The Python SDK wraps a non-object return value as
  ``{"result": value}`` with an output schema of that one property; such a
  value is unwrapped, so a tool declared ``-> str`` returns a ``str``.
* A tool without an output schema whose content is one text block holding
  a JSON object or array (what most servers send, and what the Python SDK
  sends for a ``-> dict`` tool) comes back parsed, as a ``dict`` or
  ``list``, unless the server's ``parseJsonText`` is off. Anything else
  (a scalar, invalid JSON, several blocks, an image) stays as below. The
  text comes from the server, so parsing is bounded: over
  :data:`MAX_JSON_TEXT` characters or nested deeper than
  :data:`MAX_JSON_DEPTH` it stays a ``str``.
* Otherwise the content blocks become one ``str``: text as it is, each
  image, audio clip or binary resource saved as a run artifact and shown by
  a short stand-in (``[image/png, 12,345 bytes, saved as mcp_files_1.png]``),
  a resource link as a line that says how to read it. An image saved through
  the run (``RunContext.add_artifact``) also goes to the model with the step's
  observation (:mod:`codeact.images`; the agents collect it there).
* ``isError`` raises :class:`~codeact.errors.MCPToolError` with the server's
  message, which the code in the sandbox can catch.
"""

from __future__ import annotations

import base64
import binascii
import json
import mimetypes
from typing import Any, Callable, Mapping, TypeGuard

from ..errors import MCPToolError

#: Characters of an error message kept.
MAX_ERROR_TEXT = 4000
#: Longest text (characters) parsed as JSON; longer text stays a ``str``. Parsing expands text
#: up to ~20x in host memory (``[[],[],...]``), so this bounds what one result can cost the host.
MAX_JSON_TEXT = 4 * 1024 * 1024
#: Deepest nesting of parsed JSON handed over; deeper text stays a ``str`` (the bridge's codec
#: refuses values nested deeper than 100, and no real result needs this much).
MAX_JSON_DEPTH = 64

#: ``save(data, mime, kind) -> stand-in text``
Saver = Callable[[bytes, str, str], str]


def is_result_wrapper(output_schema: Mapping[str, Any] | None) -> TypeGuard[Mapping[str, Any]]:
    """True for the SDK's ``{"result": value}`` wrapper schema of a non-object return value."""
    if not isinstance(output_schema, Mapping):
        return False
    props = output_schema.get("properties")
    return (isinstance(props, Mapping) and list(props) == ["result"]
            and list(output_schema.get("required") or []) == ["result"])


def shown_output_schema(output_schema: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The schema of what the sandbox receives (the wrapped value's schema for a wrapper)."""
    if is_result_wrapper(output_schema):
        inner = output_schema["properties"]["result"]
        if isinstance(inner, Mapping):
            defs = {k: output_schema[k] for k in ("$defs", "definitions") if k in output_schema}
            return {**inner, **defs}
    return output_schema


def convert_result(result: Any, *, server: str, tool: str, unwrap: bool, parse_json: bool, save: Saver) -> Any:
    """The Python value of a ``CallToolResult`` (see the module docs).

    ``unwrap``: the tool's output schema is the SDK's ``{"result": value}``
    wrapper (:func:`is_result_wrapper`, decided once per tool). ``parse_json``:
    the tool has no output schema and its server parses JSON text.

    Raises:
        MCPToolError: the result has ``isError`` set.
    """
    if getattr(result, "is_error", False):
        text = content_text(result.content, save) or "(the server gave no message)"
        if len(text) > MAX_ERROR_TEXT:
            text = text[:MAX_ERROR_TEXT] + " ..."
        raise MCPToolError(f"{tool} (MCP server {server!r}): {text}")
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        for block in result.content:  # images next to structured data still reach the artifacts
            if getattr(block, "type", "") in ("image", "audio"):
                _binary(block, save)
        if unwrap and isinstance(structured, Mapping) and set(structured) == {"result"}:
            return structured["result"]
        return structured
    blocks = result.content
    if parse_json and blocks and len(blocks) == 1 and getattr(blocks[0], "type", "") == "text":
        text = blocks[0].text
        value = parse_json_text(text)
        return text if value is None else value
    return content_text(blocks, save)


def parse_json_text(text: Any) -> dict[str, Any] | list[Any] | None:
    """``text`` parsed when it is a JSON object or array within the bounds; None otherwise.

    Never raises: invalid JSON, a scalar, text over :data:`MAX_JSON_TEXT`
    characters, nesting deeper than :data:`MAX_JSON_DEPTH` (or than the
    parser's recursion limit) and numbers Python will not convert all give
    None, and the caller keeps the text.
    """
    if not isinstance(text, str) or len(text) > MAX_JSON_TEXT:
        return None
    start = len(text) - len(text.lstrip())
    if start == len(text) or text[start] not in "[{":
        return None  # a scalar or empty: the text itself is the value
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # invalid, a 5000-digit number, thousands of levels deep
        return None
    if not isinstance(value, (dict, list)) or _deeper_than(text, value, MAX_JSON_DEPTH):
        return None
    return value


def _deeper_than(text: str, value: Any, limit: int) -> bool:
    """True if ``value`` (parsed from ``text``) nests more than ``limit`` containers deep."""
    if text.count("[") + text.count("{") <= limit:  # an upper bound on the depth: no walk needed
        return False
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        for item in (node.values() if isinstance(node, dict) else node):
            if isinstance(item, (dict, list)):
                if depth >= limit:
                    return True
                stack.append((item, depth + 1))
    return False


def content_text(blocks: Any, save: Saver) -> str:
    """Content blocks as one string (binary blocks saved through ``save``)."""
    parts = []
    for block in blocks or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(_binary(block, save))
        elif kind == "resource_link":
            mime = f", {block.mime_type}" if getattr(block, "mime_type", None) else ""
            parts.append(f"[resource link: {block.uri} ({block.name}{mime}); "
                         f"read it with mcp_read_resource({_server_hint(save)!r}, {block.uri!r})]")
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            if text is not None:
                parts.append(text)
            else:
                data = _decode(getattr(resource, "blob", ""))
                mime = getattr(resource, "mime_type", None) or "application/octet-stream"
                parts.append(save(data, mime, "resource") if data is not None
                             else f"[resource {resource.uri}: undecodable data]")
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    return "\n".join(parts)


def _binary(block: Any, save: Saver) -> str:
    data = _decode(block.data)
    mime = getattr(block, "mime_type", None) or "application/octet-stream"
    if data is None:
        return f"[{mime}: the server sent data that is not base64]"
    return save(data, mime, block.type)


def _decode(data: str) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError, TypeError):
        return None


def _server_hint(save: Saver) -> str:
    return getattr(save, "server", "")


def extension_for(mime: str) -> str:
    """``.png`` for ``image/png``; ``.bin`` when unknown."""
    base = mime.split(";")[0].strip().lower()
    known = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp",
             "image/svg+xml": ".svg", "audio/wav": ".wav", "audio/x-wav": ".wav", "audio/mpeg": ".mp3",
             "audio/ogg": ".ogg", "application/pdf": ".pdf", "text/plain": ".txt", "application/json": ".json"}
    return known.get(base) or mimetypes.guess_extension(base) or ".bin"


def stand_in(mime: str, size: int, saved_as: str | None) -> str:
    where = f"saved as {saved_as}" if saved_as else "not saved: no run to keep it in"
    return f"[{mime}, {size:,} bytes, {where}]"
