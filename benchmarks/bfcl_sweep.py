#!/usr/bin/env python3
"""The whole BFCL multi-turn suite (800 tasks) x all four agents with the oracle model (a script, not a test).

Runs exactly what a user runs::

    codeact bench run --suite bfcl-multi-turn --agents codeact,react-fc,react-json,react-text \\
        --model oracle --concurrency 4 --backend docker --out DIR --no-plots

and prints, per agent: episodes, success (and per category, BFCL's headline),
model calls, turns and tokens per user turn, and the harness's own time per
episode; then the run's wall time. Targets: every agent solves every task
(the oracle), CodeAct's model calls per user turn = 1.00, and the sweep within
900 s on a 2-core machine. Missed targets are reported, not fatal; a run that
fails (non-zero exit) makes the exit status 1. Results go to
``benchmarks/results/bfcl_sweep.json``.

    .venv/bin/python benchmarks/bfcl_sweep.py
    .venv/bin/python benchmarks/bfcl_sweep.py --task 'multi_turn_base_*'      # one category
    .venv/bin/python benchmarks/bfcl_sweep.py --ray HEAD:6379                 # on a Ray cluster
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_WALL_S = 900.0
AGENTS = ["codeact", "react-fc", "react-json", "react-text"]


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
            for r in rows]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--backend", default="docker", choices=["docker", "local"])
    parser.add_argument("--task", action="append", default=[], help="only these task ids (glob; repeatable)")
    parser.add_argument("--ray", metavar="ADDRESS", help="run the episodes on this Ray cluster")
    parser.add_argument("--keep", metavar="DIR", help="write the results directory here and keep it")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "bfcl_sweep.json"))
    args = parser.parse_args()

    out = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="codeact-bfcl-")) / "results"
    if out.exists():
        shutil.rmtree(out)
    command = [str(Path(sys.executable).parent / "codeact"), "bench", "run", "--suite", "bfcl-multi-turn",
               "--agents", ",".join(AGENTS), "--model", "oracle", "--concurrency", str(args.concurrency),
               "--backend", args.backend, "--out", str(out), "--no-plots", "--json"]
    for t in args.task:
        command += ["--task", t]
    if args.ray:
        command += ["--ray", args.ray]
    load_before = os.getloadavg()
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    load_after = os.getloadavg()
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n", file=sys.stderr)
        print(f"the sweep failed (exit {proc.returncode})", file=sys.stderr)
        return 1
    report = json.loads((out / "report.json").read_text())
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines() if line.strip()]
    rows = []
    result_rows = []
    for row in report["multi_turn"]:
        mine = [e for e in episodes if e["agent"] == row["agent"]]
        failed = sorted(e["task"] for e in mine if not e["success"])
        harness = statistics.fmean(e["harness_time"] for e in mine) * 1000
        wall_ep = statistics.fmean(e["wall_time"] for e in mine) * 1000
        rows.append([row["agent"], str(row["episodes"]), f"{row['success'] * 100:.1f}%",
                     *[f"{row['categories'].get(c, float('nan')) * 100:.1f}%"
                       for c in ("base", "miss_func", "miss_param", "long_context")],
                     f"{row['model_calls_per_user_turn']:.2f}", f"{row['turns_per_user_turn']:.2f}",
                     f"{row['tokens_per_user_turn']:,.0f}", f"{wall_ep:.0f}", f"{harness:.1f}"])
        result_rows.append({**row, "failed": failed, "wall_ms_per_episode": wall_ep,
                            "harness_ms_per_episode": harness})
    print(table(["agent", "episodes", "success", "base", "miss_func", "miss_param", "long_ctx", "calls/uturn",
                 "turns/uturn", "tokens/uturn", "ms/episode", "harness ms"], rows))
    total = len(episodes)
    print(f"\n{total} episodes in {wall:.0f} s (target {TARGET_WALL_S:.0f} s, "
          f"{'met' if wall <= TARGET_WALL_S else 'MISSED'}); load average {load_before[0]:.1f} before, "
          f"{load_after[0]:.1f} after, on {os.cpu_count()} cores")
    codeact = next((r for r in result_rows if r["agent"] == "codeact"), None)
    if codeact is not None:
        print(f"codeact model calls per user turn: {codeact['model_calls_per_user_turn']:.2f} (target 1.00)")
    for r in result_rows:
        if r["failed"]:
            print(f"{r['agent']}: {len(r['failed'])} not solved: {', '.join(r['failed'][:10])}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({
        "command": " ".join(command[1:]), "wall_s": wall, "episodes": total, "target_wall_s": TARGET_WALL_S,
        "load_before": load_before, "load_after": load_after, "cpus": os.cpu_count(),
        "machine": platform.platform(), "python": platform.python_version(), "agents": result_rows,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }, indent=2))
    print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
