"""The Docker backend: a Jupyter kernel inside a locked-down container, reached only through its attach stream.

Defaults: no network, a non-root user, a read-only root filesystem, size-capped
``nosuid,nodev`` tmpfs for /tmp and /workspace, a memory limit with swap equal
to it, a CPU quota, a pids limit, an open-files limit, all capabilities
dropped, no-new-privileges, no container log on disk, and labels that let
:func:`reap` find what a dead process left.

One container per session. Its first process (PID 1) is the supervisor
(``sandbox_init``): it owns the container's attach stream and relays the
kernel's Jupyter messages over it, prepares each kernel (killing what the
previous one left; files in /workspace stay), and kills everything when the
stream closes. The stream closes when the host process that owns the
session goes away, however it goes, so the container cannot outlive its
owner: the code in the kernel cannot signal, trace or read the supervisor
(it is the namespace's init and not dumpable). The supervisor also starts
the kernels, the first as soon as the container starts (it boots while the
engine and the host are still busy starting the container). Each kernel's
host-function calls travel on a ``docker exec`` stream, straight between it
and the host: the exec runs a thin link program (:data:`LINK_CODE`) that
hands its stdin, stdout and stderr to the kernel over the kernel's abstract
link socket and waits for the kernel to end. All traffic goes through the
Docker API: no bind mount, no network. (On a local engine, when this process
is root, the host connects to that socket itself, from inside the container's
network namespace, and the calls skip the engine: see :mod:`sandbox._netns`.)
The engine removes the container when it stops (``AutoRemove``), and its
anonymous /workspace volume with it.

/workspace is a size-capped tmpfs *volume* (not a tmpfs mount) so that files
move in and out through the engine's archive API, which also works on remote
engines.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import tarfile
import threading
import time
import uuid
import warnings
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, Callable, Sequence

from . import _podman
from ._labels import LABEL, owner_labels, process_start_time
from ._netns import ContainerNetns, container_netns
from ._transport import DirectStream, SocketStream, Stream
from .engines import Engine, connect, describe, engine_of, is_local, is_podman, limits_ignored
from .image import default_image_tag, ensure_image
from .base import DEFAULT_OUTPUT_LIMIT, DEFAULT_TIMEOUT
from .errors import BackendUnavailable, FileTransferError, ImageNotFound, KernelStartError
from .functions import HostFunction
from .hostfiles import UnsafePath, check_relative_path
from .kernel import KernelSandbox
from .limits import Limits
from .network import PROXY_PORT, NetworkLog, NetworkPolicy, NetworkProxy, NetworkRecord

if TYPE_CHECKING:
    from ._snapshot_io import DockerFiles

WORKDIR = "/workspace"
SANDBOX_UID = 1000
#: The user the kernel's link program runs as (in the sandbox's group): not the code's user, so the code
#: cannot signal or trace it; the group lets it reach the kernel's socket.
LINK_UID = 1001
SUPERVISOR = ["python3", "-I", "/opt/sandbox/runtime/sandbox_init.py"]
#: Seconds the host waits to connect to a kernel's link socket directly (it is listening by then).
DIRECT_CONNECT_TIMEOUT = 2.0
#: The program ``docker exec`` runs for a kernel's call stream (argument: the abstract address of the kernel's
#: link socket, see sandbox_init.spawn_kernel): it hands the exec's stdin, stdout and stderr to the kernel
#: (SCM_RIGHTS) and lives as long as the kernel. A kernel that died before it took them: its start-up output
#: goes to the exec's stderr (the host's crash report). Where the host reaches the kernel directly (see
#: start_kernel), the exec stream carries only the kernel's stderr.
#: ``-I -S``: nothing from the environment, no site: it starts in a few milliseconds.
LINK_CODE = """\
import _socket, os, sys
link = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
linked = False
try:
    link.connect("\\0" + sys.argv[1])
    link.sendmsg([b"L"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS,
                           b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in (0, 1, 2)))])
    linked = link.recv(1) == b"K"
    while linked and link.recv(4096):
        pass
except OSError:
    pass
if not linked:
    try:
        with open(os.path.join(os.path.dirname(sys.argv[1]), "boot.log"), "rb") as log:
            os.write(2, log.read()[-8192:])
    except OSError:
        pass
    os.write(2, b"the kernel ended before it took its link\\n")
    sys.exit(1)
