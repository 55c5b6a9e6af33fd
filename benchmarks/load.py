#!/usr/bin/env python3
"""Load held and faults survived, in figures (a script, not a test: it never fails on a number).

1. ``codeact mcp serve --transport http`` (docker sandboxes) with ``--clients``
   SDK clients at once (default 32), each keeping its own state over 20
   calls (set a variable, read it back, write a file, list files): calls,
   errors, cross-talk (a client that sees another's variable or misses its own
   file), p50/p99 latency per call, the server's peak memory (its process and
   children) and the host's used memory above the start, and the containers
   left once the clients leave.
2. 8 clients SIGKILLed in the middle of a call: the containers left, and how
   long until none were (they go with the server's idle timeout, here 15 s:
   a killed client cannot end its session).
3. Eight processes writing one run log at once (4 ``codeact run``, 2
   ``codeact chat`` fed from stdin, ``codeact bench`` with the oracle,
   restricted backend): runs recorded against runs expected, "database is
   locked" seen, SQLite's ``integrity_check``.

Prints a table and writes benchmarks/results/load.json.

    .venv/bin/python benchmarks/load.py                # about 3 minutes on 2 cores
    .venv/bin/python benchmarks/load.py --clients 8    # smaller
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.mcp_load import (  # noqa: E402 - after the path is set
    MemorySampler, kill_mid_call, mcp_server, run_load, summary, wait_no_containers)


def mcp_rows(clients: int, calls: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, mcp_server(max_sessions=clients + 8, idle_timeout=15, timeout=30,
                    env={"CODEACT_OUTPUT_DIR": str(Path(tmp) / "out")}) as (url, server):
        with MemorySampler(server.pid) as mem:
            result = run_load(url, clients, calls)
        left, gone_after = wait_no_containers(server.pid, timeout=120)
        load = {**summary(result), "server_peak_rss_mb": round(mem.server_peak_mb, 1),
                "host_used_peak_over_start_mb": round(mem.host_used_peak_mb - mem.host_used_start_mb, 1),
                "containers_left": len(left), "containers_gone_after_s": round(gone_after, 1)}
        reached = kill_mid_call(url, clients=8)
        left_killed, killed_gone_after = wait_no_containers(server.pid, timeout=180)
        killed = {"clients": 8, "mid_call": reached, "containers_left": len(left_killed),
                  "containers_gone_after_s": round(killed_gone_after, 1), "idle_timeout_s": 15,
                  "server_alive": server.poll() is None}
    return {"mcp": load, "killed": killed}


def writers_row() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        out = d / "bench"
        db = out / "runs.db"
        replies = d / "r.json"
        replies.write_text(json.dumps(["```python\nx = sum(range(10))\nprint(x)\nfinal_answer(x)\n```"] * 40))
        env = {**os.environ, "PYTHONPATH": str(ROOT), "CODEACT_DB": str(db), "CODEACT_OUTPUT_DIR": str(d / "out"),
               "CODEACT_SCRIPTED_REPLIES": str(replies), "CODEACT_SNAPSHOT_DIR": str(d / "snaps")}
        py = [sys.executable, "-m", "codeact.cli"]
        pipe: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, "env": env}
        started = time.perf_counter()
        procs = [subprocess.Popen(py + ["run", f"run {i}", "--backend", "restricted"], **pipe) for i in range(4)]
        for i in range(3):
            chat = subprocess.Popen(py + ["chat", "--backend", "restricted"], stdin=subprocess.PIPE, **pipe)
            chat.stdin.write(f"chat {i} turn 1\nchat {i} turn 2\n")  # type: ignore[union-attr]
            chat.stdin.close()  # type: ignore[union-attr]
            chat.stdin = None
            procs.append(chat)
        bench_env = {k: v for k, v in env.items() if k != "CODEACT_SCRIPTED_REPLIES"}
        procs.append(subprocess.Popen(
            py + ["bench", "run", "--suite", "tool-chains", "--model", "oracle", "--agents", "codeact,react-json",
                  "--backend", "restricted", "--task", "shop-cheapest-lamp-in-stock", "--task",
                  "shop-audio-average-stars", "--concurrency", "2", "--out", str(out), "--no-plots"],
            **{**pipe, "env": bench_env}))
        texts, codes = [], []
        for proc in procs:
            o, e = proc.communicate(timeout=600)
            texts.append(o + e)
            codes.append(proc.returncode)
        wall = time.perf_counter() - started
        conn = sqlite3.connect(db)
        try:
            runs = conn.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall()
            integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        finally:
            conn.close()
    recorded = sum(n for _, n in runs)
    return {"processes": len(procs), "runs_expected": 4 + 6 + 4, "runs_recorded": recorded,
            "statuses": dict(runs), "locked_messages": sum("locked" in t.lower() for t in texts),
            "exit_codes": codes, "integrity_check": integrity, "wall_s": round(wall, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=32, help="MCP clients at once (default 32)")
    parser.add_argument("--calls", type=int, default=20, help="calls per client (default 20)")
    args = parser.parse_args()
    load_before = os.getloadavg()
    mcp = mcp_rows(args.clients, args.calls)
    writers = writers_row()
    m, k = mcp["mcp"], mcp["killed"]
    rows = [
        (f"MCP: {m['clients']} clients x {args.calls} calls", f"{m['calls']} calls, {m['errors']} errors, "
         f"{m['crosstalk']} cross-talk"),
        ("  latency per call p50 / p99", f"{m['p50_ms']:.0f} ms / {m['p99_ms']:.0f} ms (wall {m['wall_s']:.0f} s)"),
        ("  memory: server peak / host above start", f"{m['server_peak_rss_mb']:.0f} MB / "
         f"{m['host_used_peak_over_start_mb']:.0f} MB"),
        ("  containers left after the clients left", f"{m['containers_left']} (gone after "
         f"{m['containers_gone_after_s']:.1f} s)"),
        ("MCP: 8 clients SIGKILLed mid-call", f"{k['mid_call']} mid-call, {k['containers_left']} containers left "
         f"(gone after {k['containers_gone_after_s']:.0f} s, idle timeout {k['idle_timeout_s']} s); "
         f"server {'up' if k['server_alive'] else 'DOWN'}"),
        (f"run log: {writers['processes']} processes writing at once",
         f"{writers['runs_recorded']} of {writers['runs_expected']} runs recorded, "
         f"{writers['locked_messages']} 'locked', integrity {writers['integrity_check']}"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'load / fault':<{width}}  result")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print(f"load average before: {', '.join(f'{x:.2f}' for x in load_before)}; after: "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    out = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load_before": load_before,
                       "load_after": os.getloadavg()}, "mcp": m, "killed": k, "writers": writers}
    results = ROOT / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "load.json").write_text(json.dumps(out, indent=2))
    print(f"wrote {results / 'load.json'}")


if __name__ == "__main__":
    main()
