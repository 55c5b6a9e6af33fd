"""Podman as an engine: a rootful ``podman system service`` the tests start (``tests/podman_engine.py``).

codeact reaches it as any engine, through its Docker-compatible API: ``codeact
image build`` builds the image there, ``codeact demo`` runs there with
``DOCKER_HOST`` pointing at its socket, a CodeAct chat of two turns talks to
the real ``openai`` client, a session saved there is restored there (into a
``SandboxPool``'s warm session) and on Docker. Hostile code checks the walls
from inside; the host checks where the containers were and that none is left,
also when the owner is killed.

One defence is set differently on Podman, and the tests say so: the
container's RLIMIT_NPROC (``sandbox.container.PODMAN_NPROC``, see there why).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from sandbox.engines import connect, is_podman
from tests.podman_engine import LABEL, PodmanService, RootlessPodmanService
from tests.podman_engine import rootless_podman  # noqa: F401 - the module fixture of the rootless test
from tests.test_cli import PNG_MAGIC, codeact_command

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]


def double(x: int) -> int:
    "Twice x."
    return 2 * x


def code(source: str) -> str:
    return f"```python\n{source}\n```"


def created_on(client: Any, since: float, pid: int) -> list[str]:
    """Names of the sandbox containers process ``pid`` created on ``client``'s engine since ``since``."""
    events = client.api.events(since=int(since) - 1, until=int(time.time()) + 1, decode=True,
                               filters={"type": "container", "event": "create", "label": f"{LABEL}.pid={pid}"})
    try:
        return sorted({(e.get("Actor") or {}).get("Attributes", {}).get("name", "") for e in events})
    finally:
        events.close()


