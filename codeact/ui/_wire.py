"""Agent events as the JSON the page renders.

The page consumes the same :mod:`codeact.events` the terminal renders; this
module turns each into a flat JSON object (``{"type": "Observation", ...}``).
Everything in it may come from the sandbox and is treated as hostile by the
page (set as text, or sanitised); here it is only bounded and made JSON-safe.
Bytes never go into the stream: images are handed to a store that keeps them
and returns the URL they are served at (``{"src": "/api/.../blobs/3"}``), which
the page uses as an ``<img>`` source.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from typing import Any

from sandbox.result import strip_ansi

from ..events import (
    CodeAction,
    CodeOutput,
    Compacted,
    ErrorEvent,
    Event,
    FinalAnswer,
    ModelOutput,
    NetworkRequest,
    Observation,
    RunFinished,
    RunStarted,
    TextDelta,
    ToolCall,
)
from ..compaction import compacted_text
from ..images import ImageError, image_size
from ..parsing import parse_reply
from ..values import preview, show

#: Characters of one value (a tool argument, a result, an answer) shown on the page.
VALUE_LIMIT = 20_000
#: MIME types the page renders; others are shown as their text/plain.
IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/svg+xml")
#: Rows of a DataFrame answer rendered as a table.
ANSWER_ROWS = 200

#: Keeps bytes for the page and returns the URL they are served at: ``store(mime, data) -> url``.
StoreBlob = Callable[[str, bytes], str]


def dumps(payload: dict[str, Any]) -> str:
    """Compact JSON on one line (SSE data), valid even when text holds lone surrogates."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)
    # A lone surrogate (undecodable bytes from the sandbox) cannot be UTF-8 encoded; as a
    # \\uXXXX escape it is valid JSON.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


#: Characters that change how the text around them looks (controls but newline and tab; bidi marks, embeddings,
#: overrides and isolates): in a value shown for the user to judge, such as a tool call's arguments waiting for
#: approval, they are shown as escapes (``\u202e``), so what the page shows is what the call gets.
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """``text`` with every control and bidi formatting character but newline and tab written as its escape."""
    return _INVISIBLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def shown(value: Any, limit: int = VALUE_LIMIT) -> str:
    """A value preview (:mod:`codeact.values`) as readable text, bounded, its invisible characters escaped."""
    return visible(show(value, limit))


def _base(event: Event) -> dict[str, Any]:
    return {"type": type(event).__name__, "run_id": event.run_id, "step": event.step, "time": event.time}


def _traceback_of(text: str) -> str:
    """The traceback part of an observation ("Error:" section), '' when it has none."""
    marker = text.rfind("Error:\n")
    while marker > 0 and text[marker - 1] != "\n":  # "ValueError:\n" is not the section header
        marker = text.rfind("Error:\n", 0, marker)
    return text[marker + len("Error:\n"):] if marker >= 0 else ""


def output_items(bundles: list[dict[str, Any]], store: StoreBlob) -> list[dict[str, Any]]:
    """Rich outputs for the page: an image (by blob number), HTML (to sanitise) or text."""
    items: list[dict[str, Any]] = []
    for bundle in bundles:
        if not isinstance(bundle, dict):
            continue
        text = bundle.get("text/plain")
        text = text if isinstance(text, str) else None
        image = next((m for m in IMAGE_MIMES if m in bundle), None)
        if image is not None:
            data = bundle[image]
            if isinstance(data, str):  # SVG is text
                data = data.encode("utf-8", "replace")
            if isinstance(data, bytes):
                items.append(image_item(image, data, text or "", store))
                continue
        html = bundle.get("text/html")
        if isinstance(html, str):
            items.append({"kind": "html", "html": html, "text": text or ""})
        elif isinstance(bundle.get("text/markdown"), str):
            items.append({"kind": "text", "text": bundle["text/markdown"]})
        elif text is not None:
            items.append({"kind": "text", "text": text})
    return items


def image_item(mime: str, data: bytes, alt: str, store: StoreBlob) -> dict[str, Any]:
    """An image for the page, or why it is not shown: a raster image's header is read first (without decoding),
    so one that is not an image, is broken or declares more than ``codeact.images.MAX_PIXELS`` pixels (a
    decompression bomb for the browser) never reaches it. SVG is drawn at the page's size by an ``<img>``."""
    if mime != "image/svg+xml":
        try:
            image_size(data)
        except ImageError as exc:
            return {"kind": "unshown", "mime": mime, "reason": f"{mime} not shown: {exc}", "alt": alt}
    return {"kind": "image", "mime": mime, "src": store(mime, data), "alt": alt}


