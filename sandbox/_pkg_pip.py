"""The host's pip, run as a subprocess: resolve requirements for a sandbox's Python and download wheels.

pip runs with ``--only-binary=:all:`` always, so it never builds a source
distribution and nothing from a package runs on the host. It resolves for
the *sandbox's* interpreter and platform (``--python-version``,
``--platform``, ``--implementation``, ``--abi``), not the host's. Its own
configuration (certificates, proxies, a private mirror in pip.conf) applies,
except in offline mode, where ``--isolated --no-index --find-links DIR``
makes the wheelhouse directory the only source.

Failures are sorted into the causes :class:`~sandbox.packages.PackageInstallError`
names: not found, no binary wheel (source-only), resolver conflict, index
unreachable.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._pkg_wheel import WheelError, WheelName, safe_filename

#: Seconds one pip run may take (a slow mirror, a large wheel).
PIP_TIMEOUT = 900.0
#: pip says these when it could not talk to the index at all.
_UNREACHABLE = ("Max retries exceeded", "NewConnectionError", "ConnectTimeoutError", "ProxyError",
                "Could not fetch URL", "Temporary failure in name resolution", "Connection refused",
                "Network is unreachable", "SSLError")


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
                listing = sorted((e.name, e.stat().st_size, int(e.stat().st_mtime)) for e in os.scandir(self.wheelhouse))
            except OSError:
                listing = []
        return json.dumps([self.index_url, list(self.extra_index_urls), self.wheelhouse, self.offline, listing])

    def describe(self) -> str:
        if self.offline:
            return f"the wheelhouse {self.wheelhouse} (offline)"
        return self.index_url or "the package index"


@dataclass(frozen=True)
class Pick:
    """One distribution of a resolution: the exact wheel the resolver chose."""

    name: str
    version: str
    filename: str
    url: str
    sha256: str | None
    requested: bool


@dataclass
class PipFailure(Exception):
    """pip could not resolve or fetch; ``kind`` is one of PackageInstallError's causes."""

    kind: str
    message: str
    #: Requirements named in the error (the one not found, the conflicting ones).
    details: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return self.message


def _pip(args: Sequence[str], *, timeout: float = PIP_TIMEOUT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1"}
    try:
        return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True,
                              errors="replace", env=env, timeout=timeout, stdin=subprocess.DEVNULL,
                              check=False)
    except subprocess.TimeoutExpired:
        raise PipFailure("unreachable", f"pip did not finish within {timeout:g} s (a slow or unreachable index?)")
    except OSError as exc:
        raise PipFailure("unreachable", f"could not run pip: {exc}") from None


def resolve(requirements: Sequence[str], constraints: Sequence[str], target: Target, sources: Sources
            ) -> list[Pick]:
    """The wheels pip picks for ``requirements`` (canonical PEP 508 strings) under ``constraints``."""
    with tempfile.TemporaryDirectory(prefix="codeact-resolve-") as tmp:
        req_file, con_file, report = Path(tmp, "requirements.txt"), Path(tmp, "constraints.txt"), Path(tmp, "r.json")
        req_file.write_text("".join(r + "\n" for r in requirements))
        con_file.write_text("".join(c + "\n" for c in constraints))
        args = ["install", "--dry-run", "--ignore-installed", "--report", str(report),
                "--only-binary=:all:", "--no-color", *target.pip_args(), *sources.pip_args(),
                "-c", str(con_file), "-r", str(req_file)]
        done = _pip(args)
        if done.returncode != 0 or not report.is_file():
            raise classify(done.stderr + done.stdout, target, sources)
        try:
            data = json.loads(report.read_text())
        except ValueError:
            raise PipFailure("unreachable", "pip wrote an unreadable resolution report") from None
    picks = []
    for item in data.get("install", []):
        meta = item.get("metadata", {})
        info = item.get("download_info", {})
        url = str(info.get("url", ""))
        filename = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
        if not safe_filename(filename) or not filename.endswith(".whl"):
            raise PipFailure("no_wheel", f"the resolver chose {filename!r} for {meta.get('name')}, not a wheel",
                             [str(meta.get("name"))])
        try:
            WheelName.parse(filename)
        except WheelError as exc:
            raise PipFailure("no_wheel", str(exc), [str(meta.get("name"))]) from None
        hashes = (info.get("archive_info") or {}).get("hashes") or {}
        sha = hashes.get("sha256")
        picks.append(Pick(str(meta["name"]), str(meta["version"]), filename, url,
                          sha.lower() if isinstance(sha, str) and re.fullmatch(r"[0-9a-fA-F]{64}", sha) else None,
                          bool(item.get("requested"))))
    return picks


