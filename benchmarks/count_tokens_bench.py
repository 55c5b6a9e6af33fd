#!/usr/bin/env python3
"""What counting the prompt every step costs, and how far the estimate errs high (a script, not a test).

The compaction of long sessions counts the whole history before every model call. This runs a
scripted 100-step CodeAct history (a code action and a printed observation per step: prose,
tables of numbers, JSON) and counts the history after every step, as the loop does, with
:func:`codeact.context_window.count_tokens` (a step's count then encodes only its two new
messages), and again without its per-message cache, for a GPT-4 name (``cl100k_base``), a GPT-4o
name (``o200k_base``) and a name whose tokenizer is unknown (the estimate). It also prints, per
kind of text, the exact ``cl100k_base`` and ``o200k_base`` counts and the estimate (what GPT-4o-family
names got before ``o200k_base`` shipped) over each. Results go to
``benchmarks/results/count_tokens_bench.json``.

    .venv/bin/python benchmarks/count_tokens_bench.py
    .venv/bin/python benchmarks/count_tokens_bench.py --steps 300
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def history(steps: int) -> list:
    from codeact.messages import Message

    out = [Message("system", "You are a CodeAct agent. " * 80), Message("user", "Analyse sales.csv by region.")]
    for i in range(steps):
        code = f"df{i} = df.groupby('region').agg(total=('amount', 'sum'))\nprint(df{i}.head(20))\n" * 4
        table = "\n".join(f"{r:4d}  region-{r % 7}  {r * 1234.5678 + i:12.4f}  {r * i % 997:6d}" for r in range(40))
        blob = json.dumps({"step": i, "rows": [{"id": r, "v": r * 0.5} for r in range(30)]})
        out += [Message("assistant", f"Step {i}: grouping.\n```python\n{code}```"),
                Message("user", f"Observation:\n{table}\n{blob}")]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()

    from codeact.catalog import BUNDLED_ENCODINGS, bundled_encoding
    from codeact.context_window import _MESSAGE_TOKENS, count_tokens, tokenizer_name
    from codeact.models import ScriptedModel

    loads = {}
    for encoding in BUNDLED_ENCODINGS:  # load the vocabularies outside the timings
        start = time.perf_counter()
        bundled_encoding(encoding)
        loads[encoding] = time.perf_counter() - start
    messages = history(args.steps)
    rows = []
    for name in ("gpt-4", "gpt-4o", "qwen2.5-coder"):
        model = ScriptedModel([], name=name)
        counter = _MESSAGE_TOKENS[tokenizer_name(model)]
        start = time.perf_counter()
        for n in range(2, len(messages) + 1, 2):  # after every step, the whole history so far
            count_tokens(model, messages[:n])
        cached = time.perf_counter() - start
        start = time.perf_counter()
        for n in range(2, len(messages) + 1, 2):
            sum(counter._count(m) for m in messages[:n])
        uncached = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(20):
            count_tokens(model, messages)
        recount = (time.perf_counter() - start) / 20
        calls = len(messages) // 2
        rows.append({"model": name, "tokenizer": tokenizer_name(model), "messages": len(messages),
                     "tokens": count_tokens(model, messages), "calls": calls,
                     "cached_ms_per_call": 1000 * cached / calls,
                     "uncached_ms_per_call": 1000 * uncached / calls, "recount_all_cached_ms": 1000 * recount})

    from tests.test_context_window import CORPUS  # the same texts the tests check

    from codeact.messages import Message

    estimate = ScriptedModel([], name="some-local-model")
    ratios = []
    for kind, text in CORPUS.items():
        cl100k = len(bundled_encoding("cl100k_base").encode(text, disallowed_special=()))
        o200k = len(bundled_encoding("o200k_base").encode(text, disallowed_special=()))
        guess = count_tokens(estimate, [Message("user", text)]) - 4
        ratios.append({"text": kind, "cl100k": cl100k, "o200k": o200k, "estimate": guess,
                       "ratio": guess / cl100k, "ratio_o200k": guess / o200k})

    print("Loading a bundled vocabulary: " + ", ".join(f"{k} {v:.2f} s" for k, v in loads.items()) + "\n")
    print(f"Counting the whole history after each of {args.steps} steps ({len(messages)} messages)\n")
    print(f"{'model':14s} {'tokenizer':12s} {'tokens':>8s} {'ms/step cached':>15s} {'ms/step uncached':>17s} "
          f"{'ms to recount all, cached':>26s}")
    for r in rows:
        print(f"{r['model']:14s} {r['tokenizer']:12s} {r['tokens']:8d} {r['cached_ms_per_call']:15.3f} "
              f"{r['uncached_ms_per_call']:17.3f} {r['recount_all_cached_ms']:26.3f}")
    print(f"\n{'text':10s} {'cl100k':>7s} {'o200k':>7s} {'estimate':>9s} {'est/cl100k':>11s} {'est/o200k':>10s}")
    for r in ratios:
        print(f"{r['text']:10s} {r['cl100k']:7d} {r['o200k']:7d} {r['estimate']:9d} {r['ratio']:11.2f} "
              f"{r['ratio_o200k']:10.2f}")
    out = ROOT / "benchmarks" / "results" / "count_tokens_bench.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"steps": args.steps, "python": platform.python_version(), "load_s": loads,
                               "counting": rows, "estimate_over_exact": ratios}, indent=2))
    print(f"\nwrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
