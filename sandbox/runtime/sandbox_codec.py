"""One value codec for both sides of the host <-> sandbox bridge.

Standard library only at import time: the same file runs inside the sandbox
kernel (shipped there as a single module) and on the host (imported as
``sandbox.runtime.sandbox_codec``). numpy and pandas are used only when a
value of theirs is encoded, or when such a tag is decoded and they can be
imported; nothing else is ever imported because of the data.

API
===
``encode(value, *, max_bytes=None, max_depth=100) -> list[bytes | memoryview]``
    The payload as chunks to write one after another (big buffers are not
    copied; every chunk supports ``len()`` in bytes). ``encoded_size(chunks)``
    is the total. Drop the chunks once written: they may share memory with
    the value (bytes objects, memoryviews, numpy arrays).
``decode(data, *, max_bytes=None, max_depth=100, max_items=5_000_000, enum_types=None)``
    The value back. Raises :class:`CodecError` (a ValueError) for anything
    malformed or over a limit, never anything else.
``dumps(value, **kw) -> bytes`` / ``loads(data, **kw)``: the same on one bytes object.
``to_jsonable(value, *, inline_bytes=65536, max_depth=100)``
    The same tagged tree, JSON-able, for a run log. Never raises: cycles,
    too-deep nesting, failing ``__repr__`` and other oddities become opaque
    nodes; buffers up to ``inline_bytes`` are inlined as base64 (``"b64"``),
    a value owning a larger one (or a pandas text column with more characters)
    becomes an opaque summary with its ``size``.
``from_jsonable(tree, *, enum_types=None, max_depth=100)``: rebuilds what it can; summaries
    and anything it cannot rebuild become :class:`Opaque`. Never raises.
``encode_exception(exc) -> dict`` / ``decode_exception(d) -> BaseException``
    Builtin ``Exception`` subclasses (KeyError, ValueError, TimeoutError,
    FileNotFoundError, ...) come back as the same type with the same args
    (plus OSError's filename/filename2, and ``__notes__``); any other type
    (and SystemExit, KeyboardInterrupt, exception groups) as :class:`ToolError`
    with ``type_name`` and ``message``. No tracebacks. ``decode_exception``
    never raises.

Wire format (little endian)
===========================
::

    b"CXC1" | u32 header_len | u32 n_buffers | n_buffers x u64 buffer_len
    | header: UTF-8 JSON (surrogates passed through) | buffer 0 | buffer 1 | ...

The sizes must add up to the payload length exactly, and every buffer must be
referenced exactly once. The header is a tagged tree: JSON null/bool/str,
ints in [-2**63, 2**64) and finite floats are themselves; a list is a list; a
dict whose keys are all ``str`` and which has no ``"$"`` key is a JSON object.
Everything else is an object ``{"$": tag, ...}``; raw buffers are referenced
as ``"b": index``.

=====================  ====================================================
value                  node
=====================  ====================================================
big int                ``{"$":"int","x":"-1f..."}`` (hex: no 4300-digit limit;
                       at most ``MAX_INT_BITS``)
nan, inf, -inf         ``{"$":"float","v":"nan"}`` (-0.0 is plain JSON)
tuple/set/frozenset    ``{"$":"tuple","v":[...]}`` (``set``, ``frozenset``)
other dict             ``{"$":"dict","v":[[k, v], ...]}`` (order kept)
bytes, bytearray       ``{"$":"bytes","b":0}``; memoryview arrives as bytes
complex                ``{"$":"complex","v":[re, im]}``
Decimal                ``{"$":"decimal","v":"-0.00"}`` (NaN, sNaN, digits kept)
Fraction               ``{"$":"fraction","v":[n, d]}``
datetime/date/time     ``{"$":"datetime","v":iso,"tz":TZ,"fold":1}``
timedelta              ``{"$":"timedelta","v":[days, seconds, us]}``
  TZ                   ``{"utc": offset_us, "name": str}`` (datetime.timezone),
                       ``{"zone": key, "utc":..., "name":...}`` (ZoneInfo; the
                       fixed offset is the fallback if the key is unknown);
                       any other tzinfo: its fixed offset at that instant
UUID                   ``{"$":"uuid","v":hex}``
PurePath family        ``{"$":"path","k":"PosixPath","v":str}``; WindowsPath
                       arrives as PureWindowsPath on POSIX (PosixPath as
                       PurePosixPath on Windows)
Enum member            ``{"$":"enum","mod":..,"cls":qualname,"name":..,"v":value}``:
                       the member if ``enum_types`` resolves the class, else
                       the plain value (IntEnum -> int, StrEnum -> str)
exception              ``{"$":"exc","e":encode_exception(...)}``
dataclass, pydantic    a plain dict of the fields (pydantic: ``model_dump()``);
                       TypedDicts are dicts. The receiver validates dicts into
                       the annotated types; no class names travel.
subclasses of builtin  the base type (OrderedDict, Counter, defaultdict ->
containers/scalars     dict; namedtuple -> tuple; str/int subclasses -> base)
anything else          ``{"$":"opaque","type":qualname,"repr":repr[:10000]}``
                       -> :class:`Opaque`, whose repr() is the original's
numpy ndarray          ``{"$":"ndarray","dtype":"<f8","shape":[..],"b":i}``,
                       raw C-order bytes (``"order":"F"`` for Fortran
                       arrays); kinds b,i,u,f,c,M,m,S,U only; object arrays
                       ``"dtype":"O","v":[...]`` element by element;
                       structured/void arrays are Opaque
numpy scalar           ``{"$":"npscalar","dtype":"<i4","v":3}`` (or ``"x":``
                       hex bytes for datetime64/timedelta64/longdouble)
pandas                 ``pd.DataFrame`` (columns Index, index Index, one
                       column node each), ``pd.Series``, ``pd.Index`` /
                       ``pd.RangeIndex`` / ``pd.MultiIndex``, ``pd.Timestamp``,
                       ``pd.Timedelta``, ``pd.NaT``, ``pd.NA``,
                       ``pd.Categorical``. A column node is ``{"k":"np"}``
                       (an ndarray node: numeric columns are raw buffers),
                       ``"dttz"`` (UTC datetime64 + TZ), ``"cat"`` (codes +
                       categories), ``"masked"`` (Int*/UInt*/Float*/boolean:
                       data + mask buffers), ``"str"`` (StringDtype, values +
                       storage + NA kind). Other extension dtypes (Period,
                       Interval, Sparse, Arrow) travel element by element and
                       arrive as object dtype.
=====================  ====================================================

Between pandas versions, values are rebuilt with the receiver's own
constructors: pandas < 2 gets non-ns datetimes as ns; pandas 3's ``str``
dtype becomes ``string`` before pandas 2.3; pytz zones come back as the
receiver's default zone type for that key (pytz before pandas 3).

Receiving side without numpy/pandas: arrays arrive as nested lists (as
``ndarray.tolist()`` would give: datetime64 in units of us or coarser as
datetime/date, finer units as ints; float128 as Opaque), numpy scalars as the
Python scalar, a DataFrame as ``{column: list}``, a Series or an Index as a
list (a MultiIndex as a list of tuples), Timestamp and pandas datetime
values as datetime (ns cut to us), Timedelta and pandas timedelta values as
timedelta, NaT and NA as None, Categorical as a list.

Security and limits
===================
The decoder assumes a hostile sender (the host decodes what code in the
sandbox sends). It never unpickles, evals or imports anything named by the
data (enum classes come only from the caller's ``enum_types``), and never
opens a file the data names: a zone key is used only if it is a name in the
IANA time zone database (``zoneinfo.available_timezones()``, read once; its
``posix/`` and ``right/`` variants too), else the node's fixed offset is
used; pandas never sees other keys (it would open ``"dateutil/<path>"``).
numpy dtypes are restricted to kinds b,i,u,f,c,M,m,S,U without fields
(object arrays are only built element by element); ``prod(shape) *
itemsize`` must equal the buffer length; each buffer may be used once;
pandas objects are rebuilt through public constructors only.

Every limit raises :class:`CodecError`, and the encoder refuses the same
values with :class:`EncodeError` (a CodecError) so the sender learns first:

- ``max_bytes``: the payload's size.
- ``max_depth`` (default 100): nesting of containers. Python's recursion
  limit caps the useful value at about 200 (plain lists: ~300); deeper
  values fail with the same error, never RecursionError.
- ``max_items`` (default 5,000,000): values built. The JSON header is
  counted BEFORE it is parsed (one per ``,`` ``:`` ``[`` ``{`` outside
  strings, plus one; :func:`json_items_within`), because ``json`` turns 3
  bytes of ``[],`` into ~70 bytes of objects; so a payload's Python objects
  take at most ~70 bytes an item (~350 MB at the default) plus about its
  own size (buffers, strings; text with characters past U+FFFF is held at
  4 bytes a character). The decoder counts again what it builds beyond the
  JSON: list elements from arrays without numpy, a RangeIndex as a list
  without pandas, one per path component, and 100
  (``PANDAS_OBJECT_ITEMS``) per pandas column, index or level (a Series
  weighs ~2 KB). The buffer table may not claim more buffers than the
  header can reference, and is never turned into millions of objects.
- Numbers are bounded so that neither rebuilding them nor the obvious next
  step (``int(x)``, ``Fraction(x)``, hashing) holds the GIL for long:
  ints up to ``MAX_INT_BITS`` (2**20 bits, 128 KiB; rebuilt from hex in
  linear time); a Fraction's numerator and denominator up to
  ``MAX_FRACTION_BITS`` (16,384 bits; normalising runs gcd(), quadratic:
  under 1 ms at that size, 29 s for two 6-Mbit parts); a Decimal up to
  ``MAX_DECIMAL_DIGITS`` (5,000) digits with an exponent within
  +-``MAX_DECIMAL_EXPONENT`` (5,000; ``int(Decimal("1e999999"))`` takes
  minutes); plain JSON ints have Python's 4,300-digit limit; floats and
  complex numbers are fixed-size; timedeltas and datetimes are range-checked
  by their constructors.
- Keys with the same hash in a tagged dict or set (hash flooding); strings
  hash with a per-process random key.
- Decoding is linear in the payload apart from these bounded steps. One
  ``json.loads`` call still holds the GIL while it parses the header: other
  threads wait up to ~1.5 s for a header at the default ``max_items`` (5M
  floats, or 60 MB of 4300-digit ints) on a busy 2-core VM; the rest of
  decoding lets other threads run.

Speed (Python 3.11, numpy 2.4, pandas 3.1, a 2-core VM; best of 5, measured
with ``python sandbox/runtime/sandbox_codec.py --bench``)::

    ("Paris", 3, {"unit": "C"}) dumps + loads      14-20 us
    50 MB of bytes: encode (zero-copy chunks)      0.007 ms
                    decode (one copy into bytes)   40-50 ms (a bare bytes() copy: the same)
    DataFrame 1,000,000 rows x 3 numeric columns   28-34 ms dumps + loads
    DataFrame 100,000 rows of str                  26-34 ms dumps + loads
"""

from __future__ import annotations

import array
import base64
import builtins
import datetime as _dt
import decimal
import enum
import fractions
import importlib
import itertools
import json
import math
import pathlib
import re
import struct
import sys
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

__all__ = [
    "CodecError",
    "EncodeError",
    "Opaque",
    "ToolError",
    "encode",
    "encoded_size",
    "decode",
    "dumps",
    "loads",
    "to_jsonable",
    "from_jsonable",
    "encode_exception",
    "decode_exception",
]

