#!/usr/bin/env python3
"""Benchmark of packages and the lean image (a script, not a test).

Side by side in one run, interleaved so that load on the machine hits both
equally, each figure the median (and p95) over repetitions:

* image size: the image before this change (Debian's python3-pandas /
  -matplotlib / -ipykernel, rebuilt here with the current runtime on the
  Debian-packages base) and the lean image (wheels fetched by the host);
  the full flavour too when it is built;
* cold start, constructor to first result, on both images;
* CPU: a pure-Python loop (the same snippet as sandbox_bench.py) timed inside
  the code, as a ratio to the host's python3, on both images; plus a numpy
  matrix product and a pandas group-by, which show the BLAS each image has;
* installing a compiled package at run time: ``msgpack`` (small) and
  ``scikit-learn`` (large: scipy and more), the first time (an empty host
  cache: resolution and download) and from the cache (a new session);
* a session's start with a pre-materialised package set
  (``packages=["scikit-learn"]``), next to a plain start, and the one-off
  cost of materialising it;
* importing ``scikit-learn`` after a run-time install: the first import, a
  fresh Python process in the sandbox, and a second kernel after
  ``restart()``, without bytecode (as before it was delivered), with the
  bytecode compiled in the background (a set's first session on a host) and
  with it from the host's cache (later sessions), alternated in each round.

    .venv/bin/python benchmarks/packages_bench.py             # about 5 minutes on 2 cores
    .venv/bin/python benchmarks/packages_bench.py --quick     # fewer repetitions
    .venv/bin/python benchmarks/packages_bench.py --before codeact-sandbox:OLDTAG

Writes benchmarks/results/packages_bench.json. Exit 1 when a measurement
could not be taken; missed targets do not change the exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BENCH_LABEL = "io.codeact.benchmark"
CPU_LOOPS = 4_000_000
CPU_SNIPPET = (
    "import time\n"
    "t0 = time.perf_counter()\n"
    "s = 0\n"
    "for i in range({n}):\n"
    "    s += i * i % 7\n"
    "print('ELAPSED', time.perf_counter() - t0, s)\n"
)
NUMPY_SNIPPET = (
    "import time, numpy as np\n"
    "a = np.random.default_rng(0).random((1000, 1000))\n"
    "a @ a\n"
    "t0 = time.perf_counter()\n"
    "for _ in range(5):\n"
    "    a @ a\n"
    "print('ELAPSED', (time.perf_counter() - t0) / 5)\n"
)
PANDAS_SNIPPET = (
    "import time, numpy as np, pandas as pd\n"
    "rng = np.random.default_rng(0)\n"
    "df = pd.DataFrame({'k': rng.integers(0, 1000, 1_000_000), 'a': rng.random(1_000_000)})\n"
    "t0 = time.perf_counter()\n"
    "for _ in range(5):\n"
    "    df.groupby('k')['a'].agg(['mean', 'sum', 'size'])\n"
    "print('ELAPSED', (time.perf_counter() - t0) / 5)\n"
)
#: The image's recipe before this change: Debian's packages on the debootstrap base (kept here to compare).
DEBIAN_DOCKERFILE = """\
ARG BASE
FROM ${BASE}
RUN useradd --uid 1000 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin sandbox \\
 && mkdir -p /workspace /opt/sandbox/runtime && chown 1000:1000 /workspace
COPY runtime/ /opt/sandbox/runtime/
ENV PYTHONPATH=/opt/sandbox/runtime HOME=/tmp IPYTHONDIR=/tmp/.ipython MPLCONFIGDIR=/tmp/matplotlib \\
    SANDBOX_MPL_SEED=/opt/sandbox/mplcache MPLBACKEND=module://matplotlib_inline.backend_inline \\
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 LANG=C.UTF-8
RUN MPLCONFIGDIR=/opt/sandbox/mplcache MPLBACKEND=agg python3 -c "import matplotlib.pyplot" \\
 && python3 -m compileall -q /opt/sandbox/runtime
