"""The trust boundary, tested as the attacker: hostile code run through the real agent or sandbox on Docker.

Each test plays code written by a prompt-injected model. It runs in the
default Docker backend, tries one of the attacks found against earlier
versions (the numbers are the findings of the boundary issue), and then the
test checks the HOST: files (contents, modes, owners) outside the run's
output directory, memory, time, and containers left behind. Targets are
files the test creates itself, never real host files.

Tests that take the ``runtime`` fixture run on runc and on gVisor (runsc;
see README, Security): the ones whose defence rests on the container's
kernel (the supervisor's signals and /proc, kernel deaths and the OOM
killer, mount flags and open-file limits, what the container can write, the
kernel the code talks to) and the ones where runsc changes the path of the
kernel's stream (under gVisor the host cannot reach the kernel's socket
directly, so calls take the Docker API's exec stream: floods, large and
malformed frames). Under runsc a subset of the parametrized cases runs, to
keep the added time near a minute and a half: call and output floods,
garbage and oversized frames, and the deaths a child holding the stream,
the OOM killer and a self-SIGKILL. Where gVisor behaves differently the test
states the difference as its expectation for runsc.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from codeact import CodeActAgent, RunLog, ScriptedModel, tool
from codeact.agent import ApprovalRequest, RunLimits
from codeact.events import Observation

pytestmark = [pytest.mark.docker, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[1]


def py(code: str) -> str:
    return f"Let me do that.\n```python\n{textwrap.dedent(code).strip()}\n```"


def run_agent(tmp_path: Path, code: str, tools: Any = (), **options: Any):
    """One scripted step of ``code`` then a plain answer, through the real agent on Docker."""
    model = ScriptedModel([py(code), "done"])
    options.setdefault("execution_timeout", 20)
    agent = CodeActAgent(model, tools, log=tmp_path / "runs.db", output_dir=tmp_path / "out", **options)
    events = list(agent.stream("hostile task"))
    result = events[-1].result
    return events, result


def snapshot(root: Path) -> dict[str, tuple[int, int, int, int, bytes]]:
    """Every file under ``root``: mode, uid, gid, size and content."""
    out = {}
    for path in root.rglob("*"):
        st = path.lstat()
        content = path.read_bytes() if stat.S_ISREG(st.st_mode) else b""
        out[str(path.relative_to(root))] = (st.st_mode, st.st_uid, st.st_gid, st.st_size, content)
    return out


@pytest.fixture()
def host_target(tmp_path: Path) -> Path:
    """A host file the attacker aims at (made by the test), next to — not inside — the output directory."""
    target = tmp_path / "victim" / "important.txt"
    target.parent.mkdir()
    target.write_text("original\n")
    target.chmod(0o644)
    return target


# --- 1 and 9: files leave the sandbox only into the output directory, within caps ----------------------------


def test_artifact_names_cannot_escape_the_output_directory(tmp_path: Path, host_target: Path) -> None:
    before = snapshot(tmp_path / "victim")
    events, result = run_agent(tmp_path, f"""
        import os, json, sandbox_runtime
        os.makedirs('a/b', exist_ok=True)
        open('a/b/x', 'w').write('payload')
        open('ok.txt', 'w').write('fine')
        os.symlink('/etc/passwd', 'link.txt')
        evil = ['a/../../../victim/important.txt', '../victim/important.txt', {str(host_target)!r},
                'a/b/../../../../victim/important.txt', 'ok.txt\\x1b]0;owned\\x07', 'a/\\u202eexe.txt']
        sandbox_runtime.list_files = lambda root='.': json.dumps(
            [[p, 7, 1.0] for p in evil] + [['ok.txt', 4, 2.0], ['link.txt', 11, 3.0]])
        print('listing replaced')
    """)
    assert snapshot(tmp_path / "victim") == before  # contents, modes and owners untouched
    out = tmp_path / "out" / result.run_id
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert written == ["ok.txt"]
    assert not any(str(p).startswith(str(tmp_path / "victim")) for p in result.artifacts)
    # Nothing was written anywhere else under the test's directory either.
    assert {p.name for p in tmp_path.iterdir()} - {"runs.db-wal", "runs.db-shm"} == {"victim", "out", "runs.db"}


def test_symlinks_and_oversized_files_are_not_copied_and_the_observation_says_so(tmp_path: Path) -> None:
    limits = RunLimits(max_artifact_files_per_step=5, max_artifact_bytes_per_step=2_000_000)
    events, result = run_agent(tmp_path, """
        import os
        for i in range(8):
            open(f'f{i}.txt', 'w').write('x')
        open('big.bin', 'wb').write(b'0' * 3_000_000)
        os.symlink('/etc/shadow', 'shadow')
        print('wrote')
    """, limits=limits)
    obs = [e for e in events if isinstance(e, Observation)][0].text
    assert "Not saved for the user" in obs and "files per step" in obs and "big.bin" in obs
    out = tmp_path / "out" / result.run_id
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 5 and sum(p.stat().st_size for p in files) <= 2_000_000
    assert not (out / "shadow").exists()


# --- 2: no shared directory: nothing on the host the container can write -------------------------------------


def test_the_container_shares_nothing_writable_with_the_host(tmp_path: Path, runtime: str) -> None:
    from sandbox import DockerSandbox

    before = set(os.listdir(tmp_path.parent))
    with DockerSandbox(timeout=20, runtime=runtime) as sb:
        r = sb.run("""