MAGIC = b"CXC1"
DEFAULT_MAX_DEPTH = 100
DEFAULT_MAX_ITEMS = 5_000_000
#: Opaque values carry at most this much of the original repr().
REPR_LIMIT = 10_000
#: Exception messages are cut to this many characters.
MESSAGE_LIMIT = 20_000
#: Largest int rebuilt (bits; 128 KiB): rebuilding from hex is linear, so this only caps memory.
MAX_INT_BITS = 1 << 20
#: Largest numerator or denominator of a Fraction (bits): Fraction() normalises with gcd(),
#: quadratic and holding the GIL; at this size it takes under a millisecond. Every int Python
#: prints by default (4300 digits, 14,284 bits) fits.
MAX_FRACTION_BITS = 16_384
#: Largest Decimal rebuilt: coefficient digits, and the exponent's magnitude.
MAX_DECIMAL_DIGITS = 5_000
MAX_DECIMAL_EXPONENT = 5_000
#: Items a pandas column, index or index level counts as (its Python objects weigh ~2 KB).
PANDAS_OBJECT_ITEMS = 100

_PREFIX = struct.Struct("<4sII")
_TAG = "$"
_NoneType = type(None)
_JSON_SCALARS = frozenset({str, int, float, bool, _NoneType})
_PLAIN_LEAVES = frozenset({str, bool, _NoneType})
_STR_ONLY = frozenset({str})
_INT_LO, _INT_HI = -(2**63), 2**64  # plain JSON ints: what int64/uint64 readers take
_NAT = -(2**63)  # numpy's NaT in int64


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


class _Cut(Exception):
    """to_jsonable: a buffer too big to inline; the value owning it is summarised."""

    def __init__(self, size: int) -> None:
        self.size = size


# --- helpers ---------------------------------------------------------------------


def _type_name(t: type) -> str:
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


def _safe_repr(v: Any, limit: int = REPR_LIMIT) -> str:
    try:
        text = repr(v)
        if type(text) is not str:
            text = str.__str__(text)
    except Exception as e:  # a failing __repr__ must not stop the call
        try:
            return f"<{_type_name(type(v))} object (repr failed: {type(e).__name__})>"
        except Exception:
            return "<object (repr failed)>"
    if len(text) > limit:
        text = text[: limit - 30] + f"... [{len(text) - limit + 30} chars cut]"
    return text


def _own_str(v: Any, limit: int) -> str | None:
    """``str(v)`` when its class defines its own (capped); None otherwise or when it fails."""
    try:
        if type(v).__str__ is object.__str__:
            return None
        text = str(v)
        if type(text) is not str:
            return None
    except Exception:
        return None
    return text if len(text) <= limit else text[: limit - 30] + f"... [{len(text) - limit + 30} chars cut]"


def _opaque_node(t: type, text: str, **extra: Any) -> dict:
    node = {_TAG: "opaque", "type": _type_name(t), "repr": text}
    node.update(extra)
    return node


_INT_TOO_BIG = f"an int of more than {MAX_INT_BITS} bits cannot be sent: send it as str or bytes"
_FRACTION_TOO_BIG = (f"a Fraction whose numerator or denominator has more than {MAX_FRACTION_BITS} bits "
                     "cannot be sent: send it as str, or as a (numerator, denominator) tuple")
_DECIMAL_TOO_BIG = (f"a Decimal of more than {MAX_DECIMAL_DIGITS} digits or with an exponent beyond "
                    f"+-{MAX_DECIMAL_EXPONENT} cannot be sent: send it as str")


def _decimal_fits(v: decimal.Decimal) -> bool:
    """Within MAX_DECIMAL_DIGITS and MAX_DECIMAL_EXPONENT (NaN payloads count as digits)."""
    sign, digits, exponent = v.as_tuple()
    return len(digits) <= MAX_DECIMAL_DIGITS and (type(exponent) is not int or abs(exponent) <= MAX_DECIMAL_EXPONENT)


def _nonfinite(x: float) -> str:
    return "nan" if x != x else ("inf" if x > 0 else "-inf")


def _float_out(x: float) -> float | str:
    return x if x - x == 0.0 else _nonfinite(x)


def _float_in(v: Any) -> float:
    t = type(v)
    if t is float:
        return v
    if t is int:
        return float(v)
    if t is str and v in ("nan", "inf", "-inf"):
        return float(v)
    raise CodecError(f"malformed payload: expected a float, got {t.__name__}")


def _td_us(td: _dt.timedelta) -> int:
    return (td.days * 86400 + td.seconds) * 1_000_000 + td.microseconds


def _numpy():
    mod = sys.modules.get("numpy")
    if mod is not None:
        return mod
    try:
        return importlib.import_module("numpy")
    except Exception:  # missing or blocked (sys.modules["numpy"] = None)
        return None


def _pandas():
    mod = sys.modules.get("pandas")
    if mod is not None:
        return mod
    try:
        return importlib.import_module("pandas")
    except Exception:
        return None


def _too_many(max_items: float) -> CodecError:
    return CodecError(f"payload has more than max_items={max_items} values: send big data as bytes, "
                      "numpy arrays or DataFrames (one buffer each), or send fewer values")


# Escapes first (a backslash only occurs inside JSON strings), then strings: both linear, even on hostile text.
_JSON_ESCAPE = re.compile(r"\\.", re.S)
_JSON_STRING = re.compile(r'"[^"]*"')


def _json_tokens(text: str) -> int:
    return text.count(",") + text.count(":") + text.count("[") + text.count("{")


def json_items_within(text: str, max_items: float) -> bool:
    """Whether JSON ``text`` builds at most ``max_items`` values; to ask before parsing it.

    ``json.loads`` turns 3 bytes (``[],``) into ~70 bytes of Python objects and
    has no per-item hook, so the values are counted first: one per ``,``, ``:``,
    ``[`` and ``{`` outside strings, plus one (every value but the first in a
    container follows a ``,`` or ``:``). Linear time; the common case is four
    ``str.count`` calls (strings are stripped only when the raw count is over).
    Malformed JSON may be miscounted past the point where ``json`` stops at it.
    """
    if max_items == math.inf or _json_tokens(text) < max_items:  # commas in strings count too: an upper bound
        return True
    bare = _JSON_ESCAPE.sub("", text) if "\\" in text else text
    if '"' in bare:
        bare = _JSON_STRING.sub("", bare)
    return _json_tokens(bare) < max_items


def encoded_size(chunks: Iterable[bytes | memoryview]) -> int:
    """Total size in bytes of the chunks returned by :func:`encode`."""
    return sum(map(len, chunks))


# --- encoding ----------------------------------------------------------------------


class _Encoder:
    __slots__ = ("max_depth", "max_bytes", "bufs", "nbytes", "safe", "inline", "active")

    def __init__(self, max_depth: int, max_bytes: int | None, safe: bool = False, inline: int = 0):
        self.max_depth = max_depth
        self.max_bytes = max_bytes
        self.bufs: list = []
        self.nbytes = 0
        self.safe = safe  # to_jsonable: never raise, detect cycles, inline buffers
        self.inline = inline
        self.active: set[int] = set()

    def enc(self, v: Any, depth: int) -> Any:
        t = type(v)
        if t is str:
            if self.max_bytes is not None and len(v) > self.max_bytes and not self.safe:
                # Refused before it is copied into the header: a string takes at least a byte a character.
                raise EncodeError(f"a string of {len(v)} characters is over max_bytes={self.max_bytes}: "
                                  "pass a larger max_bytes= or send less data")
            return v
        if t is bool or v is None:
            return v
        if t is int:
            if _INT_LO <= v < _INT_HI:
                return v
        elif t is float:
            if v - v == 0.0:  # finite
                return v
        if depth >= self.max_depth:
            return self.too_deep(v)
        if self.safe:
            return self.guarded(v, t, depth + 1)
        if t is list:
            return self.seq(v, depth + 1)
        if t is dict:
            return self.mapping(v, depth + 1)
        handler = _ENCODERS.get(t)
        if handler is not None:
            return handler(self, v, depth + 1)
        return self.other(v, t, depth + 1)

    def guarded(self, v: Any, t: type, depth: int) -> Any:
        key = id(v)
        if key in self.active:
            text = "[...]" if t is list else "{...}" if t is dict else f"<cycle: {_type_name(t)}>"
            return _opaque_node(t, text)
        self.active.add(key)
        try:
            if t is list:
                return self.seq(v, depth)
            if t is dict:
                return self.mapping(v, depth)
            handler = _ENCODERS.get(t)
            if handler is not None:
                return handler(self, v, depth)
            return self.other(v, t, depth)
        except _Cut as cut:
            if isinstance(v, (bytes, bytearray, memoryview)):
                text = f"<{_type_name(t)} of {cut.size} bytes, not logged>"
            else:
                text = _safe_repr(v)
            return _opaque_node(t, text, size=cut.size)
        except Exception as e:
            return _opaque_node(t, _safe_repr(v), error=f"{type(e).__name__}: {_safe_repr(e, 500)}")
        finally:
            self.active.discard(key)

    def too_deep(self, v: Any) -> Any:
        if self.safe:
            text = f"<{_type_name(type(v))} nested deeper than {self.max_depth} levels, not logged>"
            return _opaque_node(type(v), text)
        raise EncodeError(
            f"value is nested deeper than max_depth={self.max_depth}: pass a larger "
            "max_depth= (up to about 200) or send a flatter value"
        )

    def buf(self, node: dict, data: bytes | memoryview) -> dict:
        n = len(data)
        if self.safe:
            if n > self.inline:
                raise _Cut(n)
            node["b64"] = base64.b64encode(data).decode("ascii")
            return node
        total = self.nbytes + n
        if self.max_bytes is not None and total > self.max_bytes:
            raise EncodeError(
                f"payload is over max_bytes={self.max_bytes} (buffers alone reach {total} bytes): "
                "pass a larger max_bytes= or send less data"
            )
        self.nbytes = total
        node["b"] = len(self.bufs)
        self.bufs.append(data)
        return node

    def seq(self, v: Any, depth: int) -> list:
        if len(v) > 8:  # homogeneous lists of plain scalars skip the per-item Python work
            kinds = set(map(type, v))
            if kinds <= _PLAIN_LEAVES:
                return list(v)
            if len(kinds) == 1:
                if float in kinds and all(map(math.isfinite, v)):
                    return list(v)
                if int in kinds and _INT_LO <= min(v) and max(v) < _INT_HI:
                    return list(v)
        enc = self.enc
        return [enc(x, depth) for x in v]

    def mapping(self, v: Mapping, depth: int) -> dict:
        enc = self.enc
        if _TAG not in v and (not v or set(map(type, v)) == _STR_ONLY):
            return {k: enc(x, depth) for k, x in v.items()}
        return {_TAG: "dict", "v": [[enc(k, depth), enc(x, depth)] for k, x in v.items()]}

    def other(self, v: Any, t: type, depth: int) -> Any:
        if isinstance(v, enum.Enum):
            return _e_enum(self, v, depth)
        if isinstance(v, BaseException):
            return {_TAG: "exc", "e": encode_exception(v)}
        try:
            mod = t.__module__
            if isinstance(mod, str):
                if mod == "numpy" or mod.startswith("numpy."):
                    node = _e_numpy(self, v, depth)
                    if node is not None:
                        return node
                elif mod == "pandas" or mod.startswith("pandas."):
                    node = _e_pandas(self, v, depth)
                    if node is not None:
                        return node
            pd = sys.modules.get("pandas")
            if pd is not None and isinstance(v, (pd.DataFrame, pd.Series, pd.Index)):
                node = _e_pandas(self, v, depth)  # subclasses from other packages travel as the base
                if node is not None:
                    return node
            if not isinstance(v, type):
                dc = sys.modules.get("dataclasses")  # loaded if v is a dataclass (saves ~10 ms of import)
                if dc is not None and dc.is_dataclass(v):
                    fields = {}
                    for f in dc.fields(v):
                        try:
                            fields[f.name] = getattr(v, f.name)
                        except AttributeError:  # init=False field never set
                            pass
                    return self.mapping(fields, depth)
                if callable(getattr(t, "model_dump", None)):  # pydantic, duck-typed
                    dumped = v.model_dump()
                    if isinstance(dumped, dict):
                        return self.mapping(dumped, depth)
            for base, convert in _BASES:
                if isinstance(v, base):
                    return _ENCODERS[base](self, convert(v), depth)
        except (EncodeError, _Cut, RecursionError):
            raise
        except Exception:  # odd objects become Opaque rather than failing the call
            pass
        node = _opaque_node(t, _safe_repr(v))
        text = _own_str(v, REPR_LIMIT)
        if text is not None and text != node["repr"]:
            node["str"] = text  # print(x) in the sandbox shows what print(x) shows on the host
        return node


