"""Shared test setup: the Docker gate, shared fixtures and a leak check over the whole session.

* ``docker_ready``: the Docker engine answers and the sandbox image exists.
  When not, Docker tests are skipped on a developer machine and FAIL in CI
  (``CI=true``): there they must run. Tests marked ``@pytest.mark.docker``
  go through it automatically.
* ``runtime``: ``runc`` and ``runsc`` (gVisor), one after the other, for the tests that ask for it; a
  runtime the engine lacks is skipped (dev) or fails (CI).
* ``openai_server``: a started :class:`tests.openai_server.OpenAITestServer`.
* ``llama_server``: llama.cpp's server on a small real model, one for the session
  (:mod:`tests.llama_server`; the real-server tier).
  Shared fixtures live here and are asked for by name, never imported into a test module.
* Leak check: when the session ends, nothing a sandbox creates may be left —
  containers or volumes labelled ``io.codeact.sandbox`` by this process,
  ``sbx-*`` socket directories or ``sandbox-work-*`` working directories in
  this session's temporary directory, kernel processes started by this
  process. Leaks are printed and make the run fail.

The session runs with a private temporary directory (``$TMPDIR``), so that
what it leaves behind can be told apart from other processes' sandboxes.
"""

from __future__ import annotations

import calendar
import contextlib
import gc
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from typing import Any
from pathlib import Path

import pytest

from tests.openai_server import OpenAITestServer
from tests.ci import in_ci
from tests.llama_server import llama_server  # noqa: F401 - the session fixture of the real-server tier
from tests.phoenix_server import phoenix  # noqa: F401 - the session fixture of the tracing tests
from tests.podman_engine import podman  # noqa: F401 - the session fixture of the Podman engine tests

# Before anything creates a temporary file: every sbx-*/sandbox-work-* directory
# of this session (and of its subprocesses) lands here.
_SESSION_TMP = Path(tempfile.mkdtemp(prefix="codeact-tests-"))
os.environ["TMPDIR"] = str(_SESSION_TMP)
tempfile.tempdir = None  # recomputed from $TMPDIR
assert Path(tempfile.gettempdir()) == _SESSION_TMP
# Saved sessions (`codeact chat` saves itself when it ends) go here too, never to the user's data dir.
os.environ.setdefault("CODEACT_SNAPSHOT_DIR", str(_SESSION_TMP / "snapshots"))

# A shell that starts a command in the background without job control (`cmd &` in a script, as CI
# runners may) starts it with SIGINT ignored, and ignored signals survive exec: the CLI processes the
# tests interrupt with SIGINT (Ctrl-C) would never see it. Give them a normal Ctrl-C again.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

SANDBOX_LABEL = "io.codeact.sandbox"
_leaks: list[str] = []
#: Sandbox directory name -> the test after which it was first seen: a leak report names its likely author.
_dir_first_seen: dict[str, str] = {}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "docker: needs a Docker engine and the sandbox image (skipped with a reason outside CI when missing)",
    )


@pytest.fixture(scope="session")
def docker_ready() -> None:
    """The Docker engine answers and the sandbox image is built; else skip (dev) or fail (CI)."""
    from sandbox import docker_available

    reason = docker_available()
    if reason is None:
        return
    if in_ci():
        pytest.fail(f"Docker tests must run in CI, but Docker is not ready: {reason}", pytrace=False)
    pytest.skip(f"Docker is not ready: {reason}")


#: The container runtimes the boundary and hostile-code tests run on: runc (the engine's default) and gVisor.
RUNTIMES = ("runc", "runsc")


@pytest.fixture(scope="module", params=RUNTIMES)
def runtime(request: pytest.FixtureRequest, docker_ready: None) -> str:
    """A container runtime of the Docker engine, once per module: tests that ask for it run on each.

    gVisor (runsc) is registered by ``scripts/dev.sh setup-test``; without it its tests are skipped on a
    developer machine and FAIL in CI (``CI=true``), like the Docker gate.
    """
    name = str(request.param)
    if name != "runc":
        from sandbox import runtime_problem

        problem = runtime_problem(name)
        if problem is not None:
            if in_ci():
                pytest.fail(f"the {name} tests must run in CI: {problem}", pytrace=False)
            pytest.skip(problem)
    return name


@pytest.fixture(autouse=True)
def _docker_gate(request: pytest.FixtureRequest) -> None:
    """Every test marked ``docker`` passes the gate, even one that forgot to ask for it."""
    if request.node.get_closest_marker("docker") is not None:
        request.getfixturevalue("docker_ready")


@pytest.fixture
def openai_server() -> Iterator[OpenAITestServer]:
    """A started, scriptable OpenAI-compatible server on 127.0.0.1, closed after the test."""
    with OpenAITestServer() as server:
        yield server


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Tracing on for this test, into memory (content capture off); yields the SDK's InMemorySpanExporter."""
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra (opentelemetry-sdk) is part of the test extras")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from codeact import telemetry
    from codeact.telemetry._spans import Tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(telemetry, "_tracing", Tracing(provider))
    yield exporter
    provider.shutdown()


# --- leak check -----------------------------------------------------------------------------


