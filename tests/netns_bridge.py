"""A TCP port inside a network namespace that reaches a TCP server outside it, through a Unix socket (a file).

The Ray test cluster (tests/ray_cluster.py) lives in a namespace with only
loopback, so its processes cannot reach a server on the host's 127.0.0.1
(Phoenix). :class:`UnixToTcp` runs in the test process and forwards a Unix
socket to the host server; ``python -m tests.netns_bridge SOCKET`` runs inside
the namespace, listens on a free loopback port (printed on its first line)
and forwards each connection to that socket. Bytes are copied as they come:
HTTP keep-alive and streaming work.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from collections.abc import Callable


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def _serve(listener: socket.socket, connect: Callable[[], socket.socket]) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return  # closed
        try:
            upstream = connect()
        except OSError:
            client.close()
            continue
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(a, b), daemon=True).start()


class UnixToTcp:
    """Listens on the Unix socket ``path``; each connection goes on to ``host:port``. Close it when done."""

    def __init__(self, path: str, host: str, port: int) -> None:
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(64)
        threading.Thread(target=_serve, args=(self.listener, lambda: socket.create_connection((host, port), 10)),
                         daemon=True).start()

    def close(self) -> None:
        self.listener.close()


def _unix(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


def main(path: str) -> None:
    """Inside the namespace: a loopback TCP port (printed) forwarded to the Unix socket ``path``."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print(listener.getsockname()[1], flush=True)
    _serve(listener, lambda: _unix(path))


if __name__ == "__main__":
    main(sys.argv[1])
