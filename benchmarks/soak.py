#!/usr/bin/env python3
"""Soak: many sessions in a row, many actions in one session; does memory creep? (a script, not a test)

Two phases on the Docker backend:

1. ``--sessions`` sessions in sequence (default 100): open, run a small
   action that calls a host function and prints, close. Host memory (this
   process's RSS) is measured at the start and the end, and every container
   the sessions created must be gone.
2. ``--actions`` code actions in one session (default 1,000), each calling a
   host function, printing, and keeping a little state. Host RSS and the
   container's memory (cgroup ``usage - inactive_file``) at the start and
   the end.

Prints a table and writes JSON to ``benchmarks/results/soak.json``. Memory
growth is reported, not judged: Python's allocator keeps some freed memory,
so a few MB of growth is expected; steady growth per session is what to look for.

    .venv/bin/python benchmarks/soak.py                      # about 4 minutes on 2 cores
    .venv/bin/python benchmarks/soak.py --sessions 20 --actions 200
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def container_mb(client: Any, container_id: str) -> float:
    stats = client.api.stats(container_id, stream=False)
    mem = stats.get("memory_stats", {})
    usage = mem.get("usage", 0)
    inactive = mem.get("stats", {}).get("inactive_file", mem.get("stats", {}).get("total_inactive_file", 0))
    return (usage - inactive) / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--actions", type=int, default=1000)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "soak.json"))
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import docker

    from sandbox import DockerSandbox
    from sandbox.container import LABEL

    client = docker.from_env()

    def lookup(key: str) -> dict:
        return {"key": key, "values": list(range(10))}

    results: dict[str, Any] = {"sessions": args.sessions, "actions": args.actions, "cores": os.cpu_count()}

    # Warm up imports and the allocator once, so the first session's imports are not "growth".
    with DockerSandbox(functions=[lookup]) as sb:
        sb.run("print(lookup('warm'))")
    gc.collect()
    start_rss = rss_mb()
    started = time.monotonic()
    samples = []
    for i in range(args.sessions):
        with DockerSandbox(functions=[lookup]) as sb:
            r = sb.run(f"print(lookup('s{i}')['values'][-1])")
            assert r.stdout == "9\n", r
        if i % 10 == 9:
            gc.collect()
            samples.append(round(rss_mb(), 1))
    gc.collect()
    end_rss = rss_mb()
    time.sleep(2)
    left = client.api.containers(all=True, filters={"label": f"{LABEL}.pid={os.getpid()}"})
    results["phase1"] = {
        "host_rss_start_mb": round(start_rss, 1), "host_rss_end_mb": round(end_rss, 1),
        "host_rss_growth_mb": round(end_rss - start_rss, 1), "rss_every_10_sessions_mb": samples,
        "seconds": round(time.monotonic() - started, 1), "containers_left": len(left),
    }

    with DockerSandbox(functions=[lookup]) as sb:
        sb.run("state = []")
        gc.collect()
        start_rss = rss_mb()
        start_box = container_mb(client, sb.container.id)
        started = time.monotonic()
        for i in range(args.actions):
            r = sb.run(f"state.append(lookup('a{i}'))\nprint(len(state))")
            assert r.stdout == f"{i + 2 - 1}\n", r
        gc.collect()
        end_rss = rss_mb()
        end_box = container_mb(client, sb.container.id)
        results["phase2"] = {
            "host_rss_start_mb": round(start_rss, 1), "host_rss_end_mb": round(end_rss, 1),
            "host_rss_growth_mb": round(end_rss - start_rss, 1),
            "container_start_mb": round(start_box, 1), "container_end_mb": round(end_box, 1),
            "container_growth_mb": round(end_box - start_box, 1),
            "seconds": round(time.monotonic() - started, 1),
            "note": "the container keeps `state` (the code's own list of 1,000 small dicts) on purpose",
        }

    from rich.console import Console
    from rich.table import Table

    table = Table(title="soak")
    for col in ("phase", "measurement", "start", "end", "growth"):
        table.add_column(col)
    p1, p2 = results["phase1"], results["phase2"]
    table.add_row(f"{args.sessions} sessions in sequence", "host RSS (MB)", str(p1["host_rss_start_mb"]),
                  str(p1["host_rss_end_mb"]), str(p1["host_rss_growth_mb"]))
    table.add_row("", "containers left behind", "", str(p1["containers_left"]), "")
    table.add_row("", "wall time (s)", "", str(p1["seconds"]), "")
    table.add_row(f"{args.actions} actions in one session", "host RSS (MB)", str(p2["host_rss_start_mb"]),
                  str(p2["host_rss_end_mb"]), str(p2["host_rss_growth_mb"]))
    table.add_row("", "container memory (MB)", str(p2["container_start_mb"]), str(p2["container_end_mb"]),
                  str(p2["container_growth_mb"]))
    table.add_row("", "wall time (s)", "", str(p2["seconds"]), "")
    Console().print(table)
    print("host RSS every 10 sessions (MB):", p1["rss_every_10_sessions_mb"])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
