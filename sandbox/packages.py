"""Python packages for sandboxes that have no network: resolved and fetched on the host, installed from its cache.

The sandbox never gets a network. When code asks for a package
(``install("scikit-learn")``, ``%pip install x``, ``!pip install x``) or a
session is opened with ``packages=[...]``, the *host*:

1. accepts only a strict requirement grammar (:func:`parse_requirements`:
   names, extras, version specifiers) and checks the names against the
   :class:`PackagePolicy` (allow and deny lists);
2. resolves the request with its own pip for the sandbox's Python and
   platform, binary wheels only (nothing is built, nothing from a package
   runs on the host), keeping what the image already has fixed; pip gets
   the requirements as arguments, never in a file it would expand, and a
   minimal environment (see ``_pkg_pip``);
3. checks every resolved distribution against the policy and the size cap
   (the wheels' sizes, asked of the index), and asks the policy's
   ``approve`` hook: a refusal downloads nothing;
4. downloads the wheels into its cache (``~/.cache/codeact/packages``,
   bounded, least recently used out first), once;
5. copies their unpacked files into the sandbox through the engine's archive
   API, into a directory the sandbox can read but not write; the kernel then
   imports from it without a restart.

A set of packages given up front is *materialised* once: a content-addressed,
read-only Docker volume (``codeact-env-<hash>``) that every later session
asking for the same set mounts, so it starts without installing anything.

Errors reach the sandboxed code as ``PackageInstallError`` with a ``kind``:
``not_found``, ``no_wheel`` (source-only, or nothing for this platform),
``policy`` (which rule), ``too_large``, ``conflict`` (which requirements),
``denied`` (the approval hook said no), ``unreachable`` (the index),
``invalid`` (not a requirement), ``disabled``. Nothing of a failed install
becomes importable.

Example::

    from sandbox import DockerSandbox
    from sandbox.packages import PackagePolicy

    policy = PackagePolicy(deny=("torch*",), max_total_bytes=500_000_000)
    with DockerSandbox(packages=["scikit-learn"], package_policy=policy) as sb:
        print(sb.run("import sklearn; print(sklearn.__version__)").stdout)
        sb.run("install('statsmodels>=0.14')")
        print(sb.packages.records[-1].packages)
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from . import _pkg_pip as pip
from ._pkg_cache import DEFAULT_CACHE_MAX_AGE, DEFAULT_CACHE_MAX_BYTES, CachedWheel, PackageCache
from ._pkg_pip import Sources, Target
from .errors import PackageInstallError
from .functions import HostFunction, current_call

#: Where a session's run-time installs go in a container: a volume only the engine (the host) writes.
PACKAGES_DIR = "/opt/codeact/packages"
#: Where a materialised package set is mounted, read-only.
ENV_DIR = "/opt/codeact/env"
#: The host function the in-sandbox ``install()`` calls.
INSTALL_FUNCTION = "__sandbox_install__"
#: Bounds on what one request from the sandbox may name.
MAX_REQUIREMENTS = 64
MAX_REQUIREMENT_LENGTH = 200

ErrorKind = Literal["not_found", "no_wheel", "policy", "too_large", "conflict", "denied", "unreachable", "invalid",
                    "disabled", "internal"]


def canonical_name(name: str) -> str:
    """PEP 503 normalised name: ``Scikit_Learn`` -> ``scikit-learn``."""
    return re.sub(r"[-_.]+", "-", name).lower()


#: The characters a requirement may have: a name, [extras] and version specifiers; nothing else.
_REQUIREMENT_CHARS = re.compile(r"^[A-Za-z0-9._\-\[\], <>=!~*+]+$")
#: What ``===`` (arbitrary equality) may compare with: one version-like token.
_ARBITRARY_VERSION = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._+!-]{0,62}[A-Za-z0-9])?$")
_GRAMMAR = ("only a name, [extras] and version specifiers are accepted, e.g. 'pandas>=2' or "
            "'scikit-learn==1.5.*' (no URLs, paths, pip options, environment markers or variables)")


def parse_requirements(requirements: Iterable[Any]) -> list[tuple[str, str]]:
    """(canonical requirement text, canonical name) for each requirement; anything else is refused.

    The grammar is strict: ``name[extras]`` and version specifiers, in ASCII
    letters, digits and ``._-[],<>=!~*+`` and spaces. No URLs, paths, pip
    options, environment markers, ``$``/``%`` variables; ``===`` only with one
    version-like token. What reaches the resolver is the canonical text rebuilt
    from the parsed parts, never the input, and a refusal does not echo input
    outside that charset.
    """
    from packaging.requirements import InvalidRequirement, Requirement

    out: list[tuple[str, str]] = []
    items = list(requirements)[: MAX_REQUIREMENTS + 1]
    if len(items) > MAX_REQUIREMENTS:
        raise PackageInstallError("invalid", f"at most {MAX_REQUIREMENTS} requirements at once")
    for index, item in enumerate(items, 1):
        where = f"requirement {index}" if len(items) > 1 else "the requirement"
        if not isinstance(item, str) or not item.strip():
            raise PackageInstallError("invalid", f"{where} must be a non-empty string, not {type(item).__name__}")
        text = item.strip(" ")
        if len(text) > MAX_REQUIREMENT_LENGTH:
            raise PackageInstallError("invalid", f"{where} is longer than {MAX_REQUIREMENT_LENGTH} characters")
        if not (text.isascii() and _REQUIREMENT_CHARS.fullmatch(text)):
            if text.isascii() and ("/" in text or "@" in text or "\\" in text or ":" in text):
                raise PackageInstallError("invalid", f"{where}: direct URLs and paths are not allowed; name a "
                                                     "package on the index (the host chooses where packages come "
                                                     "from)")
            raise PackageInstallError("invalid", f"{where} is not a package requirement: {_GRAMMAR}")
        try:
            req = Requirement(text)  # only the charset above reaches here: no URL, no marker
        except InvalidRequirement:
            raise PackageInstallError("invalid", f"{text!r} is not a package requirement: {_GRAMMAR}") from None
        if req.url or req.marker is not None:
            raise PackageInstallError("invalid", f"{text!r} is not a package requirement: {_GRAMMAR}")
        for spec in req.specifier:
            if spec.operator == "===" and not _ARBITRARY_VERSION.fullmatch(spec.version):
                raise PackageInstallError("invalid", f"{text!r}: '===' takes one version, e.g. 'six===1.16.0'")
        name = canonical_name(req.name)
        extras = f"[{','.join(sorted(canonical_name(e) for e in req.extras))}]" if req.extras else ""
        canon = f"{name}{extras}{','.join(sorted(str(s) for s in req.specifier))}"
        if not pip.REQUIREMENT.fullmatch(canon):  # the resolver's own check, made here with a clear message
            raise PackageInstallError("invalid", f"{text!r} is not a package requirement: {_GRAMMAR}")
        if (canon, name) not in out:
            out.append((canon, name))
    if not out:
        raise PackageInstallError("invalid", "name at least one package, e.g. install('scikit-learn')")
    return out


@dataclass(frozen=True)
class ResolvedPackage:
    """One distribution an install brings in."""

    name: str
    version: str
    filename: str
    #: Bytes of the wheel (from the index, before it is downloaded; None when the index did not say),
    #: and of its installed files (known once the wheel is in the host's cache; None before).
    size: int | None
    installed_bytes: int | None
    #: Named in the request (not only a dependency).
    requested: bool


@dataclass(frozen=True)
class PackageRequest:
    """What an approval hook is asked about, before anything is downloaded: the request and what it brings in."""

    requirements: tuple[str, ...]
    packages: tuple[ResolvedPackage, ...]
    #: Bytes of all the wheels (the sizes the index gave), and of those not yet in the host's cache.
    wheel_bytes: int
    download_bytes: int
    #: "upfront" (``packages=`` of the session) or "runtime" (code in the sandbox asked).
    source: str
    #: The sandbox's Python and platform, as text.
    target: str
    #: Wheels whose size the index did not give (not counted above).
    unknown_sizes: int = 0

    def summary(self) -> str:
        """One line: ``scikit-learn 1.9.1, scipy 1.17.1 (+2 more), 48.1 MB of wheels (12.0 MB to download)``."""
        names = [f"{p.name} {p.version}" for p in self.packages]
        shown = ", ".join(names[:6]) + (f" (+{len(names) - 6} more)" if len(names) > 6 else "")
        size = f"{self.wheel_bytes / 1e6:.1f} MB of wheels"
        if self.download_bytes != self.wheel_bytes:
            size += f" ({self.download_bytes / 1e6:.1f} MB to download)"
        if self.unknown_sizes:
            size += f", {self.unknown_sizes} of unknown size"
        return f"{shown or 'nothing new'}, {size}"


@dataclass(frozen=True)
class InstallRecord:
    """One install, as the run log and the notebook export keep it."""

    requirements: tuple[str, ...]
    source: str
    packages: tuple[ResolvedPackage, ...] = ()
    #: Requested or needed, and already there (in the image or installed before): name -> version.
    present: tuple[tuple[str, str], ...] = ()
    seconds: float = 0.0
    #: The resolution came from the host's cache; ``downloaded`` wheels were fetched now.
    resolved_from_cache: bool = False
    downloaded: int = 0
    #: "env" (a shared materialised set), "session" (this sandbox only) or "" (nothing installed).
    location: str = ""
    error_kind: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    def to_json(self) -> dict[str, Any]:
        return {
            "requirements": list(self.requirements), "source": self.source, "ok": self.ok,
            "packages": [{"name": p.name, "version": p.version, "size": p.size,
                          "installed_bytes": p.installed_bytes, "requested": p.requested} for p in self.packages],
            "present": [list(p) for p in self.present], "seconds": round(self.seconds, 3),
            "resolved_from_cache": self.resolved_from_cache, "downloaded": self.downloaded,
            "location": self.location, "error_kind": self.error_kind, "error": self.error,
        }


Approver = Callable[[PackageRequest], bool]


def _tuple(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    return tuple(str(v) for v in value)


@dataclass(frozen=True)
class PackagePolicy:
    """What the host lets sandboxes install, and from where. The sandbox cannot change any of it.

    Args:
        allow: names or patterns (``fnmatch``, on PEP 503 names: ``"scikit-*"``)
            that may be installed; empty allows every name. Applies to
            dependencies too.
        deny: names or patterns never installed (wins over ``allow``).
        max_total_bytes: installed size one session may add in all (up front
            and at run time); ``None`` for no cap.
        approve: called with a :class:`PackageRequest` before installing what
            the sandboxed code asks for (not the up-front ``packages=``: the
            host chose those); return False to refuse. Runs on a worker thread
            and may block while a human decides (the run's clocks are paused).
        index_url, extra_index_urls: a private mirror instead of (or as well
            as) the host pip's configured index.
        wheelhouse: a local directory of wheels; with ``offline=True`` the only
            source (air-gapped machines), else an extra one.
        runtime_installs: False refuses ``install()`` from the sandbox (up-front
            ``packages=`` still work).
        resolution_max_age: seconds a cached resolution is reused (the same
            request then gets the same versions without asking the index).
        install_timeout: seconds one install may take (downloads included).
        cache_dir: the host's package cache (default ``~/.cache/codeact/packages``).
        cache_max_bytes, cache_max_age: bounds on that cache (bytes; seconds
            since an entry was last used): the least recently used wheels go
            first, never those a live session on this host uses. ``None``
            for no bound.

    Example::

        PackagePolicy(allow=("scikit-learn", "scipy", "numpy", "joblib", "threadpoolctl"),
                      approve=lambda req: input(f"install {req.summary()}? ") == "y")
    """

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    max_total_bytes: int | None = 2 * 1024**3
    approve: Approver | None = None
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    wheelhouse: str | None = None
    offline: bool = False
    runtime_installs: bool = True
    resolution_max_age: float = 24 * 3600.0
    install_timeout: float = 900.0
    cache_dir: str | None = None
    cache_max_bytes: int | None = DEFAULT_CACHE_MAX_BYTES
    cache_max_age: float | None = DEFAULT_CACHE_MAX_AGE

    def __post_init__(self) -> None:
        object.__setattr__(self, "allow", tuple(canonical_name(p) for p in _tuple(self.allow)))
        object.__setattr__(self, "deny", tuple(canonical_name(p) for p in _tuple(self.deny)))
        object.__setattr__(self, "extra_index_urls", _tuple(self.extra_index_urls))
        if self.offline and not self.wheelhouse:
            raise PackageInstallError("invalid", "PackagePolicy(offline=True) needs wheelhouse=DIR: the directory "
                                                 "of wheels to install from")
        if self.wheelhouse is not None:
            from pathlib import Path

            if not Path(self.wheelhouse).is_dir():
                raise PackageInstallError("invalid", f"the wheelhouse {self.wheelhouse} is not a directory")
            object.__setattr__(self, "wheelhouse", str(Path(self.wheelhouse).resolve()))

    def refusal(self, name: str) -> str | None:
        """The rule that refuses package ``name``, or None when it may be installed."""
        name = canonical_name(name)
        for pattern in self.deny:
            if fnmatch.fnmatchcase(name, pattern):
                return f"{name} matches the deny rule {pattern!r}"
        if self.allow and not any(fnmatch.fnmatchcase(name, p) for p in self.allow):
            return f"{name} is not on the allow list ({', '.join(self.allow)})"
        return None

    def sources(self) -> Sources:
        return Sources(self.index_url, self.extra_index_urls, self.wheelhouse, self.offline)

    def cache(self) -> PackageCache:
        """The host's package cache with this policy's directory and bounds."""
        return PackageCache(self.cache_dir, max_bytes=self.cache_max_bytes, max_age=self.cache_max_age)


@dataclass
class Plan:
    """A request resolved and fetched, ready to copy into a sandbox."""

    requirements: tuple[str, ...]
    wheels: list[CachedWheel]
    present: list[tuple[str, str]]
    resolved_from_cache: bool
    downloaded: int
    started: float

    @property
    def packages(self) -> tuple[ResolvedPackage, ...]:
        return tuple(ResolvedPackage(w.pick.name, w.pick.version, w.pick.filename, w.size, w.installed_bytes,
                                     w.pick.requested) for w in self.wheels)

    @property
    def installed_bytes(self) -> int:
        return sum(w.installed_bytes for w in self.wheels)

    def content_hash(self, target: Target) -> str:
        """Names the set: the same wheels for the same target give the same hash."""
        h = hashlib.sha256(target.key().encode())
        for w in sorted(self.wheels, key=lambda w: w.sha256):
            h.update(w.sha256.encode())
        return h.hexdigest()[:16]


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


class PackageInstaller:
    """Resolve, check and fetch requests for one target under one policy (the host's half; no sandbox).

    The order is what keeps a refused request off the host's disk: resolve
    (metadata and the wheels' sizes only), check every distribution against
    the policy, check the size cap, ask the approval hook, and only then
    download. The installed size is checked again once the wheels are
    unpacked (a wheel's size is a lower bound of it).

    Example::

        installer = PackageInstaller(PackagePolicy(), Target.manylinux("3.11"))
        plan = installer.plan(["tabulate"], present={"numpy": "2.4.6"})
        [w.path for w in plan.wheels]
    """

    def __init__(self, policy: PackagePolicy, target: Target, cache: PackageCache | None = None) -> None:
        self.policy = policy
        self.target = target
        self.cache = cache or policy.cache()

    def plan(self, requirements: Iterable[Any], present: dict[str, str], *, source: str = "runtime",
             installed_so_far: int = 0) -> Plan:
        started = time.perf_counter()
        parsed = parse_requirements(requirements)
        for _, name in parsed:
            rule = self.policy.refusal(name)
            if rule:
                raise PackageInstallError("policy", f"refused by the host's package policy: {rule}", [name])
        texts = tuple(text for text, _ in parsed)
        if all(text == f"{name}=={present.get(name)}" for text, name in parsed):
            # Exact pins, each already there (a restore's list into a session made with those packages):
            # the answer is known without asking the resolver (a pip run of a second or more).
            return Plan(texts, [], [(name, present[name]) for _, name in parsed], True, 0, started)
        constraints = sorted(f"{n}=={v}" for n, v in present.items())
        sources = self.policy.sources()
        key = hashlib.sha256(json.dumps([sorted(texts), constraints, self.target.key(), sources.key()])
                             .encode()).hexdigest()[:40]
        picks = self.cache.get_resolution(key, self.policy.resolution_max_age)
        from_cache = picks is not None
        try:
            if picks is None:
                picks = pip.resolve(texts, constraints, self.target, sources)
            elif any(p.size is None for p in picks):
                picks = pip.with_sizes(picks)
        except pip.PipFailure as exc:
            raise PackageInstallError(exc.kind, exc.message, exc.details) from None
        new = [p for p in picks if canonical_name(p.name) not in present]
        already = [(canonical_name(p.name), present[canonical_name(p.name)]) for p in picks
                   if canonical_name(p.name) in present]
        for p in new:
            rule = self.policy.refusal(p.name)
            if rule:
                raise PackageInstallError("policy", f"refused by the host's package policy: {rule} (needed by "
                                                    f"{', '.join(texts)})", [canonical_name(p.name)])
        self._check_size_before_download(texts, new, installed_so_far)
        approve = self.policy.approve
        if approve is not None and new and source == "runtime":
            self._ask(approve, texts, new, source)
        if not from_cache:
            self.cache.put_resolution(key, picks)  # only what passed every check: a refusal leaves no trace
        try:
            with self.cache.using([p.sha256 or p.filename for p in new]):
                wheels, downloaded = self.cache.fetch(new, self.target, sources)
        except pip.PipFailure as exc:
            raise PackageInstallError(exc.kind, exc.message, exc.details) from None
        except OSError as exc:
            raise PackageInstallError("internal", f"the host's package cache failed: {type(exc).__name__}") from None
        plan = Plan(texts, wheels, already, from_cache, downloaded, started)
        cap = self.policy.max_total_bytes
        if cap is not None and installed_so_far + plan.installed_bytes > cap:
            raise PackageInstallError(
                "too_large", f"{', '.join(texts)} would install {_mb(plan.installed_bytes)} "
                f"({', '.join(f'{w.pick.name} {_mb(w.installed_bytes)}' for w in _largest(wheels))}); "
                f"this sandbox may add {_mb(cap)} in all"
                + (f" and has used {_mb(installed_so_far)}" if installed_so_far else ""))
        return plan

    def _known_bytes(self, pick: pip.Pick) -> int:
        """The least ``pick`` adds once installed: its unpacked size if the cache has it, else its wheel's size."""
        installed = self.cache.installed_size(pick)
        return installed if installed is not None else (pick.size or 0)

    def _check_size_before_download(self, texts: tuple[str, ...], new: Sequence[pip.Pick],
                                    installed_so_far: int) -> None:
        cap = self.policy.max_total_bytes
        if cap is None:
            return
        at_least = sum(self._known_bytes(p) for p in new)
        if installed_so_far + at_least > cap:
            largest = sorted(new, key=lambda p: -self._known_bytes(p))[:3]
            raise PackageInstallError(
                "too_large", f"{', '.join(texts)} would install at least {_mb(at_least)} "
                f"({', '.join(f'{p.name} {_mb(self._known_bytes(p))}' for p in largest)}); "
                f"this sandbox may add {_mb(cap)} in all"
                + (f" and has used {_mb(installed_so_far)}" if installed_so_far else "")
                + "; nothing was downloaded")

    def _ask(self, approve: Approver, texts: tuple[str, ...], new: Sequence[pip.Pick], source: str) -> None:
        packages = tuple(ResolvedPackage(p.name, p.version, p.filename, p.size, self.cache.installed_size(p),
                                         p.requested) for p in new)
        to_fetch = [p for p in new if self.cache.cached_wheel(p) is None]
        request = PackageRequest(texts, packages, sum(p.size or 0 for p in new), sum(p.size or 0 for p in to_fetch),
                                 source, self.target.describe(), sum(1 for p in new if p.size is None))
        call = current_call()
        with call.paused() if call is not None else contextlib.nullcontext():
            allowed = bool(approve(request))
        if call is not None:
            call.checkpoint()
        if not allowed:
            raise PackageInstallError("denied", f"the user did not allow installing {request.summary()}; do not "
                                                "retry, do without it or explain in the final answer")


def _largest(wheels: Sequence[CachedWheel]) -> list[CachedWheel]:
    return sorted(wheels, key=lambda w: -w.installed_bytes)[:3]


class PackageBackend(Protocol):
    """What a sandbox backend provides for packages (see ``_pkg_docker``, ``_pkg_local``)."""

    def inspect(self) -> tuple[Target, dict[str, str], tuple[str, ...]]:
        """The sandbox's target, the distributions its image has (name -> version), and its top-level ones."""
        ...

    def materialise(self, env_hash: str, plan: Plan) -> str:
        """Make ``plan`` a shared read-only environment (once); return its path in the sandbox."""
        ...

    def deliver(self, batch: str, plan: Plan) -> str:
        """Copy ``plan`` into this session's package directory as ``batch``; return its path in the sandbox."""
        ...


@dataclass
class _Batch:
    name: str
    plan: Plan
    path: str


class SessionPackages:
    """The packages of one sandbox session: what the image has, what was added, and how to add more.

    A sandbox creates it (``DockerSandbox(packages=..., package_policy=...)``)
    and exposes it as ``sandbox.packages``. ``records`` lists every install
    (failed ones too); ``listeners`` are called with each new record (from
    the thread that installed).
    """

    def __init__(self, requirements: Sequence[str], policy: PackagePolicy | None, backend: PackageBackend,
                 cache: PackageCache | None = None) -> None:
        self.requirements = tuple(requirements)
        self.policy = policy or PackagePolicy()
        self.backend = backend
        self.cache = cache or self.policy.cache()
        #: What this session uses from the host's cache (never evicted while the session lives).
        self.lease = self.cache.lease()
        self.records: list[InstallRecord] = []
        self.listeners: list[Callable[[InstallRecord], None]] = []
        self._lock = threading.RLock()
        self._inspected: tuple[Target, dict[str, str], tuple[str, ...]] | None = None
        self._env: tuple[str, Plan] | None = None  # (path in the sandbox, plan)
        self._batches: list[_Batch] = []
        self._prepared = False
        if self.requirements:
            parse_requirements(self.requirements)  # bad input fails here, before any container starts

    # --- what the sandbox has -------------------------------------------------------------

    def _inspect(self) -> tuple[Target, dict[str, str], tuple[str, ...]]:
        if self._inspected is None:
            self._inspected = self.backend.inspect()
        return self._inspected

    @property
    def target(self) -> Target:
        return self._inspect()[0]

    def image_packages(self) -> dict[str, str]:
        """Distributions the image has: canonical name -> version."""
        return dict(self._inspect()[1])

    def added(self) -> dict[str, str]:
        """Distributions added to this session (up front and at run time): canonical name -> version."""
        out: dict[str, str] = {}
        plans = ([self._env[1]] if self._env else []) + [b.plan for b in self._batches]
        for plan in plans:
            for w in plan.wheels:
                out[canonical_name(w.pick.name)] = w.pick.version
        return out

    def present(self) -> dict[str, str]:
        return {**self.image_packages(), **self.added()}

    def installed_bytes(self) -> int:
        plans = ([self._env[1]] if self._env else []) + [b.plan for b in self._batches]
        return sum(p.installed_bytes for p in plans)

    def sandbox_paths(self) -> list[str]:
        """Directories a kernel adds to its path at start (the environment, then each install)."""
        return ([self._env[0]] if self._env else []) + [b.path for b in self._batches]

    def describe(self) -> str:
        """Text for a system prompt: what is installed, and how to get more."""
        _, image, top = self._inspect()
        shown = [f"{name} {image[name]}" for name in top if name in image]
        added = self.added()
        lines = []
        if shown:
            lines.append("Python packages in the sandbox: " + ", ".join(shown) + ".")
        if added:
            requested = {canonical_name(n) for _, n in parse_requirements(self.requirements)} if self.requirements \
                else set()
            named = [f"{n} {v}" for n, v in added.items() if n in requested] or [f"{n} {v}" for n, v in added.items()]
            lines.append("Also installed for this task: " + ", ".join(named) + ".")
        if self.policy.runtime_installs:
            lines.append('To add a package, call `install("name")` (or `%pip install name`) in your code: the host '
                         "installs binary wheels from PyPI for you, then `import` works at once. The sandbox itself "
                         "has no network.")
        return "\n".join(lines)

    # --- installing -------------------------------------------------------------------------

    def _installer(self) -> PackageInstaller:
        return PackageInstaller(self.policy, self.target, self.cache)

    def prepare(self) -> None:
        """Resolve, fetch and materialise the up-front ``packages`` (once; later calls do nothing)."""
        with self._lock:
            if self._prepared or not self.requirements:
                self._prepared = True
                return
            started = time.perf_counter()
            try:
                plan = self._installer().plan(self.requirements, self.image_packages(), source="upfront")
                path = self.backend.materialise(plan.content_hash(self.target), plan) if plan.wheels else ""
            except PackageInstallError as exc:
                self._record(InstallRecord(self.requirements, "upfront", seconds=time.perf_counter() - started,
                                           error_kind=exc.kind, error=str(exc)))
                raise
            if plan.wheels:
                self._env = (path, plan)
                self._hold(plan, plan.content_hash(self.target))
            self._prepared = True
            self._record(InstallRecord(plan.requirements, "upfront", plan.packages, tuple(plan.present),
                                       time.perf_counter() - started, plan.resolved_from_cache, plan.downloaded,
                                       "env" if plan.wheels else ""))

    def install(self, *requirements: str, source: str = "runtime") -> InstallRecord:
        """Install into this session now (from the host); returns the record or raises PackageInstallError.

        The running kernel sees the new packages after :meth:`activate` in the
        kernel (the in-sandbox ``install()`` does that); new kernels see them
        at start.
        """
        record, _ = self.install_batch(list(requirements), source=source)
        return record

    def install_batch(self, requirements: list[Any], *, source: str) -> tuple[InstallRecord, str]:
        """Install ``requirements`` (as :meth:`install`; ``source`` "runtime" is refused when the policy turns
        installs from the sandbox off): the record, and the new batch's path in the sandbox ("" when nothing
        new was needed), which the running kernel adds with ``sandbox_runtime.use_packages``."""
        started = time.perf_counter()
        # As the sandbox sent them (records of refused requests keep them): bounded, control characters replaced.
        shown = tuple("".join(c if c.isprintable() else "?" for c in str(r)[:MAX_REQUIREMENT_LENGTH])
                      for r in requirements[:MAX_REQUIREMENTS])
        with self._lock:
            try:
                if source == "runtime" and not self.policy.runtime_installs:
                    raise PackageInstallError("disabled", "installing packages from the sandbox is turned off by the "
                                                          "host's policy")
                self.prepare()
                plan = self._installer().plan(requirements, self.present(), source=source,
                                              installed_so_far=self.installed_bytes())
                path = ""
                if plan.wheels:
                    name = plan.content_hash(self.target)  # the same set gets the same (cached) copy
                    self._hold(plan, name)
                    path = self.backend.deliver(name, plan)
                    self._batches.append(_Batch(name, plan, path))
            except PackageInstallError as exc:
                record = InstallRecord(shown, source, seconds=time.perf_counter() - started, error_kind=exc.kind,
                                       error=str(exc))
                self._record(record)
                raise
            except Exception as exc:
                # The exception's text may hold host paths or a tool's output: it stays in the host's log.
                pip.log.warning("installing %s failed: %s", shown, pip.scrub(f"{type(exc).__name__}: {exc}"))
                message = (f"the host could not install the packages ({type(exc).__name__}); the host's log has "
                           "the details")
                record = InstallRecord(shown, source, seconds=time.perf_counter() - started, error_kind="internal",
                                       error=message)
                self._record(record)
                raise PackageInstallError("internal", message) from exc
            record = InstallRecord(plan.requirements, source, plan.packages, tuple(plan.present),
                                   time.perf_counter() - started, plan.resolved_from_cache, plan.downloaded,
                                   "session" if plan.wheels else "")
            self._record(record)
            return record, path

    def _hold(self, plan: Plan, name: str) -> None:
        """Keep ``plan``'s wheels and the set ``name`` in the host's cache while this session lives."""
        self.lease.add(wheels=[w.sha256 for w in plan.wheels], names=[name])

    def close(self) -> None:
        """The session ended: what it used may be evicted from the host's cache again."""
        self.lease.close()

    def redeliver(self) -> None:
        """Copy every earlier install into a new environment (the sandbox's container was recreated)."""
        with self._lock:
            for batch in self._batches:
                batch.path = self.backend.deliver(batch.name, batch.plan)

    def _record(self, record: InstallRecord) -> None:
        self.records.append(record)
        for listener in list(self.listeners):
            with contextlib.suppress(Exception):  # a listener's bug must not undo an install
                listener(record)

    # --- the sandbox's side ------------------------------------------------------------------

    def host_function(self) -> HostFunction:
        """The host function behind the in-sandbox ``install()`` (registered by the sandbox)."""

        def install_for_sandbox(requirements: Any) -> dict[str, Any]:
            if not isinstance(requirements, (list, tuple)):
                return _failure(PackageInstallError("invalid", "install() takes package names as strings"))
            try:
                record, path = self.install_batch(list(requirements)[: MAX_REQUIREMENTS + 1], source="runtime")
            except PackageInstallError as exc:
                return _failure(exc)
            return {"ok": True, "path": path,
                    "packages": [[p.name, p.version, p.installed_bytes] for p in record.packages],
                    "present": [list(p) for p in record.present], "seconds": record.seconds,
                    "cached": record.resolved_from_cache and record.downloaded == 0}

        return HostFunction(install_for_sandbox, name=INSTALL_FUNCTION, timeout=self.policy.install_timeout,
                            doc="Install packages into this sandbox (the host resolves and fetches them).")


def _failure(exc: PackageInstallError) -> dict[str, Any]:
    return {"ok": False, "kind": exc.kind, "message": str(exc), "details": list(exc.details)[:20]}


#: Well-known top-level packages named in prompts when an image does not list its own.
KNOWN_TOP_LEVEL = ("numpy", "pandas", "matplotlib", "scipy", "scikit-learn", "statsmodels", "seaborn", "pyarrow",
                   "openpyxl", "polars", "sympy", "networkx", "pillow", "requests")


__all__ = [
    "ENV_DIR",
    "INSTALL_FUNCTION",
    "PACKAGES_DIR",
    "InstallRecord",
    "PackageBackend",
    "PackageCache",
    "PackageInstallError",
    "PackageInstaller",
    "PackagePolicy",
    "PackageRequest",
    "Plan",
    "ResolvedPackage",
    "SessionPackages",
    "Sources",
    "Target",
    "canonical_name",
    "parse_requirements",
]
