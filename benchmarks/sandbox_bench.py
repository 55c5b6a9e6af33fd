#!/usr/bin/env python3
"""Performance benchmark of the ``sandbox`` package (a script, not a test).

Measures, side by side in one run, each figure as median and p95 over
repetitions, against a target:

* cold start to first result for the docker, local and restricted backends,
  and ``SandboxPool.acquire()`` from a warm pool; next to the docker figure, in
  the same loop, its floor: a bare container of the same image created, started
  and asked to ``exec python -c pass`` with docker-py (what llm-sandbox does);
* trivial execute round trip (``x = 1``) through the sandbox and through bare
  ``jupyter_client`` against the same kind of kernel (ratio sandbox/bare);
* host-function call round trip (1,000 calls in one cell, per call);
* a CPU-bound pure-Python snippet relative to plain CPython;
* idle memory per docker session;
* 16 concurrent docker sessions each running a small pandas workload;
* a kernel that dies (self-SIGKILL, a segfault in C, an OOM kill): how long
  ``run()`` takes to report it, and the next ``run()`` to finish on a fresh kernel.

Missed targets do not change the exit status; a measurement that could not be
taken does (exit 1). See benchmarks/README.md.

    .venv/bin/python benchmarks/sandbox_bench.py            # full run (~5 minutes)
    .venv/bin/python benchmarks/sandbox_bench.py --quick    # smoke run
    .venv/bin/python benchmarks/sandbox_bench.py --only roundtrip,calls
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GROUPS = ("cold", "pool", "roundtrip", "calls", "cpu", "memory", "concurrent", "recovery", "breakdown")
BENCH_LABEL = "io.codeact.benchmark"

# The CPU-bound snippet: same code everywhere; it times itself so that kernel,
# container and interpreter start-up are not counted. No leading underscores
# and no imports beyond `time`, so RestrictedPython can run it too.
CPU_LOOPS = 4_000_000
CPU_SNIPPET = (
    "import time\n"
    "t0 = time.perf_counter()\n"
    "s = 0\n"
    "for i in range({n}):\n"
    "    s += i * i % 7\n"
    "print('ELAPSED', time.perf_counter() - t0, s)\n"
)

PANDAS_SNIPPET = """\
import numpy as np
import pandas as pd
rng = np.random.default_rng(0)
df = pd.DataFrame({"key": rng.integers(0, 100, 100_000), "a": rng.random(100_000), "b": rng.normal(size=100_000)})
summary = df.groupby("key").agg(a_mean=("a", "mean"), b_sum=("b", "sum"), n=("a", "size"))
print(len(df), summary.shape, round(float(summary["a_mean"].mean()), 3))
"""


# --------------------------------------------------------------------------- results


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
    """Linear-interpolated quantile (numpy's default)."""
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def make_row(group: str, name: str, unit: str, samples: list[float], *, target_max: float | None = None,
             target_text: str = "", note: str = "", scale: float = 1.0, met_on: str = "median") -> Row:
    scaled = [s * scale for s in samples]
    row = Row(group, name, unit, n=len(scaled), note=note, samples=[round(s, 6) for s in scaled])
    if scaled:
        row.median = statistics.median(scaled)
        row.p95 = quantile(scaled, 0.95)
    if target_max is not None:
        row.target = target_text or f"<= {target_max:g} {unit}"
        value = row.median if met_on == "median" else row.p95
        row.met = value is not None and value <= target_max
    elif target_text:
        row.target = target_text
    return row


def error_row(group: str, name: str, unit: str, exc: BaseException, target: str = "") -> Row:
    text = f"{type(exc).__name__}: {exc}".strip()
    return Row(group, name, unit, target=target, met=None if not target else False, error=text[:400])


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rows: list[Row] = []
        self.diagnostics: dict[str, Any] = {}
        self.load: dict[str, Any] = {}

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        status = "ERROR " + row.error if row.error else f"median {fmt(row.median)} {row.unit}, p95 {fmt(row.p95)}"
        print(f"  [{row.group}] {row.name}: {status}", flush=True)
        return row

    def guarded(self, group: str, name: str, unit: str, fn: Callable[[], Row | list[Row]], target: str = "") -> None:
        """Run one measurement; a failure becomes an error row, never an abort."""
        try:
            out = fn()
        except BaseException as exc:  # report and go on
            if isinstance(exc, KeyboardInterrupt):
                raise
            traceback.print_exc()
            self.add(error_row(group, name, unit, exc, target))
            return
        for row in out if isinstance(out, list) else [out]:
            self.add(row)


def fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    if a >= 0.01:
        return f"{v:.3f}"
    return f"{v:.2g}"


def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


# --------------------------------------------------------------------------- machine facts


def machine_facts(client: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "time": _dt.datetime.now().isoformat(timespec="seconds"),
        "host": platform.node(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory_gib": None,
        "host_python": sys.version.split()[0],
        "host_python_build": " ".join(platform.python_build()),
        "host_python_compiler": platform.python_compiler(),
        "host_python_executable": sys.executable,
        "loadavg_start": loadavg(),
    }
    with contextlib.suppress(ValueError, OSError):
        facts["memory_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    try:
        import jupyter_client

        facts["jupyter_client"] = jupyter_client.__version__
    except Exception:
        pass
    if client is not None:
        try:
            v = client.version()
            info = client.info()
            facts["docker"] = v.get("Version")
            facts["docker_api"] = v.get("ApiVersion")
            facts["cgroup"] = f"v{info.get('CgroupVersion', '?')} ({info.get('CgroupDriver', '?')})"
            facts["docker_runtime"] = info.get("DefaultRuntime")
        except Exception as exc:
            facts["docker"] = f"error: {exc}"
        try:
            from sandbox.image import default_image_tag

            tag = default_image_tag()
            facts["image"] = tag
            out = client.containers.run(
                tag, ["python3", "-c", "import sys, platform, ipykernel; "
                      "print(sys.version.split()[0], '|', ' '.join(platform.python_build()), '|', "
                      "platform.python_compiler(), '|', ipykernel.__version__)"],
                network_mode="none", remove=True, labels={BENCH_LABEL: "1"},
            ).decode().strip()
            ver, build, comp, ipk = [p.strip() for p in out.split("|")]
            facts["image_python"], facts["image_python_build"] = ver, build
            facts["image_python_compiler"], facts["image_ipykernel"] = comp, ipk
        except Exception as exc:
            facts["image_python"] = f"error: {exc}"
    return facts


# --------------------------------------------------------------------------- helpers


def docker_client_or_none() -> tuple[Any, str | None]:
    try:
        from sandbox.container import docker_client

        return docker_client(), None
    except Exception as exc:
        return None, str(exc)


def restricted_class() -> Any:
    from sandbox.restricted import RestrictedSandbox  # may not exist yet: the row shows the error

    return RestrictedSandbox


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def check_result(r: Any, what: str) -> Any:
    if getattr(r, "error", None) is not None:
        raise RuntimeError(f"{what}: {r.error}")
    return r


def parse_elapsed(stdout: str) -> float:
    for line in stdout.splitlines():
        if line.startswith("ELAPSED"):
            return float(line.split()[1])
    raise RuntimeError(f"no ELAPSED line in output: {stdout[-300:]!r}")


def trivial(i: int) -> int:
    """A trivial host function."""
    return i


class BareDockerKernel:
    """A plain ipykernel in a container of the sandbox image, same locks as DockerSandbox, no sandbox code."""

    def __init__(self, client: Any, image: str) -> None:
        import secrets

        from jupyter_client.blocking.client import BlockingKernelClient

        self.client = client
        self.name = f"codeact-bench-bare-{uuid.uuid4().hex[:10]}"
        self.dir = Path(tempfile.mkdtemp(prefix="sbx-bench-"))
        self.container = None
        self.kc: Any = None
        uid = os.getuid() if os.getuid() != 0 else 1000
        if os.getuid() == 0:
            os.chown(self.dir, uid, uid)
        ports = {"shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5}
        key = secrets.token_hex(16)
        info = {"transport": "ipc", "ip": "/run/sandbox/k", **ports, "key": key,
                "signature_scheme": "hmac-sha256", "kernel_name": "python3"}
        conn = self.dir / "kernel.json"
        conn.write_text(json.dumps(info))
        if os.getuid() == 0:
            os.chown(conn, uid, uid)
        try:
            from docker.types import Mount

            self.container = client.containers.run(
                image, ["python3", "-m", "ipykernel_launcher", "-f", "/run/sandbox/kernel.json"],
                name=self.name, detach=True, labels={BENCH_LABEL: "1"}, user=f"{uid}:{uid}",
                network_mode="none", read_only=True, tmpfs={"/tmp": "size=256m,mode=1777"},
                mounts=[Mount("/run/sandbox", str(self.dir), type="bind")],
                mem_limit="1g", memswap_limit="1g", nano_cpus=int(1e9), pids_limit=256,
                cap_drop=["ALL"], security_opt=["no-new-privileges"], init=True,
            )
            socks = [self.dir / f"k-{p}" for p in ports.values()]
            deadline = time.monotonic() + 60
            while not all(s.exists() for s in socks):
                if time.monotonic() > deadline:
                    raise RuntimeError("bare kernel did not create its sockets: "
                                       + self.container.logs(tail=10).decode(errors="replace"))
                time.sleep(0.01)
            kc = BlockingKernelClient()
            kc.load_connection_info({**info, "ip": str(self.dir / "k")})
            kc.start_channels()
            kc.wait_for_ready(timeout=60)
            self.kc = kc
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.kc is not None:
            with contextlib.suppress(Exception):
                self.kc.stop_channels()
            self.kc = None
        if self.container is not None:
            with contextlib.suppress(Exception):
                self.container.remove(force=True)
            self.container = None
        shutil.rmtree(self.dir, ignore_errors=True)


def bare_container_exec(client: Any, image: str) -> float:
    """Seconds to create and start a container of ``image`` and run ``python3 -c pass`` in it with
    ``docker exec``, the way a peer without a kernel (llm-sandbox) does it: the floor of a cold start."""
    t = time.perf_counter()
    container = client.containers.create(image, ["sleep", "infinity"], detach=True, network_mode="none",
                                          labels={BENCH_LABEL: "1"})
    try:
        container.start()
        result = container.exec_run(["python3", "-c", "pass"])
        elapsed = time.perf_counter() - t
        if result.exit_code != 0:
            raise RuntimeError(f"exec python3 -c pass exited {result.exit_code}: {result.output[-300:]!r}")
        return elapsed
    finally:
        container.remove(force=True)


def bare_execute_loop(kc: Any, code: str, timeout: float = 30.0) -> None:
    """execute + read iopub until this request's idle status (what the sandbox does), then the reply."""
    msg_id = kc.execute(code)
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(deadline - time.monotonic(), 0.01))
        if (msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status"
                and msg["content"]["execution_state"] == "idle"):
            break
    reply = kc.get_shell_msg(timeout=timeout)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"bare execute failed: {reply['content']}")


def bare_execute_interactive(kc: Any, code: str, timeout: float = 30.0) -> None:
    reply = kc.execute_interactive(code, timeout=timeout, output_hook=lambda msg: None)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"bare execute failed: {reply['content']}")


def container_memory(container: Any) -> dict[str, float]:
    """Memory figures (bytes) from one docker stats sample."""
    try:
        stats = container.stats(stream=False, one_shot=True)
    except TypeError:  # older docker-py
        stats = container.stats(stream=False)
    ms = stats.get("memory_stats") or {}
    usage = float(ms.get("usage", 0))
    st = ms.get("stats") or {}
    # cgroup v1 names total_inactive_file/cache; v2 inactive_file (no cache)
    inactive = float(st.get("total_inactive_file", st.get("inactive_file", 0)))
    cache = float(st.get("cache", st.get("file", 0)))
    return {
        "usage": usage,
        "usage_minus_inactive_file": usage - inactive,
        "usage_minus_cache": usage - cache,
        "rss": float(st.get("total_rss", st.get("rss", st.get("anon", 0)))),
        "shmem": float(st.get("total_shmem", st.get("shmem", 0))),
    }


# --------------------------------------------------------------------------- benchmarks


class TimedDockerSandbox:
    """Factory for a DockerSandbox subclass that records where cold start time goes."""

    @staticmethod
    def make() -> type:
        from sandbox.container import DockerSandbox

        class Timed(DockerSandbox):  # type: ignore[misc, valid-type]
            """Phases, each from the constructor's start ("@"), or as a duration."""

            def __init__(self, *a: Any, **kw: Any) -> None:
                self.phases: dict[str, float] = {}
                self._t0 = t = time.perf_counter()
                super().__init__(*a, **kw)
                self.phases["init (docker client, ping, image check)"] = time.perf_counter() - t

            def _open_environment(self) -> None:
                t = time.perf_counter()
                super()._open_environment()
                self.phases["container: create + inspect + attach + start"] = time.perf_counter() - t

            def _start_kernel(self) -> None:
                t = time.perf_counter()
                super()._start_kernel()
                self.phases["kernel: exec + boot (overlaps the supervisor's) + hello"] = time.perf_counter() - t

            def _setup_kernel(self, deadline: float) -> None:
                t = time.perf_counter()
                super()._setup_kernel(deadline)
                self.phases["  of which: install stubs + settings (setup_kernel)"] = time.perf_counter() - t

            def _on_frame(self, which: str, generation: int, kind: bytes, body: bytearray) -> None:
                name = {b"P": "@ supervisor up: kernel prepared (P)", b"H": "@ kernel ready (H)"}.get(kind)
                if name is not None and name not in self.phases:
                    self.phases[name] = time.perf_counter() - self._t0
                super()._on_frame(which, generation, kind, body)

            def run(self, *a: Any, **kw: Any) -> Any:
                result = super().run(*a, **kw)
                self.phases.setdefault("@ first result", time.perf_counter() - self._t0)
                return result

            def close(self) -> None:
                if self.closed:
                    return
                t = time.perf_counter()
                super().close()
                self.phases["close"] = time.perf_counter() - t

        return Timed


def bench_cold(b: Bench, client: Any) -> None:
    reps = b.args.cold_reps

    def docker_cold() -> list[Row]:
        from sandbox.container import DockerSandbox
        from sandbox.image import default_image_tag

        Timed = TimedDockerSandbox.make()
        image = default_image_tag()
        # warm-up: imports, first image lookup, page cache of the image
        with DockerSandbox() as sb:
            check_result(sb.run("1"), "docker warm-up")
        bare_container_exec(client, image)
        samples, closes, phases, floors = [], [], [], []
        for _ in range(reps):
            floors.append(bare_container_exec(client, image))  # interleaved: load changes hit both alike
            t = time.perf_counter()
            sb = Timed()
            try:
                with sb:
                    r = sb.run("1")
                    samples.append(time.perf_counter() - t)
                    check_result(r, "docker cold start")
            finally:
                sb.close()
            closes.append(sb.phases.get("close", float("nan")))
            phases.append(dict(sb.phases))
        keys = list(dict.fromkeys(k for p in phases for k in p))
        b.diagnostics["docker_cold_start_phases_s"] = {
            k: round(statistics.median([p[k] for p in phases if k in p]), 4) for k in keys}
        ratio = statistics.median(samples) / statistics.median(floors)
        return [
            make_row("cold", "docker: constructor -> first result", "s", samples, target_max=0.35),
            make_row("cold", "docker floor: create + start + exec `python -c pass` (docker-py)", "s", floors,
                     note="a bare container of the same image, as llm-sandbox starts one"),
            Row("cold", "docker: cold start / floor", "x", median=ratio, p95=quantile(samples, 0.95) /
                quantile(floors, 0.95), n=reps, note="what the kernel costs over a bare container"),
            make_row("cold", "docker: close() (not part of target)", "s", closes, note="kill + wait + remove"),
        ]

    def local_cold() -> Row:
        from sandbox.local import LocalSandbox

        with LocalSandbox() as sb:
            check_result(sb.run("1"), "local warm-up")
        samples = []
        for _ in range(reps):
            t = time.perf_counter()
            with LocalSandbox() as sb:
                r = sb.run("1")
                samples.append(time.perf_counter() - t)
                check_result(r, "local cold start")
        return make_row("cold", "local: constructor -> first result", "s", samples)

    def restricted_cold() -> Row:
        RS = restricted_class()
        with RS() as sb:
            check_result(sb.run("1"), "restricted warm-up")
        samples = []
        for _ in range(max(reps, 20)):
            t = time.perf_counter()
            with RS() as sb:
                r = sb.run("1")
                samples.append(time.perf_counter() - t)
                check_result(r, "restricted cold start")
        return make_row("cold", "restricted: constructor -> first result", "ms", samples, scale=1e3)

    if client is not None:
        b.guarded("cold", "docker: constructor -> first result", "s", docker_cold, "<= 0.35 s")
    else:
        b.add(Row("cold", "docker: constructor -> first result", "s", target="<= 0.35 s",
                  error=b.diagnostics["no_docker"]))
    b.guarded("cold", "local: constructor -> first result", "s", local_cold)
    b.guarded("cold", "restricted: constructor -> first result", "ms", restricted_cold)


def bench_pool(b: Bench, client: Any) -> None:
    reps = b.args.pool_reps

    def pool() -> list[Row]:
        from sandbox.container import DockerSandbox
        from sandbox.pool import SandboxPool

        acquire, first = [], []
        with SandboxPool(lambda: DockerSandbox(), size=2) as p:
            for _ in range(reps):
                deadline = time.monotonic() + 120
                while p.ready < 2:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"pool did not warm up in 120 s (errors: {p._errors!r})")
                    time.sleep(0.02)
                time.sleep(0.2)  # let the refill thread settle
                t = time.perf_counter()
                sb = p.acquire()
                t1 = time.perf_counter()
                try:
                    r = sb.run("1")
                    t2 = time.perf_counter()
                    check_result(r, "pool session")
                finally:
                    sb.close()
                acquire.append(t1 - t)
                first.append(t2 - t)
        return [
            make_row("pool", "docker pool (size 2, warm): acquire()", "ms", acquire, target_max=20, scale=1e3),
            make_row("pool", "docker pool: acquire() + run('1')", "ms", first, scale=1e3),
        ]

    if client is None:
        b.add(Row("pool", "docker pool (size 2, warm): acquire()", "ms", target="<= 20 ms",
                  error=b.diagnostics["no_docker"]))
        return
    b.guarded("pool", "docker pool (size 2, warm): acquire()", "ms", pool, "<= 20 ms")