"""
LINK = ["python3", "-I", "-S", "-c", LINK_CODE]


def docker_client(timeout: float = 120, engine: Any = None) -> Any:
    """A docker-py client for ``engine`` (default: the one the ``docker`` CLI would use), or
    :class:`BackendUnavailable` saying how to get one. See :mod:`sandbox.engines`."""
    return connect(engine, timeout=timeout)


#: Runtimes whose containers run on the host's kernel: only there can the host reach a container's sockets
#: from its network namespace (:mod:`sandbox._netns`). gVisor (runsc) and VM runtimes (kata) have a kernel of
#: their own; their kernels' calls take the Docker API's exec stream.
HOST_KERNEL_RUNTIMES = frozenset({"runc", "crun", "youki"})


def shares_host_kernel(runtime: str | None) -> bool:
    """Whether containers of ``runtime`` (None: the engine's default, runc almost everywhere) run on the
    host's kernel."""
    return runtime is None or runtime in HOST_KERNEL_RUNTIMES


def check_limits_held(client: Any) -> None:
    """Raise :class:`BackendUnavailable` when the engine of ``client`` would ignore a container's memory and
    process limits (see :func:`sandbox.engines.limits_ignored`): hostile code would run unbounded there."""
    ignored = limits_ignored(client)
    if ignored:
        raise BackendUnavailable(
            f"the engine {describe(client)} would not hold the sandbox's memory and process limits: {ignored}. "
            "Use a rootful engine (Docker, or Podman's service run as root), or a cgroup v2 host that delegates "
            "the memory and pids controllers to your user; to run without those limits knowingly, pass "
            "memory=None and pids=None to DockerSandbox")


def engine_runtimes(client: Any) -> list[str]:
    """The container runtimes the engine of ``client`` has (``runc``, and ``runsc`` where gVisor is registered)."""
    return sorted((client.info().get("Runtimes") or {}).keys())


def unknown_runtime(client: Any, runtime: str) -> BackendUnavailable:
    """The error for a runtime the engine does not have: what it has, and how to add one."""
    try:
        have = ", ".join(engine_runtimes(client)) or "none"
    except Exception:
        have = "?"
    how = ("for gVisor: `apt-get install runsc`, then add it to the engine's /etc/docker/daemon.json as "
           '"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=ptrace", '
           '"--network=none"]}} and reload dockerd (kill -HUP)') if runtime == "runsc" else \
        'install it and add it to "runtimes" in the engine\'s /etc/docker/daemon.json, then reload dockerd (kill -HUP)'
    return BackendUnavailable(f"the Docker engine {describe(client)} has no runtime {runtime!r} (it has: {have}); "
                              f"choose one it has, or {how}")


def _raw_socket(attached: Any) -> socket.socket:
    """The socket under docker-py's attach result (it wraps Unix sockets in SocketIO)."""
    return getattr(attached, "_sock", attached)


class DockerKernel:
    """The kernel process of a :class:`DockerSandbox`: one container, its supervisor and kernel."""

    workdir = WORKDIR
    #: Kernels read the host functions and settings from their stream (see KernelProcess).
    settings_on_stream = True
    #: The supervisor says how a kernel ended (it started it): the engine only knows the link program's end.
    exit_from_supervisor = True

    def __init__(self, client: Any, image: str, *, name: str, memory: str | None, cpus: float, pids: int | None,
                 nofile: int, workspace_size: str, tmp_size: str, network: bool, runtime: str | None,
                 env: dict[str, str], direct_link: bool = True, proxy: NetworkProxy | None = None) -> None:
        self.client = client
        self.image = image
        self.name = name
        self.memory, self.cpus, self.pids, self.nofile = memory, cpus, pids, nofile
        self.workspace_size, self.tmp_size = workspace_size, tmp_size
        self.network, self.runtime, self.env = network, runtime, env
        self.uid = SANDBOX_UID
        self.container_id: str | None = None
        self.exec_id: str | None = None
        self._count = 0
        #: Whether to try reaching each kernel directly (see start_kernel); the container's namespace once held.
        #: Not under a runtime with a kernel of its own (gVisor): its sockets are not in any host namespace.
        self.direct_link = direct_link and shares_host_kernel(runtime)
        self._netns: ContainerNetns | None = None
        #: The host-side proxy of a network policy (sandbox.network): it listens in each container's namespace.
        self.proxy = proxy
        #: Whether the current kernel's stream is the direct one (else the Docker API's exec stream).
        self.linked_directly = False
        #: The session's packages (sandbox.packages.SessionPackages): their volumes, installs to redo.
        self.packages: Any = None
        self._volumes: list[str] = []

    @property
    def where(self) -> str:
        return f"container {self.name}-{self._count} on the Docker engine {describe(self.client)}"

    def labels(self) -> dict[str, str]:
        return owner_labels(self.name)

    def _host_config(self) -> Any:
        from docker.types import DriverConfig, LogConfig, Mount, Ulimit

        # Labelled like the container: some engines (Docker 20.10) keep a --mount volume when they
        # auto-remove its container, and reap() finds it by its dead owner.
        workspace = Mount(WORKDIR, None, type="volume", labels=self.labels(), driver_config=DriverConfig("local", {
            "type": "tmpfs", "device": "tmpfs",
            "o": f"size={self.workspace_size},uid={self.uid},gid={self.uid},mode=0755,nosuid,nodev",
        }))
        mounts = [workspace, *(self.packages.backend.mounts() if self.packages is not None else [])]
        tmpfs = {"/tmp": f"size={self.tmp_size},mode=1777,nosuid,nodev"}
        if is_podman(self.client):  # the same walls in Podman's words (see sandbox._podman)
            mounts = _podman.named_volumes(self.client, mounts, self._volumes)
            tmpfs.update(_podman.READ_ONLY_TMPFS)
        return self.client.api.create_host_config(
            auto_remove=True,
            network_mode="bridge" if self.network and self.proxy is None else "none",
            read_only=True,
            mem_limit=self.memory,
            memswap_limit=self.memory,  # no swap beyond the memory limit
            nano_cpus=int(self.cpus * 1e9),
            pids_limit=self.pids,
            ulimits=self._ulimits(Ulimit),
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            runtime=self.runtime,
            log_config=LogConfig(type="none"),
            tmpfs=tmpfs,
            mounts=mounts,
        )

    def _ulimits(self, ulimit: Any) -> list[Any]:
        """Open files capped, no core dumps; on Podman also the process count (see :mod:`sandbox._podman`)."""
        limits = [ulimit(name="nofile", soft=self.nofile, hard=self.nofile), ulimit(name="core", soft=0, hard=0)]
        if is_podman(self.client):
            limits.append(ulimit(name="nproc", soft=_podman.NPROC, hard=_podman.NPROC))
        return limits

    # --- KernelProcess ---------------------------------------------------------------------

    def start(self) -> Stream:
        import docker.errors

        if self.packages is not None:
            self.packages.prepare()  # the up-front set, materialised once; a PackageInstallError stops the start
        self._count += 1
        try:
            created = self.client.api.create_container(
                self.image, SUPERVISOR, name=f"{self.name}-{self._count}", user=f"{self.uid}:{self.uid}",
                working_dir=WORKDIR, stdin_open=True, labels=self.labels(), host_config=self._host_config(),
                environment={"PYTHONPATH": "/opt/sandbox/runtime", **_thread_pools(self.cpus), **self.env,
                             **(self.proxy.policy.environment() if self.proxy is not None else {}),
                             # The supervisor starts the first kernel at once, with these (see kernel_request).
                             "SANDBOX_SPAWN": "1", "SANDBOX_NAMESPACE": "1", "SANDBOX_WORKDIR": WORKDIR,
                             "SANDBOX_KERNEL_PARENT": self.kernel_parent(), "SANDBOX_PACKAGES": self._package_paths()},
            )
            self.container_id = created["Id"]
            attached = self.client.api.attach_socket(
                self.container_id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1, "detachKeys": ""})
            self.client.api.start(self.container_id)
            # The container's own (anonymous) volumes: /workspace and the package volume. The engine drops
            # them with the container, except when someone removed the container without -v; stop() then
            # removes them by name. Shared package sets are mounted read-only and are not the session's.
            # Asked once it runs: the kernel boots meanwhile (before the start, this round trip delayed it).
            # A container already gone (its supervisor failed at once) took its volumes with it; its
            # stream says what happened.
            info: dict[str, Any] = {}
            with contextlib.suppress(docker.errors.NotFound):
                info = self.client.api.inspect_container(self.container_id)
            # (On Podman the session's volumes are named ones, listed when made: see sandbox._podman.)
            self._volumes = list(dict.fromkeys([*self._volumes, *(
                m["Name"] for m in info.get("Mounts") or [] if m.get("Type") == "volume" and m.get("RW")
                and m.get("Name"))]))
        except docker.errors.ImageNotFound as exc:
            raise _image_gone(self.client, self.image) from exc
        except docker.errors.APIError as exc:
            if self.runtime and "runtime" in str(exc).lower():
                raise unknown_runtime(self.client, self.runtime) from exc
            why = str(exc.explanation or exc)
            hint = _podman.start_hint(why) if is_podman(self.client) else ""
            raise KernelStartError(f"could not start the sandbox container: {why}{hint}") from exc
        except OSError as exc:  # requests' connection errors and timeouts are OSErrors
            raise self._engine_gone(exc) from exc
        self._hold_namespace(int((info.get("State") or {}).get("Pid") or 0))
        if self.packages is not None:
            self.packages.redeliver()  # a recreated container gets the session's earlier installs again
        # docker-py closes TLS sockets when the response object is collected: keep it with the stream.
        return SocketStream(_raw_socket(attached), keepalive=attached)

    def _hold_namespace(self, pid: int) -> None:
        """Hold the network namespace of the container's first process ``pid`` (as the engine reported it) for
        direct kernel links, where that is possible, and open the network proxy's port in it."""
        self._release_namespace()
        if (self.direct_link or self.proxy is not None) and self.container_id is not None and is_local(self.client):
            self._netns = container_netns(pid, self.container_id)
        if self.proxy is not None:
            self._open_proxy_port()

    def _open_proxy_port(self) -> None:
        """The proxy's listening socket on the container's loopback (see :mod:`sandbox.network`), made before
        any code runs there; without it the container has no network and the session does not start."""
        assert self.proxy is not None
        self.proxy.stop_listening()  # a previous container's socket, if it was not stopped
        why = None
        if self._netns is None:
            why = ("it needs a Docker engine on this machine and a host process allowed to enter the "
                   "container's network namespace (root)")
        else:
            try:
                self.proxy.listen(self._netns.listen_tcp("127.0.0.1", PROXY_PORT))
                return
            except OSError as exc:
                why = (f"the container's loopback could not be reached ({exc.strerror or exc}); a runtime with a "
                       "network stack of its own (gVisor) cannot take it")
        self.stop()
        raise BackendUnavailable(f"a network policy cannot work here: {why}. Run without network= (no network) "
                                 "or with network=True (a full bridge, not an allow-list)")

    def _release_namespace(self) -> None:
        netns, self._netns = self._netns, None
        if netns is not None:
            netns.close()

    def _connect_directly(self, address: str) -> socket.socket | None:
        """The kernel's link socket, reached from inside the container's namespace, with the ``H`` that tells the
        kernel it is the host's; None where that is not possible: the caller stays on the exec stream."""
        netns = self._netns
        if netns is None or not self.direct_link or len(address.encode()) > 100:
            return None
        try:
            sock = netns.connect(address, DIRECT_CONNECT_TIMEOUT)
        except OSError:
            self.direct_link = False  # not here (a runtime with its own network stack): don't try again
            if self.proxy is None:
                self._release_namespace()
            return None
        try:
            sock.sendall(b"H")
        except OSError:
            sock.close()
            return None
        return sock

    def _engine_gone(self, exc: BaseException) -> BackendUnavailable:
        return BackendUnavailable(f"the Docker engine {describe(self.client)} does not answer "
                                  f"({type(exc).__name__}); the session cannot go on there: open a new one")

    def kernel_parent(self) -> str:
        return "/tmp"

    def kernel_request(self) -> dict[str, Any]:
        """What the supervisor needs to start the next kernel: the session's package directories."""
        return {"packages": self._package_paths()}

    def _package_paths(self) -> str:
        return ":".join(self.packages.sandbox_paths()) if self.packages is not None else ""

    def start_kernel(self, connection: str) -> Stream:
        import docker.errors

        if self.container_id is None:
            raise KernelStartError("the sandbox's container is gone")
        address = str(PurePosixPath(connection).parent / "link")
        # Before the exec: the kernel accepts connections in order, and takes a first "H" as the host's own.
        direct = self._connect_directly(address)
        try:
            created = self.client.api.exec_create(self.container_id, [*LINK, address], stdin=True,
                                                  stdout=True, stderr=True, user=f"{LINK_UID}:{self.uid}",
                                                  workdir="/")
            self.exec_id = created["Id"]
            attached = self.client.api.exec_start(self.exec_id, socket=True)
        except docker.errors.APIError as exc:
            _close_quietly(direct)
            raise KernelStartError(f"could not start a kernel in the sandbox: {exc.explanation or exc}") from exc
        except OSError as exc:
            _close_quietly(direct)
            raise self._engine_gone(exc) from exc
        stream = SocketStream(_raw_socket(attached), keepalive=attached)
        self.linked_directly = direct is not None
        return DirectStream(direct, stream) if direct is not None else stream

    def stop_kernel(self) -> None:
        pass  # the supervisor kills it (and everything it left) when it prepares the next one

    def interrupt_kernel(self) -> bool:
        return False  # only the supervisor can signal it (it lives in the container's PID namespace)

    def kernel_exit_code(self) -> int | None:
        if self.exec_id is None:
            return None
        for _ in range(20):  # the engine records the exit a moment after the stream ends
            try:
                info = self.client.api.exec_inspect(self.exec_id)
            except OSError as exc:  # the engine itself is gone, not just the kernel
                raise self._engine_gone(exc) from exc
            except Exception:
                return None
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            time.sleep(0.02)
        return None

    def stop(self) -> None:
        self._release_namespace()
        if self.proxy is not None:
            self.proxy.stop_listening()
        container, self.container_id = self.container_id, None
        volumes, self._volumes = self._volumes, []
        self.exec_id = None
        if container is not None:
            with contextlib.suppress(Exception):
                self.client.api.remove_container(container, force=True, v=True)
        for volume in volumes:  # already gone with the container, unless it was removed from outside
            self._remove_volume(volume)

    def _remove_volume(self, name: str) -> None:
        """Remove a volume of the session. Podman keeps named volumes and refuses (409) while it still removes
        the container (it removes itself when its stream closes): a few more tries there, a moment apart."""
        import docker.errors

        deadline = time.monotonic() + (_podman.VOLUME_RELEASE_TIMEOUT if is_podman(self.client) else 0.0)
        while True:
            try:
                self.client.api.remove_volume(name, force=True)
                return
            except docker.errors.APIError as exc:
                if exc.status_code != 409 or time.monotonic() > deadline:
                    return
            except Exception:
                return
            time.sleep(0.05)

    def oom_since(self, started: float) -> bool:
        """Whether the engine logged an out-of-memory kill in the container since ``started``.

        One query of the events logged until now: an ``until`` in the future
        would make the engine hold the answer open until then. The supervisor
        reads the container's own OOM counter and says so first (see
        :mod:`sandbox_init`); this is the fallback without its word.
        """
        container = self.container_id
        if container is None:
            return False
        now = time.time()
        try:
            events = self.client.api.events(since=f"{max(started - 1, 0):.9f}", until=f"{now:.9f}", decode=True,
                                            filters={"container": container, "event": ["oom"]})
            try:
                return any(True for _ in events)
            finally:
                _close_quietly(events)
        except Exception:
            return False

    def memory_limit(self) -> str | None:
        return self.memory

    def close(self) -> None:
        self.stop()
        if self.proxy is not None:
            self.proxy.close()
        if self.packages is not None:
            self.packages.close()  # its wheels may be evicted from the host's cache again

    # --- files (through the engine's archive API: works on remote engines too) -----------------

    def put_file(self, target: PurePosixPath, data: bytes) -> None:
        rel = target.relative_to(WORKDIR)
        buf = io.BytesIO()
        now = int(time.time())
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for i in range(1, len(rel.parts)):
                info = tarfile.TarInfo("/".join(rel.parts[:i]))
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, now
                info.uid = info.gid = self.uid
                tar.addfile(info)
            info = tarfile.TarInfo(str(rel))
            info.size, info.mode, info.mtime = len(data), 0o644, now
            info.uid = info.gid = self.uid
            tar.addfile(info, io.BytesIO(data))
        if self.container_id is None or not self.client.api.put_archive(self.container_id, WORKDIR, buf.getvalue()):
            raise FileTransferError(f"could not upload to {target}")

    def get_file(self, target: PurePosixPath, max_bytes: int) -> bytes:
        import docker.errors

        try:
            stream, stat = self.client.api.get_archive(self.container_id, str(target))
        except docker.errors.NotFound:
            raise FileTransferError(f"no such file in the sandbox: {target}") from None
        size = stat.get("size") if isinstance(stat, dict) else None
        if isinstance(size, int) and size > max_bytes:
            _close_quietly(stream)
            raise FileTransferError(f"{target} is {size:,} bytes, more than the download limit of {max_bytes:,} "
                                    "(Limits.max_download_bytes)")
        buf = bytearray()
        for chunk in stream:
            buf += chunk
            if len(buf) > max_bytes + 1024 * 1024:  # a tar adds headers: allow a little beyond the data
                _close_quietly(stream)
                raise FileTransferError(f"{target} is larger than the download limit of {max_bytes:,} bytes")
        with tarfile.open(fileobj=io.BytesIO(bytes(buf))) as tar:
            member = tar.next()
            if member is None or not member.isfile():
                raise FileTransferError(f"{target} is not a regular file")
            if member.size > max_bytes:
                raise FileTransferError(f"{target} is larger than the download limit of {max_bytes:,} bytes")
            extracted = tar.extractfile(member)
            assert extracted is not None
            return extracted.read()