def _e_int(enc: _Encoder, v: int, depth: int) -> Any:
    if _INT_LO <= v < _INT_HI:
        return v
    if v.bit_length() > MAX_INT_BITS and not enc.safe:
        raise EncodeError(_INT_TOO_BIG)  # the receiver would refuse it: say so where it is sent
    return {_TAG: "int", "x": format(v, "x")}


def _e_float(enc: _Encoder, v: float, depth: int) -> Any:
    return v if v - v == 0.0 else {_TAG: "float", "v": _nonfinite(v)}


def _e_list(enc: _Encoder, v: list, depth: int) -> list:
    return enc.seq(v, depth)


def _e_dict(enc: _Encoder, v: dict, depth: int) -> dict:
    return enc.mapping(v, depth)


def _e_tuple(enc: _Encoder, v: tuple, depth: int) -> dict:
    return {_TAG: "tuple", "v": enc.seq(v, depth)}


def _e_set(enc: _Encoder, v: set, depth: int) -> dict:
    return {_TAG: "set", "v": enc.seq(v, depth)}


def _e_frozenset(enc: _Encoder, v: frozenset, depth: int) -> dict:
    return {_TAG: "frozenset", "v": enc.seq(v, depth)}


def _e_bytes(enc: _Encoder, v: bytes, depth: int) -> dict:
    return enc.buf({_TAG: "bytes"}, v)


def _e_bytearray(enc: _Encoder, v: bytearray, depth: int) -> dict:
    # Copied: a view would pin the bytearray's size and see later changes.
    return enc.buf({_TAG: "bytearray"}, bytes(v))


def _e_memoryview(enc: _Encoder, v: memoryview, depth: int) -> dict:
    try:
        if v.c_contiguous:
            data = v if (v.ndim == 1 and v.format == "B") else v.cast("B")
        else:
            data = v.tobytes()
    except ValueError:  # released
        return _opaque_node(memoryview, _safe_repr(v))
    return enc.buf({_TAG: "bytes"}, data)


def _e_complex(enc: _Encoder, v: complex, depth: int) -> dict:
    return {_TAG: "complex", "v": [_float_out(v.real), _float_out(v.imag)]}


def _e_decimal(enc: _Encoder, v: decimal.Decimal, depth: int) -> dict:
    if not enc.safe and not _decimal_fits(v):
        raise EncodeError(_DECIMAL_TOO_BIG)
    return {_TAG: "decimal", "v": str(v)}


def _e_fraction(enc: _Encoder, v: fractions.Fraction, depth: int) -> dict:
    if not enc.safe and max(v.numerator.bit_length(), v.denominator.bit_length()) > MAX_FRACTION_BITS:
        raise EncodeError(_FRACTION_TOO_BIG)
    return {_TAG: "fraction", "v": [_e_int(enc, v.numerator, 0), _e_int(enc, v.denominator, 0)]}


def _tz_node(tz: _dt.tzinfo, at: Any) -> dict | None:
    """TZ node for ``tz``; ``at`` (datetime/time or None) gives the fallback offset."""
    if type(tz) is _dt.timezone:
        args = tz.__getinitargs__()  # (offset,) or (offset, name): tells an explicit name
        node: dict = {"utc": _td_us(args[0])}
        if len(args) > 1:
            node["name"] = args[1]
        return node
    key = getattr(tz, "key", None)  # zoneinfo.ZoneInfo
    lib = None
    if not isinstance(key, str):
        key = getattr(tz, "zone", None)  # pytz
        lib = "pytz"
    try:
        off = at.utcoffset() if at is not None else tz.utcoffset(None)
        name = at.tzname() if at is not None else tz.tzname(None)
    except Exception:
        off = name = None
    node = {}
    if isinstance(key, str):
        node["zone"] = key
        if lib:
            node["lib"] = lib
    if isinstance(off, _dt.timedelta):
        node["utc"] = _td_us(off)
        if isinstance(name, str):
            node["name"] = name
    return node or None


def _e_datetime(enc: _Encoder, v: _dt.datetime, depth: int) -> dict:
    node = {_TAG: "datetime", "v": _dt.datetime.isoformat(_dt.datetime.replace(v, tzinfo=None, fold=0))}
    if v.tzinfo is not None:
        tz = _tz_node(v.tzinfo, v)
        if tz is not None:
            node["tz"] = tz
    if v.fold:
        node["fold"] = 1
    return node


def _e_date(enc: _Encoder, v: _dt.date, depth: int) -> dict:
    return {_TAG: "date", "v": _dt.date.isoformat(v)}


def _e_time(enc: _Encoder, v: _dt.time, depth: int) -> dict:
    node = {_TAG: "time", "v": _dt.time.isoformat(_dt.time.replace(v, tzinfo=None, fold=0))}
    if v.tzinfo is not None:
        tz = _tz_node(v.tzinfo, v)
        if tz is not None:
            node["tz"] = tz
    if v.fold:
        node["fold"] = 1
    return node


def _e_timedelta(enc: _Encoder, v: _dt.timedelta, depth: int) -> dict:
    return {_TAG: "timedelta", "v": [v.days, v.seconds, v.microseconds]}


def _e_uuid(enc: _Encoder, v: uuid.UUID, depth: int) -> dict:
    return {_TAG: "uuid", "v": v.hex}


def _e_path(enc: _Encoder, v: pathlib.PurePath, depth: int) -> dict:
    for cls in (pathlib.WindowsPath, pathlib.PosixPath, pathlib.PureWindowsPath, pathlib.PurePosixPath):
        if isinstance(v, cls):
            return {_TAG: "path", "k": cls.__name__, "v": str(v)}
    raise TypeError("unknown path flavour")


def _e_opaque(enc: _Encoder, v: Opaque, depth: int) -> dict:
    node = {_TAG: "opaque", "type": v.type_name, "repr": v.repr_text}
    if v.str_text is not None:
        node["str"] = v.str_text
    return node


def _e_enum(enc: _Encoder, v: enum.Enum, depth: int) -> dict:
    t = type(v)
    return {
        _TAG: "enum",
        "mod": str(getattr(t, "__module__", "")),
        "cls": t.__qualname__,
        "name": v.name if isinstance(v.name, str) else None,
        "v": enc.enc(v.value, depth),
    }


_ENCODERS: Mapping[type, Any] = MappingProxyType(
    {
        str: lambda enc, v, depth: v,
        int: _e_int,
        float: _e_float,
        list: _e_list,
        dict: _e_dict,
        tuple: _e_tuple,
        set: _e_set,
        frozenset: _e_frozenset,
        bytes: _e_bytes,
        bytearray: _e_bytearray,
        memoryview: _e_memoryview,
        complex: _e_complex,
        decimal.Decimal: _e_decimal,
        fractions.Fraction: _e_fraction,
        _dt.datetime: _e_datetime,
        _dt.date: _e_date,
        _dt.time: _e_time,
        _dt.timedelta: _e_timedelta,
        uuid.UUID: _e_uuid,
        pathlib.PurePosixPath: _e_path,
        pathlib.PureWindowsPath: _e_path,
        pathlib.PosixPath: _e_path,
        pathlib.WindowsPath: _e_path,
        pathlib.PurePath: _e_path,
        pathlib.Path: _e_path,
        Opaque: _e_opaque,
    }
)

# Subclasses of these travel as the base type (first match wins; the value is
# converted first so that overridden methods of the subclass do not matter).
_BASES: tuple = (
    (int, int),
    (float, float),
    (complex, complex),
    (str, str.__str__),
    (bytes, bytes),
    (bytearray, bytes),
    (list, list),
    (tuple, tuple),
    (dict, dict),
    (set, set),
    (frozenset, frozenset),
    (_dt.datetime, lambda v: v),
    (_dt.date, lambda v: v),
    (_dt.time, lambda v: v),
    (_dt.timedelta, lambda v: v),
    (decimal.Decimal, lambda v: v),
    (fractions.Fraction, lambda v: v),
    (uuid.UUID, lambda v: v),
    (pathlib.PurePath, lambda v: v),
)


# --- numpy and pandas (encoding) -----------------------------------------------

_ND_KINDS = frozenset("biufcMmSU")
_MASKED_DTYPES = frozenset(
    "Int8 Int16 Int32 Int64 UInt8 UInt16 UInt32 UInt64 Float32 Float64 boolean".split()
)


def _nd_node(enc: _Encoder, np: Any, a: Any, depth: int) -> dict | None:
    dt = a.dtype
    shape = list(a.shape)
    if dt.kind in _ND_KINDS and dt.fields is None and dt.subdtype is None and dt.itemsize > 0:
        node = {_TAG: "ndarray", "dtype": dt.str, "shape": shape}
        if a.flags.c_contiguous:
            flat = a
        elif a.flags.f_contiguous:
            flat = a.T  # C-contiguous: raw bytes without a copy
            node["order"] = "F"
        else:
            flat = np.ascontiguousarray(a)
        return enc.buf(node, memoryview(flat.reshape(-1).view(np.uint8)))
    if dt.kind == "O":  # element by element, in C order
        item = enc.enc
        return {_TAG: "ndarray", "dtype": "O", "shape": shape, "v": [item(x, depth) for x in a.reshape(-1).tolist()]}
    return None  # structured / void arrays: Opaque


