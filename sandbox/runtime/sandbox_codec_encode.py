"""The value codec's encoder: what the sandbox runs to turn a value into the tagged tree.

Part of the codec (:mod:`sandbox_codec` frames the tree into a payload and
exports the public names); standard library only: numpy and pandas are
looked at only when a value of theirs is encoded. The node of every type is
listed in :mod:`sandbox_codec`'s docstring. :class:`Encoder` refuses what the
receiver would refuse (the bounds in :mod:`sandbox_codec_limits`) with
:class:`EncodeError`, so the sender learns first; in ``safe`` mode
(:func:`to_jsonable`, for logs) it never raises.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as _dt
import decimal
import enum
import fractions
import math
import pathlib
import sys
import uuid
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or __package__:  # on the host: sandbox.runtime.sandbox_codec_encode (and for the type checker)
    from . import sandbox_codec_limits as limits
    from . import sandbox_codec_values as _values
else:  # in the sandbox, and as a script: top-level modules (PYTHONPATH=/opt/sandbox/runtime)
    import sandbox_codec_limits as limits
    import sandbox_codec_values as _values

EncodeError = _values.EncodeError
Opaque = _values.Opaque
ToolError = _values.ToolError
_TAG, _PLAIN_LEAVES, _STR_ONLY, _INT_LO, _INT_HI = (_values.TAG, _values.PLAIN_LEAVES, _values.STR_ONLY,
                                                     _values.INT_LO, _values.INT_HI)
_MASKED_DTYPES, _BUILTIN_EXCEPTIONS = _values.MASKED_DTYPES, _values.BUILTIN_EXCEPTIONS
_type_name, _safe_repr, _own_str = _values.qualified_type_name, _values.safe_repr, _values.own_str


class _Cut(Exception):
    """to_jsonable: a buffer too big to inline; the value owning it is summarised."""

    def __init__(self, size: int) -> None:
        self.size = size


def _opaque_node(t: type, text: str, **extra: Any) -> dict:
    node = {_TAG: "opaque", "type": _type_name(t), "repr": text}
    node.update(extra)
    return node


def _nonfinite(x: float) -> str:
    return "nan" if x != x else ("inf" if x > 0 else "-inf")


def _float_out(x: float) -> float | str:
    return x if x - x == 0.0 else _nonfinite(x)


def _td_us(td: _dt.timedelta) -> int:
    return (td.days * 86400 + td.seconds) * 1_000_000 + td.microseconds


# --- the encoder -------------------------------------------------------------------


class Encoder:
    __slots__ = ("max_depth", "max_bytes", "bufs", "nbytes", "safe", "inline", "active")

    def __init__(self, max_depth: int, max_bytes: int | None, safe: bool = False, inline: int = 0) -> None:
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
        if t is int and _INT_LO <= v < _INT_HI:
            return v
        if t is float and v - v == 0.0:  # finite
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
                if int in kinds and min(v) >= _INT_LO and max(v) < _INT_HI:
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
                        with contextlib.suppress(AttributeError):  # an init=False field never set
                            fields[f.name] = getattr(v, f.name)
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
        text = _own_str(v, limits.REPR_LIMIT)
        if text is not None and text != node["repr"]:
            node["str"] = text  # print(x) in the sandbox shows what print(x) shows on the host
        return node


def _e_int(enc: Encoder, v: int, depth: int) -> Any:
    if _INT_LO <= v < _INT_HI:
        return v
    if v.bit_length() > limits.MAX_INT_BITS and not enc.safe:
        raise EncodeError(limits.INT_TOO_BIG)  # the receiver would refuse it: say so where it is sent
    return {_TAG: "int", "x": format(v, "x")}


def _e_float(enc: Encoder, v: float, depth: int) -> Any:
    return v if v - v == 0.0 else {_TAG: "float", "v": _nonfinite(v)}


def _e_list(enc: Encoder, v: list, depth: int) -> list:
    return enc.seq(v, depth)


def _e_dict(enc: Encoder, v: dict, depth: int) -> dict:
    return enc.mapping(v, depth)


def _e_tuple(enc: Encoder, v: tuple, depth: int) -> dict:
    return {_TAG: "tuple", "v": enc.seq(v, depth)}


def _e_set(enc: Encoder, v: set, depth: int) -> dict:
    return {_TAG: "set", "v": enc.seq(v, depth)}


def _e_frozenset(enc: Encoder, v: frozenset, depth: int) -> dict:
    return {_TAG: "frozenset", "v": enc.seq(v, depth)}


def _e_bytes(enc: Encoder, v: bytes, depth: int) -> dict:
    return enc.buf({_TAG: "bytes"}, v)


def _e_bytearray(enc: Encoder, v: bytearray, depth: int) -> dict:
    # Copied: a view would pin the bytearray's size and see later changes.
    return enc.buf({_TAG: "bytearray"}, bytes(v))


def _e_memoryview(enc: Encoder, v: memoryview, depth: int) -> dict:
    try:
        if not v.c_contiguous:
            data: bytes | memoryview = v.tobytes()
        elif v.ndim == 1 and v.format == "B":
            data = v
        else:
            data = v.cast("B")
    except ValueError:  # released
        return _opaque_node(memoryview, _safe_repr(v))
    return enc.buf({_TAG: "bytes"}, data)


def _e_complex(enc: Encoder, v: complex, depth: int) -> dict:
    return {_TAG: "complex", "v": [_float_out(v.real), _float_out(v.imag)]}


def _e_decimal(enc: Encoder, v: decimal.Decimal, depth: int) -> dict:
    if not enc.safe and not limits.decimal_fits(v):
        raise EncodeError(limits.DECIMAL_TOO_BIG)
    return {_TAG: "decimal", "v": str(v)}


def _e_fraction(enc: Encoder, v: fractions.Fraction, depth: int) -> dict:
    if not enc.safe and max(v.numerator.bit_length(), v.denominator.bit_length()) > limits.MAX_FRACTION_BITS:
        raise EncodeError(limits.FRACTION_TOO_BIG)
    return {_TAG: "fraction", "v": [_e_int(enc, v.numerator, 0), _e_int(enc, v.denominator, 0)]}


def _tz_node(tz: _dt.tzinfo, at: Any) -> dict | None:
    """TZ node for ``tz``; ``at`` (datetime/time or None) gives the fallback offset."""
    if type(tz) is _dt.timezone:
        # (offset,) or (offset, name): tells an explicit name. CPython's timezone has it; typeshed omits it.
        args = tz.__getinitargs__()  # type: ignore[attr-defined]
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


def _e_datetime(enc: Encoder, v: _dt.datetime, depth: int) -> dict:
    node: dict[str, Any] = {_TAG: "datetime", "v": _dt.datetime.isoformat(_dt.datetime.replace(v, tzinfo=None, fold=0))}
    if v.tzinfo is not None:
        tz = _tz_node(v.tzinfo, v)
        if tz is not None:
            node["tz"] = tz
    if v.fold:
        node["fold"] = 1
    return node


def _e_date(enc: Encoder, v: _dt.date, depth: int) -> dict:
    return {_TAG: "date", "v": _dt.date.isoformat(v)}


def _e_time(enc: Encoder, v: _dt.time, depth: int) -> dict:
    node: dict[str, Any] = {_TAG: "time", "v": _dt.time.isoformat(_dt.time.replace(v, tzinfo=None, fold=0))}
    if v.tzinfo is not None:
        tz = _tz_node(v.tzinfo, v)
        if tz is not None:
            node["tz"] = tz
    if v.fold:
        node["fold"] = 1
    return node


def _e_timedelta(enc: Encoder, v: _dt.timedelta, depth: int) -> dict:
    return {_TAG: "timedelta", "v": [v.days, v.seconds, v.microseconds]}


def _e_uuid(enc: Encoder, v: uuid.UUID, depth: int) -> dict:
    return {_TAG: "uuid", "v": v.hex}


def _e_path(enc: Encoder, v: pathlib.PurePath, depth: int) -> dict:
    for cls in (pathlib.WindowsPath, pathlib.PosixPath, pathlib.PureWindowsPath, pathlib.PurePosixPath):
        if isinstance(v, cls):
            return {_TAG: "path", "k": cls.__name__, "v": str(v)}
    raise TypeError("unknown path flavour")


def _e_opaque(enc: Encoder, v: Opaque, depth: int) -> dict:
    node = {_TAG: "opaque", "type": v.type_name, "repr": v.repr_text}
    if v.str_text is not None:
        node["str"] = v.str_text
    return node


def _e_enum(enc: Encoder, v: enum.Enum, depth: int) -> dict:
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


def _nd_node(enc: Encoder, np: Any, a: Any, depth: int) -> dict | None:
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


def _e_numpy(enc: Encoder, v: Any, depth: int) -> dict | None:
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


def _pd_array_node(enc: Encoder, pd: Any, np: Any, obj: Any, depth: int) -> dict:
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


def _pd_index_node(enc: Encoder, pd: Any, np: Any, idx: Any, depth: int) -> dict:
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


def _e_pandas(enc: Encoder, v: Any, depth: int) -> dict | None:
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



# --- logs and exceptions --------------------------------------------------------------


def to_jsonable(value: Any, *, inline_bytes: int = 65536, max_depth: int = limits.DEFAULT_MAX_DEPTH) -> Any:
    """The tagged tree of ``value`` as JSON-able data, for logs. Never raises."""
    try:
        return Encoder(max_depth, None, safe=True, inline=inline_bytes).enc(value, 0)
    except Exception as e:  # e.g. RecursionError from a very large max_depth
        try:
            return _opaque_node(type(value), f"<{_type_name(type(value))}: not logged ({type(e).__name__})>")
        except Exception:
            return {_TAG: "opaque", "type": "?", "repr": "<not logged>"}


def _safe_str(exc: BaseException) -> str:
    try:
        text = str(exc)
        if type(text) is not str:
            text = str.__str__(text)
    except Exception:
        text = _safe_repr(exc, 1000)
    return text[:limits.MESSAGE_LIMIT]


def encode_exception(exc: BaseException) -> dict:
    """A JSON-able dict describing ``exc`` (type name, message, args if builtin). Never raises."""
    try:
        t = type(exc)
        if isinstance(exc, ToolError):
            out: dict = {"type": str(exc.type_name)[:limits.MAX_TYPE_NAME_CHARS],
                         "message": str(exc.message)[:limits.MESSAGE_LIMIT]}
        else:
            out = {"type": _type_name(t)[:limits.MAX_TYPE_NAME_CHARS], "message": _safe_str(exc)}
        if _BUILTIN_EXCEPTIONS.get(t.__name__) is t:
            out["args"] = to_jsonable(tuple(exc.args), inline_bytes=limits.EXCEPTION_INLINE_BYTES,
                                      max_depth=limits.EXCEPTION_ARGS_DEPTH)
            if isinstance(exc, OSError):
                for attr in ("filename", "filename2"):
                    v = getattr(exc, attr, None)
                    if v is not None:
                        out[attr] = to_jsonable(v, inline_bytes=limits.EXCEPTION_INLINE_BYTES,
                                                max_depth=limits.EXCEPTION_FILENAME_DEPTH)
        notes = getattr(exc, "__notes__", None)
        if isinstance(notes, list) and notes:
            out["notes"] = [str(n)[:limits.MESSAGE_LIMIT] for n in notes[:limits.MAX_EXCEPTION_NOTES]]
        return out
    except Exception:
        return {"type": "?", "message": "<exception could not be described>"}

