"""The host <-> sandbox value codec (sandbox/runtime/sandbox_codec.py)."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime as dt
import decimal
import enum
import fractions
import json
import math
import os
import pathlib
import struct
import subprocess
import sys
import textwrap
import threading
import time
import uuid
import zoneinfo

import tempfile

import hypothesis.configuration
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox.runtime import sandbox_codec as codec
from sandbox.runtime import sandbox_codec_decode as codec_decode
from sandbox.runtime.sandbox_codec import CodecError, EncodeError, Opaque, ToolError

RUNTIME_DIR = pathlib.Path(codec.__file__).parent
# Hypothesis keeps its example database and caches out of the work tree.
hypothesis.configuration.set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "codeact-hypothesis"))

try:
    import numpy as np
except ImportError:  # pragma: no cover - installed in the dev venv
    np = None
try:
    import pandas as pd
except ImportError:  # pragma: no cover
    pd = None

needs_numpy = pytest.mark.skipif(np is None, reason="numpy not installed")
needs_pandas = pytest.mark.skipif(pd is None, reason="pandas not installed")


def rt(value, **kw):
    return codec.loads(codec.dumps(value), **kw)


def same(a, b) -> bool:
    """Equal values of the same type, all the way down (nan equals nan, -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if a != a:
            return b != b
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, complex):
        return same(a.real, b.real) and same(a.imag, b.imag)
    if isinstance(a, decimal.Decimal):
        return a.compare_total(b) == 0  # same digits, exponent and sign; NaN payloads too
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return len(a) == len(b) and all(
            same(ka, kb) and same(va, vb) for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
        )
    if isinstance(a, (set, frozenset)):
        return a == b and collections.Counter(map(type, a)) == collections.Counter(map(type, b))
    if isinstance(a, (dt.datetime, dt.time)):
        return a == b and a.fold == b.fold and repr(a) == repr(b)
    if isinstance(a, (dt.date, dt.timedelta, uuid.UUID, pathlib.PurePath, fractions.Fraction)):
        return a == b and repr(a) == repr(b)
    return a == b


class Color(enum.Enum):
    RED = 1
    GREEN = (2, "g")


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Mode(*((enum.StrEnum,) if hasattr(enum, "StrEnum") else (str, enum.Enum))):  # StrEnum: 3.11+
    READ = "r"
    WRITE = "w"


class Perm(enum.Flag):
    R = 4
    W = 2
    X = 1


class OtherTZ(dt.tzinfo):
    def utcoffset(self, d):
        return dt.timedelta(hours=-3, minutes=-30)

    def tzname(self, d):
        return "NST"

    def dst(self, d):
        return dt.timedelta(0)


PARIS = zoneinfo.ZoneInfo("Europe/Paris")
NEW_YORK = zoneinfo.ZoneInfo("America/New_York")

# --- the type table --------------------------------------------------------------------

TABLE = [
    None, True, False, 0, 1, -1, 2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**63) - 1,
    10**5000, -(10**5000) + 7, 3 * 2**200, 2**codec.MAX_INT_BITS - 1, -(2**codec.MAX_INT_BITS) + 1,
    0.0, -0.0, 1.5, -2.25e-308, 1e308, 5e-324, float("inf"), float("-inf"), float("nan"),
    "", "plain", "unicode: é中😀", "\ud800", "a\udfffb", "\ud83d\ude00", "\x00\n\"\\", "$",
    b"", b"\x00\xff" * 10, bytearray(b"abc"), bytearray(),
    (), (1,), (1, (2, (3,))), [], [1, "a", None, [2.5, [b"x"]]], list(range(100)), [0.5] * 20,
    {}, {"a": 1, "b": [1, 2]}, {"$": "tuple", "v": [1]}, {"$": 1}, {"x": {"$": {"$": "$"}}},
    {1: "a", 2: "b"}, {(1, 2): "t", None: 0, True: 1, 2.5: 2, frozenset({1}): 3, "s": 4, b"k": 5},
    {"b": 1, "a": 2, 1: 3},  # key order kept, mixed keys
    set(), {1, 2, 3}, {"a", (1, 2), None}, frozenset(), frozenset({1, frozenset({2})}),
    1 + 2j, complex(float("nan"), -0.0), complex(float("inf"), 1),
    decimal.Decimal("1.10"), decimal.Decimal("-0"), decimal.Decimal("-0.000"), decimal.Decimal("NaN"),
    decimal.Decimal("-sNaN42"), decimal.Decimal("Infinity"), decimal.Decimal("-Infinity"),
    decimal.Decimal("1E+5000"), decimal.Decimal("-1E-5000"), decimal.Decimal("9" * 5000),
    decimal.Decimal("3.14159265358979323846264338327950288419716939937510"),
    fractions.Fraction(3, 7), fractions.Fraction(-(10**50), 3), fractions.Fraction(0),
    dt.datetime(2024, 2, 29, 13, 14, 15, 161718), dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
    dt.datetime(2024, 1, 1, 5, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
    dt.datetime(2024, 1, 1, tzinfo=dt.timezone(-dt.timedelta(hours=2), "Somewhere")),
    dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(seconds=1, microseconds=7))),
    dt.datetime(2024, 7, 1, 12, tzinfo=PARIS),
    dt.datetime(2021, 11, 7, 1, 30, tzinfo=NEW_YORK, fold=1),
    dt.datetime(2021, 11, 7, 1, 30, tzinfo=NEW_YORK, fold=0),
    dt.datetime(2021, 11, 7, 1, 30, fold=1),
    dt.date(2024, 2, 29), dt.date(1, 1, 1), dt.date.max,
    dt.time(), dt.time(23, 59, 59, 999999), dt.time(1, 2, tzinfo=dt.timezone.utc), dt.time(1, fold=1),
    dt.time(1, 2, tzinfo=PARIS),
    dt.timedelta(0), dt.timedelta(days=-1, microseconds=1), dt.timedelta.max, dt.timedelta.min,
    uuid.UUID(int=0), uuid.UUID("12345678-1234-5678-1234-567812345678"), uuid.uuid4(),
    pathlib.PurePosixPath("/a/b"), pathlib.PureWindowsPath(r"C:\x\y"), pathlib.Path("rel/p"),
    pathlib.Path("/abs/\udcff"),
    Opaque("some.Type", "<some.Type at 0x1>"),
    [[[[[[[[[[1]]]]]]]]]],
    {"deep": ({"k": [1, {2, 3}, frozenset({(4, 5)})]},)},
]


@pytest.mark.parametrize("value", TABLE, ids=lambda v: type(v).__name__)
def test_table_round_trip(value):
    back = rt(value)
    assert same(value, back), (value, back)


def test_big_ints_do_not_hit_the_digit_limit():
    value = 7 ** 100_000  # ~85,000 digits: json.dumps would refuse it
    assert rt(value) == value
    assert rt(-value) == -value


def test_memoryview_arrives_as_bytes():
    assert same(rt(memoryview(b"abcdef")), b"abcdef")
    assert same(rt(memoryview(b"abcdef")[::2]), b"ace")  # not contiguous
    assert same(rt(memoryview(b"abcd").cast("B", (2, 2))), b"abcd")
    assert same(rt(memoryview(struct.pack("<3i", 1, 2, 3)).cast("i")), struct.pack("<3i", 1, 2, 3))


def test_path_flavours():
    assert type(rt(pathlib.Path("/x"))) is type(pathlib.Path("/x"))  # PosixPath here
    # A WindowsPath from a Windows host arrives as PureWindowsPath on POSIX.
    payload = make_payload({"$": "path", "k": "WindowsPath", "v": "C:\\a"})
    assert same(codec.loads(payload), pathlib.PureWindowsPath("C:\\a"))


def test_other_tzinfo_arrives_as_fixed_offset():
    value = dt.datetime(2024, 1, 1, 12, tzinfo=OtherTZ())
    back = rt(value)
    assert back == value
    assert type(back.tzinfo) is dt.timezone
    assert back.utcoffset() == value.utcoffset() and back.tzname() == "NST"


def test_unknown_zone_key_falls_back_to_the_fixed_offset():
    value = dt.datetime(2024, 7, 1, 12, tzinfo=PARIS)
    tree = codec.to_jsonable(value)
    assert tree["tz"]["zone"] == "Europe/Paris"
    for key in ("Mars/Olympus_Mons", "../../etc/passwd", "/etc/localtime", "", "a" * 300):
        tree["tz"]["zone"] = key
        back = codec.loads(make_payload(tree))
        assert back == value and back.utcoffset() == dt.timedelta(hours=2) and back.tzname() == "CEST"


def test_timezone_utc_singleton_and_names():
    back = rt(dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc))
    assert back.tzinfo is dt.timezone.utc
    back = rt(dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(0), "Z")))
    assert back.tzname() == "Z"


# --- enums, dataclasses, pydantic, builtin subclasses -------------------------------------


@pytest.mark.parametrize("member", [Color.RED, Color.GREEN, Level.HIGH, Mode.WRITE, Perm.R, Perm.R | Perm.W])
def test_enum_with_registry(member):
    back = rt(member, enum_types=[Color, Level, Mode, Perm])
    assert back is member or (type(back) is type(member) and back == member)


def test_enum_registry_as_mapping_by_qualname():
    assert rt(Color.RED, enum_types={"Color": Color}) is Color.RED
    assert rt(Color.RED, enum_types={f"{__name__}.Color": Color}) is Color.RED
    assert rt(Color.RED, enum_types={"Other": Level}) == 1


@pytest.mark.parametrize(
    ("member", "plain"),
    [(Color.RED, 1), (Color.GREEN, (2, "g")), (Level.HIGH, 2), (Mode.WRITE, "w"), (Perm.R | Perm.X, 5)],
)
def test_enum_without_registry_is_its_plain_value(member, plain):
    back = rt(member)
    assert same(back, plain), back
    assert not isinstance(back, enum.Enum)


