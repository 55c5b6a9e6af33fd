"""The labels on everything a sandbox puts on an engine: they name the owning process, so that
:func:`sandbox.reap` can tell what a dead process left behind (and pid reuse apart)."""

from __future__ import annotations

import os
import socket

LABEL = "io.codeact.sandbox"


def process_start_time(pid: int) -> str:
    """Start time of a process in clock ticks since boot ('' if unknown): tells pid reuse apart."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def owner_labels(session: str) -> dict[str, str]:
    """Labels naming this process (host, pid, its start time) and ``session``."""
    pid = os.getpid()
    return {
        LABEL: "1",
        f"{LABEL}.host": socket.gethostname(),
        f"{LABEL}.pid": str(pid),
        f"{LABEL}.pid-start": process_start_time(pid),
        f"{LABEL}.session": session,
    }