import os
found = []
for root in ['/run', '/tmp', '/workspace', '/var', '/opt', '/home', '/mnt', '/srv']:
    for dirpath, dirs, files in os.walk(root):
        if os.access(dirpath, os.W_OK):
            found.append(dirpath)
print(sorted(set(p.split('/')[1] for p in found)))
""")
        info = sb.container.attrs
        assert not info["HostConfig"].get("Binds")
        assert all(m["Type"] in ("volume", "tmpfs") for m in info["Mounts"]), info["Mounts"]
        assert r.stdout.strip() == "['tmp', 'workspace']", r.stdout  # both in the container only
        # The kernel restarted by hostile code and by us: the host still writes no file anywhere.
        sb.run("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
        sb.restart()
        assert sb.run("print('back')").stdout == "back\n"
    assert set(os.listdir(tmp_path.parent)) == before


def test_files_the_code_plants_do_not_run_when_the_next_kernel_starts() -> None:
    """Persistence inside the session: the next kernel reads nothing the code wrote at start-up."""
    from sandbox import DockerSandbox

    trap = "open('/workspace/TRAP_RAN', 'w').write('pwned')\n"
    with DockerSandbox(timeout=20) as sb:
        r = sb.run(f"""
import os
for path in ['/workspace/sandbox_runtime.py', '/workspace/ipykernel.py', '/workspace/sitecustomize.py',
             '/workspace/ipython_config.py', '/workspace/ipython_kernel_config.py', '/workspace/matplotlibrc',
             '/tmp/.ipython/profile_default/startup/00-trap.py', '/tmp/.ipython/profile_default/ipython_config.py',
             '/tmp/.local/lib/python3.11/site-packages/usercustomize.py', '/tmp/usercustomize.py',
             '/tmp/sitecustomize.py', '/tmp/matplotlib/matplotlibrc']:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, 'w').write({trap!r} if path.endswith('.py') else 'backend: trap')
print('planted')
""")
        assert r.stdout == "planted\n", r
        sb.restart()
        after = sb.run("import os, sandbox_runtime\nprint(os.path.exists('/workspace/TRAP_RAN'), os.getcwd(), "
                       "sandbox_runtime.__file__)\nimport matplotlib; print(matplotlib.get_backend())")
        assert after.error is None, after.error
        lines = after.stdout.splitlines()
        assert lines[0] == "False /workspace /opt/sandbox/runtime/sandbox_runtime.py", lines
        assert "trap" not in lines[1]


def test_the_supervisor_cannot_be_signalled_traced_or_read_by_the_code(runtime: str) -> None:
    from sandbox import DockerSandbox

    # gVisor (2022-12) delivers SIGKILL and SIGSTOP to the namespace's init: there the code can end or stop
    # its own supervisor. Read and trace it, it cannot; signals are tried below, apart.
    kill = "(signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP)" if runtime == "runc" else "(signal.SIGTERM,)"
    with DockerSandbox(timeout=20, runtime=runtime) as sb:
        r = sb.run(f"""
import os, signal, ctypes
out = []
for sig in {kill}:
    try:
        os.kill(1, sig); out.append('sent')
    except OSError as e:
        out.append(type(e).__name__)
for path in ('/proc/1/mem', '/proc/1/fd/0', '/proc/1/environ'):
    try:
        open(path, 'rb').read(1); out.append('read')
    except OSError as e:
        out.append(type(e).__name__)
libc = ctypes.CDLL(None, use_errno=True)
out.append(libc.ptrace(16, 1, 0, 0))  # PTRACE_ATTACH
print(out)
""")
        assert r.error is None, r.error
        if runtime == "runc":
            # SIGKILL/SIGSTOP to the namespace's init are dropped by the kernel even when "sent"; the
            # supervisor is not dumpable, so its /proc entries are root's.
            assert "read" not in r.stdout and r.stdout.strip().endswith("-1]"), r.stdout
        else:
            # gVisor keeps /proc/1/mem and ptrace closed, but lets the code open the supervisor's fds (its
            # stream to the host) and environment: the code can write frames as the supervisor. The host
            # takes every frame as hostile already; the environment holds nothing the kernel lacks.
            assert r.stdout.strip() == "['sent', 'PermissionError', 'read', 'read', -1]", r.stdout
        assert sb.run("print('still supervised')").stdout == "still supervised\n"
        if runtime == "runsc":
            # SIGKILL ends the supervisor and with it the container: the session goes on in a new one
            # (files lost); nothing of the old container is left on the host.
            old = sb.container.id
            killed = sb.run("import os, signal\nos.kill(1, signal.SIGKILL)")
            assert killed.error is not None and killed.error.type == "KernelDied", killed.error
            after = sb.run("print('a new container')")
            assert after.stdout == "a new container\n" and sb.container.id != old
            assert any("files from earlier runs are gone" in n for n in after.notices), after.notices
            assert not _session_containers_by_id(old)


# --- 3: time limits hold on the host's clock, whatever the kernel sends ------------------------------------------


HOSTILE_FLOODS = {
    # Calls sent as fast as possible, replies never read (the old stdin flood).
    "call-flood": """
import sandbox_runtime as s, sandbox_wire as w, sandbox_codec as c
payload = b''.join(c.encode(((), {})))
frame = b''.join(bytes(x) for x in w.frame(w.KIND_CALL, *w.pack_call(1, 'echo', [payload])))
import os, threading
fd = s._state.link.fd_out
while True:
    os.write(fd, frame)
