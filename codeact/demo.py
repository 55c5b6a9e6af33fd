"""The ``codeact demo`` task: a small data analysis on the bundled ``sales.csv``.

With a model configured (``--model`` or ``$CODEACT_MODEL``) the demo asks that
model. Without one it replays :data:`SCRIPTED_REPLIES` through a
:class:`~codeact.models.ScriptedModel`: hand-written replies of the kind a good
model gives (inspect the data, compute growth with pandas, plot with
matplotlib, answer with a dict). They run for real in the sandbox, so the demo
still shows the whole loop (code, observations, artifacts, run log) without an
API key.

Example::

    from codeact import CodeActAgent
    from codeact.demo import DEMO_TASK, demo_csv, scripted_demo_model

    agent = CodeActAgent(scripted_demo_model(), sandbox="local")
    result = agent.run(DEMO_TASK, files=[demo_csv()])
    print(result.answer["fastest_growing_region"])   # West
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

#: The question the demo asks.
DEMO_TASK = (
    "sales.csv holds monthly sales by region. Which region grew fastest? "
    "Plot monthly sales by region and save the chart as a PNG."
)

#: Name of the chart the scripted replies save.
PLOT_NAME = "monthly_sales_by_region.png"

SCRIPTED_REPLIES: list[Any] = [
    # 1. Look at the data before doing anything with it.
    """First I'll look at the file: columns, types, the date range and the regions.

```python
import pandas as pd

df = pd.read_csv("sales.csv")
print(df.shape)
print(df.head())
print(df.dtypes)
print("months:", df["month"].min(), "to", df["month"].max(), f"({df['month'].nunique()} months)")
print("regions:", sorted(df["region"].unique()))
print("products:", sorted(df["product"].unique()))
print("missing values:", int(df.isna().sum().sum()))
```""",
    # 2. Aggregate and compare the two years.
    """The data covers 24 months, 4 regions and 3 products, with no missing values. I'll sum revenue per region \
and month, then compare each region's total for the last 12 months with the first 12 months, and also fit a \
compound monthly growth rate from the first to the last quarter so that one unusual month does not decide it.

```python
df["month"] = pd.to_datetime(df["month"], format="%Y-%m")
monthly = df.pivot_table(index="month", columns="region", values="revenue", aggfunc="sum").sort_index()

first_year = monthly.iloc[:12].sum()
last_year = monthly.iloc[12:].sum()
yoy = (last_year / first_year - 1) * 100

first_q = monthly.iloc[:3].mean()
last_q = monthly.iloc[-3:].mean()
months_between = len(monthly) - 3
cmgr = ((last_q / first_q) ** (1 / months_between) - 1) * 100

growth = pd.DataFrame({
    "first 12 months": first_year.round(0),
    "last 12 months": last_year.round(0),
    "growth %": yoy.round(1),
    "monthly growth %": cmgr.round(2),
}).sort_values("growth %", ascending=False)
print(growth.to_string())
fastest = growth.index[0]
print("fastest growing:", fastest)
```""",
    # 3. The chart (the thought names the region the previous observation found).
    lambda messages: _chart_reply(messages[-1].content),
    # 4. Answer with structured data.
    f"""The chart is saved. Here is the answer.

```python
final_answer({{
    "fastest_growing_region": fastest,
    "growth_pct_last_vs_first_12_months": {{r: float(v) for r, v in growth["growth %"].items()}},
    "compound_monthly_growth_pct": {{r: float(v) for r, v in growth["monthly growth %"].items()}},
    "revenue_last_12_months": {{r: float(v) for r, v in growth["last 12 months"].items()}},
    "plot": "{PLOT_NAME}",
}})
```""",
]


_CHART_CODE = f"""```python
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(10, 5.5))
for region in growth.index:  # legend ordered by growth
    ax.plot(monthly.index, monthly[region] / 1000, marker="o", markersize=3,
            linewidth=2.5 if region == fastest else 1.2,
            label=f"{{region}} ({{growth.loc[region, 'growth %']:+.1f}}%)")
ax.set_title("Monthly sales by region")
ax.set_xlabel("Month")
ax.set_ylabel("Revenue (thousand USD)")
ax.grid(alpha=0.3)
ax.legend(title="Region (last vs first 12 months)")
fig.autofmt_xdate()
fig.tight_layout()
fig.savefig("{PLOT_NAME}", dpi=120)
plt.show()
print("saved {PLOT_NAME}")
```"""


def _chart_reply(observation: str) -> str:
    match = re.search(r"fastest growing: (\S+)", observation)
    lead = f"{match.group(1)} grew fastest." if match else "The table above ranks the regions."
    return (f"{lead} Now the chart: one line per region, monthly revenue in thousands of dollars, "
            f"saved as a PNG.\n\n{_CHART_CODE}")


def demo_csv() -> Path:
    """The bundled demo data set (24 months x 4 regions x 3 products)."""
    return Path(__file__).parent / "data" / "sales.csv"


def scripted_demo_model() -> Any:
    """A :class:`~codeact.models.ScriptedModel` that replays :data:`SCRIPTED_REPLIES`."""
    from .models import ScriptedModel

    return ScriptedModel(SCRIPTED_REPLIES, name="scripted-demo")