def download(picks: Sequence[Pick], target: Target, sources: Sources, directory: Path) -> None:
    """Download exactly the wheels of ``picks`` into ``directory`` (hashes checked when known)."""
    lines = []
    hashed = all(p.sha256 for p in picks)
    for p in picks:
        line = f"{p.name} @ {p.url}"
        if hashed:
            line += f" --hash=sha256:{p.sha256}"
        lines.append(line)
    req_file = directory / ".requirements.txt"
    req_file.write_text("".join(line + "\n" for line in lines))
    args = ["download", "--no-deps", "--only-binary=:all:", "--no-color", "--quiet", "-d", str(directory),
            *target.pip_args(), *sources.pip_args(), "-r", str(req_file)]
    if hashed:
        args.insert(1, "--require-hashes")
    done = _pip(args)
    req_file.unlink(missing_ok=True)
    if done.returncode != 0:
        raise classify(done.stderr + done.stdout, target, sources, downloading=True)


def project_exists(name: str, sources: Sources) -> bool | None:
    """Whether the index knows ``name`` at all (any file, source distributions included); None if unsure.

    ``pip index versions`` reads the index's listing only: nothing is built or
    run. Its debug output says when an index could not be fetched (pip is
    silent about that otherwise), as opposed to answering "not found".
    """
    done = _pip(["index", "versions", "-vvv", "--no-color", *sources.pip_args(), name], timeout=120.0)
    text = done.stderr + done.stdout
    if done.returncode == 0 and ("Available versions" in text or re.search(rf"(?im)^{re.escape(name)} \(", text)):
        return True
    failures = re.findall(r"Could not fetch URL \S+: (.*)", text)
    if any(not re.search(r"\b404\b|Not Found", reason) for reason in failures) or \
            any(marker in text for marker in _UNREACHABLE[:6]) and not failures:
        return None
    return False


_NOT_FOUND = re.compile(r"Could not find a version that satisfies the requirement (?P<req>\S+) \(from versions: (?P<versions>[^)]*)\)")


def classify(output: str, target: Target, sources: Sources, *, downloading: bool = False) -> PipFailure:
    """Turn pip's complaint into a cause."""
    text = output.replace("\r", "")
    if "ResolutionImpossible" in text or "conflicting dependencies" in text:
        causes = []
        block = re.search(r"The conflict is caused by:\n(?P<body>(?:[ \t]+.*\n?)+)", text)
        if block:
            causes = [line.strip() for line in block["body"].splitlines() if line.strip()][:20]
            # Constraints are what the sandbox already has: say so.
            causes = [re.sub(r"^The user requested \(constraint\) (\S+?)==(\S+)$", r"\1 \2 is already installed "
                             "in the sandbox", c) for c in causes]
        head = re.search(r"Cannot install (.+?) because these package versions have conflicting dependencies", text)
        what = head.group(1) if head else "these requirements"
        message = f"the requirements conflict: cannot install {what}"
        if causes:
            message += " (" + "; ".join(causes) + ")"
        return PipFailure("conflict", message, causes)
    m = _NOT_FOUND.search(text)
    if m:
        req = m["req"]
        versions = [v.strip() for v in m["versions"].split(",") if v.strip() and v.strip() != "none"]
        name = re.split(r"[<>=!~;\[ ]", req, 1)[0]
        if versions:
            shown = ", ".join(versions[-8:])
            return PipFailure("not_found", f"no version of {name} matches {req!r} among the binary wheels for "
                                           f"{target.describe()} (available: {shown})", [req])
        if any(marker in text for marker in _UNREACHABLE):
            return PipFailure("unreachable", f"{sources.describe()} could not be reached from the host while "
                                             f"looking for {name}", [req])
        exists = project_exists(name, sources)
        if exists:
            return PipFailure("no_wheel", f"{name} has no binary wheel for {target.describe()} (only a source "
                                          "distribution, which the sandbox does not build); choose another "
                                          "package or version", [req])
        if exists is None:
            return PipFailure("unreachable", f"{sources.describe()} could not be reached from the host while "
                                             f"looking for {name}", [req])
        return PipFailure("not_found", f"no package named {name!r} on {sources.describe()}", [req])
    if any(marker in text for marker in _UNREACHABLE):
        return PipFailure("unreachable", f"{sources.describe()} could not be reached from the host")
    if "THESE PACKAGES DO NOT MATCH THE HASHES" in text:
        return PipFailure("unreachable", "a downloaded wheel did not match the hash the index gave; try again")
    last = [line.strip() for line in text.splitlines() if line.strip().startswith("ERROR")]
    what = "download" if downloading else "resolution"
    return PipFailure("unreachable", f"the {what} failed: " + ("; ".join(last[-3:]) or text.strip()[-500:]))