def _e_numpy(enc: _Encoder, v: Any, depth: int) -> dict | None:
    np = sys.modules.get("numpy")
    if np is None:
        return None
    if type(v) is np.ndarray:
        return _nd_node(enc, np, v, depth)
    if not isinstance(v, np.generic):
        return None  # numpy.ma arrays, matrices, dtypes...: Opaque
    dt = v.dtype
    kind = dt.kind
    if kind == "b":
        return {_TAG: "npscalar", "dtype": dt.str, "v": bool(v)}
    if kind in "iu":
        return {_TAG: "npscalar", "dtype": dt.str, "v": int(v)}
    if kind == "f" and dt.itemsize <= 8:
        return {_TAG: "npscalar", "dtype": dt.str, "v": _float_out(float(v))}
    if kind == "c" and dt.itemsize <= 16:
        return {_TAG: "npscalar", "dtype": dt.str, "v": [_float_out(float(v.real)), _float_out(float(v.imag))]}
    if kind == "U":
        return {_TAG: "npscalar", "dtype": "U", "v": str(v)}
    if kind == "S":
        return {_TAG: "npscalar", "dtype": "S", "x": bytes(v).hex()}
    if kind in "fcMm":  # longdouble, datetime64, timedelta64: exact raw bytes
        return {_TAG: "npscalar", "dtype": dt.str, "x": np.array(v).tobytes().hex()}
    return None


def _pd_array_node(enc: _Encoder, pd: Any, np: Any, obj: Any, depth: int) -> dict:
    """Column node for the values of a Series or an Index."""
    dtype = obj.dtype
    if isinstance(dtype, np.dtype):
        node = _nd_node(enc, np, obj.to_numpy(), depth)
        if node is not None:
            return {"k": "np", "a": node}
    elif isinstance(dtype, pd.DatetimeTZDtype):
        utc = obj.array.tz_convert("UTC").tz_localize(None).to_numpy()
        tz = _tz_node(dtype.tz, None)
        if tz is not None:
            return {"k": "dttz", "a": _nd_node(enc, np, utc, depth), "tz": tz}
    elif isinstance(dtype, pd.CategoricalDtype):
        cat = obj.array
        return {
            "k": "cat",
            "codes": _nd_node(enc, np, np.asarray(cat.codes), depth),
            "cats": _pd_index_node(enc, pd, np, cat.categories, depth),
            "ordered": bool(cat.ordered),
        }
    elif str(dtype) in _MASKED_DTYPES:
        ea = obj.array
        zero = False if str(dtype) == "boolean" else 0
        return {
            "k": "masked",
            "dtype": str(dtype),
            "a": _nd_node(enc, np, ea.to_numpy(dtype=dtype.numpy_dtype, na_value=zero), depth),
            "m": _nd_node(enc, np, np.asarray(ea.isna(), dtype=bool), depth),
        }
    elif isinstance(dtype, pd.StringDtype):
        na = getattr(dtype, "na_value", None)
        values = obj.array.to_numpy(dtype=object, na_value=None).tolist()
        if enc.safe:  # logs: a big text column is summarised like a big buffer
            size = sum(len(x) for x in values if x is not None)
            if size > enc.inline:
                raise _Cut(size)
        return {
            "k": "str",
            "storage": str(dtype.storage),
            "na": "nan" if isinstance(na, float) and na != na else "NA",
            "v": [x if type(x) is str or x is None else str(x) for x in values],
        }
    # Anything else (Period, Interval, Sparse, Arrow, odd tz): element by element.
    values = np.asarray(obj.astype(object).to_numpy(), dtype=object)
    return {"k": "np", "a": _nd_node(enc, np, values, depth)}


def _pd_index_node(enc: _Encoder, pd: Any, np: Any, idx: Any, depth: int) -> dict:
    if type(idx) is pd.RangeIndex:
        return {_TAG: "pd.RangeIndex", "v": [idx.start, idx.stop, idx.step], "name": enc.enc(idx.name, depth)}
    if isinstance(idx, pd.MultiIndex):
        return {
            _TAG: "pd.MultiIndex",
            "levels": [_pd_index_node(enc, pd, np, lev, depth) for lev in idx.levels],
            "codes": [_nd_node(enc, np, np.asarray(c), depth) for c in idx.codes],
            "names": [enc.enc(n, depth) for n in idx.names],
        }
    node = {_TAG: "pd.Index", "data": _pd_array_node(enc, pd, np, idx, depth), "name": enc.enc(idx.name, depth)}
    if isinstance(idx, (pd.DatetimeIndex, pd.TimedeltaIndex)) and idx.freq is not None:
        node["freq"] = idx.freqstr
    return node


def _e_pandas(enc: _Encoder, v: Any, depth: int) -> dict | None:
    pd = sys.modules.get("pandas")
    np = sys.modules.get("numpy")
    if pd is None or np is None:
        return None
    if isinstance(v, pd.DataFrame):
        return {
            _TAG: "pd.DataFrame",
            "columns": _pd_index_node(enc, pd, np, v.columns, depth),
            "index": _pd_index_node(enc, pd, np, v.index, depth),
            "data": [_pd_array_node(enc, pd, np, v.iloc[:, i], depth) for i in range(v.shape[1])],
        }
    if isinstance(v, pd.Series):
        return {
            _TAG: "pd.Series",
            "data": _pd_array_node(enc, pd, np, v, depth),
            "index": _pd_index_node(enc, pd, np, v.index, depth),
            "name": enc.enc(v.name, depth),
        }
    if isinstance(v, pd.Index):
        return _pd_index_node(enc, pd, np, v, depth)
    if v is pd.NaT:
        return {_TAG: "pd.NaT"}
    if v is pd.NA:
        return {_TAG: "pd.NA"}
    if isinstance(v, pd.Timestamp):
        unit = np.datetime_data(v.asm8.dtype)[0]  # asm8: UTC for aware Timestamps
        node = {_TAG: "pd.Timestamp", "v": int(v.asm8.view("i8")), "unit": unit}
        tz = _tz_node(v.tzinfo, v) if v.tzinfo is not None else None
        if tz is not None:
            node["tz"] = tz
        return node
    if isinstance(v, pd.Timedelta):
        unit = np.datetime_data(v.asm8.dtype)[0]
        return {_TAG: "pd.Timedelta", "v": int(v.asm8.view("i8")), "unit": unit}
    if isinstance(v, pd.Categorical):
        node = _pd_array_node(enc, pd, np, pd.Series(v, copy=False), depth)
        node[_TAG] = "pd.Categorical"
        return node
    return None


# --- decoding ----------------------------------------------------------------------

# Unambiguous alternatives: linear-time matching even on hostile megabyte literals.
_DECIMAL_RE = re.compile(r"[+-]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?|inf(?:inity)?|s?nan\d*)\Z", re.I | re.A)
_HEX_INT_RE = re.compile(r"-?[0-9a-f]+\Z")
_DTYPE_RE = re.compile(r"([<>|=])([biufcMmSU])(\d{1,5})(?:\[(\d{0,6})([a-zA-Z]{1,2})\])?\Z")
_UUID_RE = re.compile(r"[0-9a-f]{32}\Z")
_FREQ_RE = re.compile(r"-?[A-Za-z0-9]{1,24}(?:-[A-Za-z]{1,8})?\Z")
_TIME_UNITS = frozenset("Y M W D h m s ms us ns ps fs as".split())
_PD_UNITS = frozenset({"s", "ms", "us", "ns"})
_US_PER = MappingProxyType({"W": 604_800_000_000, "D": 86_400_000_000, "h": 3_600_000_000,
                            "m": 60_000_000, "s": 1_000_000, "ms": 1000, "us": 1})
_EPOCH = _dt.datetime(1970, 1, 1)
_EPOCH_DATE = _dt.date(1970, 1, 1)
_UTC = _dt.timezone.utc
_PATHS = MappingProxyType(
    {
        "PurePosixPath": pathlib.PurePosixPath,
        "PureWindowsPath": pathlib.PureWindowsPath,
        "PosixPath": pathlib.PurePosixPath if sys.platform == "win32" else pathlib.PosixPath,
        "WindowsPath": pathlib.WindowsPath if sys.platform == "win32" else pathlib.PureWindowsPath,
    }
)
_INDEX_TAGS = frozenset({"pd.Index", "pd.RangeIndex", "pd.MultiIndex"})


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise CodecError(f"malformed payload: {what}")


def _str_field(node: dict, key: str, limit: int = 1 << 20) -> str:
    v = node.get(key)
    _need(type(v) is str and len(v) <= limit, f"{node.get(_TAG)}: {key!r} must be a string")
    return v


def _int_field(v: Any, what: str) -> int:
    _need(type(v) is int, f"{what} must be an int")
    return v


def _enum_registry(enum_types: Any) -> dict:
    if not enum_types:
        return {}
    if isinstance(enum_types, Mapping):
        return {k: c for k, c in enum_types.items() if isinstance(c, type) and issubclass(c, enum.Enum)}
    reg: dict = {}
    for c in enum_types:
        if isinstance(c, type) and issubclass(c, enum.Enum):
            reg.setdefault(c.__qualname__, c)
            reg[f"{c.__module__}.{c.__qualname__}"] = c
    return reg


class _Buffers:
    """The payload's raw buffers, each sliced when it is used (never a list of millions of views)."""

    __slots__ = ("mv", "lens", "starts")

    def __init__(self, mv: memoryview, table: int, n: int, start: int) -> None:
        self.mv = mv
        self.lens = array.array("Q")  # 8 bytes an entry, as on the wire
        self.lens.frombytes(mv[table : table + 8 * n])
        if sys.byteorder == "big":
            self.lens.byteswap()
        self.starts = array.array("Q", itertools.accumulate(self.lens, initial=start))  # OverflowError: malformed

    @property
    def end(self) -> int:
        return self.starts[-1]

    def __len__(self) -> int:
        return len(self.lens)

    def __getitem__(self, i: int) -> memoryview:
        start = self.starts[i]
        return self.mv[start : start + self.lens[i]]


