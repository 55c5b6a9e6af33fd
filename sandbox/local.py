"""The local backend: a kernel subprocess on the host. NOT a security boundary.

The kernel runs as the same user as the host process, in its own temporary
working directory, with resource limits (address space, file size, open
files) and an environment scrubbed down to an allowlist, so API keys and
tokens in the host's environment do not reach it. It dies with the host
process (parent-death signal). Code in it can still read and write anything
that user can. Use it where Docker is unavailable, for development, or for
trusted code — and choose it explicitly: it is never a silent fallback.

It speaks the same framed stream as the Docker backend, over the
subprocess's stdin and stdout pipes.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import queue
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ._labels import process_start_time
from ._transport import PipeStream, Stream
from .base import DEFAULT_OUTPUT_LIMIT, DEFAULT_TIMEOUT, walk_files
from .errors import FileTransferError, KernelStartError
from .functions import HostFunction
from .hostfiles import UnsafePath, check_relative_path, read_confined, write_confined
from .kernel import KERNEL_CODE, KernelSandbox
from .limits import Limits
from .result import FileInfo

if TYPE_CHECKING:
    from ._snapshot_io import LocalFiles

#: Environment variables passed to the kernel; everything else is dropped.
ENV_ALLOWLIST = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "SYSTEMROOT")

_RUNTIME_DIR = str(Path(__file__).parent / "runtime")
_LAUNCHER = str(Path(__file__).parent / "_launch.py")


def _parse_size(text: str | int | None) -> int | None:
    if text is None or isinstance(text, int):
        return text
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    t = text.strip().lower().rstrip("b")
    return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)


class _Spawner:
    """Starts child processes from one thread that lives as long as this process.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child ends, not
    the process: a kernel started from a short-lived thread (a web request,
    a pool's worker) would be killed with it.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = queue.SimpleQueue()
        threading.Thread(target=self._serve, daemon=True, name="sandbox-spawner").start()

    def _serve(self) -> None:
        while True:
            job, future = self._jobs.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(job())
                except BaseException as exc:  # handed to the caller
                    future.set_exception(exc)

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        future: concurrent.futures.Future[subprocess.Popen[bytes]] = concurrent.futures.Future()
        self._jobs.put((lambda: subprocess.Popen(argv, **kwargs), future))
        return future.result()


_SPAWNER: list[_Spawner] = []  # one per process, made on first use
_SPAWNER_LOCK = threading.Lock()


def _spawner() -> _Spawner:
    with _SPAWNER_LOCK:
        if not _SPAWNER:
            _SPAWNER.append(_Spawner())
        return _SPAWNER[0]


class LocalKernel:
    """The processes of a :class:`LocalSandbox`: the supervisor and the kernel, both children of the host."""

    def __init__(self, python: str, workdir: str, private: str, env: dict[str, str],
                 limits: dict[str, int | None], memory: str | int | None) -> None:
        self.python = python
        self.workdir = workdir
        self.where = f"supervisor process on this host (working directory {workdir})"
        self.private = private
        self.env = env
        self._limits = limits
        self._memory = memory
        self.supervisor: subprocess.Popen[bytes] | None = None
        self.proc: subprocess.Popen[bytes] | None = None  # the kernel
        #: The session's packages (sandbox.packages.SessionPackages), when installs are possible.
        self.packages: Any = None

    def _spawn(self, argv: list[str], env: dict[str, str], cwd: str | None = None
               ) -> tuple[subprocess.Popen[bytes], Stream]:
        try:
            # Limits and the parent-death signal are set by a launcher after the fork, not by preexec_fn
            # (see _launch.py: Python code in a forked child of a threaded process can deadlock).
            launch = [sys.executable, "-I", "-S", _LAUNCHER, str(os.getpid()), str(self._limits["as"] or 0),
                      str(self._limits["fsize"] or 0), "--", *argv]
            proc = _spawner().popen(launch, cwd=cwd or self.workdir, env=env, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise KernelStartError(f"could not start {self.python}: {exc}") from exc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        # The stream owns the pipes from here on (it closes them).
        fds = (os.dup(proc.stdin.fileno()), os.dup(proc.stdout.fileno()), os.dup(proc.stderr.fileno()))
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            pipe.close()
        return proc, PipeStream(*fds)

    def start(self) -> Stream:
        if self.packages is not None:
            self.packages.prepare()  # the up-front set, unpacked once into the host's cache
        self.supervisor, stream = self._spawn([self.python, "-I", str(Path(_RUNTIME_DIR) / "sandbox_init.py")],
                                              self.env)
        return stream

    def kernel_parent(self) -> str:
        return self.private

    def start_kernel(self, connection: str) -> Stream:
        self.stop_kernel()
        packages = {"SANDBOX_PACKAGES": os.pathsep.join(self.packages.sandbox_paths())} if self.packages else {}
        self.proc, stream = self._spawn([self.python, "-s", "-c", KERNEL_CODE],
                                        {**self.env, "SANDBOX_CONNECTION": connection, "SANDBOX_WORKDIR": self.workdir,
                                         **packages},
                                        cwd=str(Path(connection).parent))
        return stream

    def stop_kernel(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            _kill_session(proc)

    def interrupt_kernel(self) -> bool:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
        return True

    def kernel_exit_code(self) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        try:
            return proc.wait(5)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        self.stop_kernel()
        self.proc = None
        supervisor, self.supervisor = self.supervisor, None
        if supervisor is not None:
            _kill_session(supervisor)

    def oom_since(self, started: float) -> bool:
        return False  # under RLIMIT_AS allocations fail with MemoryError instead

    def memory_limit(self) -> str | None:
        return str(self._memory) if self._memory else None

    def close(self) -> None:
        self.stop()
        if self.packages is not None:
            self.packages.close()  # its wheels may be evicted from the host's cache again


class LocalSandbox(KernelSandbox):
    """A stateful kernel in a subprocess on this machine (no isolation; see module docs).

    Example::

        with LocalSandbox(functions=[my_tool]) as sb:
            print(sb.run("print(my_tool(1))").stdout)
    """

    backend = "local"

    def __init__(
        self,
        functions: list[Callable[..., Any] | HostFunction] | tuple = (),
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        function_timeout: float | None = 60.0,
        max_run_time: float | None = None,
        limits: Limits | None = None,
        memory: str | int | None = "2g",
        max_file_size: str | int | None = "1g",
        env: dict[str, str] | None = None,
        python: str | None = None,
        workdir: str | os.PathLike[str] | None = None,
        start_timeout: float = 60.0,
        packages: Sequence[str] = (),
        package_policy: Any = None,
    ) -> None:
        own_workdir = workdir is None
        reap_local_dirs()  # those of sessions whose host process was killed before it could remove them
        directory = str(Path(workdir).resolve()) if workdir else tempfile.mkdtemp(prefix=_dir_prefix("work"))
        Path(directory).mkdir(parents=True, exist_ok=True)
        private = tempfile.mkdtemp(prefix=_dir_prefix("home"))  # IPython's profile, matplotlib's cache
        base = {k: os.environ[k] for k in ENV_ALLOWLIST if k in os.environ}
        self.env = {
            **base,
            "HOME": directory,
            "PYTHONPATH": _RUNTIME_DIR,
            "PYTHONUNBUFFERED": "1",
            "MPLBACKEND": "module://matplotlib_inline.backend_inline",
            "JUPYTER_PLATFORM_DIRS": "1",
            **(env or {}),
        }
        self.memory = memory
        self.python = python or sys.executable
        limits_rl = {"as": _parse_size(memory), "fsize": _parse_size(max_file_size)}
        process = LocalKernel(self.python, directory, private, self.env, limits_rl, memory)
        self._local = process
        from ._pkg_local import session_packages

        #: The session's packages (sandbox.packages.SessionPackages): installed under its private directory.
        self.packages = process.packages = session_packages(self.python, os.path.join(private, "packages"),
                                                             packages, package_policy)
        functions = [*functions, self.packages.host_function()]
        super().__init__(process, functions, timeout=timeout, output_limit=output_limit,
                         function_timeout=function_timeout, max_run_time=max_run_time, limits=limits,
                         start_timeout=start_timeout)
        self._dirs_finalizer = weakref.finalize(self, _remove_dirs, [private] + ([directory] if own_workdir else []))

    # --- files ------------------------------------------------------------------------------

    def snapshot_files(self) -> LocalFiles:
        """The session's files and snapshot staging directory (in its private directory), on this machine."""
        from ._snapshot_io import LocalFiles

        return LocalFiles(self.workdir, self._local.private)

    def list_files(self) -> list[FileInfo]:
        # The files are on this machine: no need to ask the kernel.
        self._check_open()
        return walk_files(self.workdir)

    def _finish(self, execution: Any, limit: float | None, list_files: bool) -> Any:
        result = super()._finish(execution, limit, False)
        if list_files and not result.timed_out:
            result.files = walk_files(self.workdir)
        return result

    def _relative(self, path: str) -> str:
        p = Path(path)
        if p.is_absolute():
            try:
                path = str(p.resolve().relative_to(Path(self.workdir).resolve()))
            except ValueError:
                raise FileTransferError(f"{path!r} is outside the sandbox's working directory") from None
        try:
            check_relative_path(path)
        except UnsafePath as exc:
            raise FileTransferError(f"{path!r} is outside the sandbox's working directory: {exc}") from None
        return path

    def upload(self, source: str | os.PathLike[str] | bytes, dest: str | None = None) -> str:
        self._check_open()
        if isinstance(source, (bytes, bytearray)):
            if dest is None:
                raise FileTransferError("upload(bytes) needs dest= (a file name)")
            data = bytes(source)
        else:
            try:
                data = Path(source).read_bytes()
            except OSError as exc:
                raise FileTransferError(f"cannot copy {source}: {exc.strerror}") from exc
            dest = dest or os.path.basename(os.fspath(source))
        return str(write_confined(self.workdir, self._relative(dest), data))

    def download(self, path: str) -> bytes:
        self._check_open()
        return read_confined(self.workdir, self._relative(path), max_bytes=self.limits.max_download_bytes)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._dirs_finalizer()


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    """Kill the kernel and everything it started (its session/process group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


#: sandbox-work-PID-START-xxxx: the host process (its pid and start time, so a reused pid is told apart).
_OWNED_DIR = re.compile(r"^sandbox-(?:work|home)-(\d+)-(\d+)-[^/]+$")


def _dir_prefix(kind: str) -> str:
    pid = os.getpid()
    return f"sandbox-{kind}-{pid}-{process_start_time(pid) or 0}-"


def reap_local_dirs(directory: str | None = None) -> list[str]:
    """Remove the directories local sandboxes left in ``directory`` (default: the temporary directory) when
    their host process was killed (``kill -9``: its kernel dies with it, but nothing is left to clean up).

    Only directories named for a process that no longer exists (or whose pid now belongs to a process started
    later) and owned by this user are removed. Called by every new :class:`LocalSandbox`. Returns their paths.
    """
    base = directory or tempfile.gettempdir()
    removed: list[str] = []
    try:
        entries = os.scandir(base)
    except OSError:
        return removed
    uid = os.getuid()
    with entries:
        for entry in entries:
            match = _OWNED_DIR.match(entry.name)
            if match is None:
                continue
            try:
                if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
            except OSError:
                continue
            pid, started = int(match.group(1)), match.group(2)
            if _pid_alive(pid) and (started == "0" or process_start_time(pid) in (started, "")):
                continue  # its process is alive (or cannot be told apart from a new one): not ours to remove
            _remove_dirs([entry.path])
            removed.append(entry.path)
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's
    return True


def _remove_dirs(dirs: list[str]) -> None:
    """Remove the session's directories, even ones its code made read-only or is still writing into.

    The kernel's process group is dead by now, but a process the code detached (``setsid``) may still be creating
    files, and the code may have left directories without write permission: a single ``rmtree`` leaves both behind.
    """
    for d in dirs:
        for attempt in range(6):  # at most ~0.75 s of waiting for a straggler
            if sys.version_info >= (3, 12):
                shutil.rmtree(d, onexc=_make_writable_and_retry)
            else:
                shutil.rmtree(d, onerror=_make_writable_and_retry)
            if not os.path.lexists(d):
                break
            time.sleep(0.05 * (attempt + 1))


def _make_writable_and_retry(function: Callable[..., Any], path: str, _exc: object) -> None:
    """rmtree's error hook: give the owner write/search permission on the parent and try once more."""
    try:
        parent = os.path.dirname(path)
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IRWXU)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, os.stat(path).st_mode | stat.S_IRWXU)
        function(path)
    except OSError:
        pass  # the next attempt (or the one after) gets it
