"""The sandbox's supervisor: the container's first process, its lifeline to the host, the kernel's relay.

Started as ``python3 -I sandbox_init.py``: in a container it is PID 1 (the
init of the container's PID namespace); on the host (the local backend) it
is a plain subprocess. Its stdin and stdout are the container's attach
stream (or pipes), spoken in :mod:`sandbox_wire` frames.

The kernel is started next to it by the host (``docker exec``, or a local
subprocess), with its own stream for host-function calls. The supervisor:

* prepares each kernel (host ``K``): kills the previous kernel and every
  process the code left, creates a private directory with the kernel's
  connection file, and answers ``P``. In a container it also starts the
  kernel itself, and the first one at once, as the container starts (before
  the host asks): the kernel boots while the engine finishes starting the
  container and the host starts the kernel's ``docker exec``. That exec runs
  a thin link (see ``sandbox.container.LINK_CODE``) that hands the exec's
  stdin, stdout and stderr to the kernel over a socket in the kernel's
  directory, then waits for the kernel to end: the kernel's host-function
  calls still travel on that exec stream, straight between it and the host;
* relays the kernel's Jupyter messages from its own process, so the
  kernel's interpreter never spends its time (or its GIL) on relaying:
  host ``J`` (shell) frames to the kernel's shell socket, the kernel's shell
  replies and iopub messages back as ``J`` frames; ``H`` once a kernel's
  iopub messages reach the host (its pid, and whether it is watched);
* interrupts the kernel in a container (host ``X``: SIGINT);
* in a container, watches the kernel process from the moment it is ready:
  when it ends, however it ends (an exit, a signal, the out-of-memory
  killer, a crash in C code), kills what it left and tells the host at once
  (``D``: its pid and whether the container's memory cgroup counted an
  out-of-memory kill). The kernel runs beside this process (``docker
  exec``), not under it, so the end is seen through a pidfd, not SIGCHLD;
* when its stream closes — the host closed the session or died, however it
  died — kills everything and exits, and with it the container. The code
  cannot stop that: it cannot signal this process (every signal it may send
  is ignored here, and the init of a PID namespace drops those it has no
  handler for), nor trace it, read its memory or open its file descriptors
  (this process is not dumpable). The host stops it with SIGKILL, which the
  kernel delivers to a namespace's init from outside it.

Runs with ``-I``: nothing is imported from the environment, the working
directory or user site directories, which the kernel can write.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

#: How a kernel is started (must match sandbox/kernel.py KERNEL_CODE): no '' or '.' on sys.path, no cyclic
#: garbage collection while it boots.
KERNEL_CODE = ("import gc; gc.disable(); import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
               "import sandbox_runtime; sandbox_runtime.launch()")
#: The kernel's end of its link's listening socket, and of the file where it notes each run's start
#: (see spawn_kernel).
LINK_FD = 3
STARTED_FD = 4
#: Bytes of that note read (a Jupyter msg_id is 32).
STARTED_MAX = 64


class Spawned:
    """A kernel this process started: its directory, pid, the packages it was given, how it ended."""

    def __init__(self, directory: str, pid: int, packages: str, started: int) -> None:
        self.directory = directory
        self.pid = pid
        self.packages = packages
        self.code: int | None = None  # os.waitstatus_to_exitcode() once reaped
        self.started = started  # this process's fd of the kernel's note of the run it started

    def started_run(self) -> str | None:
        """The id of the last run the kernel said it started (its note: a hint, see sandbox_runtime)."""
        try:
            raw = os.pread(self.started, STARTED_MAX, 0)
        except OSError:
            return None
        note = raw.split(b"\0", 1)[0].decode("ascii", "replace")
        return note if note.isalnum() else None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.started)


def make_directory(parent: str) -> str:
    """A fresh directory for a kernel, with its connection file.

    The name is random: the code cannot prepare a trap under the name the next kernel will use.
    Its group (the sandbox's) may enter it: the kernel's link program runs as another user of
    that group (see spawn_kernel).
    """
    while True:
        directory = os.path.join(parent, "kernel-" + os.urandom(8).hex())
        try:
            os.mkdir(directory, 0o700)
            break
        except FileExistsError:
            continue
    os.chmod(directory, 0o710)
    connection = {
        "transport": "ipc", "ip": os.path.join(directory, "k"), "shell_port": 1, "iopub_port": 2,
        "stdin_port": 3, "control_port": 4, "hb_port": 5, "key": "", "signature_scheme": "hmac-sha256",
        "kernel_name": "python3",
    }
    with open(os.path.join(directory, "kernel.json"), "w") as f:
        json.dump(connection, f)
    return directory


def spawn_kernel(directory: str, packages: str) -> Spawned:
    """Start a kernel for ``directory`` (a child of this process, in a session of its own).

    It gets the listening socket of its link (the abstract address ``directory/link``) as fd 3;
    as fd 4 a memory file where it notes, before the code of a run starts, that run's id (a write
    into memory: it wakes nobody, and survives the kernel's death; this process reads it only when
    the kernel ends, and tells the host in ``D``); its own directory as working directory (nothing the
    code wrote elsewhere is near it), default signal handling, and its output in
    ``directory/boot.log`` until the link hands it the exec stream's. The link
    program (the host's ``docker exec``) runs as a user of the sandbox's group but not the
    sandbox's user: the code cannot signal or trace it (it would cut the kernel's call stream).
    """
    link = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # An abstract address (no file): reachable from this container's network namespace only, where the host
    # may connect directly (see sandbox._netns) besides the link program. Random like the directory.
    link.bind("\0" + os.path.join(directory, "link"))
    link.listen(2)  # the host's direct connection, if any, and the link program's
    env = {k: v for k, v in os.environ.items() if k not in ("SANDBOX_SPAWN", "SANDBOX_KERNEL_PARENT")}
    env.update(SANDBOX_CONNECTION=os.path.join(directory, "kernel.json"), SANDBOX_LINK_FD=str(LINK_FD),
               SANDBOX_STARTED_FD=str(STARTED_FD), SANDBOX_PACKAGES=packages)
    started = os.memfd_create("started", os.MFD_CLOEXEC)
    log = os.path.join(directory, "boot.log")
    here = os.getcwd()
    os.chdir(directory)  # posix_spawn has no working-directory argument; this process has one thread
    try:
        pid = os.posix_spawn(sys.executable, [sys.executable, "-s", "-c", KERNEL_CODE], env, file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640),
            (os.POSIX_SPAWN_DUP2, 1, 2),
            (os.POSIX_SPAWN_DUP2, link.fileno(), LINK_FD),
            (os.POSIX_SPAWN_DUP2, started, STARTED_FD),
        ], setsid=True, setsigmask=(),
            setsigdef=[n for n in range(1, 32) if n not in (signal.SIGKILL, signal.SIGSTOP)])
    except BaseException:
        os.close(started)
        raise
    finally:
        os.chdir(here)
        link.close()
    return Spawned(directory, pid, packages, started)


# In a container, the first kernel starts before anything else here: it has the most to import.
FIRST: Spawned | None = None
if __name__ == "__main__" and os.getpid() == 1 and os.environ.get("SANDBOX_SPAWN") == "1":
    try:
        FIRST = spawn_kernel(make_directory(os.environ.get("SANDBOX_KERNEL_PARENT") or "/tmp"),
                             os.environ.get("SANDBOX_PACKAGES", ""))
    except Exception as exc:  # the host's K starts one the usual way; say why here
        os.write(2, ("sandbox-init: cannot start the first kernel: %r\n" % (exc,)).encode())

import contextlib  # noqa: E402
import ctypes  # noqa: E402
import time  # noqa: E402
from typing import TYPE_CHECKING, Any, NoReturn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import zmq  # noqa: E402

if TYPE_CHECKING or __package__:  # imported as sandbox.runtime.sandbox_init (and for the type checker)
    from . import sandbox_wire as wire
else:  # a script, in the sandbox and on the host (the local backend)
    import sandbox_wire as wire

_PR_SET_DUMPABLE = 4
_PR_SET_PDEATHSIG = 1
#: Seconds a prepared kernel may take before its messages reach us.
START_TIMEOUT = 120.0
#: Where the container's memory cgroup counts out-of-memory kills (cgroup v2, then v1): a line ``oom_kill N``.
OOM_COUNTERS = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")
#: Milliseconds between checks that the kernel lives, where a pidfd cannot say so at once.
WATCH_POLL_MS = 200
#: Seconds between readiness probes of a starting kernel, and milliseconds between ZMQ's attempts to connect
#: to its sockets before it has bound them (ZMQ's default, 100 ms, would add up to that much to every start).
PROBE_INTERVAL = 0.01
RECONNECT_MS = 5
#: Iopub messages the host never reads: not relayed (a message less through the engine per run, and
#: execute_input would echo all of the run's code back). The tail of the iopub topic names the type.
_UNRELAYED_TOPICS = (b".execute_input",)
_BUSY = b'"busy"'
_DELIM = b"<IDS|MSG>"


def ignore_signals() -> None:
    """Ignore every signal that can be caught, so the code in the kernel cannot stop this process.

    Python itself handles SIGINT (KeyboardInterrupt): before this, ``os.kill(1,
    signal.SIGINT)`` from the code ended the container and its files. SIGCHLD
    keeps its handler (it wakes the loop to reap orphans); SIGKILL and SIGSTOP
    cannot be caught, and the kernel drops them when sent from inside the
    namespace to its init. The host still stops the container: ``docker kill``
    and ``docker rm -f`` send SIGKILL from outside the namespace.
    """
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
            continue
        with contextlib.suppress(OSError, ValueError, RuntimeError):  # a signal the C library reserves for itself
            signal.signal(sig, signal.SIG_IGN)


def oom_kills() -> int | None:
    """How many processes the container's memory cgroup has OOM-killed so far; None if it does not say."""
    for path in OOM_COUNTERS:
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def _prctl(option: int, value: int) -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def _request(msg_type: str) -> list[bytes]:
    import datetime

    header = {
        "msg_id": os.urandom(16).hex(), "msg_type": msg_type, "username": "sandbox", "session": "supervisor",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "version": "5.3",
    }
    return [_DELIM, b"", json.dumps(header).encode(), b"{}", b"{}", b"{}"]