def answer_wire(answer: Any, schema: str | None = None) -> dict[str, Any]:
    """The final answer: its text, and an HTML table when it is a DataFrame (escaped by pandas). A typed
    answer (``schema``: how its JSON Schema is named) also as pretty-printed ``json`` (text the page shows as
    it is) and the ``schema``'s name."""
    out: dict[str, Any] = {"text": "" if answer is None else shown(preview(answer))}
    if schema is not None:
        try:
            out["json"] = json.dumps(answer, indent=2, ensure_ascii=False)[:VALUE_LIMIT * 5]
            out["schema"] = schema
        except (TypeError, ValueError):  # not JSON data: the text form is enough
            pass
    if isinstance(answer, str):
        out["text"] = answer[:VALUE_LIMIT * 5]
    to_html = getattr(answer, "to_html", None)
    if callable(to_html) and type(answer).__module__.startswith("pandas"):
        with contextlib.suppress(Exception):  # the text form is enough
            out["html"] = to_html(max_rows=ANSWER_ROWS, escape=True)
    return out


def event_wire(event: Event, store: StoreBlob, *, answer_schema: str | None = None) -> dict[str, Any]:
    """One agent event as the page's JSON (``answer_schema``: the turn is typed, see :func:`answer_wire`)."""
    out = _base(event)
    if isinstance(event, RunStarted):
        out.update(task=event.task, model=event.model, backend=event.backend, tools=list(event.tools),
                   files=[str(f) for f in event.files], agent=event.agent)
    elif isinstance(event, TextDelta):
        out.update(text=event.text)
    elif isinstance(event, ModelOutput):
        out.update(text=event.text, prose=parse_reply(event.text).prose, duration=event.duration,
                   input_tokens=event.usage.input_tokens, output_tokens=event.usage.output_tokens)
    elif isinstance(event, CodeAction):
        out.update(code=event.code)
    elif isinstance(event, CodeOutput):
        out.update(stream="stderr" if event.stream == "stderr" else "stdout", text=strip_ansi(event.text))
    elif isinstance(event, ToolCall):
        out.update(name=event.name, arguments={str(k): shown(v, 2000) for k, v in event.arguments.items()},
                   result=None if event.error else shown(event.result), error=event.error,
                   duration=event.duration, child_run_id=event.child_run_id, child_status=event.child_status)
    elif isinstance(event, Observation):
        out.update(text=event.text, stdout=strip_ansi(event.stdout), stderr=strip_ansi(event.stderr),
                   error=event.error,
                   traceback=_traceback_of(event.text) if event.error else "", duration=event.duration,
                   truncated=event.truncated, artifacts=list(event.artifacts),
                   outputs=output_items(list(getattr(event, "outputs", []) or []), store))
        if not out["outputs"] and event.images:  # an agent that does not fill `outputs`
            out["outputs"] = [image_item("image/png", png, "", store) for png in event.images]
    elif isinstance(event, NetworkRequest):
        rec = event.record
        out.update(host=event.host, method=event.method, allowed=event.allowed, status=event.status,
                   port=rec.get("port"), reason=shown(rec.get("reason") or "", 500),
                   duration=rec.get("duration"), bytes_received=rec.get("bytes_received"))
    elif isinstance(event, FinalAnswer):
        out.update(status=event.status, answer=answer_wire(event.answer, answer_schema))
    elif isinstance(event, ErrorEvent):
        out.update(message=event.message, kind=event.kind, fatal=event.fatal)
    elif isinstance(event, Compacted):
        out.update(text=compacted_text(event), reason=event.reason, tokens_before=event.tokens_before,
                   tokens_after=event.tokens_after, turns_folded=event.turns_folded)
    elif isinstance(event, RunFinished):
        r = event.result
        out.update(status=r.status, error=r.error, duration=r.duration, steps=len(r.steps),
                   input_tokens=r.usage.input_tokens, output_tokens=r.usage.output_tokens,
                   artifacts=[p.name for p in r.artifacts])
    else:  # an event type this UI does not know yet: its name is enough
        out["unknown"] = True
    return out

