"""A direct line into a container on this machine: a Unix socket made in the container's network namespace.

Everything a container's kernel and the host say to each other normally goes
through the Docker API: ``docker exec`` and attach streams, relayed by the
engine and its shim. Those two relays cost more than the calls themselves
(on a 2-core VM, about a quarter of a millisecond of their CPU per
host-function call, and more when they have to be woken). On an engine on
this machine, a process allowed to enter other network namespaces (root) can
do better: a socket created by a thread that has joined the container's
network namespace reaches the container's *abstract* Unix sockets, which
live in that namespace and nowhere else, with no file, bind mount or network
involved. The kernel listens on one (see ``sandbox_init.spawn_kernel``);
the host connects to it directly.

What crosses the boundary does not change: the socket carries the same
frames, read by the same :class:`~sandbox._transport.Connection` with the same
limits, and the host still treats every byte as hostile. Only the socket's
creation happens in the container's namespace, on a thread of its own that
does nothing else and ends there. The namespace is the one of the
container's first process (the supervisor, which the code cannot replace),
held by a pidfd, so a recycled pid cannot send the host elsewhere; and that
process must be in the container's own cgroup, which also rules out engines
in a VM (Docker Desktop), whose pids mean nothing here.

Where any of this is not possible (a remote engine, no privilege, a runtime
such as gVisor with its own network stack), :func:`container_netns` returns
None or :meth:`ContainerNetns.connect` raises OSError, and the caller stays
on the Docker API.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import threading
from typing import Any

#: setns(2) flag: the network namespace.
_CLONE_NEWNET = 0x40000000


class ContainerNetns:
    """The network namespace of one container's first process, held by a pidfd (close it when done)."""

    def __init__(self, pidfd: int, container_id: str) -> None:
        self._pidfd: int | None = pidfd
        self.container_id = container_id

    def connect(self, name: str, timeout: float) -> socket.socket:
        """A stream socket connected to the abstract Unix address ``name`` in the container's namespace.

        Raises:
            OSError: the namespace cannot be entered (no privilege, the container is gone) or nothing listens.
        """
        pidfd = self._pidfd
        if pidfd is None:
            raise OSError("the container's namespace is no longer held")
        sock = _socket_in_namespace(pidfd)
        try:
            sock.settimeout(timeout)
            sock.connect("\0" + name)
            return sock
        except BaseException:
            sock.close()
            raise

    def listen_tcp(self, host: str, port: int, backlog: int = 64) -> socket.socket:
        """A TCP socket listening on ``host:port`` in the container's namespace (its loopback, say).

        Raises:
            OSError: the namespace cannot be entered or the address is taken.
        """
        pidfd = self._pidfd
        if pidfd is None:
            raise OSError("the container's namespace is no longer held")
        sock = _socket_in_namespace(pidfd, socket.AF_INET)
        try:
            sock.bind((host, port))
            sock.listen(backlog)
            return sock
        except BaseException:
            sock.close()
            raise

    def close(self) -> None:
        pidfd, self._pidfd = self._pidfd, None
        if pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(pidfd)


def container_netns(pid: int, container_id: str) -> ContainerNetns | None:
    """The namespace of ``pid``, the first process of container ``container_id`` as its (local) engine
    reported it; None where it cannot be held or the pid is not that container's."""
    if pid <= 0 or not hasattr(os, "pidfd_open") or not container_id:
        return None
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return None
    # Checked after the pidfd is held: from now on the pid cannot be recycled under us. Its cgroup names the
    # container (cgroup v1 and v2, systemd or cgroupfs driver) only if it is that container's process here.
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            ours = container_id in f.read(65536)
    except OSError:
        ours = False
    if not ours:
        os.close(pidfd)
        return None
    return ContainerNetns(pidfd, container_id)


def _socket_in_namespace(pidfd: int, family: int = socket.AF_UNIX) -> socket.socket:
    """A stream socket (Unix by default) that belongs to the namespace of ``pidfd``'s process.

    setns(2) changes the namespace of the calling *thread* only: a fresh thread
    joins, creates the socket (which keeps its namespace for life) and ends, so
    no thread of this process is ever left in the container's namespace.
    """
    made: dict[str, Any] = {}

    def make() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(pidfd, _CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"cannot enter the container's network namespace: {os.strerror(err)}")
            made["socket"] = socket.socket(family, socket.SOCK_STREAM)
        except BaseException as exc:
            made["error"] = exc

    thread = threading.Thread(target=make, name="sandbox-netns", daemon=True)
    thread.start()
    thread.join()
    if "error" in made:
        raise made["error"]
    return made["socket"]