def test_int_and_str_enums_are_not_mistaken_for_int_and_str():
    tree = codec.to_jsonable([Level.LOW, Mode.READ])
    assert [node["$"] for node in tree] == ["enum", "enum"]


def test_enum_in_container_and_as_dict_key():
    value = {Color.RED: [Level.LOW], "k": Mode.READ}
    back = rt(value, enum_types=[Color, Level, Mode])
    assert back == value and next(iter(back)) is Color.RED


def test_enum_unknown_member_name_falls_back_to_value():
    tree = codec.to_jsonable(Color.RED)
    tree["name"] = "PURPLE"
    assert codec.loads(make_payload(tree), enum_types=[Color]) is Color.RED  # by value
    tree["v"] = 99
    assert codec.loads(make_payload(tree), enum_types=[Color]) == 99


@dataclasses.dataclass
class Inner:
    x: int
    when: dt.date


@dataclasses.dataclass
class Outer:
    name: str
    inner: Inner
    tags: list = dataclasses.field(default_factory=list)
    later: int = dataclasses.field(init=False)


def test_dataclass_travels_as_dict_of_fields():
    value = Outer("a", Inner(1, dt.date(2024, 1, 1)), ["t"])
    assert same(rt(value), {"name": "a", "inner": {"x": 1, "when": dt.date(2024, 1, 1)}, "tags": ["t"]})


def test_pydantic_model_travels_as_model_dump():
    pydantic = pytest.importorskip("pydantic")

    class Point(pydantic.BaseModel):
        x: int
        at: dt.datetime
        color: Color

    value = Point(x=1, at=dt.datetime(2024, 1, 1), color=Color.RED)
    back = rt(value, enum_types=[Color])
    assert same(back, {"x": 1, "at": dt.datetime(2024, 1, 1), "color": Color.RED})
    assert Point.model_validate(back) == value


def test_builtin_subclasses_travel_as_the_base_type():
    Pair = collections.namedtuple("Pair", "a b")

    class Name(str):
        def __str__(self):
            return "changed"

    class Big(int):
        pass

    assert same(rt(Pair(1, 2)), (1, 2))
    assert same(rt(collections.OrderedDict(b=1, a=2)), {"b": 1, "a": 2})
    assert same(rt(collections.Counter("aab")), {"a": 2, "b": 1})
    assert same(rt(collections.defaultdict(list, {1: [2]})), {1: [2]})
    assert same(rt(Name("x")), "x")
    assert same(rt(Big(2**70)), 2**70)


class Weird:
    def __repr__(self):
        return "Weird<42>"


class BadRepr:
    def __repr__(self):
        raise RuntimeError("no repr for you")


def test_anything_else_is_opaque_with_the_original_repr():
    back = rt([Weird(), len, range(3), ...])
    assert all(type(x) is Opaque for x in back)
    assert repr(back[0]) == "Weird<42>" and back[0].type_name == f"{__name__}.Weird"
    assert back[1].type_name == "builtin_function_or_method" and repr(back[1]) == repr(len)
    assert str(back[2]) == "range(0, 3)"
    bad = rt(BadRepr())
    assert type(bad) is Opaque and "repr failed" in repr(bad)
    assert rt(Opaque("x", "y")) == Opaque("x", "y")
    long = rt(type("Long", (), {"__repr__": lambda self: "z" * 50_000})())
    assert len(repr(long)) <= codec.REPR_LIMIT and repr(long).startswith("zzz")


def test_exception_values_inside_containers():
    back = rt({"err": KeyError("k"), "other": Weird})
    assert type(back["err"]) is KeyError and str(back["err"]) == "'k'"


# --- property-based round trips --------------------------------------------------------

SURROGATES = st.sampled_from(["\ud800", "\udfff", "\ud83d", "\ude00", "\udcff"])
TEXT = st.text(st.one_of(st.characters(exclude_categories=()), SURROGATES), max_size=12)
HASHABLE_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**300), max_value=2**300),
    st.floats(allow_nan=False),
    TEXT,
    st.binary(max_size=16),
    st.decimals(allow_nan=True, allow_infinity=True, places=None).filter(lambda d: not d.is_nan()),
    st.fractions(),
    st.complex_numbers(allow_nan=False),
    st.dates(),
    st.datetimes(timezones=st.one_of(st.none(), st.timezones(), st.just(dt.timezone.utc))),
    st.times(timezones=st.one_of(st.none(), st.just(dt.timezone(dt.timedelta(hours=-7), "T")))),
    st.timedeltas(),
    st.uuids(),
    st.builds(pathlib.PurePosixPath, TEXT),
    st.builds(pathlib.PureWindowsPath, st.text(max_size=10)),
)
LEAVES = st.one_of(
    HASHABLE_LEAVES,
    st.floats(),  # nan, inf, -0.0
    st.decimals(allow_nan=True, allow_infinity=True),
    st.complex_numbers(),
    st.builds(bytearray, st.binary(max_size=16)),
)
HASHABLES = st.recursive(
    HASHABLE_LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=4).map(tuple), st.frozensets(inner, max_size=4)),
    max_leaves=8,
)


def _containers(inner):
    return st.one_of(
        st.lists(inner, max_size=6),
        st.lists(inner, max_size=6).map(tuple),
        st.dictionaries(TEXT, inner, max_size=5),
        st.dictionaries(HASHABLES, inner, max_size=5),
        st.sets(HASHABLES, max_size=5),
        st.frozensets(HASHABLES, max_size=5),
    )


VALUES = st.recursive(LEAVES, _containers, max_leaves=40)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VALUES)
def test_property_round_trip(value):
    back = rt(value)
    assert same(value, back)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VALUES)
def test_property_jsonable_round_trip(value):
    tree = codec.to_jsonable(value)
    json.dumps(tree, allow_nan=False)
    assert same(value, codec.from_jsonable(tree))


# --- hostile input ---------------------------------------------------------------------


def make_payload(tree, bufs=(), *, header=None, lens=None, magic=codec.MAGIC) -> bytes:
    """Build a payload by hand (an independent writer of the documented format)."""
    if header is None:
        header = json.dumps(tree, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    lens = [len(b) for b in bufs] if lens is None else lens
    return (struct.pack("<4sII", magic, len(header), len(lens)) + struct.pack(f"<{len(lens)}Q", *lens)
            + header + b"".join(bufs))


def test_make_payload_matches_the_encoder():
    value = [1, b"xy", (2, "z")]
    tree = [1, {"$": "bytes", "b": 0}, {"$": "tuple", "v": [2, "z"]}]
    assert codec.dumps(value) == make_payload(tree, [b"xy"])
    assert codec.loads(make_payload(tree, [b"xy"])) == value


def test_truncated_payloads():
    payload = codec.dumps({"a": [1, 2.5, b"bytes" * 10, (None, "x")], "b": 2**100})
    for n in range(len(payload)):
        with pytest.raises(CodecError):
            codec.loads(payload[:n])
    with pytest.raises(CodecError):
        codec.loads(payload + b"\x00")


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"CXC1",
        b"XXXX" + bytes(8),
        make_payload(None, magic=b"CXC2"),
        make_payload(1, header=b"1", lens=[5]),  # buffer table claims bytes that are not there
        make_payload({"$": "bytes", "b": 0}, [b"abc"], lens=[2]),
        make_payload({"$": "bytes", "b": 0}, [b"abc"], lens=[2**63]),
        make_payload([], header=b"[]" + b" " * 3, lens=[])[:-1],
        struct.pack("<4sII", codec.MAGIC, 2**32 - 1, 0) + b"{}",
        struct.pack("<4sII", codec.MAGIC, 2, 2**32 - 1) + b"{}",
        make_payload(None, header=b"\xff\xfe"),
        make_payload(None, header=b"[1,"),
        make_payload(None, header=b"NaN"),
        make_payload(None, header=b"[Infinity]"),
        make_payload(None, header=b"1 2"),
    ],
)
def test_malformed_framing(payload):
    with pytest.raises(CodecError):
        codec.loads(payload)