""",
    # Output that never stops, from a thread that ignores interrupts.
    "output-flood": """
import threading, sys
def spam():
    while True:
        try:
            sys.stdout.write('x' * 10000)
        except BaseException:
            pass
for _ in range(4):
    threading.Thread(target=spam, daemon=True).start()
while True:
    try:
        pass
    except BaseException:
        pass
""",
    # A call that never returns on the host's side, again and again: host time is capped too.
    "slow-calls": """
while True:
    try:
        slow(5)
    except BaseException:
        pass
""",
}


@pytest.mark.parametrize(("attack", "runtime"), [*((a, "runc") for a in sorted(HOSTILE_FLOODS)),
                                                   *((a, "runsc") for a in ("call-flood", "output-flood"))],
                         indirect=["runtime"])
def test_time_limit_holds_against_floods(attack: str, runtime: str) -> None:
    from sandbox import DockerSandbox

    def echo(*args: Any, **kwargs: Any) -> Any:
        return args

    def slow(seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    with DockerSandbox(functions=[echo, slow], timeout=3, function_timeout=2, max_run_time=8, runtime=runtime) as sb:
        started = time.monotonic()
        r = sb.run(HOSTILE_FLOODS[attack])
        elapsed = time.monotonic() - started
        # Stated grace: the limit (3 s of code time, 8 s in all) + 3 s for the interrupt + a kernel restart.
        assert elapsed < 8 + 3 + 15, elapsed
        # The run must end, in time and with an error. Under heavy host load the output flood has once filled
        # the container's own memory first (the kernel was OOM-killed inside its limit): an end too.
        assert r.error is not None and r.error.type in ("TimeoutError", "ProtocolError", "KernelDied",
                                                        "MemoryError"), r.error
        after = sb.run("print('usable')", timeout=20)
        assert after.stdout.endswith("usable\n"), after


# --- 4: host memory stays bounded ---------------------------------------------------------------------------------


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def test_host_memory_is_bounded_under_large_and_unknown_calls(runtime: str) -> None:
    from sandbox import DockerSandbox, Limits

    def sink(data: bytes) -> int:
        return len(data)

    limits = Limits(max_payload=32 * 2**20, max_kept_call_bytes=4 * 2**20)
    with DockerSandbox(functions=[sink], timeout=60, limits=limits, memory="2g", runtime=runtime) as sb:
        sb.run("1")
        base = _rss()
        r = sb.run("""
import sandbox_runtime as s
blob = b'x' * (20 * 2**20)
sizes = [sink(blob) for _ in range(11)]
errors = []
for _ in range(11):
    try:
        s.call('not_registered', (blob,), {})
    except Exception as e:
        errors.append(type(e).__name__)
print(sizes[0], len(sizes), errors[:2], len(errors))
""")
        assert r.error is None, r.error
        assert r.stdout.strip() == "20971520 11 ['NameError', 'NameError'] 11"
        kept = [c for c in r.calls if c.name == "sink"]
        assert len(kept) == 11 and sum(1 for c in kept if c.args and isinstance(c.args[0], bytes)) == 0
        growth = _rss() - base
        assert growth < 120 * 2**20, f"host RSS grew by {growth / 2**20:.0f} MB for 440 MB of calls"
        # One message larger than the limit: the kernel is stopped, the host is fine.
        r = sb.run("import sandbox_runtime as s\ns.call('sink', (b'y' * (40 * 2**20),), {})")
        assert r.error is not None and "cannot be sent to the host" in str(r.error), r.error
        assert sb.run("print(sink(b'ok'))").stdout == "2\n"


def _session_containers_by_id(container_id: str) -> list[Any]:
    import docker

    client = docker.from_env()
    try:
        return client.containers.list(all=True, filters={"id": container_id})
    finally:
        client.close()


def _session_containers(name: str) -> list[Any]:
    import docker

    client = docker.from_env()
    try:
        return client.containers.list(all=True, filters={"label": f"io.codeact.sandbox.session={name}"})
    finally:
        client.close()


def _gone(name: str, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while _session_containers(name):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


# A thread floods calls to a name that is not registered; another reads the replies, 64 KiB every 2 s.
# Each call is refused at once, and each refusal is a reply the host must hold until the kernel reads it.
UNREAD_FLOOD = r"""
import sandbox_runtime as s, sandbox_wire as w, sandbox_codec as c, os, threading, time
payload = b''.join(bytes(x) for x in c.encode(((), {})))
frame = b''.join(bytes(x) for x in w.frame(w.KIND_CALL, *w.pack_call(1, 'no_such_tool', [payload])))
link = s._state.link
def slow_reader():
    while True:
        os.read(link.fd_in, 65536)
        time.sleep(2)
def flood():
    batch = frame * 1000
    while True:
        os.write(link.fd_out, batch)
