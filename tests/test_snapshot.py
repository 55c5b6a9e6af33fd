"""Durable sessions (sandbox.snapshot) on the real Docker engine, a second TLS engine, and the local backend.

The first half checks what comes back; the second half plays the attacker:
hostile code in the session tries to harm the host through its snapshot
(pickling that runs code, a manifest that lies, a snapshot bomb, file names
that escape, a crafted snapshot file), and each test then checks the HOST.
"""

from __future__ import annotations

import io
import json
import os
import resource
import tarfile
import time
import warnings
import zipfile
from pathlib import Path

import docker
import pytest

from sandbox import DockerSandbox, Limits, SnapshotError, SnapshotStore
from sandbox import snapshot as snapshot_module
from sandbox.packages import PackagePolicy

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

SESSION = r"""
import numpy as np, pandas as pd, matplotlib
matplotlib.use("agg")
import matplotlib.pyplot as plt, socket, os
install('tabulate', quiet=True)
import tabulate
df = pd.DataFrame({'a': np.arange(1000), 'b': np.linspace(0, 1, 1000), 'c': ['x', 'y'] * 500})
arr = np.arange(12.0).reshape(3, 4)
alias = df
def total(k):
    return int(df.a.sum()) * k + helper()
def helper():
    return 1
class Point:
    def __init__(self, x, y): self.x, self.y = x, y
    def norm2(self): return self.x ** 2 + self.y ** 2 + helper()
    def __eq__(self, other): return (self.x, self.y) == (other.x, other.y)
pt = Point(3, 4)
square = lambda v: v * v
def make_adder(n):
    def add(x): return x + n
    return add
add5 = make_adder(5)
fig, ax = plt.subplots()
ax.plot([1, 2, 3], [4, 5, 6])
ax.set_title('kept')
table = tabulate.tabulate([['a', 1]], tablefmt='plain')
gen = (i for i in range(3))
fh = open('notes.txt', 'w'); fh.write('hello'); fh.flush()
sock = socket.socket()
os.makedirs('data', exist_ok=True)
df.to_csv('data/df.csv', index=False)
os.chdir('data')
"""

CHECK = r"""
import numpy as np, pandas as pd, os
assert df.shape == (1000, 3) and int(df.a.sum()) == 499500 and list(df.c[:2]) == ['x', 'y'] and df.b.iloc[-1] == 1.0
assert alias is df
assert (arr == np.arange(12.0).reshape(3, 4)).all()
assert total(2) == 999000 + 1
assert pt == Point(3, 4) and isinstance(pt, Point) and pt.norm2() == 26
assert square(7) == 49 and add5(1) == 6 and make_adder(2)(2) == 4
assert fig.axes[0].get_title() == 'kept' and list(fig.axes[0].lines[0].get_ydata()) == [4, 5, 6]
import tabulate
assert tabulate.tabulate([['a', 1]], tablefmt='plain') == table
assert os.getcwd() == '/workspace/data' or os.getcwd().endswith('/data')
assert open('../notes.txt').read() == 'hello'
helper = lambda: 100          # the session's functions see the restored namespace
assert total(1) == 499500 + 100
print('all equal')
"""


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> PackagePolicy:
    return PackagePolicy(cache_dir=str(tmp_path_factory.mktemp("package-cache")))


def ok(sb, code: str) -> str:
    r = sb.run(code, timeout=120)
    assert r.error is None, f"{r.error}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def host_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture()
def victim(tmp_path: Path) -> Path:
    """A host file the attacker aims at (made by the test)."""
    target = tmp_path / "victim" / "important.txt"
    target.parent.mkdir()
    target.write_text("original\n")
    return target


