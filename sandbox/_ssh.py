"""Docker engines over SSH: the engine's socket forwarded to a private Unix socket on this host.

``ssh -L <here>/docker.sock:/var/run/docker.sock user@host cat`` (OpenSSH, the
same client the ``docker`` CLI uses, with the user's own keys, agent and
``~/.ssh/config``). Every Docker API call, and the sandbox's attach and exec
streams, then go over a real Unix socket: the transport is the local one.

The tunnel must not outlive this process, or a container whose owner died
would keep its stream open and never stop. ``ssh`` runs under a small
watcher whose stdin is a pipe from this process: when the pipe closes (this
process ended, however it ended) the watcher kills ``ssh``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

from .errors import BackendUnavailable

DEFAULT_REMOTE_SOCKET = "/var/run/docker.sock"

# Runs `ssh` and kills it when stdin closes (the owner died or closed the tunnel) or when `ssh` exits.
_WATCHER = """
import os, selectors, signal, subprocess, sys
ssh = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE)  # never written: the remote `cat` waits on it
sel = selectors.DefaultSelector()
sel.register(sys.stdin.fileno(), selectors.EVENT_READ)
while ssh.poll() is None:
    if sel.select(0.5) and not os.read(sys.stdin.fileno(), 1024):
        ssh.kill()
        break
sys.exit(ssh.wait())
"""


class SSHTunnel:
    """A forwarded Docker socket for ``ssh://[user@]host[:port][/remote/socket]``.

    ``ssh_config`` is an OpenSSH config file for ``ssh -F`` (keys, known
    hosts, jump hosts); without it, the user's own configuration applies.
    """

    def __init__(self, url: str, *, ssh_config: str | None = None, timeout: float = 30.0) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "ssh" or not parsed.hostname:
            raise BackendUnavailable(f"{url!r} is not an SSH engine URL (ssh://user@host[:port])")
        if shutil.which("ssh") is None:
            raise BackendUnavailable("the engine is reached over SSH, but the `ssh` client is not installed "
                                     "(apt-get install openssh-client)")
        self.url = url
        self.dir = tempfile.mkdtemp(prefix="codeact-ssh-")  # 0700: only this user can use the socket
        self.socket = os.path.join(self.dir, "docker.sock")
        remote = parsed.path if parsed.path not in ("", "/") else DEFAULT_REMOTE_SOCKET
        target = f"{parsed.username}@{parsed.hostname}" if parsed.username else parsed.hostname
        # A session running `cat` rather than `ssh -N`: sshd turns Nagle's algorithm off only for
        # sessions, and without that every small frame waits for a delayed ACK (~40 ms). `cat` ends
        # when the connection does, leaving nothing behind on the remote host.
        args = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes",
                "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3",
                *(["-F", os.path.expanduser(ssh_config)] if ssh_config else []),
                *(["-p", str(parsed.port)] if parsed.port else []),
                "-L", f"{self.socket}:{remote}", "--", target, "cat"]
        self._errors = Path(self.dir) / "ssh.err"
        with open(self._errors, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-I", "-c", _WATCHER, *args], stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                lines = self._errors.read_text(errors="replace").split("\n")
                detail = "; ".join(line.strip() for line in lines if line.strip())[-500:] or "no answer"
                self.close()
                raise BackendUnavailable(f"cannot reach the Docker engine at {url} over SSH: {detail}")
            time.sleep(0.05)

    @property
    def base_url(self) -> str:
        return f"unix://{self.socket}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """Stop the tunnel (connections through it end) and remove its directory."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()  # the watcher kills ssh
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
