"""The Docker backend: a Jupyter kernel inside a locked-down container.

Defaults: no network, a non-root user, a read-only root filesystem, size-capped
tmpfs for /tmp and a size-capped /workspace volume, memory limit with swap
equal to it, a CPU quota, a pids limit, all capabilities dropped,
no-new-privileges, an init process, capped container logs, and labels that
let :func:`reap` find containers whose host process died.

The kernel's ZMQ sockets are Unix sockets in a per-session directory that is
bind-mounted into the container, so the container needs no network at all.

/workspace is a size-capped tmpfs volume. Docker unmounts such a volume (and
its files are gone) when the last container using it stops, and the kernel
container stops whenever its kernel dies or is restarted. So each session
also runs a tiny, equally locked-down *keeper* container that only holds the
volume: files survive kernel restarts, OOM kills and a killed container.
"""

from __future__ import annotations

import io
import os
import socket
import tarfile
import threading
import time
import uuid
import warnings
import weakref
from pathlib import PurePosixPath
from typing import Any, Callable

from .base import DEFAULT_OUTPUT_LIMIT, DEFAULT_TIMEOUT
from .errors import BackendUnavailable, FileTransferError, ImageNotFound, KernelStartError
from .functions import HostFunction
from .kernel import KernelExit, KernelSandbox, exit_detail

LABEL = "io.codeact.sandbox"
KEEPER_SUFFIX = "-keeper"
CONTAINER_SOCKET_DIR = "/run/sandbox"
WORKDIR = "/workspace"
SANDBOX_UID = 1000


def docker_client(timeout: float = 120) -> Any:
    """A docker-py client, or :class:`BackendUnavailable` saying how to get an engine."""
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - docker is a dependency
        raise BackendUnavailable("the 'docker' package is missing: pip install docker") from exc
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
        return client
    except Exception as exc:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise BackendUnavailable(
            f"no Docker engine answers at {host} ({exc.__class__.__name__}). Install and start Docker "
            "(e.g. `apt-get install docker.io && dockerd &`), or use backend='local' (not isolated)."
        ) from exc


