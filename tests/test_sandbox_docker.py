"""Docker-only: the container's limits, faults it must survive, and its lifecycle.

Every test runs against the real engine and the real sandbox image. Limits
are checked twice: by what the sandboxed code experiences, and by what the
engine reports about the container it created.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import subprocess
import time
import warnings
import weakref

import pytest

pytestmark = pytest.mark.docker

MEMORY = "256m"


@pytest.fixture(scope="module")
def client(docker_ready):
    import docker

    c = docker.from_env()
    yield c
    c.close()


@pytest.fixture(scope="module")
def limited(runtime):
    """A session with small limits, shared by the tests that probe them: one on runc, one on gVisor (runsc)."""
    from sandbox import DockerSandbox

    with DockerSandbox(memory=MEMORY, workspace_size="16m", tmp_size="16m", pids=256, cpus=1.0, timeout=20,
                       runtime=runtime) as sb:
        yield sb


def ok(sb, code: str, **kw):
    r = sb.run(code, **kw)
    assert r.error is None, f"{r.error}\n{r.error.traceback if r.error else ''}\nstderr: {r.stderr}"
    return r


def _exists(client, kind: str, name: str) -> bool:
    import docker.errors

    try:
        (client.containers if kind == "container" else client.volumes).get(name)
        return True
    except docker.errors.NotFound:
        return False


def _wait_gone(client, kind: str, name: str, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _exists(client, kind, name):
            return True
        time.sleep(0.1)
    return False


# --- what the container looks like from inside and outside ----------------------------------------


def test_container_host_config_has_the_limits(limited, client, runtime):
    ok(limited, "pass")
    info = client.api.inspect_container(limited.container.id)
    hc = info["HostConfig"]
    assert hc["Runtime"] == runtime
    assert hc["Memory"] == 256 * 1024**2
    assert hc["MemorySwap"] == hc["Memory"]  # no swap on top
    assert hc["NanoCpus"] == 1_000_000_000
    assert hc["PidsLimit"] == 256
    assert hc["ReadonlyRootfs"] is True
    assert hc["NetworkMode"] == "none"
    assert hc["CapDrop"] == ["ALL"] and not hc.get("CapAdd")
    assert "no-new-privileges" in (hc.get("SecurityOpt") or [])
    assert not hc.get("Init")  # the supervisor is PID 1
    assert hc["Privileged"] is False
    assert hc["AutoRemove"] is True  # the engine removes it when it stops
    assert hc["LogConfig"]["Type"] == "none"  # nothing the code prints is written to the host's disk
    assert "size=16m" in hc["Tmpfs"]["/tmp"] and "nosuid" in hc["Tmpfs"]["/tmp"] and "nodev" in hc["Tmpfs"]["/tmp"]
    assert {u["Name"]: u["Hard"] for u in hc["Ulimits"]}["nofile"] == 1024
    assert not hc.get("Binds") and all(m["Type"] == "volume" for m in info["Mounts"])  # nothing of the host
    (workspace,) = [m for m in hc["Mounts"] if m["Target"] == "/workspace"]
    options = workspace["VolumeOptions"]["DriverConfig"]["Options"]
    assert options["type"] == "tmpfs" and "nosuid" in options["o"] and "nodev" in options["o"]
    assert info["Config"]["User"] != "" and not info["Config"]["User"].startswith("0")
    assert "OPENAI_API_KEY" not in " ".join(info["Config"]["Env"] or [])
    labels = info["Config"]["Labels"]
    assert labels["io.codeact.sandbox"] == "1" and labels["io.codeact.sandbox.pid"] == str(os.getpid())


def test_runs_as_non_root(limited):
    r = ok(limited, "import os\nprint(os.getuid(), os.geteuid(), os.getgid())")
    uid, euid, gid = map(int, r.stdout.split())
    assert uid != 0 and euid != 0 and gid != 0


def test_capabilities_dropped_and_no_new_privileges(limited, runtime):
    r = ok(limited, "print(''.join(l for l in open('/proc/self/status') if l.startswith(('Cap', 'NoNewPrivs'))))")
    fields = dict(line.split(":\t") for line in r.stdout.strip().splitlines())
    assert int(fields["CapEff"], 16) == 0
    assert int(fields["CapPrm"], 16) == 0
    assert int(fields["CapBnd"], 16) == 0
    # prctl(PR_GET_NO_NEW_PRIVS) answers on both; gVisor's /proc/self/status has no NoNewPrivs line.
    assert ok(limited, "import ctypes\nprint(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))").stdout == "1\n"
    assert fields.get("NoNewPrivs", "").strip() == {"runc": "1", "runsc": ""}[runtime]


def test_root_filesystem_is_read_only(limited):
    r = ok(
        limited,
        "import errno\nfor path in ['/x', '/usr/x', '/etc/passwd', '/opt/sandbox/runtime/evil.py']:\n"
        "    try:\n        open(path, 'a').close()\n        print(path, 'WRITABLE')\n"
        "    except OSError as e:\n        print(path, errno.errorcode[e.errno])",
    )
    results = dict(line.split() for line in r.stdout.splitlines())
    assert set(results.values()) <= {"EROFS", "EACCES", "EPERM"}, results


def test_network_attempts_fail_fast(limited):
    started = time.monotonic()
    r = ok(
        limited,
        "import socket, time\n"
        "t = time.monotonic()\n"
        "try:\n    socket.create_connection(('1.1.1.1', 80), timeout=5)\n    print('CONNECTED')\n"
        "except OSError as e:\n    print('connect', type(e).__name__, round(time.monotonic() - t, 3))\n"
        "t = time.monotonic()\n"
        "try:\n    socket.getaddrinfo('example.com', 443)\n    print('RESOLVED')\n"
        "except OSError as e:\n    print('dns', type(e).__name__, round(time.monotonic() - t, 3))\n"
        "print([n for _, n in socket.if_nameindex()])",
    )
    lines = r.stdout.splitlines()
    assert lines[0].startswith("connect ") and float(lines[0].split()[-1]) < 2, lines
    assert lines[1].startswith("dns ") and float(lines[1].split()[-1]) < 2, lines
    assert lines[2] == "['lo']"
    assert time.monotonic() - started < 4


def test_workspace_and_tmp_fill_up_with_enospc(limited):
    for path in ("/workspace/fill.bin", "/tmp/fill.bin"):
        r = ok(
            limited,
            f"import os\ntry:\n    with open({path!r}, 'wb') as f:\n        while True:\n"
            "            f.write(b'x' * 2**20)\n            f.flush()\n"
            "except OSError as e:\n    print(e.errno)\n"
            f"print(os.path.getsize({path!r}) <= 17 * 2**20)\nos.remove({path!r})",
        )
        assert r.stdout == f"{errno.ENOSPC}\nTrue\n", (path, r.stdout)
    assert ok(limited, "open('after.txt', 'w').write('fine')\nprint(open('after.txt').read())").stdout == "fine\n"


# --- faults ---------------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("code",
                         ["x = bytearray(2 * 1024**3)", "chunks = []\nwhile True:\n    chunks.append(b'x' * 2**24)"],
                         ids=["bytearray", "list-growth"])
def test_memory_bomb_is_reported_as_oom_and_session_recovers(limited, runtime, code):
    ok(limited, "before_oom = 1\nopen('survives.txt', 'w').write('yes')")
    r = limited.run(code)
    after = limited.run("import os\nprint(os.path.exists('survives.txt'))\nbefore_oom")
    assert r.kernel_lost is not None and after.kernel_lost is None  # lost in the run that used the memory
    assert after.restarted and any("restarted" in n for n in after.notices)
    assert after.error is not None and after.error.type == "NameError"
    if runtime == "runc":
        # The memory cgroup's OOM killer picks the kernel: reported as such, files outlive it.
        assert r.error is not None and r.error.type == "MemoryError"
        assert "ran out of memory" in r.error.message and MEMORY in r.error.message
        assert after.stdout == "True\n"
    else:
        # gVisor: the limit holds for the sandbox as a whole (its kernel's memory is the sentry's), and the
        # host's OOM killer ends the whole sandbox: the container stops, the next run is in a new one.
        assert r.error is not None and r.error.type == "KernelDied" and "stopped" in r.error.message, r.error
        assert any("files from earlier runs are gone" in n for n in after.notices), after.notices
        assert after.stdout == "False\n"


@pytest.mark.timeout(60)
def test_100mb_print_under_a_small_memory_limit(limited):
    r = ok(limited, "print('x' * 10**8)\nprint('done')")
    assert r.truncated and r.stdout.endswith("x\ndone\n") and len(r.stdout) <= limited.output_limit + 200
    assert not r.restarted


@pytest.mark.timeout(120)
def test_fork_bomb_is_contained_and_strays_are_killed(runtime):
    # Default memory: under a much tighter one (256m with 256 pids) the bomb's copies of the
    # kernel thrash the memory cgroup and Docker then takes tens of seconds to kill the
    # container (measured; the session still recovers) — too slow for a test.
    from sandbox import DockerSandbox

    with DockerSandbox(pids=128, timeout=20, runtime=runtime) as sb:
        ok(sb, "import subprocess\nassert subprocess.run(['true']).returncode == 0\nopen('kept.txt', 'w').write('k')")
        started = time.monotonic()
        r = sb.run("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", timeout=2)
        assert time.monotonic() - started < 60
        after = ok(sb, "import os, subprocess\nprint(subprocess.run(['true']).returncode)\n"
                       "print(len([p for p in os.listdir('/proc') if p.isdigit()]))\n"
                       "print(os.path.exists('kept.txt'))")
        returncode, processes, kept = after.stdout.split()
        assert returncode == "0"
        assert int(processes) < 10  # init, the kernel, and nothing left of the bomb
        if runtime == "runc":
            # Interrupted (the kernel kept, strays killed) or restarted (the kernel did not get idle in
            # time); if the bomb's copies of the kernel hit the memory limit first: an OOM kill.
            assert r.error is not None and r.error.type in ("TimeoutError", "MemoryError", "KernelDied"), r.error
            assert r.timed_out or r.error.type != "TimeoutError"
            assert kept == "True"
        else:
            # gVisor (ptrace platform): each sandboxed process is backed by host processes of the sentry,
            # which the pids limit counts; at the limit the sentry cannot go on and the whole sandbox ends.
            # The limit holds for the host; the session goes on in a new container, without its files.
            assert r.error is not None and r.error.type == "KernelDied" and "stopped" in r.error.message, r.error
            assert any("files from earlier runs are gone" in n for n in after.notices), after.notices
            assert kept == "False"


@pytest.mark.timeout(60)
def test_kernel_killed_from_outside_keeps_the_files(limited):
    """The kernel process dies (kill -9 from outside its own code): a fresh kernel, same files."""
    ok(limited, "state = 1\nopen('kept.txt', 'w').write('kept')")
    pid = int(ok(limited, "import os; print(os.getpid())").stdout)
    killed = limited.container.exec_run(["python3", "-c", f"import os; os.kill({pid}, 9)"], user="1000")
    # 137: the killer itself was swept up: when the kernel dies the supervisor kills every other process in the
    # container, and a loaded machine (gVisor most of all) may get there before the killer has exited.
    assert killed.exit_code in (0, 137), killed.output
    r = limited.run("print(open('kept.txt').read())\nstate")
    assert r.restarted and any("restarted" in n for n in r.notices)
    assert r.stdout == "kept\n"
    assert r.error is not None and r.error.type == "NameError"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["kill", "rm -f", "stop"])
def test_container_killed_from_outside(how, client):
    """The whole container goes (docker kill / rm -f / stop): a new one, and the notice says its files are gone.

    The supervisor ignores every signal the code could send it; ``docker stop`` still ends it (SIGTERM is
    ignored, the engine's SIGKILL after the grace period is not)."""
    from sandbox import DockerSandbox

    with DockerSandbox(timeout=20) as sb:
        ok(sb, "state = 1\nopen('kept.txt', 'w').write('kept')")
        old_id = sb.container.id
        old_volumes = _volumes_of(sb.container)
        if how == "kill":
            client.api.kill(old_id)
        elif how == "stop":
            client.api.stop(old_id, timeout=1)
        else:
            client.api.remove_container(old_id, force=True)
        r = sb.run("import os\nprint(os.path.exists('kept.txt'))\nstate")
        assert r.restarted and any("files from earlier runs are gone" in n for n in r.notices), r.notices
        assert r.stdout == "False\n"
        assert r.error is not None and r.error.type == "NameError"
        assert ok(sb, "print(2)").stdout == "2\n"
        assert sb.container.id != old_id  # recreated
    # `docker rm -f` without -v leaves a container's volumes; the session removes its own
    assert all(_wait_gone(client, "volume", v) for v in old_volumes)


# --- lifecycle ------------------------------------------------------------------------------------------


def _volumes_of(container) -> list[str]:
    """The container's volumes: /workspace first, then any other (the session's package volume)."""
    mounts = [m for m in container.attrs["Mounts"] if m["Type"] == "volume"]
    mounts.sort(key=lambda m: m["Destination"] != "/workspace")
    assert mounts and mounts[0]["Destination"] == "/workspace", mounts
    return [m["Name"] for m in mounts]


def test_context_manager_removes_container_and_volume(client):
    from sandbox import DockerSandbox, SandboxClosed

    with DockerSandbox() as sb:
        ok(sb, "print(1)")
        container = sb.container
        volumes = _volumes_of(container)
        assert _exists(client, "container", container.id) and all(_exists(client, "volume", v) for v in volumes)
    assert _wait_gone(client, "container", container.id)
    assert all(_wait_gone(client, "volume", v) for v in volumes)
    sb.close()
    sb.close()  # idempotent
    with pytest.raises(SandboxClosed):
        sb.run("print(1)")


def test_forgotten_session_is_removed_by_its_finalizer(client):
    from sandbox import DockerSandbox

    sb = DockerSandbox().start()
    ok(sb, "x = 1")
    container = sb.container
    volumes = _volumes_of(container)
    ref = weakref.ref(sb)
    del sb
    gc.collect()
    assert ref() is None
    assert _wait_gone(client, "container", container.id)
    assert all(_wait_gone(client, "volume", v) for v in volumes)


def test_reap_removes_containers_whose_process_is_gone(client, docker_ready):
    """What a dead process left on an engine that was down at the time (labels name a dead pid)."""
    from sandbox import reap
    from sandbox.container import LABEL
    from sandbox.image import default_image_tag

    dead = subprocess.Popen(["true"])
    dead.wait()
    labels = {LABEL: "1", f"{LABEL}.host": __import__("socket").gethostname(), f"{LABEL}.pid": str(dead.pid),
              f"{LABEL}.pid-start": "1", f"{LABEL}.session": "codeact-sbx-orphan-test"}
    orphan = client.containers.create(default_image_tag(), ["sleep", "600"], labels=labels, network_mode="none")
    try:
        assert "codeact-sbx-orphan-test" in reap(client)
        assert not _exists(client, "container", orphan.id)
    finally:
        with contextlib.suppress(Exception):
            orphan.remove(force=True)


@pytest.mark.timeout(120)
def test_reap_leaves_live_sessions_alone(limited, client):
    from sandbox import reap

    ok(limited, "pass")
    assert limited.name not in reap(client)
    assert ok(limited, "print('still here')").stdout == "still here\n"


@pytest.mark.timeout(120)
def test_pool_hands_out_warm_fresh_sessions_and_closes_idle_ones(client):
    from sandbox import DockerSandbox, SandboxPool

    pool = SandboxPool(lambda: DockerSandbox(timeout=20), size=2)
    try:
        deadline = time.monotonic() + 60
        while pool.ready < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pool.ready == 2
        t = time.monotonic()
        first = pool.acquire()
        second = pool.acquire()
        acquire_time = time.monotonic() - t
        assert first._state == "ready" and second._state == "ready"  # already started
        assert acquire_time < 1.0, acquire_time  # no container start happened here
        with first, second:
            assert first.name != second.name
            ok(first, "mine = 1")
            r = second.run("mine")
            assert r.error is not None and r.error.type == "NameError"
        deadline = time.monotonic() + 60
        while pool.ready < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        idle = list(pool._ready.queue)
        assert len(idle) == 2
    finally:
        pool.close()
    for sb in idle:
        assert sb.closed
        assert _wait_gone(client, "container", sb.name)


# --- choosing the backend ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["docker", "auto"])
def test_open_sandbox_default_is_docker(name):
    from sandbox import DockerSandbox, open_sandbox

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sb = open_sandbox(name) if name != "docker" else open_sandbox()
    try:
        assert isinstance(sb, DockerSandbox) and sb.backend == "docker"
    finally:
        sb.close()


def test_open_sandbox_fails_closed_without_the_image():
    """No silent fallback to an unisolated kernel: an error that says what to do, and no warning about local."""
    from sandbox import ImageNotFound, open_sandbox

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ImageNotFound, match="codeact image build"):
            open_sandbox("auto", image="codeact-sandbox:no-such-tag")


def test_image_removed_while_the_process_runs_is_a_clear_error(client):
    """An image found for an earlier session and removed since: the same clear error as a missing one
    (not a failed container start), each time until it is back."""
    import uuid

    from sandbox import DockerSandbox, ImageNotFound
    from sandbox.image import default_image_tag

    tag = f"test-gone-{uuid.uuid4().hex[:8]}"
    client.images.get(default_image_tag()).tag("codeact-sandbox", tag)
    try:
        with DockerSandbox(image=f"codeact-sandbox:{tag}") as sb:
            ok(sb, "x = 1")
    finally:
        client.images.remove(f"codeact-sandbox:{tag}")  # the tag only: the image keeps its other tags
    for _ in range(2):
        with pytest.raises(ImageNotFound, match="codeact image build"), \
                DockerSandbox(image=f"codeact-sandbox:{tag}") as sb:
            sb.run("x = 2")


def test_missing_image_is_a_clear_error():
    from sandbox import DockerSandbox, ImageNotFound

    with pytest.raises(ImageNotFound, match="image build"):
        DockerSandbox(image="codeact-sandbox:no-such-tag")
