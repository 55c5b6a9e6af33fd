"""Runs INSIDE the sandbox kernel. Standard library only, so it works in any image.

What it does:

* :func:`launch` starts an IPython kernel next to the supervisor
  (:mod:`sandbox_init`), which relays the kernel's ZMQ messages to the host
  from its own process. The kernel's own stdin and stdout carry its
  host-function calls. Nothing is shared with the host: no socket
  directory, no connection file, no network.
* When its link to the host ends, the kernel and everything it started end
  too (and in a container the supervisor makes sure of it).
* ``install(specs)`` turns host-function specs (data: name, docstring,
  signature) into stubs in the user namespace. A stub sends its call over
  the link and blocks until the host replies; calls from several threads run
  concurrently on the host; stubs of async functions are awaitable.
* plain ``input()``/``getpass()`` fail at once: nobody is there to type.
* stdout/stderr are capped per cell at the source (head and tail kept), so
  ``print('x' * 10**8)`` never travels to the host; the host is told how
  much was cut. Rich outputs (display, the cell's result) are capped too.
* output of subprocesses and C code (file descriptors 1 and 2) is forwarded
  whatever its bytes, and all of it before the cell counts as finished.
* tracebacks leave out frames of this runtime and of the kernel machinery.
* ``list_files()`` and ``kill_strays()`` serve the host's bookkeeping.

Errors of host functions arrive as the same builtin exception type when the
host raised one (``except KeyError`` works), else as :class:`ToolError`.

None of this is a security boundary in itself: code in the kernel can
replace any of it. The host trusts nothing this process sends.
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import getpass
import inspect
import itertools
import json
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING or __package__:  # on the host: sandbox.runtime.sandbox_runtime (and for the type checker)
    from . import sandbox_codec
    from . import sandbox_wire as wire
else:  # in the sandbox: top-level modules (PYTHONPATH=/opt/sandbox/runtime)
    import sandbox_codec
    import sandbox_wire as wire

if TYPE_CHECKING:
    import re
    import socket
    import types

#: Written to stderr once the kernel is up: later process output is about a crash, not startup noise.
READY_MARKER = "sandbox-runtime: kernel ready"  # must match sandbox/kernel.py
#: MIME type of the display message that tells the host how much output was cut here.
OUTPUT_CUT_MIME = "application/vnd.codeact.output-cut+json"  # must match sandbox/kernel.py

ToolError = sandbox_codec.ToolError
#: The name earlier versions used; kept so that ``except HostFunctionError`` still works.
HostFunctionError = ToolError


class _State:
    """Per-kernel state (one kernel per process)."""

    def __init__(self) -> None:
        self.kernel: Any = None  # ipykernel's kernel (its objects are untyped here)
        self.shell: Any = None  # IPython's shell
        self.link: _CallLink | None = None
        self.stubs: dict[str, Callable[..., Any]] = {}
        #: (namespace, local name, stub) of stubs placed in namespace modules
        self.placed: list[tuple[str, str, Callable[..., Any]]] = []
        self.limiters: list[_OutputLimiter] = []
        self.streams: list[Any] = []  # sys.stdout and sys.stderr: ipykernel's OutStreams
        self.output_limit: int | None = None
        self.max_payload = 64 * 1024 * 1024
        self.rich_cut = 0
        self.publish_raw: Callable[..., Any] | None = None
        self.base_threads: set[int | None] = set()  # the kernel's own threads, once it is ready
        self.in_container = False  # a container of its own: every stray process may be killed
        self.relay: socket.socket | None = None  # the link program's socket (in a container): open while this lives
        self.direct: socket.socket | None = None  # the host's own connection, when it made one (the call link)
        self.started_fd: int | None = None  # where the supervisor reads which run this kernel started (a container)
        self.capture_clocks: dict[int, float] = {}  # CPU clocks of the fd capture threads as the cell started


_state = _State()


def shell() -> Any:
    """IPython's shell of this kernel (None before :func:`launch` made it)."""
    return _state.shell


def host_function_stubs() -> list[Callable[..., Any]]:
    """The stubs :func:`install` placed for the host's functions (the code's names for them)."""
    return list(_state.stubs.values())


# --- the call link to the host ------------------------------------------------------


class _Waiter:
    """One call waiting for its reply."""

    __slots__ = ("reply",)

    def __init__(self) -> None:
        self.reply: tuple[int, bytes] | None = None  # (status, payload)


