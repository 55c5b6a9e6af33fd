"""Table tools over the data-analysis suite's CSV files (host-side, pandas), stateful per episode.

Tables are the task's CSV files by name (``sales`` for ``sales.csv``);
``add_column`` and ``join_tables`` change or add tables for the rest of the
episode. Floats in results are rounded to 4 decimals to keep observations
short.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from ...errors import BenchError
from ...tools import tool
from .._task import TaskContext

Agg = Literal["sum", "mean", "median", "min", "max", "count", "std", "nunique"]
Freq = Literal["D", "W", "M", "Q", "Y"]


def _pandas() -> Any:
    try:
        import pandas as pd
    except ImportError as exc:  # pragma: no cover - the bench extra installs it
        raise BenchError("the data-analysis suite needs pandas on the host: pip install 'codeact[bench]'") from exc
    return pd


def _num(x: Any) -> Any:
    if hasattr(x, "item"):
        x = x.item()
    if isinstance(x, float):
        return None if math.isnan(x) else round(x, 4)
    return x


def period_labels(dates: Any, freq: str) -> Any:
    """Bucket labels for dates: D 2024-01-05, W the week's Monday, M 2024-01, Q 2024Q1, Y 2024."""
    pd = _pandas()
    if freq == "D":
        return dates.dt.strftime("%Y-%m-%d")
    if freq == "W":
        return (dates - pd.to_timedelta(dates.dt.day_of_week, unit="D")).dt.strftime("%Y-%m-%d")
    if freq == "M":
        return dates.dt.strftime("%Y-%m")
    if freq == "Q":
        return dates.dt.year.astype(str) + "Q" + dates.dt.quarter.astype(str)
    if freq == "Y":
        return dates.dt.year.astype(str)
    raise ValueError(f"freq must be one of D, W, M, Q, Y, not {freq!r}")