def bench_roundtrip(b: Bench, client: Any) -> None:
    reps, warm = b.args.rt_reps, b.args.rt_warmup
    code = "x = 1"

    def measure(name: str, run_sandbox: Callable[[], Any], bare: dict[str, Callable[[], Any]],
                target: float = 1.1) -> list[Row]:
        for _ in range(warm):
            check_result(run_sandbox(), f"{name} warm-up")
            for fn in bare.values():
                fn()
        sb_s: list[float] = []
        bare_s: dict[str, list[float]] = {k: [] for k in bare}
        for _ in range(reps):  # interleaved, so load changes hit both sides alike
            t = time.perf_counter()
            r = run_sandbox()
            sb_s.append(time.perf_counter() - t)
            if r.error is not None:
                raise RuntimeError(f"{name}: {r.error}")
            for k, fn in bare.items():
                t = time.perf_counter()
                fn()
                bare_s[k].append(time.perf_counter() - t)
        rows = [make_row("roundtrip", f"{name}: sandbox run('x = 1')", "ms", sb_s, scale=1e3)]
        for k, s in bare_s.items():
            rows.append(make_row("roundtrip", f"{name}: bare jupyter_client ({k})", "ms", s, scale=1e3))
        # ratio against the faster bare variant (the stricter comparison)
        best = min(bare_s, key=lambda k: statistics.median(bare_s[k]))
        ratio = statistics.median(sb_s) / statistics.median(bare_s[best])
        ratio_p95 = quantile(sb_s, 0.95) / quantile(bare_s[best], 0.95)
        ratio_row = Row("roundtrip", f"{name}: ratio sandbox / bare", "x", median=ratio, p95=ratio_p95, n=reps,
                        target=f"<= {target:g} x", met=ratio <= target, note=f"vs bare {best}; p95 column = p95/p95")
        rows.append(ratio_row)
        return rows

    def docker_rt() -> list[Row]:
        from sandbox.container import DockerSandbox
        from sandbox.image import default_image_tag

        sb = DockerSandbox()
        bare = None
        try:
            sb.start()
            bare = BareDockerKernel(client, default_image_tag())
            kc = bare.kc
            return measure("docker", lambda: sb.run(code), {
                "execute+iopub idle": lambda: bare_execute_loop(kc, code),
                "execute_interactive": lambda: bare_execute_interactive(kc, code),
            }, target=1.05)
        finally:
            sb.close()
            if bare is not None:
                bare.close()

    def local_rt() -> list[Row]:
        from jupyter_client.manager import KernelManager

        from sandbox.local import LocalSandbox

        sb = LocalSandbox()
        km = KernelManager()
        kc = None
        try:
            sb.start()
            km.start_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # no TCP banner noise
            kc = km.client()
            kc.start_channels()
            kc.wait_for_ready(timeout=60)
            b.diagnostics["local_bare_kernel"] = {"kernel_name": km.kernel_name,
                                                  "argv": km.kernel_spec.argv if km.kernel_spec else None,
                                                  "transport": km.transport}
            return measure("local", lambda: sb.run(code), {
                "execute+iopub idle": lambda: bare_execute_loop(kc, code),
                "execute_interactive": lambda: bare_execute_interactive(kc, code),
            })
        finally:
            sb.close()
            if kc is not None:
                kc.stop_channels()
            with contextlib.suppress(Exception):
                km.shutdown_kernel(now=True)

    if client is not None:
        b.guarded("roundtrip", "docker: round trip", "ms", docker_rt, "<= 1.05 x")
    else:
        b.add(Row("roundtrip", "docker: ratio sandbox / bare", "x", target="<= 1.05 x",
                  error=b.diagnostics["no_docker"]))
    b.guarded("roundtrip", "local: round trip", "ms", local_rt, "<= 1.1 x")