class _Decoder:
    __slots__ = ("max_depth", "max_items", "items", "bufs", "used", "enums", "lenient")

    def __init__(self, bufs: list, max_depth: int, max_items: float, enums: dict, lenient: bool = False):
        self.bufs = bufs
        self.max_depth = max_depth
        self.max_items = max_items
        self.items = 1
        self.used: set[int] = set()
        self.enums = enums
        self.lenient = lenient  # from_jsonable: rebuild what can be, Opaque the rest

    def count(self, n: int) -> None:
        self.items += n
        if self.items > self.max_items:
            raise _too_many(self.max_items)

    def too_deep(self) -> Any:
        if self.lenient:
            return Opaque("?", f"<nested deeper than {self.max_depth} levels>")
        raise CodecError(f"payload is nested deeper than max_depth={self.max_depth}")

    def dec(self, node: Any, depth: int) -> Any:
        t = type(node)
        if t is list:
            if depth >= self.max_depth:
                return self.too_deep()
            return self.dec_list(node, depth + 1)
        if t is dict:
            if depth >= self.max_depth:
                return self.too_deep()
            if _TAG not in node:
                self.count(len(node))
                dec = self.dec
                d = depth + 1
                return {k: (x if type(x) in _JSON_SCALARS else dec(x, d)) for k, x in node.items()}
            tag = node[_TAG]
            handler = _DECODERS.get(tag) if type(tag) is str else None
            if not self.lenient:
                if handler is None:
                    raise CodecError(f"malformed payload: unknown tag {_safe_repr(tag, 80)}")
                return handler(self, node, depth + 1)
            try:
                if handler is None:
                    raise CodecError("unknown tag")
                return handler(self, node, depth + 1)
            except Exception as e:
                name = _TAG_TYPES.get(tag, str(tag)[:80]) if type(tag) is str else "?"
                return Opaque(name, f"<{name}: not rebuilt ({type(e).__name__}: {_safe_repr(e, 300)})>")
        return node

    def dec_list(self, node: Any, depth: int) -> list:
        """Decode the elements of a JSON list (``depth``: the elements' depth)."""
        _need(type(node) is list, "expected a list")
        n = len(node)
        self.count(n)
        if n > 8 and set(map(type, node)) <= _JSON_SCALARS:
            # decode(): a fresh list from the JSON parser, safe to hand out.
            return list(node) if self.lenient else node
        dec = self.dec
        return [x if type(x) in _JSON_SCALARS else dec(x, depth) for x in node]

    def take(self, node: dict) -> memoryview:
        """The raw buffer referenced by ``node`` (each buffer may be used once)."""
        i = node.get("b")
        if type(i) is int:
            _need(0 <= i < len(self.bufs) and i not in self.used, "bad or reused buffer reference")
            self.used.add(i)
            return self.bufs[i]
        if self.lenient and type(node.get("b64")) is str:
            return memoryview(base64.b64decode(node["b64"], validate=True))
        raise CodecError("malformed payload: missing buffer reference")

    def check_keys(self, keys: list) -> None:
        # Keys sharing one hash make dict/set building quadratic: refuse floods.
        if len(keys) > 64 and max(Counter(map(hash, keys)).values()) > 64:
            raise CodecError("malformed payload: too many keys with the same hash")

    # -- numpy arrays ------------------------------------------------------------

    def nd(self, node: Any, depth: int, want_list: bool) -> Any:
        """An ndarray node -> ndarray (or nested lists without numpy / if want_list)."""
        _need(type(node) is dict and node.get(_TAG) == "ndarray", "expected an ndarray node")
        shape = node.get("shape")
        _need(type(shape) is list and len(shape) <= 64, "ndarray: bad shape")
        for s in shape:
            _need(type(s) is int and 0 <= s < 2**62, "ndarray: bad shape")
        n = math.prod(shape)
        order = node.get("order", "C")
        _need(order in ("C", "F"), "ndarray: bad order")
        dts = node.get("dtype")
        np = _numpy()
        if dts == "O":
            items = node.get("v")
            _need(type(items) is list and len(items) == n, "ndarray: item count does not match shape")
            values = self.dec_list(items, depth)
            if np is None or want_list:
                self.count(_nest_cost(shape))
                return _nest(values, shape, order)
            arr = np.empty(n, dtype=object)
            for i, x in enumerate(values):
                arr[i] = x  # item by item: numpy must not unpack nested lists
            return _reshape(arr, shape, order)
        _need(type(dts) is str, "ndarray: bad dtype")
        m = _DTYPE_RE.match(dts)
        _need(m is not None, f"ndarray: dtype {dts[:40]!r} not allowed")
        byteorder, kind, size_text, mult_text, unit = m.groups()
        size = int(size_text)
        itemsize = size * 4 if kind == "U" else size
        _need(itemsize > 0, "ndarray: zero-size dtype")
        if kind in "Mm":
            _need(size == 8 and (unit is None or unit in _TIME_UNITS), "ndarray: bad time unit")
        else:
            _need(unit is None, "ndarray: unit on a non-time dtype")
        data = self.take(node)
        _need(len(data) == n * itemsize, "ndarray: buffer length does not match shape and dtype")
        if np is not None:
            try:
                dt = np.dtype(dts)
            except Exception:
                raise CodecError(f"malformed payload: bad dtype {dts!r}") from None
            _need(dt.kind == kind and dt.itemsize == itemsize and dt.fields is None
                  and dt.subdtype is None and not dt.hasobject, f"ndarray: dtype {dts!r} not allowed")
            arr = np.frombuffer(data, dtype=dt, count=n).copy() if n else np.empty(0, dtype=dt)
            arr = _reshape(arr, shape, order)
            if want_list:
                self.count(_nest_cost(shape))
                return arr.tolist()
            return arr
        self.count(_nest_cost(shape))
        flat = _py_values(kind, itemsize, byteorder, mult_text, unit, data, n)
        if flat is None:
            return Opaque("numpy.ndarray", f"<numpy.ndarray dtype={dts} shape={tuple(shape)}: needs numpy>")
        return _nest(flat, shape, order)


def _reshape(arr: Any, shape: list, order: str) -> Any:
    if order == "F":
        return arr.reshape(shape[::-1]).T
    return arr.reshape(shape)


def _nest_cost(shape: list) -> int:
    """How many list cells nesting a flat list into ``shape`` creates."""
    cost, p = 0, 1
    for s in shape:
        p *= s
        cost += p
    return cost


def _nest(flat: list, shape: list, order: str) -> Any:
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return flat
    ndim = len(shape)
    strides = [0] * ndim
    p = 1
    for k in (range(ndim - 1, -1, -1) if order == "C" else range(ndim)):
        strides[k] = p
        p *= shape[k]

    def build(k: int, off: int) -> list:
        step, count = strides[k], shape[k]
        if k == ndim - 1:
            return [flat[off + i * step] for i in range(count)]
        return [build(k + 1, off + i * step) for i in range(count)]

    return build(0, 0)


def _time_value(kind: str, unit: str | None, mult: int, x: int) -> Any:
    """One datetime64/timedelta64 value as numpy's tolist() gives it."""
    if x == _NAT:
        return None
    try:
        v = x * mult
        if kind == "M":
            if unit == "Y":
                return _dt.date(1970 + v, 1, 1)
            if unit == "M":
                y, mo = divmod(v, 12)
                return _dt.date(1970 + y, mo + 1, 1)
            if unit in ("W", "D"):
                return _EPOCH_DATE + _dt.timedelta(microseconds=v * _US_PER[unit])
            if unit in _US_PER:
                return _EPOCH + _dt.timedelta(microseconds=v * _US_PER[unit])
            return x
        if unit in _US_PER:
            return _dt.timedelta(microseconds=v * _US_PER[unit])
        return x
    except (OverflowError, ValueError):
        return x  # outside datetime's range: numpy gives the int too


def _py_values(kind: str, itemsize: int, byteorder: str, mult_text: str | None, unit: str | None,
               data: memoryview, n: int) -> list | None:
    """Raw array bytes -> flat list of Python values, without numpy."""
    bo = ">" if byteorder == ">" else "=" if byteorder == "=" else "<"
    if kind == "b":
        return [x != 0 for x in data]
    if kind in "iu":
        fmt = {1: "b", 2: "h", 4: "i", 8: "q"}.get(itemsize)
        if fmt is None:
            return None
        return list(struct.unpack(f"{bo}{n}{fmt.upper() if kind == 'u' else fmt}", data))
    if kind == "f":
        fmt = {2: "e", 4: "f", 8: "d"}.get(itemsize)
        return None if fmt is None else list(struct.unpack(f"{bo}{n}{fmt}", data))
    if kind == "c":
        fmt = {8: "f", 16: "d"}.get(itemsize)
        if fmt is None:
            return None
        parts = struct.unpack(f"{bo}{2 * n}{fmt}", data)
        return [complex(parts[i], parts[i + 1]) for i in range(0, 2 * n, 2)]
    if kind == "S":
        return [bytes(data[i : i + itemsize]).rstrip(b"\0") for i in range(0, n * itemsize, itemsize)]
    if kind == "U":
        text = str(data, "utf-32-be" if bo == ">" else "utf-32-le", "surrogatepass")
        c = itemsize // 4
        return [text[i : i + c].rstrip("\0") for i in range(0, n * c, c)]
    if kind in "Mm":
        mult = int(mult_text) if mult_text else 1
        return [_time_value(kind, unit, mult, x) for x in struct.unpack(f"{bo}{n}q", data)]
    return None


# --- tag decoders --------------------------------------------------------------------


_INT_HEX_CHARS = MAX_INT_BITS // 4 + 1  # digits and a sign


def _d_int(d: _Decoder, node: dict, depth: int) -> int:
    x = node.get("x")
    _need(type(x) is str, "int: 'x' must be a string")
    if len(x) > _INT_HEX_CHARS:
        raise CodecError(_INT_TOO_BIG)
    _need(0 < len(x) and _HEX_INT_RE.match(x) is not None, "int: bad hex")
    v = int(x, 16)  # linear time for base 16
    if v.bit_length() > MAX_INT_BITS:  # leading zeros passed the length check
        raise CodecError(_INT_TOO_BIG)
    return v


def _d_float(d: _Decoder, node: dict, depth: int) -> float:
    v = node.get("v")
    _need(v in ("nan", "inf", "-inf"), "float: bad value")
    return float(v)


def _d_tuple(d: _Decoder, node: dict, depth: int) -> tuple:
    return tuple(d.dec_list(node.get("v"), depth))


def _d_set(d: _Decoder, node: dict, depth: int) -> set:
    items = d.dec_list(node.get("v"), depth)
    d.check_keys(items)
    return set(items)


def _d_frozenset(d: _Decoder, node: dict, depth: int) -> frozenset:
    items = d.dec_list(node.get("v"), depth)
    d.check_keys(items)
    return frozenset(items)


def _d_dict(d: _Decoder, node: dict, depth: int) -> dict:
    pairs = node.get("v")
    _need(type(pairs) is list, "dict: 'v' must be a list")
    d.count(2 * len(pairs))
    dec = d.dec
    keys, values = [], []
    for pair in pairs:
        _need(type(pair) is list and len(pair) == 2, "dict: items must be [key, value] pairs")
        keys.append(dec(pair[0], depth))
        values.append(dec(pair[1], depth))
    d.check_keys(keys)
    return dict(zip(keys, values))


def _d_bytes(d: _Decoder, node: dict, depth: int) -> bytes:
    return bytes(d.take(node))


def _d_bytearray(d: _Decoder, node: dict, depth: int) -> bytearray:
    return bytearray(d.take(node))


def _d_complex(d: _Decoder, node: dict, depth: int) -> complex:
    v = node.get("v")
    _need(type(v) is list and len(v) == 2, "complex: 'v' must be [re, im]")
    return complex(_float_in(v[0]), _float_in(v[1]))


def _d_decimal(d: _Decoder, node: dict, depth: int) -> decimal.Decimal:
    v = node.get("v")
    _need(type(v) is str, "decimal: 'v' must be a string")
    if len(v) > MAX_DECIMAL_DIGITS + 32:  # digits, sign, point, exponent
        raise CodecError(_DECIMAL_TOO_BIG)
    _need(_DECIMAL_RE.match(v) is not None, "decimal: bad literal")
    try:
        out = decimal.Decimal(v)  # the literal is checked: exact, context-independent
    except decimal.InvalidOperation:  # an exponent past what decimal can hold
        raise CodecError(_DECIMAL_TOO_BIG) from None
    # Bounded so that what code does next stays cheap: Decimal("1e999999") is legal, and
    # int() or Fraction() of it holds the GIL for many seconds.
    if not _decimal_fits(out):
        raise CodecError(_DECIMAL_TOO_BIG)
    return out


def _d_fraction(d: _Decoder, node: dict, depth: int) -> fractions.Fraction:
    v = node.get("v")
    _need(type(v) is list and len(v) == 2, "fraction: 'v' must be [numerator, denominator]")
    num = d.dec(v[0], depth)
    den = d.dec(v[1], depth)
    _need(type(num) is int and type(den) is int and den > 0, "fraction: bad numerator or denominator")
    # Bounded before Fraction() normalises: gcd() is quadratic and holds the GIL (two 6-Mbit
    # parts: half a minute with every host thread stopped); at MAX_FRACTION_BITS it is < 1 ms.
    if num.bit_length() > MAX_FRACTION_BITS or den.bit_length() > MAX_FRACTION_BITS:
        raise CodecError(_FRACTION_TOO_BIG)
    return fractions.Fraction(num, den)


