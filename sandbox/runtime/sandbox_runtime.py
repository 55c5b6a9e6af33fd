"""Runs INSIDE the sandbox kernel. Standard library only, so it works in any image.

What it does:

* ``launch(argv)`` starts the IPython kernel with settings suited to a
  sandbox (no history database, plain tracebacks, a prepared matplotlib
  cache) and installs the hooks below.
* ``install(specs_json)`` turns host-function specs (data: name, docstring,
  signature) into stubs in the user namespace. A stub sends its call to the
  host over the Jupyter stdin channel and blocks until the reply.
* plain ``input()``/``getpass()`` fail at once: nobody is there to type.
* ``list_files()`` and ``kill_strays()`` serve the host's bookkeeping.

Host errors arrive as :class:`HostFunctionError`; when the host raised a
builtin exception type (ValueError, KeyError, TimeoutError, ...), the
exception is also an instance of that type, so ``except ValueError`` works.
"""

import builtins
import getpass
import inspect
import json
import os
import shutil
import signal
import sys
import threading

CALL_PREFIX = "\x1esandbox-call:"  # must match sandbox/functions.py


class HostFunctionError(Exception):
    """An error raised by a host function, re-raised inside the sandbox."""

    host_type = "Exception"


class _State:
    """Per-kernel state (one kernel per process)."""

    def __init__(self):
        self.kernel = None
        self.shell = None
        self.ident = None
        self.parent = None
        self.lock = threading.Lock()
        self.stubs = {}
        self.error_classes = {}


_state = _State()


# --- launching ---------------------------------------------------------------


def launch(argv=None):
    """Start an IPython kernel for the sandbox; ``argv`` as for ipykernel (``-f conn.json``)."""
    _prepare_matplotlib()
    from ipykernel.kernelapp import IPKernelApp

    args = list(sys.argv[1:] if argv is None else argv)
    args += [
        "--HistoryManager.enabled=False",
        "--IPKernelApp.parent_handle=0",
        "--InteractiveShell.colors=NoColor",
        "--InteractiveShell.autoindent=False",
    ]
    app = IPKernelApp.instance()
    app.initialize(args)
    setup(app.kernel, app.shell)
    app.start()


def _prepare_matplotlib():
    """Give matplotlib a writable config dir holding the font cache built into the image.

    Without it every new sandbox rebuilds the font cache (seconds) on the first plot.
    """
    seed = os.environ.get("SANDBOX_MPL_SEED")
    target = os.environ.get("MPLCONFIGDIR")
    if seed and target and os.path.isdir(seed) and not os.path.exists(target):
        try:
            shutil.copytree(seed, target)
        except OSError:
            pass


def setup(kernel, shell):
    """Install the hooks; called once per kernel process."""
    _state.kernel = kernel
    _state.shell = shell
    shell.events.register("pre_run_cell", _before_cell)
    shell.user_ns["HostFunctionError"] = HostFunctionError


def _before_cell(info=None):
    # ipykernel keeps the requesting client's identity in (context-)variables
    # that threads started by user code cannot see, so take them here, on the
    # kernel's main thread, for stubs called from any thread during this cell.
    k = _state.kernel
    if hasattr(k, "_get_shell_context_var"):  # ipykernel >= 7
        _state.ident = k._get_shell_context_var(k._shell_parent_ident)
    else:
        _state.ident = k._parent_ident["shell"]
    _state.parent = k.get_parent("shell")
    builtins.input = _no_input
    getpass.getpass = _no_input


def _no_input(prompt="", *args, **kwargs):
    raise RuntimeError(
        "input() is not available in the sandbox: no one is there to type. "
        "Put the data in a variable or a file, or call a host function."
    )


# --- host-function stubs -------------------------------------------------------------


