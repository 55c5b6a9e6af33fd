"""Docker engines: connecting (environment, contexts, TLS), a pool of engines, and sessions on a remote engine.

The remote engine is real: a second dockerd the tests start on TCP with
mutual TLS (``tests/docker_engines.py``). Sessions on it are checked from
the host side: where the containers are, that they go when the session
closes or its owner is killed, what happens when the engine dies.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sandbox.engine_pool import EnginePool
from sandbox.engines import Engine, connect, engine_from_environment, load_engines
from sandbox.image import ensure_image
from sandbox.errors import BackendUnavailable, SandboxError
from tests.docker_engines import SecondEngine, SSHServer, can_start_engines, can_start_sshd
from tests.ci import unavailable

REPO = Path(__file__).resolve().parents[1]
LABEL = "io.codeact.sandbox"


# --- configuration, no engine needed ---------------------------------------------------------------


def test_engines_file_and_inline_json(tmp_path: Path) -> None:
    spec = {"engines": [{"name": "a", "url": "unix:///var/run/docker.sock", "max_sessions": 2},
                        {"url": "tcp://10.0.0.7:2376", "tls_dir": "~/certs", "tls_verify": False}]}
    path = tmp_path / "engines.json"
    path.write_text(json.dumps(spec))
    for source in (str(path), json.dumps(spec), json.dumps(spec["engines"])):
        engines = load_engines(source)
        assert engines == [Engine("a", "unix:///var/run/docker.sock", max_sessions=2),
                           Engine("tcp://10.0.0.7:2376", "tcp://10.0.0.7:2376", "~/certs", False, 16)]


def test_engines_from_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEACT_ENGINES", '[{"name": "x", "url": "tcp://h:2375"}]')
    assert [e.name for e in load_engines()] == ["x"]
    monkeypatch.delenv("CODEACT_ENGINES")
    assert load_engines() == []


@pytest.mark.parametrize("text, says", [
    ("{not json", "not valid JSON"),
    ('{"engines": {"a": 1}}', 'needs a list under "engines"'),
    ('[{"name": "a"}]', 'engines[0] needs a "url" string'),
    ('[{"url": "tcp://h:1", "max_sesions": 3}]', "unknown keys ['max_sesions']"),
    ('[{"url": "tcp://h:1", "max_sessions": 0}]', "max_sessions must be a positive integer"),
    ('[{"url": "tcp://h:1", "max_sessions": "8"}]', "max_sessions must be a positive integer"),
])
def test_bad_engines_files_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(SandboxError, match="engines") as info:
        load_engines(text)
    assert says in str(info.value)


def test_missing_engines_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="cannot read the engines file .*nope.json"):
        load_engines(str(tmp_path / "nope.json"))


def test_engine_from_docker_environment_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://build-box:2376")
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(tmp_path))
    assert engine_from_environment() == Engine("default", "tcp://build-box:2376", tls_dir=str(tmp_path))
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "")
    monkeypatch.delenv("DOCKER_CERT_PATH")
    assert engine_from_environment() == Engine("default", "tcp://build-box:2376", tls_verify=False)


def test_engine_from_the_current_docker_context(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    config = tmp_path / ".docker"
    meta = config / "contexts" / "meta"
    # The CLI's own layout: the context's metadata under the sha256 of its name.
    import hashlib

    folder = meta / hashlib.sha256(b"remote-box").hexdigest()
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({
        "Name": "remote-box", "Metadata": {},
        "Endpoints": {"docker": {"Host": "tcp://remote-box:2376", "SkipTLSVerify": False}}}))
    (config / "config.json").write_text(json.dumps({"currentContext": "remote-box"}))
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    engine = engine_from_environment()
    assert (engine.name, engine.url) == ("context remote-box", "tcp://remote-box:2376")


def test_unreachable_engine_is_named_with_what_to_do() -> None:
    with pytest.raises(BackendUnavailable) as info:
        connect(Engine("gpu-box", "tcp://127.0.0.1:9"), timeout=5)
    message = str(info.value)
    assert "gpu-box (tcp://127.0.0.1:9)" in message and "codeact doctor" in message


def test_missing_tls_files_are_listed(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("x")
    with pytest.raises(BackendUnavailable, match="TLS files missing: .*cert.pem.*key.pem"):
        connect(Engine("tls-box", "tcp://127.0.0.1:9", tls_dir=str(tmp_path)))


def test_a_pool_needs_distinct_engines() -> None:
    with pytest.raises(SandboxError, match="at least one engine"):
        EnginePool([])
    with pytest.raises(SandboxError, match="unique"):
        EnginePool([Engine("a", "tcp://h:1"), Engine("a", "tcp://h:2")])


# --- a second, real engine over TCP with mutual TLS --------------------------------------------------------


@pytest.fixture(scope="module")
def second(docker_ready: None) -> SecondEngine:
    reason = can_start_engines()
    if reason is not None:
        unavailable("the remote-engine tests", reason)
    engine = SecondEngine()
    try:
        engine.start()
        yield engine
        if engine.proc is not None:
            left = engine.client().api.containers(all=True, filters={"label": LABEL})
            assert left == [], f"sandbox containers left on the second engine: {left}"
    finally:
        engine.remove()


def sandbox_containers(client, pid: int | None = None) -> list[dict]:
    found = client.api.containers(all=True, filters={"label": LABEL})
    if pid is not None:
        found = [c for c in found if (c.get("Labels") or {}).get(f"{LABEL}.pid") == str(pid)]
    return found


def wait_until(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def double(x: int) -> int:
    "Twice x."
    return 2 * x


@pytest.mark.docker
def test_session_on_a_tls_engine_despite_a_ca_bundle_in_the_environment(
        second: SecondEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    from sandbox import DockerSandbox

    # A machine-wide bundle without the engine's CA: docker-py would verify against it and fail.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    local = connect(None)
    remote = second.client()
    with DockerSandbox(functions=[double], engine=second.engine) as sb:
        r = sb.run("import socket\nprint(double(21), socket.gethostname() != '')")
        assert (r.error, r.stdout) == (None, "42 True\n")
        assert sb.engine == second.engine
        assert sb.upload(b"a,b\n1,2\n", "t.csv") == "/workspace/t.csv"
        assert sb.run("print(open('t.csv').read().split()[1])").stdout == "1,2\n"
        sb.run("open('out.txt', 'w').write('from the remote engine')")
        assert sb.download("out.txt") == b"from the remote engine"
        mine = sandbox_containers(remote, os.getpid())
        assert [c["Labels"][f"{LABEL}.session"] for c in mine] == [sb.name]
        assert sandbox_containers(local, os.getpid()) == []
    assert wait_until(lambda: sandbox_containers(remote, os.getpid()) == [])


@pytest.mark.docker
def test_remote_session_has_no_bind_mount_and_keeps_every_feature(second: SecondEngine) -> None:
    """Plots, restarts, time limits and the hardened options work the same on the remote engine."""
    from sandbox import DockerSandbox

    remote = second.client()
    with DockerSandbox(functions=[double], engine=second.engine, timeout=20, memory="512m", pids=128) as sb:
        r = sb.run("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [double(1), 4, 9])\nplt.show()")
        assert r.error is None and len(r.images) == 1 and r.images[0].startswith(b"\x89PNG")
        info = remote.api.inspect_container(sb._kernel.container_id)
        host = info["HostConfig"]
        assert host["Binds"] in (None, []) and {m["Type"] for m in info["Mounts"]} == {"volume"}, info["Mounts"]
        assert "/workspace" in {m["Destination"] for m in info["Mounts"]}
        assert (host["NetworkMode"], host["ReadonlyRootfs"], host["CapDrop"], host["Memory"], host["PidsLimit"]) == (
            "none", True, ["ALL"], 512 * 1024 * 1024, 128)
        assert "no-new-privileges" in host["SecurityOpt"] and info["Config"]["User"] == "1000:1000"
        sb.run("x = 41\nopen('kept.txt', 'w').write('k')")
        timed = sb.run("while True: pass", timeout=2)
        assert timed.timed_out and timed.error is not None and timed.error.type == "TimeoutError"
        assert sb.run("print(x + 1)").stdout == "42\n"  # the interrupt kept the kernel
        sb.restart()
        after = sb.run("print('x' in globals(), open('kept.txt').read())")
        assert after.stdout == "False k\n"


@pytest.mark.docker
def test_reap_on_a_named_engine(second: SecondEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`codeact sandbox reap --engine NAME` removes what a dead process left on that engine only."""
    import socket

    from click.testing import CliRunner

    from codeact.cli import cli
    from sandbox.image import default_image_tag

    dead = subprocess.Popen(["true"])
    dead.wait()
    labels = {LABEL: "1", f"{LABEL}.host": socket.gethostname(), f"{LABEL}.pid": str(dead.pid),
              f"{LABEL}.pid-start": "1", f"{LABEL}.session": "codeact-sbx-leftover"}
    remote = second.client()
    ensure_image(remote, default_image_tag())
    leftover = remote.api.create_container(default_image_tag(), ["true"], labels=labels)["Id"]
    try:
        monkeypatch.setenv("CODEACT_ENGINES", json.dumps([{"name": "second", "url": second.url,
                                                           "tls_dir": second.engine.tls_dir}]))
        result = CliRunner().invoke(cli, ["sandbox", "reap", "--engine", "second"])
        assert result.exit_code == 0, result.output
        assert "codeact-sbx-leftover" in result.output
        assert sandbox_containers(remote) == []
    finally:
        with contextlib.suppress(Exception):
            remote.api.remove_container(leftover, force=True)