class KernelLink:
    """The ZMQ sockets to one kernel, and whether its iopub stream is live yet."""

    def __init__(self, context: zmq.Context[Any], directory: str, spawned: Spawned | None = None) -> None:
        self.directory = directory
        #: The kernel process, when this process started it (a container); else None.
        self.spawned = spawned
        ip = os.path.join(directory, "k")
        self.shell = context.socket(zmq.DEALER)
        self.shell.linger = 0
        self.shell.sndhwm = 0
        self.shell.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MS)
        self.shell.connect("ipc://%s-1" % ip)
        # The readiness probes' own socket: they go out only once the kernel listens (none pile up
        # while it boots). Not the relay's: the kernel may say it started (iopub) before the shell
        # connection is complete, and what the host sends then must wait for it, not be dropped.
        self.prober = context.socket(zmq.DEALER)
        self.prober.linger = 0
        self.prober.setsockopt(zmq.IMMEDIATE, 1)
        self.prober.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MS)
        self.prober.connect("ipc://%s-1" % ip)
        self.iopub = context.socket(zmq.SUB)
        self.iopub.linger = 0
        self.iopub.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MS)
        self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
        self.iopub.connect("ipc://%s-2" % ip)
        self.ready = False
        self.prepared = time.monotonic()
        self.last_probe = 0.0
        # Set by watch(): the kernel process, a pidfd that becomes readable when it ends, and the
        # cgroup's OOM-kill count at that moment.
        self.watched: int | None = None
        self.pidfd: int | None = None
        self.oom_kills: int | None = None

    def probe(self) -> None:
        """Ask for the kernel's info until an iopub message proves the subscription is live."""
        now = time.monotonic()
        if now - self.last_probe >= PROBE_INTERVAL:
            self.last_probe = now
            with contextlib.suppress(zmq.Again):
                self.prober.send_multipart(_request("kernel_info_request"), zmq.NOBLOCK)

    def pid(self) -> int | None:
        """The kernel's pid as it wrote it (harmless to trust: every process here is the sandbox's)."""
        try:
            with open(os.path.join(self.directory, "pid")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def watch(self, pid: int) -> None:
        """Watch the kernel process ``pid`` (read once it is ready, before any code ran in it)."""
        self.watched = pid
        self.oom_kills = oom_kills()
        try:
            self.pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):  # an old kernel or a sandboxing runtime without pidfds: poll instead
            self.pidfd = None

    def alive(self) -> bool:
        """Whether the watched process is still running (a zombie counts as ended)."""
        if self.watched is None:  # nothing watched (the loop asks only while it watches)
            return False
        try:
            with open("/proc/%d/stat" % self.watched, "rb") as f:
                stat = f.read()
        except OSError:
            return False
        return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")

    def unwatch(self) -> None:
        pidfd, self.pidfd, self.watched = self.pidfd, None, None
        if pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(pidfd)

    def close(self) -> None:
        self.unwatch()
        if self.spawned is not None:
            self.spawned.close()
        for sock in (self.shell, self.iopub, self.prober):
            with contextlib.suppress(Exception):
                sock.close(0)


