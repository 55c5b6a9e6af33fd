#!/usr/bin/env python3
"""What an image costs a step's prompt when it goes to the model (a script, not a test).

Figures are drawn with matplotlib on the host (Agg), the way a code action draws them: the default
figure (6.4x4.8 in at 100 dpi: 640x480), a big one (16x12 in: 1600x1200), and a photograph-like
1600x1200 image (noise, what a camera picture costs). Each goes through :func:`codeact.images.prepare_image`
at several ``max_side`` values (1024 is the default) and the table shows the image as sent (size, type,
bytes, data URL characters) and its prompt tokens by OpenAI's published rule for ``detail: high``
(:attr:`codeact.messages.ImagePart.tokens`; other endpoints count differently, e.g. Qwen2.5-VL about one
token per 28x28 pixels, also shown), plus the host time to decode, downscale and re-encode it.

    .venv/bin/python benchmarks/image_tokens.py
"""

from __future__ import annotations

import io
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def figure(width_in: float, height_in: float) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width_in, height_in), dpi=100)
    for k in range(4):
        ax.plot(range(24), [((i * (k + 3)) % 17) + k * 5 for i in range(24)], label=f"region {k}")
    ax.set_title("Monthly sales by region")
    ax.set_xlabel("month")
    ax.set_ylabel("sales")
    ax.legend()
    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()


def photo(width: int, height: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.effect_noise((width, height), 40).convert("RGB").save(out, "PNG")
    return out.getvalue()


def qwen_tokens(width: int, height: int) -> int:
    """Qwen2.5-VL: one token per 28x28 patch (after rounding each side to a multiple of 28)."""
    return math.ceil(width / 28) * math.ceil(height / 28)


def main() -> int:
    from codeact.images import prepare_image

    sources = {
        "matplotlib default figure (640x480)": figure(6.4, 4.8),
        "matplotlib 16x12 in figure (1600x1200)": figure(16, 12),
        "photograph-like (1600x1200 noise)": photo(1600, 1200),
    }
    rows = []
    for label, data in sources.items():
        for side in (512, 768, 1024):
            times = []
            for _ in range(5):
                start = time.perf_counter()
                part = prepare_image(data, "figure.png", max_side=side)
                times.append(time.perf_counter() - start)
            rows.append({
                "image": label, "input_bytes": len(data), "max_side": side,
                "sent": f"{part.width}x{part.height}", "mime": part.mime, "sent_bytes": len(part.data),
                "data_url_chars": len(part.data_url()), "openai_tokens": part.tokens,
                "qwen_vl_tokens": qwen_tokens(part.width, part.height),
                "prepare_ms": round(statistics.median(times) * 1000, 1),
            })
    header = ("image", "max_side", "sent", "mime", "sent_bytes", "openai_tokens", "qwen_vl_tokens", "prepare_ms")
    widths = [max(len(h), *(len(str(r[h])) for r in rows)) for h in header]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for r in rows:
        print("  ".join(str(r[h]).ljust(w) for h, w in zip(header, widths, strict=True)))
    default = [r for r in rows if r["max_side"] == 1024]
    print("\nA step at the defaults (max_side 1024, at most 4 images): "
          + "; ".join(f"{r['image']}: {r['openai_tokens']} tokens" for r in default)
          + f"; four big figures: {4 * default[1]['openai_tokens']} tokens.")
    out = ROOT / "benchmarks" / "results" / "image_tokens.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
