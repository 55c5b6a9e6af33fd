"""One value codec for both sides of the host <-> sandbox bridge.

Standard library only at import time: the same files run inside the sandbox
kernel (top-level modules there: ``import sandbox_codec``) and on the host
(imported as ``sandbox.runtime.sandbox_codec``). numpy and pandas are used only when a
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
The decoder assumes a hostile sender: the host decodes what code in the
sandbox sends. What it refuses, and every bound with its reason, is in
:mod:`sandbox_codec_limits` (one place); each raises :class:`CodecError`.

Modules
=======
This module is the public API and the wire format (the framing of chunks,
the prefix and buffer table, the header's JSON); it imports the rest:

- ``sandbox_codec_limits``: every bound, named and documented; the value
  count of a JSON text (:func:`json_items_within`).
- ``sandbox_codec_values``: the errors, :class:`Opaque`, :class:`ToolError`
  and :func:`as_tool_error`, shared by both sides.
- ``sandbox_codec_encode``: value -> tagged tree (what the sandbox runs),
  numpy/pandas included; :func:`to_jsonable`, :func:`encode_exception`.
- ``sandbox_codec_decode``: tagged tree -> value on hostile input (what the
  host runs), numpy/pandas included; :func:`from_jsonable`,
  :func:`decode_exception`.

Speed (Python 3.11, numpy 2.4, pandas 3.1, a 2-core VM; best of 5, measured
with ``python sandbox/runtime/sandbox_codec.py --bench``)::

    ("Paris", 3, {"unit": "C"}) dumps + loads      14-20 us
    50 MB of bytes: encode (zero-copy chunks)      0.007 ms
                    decode (one copy into bytes)   40-50 ms (a bare bytes() copy: the same)
    DataFrame 1,000,000 rows x 3 numeric columns   28-34 ms dumps + loads
    DataFrame 100,000 rows of str                  26-34 ms dumps + loads
"""

from __future__ import annotations

import json
import math
import struct
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or __package__:  # on the host: sandbox.runtime.sandbox_codec (and for the type checker)
    from . import sandbox_codec_decode as _decode
    from . import sandbox_codec_encode as _encode
    from . import sandbox_codec_limits as _limits
    from . import sandbox_codec_values as _values
else:  # in the sandbox, and as a script: top-level modules (PYTHONPATH=/opt/sandbox/runtime)
    import sandbox_codec_decode as _decode
    import sandbox_codec_encode as _encode
    import sandbox_codec_limits as _limits
    import sandbox_codec_values as _values

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

# The public names, wherever they are defined.
CodecError = _values.CodecError
EncodeError = _values.EncodeError
Opaque = _values.Opaque
ToolError = _values.ToolError
as_tool_error = _values.as_tool_error
to_jsonable, encode_exception = _encode.to_jsonable, _encode.encode_exception
from_jsonable, decode_exception = _decode.from_jsonable, _decode.decode_exception
json_items_within = _limits.json_items_within
DEFAULT_MAX_DEPTH, DEFAULT_MAX_ITEMS = _limits.DEFAULT_MAX_DEPTH, _limits.DEFAULT_MAX_ITEMS
REPR_LIMIT, MESSAGE_LIMIT, PANDAS_OBJECT_ITEMS = _limits.REPR_LIMIT, _limits.MESSAGE_LIMIT, _limits.PANDAS_OBJECT_ITEMS
MAX_INT_BITS, MAX_FRACTION_BITS = _limits.MAX_INT_BITS, _limits.MAX_FRACTION_BITS
MAX_DECIMAL_DIGITS, MAX_DECIMAL_EXPONENT = _limits.MAX_DECIMAL_DIGITS, _limits.MAX_DECIMAL_EXPONENT
# The other modules' names this module uses.
_Encoder = _encode.Encoder
_Decoder = _decode.Decoder
_Buffers = _decode.Buffers
_enum_registry, _too_many, _safe_repr = _decode.enum_registry, _decode.too_many, _values.safe_repr
_numpy, _pandas = _values.numpy_if_available, _values.pandas_if_available

# --- wire format --------------------------------------------------------------------

MAGIC = b"CXC1"
#: MAGIC, header length, number of buffers; then a u64 length per buffer, the header, the buffers.
_PREFIX = struct.Struct("<4sII")


def encoded_size(chunks: Iterable[bytes | memoryview]) -> int:
    """Total size in bytes of the chunks returned by :func:`encode`."""
    return sum(map(len, chunks))


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
        # Every buffer is referenced by a node in the header: refuse a table the header cannot account for.
        if nbuf * _limits.HEADER_BYTES_PER_BUFFER > hlen:
            raise CodecError("malformed payload: more buffers than the header can reference")
        hstart = pos + 8 * nbuf
        hend = hstart + hlen
        if nbuf:
            table = _Buffers(mv, pos, nbuf, hend)
            bufs: _decode.BufferTable = table
            end = table.end
        else:
            bufs, end = (), hend
        if end != total:
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