def test_a_session_comes_back_equal_and_unsaveable_things_are_reported(tmp_path: Path, policy) -> None:
    store = SnapshotStore(tmp_path / "store")
    with DockerSandbox(package_policy=policy, timeout=120) as sb:
        ok(sb, SESSION)
        snap = sb.snapshot(store=store)
    assert snap.path.parent == store.root and store.ids() == [snap.id]
    unsaved = {v.name: v for v in snap.manifest.unsaved}
    assert set(unsaved) == {"gen", "fh", "sock"}
    assert unsaved["gen"].type == "builtins.generator" and "generator" in unsaved["gen"].reason
    assert "socket" in unsaved["sock"].type and unsaved["sock"].reason
    saved = {v.name: v for v in snap.manifest.saved}
    assert {"df", "arr", "total", "Point", "pt", "square", "add5", "fig", "tabulate", "alias"} <= set(saved)
    assert saved["df"].type == "pandas.DataFrame" and saved["df"].size > 0 and saved["alias"].refs == ("df",)
    assert dict(snap.manifest.files).keys() == {"notes.txt", "data/df.csv"}
    assert snap.packages and any(p.startswith("tabulate==") for p in snap.packages)
    with DockerSandbox.restore(snap, package_policy=policy, timeout=120) as sb:
        assert sb.restored.failed == () and "df" in sb.restored.restored
        assert {n for n, _ in sb.restored.not_saved} == {"gen", "fh", "sock"}
        assert ok(sb, CHECK) == "all equal\n"


def test_a_restored_session_has_the_time_limit_it_was_given(tmp_path: Path) -> None:
    # restore's options are the constructor's: timeout= is the session's limit per run (it once bounded the
    # restore instead, and the session got the default 30 s).
    with DockerSandbox() as sb:
        ok(sb, "x = 1")
        snap = sb.snapshot(store=tmp_path)
    with DockerSandbox.restore(snap, timeout=2, restore_timeout=120) as sb:
        started = time.monotonic()
        r = sb.run("import time\ntime.sleep(8)")
        assert r.error is not None and time.monotonic() - started < 6, r.error
        assert ok(sb, "print(x)") == "1\n"


def test_incremental_save_and_fork_diverge(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "store", keep=3)
    with DockerSandbox() as sb:
        ok(sb, "import numpy as np\nbig = np.ones(2_000_000)\nsmall = [1, 2]\ndef f(): return small[-1]")
        first = sb.snapshot(store=store)
        assert sb.snapshot(since=first) is first  # nothing changed: no new file
        ok(sb, "small.append(3)")
        second = sb.snapshot(since=first, store=store)
        rows = {v.name: v for v in second.manifest.saved}
        assert rows["big"].reused and not rows["small"].reused and second.since == first.id
        assert second.size > 16_000_000  # each file stands alone
    fork = second.fork(store)
    assert fork.parent == second.id and fork.id != second.id
    with DockerSandbox.restore(second) as a, DockerSandbox.restore(fork) as b:
        ok(a, "small.append('a')")
        ok(b, "small.append('b')\nbig[0] = 7")
        assert ok(a, "print(f(), big[0])") == "a 1.0\n"
        assert ok(b, "print(f(), big[0])") == "b 7.0\n"
        again = a.snapshot(since=second, store=store)  # incremental against the snapshot it was restored from
        changed = {v.name for v in again.manifest.saved if not v.reused}
        assert "small" in changed and "big" not in changed  # (a restored function may pickle anew once)
    assert len(store.ids()) <= 3  # retention


#: The staging directories left in the sandbox's working directory, once their removal (on a thread) is through.
STAGING_LEFT = ("import glob, time\nfor _ in range(200):\n    left = glob.glob('/workspace/.codeact-snapshot*')\n"
                "    if not left:\n        break\n    time.sleep(0.05)\nprint(left)")


