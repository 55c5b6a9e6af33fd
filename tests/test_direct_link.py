"""The direct link: a Docker kernel's host-function calls on a socket made in its container's network namespace.

On a local engine, when this process may enter other network namespaces (root, as in CI), the host connects to
the kernel's abstract link socket from inside the container's namespace instead of going through the engine's
exec relay (see sandbox._netns). Everything else about the link is the same, so these tests check what is new:
that the direct link is used, carries large frames both ways and survives restarts; that the exec link still works
when asked for or when the namespace cannot be entered; that no host thread stays in the container's namespace
and no pidfd leaks; and what hostile code can do to its end of the socket.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

from sandbox import DockerSandbox, _netns

pytestmark = [pytest.mark.docker, pytest.mark.timeout(180)]

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="entering a container's network namespace needs root")


def echo(value: object) -> object:
    """Return the value."""
    return value


def _netns_of_threads() -> set[str]:
    out = set()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            out.add(os.readlink(task / "ns" / "net"))
    return out


def _pidfds() -> int:
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):  # an fd closed meanwhile
            count += os.readlink(fd) == "anon_inode:[pidfd]"
    return count


@needs_root
def test_calls_take_the_direct_link_and_carry_large_frames_both_ways() -> None:
    with DockerSandbox(functions=[echo], timeout=60) as sb:
        assert sb.linked_directly
        r = sb.run("big = bytes(range(256)) * 40_000\nback = echo(big)\nprint(back == big, len(back))")
        assert r.error is None and r.stdout == "True 10240000\n", r
        # Many small calls in a row, and calls from threads at once.
        r = sb.run("import concurrent.futures as cf\n"
                   "with cf.ThreadPoolExecutor(8) as ex:\n"
                   "    got = list(ex.map(echo, range(400)))\n"
                   "print(got == list(range(400)))")
        assert r.error is None and r.stdout == "True\n", r


@needs_root
def test_a_restarted_or_recreated_kernel_is_linked_directly_again() -> None:
    with DockerSandbox(functions=[echo], timeout=60) as sb:
        r = sb.run("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
        assert r.error is not None and r.error.type == "KernelDied"
        after = sb.run("print(echo('again'))")
        assert after.stdout == "again\n" and after.restarted and sb.linked_directly, after
        sb.restart()
        assert sb.run("print(echo(3))").stdout == "3\n" and sb.linked_directly


@needs_root
def test_a_killed_kernel_is_reported_with_its_last_words() -> None:
    """The socket ends when the kernel does; what it wrote to stderr just before still comes (on the exec stream)."""
    with DockerSandbox(functions=[echo], timeout=30) as sb:
        started = time.monotonic()
        r = sb.run("import ctypes\nctypes.string_at(0)")
        assert r.error is not None and r.error.type == "KernelDied" and "SIGSEGV" in r.error.message, r.error
        assert time.monotonic() - started < 10
        assert sb.run("print(echo('fine'))").stdout == "fine\n"


def test_the_exec_link_when_asked_for() -> None:
    with DockerSandbox(functions=[echo], timeout=60, direct_link=False) as sb:
        assert not sb.linked_directly
        r = sb.run("print(echo([1, 2]))")
        assert r.error is None and r.stdout == "[1, 2]\n", r


def test_the_exec_link_when_the_namespace_cannot_be_entered(monkeypatch: pytest.MonkeyPatch) -> None:
    """As without privilege, or under a runtime with a network stack of its own: the calls go through the engine."""
    def refuse(self: object, name: str, timeout: float) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(_netns.ContainerNetns, "connect", refuse)
    with DockerSandbox(functions=[echo], timeout=60) as sb:
        assert not sb.linked_directly
        assert sb.run("print(echo('via the engine'))").stdout == "via the engine\n"


@needs_root
def test_no_host_thread_stays_in_the_container_namespace_and_no_pidfd_leaks() -> None:
    own = _netns_of_threads()
    assert len(own) == 1
    pidfds = _pidfds()
    with DockerSandbox(functions=[echo], timeout=60) as sb:
        assert sb.linked_directly
        assert sb.run("print(echo(1))").stdout == "1\n"
        sb.run("import os\nos._exit(1)")  # a new kernel: a second direct connection
        assert sb.run("print(echo(2))").stdout == "2\n"
        assert _netns_of_threads() == own
        assert _pidfds() == pidfds + 1  # the container's namespace, held while it lives
    assert _pidfds() == pidfds
    assert _netns_of_threads() == own


@needs_root
@pytest.mark.parametrize("attack", [
    # The code closes its end of the link: the kernel has lost its host.
    "import os, sandbox_runtime as s\nos.close(s._state.link.fd_in)\necho(1)",
    # The code shuts it down for writing only: the host must not wait for frames that never come.
    "import socket, sandbox_runtime as s\ns._state.direct.shutdown(socket.SHUT_WR)\necho(1)",
    # The code writes garbage straight into it.
    "import os, sandbox_runtime as s\nos.write(s._state.link.fd_out, b'\\xff' * 65536)\necho(1)",
], ids=["close-the-link", "half-close", "garbage-into-the-link"])
def test_hostile_code_at_its_end_of_the_link_harms_only_its_own_session(attack: str) -> None:
    before = _netns_of_threads()
    with DockerSandbox(functions=[echo], timeout=10, max_run_time=15) as sb:
        assert sb.linked_directly
        sb.run("open('kept.txt', 'w').write('kept')")
        started = time.monotonic()
        r = sb.run(attack)
        assert time.monotonic() - started < 30, "the host waited on a broken link"
        assert r.error is not None, r
        # Its own session's calls are what it broke (as closing its end of an exec stream would); a restart
        # mends them, with the files kept.
        sb.restart()
        after = sb.run("print(echo(open('kept.txt').read()))")
        assert after.error is None and after.stdout == "kept\n", after
        assert sb.linked_directly
    assert _netns_of_threads() == before
