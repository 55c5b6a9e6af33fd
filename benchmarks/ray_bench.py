#!/usr/bin/env python3
"""Harness overhead per episode: the same oracle sweep run locally and on a Ray cluster (a script, not a test).

Starts a two-node Ray cluster on this machine inside a private network
namespace (``tests/ray_cluster.py``: ``unshare --net``, loopback only; needs
root and ``pip install 'codeact[ray]'``), then runs exactly what a user runs,
twice, from inside the namespace::

    codeact bench run --suite tool-chains --agents codeact,react-json --model oracle --concurrency 2 --out A
    codeact bench run ... --out B --ray 127.0.0.1:6379 --ray-cpus-per-episode 1

with as many episodes at once in both (``--concurrency`` = nodes x CPUs per
node). It prints, per executor and agent:

* ``harness`` the harness's own work inside an episode (tools, oracle,
  checker, records: ``harness_time``) and ``sandbox wait`` (``setup_time``:
  a warm pool locally, a fresh sandbox per episode on Ray);
* ``episode wall`` one episode from start to end where it ran;
* ``slot overhead`` = (sweep wall x slots - sum of episode walls) / episodes:
  what each episode costs beyond its own wall time (interpreter start, Ray
  connect and dispatch, sending results back, writing them, closing
  sandboxes), i.e. the price of running it through the executor.

Every episode must succeed with the same model and tool calls on both.
Timings are reported, never asserted. Results go to
``benchmarks/results/ray_bench.json``.

    sudo .venv/bin/python benchmarks/ray_bench.py
    sudo .venv/bin/python benchmarks/ray_bench.py --agents codeact,react-fc,react-json,react-text --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.ray_cluster import RayCluster, unavailable_reason  # noqa: E402 - importable once ROOT is on sys.path


def quantile(values: list[float], q: float) -> float:
    data = sorted(values)
    if not data:
        return float("nan")
    pos = (len(data) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def ms(values: list[float]) -> dict[str, float]:
    v = [x * 1000 for x in values]
    return {"mean": statistics.fmean(v), "median": statistics.median(v), "p95": quantile(v, 0.95), "n": len(v)}


def _episode_wall(runs: dict[str, Any], executor: str) -> float:
    return float(runs[executor]["per_agent_ms"]["all"]["episode_wall"]["median"])


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
            for r in rows]
    return "\n".join(out)


def sweep(cluster: RayCluster, command: list[str], out: Path) -> tuple[float, list[dict[str, Any]]]:
    started = time.perf_counter()
    cluster.run(command + ["--out", str(out)], timeout=3600)
    wall = time.perf_counter() - started
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines() if line.strip()]
    return wall, episodes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="tool-chains")
    parser.add_argument("--agents", default="codeact,react-json")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--cpus-per-node", type=int, default=1, help="Ray CPUs per node (2 nodes)")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "ray_bench.json"))
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason is not None:
        print(f"cannot start a Ray cluster here: {reason}")
        return 1

    slots = 2 * args.cpus_per_node
    codeact = str(Path(sys.executable).parent / "codeact")
    base = [codeact, "bench", "run", "--suite", args.suite, "--agents", args.agents, "--model", "oracle",
            "--repeats", str(args.repeats), "--no-plots", "--json"]
    local_cmd = base + ["--concurrency", str(slots)]
    tmp = Path(tempfile.mkdtemp(prefix="codeact-ray-bench-"))
    load_before = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}, "
          f"load {load_before[0]:.2f}")
    started = time.perf_counter()
    cluster = RayCluster(workers=1, cpus_per_node=args.cpus_per_node)
    cluster_start = time.perf_counter() - started
    print(f"Ray cluster (head + 1 node, {args.cpus_per_node} CPU each) up in {cluster_start:.1f} s")
    try:
        ray_cmd = base + ["--ray", cluster.address, "--ray-cpus-per-episode", "1"]
        runs = {}
        for name, command in (("local", local_cmd), ("ray", ray_cmd)):
            print("$ " + " ".join(Path(command[0]).name if i == 0 else c for i, c in enumerate(command)))
            runs[name] = sweep(cluster, command, tmp / name)
    finally:
        cluster.close()
    load_after = os.getloadavg()

    def calls(episodes: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
        return {e["key"]: (e["success"], e["model_calls"], e["tool_calls"]) for e in episodes}

    same = calls(runs["local"][1]) == calls(runs["ray"][1])
    failed = {name: {e["key"]: f"{e['status']}: {e['error'] or e['check']}"[:300] for e in eps if not e["success"]}
              for name, (_, eps) in runs.items()}

    rows, result_runs = [], {}
    for name, (wall, episodes) in runs.items():
        slot = (wall * slots - sum(e["wall_time"] for e in episodes)) / len(episodes)
        per_agent = {}
        for agent in [*args.agents.split(","), "all"]:
            mine = [e for e in episodes if agent in ("all", e["agent"])]
            m = {"harness": ms([e["harness_time"] for e in mine]), "sandbox_wait": ms([e["setup_time"] for e in mine]),
                 "episode_wall": ms([e["wall_time"] for e in mine]),
                 "outside_run": ms([e["wall_time"] - e["run_time"] for e in mine])}
            per_agent[agent] = m
            rows.append([name, agent, str(len(mine)), f"{m['harness']['median']:.1f}", f"{m['harness']['p95']:.1f}",
                         f"{m['sandbox_wait']['median']:.0f}", f"{m['episode_wall']['median']:.0f}",
                         f"{slot * 1000:.0f}" if agent == "all" else "", f"{wall:.1f}" if agent == "all" else ""])
        result_runs[name] = {"wall_s": wall, "episodes": len(episodes), "slot_overhead_ms": slot * 1000,
                             "per_agent_ms": per_agent}
    print(f"\nThe same sweep ({args.suite}, {args.agents}, oracle, repeats {args.repeats}),"
          f" {slots} episodes at once:\n")
    print(table(["executor", "agent", "episodes", "harness median ms", "harness p95 ms", "sandbox wait median ms",
                 "episode wall median ms", "slot overhead ms/episode", "sweep wall s"], rows))
    extra = result_runs["ray"]["slot_overhead_ms"] - result_runs["local"]["slot_overhead_ms"]
    print(f"\nRay costs {extra:+.0f} ms of slot time per episode over the local run; "
          f"episode walls: local median {_episode_wall(result_runs, 'local'):.0f} ms, "
          f"ray {_episode_wall(result_runs, 'ray'):.0f} ms")
    print(f"same success, model calls and tool calls per episode on both: {'yes' if same else 'NO'}; "
          f"failed: local {len(failed['local'])}, ray {len(failed['ray'])}; load {load_before[0]:.2f} -> "
          f"{load_after[0]:.2f}")

    result = {"machine": {"cores": os.cpu_count(), "python": platform.python_version(), "load_before": load_before,
                          "load_after": load_after},
              "sweep": {"suite": args.suite, "agents": args.agents, "repeats": args.repeats, "slots": slots},
              "cluster_start_s": cluster_start, "runs": result_runs, "same_calls": same, "failed": failed}
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    for name, bad in failed.items():
        for key, why in bad.items():
            print(f"FAILED on {name}: {key}: {why}")
    print(f"\nwrote {path}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if same and not any(failed.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