_ZONES: frozenset | None = None


def _iana_zone(zone: Any) -> str | None:
    """``zone`` if it is a key of the IANA time zone database here, else None.

    Zone keys come from the other side: they must never reach a lookup that
    takes paths (pandas and dateutil open ``"dateutil/<any path>"``; zoneinfo
    reads files under its search path), so only names the database lists pass.
    """
    global _ZONES
    if type(zone) is not str or not 0 < len(zone) <= 64:
        return None
    zones = _ZONES
    if zones is None:
        try:
            zones = frozenset(importlib.import_module("zoneinfo").available_timezones())
        except Exception:  # no zoneinfo (Python < 3.9) or an unreadable database: fixed offsets only
            zones = frozenset()
        # "localtime" is this machine's /etc/localtime, not a name in the database.
        _ZONES = zones = zones - {"localtime", "posixrules"}
    if zone in zones or (zone[:6] in ("posix/", "right/") and zone[6:] in zones):  # the database's own variants
        return zone
    return None


def _d_tz(node: Any) -> _dt.tzinfo | None:
    _need(type(node) is dict, "tz must be an object")
    zone = node.get("zone")
    if zone is not None:
        _need(type(zone) is str, "tz: bad zone key")
    if _iana_zone(zone) is not None:
        try:
            return importlib.import_module("zoneinfo").ZoneInfo(zone)
        except Exception:  # listed but unreadable: the fixed offset below
            pass
    off = node.get("utc")
    if off is None:
        return None
    _need(type(off) is int and abs(off) < 86_400_000_000, "tz: bad utc offset")
    name = node.get("name")
    _need(name is None or (type(name) is str and len(name) <= 255), "tz: bad name")
    td = _dt.timedelta(microseconds=off)
    return _dt.timezone(td, name) if name is not None else _dt.timezone(td)


def _d_pd_tz(pd: Any, node: Any) -> Any:
    """A TZ node for pandas: pytz zones go back to pandas by key (pandas < 3 keeps pytz)."""
    tz = _d_tz(node)
    zone = _iana_zone(node.get("zone"))  # pandas takes "dateutil/<path>" too: only IANA names reach it
    if node.get("lib") == "pytz" and zone is not None:
        try:
            return pd.Timestamp(0, tz=zone).tz  # pandas' own lookup of a zone key
        except Exception:
            pass
    return tz


def _fold(node: dict) -> int:
    fold = node.get("fold", 0)
    _need(fold in (0, 1) and type(fold) is int, "bad fold")
    return fold


def _d_datetime(d: _Decoder, node: dict, depth: int) -> _dt.datetime:
    v = _dt.datetime.fromisoformat(_str_field(node, "v", 64))
    tz = _d_tz(node["tz"]) if "tz" in node else None
    return v.replace(tzinfo=tz, fold=_fold(node))


def _d_date(d: _Decoder, node: dict, depth: int) -> _dt.date:
    return _dt.date.fromisoformat(_str_field(node, "v", 32))


def _d_time(d: _Decoder, node: dict, depth: int) -> _dt.time:
    v = _dt.time.fromisoformat(_str_field(node, "v", 64))
    tz = _d_tz(node["tz"]) if "tz" in node else None
    return v.replace(tzinfo=tz, fold=_fold(node))


def _d_timedelta(d: _Decoder, node: dict, depth: int) -> _dt.timedelta:
    v = node.get("v")
    _need(type(v) is list and len(v) == 3 and all(type(x) is int for x in v), "timedelta: bad value")
    return _dt.timedelta(days=v[0], seconds=v[1], microseconds=v[2])


def _d_uuid(d: _Decoder, node: dict, depth: int) -> uuid.UUID:
    v = _str_field(node, "v", 32)
    _need(_UUID_RE.match(v) is not None, "uuid: bad hex")
    return uuid.UUID(hex=v)


def _d_path(d: _Decoder, node: dict, depth: int) -> pathlib.PurePath:
    cls = _PATHS.get(node.get("k"))
    _need(cls is not None, "path: unknown kind")
    text = _str_field(node, "v")
    d.count(text.count("/") + text.count("\\"))  # one str object per part: "a/a/a/..." weighs 25x its text
    return cls(text)


def _d_enum(d: _Decoder, node: dict, depth: int) -> Any:
    value = d.dec(node.get("v"), depth)
    if not d.enums:
        return value
    mod, qual, name = node.get("mod"), node.get("cls"), node.get("name")
    if type(mod) is not str or type(qual) is not str:
        return value
    cls = d.enums.get(f"{mod}.{qual}") or d.enums.get(qual) or d.enums.get(qual.rpartition(".")[2])
    if cls is None:
        return value
    if type(name) is str:
        member = cls.__members__.get(name)
        if member is not None:
            return member
    try:
        member = cls._value2member_map_.get(value)  # plain dict lookup: no class code runs
    except TypeError:  # unhashable value
        member = None
    if member is not None:
        return member
    if issubclass(cls, enum.Flag) and type(value) is int:
        try:
            return cls(value)  # composite flags: the caller's own class builds them
        except Exception:
            pass
    return value


def _d_opaque(d: _Decoder, node: dict, depth: int) -> Opaque:
    text = _str_field(node, "str", 2 * REPR_LIMIT) if "str" in node else None
    return Opaque(_str_field(node, "type", 1000), _str_field(node, "repr", 2 * REPR_LIMIT), text)


def _d_exc(d: _Decoder, node: dict, depth: int) -> BaseException:
    return _decode_exception(node.get("e"), d)


def _d_ndarray(d: _Decoder, node: dict, depth: int) -> Any:
    return d.nd(node, depth, want_list=False)


def _d_npscalar(d: _Decoder, node: dict, depth: int) -> Any:
    dts = node.get("dtype")
    np = _numpy()
    if dts == "U":
        v = _str_field(node, "v")
        return np.str_(v) if np is not None else v
    if dts == "S":
        raw = bytes.fromhex(_str_field(node, "x"))
        return np.bytes_(raw) if np is not None else raw
    _need(type(dts) is str and _DTYPE_RE.match(dts) is not None, "npscalar: bad dtype")
    m = _DTYPE_RE.match(dts)
    kind = m.group(2)
    _need(kind not in "SU", "npscalar: bad dtype")
    if "x" in node:
        raw = bytes.fromhex(_str_field(node, "x", 64))
        sub = {_TAG: "ndarray", "dtype": dts, "shape": [], "b": 0}
        arr = _Decoder([memoryview(raw)], 2, 10, {}).nd(sub, 0, want_list=np is None)
        return arr[()] if np is not None else arr
    v = node.get("v")
    if kind == "b":
        _need(type(v) is bool, "npscalar: bad bool")
    elif kind in "iu":
        _need(type(v) is int, "npscalar: bad int")
    elif kind == "f":
        v = _float_in(v)
    elif kind == "c":
        _need(type(v) is list and len(v) == 2, "npscalar: bad complex")
        v = complex(_float_in(v[0]), _float_in(v[1]))
    else:
        raise CodecError("malformed payload: npscalar: bad dtype")
    if np is None:
        return v
    dt = np.dtype(dts)
    _need(dt.kind == kind and dt.fields is None, "npscalar: bad dtype")
    if kind in "iu":  # checked first: numpy < 2 wraps out-of-range ints (with a warning)
        info = np.iinfo(dt)
        _need(info.min <= v <= info.max, "npscalar: value does not fit its dtype")
    with np.errstate(all="ignore"):
        out = dt.type(v)
    if kind in "fc":  # the sender's value came from this very type: it must fit exactly
        back = complex(out)
        want = complex(v)
        _need(all(x == y or (x != x and y != y) for x, y in ((back.real, want.real), (back.imag, want.imag))),
              "npscalar: value does not fit its dtype")
    return out


# pandas -------------------------------------------------------------------------------


def _d_arr(d: _Decoder, node: Any, depth: int, pd: Any) -> Any:
    """A column node -> numpy/extension array (pandas present) or a list."""
    _need(type(node) is dict, "column must be an object")
    kind = node.get("k")
    as_list = pd is None
    if not as_list:
        d.count(PANDAS_OBJECT_ITEMS)  # a Series/Index per column: thousands of empty columns weigh GBs
    if kind == "np":
        arr = d.nd(node.get("a"), depth, want_list=as_list)
        if as_list:
            return _ns_values(node.get("a"), arr)
        _need(arr.ndim == 1, "column must be one-dimensional")
        return _pd_nanoseconds(pd, arr)
    if kind == "dttz":
        tz = _d_tz(node.get("tz")) if as_list else _d_pd_tz(pd, node.get("tz"))
        _need(tz is not None, "dttz: missing tz")
        arr = d.nd(node.get("a"), depth, want_list=as_list)
        if as_list:
            _need(type(arr) is list, "dttz: bad values")
            arr = _ns_values(node.get("a"), arr)
            return [x.replace(tzinfo=_UTC).astimezone(tz) if type(x) is _dt.datetime else x for x in arr]
        _need(arr.ndim == 1 and arr.dtype.kind == "M", "dttz: values must be datetime64")
        return pd.array(_pd_nanoseconds(pd, arr)).tz_localize("UTC").tz_convert(tz)
    if kind == "cat":
        codes = d.nd(node.get("codes"), depth, want_list=as_list)
        cats = _d_index(d, node.get("cats"), depth)
        ordered = node.get("ordered")
        _need(type(ordered) is bool, "cat: 'ordered' must be a bool")
        if as_list:
            n = len(cats)
            _need(all(type(c) is int and -1 <= c < n for c in codes), "cat: bad codes")
            return [cats[c] if c >= 0 else None for c in codes]
        _need(codes.ndim == 1 and codes.dtype.kind == "i", "cat: codes must be ints")
        return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(cats, ordered=ordered))
    if kind == "masked":
        name = node.get("dtype")
        _need(name in _MASKED_DTYPES, "masked: unknown dtype")
        data = d.nd(node.get("a"), depth, want_list=as_list)
        mask = d.nd(node.get("m"), depth, want_list=as_list)
        if as_list:
            _need(type(data) is list and type(mask) is list and len(data) == len(mask), "masked: bad mask")
            return [None if m else x for x, m in zip(data, mask)]
        expected = pd.api.types.pandas_dtype(name)  # name is from the fixed set above
        _need(data.ndim == 1 and data.dtype == expected.numpy_dtype, "masked: data does not match dtype")
        _need(mask.dtype == bool and mask.shape == data.shape, "masked: bad mask")
        cls = (pd.arrays.BooleanArray if name == "boolean" else
               pd.arrays.FloatingArray if name.startswith("Float") else pd.arrays.IntegerArray)
        return cls(data, mask)
    if kind == "str":
        values = node.get("v")
        _need(type(values) is list and set(map(type, values)) <= {str, _NoneType}, "str: values must be strings")
        d.count(len(values))
        if as_list:
            return values
        storage, na = node.get("storage"), node.get("na")
        _need(storage in ("python", "pyarrow", "pyarrow_numpy") and na in ("NA", "nan"), "str: bad dtype")
        return pd.array(values, dtype=_string_dtype(pd, storage, na))
    raise CodecError("malformed payload: unknown column kind")


