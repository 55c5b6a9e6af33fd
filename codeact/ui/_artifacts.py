"""The files a web-UI session's runs saved (``<output_root>/<run id>/...``): listed and read on the host.

Run ids and paths come from the page, so each is checked as a relative name
and nothing follows a link out of the run's directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sandbox.hostfiles import UnsafePath, check_relative_path, read_confined

from ..errors import CodeActError, SessionNotFound, UIError


def list_artifacts(output_root: Path, run_ids: list[str], limit: int = 1000) -> list[dict[str, Any]]:
    """The files the runs saved (``<output_root>/<run id>/...``), without following links, at most ``limit``."""
    found: list[dict[str, Any]] = []
    for rid in run_ids:
        try:
            check_relative_path(rid)
        except UnsafePath:
            continue
        root = output_root / rid
        if "/" in rid or root.is_symlink() or not root.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(root):  # os.walk does not follow links
            dirnames.sort()
            for filename in sorted(filenames):
                full = Path(dirpath) / filename
                if full.is_symlink() or not full.is_file():
                    continue
                found.append({"run_id": rid, "path": full.relative_to(root).as_posix(),
                              "size": full.stat().st_size})
                if len(found) >= limit:
                    return found
    return found


def read_artifact(output_root: Path, run_id: str, path: str, limit: int) -> bytes:
    """A file a run saved (``<output_root>/<run id>/<path>``), read without following links."""
    try:
        check_relative_path(run_id)
        check_relative_path(path)
    except UnsafePath as exc:
        raise UIError(f"not an artifact name: {exc}") from None
    if "/" in run_id:
        raise UIError("not a run id")
    root = output_root / run_id
    if not root.is_dir():
        raise SessionNotFound(f"run {run_id} has no artifacts here")
    try:
        return read_confined(root, path, max_bytes=limit)
    except CodeActError:
        raise
    except Exception as exc:  # FileTransferError and OSError: say which file
        raise SessionNotFound(f"no artifact {path} in run {run_id}: {exc}") from None