class _CallLink:
    """Host-function calls over this process's own stdin and stdout (a ``docker exec`` stream, or pipes).

    Calls go out from any thread, one frame at a time. There is no reader
    thread: a waiting caller reads the link itself (the *leader*) and hands
    replies meant for other callers to them; the others wait until their
    reply arrives or the leader leaves. A call then costs no thread hand-off
    on this side. When the link reaches its end (the host is gone) the kernel
    and everything it started end too.
    """

    def __init__(self, fd_in: int, fd_out: int) -> None:
        self.fd_in = fd_in
        self.fd_out = fd_out
        self.write_lock = threading.Lock()
        self.cond = threading.Condition()
        self.waiters: dict[int, _Waiter] = {}
        self.leader = False
        self.ids = itertools.count(1)
        self.parser = wire.FrameParser(2**31, kinds={wire.KIND_REPLY})

    def send(self, kind: bytes, *chunks: wire.Chunk) -> None:
        views = [memoryview(v) for v in wire.frame(kind, *chunks)]
        with self.write_lock:
            while views:
                try:
                    written = os.writev(self.fd_out, views)
                except InterruptedError:
                    continue
                while written:
                    if written >= len(views[0]):
                        written -= len(views[0])
                        views.pop(0)
                    else:
                        views[0] = views[0][written:]
                        written = 0

    def read_prepared(self) -> dict[str, Any]:
        """What the host sends first on a link it got from a link program (a ``P`` frame, JSON):
        the host functions and settings to install before the kernel answers anything.

        Read byte-exact, before any call: nothing else comes on the link until this kernel calls.
        """
        header = self._read_exact(wire.HEADER_SIZE)
        kind, size = header[:1], int.from_bytes(header[1:], "big")
        if kind != wire.KIND_PREPARED:
            raise RuntimeError("the host did not send the kernel's settings first")
        return json.loads(self._read_exact(size))

    def _read_exact(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = os.read(self.fd_in, min(size - len(data), 65536))
            if not chunk:
                _host_gone()
            data += chunk
        return bytes(data)

    def announce_start(self) -> None:
        """Tell the host, before the code of a run starts, that it starts (see sandbox_wire ``S``).

        A direct write: it is in the stream even if the code kills this process the next moment.
        """
        with contextlib.suppress(OSError):
            self.send(wire.KIND_STARTED)

    def announce_end(self, msg_id: bytes) -> None:
        """Tell the host that the code of run ``msg_id`` has ended (see sandbox_wire ``E``)."""
        with contextlib.suppress(OSError):
            self.send(wire.KIND_ENDED, msg_id)

    def new_call(self) -> tuple[int, _Waiter]:
        call_id = next(self.ids) & 0xFFFFFFFF
        waiter = _Waiter()
        with self.cond:
            self.waiters[call_id] = waiter
        return call_id, waiter

    def forget(self, call_id: int) -> _Waiter | None:
        with self.cond:
            return self.waiters.pop(call_id, None)

    def wait(self, call_id: int, waiter: _Waiter) -> tuple[int, bytes]:
        """Block until ``waiter`` has its reply, reading the link while no one else does."""
        while True:
            with self.cond:
                while waiter.reply is None and self.leader:
                    self.cond.wait()
                if waiter.reply is not None:
                    return waiter.reply
                self.leader = True
            try:
                self._read_until(waiter)
            finally:
                with self.cond:
                    self.leader = False
                    self.cond.notify_all()  # someone else may need to read now

    def _read_until(self, waiter: _Waiter) -> None:
        while waiter.reply is None:
            data = os.read(self.fd_in, 65536)  # below the mmap threshold: see sandbox._transport
            if not data:
                _host_gone()
            frames = self.parser.feed(data)
            with self.cond:
                for _, body in frames:
                    call_id, status, payload = wire.unpack_reply(body)
                    other = self.waiters.pop(call_id, None)
                    if other is not None:  # else: that caller was interrupted and gave up
                        other.reply = (status, bytes(payload))
                if frames:
                    self.cond.notify_all()


def _host_gone() -> NoReturn:
    """The host closed the link: end this kernel and everything it started."""
    try:
        os.killpg(os.getpgid(0), signal.SIGKILL)
    finally:
        os._exit(0)


# --- launching ---------------------------------------------------------------


def _skip_terminal_ipython() -> None:
    """Keep IPython's terminal front end (and prompt_toolkit) unimported: a kernel has no terminal.

    ``import IPython`` pulls in ``IPython.terminal.embed`` for ``IPython.embed``,
    which costs about a third of the kernel's start-up time.
    """
    if "IPython" in sys.modules:
        return
    import types

    embed = types.ModuleType("IPython.terminal.embed")

    def _embed(*args: Any, **kwargs: Any) -> NoReturn:
        raise RuntimeError("IPython.embed() is not available in the sandbox")

    embed.__dict__.update(embed=_embed, InteractiveShellEmbed=None)
    sys.modules["IPython.terminal.embed"] = embed


def launch(argv: list[str] | None = None) -> None:
    """Start the kernel, bound to the connection file named in ``SANDBOX_CONNECTION`` (the
    supervisor, :mod:`sandbox_init`, prepared it). Its link to the host for host-function calls:

    * this process's stdin and stdout, when the host started it (the local backend);
    * in a container, where the supervisor started it: the stdin, stdout and stderr of the
      host's ``docker exec`` of a link program, which hands them over on the listening socket
      ``SANDBOX_LINK_FD``. The kernel imports its machinery first, then takes them, then reads
      the host functions and settings to install from the link (a ``P`` frame).
    """
    link_fd = os.environ.pop("SANDBOX_LINK_FD", "")
    started_fd = os.environ.pop("SANDBOX_STARTED_FD", "")
    if started_fd:
        _state.started_fd = int(started_fd)
        os.set_inheritable(_state.started_fd, False)
    if not link_fd:
        fd_in, fd_out = os.dup(0), os.dup(1)  # non-inheritable: subprocesses never see the link
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(2, 1)  # a stray write to fd 1 lands in the kernel's log, never in the link
        _state.link = _CallLink(fd_in, fd_out)
    path = os.environ.pop("SANDBOX_CONNECTION")
    _state.in_container = os.environ.pop("SANDBOX_NAMESPACE", "") == "1"
    workdir = os.environ.pop("SANDBOX_WORKDIR", "") or os.getcwd()
    # Packages the host installed for this session (read-only to this process; see use_packages).
    use_packages([p for p in os.environ.pop("SANDBOX_PACKAGES", "").split(":") if p])
    # The sandbox offers neither a debugger nor tab completion; without them
    # ipykernel starts faster (debugpy pulls in pkg_resources) and
    # stops warning about frozen modules on every start.
    for blocked in ("debugpy", "jedi"):
        # None makes the import fail at once (importlib's documented way); typeshed types the values as modules.
        sys.modules.setdefault(blocked, None)  # type: ignore[arg-type]
    _skip_terminal_ipython()
    _lazy_jupyter_client()
    _light_message_dates()
    _patch_fd_capture()
    import logging

    logging.getLogger("traitlets").setLevel(logging.ERROR)  # "message signing is disabled": the link is private
    from ipykernel.kernelapp import IPKernelApp

    prepared: dict[str, Any] = {}
    if link_fd:
        link = _state.link = _accept_link(int(link_fd))
        prepared = link.read_prepared()
    private = os.path.dirname(path)  # fresh for each kernel, in a random place (see sandbox_init)
    os.chdir(private)  # IPython reads config files in the working directory: only this one is the kernel's own
    try:  # the supervisor reads it to interrupt this kernel
        with open(os.path.join(private, "pid"), "w") as f:
            f.write(str(os.getpid()))
    except OSError:
        pass
    # Earlier code in this sandbox could write files anywhere it can write: nothing
    # that runs at start-up may come from there. IPython's profile (startup
    # scripts, config) and matplotlib's config live in this kernel's fresh
    # directory; the working directory (where IPython also looks for config
    # files) is entered only once the kernel is initialised.
    os.environ["IPYTHONDIR"] = os.path.join(private, "ipython")
    os.environ["MPLCONFIGDIR"] = os.path.join(private, "matplotlib")
    _prepare_matplotlib()
    from traitlets.config import Config

    settings = Config()
    settings.IPKernelApp.connection_file = path
    settings.IPKernelApp.log_level = 40  # no startup warnings in the kernel's log: its tail explains crashes
    settings.HistoryManager.enabled = False
    settings.IPKernelApp.parent_handle = 0
    settings.InteractiveShell.colors = "NoColor"
    app = IPKernelApp.instance()
    # The settings as if given on the command line (they win over config files), without building the
    # command-line parser for every configurable class (a few ms of each start), unless there are arguments.
    app.cli_config = settings
    app.update_config(settings)
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        app.parse_command_line = lambda argv=None: None  # type: ignore[method-assign]  # nothing to parse
    app.initialize(args)
    # ipykernel sleeps 0.5 ms before each execute reply, for clients that take the reply as the end
    # of a request's output: the host waits for the request's idle status on iopub, which comes
    # after all of its output, so the sleep would only add to every run.
    app.kernel._execute_sleep = 0.0
    setup(app.kernel, app.shell)
    if "specs" in prepared:  # else the host installs them with a first request
        install(prepared["specs"])
        configure(output_limit=prepared.get("output_limit"), max_payload=prepared.get("max_payload"))
    with contextlib.suppress(OSError):
        os.chdir(workdir)
    fd = getattr(sys.stderr, "_original_stdstream_copy", None)
    with contextlib.suppress(OSError):
        os.write(fd if isinstance(fd, int) else 2, ("\n" + READY_MARKER + "\n").encode())
    # KERNEL_CODE turned the cyclic collector off for the boot. What the boot made lives as long as
    # the kernel: frozen, later collections never walk it again (they are shorter for the code's runs).
    gc.freeze()
    gc.enable()
    app.start()


def _accept_link(listener_fd: int) -> _CallLink:
    """Take the link program's stdin, stdout and stderr (see :func:`launch`); stderr becomes this
    process's (its crash reports reach the host). The connection stays open while this process
    lives: the link program, and with it the host's exec stream, ends when it does.

    On an engine on the host's machine, the host may connect to the listening socket itself
    first (``H``, from inside this container's network namespace: see ``sandbox._netns``): its
    frames then travel on that connection, and the exec stream carries only stderr. It always
    connects before it starts the link program, so its connection is the first one accepted.
    """
    import socket

    listener = socket.socket(fileno=listener_fd)
    direct = None
    try:
        while True:
            conn, _ = listener.accept()
            # One byte: the host's frames follow its "H" at once, and they are the link's, not this message's.
            message, fds, _, _ = socket.recv_fds(conn, 1, 3)
            if message == b"H" and not fds and direct is None:
                direct = conn
                continue
            break
    finally:
        listener.close()
    if len(fds) != 3:
        raise RuntimeError("the kernel's link did not hand over its streams")
    for fd in fds:
        os.set_inheritable(fd, False)  # subprocesses never see the link
    fd_in, fd_out, fd_err = fds
    os.dup2(fd_err, 2)
    os.close(fd_err)
    os.dup2(2, 1)  # a stray write to fd 1 lands in the kernel's log, never in the link
    conn.sendall(b"K")
    conn.set_inheritable(False)
    _state.relay = conn
    if direct is None:
        return _CallLink(fd_in, fd_out)
    os.close(fd_in)  # the exec stream's stdin and stdout carry nothing now
    os.close(fd_out)
    direct.set_inheritable(False)
    _state.direct = direct
    return _CallLink(direct.fileno(), direct.fileno())


def _lazy_jupyter_client() -> None:
    """Import ``jupyter_client``'s parts as they are used, not all of them with the package.

    Its ``__init__`` imports the clients, managers and provisioners that a kernel never uses
    (about a fifth of the kernel's start-up); ipykernel needs its session, its connection
    helpers and the name of the blocking client. Any other name loads the package as it is.
    """
    import importlib
    import importlib.util

    if "jupyter_client" in sys.modules:
        return
    spec = importlib.util.find_spec("jupyter_client")
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def __getattr__(name: str) -> Any:
        if name.startswith("__") and name != "__version__":
            # A probe (``getattr(module, "__x__", default)``: hasattr, pickle, the runtime's own look
            # for namespaces at every install) must not load the whole package: the package defines
            # no dunder but __version__, so the answer is no either way.
            raise AttributeError("module 'jupyter_client' has no attribute %r" % name)
        for part in ("connect", "_version", "blocking"):
            value = getattr(importlib.import_module("jupyter_client." + part), name, _MISSING)
            if value is not _MISSING:
                return value
        if module.__dict__.pop("__getattr__", None) is not None:
            loader.exec_module(module)  # the whole package, once
        try:
            return module.__dict__[name]
        except KeyError:
            raise AttributeError("module 'jupyter_client' has no attribute %r" % name) from None

    module.__dict__["__getattr__"] = __getattr__  # a module's __getattr__ (PEP 562)
    sys.modules["jupyter_client"] = module


_MISSING = object()


def _light_message_dates() -> None:
    """Import ``jupyter_client.jsonutil`` with the standard library's ISO 8601 parser for message dates.

    It parses the date in each message's header with ``dateutil.parser.isoparse``, and
    importing that parser (time zones, calendars, zoneinfo) is about 8 ms of every kernel's
    start. ``datetime.fromisoformat`` reads the dates Jupyter clients write (the host's
    included); anything else goes to dateutil's parser, imported then. The stand-ins are
    in ``sys.modules`` only while jsonutil is imported: code in the kernel gets dateutil.
    """
    names = ("dateutil.parser", "dateutil.tz")
    if "jupyter_client.jsonutil" in sys.modules or any(name in sys.modules for name in names):
        return
    import datetime
    import types

    def isoparse(text: str) -> datetime.datetime:
        try:
            return datetime.datetime.fromisoformat(text)
        except ValueError:
            from dateutil.parser import isoparse as parse

            return parse(text)

    def tzlocal() -> datetime.tzinfo:  # only for a date without a time zone
        from dateutil.tz import tzlocal as local

        return local()

    parser, tz = types.ModuleType(names[0]), types.ModuleType(names[1])
    parser.__dict__["isoparse"] = isoparse
    tz.__dict__["tzlocal"] = tzlocal
    stand_ins = {names[0]: parser, names[1]: tz}
    sys.modules.update(stand_ins)
    try:
        import jupyter_client.jsonutil  # noqa: F401
    except ImportError:  # a jupyter_client that wants more of dateutil: it gets all of it
        sys.modules.pop("jupyter_client.jsonutil", None)
    finally:
        for name, module in stand_ins.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
            package = sys.modules.get("dateutil")
            if package is not None and package.__dict__.get(name.rpartition(".")[2]) is module:
                delattr(package, name.rpartition(".")[2])


def _prepare_matplotlib() -> None:
    """Give matplotlib a writable config dir holding the font cache built into the image.

    Without it every new sandbox rebuilds the font cache (seconds) on the first plot.
    Its matplotlibrc saves figures cropped as the inline backend shows them
    (``bbox_inches="tight"``), and has every pyplot figure remember the PNG file
    it was last saved to (:func:`track_figure_saves`), so a plot both saved and
    shown is shown as that file, which the agent keeps once.
    """
    seed = os.environ.get("SANDBOX_MPL_SEED")
    target = os.environ.get("MPLCONFIGDIR")
    if seed and target and os.path.isdir(seed) and not os.path.exists(target):
        with contextlib.suppress(OSError):
            shutil.copytree(seed, target)
    if target:
        try:
            os.makedirs(target, exist_ok=True)
            with open(os.path.join(target, "matplotlibrc"), "w") as f:
                f.write("savefig.bbox: tight\nfigure.hooks: sandbox_runtime:track_figure_saves\n")
        except OSError:
            pass


def _patch_fd_capture() -> None:
    """Make the kernel's capture of file descriptors 1 and 2 survive any bytes.

    ipykernel forwards what subprocesses and C code write to fd 1/2 from a
    pipe, decoding each chunk on its own: older versions stop forwarding for
    good at the first byte that is not UTF-8 (and the pipe then fills up and
    blocks every writer), newer ones garble characters split between chunks.
    This version decodes incrementally and replaces undecodable bytes, does
    not copy everything to the kernel's own stdout/stderr (the container log),
    and recognises the marker :func:`_sync_fds` writes at the end of a cell.
    """
    import codecs

    try:
        from ipykernel.iostream import OutStream
    except Exception:
        return
    if not hasattr(OutStream, "_watch_pipe_fd"):
        return

    def _watch_pipe_fd(self: Any) -> None:
        fid = getattr(self, "_fid", None)
        if fid is None:
            return
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        pending = ""
        try:
            data = os.read(fid, 65536)
            while data and self._should_watch:
                text = pending + decoder.decode(data)
                pending = ""
                synced = _FD_SYNC in text
                if synced:
                    text = text.replace(_FD_SYNC, "")
                else:  # hold back a marker cut in two by the read
                    for i in range(min(len(_FD_SYNC) - 1, len(text)), 0, -1):
                        if text.endswith(_FD_SYNC[:i]):
                            text, pending = text[:-i], text[-i:]
                            break
                if text:
                    self.write(text)
                if synced:
                    _fd_synced(self).set()
                data = os.read(fid, 65536)
        except Exception:
            self._exc = sys.exc_info()

    OutStream._watch_pipe_fd = _watch_pipe_fd  # type: ignore[method-assign]  # replacing ipykernel's, on purpose


#: Written to fd 1 and 2 at the end of a cell; when the capture thread has seen it,
#: everything written before it (by subprocesses, C code) has been forwarded.
_FD_SYNC = "\x1esandbox-fd-sync\x1f"


def _fd_synced(stream: Any) -> threading.Event:
    event = stream.__dict__.get("_sandbox_fd_synced")
    if event is None:
        event = stream.__dict__.setdefault("_sandbox_fd_synced", threading.Event())
    return event


def _sync_fds(timeout: float = 2.0) -> None:
    """Wait until output written to fd 1/2 so far has reached the streams.

    Without it, what a subprocess printed at the end of a cell can arrive
    after the cell finished, and show up in the next cell's output. A stream
    with nothing on its way is not waited for (see :func:`_capture_idle`).
    """
    import time

    waiting = []
    for stream in _state.streams:
        thread = getattr(stream, "watch_fd_thread", None)
        fd = getattr(stream, "_original_stdstream_fd", None)  # ipykernel >= 6.2x
        if fd is None:
            name: Any = getattr(stream, "name", None)
            fd = {"stdout": 1, "stderr": 2}.get(name)
        if not getattr(stream, "_should_watch", False) or thread is None or not thread.is_alive() \
                or not isinstance(fd, int):
            continue
        if _capture_idle(stream, thread, getattr(stream, "_fid", None)):
            continue
        event = _fd_synced(stream)
        event.clear()
        try:
            os.write(fd, _FD_SYNC.encode())
        except OSError:
            continue
        waiting.append(event)
    deadline = time.monotonic() + timeout
    for event in waiting:
        event.wait(max(0.0, deadline - time.monotonic()))


def _capture_clocks() -> None:
    """The CPU clocks of the capture threads of fds 1 and 2, read as a cell starts (see _capture_idle)."""
    import time

    clocks = {}
    for stream in _state.streams:
        thread: Any = getattr(stream, "watch_fd_thread", None)  # None: AttributeError below
        with contextlib.suppress(AttributeError, TypeError, OSError):
            clocks[id(stream)] = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    _state.capture_clocks = clocks


def _capture_idle(stream: Any, thread: Any, fid: object) -> bool:
    """Whether nothing written to the capture pipe ``fid`` in this cell can still be on its way.

    True when the pipe is empty and then its capture thread has not run at all since the cell
    started (its CPU clock stands still): bytes written in the cell would either still be in
    the pipe or have been taken by the thread, which costs it CPU time. Checked in that order,
    without releasing the GIL: two system calls instead of a hand-off to the thread and back
    (about a tenth of a trivial run's time). Anything unexpected says False (the marker is used).
    """
    import time

    before = _state.capture_clocks.get(id(stream))
    if before is None or not isinstance(fid, int):
        return False
    try:
        import fcntl
        import termios

        pending = bytearray(4)
        fcntl.ioctl(fid, termios.FIONREAD, pending)
        if int.from_bytes(pending, sys.byteorder) != 0:
            return False
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident)) == before
    except (OSError, ValueError, AttributeError, TypeError):
        return False