@pytest.mark.docker
def test_cli_runs_on_the_pool_and_doctor_lists_its_engines(second: SecondEngine, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """With CODEACT_ENGINES naming only the remote engine, `codeact run` runs its code there."""
    from click.testing import CliRunner

    from codeact.cli import cli

    engines = tmp_path / "engines.json"
    engines.write_text(json.dumps({"engines": [{"name": "second", "url": second.url,
                                                "tls_dir": second.engine.tls_dir, "max_sessions": 2}]}))
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([
        "```python\nimport socket\nprint(open('/proc/1/cmdline').read().split('\\0')[-2])\n```",
        "```python\nfinal_answer('done')\n```",
    ]))
    monkeypatch.setenv("CODEACT_ENGINES", str(engines))
    monkeypatch.setenv("CODEACT_SCRIPTED_REPLIES", str(replies))
    remote = second.client()
    seen: list[int] = []
    import threading

    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.append(len({c["Labels"][f"{LABEL}.session"] for c in sandbox_containers(remote, os.getpid())
                             if c["Labels"][f"{LABEL}.session"].startswith("codeact-sbx-")}))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = CliRunner().invoke(cli, ["run", "Where does your code run?", "--json", "--no-log",
                                          "-o", str(tmp_path / "out")])
    finally:
        stop.set()
        watcher.join()
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["answer"] == "done" and "sandbox_init.py" in json.dumps(payload)
    assert max(seen) == 1  # the session's container(s) were on the remote engine
    doctor = CliRunner().invoke(cli, ["doctor"])
    assert "engine second" in doctor.output and second.url in doctor.output and "2/2 sessions free" in doctor.output


