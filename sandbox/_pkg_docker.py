"""Packages for the Docker backend: what an image has, a session's package volume, shared environments.

Everything moves through the engine's API (image labels, ``put_archive``,
volumes), never a bind mount, so it works on a remote engine too.

* A session's run-time installs go into an anonymous tmpfs volume at
  ``/opt/codeact/packages`` that belongs to its container (removed with it;
  in memory, because the engine fills it several times faster than a disk
  volume). The directory is root's: the engine writes it, the sandbox's
  user (uid 1000) can only read it, so code cannot plant modules there for
  a later kernel.
* An up-front package set is materialised once in a named volume
  ``codeact-env-<hash>`` (the hash covers the wheels and the target): a
  helper container that never runs the sandbox's code fills it with the
  set and its bytecode (from the host's cache, below, when the set was
  compiled before, on any engine; else compiled in place, and for the
  cache in the background) and writes a completion marker last. Sessions mount it
  read-only at ``/opt/codeact/env``. Two processes materialising the same
  set wait for each other (a lock on this host); a volume without its
  marker (a crash half-way) is filled again.
* A package set's bytecode is compiled once, by the
  image's own python in a helper container that never runs the sandbox's
  code and mounts nothing but a fresh volume of its own, and kept in the
  host's cache (``bytecode/``). An install delivers the sources at once and
  the bytecode with them when the cache has it; otherwise the bytecode is
  compiled in the background and added to the session's volume (root's, as
  the sources) when it is ready, for the later imports of the session, its
  subprocesses and later kernels. Without it every new Python process in the
  sandbox compiled scikit-learn and scipy from source again (seconds), since
  the sandbox's user cannot write ``__pycache__`` there.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import json
import queue
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import _podman
from .engines import is_podman
from ._labels import owner_labels
from ._pkg_pip import Target, log
from ._pkg_wheel import FIXED_MTIME, MAX_UNPACKED_BYTES, bytecode_tar, tar_bytes
from .packages import (
    ENV_DIR,
    KNOWN_TOP_LEVEL,
    PACKAGES_DIR,
    PackageCache,
    PackageInstallError,
    Plan,
    canonical_name,
)

#: Labels the image build writes (sandbox/image.py) and this module reads.
LABEL_PYTHON = "io.codeact.python"
LABEL_GLIBC = "io.codeact.glibc"
LABEL_PACKAGES = "io.codeact.packages"
LABEL_TOP_LEVEL = "io.codeact.top-level"
LABEL_ENV = "io.codeact.env"
MARKER = ".codeact-complete"
#: Run in a throw-away container to learn what an image without our labels has (the image's own code only).
_PROBE = (
    "import json, platform, sys, importlib.metadata as m\n"
    "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'libc': platform.libc_ver(),"
    " 'machine': platform.machine(),"
    " 'packages': {d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']}}))\n"
)
_ARCH = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}
#: Where the bytecode helper's compileall writes (its pycache_prefix), inside the helper's own volume.
_COMPILED_NAME = ".pyc"
_COMPILED = f"{PACKAGES_DIR}/{_COMPILED_NAME}"
#: Bounds on compiling one package set: the helper's whole life, and the compile in it.
_HELPER_LIFETIME = 1800
_COMPILE_TIMEOUT = 900.0
#: A session's package volume holds up to the policy's cap of packages and this share of it again for their
#: bytecode (bytecode that would not fit is left out: imports are then slower, never failing).
BYTECODE_SHARE = 0.5


def _helper_labels(kind: str) -> dict[str, str]:
    """The sandbox labels (host, pid): if this process dies mid-way, ``reap()`` removes the helper."""
    return {**owner_labels(f"codeact-helper-{kind}"), "io.codeact.helper": kind}


def _helper_config(client: Any, mounts: list[Any], **extra: Any) -> Any:
    if is_podman(client):  # Podman would set limits its runtime may not raise to (see sandbox._podman)
        extra.setdefault("ulimits", _podman.helper_ulimits())
    return client.api.create_host_config(network_mode="none", mounts=mounts, cap_drop=["ALL"],
                                         security_opt=["no-new-privileges"], read_only=True,
                                         tmpfs={"/tmp": "size=64m"}, mem_limit="1g", pids_limit=256, **extra)


#: Bytecode helpers running now (id -> engine client): removed when this process exits mid-compile; the
#: compile runs in a daemon thread, so a process that ends does not wait for it.
_LIVE_HELPERS: dict[str, Any] = {}
_LIVE_LOCK = threading.Lock()


@atexit.register
def _remove_live_helpers() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE_HELPERS.items())
    for helper, client in live:
        with contextlib.suppress(Exception):
            client.api.remove_container(helper, force=True, v=True)


def _tmpfs_volume(target: str, size: int | None, labels: dict[str, str] | None = None) -> Any:
    """An anonymous in-memory volume at ``target``, root's, mode 0755, of at most ``size`` bytes."""
    from docker.types import DriverConfig, Mount

    cap = f"size={size}," if size else ""
    tmpfs = DriverConfig("local", {"type": "tmpfs", "device": "tmpfs", "o": f"{cap}uid=0,gid=0,mode=0755,nosuid,nodev"})
    return Mount(target, None, type="volume", labels=labels, driver_config=tmpfs)