def _process_start_time(pid: int) -> str:
    """Start time of a process in clock ticks since boot ('' if unknown): tells pid reuse apart."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


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
    network (warns: the code can then reach your network). ``runtime="runsc"``
    uses gVisor where it is installed.
    """

    backend = "docker"
    workdir = WORKDIR

    def __init__(
        self,
        functions: list[Callable[..., Any] | HostFunction] | tuple = (),
        *,
        image: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        function_timeout: float | None = 60.0,
        memory: str = "1g",
        cpus: float = 1.0,
        pids: int = 256,
        workspace_size: str = "1g",
        tmp_size: str = "256m",
        network: bool = False,
        runtime: str | None = None,
        env: dict[str, str] | None = None,
        client: Any = None,
        start_timeout: float = 60.0,
    ) -> None:
        super().__init__(functions, timeout=timeout, output_limit=output_limit, function_timeout=function_timeout)
        try:
            from .image import default_image_tag

            self._docker = client or docker_client()
            self.image = image or default_image_tag()
            self._check_image()
        except BaseException:
            self._finalizer()
            raise
        self.memory, self.cpus, self.pids = memory, cpus, pids
        self.workspace_size, self.tmp_size = workspace_size, tmp_size
        self.network, self.runtime, self.env = network, runtime, dict(env or {})
        self.start_timeout = start_timeout
        if network:
            warnings.warn(
                "DockerSandbox(network=True): sandboxed code can reach your network and the internet",
                stacklevel=2,
            )
        self.name = f"codeact-sbx-{uuid.uuid4().hex[:12]}"
        self.uid = os.getuid() if os.getuid() != 0 else SANDBOX_UID
        self.container: Any = None
        self.volume: Any = None
        self.keeper: Any = None
        self._generation = 0
        if os.getuid() == 0:  # the kernel runs as an unprivileged user and must create its sockets here
            os.chown(self.socket_dir, self.uid, self.uid)
        self._docker_finalizer = weakref.finalize(self, _remove_docker_objects, self._docker, self.name)

    def _check_image(self) -> None:
        import docker.errors

        try:
            self._docker.images.get(self.image)
        except docker.errors.ImageNotFound:
            raise ImageNotFound(
                f"the sandbox image {self.image!r} is not built; run `codeact image build` "
                "(about 3 minutes the first time), or use backend='local'"
            ) from None

    # --- process hooks ------------------------------------------------------------------

    def _kernel_ip(self) -> str:
        return f"{CONTAINER_SOCKET_DIR}/k"

    def _memory_limit_text(self) -> str | None:
        return self.memory

    def _kill_strays_in_namespace(self) -> bool:
        return True

    def _labels(self) -> dict[str, str]:
        pid = os.getpid()
        return {
            LABEL: "1",
            f"{LABEL}.host": socket.gethostname(),
            f"{LABEL}.pid": str(pid),
            f"{LABEL}.pid-start": _process_start_time(pid),
            f"{LABEL}.socket-dir": str(self.socket_dir),
            f"{LABEL}.session": self.name,
        }

    def _write_connection_file(self):  # noqa: ANN201 - same as base
        path = super()._write_connection_file()
        if os.getuid() == 0:
            os.chown(path, self.uid, self.uid)
        path.chmod(0o600)
        return path

    def _create(self) -> None:
        import docker.errors
        from docker.types import LogConfig, Mount

        if self.volume is None:
            self.volume = self._docker.volumes.create(
                name=self.name,
                driver="local",
                driver_opts={"type": "tmpfs", "device": "tmpfs",
                             "o": f"size={self.workspace_size},uid={self.uid},gid={self.uid},mode=0755"},
                labels=self._labels(),
            )
        env = {"PYTHONPATH": "/opt/sandbox/runtime", **self.env}
        try:
            self.container = self._docker.containers.create(
                self.image,
                command=["python3", "-c", "import sandbox_runtime; sandbox_runtime.launch()",
                         "-f", f"{CONTAINER_SOCKET_DIR}/kernel.json"],
                name=self.name,
                labels=self._labels(),
                working_dir=WORKDIR,
                environment=env,
                tmpfs={"/tmp": f"size={self.tmp_size},mode=1777"},
                mounts=[
                    Mount(WORKDIR, self.name, type="volume"),
                    Mount(CONTAINER_SOCKET_DIR, str(self.socket_dir), type="bind"),
                ],
                log_config=LogConfig(type="json-file", config={"max-size": "1m", "max-file": "1"}),
                **self._locked_down(memory=self.memory, cpus=self.cpus, pids=self.pids, network=self.network),
            )
        except docker.errors.APIError as exc:
            if self.runtime and "runtime" in str(exc).lower():
                raise BackendUnavailable(
                    f"Docker does not know the runtime {self.runtime!r}; install it or drop runtime=..."
                ) from exc
            raise KernelStartError(f"could not create the sandbox container: {exc.explanation or exc}") from exc

    def _locked_down(self, *, memory: str, cpus: float, pids: int, network: bool) -> dict[str, Any]:
        """The security options every container of a session gets (kernel and keeper alike)."""
        return {
            "user": f"{self.uid}:{self.uid}",
            "network_mode": "bridge" if network else "none",
            "read_only": True,
            "mem_limit": memory,
            "memswap_limit": memory,  # no swap beyond the memory limit
            "nano_cpus": int(cpus * 1e9),
            "pids_limit": pids,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "init": True,
            "runtime": self.runtime,
            "stop_signal": "SIGKILL",
        }

    def _start_keeper(self) -> None:
        """Create and start the container that keeps the /workspace volume mounted."""
        from docker.types import LogConfig, Mount

        self.keeper = self._docker.containers.create(
            self.image,
            command=["python3", "-I", "-S", "-c", "import signal; signal.pause()"],
            name=self.name + KEEPER_SUFFIX,
            labels={**self._labels(), f"{LABEL}.role": "keeper"},
            environment={},
            mounts=[Mount(WORKDIR, self.name, type="volume")],
            log_config=LogConfig(type="json-file", config={"max-size": "64k", "max-file": "1"}),
            **self._locked_down(memory="32m", cpus=0.1, pids=4, network=False),
        )
        self.keeper.start()

    def _keeper_running(self) -> bool:
        if self.keeper is None:
            return False
        try:
            return bool(self._docker.api.inspect_container(self.keeper.id)["State"]["Running"])
        except Exception:
            return False

    def _start_process(self) -> None:
        self._write_connection_file()
        if self.container is None:
            self._create()
        keeper_error: list[BaseException] = []
        keeper_thread = None
        if self.keeper is None:
            # Started alongside the kernel's container: it costs no extra start-up time.
            def start_keeper() -> None:
                try:
                    self._start_keeper()
                except BaseException as exc:
                    keeper_error.append(exc)

            keeper_thread = threading.Thread(target=start_keeper, daemon=True, name=f"keeper-{self.name}")
            keeper_thread.start()
        elif not self._keeper_running():
            try:  # stopped from outside: start it again (the files are gone then, but later ones are kept)
                self.keeper.start()
            except Exception:
                try:
                    self.keeper.remove(force=True)
                except Exception:
                    pass
                self.keeper = None
                self._start_keeper()
        self._generation += 1
        try:
            self.container.start()
        except Exception as exc:
            raise KernelStartError(f"could not start the sandbox container: {exc}") from exc
        finally:
            if keeper_thread is not None:
                keeper_thread.join()
        if keeper_error:
            raise KernelStartError(f"could not start the sandbox's volume keeper container: {keeper_error[0]}")
        # The watcher holds the session weakly: a forgotten session must still be collectable
        # (its finalizer removes the container).
        threading.Thread(
            target=_watch_container, args=(weakref.ref(self), self._docker, self.container.id, self._generation),
            daemon=True, name=f"watch-{self.name}",
        ).start()

    def _interrupt_process(self) -> None:
        # docker-init forwards the signal to the kernel, which raises KeyboardInterrupt.
        try:
            self.container.kill(signal="SIGINT")
        except Exception:
            pass

    def _stop_process(self) -> None:
        if self.container is None:
            return
        self._generation += 1  # the watcher of the old process must not report this stop
        try:
            self.container.kill()
        except Exception:
            pass
        try:
            self._docker.api.wait(self.container.id, timeout=30)
        except Exception:
            pass

    def _recreate_process(self) -> None:
        self._generation += 1
        if self.container is not None:
            try:
                self.container.remove(force=True)
            except Exception:
                pass
            self.container = None
        self._start_process()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._docker_finalizer()
            self.container = None

    # --- files -------------------------------------------------------------------------------

    def _sandbox_path(self, path: str) -> PurePosixPath:
        p = PurePosixPath(path)
        return p if p.is_absolute() else PurePosixPath(WORKDIR) / p

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
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                info = tarfile.TarInfo(target.name)
                info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
                info.uid = info.gid = self.uid
                tar.addfile(info, io.BytesIO(data))
            self._run_silent_checked(f"__import__('os').makedirs({str(target.parent)!r}, exist_ok=True)")
            try:
                ok = self.container.put_archive(str(target.parent), buf.getvalue())
            except Exception as exc:
                raise FileTransferError(f"could not upload to {target}: {exc}") from exc
            if not ok:
                raise FileTransferError(f"could not upload to {target}")
            return str(target)

    def download(self, path: str) -> bytes:
        """Read a file from the sandbox (relative paths are under ``/workspace``)."""
        import docker.errors

        with self._lock:
            self._check_open()
            self._ensure_kernel()
            target = self._sandbox_path(path)
            try:
                stream, stat = self.container.get_archive(str(target))
            except docker.errors.NotFound:
                raise FileTransferError(f"no such file in the sandbox: {target}") from None
            except Exception as exc:
                raise FileTransferError(f"could not download {target}: {exc}") from exc
            buf = io.BytesIO(b"".join(stream))
            with tarfile.open(fileobj=buf) as tar:
                member = tar.next()
                if member is None or not member.isfile():
                    raise FileTransferError(f"{target} is not a regular file")
                extracted = tar.extractfile(member)
                assert extracted is not None
                return extracted.read()

    def _run_silent_checked(self, code: str) -> None:
        reply = self._execute_silent(code, 30.0)
        if reply.get("status") != "ok":
            raise FileTransferError(f"{reply.get('ename')}: {reply.get('evalue')}")


