"""Delta snapshots (an autosave writes only what changed) on the real Docker engine.

A delta holds the variables and files that changed and names its base for
the rest; restore resolves the chain, deleting or pruning a base a delta
still needs holds it instead of removing it, and a crafted chain (a base
that is missing, a cycle, a base of another session, a huge chain) is
refused with a clear message before any sandbox starts, the host checked.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import DockerSandbox, SnapshotError, SnapshotStore
from sandbox._snapshot_io import DockerFiles
from sandbox.snapshot import HELD, MAX_CHAIN, MAX_DELTA_LINKS, Snapshot

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

SESSION = r"""
import numpy as np, os
big = np.arange(2_500_000, dtype='float64')          # 20 MB: what a delta must not copy again
small = {'k': 1}
def f(x):
    return float(big[:10].sum()) + small['k'] * x
os.makedirs('data', exist_ok=True)
open('data/a.txt', 'w').write('first')
"""
CHECK = "print(float(big.sum()), small, f(2), open('data/a.txt').read(), sorted(k for k in globals() if k[:1] == 'v'))"


def ok(sb, code: str) -> str:
    r = sb.run(code, timeout=120)
    assert r.error is None, f"{r.error}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def containers_of_this_process() -> list[dict]:
    from sandbox.container import docker_client

    return [c for c in docker_client().api.containers(all=True, filters={"label": "io.codeact.sandbox"})
            if c["Labels"].get("io.codeact.sandbox.pid") == str(os.getpid())]


def rewrite(src: Path, dst: Path, **header: object) -> Path:
    """A copy of the snapshot file ``src`` whose header has ``header``'s fields (None: removed)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename == "snapshot.json":
                fields = json.loads(data)
                fields.update(header)
                data = json.dumps({k: v for k, v in fields.items() if v is not None}).encode()
            zout.writestr(info.filename, data)
    return dst


