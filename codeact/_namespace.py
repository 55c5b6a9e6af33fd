"""The kernel's live namespace: a listing made inside the kernel, checked on the host.

The restricted backend has no kernel: :func:`listing_of` lists its variables in this
process by the same rules, without calling into classes the session defined.

Shared by the web UI's variables panel (:mod:`codeact.ui._variables`) and the
compaction of long sessions (:mod:`codeact.compaction`), which writes the
listing into the "session so far" block it folds old turns into.

:data:`LISTING_CODE` runs in the session's kernel (stdlib only, as the
sandbox runtime is) and prints one line: a marker and a JSON object with the
user namespace's variables (name, type, a short repr). It leaves no name
behind. What comes back is written by code the model may control, so
:func:`parse_listing` treats it as hostile: the text is bounded before it is
parsed, the shape is checked item by item, the count and every string are
cut to fixed limits, and control and bidirectional-override characters are
made visible. The page then only ever sets these strings as text.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: Variables one listing shows (more are counted, not listed).
MAX_VARIABLES = 200
#: Characters of a name, a type and a repr as the page shows them.
MAX_NAME = 80
MAX_TYPE = 80
MAX_REPR = 160
#: Characters of kernel output a listing may take; anything longer is refused unparsed.
MAX_LISTING_CHARS = 256 * 1024
#: Seconds a listing may run in the kernel (a slow ``__repr__`` is cut short there).
LISTING_TIMEOUT = 10.0
#: Starts the line the listing prints.
MARKER = "__codeact_variables__:"

#: Run in the kernel: print MARKER + {"variables": [{"name", "type", "repr"}...], "total": n}.
#: Modules, classes, functions and the host's function stubs are not variables; nor are names
#: starting with "_" or IPython's own (In, Out, exit...). The listing bounds itself too, but the
#: host does not rely on that.
LISTING_CODE = f'''
def __codeact_variables(limit={MAX_VARIABLES}, name_max={MAX_NAME}, type_max={MAX_TYPE}, repr_max={MAX_REPR}):
    import json, reprlib, types
    shell = get_ipython()
    namespace, hidden = shell.user_ns, shell.user_ns_hidden
    skip = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
    short = reprlib.Repr()
    short.maxstring = short.maxother = short.maxlong = repr_max
    short.maxlist = short.maxtuple = short.maxdict = short.maxset = short.maxfrozenset = 8
    short.maxlevel = 2

    def summary(value):
        kind = type(value)
        module = getattr(kind, "__module__", "") or ""
        shape = getattr(value, "shape", None)
        if module.split(".")[0] in ("pandas", "numpy", "polars") and isinstance(shape, tuple):
            text = " x ".join(str(n) for n in shape)
            dtype = getattr(value, "dtype", None)
            columns = getattr(value, "columns", None)
            if columns is not None:
                names = [str(c) for c in list(columns)[:8]]
                text += " (" + ", ".join(names) + (", ..." if len(columns) > 8 else "") + ")"
            elif dtype is not None:
                text += " " + str(dtype)
            return text
        try:
            return short.repr(value)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            return "<repr failed: %s>" % type(exc).__name__

    def size(value):
        shape = getattr(value, "shape", None)
        try:
            if isinstance(shape, tuple) and all(isinstance(n, int) for n in shape):
                return "shape " + " x ".join(str(n) for n in shape)
            if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset, range)):
                return "len %d" % len(value)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
        return ""

    found, total = [], 0
    for name, value in sorted(list(namespace.items()), key=lambda kv: str(kv[0])):
        if not isinstance(name, str) or name.startswith("_") or name in ("In", "Out", "exit", "quit"):
            continue
        if name in hidden and hidden[name] is value:
            continue
        if isinstance(value, skip) or getattr(value, "__wrapped_host_function__", False):
            continue
        total += 1
        if len(found) < limit:
            kind = type(value)
            found.append({{"name": name[:name_max], "type": kind.__name__[:type_max],
                          "repr": summary(value)[:repr_max], "size": size(value)[:type_max]}})
    print("{MARKER}" + json.dumps({{"variables": found, "total": total}}, ensure_ascii=False))

try:
    __codeact_variables()
finally:
    del __codeact_variables
'''


@dataclass(frozen=True)
class Variable:
    """One variable of the user namespace as the page shows it (every field bounded, made printable)."""

    name: str
    type: str
    repr: str
    #: ``shape 3 x 4`` or ``len 12`` where the value has one, else "".
    size: str = ""


@dataclass(frozen=True)
class VariableListing:
    """The kernel's variables after the last code that ran (``error`` says why there is no listing)."""

    variables: tuple[Variable, ...] = ()
    #: How many variables the kernel has (more than ``variables`` when the listing was cut).
    total: int = 0
    error: str | None = None

    def wire(self) -> dict[str, Any]:
        """The listing as the page's JSON."""
        return {"variables": [{"name": v.name, "type": v.type, "repr": v.repr} for v in self.variables],
                "total": self.total, "error": self.error}


#: Characters a page must not show raw: C0/C1 controls, and bidi overrides that make text read otherwise.
_INVISIBLE = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7f, 0xa0))}
_INVISIBLE.update({c: f"\\u{c:04x}" for c in (0x200e, 0x200f, *range(0x202a, 0x202f), *range(0x2066, 0x206a))})