def cli_env(podman: PodmanService, tmp_path: Path) -> dict[str, str]:
    """The environment of a CLI run whose engine is the Podman service (nothing else names an engine)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CODEACT_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY", "CODEACT_SCRIPTED_REPLIES",
                        "CODEACT_ENGINES", "DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")}
    env.update({"DOCKER_HOST": podman.url, "CODEACT_DB": str(tmp_path / "runs.db"),
                "CODEACT_OUTPUT_DIR": str(tmp_path / "out"), "NO_COLOR": "1"})
    return env


@pytest.fixture(scope="module")
def podman_image(podman: PodmanService) -> str:
    """The sandbox image on the Podman engine: built there by the first test, else copied from Docker."""
    from sandbox.image import default_image_tag, ensure_image

    tag = default_image_tag()
    ensure_image(podman.client(), tag, source=connect(None))
    return tag


# --- the image ---------------------------------------------------------------------------------------------


def test_image_build_on_podman(podman: PodmanService, tmp_path: Path) -> None:
    """`codeact image build` with DOCKER_HOST at the Podman socket builds the image with Podman's builder.

    The offline recipe's base (debootstrap + import, a minute and more) is copied from Docker first; the
    build itself (the wheels unpacked into the base, the runtime, the users) is Podman's."""
    from sandbox.image import default_image_tag, ensure_image, offline_base_tag

    client = podman.client()
    assert is_podman(client) and not is_podman(connect(None))
    ensure_image(client, offline_base_tag(), source=connect(None))
    proc = subprocess.run([*codeact_command(), "image", "build", "--variant", "offline", "--quiet"],
                          env=cli_env(podman, tmp_path), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tag = default_image_tag()
    image = client.images.get(tag)
    assert image.labels["io.codeact.variant"] == "offline" and image.labels["io.codeact.recipe"] in tag
    assert image.id != connect(None).images.get(tag).id  # built there, not copied from Docker
    again = subprocess.run([*codeact_command(), "image", "build", "--variant", "offline"],
                           env=cli_env(podman, tmp_path), capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "up to date" in again.stdout, again.stdout + again.stderr


def test_a_session_on_podman_copies_a_missing_image_from_docker(podman: PodmanService) -> None:
    """A Podman service on this machine without the image gets it from this machine's Docker engine
    (``docker save`` streamed into Podman's load) when a session needs it; without either, the error says
    how to build it there."""
    import docker.errors

    from sandbox.container import _check_image
    from sandbox.errors import ImageNotFound
    from sandbox.image import offline_base_tag

    docker_client, client = connect(None), podman.client()
    stand_in = f"codeact-sandbox:copy-test-{os.getpid()}"  # the small base image, under a sandbox tag
    docker_client.images.get(offline_base_tag()).tag(stand_in)
    try:
        _check_image(client, stand_in)
        assert client.images.get(stand_in).id.split(":")[-1][:12] == \
            docker_client.images.get(stand_in).id.split(":")[-1][:12]
        with pytest.raises(ImageNotFound, match=re.escape(f"`DOCKER_HOST={podman.url} codeact image build`")):
            _check_image(client, "codeact-sandbox:nowhere-at-all")
    finally:
        docker_client.images.remove(stand_in)
        with contextlib.suppress(docker.errors.NotFound):
            client.images.remove(stand_in)


# --- the walls ---------------------------------------------------------------------------------------------


def test_only_the_process_limit_and_podmans_own_mounts_are_said_differently(
        podman: PodmanService, podman_image: str) -> None:
    """The container settings codeact sends to Podman and to Docker, side by side: the same, except
    (1) RLIMIT_NPROC, which Podman needs told (see sandbox._podman), (2) /run and /var/tmp mounted read-only
    where Podman would mount writable ones, (3) the in-memory volumes made by name first, their size in
    pages (Podman drops an anonymous volume's options)."""
    from sandbox.container import DockerKernel

    def kernel(client: Any) -> DockerKernel:
        return DockerKernel(client, podman_image, name="codeact-sbx-settings", memory="512m", cpus=1.0, pids=64,
                            nofile=1024, workspace_size="8m", tmp_size="8m", network=False, runtime=None, env={})

    on_docker, on_podman = kernel(connect(None)), kernel(podman.client())
    docker_config, podman_config = on_docker._host_config(), on_podman._host_config()
    try:
        differ = {k for k in docker_config.keys() | podman_config.keys()
                  if docker_config.get(k) != podman_config.get(k)}
        assert differ == {"Ulimits", "Tmpfs", "Mounts"}, differ
        assert podman_config["Ulimits"] == docker_config["Ulimits"] + [{"Name": "nproc", "Soft": 32768, "Hard": 32768}]
        assert not any(u["Name"] == "nproc" for u in docker_config["Ulimits"])  # Docker: the engine's own
        assert podman_config["Tmpfs"] == {**docker_config["Tmpfs"], "/run": "ro,size=64k,nosuid,nodev,noexec",
                                          "/var/tmp": "ro,size=64k,nosuid,nodev,noexec"}
        (workspace,) = docker_config["Mounts"]  # no package volume without packages
        assert workspace["Source"] is None and "size=8m," in workspace["VolumeOptions"]["DriverConfig"]["Options"]["o"]
        (named,) = podman_config["Mounts"]
        assert named["Source"] == on_podman._volumes[0] and named["Target"] == "/workspace"
        options = podman.client().api.inspect_volume(named["Source"])["Options"]
        assert options["type"] == "tmpfs" and options["o"].startswith("nr_blocks=2048,uid=1000,gid=1000,mode=0755")
    finally:
        on_podman.stop()  # removes the volume it made
    assert [v["Name"] for v in podman.client().api.volumes()["Volumes"] or []] == []


HOSTILE = r"""
import errno, json, os, signal, socket, time
facts = {}
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
facts["uid"], facts["caps"], facts["nnp"] = os.getuid(), status["CapEff"].strip(), status["NoNewPrivs"].strip()
limits = {}
for line in open("/proc/self/limits").read().splitlines()[1:]:
    name, soft = line[:26].strip(), line[26:47].strip()
    limits[name] = soft
facts["limits"] = {k: limits[k] for k in ("Max open files", "Max core file size", "Max processes")}
facts["nets"] = sorted(os.listdir("/sys/class/net"))
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    facts["net"] = "reached"
except OSError as e:
    facts["net"] = e.errno
writable = []
for d in ("/", "/etc", "/usr", "/opt/sandbox/runtime", "/run", "/var/tmp", "/tmp", "/workspace", "/dev/shm"):
    try:
        with open(os.path.join(d, "probe"), "w") as f:
            f.write("x")
        os.remove(os.path.join(d, "probe"))
        writable.append(d)
    except OSError:
        pass
facts["writable"] = writable
def fill(d):
    n = 0
    try:
        with open(os.path.join(d, "fill"), "wb") as f:
            while n < 64 << 20:
                f.write(b"\0" * (1 << 20)); f.flush(); n += 1 << 20
    except OSError as e:
        facts.setdefault("full", []).append(e.errno)
    os.remove(os.path.join(d, "fill"))
    return n >> 20
facts["mb"] = {d: fill(d) for d in ("/workspace", "/tmp")}
children = []
try:
    while len(children) < 500:
        pid = os.fork()
        if pid == 0:
            time.sleep(60); os._exit(0)
        children.append(pid)
except OSError as e:
    facts["fork_error"] = e.errno
for pid in children:
    os.kill(pid, signal.SIGKILL); os.waitpid(pid, 0)
facts["forks"] = len(children)
for path in ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"):
    if os.path.exists(path):
        facts["memory"] = int(open(path).read())
facts["double"] = double(21)
print(json.dumps(facts))
"""


def test_hostile_code_meets_the_same_walls_on_podman(podman: PodmanService, podman_image: str) -> None:
    from sandbox import DockerSandbox

    client = podman.client()
    with DockerSandbox(functions=[double], engine=podman.engine, memory="512m", pids=64, workspace_size="8m",
                       tmp_size="8m", timeout=120) as sb:
        r = sb.run(HOSTILE)
        assert r.error is None, r.error
        facts = json.loads(r.stdout)
        assert sb.linked_directly  # root, an engine on this machine: the direct link works on Podman too
        info = client.api.inspect_container(sb._kernel.container_id)
        volumes = list(sb._kernel._volumes)
    assert (facts["uid"], facts["caps"], facts["nnp"]) == (1000, "0000000000000000", "1")
    # The same limits as on Docker, and the process count Podman needs told (Docker: the engine's own).
    assert facts["limits"] == {"Max open files": "1024", "Max core file size": "0", "Max processes": "32768"}
    assert facts["nets"] == ["lo"] and facts["net"] == errno_number("ENETUNREACH")
    assert facts["writable"] == ["/tmp", "/workspace", "/dev/shm"]  # /run and /var/tmp read-only, as on Docker
    # The size caps hold (the kernel keeps a few files of its own in /tmp).
    assert all(6 <= mb <= 8 for mb in facts["mb"].values()) and facts["full"] == [errno_number("ENOSPC")] * 2
    assert facts["fork_error"] == errno_number("EAGAIN") and facts["forks"] < 64  # the cgroup's pids limit
    assert facts["memory"] == 512 * 1024 * 1024 and facts["double"] == 42
    host = info["HostConfig"]
    assert (host["NetworkMode"], host["ReadonlyRootfs"], host["Memory"], host["MemorySwap"], host["PidsLimit"]) == (
        "none", True, 512 * 1024 * 1024, 512 * 1024 * 1024, 64)
    assert "no-new-privileges" in host["SecurityOpt"] and info["Config"]["User"] == "1000:1000"
    # Nothing of the host's: Podman lists the session's named volumes under Binds too, by name, not by path.
    assert {b.split(":")[0] for b in host["Binds"] or []} <= set(volumes)
    assert {m["Type"] for m in info["Mounts"]} == {"volume"}
    # Gone with the session: the container and its named volumes.
    assert podman.sandbox_containers(os.getpid()) == []
    left = {v["Name"] for v in client.api.volumes()["Volumes"] or []}
    assert volumes and not left & set(volumes), left


def errno_number(name: str) -> int:
    import errno

    return int(getattr(errno, name))


# --- the demo, a chat, save and restore, the pool ------------------------------------------------------------


def test_demo_on_podman(podman: PodmanService, podman_image: str, tmp_path: Path) -> None:
    """`codeact demo` with DOCKER_HOST at the Podman socket: the whole demo runs there, nothing on Docker."""
    from codeact.runlog import RunLog

    since = time.time()
    proc = subprocess.Popen([*codeact_command(), "demo"], env=cli_env(podman, tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    assert "✔ success" in out and "Traceback" not in out + err
    pngs = sorted((tmp_path / "out").glob("*/monthly_sales_by_region.png"))
    assert len(pngs) == 1 and pngs[0].read_bytes().startswith(PNG_MAGIC)
    with RunLog(tmp_path / "runs.db") as log:
        (run,) = log.list_runs()
        record = log.get_run(run.id)
    assert (record.status, record.backend, record.answer["fastest_growing_region"]) == ("success", "docker", "West")
    on_podman = created_on(podman.client(), since, proc.pid)
    assert len(on_podman) == 1 and on_podman[0].startswith("codeact-sbx-"), on_podman
    assert created_on(connect(None), since, proc.pid) == []


def test_chat_of_two_turns_on_podman(podman: PodmanService, podman_image: str, openai_server: Any,
                                     tmp_path: Path) -> None:
    """A CodeAct chat through the real openai client: the kernel on Podman keeps its state between turns and
    calls a host tool from code."""
    from codeact import CodeActAgent
    from codeact.models import OpenAIModel

    model = OpenAIModel("test-model", base_url=openai_server.base_url, api_key="test-key", max_retries=0,
                        timeout=30)
    agent = CodeActAgent(model, [double], sandbox_options={"engine": podman.engine}, log=tmp_path / "runs.db",
                         output_dir=tmp_path / "out")
    openai_server.plan_text(code("import socket\nx = double(21)\nprint('x is', x)"))
    openai_server.plan_text("x is 42.")
    openai_server.plan_text(code("print('next', double(x) + 1)"))
    openai_server.plan_text("It is 85.")
    with agent.session() as chat:
        first = chat.send("Double 21 and keep it as x.")
        assert first.answer == "x is 42." and first.status == "success"
        on_podman = podman.sandbox_containers(os.getpid())
        assert len(on_podman) == 1 and on_podman[0]["Labels"][f"{LABEL}.session"] == chat.sandbox.name
        second = chat.send("Now double x and add one.")
        assert second.answer == "It is 85." and second.status == "success"
        assert chat.sandbox.engine == podman.engine
    requests = openai_server.chat_requests
    observations = [m["content"] for m in requests[1].messages + requests[3].messages if m["role"] == "user"]
    assert any("x is 42" in str(o) for o in observations) and any("next 85" in str(o) for o in observations)
    assert len(openai_server.chat_requests) == 4
    assert podman.sandbox_containers(os.getpid()) == []


def test_save_on_podman_restore_into_a_pool_there_and_on_docker(podman: PodmanService, podman_image: str,
                                                                 tmp_path: Path) -> None:
    """A session saved on Podman comes back in a warm session of a SandboxPool on Podman (two sessions, two
    containers, both there) and in a new session on Docker."""
    from sandbox import DockerSandbox, SandboxPool, SnapshotStore

    store = SnapshotStore(tmp_path / "snapshots")
    with DockerSandbox(functions=[double], engine=podman.engine) as sb:
        r = sb.run("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\n"
                   "def total():\n    return int(df.a.sum()) + double(0)\nopen('notes.txt', 'w').write('kept')")
        assert r.error is None, r.error
        snap = sb.snapshot(store=store)
    assert {v.name for v in snap.manifest.variables if v.saved} >= {"df", "total", "pd"}

    with SandboxPool(lambda: DockerSandbox(functions=[double], engine=podman.engine), size=2) as pool:
        deadline = time.monotonic() + 120
        while pool.ready < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pool.ready == 2
        with pool.restore(snap) as restored:
            assert restored.run("print(total(), open('notes.txt').read())").stdout == "6 kept\n"
            with pool.acquire(timeout=120) as other:
                assert other.run("print('total' in globals(), double(4))").stdout == "False 8\n"
                mine = {c["Labels"][f"{LABEL}.session"] for c in podman.sandbox_containers(os.getpid())}
                assert {restored.name, other.name} <= mine and restored.name != other.name
    assert podman.sandbox_containers(os.getpid()) == []

    with DockerSandbox.restore(snap, functions=[double]) as on_docker:  # the engine the docker CLI would use
        assert on_docker.engine != podman.engine
        assert on_docker.run("print(total(), open('notes.txt').read())").stdout == "6 kept\n"


OWNER = """
import sys, time
from sandbox import DockerSandbox
sb = DockerSandbox(engine=sys.argv[1])
sb.start()
sb.run("x = 1")
print("READY", flush=True)
time.sleep(600)
"""


def test_owner_killed_leaves_nothing_on_podman_after_a_reap(podman: PodmanService, podman_image: str) -> None:
    """The container goes by itself when its owner is killed (its stream closes); Podman keeps the session's
    named volumes, labelled with the dead owner, and the next reap removes them."""
    import sys

    from sandbox.container import reap

    repo = Path(__file__).resolve().parents[1]
    owner = subprocess.Popen([sys.executable, "-c", OWNER, podman.url], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)})
    client = podman.client()
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == b"READY"
        assert len(podman.sandbox_containers(owner.pid)) == 1
        owner.kill()
        owner.wait(timeout=10)
        deadline = time.monotonic() + 30
        while podman.sandbox_containers(owner.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert podman.sandbox_containers(owner.pid) == []  # no reaper ran: the supervisor ended it
        left = [v["Name"] for v in client.api.volumes(filters={"label": f"{LABEL}.pid={owner.pid}"})["Volumes"]
                or []]
        assert len(left) == 2, left  # /workspace and the package volume
        reap(client)
        assert client.api.volumes(filters={"label": f"{LABEL}.pid={owner.pid}"})["Volumes"] in (None, [])
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def cgroup_version() -> int:
    return 2 if Path("/sys/fs/cgroup/cgroup.controllers").exists() else 1


def test_a_rootless_engine_that_would_ignore_the_limits_is_refused(rootless_podman: RootlessPodmanService,  # noqa: F811
                                                                   tmp_path: Path) -> None:
    """Rootless Podman on a cgroup v1 host ignores every memory, CPU and process limit, and its Docker-compatible
    answers do not say so (it reports the host's cgroups): a sandbox there would run hostile code unbounded.
    The sandbox, the demo and doctor refuse it by name before anything is put on that engine."""
    from sandbox import DockerSandbox
    from sandbox.errors import BackendUnavailable

    if cgroup_version() != 1:
        pytest.skip("a cgroup v2 host: rootless Podman holds the limits there when the controllers are delegated")
    client = rootless_podman.client()
    assert client.info().get("MemoryLimit") is True  # what the Docker API claims
    with pytest.raises(BackendUnavailable) as refused:
        DockerSandbox(engine=rootless_podman.url)
    message = str(refused.value)
    assert "rootless Podman on a cgroup v1 host ignores every resource limit" in message, message
    assert rootless_podman.url in message and "memory=None and pids=None" in message, message
    env = {k: v for k, v in os.environ.items() if k not in ("CODEACT_ENGINES", "DOCKER_CONTEXT")}
    env.update({"DOCKER_HOST": rootless_podman.url, "CODEACT_DB": str(tmp_path / "runs.db"),
                "CODEACT_OUTPUT_DIR": str(tmp_path / "out"), "NO_COLOR": "1"})
    demo = subprocess.run([*codeact_command(), "demo"], env=env, capture_output=True, text=True, timeout=120)
    assert demo.returncode != 0 and "ignores every resource limit" in demo.stdout + demo.stderr, demo
    assert "Traceback" not in demo.stdout + demo.stderr
    doctor = subprocess.run([*codeact_command(), "doctor"], env=env, capture_output=True, text=True, timeout=120)
    assert "FAIL  resource limits: the engine would ignore them: rootless Podman" in doctor.stdout, doctor.stdout
    # Nothing was put there: no container, no volume, no image copied across.
    assert client.api.containers(all=True) == [] and client.images.list() == []
    assert (client.api.volumes().get("Volumes") or []) == []