def test_a_chain_of_deltas_restores_the_live_session_and_is_compacted(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    store = SnapshotStore(tmp_path / "store")
    with DockerSandbox() as sb:
        ok(sb, SESSION)
        whole = sb.snapshot(store=store)
        assert whole.base is None and whole.size > 20_000_000
        chain = [whole]
        for i in range(MAX_DELTA_LINKS):
            change = f"small['k'] = {i + 2}\nv{i} = [{i}] * 3" + ("\nopen('data/a.txt', 'w').write('second')"
                                                                 if i == 1 else "")
            ok(sb, change)
            snap = sb.snapshot(since=chain[-1], store=store, delta=True)
            assert snap.base == chain[-1].id and snap.depth == i + 1 and snap.lineage == whole.id
            assert snap.size < 1_000_000, snap.size  # the change, not the 20 MB array again
            chain.append(snap)
        live = ok(sb, CHECK)
        # Against an older snapshot than the kernel's last (its fingerprints are of chain[-1]): what pickles
        # to the bytes `whole` holds is still not sent again.
        streamed: list[int] = []
        real_stream = DockerFiles._stream

        def counted(files: DockerFiles, path: str) -> Iterator[bytes]:
            for chunk in real_stream(files, path):
                streamed.append(len(chunk))
                yield chunk

        monkeypatch.setattr(DockerFiles, "_stream", counted)
        older = sb.snapshot(since=whole, store=store, delta=True)
        monkeypatch.undo()
        assert older.base == whole.id and "big" in {v.name for v in older.manifest.saved if v.reused}
        assert older.size < 1_000_000 and sum(streamed) < 1_000_000, (older.size, sum(streamed))
        ok(sb, "v9 = 9")
        compacted = sb.snapshot(since=chain[-1], store=store, delta=True)
        assert compacted.base is None and compacted.depth == 0 and compacted.size > 20_000_000
    assert "'second'" not in live and "second" in live
    with DockerSandbox.restore(chain[-1]) as sb:
        assert ok(sb, CHECK) == live
        assert {"big", "small", "f", "v0", "v1", "v2", "v3"} <= set(sb.restored.restored)
    with zipfile.ZipFile(chain[1].path) as zf:  # files unchanged: the first delta refers to the base's copy
        assert "workspace.tar" not in zf.namelist()


def test_deleting_or_pruning_never_breaks_a_chain_and_a_fork_stands_alone(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "store", keep=2)
    with DockerSandbox() as sb:
        ok(sb, SESSION)
        whole = sb.snapshot(store=store)
        ok(sb, "v1 = 1")
        d1 = sb.snapshot(since=whole, store=store, delta=True)
        ok(sb, "v2 = 2")
        d2 = sb.snapshot(since=d1, store=store, delta=True)  # keep=2 prunes `whole`: d1 and d2 still need it
        live = ok(sb, CHECK)
    assert store.ids() == [d1.id, d2.id]
    assert (store.root / HELD / f"{whole.id}.snap").is_file()
    with pytest.raises(SnapshotError, match="no snapshot"):
        store.get(whole.id)  # hidden: not listed, not restorable by itself
    store.delete(d1.id)  # d2 still needs d1 and whole
    assert store.ids() == [d2.id]
    with DockerSandbox.restore(store.get(d2.id)) as sb:
        assert ok(sb, CHECK) == live
    fork = store.get(d2.id).fork(SnapshotStore(tmp_path / "elsewhere"))
    assert fork.base is None and fork.parent == d2.id
    store.delete(d2.id)  # nothing needs the held ones any more
    assert store.ids() == [] and list((store.root / HELD).iterdir()) == []
    with DockerSandbox.restore(fork) as sb:
        assert ok(sb, CHECK) == live


def test_a_crafted_chain_is_refused_with_a_clear_message_and_starts_nothing(tmp_path: Path) -> None:
    """The attacker crafts delta files: a base that does not exist, a cycle of bases, a base of another session's
    snapshots, a chain longer than any save makes. Each is refused when opened, before a sandbox starts."""
    store = SnapshotStore(tmp_path / "store")
    with DockerSandbox() as sb:
        ok(sb, "x = 1")
        whole = sb.snapshot(store=store)
        ok(sb, "y = 2")
        delta = sb.snapshot(since=whole, store=store, delta=True)
    with DockerSandbox() as sb:
        ok(sb, "x = 1\ny = 2")
        other = sb.snapshot(store=store)  # another session's snapshot, in the same store
    ids = [f"20990101T0000{i:02d}-{i:012x}" for i in range(MAX_CHAIN + 2)]
    root = store.root
    cases = {
        "missing": (rewrite(delta.path, root / f"{ids[0]}.snap", id=ids[0], base=ids[1]), "not in"),
        "other session": (rewrite(delta.path, root / f"{ids[2]}.snap", id=ids[2], base=other.id), "another session"),
    }
    # A cycle: a -> b -> a, both of the delta's lineage.
    rewrite(delta.path, root / f"{ids[3]}.snap", id=ids[3], base=ids[4])
    cases["cycle"] = (rewrite(delta.path, root / f"{ids[4]}.snap", id=ids[4], base=ids[3]), "cycle")
    # A chain of MAX_CHAIN + 1 links ending at the real whole snapshot.
    long_ids = [f"20990102T0000{i % 60:02d}-{i:012x}" for i in range(MAX_CHAIN + 1)]
    for i, snap_id in enumerate(long_ids):
        rewrite(delta.path, root / f"{snap_id}.snap", id=snap_id, base=long_ids[i + 1] if i + 1 < len(long_ids)
                else whole.id)
    cases["huge chain"] = (root / f"{long_ids[0]}.snap", "longer than")
    before = sorted(p.name for p in root.rglob("*"))
    for label, (path, message) in cases.items():
        with pytest.raises(SnapshotError, match=message) as caught:
            Snapshot.open(path)
        assert "\n" not in str(caught.value), label
        with pytest.raises(SnapshotError, match=message):
            DockerSandbox.restore(path)
    assert containers_of_this_process() == []
    assert sorted(p.name for p in root.rglob("*")) == before  # refusing changed nothing in the store
    # One link short of the bound still opens (the bound is on the chain, not on deltas as such).
    assert Snapshot.open(root / f"{long_ids[1]}.snap").depth == MAX_CHAIN


def test_lying_inline_data_in_the_kernels_answer_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    """The kernel may send a small change's bytes in its answer: the attacker sends bytes that are not what their
    name (sha256) says, a name the manifest does not list, data past the bound, or not base64."""
    import base64
    import hashlib

    from sandbox.snapshot import INLINE_BYTES

    store = tmp_path / "store"
    blob = "a" * 64
    good = base64.b64encode(b"x" * 10).decode()
    big = b"y" * (INLINE_BYTES + 1)
    lies = [
        {blob: good},                                                      # bytes that are not their sha256
        {blob: good, "b" * 64: good},                                      # a name the manifest does not list
        {hashlib.sha256(big).hexdigest(): base64.b64encode(big).decode()},  # past the bound
        {blob: "not base64 !!"},
        [1, 2, 3],
    ]
    with DockerSandbox() as sb:
        for inline in lies:
            names = [n for n in inline] if isinstance(inline, dict) else [blob]
            manifest = {"variables": [{"name": f"x{i}", "type": "t", "size": 1, "saved": True, "blob": n,
                                       "bytes": 10} for i, n in enumerate(names[:1])],
                        "files": "", "cwd": "/workspace", "inline": inline}
            ok(sb, f"import sandbox_snapshot\nsandbox_snapshot.save = lambda spec: {json.dumps(manifest)!r}")
            with pytest.raises(SnapshotError, match="inline variable data"):
                sb.snapshot(store=store)
        assert ok(sb, "print('still here')") == "still here\n"
    assert not store.exists() or [p.name for p in store.iterdir()] == []