def setup(kernel: Any, shell: Any) -> None:
    """Install the hooks; called once per kernel process."""
    _state.kernel = kernel
    _state.shell = shell
    shell.events.register("pre_run_cell", _before_cell)
    shell.events.register("post_run_cell", _after_cell)
    shell.user_ns["ToolError"] = ToolError
    shell.user_ns["HostFunctionError"] = ToolError
    shell.user_ns["install"] = install_packages
    shell.user_ns["PackageInstallError"] = PackageInstallError
    _route_pip(shell)
    # Figures under Agg are shown when the cell ends (_show_headless_figures): plt.show()'s warning is noise.
    import warnings

    warnings.filterwarnings("ignore", message=r".*is non-interactive, and thus cannot be shown")
    _install_traceback_filter(shell)
    _install_output_caps(shell)
    _show_saved_figures()
    _state.streams = [stream for stream in (sys.stdout, sys.stderr) if hasattr(stream, "write")]
    _state.limiters = [_OutputLimiter(stream) for stream in _state.streams]


def configure(output_limit: int | None = None, max_payload: int | None = None) -> None:
    """Settings from the host: ``output_limit`` caps each stream per cell and each
    text of a rich output (characters); ``max_payload`` caps one call's encoded
    arguments (bytes; the host enforces it too)."""
    _state.output_limit = output_limit
    if max_payload:
        _state.max_payload = int(max_payload)
    for limiter in _state.limiters:
        limiter.limit = output_limit