def printable(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with control and bidi characters shown as escapes."""
    shown = text[:limit].translate(_INVISIBLE)
    if len(text) <= limit and len(shown) <= limit:
        return shown
    return shown[:max(0, limit - 1)] + "…"


def parse_listing(stdout: str) -> VariableListing:
    """The listing the kernel printed, validated: never raises, never holds more than the limits."""
    if not isinstance(stdout, str) or len(stdout) > MAX_LISTING_CHARS:
        return VariableListing(error="the kernel's variable listing was too large to show")
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith(MARKER)), None)
    if line is None:
        return VariableListing(error="the kernel did not list its variables")
    try:
        data = json.loads(line[len(MARKER):])
    except (ValueError, RecursionError):
        return VariableListing(error="the kernel's variable listing was not readable")
    items = data.get("variables") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return VariableListing(error="the kernel's variable listing was not readable")
    variables: list[Variable] = []
    for item in items:
        if len(variables) >= MAX_VARIABLES:
            break
        if not isinstance(item, dict):
            continue
        name, kind, text = item.get("name"), item.get("type"), item.get("repr")
        if not (isinstance(name, str) and name and isinstance(kind, str) and isinstance(text, str)):
            continue
        size = item.get("size")
        size = printable(size, MAX_TYPE) if isinstance(size, str) else ""
        variables.append(Variable(printable(name, MAX_NAME), printable(kind, MAX_TYPE), printable(text, MAX_REPR),
                                  size))
    total = data.get("total")
    total = total if isinstance(total, int) and not isinstance(total, bool) and 0 <= total < 10**9 else len(variables)
    return VariableListing(tuple(variables), max(total, len(variables)))


def read_namespace(sandbox: Any) -> VariableListing:
    """List the user namespace of ``sandbox``'s kernel now; never raises (``error`` says why there is none).

    The restricted backend has no kernel: its variables are read in this process
    (:meth:`sandbox.restricted.RestrictedSandbox.variables`) and listed by the same rules.
    """
    if sandbox is None:
        return VariableListing(error="there is no sandbox to list the variables of")
    if getattr(sandbox, "backend", "") == "restricted":
        try:
            return listing_of(sandbox.variables(), sandbox.owns_type)
        except Exception as exc:  # the caller says so and goes on
            return VariableListing(error=f"could not list the variables: {type(exc).__name__}")
    try:
        listing = sandbox.run(LISTING_CODE, timeout=LISTING_TIMEOUT)
    except Exception as exc:  # the caller says so and goes on
        return VariableListing(error=f"could not list the variables: {type(exc).__name__}")
    if listing.error is not None:
        return VariableListing(error=f"could not list the variables: {listing.error.type}")
    return parse_listing(listing.stdout)


class _ShortRepr(reprlib.Repr):
    """``reprlib`` that never calls into a class the session defined (its ``__repr__`` is sandbox code)."""

    def __init__(self, session_made: Callable[[type], bool]) -> None:
        super().__init__()
        self.session_made = session_made
        self.maxstring = self.maxother = self.maxlong = MAX_REPR
        self.maxlist = self.maxtuple = self.maxdict = self.maxset = self.maxfrozenset = 8
        self.maxlevel = 2

    def repr1(self, x: Any, level: int) -> str:
        if self.session_made(type(x)):
            return f"<{type(x).__name__} object>"
        return super().repr1(x, level)


def listing_of(values: Mapping[str, Any], session_made: Callable[[type], bool]) -> VariableListing:
    """The listing of variables held in this process (the restricted backend's), by the kernel listing's rules.

    ``session_made(type)`` says which classes the session's code defined: their instances are shown by
    type only, so no sandbox code runs here.
    """
    short = _ShortRepr(session_made)
    found: list[Variable] = []
    for name in sorted(values):
        if len(found) >= MAX_VARIABLES:
            break
        value = values[name]
        kind = type(value)
        text, size = (f"<{kind.__name__} object>", "") if session_made(kind) else _summary(value, short)
        found.append(Variable(printable(name, MAX_NAME), printable(kind.__name__, MAX_TYPE),
                              printable(text, MAX_REPR), printable(size, MAX_TYPE)))
    return VariableListing(tuple(found), len(values))


def _summary(value: Any, short: reprlib.Repr) -> tuple[str, str]:
    """A value's short repr and its size (``shape 3 x 4``, ``len 12`` or ""), as :data:`LISTING_CODE` gives them."""
    module = getattr(type(value), "__module__", "") or ""
    shape = getattr(value, "shape", None) if module.split(".")[0] in ("pandas", "numpy", "polars") else None
    try:
        if isinstance(shape, tuple) and all(isinstance(n, int) for n in shape):
            dims = " x ".join(str(n) for n in shape)
            columns = getattr(value, "columns", None)
            dtype = getattr(value, "dtype", None)
            if columns is not None:
                names = [str(c) for c in list(columns)[:8]]
                text = f"{dims} ({', '.join(names)}{', ...' if len(columns) > 8 else ''})"
            else:
                text = dims + (f" {dtype}" if dtype is not None else "")
            return text, f"shape {dims}"
        text = short.repr(value)
        sized = isinstance(value, (str, bytes, list, tuple, dict, set, frozenset, range))
        return text, f"len {len(value)}" if sized else ""
    except Exception as exc:
        return f"<repr failed: {type(exc).__name__}>", ""
