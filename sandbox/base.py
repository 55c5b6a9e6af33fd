"""The interface every sandbox backend implements."""

from __future__ import annotations

import os
from typing import Any, Callable, Protocol, runtime_checkable

from .functions import HostFunction
from .result import ExecutionResult, FileInfo, FunctionCall

#: Default per-run time limit, seconds.
DEFAULT_TIMEOUT = 30.0
#: Default cap on captured stdout and stderr, characters each (head and tail kept).
DEFAULT_OUTPUT_LIMIT = 100_000

def walk_files(root: str | os.PathLike[str]) -> list[FileInfo]:
    """Every regular file under ``root`` on the host, sorted by path (for backends whose files are local)."""
    root = os.path.realpath(root)
    files: list[FileInfo] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".ipynb_checkpoints"]
        for filename in filenames:
            full = os.path.join(dirpath, filename)
            try:
                st = os.stat(full)
            except OSError:  # vanished, or a dangling link
                continue
            if os.path.isfile(full):
                files.append(FileInfo(os.path.relpath(full, root).replace(os.sep, "/"), st.st_size, st.st_mtime))
    return sorted(files, key=lambda f: f.path)


StreamCallback = Callable[[str, str], None]
"""Called with ``(name, text)`` as output arrives; name is "stdout" or "stderr"."""


@runtime_checkable
class SessionSource(Protocol):
    """Hands out sandbox sessions, e.g. :class:`sandbox.engines.EnginePool` over several Docker engines.

    The session returned may already be started; the caller closes it.
    """

    def sandbox(self, functions: Any = (), **options: Any) -> "Sandbox":
        ...


@runtime_checkable
class Sandbox(Protocol):
    """A stateful Python session that runs untrusted code.

    Variables survive between :meth:`run` calls. Host functions registered on
    the session are callable from the code by name. Use it as a context
    manager so that it is always closed::

        with open_sandbox() as sb:
            sb.run("x = 41")
            print(sb.run("print(x + 1)").stdout)
    """

    #: "docker", "local" or "restricted".
    backend: str
    #: The working directory as the sandboxed code sees it (e.g. "/workspace").
    workdir: str

    def run(
        self,
        code: str,
        *,
        timeout: float | None = None,
        on_output: StreamCallback | None = None,
        on_call: Callable[[FunctionCall], None] | None = None,
        list_files: bool = False,
    ) -> ExecutionResult:
        """Run ``code``; never raises for errors in the code itself.

        ``list_files=True`` also fills :attr:`ExecutionResult.files` with the
        working directory's files after the run (cheaper than a separate
        :meth:`list_files` call on kernel backends).
        """
        ...

    def upload(self, source: str | os.PathLike[str] | bytes, dest: str | None = None) -> str:
        """Copy a host file (or bytes) into the working directory; returns the sandbox path."""
        ...

    def download(self, path: str) -> bytes:
        """Read a file from the sandbox (relative paths are under the working directory)."""
        ...

    def list_files(self) -> list[FileInfo]:
        """Every file under the working directory."""
        ...

    def register(self, *functions: Callable[..., Any] | HostFunction) -> None:
        """Offer more host functions to the running session."""
        ...

    def unregister(self, *names: str) -> None:
        """Withdraw host functions; their stubs disappear from the session."""
        ...

    def interrupt(self) -> None:
        """Interrupt the code running now (from another thread); its run returns a KeyboardInterrupt error."""
        ...

    def restart(self) -> None:
        """Start a fresh interpreter: variables are lost, files and host functions stay."""
        ...

    def close(self) -> None:
        """Release everything (container, processes, temporary files). Idempotent."""
        ...

    def __enter__(self) -> "Sandbox": ...

    def __exit__(self, *exc: object) -> None: ...
