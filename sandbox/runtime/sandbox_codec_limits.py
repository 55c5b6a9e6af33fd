"""Every bound of the value codec (:mod:`sandbox_codec`), named and documented in one place.

Part of the codec; standard library only. It runs in the sandbox (imported as
``sandbox_codec_limits``) and on the host (``sandbox.runtime.sandbox_codec_limits``).

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
  header can reference (``HEADER_BYTES_PER_BUFFER``), and is never turned
  into millions of objects.
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
- Keys with the same hash in a tagged dict or set (hash flooding:
  ``MAX_SAME_HASH_KEYS``); strings hash with a per-process random key.
- Strings inside tagged nodes have a length each (``MAX_FIELD_CHARS`` and
  the smaller ``MAX_*_CHARS`` below) and arrays a number of dimensions
  (``MAX_NDIM``), checked before anything is built from them.
- Decoding is linear in the payload apart from these bounded steps. One
  ``json.loads`` call still holds the GIL while it parses the header: other
  threads wait up to ~1.5 s for a header at the default ``max_items`` (5M
  floats, or 60 MB of 4300-digit ints) on a busy 2-core VM; the rest of
  decoding lets other threads run.
"""

from __future__ import annotations

import math
import re
from typing import Any

# --- defaults of the public API ------------------------------------------------------

#: Default ``max_depth``: nesting of containers (Python's recursion limit allows about 200).
DEFAULT_MAX_DEPTH = 100
#: Default ``max_items``: values a decode may build (~70 bytes of Python objects each at most).
DEFAULT_MAX_ITEMS = 5_000_000

# --- text carried for values that do not travel ---------------------------------------

#: Opaque values carry at most this much of the original repr().
REPR_LIMIT = 10_000
#: Exception messages are cut to this many characters.
MESSAGE_LIMIT = 20_000
#: Opaque nodes and exception descriptions: a type name is at most this long.
MAX_TYPE_NAME_CHARS = 1000
#: Opaque nodes: repr/str text received (the sender cuts to REPR_LIMIT; this leaves room for its note).
MAX_OPAQUE_TEXT_CHARS = 2 * REPR_LIMIT
#: Exception descriptions: at most this many ``__notes__``.
MAX_EXCEPTION_NOTES = 20
#: Exception args (builtin exceptions): nesting and inlined bytes; OSError's filenames: nesting.
EXCEPTION_ARGS_DEPTH = 20
EXCEPTION_INLINE_BYTES = 4096
EXCEPTION_FILENAME_DEPTH = 5

# --- numbers ------------------------------------------------------------------------

#: Largest int rebuilt (bits; 128 KiB): rebuilding from hex is linear, so this only caps memory.
MAX_INT_BITS = 1 << 20
#: The hex text of the largest int: its digits and a sign.
MAX_INT_HEX_CHARS = MAX_INT_BITS // 4 + 1
#: Largest numerator or denominator of a Fraction (bits): Fraction() normalises with gcd(),
#: quadratic and holding the GIL; at this size it takes under a millisecond. Every int Python
#: prints by default (4300 digits, 14,284 bits) fits.
MAX_FRACTION_BITS = 16_384
#: Largest Decimal rebuilt: coefficient digits, and the exponent's magnitude.
MAX_DECIMAL_DIGITS = 5_000
MAX_DECIMAL_EXPONENT = 5_000
#: A Decimal literal: its digits plus sign, point and exponent (checked before it is parsed).
MAX_DECIMAL_CHARS = MAX_DECIMAL_DIGITS + 32

# --- sizes of the payload and of what is built from it -------------------------------------

#: Items a pandas column, index or index level counts as (its Python objects weigh ~2 KB).
PANDAS_OBJECT_ITEMS = 100
#: Header bytes every buffer needs at least: each is referenced by a node (``{"$":"bytes","b":0}``
#: is 20 bytes), so a buffer table longer than ``header_len / 16`` is refused before it is read.
HEADER_BYTES_PER_BUFFER = 16
#: Keys of one tagged dict or set that may share a hash (checked once there are more keys than this):
#: keys with one hash make building the dict or set quadratic.
MAX_SAME_HASH_KEYS = 64
#: ndarray nodes: dimensions, and the size of each (numpy's own bounds are lower).
MAX_NDIM = 64
MAX_DIM = 2**62

# --- strings inside tagged nodes ---------------------------------------------------------

#: Any string field of a tagged node without a smaller bound (path text, numpy str/bytes scalars).
MAX_FIELD_CHARS = 1 << 20
#: ISO text of a datetime or a time, and of a date.
MAX_DATETIME_CHARS = 64
MAX_DATE_CHARS = 32
#: UUID nodes: exactly 32 hex digits.
UUID_HEX_CHARS = 32
#: numpy scalars sent as raw bytes (datetime64, timedelta64, longdouble): hex digits.
MAX_NPSCALAR_HEX_CHARS = 64
#: Time zones: a zone key, a zone's name; the UTC offset's magnitude (microseconds, under a day).
MAX_ZONE_KEY_CHARS = 64
MAX_TZ_NAME_CHARS = 255
MAX_UTC_OFFSET_US = 86_400_000_000

# --- messages for values over a limit (the encoder and the decoder say the same) ----------------

INT_TOO_BIG = f"an int of more than {MAX_INT_BITS} bits cannot be sent: send it as str or bytes"
FRACTION_TOO_BIG = (f"a Fraction whose numerator or denominator has more than {MAX_FRACTION_BITS} bits "
                    "cannot be sent: send it as str, or as a (numerator, denominator) tuple")
DECIMAL_TOO_BIG = (f"a Decimal of more than {MAX_DECIMAL_DIGITS} digits or with an exponent beyond "
                   f"+-{MAX_DECIMAL_EXPONENT} cannot be sent: send it as str")


def too_many_message(max_items: float) -> str:
    """What a payload over ``max_items`` is told."""
    return (f"payload has more than max_items={max_items} values: send big data as bytes, "
            "numpy arrays or DataFrames (one buffer each), or send fewer values")


def decimal_fits(v: Any) -> bool:
    """Whether Decimal ``v`` is within MAX_DECIMAL_DIGITS and MAX_DECIMAL_EXPONENT (NaN payloads count as digits)."""
    sign, digits, exponent = v.as_tuple()
    return len(digits) <= MAX_DECIMAL_DIGITS and (type(exponent) is not int or abs(exponent) <= MAX_DECIMAL_EXPONENT)


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