BAD_TREES = [
    {"$": "nope"},
    {"$": 5},
    {"$": None},
    {"$": "tuple"},
    {"$": "tuple", "v": 5},
    {"$": "set", "v": [[1]]},  # unhashable element
    {"$": "frozenset", "v": [{"a": 1}]},
    {"$": "dict", "v": [[[1], 2]]},  # unhashable key
    {"$": "dict", "v": [[{"$": "set", "v": []}, 2]]},
    {"$": "dict", "v": [[1]]},
    {"$": "dict", "v": {"a": 1}},
    {"$": "int", "x": "zz"},
    {"$": "int", "x": ""},
    {"$": "int", "x": 5},
    {"$": "float", "v": "1.5"},
    {"$": "complex", "v": [1]},
    {"$": "complex", "v": ["x", 1]},
    {"$": "decimal", "v": "1.2.3"},
    {"$": "decimal", "v": "__import__('os')"},
    {"$": "decimal", "v": "1" * 100_000 + "x"},
    {"$": "fraction", "v": [1, 0]},
    {"$": "fraction", "v": [1, -2]},
    {"$": "fraction", "v": [1.5, 2]},
    {"$": "datetime", "v": "yesterday"},
    {"$": "datetime", "v": "2024-01-01T00:00:00", "tz": None},
    {"$": "datetime", "v": "2024-01-01T00:00:00", "tz": {"utc": 86400 * 10**6}},
    {"$": "datetime", "v": "2024-01-01T00:00:00", "tz": {"utc": 0, "name": 5}},
    {"$": "datetime", "v": "2024-01-01T00:00:00", "fold": 2},
    {"$": "date", "v": "2024-02-30"},
    {"$": "time", "v": "25:00"},
    {"$": "timedelta", "v": [10**12, 0, 0]},
    {"$": "timedelta", "v": [1, 2]},
    {"$": "uuid", "v": "not-a-uuid"},
    {"$": "path", "k": "EvilPath", "v": "/"},
    {"$": "path", "k": "PosixPath", "v": 5},
    {"$": "opaque", "type": 1, "repr": "x"},
    {"$": "bytes"},
    {"$": "bytes", "b": 1},  # no such buffer
    {"$": "bytes", "b": -1},
    {"$": "bytes", "b": True},
    {"$": "bytes", "b64": "aGk="},  # base64 is for logs only, not the wire
    {"$": "npscalar", "dtype": "O", "v": 1},
    {"$": "npscalar", "dtype": "<i1", "v": 1000},
    {"$": "npscalar", "dtype": "<M8[ns]", "v": 5},
    {"$": "npscalar", "dtype": "<M8[ns]", "x": "00"},
    {"$": "npscalar", "dtype": "<f8", "v": "1e5"},
    {"$": "ndarray", "dtype": "<f8", "shape": [10**12], "b": 0},
    {"$": "ndarray", "dtype": "<f8", "shape": [-1], "b": 0},
    {"$": "ndarray", "dtype": "<f8", "shape": [2**62] * 3, "b": 0},
    {"$": "ndarray", "dtype": "<f8", "shape": [1] * 65, "b": 0},
    {"$": "ndarray", "dtype": "<f8", "shape": "big", "b": 0},
    {"$": "ndarray", "dtype": "O", "shape": [10**12], "v": [1]},
    {"$": "ndarray", "dtype": "O", "shape": [1], "b": 0},
    {"$": "ndarray", "dtype": "|O8", "shape": [1], "b": 0},
    {"$": "ndarray", "dtype": "object", "shape": [1], "b": 0},
    {"$": "ndarray", "dtype": "|V8", "shape": [1], "b": 0},
    {"$": "ndarray", "dtype": "f8,i4", "shape": [1], "b": 0},
    {"$": "ndarray", "dtype": "(2,)f8", "shape": [1], "b": 0},
    {"$": "ndarray", "dtype": "<U0", "shape": [10**12], "b": 0},
    {"$": "ndarray", "dtype": "<M8[lightyears]", "shape": [1], "b": 0},
    {"$": "ndarray", "dtype": "<f8", "shape": [1], "b": 0, "order": "Z"},
    {"$": "pd.RangeIndex", "v": [0, 10, 0], "name": None},
    {"$": "pd.RangeIndex", "v": [0, 2**70, 1], "name": None},
    {"$": "pd.Timestamp", "v": 2**70, "unit": "ns"},
    {"$": "pd.Timestamp", "v": 1, "unit": "fortnight"},
    {"$": "pd.Series"},
    {"$": "pd.DataFrame", "columns": {"$": "bytes", "b": 0}, "index": None, "data": []},
]


@pytest.mark.parametrize("tree", BAD_TREES, ids=lambda t: json.dumps(t)[:60])
def test_bad_trees(tree):
    with pytest.raises(CodecError):
        codec.loads(make_payload(tree, [b"\x00" * 8]))


def test_buffer_reused_or_unreferenced():
    with pytest.raises(CodecError, match="reused"):
        codec.loads(make_payload([{"$": "bytes", "b": 0}, {"$": "bytes", "b": 0}], [b"x" * 10]))
    with pytest.raises(CodecError, match="unreferenced"):
        codec.loads(make_payload([{"$": "bytes", "b": 0}, "long enough for two references"], [b"x", b"y"]))
    with pytest.raises(CodecError, match="more buffers than the header can reference"):
        codec.loads(make_payload([{"$": "bytes", "b": 0}], [b"x", b"y"]))


def test_deep_nesting_decode_fails_fast():
    n = 10**6
    for header in (b"[" * n + b"]" * n, b'{"a":' * n + b"1" + b"}" * n,
                   b'{"$":"tuple","v":[' * n + b"]}" * n):
        with pytest.raises(CodecError):
            codec.loads(make_payload(None, header=header))


def test_deep_nesting_encode_fails_fast():
    value: list = []
    for _ in range(10**6):
        value = [value]
    with pytest.raises(EncodeError, match="max_depth"):
        codec.encode(value)
    with pytest.raises(EncodeError, match="max_depth"):
        codec.encode(value, max_depth=10**6)  # the JSON layer's own limit, as a clean error
    tree = codec.to_jsonable(value)
    json.dumps(tree)


def test_depth_limit_is_the_same_on_both_sides():
    def nest(n):
        value: list = []
        for _ in range(n - 1):
            value = [value]
        return value

    assert rt(nest(100)) == nest(100)
    with pytest.raises(EncodeError):
        codec.encode(nest(101))
    with pytest.raises(CodecError, match="max_depth"):
        codec.loads(make_payload(codec.to_jsonable(nest(101), max_depth=200)))
    payload = codec.dumps(nest(10))
    assert codec.loads(payload, max_depth=10) == nest(10)
    with pytest.raises(CodecError, match="max_depth"):
        codec.loads(payload, max_depth=9)
    # Tagged values count as a level too (tuples here).
    value = ()
    for _ in range(99):
        value = (value,)
    assert rt(value) == value
    with pytest.raises(EncodeError):
        codec.encode(((value,),))


def test_max_items():
    payload = codec.dumps(list(range(1000)))
    assert codec.loads(payload, max_items=1001) == list(range(1000))
    with pytest.raises(CodecError, match="max_items"):
        codec.loads(payload, max_items=999)
    with pytest.raises(CodecError, match="max_items"):
        codec.loads(codec.dumps({str(i): [i] for i in range(100)}), max_items=150)
    assert codec.loads(payload, max_items=None) == list(range(1000))


def test_max_bytes():
    value = [b"x" * 1000, "y" * 100]
    payload = codec.dumps(value)
    assert codec.loads(payload, max_bytes=len(payload)) == value
    with pytest.raises(CodecError, match="max_bytes"):
        codec.loads(payload, max_bytes=len(payload) - 1)
    assert codec.encoded_size(codec.encode(value, max_bytes=len(payload))) == len(payload)
    with pytest.raises(EncodeError, match="max_bytes"):
        codec.encode(value, max_bytes=len(payload) - 1)
    with pytest.raises(EncodeError, match="max_bytes"):
        codec.encode([b"x" * 1000] * 1000, max_bytes=10_000)  # fails before the header is built


def test_hash_flooding_is_refused():
    p = 2**61 - 1  # int hash modulus: all of these hash to 0
    keys = [{"$": "int", "x": format(i * p, "x")} for i in range(1, 200)]
    with pytest.raises(CodecError, match="same hash"):
        codec.loads(make_payload({"$": "set", "v": keys}))
    with pytest.raises(CodecError, match="same hash"):
        codec.loads(make_payload({"$": "dict", "v": [[k, 1] for k in keys]}))
    assert len(rt(set(range(10_000)))) == 10_000


def test_huge_claims_fail_before_allocating():
    # A billion-row frame whose columns are tiny.
    tree = {"$": "ndarray", "dtype": "<f8", "shape": [10**9], "b": 0}
    with pytest.raises(CodecError, match="buffer length"):
        codec.loads(make_payload(tree, [b"\x00" * 8]))
    tree = {"$": "ndarray", "dtype": "|b1", "shape": [10**12, 0], "b": 0}
    value = codec.loads(make_payload(tree, [b""]))  # zero elements: fine, and cheap
    assert getattr(value, "shape", None) in (None, (10**12, 0))


def _json_trees():
    tags = st.sampled_from(sorted(codec_decode.DECODERS) + ["ndarray", "bytes", "?"])
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 2**65),
                        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
                        st.sampled_from(["<f8", "|b1", "<M8[ns]", "O", "UTC", "Europe/Paris", "C",
                                         "np", "cat", "masked", "str", "dttz", "Int64"]))
    keys = st.sampled_from(["$", "v", "b", "x", "k", "a", "m", "dtype", "shape", "data", "index", "columns",
                            "name", "tz", "utc", "zone", "levels", "codes", "names", "cats", "ordered", "unit"])

    def extend(inner):
        return st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(keys, inner, max_size=5),
            st.builds(lambda t, d: {**d, "$": t}, tags, st.dictionaries(keys, inner, max_size=5)),
        )

    return st.recursive(scalars, extend, max_leaves=25)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_json_trees(), st.lists(st.binary(max_size=24), max_size=3))
def test_fuzz_trees_only_raise_codec_error(tree, bufs):
    with contextlib.suppress(CodecError):
        codec.loads(make_payload(tree, bufs))


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_random_bytes_only_raise_codec_error(data):
    with pytest.raises(CodecError):
        codec.loads(data)
    with pytest.raises(CodecError):
        codec.loads(codec.MAGIC + data)


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_fuzz_mutated_payloads_only_raise_codec_error(data):
    value = [1, "two", (3.0, b"four" * 3), {5: {"six"}}, dt.datetime(2024, 1, 1, tzinfo=PARIS), 2**80]
    if np is not None:
        value.append(np.arange(6, dtype="<i2").reshape(2, 3))
    payload = bytearray(codec.dumps(value))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(payload) - 1))
        payload[i] = data.draw(st.integers(0, 255))
    with contextlib.suppress(CodecError):
        codec.loads(bytes(payload))


def test_decode_accepts_buffers_and_returns_independent_values():
    value = [b"abc" * 10, bytearray(b"xyz")]
    buf = bytearray(codec.dumps(value))
    back = codec.loads(buf)
    buf[:] = bytes(len(buf))
    assert back == value
    assert codec.loads(memoryview(codec.dumps(value))) == value
    with pytest.raises(CodecError):
        codec.loads("not bytes")  # type: ignore[arg-type]


def test_encode_returns_chunks_without_copying_big_buffers():
    blob = b"z" * 1_000_000
    chunks = codec.encode(["x", blob])
    assert chunks[1] is blob
    assert codec.encoded_size(chunks) == len(b"".join(chunks))


# --- exceptions --------------------------------------------------------------------------


def exc_rt(exc):
    """Through encode_exception, the wire, and decode_exception, as the transport does."""
    return codec.decode_exception(codec.loads(codec.dumps(codec.encode_exception(exc))))