def _sandbox_dirs() -> set[str]:
    try:
        return {p.name for p in _SESSION_TMP.iterdir() if p.name.startswith(("sbx-", "sandbox-work-"))}
    except OSError:
        return set()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _docker_leaks(started: float) -> list[str]:
    """Sandbox containers and volumes of this process (or of dead processes, created during the session)."""
    try:
        from sandbox.container import docker_client

        client = docker_client(timeout=30)
    except Exception:
        return []  # no engine: nothing can have leaked there
    me = str(os.getpid())

    def ours(labels: dict[str, str], created: float | None) -> bool:
        pid = labels.get(f"{SANDBOX_LABEL}.pid", "")
        if pid == me:
            return True
        # A sandbox of a subprocess this session started and killed (reap's test) must be gone too.
        return bool(pid.isdigit() and not _pid_alive(int(pid)) and created is not None and created >= started - 1)

    leaks = []
    for c in client.api.containers(all=True, filters={"label": SANDBOX_LABEL}):
        if ours(c.get("Labels") or {}, c.get("Created")):
            leaks.append(f"container {c['Names'][0].lstrip('/')} ({c.get('State')})")
    for v in client.api.volumes(filters={"label": SANDBOX_LABEL}).get("Volumes") or []:
        created = None
        with contextlib.suppress(ValueError):
            created = calendar.timegm(time.strptime(v.get("CreatedAt", "")[:19], "%Y-%m-%dT%H:%M:%S"))
        if ours(v.get("Labels") or {}, created):
            leaks.append(f"volume {v['Name']}")
    return leaks


def _kernel_processes() -> list[str]:
    """Kernel processes (``sandbox_runtime.launch``) descended from this process, zombies excluded."""
    me = os.getpid()
    found = []
    try:
        import psutil

        for child in psutil.Process(me).children(recursive=True):
            try:
                if child.status() == psutil.STATUS_ZOMBIE:
                    continue
                if "sandbox_runtime.launch" in " ".join(child.cmdline()):
                    found.append(f"kernel process {child.pid}: {' '.join(child.cmdline())[:120]}")
            except psutil.Error:
                continue
        return found
    except ImportError:
        pass
    parents: dict[int, int] = {}
    cmdlines: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] == "Z":
                continue
            parents[int(entry)] = int(fields[1])
            cmdlines[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError, ValueError):
            continue
    for pid, cmd in cmdlines.items():
        if "sandbox_runtime.launch" not in cmd:
            continue
        p, hops = parents.get(pid), 0
        while p and p != me and hops < 50:
            p, hops = parents.get(p), hops + 1
        if p == me:
            found.append(f"kernel process {pid}: {cmd[:120]}")
    return found


def _collect_leaks(started: float, dirs_before: set[str]) -> list[str]:
    gc.collect()  # forgotten sessions are released by their finalizers
    deadline = time.monotonic() + 10
    while True:
        leaks = [f"temporary directory {_SESSION_TMP / name}"
                 f" (first seen after {_dir_first_seen.get(name, 'the last test')}: {_listing(_SESSION_TMP / name)})"
                 for name in sorted(_sandbox_dirs() - dirs_before)]
        leaks += _docker_leaks(started)
        leaks += _kernel_processes()
        if not leaks or time.monotonic() > deadline:
            return leaks
        time.sleep(0.5)  # a process or container may be on its way out


def _listing(directory: Path, limit: int = 8) -> str:
    try:
        names = sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))
    except OSError as exc:
        return f"unreadable: {exc}"
    return ", ".join(names[:limit]) + (f", ... ({len(names)} in all)" if len(names) > limit else "") or "empty"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    for name in _sandbox_dirs():  # before the fixtures close (the session's close with the last test's)
        _dir_first_seen.setdefault(name, item.nodeid)
    yield


@pytest.fixture(scope="session", autouse=True)
def _no_sandbox_leaks():
    """Session-wide: record what exists now; at the end, anything new is a leak."""
    started = time.time()
    dirs_before = _sandbox_dirs()
    yield
    _wait_for_bytecode_helpers()
    _leaks.extend(_collect_leaks(started, dirs_before))


def _wait_for_bytecode_helpers(timeout: float = 300) -> None:
    """A run-time install's bytecode is compiled after its session may have closed, by design (the host's cache
    gets it for the next one): such a helper still at work is not a leak. Waits for it; a stuck one is."""
    from sandbox import _pkg_docker

    deadline = time.monotonic() + timeout
    while _pkg_docker._LIVE_HELPERS and time.monotonic() < deadline:
        time.sleep(0.5)


@pytest.hookimpl(trylast=True)  # after pytest's own tmp_path cleanup, which lives in the same directory
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _leaks:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = ["", "SANDBOX LEAKS: the test session left these behind:"] + [f"  - {leak}" for leak in _leaks]
        if reporter is not None:
            reporter.write_line("\n".join(lines), red=True, bold=True)
        else:  # pragma: no cover
            print("\n".join(lines))
        session.exitstatus = 1
    else:
        shutil.rmtree(_SESSION_TMP, ignore_errors=True)
