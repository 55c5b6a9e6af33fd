"""Build and find the sandbox image.

The image is a minimal Debian with its ``python3`` and a Python environment
made of binary wheels the *host* fetched: the same resolver and cache as
run-time installs (:mod:`sandbox.packages`), for the interpreter and pins named
in one file, ``images/requirements.txt`` (``images/full.txt`` adds the "full"
flavour's data-science set). Nothing is downloaded from inside a container.

The tag carries a hash of the recipe (the Dockerfile, the base script, the
requirement files and the in-kernel runtime), so a changed recipe means a new
tag and an unchanged one is never rebuilt. Two flavours:

* ``lean`` (the default): the kernel with numpy, pandas and matplotlib;
* ``full``: also scikit-learn, scipy, statsmodels, seaborn, pyarrow, openpyxl
  (``codeact image build --flavor full``; use it with ``CODEACT_SANDBOX_FLAVOR=full``
  or ``DockerSandbox(image=full_image_tag())``).

Two ways to get the base, chosen automatically:

* ``standard``: ``python:3.11-slim`` — needs an image registry;
* ``offline``: ``images/debian-base.sh`` (debootstrap + ``docker import``) —
  needs root and debootstrap, no registry.

Example::

    from sandbox.image import build_image
    build_image(log=print)                 # skips when the image exists
    build_image(flavor="full", log=print)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from .engines import Engine, connect, describe, engine_of
from .errors import BackendUnavailable, SandboxError

IMAGE_REPOSITORY = "codeact-sandbox"
BASE_REPOSITORY = "codeact-base"
STANDARD_BASE = "python:3.11-slim"
#: Where each base keeps its interpreter's site packages (the image's environment goes there).
SITE_DIRS = {"standard": "/usr/local/lib/python3.11/site-packages",
             "offline": "/usr/local/lib/python3.11/dist-packages"}
#: Which flavour ``default_image_tag()`` means, when ``CODEACT_SANDBOX_IMAGE`` does not name an image.
FLAVOR_ENV = "CODEACT_SANDBOX_FLAVOR"
Variant = Literal["auto", "standard", "offline"]
Flavor = Literal["lean", "full"]
FLAVORS: tuple[str, ...] = ("lean", "full")
_RECIPE_FILES = {"lean": ("requirements.txt",), "full": ("requirements.txt", "full.txt")}


def recipe_dir() -> Path:
    """The folder holding the Dockerfile, debian-base.sh and the requirement files (``images/`` in a checkout)."""
    return Path(str(resources.files("sandbox.recipes")))


def runtime_files() -> list[Path]:
    """The in-kernel runtime: the modules copied into the image (stdlib-only)."""
    runtime = Path(__file__).parent / "runtime"
    # sandbox_codec.py imports the other sandbox_codec_* modules (see its "Modules").
    return [runtime / name for name in ("sandbox_init.py", "sandbox_runtime.py", "sandbox_wire.py",
                                        "sandbox_snapshot.py", "sandbox_codec.py", "sandbox_codec_limits.py",
                                        "sandbox_codec_values.py", "sandbox_codec_encode.py",
                                        "sandbox_codec_decode.py")]


# --------------------------------------------------------------------------- the recipe


@dataclass(frozen=True)
class Recipe:
    """What an image flavour is made of, read from ``images/requirements.txt`` (and ``full.txt``)."""

    flavor: str
    python: str
    glibc: tuple[int, int]
    #: Pinned requirements (``name==version``), every distribution of the environment.
    pins: tuple[str, ...]
    #: Distributions named in the system prompt.
    top_level: tuple[str, ...]
    #: Resolved as dependencies but left out of the image.
    exclude: tuple[str, ...] = ()
    #: The lean flavour's pins, when this is a bigger one (its extra layer holds only the rest).
    base_pins: tuple[str, ...] = field(default=())


def _parse(path: Path) -> tuple[dict[str, str], list[str]]:
    directives: dict[str, str] = {}
    pins: list[str] = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line.startswith("#"):
            body = line.lstrip("#").strip()
            key, sep, value = body.partition(":")
            if sep and key in ("python", "glibc", "top-level", "exclude"):
                directives[key] = value.split("  ")[0].strip()
            continue
        line = line.split("#", 1)[0].strip()
        if line:
            pins.append(line)
    return directives, pins


def read_recipe(flavor: str = "lean") -> Recipe:
    """The recipe of ``flavor`` ("lean" or "full")."""
    if flavor not in _RECIPE_FILES:
        raise SandboxError(f"unknown image flavour {flavor!r}; use lean or full")
    lean, lean_pins = _parse(recipe_dir() / "requirements.txt")
    directives, pins, top = dict(lean), list(lean_pins), lean.get("top-level", "").split()
    exclude = lean.get("exclude", "").split()
    for name in _RECIPE_FILES[flavor][1:]:
        extra, extra_pins = _parse(recipe_dir() / name)
        pins += [p for p in extra_pins if p not in pins]
        top += extra.get("top-level", "").split()
        exclude += extra.get("exclude", "").split()
    major, minor = (int(x) for x in directives.get("glibc", "2.36").split(".")[:2])
    return Recipe(flavor, directives.get("python", "3.11"), (major, minor), tuple(pins), tuple(top), tuple(exclude),
                  tuple(lean_pins) if flavor != "lean" else ())


def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


def recipe_hash(flavor: str = "lean") -> str:
    d = recipe_dir()
    files = [d / name for name in _RECIPE_FILES.get(flavor, _RECIPE_FILES["lean"])]
    return _digest(d / "Dockerfile", d / "debian-base.sh", *files, *runtime_files())


def image_tag(flavor: str = "lean") -> str:
    """``codeact-sandbox:<recipe hash>`` for the lean flavour, ``codeact-sandbox:full-<hash>`` for the full one."""
    prefix = "" if flavor == "lean" else f"{flavor}-"
    return f"{IMAGE_REPOSITORY}:{prefix}{recipe_hash(flavor)}"


def full_image_tag() -> str:
    return image_tag("full")


def default_image_tag() -> str:
    """``$CODEACT_SANDBOX_IMAGE`` if set, else the tag of ``$CODEACT_SANDBOX_FLAVOR`` (default: lean)."""
    explicit = os.environ.get("CODEACT_SANDBOX_IMAGE")
    if explicit:
        return explicit
    flavor = os.environ.get(FLAVOR_ENV) or "lean"
    return image_tag(flavor if flavor in FLAVORS else "lean")


def offline_base_tag() -> str:
    return f"{BASE_REPOSITORY}:{_digest(recipe_dir() / 'debian-base.sh')}"


def image_exists(tag: str | None = None, client: Any = None) -> bool:
    import docker.errors

    client = client or connect()
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
    flavor: str = "lean"
    #: Distributions in the image: name -> version (empty when skipped).
    packages: dict[str, str] = field(default_factory=dict)


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


def _engine_arch(client: Any) -> str:
    arch = str(client.info().get("Architecture") or "x86_64")
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)


def build_image(
    variant: Variant = "auto",
    *,
    flavor: str | None = None,
    tag: str | None = None,
    force: bool = False,
    client: Any = None,
    log: Callable[[str], None] = lambda line: None,
    package_cache: Any = None,
) -> BuildResult:
    """Build the sandbox image of ``flavor`` unless an image of the same recipe exists.

    ``variant="auto"`` uses the standard base when a registry answers and
    the offline one otherwise. ``log`` receives build output line by line.
    The wheels come from the host's package cache (``package_cache``, a
    :class:`sandbox.packages.PackageCache`; default ``~/.cache/codeact/packages``),
    fetched by the host's pip the first time.
    """
    client = client or connect()
    if flavor is None:
        flavor = "full" if tag and tag.rsplit(":", 1)[-1].startswith("full-") else "lean"
    recipe = read_recipe(flavor)
    tag = tag or image_tag(flavor)
    started = time.monotonic()
    if not force and image_exists(tag, client):
        log(f"{tag} is up to date")
        return BuildResult(tag, "existing", True, 0.0, flavor)
    if variant == "auto":
        log(f"checking whether {STANDARD_BASE} can be pulled ...")
        variant = "standard" if _registry_reachable(client) else "offline"
        log(f"building the {variant} variant")
    if variant == "standard":
        base = STANDARD_BASE
    elif variant == "offline":
        base = offline_base_tag()
        if force or not image_exists(base, client):
            _build_offline_base(base, log)
    else:
        raise SandboxError(f"unknown image variant {variant!r}; use auto, standard or offline")
    wheels = _fetch_environment(recipe, _engine_arch(client), package_cache, log)
    packages = {w.pick.name: w.pick.version for w in wheels}
    labels = {
        "io.codeact.recipe": tag.split(":")[-1], "io.codeact.variant": variant, "io.codeact.flavor": flavor,
        "io.codeact.python": recipe.python, "io.codeact.glibc": f"{recipe.glibc[0]}.{recipe.glibc[1]}",
        "io.codeact.packages": json.dumps(packages, sort_keys=True), "io.codeact.top-level": " ".join(recipe.top_level),
    }
    with tempfile.TemporaryDirectory(prefix="codeact-image-") as ctx:
        _make_context(Path(ctx), recipe, wheels, log)
        buildargs = {"BASE": base, "SITE": SITE_DIRS[variant]}
        tail: list[str] = []
        log(f"building {tag} ({flavor}: {len(wheels)} distributions) ...")
        for chunk in client.api.build(path=ctx, tag=tag, buildargs=buildargs, rm=True, forcerm=True,
                                      decode=True, labels=labels):
            if "stream" in chunk:
                for line in chunk["stream"].splitlines():
                    if line.strip():
                        log(line)
                        tail = (tail + [line])[-20:]
            if "error" in chunk:
                raise SandboxError("the image build failed: " + chunk["error"].strip() + "\n" + "\n".join(tail))
    if flavor == "lean":
        client.images.get(tag).tag(IMAGE_REPOSITORY, "latest")
    return BuildResult(tag, variant, False, time.monotonic() - started, flavor, packages)


def _fetch_environment(recipe: Recipe, arch: str, cache: Any, log: Callable[[str], None]) -> list[Any]:
    """The recipe's wheels, resolved and fetched by the host (from its cache after the first time)."""
    from .packages import (
        PackageCache,
        PackageInstaller,
        PackageInstallError,
        PackagePolicy,
        Target,
        canonical_name,
    )

    target = Target.manylinux(recipe.python, arch, recipe.glibc)
    policy = PackagePolicy(max_total_bytes=None, resolution_max_age=float("inf"))
    installer = PackageInstaller(policy, target, cache or PackageCache())
    log(f"fetching wheels for {target.describe()} on the host ({len(recipe.pins)} pins) ...")
    try:
        plan = installer.plan(recipe.pins, {}, source="image")
    except PackageInstallError as exc:
        raise SandboxError(f"the image's Python environment cannot be fetched: {exc} (images/requirements.txt "
                           "names the pins; the host's pip must reach the index, or set PIP_INDEX_URL / "
                           "PIP_FIND_LINKS to a mirror or a wheelhouse)") from exc
    excluded = {canonical_name(n) for n in recipe.exclude}
    wheels = [w for w in plan.wheels if canonical_name(w.pick.name) not in excluded]
    log(f"{len(wheels)} wheels ({plan.downloaded} downloaded now), {sum(w.installed_bytes for w in wheels) / 1e6:.0f} "
        "MB installed")
    return wheels