def bench_calls(b: Bench, client: Any) -> None:
    reps, ncalls = b.args.call_reps, 1000
    code = f"for i in range({ncalls}):\n    trivial(i)\n"

    def measure(name: str, make: Callable[[], Any]) -> Row:
        with make() as sb:
            for _ in range(2):  # warm-up
                r = check_result(sb.run(code), f"{name} warm-up")
            if len(r.calls) != ncalls:
                raise RuntimeError(f"{name}: expected {ncalls} calls, got {len(r.calls)}")
            samples = []
            for _ in range(reps):
                t = time.perf_counter()
                r = sb.run(code)
                samples.append((time.perf_counter() - t) / ncalls)
                check_result(r, name)
        return make_row("calls", f"{name}: host-function call (1,000 in one cell)", "ms", samples,
                        target_max=1.5, scale=1e3, note="per call")

    if client is not None:
        from sandbox.container import DockerSandbox

        b.guarded("calls", "docker: host-function call", "ms",
                  lambda: measure("docker", lambda: DockerSandbox([trivial])), "<= 1.5 ms")
        # diagnostic: how much the per-call thread pool hop (function_timeout) costs
        b.guarded("calls", "docker, function_timeout=None: host-function call", "ms",
                  lambda: _retitle(measure("docker", lambda: DockerSandbox([trivial], function_timeout=None)),
                                   "docker, function_timeout=None (diagnostic)"))
    else:
        b.add(Row("calls", "docker: host-function call", "ms", target="<= 1.5 ms", error=b.diagnostics["no_docker"]))
    from sandbox.local import LocalSandbox

    b.guarded("calls", "local: host-function call", "ms",
              lambda: measure("local", lambda: LocalSandbox([trivial])), "<= 1.5 ms")
    b.guarded("calls", "restricted: host-function call", "ms",
              lambda: measure("restricted", lambda: restricted_class()([trivial])), "<= 1.5 ms")


