"""Whether this test run is CI's, and the one rule for a missing test dependency: CI fails, elsewhere it skips."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def unavailable(tests: str, reason: str) -> NoReturn:
    """``tests`` cannot run here because of ``reason``: fail in CI (there they must run), skip elsewhere."""
    if in_ci():
        pytest.fail(f"{tests} must run in CI: {reason}", pytrace=False)
    pytest.skip(reason)