threading.Thread(target=slow_reader, daemon=True).start()
threading.Thread(target=flood, daemon=True).start()
time.sleep(%s)
print('the host held everything')
"""


def test_replies_the_kernel_never_reads_cannot_grow_host_memory() -> None:
    """Finding 18.3: refused calls were free and their replies queued without a cap (1.9 GB in 75 s)."""
    from sandbox import DockerSandbox, Limits

    def echo(x: Any) -> Any:
        return x

    limits = Limits(max_payload=4 * 2**20, max_unread_bytes=16 * 2**20)
    with DockerSandbox(functions=[echo], timeout=60, limits=limits) as sb:
        name = sb.name
        sb.run("open('kept.txt', 'w').write('kept')")
        base = _rss()
        peak = [base]
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(0.2):
                peak[0] = max(peak[0], _rss())

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        started = time.monotonic()
        try:
            r = sb.run(UNREAD_FLOOD % 50)
        finally:
            stop.set()
            watcher.join()
        elapsed = time.monotonic() - started
        assert r.error is not None and r.error.type == "ProtocolError", r.error
        assert "unread" in r.error.message and "Limits.max_unread_bytes" in r.error.message, r.error
        assert "the host held everything" not in r.stdout
        assert elapsed < 45, elapsed  # stopped at the cap, long before the code's own 50 s
        growth = peak[0] - base
        assert growth < 100 * 2**20, f"host RSS grew by {growth / 2**20:.0f} MB under a 16 MB cap"
        after = sb.run("print(open('kept.txt').read())")
        assert after.stdout == "kept\n" and after.error is None, after  # a fresh kernel, files kept
    assert _gone(name), "the session left a container behind"


def test_reading_a_byte_now_and_then_is_not_progress() -> None:
    """The write-stall guard measures the backlog going, not any byte read: a few megabytes of replies,
    below the cap, read 64 KiB a second (each read was progress to the old guard) end the run soon after
    the stall limit, not never."""
    from sandbox import DockerSandbox, Limits

    limits = Limits(write_stall=2.0)
    with DockerSandbox(timeout=60, limits=limits) as sb:
        started = time.monotonic()
        r = sb.run(r"""
import sandbox_runtime as s, sandbox_wire as w, sandbox_codec as c, os, threading, time
payload = b''.join(bytes(x) for x in c.encode(((), {})))
frame = b''.join(bytes(x) for x in w.frame(w.KIND_CALL, *w.pack_call(1, 'no_such_tool', [payload])))
link = s._state.link
os.write(link.fd_out, frame * 20000)  # a few megabytes of refusals to read
def trickle():
    while True:
        os.read(link.fd_in, 65536)
        time.sleep(1)
threading.Thread(target=trickle, daemon=True).start()
time.sleep(50)
print('never stopped')
""")
        elapsed = time.monotonic() - started
        assert r.error is not None and r.error.type == "ProtocolError" and "did not read" in r.error.message, r.error
        assert elapsed < 25, elapsed  # 2 s, plus a second per MiB waiting, plus a restart
        assert sb.run("print('usable')").stdout == "usable\n"


def test_calls_between_runs_are_paid_for() -> None:
    """A thread left running after its run keeps calling: no run pays for those calls, so the gap between
    runs has a budget of its own; past it the kernel is stopped and the next run says why."""
    from sandbox import DockerSandbox, Limits

    def echo(x: Any) -> Any:
        return x

    with DockerSandbox(functions=[echo], timeout=20, limits=Limits(max_calls_per_run=2000)) as sb:
        r = sb.run("""
import threading, sandbox_runtime as s
refused = []
def keep_calling():
    while True:
        try:
            s.call('echo', (1,), {})
        except Exception as e:
            refused.append(type(e).__name__)
threading.Thread(target=keep_calling, daemon=True).start()
print('left running')
""")
        assert r.stdout == "left running\n", r
        deadline = time.monotonic() + 30
        while sb._state == "ready" and time.monotonic() < deadline:
            time.sleep(0.1)
        after = sb.run("print(echo('next run'))")
        assert after.stdout == "next run\n", after
        assert after.restarted and any("while no code was running" in n for n in after.notices), after.notices


# --- 18.6: the code cannot stop the supervisor -----------------------------------------------------------------


def test_no_signal_from_the_code_stops_the_supervisor(runtime: str) -> None:
    """Finding 18.6: SIGINT (Python's own handler) ended PID 1, the container and /workspace with it."""
    from sandbox import DockerSandbox

    with DockerSandbox(timeout=20, runtime=runtime) as sb:
        sb.run("open('kept.txt', 'w').write('kept')\nstate = 1")
        container = sb.container.id
        r = sb.run("""
import os, signal, time
sent = []
for sig in sorted(signal.valid_signals()):
    if sig in (signal.SIGKILL, signal.SIGSTOP):
        continue
    try:
        os.kill(1, sig)
        sent.append(int(sig))
    except OSError:
        pass
time.sleep(1)
print(len(sent), os.path.exists('/proc/1'))
""")
        assert r.error is None, r.error
        assert r.stdout.split()[1] == "True" and int(r.stdout.split()[0]) > 30, r.stdout
        after = sb.run("print(open('kept.txt').read())\nprint(state)")
        assert after.error is None and after.stdout == "kept\n1\n", after  # same kernel, same files
        assert not after.restarted and sb.container.id == container
        # Interrupts still reach the kernel: the supervisor relays them (SIGINT to the kernel, not itself).
        timed = sb.run("import time\ntime.sleep(30)", timeout=1)
        assert timed.error is not None and timed.error.type == "TimeoutError" and "kept" in timed.error.message
        assert sb.run("print(state)").stdout == "1\n"


# --- 18.7 and 19.1: a kernel that dies is noticed at once, whatever killed it ----------------------------------


KERNEL_DEATHS = {
    "self-SIGKILL": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "KernelDied", "SIGKILL"),
    "os._exit": ("import os\nos._exit(3)", "KernelDied", "exit code 3"),
    "segfault": ("import ctypes\nctypes.string_at(0)", "KernelDied", "SIGSEGV"),
    "oom": ("x = bytearray(2 * 1024**3)", "MemoryError", "ran out of memory"),
    # A child that holds the kernel's output open: the engine would wait for it before the stream closes.
    "child-holds-its-stream": ("import os, time\nif os.fork() == 0:\n    time.sleep(600)\nos._exit(4)",
                               "KernelDied", "exit code 4"),
}