def _before_cell(info: object = None) -> None:
    _announce_start()
    if not _state.base_threads:  # before the first code runs, every thread is the kernel's own
        _state.base_threads = {t.ident for t in threading.enumerate()}
    _capture_clocks()
    builtins.input = _no_input
    getpass.getpass = _no_input
    for limiter in _state.limiters:
        limiter.reset()
    _state.rich_cut = 0


def _announce_start() -> None:
    """Tell the host, before the code of a run starts, that it starts: the host then never runs
    that code again on another kernel, even if it kills this one at once. Synchronous either way:

    * in a container, a note of the run's id in the memory file the supervisor gave this kernel
      (it reads the note when the kernel ends and passes it on): no process is woken per run;
    * else an ``S`` frame on the link (see sandbox_wire).
    """
    if _state.started_fd is not None:
        try:
            parent = _state.kernel.get_parent("shell") or {}
            msg_id = parent.get("header", {}).get("msg_id", "")
            os.pwrite(_state.started_fd, msg_id.encode("ascii", "replace")[:63] + b"\0", 0)
            return
        except Exception:
            pass
    if _state.link is not None:
        _state.link.announce_start()


def _after_cell(result: object = None) -> None:
    with contextlib.suppress(Exception):
        _show_headless_figures()
    with contextlib.suppress(Exception):
        _sync_fds()
    cut: dict[str, int] = {}
    for limiter in _state.limiters:
        dropped = limiter.finish()
        if dropped:
            cut[limiter.name] = dropped
    if _state.rich_cut:
        cut["outputs"] = _state.rich_cut
        _state.rich_cut = 0
    if cut:
        try:
            publish = _state.publish_raw or _state.shell.display_pub.publish
            publish(data={OUTPUT_CUT_MIME: cut}, metadata={})
        except Exception:
            pass
    _announce_end()


def _announce_end() -> None:
    """Tell the host that the code of this run has ended, on the call stream (sandbox_wire ``E``):
    what the code wrote there is then read before the host takes the run as over."""
    if _state.link is None:
        return
    try:
        parent = _state.kernel.get_parent("shell") or {}
        msg_id = str(parent.get("header", {}).get("msg_id", ""))
    except Exception:
        return
    _state.link.announce_end(msg_id.encode("ascii", "replace")[:63])


# --- figures under a non-interactive backend ------------------------------------------

#: matplotlib backends that only write files. Under them ``plt.show()`` only warns, and a figure
#: would never reach the output (Jupyter loses it too); ``matplotlib.use("Agg")`` is a common idiom.
HEADLESS_BACKENDS = frozenset({"agg", "cairo", "pdf", "pgf", "ps", "svg", "template"})
#: Figures shown per cell this way; more stay open (and are counted in a line on stderr).
MAX_HEADLESS_FIGURES = 20


