"""The host's pip, run as a subprocess: resolve requirements for a sandbox's Python and download wheels.

pip runs with ``--only-binary=:all:`` always, so it never builds a source
distribution and nothing from a package runs on the host. It resolves for
the *sandbox's* interpreter and platform (``--python-version``,
``--platform``, ``--implementation``, ``--abi``), not the host's. Its own
configuration (certificates, proxies, a private mirror in pip.conf) applies,
except in offline mode, where ``--isolated --no-index --find-links DIR``
makes the wheelhouse directory the only source.

What pip is handed is bounded, because a requirements file is not inert:
pip (and uv) replace ``${VAR}`` in one with the host's environment.

* Requirements go on the command line, never into a file, and only after
  :func:`sandbox.packages.parse_requirements` rebuilt them from a strict
  grammar (names, extras, version specifiers).
* The only file pip reads is the constraints file (what the sandbox already
  has), and every line of it must be ``name==version`` in a charset without
  ``$``, ``{`` or ``%`` (:func:`_constraint_line`).
* pip runs with a minimal environment (:func:`pip_environment`): what it
  needs to reach an index (``PATH``, ``HOME``, proxies, certificates,
  ``PIP_*``), none of the host's secrets.
* pip's output never reaches the sandbox: :func:`classify` turns it into a
  cause and a message made of the validated requirement and tokens checked
  against the same grammar; what is logged is scrubbed of the host
  environment's values (:func:`scrub`).

Any pip from 22.2 on works (``--report`` and ``--dry-run`` came then):
``--target`` goes with the platform options, which older pips (such as the
23.2 that ``python3 -m venv`` brings) require, and newer ones accept.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import re
import ssl
import subprocess
import sys
import tempfile
import threading
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._pkg_wheel import WheelError, WheelName, safe_filename

log = logging.getLogger("sandbox.packages")

#: Seconds one pip run may take (a slow mirror, a large wheel).
PIP_TIMEOUT = 900.0
#: The oldest pip that can resolve for another platform with a JSON report.
MIN_PIP = (22, 2)
#: pip says these when it could not talk to the index at all.
_UNREACHABLE = ("Max retries exceeded", "NewConnectionError", "ConnectTimeoutError", "ProxyError",
                "Could not fetch URL", "Temporary failure in name resolution", "Connection refused",
                "Network is unreachable", "SSLError")
#: Tokens of pip's output that may go into a message: names, versions, specifiers (no $, {, %, quotes, /).
_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?$")
_VERSION = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.+!*_-]{0,62}[A-Za-z0-9*])?$")
REQUIREMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}(?:\[[A-Za-z0-9._,-]{1,200}\])?"
                         r"(?:(?:===|==|!=|<=|>=|~=|<|>)[A-Za-z0-9.+!*_-]{1,64}"
                         r"(?:,(?:===|==|!=|<=|>=|~=|<|>)[A-Za-z0-9.+!*_-]{1,64}){0,15})?$")

@dataclass(frozen=True)
class Target:
    """The interpreter and platform wheels must fit: the sandbox's, not the host's.

    Example::

        Target.manylinux("3.11", "x86_64", glibc=(2, 36))   # the image's Debian bookworm
        Target.host()                                        # this interpreter (the local backend)
    """

    python_version: str
    #: Platform tags in order of preference; empty: the host's own (pip's default).
    platforms: tuple[str, ...] = ()
    implementation: str = "cp"
    abis: tuple[str, ...] = ()
    #: How the target is shown to people ("CPython 3.11, Linux x86_64 (glibc 2.36)").
    label: str = ""

    @classmethod
    def manylinux(cls, python_version: str = "3.11", arch: str = "x86_64", glibc: tuple[int, int] = (2, 36)
                  ) -> Target:
        """CPython ``python_version`` on Linux with glibc ``glibc``: every manylinux tag it can run."""
        major, minor = glibc
        tags = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 4, -1)]
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        tags += [f"{name}_{arch}" for m, name in legacy.items() if m <= minor
                 and (arch in ("x86_64", "i686") or name == "manylinux2014")]
        py = python_version.replace(".", "")
        return cls(python_version, tuple(tags), "cp", (f"cp{py}", "abi3", "none"),
                   f"CPython {python_version}, Linux {arch} (glibc {major}.{minor})")

    @classmethod
    def host(cls) -> Target:
        """The interpreter running this code, on this machine (pip's own defaults)."""
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        return cls(version, (), "cp", (), f"this machine's Python {version}")

    def pip_args(self) -> list[str]:
        if not self.platforms:
            return []
        args = ["--python-version", self.python_version, "--implementation", self.implementation]
        for p in self.platforms:
            args += ["--platform", p]
        for a in self.abis:
            args += ["--abi", a]
        return args

    def key(self) -> str:
        return json.dumps([self.python_version, list(self.platforms), self.implementation, list(self.abis)])

    def describe(self) -> str:
        return self.label or f"Python {self.python_version}"


@dataclass(frozen=True)
class Sources:
    """Where wheels come from (set by the host's policy; the sandbox never chooses)."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    #: A local directory of wheels: with ``offline`` the only source, else an extra one.
    wheelhouse: str | None = None
    offline: bool = False

    def pip_args(self) -> list[str]:
        if self.offline:
            return ["--isolated", "--no-index", "--find-links", str(self.wheelhouse)]
        args: list[str] = []
        if self.index_url:
            args += ["--index-url", self.index_url]
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        if self.wheelhouse:
            args += ["--find-links", str(self.wheelhouse)]
        return args

    def key(self) -> str:
        listing: list[Any] = []
        if self.wheelhouse:
            try:  # a wheelhouse that changed gives a new resolution
                listing = sorted((e.name, e.stat().st_size, int(e.stat().st_mtime))
                                 for e in os.scandir(self.wheelhouse))
            except OSError:
                listing = []
        return json.dumps([self.index_url, list(self.extra_index_urls), self.wheelhouse, self.offline, listing])

    def describe(self) -> str:
        """How the source is named in messages: an index URL without its credentials."""
        if self.offline:
            return "the host's wheelhouse (offline)"
        return redact_url(self.index_url) if self.index_url else "the package index"


@dataclass(frozen=True)
class Pick:
    """One distribution of a resolution: the exact wheel the resolver chose."""

    name: str
    version: str
    filename: str
    url: str
    sha256: str | None
    requested: bool
    #: Bytes of the wheel as the index serves it (before downloading); None when the index did not say.
    size: int | None = None


@dataclass
class PipFailure(Exception):
    """pip could not resolve or fetch; ``kind`` is one of PackageInstallError's causes."""

    kind: str
    message: str
    #: Requirements named in the error (the one not found, the conflicting ones).
    details: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return self.message


# --------------------------------------------------------------------------- what pip gets, what comes back

#: Variables pip needs from the host: where programs and its config are, proxies, certificates.
_ENV_KEEP = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TMPDIR", "TEMP", "TMP", "NETRC",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy",
    "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_CA_BUNDLE",
    "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "XDG_CACHE_HOME", "XDG_DATA_HOME", "VIRTUAL_ENV",
})
_ENV_KEEP_PREFIXES = ("PIP_", "LC_")
#: Never passed on, whatever the name's prefix: what a secret's name looks like.
_ENV_SECRET = re.compile(r"API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE", re.IGNORECASE)


