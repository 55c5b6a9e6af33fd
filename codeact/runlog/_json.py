"""JSON for the run log: its own records field by field, every other value through the sandbox codec.

Values a run produces (answers, tool arguments and results) can be anything;
they are stored as :func:`codeact.values.preview` trees, the codec's bounded,
tagged JSON (a tuple stays a tuple, a DataFrame a DataFrame node), the same
form tool events already carry. The log's own records (``RunResult``,
``Step``, ``Usage``, the run log's records) are dataclasses serialised field
by field, with paths as strings.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import PurePath
from typing import Any, overload

from ..values import preview

#: Modules whose dataclasses are records of the log itself, serialised field by field.
_RECORD_MODULES = ("codeact.events", "codeact.messages", "codeact.runlog")


def jsonable(obj: Any) -> Any:
    """Something :func:`json.dumps` accepts for ``obj``. Never raises.

    codeact's own records (dataclasses from :mod:`codeact.events`,
    :mod:`codeact.messages`, :mod:`codeact.runlog`) become dicts of their
    fields; lists and string-keyed dicts are walked; paths become strings;
    every other value becomes its :func:`codeact.values.preview`. A preview
    (a codec node, as tool events carry) is kept as it is, so
    ``jsonable(preview(x)) == preview(x)``.

    Example::

        jsonable(RunResult(run_id="r", task="t", answer=(1, 2)))["answer"]
        # {'$': 'tuple', 'v': [1, 2]}
    """
    return _walk(obj, 0)


def _walk(obj: Any, depth: int) -> Any:
    if obj is None or isinstance(obj, (bool, str)) or (type(obj) is int):
        return obj
    if depth > 32:
        return preview(obj)
    if isinstance(obj, PurePath):
        return str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type) and type(obj).__module__.startswith(_RECORD_MODULES):
        return {f.name: _walk(getattr(obj, f.name, None), depth + 1) for f in dataclasses.fields(obj)}
    if type(obj) is list:
        return [_walk(v, depth + 1) for v in obj]
    if type(obj) is dict and all(isinstance(k, str) for k in obj):
        if "$" not in obj:
            return {k: _walk(v, depth + 1) for k, v in obj.items()}
        if _is_json(obj):
            return obj  # a codec node: already a preview (tool events carry them), kept as it is
    return preview(obj)


def _is_json(obj: Any) -> bool:
    try:
        json.dumps(obj, allow_nan=False)
        return True
    except (TypeError, ValueError, RecursionError):
        return False


def to_json(obj: Any) -> str:
    """``obj`` as JSON text via :func:`jsonable`; never raises, and the text is always storable."""
    try:
        text = json.dumps(jsonable(obj), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):  # a preview is always JSON; this is the last resort
        text = json.dumps(repr(type(obj)), ensure_ascii=False)
    return clean(text)


@overload
def clean(text: str) -> str: ...


@overload
def clean(text: None) -> None: ...


def clean(text: str | None) -> str | None:
    """Make text storable: lone surrogates (from undecodable bytes) cannot be UTF-8 encoded."""
    if text is None:
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def loads(text: str | None, default: Any = None) -> Any:
    """JSON text back to a value; text that is not JSON (written by something else) comes back as it is."""
    if text is None:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return text


def type_name(obj: Any) -> str:
    """The name an answer's type is recorded under: ``dict``, ``pandas.DataFrame``, ..."""
    cls = type(obj)
    module = cls.__module__
    if module in ("builtins", None):
        return cls.__qualname__
    return f"{module.split('.')[0]}.{cls.__qualname__}"
