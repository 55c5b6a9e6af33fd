#!/usr/bin/env python3
"""Thousands of tools for the price of a few: the ``many-tools`` suite, three agents, one run (a script, not a test).

Runs the suite (25 tasks; 364 tools on 12 MCP servers the suite starts) with
the oracle model through the bench harness, as ``codeact bench run`` does,
for three agents side by side:

* ``codeact-all``: CodeAct with every tool's stub in the prompt;
* ``codeact-on-demand``: CodeAct with a catalogue of the namespaces; the
  oracle finds its tools with ``search_tools`` and the task's own wording,
  reads the printed results and imports what they name (it never uses a
  tool name it did not see in an observation);
* ``react-fc``: ReAct with native function calling, every schema in every request.

Every request's prompt is counted with the same tokenizer (``cl100k_base``,
bundled with codeact): the messages and, for function calling, the schemas.
It prints per task and in total the prompt tokens, model calls and oracle
success of each agent, the ratio on-demand / all (target: at most 10 % at
the same success), and the search quality: for each task, whether every tool
it needs is in the top 5 of ``search_tools(<the task's wording>)``.
Results go to ``benchmarks/results/many_tools_bench.json``.

    .venv/bin/python benchmarks/many_tools_bench.py
    .venv/bin/python benchmarks/many_tools_bench.py --task 'customer-*' --keep /tmp/many-tools
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SUITE = "many-tools"
AGENTS = ["codeact-all", "codeact-on-demand", "react-fc"]
TARGET_RATIO = 0.10


def model_factory(task, kind, ctx):  # the bench's factory signature
    from codeact.bench.suites.many_tools_oracle import oracle_factory

    return oracle_factory(task, kind, ctx)


def search_quality(tasks) -> list[dict]:
    from codeact.bench.suites import many_tools
    from codeact.catalog import ToolCatalog

    toolset = many_tools.shared_toolset()
    catalog = ToolCatalog(list(toolset), descriptions=toolset.group_descriptions)
    rows = []
    for task in tasks:
        needed = many_tools.NEEDED[task.id]
        top = [e.name for e in catalog.search(task.instruction, limit=5)]
        rows.append({"task": task.id, "needed": needed, "top5": top, "hit": all(n in top for n in needed)})
    return rows


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
            for r in rows]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=3)
    parser.add_argument("--backend", default="docker", choices=["docker", "local"])
    parser.add_argument("--task", action="append", default=[], metavar="GLOB", help="only these tasks (repeatable)")
    parser.add_argument("--keep", metavar="DIR", help="write the results directory here and keep it")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "many_tools_bench.json"))
    args = parser.parse_args()

    from codeact.bench import BenchConfig, load_suite, run_bench, select_tasks
    from codeact.bench.suites import many_tools
    from codeact.catalog import ToolCatalog, count_tokens, tokenizer_name

    out = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="codeact-many-tools-")) / "results"
    if out.exists():
        shutil.rmtree(out)
    started = time.perf_counter()
    suite = load_suite(SUITE)
    tasks = select_tasks(list(suite.tasks), args.task)
    toolset = many_tools.shared_toolset()  # started once; every episode shares it
    catalog = ToolCatalog(list(toolset), descriptions=toolset.group_descriptions)
    config = BenchConfig(suites=[SUITE], agents=AGENTS, model="oracle", concurrency=args.concurrency,
                         backend=args.backend, out=out, tasks=args.task, episode_timeout=300)
    try:
        run = run_bench(config, model=model_factory, plots=False)
        quality = search_quality(tasks)
    finally:
        many_tools.close_servers()
    wall = time.perf_counter() - started

    by = {(e.task, e.agent): e for e in run.episodes}
    ids = [t.id for t in tasks]
    rows = []
    for tid in ids:
        row = [tid]
        for agent in AGENTS:
            e = by.get((tid, agent))
            row.append(f"{e.input_tokens:,} / {e.model_calls} / {'ok' if e.success else 'FAIL'}" if e else "-")
        q = next(r for r in quality if r["task"] == tid)
        all_e, od_e = by.get((tid, "codeact-all")), by.get((tid, "codeact-on-demand"))
        ratio = od_e.input_tokens / all_e.input_tokens if all_e and od_e and all_e.input_tokens else float("nan")
        row += [f"{ratio:.1%}", "yes" if q["hit"] else "no"]
        rows.append(row)
    totals: dict[str, dict] = {}
    for agent in AGENTS:
        eps = [by[(tid, agent)] for tid in ids if (tid, agent) in by]
        totals[agent] = {"prompt_tokens": sum(e.input_tokens for e in eps),
                         "model_calls": sum(e.model_calls for e in eps),
                         "successes": sum(1 for e in eps if e.success), "episodes": len(eps)}
    ratio = totals["codeact-on-demand"]["prompt_tokens"] / max(totals["codeact-all"]["prompt_tokens"], 1)
    hits = sum(1 for q in quality if q["hit"])
    rows.append(["TOTAL"] + [f"{t['prompt_tokens']:,} / {t['model_calls']} / {t['successes']}/{t['episodes']}"
                             for t in totals.values()] + [f"{ratio:.1%}", f"{hits}/{len(quality)}"])
    headers = ["task"] + [f"{a}: prompt tok / calls / ok" for a in AGENTS] + ["on_demand/all", "top-5 hit"]

    stubs = count_tokens(catalog.stubs())
    print(f"many-tools: {len(tasks)} tasks, {len(catalog)} tools on {len(toolset.configs)} MCP servers; "
          f"oracle model; tokens counted with {tokenizer_name()} (messages + function schemas)")
    print(f"every stub in a prompt: {stubs:,} tokens; the on-demand catalogue: "
          f"{count_tokens(catalog.render()):,} tokens\n")
    print(table(headers, rows))
    same = totals["codeact-on-demand"]["successes"] == totals["codeact-all"]["successes"]
    print(f"\non_demand uses {ratio:.1%} of all's prompt tokens (target <= {TARGET_RATIO:.0%}): "
          f"{'met' if ratio <= TARGET_RATIO and same else 'MISSED'}; success all "
          f"{totals['codeact-all']['successes']}/{totals['codeact-all']['episodes']}, on_demand "
          f"{totals['codeact-on-demand']['successes']}/{totals['codeact-on-demand']['episodes']}, react-fc "
          f"{totals['react-fc']['successes']}/{totals['react-fc']['episodes']}")
    print(f"search quality: every needed tool in the top 5 of search_tools(task wording) for {hits} of "
          f"{len(quality)} tasks ({hits / max(len(quality), 1):.0%})")
    print(f"wall time {wall:.0f} s (servers' start included)")
    misses = [q for q in quality if not q["hit"]]
    for q in misses:
        print(f"  top-5 miss {q['task']}: needs {', '.join(q['needed'])}; got {', '.join(q['top5'])}")

    result = {
        "suite": "many-tools", "tasks": len(tasks), "tools": len(catalog), "servers": len(toolset.configs),
        "tokenizer": tokenizer_name(), "stub_tokens_all": stubs, "catalogue_tokens": count_tokens(catalog.render()),
        "agents": AGENTS, "totals": totals, "on_demand_over_all": ratio, "target": TARGET_RATIO,
        "target_met": ratio <= TARGET_RATIO and same, "search_top5_hit_rate": hits / max(len(quality), 1),
        "search": quality, "wall_time_s": wall, "backend": args.backend, "concurrency": args.concurrency,
        "per_task": [{"task": tid, **{agent: {"prompt_tokens": by[(tid, agent)].input_tokens,
                                              "model_calls": by[(tid, agent)].model_calls,
                                              "success": by[(tid, agent)].success,
                                              "check": by[(tid, agent)].check}
                                      for agent in AGENTS if (tid, agent) in by}} for tid in ids],
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.json}")
    if not args.keep:
        shutil.rmtree(out.parent, ignore_errors=True)
    return 0 if all(t["successes"] == t["episodes"] for t in totals.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