def _thread_pools(cpus: float) -> dict[str, str]:
    """Size BLAS and OpenMP thread pools (numpy's OpenBLAS, scikit-learn) to the CPU quota: more threads than
    CPUs only get throttled by the quota (a matrix product then takes up to 5x longer, at random)."""
    n = str(max(1, int(cpus)))
    return {"OPENBLAS_NUM_THREADS": n, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n}


def _close_quietly(stream: Any) -> None:
    with contextlib.suppress(Exception):
        stream.close()


class DockerSandbox(KernelSandbox):
    """A stateful kernel in a Docker container.

    Example::

        def get_weather(city: str) -> dict:
            "Weather for the next three days in a city."
            return {"tomorrow": "sunny"}

        with DockerSandbox(functions=[get_weather], timeout=30) as sb:
            r = sb.run("w = get_weather('Beijing')\\nprint(w['tomorrow'])")
            print(r.stdout)        # sunny

    Every limit has an option. ``network=True`` gives the sandbox a bridge
    network (warns: the code can then reach your network);
    ``network=NetworkPolicy(allow=[...], secrets={...})`` gives it HTTP(S) to
    the listed hosts only, through a proxy on the host that adds the
    secrets as headers (:mod:`sandbox.network`); each request is a
    :class:`~sandbox.network.NetworkRecord` in :attr:`network_requests` and
    goes to the callables in :attr:`network_listeners`. ``runtime="runsc"``
    uses gVisor where it is installed. ``engine=`` picks a Docker engine (an
    :class:`~sandbox.engines.Engine` or a URL such as ``"tcp://host:2376"``;
    default: the one the ``docker`` CLI would use); a remote engine gets the
    image copied from the local one the first time. ``packages=["scikit-learn"]``
    installs packages before the first run (resolved and fetched by the host,
    materialised once in a shared read-only volume); the code can call
    ``install("name")`` too; ``package_policy=`` (:class:`sandbox.packages.PackagePolicy`)
    limits both. The network stays off either way (see :mod:`sandbox.packages`).

    On an engine on this machine, when this process may enter other network
    namespaces (root), the kernel's host-function calls skip the engine's
    relays: the host connects to the kernel's socket from inside the
    container's network namespace (:mod:`sandbox._netns`), several times
    faster per call. Elsewhere, or with ``direct_link=False``, they go through
    the Docker API like everything else. :attr:`linked_directly` says which.
    """

    backend = "docker"
    workdir = WORKDIR

    @property
    def linked_directly(self) -> bool:
        """Whether the current kernel's calls travel on a direct socket (see the class docs)."""
        return self._kernel.linked_directly

    def __init__(
        self,
        functions: list[Callable[..., Any] | HostFunction] | tuple = (),
        *,
        image: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        function_timeout: float | None = 60.0,
        max_run_time: float | None = None,
        limits: Limits | None = None,
        memory: str | None = "1g",
        cpus: float = 1.0,
        pids: int | None = 256,
        nofile: int = 1024,
        workspace_size: str = "1g",
        tmp_size: str = "256m",
        network: bool | NetworkPolicy | None = False,
        runtime: str | None = None,
        env: dict[str, str] | None = None,
        client: Any = None,
        engine: Any = None,
        start_timeout: float = 60.0,
        packages: Sequence[str] = (),
        package_policy: Any = None,
        direct_link: bool = True,
    ) -> None:

        docker = client or docker_client(engine=engine)
        if memory is not None or pids is not None:
            check_limits_held(docker)  # before anything is put on that engine (the image is not copied there)
        self.image = image or default_image_tag()
        _check_image(docker, self.image)
        self.engine = engine_of(docker)
        _reap_once(docker)
        if network is not None and not isinstance(network, (bool, NetworkPolicy)):
            raise TypeError(f"network= takes False, True or a sandbox.NetworkPolicy, not {type(network).__name__}")
        policy = network if isinstance(network, NetworkPolicy) else None
        if policy is not None and (runtime or "runc") != "runc":
            raise BackendUnavailable(f"a network policy needs the runc runtime, not {runtime!r}: the proxy's "
                                     "socket lives in the container's network namespace, which a runtime with a "
                                     "network stack of its own (gVisor) does not use")
        if policy is not None and not is_local(docker):
            raise BackendUnavailable(f"a network policy needs a Docker engine on this machine, not "
                                     f"{describe(docker)}: the proxy's socket is made in the container's network "
                                     "namespace (see sandbox.network)")
        if network is True:
            warnings.warn(
                "DockerSandbox(network=True): sandboxed code can reach your network and the internet",
                stacklevel=2,
            )
        self.name = f"codeact-sbx-{uuid.uuid4().hex[:12]}"
        self.memory, self.cpus, self.pids = memory, cpus, pids
        self.network, self.runtime = network or False, runtime
        self._docker = docker
        #: What went through the network policy's proxy (empty without one).
        self._network_log = NetworkLog()
        proxy = NetworkProxy(policy, self._network_log.add) if policy is not None else None
        process = DockerKernel(docker, self.image, name=self.name, memory=memory, cpus=cpus, pids=pids,
                               nofile=nofile, workspace_size=workspace_size, tmp_size=tmp_size,
                               network=bool(network), runtime=runtime, env=dict(env or {}), direct_link=direct_link,
                               proxy=proxy)
        self._kernel = process
        from ._pkg_docker import session_packages

        #: The session's packages (:class:`sandbox.packages.SessionPackages`): ``install()`` in the code,
        #: ``packages=`` up front (materialised once, shared read-only), every install's record.
        self.packages = process.packages = session_packages(docker, self.image, process, packages, package_policy)
        functions = [*functions, self.packages.host_function()]
        super().__init__(process, functions, timeout=timeout, output_limit=output_limit,
                         function_timeout=function_timeout, max_run_time=max_run_time, limits=limits,
                         start_timeout=start_timeout)

    def snapshot_files(self) -> DockerFiles:
        """The session's files and snapshot staging directory, through the engine's archive API."""
        from ._snapshot_io import DockerFiles

        return DockerFiles(self._kernel, self.workdir)

    @property
    def network_policy(self) -> NetworkPolicy | None:
        """The session's :class:`~sandbox.network.NetworkPolicy`, or None (no network, or a full bridge)."""
        return self.network if isinstance(self.network, NetworkPolicy) else None

    @property
    def network_requests(self) -> list[NetworkRecord]:
        """The requests through the network policy's proxy so far (the newest 10,000), oldest first."""
        return list(self._network_log.records)

    @property
    def network_listeners(self) -> list[Callable[[NetworkRecord], None]]:
        """Callables given each :class:`~sandbox.network.NetworkRecord` as its request ends (on the proxy's
        thread: they must not block). Append to it; remove yours when done."""
        return self._network_log.listeners

    @property
    def container(self) -> Any:
        """The session's container (a docker-py object), or None before it starts."""
        cid = self._kernel.container_id
        return self._docker.containers.get(cid) if cid else None

    # --- files -------------------------------------------------------------------------------

    def _sandbox_path(self, path: str) -> PurePosixPath:
        p = PurePosixPath(path)
        if p.is_absolute():
            try:
                p = p.relative_to(WORKDIR)
            except ValueError:
                raise FileTransferError(f"{path!r} is outside {WORKDIR}") from None
        try:
            check_relative_path(str(p))
        except UnsafePath as exc:
            raise FileTransferError(str(exc)) from None
        return PurePosixPath(WORKDIR) / p

    def upload(self, source: str | os.PathLike[str] | bytes, dest: str | None = None) -> str:
        """Copy a host file (or bytes) into ``/workspace``; returns the sandbox path."""
        with self._lock:
            self._check_open()
            self._ensure_kernel()
            if isinstance(source, (bytes, bytearray)):
                if dest is None:
                    raise FileTransferError("upload(bytes) needs dest= (a file name)")
                data = bytes(source)
            else:
                try:
                    with open(source, "rb") as f:
                        data = f.read()
                except OSError as exc:
                    raise FileTransferError(f"cannot read {source}: {exc.strerror}") from exc
                dest = dest or os.path.basename(os.fspath(source))
            target = self._sandbox_path(dest)
            try:
                self._kernel.put_file(target, data)
            except FileTransferError:
                raise
            except Exception as exc:
                raise FileTransferError(f"could not upload to {target}: {exc}") from exc
            return str(target)

    def download(self, path: str) -> bytes:
        """Read a file from the sandbox (relative paths are under ``/workspace``)."""
        with self._lock:
            self._check_open()
            self._ensure_kernel()
            p = PurePosixPath(path)
            if p.is_absolute() and not str(p).startswith(WORKDIR + "/"):
                try:  # the container's own files (the image): harmless to read, but no tricks in the name
                    target = PurePosixPath("/") / check_relative_path(str(p).lstrip("/"))
                except UnsafePath as exc:
                    raise FileTransferError(str(exc)) from None
            else:
                target = self._sandbox_path(path)
            try:
                return self._kernel.get_file(target, self.limits.max_download_bytes)
            except FileTransferError:
                raise
            except Exception as exc:
                raise FileTransferError(f"could not download {target}: {exc}") from exc