@pytest.mark.docker
def test_pool_keeps_warm_sessions_within_the_cap(second: SecondEngine) -> None:
    remote = Engine("second", second.url, tls_dir=second.engine.tls_dir, max_sessions=2, warm=1)
    with EnginePool([remote], sandbox_options={"timeout": 20}) as pool:
        assert wait_until(lambda: pool.status()[0]["warm"] == 1, 60)
        remote_client = second.client()
        warm = {c["Labels"][f"{LABEL}.session"] for c in sandbox_containers(remote_client, os.getpid())}
        a = pool.sandbox(functions=[double], timeout=20)
        with a:
            assert a.name in warm  # the warm session, already started
            assert a.run("print(double(7))").stdout == "14\n"  # functions registered on the warm session
            assert wait_until(lambda: pool.status()[0]["warm"] == 1, 60)  # refilled: 1 in use + 1 warm = the cap
            b = pool.sandbox(functions=[double], timeout=20)
            with b:
                assert pool.status()[0]["sessions"] == 2 and pool.status()[0]["warm"] == 0
                with pytest.raises(BackendUnavailable, match="second: 2/2 sessions"):
                    pool.sandbox(timeout=20)
    assert wait_until(lambda: sandbox_containers(second.client(), os.getpid()) == [], 30)


