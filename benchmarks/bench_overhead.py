#!/usr/bin/env python3
"""The bench harness end to end with the oracle model (a script, not a test).

Runs exactly what a user runs::

    codeact bench run --suite tool-chains,data-analysis --agents codeact,react-fc,react-json,react-text \\
        --model oracle --concurrency 4 --backend docker --out DIR

then reads the results directory and prints:

* the fewest-calls table: per suite and agent, the model calls, tokens and
  tool calls one episode needs when the model is perfect (the oracle), and
  the multiple of CodeAct's calls: the measured upper bound of what
  collapsing ReAct steps into code actions saves;
* the run's wall time (the command, interpreter start and report included);
* the harness's own overhead per episode (``harness_time``: everything in an
  episode that is neither the agent's run nor waiting for a sandbox: fresh
  tools, the oracle, the checker, the records), the agent loop's overhead
  (run time minus model, sandbox and tool time) and the wait for a sandbox.

Then, unless ``--bfcl-per-category 0``, a sample of the BFCL multi-turn
suite (N tasks per category, all four agents, the same options): the
harness's overhead per multi-turn episode and per user turn.

Targets: every oracle episode succeeds, and the run finishes within 180 s
on a 2-core machine. Missed targets are reported, not fatal; a run that
fails (non-zero exit) makes the exit status 1. Results go to
``benchmarks/results/bench_overhead.json``.

    .venv/bin/python benchmarks/bench_overhead.py
    .venv/bin/python benchmarks/bench_overhead.py --concurrency 2 --keep /tmp/bench-results
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
TARGET_WALL_S = 180.0
AGENTS = ["codeact", "react-fc", "react-json", "react-text"]


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


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
            for r in rows]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--backend", default="docker", choices=["docker", "local"])
    parser.add_argument("--keep", metavar="DIR", help="write the results directory here and keep it")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "bench_overhead.json"))
    parser.add_argument("--bfcl-per-category", type=int, default=5, metavar="N",
                        help="also run N BFCL multi-turn tasks per category (0: skip; needs bfcl-eval, see docs)")
    args = parser.parse_args()

    out = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="codeact-bench-")) / "results"
    if out.exists():
        shutil.rmtree(out)
    codeact = Path(sys.executable).parent / "codeact"
    launcher = [str(codeact)] if codeact.exists() else [sys.executable, "-m", "codeact.cli"]
    command = [*launcher,
               "bench", "run", "--suite", "tool-chains,data-analysis", "--agents", ",".join(AGENTS),
               "--model", "oracle", "--concurrency", str(args.concurrency), "--backend", args.backend,
               "--out", str(out)]
    load_before = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}, "
          f"load {load_before[0]:.2f}")
    print("$ " + " ".join(command[:1] + ["..."] + command[-12:]))
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    load_after = os.getloadavg()
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
        print(f"the bench run failed (exit {proc.returncode})")
        return 1

    report = json.loads((out / "report.json").read_text())
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines() if line.strip()]
    failed = [e["key"] for e in episodes if not e["success"]]

    rows = []
    for suite, agents in report["by_suite"].items():
        base = agents["codeact"]["model_calls"]["mean"] if "codeact" in agents else None
        for agent in AGENTS:
            m = agents.get(agent)
            if m is None:
                continue
            calls = m["model_calls"]["mean"]
            rows.append([suite, agent, f"{m['success_rate']['mean'] * 100:.0f}%", f"{calls:.2f}",
                         f"{calls / base:.2f}x" if base else "-", f"{m['input_tokens']['mean']:,.0f}",
                         f"{m['output_tokens']['mean']:,.0f}", f"{m['tool_calls']['mean']:.1f}"])
    print("\nFewest model calls and tokens per episode (oracle model):\n")
    print(table(["suite", "agent", "success", "model calls", "vs codeact", "prompt tok", "completion tok",
                 "tool calls"], rows))

    overhead: dict[str, dict[str, dict[str, float]]] = {}
    orows = []
    for agent in AGENTS:
        mine = [e for e in episodes if e["agent"] == agent]
        if not mine:
            continue
        work = [e["sandbox_time"] if agent == "codeact" else e["tool_time"] for e in mine]
        agent_loop = [max(0.0, e["run_time"] - e["model_time"] - w) for e, w in zip(mine, work, strict=True)]
        overhead[agent] = {"harness": ms([e["harness_time"] for e in mine]), "agent_loop": ms(agent_loop),
                           "sandbox_wait": ms([e["setup_time"] for e in mine]),
                           "episode_wall": ms([e["wall_time"] for e in mine])}
        o = overhead[agent]
        orows.append([agent, str(len(mine)), f"{o['harness']['mean']:.1f}", f"{o['harness']['median']:.1f}",
                      f"{o['harness']['p95']:.1f}", f"{o['agent_loop']['median']:.1f}",
                      f"{o['sandbox_wait']['median']:.0f}", f"{o['episode_wall']['median']:.0f}"])
    all_harness = ms([e["harness_time"] for e in episodes])
    print("\nPer-episode overhead (ms):\n")
    print(table(["agent", "episodes", "harness mean", "harness median", "harness p95", "agent loop median",
                 "sandbox wait median", "episode wall median"], orows))
    print(f"\nharness overhead per episode, all agents: mean {all_harness['mean']:.1f} ms, "
          f"median {all_harness['median']:.1f} ms, p95 {all_harness['p95']:.1f} ms")
    met_wall = wall <= TARGET_WALL_S
    print(f"\nwall time of the run: {wall:.1f} s for {len(episodes)} episodes at concurrency {args.concurrency} "
          f"(target <= {TARGET_WALL_S:.0f} s: {'met' if met_wall else 'MISSED'}); "
          f"load {load_before[0]:.2f} -> {load_after[0]:.2f}")
    print(f"oracle episodes succeeded: {len(episodes) - len(failed)}/{len(episodes)}"
          + (f"  FAILED: {', '.join(failed)}" if failed else ""))

    multi_turn = bfcl_overhead(command, out.parent / "bfcl", args.bfcl_per_category) \
        if args.bfcl_per_category > 0 else None

    result = {
        "multi_turn": multi_turn,
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "load_before": load_before,
                    "load_after": load_after},
        "command": command, "wall_s": wall, "target_wall_s": TARGET_WALL_S, "met_wall": met_wall,
        "episodes": len(episodes), "failed": failed, "fewest_calls": report["by_suite"], "overhead_ms": overhead,
        "harness_overhead_ms": all_harness, "results_dir": str(out),
    }
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {path}" + (f"; results kept in {out}" if args.keep else ""))
    if not args.keep:
        shutil.rmtree(out.parent, ignore_errors=True)
    return 0


def bfcl_overhead(command: list[str], out: Path, per_category: int) -> dict[str, object] | None:
    """The harness's overhead on multi-turn episodes: a BFCL sample, all four agents, the same options."""
    suite = command.index("--suite") + 1
    run = [*command[:suite], "bfcl-multi-turn", *command[suite + 1:]]
    run[run.index("--out") + 1] = str(out)
    for category in ("base", "miss_func", "miss_param", "long_context"):
        for i in range(per_category):
            run += ["--task", f"multi_turn_{category}_{i * 200 // per_category}"]
    started = time.perf_counter()
    proc = subprocess.run(run + ["--no-plots"], capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        print(f"\nthe BFCL multi-turn sample failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
        return None
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines() if line.strip()]
    rows, overhead = [], {}
    for agent in AGENTS:
        mine = [e for e in episodes if e["agent"] == agent]
        if not mine:
            continue
        turns = sum(e["user_turns"] for e in mine)
        overhead[agent] = {"harness": ms([e["harness_time"] for e in mine]),
                           "harness_per_user_turn_ms": sum(e["harness_time"] for e in mine) * 1000 / turns,
                           "calls_per_user_turn": sum(e["model_calls"] for e in mine) / turns,
                           "solved": sum(e["success"] for e in mine), "episodes": len(mine)}
        o = overhead[agent]
        rows.append([agent, f"{o['solved']}/{o['episodes']}", f"{o['harness']['mean']:.1f}",
                     f"{o['harness']['median']:.1f}", f"{o['harness_per_user_turn_ms']:.1f}",
                     f"{o['calls_per_user_turn']:.2f}"])
    print(f"\nBFCL multi-turn sample ({len(episodes)} episodes in {wall:.1f} s): per-episode overhead (ms)\n")
    print(table(["agent", "solved", "harness mean", "harness median", "harness per user turn",
                 "calls / user turn"], rows))
    return {"wall_s": wall, "episodes": len(episodes), "overhead": overhead}


if __name__ == "__main__":
    sys.exit(main())
