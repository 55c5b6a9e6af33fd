"""What a session's container needs said differently to Podman's Docker-compatible service (Podman 4).

Podman serves the Docker API (``podman system service``) and codeact talks to
it as to any engine (:func:`sandbox.engines.is_podman` tells them apart). The
walls are the same; a few settings need other words there, each because
Podman would otherwise weaken a wall or refuse the container:

* **RLIMIT_NPROC** (:data:`NPROC`). Docker leaves it alone (the container
  inherits the engine's). Podman sets 1048576 unless told a value, and its
  runtime must then *raise* the hard limit it inherited: where root lacks
  CAP_SYS_RESOURCE (VMs and containers that run engines) every start fails
  with "error setting rlimit type 6: operation not permitted". Podman lowers
  its own processes' limit to 32768, so its runtime may always set that. It
  is no per-session bound on either engine (the kernel counts the processes
  of the sandbox's uid across all containers): that is the cgroup's pids
  limit (``pids=``), the same on both.
* **In-memory volumes** (:func:`named_volumes`). Podman ignores the driver
  options of an anonymous volume in a container's mounts: /workspace would be
  a directory on the host's disk with no size cap. Each such volume is made
  first, by name, with its options, and mounted by name; Podman 4 refuses
  ``size=`` for volumes (it looks for a disk quota), so the size is said as
  tmpfs's own ``nr_blocks``. A closing session removes them once Podman has
  removed the container (:data:`VOLUME_RELEASE_TIMEOUT`).
* **/run and /var/tmp** (:data:`READ_ONLY_TMPFS`). With a read-only root
  filesystem Podman mounts writable tmpfs there (its ``--read-only-tmpfs``),
  which Docker does not: codeact mounts them read-only and empty instead.
* **Helper containers** (package volumes, bytecode): open files and processes
  are said too (:func:`helper_ulimits`), for the same reason; their scratch
  volumes stay anonymous (a directory on disk, removed with the helper).
* The runtime: crun (Podman's usual one) refuses hosts that mix cgroup v1 and
  v2; runc works (``podman --runtime runc system service``): :func:`start_hint`
  says so when a start fails that way.
"""

from __future__ import annotations

import math
from typing import Any

#: RLIMIT_NPROC (soft and hard) of a session's processes on Podman (see the module docs).
NPROC = 32768
#: RLIMIT_NOFILE of codeact's helper containers on Podman (Podman would set 1048576, as for NPROC).
HELPER_NOFILE = 4096
#: tmpfs mounts on Podman beside /tmp: read-only and empty, where Podman would mount writable ones.
READ_ONLY_TMPFS = {"/run": "ro,size=64k,nosuid,nodev,noexec", "/var/tmp": "ro,size=64k,nosuid,nodev,noexec"}
#: Seconds a closing session waits for Podman to let go of its volumes (it removes the container meanwhile).
VOLUME_RELEASE_TIMEOUT = 10.0
_PAGE = 4096


def helper_ulimits() -> list[Any]:
    """Limits for codeact's own helper containers on Podman (they compile packages; no sandbox code runs
    there): what Docker would give them is the engine's, what Podman would give them its runtime may not set."""
    from docker.types import Ulimit

    return [Ulimit(name="nofile", soft=HELPER_NOFILE, hard=HELPER_NOFILE),
            Ulimit(name="nproc", soft=NPROC, hard=NPROC)]


def named_volumes(client: Any, mounts: list[Any], made: list[str]) -> list[Any]:
    """``mounts`` with each anonymous volume that has driver options made first, by name, on ``client``'s engine.

    Appends the name of each volume made to ``made`` as soon as it exists (the caller removes them with the
    container: Podman keeps named volumes), so that a failure halfway leaves none unlisted.
    """
    out: list[Any] = []
    for mount in mounts:
        options = (mount.get("VolumeOptions") or {}) if mount.get("Type") == "volume" else {}
        driver = options.get("DriverConfig") or {}
        if mount.get("Source") or not driver.get("Options"):
            out.append(mount)
            continue
        opts = dict(driver["Options"])
        if "o" in opts:
            opts["o"] = _sized_in_blocks(opts["o"])
        volume = client.api.create_volume(None, driver=driver.get("Name") or "local", driver_opts=opts,
                                          labels=options.get("Labels") or None)
        made.append(volume["Name"])
        out.append(type(mount)(mount["Target"], volume["Name"], type="volume", read_only=bool(mount.get("ReadOnly"))))
    return out


def _sized_in_blocks(o: str) -> str:
    """A tmpfs volume's mount options with ``size=`` said as ``nr_blocks=`` (pages), which Podman passes on."""
    from docker.utils import parse_bytes

    parts = []
    for part in o.split(","):
        key, _, value = part.partition("=")
        if key.strip() == "size" and value:
            parts.append(f"nr_blocks={max(1, math.ceil(parse_bytes(value.strip()) / _PAGE))}")
        else:
            parts.append(part)
    return ",".join(parts)


def start_hint(why: str) -> str:
    """What to do about a container start that Podman's runtime refused, in the cases known to happen."""
    if "hybrid mode" in why:  # crun on a host with cgroup v1 and a controller in the v2 hierarchy as well
        return ("; this host mixes cgroup v1 and v2, which crun refuses: start Podman with runc "
                "(`podman --runtime runc system service ...`)")
    if "rlimit" in why.lower():
        return (f"; the Podman service may not set a process limit of {NPROC}: raise its hard limit "
                f"(`ulimit -Hu {NPROC}` before `podman system service`)")
    return ""
