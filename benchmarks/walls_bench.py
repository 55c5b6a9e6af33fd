#!/usr/bin/env python3
"""The sandbox's walls side by side: runc and gVisor (runsc) on a Docker engine (a script, not a test).

A column is one (engine, runtime) pair: by default the local engine with
``runc`` and, when the engine has it, ``runsc`` (gVisor). ``--engine URL``
adds the same runtimes on another engine speaking the Docker API (e.g. a
Podman service: ``--engine unix:///run/podman/podman.sock``); ``--runtimes``
chooses the runtimes. Each wall is one function of (engine, runtime) so a
new engine is one more column, not new code.

Rows (each a median over repetitions; ``--quick`` takes fewer):

* start to first result: ``DockerSandbox(...)`` constructor, start, the
  first ``run("1")`` (after one warm-up session, so imports are not counted);
* trivial cell: the round trip of ``run("x = 1")``;
* tool call from code: one host-function call made by the sandboxed code,
  timed in the code (``echo(1)`` in a loop), with the transport in use
  (``direct``: the host's socket in the container's network namespace;
  ``exec``: the Docker API's exec stream);
* pandas import: ``import pandas`` in a fresh kernel;
* write 100 MB: ``/workspace`` (a tmpfs volume), timed in the code.

The ratios row compares each column with the first (runc on the local
engine) against the targets for gVisor: a trivial cell within 3x, a tool
call within 5x.

    .venv/bin/python benchmarks/walls_bench.py            # about 2 minutes
    .venv/bin/python benchmarks/walls_bench.py --quick
    .venv/bin/python benchmarks/walls_bench.py --engine unix:///run/podman/podman.sock --runtimes runc
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LOCAL = "unix:///var/run/docker.sock"
#: The targets of the gVisor tier, as ratios to runc on the same engine.
TARGETS = {"cell_ms": 3.0, "call_ms": 5.0}


def echo(x: int) -> int:
    return x


def _sandbox(engine: str, runtime: str | None, **options: Any) -> Any:
    from sandbox import DockerSandbox

    return DockerSandbox(functions=[echo], engine=engine, runtime=runtime, **options)


def wall_start(engine: str, runtime: str | None, reps: int) -> dict[str, Any]:
    """Seconds from the constructor to the first result (median), after one warm-up session."""
    times = []
    for i in range(reps + 1):
        t = time.perf_counter()
        with _sandbox(engine, runtime) as sb:
            r = sb.run("1")
            elapsed = time.perf_counter() - t
        if r.error:
            raise RuntimeError(f"first run failed: {r.error}")
        if i:
            times.append(elapsed)
    return {"start_s": statistics.median(times)}


def wall_session(engine: str, runtime: str | None, reps: int) -> dict[str, Any]:
    """In one session: a trivial cell's round trip, a tool call from code, 100 MB written to /workspace."""
    with _sandbox(engine, runtime, timeout=300) as sb:
        for _ in range(10):
            sb.run("x = 1")
        cells = []
        for _ in range(reps):
            t = time.perf_counter()
            sb.run("x = 1")
            cells.append(time.perf_counter() - t)
        r = sb.run(f"""
import time
for _ in range(50):
    echo(1)
ts = []
for _ in range({reps}):
    t = time.perf_counter(); echo(1); ts.append(time.perf_counter() - t)
ts.sort()
print(ts[len(ts) // 2])
""")
        if r.error:
            raise RuntimeError(f"calls failed: {r.error}")
        call = float(r.stdout.strip().splitlines()[-1])
        transport = "direct" if sb.linked_directly else "exec"
        writes = []
        for _ in range(3):
            w = sb.run("""
import os, time
block = b'x' * (1 << 20)
t = time.perf_counter()
with open('/workspace/big.bin', 'wb') as f:
    for _ in range(100):
        f.write(block)
    f.flush()
    os.fsync(f.fileno())
print(time.perf_counter() - t)
os.remove('/workspace/big.bin')
""")
            if w.error:
                raise RuntimeError(f"writing failed: {w.error}")
            writes.append(float(w.stdout.strip()))
    return {"cell_ms": statistics.median(cells) * 1e3, "call_ms": call * 1e3, "transport": transport,
            "write_100mb_s": statistics.median(writes)}


