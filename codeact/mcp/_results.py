"""MCP tool results as Python values for the sandbox.

* ``structuredContent`` comes back as the Python value (dicts, lists,
  numbers...). The Python SDK wraps a non-object return value as
  ``{"result": value}`` with an output schema of that one property; such a
  value is unwrapped, so a tool declared ``-> str`` returns a ``str``.
* Otherwise the content blocks become one ``str``: text as it is, each
  image, audio clip or binary resource saved as a run artifact and shown by
  a short stand-in (``[image/png, 12,345 bytes, saved as mcp_files_1.png]``),
  a resource link as a line that says how to read it.
* ``isError`` raises :class:`~codeact.errors.MCPToolError` with the server's
  message, which the code in the sandbox can catch.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
from typing import Any, Callable, Mapping

from ..errors import MCPToolError

#: Characters of an error message kept.
MAX_ERROR_TEXT = 4000

#: ``save(data, mime, kind) -> stand-in text``
Saver = Callable[[bytes, str, str], str]


def is_result_wrapper(output_schema: Mapping[str, Any] | None) -> bool:
    """True for the SDK's ``{"result": value}`` wrapper schema of a non-object return value."""
    if not isinstance(output_schema, Mapping):
        return False
    props = output_schema.get("properties")
    return (isinstance(props, Mapping) and list(props) == ["result"]
            and list(output_schema.get("required") or []) == ["result"])


def shown_output_schema(output_schema: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The schema of what the sandbox receives (the wrapped value's schema for a wrapper)."""
    if is_result_wrapper(output_schema):
        inner = output_schema["properties"]["result"]  # type: ignore[index]
        if isinstance(inner, Mapping):
            defs = {k: output_schema[k] for k in ("$defs", "definitions") if k in output_schema}  # type: ignore[index]
            return {**inner, **defs}
    return output_schema


def convert_result(result: Any, *, server: str, tool: str, output_schema: Mapping[str, Any] | None,
                   save: Saver) -> Any:
    """The Python value of a ``CallToolResult`` (see the module docs).

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
        if is_result_wrapper(output_schema) and isinstance(structured, Mapping) and set(structured) == {"result"}:
            return structured["result"]
        return structured
    return content_text(result.content, save)


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
