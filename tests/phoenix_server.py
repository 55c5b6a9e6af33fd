"""Arize Phoenix, a real OTLP receiver, for the tracing tests: the session fixture ``phoenix`` and a span reader.

Phoenix (``arize-phoenix``) lives in a venv of its own (``.venv/phoenix``, made
by ``scripts/dev.sh setup``: it pins versions of its own); one Phoenix serves
the whole session, on 127.0.0.1 with a temporary working directory. Without
it the tests skip, and in CI they fail. tests/conftest.py registers the fixture.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.mcp_servers.helpers import free_port, stop
from tests.ci import unavailable

ROOT = Path(__file__).resolve().parents[1]

Span = dict[str, Any]


def _phoenix_command() -> Path | None:
    given = os.environ.get("CODEACT_PHOENIX")
    candidates = [Path(given)] if given else []
    candidates += [Path(sys.prefix) / "phoenix" / "bin" / "phoenix", ROOT / ".venv" / "phoenix" / "bin" / "phoenix"]
    return next((c for c in candidates if c.is_file()), None)


def get_json(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # loopback only
        return json.loads(response.read() or b"null")


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Phoenix on 127.0.0.1 (HTTP: UI, REST, OTLP /v1/traces); its base URL."""
    command = _phoenix_command()
    if command is None:
        message = ("arize-phoenix is not installed (scripts/dev.sh setup installs it into .venv/phoenix; "
                   "or set CODEACT_PHOENIX to its `phoenix` command)")
        unavailable("the tracing tests", message)
    workdir = tmp_path_factory.mktemp("phoenix")
    port, grpc_port = free_port(), free_port()
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(workdir), "PHOENIX_HOST": "127.0.0.1",
           "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(grpc_port), "PHOENIX_TELEMETRY_ENABLED": "false"}
    for name in [k for k in env if k.startswith("OTEL_")]:
        env.pop(name)
    with open(workdir / "phoenix.log", "wb") as log:  # the child writes to its own copy of the descriptor
        proc = subprocess.Popen([str(command), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=workdir)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"Phoenix exited ({proc.returncode}): {(workdir / 'phoenix.log').read_text()[-2000:]}")
            try:
                urllib.request.urlopen(base + "/healthz", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("Phoenix did not answer within 180 s")
                time.sleep(0.5)
        yield base
    finally:
        stop(proc, grace=30)


def all_spans(base: str) -> list[Span]:
    """Every span Phoenix holds in its default project (REST API, paged)."""
    spans: list[Span] = []
    cursor = None
    for _ in range(50):  # pages
        url = f"{base}/v1/projects/default/spans?limit=500" + (f"&cursor={cursor}" if cursor else "")
        page = get_json(url)
        spans += page.get("data") or []
        cursor = page.get("next_cursor")
        if not cursor:
            break
    return spans


def trace_of(base: str, root: Callable[[Span], bool], want: int, timeout: float = 60.0,
             until: Callable[[list[Span]], bool] | None = None) -> list[Span]:
    """Every span of the trace of the first span ``root`` accepts, once there are ``want`` of them and ``until``
    (if given) holds of them (or at timeout): spans of several processes arrive in any order."""
    deadline = time.monotonic() + timeout
    found: list[Span] = []
    while time.monotonic() < deadline:
        spans = all_spans(base)
        roots = [s for s in spans if root(s)]
        if roots:
            trace_id = roots[0]["context"]["trace_id"]
            found = [s for s in spans if s["context"]["trace_id"] == trace_id]
            if len(found) >= want and (until is None or until(found)):
                return found
        time.sleep(1.0)
    return found