def _retitle(row: Row, prefix: str) -> Row:
    row.name = prefix + ": host-function call (1,000 in one cell)"
    row.target, row.met = "", None
    return row


def bench_cpu(b: Bench, client: Any) -> None:
    reps = b.args.cpu_reps
    code = CPU_SNIPPET.format(n=CPU_LOOPS)
    names = ["host python3", "image python3 (docker run)", "docker", "local", "restricted"]
    samples: dict[str, list[float]] = {k: [] for k in names}
    errors: dict[str, str] = {}
    sessions: dict[str, Any] = {}
    image = None
    host_python = shutil.which("python3") or sys.executable
    b.diagnostics["cpu_host_python"] = {
        "path": host_python,
        "version": subprocess.run([host_python, "-c", "import sys; print(sys.version)"], capture_output=True,
                                  text=True).stdout.strip(),
        "local_sandbox_python": sys.executable,
        "loops": CPU_LOOPS,
    }
    try:
        if client is not None:
            from sandbox.container import DockerSandbox
            from sandbox.image import default_image_tag

            image = default_image_tag()
            try:
                sessions["docker"] = DockerSandbox(timeout=120).start()
            except Exception as exc:
                errors["docker"] = f"{type(exc).__name__}: {exc}"
        else:
            errors["docker"] = errors["image python3 (docker run)"] = b.diagnostics["no_docker"]
        try:
            from sandbox.local import LocalSandbox

            sessions["local"] = LocalSandbox(timeout=120).start()
        except Exception as exc:
            errors["local"] = f"{type(exc).__name__}: {exc}"
        try:
            sessions["restricted"] = restricted_class()(timeout=120).__enter__()
        except Exception as exc:
            errors["restricted"] = f"{type(exc).__name__}: {exc}"

        def one(name: str) -> float:
            if name == "host python3":
                out = subprocess.run([host_python, "-c", code], capture_output=True, text=True, check=True).stdout
                return parse_elapsed(out)
            if name == "image python3 (docker run)":
                out = client.containers.run(image, ["python3", "-c", code], network_mode="none", remove=True,
                                            nano_cpus=int(1e9), mem_limit="1g", labels={BENCH_LABEL: "1"})
                return parse_elapsed(out.decode())
            r = sessions[name].run(code, timeout=120)
            if r.error is not None:
                raise RuntimeError(str(r.error))
            return parse_elapsed(r.stdout)

        for rep in range(reps + 1):  # rep 0 is a warm-up; backends interleaved
            for name in names:
                if name in errors:
                    continue
                try:
                    v = one(name)
                    if rep > 0:
                        samples[name].append(v)
                except Exception as exc:
                    errors[name] = f"{type(exc).__name__}: {exc}"
    finally:
        for sb in sessions.values():
            with contextlib.suppress(Exception):
                sb.close()
    base = samples["host python3"]
    img = samples["image python3 (docker run)"]
    for name in names:
        if name in errors:
            b.add(Row("cpu", f"{name}: CPU snippet", "s", target="<= 1.1 x" if name == "docker" else "",
                      met=False if name == "docker" else None, error=errors[name][:400]))
            continue
        b.add(make_row("cpu", f"{name}: CPU snippet ({CPU_LOOPS:,} loop iterations)", "s", samples[name],
                       note="timed inside the code"))
    if base:
        for name in ["image python3 (docker run)", "docker", "local", "restricted"]:
            if samples[name]:
                ratio = statistics.median(samples[name]) / statistics.median(base)
                is_target = name == "docker"
                b.add(Row("cpu", f"{name}: ratio to host python3", "x", median=ratio,
                          p95=quantile(samples[name], 0.95) / quantile(base, 0.95), n=len(samples[name]),
                          target="<= 1.1 x" if is_target else "", met=(ratio <= 1.1) if is_target else None,
                          note="p95 column = p95/p95"))
        if img and samples["docker"]:
            b.add(Row("cpu", "docker: ratio to image python3 (same build)", "x",
                      median=statistics.median(samples["docker"]) / statistics.median(img),
                      p95=quantile(samples["docker"], 0.95) / quantile(img, 0.95), n=len(img),
                      note="separates sandbox overhead from CPython build differences"))


