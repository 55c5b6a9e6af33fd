"""The sandbox's supervisor: owns the host link, runs the kernel as its child, relays its messages.

Started as ``python3 -I sandbox_init.py``: in a container it is PID 1 (the
init of the container's PID namespace); on the host (the local backend) it
is a plain subprocess. Its stdin and stdout are the link to the host (a
container's attach stream, or pipes), spoken in :mod:`sandbox_wire` frames.

It starts ipykernel as a child process with a private directory for the
kernel's ZMQ sockets and a socket pair for host-function calls, and relays:

* host ``J`` (shell) frames to the kernel's shell socket, and the kernel's
  shell replies and iopub messages back as ``J`` frames;
* the kernel's call frames (``F``, ``A``) to the host, and the host's replies
  (``R``) back to the kernel;
* host ``X``: interrupt the kernel (SIGINT); host ``K``: kill the kernel and
  everything it started, and start a fresh one (files stay);
* when the kernel ends it sends ``E`` (exit status); after each kernel start
  ``H`` (hello: the kernel is up and its messages reach the host).

When the link closes — the host closed the session or died, however it died
— it kills everything and exits, and with it the container. The code in the
kernel cannot stop that: it cannot signal this process (the init of its PID
namespace ignores signals it has no handler for), nor trace it or read its
memory or file descriptors (this process is not dumpable), and this process
never blocks on the kernel (what the kernel does not read in time gets it
killed).

Runs with ``-I``: nothing is imported from the environment, the working
directory or user site directories, which the kernel can write.
"""

import ctypes
import errno
import json
import os
import platform
import selectors
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sandbox_wire as wire  # noqa: E402
import zmq  # noqa: E402

_PR_SET_DUMPABLE = 4
_PR_SET_PDEATHSIG = 1
#: Bytes queued for the kernel before it counts as not reading (it is then killed).
MAX_KERNEL_BACKLOG = 256 * 1024 * 1024
#: Seconds the kernel may take to start answering.
START_TIMEOUT = 60.0


def _prctl(option, value):
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except Exception:
        pass


class Kernel:
    """One kernel child: its process, ZMQ sockets and call link."""

    def __init__(self, context, env, namespace_init, max_frame):
        self.private = tempfile.mkdtemp(prefix="kernel-")
        ip = os.path.join(self.private, "k")
        connection = {
            "transport": "ipc", "ip": ip, "shell_port": 1, "iopub_port": 2, "stdin_port": 3,
            "control_port": 4, "hb_port": 5, "key": "", "signature_scheme": "hmac-sha256",
            "kernel_name": "python3",
        }
        path = os.path.join(self.private, "kernel.json")
        with open(path, "w") as f:
            json.dump(connection, f)
        ours, theirs = __import__("socket").socketpair()
        self.calls = ours
        self.calls.setblocking(False)
        child_env = dict(env, SANDBOX_CONNECTION=path, SANDBOX_CALL_FD=str(theirs.fileno()))
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import sandbox_runtime; sandbox_runtime.launch()"],
            stdin=subprocess.DEVNULL, stdout=2, stderr=2, env=child_env, pass_fds=(theirs.fileno(),),
            start_new_session=True, preexec_fn=_child_setup,
        )
        theirs.close()
        self.shell = context.socket(zmq.DEALER)
        self.shell.linger = 0
        self.shell.sndhwm = 0
        self.shell.connect("ipc://%s-1" % ip)
        self.iopub = context.socket(zmq.SUB)
        self.iopub.linger = 0
        self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
        self.iopub.connect("ipc://%s-2" % ip)
        self.parser = wire.FrameParser(max_frame, kinds={wire.KIND_CALL, wire.KIND_ABANDON})
        self.backlog = bytearray()  # call replies the kernel has not read yet
        self.ready = False
        self.last_probe = 0.0
        self.namespace_init = namespace_init
        self.exit_status = None

    def probe(self):
        """Ask the kernel for its info until an iopub message proves the subscription is live."""
        now = time.monotonic()
        if now - self.last_probe > 0.05:
            self.last_probe = now
            try:
                self.shell.send_multipart(_request("kernel_info_request"), zmq.NOBLOCK)
            except zmq.Again:
                pass

    def kill(self):
        """Kill the kernel and everything it started; wait for it."""
        proc = self.proc
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        if self.namespace_init:
            try:
                os.kill(-1, signal.SIGKILL)  # every process but this one: strays that left the group too
            except OSError:
                pass
        try:
            proc.kill()
        except OSError:
            pass
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self.close()

    def close(self):
        for sock in (self.shell, self.iopub):
            try:
                sock.close(0)
            except Exception:
                pass
        try:
            self.calls.close()
        except OSError:
            pass
        try:
            import shutil

            shutil.rmtree(self.private, ignore_errors=True)
        except Exception:
            pass