@pytest.mark.parametrize(
    "exc",
    [
        KeyError("x"),
        KeyError(("a", 1)),
        KeyError(),
        ValueError("bad value", 42),
        TypeError("wrong"),
        TimeoutError(),
        RuntimeError("é \ud800"),
        ZeroDivisionError("division by zero"),
        FileNotFoundError(2, "No such file or directory", "missing.txt"),
        PermissionError(13, "Permission denied", "/a", None, "/b"),
        OSError("plain"),
        UnicodeDecodeError("utf-8", b"\xff\xfe", 0, 1, "invalid start byte"),
        StopIteration(5),
        UserWarning("careful"),
        NotImplementedError(),
        IndexError("list index out of range"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_builtin_exceptions_round_trip(exc):
    back = exc_rt(exc)
    assert type(back) is type(exc)
    assert str(back) == str(exc)
    assert same(back.args, exc.args)
    assert back.__traceback__ is None


def test_oserror_attributes_and_notes():
    exc = FileNotFoundError(2, "No such file or directory", "missing.txt")
    if hasattr(exc, "add_note"):  # Python 3.11+
        exc.add_note("while reading config")
    back = exc_rt(exc)
    assert back.errno == 2 and back.filename == "missing.txt"
    assert getattr(back, "__notes__", None) == getattr(exc, "__notes__", None)
    try:
        raise exc_rt(KeyError("x"))
    except KeyError as caught:
        assert str(caught) == "'x'"


class HTTPError(Exception):
    pass


def test_other_exceptions_arrive_as_tool_error():
    back = exc_rt(HTTPError("404 Not Found"))
    assert type(back) is ToolError
    assert back.type_name == f"{__name__}.HTTPError"
    assert back.message == "404 Not Found"
    assert str(back) == f"{__name__}.HTTPError: 404 Not Found"
    again = exc_rt(back)  # a ToolError sent on keeps its original type name
    assert type(again) is ToolError and again.type_name == back.type_name and again.message == back.message
    for exc in (SystemExit(1), KeyboardInterrupt(), GeneratorExit()):
        back = exc_rt(exc)
        assert type(back) is ToolError and back.type_name == type(exc).__name__


def test_builtin_exception_with_uncodable_args_keeps_its_type():
    back = exc_rt(ValueError(Weird()))
    assert type(back) is ValueError and repr(back.args[0]) == "Weird<42>"


def test_exception_with_failing_str():
    class Bad(Exception):
        def __str__(self):
            raise RuntimeError("nope")

    back = exc_rt(Bad())
    assert type(back) is ToolError and back.type_name.endswith("Bad")


@pytest.mark.parametrize(
    "data",
    [
        None, [], "KeyError", 5, {}, {"type": 5}, {"type": "KeyError", "message": None},
        {"type": "KeyError", "message": "m", "args": "zz"},
        {"type": "KeyError", "message": "m", "args": {"$": "tuple", "v": [{"$": "bogus"}]}},
        {"type": "UnicodeDecodeError", "message": "m", "args": {"$": "tuple", "v": []}},
        {"type": "SystemExit", "message": "bye", "args": {"$": "tuple", "v": [0]}},
        {"type": "KeyboardInterrupt", "message": "", "args": {"$": "tuple", "v": []}},
        {"type": "ExceptionGroup", "message": "g", "args": {"$": "tuple", "v": ["g", [1]]}},
        {"type": "__import__", "message": "os", "args": {"$": "tuple", "v": ["os"]}},
        {"type": "x" * 10**6, "message": "y" * 10**6},
        {"type": "OSError", "message": "m", "args": {"$": "tuple", "v": [2, "x"]}, "filename": {"$": "?"}},
        {"type": "KeyError", "message": "m", "notes": [1, "ok", None]},
        {"type": "KeyError", "message": "m", "args": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]},
    ],
)
def test_decode_exception_never_raises(data):
    back = codec.decode_exception(data)
    assert isinstance(back, Exception)
    assert not isinstance(back, (SystemExit, KeyboardInterrupt, GeneratorExit))
    str(back)


def test_decode_exception_hostile_deep_args():
    args = "x"
    for _ in range(10**5):
        args = [args]
    back = codec.decode_exception({"type": "ValueError", "message": "m", "args": args})
    assert isinstance(back, Exception)


# --- to_jsonable -------------------------------------------------------------------------


def test_to_jsonable_never_raises():
    cyclic: list = [1]
    cyclic.append(cyclic)
    d: dict = {"a": 1}
    d["self"] = d
    a: list = []
    b = {"a": a}
    a.append(b)

    class BadItems(dict):
        def items(self):
            raise RuntimeError("no items")

    class BadIter(list):
        def __iter__(self):
            raise RuntimeError("no iter")

    class BadDump:
        def model_dump(self):
            raise RuntimeError("no dump")

    class BadType(type):
        def __getattribute__(cls, name):
            if name in ("__qualname__", "__module__", "__name__"):
                raise RuntimeError("no name")
            return super().__getattribute__(name)

    class Nameless(metaclass=BadType):
        pass

    deep: list = []
    for _ in range(10**5):
        deep = [deep]
    values = [cyclic, d, a, BadRepr(), BadItems(x=1), BadIter([1]), BadDump(), Nameless(), deep,
              b"x" * 10**6, memoryview(b"abc"), float("nan"), 10**10000, {(1, 2): {1, 2}}, Weird]
    for value in values + [values]:
        tree = codec.to_jsonable(value)
        json.dumps(tree, allow_nan=False)
        codec.from_jsonable(tree)


def test_to_jsonable_cycles_are_marked():
    cyclic: list = [1]
    cyclic.append(cyclic)
    back = codec.from_jsonable(codec.to_jsonable(cyclic))
    assert back[0] == 1 and type(back[1]) is Opaque and repr(back[1]) == "[...]"


def test_to_jsonable_inlines_small_buffers_and_summarises_big_ones():
    tree = codec.to_jsonable([b"small", b"x" * 100_000], inline_bytes=1000)
    assert tree[0]["b64"] == "c21hbGw="
    assert tree[1]["$"] == "opaque" and tree[1]["size"] == 100_000 and tree[1]["type"] == "bytes"
    back = codec.from_jsonable(tree)
    assert back[0] == b"small"
    assert type(back[1]) is Opaque and "100000 bytes" in repr(back[1])
    assert len(json.dumps(tree)) < 1000


def test_to_jsonable_is_the_wire_tree():
    value = {"a": (1, 2), "b": {3}, 4: dt.date(2024, 1, 1)}
    tree = codec.to_jsonable(value)
    assert codec.loads(make_payload(tree)) == value
    assert codec.from_jsonable(json.loads(json.dumps(tree))) == value


def test_from_jsonable_rebuilds_what_it_can():
    tree = [1, {"$": "bogus"}, {"$": "datetime", "v": "nope"}, {"$": "tuple", "v": [2]}]
    back = codec.from_jsonable(tree)
    assert back[0] == 1 and back[3] == (2,)
    assert type(back[1]) is Opaque and type(back[2]) is Opaque and back[2].type_name == "datetime.datetime"


# --- numpy -----------------------------------------------------------------------------------


def np_same(a, b) -> bool:
    if type(a) is not type(b) or a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "O":
        return same(a.tolist(), b.tolist())
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fcMm"))


def numpy_arrays():
    return [
        np.arange(12, dtype=np.float64).reshape(3, 4),
        np.asfortranarray(np.arange(24, dtype=np.int16).reshape(2, 3, 4)),
        np.arange(20)[::3],  # not contiguous
        np.arange(20).reshape(4, 5)[:, 1:3],
        np.array(5.0),
        np.zeros((0, 3)),
        np.zeros((3, 0, 2), dtype=np.uint8),
        np.array([True, False]),
        np.array([1, 2], dtype=">i4"),
        np.array([1.5, np.nan, -0.0, np.inf], dtype=np.float32),
        np.array([1, 2], dtype=np.float16),
        np.array([1.1], dtype=np.longdouble),
        np.array([1 + 2j, np.nan], dtype=np.complex64),
        np.array([2**64 - 1], dtype=np.uint64),
        np.array(["a", "bcd", ""]),
        np.array(["\U0001f600x"]),
        np.array([b"x", b"yz\x00"]),
        np.array(["2024-01-01", "NaT"], dtype="M8[ns]"),
        np.array(["2024-01-01"], dtype="M8[D]"),
        np.array(["2024-01"], dtype="M8[M]"),
        np.array([1, 2], dtype="m8[25s]"),
        np.array([1, "x", None, [1, 2], {"a": (1,)}], dtype=object),
        np.array([[1, "x"], [None, 2.5]], dtype=object),
    ]


@needs_numpy
@pytest.mark.parametrize("arr", numpy_arrays() if np is not None else [], ids=lambda a: f"{a.dtype}{a.shape}")
def test_numpy_arrays(arr):
    back = rt(arr)
    assert np_same(arr, back), (arr, back)
    assert back.flags.writeable and back.flags.owndata or back.base is not None
    if arr.flags.f_contiguous and not arr.flags.c_contiguous:
        assert back.flags.f_contiguous


@needs_numpy
def test_numpy_object_array_holding_arrays():
    arr = np.empty(2, dtype=object)
    arr[0] = np.arange(3)
    arr[1] = [1, 2]
    back = rt(arr)
    assert back.dtype == object and np_same(back[0], arr[0]) and back[1] == [1, 2]


@needs_numpy
def test_numpy_arrays_travel_as_raw_buffers():
    arr = np.arange(1_000_000, dtype=np.float64)
    chunks = codec.encode(arr)
    assert len(chunks) == 2 and len(chunks[0]) < 200
    assert np.shares_memory(np.frombuffer(chunks[1], dtype=np.uint8), arr)  # no copy
    assert codec.encoded_size(chunks) < arr.nbytes + 200
    back = codec.loads(b"".join(chunks))
    assert np_same(arr, back) and not np.shares_memory(arr, back)


@needs_numpy
@pytest.mark.parametrize(
    "scalar",
    (lambda: [np.float64(1.5), np.float64("nan"), np.float32(-0.0), np.float16(0.1), np.longdouble("1.1"),
              np.int8(-5), np.int32(3), np.int64(-(2**63)), np.uint64(2**64 - 1), np.bool_(True), np.bool_(False),
              np.complex64(1 + 2j), np.complex128(complex("nan+1j")), np.datetime64("2024-01-01T00:00:00.123456789"),
              np.datetime64("NaT", "ns"), np.datetime64("2024-01-01", "D"), np.timedelta64(5, "h"), np.str_("ab\ud800"),
              np.bytes_(b"ab")] if np is not None else [])(),
    ids=lambda s: f"{type(s).__name__}:{s!r}",
)
def test_numpy_scalars(scalar):
    back = rt(scalar)
    assert type(back) is type(scalar)
    assert back == scalar or (scalar != scalar and back != back)


@needs_numpy
def test_numpy_float64_is_not_a_float():
    assert type(rt([np.float64(1.0), 1.0])[0]) is np.float64
    assert type(rt(np.str_("x"))) is np.str_


@needs_numpy
def test_numpy_structured_and_subclasses_are_opaque():
    structured = np.zeros(2, dtype=[("a", "i4"), ("b", "f8")])
    assert type(rt(structured)) is Opaque
    assert type(rt(np.ma.masked_array([1, 2], mask=[0, 1]))) is Opaque


@needs_numpy
@settings(max_examples=150, deadline=None)
@given(st.data())
def test_property_numpy_arrays(data):
    from hypothesis.extra import numpy as hnp

    dtype = data.draw(st.one_of(hnp.boolean_dtypes(), hnp.integer_dtypes(endianness="="), hnp.unsigned_integer_dtypes(),
                                hnp.floating_dtypes(endianness="?"), hnp.complex_number_dtypes(),
                                hnp.datetime64_dtypes(), hnp.timedelta64_dtypes(), hnp.byte_string_dtypes(),
                                hnp.unicode_string_dtypes()))
    arr = data.draw(hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)))
    if data.draw(st.booleans()) and arr.ndim > 1:
        arr = np.asfortranarray(arr)
    back = rt(arr)
    assert back.dtype == arr.dtype and back.shape == arr.shape
    assert arr.tobytes() == back.tobytes()  # bit-exact, nan payloads included