def bench_memory(b: Bench, client: Any) -> None:
    n = b.args.mem_sessions

    def mem() -> list[Row]:
        from sandbox.container import DockerSandbox

        sessions: list[Any] = []
        try:
            for _ in range(n):
                sb = DockerSandbox()
                sessions.append(sb)
                sb.start()
                check_result(sb.run("1"), "memory session")
            time.sleep(b.args.mem_idle)
            figures = [container_memory(sb.container) for sb in sessions]
        finally:
            for sb in sessions:
                sb.close()
        b.diagnostics["idle_memory_bytes"] = figures
        primary = [f["usage_minus_inactive_file"] / 1e6 for f in figures]
        return [
            make_row("memory", f"docker idle session ({n} sessions): usage - inactive_file", "MB", primary,
                     target_max=80),
            make_row("memory", "docker idle session: usage - cache", "MB",
                     [f["usage_minus_cache"] / 1e6 for f in figures], note="what `docker stats` shows on cgroup v1"),
            make_row("memory", "docker idle session: rss", "MB", [f["rss"] / 1e6 for f in figures]),
        ]

    if client is None:
        b.add(Row("memory", "docker idle session", "MB", target="<= 80 MB", error=b.diagnostics["no_docker"]))
        return
    b.guarded("memory", "docker idle session", "MB", mem, "<= 80 MB")