def _watch_container(ref: "weakref.ref[DockerSandbox]", client: Any, container_id: str, generation: int) -> None:
    """Block until the container stops, then tell the session why (runs in a thread)."""
    try:
        status = client.api.wait(container_id, timeout=None)
        code = status.get("StatusCode")
    except Exception:
        code = None
    sandbox = ref()
    if sandbox is None or generation != sandbox._generation:
        return  # the session is gone, or this is an older incarnation a restart replaced
    oom, detail = False, ""
    try:
        state = client.api.inspect_container(container_id)["State"]
        oom = bool(state.get("OOMKilled"))
        logs = client.api.logs(container_id, tail=20).decode("utf-8", "replace")
        detail = exit_detail(logs.splitlines())
    except Exception:
        pass
    sandbox._on_process_exit(KernelExit(code, oom, detail))


def _remove_docker_objects(client: Any, name: str) -> None:
    """Remove a session's containers (kernel and keeper) and volume (finalizer: must not raise)."""
    for container in (name, name + KEEPER_SUFFIX):
        try:
            client.api.remove_container(container, force=True)
        except Exception:
            pass
    for _ in range(20):
        try:
            client.api.remove_volume(name, force=True)
            return
        except Exception as exc:
            if "not found" in str(exc).lower() or "no such volume" in str(exc).lower():
                return
            time.sleep(0.1)  # the container may still be going away


