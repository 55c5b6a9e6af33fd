"""Values in events and the run log: bounded JSON through the sandbox's one codec.

Tool arguments, tool results and answers can be anything a tool returns: a
50 MB DataFrame, bytes, a tuple with int keys. Events keep a *preview* of
them: the codec's tagged JSON tree (:func:`sandbox.runtime.sandbox_codec.to_jsonable`),
with large buffers summarised and, when the whole tree is still too long,
replaced by a short ``repr``. A preview never raises and never holds more
than :data:`MAX_PREVIEW` characters, so a run's events stay small whatever
the tools return. :func:`show` turns a preview back into readable text.

Example::

    preview((1, {2: b"x"}))        # {'$': 'tuple', 'v': [1, {'$': 'dict', ...}]}
    show(preview((1, {2: b"x"})))  # "(1, {2: b'x'})"
"""

from __future__ import annotations

import json
from typing import Any

from sandbox.runtime import sandbox_codec as codec

#: Characters of JSON one preview may take; beyond it the value is kept as a short repr.
MAX_PREVIEW = 64_000
#: Bytes of one buffer (bytes, an array) kept inline in a preview.
INLINE_BYTES = 16_384
_REPR_LIMIT = 2_000


def preview(value: Any, *, max_chars: int = MAX_PREVIEW) -> Any:
    """A JSON-able, bounded stand-in for ``value`` (see module docs). Never raises."""
    try:
        tree = codec.to_jsonable(value, inline_bytes=INLINE_BYTES)
        text = json.dumps(tree, ensure_ascii=False)
        if len(text) <= max_chars:
            return tree
        size = f"{len(text):,} characters as JSON"
    except Exception as exc:  # to_jsonable never raises; json.dumps of its output should not either
        size = f"not representable ({type(exc).__name__})"
    return {"$": "opaque", "type": _type_name(value), "repr": _short_repr(value) + f"  [{size}]"}


def restore(tree: Any) -> Any:
    """The value a preview stands for, as far as it was kept (summaries become ``Opaque``). Never raises."""
    try:
        return codec.from_jsonable(tree)
    except Exception:
        return tree


def show(tree: Any, limit: int | None = None) -> str:
    """Readable text of a preview: the ``repr`` of what it stands for (strings as they are)."""
    value = restore(tree)
    try:
        text = value if isinstance(value, str) else repr(value)
    except Exception:
        text = f"<{_type_name(value)}>"
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def _type_name(value: Any) -> str:
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _short_repr(value: Any) -> str:
    try:
        if isinstance(value, (str, bytes, bytearray)) and len(value) > _REPR_LIMIT:
            return repr(value[:_REPR_LIMIT]) + "…"  # never repr() 50 MB to keep 2 kB
        text = repr(value)
    except Exception:
        return f"<{_type_name(value)}>"
    return text if len(text) <= _REPR_LIMIT else text[:_REPR_LIMIT] + "…"