def test_autosave_sees_every_in_place_change_and_keeps_an_unchanged_session(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    store = SnapshotStore(tmp_path / "store")
    with DockerSandbox() as sb:
        ok(sb, "import numpy as np, pandas as pd, itertools\n"
               "arr = np.zeros(3_000_000)\ndf = pd.DataFrame({'a': np.arange(100_000.0), 'b': np.ones(100_000)})\n"
               "class Box:\n    def __init__(self): self.items = {'k': np.zeros(10)}\n"
               "box = Box()\ncounter = itertools.count()\nfh = open('log.txt', 'w')\n"
               "a = [1]\nb = [a]\na.append(b)\nsizes = list(range(20_000))\n"
               "open('mylib.py', 'w').write('class Thing:\\n    kind = 42\\n')\n"
               "import mylib\nthing = mylib.Thing()\nlabel = ''.join(['a', 'b'])")
        first = sb.snapshot(store=store)
        assert {v.name for v in first.manifest.unsaved} == {"fh"}
        ok(sb, "x = 1\ndel x")
        assert sb.snapshot(since=first, store=store) is first  # nothing changed, objects of every kind held
        ok(sb, "label = ''.join(['a', 'b'])")  # an equal value, a new object: it pickles to the same bytes
        assert sb.snapshot(since=first, store=store) is first
        calls: list[str] = []
        real = snapshot_module._call
        monkeypatch.setattr(snapshot_module, "_call", lambda sb, fn, *a: (calls.append(fn), real(sb, fn, *a))[1])
        assert sb.snapshot(since=first, store=store) is first
        assert calls == ["scan"]  # the kernel took that as the same snapshot: the next autosave only scans
        previous = first
        steps = [("arr[1_234_567] = 2.5", "arr"), ("arr[2_999_999] = 1.5", "arr"), ("df.iloc[99_999, 1] = 7.0", "df"),
                 ("box.items['k'][3] = 1.0", "box"), ("next(counter)", "counter"),
                 ("sizes[10_000] = -1", "sizes"), ("a.append(3)", "a")]
        for code, name in steps:  # each in-place write: a new snapshot that pickles that variable again
            ok(sb, code)
            snap = sb.snapshot(since=previous, store=store)
            assert snap is not previous, code
            changed = {v.name for v in snap.manifest.saved if not v.reused}
            assert name in changed and "arr" not in changed - {name} and "df" not in changed - {name}, (code, changed)
            previous = snap
        ok(sb, "a.pop(); a.pop()")  # the cycle is broken: b must not keep the copy of a it was saved with
        # What a dead kernel left of a staging directory it was removing goes with the next save.
        ok(sb, "import os\nos.makedirs('/workspace/.codeact-snapshot.gone-99999-0/x')")
        last = sb.snapshot(since=previous, store=store)
        assert ok(sb, STAGING_LEFT) == "[]\n"
    with DockerSandbox.restore(last) as sb:
        assert ok(sb, "print(arr[1_234_567], arr.sum(), df.iloc[99_999, 1], box.items['k'][3], next(counter), "
                      "sizes[10_000], a, b[0] is a, thing.kind)") == "2.5 4.0 7.0 1.0 1 -1 [1] True 42\n"
        assert ok(sb, STAGING_LEFT) == "[]\n"  # the variables' bytes are removed once loaded


def test_move_from_the_local_engine_to_a_tls_engine(tmp_path: Path) -> None:
    from tests.docker_engines import SecondEngine, can_start_engines

    reason = can_start_engines()
    if reason is not None:
        pytest.skip(reason)
    with DockerSandbox() as sb:
        ok(sb, "import pandas as pd\ndf = pd.DataFrame({'x': range(5)})\nopen('f.txt', 'w').write('moved')")
        snap = sb.snapshot(store=tmp_path)
    engine = SecondEngine()
    try:
        engine.start()
        with DockerSandbox.restore(snap, engine=engine.engine) as sb:
            assert sb.engine == engine.engine
            assert ok(sb, "print(int(df.x.sum()), open('f.txt').read())") == "10 moved\n"
    finally:
        engine.remove()


def _started_at(sb) -> float:
    """When the session's container started (the engine's clock, as a UNIX time)."""
    import datetime

    sb.container.reload()
    started = sb.container.attrs["State"]["StartedAt"]  # e.g. 2026-11-26T04:05:06.123456789Z
    return datetime.datetime.fromisoformat(started[:26].rstrip("Z") + "+00:00").timestamp()


def test_a_pool_restores_into_its_warm_sessions_and_closes_one_that_fails(tmp_path: Path, policy) -> None:
    from sandbox import SandboxPool

    with DockerSandbox(package_policy=policy, timeout=120) as sb:
        ok(sb, "install('tabulate', quiet=True)\nimport tabulate, numpy as np\nx = np.arange(5)\n"
               "def f(): return int(x.sum())\nopen('kept.txt', 'w').write('k')")
        snap = sb.snapshot(store=tmp_path / "store")
        ok(sb, "big = np.ones(8 * 2**20, dtype=np.uint8)")
        big = sb.snapshot(store=tmp_path / "store")
    small_limit = Limits(max_snapshot_bytes=4 * 2**20)
    client = docker.from_env()
    before = {c.name for c in client.containers.list(all=True)}
    with SandboxPool(lambda: DockerSandbox(package_policy=policy, timeout=120, limits=small_limit), size=1) as pool:
        deadline = time.monotonic() + 120
        while pool.ready < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.ready == 1
        asked = time.time()
        with pool.restore(snap) as a, pool.restore(snap.path) as b:  # the second one: started on demand
            assert _started_at(a) < asked - 0.05  # the warm session, not one started for the restore
            assert a.restored.failed == () and {"x", "f", "tabulate"} <= set(a.restored.restored)
            ok(b, "x[0] = 100")  # two independent sessions
            assert ok(a, "print(f(), tabulate.__name__, open('kept.txt').read())") == "10 tabulate k\n"
            assert ok(b, "print(f())") == "110\n"
        # Over the pool's sessions' limit: refused, and the session it took is closed at once (not left to the
        # garbage collector: the error's traceback still holds it), so only the pool's refill is new.
        with pytest.raises(SnapshotError, match="larger than this session's limit") as caught:
            pool.restore(big, wait=120)
        deadline = time.monotonic() + 10
        while len({c.name for c in client.containers.list(all=True)} - before) > 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len({c.name for c in client.containers.list(all=True)} - before) <= 1, caught
    deadline = time.monotonic() + 10
    while {c.name for c in client.containers.list(all=True)} - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert {c.name for c in client.containers.list(all=True)} - before == set()


def test_local_backend_saves_and_restores_and_restricted_refuses(tmp_path: Path) -> None:
    from sandbox import LocalSandbox, RestrictedSandbox

    warnings.simplefilter("ignore")
    with LocalSandbox() as sb:
        ok(sb, "import numpy as np\na = np.arange(3)\ng = lambda: a.sum()\nopen('x.txt', 'w').write('x')")
        snap = sb.snapshot(store=tmp_path)
    with LocalSandbox.restore(snap) as sb:
        assert ok(sb, "print(g(), open('x.txt').read())") == "3 x\n"
    with DockerSandbox.restore(snap) as sb:  # across backends too
        assert ok(sb, "print(g())") == "3\n"
    with RestrictedSandbox() as rs, pytest.raises(SnapshotError, match="restricted backend cannot"):
        rs.snapshot()
    with pytest.raises(SnapshotError, match="restricted backend cannot"):
        RestrictedSandbox.restore(snap)


def test_other_format_versions_are_refused_with_a_clear_message(tmp_path: Path) -> None:
    with DockerSandbox() as sb:
        ok(sb, "x = 1")
        snap = sb.snapshot(store=tmp_path)
    other = tmp_path / "other.snap"
    with zipfile.ZipFile(snap.path) as src, zipfile.ZipFile(other, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "snapshot.json":
                header = json.loads(data)
                header["format"] = 99
                data = json.dumps(header).encode()
            dst.writestr(info.filename, data)
    with pytest.raises(SnapshotError, match="format 99 .* reads formats 1, 2 only"):
        DockerSandbox.restore(other)


# --- the attacker ---------------------------------------------------------------------------------------


def test_pickling_that_runs_code_harms_only_the_sandbox_it_is_restored_into(tmp_path: Path, victim: Path) -> None:
    before = host_files(victim.parent)
    with DockerSandbox() as sb:
        ok(sb, f"""
import os
class Evil:
    def __reduce__(self):
        open('/workspace/ran-at-save', 'w').write('x')          # runs while saving, in this sandbox
        return (os.system, ('echo pwned > /workspace/ran-at-load; echo pwned > {victim}',))
evil = Evil()
""")
        snap = sb.snapshot(store=tmp_path / "store")
        assert ok(sb, "print(os.path.exists('/workspace/ran-at-save'))") == "True\n"
    with DockerSandbox.restore(snap) as sb:
        assert ok(sb, "print(open('/workspace/ran-at-load').read().strip())") == "pwned\n"
    assert host_files(victim.parent) == before


def test_a_lying_manifest_is_refused_and_leaves_nothing(tmp_path: Path, victim: Path) -> None:
    store = tmp_path / "store"
    lies = [
        {"variables": [{"name": "../../victim", "type": "t", "size": 1, "saved": True, "blob": "0" * 64}]},
        {"variables": [{"name": "x", "type": "t", "size": 1, "saved": True, "blob": "../../victim/important.txt"}]},
        {"variables": [{"name": "x", "type": "t", "size": -5, "saved": True, "blob": "0" * 64}]},
        {"variables": [{"name": "x", "type": "t", "size": 1, "saved": True, "blob": "0" * 64, "refs": ["y"]}]},
        {"variables": [{"name": "x", "type": "t", "size": 1, "saved": True, "blob": "0" * 64}]},  # blob never written
        {"variables": [{"name": "x", "type": "t", "size": 1, "saved": True, "blob": "0" * 64, "reused": True}]},
        {"variables": "[" * 100_000},
        [[[[[[[]]]]]]],
    ]
    deep = "[" * 50_000 + "]" * 50_000
    with DockerSandbox() as sb:
        for lie in [*lies, deep]:
            text = json.dumps(lie) if not isinstance(lie, str) else lie
            ok(sb, f"import sandbox_snapshot, json\nsandbox_snapshot.save = lambda spec: {text!r}")
            with pytest.raises(SnapshotError, match="manifest|malformed"):
                sb.snapshot(store=store)
        # A well-formed lie with terminal escapes: kept only escaped.
        ok(sb, "import sandbox_snapshot, json\nsandbox_snapshot.save = lambda spec: json.dumps({'variables': ["
               "{'name': 'x', 'type': '\\x1b]0;owned\\x07\\u202e', 'size': 1, 'saved': False, 'reason': "
               "'\\x1b[31mred'}], 'files': '', 'cwd': '/workspace'})")
        snap = sb.snapshot(store=store)
        text = snap.describe()
        assert "\x1b" not in text and "\u202e" not in text and "\\x1b" in text
    assert [p.name for p in store.iterdir()] == [snap.path.name]  # no half-written files
    assert victim.read_text() == "original\n"


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_a_snapshot_bomb_is_cut_at_the_limit(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with DockerSandbox(limits=Limits(max_snapshot_bytes=40 * 2**20), memory="1g") as sb:
        ok(sb, "import numpy as np\nhuge = np.random.bytes(120 * 2**20)")
        before = _rss_mb()
        with pytest.raises(SnapshotError, match="larger than its limit"):
            sb.snapshot(store=store)
        # The session goes on, and nothing of the bomb stays in the store or in the sandbox's files.
        assert ok(sb, "import os\nprint(len(huge) // 2**20, os.listdir('/workspace'))") == "120 []\n"
    assert _rss_mb() - before < 60
    assert list(store.iterdir()) == []


def test_file_names_that_escape_and_a_crafted_snapshot_file(tmp_path: Path, victim: Path) -> None:
    from sandbox import LocalSandbox

    with DockerSandbox() as sb:
        ok(sb, "import os\nos.symlink('/etc/passwd', 'link')\nopen('ok.txt', 'w').write('fine')\n"
               "open('esc\\x1b]0;owned\\x07.txt', 'w').write('e')\nx = 1")
        snap = sb.snapshot(store=tmp_path / "store")
    kept = dict(snap.manifest.files)
    assert "ok.txt" in kept and "link" not in kept
    assert "\x1b" not in snap.describe()
    # A crafted file: its files entry holds a path that climbs out, an absolute one, a link and a device.
    crafted = tmp_path / "crafted.snap"
    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w") as tar:
        for name in (f"../../../../../..{victim}", str(victim), "../victim/important.txt"):
            info = tarfile.TarInfo(name)
            info.size = 5
            tar.addfile(info, io.BytesIO(b"owned"))
        link = tarfile.TarInfo("sneaky")
        link.type, link.linkname = tarfile.SYMTYPE, str(victim)
        tar.addfile(link)
        after = tarfile.TarInfo("sneaky")
        after.size = 5
        tar.addfile(after, io.BytesIO(b"owned"))
    with zipfile.ZipFile(snap.path) as src, zipfile.ZipFile(crafted, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, evil.getvalue() if info.filename == "workspace.tar" else src.read(info))
    warnings.simplefilter("ignore")
    with LocalSandbox.restore(crafted) as sb:  # the local backend writes files on this host
        assert ok(sb, "print(x)") == "1\n"
    with DockerSandbox.restore(crafted) as sb:
        assert ok(sb, "print(x)") == "1\n"
    assert victim.read_text() == "original\n"


def test_a_hostile_snapshot_restored_on_another_engine_stays_there(tmp_path: Path, victim: Path) -> None:
    from sandbox.container import docker_client
    from tests.docker_engines import SecondEngine, can_start_engines

    reason = can_start_engines()
    if reason is not None:
        pytest.skip(reason)
    with DockerSandbox() as sb:
        ok(sb, f"import os\nclass E:\n    def __reduce__(self):\n        return (os.system, "
               f"('echo x > {victim}; sleep 1000 &',))\ne = E()")
        snap = sb.snapshot(store=tmp_path)
    local = docker_client()
    mine = lambda client: [c for c in client.api.containers(all=True, filters={"label": "io.codeact.sandbox"})  # noqa: E731
                           if c["Labels"].get("io.codeact.sandbox.pid") == str(os.getpid())]
    engine = SecondEngine()
    try:
        engine.start()
        with DockerSandbox.restore(snap, engine=engine.engine) as sb:
            assert mine(local) == [] and len(mine(engine.client())) == 1
        assert victim.read_text() == "original\n"
    finally:
        engine.remove()


def test_a_save_whose_base_is_gone_stands_alone_and_stale_partial_files_are_swept(tmp_path: Path) -> None:
    """`codeact sessions rm` (or pruning) took the snapshot an autosave builds on; a save killed mid-write left
    a partial file: the next save is a whole snapshot again, and the stale partial is removed (a fresh one,
    maybe another process's save in progress, is kept)."""
    from sandbox import LocalSandbox

    store = SnapshotStore(tmp_path / "store")
    warnings.simplefilter("ignore")
    with LocalSandbox() as sb:
        ok(sb, "import numpy as np\na = np.arange(5)\nb = 'kept'")
        first = sb.snapshot(store=store)
        store.delete(first.id)
        stale, fresh = store.root / f".{first.id}.dead.tmp", store.root / ".20990101T000000-aaaaaaaaaaaa.x.tmp"
        stale.write_bytes(b"PK half a zip")
        fresh.write_bytes(b"PK still being written")
        os.utime(stale, (time.time() - 2 * 3600, time.time() - 2 * 3600))
        again = sb.snapshot(since=first, store=store)  # unchanged, but there is nothing left to point at
        assert again is not first and again.since is None and again.path.is_file()
        assert not any(v.reused for v in again.manifest.saved)
        assert not stale.exists() and fresh.exists()
    with LocalSandbox.restore(again) as sb:
        assert ok(sb, "print(a.sum(), b)") == "10 kept\n"