#: (engine address, image) pairs this process found on their engine: a session does not ask again (a round
#: trip on every cold start). An image removed since is reported when its container cannot be created.
_IMAGES_SEEN: set[tuple[str, str]] = set()


def _check_image(client: Any, image: str) -> None:
    """The image must be on the engine; a remote engine gets it copied from the local one (once per recipe)."""
    import docker.errors

    key = _image_key(client, image)
    if key is not None and key in _IMAGES_SEEN:
        return
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        if not is_local(client):
            ensure_image(client, image)
        elif not (is_podman(client) and _copy_from_local_docker(client, image)):
            raise _image_missing(image, client) from None
    if key is not None:
        _IMAGES_SEEN.add(key)


def _image_key(client: Any, image: str) -> tuple[str, str] | None:
    """Where ``image`` is looked for: the engine's address, for clients from :func:`sandbox.engines.connect`
    (a client of the caller's own says only "localhost" for any Unix socket: not remembered)."""
    engine = engine_of(client)
    return (engine.url, image) if engine is not None else None


def _copy_from_local_docker(client: Any, image: str) -> bool:
    """A Podman service on this machine gets the image from this machine's Docker engine, when that has it
    (``docker save`` into Podman's load, through both APIs); False when there is no such engine or image."""
    import docker.errors

    try:
        source = connect(Engine("local Docker", "unix:///var/run/docker.sock"), timeout=30)
    except BackendUnavailable:
        return False
    try:
        source.images.get(image)
    except (docker.errors.ImageNotFound, docker.errors.APIError, OSError):
        return False
    ensure_image(client, image, source=source)
    return True