class _Shown:
    """An annotation or default shown in signatures exactly as the host wrote it."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


_KINDS = {
    "positional_only": inspect.Parameter.POSITIONAL_ONLY,
    "positional_or_keyword": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "var_positional": inspect.Parameter.VAR_POSITIONAL,
    "keyword_only": inspect.Parameter.KEYWORD_ONLY,
    "var_keyword": inspect.Parameter.VAR_KEYWORD,
}


def _signature(spec):
    params = []
    for p in spec["parameters"]:
        default = inspect.Parameter.empty
        if p["has_default"]:
            default = _Shown(p["default_repr"]) if p["default_repr"] is not None else p["default"]
        annotation = _Shown(p["annotation"]) if p["annotation"] else inspect.Parameter.empty
        params.append(inspect.Parameter(p["name"], _KINDS[p["kind"]], default=default, annotation=annotation))
    returns = _Shown(spec["returns"]) if spec["returns"] else inspect.Signature.empty
    return inspect.Signature(params, return_annotation=returns)


def _make_stub(spec):
    name = spec["name"]
    signature = _signature(spec)

    def stub(*args, **kwargs):
        __tracebackhide__ = True  # IPython leaves this frame out of tracebacks
        signature.bind(*args, **kwargs)  # wrong arguments fail here, like a real call
        return call(name, args, kwargs)

    stub.__name__ = stub.__qualname__ = name
    stub.__doc__ = spec["doc"] or None
    stub.__signature__ = signature
    stub.__module__ = "host_functions"
    stub.__wrapped_host_function__ = True
    return stub


def install(specs_json):
    """Create or replace stubs in the user namespace; remove stubs no longer offered."""
    specs = json.loads(specs_json)
    user_ns = _state.shell.user_ns
    wanted = {s["name"] for s in specs}
    for name in list(_state.stubs):
        if name not in wanted:
            if user_ns.get(name) is _state.stubs[name]:
                del user_ns[name]
            del _state.stubs[name]
    for spec in specs:
        stub = _make_stub(spec)
        _state.stubs[spec["name"]] = stub
        user_ns[spec["name"]] = stub


def call(name, args, kwargs):
    """Call host function ``name``; returns its result or raises its error."""
    __tracebackhide__ = True
    request = CALL_PREFIX + json.dumps({"name": name, "args": _to_json(args), "kwargs": _to_json(kwargs)})
    k = _state.kernel
    if k is None or _state.parent is None:
        raise RuntimeError("host functions can only be called while the sandbox runs code")
    # One request at a time: the stdin socket is not thread-safe.
    with _state.lock:
        reply = k._input_request(request, _state.ident, _state.parent, password=False)
    data = json.loads(reply)
    if data.get("ok"):
        return _from_json(data.get("value"))
    raise _error_class(data.get("type") or "Exception")(data.get("message") or "")


def _error_class(host_type):
    cls = _state.error_classes.get(host_type)
    if cls is None:
        builtin = getattr(builtins, host_type, None)
        bases = (HostFunctionError,)
        if isinstance(builtin, type) and issubclass(builtin, Exception) and builtin is not Exception:
            bases = (HostFunctionError, builtin)
        try:
            cls = type(host_type, bases, {"host_type": host_type, "__module__": "host_functions"})
        except TypeError:  # incompatible layouts (e.g. some OSError subclasses)
            cls = type(host_type, (HostFunctionError,), {"host_type": host_type, "__module__": "host_functions"})
        if issubclass(cls, KeyError):
            cls.__str__ = Exception.__str__  # KeyError would quote the message
        _state.error_classes[host_type] = cls
    return cls


def _to_json(value):
    # Keep in step with sandbox.functions.to_json_value (the host side).
    import base64
    import dataclasses
    import datetime
    import decimal
    import enum
    import pathlib

    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"__bytes__": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dict):
        return {str(k): _to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_to_json(v) for v in value]
    if isinstance(value, enum.Enum):
        return _to_json(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _to_json(dataclasses.asdict(value))
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (pathlib.PurePath, decimal.Decimal)):
        return str(value)
    if type(value).__module__.startswith("pandas") and hasattr(value, "to_dict"):
        try:
            return _to_json(value.to_dict("records"))
        except TypeError:
            return _to_json(value.to_dict())
    if hasattr(value, "tolist"):
        return _to_json(value.tolist())
    if hasattr(value, "items"):
        return {str(k): _to_json(v) for k, v in value.items()}
    return str(value)


def _from_json(value):
    import base64

    if isinstance(value, dict):
        if len(value) == 1 and "__bytes__" in value:
            return base64.b64decode(value["__bytes__"])
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


# --- host bookkeeping ------------------------------------------------------------


def list_files(root="."):
    """JSON list of [relative path, size, mtime] for every file under ``root``."""
    out = []
    root = os.path.abspath(root)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".ipynb_checkpoints")]
        for fn in filenames:
            full = os.path.join(dirpath, fn)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            out.append([os.path.relpath(full, root).replace(os.sep, "/"), st.st_size, st.st_mtime])
    return json.dumps(out)


def kill_strays(whole_namespace):
    """Kill processes the sandboxed code left behind (e.g. a fork bomb).

    In a container (``whole_namespace``) every process but init and the
    kernel goes. On the host, only processes in the kernel's session.
    """
    me = os.getpid()
    killed = 0
    for _ in range(5):  # repeat: a fork bomb refills the table between passes
        if whole_namespace:
            try:
                os.kill(-1, signal.SIGKILL)  # all we may signal except init and ourselves
                killed += 1
            except ProcessLookupError:
                break
        else:
            sid = os.getsid(me)
            found = False
            for entry in os.listdir("/proc"):
                if not entry.isdigit() or int(entry) == me:
                    continue
                try:
                    if os.getsid(int(entry)) == sid:
                        os.kill(int(entry), signal.SIGKILL)
                        found = True
                        killed += 1
                except OSError:
                    continue
            if not found:
                break
    # Reap what we can so zombies do not hold pids.
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
    return killed
