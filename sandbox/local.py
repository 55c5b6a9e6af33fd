"""The local backend: a kernel subprocess on the host. NOT a security boundary.

The kernel runs as the same user as the host process, in its own temporary
working directory, with resource limits (address space, file size, open
files) and an environment scrubbed down to an allowlist, so API keys and
tokens in the host's environment do not reach it. Code in it can still read
and write anything that user can. Use it where Docker is unavailable, for
development, or for trusted code.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any, Callable

from .base import DEFAULT_OUTPUT_LIMIT, DEFAULT_TIMEOUT, walk_files
from .result import FileInfo
from .errors import FileTransferError, KernelStartError
from .functions import HostFunction
from .kernel import KernelExit, KernelSandbox, exit_detail

#: Environment variables passed to the kernel; everything else is dropped.
ENV_ALLOWLIST = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "SYSTEMROOT")

_RUNTIME_DIR = str(Path(__file__).parent / "runtime")


def _parse_size(text: str | int | None) -> int | None:
    if text is None or isinstance(text, int):
        return text
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    t = text.strip().lower().rstrip("b")
    return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)


class LocalSandbox(KernelSandbox):
    """A stateful kernel in a subprocess on this machine (no isolation; see module docs).

    Example::

        with LocalSandbox(functions=[my_tool]) as sb:
            print(sb.run("print(my_tool(1))").stdout)
    """

    backend = "local"
    files_on_host = True

    def __init__(
        self,
        functions: list[Callable[..., Any] | HostFunction] | tuple = (),
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        function_timeout: float | None = 60.0,
        memory: str | int | None = "2g",
        max_file_size: str | int | None = "1g",
        env: dict[str, str] | None = None,
        python: str | None = None,
        workdir: str | os.PathLike[str] | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        super().__init__(functions, timeout=timeout, output_limit=output_limit, function_timeout=function_timeout)
        self.memory = memory
        self._limits = {"as": _parse_size(memory), "fsize": _parse_size(max_file_size)}
        self.python = python or sys.executable
        self.start_timeout = start_timeout
        self._own_workdir = workdir is None
        self.workdir = str(Path(workdir).resolve()) if workdir else tempfile.mkdtemp(prefix="sandbox-work-")
        Path(self.workdir).mkdir(parents=True, exist_ok=True)
        base = {k: os.environ[k] for k in ENV_ALLOWLIST if k in os.environ}
        self.env = {
            **base,
            "HOME": self.workdir,
            "PYTHONPATH": _RUNTIME_DIR,
            "PYTHONUNBUFFERED": "1",
            "MPLBACKEND": "module://matplotlib_inline.backend_inline",
            "MPLCONFIGDIR": str(self.socket_dir / "matplotlib"),
            "IPYTHONDIR": str(self.socket_dir / "ipython"),  # keep IPython's profile out of the workdir
            "JUPYTER_PLATFORM_DIRS": "1",
            **(env or {}),
        }
        self._proc: subprocess.Popen[bytes] | None = None
        self._generation = 0
        self._local_finalizer = weakref.finalize(
            self, _cleanup_local, None, self.workdir if self._own_workdir else None
        )

    def _memory_limit_text(self) -> str | None:
        return str(self.memory) if self.memory else None

    def _preexec(self) -> None:
        # Runs in the child between fork and exec.
        if self._limits["as"]:
            resource.setrlimit(resource.RLIMIT_AS, (self._limits["as"], self._limits["as"]))
        if self._limits["fsize"]:
            resource.setrlimit(resource.RLIMIT_FSIZE, (self._limits["fsize"], self._limits["fsize"]))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    def _start_process(self) -> None:
        conn = self._write_connection_file()
        self._generation += 1
        try:
            self._proc = subprocess.Popen(
                [self.python, "-c", "import sandbox_runtime; sandbox_runtime.launch()", "-f", str(conn)],
                cwd=self.workdir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own session: interrupts and stray-killing stay inside it
                preexec_fn=self._preexec,
            )
        except OSError as exc:
            raise KernelStartError(f"could not start {self.python}: {exc}") from exc
        self._local_finalizer.detach()
        self._local_finalizer = weakref.finalize(
            self, _cleanup_local, self._proc, self.workdir if self._own_workdir else None
        )
        # The watcher holds the session weakly so that a forgotten session can be collected.
        threading.Thread(target=_watch_local, args=(weakref.ref(self), self._proc, self._generation),
                         daemon=True, name="watch-local-kernel").start()

    def _interrupt_process(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._proc.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass

    def _stop_process(self) -> None:
        proc = self._proc
        if proc is None:
            return
        self._generation += 1
        _kill_session(proc)
        self._proc = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._local_finalizer()

    # --- files ------------------------------------------------------------------------------

    def _list_files_now(self) -> list[FileInfo]:
        # The files are on this machine: no need to ask the kernel.
        return walk_files(self.workdir)

    def _host_path(self, path: str) -> Path:
        root = Path(self.workdir).resolve()
        target = (root / path).resolve()
        if target != root and root not in target.parents:
            raise FileTransferError(f"{path!r} is outside the sandbox's working directory")
        return target

    def upload(self, source: str | os.PathLike[str] | bytes, dest: str | None = None) -> str:
        self._check_open()
        if isinstance(source, (bytes, bytearray)):
            if dest is None:
                raise FileTransferError("upload(bytes) needs dest= (a file name)")
            target = self._host_path(dest)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(bytes(source))
        else:
            target = self._host_path(dest or os.path.basename(os.fspath(source)))
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                shutil.copyfile(source, target)
            except OSError as exc:
                raise FileTransferError(f"cannot copy {source}: {exc.strerror}") from exc
        return str(target)

    def download(self, path: str) -> bytes:
        self._check_open()
        target = self._host_path(path)
        try:
            return target.read_bytes()
        except OSError as exc:
            raise FileTransferError(f"no such file in the sandbox: {path} ({exc.strerror})") from exc


def _watch_local(ref: "weakref.ref[LocalSandbox]", proc: subprocess.Popen[bytes], generation: int) -> None:
    """Drain the kernel's stderr until it exits, then tell the session (runs in a thread)."""
    assert proc.stderr is not None
    tail = b""
    while True:  # keeps the pipe drained; holds at most a few KiB however much arrives
        chunk = proc.stderr.read1(65536)
        if not chunk:
            break
        tail = (tail + chunk)[-4096:]
    code = proc.wait()
    proc.stderr.close()
    lines = tail.decode("utf-8", "replace").splitlines()[-20:]
    sandbox = ref()
    if sandbox is None or generation != sandbox._generation:
        return
    # No OOM flag here: under RLIMIT_AS allocations fail with MemoryError instead.
    sandbox._on_process_exit(KernelExit(code, False, exit_detail(lines)))


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    """Kill the kernel and everything it started (its session/process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass


def _cleanup_local(proc: subprocess.Popen[bytes] | None, workdir: str | None) -> None:
    if proc is not None and proc.poll() is None:
        _kill_session(proc)
    if workdir:
        shutil.rmtree(workdir, ignore_errors=True)
