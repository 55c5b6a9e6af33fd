"""A real, rootful Podman engine for tests: ``podman system service`` on a Unix socket of the tests' own.

The service gets its own storage, run root, temporary directory and volume
path on a tmpfs in a directory of the test session's temporary directory, so it cannot
touch the machine's own Podman containers or images, and everything it made
goes with :meth:`PodmanService.remove`. It answers the Docker API that
codeact speaks (docker-py), so codeact reaches it like any engine: a URL,
``DOCKER_HOST=unix://...``, or an entry of ``CODEACT_ENGINES``.

The OCI runtime is runc when it is installed: crun, Podman's default, refuses
hosts that mix cgroup v1 and v2 (this machine), and runc works everywhere
Podman does. The session fixture :func:`podman` starts one service for the
whole test session; it fails at the end if a sandbox container or volume is
left on it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.engines import Engine
from tests.docker_engines import wait_for_engine
from tests.ci import unavailable

LABEL = "io.codeact.sandbox"


class PodmanService:
    """A rootful ``podman system service`` reachable at ``unix://<root>/podman.sock``."""

    def __init__(self, name: str = "podman", max_sessions: int = 4, storage_size: str = "4g") -> None:
        # Under the session's $TMPDIR (a short path: the socket's name must fit a sockaddr_un).
        self.root = Path(tempfile.mkdtemp(prefix="pm-"))
        self.storage = self.root / "s"  # short: Podman refuses a run root of more than 50 characters
        self.storage_size = storage_size
        self.socket = self.root / "podman.sock"
        self.url = f"unix://{self.socket}"
        self.engine = Engine(name, self.url, max_sessions=max_sessions)
        self.runtime = "runc" if shutil.which("runc") else None
        self.log = self.root / "service.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self, *args: str) -> list[str]:
        """``podman`` with this service's storage and settings, followed by ``args``."""
        base = ["podman", "--root", str(self.storage / "images"), "--runroot", str(self.storage / "run"),
                "--tmpdir", str(self.storage / "tmp"), "--volumepath", str(self.storage / "volumes"),
                "--cgroup-manager", "cgroupfs", "--events-backend", "file"]
        if self.runtime:
            base += ["--runtime", self.runtime]
        return [*base, *args]

    def start(self, timeout: float = 60) -> None:
        if not os.path.ismount(self.storage):
            # In memory: the image's ~16,000 files are written and deleted in no time (on this disk, deleting
            # them took 25 s); sandboxes use a few MB more.
            self.storage.mkdir(exist_ok=True)
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.storage_size},mode=0700", "codeact-podman",
                            str(self.storage)], check=True, capture_output=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.command("system", "service", "--time=0", self.url), stdout=log,
                                         stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        wait_for_engine(self.engine, self.proc, self.log, timeout, "the Podman service", self.remove)

    def client(self, timeout: float = 120):  # a docker-py client
        from sandbox.engines import connect

        return connect(self.engine, timeout=timeout)

    def sandbox_containers(self, pid: int | None = None) -> list[dict]:
        found = self.client(30).api.containers(all=True, filters={"label": LABEL})
        if pid is not None:
            found = [c for c in found if (c.get("Labels") or {}).get(f"{LABEL}.pid") == str(pid)]
        return found

    def stop(self) -> None:
        """Remove every container (conmon keeps them running without the service), then stop the service."""
        if self.proc is None:
            return
        subprocess.run(self.command("rm", "--all", "--force", "--time", "0"), capture_output=True, timeout=120)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.proc = None

    def _kill_leftovers(self) -> None:
        """Kill the processes that name this service's root: the conmon of each exec session (a kernel's link)
        waits 300 s (Podman's exit delay) before it runs its clean-up, which would mount the storage again
        under a removed root."""
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(self.root).encode() in cmdline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry.name), signal.SIGKILL)

    def remove(self) -> None:
        self.stop()
        self._kill_leftovers()
        # The storage's overlay and shm mounts, deepest first, then the storage itself (a tmpfs).
        for line in reversed(Path("/proc/mounts").read_text().splitlines()):
            target = line.split()[1]
            if target.startswith(str(self.root) + "/"):
                subprocess.run(["umount", "-l", target], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


def can_start_podman() -> str | None:
    """None when a rootful Podman service can be started here, else why not."""
    if shutil.which("podman") is None:
        return "podman is not installed (scripts/dev.sh setup-test installs it)"
    if os.geteuid() != 0:
        return "a rootful Podman service needs root"
    return None


@pytest.fixture(scope="session")
def podman(docker_ready: None) -> Iterator[PodmanService]:
    """A started rootful Podman service for the whole test session, without images (the tests put the sandbox
    image there). Skips where Podman cannot run; fails in CI. At the end, a sandbox container or volume left
    on it fails the session's last test."""
    reason = can_start_podman()
    if reason is not None:
        unavailable("the Podman tests", reason)
    service = PodmanService()
    try:
        service.start()
        yield service
        if service.proc is not None:
            left = service.sandbox_containers()
            assert left == [], f"sandbox containers left on the Podman engine: {left}"
            volumes = service.client(30).api.volumes(filters={"label": LABEL})["Volumes"] or []
            assert volumes == [], f"sandbox volumes left on the Podman engine: {volumes}"
    finally:
        service.remove()


class RootlessPodmanService:
    """``podman system service`` run by an unprivileged user of its own (:data:`USER`, made if missing, with
    subordinate ids): the rootless Podman a user without root runs. Its storage, run root and socket are in a
    temporary directory of that user's; :meth:`remove` ends its processes and deletes the directory."""

    USER = "codeact-rootless"
    #: The first of the user's 65,536 subordinate uids and gids (where /etc/subuid has none for it yet).
    SUBORDINATE = 400000

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="rl-", dir="/tmp"))  # a short path the user can reach
        self.socket = self.root / "podman.sock"
        self.url = f"unix://{self.socket}"
        self.engine = Engine("rootless-podman", self.url)
        self.log = self.root / "service.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def _user(self) -> tuple[int, int, str]:
        import pwd

        try:
            entry = pwd.getpwnam(self.USER)
        except KeyError:
            subprocess.run(["useradd", "--create-home", "--shell", "/usr/sbin/nologin", self.USER], check=True,
                           capture_output=True)
            entry = pwd.getpwnam(self.USER)
        for table in ("/etc/subuid", "/etc/subgid"):
            path = Path(table)
            lines = path.read_text().splitlines() if path.exists() else []
            if not any(line.split(":")[0] == self.USER for line in lines):
                with open(path, "a") as f:
                    f.write(f"{self.USER}:{self.SUBORDINATE}:65536\n")
        return entry.pw_uid, entry.pw_gid, entry.pw_dir

    def start(self, timeout: float = 60) -> None:
        uid, gid, home = self._user()
        runtime_dir = self.root / "xdg"
        runtime_dir.mkdir()
        for path in (self.root, runtime_dir):
            os.chown(path, uid, gid)
            path.chmod(0o700)
        env = {"HOME": home, "USER": self.USER, "XDG_RUNTIME_DIR": str(runtime_dir),
               "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
        command = ["podman", "--root", str(self.root / "s"), "--runroot", str(self.root / "r"),
                   "--tmpdir", str(self.root / "t"), "--events-backend", "file",
                   "system", "service", "--time=0", self.url]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env,
                                         cwd=self.root, user=uid, group=gid, extra_groups=[],
                                         start_new_session=True)
        wait_for_engine(self.engine, self.proc, self.log, timeout, "the rootless Podman service", self.remove)

    def client(self, timeout: float = 30):  # a docker-py client
        from sandbox.engines import connect

        return connect(self.engine, timeout=timeout)

    def remove(self) -> None:
        """End the service and every process of its user (Podman leaves a pause process), delete its files."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
            self.proc = None
        subprocess.run(["pkill", "-KILL", "-u", self.USER], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


def can_start_rootless_podman() -> str | None:
    """None when a rootless Podman service can be started here (as root, for a user of its own), else why not."""
    reason = can_start_podman()
    if reason is not None:
        return reason
    if shutil.which("newuidmap") is None:
        return "newuidmap is missing (the uidmap package; scripts/dev.sh setup-test installs it)"
    return None


@pytest.fixture(scope="module")
def rootless_podman(docker_ready: None) -> Iterator[RootlessPodmanService]:
    """A started rootless Podman service, without images. Skips where it cannot run; fails in CI."""
    reason = can_start_rootless_podman()
    if reason is not None:
        unavailable("the rootless Podman test", reason)
    service = RootlessPodmanService()
    try:
        service.start()
        yield service
    finally:
        service.remove()
