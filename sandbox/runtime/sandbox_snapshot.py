"""Runs INSIDE the sandbox kernel: the kernel's half of session snapshots (see sandbox/snapshot.py).

Standard library only at import; saving and loading need ``cloudpickle`` in
the kernel (the standard image has it) and say so clearly when it is absent.

The host drives five steps, each one call with a JSON argument and a JSON
answer (a user expression):

* :func:`scan` fingerprints every user variable and the working directory:
  the same immutable object, the same bytes of an array or a DataFrame's
  blocks (crc32 over every byte: an in-place write anywhere is seen; a large
  buffer in two halves on two threads), the same pickle of small plain data,
  and for everything else the sha256 of the
  variable's own pickle (kept for :func:`save`, which then does not pickle it
  again). It says whether anything changed since the snapshot the host
  names; when nothing did, the host keeps the earlier snapshot and that is
  the whole cost of an autosave.
* :func:`save` pickles what changed, one file per variable (named by the
  sha256 of its bytes) in a staging directory the host then copies out (or,
  when they are small, in its answer), and returns the manifest: every variable with its type and size, and for each
  one that could not be saved, why.
* :func:`done` removes the staging directory and, when the host kept the
  snapshot, makes it the base of the next incremental save.
* :func:`prepare` imports the modules of the variables about to be loaded
  while the host is still copying them in (a restore's two slow parts, side
  by side).
* :func:`load` unpickles the variables the host lists, in their order, into
  the user namespace, rebinds functions defined in the session to it, and
  reports what was restored and what failed.

Variables refer to each other by name, not by copy: a function that uses a
global DataFrame does not carry the DataFrame, and two names for one object
are one object again after a restore (except around a cycle between
variables, saved by value instead).

Nothing here is a boundary: the code in the kernel can replace it, and the
host trusts none of its answers (it bounds and validates them).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import sys
import types
import zlib
from collections.abc import Iterator
from typing import Any

#: A variable's entry: (fingerprint, blob, strong ref[, bytes, refs, by value]). ``refs`` are the variables its
#: pickle names; ``by value`` marks a blob pickled without them (a cycle), never reused as it embeds the others.
Entry = tuple[Any, ...]

#: Must match sandbox/snapshot.py.
FORMAT = 1
#: Names never saved: the runtime's own, and what IPython puts in every namespace.
_RUNTIME_NAMES = ("ToolError", "HostFunctionError", "install", "PackageInstallError")
_ATOMIC = (int, float, complex, bool, str, bytes, type(None), range)
#: Plain data up to this many items is fingerprinted by its pickle (cheap); larger plain data is pickled at save.
_SMALL_ITEMS = 10_000


class _State:
    def __init__(self) -> None:
        self.token: Any = None  # the snapshot the fingerprints below belong to (committed by the host)
        self.entries: dict[str, Entry] = {}  # name -> (fingerprint, blob, strong ref for identity fingerprints)
        self.files: str | None = None
        self.pending: tuple[dict[str, Entry], str] | None = None  # (entries, files digest) of the scan not committed
        self.pickles: dict[str, tuple[bytes, list[str]]] = {}  # the scan's pickles, for the save that follows it
        self.saved: tuple[Any, dict[str, Entry], str | None] | None = None  # the last save's, waiting for done()


_state = _State()
_discarded = itertools.count()


def _shell() -> Any:
    import sandbox_runtime

    return sandbox_runtime.shell()


def _cloudpickle() -> Any:
    try:
        import cloudpickle
    except ImportError:
        raise RuntimeError("snapshots need cloudpickle in the sandbox: use the standard image "
                           "(`codeact image build`) or install('cloudpickle') first") from None
    return cloudpickle


def _user_variables() -> list[tuple[str, Any]]:
    """(name, value) of what the code defined: no hidden, runtime or host-function names, no modules of stubs."""
    shell = _shell()
    import sandbox_runtime

    hidden = getattr(shell, "user_ns_hidden", {})
    stubs = {id(s) for s in sandbox_runtime.host_function_stubs()}
    runtime = {id(getattr(sandbox_runtime, n, None)) for n in ("ToolError", "install_packages", "PackageInstallError")}
    out = []
    for name, value in list(shell.user_ns.items()):
        if not isinstance(name, str) or name.startswith("_") or not name.isidentifier():
            continue
        if name in hidden and hidden[name] is value:
            continue
        if id(value) in stubs or id(value) in runtime or getattr(value, "__sandbox_namespace__", False):
            continue
        if name in _RUNTIME_NAMES and id(value) in runtime:
            continue
        out.append((name, value))
    return out


# --- fingerprints -----------------------------------------------------------------------------


#: Buffers at least this large are checked in two halves side by side (zlib.crc32 lets go of the GIL): an
#: unchanged 100 MB DataFrame costs an autosave 20 ms instead of 40 on two cores.
_SPLIT_BYTES = 8 << 20


def _crc(buffer: Any) -> Any:
    data = memoryview(buffer).cast("B")
    if len(data) < _SPLIT_BYTES:
        return zlib.crc32(data)
    half = len(data) // 2
    if _cpus() < 2:
        return (zlib.crc32(data[:half]), zlib.crc32(data[half:]))
    import threading

    first: list[int] = []
    worker = threading.Thread(target=lambda: first.append(zlib.crc32(data[:half])), daemon=True)
    worker.start()
    second = zlib.crc32(data[half:])
    worker.join()
    return (first[0], second)  # an IndexError (the thread failed) leaves the variable unfingerprinted: saved


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _array_fp(array: Any) -> tuple[Any, ...] | None:
    np = sys.modules.get("numpy")
    if np is None or type(array) is not np.ndarray or array.dtype.hasobject:
        return None
    if not (array.flags.c_contiguous or array.flags.f_contiguous):
        return None
    return ("nd", array.dtype.str, array.shape, array.strides, _crc(array))


def _frame_fp(frame: Any) -> tuple[Any, ...] | None:
    pd = sys.modules.get("pandas")
    if pd is None or type(frame) not in (pd.DataFrame, pd.Series):
        return None
    import pickle

    try:
        blocks = []
        for block in frame._mgr.blocks:
            fp = _array_fp(block.values)
            if fp is None:
                return None
            blocks.append((fp, bytes(block.mgr_locs.as_array.tobytes()) if frame.ndim == 2 else b""))
        index = frame.index
        if type(index) is pd.RangeIndex:
            index_fp: tuple[Any, ...] | None = ("range", index.start, index.stop, index.step, index.name)
        else:
            index_fp = _array_fp(getattr(index, "_values", None))
            if index_fp is None:
                return None
        columns = pickle.dumps(frame.columns if frame.ndim == 2 else frame.name, 5)
        meta = pickle.dumps((frame.attrs, frame.flags.allows_duplicate_labels), 5)
        return ("frame", type(frame).__name__, tuple(blocks), index_fp, zlib.crc32(columns), zlib.crc32(meta))
    except Exception:
        return None


def _plain(value: Any, budget: list[int]) -> bool:
    """True for builtin data (no functions, no classes of the session) of at most ``budget[0]`` items."""
    stack = [value]
    while stack:
        v = stack.pop()
        budget[0] -= 1
        if budget[0] < 0:
            return False
        t = type(v)
        if t in _ATOMIC:
            continue
        if t in (list, tuple, set, frozenset):
            stack.extend(v)
        elif t is dict:
            stack.extend(v.keys())
            stack.extend(v.values())
        else:
            return False
    return True


def _fingerprint(name: str, value: Any) -> tuple[Any, Any]:
    """(fingerprint, strong ref) or (None, None) when only pickling can tell."""
    if type(value) in _ATOMIC:
        previous = _state.entries.get(name)
        if previous is not None and previous[2] is value:
            return previous[0], value
        return ("id", id(value)), value
    fp = _array_fp(value) if type(value).__module__ == "numpy" else None
    if fp is None and type(value).__module__.startswith("pandas"):
        fp = _frame_fp(value)
    if fp is None and _plain(value, [_SMALL_ITEMS]):
        import pickle

        try:
            data = pickle.dumps(value, 5)
            fp = ("plain", len(data), zlib.crc32(data))
        except Exception:
            fp = None
    return fp, None


def _files_digest(root: str, exclude: str) -> str:
    import hashlib
    import stat

    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not (dirpath == root and d.startswith(exclude)))
        for fn in sorted(filenames):
            full = os.path.join(dirpath, fn)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            h.update(("%s\0%o\0%d\0%d\n" % (os.path.relpath(full, root), stat.S_IFMT(st.st_mode), st.st_size,
                                            st.st_mtime_ns)).encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def _owners(variables: list[tuple[str, Any]]) -> dict[int, str]:
    """One owner per object: the first name; other names refer to it."""
    names: dict[int, str] = {}
    for n, v in variables:
        if type(v) not in _ATOMIC:
            names.setdefault(id(v), n)
    return names


def _pickle_fp(pickler_class: Any, name: str, value: Any, names: dict[int, str]) -> tuple[Any, Any, Any]:
    """(fingerprint, strong ref, (pickle, refs) or None) of a variable no cheaper fingerprint covers.

    The fingerprint is the sha256 of the pickle :func:`save` would write (its
    blob name), so an unchanged variable is one whose pickle is unchanged. One
    whose pickling fails is the same failure while it is the same object.
    """
    import hashlib

    try:
        data, refs = _dump(pickler_class, name, value, names)
    except BaseException as exc:  # noqa: B902 - a __reduce__ may raise anything, even SystemExit
        if isinstance(exc, KeyboardInterrupt):
            raise
        return ("failed", id(value), ("%s: %s" % (type(exc).__name__, exc))[:500]), value, None
    return ("pickle", hashlib.sha256(data).hexdigest()), None, (data, refs)


def scan(spec_json: str) -> str:
    """Fingerprint the namespace and the working directory; JSON: ``{"changed", "files", "cwd"}``."""
    spec = json.loads(spec_json)
    entries: dict[str, Entry] = {}
    pickles: dict[str, tuple[bytes, list[str]]] = {}
    variables = _user_variables()
    try:
        pickler_class: Any = _pickler_class(_cloudpickle())
    except RuntimeError:
        pickler_class = None  # save says why
    _prepare_classes(variables)
    names = _owners(variables)
    for name, value in variables:
        try:
            fp, ref = _fingerprint(name, value)
        except Exception:
            fp, ref = None, None
        if fp is None and pickler_class is not None:
            fp, ref, pickled = _pickle_fp(pickler_class, name, value, names)
            if pickled is not None:
                pickles[name] = pickled
        entries[name] = (fp, None, ref)
    files = _files_digest(spec["workdir"], spec["exclude"])
    base = _state.entries if spec.get("since") is not None and spec.get("since") == _state.token else None
    changed = base is None or files != _state.files or set(base) != set(entries) or any(
        fp is None or base[name][0] != fp for name, (fp, _, _) in entries.items())
    _state.pending = (entries, files)
    _state.pickles = pickles if changed else {}  # no save follows: do not hold the pickles
    return json.dumps({"changed": changed, "files": files, "cwd": os.getcwd()})


# --- saving -----------------------------------------------------------------------------------


def _pickler_class(cloudpickle: Any) -> type:
    class Pickler(cloudpickle.Pickler):
        """Other top-level variables are written as references to their names (see the module docs)."""

        def __init__(self, file: Any, root: Any, root_name: str, names: dict[int, str]) -> None:
            super().__init__(file, protocol=5)
            self.root, self.root_name, self.names = root, root_name, names
            self.refs: set[str] = set()

        def persistent_id(self, obj: Any) -> str | None:
            if type(obj) in _ATOMIC:
                return None
            name = self.names.get(id(obj))
            if name is None or name == self.root_name:
                return None  # the variable itself, by value (another name for it refers to this one)
            self.refs.add(name)
            return name

    return Pickler


def _prepare_classes(variables: list[tuple[str, Any]]) -> None:
    """Pickling an instance caches ``__slotnames__`` on its class: do it first, so a class always pickles the same."""
    import copyreg

    for _, v in variables:
        for cls in ((v, type(v)) if isinstance(v, type) else (type(v),)):
            if getattr(cls, "__module__", None) == "__main__":
                with contextlib.suppress(Exception):
                    copyreg._slotnames(cls)  # type: ignore[attr-defined]  # CPython's own helper; not in typeshed


def _dump(pickler_class: Any, name: str, value: Any, names: dict[int, str]) -> tuple[bytes, list[str]]:
    import io

    buf = io.BytesIO()
    pickler = pickler_class(buf, value, name, names)
    pickler.dump(value)
    return buf.getvalue(), sorted(pickler.refs)


def _cycles(deps: dict[str, set[str]]) -> set[str]:
    """Names in a cycle of references between variables (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: set[str] = set()
    counter = [0]

    def visit(v: str) -> None:
        work: list[tuple[str, Iterator[str]]] = [(v, iter(deps.get(v, ())))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, children = work[-1]
            for w in children:
                if w not in deps:
                    continue
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(deps.get(w, ()))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        component.append(w)
                        if w == node:
                            break
                    if len(component) > 1:
                        out.update(component)

    for v in list(deps):
        if v not in index:
            visit(v)
    return out


def _order(deps: dict[str, set[str]]) -> list[str]:
    """Variables in an order where each comes after those it refers to."""
    done: set[str] = set()
    order: list[str] = []
    for start in sorted(deps):
        stack = [(start, iter(sorted(deps[start])))]
        if start in done:
            continue
        done.add(start)
        while stack:
            node, children = stack[-1]
            for w in children:
                if w in deps and w not in done:
                    done.add(w)
                    stack.append((w, iter(sorted(deps[w]))))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def _write_blob(directory: str, data: bytes, blob: str) -> None:
    """Write ``data`` as ``directory/<blob>`` (``blob``: its sha256)."""
    path = os.path.join(directory, blob)
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(data)


def save(spec_json: str) -> str:
    """Pickle what changed into ``spec["dir"]``; JSON: the manifest (see sandbox/snapshot.py)."""
    spec = json.loads(spec_json)
    cloudpickle = _cloudpickle()
    directory = spec["dir"]
    shutil.rmtree(directory, ignore_errors=True)
    _sweep(directory)
    os.makedirs(directory, mode=0o700)
    reuse = set(spec.get("reuse") or ())
    pending: tuple[dict[str, Entry], str | None] = _state.pending or ({}, None)
    pending_entries, files = pending
    base = _state.entries if spec.get("since") is not None and spec.get("since") == _state.token else {}
    pickles, _state.pickles = _state.pickles, {}
    variables = _user_variables()
    _prepare_classes(variables)
    names = _owners(variables)
    pickler_class = _pickler_class(cloudpickle)
    results: dict[str, dict[str, Any]] = {}
    deps: dict[str, set[str]] = {}
    blobs: dict[str, bytes] = {}
    digests: dict[str, str] = {}  # sha256 of a blob the scan already hashed
    entries: dict[str, Entry] = {}
    for name, value in variables:
        fp, _, ref = pending_entries.get(name, (None, None, None))
        old = base.get(name)
        kind = type(value)
        row: dict[str, Any] = {"name": name, "type": "%s.%s" % (kind.__module__, kind.__qualname__), "size": 0}
        with contextlib.suppress(Exception):
            row["size"] = int(sys.getsizeof(value))
        if fp is not None and old is not None and old[0] == fp and old[1] in reuse and not (len(old) > 5 and old[5]):
            row.update(saved=True, blob=old[1], bytes=old[3] if len(old) > 3 else 0, reused=True,
                       refs=list(old[4]) if len(old) > 4 else [])
            deps[name] = set(row["refs"])
            entries[name] = old
            results[name] = row
            continue
        if fp is not None and fp[0] == "failed" and ref is value:  # the scan's pickling of it failed just now
            row.update(saved=False, reason=fp[2])
            results[name] = row
            entries[name] = (fp, None, ref)
            continue
        try:
            if name in pickles and fp is not None and fp[0] == "pickle":
                data, refs = pickles.pop(name)
                digests[name] = fp[1]
            else:
                data, refs = _dump(pickler_class, name, value, names)
        except BaseException as exc:  # noqa: B902 - a __reduce__ may raise anything, even SystemExit
            if isinstance(exc, KeyboardInterrupt):
                raise
            row.update(saved=False, reason=("%s: %s" % (type(exc).__name__, exc))[:500])
            results[name] = row
            entries[name] = (fp, None, ref)
            continue
        deps[name] = set(refs)
        blobs[name] = data
        row.update(saved=True, refs=refs)
        results[name] = row
        entries[name] = (fp, None, ref, len(data), tuple(refs))
    # Variables in a reference cycle are saved by value, each on its own (no name can be loaded first).
    for name in _cycles(deps):
        try:
            data = cloudpickle.dumps(dict(variables)[name], protocol=5)
        except Exception as exc:
            results[name].update(saved=False, reason=("%s: %s" % (type(exc).__name__, exc))[:500])
            results[name].pop("blob", None)
            deps.pop(name, None)
            continue
        blobs[name] = data
        digests.pop(name, None)
        results[name].update(refs=[], reused=False)
        entries[name] = (entries[name][0], None, entries[name][2], len(data), tuple(sorted(deps[name])), True)
        deps[name] = set()
    # A blob the earlier snapshot holds (the same sha256) is not sent again, even when no fingerprint said
    # so (the host named an older snapshot than the one the fingerprints are of): the host has its bytes.
    # New blobs whose total is at most spec["inline"] bytes travel in the answer itself: for a small change
    # that is cheaper than the host fetching the staging directory through the engine.
    named = {name: digests.get(name) or _sha256(data) for name, data in blobs.items()}
    new = {name: data for name, data in blobs.items() if named[name] not in reuse}
    inline_limit = spec.get("inline") or 0
    send_inline = sum(len(data) for data in new.values()) <= inline_limit
    inline: dict[str, str] = {}
    for name, data in blobs.items():
        blob = named[name]
        results[name].update(blob=blob, bytes=len(data), reused=blob in reuse)
        entries[name] = (entries[name][0], blob) + tuple(entries[name][2:])
        if name not in new:
            continue
        if send_inline:
            import base64

            inline[blob] = base64.b64encode(data).decode("ascii")
        else:
            _write_blob(directory, data, blob)
    for name, row in results.items():
        if row.get("saved") and name in deps:
            row["refs"] = sorted(r for r in deps[name] if r in deps)
    order = _order({n: {r for r in deps[n] if r in deps} for n in deps})
    rows = [results[n] for n in order] + [r for n, r in results.items() if not r.get("saved")]
    _state.saved = (spec.get("token"), entries, files)
    return json.dumps({"format": FORMAT, "variables": rows, "cwd": _relative_cwd(spec.get("workdir")),
                       "files": files, "python": "%d.%d.%d" % sys.version_info[:3],
                       "pickler": "cloudpickle " + cloudpickle.__version__, "inline": inline})


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _relative_cwd(workdir: str | None) -> str:
    """The working directory, relative to the sandbox's own when inside it (another sandbox has another one)."""
    cwd = os.getcwd()
    if workdir and (cwd == workdir or cwd.startswith(workdir.rstrip("/") + "/")):
        return os.path.relpath(cwd, workdir)
    return cwd


def done(spec_json: str) -> str:
    """Remove the staging directory; ``commit``: the saved state is the base of the next incremental save, under
    the token ``as`` when the host kept an earlier snapshot that holds the same."""
    spec = json.loads(spec_json)
    if spec.get("dir"):
        _discard(spec["dir"])
    if spec.get("commit") and _state.saved is not None and _state.saved[0] == spec.get("token"):
        _, _state.entries, _state.files = _state.saved
        _state.token = spec.get("as") or spec.get("token")
    _state.saved = None
    _state.pending = None
    _state.pickles = {}
    return json.dumps({"ok": True})


# --- loading ----------------------------------------------------------------------------------


def _rebind(value: Any, namespace: dict[str, Any], seen: set[int]) -> Any:
    """A function or class defined in the session, with its functions looking up globals in ``namespace``.

    cloudpickle gives each function a private copy of the globals it used;
    the session's own functions must see the restored namespace instead.
    """
    if id(value) in seen:
        return value
    seen.add(id(value))
    if isinstance(value, types.FunctionType):
        g = value.__globals__
        if g is namespace or g.get("__name__") != "__main__":
            return value
        for key, item in g.items():  # names the function used that the namespace lacks (saved by value)
            if not key.startswith("__"):
                namespace.setdefault(key, item)
        new = types.FunctionType(value.__code__, namespace, value.__name__, value.__defaults__, value.__closure__)
        new.__kwdefaults__ = value.__kwdefaults__
        new.__dict__.update(value.__dict__)
        for attr in ("__qualname__", "__doc__", "__module__", "__annotations__"):
            with contextlib.suppress(AttributeError, TypeError):
                setattr(new, attr, getattr(value, attr))
        return new
    if isinstance(value, type) and value.__module__ == "__main__":
        for key, item in list(vars(value).items()):
            replaced: Any = None
            if isinstance(item, types.FunctionType):
                replaced = _rebind(item, namespace, seen)
            elif isinstance(item, (staticmethod, classmethod)) and isinstance(item.__func__, types.FunctionType):
                replaced = type(item)(_rebind(item.__func__, namespace, seen))
            elif isinstance(item, property):
                parts: list[Any] = [_rebind(f, namespace, seen) if isinstance(f, types.FunctionType) else f
                                    for f in (item.fget, item.fset, item.fdel)]
                replaced = property(parts[0], parts[1], parts[2], item.__doc__)
            if replaced is not None and replaced is not item:
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(value, key, replaced)
    return value


def prepare(spec_json: str) -> str:
    """Import ``spec["modules"]`` (the modules of the saved variables' types); JSON: ``{"imported": n}``.

    Unpickling would import them anyway; doing it first lets the host copy the
    variables in at the same time. A module that does not import is left to
    :func:`load`, which reports the variable that needed it.
    """
    import importlib

    imported = 0
    with _no_gc():
        for name in json.loads(spec_json).get("modules", [])[:200]:
            if not isinstance(name, str) or name in sys.modules:
                continue
            try:
                importlib.import_module(name)
            except BaseException as exc:  # noqa: B902 - a module may raise anything while it imports
                if isinstance(exc, KeyboardInterrupt):
                    raise
                continue
            imported += 1
    return json.dumps({"imported": imported})


def _discard(directory: str) -> None:
    """Remove ``directory`` without waiting for it (freeing 100 MB of tmpfs takes 25 ms): renamed aside at once,
    so that the next save may use the name, and removed on a thread."""
    aside = "%s.gone-%d-%d" % (directory, os.getpid(), next(_discarded))
    try:
        os.rename(directory, aside)
    except FileNotFoundError:
        return
    except OSError:
        shutil.rmtree(directory, ignore_errors=True)
        return
    import threading

    threading.Thread(target=shutil.rmtree, args=(aside,), kwargs={"ignore_errors": True}, daemon=True,
                     name="snapshot-discard").start()


def _sweep(directory: str) -> None:
    """Remove what an earlier kernel set aside and did not finish removing (it died meanwhile)."""
    import glob

    mine = "%s.gone-%d-" % (directory, os.getpid())
    for aside in glob.glob(glob.escape(directory) + ".gone-*"):
        if not aside.startswith(mine):
            shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """The cyclic garbage collector off meanwhile: importing and unpickling make many objects and no garbage,
    and its passes over them cost about a tenth of the time (measured on sklearn's import)."""
    import gc

    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def load(spec_json: str) -> str:
    """Unpickle the listed variables from ``spec["dir"]`` into the namespace; JSON: what was restored, what failed."""
    spec = json.loads(spec_json)
    cloudpickle = _cloudpickle()
    import pickle

    directory = spec["dir"]
    namespace = _shell().user_ns
    loaded: dict[str, Any] = {}
    failed: list[list[str]] = []

    class Unpickler(pickle.Unpickler):
        def persistent_load(self, pid: Any) -> Any:
            if pid in loaded:
                return loaded[pid]
            raise pickle.UnpicklingError("it refers to %r, which was not restored" % (pid,))

    try:
        with _no_gc():  # unpickling makes many objects and no garbage
            for row in spec["variables"]:
                name = row["name"]
                try:
                    with open(os.path.join(directory, row["blob"]), "rb") as f:
                        loaded[name] = Unpickler(f).load()
                except BaseException as exc:  # noqa: B902 - unpickling runs the snapshot's code
                    if isinstance(exc, KeyboardInterrupt):
                        raise
                    failed.append([name, ("%s: %s" % (type(exc).__name__, exc))[:500]])
        seen: set[int] = set()
        for name, value in loaded.items():
            namespace[name] = _rebind(value, namespace, seen)
        cwd_ok = True
        try:
            if spec.get("cwd"):
                os.chdir(os.path.join(spec.get("workdir") or os.getcwd(), spec["cwd"]))
        except OSError:
            cwd_ok = False
    finally:
        _discard(directory)
    # What was loaded is the base of the next incremental save against this snapshot.
    entries: dict[str, Entry] = {}
    for row in spec["variables"]:
        name = row["name"]
        if name in loaded and name in namespace:
            try:
                fp, ref = _fingerprint(name, namespace[name])
            except Exception:
                fp, ref = None, None
            if fp is None:  # the scan's pickle fingerprint: equal when it pickles to the bytes it was loaded from
                fp = ("pickle", row["blob"])
            entries[name] = (fp, row["blob"], ref, row.get("bytes", 0), tuple(row.get("refs") or ()))
    _state.token, _state.entries = spec.get("token"), entries
    _state.files = spec.get("files")
    del cloudpickle
    return json.dumps({"restored": sorted(loaded), "failed": failed, "cwd": cwd_ok})