def _pd_nanoseconds(pd: Any, arr: Any) -> Any:
    """pandas < 2 holds datetime64/timedelta64 only in ns: convert, refusing overflow."""
    if arr.dtype.kind not in "Mm" or not pd.__version__.startswith(("0.", "1.")):
        return arr
    np = _numpy()
    try:
        ns = arr.astype(f"{arr.dtype.kind}8[ns]")  # older numpy wraps silently: checked below
        fits = bool(((ns.astype(arr.dtype) == arr) | np.isnat(arr)).all())
    except OverflowError:
        fits = False
    _need(fits, "datetime values out of the range this pandas can hold")
    return ns


def _ns_values(node: dict, values: Any) -> Any:
    """Without pandas, its nanosecond datetimes/timedeltas arrive as datetime/timedelta (ns cut)."""
    dts = node.get("dtype")
    if type(values) is not list or dts not in ("<M8[ns]", ">M8[ns]", "<m8[ns]", ">m8[ns]"):
        return values
    out = []
    for x in values:
        if type(x) is int:
            try:
                td = _dt.timedelta(microseconds=x // 1000)
                x = _EPOCH + td if dts[1] == "M" else td
            except OverflowError:
                pass
        out.append(x)
    return out


def _string_dtype(pd: Any, storage: str, na: str) -> Any:
    na_value = float("nan") if na == "nan" else pd.NA
    for st in (storage, "python"):  # pyarrow may be missing on this side
        try:
            return pd.StringDtype(storage=st, na_value=na_value)
        except TypeError:  # pandas < 2.3: no na_value
            try:
                return pd.StringDtype(storage=st)
            except Exception:
                pass
        except Exception:
            pass
    raise CodecError("malformed payload: string dtype not available")


def _d_index(d: _Decoder, node: Any, depth: int) -> Any:
    """An index node inside a DataFrame/Series/Categorical (no depth of its own)."""
    _need(type(node) is dict and node.get(_TAG) in _INDEX_TAGS, "expected an index node")
    return _DECODERS[node[_TAG]](d, node, depth)


def _d_pd_index(d: _Decoder, node: dict, depth: int) -> Any:
    pd = _pandas()
    arr = _d_arr(d, node.get("data"), depth, pd)
    name = d.dec(node.get("name"), depth)
    if pd is None:
        return arr
    freq = node.get("freq")
    if isinstance(arr, _numpy().ndarray):
        idx = pd.Index(arr, dtype=arr.dtype, name=name, copy=False)
    else:
        idx = pd.Index(arr, name=name)
    if freq is not None:
        _need(type(freq) is str and _FREQ_RE.match(freq) is not None, "index: bad freq")
        cls = pd.DatetimeIndex if isinstance(idx, pd.DatetimeIndex) else pd.TimedeltaIndex
        try:  # the constructor checks the values conform to freq
            idx = cls(idx, freq=freq, name=name)
        except Exception:
            pass
    return idx


def _d_pd_range(d: _Decoder, node: dict, depth: int) -> Any:
    v = node.get("v")
    _need(type(v) is list and len(v) == 3 and all(type(x) is int and abs(x) < 2**63 for x in v) and v[2] != 0,
          "RangeIndex: bad range")
    name = d.dec(node.get("name"), depth)
    pd = _pandas()
    if pd is not None:
        d.count(PANDAS_OBJECT_ITEMS)
        return pd.RangeIndex(v[0], v[1], v[2], name=name)  # lazy: no allocation
    r = range(v[0], v[1], v[2])
    d.count(len(r))
    return list(r)


def _d_pd_multi(d: _Decoder, node: dict, depth: int) -> Any:
    levels, codes, names = node.get("levels"), node.get("codes"), node.get("names")
    _need(type(levels) is list and type(codes) is list and type(names) is list
          and len(levels) == len(codes) == len(names) and levels, "MultiIndex: bad levels/codes/names")
    pd = _pandas()
    lv = [_d_index(d, x, depth) for x in levels]
    cd = [d.nd(x, depth, want_list=pd is None) for x in codes]
    nm = [d.dec(x, depth) for x in names]
    if pd is not None:
        return pd.MultiIndex(levels=lv, codes=cd, names=nm)  # verifies the codes
    n = len(cd[0])
    _need(all(len(c) == n for c in cd), "MultiIndex: codes of different lengths")
    for level, c in zip(lv, cd):
        _need(all(type(x) is int and -1 <= x < len(level) for x in c), "MultiIndex: bad codes")
    return [tuple(level[c[i]] if c[i] >= 0 else None for level, c in zip(lv, cd)) for i in range(n)]


def _d_pd_series(d: _Decoder, node: dict, depth: int) -> Any:
    pd = _pandas()
    arr = _d_arr(d, node.get("data"), depth, pd)
    index = _d_index(d, node.get("index"), depth)
    name = d.dec(node.get("name"), depth)
    if pd is None:
        return arr
    _need(len(arr) == len(index), "Series: index length does not match")
    return pd.Series(arr, index=index, name=name, dtype=arr.dtype, copy=False)


def _d_pd_frame(d: _Decoder, node: dict, depth: int) -> Any:
    pd = _pandas()
    columns = _d_index(d, node.get("columns"), depth)
    index = _d_index(d, node.get("index"), depth)
    data = node.get("data")
    _need(type(data) is list and len(data) == len(columns), "DataFrame: column count does not match")
    arrays = [_d_arr(d, a, depth, pd) for a in data]
    for a in arrays:
        _need(len(a) == len(index), "DataFrame: column length does not match the index")
    if pd is None:
        out: dict = {}
        for label, values in zip(columns, arrays):
            try:
                out[label] = values
            except TypeError:
                raise CodecError("malformed payload: unhashable column label") from None
        return out
    if not arrays:
        frame = pd.DataFrame(index=index)
    else:
        # Series with an explicit dtype: no re-inference (pandas 3 would turn object str into "str").
        cols = {i: pd.Series(a, index=index, dtype=a.dtype, copy=False) for i, a in enumerate(arrays)}
        frame = pd.DataFrame(cols, index=index, copy=False)
    frame.columns = columns
    return frame


def _d_pd_timestamp(d: _Decoder, node: dict, depth: int) -> Any:
    v, unit = _int_field(node.get("v"), "Timestamp value"), node.get("unit")
    _need(unit in _PD_UNITS and _INT_LO < v < 2**63, "Timestamp: bad value or unit")
    pd = _pandas()
    tz = None if "tz" not in node else _d_tz(node["tz"]) if pd is None else _d_pd_tz(pd, node["tz"])
    if pd is not None:
        np = _numpy()
        ts = pd.Timestamp(np.datetime64(v, unit))
        return ts.tz_localize("UTC").tz_convert(tz) if tz is not None else ts
    us = v * _US_PER[unit] if unit in _US_PER else v // 1000
    out = _EPOCH + _dt.timedelta(microseconds=us)
    return out.replace(tzinfo=_UTC).astimezone(tz) if tz is not None else out


def _d_pd_timedelta(d: _Decoder, node: dict, depth: int) -> Any:
    v, unit = _int_field(node.get("v"), "Timedelta value"), node.get("unit")
    _need(unit in _PD_UNITS and _INT_LO < v < 2**63, "Timedelta: bad value or unit")
    pd = _pandas()
    if pd is not None:
        return pd.Timedelta(_numpy().timedelta64(v, unit))
    return _dt.timedelta(microseconds=v * _US_PER[unit] if unit in _US_PER else v // 1000)


def _d_pd_nat(d: _Decoder, node: dict, depth: int) -> Any:
    pd = _pandas()
    return pd.NaT if pd is not None else None


def _d_pd_na(d: _Decoder, node: dict, depth: int) -> Any:
    pd = _pandas()
    return pd.NA if pd is not None else None


def _d_pd_categorical(d: _Decoder, node: dict, depth: int) -> Any:
    _need(node.get("k") == "cat", "Categorical: bad node")
    return _d_arr(d, node, depth, _pandas())


_DECODERS: Mapping[str, Any] = MappingProxyType(
    {
        "int": _d_int,
        "float": _d_float,
        "tuple": _d_tuple,
        "set": _d_set,
        "frozenset": _d_frozenset,
        "dict": _d_dict,
        "bytes": _d_bytes,
        "bytearray": _d_bytearray,
        "complex": _d_complex,
        "decimal": _d_decimal,
        "fraction": _d_fraction,
        "datetime": _d_datetime,
        "date": _d_date,
        "time": _d_time,
        "timedelta": _d_timedelta,
        "uuid": _d_uuid,
        "path": _d_path,
        "enum": _d_enum,
        "opaque": _d_opaque,
        "exc": _d_exc,
        "ndarray": _d_ndarray,
        "npscalar": _d_npscalar,
        "pd.DataFrame": _d_pd_frame,
        "pd.Series": _d_pd_series,
        "pd.Index": _d_pd_index,
        "pd.RangeIndex": _d_pd_range,
        "pd.MultiIndex": _d_pd_multi,
        "pd.Timestamp": _d_pd_timestamp,
        "pd.Timedelta": _d_pd_timedelta,
        "pd.NaT": _d_pd_nat,
        "pd.NA": _d_pd_na,
        "pd.Categorical": _d_pd_categorical,
    }
)

#: Type names for Opaque stand-ins of nodes from_jsonable cannot rebuild.
_TAG_TYPES: Mapping[str, str] = MappingProxyType(
    {
        **{t: t for t in _DECODERS},
        "decimal": "decimal.Decimal",
        "fraction": "fractions.Fraction",
        "datetime": "datetime.datetime",
        "date": "datetime.date",
        "time": "datetime.time",
        "timedelta": "datetime.timedelta",
        "uuid": "uuid.UUID",
        "path": "pathlib.PurePath",
        "enum": "enum.Enum",
        "exc": "Exception",
        "ndarray": "numpy.ndarray",
        "npscalar": "numpy.generic",
        **{t: "pandas." + t[3:] for t in _DECODERS if t.startswith("pd.")},
    }
)


def _reject_constant(name: str) -> None:
    raise CodecError(f"malformed payload: JSON constant {name} not allowed")


_json_encode = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, check_circular=False
).encode
_json_decode = json.JSONDecoder(parse_constant=_reject_constant).decode


# --- public API --------------------------------------------------------------------


def encode(value: Any, *, max_bytes: int | None = None, max_depth: int = DEFAULT_MAX_DEPTH) -> list:
    """Encode ``value``: a list of chunks (bytes or 1-D byte memoryviews) to write in order."""
    enc = _Encoder(max_depth, max_bytes)
    try:
        tree = enc.enc(value, 0)
        # Surrogates pass through: lone ones round-trip, adjacent ones stay apart.
        header = _json_encode(tree).encode("utf-8", "surrogatepass")
    except RecursionError:
        raise EncodeError(f"value is nested too deeply to encode (max_depth={max_depth}): "
                          "Python's recursion limit allows about 200 levels") from None
    bufs = enc.bufs
    nbuf = len(bufs)
    if len(header) >= 2**32 or nbuf >= 2**32:
        raise EncodeError("payload header is over 4 GiB: send the data as bytes or arrays")
    first = _PREFIX.pack(MAGIC, len(header), nbuf)
    if nbuf:
        first += struct.pack(f"<{nbuf}Q", *map(len, bufs))
    first += header
    if max_bytes is not None:
        size = len(first) + enc.nbytes
        if size > max_bytes:
            raise EncodeError(f"payload is {size} bytes, over max_bytes={max_bytes}: "
                              "pass a larger max_bytes= or send less data")
    return [first, *bufs]


def decode(
    data: bytes | bytearray | memoryview,
    *,
    max_bytes: int | None = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_items: int | None = DEFAULT_MAX_ITEMS,
    enum_types: Mapping[str, type] | Iterable[type] | None = None,
) -> Any:
    """Decode a payload from :func:`encode`. Raises only :class:`CodecError`.

    ``enum_types``: Enum classes (or a mapping name -> class) that enum members
    may come back as; matched by "module.QualName", then QualName, then name.
    """
    try:
        mv = memoryview(data)
    except TypeError:
        raise CodecError(f"payload must be bytes-like, not {type(data).__name__}") from None
    try:
        if mv.ndim != 1 or mv.format != "B":
            mv = mv.cast("B")  # needs a C-contiguous buffer; TypeError -> CodecError
        total = mv.nbytes
        if max_bytes is not None and total > max_bytes:
            raise CodecError(f"payload is {total} bytes, over max_bytes={max_bytes}")
        if total < _PREFIX.size:
            raise CodecError("malformed payload: truncated prefix")
        magic, hlen, nbuf = _PREFIX.unpack_from(mv, 0)
        if magic != MAGIC:
            raise CodecError("malformed payload: bad magic (not a codec payload)")
        pos = _PREFIX.size
        if nbuf > (total - pos) // 8:
            raise CodecError("malformed payload: truncated buffer table")
        # Every buffer is referenced by a node of at least 20 header bytes ({"$":"bytes","b":0}).
        if nbuf * 16 > hlen:
            raise CodecError("malformed payload: more buffers than the header can reference")
        hstart = pos + 8 * nbuf
        hend = hstart + hlen
        bufs = _Buffers(mv, pos, nbuf, hend) if nbuf else ()
        if (bufs.end if nbuf else hend) != total:
            raise CodecError("malformed payload: sizes do not add up to the payload length")
        limit = max_items if max_items is not None else math.inf
        text = str(mv[hstart:hend], "utf-8", "surrogatepass")
        if not json_items_within(text, limit):  # before json builds them: ~70 bytes of objects per 3 bytes of "[],"
            raise _too_many(limit)
        tree = _json_decode(text)
        del text
        dec = _Decoder(bufs, max_depth, limit, _enum_registry(enum_types))
        value = dec.dec(tree, 0)
        if len(dec.used) != nbuf:
            raise CodecError("malformed payload: unreferenced buffers")
        return value
    except CodecError:
        raise
    except RecursionError:
        raise CodecError("malformed payload: nested too deeply") from None
    except Exception as e:  # anything a constructor refused: the payload is bad
        raise CodecError(f"malformed payload: {type(e).__name__}: {_safe_repr(e, 300)}") from e


def dumps(value: Any, **kw: Any) -> bytes:
    """:func:`encode` into one bytes object."""
    return b"".join(encode(value, **kw))


def loads(data: bytes | bytearray | memoryview, **kw: Any) -> Any:
    """Same as :func:`decode`."""
    return decode(data, **kw)


def to_jsonable(value: Any, *, inline_bytes: int = 65536, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """The tagged tree of ``value`` as JSON-able data, for logs. Never raises."""
    try:
        return _Encoder(max_depth, None, safe=True, inline=inline_bytes).enc(value, 0)
    except Exception as e:  # e.g. RecursionError from a very large max_depth
        try:
            return _opaque_node(type(value), f"<{_type_name(type(value))}: not logged ({type(e).__name__})>")
        except Exception:
            return {_TAG: "opaque", "type": "?", "repr": "<not logged>"}


def from_jsonable(tree: Any, *, enum_types: Mapping[str, type] | Iterable[type] | None = None,
                  max_depth: int = DEFAULT_MAX_DEPTH, max_items: int | None = DEFAULT_MAX_ITEMS) -> Any:
    """Rebuild a value from :func:`to_jsonable` output; what cannot be rebuilt is Opaque.

    ``max_items`` bounds the values built (arrays become lists without numpy; a
    RangeIndex a list without pandas): past it, parts become Opaque.
    """
    return _from_jsonable(tree, max_depth, _enum_registry(enum_types),
                          max_items if max_items is not None else math.inf)


def _from_jsonable(tree: Any, max_depth: int, enums: dict, max_items: float,
                   parent: _Decoder | None = None) -> Any:
    """from_jsonable; inside a decode (``parent``), counting against the parent's items."""
    dec = _Decoder([], max_depth + 2, max_items, enums, lenient=True)
    if parent is not None:
        dec.items, dec.max_items = parent.items, parent.max_items
    try:
        return dec.dec(tree, 0)
    except Exception as e:
        return Opaque("?", f"<not rebuilt: {type(e).__name__}: {_safe_repr(e, 300)}>")
    finally:
        if parent is not None:
            parent.items = dec.items


# --- exceptions --------------------------------------------------------------------

_GROUPS = tuple(t for t in (getattr(builtins, "BaseExceptionGroup", None),) if t is not None)
_BUILTIN_EXCEPTIONS: Mapping[str, type] = MappingProxyType(
    {
        name: obj
        for name, obj in vars(builtins).items()
        if isinstance(obj, type) and issubclass(obj, Exception) and not issubclass(obj, _GROUPS)
        and obj.__name__ == name
    }
)


def _safe_str(exc: BaseException) -> str:
    try:
        text = str(exc)
        if type(text) is not str:
            text = str.__str__(text)
    except Exception:
        text = _safe_repr(exc, 1000)
    return text[:MESSAGE_LIMIT]


def encode_exception(exc: BaseException) -> dict:
    """A JSON-able dict describing ``exc`` (type name, message, args if builtin). Never raises."""
    try:
        t = type(exc)
        if isinstance(exc, ToolError):
            out: dict = {"type": str(exc.type_name)[:1000], "message": str(exc.message)[:MESSAGE_LIMIT]}
        else:
            out = {"type": _type_name(t)[:1000], "message": _safe_str(exc)}
        if _BUILTIN_EXCEPTIONS.get(t.__name__) is t:
            out["args"] = to_jsonable(tuple(exc.args), inline_bytes=4096, max_depth=20)
            if isinstance(exc, OSError):
                for attr in ("filename", "filename2"):
                    v = getattr(exc, attr, None)
                    if v is not None:
                        out[attr] = to_jsonable(v, inline_bytes=4096, max_depth=5)
        notes = getattr(exc, "__notes__", None)
        if isinstance(notes, list) and notes:
            out["notes"] = [str(n)[:MESSAGE_LIMIT] for n in notes[:20]]
        return out
    except Exception:
        return {"type": "?", "message": "<exception could not be described>"}


def decode_exception(data: Any) -> BaseException:
    """Rebuild an exception from :func:`encode_exception` output. Never raises."""
    return _decode_exception(data, None)


def _decode_exception(data: Any, parent: _Decoder | None) -> BaseException:
    """decode_exception; inside a decode (``parent``), its args count against the parent's items."""
    try:
        if type(data) is not dict:
            return ToolError("MalformedError", f"error description is a {type(data).__name__}, not a dict")
        type_name, message = data.get("type"), data.get("message", "")
        if type(type_name) is not str or type(message) is not str:
            return ToolError("MalformedError", "error type or message is not a string")
        type_name, message = type_name[:1000], message[:MESSAGE_LIMIT]
        exc: BaseException | None = None
        cls = _BUILTIN_EXCEPTIONS.get(type_name)
        if cls is not None and "args" in data:
            args = _from_jsonable(data["args"], 20, {}, DEFAULT_MAX_ITEMS, parent)
            if type(args) is tuple:
                try:
                    exc = cls(*args)
                except Exception:
                    exc = None
                if exc is not None and isinstance(exc, OSError):
                    for attr in ("filename", "filename2"):
                        if attr in data:
                            setattr(exc, attr, _from_jsonable(data[attr], 5, {}, DEFAULT_MAX_ITEMS, parent))
        if exc is None and cls is not None and "args" not in data:
            exc = cls(message) if message else cls()  # a bare {"type", "message"} description
        if exc is None:
            exc = ToolError(type_name, message)
        notes = data.get("notes")
        if type(notes) is list and hasattr(exc, "add_note"):  # Python >= 3.11
            for note in notes[:20]:
                if type(note) is str:
                    exc.add_note(note[:MESSAGE_LIMIT])
        return exc
    except Exception as e:
        return ToolError("MalformedError", f"error description could not be read ({type(e).__name__})")


_BOTH_CLASSES: dict = {}


def as_tool_error(exc: BaseException) -> BaseException:
    """A builtin exception (from :func:`decode_exception`) that is also a :class:`ToolError`.

    Code that receives a tool's failure can write ``except KeyError`` or
    ``except ToolError``; ``str()`` and ``repr()`` stay the builtin's. Other
    exceptions are returned as they are.
    """
    cls = type(exc)
    if isinstance(exc, ToolError) or _BUILTIN_EXCEPTIONS.get(cls.__name__) is not cls:
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
    out.message = _own_str(exc, MESSAGE_LIMIT) or ""
    for attr in ("filename", "filename2", "__notes__"):
        value = getattr(exc, attr, None)
        if value is not None:
            try:
                setattr(out, attr, value)
            except (AttributeError, TypeError):
                pass
    return out


def _bench() -> None:  # python sandbox/runtime/sandbox_codec.py --bench
    import timeit

    def per_call(value: Any, number: int) -> float:
        return min(timeit.repeat(lambda: decode(b"".join(encode(value))), number=number, repeat=5)) / number

    small = ("Paris", 3, {"unit": "C"})
    print(f"small call {small!r}: {per_call(small, 20000) * 1e6:.1f} us encode+decode")
    blob = bytes(50 * 1024 * 1024)
    print(f"50 MB bytes: {per_call(blob, 5) * 1e3:.1f} ms encode+join+decode")
    payload = dumps(blob)
    enc_s = min(timeit.repeat(lambda: encode(blob), number=20, repeat=5)) / 20
    dec_s = min(timeit.repeat(lambda: decode(payload), number=5, repeat=5)) / 5
    copy_s = min(timeit.repeat(lambda: bytes(memoryview(payload)[1:]), number=5, repeat=5)) / 5
    print(f"  of which encode (zero-copy chunks) {enc_s * 1e3:.3f} ms, decode (one copy) {dec_s * 1e3:.1f} ms;"
          f" a bare bytes() copy of 50 MB takes {copy_s * 1e3:.1f} ms here")
    np, pd = _numpy(), _pandas()
    if pd is not None:
        df = pd.DataFrame({"a": np.arange(1_000_000, dtype=float), "b": np.arange(1_000_000),
                           "c": np.random.default_rng(0).random(1_000_000)})
        print(f"DataFrame 1,000,000 x 3 numeric: {per_call(df, 5) * 1e3:.1f} ms encode+decode")
        s = pd.DataFrame({"s": [f"row {i}" for i in range(100_000)]})
        print(f"DataFrame 100,000 str rows: {per_call(s, 3) * 1e3:.1f} ms encode+decode")


if __name__ == "__main__" and "--bench" in sys.argv:
    _bench()