def reap(client: Any = None, *, everything: bool = False) -> list[str]:
    """Remove sandbox containers and volumes whose host process is gone.

    A session labels its container with the host name, pid and the pid's
    start time; on this host, a container whose process no longer exists
    (or is a different process with a reused pid) is an orphan. With
    ``everything=True`` all sandbox containers of this host are removed.
    Returns the names removed.
    """
    import shutil

    client = client or docker_client()
    host = socket.gethostname()
    removed: list[str] = []
    for c in client.api.containers(all=True, filters={"label": LABEL}):
        labels = c.get("Labels") or {}
        if labels.get(f"{LABEL}.host") != host:
            continue
        pid = int(labels.get(f"{LABEL}.pid", "0") or 0)
        alive = pid > 0 and _process_start_time(pid) == labels.get(f"{LABEL}.pid-start") and \
            _process_start_time(pid) != ""
        if alive and not everything:
            continue
        name = labels.get(f"{LABEL}.session") or c["Names"][0].lstrip("/").removesuffix(KEEPER_SUFFIX)
        if name in removed:
            continue
        _remove_docker_objects(client, name)
        sock_dir = labels.get(f"{LABEL}.socket-dir", "")
        if sock_dir and os.path.basename(sock_dir).startswith("sbx-"):
            shutil.rmtree(sock_dir, ignore_errors=True)
        removed.append(name)
    for v in client.api.volumes(filters={"label": LABEL}).get("Volumes") or []:
        labels = v.get("Labels") or {}
        if labels.get(f"{LABEL}.host") != host or v["Name"] in removed:
            continue
        pid = int(labels.get(f"{LABEL}.pid", "0") or 0)
        alive = pid > 0 and _process_start_time(pid) == labels.get(f"{LABEL}.pid-start") != ""
        if everything or not alive:
            _remove_docker_objects(client, v["Name"])
            removed.append(v["Name"])
    return removed