class DockerPackageBackend:
    """The :class:`~sandbox.packages.PackageBackend` of a :class:`~sandbox.DockerSandbox`."""

    def __init__(self, client: Any, image: str, cache: PackageCache, container_id: Callable[[], str | None]) -> None:
        self.client = client
        self.image = image
        self.cache = cache
        self.container_id = container_id
        self.env_volume: str | None = None
        #: Bytes the session's package volume may hold (the policy's cap); None: no cap of its own.
        self.max_bytes: int | None = None
        #: Deliver run-time installs with their bytecode (compiled in a helper, kept in the host's cache).
        self.bytecode = True
        #: batch -> (the container that has its sources, whether it has their bytecode too).
        self._placed: dict[str, tuple[str, bool]] = {}
        self._bytecode_used: tuple[str, int] = ("", 0)  # (container, bytes of bytecode put into it)
        self._put_lock = threading.Lock()
        self._todo: queue.Queue[tuple[str, Path]] = queue.Queue()
        self._pending = 0
        self._settled = threading.Condition()
        self._worker: threading.Thread | None = None

    # --- what the image has ----------------------------------------------------------------

    def inspect(self) -> tuple[Target, dict[str, str], tuple[str, ...]]:
        img = self.client.images.get(self.image)
        labels = img.labels or {}
        arch = _ARCH.get(str(img.attrs.get("Architecture", "amd64")), "x86_64")
        if LABEL_PYTHON in labels and LABEL_PACKAGES in labels:
            major, minor = (int(x) for x in labels.get(LABEL_GLIBC, "2.36").split(".")[:2])
            packages = {canonical_name(k): str(v) for k, v in json.loads(labels[LABEL_PACKAGES]).items()}
            top = tuple(canonical_name(n) for n in labels.get(LABEL_TOP_LEVEL, "").split())
            return Target.manylinux(labels[LABEL_PYTHON], arch, (major, minor)), packages, top
        return self._probe(img.id, arch)

    def _probe(self, image_id: str, arch: str) -> tuple[Target, dict[str, str], tuple[str, ...]]:
        record = self.cache.root / "images" / (image_id.replace(":", "-") + ".json")
        try:
            info = json.loads(record.read_text())
        except (OSError, ValueError):
            info = self._run_probe()
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(json.dumps(info))
        libc = info.get("libc") or ["", ""]
        if libc[0] != "glibc":
            raise PackageInstallError("no_wheel", f"the sandbox image {self.image} does not use glibc; packages "
                                                  "need a glibc-based image (the default image is)")
        major, minor = (int(x) for x in str(libc[1]).split(".")[:2])
        packages = {canonical_name(k): str(v) for k, v in info["packages"].items()}
        top = tuple(n for n in KNOWN_TOP_LEVEL if n in packages)
        return Target.manylinux(info["python"], _ARCH.get(info.get("machine", ""), arch), (major, minor)), \
            packages, top

    def _run_probe(self) -> dict[str, Any]:
        name = f"codeact-probe-{uuid.uuid4().hex[:10]}"
        created = self.client.api.create_container(self.image, ["python3", "-I", "-c", _PROBE], name=name,
                                                   user="1000:1000", host_config=_helper_config(self.client, []),
                                                   labels=_helper_labels("probe"))
        try:
            self.client.api.start(created["Id"])
            status = self.client.api.wait(created["Id"], timeout=120)
            out = self.client.api.logs(created["Id"], stdout=True, stderr=False).decode("utf-8", "replace")
            if status.get("StatusCode") != 0:
                raise PackageInstallError("internal", f"could not learn which packages {self.image} has")
            return json.loads(out.strip().splitlines()[-1])
        finally:
            self.client.api.remove_container(created["Id"], force=True, v=True)

    # --- the session's package volume --------------------------------------------------------

    def mounts(self) -> list[Any]:
        """Mounts the session's container needs: its package volume, and the shared environment if any."""
        from docker.types import Mount

        # A tmpfs volume: the engine extracts a large package set into memory 4-6 times faster than onto
        # disk (scikit-learn and scipy: ~0.6 s instead of ~3.5 s). Root's, mode 0755: the sandbox's user
        # reads it; only the engine writes it. Capped at what the policy lets a session add, plus room
        # for that much packages' bytecode.
        mounts = [_tmpfs_volume(PACKAGES_DIR, self._volume_bytes(), owner_labels("codeact-packages"))]
        if self.env_volume:
            mounts.append(Mount(ENV_DIR, self.env_volume, type="volume", read_only=True))
        return mounts

    def _volume_bytes(self) -> int | None:
        return int(self.max_bytes * (1 + BYTECODE_SHARE)) if self.max_bytes else None

    def deliver(self, batch: str, plan: Plan) -> str:
        container = self.container_id()
        if container is None:
            raise PackageInstallError("internal", "the sandbox's container is not running")
        bundle = self.cache.bundle(batch, plan.wheels)
        with self._put_lock:
            with bundle.open("rb") as f:
                if not self.client.api.put_archive(container, PACKAGES_DIR, f):
                    raise PackageInstallError("internal", "the engine did not accept the packages")
            self._placed[batch] = (container, False)
        if self.bytecode:
            code = self.cache.bytecode(batch)
            if code is not None:
                self._add_bytecode(batch, code)  # before the code imports anything of it: from the first import
            else:
                self._compile_later(batch, bundle)
        return f"{PACKAGES_DIR}/{batch}"

    # --- bytecode of run-time installs ---------------------------------------------------------

    def settle(self, timeout: float) -> bool:
        """Wait until the bytecode compiled in the background is in the session (or given up); True if so."""
        deadline = time.monotonic() + timeout
        with self._settled:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._settled.wait(left)
        return True

    def _compile_later(self, batch: str, bundle: Path) -> None:
        with self._settled:  # the worker leaves under this lock when it finds nothing to do
            self._pending += 1
            self._todo.put((batch, bundle))
            if self._worker is None or not self._worker.is_alive():
                # A daemon: a process that ends does not wait for a compile (its helper is reaped later).
                self._worker = threading.Thread(target=self._work, name="codeact-bytecode", daemon=True)
                self._worker.start()

    def _work(self) -> None:
        while True:
            try:
                batch, bundle = self._todo.get(timeout=60)
            except queue.Empty:
                with self._settled:
                    if self._todo.empty():
                        self._worker = None
                        return
                continue
            try:
                code = self.cache.make_bytecode(batch, functools.partial(self._compile, batch, bundle))
                self._add_bytecode(batch, code)
            except Exception as exc:  # only speed is lost: the sources are in place
                log.warning("compiling the bytecode of the package set %s failed: %s: %s", batch,
                            type(exc).__name__, exc)
            finally:
                with self._settled:
                    self._pending -= 1
                    self._settled.notify_all()

    def _add_bytecode(self, batch: str, code: Path) -> None:
        """Put the bytecode tar ``code`` of ``batch`` into the container that has its sources and not yet its
        bytecode, if it is still the session's and the bytecode fits; errors only cost speed."""
        import docker.errors

        with self._put_lock:
            container = self.container_id()
            if container is None or self._placed.get(batch) != (container, False):
                return  # delivered to a container since replaced, or already there
            size = tar_bytes(code)
            used = self._bytecode_used[1] if self._bytecode_used[0] == container else 0
            if size == 0 or (self.max_bytes and used + size > self.max_bytes * BYTECODE_SHARE):
                return
            try:
                with code.open("rb") as f:
                    ok = self.client.api.put_archive(container, PACKAGES_DIR, f)
            except (docker.errors.APIError, OSError) as exc:
                log.info("the bytecode of %s did not reach the sandbox: %s", batch, exc)
                return
            if ok:
                self._placed[batch] = (container, True)
                self._bytecode_used = (container, used + size)

    def _compile(self, batch: str, bundle: Path, out: Any) -> None:
        """Compile ``bundle`` with the image's python in a helper container; write its bytecode tar to ``out``.

        The helper runs as root with nothing but a fresh volume of its own
        (no network, no capabilities, read-only root): it never sees what a
        sandbox wrote, and only the image's compileall runs in it (it reads the
        packages' sources; nothing of them runs). Its output is checked as
        untrusted all the same (``bytecode_tar``).
        """
        import docker.errors

        size = bundle.stat().st_size
        volume = _tmpfs_volume(PACKAGES_DIR, 2 * size + 256 * 1024**2)
        helper = self.client.api.create_container(
            self.image, ["python3", "-I", "-c", f"import time; time.sleep({_HELPER_LIFETIME})"], user="0:0",
            labels=_helper_labels("bytecode"),
            # The lowest CPU weight: a kernel importing the same packages meanwhile (from source) goes first.
            host_config=_helper_config(self.client, [volume], auto_remove=True, cpu_shares=2))
        with _LIVE_LOCK:
            _LIVE_HELPERS[helper["Id"]] = self.client
        try:
            self.client.api.start(helper["Id"])
            with bundle.open("rb") as f:
                if not self.client.api.put_archive(helper["Id"], PACKAGES_DIR, f):
                    raise PackageInstallError("internal", "the engine did not accept the packages to compile")
            # Timestamps: the bytecode records each source's mtime and size, which every bundle fixes.
            run = self.client.api.exec_create(
                helper["Id"], ["python3", "-I", "-X", f"pycache_prefix={_COMPILED}", "-m", "compileall", "-q",
                               "-j", "0", "--invalidation-mode", "timestamp", f"{PACKAGES_DIR}/{batch}"],
                user="0:0", stdout=False, stderr=False)
            self.client.api.exec_start(run["Id"], detach=True)
            deadline = time.monotonic() + _COMPILE_TIMEOUT
            while self.client.api.exec_inspect(run["Id"]).get("Running"):
                if time.monotonic() > deadline:
                    raise PackageInstallError("internal", f"compiling {batch} took over {_COMPILE_TIMEOUT:.0f} s")
                time.sleep(0.2)
            # A file that did not compile (a syntax error) is only left out: exit status 1 is no failure.
            with tempfile.TemporaryDirectory(dir=self.cache.subdir("tmp")) as tmp:
                compiled = Path(tmp, "compiled.tar")
                with compiled.open("wb") as f:
                    try:
                        stream, _ = self.client.api.get_archive(helper["Id"], _COMPILED)
                    except docker.errors.NotFound:
                        stream = []  # no Python source in the set: an empty tar
                    written = 0
                    for chunk in stream:
                        written += len(chunk)
                        if written > MAX_UNPACKED_BYTES:
                            raise PackageInstallError("internal", f"the bytecode of {batch} is too large")
                        f.write(chunk)
                    if not written:
                        tarfile.open(fileobj=f, mode="w").close()
                # compileall wrote <prefix>/<the source's absolute directory>/<module>.<tag>.pyc.
                bytecode_tar(compiled, _COMPILED_NAME + PACKAGES_DIR, bundle, batch, out)
        finally:
            with contextlib.suppress(docker.errors.APIError):
                self.client.api.remove_container(helper["Id"], force=True, v=True)
            with _LIVE_LOCK:
                _LIVE_HELPERS.pop(helper["Id"], None)

    # --- shared environments -------------------------------------------------------------------

    def materialise(self, env_hash: str, plan: Plan) -> str:
        import docker.errors

        name = f"codeact-env-{env_hash}"
        path = f"{ENV_DIR}/{env_hash}"
        with self.cache.lock("docker-env-" + name):
            try:
                self.client.volumes.get(name)
                if self._complete(name, env_hash):
                    self.env_volume = name
                    return path
                self.client.volumes.get(name).remove(force=True)  # a fill that did not finish
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                raise PackageInstallError("internal",
                                          f"the package volume {name} is in use and incomplete: {exc}") from None
            self._fill(name, env_hash, plan)
            self.env_volume = name
            return path

    def _record_path(self, name: str) -> Path:
        engine = str(self.client.info().get("ID", "engine")).replace(":", "")[:40]
        return self.cache.root / "docker-envs" / f"{engine}-{name}.json"

    def _complete(self, name: str, env_hash: str) -> bool:
        import docker.errors

        record = self._record_path(name)
        if record.is_file():
            return True
        # Made by another host on this engine, or the record was lost: look for the marker.
        helper = self.client.api.create_container(
            self.image, ["true"], user="0:0", labels=_helper_labels("env"),
            host_config=_helper_config(self.client, [_mount(name, "/env", read_only=True)]))
        try:
            stream, _ = self.client.api.get_archive(helper["Id"], f"/env/{MARKER}")
            b"".join(stream)
            ok = True
        except (docker.errors.NotFound, docker.errors.APIError):
            ok = False
        finally:
            self.client.api.remove_container(helper["Id"], force=True, v=True)
        if ok:
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(json.dumps({"volume": name, "hash": env_hash}))
        return ok

    def _fill(self, name: str, env_hash: str, plan: Plan) -> None:
        started = time.perf_counter()
        packages = {w.pick.name: w.pick.version for w in plan.wheels}
        self.client.volumes.create(name, labels={LABEL_ENV: env_hash,
                                                 "io.codeact.env.packages": json.dumps(packages)[:4000]})
        bundle = self.cache.bundle(env_hash, plan.wheels)
        # The bytecode (the sandbox cannot write the volume): imports are then as fast as the image's own
        # packages. From the host's cache when the set was compiled before (a run-time install of it, or its
        # volume on another engine): copied in, about 2 s less than compiling scikit-learn and scipy again.
        # Else compiled here, in place (the image's python compiles; nothing of the packages runs), and for
        # the cache in the background.
        code = self.cache.bytecode(env_hash)
        command = ["true"] if code is not None else \
            ["python3", "-I", "-m", "compileall", "-q", "-j", "0", f"/env/{env_hash}"]
        helper = self.client.api.create_container(
            self.image, command, user="0:0", labels=_helper_labels("env"),
            host_config=_helper_config(self.client, [_mount(name, "/env")]))
        try:
            # The bytecode's __pycache__ links are relative: they hold below /env as below PACKAGES_DIR.
            for part in (bundle, code) if code is not None else (bundle,):
                with part.open("rb") as f:
                    if not self.client.api.put_archive(helper["Id"], "/env", f):
                        raise PackageInstallError("internal", f"could not fill the package volume {name}")
            if code is None:
                self.client.api.start(helper["Id"])
                self.client.api.wait(helper["Id"], timeout=1800)  # failures to compile only cost speed later
            marker = json.dumps({"hash": env_hash, "packages": packages,
                                 "seconds": round(time.perf_counter() - started, 3)}).encode()
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                info = tarfile.TarInfo(MARKER)
                info.size, info.mode, info.mtime = len(marker), 0o644, FIXED_MTIME
                tar.addfile(info, io.BytesIO(marker))
            if not self.client.api.put_archive(helper["Id"], "/env", buf.getvalue()):
                raise PackageInstallError("internal", f"could not finish the package volume {name}")
        except BaseException:
            self.client.api.remove_container(helper["Id"], force=True, v=True)
            with contextlib.suppress(Exception):
                self.client.volumes.get(name).remove(force=True)
            raise
        self.client.api.remove_container(helper["Id"], force=True, v=True)
        record = self._record_path(name)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"volume": name, "hash": env_hash, "packages": packages}))
        if code is None and self.bytecode:
            self._compile_later(env_hash, bundle)  # for the cache (lowest CPU weight; no session waits on it)


