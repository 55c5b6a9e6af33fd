"""The value codec's decoder: what the host runs on the tagged tree a hostile sandbox sent.

Part of the codec (:mod:`sandbox_codec` checks the payload's framing, counts
the header's values before it is parsed, and exports the public names);
standard library only: numpy and pandas are imported only when such a tag is
decoded and they can be. Every bound it enforces is named and explained in
:mod:`sandbox_codec_limits` (its docstring is the codec's "Security and
limits"); every refusal is a :class:`CodecError`, never another exception.
With ``lenient`` (:func:`from_jsonable`, for logs) what cannot be rebuilt
becomes :class:`Opaque` instead.
"""

from __future__ import annotations

import array
import base64
import contextlib
import datetime as _dt
import decimal
import enum
import fractions
import importlib
import itertools
import math
import pathlib
import re
import struct
import sys
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING or __package__:  # on the host: sandbox.runtime.sandbox_codec_decode (and for the type checker)
    from . import sandbox_codec_limits as limits
    from . import sandbox_codec_values as _values
else:  # in the sandbox, and as a script: top-level modules (PYTHONPATH=/opt/sandbox/runtime)
    import sandbox_codec_limits as limits
    import sandbox_codec_values as _values

CodecError = _values.CodecError
Opaque = _values.Opaque
ToolError = _values.ToolError
_TAG, _NoneType, _JSON_SCALARS, _INT_LO = _values.TAG, _values.NoneType, _values.JSON_SCALARS, _values.INT_LO
_MASKED_DTYPES, _BUILTIN_EXCEPTIONS = _values.MASKED_DTYPES, _values.BUILTIN_EXCEPTIONS
_safe_repr, _numpy, _pandas = _values.safe_repr, _values.numpy_if_available, _values.pandas_if_available
_NAT = -(2**63)  # numpy's NaT in int64


def _float_in(v: Any) -> float:
    t = type(v)
    if t is float:
        return v
    if t is int:
        return float(v)
    if t is str and v in ("nan", "inf", "-inf"):
        return float(v)
    raise CodecError(f"malformed payload: expected a float, got {t.__name__}")


def too_many(max_items: float) -> CodecError:
    return CodecError(limits.too_many_message(max_items))


# --- the decoder ----------------------------------------------------------------------

# Unambiguous alternatives: linear-time matching even on hostile megabyte literals.
_DECIMAL_RE = re.compile(r"[+-]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?|inf(?:inity)?|s?nan\d*)\Z", re.I | re.A)
_HEX_INT_RE = re.compile(r"-?[0-9a-f]+\Z")
_DTYPE_RE = re.compile(r"([<>|=])([biufcMmSU])(\d{1,5})(?:\[(\d{0,6})([a-zA-Z]{1,2})\])?\Z")
_UUID_RE = re.compile(r"[0-9a-f]{32}\Z")
_FREQ_RE = re.compile(r"-?[A-Za-z0-9]{1,24}(?:-[A-Za-z]{1,8})?\Z")
_TIME_UNITS = frozenset(["Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as"])
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


def _need(cond: object, what: str) -> None:
    """Refuse the payload unless ``cond``. The type checker cannot see this check: a field of the
    hostile tree that is checked here, then used, is typed ``Any`` (it is whatever JSON holds)."""
    if not cond:
        raise CodecError(f"malformed payload: {what}")


def _str_field(node: dict, key: str, limit: int = limits.MAX_FIELD_CHARS) -> str:
    v: Any = node.get(key)
    _need(type(v) is str and len(v) <= limit, f"{node.get(_TAG)}: {key!r} must be a string")
    return v


def _int_field(v: Any, what: str) -> int:
    _need(type(v) is int, f"{what} must be an int")
    return v


def enum_registry(enum_types: Any) -> dict:
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


