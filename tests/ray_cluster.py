"""A real Ray cluster for tests and benchmarks: a head and worker nodes inside a private network namespace.

``unshare --net`` makes a network namespace with nothing but loopback (held
open by a sleeping process); every node (``ray start``) and every driver runs
inside it through ``nsenter``. There Ray binds 127.0.0.1 (on the host it would
pick the machine's address), and no traffic can leave the machine. The Docker
engine's Unix socket is a file, so sandboxes still start from inside.

Each node gets its own short ``--temp-dir`` (Unix socket paths are limited
to 107 bytes). Failure detection is fast (a node is declared dead after
about 2 s of missed health checks) so that a test that kills a node does not
wait half a minute.

Cleanup kills, by pid, exactly the processes inside the namespace: everything
the cluster and its drivers started, nothing else.

Example::

    with RayCluster(workers=1, cpus_per_node=2) as cluster:
        cluster.run([sys.executable, "-c", "import ray; ray.init('127.0.0.1:6379'); print(ray.nodes())"])
        cluster.kill_worker(cluster.workers[0])
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HEAD_PORT = 6379
#: Declare a node dead after ~3 missed health checks of 0.5 s (Ray's default takes ~30 s).
FAST_FAILURE_DETECTION = {"health_check_initial_delay_ms": 1000, "health_check_period_ms": 500,
                          "health_check_timeout_ms": 500, "health_check_failure_threshold": 3}


def unavailable_reason() -> str | None:
    """Why a namespaced Ray cluster cannot run here (None when it can)."""
    if os.geteuid() != 0:
        return "needs root for `unshare --net`"
    missing = [tool for tool in ("unshare", "nsenter", "ip") if shutil.which(tool) is None]
    if missing:
        return f"missing {', '.join(missing)} (util-linux, iproute2)"
    if shutil.which("ray", path=str(Path(sys.executable).parent)) is None:
        return f"ray is not installed next to {sys.executable}: pip install 'codeact[ray]'"
    return None


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _alive(pid: int) -> bool:
    return _state(pid) not in ("", "Z", "X")


class NetNamespace:
    """A network namespace with only loopback, held open by a sleeping process we started."""

    def __init__(self) -> None:
        self.holder = subprocess.Popen(["unshare", "--net", "sh", "-c", "ip link set lo up && exec sleep 1000000"],
                                       stdin=subprocess.DEVNULL)
        mine = os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + 10
        while True:
            try:
                theirs = os.readlink(f"/proc/{self.holder.pid}/ns/net")
                if theirs != mine and self._loopback_up():
                    break
            except OSError:
                pass
            if self.holder.poll() is not None or time.monotonic() > deadline:
                self.holder.kill()
                raise RuntimeError("could not make a network namespace (unshare --net)")
            time.sleep(0.05)
        self.inode = theirs

    def _loopback_up(self) -> bool:
        out = subprocess.run(self.wrap(["ip", "-o", "link", "show", "lo"]), capture_output=True, text=True,
                             check=False)
        return "UP" in out.stdout.split("<", 1)[-1].split(">", 1)[0].split(",")

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["nsenter", f"--net=/proc/{self.holder.pid}/ns/net", "--", *argv]

    def pids(self) -> list[int]:
        """Live processes inside the namespace, the holder excluded."""
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == self.holder.pid:
                continue
            try:
                if os.readlink(f"/proc/{entry}/ns/net") == self.inode and _alive(int(entry)):
                    found.append(int(entry))
            except OSError:
                continue
        return found

    def close(self) -> None:
        """SIGKILL everything inside (by pid), then the holder."""
        deadline = time.monotonic() + 20
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        self.holder.kill()
        self.holder.wait(timeout=10)


class RayCluster:
    """A head node and ``workers`` more nodes (each a raylet with its own temp dir) in a private netns."""

    def __init__(self, *, workers: int = 1, cpus_per_node: int = 2, env: dict[str, str] | None = None,
                 system_config: dict[str, Any] | None = None) -> None:
        self.cpus_per_node = cpus_per_node
        # RAY_AUTH_MODE set: else recent Ray (2.60 here) turns token authentication on for the head whenever a
        # ~/.ray/auth_token exists (any local ray.init() writes one), and the worker nodes, which do not
        # turn it on, are refused. The namespace has only loopback, so no token is needed.
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", **(env or {})}
        self.env.pop("RAY_ADDRESS", None)
        self.system_config = FAST_FAILURE_DETECTION if system_config is None else system_config
        self.ray_bin = str(Path(sys.executable).parent / "ray")
        self.tmp = Path(tempfile.mkdtemp(prefix="cr-", dir="/tmp"))  # short: Unix socket paths
        self.address = f"127.0.0.1:{HEAD_PORT}"
        self.workers: list[int] = []  # node manager ports of the worker nodes
        self.ns = NetNamespace()
        try:
            self._ray_start("head", "--head", f"--port={HEAD_PORT}", "--include-dashboard=false",
                            f"--system-config={json.dumps(self.system_config)}")
            for _ in range(workers):
                self.add_worker()
            self.wait_for_nodes(1 + workers)
        except BaseException:
            self.close()
            raise

    # --- nodes ------------------------------------------------------------------------------

    def _ray_start(self, name: str, *args: str) -> None:
        out = subprocess.run(self.ns.wrap([self.ray_bin, "start", *args, f"--num-cpus={self.cpus_per_node}",
                                           f"--temp-dir={self.tmp / name}", "--disable-usage-stats"]),
                             env=self.env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
                             check=False)
        if out.returncode != 0:
            raise RuntimeError(f"ray start ({name}) failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")

    def add_worker(self) -> int:
        """Start one more node; returns its node manager port (its name for :meth:`kill_worker`).

        The node carries the label ``codeact-node=w<port>``.
        """
        port = HEAD_PORT + 1 + len(self.workers)
        self._ray_start(f"w{port}", f"--address={self.address}", f"--node-manager-port={port}",
                        f"--labels=codeact-node=w{port}")
        self.workers.append(port)
        return port

    def nodes(self) -> list[dict[str, Any]]:
        """``ray.nodes()`` as the cluster sees it (asked from a driver inside the namespace)."""
        code = (f"import json, ray; ray.init(address={self.address!r}, logging_level='ERROR', log_to_driver=False); "
                "print('NODES=' + json.dumps([{'id': n['NodeID'], 'port': n['NodeManagerPort'], 'alive': n['Alive']} "
                "for n in ray.nodes()]))")
        out = self.run([sys.executable, "-c", code], timeout=120)
        line = next(x for x in out.stdout.splitlines() if x.startswith("NODES="))
        return list(json.loads(line[len("NODES="):]))

    def wait_for_nodes(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            alive = [n for n in self.nodes() if n["alive"]]
            if len(alive) >= count:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(alive)} of {count} Ray nodes came up")
            time.sleep(0.5)

    def raylet(self, port: int) -> int:
        """The pid of the worker node's raylet."""
        for pid in self.ns.pids():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"/raylet") and f"--node_manager_port={port}".encode() in cmd:
                return pid
        raise LookupError(f"no raylet with node manager port {port}")

    def node_processes(self, port: int) -> list[int]:
        """The worker node's raylet and every process below it (its workers and agents)."""
        raylet = self.raylet(port)
        children: dict[int, list[int]] = {}
        for pid in self.ns.pids():
            try:
                ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(pid)
        found, todo = [], [raylet]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, []))
        return found

    def kill_worker(self, port: int) -> list[int]:
        """SIGKILL the worker node (raylet, workers, agents) at once, as a machine that vanished; returns the pids."""
        pids = self.node_processes(port)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.workers.remove(port)
        return pids

    # --- running things inside ----------------------------------------------------------------

    def popen(self, argv: list[str], env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.Popen[str]:
        """Start ``argv`` inside the namespace (a driver, a server)."""
        return subprocess.Popen(self.ns.wrap(argv), env={**self.env, **(env or {})}, text=True, **kwargs)

    def run(self, argv: list[str], env: dict[str, str] | None = None, timeout: float = 300,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the namespace to completion; its output is captured."""
        out = subprocess.run(self.ns.wrap(argv), env={**self.env, **(env or {})}, capture_output=True, text=True,
                             timeout=timeout, stdin=subprocess.DEVNULL, check=False)
        if check and out.returncode != 0:
            raise AssertionError(f"{argv[:4]} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        return out

    def close(self) -> None:
        self.ns.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> RayCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