def _mount(volume: str, target: str, read_only: bool = False) -> Any:
    from docker.types import Mount

    return Mount(target, volume, type="volume", read_only=read_only)


def remove_environments(client: Any, cache: PackageCache | None = None) -> list[str]:
    """Remove every materialised package volume no container uses; returns their names."""
    import docker.errors

    removed = []
    for volume in client.volumes.list(filters={"label": LABEL_ENV}):
        try:
            volume.remove()
            removed.append(volume.name)
        except docker.errors.APIError:
            continue  # mounted by a running session
    if cache is not None:
        for record in (cache.root / "docker-envs").glob("*.json"):
            if any(record.name.endswith(f"-{name}.json") for name in removed):
                record.unlink(missing_ok=True)
    return removed


def session_packages(client: Any, image: str, kernel: Any, requirements: Any, policy: Any) -> Any:
    """The :class:`~sandbox.packages.SessionPackages` of a Docker session whose kernel process is ``kernel``."""
    from .packages import PackagePolicy, SessionPackages

    if isinstance(requirements, str):
        requirements = [r for r in requirements.split(",") if r.strip()]
    policy = policy or PackagePolicy()
    cache = policy.cache()
    backend = DockerPackageBackend(client, image, cache, lambda: kernel.container_id)
    backend.max_bytes = policy.max_total_bytes
    return SessionPackages(list(requirements or ()), policy, backend, cache)
