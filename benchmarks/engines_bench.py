#!/usr/bin/env python3
"""Sessions on remote Docker engines, side by side with the local socket (a script, not a test).

Engines, all on this machine so that the numbers show the transport and not
the network: the local engine's Unix socket; a second dockerd on loopback
TCP with mutual TLS (the one the tests start); the local engine reached over
SSH (an sshd on loopback, the socket forwarded by OpenSSH).

Rows per engine: a raw length-prefixed echo over a container's attach stream
(the floor), the execute round trip of a one-line cell, the host-function
call p50, and the time to start a session (container + kernel, up to the
first result). Then sessions per second through an :class:`EnginePool` of
one engine and of two (both engines share these 2 cores, so two engines
show the pool's overhead, not added capacity).

    .venv/bin/python benchmarks/engines_bench.py           # about 3 minutes (copies the image once)
    .venv/bin/python benchmarks/engines_bench.py --quick
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bridge_bench import call_latency, quantile, raw_docker  # noqa: E402


def echo(x: int) -> int:
    return x


def execute_rtt(sb: Any, reps: int) -> list[float]:
    for _ in range(10):
        sb.run("x = 1")
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        sb.run("x = 1")
        out.append(time.perf_counter() - t)
    return out


def session_starts(engine: Any, image: str, reps: int) -> list[float]:
    from sandbox import DockerSandbox

    out = []
    for _ in range(reps):
        t = time.perf_counter()
        with DockerSandbox(functions=[echo], engine=engine, image=image) as sb:
            sb.run("echo(1)")
            out.append(time.perf_counter() - t)
    return out


def sessions_per_second(engines: list[Any], image: str, total: int, threads: int) -> float:
    from sandbox.engine_pool import EnginePool

    with EnginePool(engines, image=image) as pool:
        todo = list(range(total))
        lock = threading.Lock()
        errors: list[BaseException] = []

        def worker() -> None:
            while True:
                with lock:
                    if not todo:
                        return
                    todo.pop()
                try:
                    with pool.sandbox(functions=[echo], image=image) as sb:
                        sb.run("echo(1)")
                except BaseException as exc:
                    errors.append(exc)

        started = time.perf_counter()
        pool_threads = [threading.Thread(target=worker) for _ in range(threads)]
        for t in pool_threads:
            t.start()
        for t in pool_threads:
            t.join()
        elapsed = time.perf_counter() - started
        if errors:
            raise RuntimeError(f"{len(errors)} sessions failed: {errors[0]}")
        return total / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "engines.json"))
    args = parser.parse_args()
    reps = 200 if args.quick else 1000
    starts = 3 if args.quick else 8

    from sandbox import DockerSandbox
    from sandbox.engines import Engine, connect
    from sandbox.image import ensure_image
    from sandbox.image import default_image_tag
    from tests.docker_engines import SecondEngine, SSHServer, can_start_engines, can_start_sshd

    image = default_image_tag()
    local = Engine("local", "unix:///var/run/docker.sock", max_sessions=8)
    engines: dict[str, Any] = {"local socket": local}
    second = sshd = None
    rows: dict[str, dict[str, float]] = {}
    try:
        if can_start_engines() is None:
            second = SecondEngine(max_sessions=8)
            second.start()
            t = time.perf_counter()
            how = ensure_image(second.client(), image)
            print(f"image on the TLS engine: {how} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
            engines["TCP + TLS"] = second.engine
        else:
            print(f"skipping the TLS engine: {can_start_engines()}", file=sys.stderr)
        if can_start_sshd() is None:
            sshd = SSHServer()
            sshd.start()
            engines["SSH"] = Engine("ssh", f"ssh://{sshd.host_alias}", ssh_config=sshd.ssh_config)
        else:
            print(f"skipping SSH: {can_start_sshd()}", file=sys.stderr)

        for label, engine in engines.items():
            client = connect(engine)
            floor = raw_docker(client, image, "attach", reps)
            with DockerSandbox(functions=[echo], engine=engine, image=image) as sb:
                rtt = execute_rtt(sb, reps // 5)
                calls = call_latency(sb, reps)
            start = session_starts(engine, image, starts)
            rows[label] = {
                "raw_attach_p50_ms": quantile(floor, 0.5) * 1e3,
                "execute_p50_ms": quantile(rtt, 0.5) * 1e3,
                "call_p50_ms": quantile(calls, 0.5) * 1e3,
                "call_p90_ms": quantile(calls, 0.9) * 1e3,
                "session_start_mean_s": statistics.mean(start),
                "session_start_min_s": min(start),
            }
            print(f"  {label}: done", file=sys.stderr)

        total = 8 if args.quick else 24
        throughput = {"one engine (local)": sessions_per_second([local], image, total, 4)}
        if second is not None:
            both = [Engine("local", local.url, max_sessions=4), Engine("second", second.url,
                                                                       tls_dir=second.engine.tls_dir, max_sessions=4)]
            throughput["two engines (local + TLS)"] = sessions_per_second(both, image, total, 4)
    finally:
        if sshd is not None:
            sshd.stop()
        if second is not None:
            second.remove()

    head = (f"{'engine':<14}{'raw attach p50':>16}{'execute p50':>14}{'call p50':>11}{'call p90':>11}"
            f"{'session start':>16}")
    print(head)
    print("-" * len(head))
    for label, r in rows.items():
        print(f"{label:<14}{r['raw_attach_p50_ms']:>13.3f} ms{r['execute_p50_ms']:>11.2f} ms"
              f"{r['call_p50_ms']:>8.3f} ms{r['call_p90_ms']:>8.3f} ms{r['session_start_mean_s']:>13.2f} s")
    print()
    print(f"{'pool':<28}{'sessions/s':>12}   (start, one cell, close; 4 threads)")
    for label, value in throughput.items():
        print(f"{label:<28}{value:>12.2f}")
    load = os.getloadavg()[0]
    print(f"\nload average at the end: {load:.2f} (2 cores)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"engines": rows, "sessions_per_second": throughput, "reps": reps,
                                          "load_average": load, "image": image}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