def data_tools(ctx: TaskContext) -> list[Any]:
    """Fresh table tools for one episode: the task's CSV files, and the tables the episode derives."""
    pd = _pandas()
    sources = {Path(name).stem: path for name, path in ctx.files.items() if name.endswith(".csv")}
    tables: dict[str, Any] = {}

    def table(name: str) -> Any:
        if name not in tables:
            if name not in sources:
                raise KeyError(f"no table {name!r}; tables: {', '.join(sorted({*sources, *tables}))}")
            tables[name] = pd.read_csv(sources[name])
        return tables[name]

    def filtered(name: str, filters: dict[str, Any] | None) -> Any:
        df = table(name)
        for column, value in (filters or {}).items():
            if column not in df.columns:
                raise KeyError(f"table {name} has no column {column!r}; columns: {', '.join(df.columns)}")
            df = df[df[column] == value]
        return df

    def column(df: Any, name: str, col: str) -> Any:
        if col not in df.columns:
            raise KeyError(f"table {name} has no column {col!r}; columns: {', '.join(df.columns)}")
        return df[col]

    @tool
    def list_tables() -> list[str]:
        """The names of the tables you can use (one per CSV file, plus those you created)."""
        return sorted({*sources, *tables})

    @tool
    def table_info(table_name: str) -> dict:
        """A table's row count and columns with their types, and its first 3 rows."""
        df = table(table_name)
        return {"rows": len(df), "columns": {c: str(t) for c, t in df.dtypes.items()},
                "first_rows": [{k: _num(v) for k, v in r.items()} for r in df.head(3).to_dict("records")]}

    @tool
    def query_rows(table_name: str, filters: dict[str, Any] | None = None, columns: list[str] | None = None,
                   limit: int = 20) -> list[dict]:
        """Rows of a table whose columns equal the given values, e.g. filters={"city": "Oslo"}.

        Args:
            table_name: the table.
            filters: column -> value; rows must match all of them.
            columns: the columns to return (default: all).
            limit: at most this many rows.
        """
        df = filtered(table_name, filters)
        if columns:
            df = df[[column(df, table_name, c).name for c in columns]]
        return [{k: _num(v) for k, v in r.items()} for r in df.head(limit).to_dict("records")]

    @tool
    def aggregate(table_name: str, column_name: str, agg: Agg, by: str | None = None,
                  filters: dict[str, Any] | None = None) -> Any:
        """Aggregate a column (sum, mean, median, min, max, count, std, nunique), optionally grouped by a column.

        Returns a number, or {group: number} with `by`. std is the sample standard deviation.
        """
        df = filtered(table_name, filters)
        values = column(df, table_name, column_name)
        if by is None:
            return _num(getattr(values, agg)())
        grouped = getattr(df.groupby(column(df, table_name, by))[column_name], agg)()
        return {str(k): _num(v) for k, v in grouped.items()}

    @tool
    def add_column(table_name: str, new_column: str, left: str, op: Literal["*", "+", "-", "/"],
                   right: str | float) -> dict:
        """Add a column computed from two others (or a column and a number): new = left op right.

        Example: add_column("sales", "revenue", "units", "*", "unit_price")
        """
        df = table(table_name)
        a = column(df, table_name, left)
        b = column(df, table_name, right) if isinstance(right, str) else right
        df = df.copy()
        df[new_column] = {"*": a * b, "+": a + b, "-": a - b, "/": a / b}[op]
        tables[table_name] = df
        return {"table": table_name, "columns": list(df.columns)}

    @tool
    def join_tables(left: str, right: str, on: str, new_table: str) -> dict:
        """Join two tables on a shared column (inner join) into a new table; returns its columns and size."""
        df = table(left).merge(table(right), on=on, how="inner")
        tables[new_table] = df
        return {"table": new_table, "rows": len(df), "columns": list(df.columns)}

    @tool
    def correlation(table_name: str, x: str, y: str, filters: dict[str, Any] | None = None) -> float:
        """The Pearson correlation of two columns (over the rows matching `filters`)."""
        df = filtered(table_name, filters)
        return _num(column(df, table_name, x).corr(column(df, table_name, y)))

    @tool
    def time_series(table_name: str, date_column: str, value_column: str, freq: Freq, agg: Agg = "sum",
                    filters: dict[str, Any] | None = None) -> list[tuple[str, float]]:
        """A column aggregated per period: [(period, value)] in time order.

        Periods: D "2024-01-05", W the week's Monday "2024-01-01", M "2024-01", Q "2024Q1", Y "2024".
        """
        df = filtered(table_name, filters)
        dates = pd.to_datetime(column(df, table_name, date_column))
        grouped = getattr(column(df, table_name, value_column).groupby(period_labels(dates, freq)), agg)()
        return [(str(k), _num(v)) for k, v in grouped.sort_index().items()]

    @tool
    def rolling_mean(table_name: str, date_column: str, value_column: str, window: int,
                     filters: dict[str, Any] | None = None) -> list[tuple[str, float]]:
        """The mean over the last `window` rows in date order, for each date with a full window: [(date, mean)]."""
        df = filtered(table_name, filters)
        df = df.assign(_d=pd.to_datetime(column(df, table_name, date_column))).sort_values("_d")
        means = column(df, table_name, value_column).rolling(window).mean()
        return [(d.strftime("%Y-%m-%d"), _num(m)) for d, m in zip(df["_d"], means, strict=True) if not math.isnan(m)]

    @tool
    def plot_line(points: list[list[Any]], title: str, filename: str) -> str:
        """Draw a line chart of [x, y] points and save it as a PNG file named `filename` (e.g. "chart.png")."""
        from matplotlib.figure import Figure  # no pyplot: its global state is not safe across threads

        name = Path(filename).name
        if not name.lower().endswith(".png"):
            raise ValueError("filename must end with .png")
        fig = Figure(figsize=(8, 4))
        ax = fig.add_subplot()
        labels = [str(p[0]) for p in points]
        ax.plot(range(len(points)), [float(p[1]) for p in points], marker="o" if len(points) <= 40 else None)
        step = max(1, len(labels) // 12)  # at most ~12 labels: many categorical ticks are slow and unreadable
        ax.set_xticks(range(0, len(labels), step), labels[::step], rotation=45, ha="right")
        ax.set_title(title)
        fig.tight_layout()
        fig.savefig(ctx.workdir / name)
        return f"saved {name}"

    return [list_tables, table_info, query_rows, aggregate, add_column, join_tables, correlation, time_series,
            rolling_mean, plot_line]
