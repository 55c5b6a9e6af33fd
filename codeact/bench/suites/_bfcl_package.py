"""BFCL's own package (``bfcl-eval``, Apache-2.0), installed on first use into a directory of its own.

The package declares heavy dependencies (torch through sentence-transformers,
a pinned numpy 1.26, several vendor SDKs) that the multi-turn part never
imports: its API classes are stdlib code plus ``mpmath`` (the math API). So
it is never installed into the project's environment. The first use runs::

    python -m pip install --no-deps --target ~/.cache/codeact/bfcl/<version> bfcl-eval==<version> mpmath==1.3.0

(into a temporary directory renamed into place when complete, under a lock,
so concurrent processes and Ray workers on one node prepare it once), and the
directory is put at the END of ``sys.path``: the project's own packages win,
and only ``bfcl_eval`` (and ``mpmath`` where the project has none) come from
there. ``scripts/dev.sh`` prepares it ahead of the tests.

``CODEACT_BFCL_DIR`` names a prepared directory to use instead (a shared or
offline copy); ``$XDG_CACHE_HOME`` moves the default cache.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator

from ...errors import BenchError

#: The bfcl-eval release the suite is built on (its data and API classes).
BFCL_VERSION = "2026.3.23"
#: What the math API imports (bfcl-eval pins this version).
MPMATH_VERSION = "1.3.0"
#: The file that marks a complete installation (written last).
_MARKER = ".codeact-bfcl.json"
#: The part of the package the suite uses.
SOURCE_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"

_lock = threading.Lock()


def package_dir() -> Path:
    """Where the package lives (prepared or not): ``$CODEACT_BFCL_DIR``, else the user's cache."""
    from ... import settings

    given = settings.env("CODEACT_BFCL_DIR")
    if given:
        return Path(given).expanduser()
    cache = settings.env("XDG_CACHE_HOME")
    root = Path(cache).expanduser() if cache else Path.home() / ".cache"
    return root / "codeact" / "bfcl" / BFCL_VERSION


def is_prepared(directory: Path | None = None) -> bool:
    """True when ``directory`` (default :func:`package_dir`) holds a complete installation."""
    directory = directory or package_dir()
    return (directory / _MARKER).is_file() and (directory / "bfcl_eval" / "data").is_dir()


def prepare(directory: Path | None = None, *, python: str | None = None) -> Path:
    """Install bfcl-eval (no dependencies) and mpmath into ``directory`` unless already there; return it.

    Raises:
        BenchError: pip failed (no network to the package index, a full disk...), saying how to fix it.
    """
    directory = directory or package_dir()
    if is_prepared(directory):
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    with _lock, _file_lock(directory.parent / f".{directory.name}.lock"):
        if is_prepared(directory):  # another process finished it while we waited
            return directory
        staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
        try:
            command = [python or sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                       "--no-deps", "--no-compile", "--target", str(staging),
                       f"bfcl-eval=={BFCL_VERSION}", f"mpmath=={MPMATH_VERSION}"]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise BenchError(f"preparing the BFCL suite failed: {exc}; run `{' '.join(command[:3])} ...` "
                                 f"yourself or set CODEACT_BFCL_DIR to a prepared copy") from exc
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                raise BenchError(f"preparing the BFCL suite failed: pip install bfcl-eval=={BFCL_VERSION} "
                                 f"--no-deps --target {directory} exited {done.returncode}: {' | '.join(tail)}. "
                                 "It needs the package index once (or set CODEACT_BFCL_DIR to a prepared copy)")
            (staging / _MARKER).write_text(json.dumps({"bfcl-eval": BFCL_VERSION, "mpmath": MPMATH_VERSION}))
            if directory.exists():  # a broken earlier attempt
                shutil.rmtree(directory)
            os.replace(staging, directory)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return directory


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_importable() -> Path:
    """Prepare the package if needed and make ``bfcl_eval`` importable (its directory at the end of sys.path)."""
    directory = prepare()
    with _lock:
        entry = str(directory)
        if entry not in sys.path:
            sys.path.append(entry)
    return directory


def data_dir() -> Path:
    """The package's ``data/`` directory (tasks, ground truth, function docs)."""
    return ensure_importable() / "bfcl_eval" / "data"


def import_class(module: str, name: str) -> Any:
    """One API class, e.g. ``import_class("gorilla_file_system", "GorillaFileSystem")``."""
    import importlib

    ensure_importable()
    return getattr(importlib.import_module(f"{SOURCE_PACKAGE}.{module}"), name)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """A BFCL data file: one JSON object per line."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