@needs_numpy
@pytest.mark.parametrize(
    "tree",
    [
        {"$": "ndarray", "dtype": "<f8", "shape": [3], "b": 0},  # 8 bytes for 3 floats
        {"$": "ndarray", "dtype": "<f8", "shape": [2, 2], "b": 0},
        {"$": "ndarray", "dtype": "|O", "shape": [1], "b": 0},
        {"$": "ndarray", "dtype": "<f8", "shape": [1, 2], "b": 0, "order": "F"},
        {"$": "npscalar", "dtype": "<u1", "v": -1},
    ],
)
def test_numpy_bad_claims(tree):
    with pytest.raises(CodecError):
        codec.loads(make_payload(tree, [b"\x00" * 8]))


# --- pandas ----------------------------------------------------------------------------------


def frame_same(a, b):
    assert type(a) is type(b)
    assert a.equals(b)
    assert (a.dtypes == b.dtypes).all()
    assert a.index.equals(b.index) and list(a.index.names) == list(b.index.names)
    assert a.index.dtype == b.index.dtype
    assert a.columns.equals(b.columns) and list(a.columns) == list(b.columns)
    assert a.columns.dtype == b.columns.dtype and list(a.columns.names) == list(b.columns.names)
    pd.testing.assert_frame_equal(a, b)


def big_frame():
    n = 6
    return pd.DataFrame(
        {
            "f": np.arange(n, dtype=float),
            "i": np.arange(n, dtype=np.int32),
            "u8": np.arange(n, dtype=np.uint8),
            "b": [True, False] * 3,
            "s": list("abcdef"),
            3: pd.array([1, None, 3, 4, 5, 6], dtype="Int64"),
            ("t", "u"): pd.Categorical(list("aabbca"), categories=list("cba"), ordered=True),
            "dt": pd.date_range("2024-01-01", periods=n, freq="h"),
            "dtns": pd.to_datetime(np.arange(n) * 1_000_000_007, unit="ns"),
            "tz": pd.date_range("2024-03-30 12:00", periods=n, freq="12h", tz="Europe/Paris"),
            "utc": pd.date_range("2024-01-01", periods=n, tz="UTC"),
            "fixed": pd.date_range("2024-01-01", periods=n, tz=dt.timezone(dt.timedelta(hours=-3))),
            "td": pd.to_timedelta(np.arange(n), unit="s"),
            "bool?": pd.array([True, None, False, True, True, None], dtype="boolean"),
            "str?": pd.array(["a", None, "c", "d", "\ud800", ""], dtype="string"),
            "F64": pd.array([1.5, None, 2, 3, 4, 5], dtype="Float64"),
            "U16": pd.array([1, 2, None, 4, 5, 6], dtype="UInt16"),
            "obj": pd.Series([1, "x", None, 2.5, (1, 2), b"b"], dtype=object),
            "objstr": pd.Series(list("uvwxyz"), dtype=object),
            "c": np.arange(n) + 1j,
            "nan": [np.nan, 1.0, -0.0, np.inf, 2.0, 3.0],
        }
    )


@needs_pandas
def test_pandas_dataframe_all_column_kinds():
    df = big_frame()
    frame_same(df, rt(df))


@needs_pandas
@pytest.mark.parametrize(
    "make",
    [
        lambda: pd.DataFrame(),
        lambda: pd.DataFrame(index=pd.Index([1, 2], name="only index")),
        lambda: pd.DataFrame({"a": []}),
        lambda: pd.DataFrame(np.zeros((3, 2)), columns=["a", "a"]),  # duplicate columns
        lambda: pd.DataFrame({"a": [1, 2, 3]}, index=pd.Index(["x", "x", "y"], name="dup")),
        lambda: pd.DataFrame({0: [1.0], 1: [2.0]}),  # int column names
        lambda: pd.DataFrame({("a", 1): [1], ("b", 2): [2]}),  # tuple column names
        lambda: pd.DataFrame(np.arange(8.0).reshape(4, 2),
                             index=pd.MultiIndex.from_tuples([(1, "a"), (1, "b"), (2, "a"), (2, None)],
                                                             names=["n", "l"]),
                             columns=pd.MultiIndex.from_tuples([("x", 1), ("y", 2)], names=["top", None])),
        lambda: pd.DataFrame({"v": [1, 2, 3]},
                             index=pd.date_range("2024-01-01", periods=3, freq="D", tz="Asia/Tokyo", name="t")),
        lambda: pd.DataFrame({"v": [1, 2]}, index=pd.CategoricalIndex(["a", "b"], name="cat")),
        lambda: pd.DataFrame({"v": [1, 2]}, index=pd.RangeIndex(10, 30, 10, name="r")),
        lambda: pd.DataFrame({"v": [1, 2]}, index=pd.Index([1.5, 2.5])),
        lambda: pd.DataFrame({"v": [1, 2]}, index=pd.Index([1, None], dtype="Int64")),
        lambda: pd.DataFrame({"v": [1, 2]}, index=pd.to_timedelta([1, 2], unit="D")),
        lambda: pd.DataFrame({"v": [1, 2]}, index=pd.Index([(1, 2), "x"], dtype=object)),
        lambda: pd.DataFrame({"a": np.arange(5.0)}).iloc[::2],  # non-contiguous, gappy index
    ],
)
def test_pandas_dataframe_shapes_and_indexes(make):
    df = make()
    frame_same(df, rt(df))


@needs_pandas
def test_pandas_datetime_index_keeps_freq():
    idx = pd.date_range("2024-01-01", periods=4, freq="D", tz="UTC", name="t")
    back = rt(idx)
    assert back.equals(idx) and back.freq == idx.freq and back.name == "t" and back.dtype == idx.dtype


@needs_pandas
@pytest.mark.parametrize(
    "make",
    [
        lambda: pd.Series([1, 2, 3], index=["x", "y", "z"], name=("a", 1)),
        lambda: pd.Series([1.0, None], dtype="Float64", name=3),
        lambda: pd.Series(pd.Categorical(["a", None, "b"])),
        lambda: pd.Series(pd.date_range("2024", periods=3, tz="America/New_York")),
        lambda: pd.Series([], dtype="string"),
        lambda: pd.Series(["x", None], dtype=object),
    ],
)
def test_pandas_series(make):
    s = make()
    back = rt(s)
    assert type(back) is pd.Series
    pd.testing.assert_series_equal(s, back)
    assert back.dtype == s.dtype and back.name == s.name and back.index.equals(s.index)


@needs_pandas
@pytest.mark.parametrize(
    "make",
    [
        lambda: pd.Index([1, 2, 3], name="n"),
        lambda: pd.Index(["a", "b"]),
        lambda: pd.RangeIndex(3, 100, 7, name="r"),
        lambda: pd.MultiIndex.from_product([[1, 2], ["a", "b"]], names=["x", "y"]),
        lambda: pd.DatetimeIndex(["2024-01-01", None], tz="Europe/Paris"),
        lambda: pd.CategoricalIndex(["a", "b", "a"]),
        lambda: pd.Index([True, False]),
    ],
)
def test_pandas_indexes(make):
    idx = make()
    back = rt(idx)
    assert type(back) is type(idx)
    pd.testing.assert_index_equal(idx, back, exact=True)