def _child_setup():
    # In the child between fork and exec: die with the supervisor, and be the OOM killer's first choice.
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def _request(msg_type):
    import datetime
    import uuid

    header = {
        "msg_id": uuid.uuid4().hex, "msg_type": msg_type, "username": "sandbox", "session": "supervisor",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "version": "5.3",
    }
    return [b"<IDS|MSG>", b"", json.dumps(header).encode(), b"{}", b"{}", b"{}"]


class Supervisor:
    def __init__(self):
        self.fd_in = os.dup(0)
        self.fd_out = os.dup(1)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(2, 1)
        os.close(null)
        self.namespace_init = os.getpid() == 1
        self.max_frame = int(os.environ.get("SANDBOX_MAX_FRAME", str(256 * 1024 * 1024)))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOX_MAX")}
        self.context = zmq.Context()
        self.parser = wire.FrameParser(2**31, kinds={wire.KIND_JUPYTER, wire.KIND_REPLY, wire.KIND_INTERRUPT,
                                                    wire.KIND_RESTART})
        self.kernel = None
        self.children_exited = False

    # --- writing to the host (blocking: the host always reads, or it is gone) ---------------

    def send(self, kind, *chunks):
        for view in wire.frame(kind, *chunks):
            view = memoryview(view)
            while len(view):
                try:
                    view = view[os.write(self.fd_out, view):]
                except InterruptedError:
                    continue
                except OSError:
                    self.shutdown()

    # --- the kernel ---------------------------------------------------------------------------

    def start_kernel(self):
        if self.kernel is not None:
            self.kernel.kill()
        self.kernel = Kernel(self.context, self.env, self.namespace_init, self.max_frame)

    def kernel_ended(self, status):
        kernel = self.kernel
        if kernel is None or kernel.exit_status is not None:
            return
        kernel.exit_status = status
        code, sig = None, None
        if os.WIFEXITED(status):
            code = os.WEXITSTATUS(status)
        elif os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
        self.send(wire.KIND_EXIT, json.dumps({"code": code, "signal": sig,
                                              "uptime": time.monotonic() - kernel.started}).encode())
        kernel.close()

    def reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.kernel is not None and pid == self.kernel.proc.pid:
                self.kernel.proc.returncode = status
                self.kernel_ended(status)

    # --- the loop ----------------------------------------------------------------------------------

    def run(self):
        self.start_kernel()
        poller = zmq.Poller()
        registered = {}
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the poll; reaping happens below
        poller.register(self.fd_in, zmq.POLLIN)
        poller.register(wake_r, zmq.POLLIN)
        while True:
            kernel = self.kernel
            alive = kernel is not None and kernel.exit_status is None
            wanted = {}
            if alive:
                wanted[kernel.shell] = zmq.POLLIN
                wanted[kernel.iopub] = zmq.POLLIN
                wanted[kernel.calls.fileno()] = zmq.POLLIN | (zmq.POLLOUT if kernel.backlog else 0)
            for item in list(registered):
                if item not in wanted:
                    poller.unregister(item)
                    del registered[item]
            for item, mask in wanted.items():
                if registered.get(item) != mask:
                    poller.register(item, mask)
                    registered[item] = mask
            timeout = 50 if alive and not kernel.ready else None
            if alive and not kernel.ready:
                if time.monotonic() - kernel.started > START_TIMEOUT:
                    kernel.kill()
                    self.kernel_ended(9)
                    continue
                kernel.probe()
            for item, event in poller.poll(timeout):
                if item == self.fd_in:
                    self.from_host()
                elif item == wake_r:
                    try:
                        os.read(wake_r, 4096)
                    except OSError:
                        pass
                    self.reap()
                elif self.kernel is kernel and alive and kernel.exit_status is None:
                    if item == kernel.calls.fileno():
                        self.kernel_calls(kernel, event)
                    else:
                        self.kernel_messages(kernel, item)

    def from_host(self):
        try:
            data = os.read(self.fd_in, 1 << 20)
        except InterruptedError:
            return
        if not data:
            self.shutdown()
        for kind, body in self.parser.feed(data):
            kernel = self.kernel
            if kind == wire.KIND_RESTART:
                self.start_kernel()
            elif kernel is None or kernel.exit_status is not None:
                continue  # a message for a kernel that has ended: the host learns that from E
            elif kind == wire.KIND_JUPYTER:
                channel, parts = wire.unpack_parts(body)
                if channel == "shell":
                    try:
                        kernel.shell.send_multipart(parts, zmq.NOBLOCK)
                    except zmq.Again:
                        pass
            elif kind == wire.KIND_REPLY:
                kernel.backlog += b"".join(bytes(v) for v in wire.frame(wire.KIND_REPLY, body))
                if len(kernel.backlog) > MAX_KERNEL_BACKLOG:
                    kernel.kill()  # it stopped reading what it asked for
                    self.kernel_ended(9)
                    continue
                self.flush_calls(kernel)
            elif kind == wire.KIND_INTERRUPT:
                try:
                    os.kill(kernel.proc.pid, signal.SIGINT)
                except OSError:
                    pass

    def flush_calls(self, kernel):
        while kernel.backlog:
            try:
                sent = kernel.calls.send(kernel.backlog)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                kernel.backlog.clear()
                return
            del kernel.backlog[:sent]

    def kernel_calls(self, kernel, event):
        if event & zmq.POLLOUT:
            self.flush_calls(kernel)
        if not event & zmq.POLLIN:
            return
        try:
            data = kernel.calls.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            return  # the kernel closed its end: it is ending, SIGCHLD follows
        try:
            frames = kernel.parser.feed(data)
        except wire.WireError as exc:
            os.write(2, ("sandbox-init: %s; restarting the kernel\n" % exc).encode())
            kernel.kill()
            self.kernel_ended(9)
            return
        for kind, body in frames:
            self.send(kind, body)

    def kernel_messages(self, kernel, sock):
        channel = "iopub" if sock is kernel.iopub else "shell"
        try:
            while True:
                parts = sock.recv_multipart(zmq.NOBLOCK)
                if channel == "iopub":
                    parts = parts[1:]  # the topic
                if not kernel.ready:
                    if channel == "iopub":  # the subscription works: the kernel is ready
                        kernel.ready = True
                        self.drain(kernel)
                        hello = {"pid": kernel.proc.pid, "python": platform.python_version(), "runtime": 2}
                        self.send(wire.KIND_HELLO, json.dumps(hello).encode())
                        return
                    continue  # the probe's own replies
                self.send(wire.KIND_JUPYTER, *wire.pack_parts(channel, parts))
        except zmq.Again:
            pass

    def drain(self, kernel):
        """Drop what the readiness probe left behind."""
        deadline = time.monotonic() + 0.03
        while time.monotonic() < deadline:
            for sock in (kernel.shell, kernel.iopub):
                try:
                    while True:
                        sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    pass
            time.sleep(0.005)

    def shutdown(self):
        """The host is gone: kill everything and leave."""
        try:
            if self.kernel is not None:
                os.killpg(self.kernel.proc.pid, signal.SIGKILL)
            if self.namespace_init:
                os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        os._exit(0)


def main():
    _prctl(_PR_SET_DUMPABLE, 0)  # the kernel (same user) may not trace this process or open its files
    if os.getpid() != 1:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # local backend: die with the host process
    Supervisor().run()


if __name__ == "__main__":
    main()