def bench_concurrent(b: Bench, client: Any) -> None:
    n = b.args.sessions

    def conc() -> list[Row]:
        from sandbox.container import DockerSandbox

        results: list[dict[str, Any]] = [{} for _ in range(n)]
        barrier = threading.Barrier(n)

        def worker(i: int) -> None:
            rec = results[i]
            try:
                barrier.wait(timeout=60)
                t = time.perf_counter()
                with DockerSandbox() as sb:  # default limits: 1 CPU, 1 GiB, 30 s per run
                    rec["start_s"] = time.perf_counter() - t
                    t1 = time.perf_counter()
                    r = sb.run(PANDAS_SNIPPET)
                    rec["run_s"] = time.perf_counter() - t1
                    rec["stdout"] = r.stdout.strip()[-200:]
                    if r.error is not None:
                        rec["error"] = str(r.error)[:300]
                    elif "100000" not in r.stdout:
                        rec["error"] = f"unexpected output: {r.stdout[-200:]!r}"
                    rec["session_s"] = time.perf_counter() - t
            except BaseException as exc:
                rec["error"] = f"{type(exc).__name__}: {exc}"[:300]
            rec["total_s"] = time.perf_counter() - t0

        threads = [threading.Thread(target=worker, args=(i,), name=f"bench-{i}") for i in range(n)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.perf_counter() - t0
        b.diagnostics["concurrent_sessions"] = results
        errs = [r for r in results if r.get("error")]
        rows = [
            Row("concurrent", f"{n} concurrent docker sessions (pandas 100k groupby): wall", "s",
                median=wall, p95=wall, n=1, note="total, all sessions"),
            make_row("concurrent", "  per session: start (constructor -> started)", "s",
                     [r["start_s"] for r in results if "start_s" in r]),
            make_row("concurrent", "  per session: pandas run", "s", [r["run_s"] for r in results if "run_s" in r]),
            Row("concurrent", f"{n} concurrent docker sessions: errors", "count", median=len(errs), p95=len(errs),
                n=n, target="0", met=not errs, note="; ".join(sorted({e["error"][:80] for e in errs}))[:200]),
        ]
        return rows

    if client is None:
        b.add(Row("concurrent", f"{n} concurrent docker sessions", "s", target="0 errors",
                  error=b.diagnostics["no_docker"]))
        return
    b.guarded("concurrent", f"{n} concurrent docker sessions", "s", conc, "0 errors")


#: How code ends its own kernel, for the recovery group: (name, code).
KERNEL_DEATHS = (
    ("self-SIGKILL", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"),
    ("segfault in C", "import ctypes\nctypes.string_at(0)"),
    ("OOM kill (256m)", "x = bytearray(2 * 1024**3)"),
)


def bench_recovery(b: Bench, client: Any) -> None:
    """A kernel that dies: how long run() takes to report it, and the next run() to have a fresh kernel."""
    reps = b.args.recovery_reps

    def deaths() -> list[Row]:
        from sandbox.container import DockerSandbox

        rows = []
        with DockerSandbox(timeout=2, max_run_time=3, memory="256m") as sb:
            check_result(sb.run("1"), "recovery warm-up")
            for name, code in KERNEL_DEATHS:
                reported, ready = [], []
                for _ in range(reps):
                    took, r = timed(lambda code=code: sb.run(code))
                    if r.error is None or r.error.type not in ("KernelDied", "MemoryError"):
                        raise RuntimeError(f"{name}: the kernel did not die: {r.error}")
                    reported.append(took)
                    took, r = timed(lambda: sb.run("1"))
                    check_result(r, f"{name}: next run")
                    ready.append(took)
                rows.append(make_row("recovery", f"docker: {name} -> run() reports it", "s", reported,
                                     target_max=2.0))
                rows.append(make_row("recovery", f"docker: {name} -> next run() done (fresh kernel)", "s", ready,
                                     target_max=2.0))
        return rows

    if client is None:
        b.add(Row("recovery", "docker: kernel death", "s", error=b.diagnostics["no_docker"]))
        return
    b.guarded("recovery", "docker: kernel death", "s", deaths, "<= 2 s")


def bench_breakdown(b: Bench, client: Any) -> None:
    """No targets: reference costs that explain the docker cold start."""
    if client is None:
        return
    from sandbox.image import default_image_tag

    image = default_image_tag()
    reps = b.args.breakdown_reps

    def run_container(cmd: list[str], **kw: Any) -> float:
        t = time.perf_counter()
        c = client.containers.create(image, cmd, network_mode="none", labels={BENCH_LABEL: "1"}, **kw)
        try:
            c.start()
            code = client.api.wait(c.id, timeout=120).get("StatusCode")
            dt = time.perf_counter() - t
            if code != 0:
                raise RuntimeError(f"{cmd} exited {code}: {c.logs(tail=5).decode(errors='replace')}")
            return dt
        finally:
            c.remove(force=True)

    def rows() -> list[Row]:
        cmds = {
            "docker create+start+wait `true`": (["true"], {}),
            "docker create+start+wait `python3 -c pass`": (["python3", "-c", "pass"], {}),
            "docker create+start+wait `import ipykernel.kernelapp`": (
                ["python3", "-c", "import ipykernel.kernelapp"], {}),
            "same, sandbox options (init, read-only, limits, cap_drop)": (
                ["python3", "-c", "import ipykernel.kernelapp"],
                dict(init=True, read_only=True, tmpfs={"/tmp": "size=256m,mode=1777"}, mem_limit="1g",
                     memswap_limit="1g", nano_cpus=int(1e9), pids_limit=256, cap_drop=["ALL"],
                     security_opt=["no-new-privileges"], user="1000:1000")),
        }
        out = []
        for name, (cmd, kw) in cmds.items():
            run_container(cmd, **kw)  # warm-up
            out.append(make_row("breakdown", name, "s", [run_container(cmd, **kw) for _ in range(reps)]))
        # in-process import cost inside the image (no container start counted)
        o = client.containers.run(image, ["python3", "-c",
                                          "import time; t=time.perf_counter(); import ipykernel.kernelapp; "
                                          "a=time.perf_counter(); import IPython; import sandbox_runtime; "
                                          "print(a-t, time.perf_counter()-t)"],
                                  network_mode="none", remove=True, labels={BENCH_LABEL: "1"}).decode().split()
        b.diagnostics["image_import_ipykernel_s"] = float(o[0])
        out.append(Row("breakdown", "in image: time to import ipykernel.kernelapp (in-process)", "s",
                       median=float(o[0]), p95=float(o[0]), n=1))
        return out

    b.guarded("breakdown", "container start reference costs", "s", rows)


# --------------------------------------------------------------------------- output


def print_table(b: Bench) -> None:
    headers = ["group", "measurement", "n", "median", "p95", "unit", "target", "met"]
    data = []
    for r in b.rows:
        met = "" if r.met is None else ("yes" if r.met else "NO")
        if r.error:
            data.append([r.group, r.name, str(r.n), "ERROR", "", r.unit, r.target, "n/a"])
        else:
            data.append([r.group, r.name, str(r.n), fmt(r.median), fmt(r.p95), r.unit, r.target, met])
    try:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="sandbox benchmark", show_lines=False)
        for h in headers:
            table.add_column(h, justify="right" if h in ("n", "median", "p95") else "left",
                             no_wrap=h != "measurement")
        for row in data:
            style = "red" if row[-1] in ("NO", "n/a") else None
            table.add_row(*row, style=style)
        Console(width=max(150, shutil.get_terminal_size().columns)).print(table)
    except ImportError:
        widths = [max(len(h), *(len(row[i]) for row in data)) for i, h in enumerate(headers)]
        line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
        print(line)
        print("-" * len(line))
        for row in data:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    for r in b.rows:
        if r.error:
            print(f"ERROR in [{r.group}] {r.name}: {r.error}")
        if r.note and not r.error:
            pass
    missed = [r for r in b.rows if r.met is False and not r.error]
    if missed:
        print("targets missed: " + "; ".join(f"{r.name} ({fmt(r.median)} {r.unit}, target {r.target})"
                                            for r in missed))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    p.add_argument("--only", default="", help=f"comma-separated groups to run: {', '.join(GROUPS)}")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sandbox_bench.json"),
                   help="where to write the JSON results")
    p.add_argument("--sessions", type=int, default=None, help="concurrent docker sessions (default 16, quick 4)")
    args = p.parse_args(argv)
    q = args.quick
    args.cold_reps = 3 if q else 10
    args.pool_reps = 3 if q else 10
    args.rt_reps = 30 if q else 200
    args.rt_warmup = 5 if q else 20
    args.call_reps = 2 if q else 7
    args.cpu_reps = 2 if q else 5
    args.mem_sessions = 2 if q else 4
    args.mem_idle = 3.0 if q else 10.0
    args.breakdown_reps = 2 if q else 5
    args.recovery_reps = 2 if q else 5
    if args.sessions is None:
        args.sessions = 4 if q else 16
    groups = [g.strip() for g in args.only.split(",") if g.strip()] or list(GROUPS)
    bad = [g for g in groups if g not in GROUPS]
    if bad:
        p.error(f"unknown group(s) {', '.join(bad)}; choose from {', '.join(GROUPS)}")
    args.groups = groups
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    b = Bench(args)
    client, why = docker_client_or_none()
    b.diagnostics["no_docker"] = why or ""
    facts = machine_facts(client)
    print("sandbox benchmark" + (" (quick)" if args.quick else ""))
    for k in ("time", "platform", "cpus", "memory_gib", "loadavg_start", "host_python", "host_python_build",
              "docker", "cgroup", "image", "image_python", "image_python_build", "image_ipykernel",
              "jupyter_client"):
        if k in facts:
            print(f"  {k:20} {facts[k]}")
    if why:
        print(f"  docker unavailable: {why}")
    print(flush=True)
    funcs = {"cold": bench_cold, "pool": bench_pool, "roundtrip": bench_roundtrip, "calls": bench_calls,
             "cpu": bench_cpu, "memory": bench_memory, "concurrent": bench_concurrent,
             "recovery": bench_recovery, "breakdown": bench_breakdown}
    started = time.perf_counter()
    for g in GROUPS:
        if g not in args.groups:
            continue
        print(f"== {g} (load {loadavg()})", flush=True)
        b.load[g] = {"before": loadavg()}
        t = time.perf_counter()
        try:
            funcs[g](b, client)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            break
        b.load[g]["after"] = loadavg()
        b.load[g]["seconds"] = round(time.perf_counter() - t, 1)
    facts["loadavg_end"] = loadavg()
    facts["bench_seconds"] = round(time.perf_counter() - started, 1)
    print()
    print_table(b)
    print(f"load average: start {facts['loadavg_start']}, end {facts['loadavg_end']}; "
          f"took {facts['bench_seconds']} s")
    if "docker_cold_start_phases_s" in b.diagnostics:
        print("docker cold start, median per phase (s):")
        for k, v in b.diagnostics["docker_cold_start_phases_s"].items():
            print(f"  {k:50} {v:.3f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    diag = {k: v for k, v in b.diagnostics.items() if k != "no_docker" or v}
    out.write_text(json.dumps({"machine": facts, "quick": args.quick, "groups": args.groups, "load": b.load,
                               "rows": [asdict(r) for r in b.rows], "diagnostics": diag}, indent=2, default=str))
    print(f"wrote {out}")
    return 1 if any(r.error for r in b.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