@needs_pandas
@pytest.mark.parametrize(
    "make",
    [
        lambda: pd.Timestamp("2024-01-01 00:00:00.000000001"),
        lambda: pd.Timestamp("2024-03-31 03:30", tz="Europe/Paris"),
        lambda: pd.Timestamp("2024-01-01", tz="UTC"),
        lambda: pd.Timestamp("2024-01-01").as_unit("s") if hasattr(pd.Timestamp, "as_unit") else pd.Timestamp(0),
        lambda: pd.Timedelta(1, unit="ns"),
        lambda: pd.Timedelta(days=-3),
        lambda: pd.NaT,
        lambda: pd.NA,
    ],
)
def test_pandas_scalars(make):
    v = make()
    back = rt(v)
    assert type(back) is type(v)
    assert back is v or (back == v and repr(back) == repr(v))


@needs_pandas
def test_pandas_categorical():
    cat = pd.Categorical(["a", "b", None], categories=["b", "a"], ordered=True)
    back = rt(cat)
    assert type(back) is pd.Categorical
    pd.testing.assert_extension_array_equal(cat, back)


@needs_pandas
def test_pandas_other_extension_dtypes_arrive_as_object():
    df = pd.DataFrame({"p": pd.period_range("2024-01", periods=2, freq="M")})
    back = rt(df)
    assert back["p"].dtype == object and len(back) == 2


@needs_pandas
def test_pandas_numeric_columns_are_raw_buffers():
    df = pd.DataFrame({"a": np.arange(100_000.0), "b": np.arange(100_000)})
    chunks = codec.encode(df)
    assert codec.encoded_size(chunks) < 1_600_000 + 1000
    frame_same(df, codec.loads(b"".join(chunks)))


@needs_pandas
@pytest.mark.parametrize(
    "tree",
    [
        {"$": "pd.Series", "data": {"k": "np", "a": {"$": "ndarray", "dtype": "<i8", "shape": [1], "b": 0}},
         "index": {"$": "pd.RangeIndex", "v": [0, 10**12, 1], "name": None}, "name": None},
        {"$": "pd.Series", "data": {"k": "np", "a": {"$": "ndarray", "dtype": "<i8", "shape": [1], "b": 0}},
         "index": {"$": "bytes", "b": 0}, "name": None},
        {"$": "pd.Series", "data": {"k": "np", "a": {"$": "ndarray", "dtype": "<i8", "shape": [1], "b": 0}},
         "index": {"$": "pd.RangeIndex", "v": [0, 1, 1], "name": [1]}, "name": None},  # unhashable name
        {"$": "pd.Categorical", "k": "cat", "codes": {"$": "ndarray", "dtype": "|i1", "shape": [8], "b": 0},
         "cats": {"$": "pd.Index", "data": {"k": "str", "storage": "python", "na": "NA", "v": ["a"]}, "name": None},
         "ordered": False},  # code 5 with a single category
        {"$": "pd.Categorical", "k": "cat", "codes": {"$": "ndarray", "dtype": "<f8", "shape": [1], "b": 0},
         "cats": {"$": "pd.RangeIndex", "v": [0, 1, 1], "name": None}, "ordered": False},
        {"$": "pd.Index", "data": {"k": "masked", "dtype": "Int64",
                                   "a": {"$": "ndarray", "dtype": "<f8", "shape": [1], "b": 0},
                                   "m": {"$": "ndarray", "dtype": "|b1", "shape": [0], "b": 1}}, "name": None},
        {"$": "pd.Index", "data": {"k": "str", "storage": "evil", "na": "NA", "v": ["a"]}, "name": None},
        {"$": "pd.Index", "data": {"k": "str", "storage": "python", "na": "NA", "v": [1]}, "name": None},
        {"$": "pd.Index", "data": {"k": "dttz", "a": {"$": "ndarray", "dtype": "<i8", "shape": [1], "b": 0},
                                   "tz": {"utc": 0}}, "name": None},
        {"$": "pd.Index", "data": {"k": "evil"}, "name": None},
        {"$": "pd.MultiIndex", "levels": [], "names": [None],
         "codes": [{"$": "ndarray", "dtype": "<i8", "shape": [1], "b": 0}]},
        {"$": "pd.MultiIndex", "levels": [{"$": "pd.RangeIndex", "v": [0, 1, 1], "name": None}], "names": [None],
         "codes": [{"$": "ndarray", "dtype": "<i8", "shape": [1], "b": 0}]},  # code 5 of a 1-level
        {"$": "pd.DataFrame", "columns": {"$": "pd.RangeIndex", "v": [0, 2, 1], "name": None},
         "index": {"$": "pd.RangeIndex", "v": [0, 1, 1], "name": None},
         "data": [{"k": "np", "a": {"$": "ndarray", "dtype": "<i8", "shape": [1], "b": 0}}]},
        {"$": "pd.Index", "data": {"k": "np", "a": {"$": "ndarray", "dtype": "<i8", "shape": [1], "b": 0}},
         "name": None, "freq": "D; import os"},
    ],
)
def test_pandas_bad_claims(tree):
    # Buffer 0 holds 5 as one int64 (or eight int8 codes 5, 0, ...); buffer 1 is empty.
    bufs = [b"\x05" + b"\x00" * 7, b""][: max(1, json.dumps(tree).count('"b":'))]
    with pytest.raises(CodecError):
        codec.loads(make_payload(tree, bufs))


@needs_pandas
def test_pandas_multiindex_codes_are_checked():
    mi = pd.MultiIndex.from_tuples([(1, "a"), (2, "b")])
    tree = codec.to_jsonable(mi)
    tree["codes"][0] = {"$": "ndarray", "dtype": "<i8", "shape": [2], "b": 0}
    with pytest.raises(CodecError):
        codec.loads(make_payload(tree, [struct.pack("<2q", 0, 7)]))


@needs_pandas
def test_pandas_to_jsonable_summarises_big_frames():
    df = pd.DataFrame({"a": np.arange(100_000.0)})
    tree = codec.to_jsonable(df, inline_bytes=1000)
    assert tree["$"] == "opaque" and tree["size"] == 800_000 and "100000 rows" in tree["repr"]
    small = pd.DataFrame({"a": [1.0, 2.0], "b": ["x", "y"]})
    frame_same(small, codec.from_jsonable(json.loads(json.dumps(codec.to_jsonable(small)))))