def _image_missing(image: str, client: Any = None) -> ImageNotFound:
    build = "codeact image build"
    engine = engine_of(client) if client is not None else None
    if engine is not None and is_podman(client):
        build = f"DOCKER_HOST={engine.url} codeact image build"
    return ImageNotFound(
        f"the sandbox image {image!r} is not built; run `{build}` (about 3 minutes the first time)"
    )


def _image_gone(client: Any, image: str) -> ImageNotFound:
    """The image was found earlier in this process but is gone now: check again next time."""
    key = _image_key(client, image)
    if key is not None:
        _IMAGES_SEEN.discard(key)
    return _image_missing(image, client)


def _reap_once(client: Any) -> None:
    """Once per client: remove what killed processes left on its engine (in the background)."""
    if getattr(client, "_codeact_reaped", False):
        return
    client._codeact_reaped = True
    threading.Thread(target=lambda: _quiet(reap, client), daemon=True, name="sandbox-reap").start()


def _quiet(fn: Callable[..., Any], *args: Any) -> None:
    with contextlib.suppress(Exception):
        fn(*args)


def reap(client: Any = None, *, everything: bool = False) -> list[str]:
    """Remove sandbox containers whose host process is gone.

    A session labels its containers with the host name, pid and the pid's
    start time; on this host, a container whose process no longer exists
    (or is a different process with a reused pid) is an orphan. Containers
    stop by themselves when their process dies (see the module docs), so
    this only finds leftovers of engines that were down at the time, or of
    older versions. With ``everything=True`` all sandbox containers of this
    host are removed. Returns the session names removed.
    """
    client = client or docker_client()
    host = socket.gethostname()
    removed: list[str] = []
    for c in client.api.containers(all=True, filters={"label": LABEL}):
        labels = c.get("Labels") or {}
        if labels.get(f"{LABEL}.host") != host:
            continue
        pid = int(labels.get(f"{LABEL}.pid", "0") or 0)
        start = process_start_time(pid) if pid > 0 else ""
        alive = start != "" and start == labels.get(f"{LABEL}.pid-start")
        if alive and not everything:
            continue
        try:
            client.api.remove_container(c["Id"], force=True)
        except Exception:
            continue
        name = labels.get(f"{LABEL}.session") or c["Names"][0].lstrip("/")
        if name not in removed:
            removed.append(name)
    for v in client.api.volumes(filters={"label": LABEL}).get("Volumes") or []:
        labels = v.get("Labels") or {}  # named volumes of older versions
        if labels.get(f"{LABEL}.host") != host:
            continue
        pid = int(labels.get(f"{LABEL}.pid", "0") or 0)
        start = process_start_time(pid) if pid > 0 else ""
        if everything or not (start != "" and start == labels.get(f"{LABEL}.pid-start")):
            try:
                client.api.remove_volume(v["Name"], force=True)
                removed.append(v["Name"])
            except Exception:
                pass
    return removed