@pytest.mark.parametrize(("death", "runtime"), [*((d, "runc") for d in sorted(KERNEL_DEATHS)),
                                                  *((d, "runsc") for d in ("child-holds-its-stream", "oom",
                                                                           "self-SIGKILL"))],
                         indirect=["runtime"])
def test_a_dead_kernel_is_reported_at_once_and_the_next_run_is_ready(death: str, runtime: str) -> None:
    """Findings 18.7 and 19.1: a self-SIGKILL came back after 19.8 s (a 2 s timeout, 3 s max_run_time)
    and the next run took 10.3 s, while the host polled the engine's events with ``until`` in the future."""
    from sandbox import DockerSandbox

    code, error_type, cause = KERNEL_DEATHS[death]
    with DockerSandbox(timeout=2, max_run_time=3, memory="256m", runtime=runtime) as sb:
        sb.run("open('kept.txt', 'w').write('kept')")
        started = time.monotonic()
        r = sb.run(code)
        died = time.monotonic() - started
        if runtime == "runsc" and death == "oom":
            # gVisor: the memory limit holds for the whole sandbox, and the host's OOM killer ends it all.
            error_type, cause = "KernelDied", "stopped"
        assert r.error is not None and r.error.type == error_type and cause in r.error.message, r.error
        assert any("fresh kernel" in n for n in r.notices), r.notices
        started = time.monotonic()
        after = sb.run("import os\nprint(os.path.exists('kept.txt'))")
        ready = time.monotonic() - started
        kept = not (runtime == "runsc" and death == "oom")  # a new container has none of the old one's files
        assert after.stdout == f"{kept}\n" and after.restarted, after
        # Generous "did not hang" bounds (measured: about 0.05 s and 0.5 s); the old code took 10-20 s.
        assert died < 3 + 2, f"the death was reported after {died:.1f} s"
        assert ready < 5, f"the next run took {ready:.1f} s"


