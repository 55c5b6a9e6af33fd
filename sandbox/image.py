"""Build and find the sandbox image.

The image tag carries a hash of its recipe (the Dockerfile, the offline base
script and the in-kernel runtime), so a changed recipe means a new tag and an
unchanged one is never rebuilt. Two ways to build, chosen automatically:

* ``standard``: ``FROM python:3.11-slim`` with the data stack from PyPI — needs
  an image registry;
* ``offline``: a base image made from Debian packages with debootstrap and
  ``docker import`` (``images/debian-base.sh``) — needs root and debootstrap,
  no registry.

Example::

    from sandbox.image import build_image
    build_image(log=print)        # skips when the image exists
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Literal

from .errors import BackendUnavailable, SandboxError

IMAGE_REPOSITORY = "codeact-sandbox"
BASE_REPOSITORY = "codeact-base"
STANDARD_BASE = "python:3.11-slim"
Variant = Literal["auto", "standard", "offline"]


def recipe_dir() -> Path:
    """The folder holding the Dockerfile and debian-base.sh (``images/`` in a checkout)."""
    return Path(str(resources.files("sandbox.recipes")))


def runtime_files() -> list[Path]:
    """The in-kernel runtime: the modules copied into the image (stdlib-only)."""
    runtime = Path(__file__).parent / "runtime"
    return [runtime / name for name in ("sandbox_init.py", "sandbox_runtime.py", "sandbox_wire.py", "sandbox_codec.py")]


def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


def recipe_hash() -> str:
    d = recipe_dir()
    return _digest(d / "Dockerfile", d / "debian-base.sh", *runtime_files())


def default_image_tag() -> str:
    """``$CODEACT_SANDBOX_IMAGE`` if set, else ``codeact-sandbox:<recipe hash>``."""
    return os.environ.get("CODEACT_SANDBOX_IMAGE") or f"{IMAGE_REPOSITORY}:{recipe_hash()}"


def offline_base_tag() -> str:
    return f"{BASE_REPOSITORY}:{_digest(recipe_dir() / 'debian-base.sh')}"


def image_exists(tag: str | None = None, client: Any = None) -> bool:
    import docker.errors

    from .container import docker_client

    client = client or docker_client()
    try:
        client.images.get(tag or default_image_tag())
        return True
    except docker.errors.ImageNotFound:
        return False


@dataclass(frozen=True)
class BuildResult:
    tag: str
    variant: str
    skipped: bool
    seconds: float


def _registry_reachable(client: Any, timeout: float = 20.0) -> bool:
    """True when the standard base image is present or can be pulled within ``timeout``."""
    import docker.errors

    try:
        client.images.get(STANDARD_BASE)
        return True
    except docker.errors.ImageNotFound:
        pass
    outcome: list[bool] = []

    def pull() -> None:
        try:
            client.images.pull(STANDARD_BASE)
            outcome.append(True)
        except Exception:
            outcome.append(False)

    t = threading.Thread(target=pull, daemon=True)
    t.start()
    t.join(timeout)
    return bool(outcome and outcome[0])


def build_image(
    variant: Variant = "auto",
    *,
    tag: str | None = None,
    force: bool = False,
    client: Any = None,
    log: Callable[[str], None] = lambda line: None,
) -> BuildResult:
    """Build the sandbox image unless an image of the same recipe exists.

    ``variant="auto"`` uses the standard recipe when a registry answers and
    the offline one otherwise. ``log`` receives build output line by line.
    """
    from .container import docker_client

    client = client or docker_client()
    tag = tag or default_image_tag()
    started = time.monotonic()
    if not force and image_exists(tag, client):
        log(f"{tag} is up to date")
        return BuildResult(tag, "existing", True, 0.0)
    if variant == "auto":
        log(f"checking whether {STANDARD_BASE} can be pulled ...")
        variant = "standard" if _registry_reachable(client) else "offline"
        log(f"building the {variant} variant")
    if variant == "standard":
        buildargs = {"BASE": STANDARD_BASE}
    elif variant == "offline":
        base = offline_base_tag()
        if force or not image_exists(base, client):
            _build_offline_base(base, log)
        buildargs = {"BASE": base, "PIP_PACKAGES": ""}
    else:
        raise SandboxError(f"unknown image variant {variant!r}; use auto, standard or offline")
    with tempfile.TemporaryDirectory(prefix="codeact-image-") as ctx:
        shutil.copy(recipe_dir() / "Dockerfile", Path(ctx) / "Dockerfile")
        (Path(ctx) / "runtime").mkdir()
        for path in runtime_files():
            shutil.copy(path, Path(ctx) / "runtime" / path.name)
        tail: list[str] = []
        for chunk in client.api.build(path=ctx, tag=tag, buildargs=buildargs, rm=True, forcerm=True,
                                      decode=True, labels={"io.codeact.recipe": tag.split(":")[-1],
                                                           "io.codeact.variant": variant}):
            if "stream" in chunk:
                for line in chunk["stream"].splitlines():
                    if line.strip():
                        log(line)
                        tail = (tail + [line])[-20:]
            if "error" in chunk:
                raise SandboxError("the image build failed: " + chunk["error"].strip() + "\n" + "\n".join(tail))
    client.images.get(tag).tag(IMAGE_REPOSITORY, "latest")
    return BuildResult(tag, variant, False, time.monotonic() - started)


def _build_offline_base(base_tag: str, log: Callable[[str], None]) -> None:
    if os.geteuid() != 0:
        raise BackendUnavailable(
            "no image registry answers, and the offline recipe needs root (debootstrap, chroot): "
            f"run `sudo codeact image build`, or pull {STANDARD_BASE} somewhere and `docker load` it"
        )
    if shutil.which("debootstrap") is None:
        raise BackendUnavailable(
            "no image registry answers, and the offline recipe needs debootstrap: apt-get install -y debootstrap"
        )
    script = recipe_dir() / "debian-base.sh"
    log(f"building the offline base image {base_tag} from Debian packages (2-3 minutes) ...")
    proc = subprocess.Popen(["bash", str(script), base_tag], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace")
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        line = line.rstrip()
        log(line)
        tail = (tail + [line])[-20:]
    if proc.wait() != 0:
        raise SandboxError("the offline base image build failed:\n" + "\n".join(tail))