# --- without numpy and pandas ------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import json, sys
    for name in BLOCK:
        sys.modules[name] = None
    sys.path.insert(0, RUNTIME)
    import sandbox_codec as codec
    import datetime as dt, decimal, uuid
    assert all(sys.modules.get(name) is None for name in BLOCK)
    value = [1, 2**100, -0.0, "\\ud800", b"x", (1, {2, 3}), {(1, 2): dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)},
             decimal.Decimal("-0.00"), uuid.UUID(int=5), frozenset({1})]
    back = codec.loads(codec.dumps(value))
    assert repr(back) == repr(value), (back, value)
    assert codec.to_jsonable(value) and codec.from_jsonable(codec.to_jsonable(value)) == value
    payloads = json.load(sys.stdin)
    out = [repr(codec.loads(bytes.fromhex(p))) for p in payloads]
    assert all(sys.modules.get(name) is None for name in BLOCK)
    print(json.dumps(out))
    """
)


def run_child(block, payloads):
    code = CHILD.replace("BLOCK", repr(block)).replace("RUNTIME", repr(str(RUNTIME_DIR)))
    proc = subprocess.run([sys.executable, "-c", code], input=json.dumps([p.hex() for p in payloads]),
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ""})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_imports_and_works_without_numpy_and_pandas():
    assert run_child(["numpy", "pandas"], []) == []


def test_import_does_not_load_numpy():
    code = (f"import sys; sys.path.insert(0, {str(RUNTIME_DIR)!r}); import sandbox_codec as c; "
            "c.loads(c.dumps([1, b'x', (2,)])); print('numpy' in sys.modules, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stderr


def fallback_cases():
    """(value encoded with numpy/pandas, what arrives without them)."""
    utc = dt.timezone.utc
    cases = [
        (np.arange(6).reshape(2, 3), [[0, 1, 2], [3, 4, 5]]),
        (np.asfortranarray(np.arange(6, dtype=">i2").reshape(2, 3)), [[0, 1, 2], [3, 4, 5]]),
        (np.array(7.5), 7.5),
        (np.zeros((2, 0)), [[], []]),
        (np.array([True, False]), [True, False]),
        (np.array([1.5, np.inf], dtype=np.float32), [1.5, math.inf]),
        (np.array([0.5], dtype=np.float16), [0.5]),
        (np.array([1 + 2j], dtype=np.complex64), [1 + 2j]),
        (np.array([2**64 - 1], dtype=np.uint64), [2**64 - 1]),
        (np.array(["ab", "c"]), ["ab", "c"]),
        (np.array([b"ab", b"c\x00"]), [b"ab", b"c"]),
        (np.array(["2024-01-01T01:02:03.000004", "NaT"], dtype="M8[us]"),
         [dt.datetime(2024, 1, 1, 1, 2, 3, 4), None]),
        (np.array(["2024-01-01T00:00:00.000000001"], dtype="M8[ns]"), [1704067200000000001]),
        (np.array(["2024-03-04"], dtype="M8[D]"), [dt.date(2024, 3, 4)]),
        (np.array(["2024-03"], dtype="M8[M]"), [dt.date(2024, 3, 1)]),
        (np.array([90], dtype="m8[s]"), [dt.timedelta(seconds=90)]),
        (np.array([3], dtype="m8[ns]"), [3]),
        (np.array([1, "x", None], dtype=object), [1, "x", None]),
        (np.float64(1.5), 1.5),
        (np.int32(-3), -3),
        (np.bool_(True), True),
        (np.str_("s"), "s"),
        (np.bytes_(b"b"), b"b"),
        (np.complex128(1j), 1j),
        (np.datetime64("2024-01-01", "D"), dt.date(2024, 1, 1)),
        (np.datetime64("2024-01-01T00:00:00", "s"), dt.datetime(2024, 1, 1)),
        (np.timedelta64(5, "h"), dt.timedelta(hours=5)),
        (np.array([1.1], dtype=np.longdouble),
         Opaque("numpy.ndarray", "<numpy.ndarray dtype=<f16 shape=(1,): needs numpy>")),
    ]
    if pd is not None:
        paris = zoneinfo.ZoneInfo("Europe/Paris")
        cases += [
            (pd.DataFrame({"a": [1, 2], "b": ["x", None], 3: pd.array([1, None], dtype="Int64")}),
             {"a": [1, 2], "b": ["x", None], 3: [1, None]}),
            (pd.DataFrame({"c": pd.Categorical(["u", None, "v"]),
                           "t": pd.date_range("2024-01-01", periods=3, tz=paris)}),
             {"c": ["u", None, "v"], "t": [dt.datetime(2024, 1, d, tzinfo=paris) for d in (1, 2, 3)]}),
            (pd.Series([1.5, 2.5], index=["a", "b"]), [1.5, 2.5]),
            (pd.Series(pd.to_datetime(["2024-01-01 00:00:00.000001001", None]), dtype="M8[ns]"),
             [dt.datetime(2024, 1, 1, 0, 0, 0, 1), None]),
            (pd.Series(pd.to_timedelta([1001, None], unit="ns")), [dt.timedelta(microseconds=1), None]),
            (pd.Index(["a", "b"]), ["a", "b"]),
            (pd.RangeIndex(0, 6, 2), [0, 2, 4]),
            (pd.MultiIndex.from_tuples([(1, "a"), (2, "b")]), [(1, "a"), (2, "b")]),
            (pd.Categorical(["a", "b", "a"]), ["a", "b", "a"]),
            (pd.Timestamp("2024-01-01 00:00:00.000001", tz=paris), dt.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=paris)),
            (pd.Timestamp("2024-01-01 00:00:00.000001", tz=utc).tz_convert(dt.timezone(dt.timedelta(hours=1))),
             dt.datetime(2024, 1, 1, 1, 0, 0, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))),
            (pd.Timestamp("2024-01-01 00:00:00.000001001"), dt.datetime(2024, 1, 1, 0, 0, 0, 1)),
            (pd.Timedelta("1 day"), dt.timedelta(days=1)),
            (pd.NaT, None),
            (pd.NA, None),
        ]
    return cases


@needs_numpy
def test_decoding_numpy_and_pandas_payloads_without_them():
    cases = fallback_cases()
    got = run_child(["numpy", "pandas"], [codec.dumps(v) for v, _ in cases])
    for (value, expected), text in zip(cases, got, strict=True):
        assert text == repr(expected), (value, text)
    # Consistent with numpy's own tolist() where that applies.
    for value, expected in cases:
        if type(value) is np.ndarray and value.dtype != np.longdouble:
            assert repr(value.tolist()) == repr(expected)


@needs_pandas
def test_decoding_pandas_payloads_without_pandas_but_with_numpy():
    cases = [(v, e) for v, e in fallback_cases()
             if type(type(v)).__module__ != "numpy" and "pandas" in type(v).__module__]
    got = run_child(["pandas"], [codec.dumps(v) for v, _ in cases])
    for (value, expected), text in zip(cases, got, strict=True):
        assert text == repr(expected), (value, text)


def test_bare_description_of_a_builtin_exception():
    back = codec.decode_exception({"type": "ValueError", "message": "bad"})
    assert type(back) is ValueError and str(back) == "bad"
    back = codec.decode_exception({"type": "SystemExit", "message": "bye"})
    assert type(back) is ToolError and str(back) == "SystemExit: bye"


@needs_pandas
def test_pandas_subclass_from_another_package_travels_as_the_base():
    class MyFrame(pd.DataFrame):
        pass

    MyFrame.__module__ = "otherpkg.frames"
    df = MyFrame({"a": [1, 2]})
    back = rt(df)
    assert type(back) is pd.DataFrame and back.equals(pd.DataFrame({"a": [1, 2]}))


@needs_pandas
def test_pandas_to_jsonable_summarises_big_text_columns():
    df = pd.DataFrame({"s": pd.array(["some text"] * 10_000, dtype="string")})
    tree = codec.to_jsonable(df, inline_bytes=1000)
    assert tree["$"] == "opaque" and tree["size"] == 90_000
    assert type(codec.from_jsonable(tree)) is Opaque


@needs_numpy
def test_old_pandas_gets_nanosecond_datetimes():
    import types

    old = types.SimpleNamespace(__version__="1.5.3")
    arr = np.array(["2024-01-01T00:00:00.000001", "NaT"], dtype="M8[us]")
    ns = codec_decode.pd_nanoseconds(old, arr)
    assert ns.dtype == np.dtype("M8[ns]") and np.array_equal(ns, arr, equal_nan=True)
    with pytest.raises(CodecError, match="range"):
        codec_decode.pd_nanoseconds(old, np.array(["3000-01-01"], dtype="M8[us]"))
    assert codec_decode.pd_nanoseconds(types.SimpleNamespace(__version__="2.2.3"), arr) is arr


# --- bounds on what the decoder builds (security issue 18) ---------------------------------------------------------
#
# The host decodes what hostile code sends. Each test decodes a hand-made hostile node and expects a CodecError
# without the expensive step ever running (a generous wall-clock bound only says "did not hang"), and checks that the
# largest legitimate value still round-trips.


def hex_int(n: int) -> dict:
    return {"$": "int", "x": format(n, "x")}


def test_fraction_parts_are_bounded_before_gcd_runs():
    big = 2 ** (6 * 2**20) - 12345  # two 6-Mbit parts: gcd() held the GIL for 29 s
    started = time.monotonic()
    with pytest.raises(CodecError, match="bits"):
        codec.loads(make_payload({"$": "fraction", "v": [hex_int(big), hex_int(big - 2)]}))
    limit = codec.MAX_FRACTION_BITS
    over = 2**limit + 1  # an int the codec accepts alone, too big as a Fraction part
    for parts in ([hex_int(over), 3], [3, hex_int(over)]):
        with pytest.raises(CodecError, match="Fraction"):
            codec.loads(make_payload({"$": "fraction", "v": parts}))
    assert time.monotonic() - started < 10  # did not run gcd on megabit ints
    largest = fractions.Fraction(2**limit - 1, 2**limit - 3)
    back = rt(largest)
    assert type(back) is fractions.Fraction and back == largest  # (too many digits for repr())
    assert rt(over) == over
    with pytest.raises(EncodeError, match="Fraction"):  # the sender hears it first
        codec.encode(fractions.Fraction(over, 3))


def test_ints_are_bounded():
    limit = codec.MAX_INT_BITS
    assert rt(2**limit - 1) == 2**limit - 1 and rt(-(2**limit) + 1) == -(2**limit) + 1
    for x in (format(2**limit, "x"), "0" * (limit // 4 + 2) + "1", "-" + format(2**limit, "x")):
        with pytest.raises(CodecError, match="bits"):
            codec.loads(make_payload({"$": "int", "x": x}))
    with pytest.raises(CodecError):
        codec.loads(make_payload({"$": "int", "x": "f" * 2**26}))  # the old 64-Mbit bound
    with pytest.raises(EncodeError, match="bits"):
        codec.encode([1, 2**limit])
    assert codec.to_jsonable(2**limit)["$"] == "int"  # logs keep it; they are not decoded on the host


def test_decimals_are_bounded():
    digits, exponent = codec.MAX_DECIMAL_DIGITS, codec.MAX_DECIMAL_EXPONENT
    for ok in (f"1E+{exponent}", f"-1E-{exponent}", "9" * digits, "0." + "1" * (digits - 1), "sNaN" + "9" * 100):
        value = decimal.Decimal(ok)
        assert same(rt(value), value)
    started = time.monotonic()
    for bad in ("1e999999999", "1E+999999", f"1E+{exponent + 1}", f"1E-{exponent + 1}", "9" * (digits + 1),
                "1" * 10**6, "NaN" + "1" * (digits + 1), "1e" + "9" * 100):
        with pytest.raises(CodecError, match="Decimal"):
            codec.loads(make_payload({"$": "decimal", "v": bad}))
    assert time.monotonic() - started < 10
    with pytest.raises(EncodeError, match="Decimal"):
        codec.encode(decimal.Decimal("1E+999999"))


class OpenWatch:
    """Files opened in this process whose path contains a marker (audit hooks cannot be removed: one for all)."""

    seen: list = []
    markers: set = set()
    installed = False

    @classmethod
    def watch(cls, marker: str) -> list:
        if not cls.installed:
            def hook(event, args):
                if event == "open" and cls.markers and any(m in str(args[0]) for m in cls.markers):
                    cls.seen.append(str(args[0]))
            sys.addaudithook(hook)
            cls.installed = True
        cls.markers.add(marker)
        return cls.seen


def zone_attacks(target: str) -> list:
    """Nodes that name ``target`` (a host path) as a time zone, in every place a zone key is read."""
    tz = {"zone": f"dateutil/{target}", "lib": "pytz", "utc": 3_600_000_000, "name": "X"}
    plain = {"zone": f"dateutil/{target}", "utc": 3_600_000_000}
    others = [{"zone": target, "utc": 0}, {"zone": "../../../.." + target, "utc": 0}, {"zone": "localtime", "utc": 0}]
    nodes = [
        {"$": "datetime", "v": "2024-01-01T00:00:00", "tz": tz},
        {"$": "time", "v": "12:00:00", "tz": plain},
        {"$": "pd.Timestamp", "v": 0, "unit": "ns", "tz": tz},
        {"$": "pd.Timestamp", "v": 0, "unit": "ns", "tz": plain},
        *({"$": "datetime", "v": "2024-01-01T00:00:00", "tz": t} for t in others),
    ]
    if np is not None:
        column = {"k": "dttz", "a": {"$": "ndarray", "dtype": "<M8[ns]", "shape": [1], "b": 0}, "tz": tz}
        nodes.append({"$": "pd.Series", "data": column, "name": None,
                      "index": {"$": "pd.RangeIndex", "v": [0, 1, 1], "name": None}})
    return nodes


def test_zone_keys_never_open_host_files(tmp_path):
    target = tmp_path / "secret-zone-file"
    target.write_bytes(b"TZif" + bytes(100))
    fifo = tmp_path / "blocking-zone-fifo"
    os.mkfifo(fifo)  # opening it for reading would block the decoding thread for ever
    seen = OpenWatch.watch(str(tmp_path))
    results = []

    def decode_all():
        for path in (target, fifo):
            for node in zone_attacks(str(path)):
                bufs = [struct.pack("<q", 0)] if node["$"] == "pd.Series" else []
                results.append(codec.loads(make_payload(node, bufs)))

    worker = threading.Thread(target=decode_all, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "decoding blocked (a FIFO named as a zone was opened)"
    assert seen == []
    assert len(results) == 2 * len(zone_attacks("x"))
    first = results[0]  # an unknown key: the fixed offset the node carries
    assert first.utcoffset() == dt.timedelta(hours=1) and not isinstance(first.tzinfo, zoneinfo.ZoneInfo)


def test_iana_zone_names_still_arrive_as_zones():
    for key in ("Europe/Paris", "UTC", "America/Argentina/Buenos_Aires"):
        value = dt.datetime(2024, 7, 1, 12, tzinfo=zoneinfo.ZoneInfo(key))
        assert same(rt(value), value)
    assert codec_decode.iana_zone("Europe/Paris") == "Europe/Paris"
    for bad in ("dateutil/Europe/Paris", "/usr/share/zoneinfo/UTC", "Europe/../../../etc/passwd", "localtime",
                "posix/../UTC", "", "x" * 1000, 5, None):
        assert codec_decode.iana_zone(bad) is None


@needs_pandas
def test_pandas_zones_by_key_still_arrive():
    for ts in (pd.Timestamp("2024-07-01 12:00", tz="Europe/Paris"), pd.Timestamp("2024-07-01", tz="UTC")):
        back = rt(ts)
        assert back == ts and str(back.tz) == str(ts.tz)
    s = pd.Series(pd.date_range("2024-01-01", periods=3, tz="America/New_York"))
    assert rt(s).equals(s)


def no_json_parse(monkeypatch):
    """Make the codec's JSON parser fail the test if it runs: the payload must be refused before."""
    def refuse(text):
        raise AssertionError("the header was parsed")
    monkeypatch.setattr(codec, "_json_decode", refuse)