def track_figure_saves(figure: Any) -> None:
    """A matplotlib ``figure.hooks`` hook: figures remember the PNG file they were last saved to.

    ``savefig("chart.png", dpi=150)`` then ``plt.show()`` would otherwise show a second
    rendering (another size, other bytes) beside the file, and the host would keep both.
    ``Figure.savefig`` and ``Figure.draw`` are wrapped once (in the class: nothing is added
    to what a figure pickles but the note); the note is dropped as soon as anything in the
    figure changes other than by drawing (its stale callback), and :func:`_saved_png` reads
    it when the figure is shown.
    """
    cls = type(figure)
    if getattr(cls.savefig, "_codeact_tracks", False):
        return
    original = cls.savefig

    def savefig(self: Any, fname: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, fname, *args, **kwargs)
        with contextlib.suppress(Exception):
            _note_saved_png(self, fname, kwargs.get("format"))
        return result

    draw = cls.draw

    def drawing(self: Any, *args: Any, **kwargs: Any) -> Any:
        # Drawing marks parts stale on its way (layout, ticks): that is not a change of the picture.
        vars(self)["_codeact_drawing"] = vars(self).get("_codeact_drawing", 0) + 1
        try:
            return draw(self, *args, **kwargs)
        finally:
            vars(self)["_codeact_drawing"] -= 1

    savefig._codeact_tracks = True  # type: ignore[attr-defined]
    savefig.__doc__, drawing.__doc__ = original.__doc__, draw.__doc__
    cls.savefig, cls.draw = savefig, drawing


def _note_saved_png(figure: Any, fname: Any, fmt: Any) -> None:
    vars(figure).pop("_codeact_saved_png", None)
    if not isinstance(fname, (str, os.PathLike)):
        return
    path = os.path.abspath(os.fspath(fname))
    if (fmt or os.path.splitext(path)[1].lstrip(".") or "png").lower() != "png" or not os.path.isfile(path):
        return
    callback = figure.stale_callback
    if not getattr(callback, "_codeact_watch", False):  # any change to the figure from now on drops the note
        def on_stale(artist: Any, value: Any) -> None:
            if not vars(figure).get("_codeact_drawing"):
                vars(figure).pop("_codeact_saved_png", None)
            if callback is not None:
                callback(artist, value)

        on_stale._codeact_watch = True  # type: ignore[attr-defined]
        figure.stale_callback = on_stale
    st = os.stat(path)
    vars(figure)["_codeact_saved_png"] = (path, st.st_size, st.st_mtime_ns)


def _saved_png(figure: Any) -> bytes | None:
    """The PNG file ``figure`` was saved to, unchanged since (figure and file), or None."""
    saved = vars(figure).get("_codeact_saved_png")
    if not saved:
        return None
    path, size, mtime = saved
    try:
        st = os.stat(path)
        if (st.st_size, st.st_mtime_ns) != (size, mtime) or size > MAX_RICH_VALUE // 2:
            return None
        with open(path, "rb") as f:
            data = f.read(size + 1)
    except OSError:
        return None
    return data if len(data) == size and data.startswith(b"\x89PNG\r\n\x1a\n") else None


def _show_saved_figures() -> None:
    """Figures the inline backend shows come from the PNG file they were saved to, when there is one."""
    try:
        from IPython.core import pylabtools
    except ImportError:
        return
    original = pylabtools.print_figure

    def print_figure(fig: Any, fmt: str = "png", bbox_inches: Any = "tight", base64: bool = False,
                     **kwargs: Any) -> Any:
        data = _saved_png(fig) if fmt == "png" and not kwargs else None
        if data is None:
            return original(fig, fmt, bbox_inches, base64, **kwargs)
        if base64:
            from base64 import b64encode

            return b64encode(data).decode("ascii")
        return data

    pylabtools.print_figure = print_figure  # before the inline backend binds it (on the first pyplot import)


def _show_headless_figures() -> None:
    """Show the figures a cell left open under a headless backend, as the inline backend would.

    The inline backend shows every open figure when a cell ends and closes it; a cell that
    switched to Agg gets the same: each open figure as a PNG display output (cropped like the
    inline backend's), then closed.
    """
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    backend = str(plt.get_backend()).lower()
    if backend not in HEADLESS_BACKENDS:
        return  # the inline backend (or an unknown one) shows its own figures
    import base64
    import io

    numbers = list(plt.get_fignums())
    for number in numbers[:MAX_HEADLESS_FIGURES]:
        figure = plt.figure(number)
        png = _saved_png(figure)
        if png is None:
            buffer = io.BytesIO()
            try:
                figure.savefig(buffer, format="png", bbox_inches="tight")
            except Exception as exc:  # a figure that cannot draw is said, the others are still shown
                sys.stderr.write("figure %d could not be drawn: %s\n" % (number, type(exc).__name__))
                continue
            png = buffer.getvalue()
        data = {"image/png": base64.b64encode(png).decode("ascii"),
                "text/plain": "<Figure %d>" % number}
        _state.shell.display_pub.publish(data=data, metadata={})
    if len(numbers) > MAX_HEADLESS_FIGURES:
        sys.stderr.write("%d more open figures were not shown\n" % (len(numbers) - MAX_HEADLESS_FIGURES))
    plt.close("all")


# --- rich output cap ---------------------------------------------------------------

#: Largest single non-text value (an image, as base64) a rich output may carry.
MAX_RICH_VALUE = 20_000_000