USER 1000:1000
WORKDIR /workspace
"""


@dataclass
class Row:
    group: str
    name: str
    unit: str
    median: float | None = None
    p95: float | None = None
    n: int = 0
    target: str = ""
    met: bool | None = None
    note: str = ""
    error: str | None = None
    samples: list[float] = field(default_factory=list)


def quantile(values: list[float], q: float) -> float:
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def row(group: str, name: str, unit: str, samples: list[float], *, target_max: float | None = None,
        target: str = "", note: str = "") -> Row:
    r = Row(group, name, unit, n=len(samples), note=note, samples=[round(s, 6) for s in samples], target=target)
    if samples:
        r.median = statistics.median(samples)
        r.p95 = quantile(samples, 0.95)
    if target_max is not None:
        r.target = target or f"<= {target_max:g} {unit}"
        r.met = r.median is not None and r.median <= target_max
    return r


def fmt(v: float | None) -> str:
    if v is None:
        return "-"
    a = abs(v)
    return f"{v:.0f}" if a >= 100 else f"{v:.1f}" if a >= 10 else f"{v:.2f}" if a >= 1 else f"{v:.3f}"


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rows: list[Row] = []
        self.facts: dict[str, Any] = {}

    def add(self, r: Row) -> None:
        self.rows.append(r)
        status = "ERROR " + r.error if r.error else f"median {fmt(r.median)} {r.unit}"
        print(f"  [{r.group}] {r.name}: {status}", flush=True)

    def guarded(self, group: str, name: str, fn: Callable[[], list[Row]]) -> None:
        try:
            for r in fn():
                self.add(r)
        except Exception as exc:  # report and go on
            traceback.print_exc()
            self.add(Row(group, name, "", error=f"{type(exc).__name__}: {exc}"[:400]))


def elapsed(stdout: str) -> float:
    for line in stdout.splitlines():
        if line.startswith("ELAPSED"):
            return float(line.split()[1])
    raise RuntimeError(f"no ELAPSED line in {stdout!r}")


# --------------------------------------------------------------------------- the images


def before_image(client: Any, explicit: str | None) -> str:
    """The pre-change image: --before, or the current runtime on the Debian-packages base, built here once."""
    import docker.errors

    from sandbox.image import runtime_files

    if explicit:
        client.images.get(explicit)
        return explicit
    bases = [img for img in client.images.list(name="codeact-base")
             if "python3-pandas" in (img.attrs.get("Comment") or "")]
    if not bases:
        raise RuntimeError("no Debian-packages base image (codeact-base:* built by the old debian-base.sh) on this "
                           "engine; pass --before IMAGE")
    base = max(bases, key=lambda img: img.attrs.get("Created", ""))
    import hashlib

    h = hashlib.sha256(base.id.encode())
    for p in runtime_files():
        h.update(p.read_bytes())
    tag = f"codeact-bench-debian:{h.hexdigest()[:12]}"
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    with tempfile.TemporaryDirectory() as ctx:
        Path(ctx, "Dockerfile").write_text(DEBIAN_DOCKERFILE)
        Path(ctx, "runtime").mkdir()
        for p in runtime_files():
            shutil.copy(p, Path(ctx, "runtime", p.name))
        print(f"  building the pre-change image {tag} from {base.tags[0]} ...", flush=True)
        for chunk in client.api.build(path=ctx, tag=tag, buildargs={"BASE": base.tags[0]}, rm=True, decode=True,
                                      labels={BENCH_LABEL: "1"}):
            if "error" in chunk:
                raise RuntimeError(chunk["error"])
    return tag


def image_mb(client: Any, tag: str) -> float:
    return client.images.get(tag).attrs["Size"] / 1e6


# --------------------------------------------------------------------------- measurements


def bench_images(b: Bench, client: Any, images: dict[str, str]) -> None:
    def sizes() -> list[Row]:
        from sandbox.image import image_tag

        rows = [Row("image", f"{name}: size ({tag})", "MB", median=image_mb(client, tag), n=1,
                    target="<= 450 MB" if name == "lean" else "",
                    met=(image_mb(client, tag) <= 450) if name == "lean" else None) for name, tag in images.items()]
        full = image_tag("full")
        try:
            rows.append(Row("image", f"full: size ({full})", "MB", median=image_mb(client, full), n=1))
        except Exception:
            rows.append(Row("image", "full: size", "MB", note="not built (codeact image build --flavor full)"))
        return rows

    b.guarded("image", "sizes", sizes)


def bench_cold(b: Bench, images: dict[str, str]) -> None:
    from sandbox import DockerSandbox

    def cold() -> list[Row]:
        samples: dict[str, list[float]] = {name: [] for name in images}
        for tag in images.values():  # warm-up: page cache, imports
            with DockerSandbox(image=tag) as sb:
                sb.run("1")
        for _ in range(b.args.reps):
            for name, tag in images.items():
                t0 = time.perf_counter()
                with DockerSandbox(image=tag) as sb:
                    sb.run("1")
                    samples[name].append(time.perf_counter() - t0)
        rows = [row("cold", f"{name}: constructor -> first result", "s", s) for name, s in samples.items()]
        if "before" in samples and "lean" in samples:
            ratio = statistics.median(samples["lean"]) / statistics.median(samples["before"])
            rows.append(Row("cold", "lean / before", "x", median=ratio, n=1, target="<= 1.0 x (no worse)",
                            met=ratio <= 1.05, note="within 5% counts as no worse: the machine is shared"))
        return rows

    b.guarded("cold", "cold start", cold)


def bench_cpu(b: Bench, images: dict[str, str]) -> None:
    from sandbox import DockerSandbox

    def cpu() -> list[Row]:
        code = CPU_SNIPPET.format(n=CPU_LOOPS)
        host = []
        for _ in range(b.args.reps):
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            host.append(elapsed(out))
        host_median = statistics.median(host)
        rows = [row("cpu", f"host {sys.executable}: CPU snippet", "s", host)]
        results: dict[str, dict[str, list[float]]] = {}
        sessions = {name: DockerSandbox(image=tag, timeout=300) for name, tag in images.items()}
        try:
            for sb in sessions.values():
                sb.start()
                sb.run(NUMPY_SNIPPET)  # warm-up
            for _ in range(b.args.reps):
                for name, sb in sessions.items():
                    for what, snippet in (("loop", code), ("numpy", NUMPY_SNIPPET), ("pandas", PANDAS_SNIPPET)):
                        r = sb.run(snippet)
                        if r.error:
                            raise RuntimeError(f"{name} {what}: {r.error}")
                        results.setdefault(name, {}).setdefault(what, []).append(elapsed(r.stdout))
        finally:
            for sb in sessions.values():
                sb.close()
        for name, by in results.items():
            rows.append(row("cpu", f"{name}: CPU snippet ({CPU_LOOPS:,} loop iterations)", "s", by["loop"]))
            ratio = statistics.median(by["loop"]) / host_median
            rows.append(Row("cpu", f"{name}: CPU ratio to host python3", "x", median=ratio, n=1, target="<= 1.1 x",
                            met=ratio <= 1.1))
            rows.append(row("cpu", f"{name}: numpy 1000x1000 matmul", "s", by["numpy"]))
            rows.append(row("cpu", f"{name}: pandas group-by of 1M rows", "s", by["pandas"]))
        if "before" in results and "lean" in results:
            for what in ("loop", "numpy", "pandas"):
                ratio = statistics.median(results["lean"][what]) / statistics.median(results["before"][what])
                rows.append(Row("cpu", f"lean / before: {what}", "x", median=ratio, n=1,
                                target="<= 1.0 x (no worse)" if what == "loop" else "",
                                met=(ratio <= 1.05) if what == "loop" else None))
        return rows

    b.guarded("cpu", "cpu", cpu)


def bench_install(b: Bench, image: str) -> None:
    from sandbox import DockerSandbox
    from sandbox.packages import PackagePolicy

    def one(policy: PackagePolicy, package: str) -> tuple[float, float, str]:
        """(wall seconds of the install cell, host-side seconds, result line)."""
        with DockerSandbox(image=image, package_policy=policy, timeout=600) as sb:
            sb.run("1")
            t0 = time.perf_counter()
            r = sb.run(f"install({package!r})")
            wall = time.perf_counter() - t0
            if r.error:
                raise RuntimeError(f"install({package!r}): {r.error}")
            return wall, sb.packages.records[-1].seconds, r.stdout.strip().splitlines()[0]

    def install() -> list[Row]:
        rows = []
        for package, reps in (("msgpack", b.args.reps), ("scikit-learn", max(3, b.args.reps // 2))):
            cache = tempfile.mkdtemp(prefix="codeact-bench-cache-")
            try:
                policy = PackagePolicy(cache_dir=cache)
                wall, _, line = one(policy, package)
                rows.append(row("install", f"{package}: first time (empty host cache)", "s", [wall], note=line))
                walls = [one(policy, package)[0] for _ in range(reps)]
                rows.append(row("install", f"{package}: from the host's cache (new session)", "s", walls,
                                target_max=1.0 if package == "msgpack" else None,
                                target="<= 1 s" if package == "msgpack" else ""))
            finally:
                shutil.rmtree(cache, ignore_errors=True)
        return rows

    b.guarded("install", "install", install)


def bench_materialised(b: Bench, image: str) -> None:
    from sandbox import DockerSandbox
    from sandbox.packages import PackagePolicy

    def materialised() -> list[Row]:
        cache = tempfile.mkdtemp(prefix="codeact-bench-cache-")
        volumes: set[str] = set()
        try:
            policy = PackagePolicy(cache_dir=cache)
            t0 = time.perf_counter()
            with DockerSandbox(image=image, packages=["scikit-learn"], package_policy=policy) as sb:
                first = time.perf_counter() - t0
                volumes.add(sb._kernel.packages.backend.env_volume)
            # The volume is content-addressed: drop it to time a fill from the (now warm) wheel cache too.
            from sandbox.container import docker_client

            client = docker_client()
            for v in volumes:
                client.volumes.get(v).remove(force=True)
            shutil.rmtree(Path(cache, "docker-envs"), ignore_errors=True)
            t0 = time.perf_counter()
            with DockerSandbox(image=image, packages=["scikit-learn"], package_policy=policy) as sb:
                fill = time.perf_counter() - t0
            plain, with_set = [], []
            for _ in range(b.args.reps):
                t0 = time.perf_counter()
                with DockerSandbox(image=image) as sb:
                    sb.run("1")
                    plain.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                with DockerSandbox(image=image, packages=["scikit-learn"], package_policy=policy) as sb:
                    sb.run("1")
                    with_set.append(time.perf_counter() - t0)
                    assert sb.packages.records[0].downloaded == 0
            imp = []
            with DockerSandbox(image=image, packages=["scikit-learn"], package_policy=policy) as sb:
                for _ in range(3):
                    sb.restart()
                    r = sb.run("import time; t = time.perf_counter(); import sklearn.linear_model\n"
                               "print('ELAPSED', time.perf_counter() - t)")
                    imp.append(elapsed(r.stdout))
            return [
                row("materialised", "packages=['scikit-learn']: first session (resolve, download, fill volume)",
                    "s", [first]),
                row("materialised", "first session with the wheels cached (fill volume, compile)", "s", [fill]),
                row("materialised", "plain session: constructor -> first result", "s", plain),
                row("materialised", "session with the materialised set: constructor -> first result", "s", with_set,
                    note="no install: the shared read-only volume is mounted"),
                row("materialised", "import sklearn.linear_model in it (fresh kernel)", "s", imp),
            ]
        finally:
            from sandbox.container import docker_client

            client = docker_client()
            for v in volumes:
                with contextlib.suppress(Exception):
                    client.volumes.get(v).remove(force=True)
            shutil.rmtree(cache, ignore_errors=True)

    b.guarded("materialised", "materialised", materialised)


SKLEARN_IMPORT = (
    "import time\n"
    "t0 = time.perf_counter()\n"
    "import pandas, sklearn.linear_model._logistic\n"
    "print('ELAPSED', time.perf_counter() - t0)\n"
)
#: A new Python process, as joblib's workers and multiprocessing start them (with the kernel's path).
SKLEARN_SUBPROCESS = (
    "import os, subprocess, sys, time\n"
    "t0 = time.perf_counter()\n"
    "subprocess.run([sys.executable, '-c', 'import pandas, sklearn.linear_model._logistic'], check=True,\n"
    "               env={**os.environ, 'PYTHONPATH': os.pathsep.join(p for p in sys.path if p)})\n"
    "print('ELAPSED', time.perf_counter() - t0)\n"
)


def bench_bytecode(b: Bench, image: str) -> None:
    from sandbox import DockerSandbox
    from sandbox.packages import PackagePolicy

    def session(policy: PackagePolicy, bytecode: bool) -> dict[str, float]:
        with DockerSandbox(image=image, package_policy=policy, timeout=600) as sb:
            sb.run("1")
            backend = sb._kernel.packages.backend
            backend.bytecode = bytecode  # off: delivered as before, sources only
            t0 = time.perf_counter()
            r = sb.run("install('scikit-learn', quiet=True)")
            got = {"install": time.perf_counter() - t0}
            if r.error:
                raise RuntimeError(f"install: {r.error}")
            got["first"] = elapsed(sb.run(SKLEARN_IMPORT).stdout)
            t0 = time.perf_counter()
            if not backend.settle(900):
                raise RuntimeError("the bytecode did not arrive in 15 minutes")
            got["landed"] = got["install"] + got["first"] + time.perf_counter() - t0
            got["subprocess"] = elapsed(sb.run(SKLEARN_SUBPROCESS).stdout)
            sb.restart()
            got["second"] = elapsed(sb.run(SKLEARN_IMPORT).stdout)
            return got

    def rows() -> list[Row]:
        cache = tempfile.mkdtemp(prefix="codeact-bench-cache-")
        try:
            policy = PackagePolicy(cache_dir=cache)
            session(policy, False)  # warm-up: resolve and download once
            kinds = {"before: no bytecode (sources only)": False,
                     "after: bytecode compiled in the background (the set's first session)": True,
                     "after: bytecode from the host's cache (later sessions)": True}
            samples: dict[str, dict[str, list[float]]] = {k: {} for k in kinds}
            for _ in range(max(3, b.args.reps // 2)):
                for kind, bytecode in kinds.items():
                    if "background" in kind:
                        shutil.rmtree(Path(cache, "bytecode"), ignore_errors=True)
                    for key, value in session(policy, bytecode).items():
                        samples[kind].setdefault(key, []).append(value)
            out = []
            for kind, by in samples.items():
                out += [
                    row("bytecode", f"{kind}: install('scikit-learn') from the host's cache", "s", by["install"]),
                    row("bytecode", f"{kind}: first import of pandas + sklearn, right after it", "s", by["first"]),
                ]
                if "background" in kind:
                    out.append(row("bytecode", f"{kind}: bytecode in the sandbox, since the install started", "s",
                                   by["landed"]))
                later = " (once the bytecode landed)" if "background" in kind else ""
                out += [
                    row("bytecode", f"{kind}: the same import in a new python process{later}", "s",
                        by["subprocess"]),
                    row("bytecode", f"{kind}: the same import in a second kernel (after restart()){later}", "s",
                        by["second"]),
                ]
            return out
        finally:
            shutil.rmtree(cache, ignore_errors=True)

    b.guarded("bytecode", "bytecode", rows)


# --------------------------------------------------------------------------- main


def print_table(rows: list[Row]) -> None:
    print()
    print(f"{'group':<13} {'measurement':<78} {'median':>9} {'p95':>9} {'n':>3}  target / met")
    print("-" * 130)
    for r in rows:
        if r.error:
            print(f"{r.group:<13} {r.name:<78} ERROR {r.error}")
            continue
        met = "" if r.met is None else (" ✔" if r.met else " ✘")
        unit = f" {r.unit}" if r.unit else ""
        print(f"{r.group:<13} {r.name:<78} {fmt(r.median) + unit:>9} {fmt(r.p95):>9} {r.n:>3}  {r.target}{met}"
              + (f"  ({r.note})" if r.note else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--before", help="the pre-change image (default: built from the Debian-packages base)")
    parser.add_argument("--only", default="image,cold,cpu,install,materialised,bytecode")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "packages_bench.json"))
    args = parser.parse_args()
    args.reps = args.reps or (3 if args.quick else 7)
    only = set(args.only.split(","))

    from sandbox.container import docker_client
    from sandbox.image import build_image, image_tag

    client = docker_client()
    b = Bench(args)
    explicit = os.environ.get("CODEACT_SANDBOX_IMAGE")  # an image already built: measure that one
    lean = explicit or image_tag("lean")
    if not explicit:
        build_image(flavor="lean", client=client)
    images = {"lean": lean}
    try:
        images = {"before": before_image(client, args.before), "lean": lean}
    except Exception as exc:
        b.add(Row("image", "before: the pre-change image", "", error=str(exc)))
    b.facts = {"time": _dt.datetime.now().isoformat(timespec="seconds"), "cpus": os.cpu_count(),
               "load": list(os.getloadavg()), "images": images, "python": sys.version.split()[0]}
    print(f"packages_bench: {b.facts}", flush=True)
    if "image" in only:
        bench_images(b, client, images)
    if "cold" in only:
        bench_cold(b, images)
    if "cpu" in only:
        bench_cpu(b, images)
    if "install" in only:
        bench_install(b, lean)
    if "materialised" in only:
        bench_materialised(b, lean)
    if "bytecode" in only:
        bench_bytecode(b, lean)
    b.facts["load_after"] = list(os.getloadavg())
    print_table(b.rows)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"facts": b.facts, "rows": [asdict(r) for r in b.rows]}, indent=2))
    print(f"\nwrote {out}")
    return 1 if any(r.error for r in b.rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