class BufferTable(Protocol):
    """The payload's buffers as the decoder reads them: a :class:`Buffers`, or a list."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int, /) -> memoryview: ...


class Buffers:
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


class Decoder:
    __slots__ = ("max_depth", "max_items", "items", "bufs", "used", "enums", "lenient")

    def __init__(self, bufs: BufferTable, max_depth: int, max_items: float, enums: dict,
                 lenient: bool = False) -> None:
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
            raise too_many(self.max_items)

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
            handler = DECODERS.get(tag) if type(tag) is str else None
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
        if len(keys) > limits.MAX_SAME_HASH_KEYS and max(Counter(map(hash, keys)).values()) > limits.MAX_SAME_HASH_KEYS:
            raise CodecError("malformed payload: too many keys with the same hash")

    # -- numpy arrays ------------------------------------------------------------

    def nd(self, node: Any, depth: int, want_list: bool) -> Any:
        """An ndarray node -> ndarray (or nested lists without numpy / if want_list)."""
        _need(type(node) is dict and node.get(_TAG) == "ndarray", "expected an ndarray node")
        shape = node.get("shape")
        _need(type(shape) is list and len(shape) <= limits.MAX_NDIM, "ndarray: bad shape")
        for s in shape:
            _need(type(s) is int and 0 <= s < limits.MAX_DIM, "ndarray: bad shape")
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
        if m is None:
            raise CodecError(f"malformed payload: ndarray: dtype {dts[:40]!r} not allowed")
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
    if unit is None:  # a generic datetime64/timedelta64: numpy gives the int too
        return x
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


def _d_int(d: Decoder, node: dict, depth: int) -> int:
    x: Any = node.get("x")
    _need(type(x) is str, "int: 'x' must be a string")
    if len(x) > limits.MAX_INT_HEX_CHARS:
        raise CodecError(limits.INT_TOO_BIG)
    _need(len(x) > 0 and _HEX_INT_RE.match(x) is not None, "int: bad hex")
    v = int(x, 16)  # linear time for base 16
    if v.bit_length() > limits.MAX_INT_BITS:  # leading zeros passed the length check
        raise CodecError(limits.INT_TOO_BIG)
    return v


def _d_float(d: Decoder, node: dict, depth: int) -> float:
    v: Any = node.get("v")
    _need(v in ("nan", "inf", "-inf"), "float: bad value")
    return float(v)


def _d_tuple(d: Decoder, node: dict, depth: int) -> tuple:
    return tuple(d.dec_list(node.get("v"), depth))


def _d_set(d: Decoder, node: dict, depth: int) -> set:
    items = d.dec_list(node.get("v"), depth)
    d.check_keys(items)
    return set(items)


def _d_frozenset(d: Decoder, node: dict, depth: int) -> frozenset:
    items = d.dec_list(node.get("v"), depth)
    d.check_keys(items)
    return frozenset(items)


def _d_dict(d: Decoder, node: dict, depth: int) -> dict:
    pairs: Any = node.get("v")
    _need(type(pairs) is list, "dict: 'v' must be a list")
    d.count(2 * len(pairs))
    dec = d.dec
    keys, values = [], []
    for pair in pairs:
        _need(type(pair) is list and len(pair) == 2, "dict: items must be [key, value] pairs")
        keys.append(dec(pair[0], depth))
        values.append(dec(pair[1], depth))
    d.check_keys(keys)
    return dict(zip(keys, values, strict=True))


def _d_bytes(d: Decoder, node: dict, depth: int) -> bytes:
    return bytes(d.take(node))


def _d_bytearray(d: Decoder, node: dict, depth: int) -> bytearray:
    return bytearray(d.take(node))


def _d_complex(d: Decoder, node: dict, depth: int) -> complex:
    v: Any = node.get("v")
    _need(type(v) is list and len(v) == 2, "complex: 'v' must be [re, im]")
    return complex(_float_in(v[0]), _float_in(v[1]))


def _d_decimal(d: Decoder, node: dict, depth: int) -> decimal.Decimal:
    v: Any = node.get("v")
    _need(type(v) is str, "decimal: 'v' must be a string")
    if len(v) > limits.MAX_DECIMAL_CHARS:
        raise CodecError(limits.DECIMAL_TOO_BIG)
    _need(_DECIMAL_RE.match(v) is not None, "decimal: bad literal")
    try:
        out = decimal.Decimal(v)  # the literal is checked: exact, context-independent
    except decimal.InvalidOperation:  # an exponent past what decimal can hold
        raise CodecError(limits.DECIMAL_TOO_BIG) from None
    # Bounded so that what code does next stays cheap: Decimal("1e999999") is legal, and
    # int() or Fraction() of it holds the GIL for many seconds.
    if not limits.decimal_fits(out):
        raise CodecError(limits.DECIMAL_TOO_BIG)
    return out


def _d_fraction(d: Decoder, node: dict, depth: int) -> fractions.Fraction:
    v: Any = node.get("v")
    _need(type(v) is list and len(v) == 2, "fraction: 'v' must be [numerator, denominator]")
    num = d.dec(v[0], depth)
    den = d.dec(v[1], depth)
    _need(type(num) is int and type(den) is int and den > 0, "fraction: bad numerator or denominator")
    # Bounded before Fraction() normalises: gcd() is quadratic and holds the GIL (two 6-Mbit
    # parts: half a minute with every host thread stopped); at limits.MAX_FRACTION_BITS it is < 1 ms.
    if num.bit_length() > limits.MAX_FRACTION_BITS or den.bit_length() > limits.MAX_FRACTION_BITS:
        raise CodecError(limits.FRACTION_TOO_BIG)
    return fractions.Fraction(num, den)


_ZONES: frozenset | None = None


def iana_zone(zone: Any) -> str | None:
    """``zone`` if it is a key of the IANA time zone database here, else None.

    Zone keys come from the other side: they must never reach a lookup that
    takes paths (pandas and dateutil open ``"dateutil/<any path>"``; zoneinfo
    reads files under its search path), so only names the database lists pass.
    """
    global _ZONES
    if type(zone) is not str or not 0 < len(zone) <= limits.MAX_ZONE_KEY_CHARS:
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
    if iana_zone(zone) is not None:
        try:
            return importlib.import_module("zoneinfo").ZoneInfo(zone)
        except Exception:  # listed but unreadable: the fixed offset below
            pass
    off = node.get("utc")
    if off is None:
        return None
    _need(type(off) is int and abs(off) < limits.MAX_UTC_OFFSET_US, "tz: bad utc offset")
    name = node.get("name")
    _need(name is None or (type(name) is str and len(name) <= limits.MAX_TZ_NAME_CHARS), "tz: bad name")
    td = _dt.timedelta(microseconds=off)
    return _dt.timezone(td, name) if name is not None else _dt.timezone(td)


def _d_pd_tz(pd: Any, node: Any) -> Any:
    """A TZ node for pandas: pytz zones go back to pandas by key (pandas < 3 keeps pytz)."""
    tz = _d_tz(node)
    zone = iana_zone(node.get("zone"))  # pandas takes "dateutil/<path>" too: only IANA names reach it
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


def _d_datetime(d: Decoder, node: dict, depth: int) -> _dt.datetime:
    v = _dt.datetime.fromisoformat(_str_field(node, "v", limits.MAX_DATETIME_CHARS))
    tz = _d_tz(node["tz"]) if "tz" in node else None
    return v.replace(tzinfo=tz, fold=_fold(node))


def _d_date(d: Decoder, node: dict, depth: int) -> _dt.date:
    return _dt.date.fromisoformat(_str_field(node, "v", limits.MAX_DATE_CHARS))


def _d_time(d: Decoder, node: dict, depth: int) -> _dt.time:
    v = _dt.time.fromisoformat(_str_field(node, "v", limits.MAX_DATETIME_CHARS))
    tz = _d_tz(node["tz"]) if "tz" in node else None
    return v.replace(tzinfo=tz, fold=_fold(node))


def _d_timedelta(d: Decoder, node: dict, depth: int) -> _dt.timedelta:
    v: Any = node.get("v")
    _need(type(v) is list and len(v) == 3 and all(type(x) is int for x in v), "timedelta: bad value")
    return _dt.timedelta(days=v[0], seconds=v[1], microseconds=v[2])


def _d_uuid(d: Decoder, node: dict, depth: int) -> uuid.UUID:
    v = _str_field(node, "v", limits.UUID_HEX_CHARS)
    _need(_UUID_RE.match(v) is not None, "uuid: bad hex")
    return uuid.UUID(hex=v)


def _d_path(d: Decoder, node: dict, depth: int) -> pathlib.PurePath:
    kind: Any = node.get("k")
    cls = _PATHS.get(kind)
    if cls is None:
        raise CodecError("malformed payload: path: unknown kind")
    text = _str_field(node, "v")
    d.count(text.count("/") + text.count("\\"))  # one str object per part: "a/a/a/..." weighs 25x its text
    return cls(text)


def _d_enum(d: Decoder, node: dict, depth: int) -> Any:
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


def _d_opaque(d: Decoder, node: dict, depth: int) -> Opaque:
    text = _str_field(node, "str", limits.MAX_OPAQUE_TEXT_CHARS) if "str" in node else None
    return Opaque(_str_field(node, "type", limits.MAX_TYPE_NAME_CHARS),
                  _str_field(node, "repr", limits.MAX_OPAQUE_TEXT_CHARS), text)


def _d_exc(d: Decoder, node: dict, depth: int) -> BaseException:
    return _decode_exception(node.get("e"), d)


def _d_ndarray(d: Decoder, node: dict, depth: int) -> Any:
    return d.nd(node, depth, want_list=False)


def _d_npscalar(d: Decoder, node: dict, depth: int) -> Any:
    dts = node.get("dtype")
    np = _numpy()
    if dts == "U":
        text = _str_field(node, "v")
        return np.str_(text) if np is not None else text
    if dts == "S":
        raw = bytes.fromhex(_str_field(node, "x"))
        return np.bytes_(raw) if np is not None else raw
    m = _DTYPE_RE.match(dts) if type(dts) is str else None
    if m is None:
        raise CodecError("malformed payload: npscalar: bad dtype")
    kind = m.group(2)
    _need(kind not in "SU", "npscalar: bad dtype")
    if "x" in node:
        raw = bytes.fromhex(_str_field(node, "x", limits.MAX_NPSCALAR_HEX_CHARS))
        sub: dict[str, Any] = {_TAG: "ndarray", "dtype": dts, "shape": [], "b": 0}
        arr = Decoder([memoryview(raw)], 2, 10, {}).nd(sub, 0, want_list=np is None)
        return arr[()] if np is not None else arr
    v: Any = node.get("v")
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


def _d_arr(d: Decoder, node: Any, depth: int, pd: Any) -> Any:
    """A column node -> numpy/extension array (pandas present) or a list."""
    _need(type(node) is dict, "column must be an object")
    kind = node.get("k")
    as_list = pd is None
    if not as_list:
        d.count(limits.PANDAS_OBJECT_ITEMS)  # a Series/Index per column: thousands of empty columns weigh GBs
    if kind == "np":
        arr = d.nd(node.get("a"), depth, want_list=as_list)
        if as_list:
            return _ns_values(node.get("a"), arr)
        _need(arr.ndim == 1, "column must be one-dimensional")
        return pd_nanoseconds(pd, arr)
    if kind == "dttz":
        tz = _d_tz(node.get("tz")) if as_list else _d_pd_tz(pd, node.get("tz"))
        _need(tz is not None, "dttz: missing tz")
        arr = d.nd(node.get("a"), depth, want_list=as_list)
        if as_list:
            _need(type(arr) is list, "dttz: bad values")
            arr = _ns_values(node.get("a"), arr)
            return [x.replace(tzinfo=_UTC).astimezone(tz) if type(x) is _dt.datetime else x for x in arr]
        _need(arr.ndim == 1 and arr.dtype.kind == "M", "dttz: values must be datetime64")
        return pd.array(pd_nanoseconds(pd, arr)).tz_localize("UTC").tz_convert(tz)
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
            return [None if m else x for x, m in zip(data, mask, strict=True)]
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


def pd_nanoseconds(pd: Any, arr: Any) -> Any:
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


def _d_index(d: Decoder, node: Any, depth: int) -> Any:
    """An index node inside a DataFrame/Series/Categorical (no depth of its own)."""
    _need(type(node) is dict and node.get(_TAG) in _INDEX_TAGS, "expected an index node")
    return DECODERS[node[_TAG]](d, node, depth)


def _d_pd_index(d: Decoder, node: dict, depth: int) -> Any:
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
        with contextlib.suppress(Exception):  # the constructor checks the values conform to freq
            idx = cls(idx, freq=freq, name=name)
    return idx


def _d_pd_range(d: Decoder, node: dict, depth: int) -> Any:
    v: Any = node.get("v")
    _need(type(v) is list and len(v) == 3 and all(type(x) is int and abs(x) < 2**63 for x in v) and v[2] != 0,
          "RangeIndex: bad range")
    name = d.dec(node.get("name"), depth)
    pd = _pandas()
    if pd is not None:
        d.count(limits.PANDAS_OBJECT_ITEMS)
        return pd.RangeIndex(v[0], v[1], v[2], name=name)  # lazy: no allocation
    r = range(v[0], v[1], v[2])
    d.count(len(r))
    return list(r)


def _d_pd_multi(d: Decoder, node: dict, depth: int) -> Any:
    levels: Any = node.get("levels")
    codes: Any = node.get("codes")
    names: Any = node.get("names")
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
    for level, c in zip(lv, cd, strict=True):
        _need(all(type(x) is int and -1 <= x < len(level) for x in c), "MultiIndex: bad codes")
    return [tuple(level[c[i]] if c[i] >= 0 else None for level, c in zip(lv, cd, strict=True)) for i in range(n)]


def _d_pd_series(d: Decoder, node: dict, depth: int) -> Any:
    pd = _pandas()
    arr = _d_arr(d, node.get("data"), depth, pd)
    index = _d_index(d, node.get("index"), depth)
    name = d.dec(node.get("name"), depth)
    if pd is None:
        return arr
    _need(len(arr) == len(index), "Series: index length does not match")
    return pd.Series(arr, index=index, name=name, dtype=arr.dtype, copy=False)


def _d_pd_frame(d: Decoder, node: dict, depth: int) -> Any:
    pd = _pandas()
    columns = _d_index(d, node.get("columns"), depth)
    index = _d_index(d, node.get("index"), depth)
    data: Any = node.get("data")
    _need(type(data) is list and len(data) == len(columns), "DataFrame: column count does not match")
    arrays = [_d_arr(d, a, depth, pd) for a in data]
    for a in arrays:
        _need(len(a) == len(index), "DataFrame: column length does not match the index")
    if pd is None:
        out: dict = {}
        for label, values in zip(columns, arrays, strict=True):
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


def _d_pd_timestamp(d: Decoder, node: dict, depth: int) -> Any:
    v = _int_field(node.get("v"), "Timestamp value")
    unit: Any = node.get("unit")
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


def _d_pd_timedelta(d: Decoder, node: dict, depth: int) -> Any:
    v = _int_field(node.get("v"), "Timedelta value")
    unit: Any = node.get("unit")
    _need(unit in _PD_UNITS and _INT_LO < v < 2**63, "Timedelta: bad value or unit")
    pd = _pandas()
    if pd is not None:
        return pd.Timedelta(_numpy().timedelta64(v, unit))
    return _dt.timedelta(microseconds=v * _US_PER[unit] if unit in _US_PER else v // 1000)


def _d_pd_nat(d: Decoder, node: dict, depth: int) -> Any:
    pd = _pandas()
    return pd.NaT if pd is not None else None


def _d_pd_na(d: Decoder, node: dict, depth: int) -> Any:
    pd = _pandas()
    return pd.NA if pd is not None else None


def _d_pd_categorical(d: Decoder, node: dict, depth: int) -> Any:
    _need(node.get("k") == "cat", "Categorical: bad node")
    return _d_arr(d, node, depth, _pandas())


DECODERS: Mapping[str, Any] = MappingProxyType(
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
        **{t: t for t in DECODERS},
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
        **{t: "pandas." + t[3:] for t in DECODERS if t.startswith("pd.")},
    }
)


# --- logs and exceptions --------------------------------------------------------------


def from_jsonable(tree: Any, *, enum_types: Mapping[str, type] | Iterable[type] | None = None,
                  max_depth: int = limits.DEFAULT_MAX_DEPTH,
                  max_items: int | None = limits.DEFAULT_MAX_ITEMS) -> Any:
    """Rebuild a value from :func:`to_jsonable` output; what cannot be rebuilt is Opaque.

    ``max_items`` bounds the values built (arrays become lists without numpy; a
    RangeIndex a list without pandas): past it, parts become Opaque.
    """
    return _from_jsonable(tree, max_depth, enum_registry(enum_types),
                          max_items if max_items is not None else math.inf)


def _from_jsonable(tree: Any, max_depth: int, enums: dict, max_items: float,
                   parent: Decoder | None = None) -> Any:
    """from_jsonable; inside a decode (``parent``), counting against the parent's items."""
    dec = Decoder([], max_depth + 2, max_items, enums, lenient=True)
    if parent is not None:
        dec.items, dec.max_items = parent.items, parent.max_items
    try:
        return dec.dec(tree, 0)
    except Exception as e:
        return Opaque("?", f"<not rebuilt: {type(e).__name__}: {_safe_repr(e, 300)}>")
    finally:
        if parent is not None:
            parent.items = dec.items


