"""Start a local sandbox process with its limits, without running Python between fork and exec.

Run as ``python -I -S _launch.py PARENT_PID AS FSIZE -- ARGV...``: it sets
the resource limits (0 = none) and asks to be killed with its parent, then
execs ARGV. It exists because ``subprocess.Popen(preexec_fn=...)`` runs
Python code in the forked child of a multi-threaded process, which Python
documents as unsafe: a lock another thread held at the fork (the dynamic
loader's, an allocator's) stays held in the child, the child never reaches
exec, and ``Popen`` — and with it every later sandbox start of a web or MCP
server — waits forever. Here the fork/exec is Python's own safe path; the
limits are set by a fresh, single-threaded interpreter.

Standard library only; nothing from the environment is imported (``-I -S``).
"""

import ctypes
import os
import resource
import signal
import sys

_PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    parent, address_space, file_size = (int(x) for x in argv[1:4])
    if argv[4] != "--" or len(argv) < 6:
        raise SystemExit("usage: _launch.py PARENT_PID AS FSIZE -- ARGV...")
    if address_space:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    if file_size:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # Not contextlib.suppress: under -S nothing has imported contextlib, and it takes milliseconds to import.
    try:  # noqa: SIM105  # die with the host process however it dies (kept across exec)
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass
    if os.getppid() != parent:  # the host died before the line above: nobody is left to serve
        raise SystemExit(1)
    os.execv(argv[5], argv[5:])


if __name__ == "__main__":
    main(sys.argv)