def pip_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment pip runs with: what it needs from ``environ`` (the host's), no secrets."""
    environ = os.environ if environ is None else environ
    env = {k: v for k, v in environ.items()
           if (k in _ENV_KEEP or k.startswith(_ENV_KEEP_PREFIXES)) and not _ENV_SECRET.search(k)}
    env.update(PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1", PYTHONIOENCODING="utf-8")
    return env


def redact_url(url: str) -> str:
    """``url`` without a user name or password (``https://***@host/simple``)."""
    return re.sub(r"(?<=://)[^/@\s]+@", "***@", url)


def scrub(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` without the host environment's values (8 characters or more) or URL credentials: for logs."""
    environ = os.environ if environ is None else environ
    values = sorted({v for v in environ.values() if len(v) >= 8}, key=len, reverse=True)
    for value in values:
        if value in text:
            text = text.replace(value, "<host value>")
    return redact_url(text)


_pip_checked: dict[str, tuple[int, ...]] = {}
_pip_check_lock = threading.Lock()


def _check_pip() -> None:
    """Fail with what to do when this interpreter has no pip, or one older than :data:`MIN_PIP` (once)."""
    with _pip_check_lock:
        if sys.executable in _pip_checked:
            return
        try:
            done = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True,
                                  errors="replace", env=pip_environment(), timeout=120, stdin=subprocess.DEVNULL,
                                  check=False)
            m = re.match(r"pip (\d+)\.(\d+)", done.stdout)
        except (OSError, subprocess.TimeoutExpired):
            m = None
        want = ".".join(map(str, MIN_PIP))
        if m is None:
            raise PipFailure("internal", f"the host's Python has no pip, which installs packages for sandboxes: "
                                         f"on the host run `python -m ensurepip --upgrade` (or install pip>={want} "
                                         "into codeact's environment)")
        version = (int(m[1]), int(m[2]))
        if version < MIN_PIP:
            raise PipFailure("internal", f"the host's pip {version[0]}.{version[1]} is too old to resolve packages "
                                         f"for sandboxes: on the host run `python -m pip install 'pip>={want}'`")
        _pip_checked[sys.executable] = version


def _pip(args: Sequence[str], *, timeout: float = PIP_TIMEOUT) -> subprocess.CompletedProcess[str]:
    _check_pip()
    try:
        return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True,
                              errors="replace", env=pip_environment(), timeout=timeout, stdin=subprocess.DEVNULL,
                              check=False)
    except subprocess.TimeoutExpired:
        raise PipFailure("unreachable",
                         f"pip did not finish within {timeout:g} s (a slow or unreachable index?)") from None
    except OSError:
        raise PipFailure("internal", "the host could not run its pip") from None


def _constraint_line(constraint: str) -> str:
    """``name==version``, checked: the constraints file is the one file pip reads, and pip expands ``${VAR}``."""
    name, sep, version = constraint.partition("==")
    if not sep or not _NAME.fullmatch(name) or not _VERSION.fullmatch(version) or "*" in version:
        raise PipFailure("internal", "the host refused a constraint it did not recognise as name==version")
    return f"{name}=={version}"


def _requirement_args(requirements: Sequence[str]) -> list[str]:
    """Requirements as pip arguments: canonical ``name[extras]specifiers`` only (see parse_requirements)."""
    out = []
    for r in requirements:
        if not REQUIREMENT.fullmatch(r):
            raise PipFailure("internal", "the host refused a requirement it did not recognise")
        out.append(r)
    return out


# --------------------------------------------------------------------------- resolve, size, download


def resolve(requirements: Sequence[str], constraints: Sequence[str], target: Target, sources: Sources
            ) -> list[Pick]:
    """The wheels pip picks for ``requirements`` (canonical, see parse_requirements) under ``constraints``.

    Nothing is downloaded but metadata; the picks carry the wheel's size when
    the index gives it (see :func:`with_sizes`).
    """
    reqs = _requirement_args(requirements)
    lines = [_constraint_line(c) for c in constraints]
    with tempfile.TemporaryDirectory(prefix="codeact-resolve-") as tmp:
        con_file, report = Path(tmp, "constraints.txt"), Path(tmp, "r.json")
        con_file.write_text("".join(line + "\n" for line in lines))
        # --target: pip before 23.3 takes platform options with it only; a dry run writes nothing there.
        args = ["install", "--dry-run", "--ignore-installed", "--report", str(report), "--target", str(Path(tmp, "t")),
                "--only-binary=:all:", "--no-color", *target.pip_args(), *sources.pip_args(),
                "-c", str(con_file), *reqs]
        done = _pip(args)
        if done.returncode != 0 or not report.is_file():
            raise classify(done.stderr + done.stdout, target, sources, requirements=reqs, constraints=lines)
        try:
            data = json.loads(report.read_text())
        except ValueError:
            raise PipFailure("internal", "pip wrote an unreadable resolution report") from None
    picks = []
    for item in data.get("install", []):
        meta = item.get("metadata", {})
        info = item.get("download_info", {})
        name, version = str(meta.get("name", "")), str(meta.get("version", ""))
        if not _NAME.fullmatch(name) or not _VERSION.fullmatch(version):
            raise PipFailure("internal", "the resolver reported a distribution with an unusable name or version")
        url = str(info.get("url", ""))
        filename = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
        if not safe_filename(filename) or not filename.endswith(".whl"):
            raise PipFailure("no_wheel", f"the resolver chose a file for {name} that is not a wheel", [name])
        try:
            WheelName.parse(filename)
        except WheelError:
            raise PipFailure("no_wheel", f"the resolver chose a file for {name} that is not a wheel", [name]) from None
        archive = info.get("archive_info") or {}
        sha = (archive.get("hashes") or {}).get("sha256")
        if sha is None and str(archive.get("hash", "")).startswith("sha256="):  # pip 22.x: "hash" only
            sha = str(archive["hash"])[7:]
        picks.append(Pick(name, version, filename, url,
                          sha.lower() if isinstance(sha, str) and re.fullmatch(r"[0-9a-fA-F]{64}", sha) else None,
                          bool(item.get("requested"))))
    return with_sizes(picks)


def _ssl_context() -> ssl.SSLContext:
    """The certificates pip would use (REQUESTS_CA_BUNDLE, PIP_CERT, SSL_CERT_FILE), else the system's."""
    for var in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        path = os.environ.get(var)
        if path and os.path.isfile(path):
            return ssl.create_default_context(cafile=path)
        if path and os.path.isdir(path):
            return ssl.create_default_context(capath=path)
    return ssl.create_default_context()


def _size_of(url: str, context: ssl.SSLContext) -> int | None:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        try:
            return os.stat(urllib.request.url2pathname(parts.path)).st_size
        except OSError:
            return None
    if parts.scheme not in ("https", "http"):
        return None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=30,
                                    context=context if parts.scheme == "https" else None) as resp:
            length = resp.headers.get("Content-Length")
            return int(length) if length and length.isdigit() else None
    except (OSError, ValueError):
        return None  # an index that needs credentials, or no HEAD: the size is known after the download


def with_sizes(picks: Sequence[Pick]) -> list[Pick]:
    """``picks`` with the size of each wheel, asked of where it lies (a HEAD request; a file's size), in parallel."""
    from dataclasses import replace

    todo = [p for p in picks if p.size is None]
    if not todo:
        return list(picks)
    context = _ssl_context()
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, len(todo))) as pool:
        sizes = dict(zip([p.filename for p in todo], pool.map(lambda p: _size_of(p.url, context), todo), strict=True))
    return [replace(p, size=sizes[p.filename]) if p.filename in sizes else p for p in picks]


def download(picks: Sequence[Pick], target: Target, sources: Sources, directory: Path) -> None:
    """Download exactly the wheels of ``picks`` into ``directory`` (the cache checks their hashes)."""
    args = ["download", "--no-deps", "--only-binary=:all:", "--no-color", "--quiet", "-d", str(directory),
            *target.pip_args(), *sources.pip_args()]
    for p in picks:
        if not _NAME.fullmatch(p.name) or not re.match(r"^(https?|file)://[^\s]+$", p.url):
            raise PipFailure("internal", "the host refused a download it did not recognise")
        args.append(f"{p.name} @ {p.url}")  # an argument, not a file: nothing in it is expanded
    done = _pip(args)
    if done.returncode != 0:
        raise classify(done.stderr + done.stdout, target, sources, downloading=True)


def project_exists(name: str, sources: Sources) -> bool | None:
    """Whether the index knows ``name`` at all (any file, source distributions included); None if unsure.

    ``pip index versions`` reads the index's listing only: nothing is built or
    run. Its debug output says when an index could not be fetched (pip is
    silent about that otherwise), as opposed to answering "not found".
    """
    if not _NAME.fullmatch(name):
        return None
    done = _pip(["index", "versions", "-vvv", "--no-color", *sources.pip_args(), name], timeout=120.0)
    text = done.stderr + done.stdout
    if done.returncode == 0 and ("Available versions" in text or re.search(rf"(?im)^{re.escape(name)} \(", text)):
        return True
    failures = re.findall(r"Could not fetch URL \S+: (.*)", text)
    if any(not re.search(r"\b404\b|Not Found", reason) for reason in failures) or \
            any(marker in text for marker in _UNREACHABLE[:6]) and not failures:
        return None
    return False


# --------------------------------------------------------------------------- pip's complaint -> a cause

_NOT_FOUND = re.compile(r"Could not find a version that satisfies the requirement (?P<req>\S+) "
                        r"\(from versions: (?P<versions>[^)]*)\)")
_USER_REQUESTED = re.compile(r"^The user requested (?P<constraint>\(constraint\) )?(?P<req>\S+)$")
_DEPENDS = re.compile(r"^(?P<name>\S+) (?P<version>\S+) depends on (?P<req>[^;\s]+)")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _name_of(requirement: str) -> str:
    return _canonical(re.split(r"[<>=!~\[;@ (]", requirement, maxsplit=1)[0])


def _ours(mentioned: str, requirements: Sequence[str]) -> str | None:
    """The validated requirement of ours that pip's ``mentioned`` one names (by project), if any."""
    name = _name_of(mentioned)
    return next((r for r in requirements if _name_of(r) == name), None)


def _version(text: str) -> str | None:
    """``text`` as a PEP 440 version, rebuilt by ``packaging``; None when it is not one."""
    from packaging.version import InvalidVersion, Version

    try:
        return str(Version(text))
    except InvalidVersion:
        return None


def _requirement_rebuilt(text: str) -> str | None:
    """A dependency's requirement from pip's output, parsed and rebuilt (name, extras, specifiers); else None."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(text)
    except InvalidRequirement:
        return None
    extras = f"[{','.join(sorted(_canonical(e) for e in req.extras))}]" if req.extras else ""
    out = f"{_canonical(req.name)}{extras}{','.join(sorted(str(s) for s in req.specifier))}"
    return out if REQUIREMENT.fullmatch(out) and not req.url else None


def _conflict_causes(text: str, requirements: Sequence[str], constraints: Sequence[str]) -> list[str]:
    """The lines of pip's "The conflict is caused by" block we recognise, rebuilt from our own requirements
    and constraints and from dependency requirements parsed and rebuilt (never pip's text as it is); projects
    other than those we named are not shown."""
    block = re.search(r"The conflict is caused by:\n(?P<body>(?:[ \t]+.*\n?)+)", text)
    pins = {_name_of(c): c for c in constraints}
    causes: list[str] = []
    for line in (block["body"].splitlines() if block else [])[:40]:
        line = line.strip()
        m = _USER_REQUESTED.match(line)
        if m:
            if m["constraint"]:
                pin = pins.get(_name_of(m["req"]))
                if pin is not None:
                    pinned, _, pinned_version = pin.partition("==")
                    causes.append(f"{pinned} {pinned_version} is already installed in the sandbox")
            else:
                ours = _ours(m["req"], requirements)
                if ours is not None:
                    causes.append(f"you asked for {ours}")
            continue
        m = _DEPENDS.match(line)
        if m:  # shown only between projects we named (asked for, or in the sandbox); else "a dependency"
            known = {_name_of(r) for r in requirements} | set(pins)
            version, dependency = _version(m["version"]), _requirement_rebuilt(m["req"])
            if version and dependency and _name_of(dependency) in known:
                who = f"{_canonical(m['name'])} {version}" if _canonical(m["name"]) in known else "a dependency"
                causes.append(f"{who} depends on {dependency}")
    return list(dict.fromkeys(causes))[:20]


def _log_unrecognised(what: str, output: str) -> None:
    tail = scrub(output.replace("\r", ""))[-4000:]
    log.warning("pip's %s failed for a reason not recognised; its output (host values removed):\n%s", what, tail)


def classify(output: str, target: Target, sources: Sources, *, downloading: bool = False,
             requirements: Sequence[str] = (), constraints: Sequence[str] = ()) -> PipFailure:
    """Turn pip's complaint into a cause, with a message made of our own validated ``requirements`` and
    ``constraints`` and of versions and dependencies parsed and rebuilt: pip's text never goes out as it is."""
    text = output.replace("\r", "")
    asked = ", ".join(requirements) or "these requirements"
    if "ResolutionImpossible" in text or "conflicting dependencies" in text:
        causes = _conflict_causes(text, requirements, constraints)
        message = f"the requirements conflict: cannot install {asked}"
        if causes:
            message += " (" + "; ".join(causes) + ")"
        return PipFailure("conflict", message, causes)
    m = _NOT_FOUND.search(text)
    if m:
        ours = _ours(m["req"], requirements)
        if ours is None:  # a dependency of what was asked
            _log_unrecognised("resolution", output)
            return PipFailure("not_found", f"a dependency of {asked} has no version with a binary wheel for "
                                           f"{target.describe()}; try other versions", list(requirements))
        name = _name_of(ours)
        versions = [v for v in (_version(x.strip()) for x in m["versions"].split(",")) if v]
        if versions:
            shown = ", ".join(versions[-8:])
            return PipFailure("not_found", f"no version of {name} matches {ours!r} among the binary wheels for "
                                           f"{target.describe()} (available: {shown})", [ours])
        if any(marker in text for marker in _UNREACHABLE):
            return PipFailure("unreachable", f"{sources.describe()} could not be reached from the host while "
                                             f"looking for {name}", [ours])
        exists = project_exists(name, sources)
        if exists:
            return PipFailure("no_wheel", f"{name} has no binary wheel for {target.describe()} (only a source "
                                          "distribution, which the sandbox does not build); choose another "
                                          "package or version", [ours])
        if exists is None:
            return PipFailure("unreachable", f"{sources.describe()} could not be reached from the host while "
                                             f"looking for {name}", [ours])
        return PipFailure("not_found", f"no package named {name!r} on {sources.describe()}", [ours])
    if any(marker in text for marker in _UNREACHABLE):
        return PipFailure("unreachable", f"{sources.describe()} could not be reached from the host")
    if "THESE PACKAGES DO NOT MATCH THE HASHES" in text:
        return PipFailure("unreachable", "a downloaded wheel did not match the hash the index gave; try again")
    what = "download" if downloading else "resolution"
    _log_unrecognised(what, output)
    return PipFailure("internal", f"the host's pip failed during the {what} of {asked} for a reason the host did "
                                  "not recognise (the host's log has the details); try other versions, or do "
                                  "without the package")