@pytest.mark.docker
def test_a_certificate_from_another_ca_is_refused(second: SecondEngine, tmp_path: Path) -> None:
    from tests.docker_engines import make_certificates

    make_certificates(tmp_path / "server", tmp_path / "client")
    stranger = Engine("second", second.url, tls_dir=str(tmp_path / "client"))
    with pytest.raises(BackendUnavailable, match=r"second \(tcp://127.0.0.1:\d+\)"):
        connect(stranger, timeout=10)


@pytest.mark.docker
def test_pool_spreads_sessions_and_keeps_caps(second: SecondEngine) -> None:
    local = Engine("local", "unix:///var/run/docker.sock", max_sessions=1)
    remote = Engine(second.engine.name, second.url, tls_dir=second.engine.tls_dir, max_sessions=1)
    with EnginePool([local, remote]) as pool:
        assert [(s["name"], s["healthy"], s["free"]) for s in pool.status()] == [("local", True, 1),
                                                                                   ("second", True, 1)]
        a = pool.sandbox(functions=[double]).start()
        b = pool.sandbox(functions=[double]).start()
        try:
            assert {a.engine.name, b.engine.name} == {"local", "second"}
            assert (a.run("print(double(2))").stdout, b.run("print(double(3))").stdout) == ("4\n", "6\n")
            with pytest.raises(BackendUnavailable, match=r"local: 1/1 sessions; second: 1/1 sessions"):
                pool.sandbox()
            freed = a.engine.name
            a.close()
            c = pool.sandbox(functions=[double])
            with c:
                assert c.engine.name == freed
                assert c.run("print(double(5))").stdout == "10\n"
        finally:
            a.close()
            b.close()
        assert [s["sessions"] for s in pool.status()] == [0, 0]


OWNER = textwrap.dedent("""
    import sys, time
    from sandbox import DockerSandbox
    from sandbox.engines import Engine
    remote = Engine("second", sys.argv[1], tls_dir=sys.argv[2])
    sessions = [DockerSandbox(engine=None).start(), DockerSandbox(engine=remote).start()]
    for sb in sessions:
        assert sb.run("x = 1").error is None
    print("READY", flush=True)
    time.sleep(600)
""")


