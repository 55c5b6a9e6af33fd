"""Packages for the local backend: the same resolver and cache, unpacked into directories on this machine.

The local backend is not a security boundary, so neither is this: the
kernel runs as your user and can write anywhere you can. What it keeps:
packages come only from the host's resolution, a session's installs go to
its own private directory (removed with the session), and a materialised
set is unpacked once into the cache (``envs/<hash>``) and shared.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ._pkg_pip import Target
from ._pkg_wheel import extract_tar
from .packages import (
    KNOWN_TOP_LEVEL,
    PackageCache,
    PackageInstallError,
    PackagePolicy,
    Plan,
    SessionPackages,
    canonical_name,
)

_PROBE = (
    "import json, platform, sys, importlib.metadata as m\n"
    "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'libc': platform.libc_ver(),"
    " 'machine': platform.machine(),"
    " 'packages': {d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']}}))\n"
)
_MARKER = ".codeact-complete"


class LocalPackageBackend:
    """The :class:`~sandbox.packages.PackageBackend` of a :class:`~sandbox.LocalSandbox`."""

    def __init__(self, python: str, directory: Path, cache: PackageCache) -> None:
        self.python = python
        self.directory = directory
        self.cache = cache

    def inspect(self) -> tuple[Target, dict[str, str], tuple[str, ...]]:
        try:
            done = subprocess.run([self.python, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=120,
                                  stdin=subprocess.DEVNULL, check=False)
            info = json.loads(done.stdout.strip().splitlines()[-1])
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as exc:
            raise PackageInstallError("internal", f"could not ask {self.python} which packages it has: {exc}") from None
        packages = {canonical_name(k): str(v) for k, v in info["packages"].items()}
        top = tuple(n for n in KNOWN_TOP_LEVEL if n in packages)
        if os.path.realpath(self.python) == os.path.realpath(sys.executable):
            return Target.host(), packages, top
        libc = info.get("libc") or ["", ""]
        if libc[0] != "glibc":
            raise PackageInstallError("no_wheel", f"{self.python} does not use glibc; packages need a glibc Linux")
        major, minor = (int(x) for x in str(libc[1]).split(".")[:2])
        return Target.manylinux(info["python"], info.get("machine") or "x86_64", (major, minor)), packages, top

    def materialise(self, env_hash: str, plan: Plan) -> str:
        env = self.cache.local_env(env_hash)
        if (env / _MARKER).is_file():
            os.utime(env / _MARKER)  # used now: the cache evicts what was used least recently
            return str(env / "site")
        with self.cache.lock("local-env-" + env_hash):
            if (env / _MARKER).is_file():
                return str(env / "site")
            shutil.rmtree(env, ignore_errors=True)
            staging = Path(tempfile.mkdtemp(prefix=".tmp-", dir=env.parent))
            try:
                for wheel in plan.wheels:
                    extract_tar(wheel.tar, staging / "site")
                (staging / _MARKER).write_text(json.dumps({w.pick.name: w.pick.version for w in plan.wheels}))
                os.replace(staging, env)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        return str(env / "site")

    def deliver(self, batch: str, plan: Plan) -> str:
        target = self.directory / batch
        staging = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.directory))
        try:
            for wheel in plan.wheels:
                extract_tar(wheel.tar, staging)
            shutil.rmtree(target, ignore_errors=True)
            os.replace(staging, target)  # all or nothing: a failed copy leaves no importable half
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return str(target)


def session_packages(python: str, directory: str, requirements: Any, policy: Any) -> SessionPackages:
    """The :class:`~sandbox.packages.SessionPackages` of a local session (installs under ``directory``)."""
    if isinstance(requirements, str):
        requirements = [r for r in requirements.split(",") if r.strip()]
    policy = policy or PackagePolicy()
    cache = policy.cache()
    Path(directory).mkdir(parents=True, exist_ok=True)
    return SessionPackages(list(requirements or ()), policy, LocalPackageBackend(python, Path(directory), cache),
                           cache)