def test_json_items_are_counted_before_parsing(monkeypatch):
    n = 2_000_000
    hostile = make_payload(None, header=b"[" + b"[]," * n + b"[]]")  # 6 MB -> ~140 MB of lists if parsed
    no_json_parse(monkeypatch)
    with pytest.raises(CodecError, match="max_items"):
        codec.loads(hostile, max_items=1_000_000)
    for header in (b'[{"a":[]}' + b',{"a":[]}' * n + b"]", b'{"' + b'":{},"' * n + b'":0}'):
        with pytest.raises(CodecError, match="max_items"):
            codec.loads(make_payload(None, header=header), max_items=1_000_000)


def test_json_item_count_is_exact_outside_strings():
    # One item per , : [ { outside strings, plus one.
    assert codec.json_items_within("[1,2,3]", 4) and not codec.json_items_within("[1,2,3]", 3)
    assert codec.json_items_within('{"a":[1]}', 4) and not codec.json_items_within('{"a":[1]}', 3)
    text = json.dumps(["a,b:[{" * 1000, 'esc \\" ,,, " [[', "\\\\", ",{"])
    assert codec.json_items_within(text, 5) and not codec.json_items_within(text, 4)
    # Commas inside strings are not values: a long CSV text travels with a small max_items.
    csv = "\n".join(",".join(str(i) for i in range(20)) for _ in range(50_000))
    assert codec.loads(codec.dumps([csv, "x"]), max_items=10) == [csv, "x"]


def test_json_item_count_is_linear_on_hostile_strings():
    # Escaped quotes that never close: a backtracking string pattern would be quadratic here.
    started = time.monotonic()
    for text in ('["' + '\\"' * 2_000_000 + "]", '"' * 3_000_001, '["' + "\\" * 3_000_001, '[' + '"",' * 1_000_000):
        codec.json_items_within(text, 10)
        with pytest.raises(CodecError):
            codec.loads(make_payload(None, header=text.encode()), max_items=10)
    assert time.monotonic() - started < 30


def test_large_legitimate_values_stay_within_the_default_items():
    values = [list(range(1_000_000)), {str(i): i for i in range(200_000)}, ["text, with: [commas]"] * 500_000]
    for value in values:
        assert rt(value) == value


def test_buffer_table_is_bounded_by_the_header():
    n = 8_000_000  # 64 MB of zero-length buffers: once 8M memoryviews, ~1.7 GB
    started = time.monotonic()
    with pytest.raises(CodecError, match="more buffers than the header"):
        codec.loads(struct.pack("<4sII", codec.MAGIC, 4, n) + bytes(8 * n) + b"null")
    assert time.monotonic() - started < 10
    many = [bytes([i % 256]) * (i % 7) for i in range(20_000)]
    assert rt(many) == many


def test_path_components_count_as_items():
    path = "a/" * 200_000  # 400 KB of text, ~10 MB of part strings
    with pytest.raises(CodecError, match="max_items"):
        codec.loads(make_payload({"$": "path", "k": "PurePosixPath", "v": path}), max_items=100_000)
    deep = pathlib.PurePosixPath("/".join(["d"] * 1000))
    assert rt(deep) == deep


def test_exception_args_count_against_the_payload():
    args = {"$": "tuple", "v": list(range(10_000))}
    node = {"$": "exc", "e": {"type": "ValueError", "message": "m", "args": args}}
    back = codec.loads(make_payload(node), max_items=20_000)
    assert type(back) is ValueError and len(back.args) == 10_000
    # The budget is the payload's, not one per exception: the third one's args do not fit.
    path = {"$": "path", "k": "PurePosixPath", "v": "a/" * 10_000}  # 10,000 items from one string
    node = {"$": "exc", "e": {"type": "ValueError", "message": "m", "args": {"$": "tuple", "v": [path]}}}
    back = codec.loads(make_payload([node, node, node]), max_items=25_000)
    assert [type(x.args[0]) for x in back] == [pathlib.PurePosixPath, pathlib.PurePosixPath, Opaque]


@needs_pandas
def test_pandas_objects_count_as_items():
    n = 2_000
    tree = {"$": "pd.DataFrame", "columns": {"$": "pd.RangeIndex", "v": [0, n, 1], "name": None},
            "index": {"$": "pd.RangeIndex", "v": [0, 0, 1], "name": None},
            "data": [{"k": "np", "a": {"$": "ndarray", "dtype": "<f8", "shape": [0], "b": i}} for i in range(n)]}
    payload = make_payload(tree, [b""] * n)
    with pytest.raises(CodecError, match="max_items"):
        codec.loads(payload, max_items=n * codec.PANDAS_OBJECT_ITEMS // 2)
    assert codec.loads(payload).shape == (0, n)
    wide = pd.DataFrame(np.zeros((2, 10_000)))
    frame_same(rt(wide), wide)


def test_without_pandas_a_range_index_in_exception_args_is_bounded():
    rng = {"$": "pd.RangeIndex", "v": [0, 2**62, 1], "name": None}
    node = {"$": "exc", "e": {"type": "ValueError", "message": "m", "args": {"$": "tuple", "v": [rng]}}}
    out = run_child(["numpy", "pandas"], [make_payload(node)])  # was list(range(2**62)): never returned
    assert len(out) == 1 and "ValueError" in out[0], out


# --- the same bound on the Jupyter messages the host relays (sandbox/_jupyter.py) ---------------------------------


def jupyter_parts(content: bytes, header: bytes | None = None) -> list:
    header = header or json.dumps({"msg_type": "stream", "msg_id": "1"}).encode()
    return [b"<IDS|MSG>", b"", header, b'{"msg_id":"p"}', b"{}", content]


def test_jupyter_messages_are_counted_before_parsing(monkeypatch):
    from types import SimpleNamespace

    from sandbox import _jupyter

    ok = _jupyter.parse(jupyter_parts(json.dumps({"name": "stdout", "text": "a,b:[{" * 100_000}).encode()))
    assert ok.msg_type == "stream" and ok.parent_id == "p" and ok.content["text"].startswith("a,b:[{")

    def small_only(text):
        assert len(text) < 1000, "a flood was parsed"
        return json.loads(text)

    monkeypatch.setattr(_jupyter, "json", SimpleNamespace(loads=small_only, dumps=json.dumps))
    flood = b'{"data":[' + b"[]," * (_jupyter.MAX_CONTENT_ITEMS // 2) + b"[]]}"
    with pytest.raises(_jupyter.MessageError, match="more than"):
        _jupyter.parse(jupyter_parts(flood))
    header = b'{"msg_type":"stream","x":[' + b"0," * _jupyter.MAX_HEADER_ITEMS + b"0]}"
    with pytest.raises(_jupyter.MessageError, match="header holds more than"):
        _jupyter.parse(jupyter_parts(b"{}", header))


def test_listing_json_is_read_without_the_python_parser():
    from sandbox import _jupyter

    rows = [["a/b.txt", 3, 1.5], ["it's \"quoted\" \\ \n\t\x00 é 中 😀 \ud800.csv", 1, 2.0]]
    for text in (json.dumps(rows), json.dumps(rows, ensure_ascii=False)):
        assert _jupyter.json_in_repr(repr(text)) == rows
    started = time.monotonic()
    hostile = [
        "[" + "[]," * 2_000_000 + "[]]",  # ast.literal_eval: ~2.9 GB of syntax tree for 6 MB
        "'[]'" + " + '[]'" * 1_000_000,
        "b'[]'",
        "'\\U99999999'",
        repr("[" + "[]," * 2_000_000 + "[]]"),  # a real str repr, but over the item bound
    ]
    for text in hostile:
        with pytest.raises(ValueError):
            _jupyter.json_in_repr(text, max_items=1_000_000)
    assert time.monotonic() - started < 30