@pytest.mark.docker
def test_owner_killed_leaves_no_container_on_either_engine(second: SecondEngine) -> None:
    owner = subprocess.Popen([sys.executable, "-c", OWNER, second.url, second.engine.tls_dir],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert owner.stdout.readline().strip() == b"READY", owner.stderr.read().decode()[-2000:]
        local, remote = connect(None), second.client()
        assert len(sandbox_containers(local, owner.pid)) == 1
        assert len(sandbox_containers(remote, owner.pid)) == 1
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        # No reaper runs: the containers stop by themselves when their attach streams close.
        assert wait_until(lambda: sandbox_containers(local, owner.pid) == [], 30)
        assert wait_until(lambda: sandbox_containers(remote, owner.pid) == [], 30)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


# --- an engine over SSH (this machine's engine, through an sshd the tests start) ---------------------------


@pytest.fixture(scope="module")
def sshd(docker_ready: None) -> SSHServer:
    reason = can_start_sshd()
    if reason is not None:
        unavailable("the ssh:// engine tests", reason)
    server = SSHServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


def ssh_engine(server: SSHServer) -> Engine:
    return Engine("over-ssh", f"ssh://{server.host_alias}", ssh_config=server.ssh_config)


def tunnels() -> list[int]:
    """Pids of `ssh -L ...docker.sock:/var/run/docker.sock` tunnels on this machine."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if args and args[0] == b"ssh" and any(a.endswith(b"/docker.sock:/var/run/docker.sock")
                                                             for a in args):
            found.append(int(entry.name))
    return found


@pytest.mark.docker
def test_session_over_ssh(sshd: SSHServer) -> None:
    from sandbox import DockerSandbox

    before = set(tunnels())
    with DockerSandbox(functions=[double], engine=ssh_engine(sshd), timeout=20) as sb:
        r = sb.run("import matplotlib.pyplot as plt\nplt.plot([double(1), 3])\nplt.show()\nprint(double(5))")
        assert (r.error, r.stdout, len(r.images)) == (None, "10\n", 1)
        sb.upload(b"over ssh", "s.txt")
        assert sb.download("s.txt") == b"over ssh"
        tunnel_dir = sb._docker._codeact_tunnel.dir
        assert oct(os.stat(tunnel_dir).st_mode & 0o777) == "0o700"
        assert set(tunnels()) - before, "no ssh tunnel runs"
        assert sb.engine.url == f"ssh://{sshd.host_alias}"
    # Closing the session's client closes its tunnel; its private socket directory goes too.
    del sb
    import gc

    gc.collect()
    assert wait_until(lambda: set(tunnels()) <= before, 10)
    assert not os.path.exists(tunnel_dir)


@pytest.mark.docker
def test_ssh_engine_refusing_the_key_says_why(sshd: SSHServer, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(Path(sshd.ssh_config).read_text().replace(f"{sshd.root}/client_key", str(tmp_path / "nokey")))
    with pytest.raises(BackendUnavailable, match=r"ssh://codeact-test-engine over SSH: .*(Permission denied|denied)"):
        connect(Engine("over-ssh", f"ssh://{sshd.host_alias}", ssh_config=str(config)), timeout=20)


SSH_OWNER = textwrap.dedent("""
    import sys, time
    from sandbox import DockerSandbox
    from sandbox.engines import Engine
    sb = DockerSandbox(engine=Engine("over-ssh", sys.argv[1], ssh_config=sys.argv[2])).start()
    assert sb.run("x = 1").error is None
    print("READY", flush=True)
    time.sleep(600)
""")


@pytest.mark.docker
def test_ssh_owner_killed_leaves_no_container_and_no_tunnel(sshd: SSHServer) -> None:
    before = set(tunnels())
    owner = subprocess.Popen([sys.executable, "-c", SSH_OWNER, f"ssh://{sshd.host_alias}", sshd.ssh_config],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert owner.stdout.readline().strip() == b"READY", owner.stderr.read().decode()[-2000:]
        local = connect(None)
        assert len(sandbox_containers(local, owner.pid)) == 1
        assert set(tunnels()) - before
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        assert wait_until(lambda: set(tunnels()) <= before, 15)
        assert wait_until(lambda: sandbox_containers(local, owner.pid) == [], 30)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


@pytest.mark.docker
def test_engine_dies_mid_session(second: SecondEngine) -> None:
    """The session ends with an error naming the engine; the pool sends new sessions elsewhere."""
    local = Engine("local", "unix:///var/run/docker.sock", max_sessions=2)
    remote = Engine(second.engine.name, second.url, tls_dir=second.engine.tls_dir, max_sessions=8)
    with EnginePool([local, remote], health_interval=3600) as pool:
        sb = pool.sandbox(functions=[double], timeout=60)
        with sb:
            assert sb.engine.name == "second"
            assert sb.run("print(double(4))").stdout == "8\n"
            import threading

            threading.Timer(1.0, second.kill).start()
            started = time.monotonic()
            r = sb.run("import time\nfor _ in range(600): time.sleep(0.1)")
            assert time.monotonic() - started < 30
            assert r.error is not None
            assert f"second ({second.url})" in str(r.error), r.error
            # The next run says where the session was instead of hanging on a dead engine.
            dead = rf"engine second \(tcp://127.0.0.1:{second.port}\) does not answer"
            with pytest.raises(BackendUnavailable, match=dead):
                sb.run("print(1)")
        pool.check()
        status = {s["name"]: s for s in pool.status()}
        assert status["second"]["healthy"] is False and status["second"]["error"]
        assert status["second"]["sessions"] == 0
        with pool.sandbox(functions=[double]) as elsewhere:
            assert elsewhere.engine.name == "local"
            assert elsewhere.run("print(double(6))").stdout == "12\n"
    # Back up, the engine removes what was running when it died.
    second.start()
    assert wait_until(lambda: sandbox_containers(second.client()) == [], 60)