def _cap_bundle(data: Any) -> Any:
    """A MIME bundle within the limits: long text/plain keeps head and tail, other
    over-long values are dropped (text/plain stays to describe the object)."""
    limit = _state.output_limit
    if limit is None or not isinstance(data, dict):
        return data
    out = {}
    cut = False
    for mime, value in data.items():
        size = len(value) if isinstance(value, (str, bytes)) else 0
        if mime == "text/plain" and isinstance(value, str) and size > limit:
            half = max(limit // 2, 1)
            out[mime] = value[:half] + "\n[... %d characters cut ...]\n" % (size - 2 * half) + value[-half:]
            cut = True
        elif (mime.startswith("text/") and size > limit) or size > MAX_RICH_VALUE:
            cut = True
        else:
            out[mime] = value
    if not cut:
        return data
    _state.rich_cut += 1
    if not out:
        out = {"text/plain": "[an output too large for the sandbox was dropped]"}
    return out


def _install_output_caps(shell: Any) -> None:
    pub = getattr(shell, "display_pub", None)
    if pub is not None and hasattr(pub, "publish"):
        original_publish = pub.publish
        _state.publish_raw = original_publish

        def publish(data: Any, *args: Any, **kwargs: Any) -> Any:
            return original_publish(_cap_bundle(data), *args, **kwargs)

        pub.publish = publish
    hook = getattr(shell, "displayhook", None)
    if hook is not None and hasattr(hook, "write_format_data"):
        original_write = hook.write_format_data

        def write_format_data(format_dict: Any, *args: Any, **kwargs: Any) -> Any:
            return original_write(_cap_bundle(format_dict), *args, **kwargs)

        hook.write_format_data = write_format_data


# --- output cap ------------------------------------------------------------------


class _OutputLimiter:
    """Caps what one stream sends to the host per cell: the first ``limit``
    characters go out as written, then only the last ``limit`` are kept and
    sent when the cell ends. The host is told how many were dropped.
    """

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.name = getattr(stream, "name", "stdout")
        self.write_through = stream.write
        self.limit: int | None = None
        self.lock = threading.Lock()
        self.reset()
        with contextlib.suppress(AttributeError, TypeError):
            stream.write = self.write

    def reset(self) -> None:
        with self.lock:
            self.sent = 0
            self.tail: list[str] = []
            self.tail_len = 0
            self.dropped = 0

    def write(self, text: Any) -> Any:
        limit = self.limit
        if limit is None or not isinstance(text, str):
            return self.write_through(text)
        n = len(text)
        with self.lock:
            head = ""
            room = limit - self.sent
            if room > 0:
                head = text if n <= room else text[:room]
                self.sent += len(head)
            rest = n - len(head)
            if rest > 0:
                keep = min(rest, limit)
                self.tail.append(text[n - keep:])  # never copies more than ``limit``
                self.tail_len += keep
                self.dropped += rest - keep
                if self.tail_len > 2 * limit:
                    joined = "".join(self.tail)
                    self.dropped += len(joined) - limit
                    self.tail = [joined[-limit:]]
                    self.tail_len = limit
        if head:
            self.write_through(head)
        return n

    def finish(self) -> int:
        """Send the kept tail; return how many characters were dropped this cell."""
        with self.lock:
            tail = "".join(self.tail)
            dropped = self.dropped
            if self.limit is not None and len(tail) > self.limit:
                dropped += len(tail) - self.limit
                tail = tail[-self.limit:]
            self.tail, self.tail_len, self.dropped = [], 0, 0
            self.sent = 0
        if tail:
            with contextlib.suppress(Exception):
                self.write_through(tail)
        return dropped


# --- tracebacks ------------------------------------------------------------------


def _internal_prefixes() -> tuple[str, ...]:
    prefixes = []
    for name in ("ipykernel", "zmq", "jupyter_client", "tornado"):
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path:
            prefixes.append(os.path.dirname(os.path.abspath(path)) + os.sep)
    return tuple(prefixes)


_RUNTIME_FILES = ("sandbox_runtime.py", "sandbox_codec.py", "sandbox_wire.py", "sandbox_init.py",
                  "sandbox_codec_limits.py", "sandbox_codec_values.py", "sandbox_codec_encode.py",
                  "sandbox_codec_decode.py")


def _is_internal(frame: types.FrameType, prefixes: tuple[str, ...]) -> bool:
    filename = frame.f_code.co_filename
    if filename == __file__ or os.path.basename(filename) in _RUNTIME_FILES:
        return True
    return bool(prefixes) and os.path.abspath(filename).startswith(prefixes)


def _strip_tb(tb: types.TracebackType | None, prefixes: tuple[str, ...]) -> types.TracebackType | None:
    """The traceback chain without frames of this runtime and the kernel machinery."""
    import types

    entries = []
    while tb is not None:
        if not _is_internal(tb.tb_frame, prefixes):
            entries.append(tb)
        tb = tb.tb_next
    new = None
    for entry in reversed(entries):
        new = types.TracebackType(new, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return new


def _install_traceback_filter(shell: Any) -> None:
    original = shell.showtraceback

    def showtraceback(exc_tuple: Any = None, *args: Any, **kwargs: Any) -> Any:
        try:
            etype, value, tb = exc_tuple if exc_tuple is not None else sys.exc_info()
            if etype is not None and value is not None and tb is not None:
                prefixes = _internal_prefixes()
                stripped = _strip_tb(tb, prefixes)
                if stripped is not None:
                    seen = set()
                    chained = value
                    while chained is not None and id(chained) not in seen:
                        seen.add(id(chained))
                        if chained is not value and chained.__traceback__ is not None:
                            inner = _strip_tb(chained.__traceback__, prefixes)
                            if inner is not None:
                                chained.__traceback__ = inner
                        chained = chained.__cause__ or chained.__context__
                    value.__traceback__ = stripped
                    exc_tuple = (etype, value, stripped)
        except Exception:
            pass
        return original(exc_tuple, *args, **kwargs)

    shell.showtraceback = showtraceback


def _no_input(prompt: object = "", *args: Any, **kwargs: Any) -> NoReturn:
    raise RuntimeError(
        "input() is not available in the sandbox: no one is there to type. "
        "Put the data in a variable or a file, or call a host function."
    )


# --- host-function stubs -------------------------------------------------------------


class _Shown:
    """An annotation or default shown in signatures exactly as the host wrote it."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


_KINDS = {
    "positional_only": inspect.Parameter.POSITIONAL_ONLY,
    "positional_or_keyword": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "var_positional": inspect.Parameter.VAR_POSITIONAL,
    "keyword_only": inspect.Parameter.KEYWORD_ONLY,
    "var_keyword": inspect.Parameter.VAR_KEYWORD,
}


def _signature(spec: dict[str, Any]) -> inspect.Signature:
    params = []
    for p in spec["parameters"]:
        default: object = inspect.Parameter.empty
        if p["has_default"]:
            # Only the shown text travels (a literal, or "..."): the host fills in the value.
            default = _Shown(p.get("default_text") or "...")
        annotation: object = _Shown(p["annotation"]) if p.get("annotation") else inspect.Parameter.empty
        params.append(inspect.Parameter(p["name"], _KINDS[p["kind"]], default=default, annotation=annotation))
    returns: object = _Shown(spec["returns"]) if spec.get("returns") else inspect.Signature.empty
    return inspect.Signature(params, return_annotation=returns)


def _bind(name: str, signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    try:
        signature.bind(*args, **kwargs)  # wrong arguments fail here, like a real call
    except TypeError as exc:
        raise TypeError("%s(): %s" % (name, exc)) from None


def _make_stub(spec: dict[str, Any]) -> Callable[..., Any]:
    name = spec["name"]
    signature = _signature(spec)

    stub: Any  # a function, given the attributes below
    if spec.get("is_async"):
        async def stub(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            _bind(name, signature, args, kwargs)
            return await call_async(name, args, kwargs)
    else:
        def stub(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # IPython leaves this frame out of tracebacks
            _bind(name, signature, args, kwargs)
            return call(name, args, kwargs)

    local = spec.get("local_name") or name
    stub.__name__ = stub.__qualname__ = local
    stub.__doc__ = spec.get("doc") or None
    stub.__signature__ = signature
    stub.__module__ = spec.get("namespace") or "host_functions"
    stub.__wrapped_host_function__ = True
    if spec.get("wrapper"):
        # The host gave the stub a face written in Python (it prints, or turns objects into
        # names, before calling the host); it still sends only data.
        scope = {"__name__": stub.__module__, "__host__": stub}
        exec(compile(spec["wrapper"], "<%s>" % local, "exec"), scope)
        face = scope.get(local, scope.get(name))
        if face is not None:
            with contextlib.suppress(AttributeError, TypeError):
                face.__wrapped_host_function__ = True
            return face
    return stub


def install(specs_json: str) -> None:
    """Create or replace stubs in the user namespace and in their namespaces; remove stubs no longer offered."""
    specs = json.loads(specs_json)
    user_ns = _state.shell.user_ns
    wanted = {s["name"] for s in specs}
    for name in list(_state.stubs):
        if name not in wanted:
            if user_ns.get(name) is _state.stubs[name]:
                del user_ns[name]
            del _state.stubs[name]
    _clear_namespaces()
    for spec in specs:
        name = spec["name"]
        previous = _state.stubs.get(name)
        stub = _make_stub(spec)
        _state.stubs[name] = stub
        if spec.get("namespace"):
            _place(spec["namespace"], spec.get("local_name") or name, stub)
        if name.startswith("__sandbox_"):  # the runtime's own host functions (install) stay hidden
            continue
        if spec.get("exported", True):
            user_ns[name] = stub
        elif previous is not None and user_ns.get(name) is previous:
            del user_ns[name]  # no longer a global
    for top in {s["namespace"].split(".")[0] for s in specs if s.get("namespace")}:
        module = sys.modules.get(top)
        if getattr(module, "__sandbox_namespace__", False) and (
                top not in user_ns or getattr(user_ns[top], "__sandbox_namespace__", False)):
            user_ns[top] = module  # as after `import tools`, unless the code took the name for itself


# --- namespaces: host functions as importable modules (``from tools.github import create_issue``) ---


def _namespace_module(path: str) -> types.ModuleType:
    """The module object for a dotted ``path``, created (with its parents) as a package when missing."""
    import importlib.machinery
    import types

    module = sys.modules.get(path)
    if module is not None and getattr(module, "__sandbox_namespace__", False):
        return module
    module = types.ModuleType(path, "Functions offered by the host (%s)." % path)
    module.__path__ = []  # a package: submodules may hang below it
    module.__spec__ = importlib.machinery.ModuleSpec(path, None, is_package=True)

    def __dir__() -> list[str]:
        return sorted(n for n in vars(module) if not n.startswith("_"))

    # A module's own names (its __dir__ too: PEP 562), set in its namespace.
    module.__dict__.update(__sandbox_namespace__=True, __all__=[], __dir__=__dir__)
    sys.modules[path] = module
    parent, _, child = path.rpartition(".")
    if parent:
        setattr(_namespace_module(parent), child, module)
    return module


def _place(path: str, local_name: str, stub: Callable[..., Any]) -> None:
    module = _namespace_module(path)
    setattr(module, local_name, stub)
    if local_name not in module.__all__:
        module.__all__.append(local_name)
    _state.placed.append((path, local_name, stub))


def _clear_namespaces() -> None:
    """Take out every stub placed before; drop namespace modules left empty (install puts back the rest)."""
    for path, local_name, stub in _state.placed:
        module = sys.modules.get(path)
        if module is not None and getattr(module, "__sandbox_namespace__", False) \
                and getattr(module, local_name, None) is stub:
            delattr(module, local_name)
            if local_name in module.__all__:
                module.__all__.remove(local_name)
    _state.placed = []
    for path in sorted((p for p, m in list(sys.modules.items()) if getattr(m, "__sandbox_namespace__", False)),
                       key=lambda p: -p.count(".")):
        module = sys.modules[path]
        if not any(not n.startswith("_") for n in vars(module)):
            del sys.modules[path]
            parent, _, child = path.rpartition(".")
            if parent and getattr(sys.modules.get(parent), child, None) is module:
                delattr(sys.modules[parent], child)


def _encode_call(name: str, args: Iterable[Any], kwargs: dict[str, Any]) -> list[bytes | memoryview]:
    try:
        return sandbox_codec.encode((tuple(args), dict(kwargs)), max_bytes=_state.max_payload)
    except sandbox_codec.CodecError as exc:
        raise ValueError("%s(): the arguments cannot be sent to the host: %s" % (name, exc)) from None


def _result(name: str, reply: tuple[int, bytes]) -> Any:
    status, payload = reply
    if status == wire.REPLY_VALUE:
        return sandbox_codec.decode(payload)
    raise _host_error(sandbox_codec.decode_exception(sandbox_codec.decode(payload)))


def _host_error(exc: BaseException) -> BaseException:
    """A builtin exception from the host is also a :class:`ToolError` (see ``sandbox_codec.as_tool_error``)."""
    return sandbox_codec.as_tool_error(exc)


def call(name: str, args: Iterable[Any], kwargs: dict[str, Any]) -> Any:
    """Call host function ``name``; returns its result or raises its error."""
    __tracebackhide__ = True
    link = _state.link
    if link is None:
        raise RuntimeError("host functions need the sandbox's link to the host")
    chunks = _encode_call(name, args, kwargs)
    call_id, waiter = link.new_call()
    try:
        link.send(wire.KIND_CALL, *wire.pack_call(call_id, name, chunks))
        reply = link.wait(call_id, waiter)
    except BaseException:  # interrupted: the host must not answer a caller who left
        if link.forget(call_id) is not None:
            with contextlib.suppress(OSError):
                link.send(wire.KIND_ABANDON, wire.pack_u32(call_id))
        raise
    return _result(name, reply)


async def call_async(name: str, args: Iterable[Any], kwargs: dict[str, Any]) -> Any:
    """Awaitable :func:`call`: the event loop keeps running while the host works (on a worker thread)."""
    import asyncio
    import functools

    __tracebackhide__ = True
    return await asyncio.get_running_loop().run_in_executor(None, functools.partial(call, name, args, kwargs))


# --- packages: resolved, fetched and copied in by the host ---------------------------

#: The host function behind install() (must match sandbox/packages.py).
INSTALL_FUNCTION = "__sandbox_install__"


class PackageInstallError(Exception):
    """The host did not install a package. ``kind`` says why: ``not_found``, ``no_wheel`` (only a source
    distribution, or nothing for this platform), ``policy`` (the rule is in the message), ``too_large``,
    ``conflict`` (``details`` lists the conflicting requirements), ``denied``, ``unreachable``, ``invalid``,
    ``disabled``. Nothing of a failed install is importable."""

    def __init__(self, kind: str, message: str, details: Iterable[Any] = ()) -> None:
        super().__init__(message)
        self.kind = kind
        self.details = list(details)


def use_packages(paths: Iterable[object]) -> None:
    """Make packages the host copied into ``paths`` importable now (their ``.pth`` files included).

    The directories come after the image's own site-packages, so an install
    never shadows what the kernel itself runs on.
    """
    import importlib
    import site

    for path in paths:
        if isinstance(path, str) and path and path not in sys.path and os.path.isdir(path):
            site.addsitedir(path)
    importlib.invalidate_caches()


def install_packages(*requirements: str | list[str] | tuple[str, ...], quiet: bool = False) -> None:
    """Install Python packages into this session: ``install("scikit-learn", "statsmodels>=0.14")``.

    The sandbox has no network: the host resolves the request for this
    sandbox's Python, downloads binary wheels (from its cache when it has
    them) and copies them in; ``import`` works right after, no restart.
    ``%pip install x`` and ``!pip install x`` do the same. Raises
    :class:`PackageInstallError` saying why when it cannot.
    """
    __tracebackhide__ = True
    wanted: list[str] = []
    for r in requirements:
        wanted.extend(r if isinstance(r, (list, tuple)) else [r])
    if not wanted:
        raise PackageInstallError("invalid", "name at least one package, e.g. install('scikit-learn')")
    if INSTALL_FUNCTION not in _state.stubs:
        raise PackageInstallError("disabled", "this sandbox cannot install packages (its host offers no installer)")
    reply = call(INSTALL_FUNCTION, (list(wanted),), {})
    if not isinstance(reply, dict) or not reply.get("ok"):
        reply = reply if isinstance(reply, dict) else {}
        raise PackageInstallError(str(reply.get("kind") or "internal"),
                                  str(reply.get("message") or "the host could not install the packages"),
                                  reply.get("details") or ())
    if reply.get("path"):
        use_packages([reply["path"]])
    if not quiet:
        print(_install_summary(reply))


def _install_summary(reply: dict[str, Any]) -> str:
    new = [p for p in reply.get("packages") or [] if isinstance(p, list) and len(p) == 3]
    present = [p for p in reply.get("present") or [] if isinstance(p, list) and len(p) == 2]
    lines = []
    if new:
        size = sum(p[2] for p in new if isinstance(p[2], int))
        lines.append("Installed %s (%.1f MB) in %.1f s%s." % (
            ", ".join("%s %s" % (p[0], p[1]) for p in new), size / 1e6, float(reply.get("seconds") or 0),
            " (from the host's cache)" if reply.get("cached") else ""))
    if present:
        lines.append("Already installed: %s." % ", ".join("%s %s" % (p[0], p[1]) for p in present))
    return "\n".join(lines) or "Nothing to install."


#: pip options that take a value (skipped with it), and options that choose sources (refused: the host chooses).
_PIP_VALUE_OPTIONS = {"--progress-bar", "--upgrade-strategy", "--root-user-action", "-t", "--target", "--prefix",
                      "--root", "--src", "--cache-dir", "--log", "--timeout", "--retries", "--python-version",
                      "--platform", "--abi", "--implementation", "--only-binary", "--no-binary", "--proxy",
                      "-c", "--constraint"}
_PIP_SOURCE_OPTIONS = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--trusted-host", "--no-index",
                       "-e", "--editable"}


def _pip_install_arguments(words: list[str]) -> tuple[list[str], bool]:
    """(requirements, quiet) from the words after ``pip install``."""
    reqs: list[str] = []
    quiet, i = False, 0
    while i < len(words):
        word = words[i]
        option = word.split("=", 1)[0]
        if option in _PIP_SOURCE_OPTIONS:
            raise PackageInstallError("policy", "%s is not available in the sandbox: the host chooses where "
                                                "packages come from; name the packages only" % option)
        if word in ("-r", "--requirement") or option == "--requirement":
            path = word.split("=", 1)[1] if "=" in word else (words[i + 1] if i + 1 < len(words) else "")
            i += 0 if "=" in word else 1
            with open(path, encoding="utf-8") as f:
                for line in f:
                    line = line.split("#", 1)[0].strip()
                    if line and not line.startswith("-"):
                        reqs.append(line)
        elif word.startswith("-q") and set(word[1:]) == {"q"} or word == "--quiet":
            quiet = True
        elif option in _PIP_VALUE_OPTIONS and "=" not in word:
            i += 1
        elif not word.startswith("-"):
            reqs.append(word)
        i += 1
    return reqs, quiet


_PIP_COMMAND: re.Pattern[str] | None = None
_REDIRECTS = (">", ">>", "&>", ">&", "<")


def _pip_words(command: str) -> list[str] | None:
    """The words after ``install`` when ``command`` is a plain ``pip install`` (any pip, python -m pip); else None.

    Output redirections are dropped (the summary is printed either way); any
    other shell operator means it is not a plain install and runs as before.
    """
    import re
    import shlex

    global _PIP_COMMAND
    if _PIP_COMMAND is None:
        _PIP_COMMAND = re.compile(r"^(?:\S*/)?pip[0-9.]*$|^(?:\S*/)?python[0-9.]*$")
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return None
    words: list[str] = []
    skip = False
    for i, token in enumerate(tokens):
        if skip:
            skip = False
            continue
        if token and set(token) <= set("();<>|&"):
            if token not in _REDIRECTS:
                return None
            if words and words[-1] in ("1", "2") and i + 1 < len(tokens):
                words.pop()  # the descriptor of "2>&1", "1> file"
            skip = True
            continue
        if "`" in token or "$(" in token:
            return None
        words.append(token)
    if len(words) >= 3 and _PIP_COMMAND.match(words[0]) and words[0].rsplit("/", 1)[-1].startswith("python") \
            and words[1] == "-m" and words[2] == "pip":
        words = words[2:]
    if len(words) < 2 or not _PIP_COMMAND.match(words[0]) or not words[0].rsplit("/", 1)[-1].startswith("pip") \
            or words[1] != "install":
        return None
    return words[2:]


def _route_pip(shell: Any) -> None:
    """``%pip install`` and ``!pip install`` install through the host; every other command runs as before."""
    original_system = shell.system
    original_getoutput = shell.getoutput
    original_pip = shell.find_line_magic("pip")

    def system(cmd: str, *args: Any, **kwargs: Any) -> Any:
        words = _pip_words(shell.var_expand(cmd, depth=1))
        if words is None:
            return original_system(cmd, *args, **kwargs)
        reqs, quiet = _pip_install_arguments(words)
        install_packages(*reqs, quiet=quiet)

    def getoutput(cmd: str, *args: Any, **kwargs: Any) -> Any:
        words = _pip_words(shell.var_expand(cmd, depth=1))
        if words is None:
            return original_getoutput(cmd, *args, **kwargs)
        import io

        from IPython.utils.text import SList

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            install_packages(*_pip_install_arguments(words)[0])
        return SList(out.getvalue().splitlines())

    def pip(line: str) -> Any:
        """Install packages through the host (``%pip install x``); other pip commands run as usual."""
        words = _pip_words("pip " + line)
        if words is None:
            if original_pip is None:
                raise PackageInstallError("invalid", "only `%pip install NAME ...` is available in the sandbox")
            return original_pip(line)
        reqs, quiet = _pip_install_arguments(words)
        install_packages(*reqs, quiet=quiet)

    shell.system = system
    shell.getoutput = getoutput
    shell.register_magic_function(pip, "line", "pip")


# --- host bookkeeping ------------------------------------------------------------


def list_files(root: str = ".") -> str:
    """JSON list of [relative path, size, mtime] for every regular file under ``root``."""
    import stat

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
            if stat.S_ISREG(st.st_mode):
                out.append([os.path.relpath(full, root).replace(os.sep, "/"), st.st_size, st.st_mtime])
    return json.dumps(out)


def after_interrupt() -> int:
    """After a timed-out cell: kill stray processes; return how many threads the code left running.

    Threads cannot be killed; the host restarts the kernel when any are left
    (they would keep running, and printing, into later runs).
    """
    kill_strays()
    return sum(1 for t in threading.enumerate() if t.ident not in _state.base_threads and t.is_alive())


def kill_strays(whole_namespace: bool | None = None) -> int:
    """Kill processes the sandboxed code left behind (e.g. a fork bomb).

    In a container (the supervisor is the namespace's init) every process we
    may signal but ourselves and the supervisor goes. On the host, only
    processes in the kernel's session.
    """
    if whole_namespace is None:
        whole_namespace = _state.in_container
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