def wall_pandas(engine: str, runtime: str | None, reps: int) -> dict[str, Any]:
    """``import pandas`` in a fresh kernel of a started session (median over restarts)."""
    times = []
    with _sandbox(engine, runtime, timeout=120) as sb:
        for _ in range(reps):
            sb.restart()
            sb.run("1")
            r = sb.run("import time\nt = time.perf_counter()\nimport pandas\nprint(time.perf_counter() - t)")
            if r.error:
                raise RuntimeError(f"pandas import failed: {r.error}")
            times.append(float(r.stdout.strip()))
    return {"pandas_s": statistics.median(times)}


WALLS: list[Callable[[str, str | None, int], dict[str, Any]]] = [wall_start, wall_session, wall_pandas]


ROWS = [("start to first result", "start_s", "s", 2), ("trivial cell round trip", "cell_ms", "ms", 2),
        ("tool call from code", "call_ms", "ms", 3), ("import pandas", "pandas_s", "s", 2),
        ("write 100 MB to /workspace", "write_100mb_s", "s", 2)]


def print_table(columns: dict[str, dict[str, Any]], *, width: int) -> int:
    """One column per wall (label -> :func:`column`'s figures), a row per figure, then the call transport;
    returns the column width used (rows printed after it line up)."""
    labels = list(columns)
    width = max([width, *(len(label) + 2 for label in labels)])
    head = f"{'wall':<28}" + "".join(f"{label:>{width}}" for label in labels)
    print(head)
    print("-" * len(head))
    for name, key, unit, digits in ROWS:
        cells = []
        for label in labels:
            value = columns[label].get(key)
            cells.append(f"{value:.{digits}f} {unit}" if isinstance(value, (int, float)) else "-")
        print(f"{name:<28}" + "".join(f"{c:>{width}}" for c in cells))
    print(f"{'call transport':<28}" + "".join(f"{columns[label].get('transport', '-'):>{width}}"
                                                for label in labels))
    return width


def column(engine: str, runtime: str | None, quick: bool) -> dict[str, Any]:
    """Every wall's figures for sessions on ``engine`` with ``runtime`` (None: the engine's default)."""
    reps = {"wall_start": 3 if quick else 6, "wall_session": 100 if quick else 400, "wall_pandas": 2 if quick else 4}
    out: dict[str, Any] = {}
    for wall in WALLS:
        try:
            out.update(wall(engine, runtime, reps[wall.__name__]))
        except Exception as exc:
            out.setdefault("errors", []).append(f"{wall.__name__}: {type(exc).__name__}: {exc}")
    return out


def engine_runtimes(engine: str) -> list[str]:
    from sandbox.container import engine_runtimes as listed
    from sandbox.engines import connect

    client = connect(engine, timeout=10)
    try:
        return listed(client)
    finally:
        client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--engine", action="append", default=[], metavar="URL",
                        help="another engine (Docker API URL) to measure beside the local one (repeatable)")
    parser.add_argument("--runtimes", default="runc,runsc", help="runtimes to measure, where an engine has them")
    parser.add_argument("--no-local", action="store_true", help="only the engines given with --engine")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "walls.json"))
    args = parser.parse_args()

    engines = ([] if args.no_local else [LOCAL]) + args.engine
    wanted = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    columns: dict[str, dict[str, Any]] = {}
    for engine in engines:
        have = engine_runtimes(engine)
        for runtime in wanted:
            label = runtime if engine == LOCAL else f"{runtime} @ {engine}"
            if runtime not in have:
                print(f"skipping {label}: the engine has {', '.join(have)}", file=sys.stderr)
                continue
            print(f"measuring {label} ...", file=sys.stderr)
            columns[label] = {"engine": engine, "runtime": runtime, **column(engine, runtime, args.quick)}

    labels = list(columns)
    width = print_table(columns, width=14)
    if labels:
        base = columns[labels[0]]
        for key, target in TARGETS.items():
            ratios = []
            for label in labels:
                a, b = columns[label].get(key), base.get(key)
                ratios.append(f"{a / b:.1f}x" if isinstance(a, float) and isinstance(b, float) and b else "-")
            name = {"cell_ms": "cell ratio", "call_ms": "call ratio"}[key]
            print(f"{name + f' (target {target:g}x)':<28}" + "".join(f"{r:>{width}}" for r in ratios))
    for label in labels:
        for error in columns[label].get("errors", []):
            print(f"{label}: {error}", file=sys.stderr)
    load = os.getloadavg()[0]
    print(f"\nload average at the end: {load:.2f} ({os.cpu_count()} cores)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"columns": columns, "targets": TARGETS, "load_average": load,
                                          "quick": args.quick}, indent=2))
    print(f"wrote {args.out}")
    return 1 if any(c.get("errors") for c in columns.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