class Supervisor:
    def __init__(self) -> None:
        self.fd_in = os.dup(0)
        self.fd_out = os.dup(1)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(2, 1)
        os.close(null)
        self.namespace_init = os.getpid() == 1
        self.context = zmq.Context()
        self.parser = wire.FrameParser(2**31, kinds={wire.KIND_JUPYTER, wire.KIND_INTERRUPT, wire.KIND_RESTART})
        self.kernel: KernelLink | None = None
        #: Whether this process starts the kernels (a container, when the host says so).
        self.spawn = self.namespace_init and os.environ.get("SANDBOX_SPAWN") == "1"
        #: The kernel started with the container, until the host's first K claims it.
        self.first = FIRST
        self.poller = zmq.Poller()
        #: Frames gathered while the loop handles what one poll returned, written together (one write,
        #: one trip through the engine, one wake-up on the host) by flush().
        self.out: list[memoryview] = []
        self.gather = False

    def send(self, kind: bytes, *chunks: wire.Chunk) -> None:
        """Write a frame to the host (blocking: the host always reads, or it is gone)."""
        self.out.extend(memoryview(v) for v in wire.frame(kind, *chunks))
        if not self.gather:
            self.flush()

    def flush(self) -> None:
        views, self.out = self.out, []
        while views:
            try:
                written = os.writev(self.fd_out, views)
            except InterruptedError:
                continue
            except OSError:
                self.shutdown()
            while written:
                if written >= len(views[0]):
                    written -= len(views[0])
                    views.pop(0)
                else:
                    views[0] = views[0][written:]
                    written = 0

    # --- kernels -------------------------------------------------------------------------------

    def prepare(self, body: bytearray) -> None:
        """Kill what the previous kernel left, and make a fresh directory for the next one.

        In a container, start the kernel too (the first one is already booting: no code has
        run yet, so the host's first K claims it, unless it asks for other packages).
        """
        import shutil  # here, not at the start: the first kernel needs none of it (and it imports bz2, lzma)

        request = json.loads(bytes(body))
        parent = request["parent"]
        packages = request.get("packages", "")
        first, self.first = self.first, None
        if first is not None and first.packages == packages and os.path.dirname(first.directory) == parent:
            self.kernel = KernelLink(self.context, first.directory, first)
            self.send(wire.KIND_PREPARED, json.dumps({"connection": os.path.join(first.directory, "kernel.json")}
                                                     ).encode())
            return
        if self.kernel is not None:
            old = self.kernel
            self.kernel = None
            self.forget_pidfd(old)
            old.close()
            shutil.rmtree(old.directory, ignore_errors=True)
        self.kill_all()
        if first is not None:
            first.close()
            shutil.rmtree(first.directory, ignore_errors=True)
        directory = make_directory(parent)
        spawned = None
        for _ in range(100):
            if not self.spawn:
                break
            try:
                spawned = spawn_kernel(directory, packages)
                break
            except BlockingIOError:  # the pids limit: what the code left is still dying (a fork bomb)
                time.sleep(0.02)
                self.kill_all()
        self.kernel = KernelLink(self.context, directory, spawned)
        self.send(wire.KIND_PREPARED, json.dumps({"connection": os.path.join(directory, "kernel.json")}).encode())

    def kill_all(self) -> None:
        """In a container: kill every process but this one (kernels, strays, detached daemons).

        Kernels' link programs run as another user and outlive this: each ends with its kernel."""
        if self.namespace_init:
            with contextlib.suppress(OSError):
                os.kill(-1, signal.SIGKILL)
            self.reap()

    def reap(self) -> None:
        """Orphans of the kernel are re-parented to this process (the namespace's init); the
        kernels it started are its children: how the current one ended is kept for ``D``."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            spawned = self.kernel.spawned if self.kernel is not None else None
            if spawned is not None and spawned.pid == pid:
                spawned.code = os.waitstatus_to_exitcode(status)

    def interrupt(self) -> None:
        # In a container only: on the host (the local backend) the host signals its own child,
        # and a pid the kernel wrote could name any process of the user's.
        kernel = self.kernel if self.namespace_init else None
        pid = (kernel.spawned.pid if kernel.spawned is not None else kernel.pid()) if kernel is not None else None
        if pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGINT)

    # --- the loop ----------------------------------------------------------------------------------

    def run(self) -> None:
        poller = self.poller
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the poll; reaping happens below
        poller.register(self.fd_in, zmq.POLLIN)
        poller.register(wake_r, zmq.POLLIN)
        current = None
        last_check = 0.0
        while True:
            kernel = self.kernel
            if kernel is not current:  # a new kernel: poll its sockets instead of the old one's
                if current is not None:
                    for sock in (current.shell, current.iopub):
                        with contextlib.suppress(KeyError):
                            poller.unregister(sock)
                if kernel is not None:
                    poller.register(kernel.shell, zmq.POLLIN)
                    poller.register(kernel.iopub, zmq.POLLIN)
                current = kernel
            timeout = None
            if kernel is not None and not kernel.ready:
                if time.monotonic() - kernel.prepared < START_TIMEOUT:
                    kernel.probe()
                    timeout = int(PROBE_INTERVAL * 1000)
            elif kernel is not None and kernel.watched is not None and kernel.pidfd is None:
                timeout = WATCH_POLL_MS  # no pidfd: look at the process now and then
                now = time.monotonic()
                if now - last_check >= WATCH_POLL_MS / 1000:
                    last_check = now
                    if not kernel.alive():
                        self.kernel_ended(kernel)
                        continue
            events = poller.poll(timeout)
            self.gather = True
            try:
                self.handle(events, kernel, wake_r)
            finally:
                self.gather = False
                self.flush()

    def handle(self, events: list[tuple[Any, int]], kernel: KernelLink | None, wake_r: int) -> None:
        """What one poll returned: input from the host, signals, the kernel's end, its messages."""
        for item, _ in events:
            if item == self.fd_in:
                self.from_host()
            elif item == wake_r:
                with contextlib.suppress(OSError):
                    os.read(wake_r, 4096)
                if self.namespace_init:
                    self.reap()
            elif self.kernel is kernel and kernel is not None and kernel.pidfd is not None \
                    and item == kernel.pidfd:
                self.kernel_ended(kernel)
            elif self.kernel is kernel and kernel is not None and not isinstance(item, int):
                self.kernel_messages(kernel, item)

    def forget_pidfd(self, kernel: KernelLink) -> None:
        if kernel.pidfd is not None:
            with contextlib.suppress(KeyError):
                self.poller.unregister(kernel.pidfd)

    def kernel_ended(self, kernel: KernelLink) -> None:
        """The kernel process ended: pass on its last messages, tell the host, and kill what it left.

        What it left would keep the kernel's stream to the host open (a child
        holding its stderr) and has no kernel to serve; the next kernel's
        preparation would kill it anyway.
        """
        self.forget_pidfd(kernel)
        pid, before = kernel.watched, kernel.oom_kills
        kernel.unwatch()
        for sock in (kernel.iopub, kernel.shell):
            self.kernel_messages(kernel, sock)
        after = oom_kills()
        oom = before is not None and after is not None and after > before
        died: dict[str, Any] = {"pid": pid, "oom": oom}
        spawned = kernel.spawned
        if spawned is not None:  # this process's child: how it ended (the engine only knows the link's end)
            if spawned.code is None:
                try:
                    reaped, status = os.waitpid(spawned.pid, os.WNOHANG)
                    if reaped:
                        spawned.code = os.waitstatus_to_exitcode(status)
                except ChildProcessError:
                    pass
            died["code"] = spawned.code
            died["started"] = spawned.started_run()
        self.send(wire.KIND_DIED, json.dumps(died).encode())
        self.flush()  # now, not after the killing below
        if self.namespace_init:
            with contextlib.suppress(OSError):
                os.kill(-1, signal.SIGKILL)
            self.reap()

    def from_host(self) -> None:
        try:
            data = os.read(self.fd_in, 65536)  # below the mmap threshold: see sandbox._transport
        except InterruptedError:
            return
        if not data:
            self.shutdown()
        for kind, body in self.parser.feed(data):
            if kind == wire.KIND_RESTART:
                try:
                    self.prepare(body)
                except Exception as exc:  # the host waits for P and gives up in time; say why here
                    os.write(2, ("sandbox-init: cannot prepare a kernel: %r\n" % (exc,)).encode())
            elif kind == wire.KIND_INTERRUPT:
                self.interrupt()
            elif kind == wire.KIND_JUPYTER and self.kernel is not None:
                channel, parts = wire.unpack_parts(body)
                if channel == "shell":
                    with contextlib.suppress(zmq.Again):
                        self.kernel.shell.send_multipart(parts, zmq.NOBLOCK)

    def kernel_messages(self, kernel: KernelLink, sock: zmq.Socket[Any]) -> None:
        channel = "iopub" if sock is kernel.iopub else "shell"
        try:
            while True:
                parts = sock.recv_multipart(zmq.NOBLOCK)
                if channel == "iopub":
                    if parts and parts[0] == _DELIM:
                        # No topic: ipykernel 7's iopub_welcome, sent for each (re)subscription, at any
                        # time. It answers no request of the host's (and cut as if it had a topic, it
                        # would reach the host without its delimiter: a malformed message).
                        if kernel.ready:
                            continue
                        topic = b""
                    else:
                        topic, parts = parts[0], parts[1:]
                    if kernel.ready and (topic.endswith(_UNRELAYED_TOPICS) or
                                         (topic.endswith(b".status") and parts and _BUSY in parts[-1])):
                        continue
                if not kernel.ready:
                    if channel == "iopub":  # the subscription works: the kernel is ready
                        kernel.ready = True
                        kernel.prober.close(0)  # its replies are never read
                        self.drain(kernel)
                        pid = kernel.spawned.pid if kernel.spawned is not None else kernel.pid()
                        # Watched in a container only: on the host (the local backend) the kernel is the
                        # host's own child, and a pid the kernel wrote could name any process of the user's.
                        if self.namespace_init and pid:
                            kernel.watch(pid)
                            if kernel.pidfd is not None:
                                self.poller.register(kernel.pidfd, zmq.POLLIN)
                        hello = {"pid": pid, "watch": kernel.watched is not None}
                        self.send(wire.KIND_HELLO, json.dumps(hello).encode())
                        return
                    continue  # the probe's own replies
                self.send(wire.KIND_JUPYTER, *wire.pack_parts(channel, parts))
        except zmq.Again:
            pass

    def drain(self, kernel: KernelLink) -> None:
        """Drop what the readiness probe left behind so far (what comes later answers the supervisor's
        own requests: the host ignores it)."""
        for sock in (kernel.shell, kernel.iopub):
            try:
                while True:
                    sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                pass

    def shutdown(self) -> NoReturn:
        """The host is gone: kill everything and leave."""
        if self.namespace_init:  # on the host the kernel is the host's child: it dies with the host
            with contextlib.suppress(OSError):
                os.kill(-1, signal.SIGKILL)
        os._exit(0)


def main() -> None:
    _prctl(_PR_SET_DUMPABLE, 0)  # the kernel (same user) may not trace this process or open its files
    ignore_signals()
    if os.getpid() != 1:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # local backend: die with the host process
    Supervisor().run()


if __name__ == "__main__":
    main()