def decode_exception(data: Any) -> BaseException:
    """Rebuild an exception from :func:`encode_exception` output. Never raises."""
    return _decode_exception(data, None)


def _decode_exception(data: Any, parent: Decoder | None) -> BaseException:
    """decode_exception; inside a decode (``parent``), its args count against the parent's items."""
    try:
        if type(data) is not dict:
            return ToolError("MalformedError", f"error description is a {type(data).__name__}, not a dict")
        type_name, message = data.get("type"), data.get("message", "")
        if type(type_name) is not str or type(message) is not str:
            return ToolError("MalformedError", "error type or message is not a string")
        type_name, message = type_name[:limits.MAX_TYPE_NAME_CHARS], message[:limits.MESSAGE_LIMIT]
        exc: BaseException | None = None
        cls = _BUILTIN_EXCEPTIONS.get(type_name)
        if cls is not None and "args" in data:
            args = _from_jsonable(data["args"], limits.EXCEPTION_ARGS_DEPTH, {}, limits.DEFAULT_MAX_ITEMS, parent)
            if type(args) is tuple:
                try:
                    exc = cls(*args)
                except Exception:
                    exc = None
                if exc is not None and isinstance(exc, OSError):
                    for attr in ("filename", "filename2"):
                        if attr in data:
                            setattr(exc, attr, _from_jsonable(data[attr], limits.EXCEPTION_FILENAME_DEPTH, {},
                                                          limits.DEFAULT_MAX_ITEMS, parent))
        if exc is None and cls is not None and "args" not in data:
            exc = cls(message) if message else cls()  # a bare {"type", "message"} description
        if exc is None:
            exc = ToolError(type_name, message)
        notes = data.get("notes")
        if type(notes) is list and hasattr(exc, "add_note"):  # Python >= 3.11
            for note in notes[:limits.MAX_EXCEPTION_NOTES]:
                if type(note) is str:
                    exc.add_note(note[:limits.MESSAGE_LIMIT])
        return exc
    except Exception as e:
        return ToolError("MalformedError", f"error description could not be read ({type(e).__name__})")