def test_code_that_kills_its_own_kernel_runs_exactly_once() -> None:
    """Issue 19.4: code that killed its kernel before any message of its run reached the host was taken
    for a kernel that died before the run, and run again on a fresh kernel: its side effects twice."""
    from sandbox import DockerSandbox

    # One line appended, then the kernel killed at once: the kill races the run's first message.
    code = ("import os, signal\n"
            "fd = os.open('/workspace/ran.txt', os.O_WRONLY | os.O_APPEND | os.O_CREAT)\n"
            "os.write(fd, b'ran\\n')\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    with DockerSandbox(timeout=20) as sb:
        for runs in range(1, 9):  # the old code lost the race about once in ten
            r = sb.run(code)
            assert r.error is not None and r.error.type == "KernelDied" and "SIGKILL" in r.error.message, r.error
            assert sb.download("ran.txt") == b"ran\n" * runs, f"run {runs}: the code ran more than once"


# --- 5: malformed messages never raise on the host ------------------------------------------------------------------


MALFORMED = {
    "bad-json-content": """
k = get_ipython().kernel
k.session.send(k.iopub_socket, 'stream', {'name': ['not', 'a', 'str'], 'text': {'x': 1}}, parent=k.get_parent('shell'))
k.session.send(k.iopub_socket, 'error', {'ename': [1], 'evalue': None, 'traceback': 'nope'},
               parent=k.get_parent('shell'))
k.session.send(k.iopub_socket, 'display_data', {'data': {'image/png': 'not base64!!', 'text/html': 7}},
               parent=k.get_parent('shell'))
k.session.send(k.iopub_socket, 'display_data', {'data': [1, 2]}, parent=k.get_parent('shell'))
print('sent')
""",
    "deep-nesting": """
k = get_ipython().kernel
deep = b'[' * 200000 + b']' * 200000
original = k.session.pack
k.session.pack = lambda obj: deep  # every JSON part of the next message: 200,000 levels deep
try:
    k.session.send(k.iopub_socket, 'display_data', {'data': {}}, parent=k.get_parent('shell'))
finally:
    k.session.pack = original
import sandbox_runtime as s, sandbox_wire as w, os
os.write(s._state.link.fd_out, b''.join(bytes(x) for x in w.frame(w.KIND_CALL, *w.pack_call(9, 'echo', [deep]))))
print('sent')
""",
    "oversized-frame": """
import sandbox_runtime as s, os, struct
os.write(s._state.link.fd_out, b'F' + struct.pack('>I', 2**31 - 1) + b'x' * 4096)
""",
    "listing-wrong-shape": """
import sandbox_runtime as s
s.list_files = lambda root='.': '{"not": "a list"}'
print('replaced')
""",
    "call-name-not-a-string": """
import sandbox_runtime as s, sandbox_wire as w, os
fd = s._state.link.fd_out
call = b'\\x00\\x00\\x00\\x07\\x00\\x04\\xff\\xfe\\xfd\\xfcjunk'
os.write(fd, b''.join(bytes(x) for x in w.frame(w.KIND_CALL, call)))
os.write(fd, b''.join(bytes(x) for x in w.frame(w.KIND_ABANDON, b'\\x01')))
print('sent')
""",
    "garbage-on-the-call-link": """
import sandbox_runtime as s, os
os.write(s._state.link.fd_out, os.urandom(4096))
""",
}


@pytest.mark.parametrize(("attack", "runtime"), [*((a, "runc") for a in sorted(MALFORMED)),
                                                   *((a, "runsc") for a in ("garbage-on-the-call-link",
                                                                            "oversized-frame"))],
                         indirect=["runtime"])
def test_malformed_messages_become_errors_not_host_exceptions(attack: str, runtime: str) -> None:
    from sandbox import DockerSandbox

    def echo(*args: Any) -> Any:
        return args

    with DockerSandbox(functions=[echo], timeout=20, runtime=runtime) as sb:
        sb.run("x = 1")
        r = sb.run(MALFORMED[attack], list_files=True)  # never raises
        assert r.files is None or all(isinstance(f.path, str) for f in r.files)
        if attack == "garbage-on-the-call-link":
            # The call stream and the Jupyter stream are two streams; the kernel's word that the code ended
            # (on the call stream) orders them, so the run that wrote the garbage is the one that reports it.
            assert r.error is not None and r.error.type == "ProtocolError", r
            assert "the kernel was stopped" in r.error.message, r.error
        after = sb.run("print('usable')")
        assert after.error is None and after.stdout.endswith("usable\n"), after


def test_garbage_is_judged_in_the_run_that_wrote_it_even_when_the_call_stream_lags(monkeypatch) -> None:
    """The run's reply and its call stream are two streams. A host whose call-stream thread is slow (load)
    must still read the garbage before it takes the run as over: that run reports the ProtocolError, and
    the next one is clean (before the kernel's end mark, the next, innocent run got the blame)."""
    from sandbox import DockerSandbox
    from sandbox.runtime import sandbox_wire as wire

    feed = wire.FrameParser.feed

    def slow_feed(self: Any, data: Any) -> Any:
        if self.kinds is not None and wire.KIND_CALL in self.kinds:
            time.sleep(0.4)  # only the call stream lags; Jupyter's replies come at once
        return feed(self, data)

    monkeypatch.setattr(wire.FrameParser, "feed", slow_feed)

    def echo(*args: Any) -> Any:
        return args

    with DockerSandbox(functions=[echo], timeout=20) as sb:
        assert sb.run("print(echo(1))").stdout == "(1,)\n"
        bad = sb.run("import sandbox_runtime as s, os\nos.write(s._state.link.fd_out, b'\\xff' * 64)\nprint('wrote')")
        assert bad.error is not None and bad.error.type == "ProtocolError", bad
        after = sb.run("print('usable')")
        assert after.error is None and after.stdout == "usable\n", after


def test_a_frame_left_half_written_does_not_swallow_later_calls() -> None:
    """Code writes the start of a call frame (a length it never fills) and stops: the next run's tool
    calls would be read as the rest of that frame and hang; the host gives that run a fresh kernel."""
    from sandbox import DockerSandbox

    def echo(*args: Any) -> Any:
        return args

    with DockerSandbox(functions=[echo], timeout=10) as sb:
        torn = sb.run("import sandbox_runtime as s, os, struct\n"
                      "os.write(s._state.link.fd_out, b'F' + struct.pack('>I', 1000) + b'x' * 10)\nprint('torn')")
        assert torn.stdout == "torn\n", torn
        started = time.monotonic()
        after = sb.run("print(echo('still fine'))")
        assert after.stdout == "('still fine',)\n", after
        assert after.restarted and any("half-written" in n for n in after.notices), after.notices
        assert time.monotonic() - started < 8


# --- 7: approvals: not timed, one at a time, never run after the sandbox gave up -------------------------------------


def test_approvals_do_not_race_the_call_timeout(tmp_path: Path) -> None:
    ran: list[str] = []
    open_now = [0]
    most_open = [0]
    lock = threading.Lock()

    @tool(requires_approval=True)
    def transfer(amount: int) -> str:
        """Move money."""
        ran.append(f"transfer {amount}")
        return f"moved {amount}"

    def slow_human(request: ApprovalRequest) -> bool:
        with lock:
            open_now[0] += 1
            most_open[0] = max(most_open[0], open_now[0])
        time.sleep(1.5)  # longer than the tool's call timeout
        with lock:
            open_now[0] -= 1
        return True

    events, result = run_agent(tmp_path, """
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(3) as ex:
            print(list(ex.map(transfer, [1, 2, 3])))
    """, tools=[transfer], approve=slow_human, sandbox_options={"function_timeout": 1.0})
    obs = [e for e in events if isinstance(e, Observation)][0]
    assert obs.error is None, obs.text
    assert "['moved 1', 'moved 2', 'moved 3']" in obs.text
    assert most_open[0] == 1  # one approval open at a time
    assert sorted(ran) == ["transfer 1", "transfer 2", "transfer 3"]


def test_a_call_given_up_by_the_sandbox_never_runs_after_a_late_yes(tmp_path: Path) -> None:
    ran: list[str] = []
    asked = threading.Event()
    release = threading.Event()

    @tool(requires_approval=True)
    def delete_everything() -> str:
        """Delete all the files."""
        ran.append("deleted")
        return "deleted"

    def human(request: ApprovalRequest) -> bool:
        asked.set()
        release.wait(30)
        return True  # too late: the code was interrupted meanwhile

    model = ScriptedModel([py("delete_everything()"), "stopped"])
    agent = CodeActAgent(model, [delete_everything], approve=human, log=False, output_dir=tmp_path / "out")
    with agent.session() as chat:
        def stop_it() -> None:
            asked.wait(30)
            chat.interrupt()
            time.sleep(1.0)
            release.set()

        threading.Thread(target=stop_it, daemon=True).start()
        result = chat.send("clean up")
    time.sleep(0.5)
    assert ran == []
    assert "KeyboardInterrupt" in (result.steps[0].observation or "")


# --- 8: nothing from a run reaches the terminal raw -------------------------------------------------------------------


HOSTILE_TEXT = "\x1b]0;pwned\x07\x1b[2J\x1b]52;c;ZXZpbA==\x07\x9b31m\u202eevil\u2066"


def _has_raw_controls(text: str) -> list[str]:
    bad = [ch for ch in text if (ord(ch) < 32 and ch not in "\n\t") or 0x7F <= ord(ch) <= 0x9F
           or ch in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"]
    return bad


def test_terminal_output_is_escaped_live_and_on_replay(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from codeact.cli import cli

    replies = [py(f"""
        msg = {HOSTILE_TEXT!r}
        print(msg)
        import sys; print(msg, file=sys.stderr)
        open(msg[:3] + 'file.txt', 'w').write('x')
        echo_tool(msg)
    """), f"The answer is {HOSTILE_TEXT}"]
    (tmp_path / "replies.json").write_text(json.dumps(replies))
    (tmp_path / "tools.py").write_text(
        "def echo_tool(text: str) -> str:\n    'Echo.'\n    return text\n")
    env = {"CODEACT_SCRIPTED_REPLIES": str(tmp_path / "replies.json"), "CODEACT_DB": str(tmp_path / "runs.db"),
           "CODEACT_OUTPUT_DIR": str(tmp_path / "out")}
    runner = CliRunner()
    result = runner.invoke(cli, ["run", "go", "--tools", f"{tmp_path / 'tools.py'}:ALL"], env=env)
    assert result.exit_code == 0, result.output
    assert "pwned" in result.stdout and "\\x1b" in result.stdout  # shown, escaped
    assert _has_raw_controls(result.stdout) == [] and _has_raw_controls(result.stderr) == []
    replay = runner.invoke(cli, ["logs", "show"], env=env)
    assert replay.exit_code == 0, replay.output
    assert "pwned" in replay.stdout and _has_raw_controls(replay.stdout) == []
    # The log itself keeps the raw text.
    with RunLog(tmp_path / "runs.db") as log:
        record = log.last_run()
        assert HOSTILE_TEXT in record.steps[0].stdout


# --- 10: tool defaults stay on the host -------------------------------------------------------------------------------


class ApiClient:
    def __init__(self, key: str) -> None:
        self.key = key

    def __repr__(self) -> str:
        return f"ApiClient(key={self.key!r})"


SECRET = "sk-live-0123456789abcdef"
CLIENT = ApiClient(SECRET)


def test_tool_defaults_never_enter_the_sandbox(tmp_path: Path) -> None:
    @tool
    def fetch(url: str, client=CLIENT, retries: int = 3) -> str:
        """Fetch a URL with the configured client."""
        return f"{url} via {type(client).__name__} x{retries}"

    events, result = run_agent(tmp_path, """
        import inspect, gc
        print(inspect.signature(fetch))
        print(fetch('https://example.com'))
        leaked = [o for o in gc.get_objects() if isinstance(o, str) and 'sk-live' in o]
        import sys
        blob = repr(sys.modules['__main__'].__dict__.get('fetch').__signature__)
        print('LEAK' if leaked or 'sk-live' in blob else 'clean')
    """, tools=[fetch])
    obs = [e for e in events if isinstance(e, Observation)][0].text
    assert "client=..., retries: int = 3" in obs, obs
    assert "https://example.com via ApiClient x3" in obs
    assert obs.rstrip().endswith("clean") and SECRET not in obs


# --- 11: a killed host process leaves nothing running, and the run log says so ----------------------------------------


_HOSTILE_CODE = """```python
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    while True:
        time.sleep(1)
print('partial output before the crash', flush=True)
time.sleep(600)
```"""

_OWNER_SCRIPT = f"""
import sys
from codeact import CodeActAgent, ScriptedModel
agent = CodeActAgent(ScriptedModel([{_HOSTILE_CODE!r}, 'never']), log=sys.argv[1], output_dir=sys.argv[2],
                     execution_timeout=600)
for event in agent.stream('long task'):
    if type(event).__name__ == 'CodeOutput':
        print('READY', event.run_id, flush=True)
"""


def test_killed_owner_leaves_no_container_and_the_run_is_marked_interrupted(tmp_path: Path) -> None:
    import docker

    client = docker.from_env()
    proc = subprocess.Popen([sys.executable, "-c", _OWNER_SCRIPT, str(tmp_path / "runs.db"), str(tmp_path / "out")],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY"), line
        run_id = line.split()[1]
        label = f"io.codeact.sandbox.pid={proc.pid}"
        assert client.containers.list(filters={"label": label}), "the owner has no container"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        proc.stdout.close()
    killed = time.monotonic()
    while client.containers.list(all=True, filters={"label": label}) and time.monotonic() - killed < 10:
        time.sleep(0.1)
    gone_after = time.monotonic() - killed
    assert not client.containers.list(all=True, filters={"label": label}), "the container outlived its owner"
    assert gone_after < 10
    # Some engines keep a container's --mount volumes when they auto-remove it: reap() finds them by their
    # dead owner (each process runs it once per engine, when its first sandbox starts): nothing is left.
    from sandbox import reap

    reap(client)
    assert not client.volumes.list(filters={"label": label}), "the owner's volumes outlived it"
    with RunLog(tmp_path / "runs.db") as log:  # opening the log is the "next start"
        record = log.get_run(run_id)
    assert record.status == "interrupted"
    assert "partial output before the crash" in record.steps[0].observation
    assert "interrupted" in record.steps[0].observation


_STOPPING_OWNER = """
import sys, threading, time
from sandbox import DockerSandbox
sb = DockerSandbox(runtime=sys.argv[1], timeout=20).start()
sb.run("1")
run = threading.Thread(target=sb.run, args=("import os, signal\\nos.kill(1, signal.SIGSTOP)",), daemon=True)
run.start()
state = "?"
for _ in range(15):  # the supervisor's state as its container's /proc says: T once the signal arrived
    ended = not run.is_alive()  # the run came back: the supervisor relayed its end
    got = sb.container.exec_run(["python3", "-c", "print(open('/proc/1/stat').read().split()[2])"], user="1001")
    state = got.output.decode().strip()
    if state == "T" or ended:
        break
    time.sleep(0.2)
print("READY", sb.container.id, state, flush=True)
time.sleep(600)
"""


def test_code_that_stops_its_supervisor_then_loses_its_owner(runtime: str) -> None:
    """runc drops SIGSTOP to the namespace's init: the owner's death still ends the container. gVisor delivers
    it: a stopped supervisor cannot see its stream close, and the container may outlive its owner (measured:
    from a few seconds to more than 20) until reap() (run by the next codeact start on the engine, or
    `codeact sandbox reap`) removes it."""
    import docker

    from sandbox import reap

    client = docker.from_env()
    proc = subprocess.Popen([sys.executable, "-c", _STOPPING_OWNER, runtime], stdout=subprocess.PIPE, text=True,
                            cwd=ROOT)
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY"), line
        container, state = line.split()[1:3]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        proc.stdout.close()
    if runtime == "runc":
        assert state != "T", state
        killed = time.monotonic()
        while client.containers.list(all=True, filters={"id": container}) and time.monotonic() - killed < 10:
            time.sleep(0.2)
        assert not client.containers.list(all=True, filters={"id": container}), "the container outlived its owner"
    else:
        assert state == "T", state
        reap(client)
        assert not client.containers.list(all=True, filters={"id": container}), "reap() left it"


# --- hardening options ------------------------------------------------------------------------------------------------


def test_open_files_limit_and_nosuid_nodev_workspace(runtime: str) -> None:
    from sandbox import DockerSandbox

    with DockerSandbox(timeout=20, runtime=runtime) as sb:
        r = sb.run("""
import resource
print(resource.getrlimit(resource.RLIMIT_NOFILE))
opts = [l.split()[3] for l in open('/proc/mounts') if l.split()[1] in ('/workspace', '/tmp')]
print(all('nosuid' in o and 'nodev' in o for o in opts), len(opts))
files = []
try:
    while True:
        files.append(open('/dev/null'))
except OSError as e:
    error = type(e).__name__
for f in files:
    f.close()
print('stopped at', len(files) < 1024, error)
import os, stat
try:
    os.mknod('/workspace/null', stat.S_IFCHR | 0o666, os.makedev(1, 3))
    print('device made')
except OSError as e:
    print('mknod', type(e).__name__)
""")
        # gVisor's mount table does not list nosuid/nodev for its /tmp and its /workspace (a gofer mount);
        # the code can make no device there on either runtime.
        flags = "True 2" if runtime == "runc" else "False 2"
        assert r.stdout.splitlines() == ["(1024, 1024)", flags, "stopped at True OSError", "mknod PermissionError"], \
            r.stdout


def _engine_has(what: str) -> bool:
    try:
        import docker

        info = docker.from_env(timeout=5).info()
    except Exception:
        return False
    if what == "runsc":
        return "runsc" in (info.get("Runtimes") or {})
    return "userns" in " ".join(info.get("SecurityOptions") or [])


def test_the_code_talks_to_the_kernel_of_its_runtime(runtime: str) -> None:
    """runc: the host's kernel, as every container; runsc: gVisor's own (it answers as Linux 4.4.0), so a
    kernel exploit in the code meets gVisor's sentry, not the host's kernel."""
    from sandbox import DockerSandbox

    with DockerSandbox(runtime=runtime, timeout=30) as sb:
        r = sb.run("import platform; print(platform.release())")
        assert r.error is None, r.error
        host = os.uname().release
        assert (r.stdout.strip() == host) == (runtime == "runc"), (r.stdout, host)
        assert sb.container.attrs["HostConfig"]["Runtime"] == runtime
        if runtime == "runsc":
            # The kernel's socket lives in gVisor's network stack: calls take the exec stream, not tried first.
            assert not sb.linked_directly and sb._kernel._netns is None


@pytest.mark.skipif(not _engine_has("userns"), reason="the engine does not remap user namespaces")
def test_user_namespace_remapping_when_present() -> None:
    from sandbox import DockerSandbox

    with DockerSandbox(timeout=30) as sb:
        r = sb.run("print(open('/proc/self/uid_map').read().split())")
        assert r.error is None and r.stdout.split()[1] != "'0'"
