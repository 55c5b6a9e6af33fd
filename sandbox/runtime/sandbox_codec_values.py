"""What both sides of the value codec share: its errors, its stand-in types, and small helpers.

Part of the codec (:mod:`sandbox_codec`, which exports the public names);
standard library only. Imported as ``sandbox_codec_values`` in the sandbox and
as ``sandbox.runtime.sandbox_codec_values`` on the host. Names with a leading
underscore are shared between the ``sandbox_codec*`` modules only.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or __package__:  # on the host: sandbox.runtime.sandbox_codec_values (and for the type checker)
    from . import sandbox_codec_limits as limits
else:  # in the sandbox, and as a script: top-level modules (PYTHONPATH=/opt/sandbox/runtime)
    import sandbox_codec_limits as limits

#: The key that marks a tagged node in the header's tree.
TAG = "$"
NoneType = type(None)
JSON_SCALARS = frozenset({str, int, float, bool, NoneType})
PLAIN_LEAVES = frozenset({str, bool, NoneType})
STR_ONLY = frozenset({str})
INT_LO, INT_HI = -(2**63), 2**64  # plain JSON ints: what int64/uint64 readers take
#: pandas masked dtypes that travel as data + mask buffers (a "masked" column node).
MASKED_DTYPES = frozenset(
    ["Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64", "Float32", "Float64", "boolean"]
)


class CodecError(ValueError):
    """Malformed or over-limit payload (decoding), or a limit hit while encoding."""


class EncodeError(CodecError):
    """The value cannot be sent within the limits (``max_depth``, ``max_bytes``)."""


class Opaque:
    """Stands for a value the codec cannot carry: its type name, its repr() and its str().

    ``repr(x)`` and ``str(x)`` (so ``print(x)``) give what the original gave.
    """

    __slots__ = ("type_name", "repr_text", "str_text")

    def __init__(self, type_name: str, repr_text: str, str_text: str | None = None) -> None:
        self.type_name = type_name
        self.repr_text = repr_text
        self.str_text = str_text

    def __repr__(self) -> str:
        return self.repr_text

    def __str__(self) -> str:
        return self.repr_text if self.str_text is None else self.str_text

    def __eq__(self, other: object) -> bool:
        if type(other) is not Opaque:
            return NotImplemented
        return (self.type_name, self.repr_text) == (other.type_name, other.repr_text)

    def __hash__(self) -> int:
        return hash((Opaque, self.type_name, self.repr_text))


class ToolError(Exception):
    """An exception of a type that cannot be rebuilt here (not a builtin one)."""

    def __init__(self, type_name: str, message: str = "") -> None:
        super().__init__(type_name, message)
        self.type_name = type_name
        self.message = message

    def __str__(self) -> str:
        return f"{self.type_name}: {self.message}" if self.message else self.type_name


# The public classes show (in tracebacks, reprs, pickles) as the module that exports them.
for _cls in (CodecError, EncodeError, Opaque, ToolError):
    _cls.__module__ = __name__.replace("sandbox_codec_values", "sandbox_codec")
del _cls


# --- helpers ---------------------------------------------------------------------


def qualified_type_name(t: type) -> str:
    """``module.QualName`` of ``t`` (a builtin's bare name); "?" when the class will not say."""
    try:
        mod = getattr(t, "__module__", None)
        name = getattr(t, "__qualname__", None) or getattr(t, "__name__", "?")
        if not isinstance(name, str):
            name = "?"
        if not isinstance(mod, str) or mod == "builtins":
            return name
        return f"{mod}.{name}"
    except Exception:  # a hostile metaclass
        return "?"


def safe_repr(v: Any, limit: int = limits.REPR_LIMIT) -> str:
    try:
        text = repr(v)
        if type(text) is not str:
            text = str.__str__(text)
    except Exception as e:  # a failing __repr__ must not stop the call
        try:
            return f"<{qualified_type_name(type(v))} object (repr failed: {type(e).__name__})>"
        except Exception:
            return "<object (repr failed)>"
    if len(text) > limit:
        text = text[: limit - 30] + f"... [{len(text) - limit + 30} chars cut]"
    return text


def own_str(v: Any, limit: int) -> str | None:
    """``str(v)`` when its class defines its own (capped); None otherwise or when it fails."""
    try:
        str_method: object = type(v).__str__  # (object: the type checker sees no overlap with object.__str__)
        if str_method is object.__str__:
            return None
        text = str(v)
        if type(text) is not str:
            return None
    except Exception:
        return None
    return text if len(text) <= limit else text[: limit - 30] + f"... [{len(text) - limit + 30} chars cut]"


def numpy_if_available() -> Any:
    """numpy, imported if it can be; None when missing. (Any: numpy is optional and untyped here.)"""
    mod = sys.modules.get("numpy")
    if mod is not None:
        return mod
    try:
        return importlib.import_module("numpy")
    except Exception:  # missing or blocked (sys.modules["numpy"] = None)
        return None


def pandas_if_available() -> Any:
    """pandas, imported if it can be; None when missing."""
    mod = sys.modules.get("pandas")
    if mod is not None:
        return mod
    try:
        return importlib.import_module("pandas")
    except Exception:
        return None


# --- exceptions --------------------------------------------------------------------

_GROUPS = tuple(t for t in (getattr(builtins, "BaseExceptionGroup", None),) if t is not None)
BUILTIN_EXCEPTIONS: Mapping[str, type] = MappingProxyType(
    {
        name: obj
        for name, obj in vars(builtins).items()
        if isinstance(obj, type) and issubclass(obj, Exception) and not issubclass(obj, _GROUPS)
        and obj.__name__ == name
    }
)


_BOTH_CLASSES: dict = {}


def as_tool_error(exc: BaseException) -> BaseException:
    """A builtin exception (from :func:`decode_exception`) that is also a :class:`ToolError`.

    Code that receives a tool's failure can write ``except KeyError`` or
    ``except ToolError``; ``str()`` and ``repr()`` stay the builtin's. Other
    exceptions are returned as they are.
    """
    cls = type(exc)
    if isinstance(exc, ToolError) or BUILTIN_EXCEPTIONS.get(cls.__name__) is not cls:
        return exc
    both = _BOTH_CLASSES.get(cls)
    if both is None:
        try:
            both = type(cls.__name__, (cls, ToolError), {
                "__module__": "builtins", "__qualname__": cls.__qualname__,
                "__str__": cls.__str__, "__repr__": cls.__repr__, "__init__": cls.__init__})
        except TypeError:  # an incompatible layout: keep the builtin type alone
            both = cls
        _BOTH_CLASSES[cls] = both
    if both is cls:
        return exc
    try:
        out = both(*exc.args)
    except Exception:
        return exc
    out.type_name = cls.__name__
    out.message = own_str(exc, limits.MESSAGE_LIMIT) or ""
    for attr in ("filename", "filename2", "__notes__"):
        value = getattr(exc, attr, None)
        if value is not None:
            with contextlib.suppress(AttributeError, TypeError):
                setattr(out, attr, value)
    return out

