"""Data analysis: a CSV in; numbers, a table and a chart out.

The agent gets ``data/orders.csv`` (twelve weeks of orders from three coffee
shops) in its sandbox working directory and answers with an ``OrdersSummary``
(a pydantic model: ``output_type=OrdersSummary``). The model is shown the class
as a stub, its answer is validated on the host (a misfit goes back to it with
the problems by field path), and ``result.answer`` is an ``OrdersSummary``.
The chart it saves comes back as an artifact.

    python examples/data_analysis.py --scripted          # no model needed
    CODEACT_MODEL=gpt-4o-mini python examples/data_analysis.py

See examples/README.md for all options.
"""

from __future__ import annotations

import sys
from typing import Literal, Sequence

from _common import DATA, make_agent, parser, run
from pydantic import BaseModel, Field

from codeact.events import RunResult

CSV = DATA / "orders.csv"
CHART = "weekly_revenue.png"

TASK = (
    "orders.csv holds twelve weeks of orders from our three coffee shops. "
    "Which three products bring in the most revenue, which weekday is busiest (by revenue), "
    "and which store grew most from the first four weeks to the last four? "
    f"Plot weekly revenue per store and save the chart as {CHART}. "
    "Answer with the summary."
)


class OrdersSummary(BaseModel):
    """What the analysis of the orders found."""

    top_products: dict[str, float] = Field(description="the three products with the most revenue -> revenue")
    busiest_weekday: Literal["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    fastest_growing_store: str
    growth_pct: dict[str, float] = Field(description="store -> percent, last four weeks against the first four")
    chart: str = Field(description="file name of the saved chart")


# What a good model answers, step by step. The code runs for real in the sandbox.
SCRIPTED_REPLIES = [
    """First I'll look at the data: size, columns, types and the date range.

```python
import pandas as pd

df = pd.read_csv("orders.csv", parse_dates=["date"])
print(df.shape)
print(df.head())
print(df.dtypes)
print("dates:", df["date"].min().date(), "to", df["date"].max().date())
print("stores:", sorted(df["store"].unique()))
print("products:", sorted(df["product"].unique()))
print("missing values:", int(df.isna().sum().sum()))
```""",
    """Twelve weeks, three stores, five products, nothing missing. Revenue is quantity times unit price. I'll rank \
products, sum revenue by weekday, and compare each store's first four weeks with its last four.

```python
df["revenue"] = df["quantity"] * df["unit_price"]

top = df.groupby("product")["revenue"].sum().sort_values(ascending=False).head(3)
print("Top products by revenue:")
print(top.to_string())

by_weekday = df.groupby(df["date"].dt.day_name())["revenue"].sum().sort_values(ascending=False)
print("\\nRevenue by weekday:")
print(by_weekday.to_string())

weekly = (df.set_index("date").groupby("store")["revenue"].resample("W-SUN").sum()
            .unstack(0).sort_index())
first, last = weekly.head(4).sum(), weekly.tail(4).sum()
growth = ((last / first - 1) * 100).round(1).sort_values(ascending=False)
print(f"\\nWeekly revenue ({len(weekly)} weeks):")
print(weekly.round(0).to_string())
print("\\nGrowth, last 4 weeks vs first 4 (%):")
print(growth.to_string())
```""",
    f"""Now the chart, then the answer.

```python
import matplotlib.pyplot as plt

ax = weekly.plot(figsize=(8, 4.5), marker="o")
ax.set_title("Weekly revenue per store")
ax.set_xlabel("week ending")
ax.set_ylabel("revenue (CNY)")
ax.grid(alpha=0.3)
plt.tight_layout()
plt.savefig("{CHART}", dpi=120)
plt.show()

final_answer(OrdersSummary(
    top_products={{name: round(float(v), 2) for name, v in top.items()}},
    busiest_weekday=by_weekday.index[0],
    fastest_growing_store=growth.index[0],
    growth_pct={{store: float(v) for store, v in growth.items()}},
    chart="{CHART}",
))
```""",
]


def main(argv: Sequence[str] | None = None) -> RunResult[OrdersSummary]:
    args = parser("Analyse coffee-shop orders from a CSV and plot weekly revenue.").parse_args(argv)
    agent = make_agent(args, SCRIPTED_REPLIES)
    return run(agent, TASK, files=[CSV], quiet=args.quiet, output_type=OrdersSummary)


if __name__ == "__main__":
    sys.exit(0 if main().ok else 1)
