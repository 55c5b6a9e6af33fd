#!/usr/bin/env python3
"""Compaction of long sessions (codeact.compaction): prompt tokens per turn with and without it (a script, not a test).

A 100-turn scripted chat (ScriptedModel: the model's text is scripted, the
kernel is real): turn k runs code that makes ``xk`` (a list of 50 numbers) and
prints ~1,500 characters, then answers in one line. Run twice:

* ``without``: no budget (``history_budget=None``, no known window): the prompt is
  the whole history, as before compaction existed;
* ``with``: a model whose context window is ``--window`` tokens (default 8,000;
  the budget is 75% of it): the prompt is folded when it would pass the budget.

Printed: the prompt tokens of each 10th turn's first request (the estimate the
compaction uses, :func:`codeact.context_window.count_tokens`), and what
compaction costs per turn: the seconds of its ``Compacted`` events (folding,
reading the kernel's namespace), median and max over all turns and over the
turns that compacted. JSON goes to ``benchmarks/results/compaction_bench.json``.

    .venv/bin/python benchmarks/compaction_bench.py                    # local backend, about a minute
    .venv/bin/python benchmarks/compaction_bench.py --backend docker --turns 100
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codeact import CodeActAgent, ScriptedModel  # noqa: E402
from codeact.context_window import count_tokens  # noqa: E402
from codeact.events import Compacted, RunFinished  # noqa: E402


def replies(turns: int) -> list[str]:
    out = []
    for k in range(1, turns + 1):
        out.append(f"Making x{k}.\n```python\nx{k} = [{k} * i for i in range(50)]\n"
                   f"print('turn {k}', '-' * 1500)\nprint('x{k} has', len(x{k}), 'items')\n```")
        out.append(f"x{k} is ready.")
    return out


def run(turns: int, backend: str, window: int | None) -> dict[str, Any]:
    model = ScriptedModel(replies(turns))
    if window is not None:
        model.context_window = window  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory() as tmp:
        agent = CodeActAgent(model, sandbox=backend, log=False, output_dir=Path(tmp) / "out",
                             history_budget=None)
        per_turn: list[dict[str, Any]] = []
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with agent.session() as chat:
                for k in range(1, turns + 1):
                    first_request = len(model.requests)
                    events = list(chat.stream(f"turn {k}: make x{k}"))
                    result = next(e.result for e in events if isinstance(e, RunFinished))
                    compactions = [e for e in events if isinstance(e, Compacted)]
                    per_turn.append({
                        "turn": k,
                        "status": result.status,
                        "prompt_tokens": count_tokens(model, model.requests[first_request]),
                        "max_prompt_tokens": max(count_tokens(model, r) for r in model.requests[first_request:]),
                        "compactions": len(compactions),
                        "turns_folded": sum(e.turns_folded for e in compactions),
                        "compaction_seconds": sum(e.seconds for e in compactions),
                    })
        total = time.perf_counter() - started
    costs = [t["compaction_seconds"] for t in per_turn]
    compacting = [c for c, t in zip(costs, per_turn, strict=True) if t["compactions"]]
    return {
        "window": window,
        "budget": int(window * 0.75) if window else None,
        "seconds": total,
        "failed_turns": sum(t["status"] != "success" for t in per_turn),
        "compaction_median_s": statistics.median(costs),
        "compaction_max_s": max(costs),
        "compacting_turns": len(compacting),
        "compacting_median_s": statistics.median(compacting) if compacting else 0.0,
        "turns": per_turn,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--window", type=int, default=8_000, help="the model's context window in tokens")
    parser.add_argument("--backend", default="local", choices=["local", "docker"])
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "compaction_bench.json"))
    args = parser.parse_args()

    without = run(args.turns, args.backend, None)
    with_ = run(args.turns, args.backend, args.window)
    print(f"{args.turns}-turn chat on the {args.backend} backend; window {args.window:,} tokens "
          f"(budget {with_['budget']:,}); prompt tokens of each turn's first request (estimate)\n")
    print("| turn | without compaction | with compaction | compactions (turns folded) |")
    print("|---:|---:|---:|---:|")
    for a, b in zip(without["turns"], with_["turns"], strict=True):
        if a["turn"] % 10 == 0 or a["turn"] == 1:
            print(f"| {a['turn']} | {a['prompt_tokens']:,} | {b['prompt_tokens']:,} | "
                  f"{b['compactions']} ({b['turns_folded']}) |")
    peak = max(t["max_prompt_tokens"] for t in with_["turns"])
    print(f"\nwith compaction: highest prompt {peak:,} tokens (budget {with_['budget']:,}); "
          f"failed turns: without {without['failed_turns']}, with {with_['failed_turns']}")
    print(f"compaction time per turn: median {with_['compaction_median_s'] * 1000:.1f} ms, "
          f"max {with_['compaction_max_s'] * 1000:.1f} ms; over the {with_['compacting_turns']} turns that "
          f"compacted: median {with_['compacting_median_s'] * 1000:.1f} ms")
    print(f"wall time: without {without['seconds']:.1f} s, with {with_['seconds']:.1f} s")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"turns": args.turns, "backend": args.backend, "window": args.window,
                               "without": without, "with": with_}, indent=2))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