def _make_context(ctx: Path, recipe: Recipe, wheels: list[Any], log: Callable[[str], None]) -> None:
    """The build context: the Dockerfile, the runtime, and the unpacked wheels (lean ones apart from extra ones)."""
    from ._pkg_wheel import extract_tar
    from .packages import canonical_name

    shutil.copy(recipe_dir() / "Dockerfile", ctx / "Dockerfile")
    (ctx / "runtime").mkdir()
    for path in runtime_files():
        shutil.copy(path, ctx / "runtime" / path.name)
    lean_names = {canonical_name(p.split("==")[0].split("[")[0]) for p in recipe.base_pins}
    site, extra = ctx / "site", ctx / "site-extra"
    site.mkdir()
    extra.mkdir()
    for w in wheels:
        into = extra if recipe.base_pins and canonical_name(w.pick.name) not in lean_names else site
        extract_tar(w.tar, into)
    (extra / ".keep").touch()  # COPY needs a non-empty source


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
    log(f"building the offline base image {base_tag} from Debian (about a minute) ...")
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


# --- the image on another engine ---------------------------------------------------------------------


def ensure_image(client: Any, tag: str, *, source: Any = None, log: Callable[[str], None] = lambda line: None) -> str:
    """Make the sandbox image ``tag`` present on ``client``'s engine; returns how ("present", "copied", "built").

    The tag carries the recipe's hash, so an image already there is never sent
    again. Otherwise it is streamed from ``source`` (default: the local engine),
    building it there first if needed (``codeact image build``).
    """
    import docker.errors

    try:
        client.images.get(tag)
        return "present"
    except docker.errors.ImageNotFound:
        pass
    if source is None:
        source = connect(Engine("local", "unix:///var/run/docker.sock"))
    try:
        source.images.get(tag)
    except docker.errors.ImageNotFound:
        log(f"building {tag} on the local engine first")
        build_image(tag=tag, client=source, log=log)
    except Exception as exc:
        raise BackendUnavailable(
            f"the sandbox image {tag} is not on {describe(client)}, and it cannot be copied there from the local "
            f"engine ({exc}); build it on that engine (`DOCKER_HOST=... codeact image build`)"
        ) from exc
    log(f"copying {tag} to {describe(client)}")
    started = time.monotonic()
    stream = source.api.get_image(tag)  # a tar stream, chunk by chunk
    # The engine answers a load only when it has unpacked every layer: no short read timeout here.
    loader = connect(engine_of(client), timeout=3600) if engine_of(client) is not None else client
    loader.api.load_image(_chunks(stream))
    client.images.get(tag)
    log(f"copied {tag} in {time.monotonic() - started:.1f} s")
    return "copied"


def _chunks(stream: Any) -> Any:
    for chunk in stream:
        if chunk:
            yield chunk
