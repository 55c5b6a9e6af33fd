"""Run budgets: model calls, tokens and dollars, enforced while a run goes, across the runs it calls.

A run's :class:`Budget` counts what its model calls spent, and what the
runs it called spent (``agent.as_tool``: a child's budget has the parent's
as its parent, so every charge counts all the way up). The limits of
:class:`~codeact.agent.RunLimits` (``max_model_calls``, ``max_tokens``,
``max_cost``) are checked after each model call and before the next one;
when one is spent the loop ends the run with status ``budget_exceeded`` and
:class:`~codeact.errors.BudgetExceeded` says what went where.

Dollars need prices: ``OpenAIModel(prices=Prices(...))`` puts the cost on
each response's usage; ``RunLimits(prices={"model-name": Prices(...)})`` is a
table for models that do not know their own (a child's run uses the table
of the nearest run above it that has one).

Example::

    limits = RunLimits(max_tokens=50_000, max_cost=0.25, prices={"gpt-4o-mini": Prices(0.15, 0.60)})
    agent = CodeActAgent(model, tools=[researcher.as_tool(name="researcher", description="...")], limits=limits)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any, Mapping

from .errors import BudgetExceeded, ConfigError
from .messages import Usage


@dataclass(frozen=True)
class Prices:
    """A model's prices in dollars per million tokens."""

    input_per_mtok: float
    output_per_mtok: float

    def __post_init__(self) -> None:
        if self.input_per_mtok < 0 or self.output_per_mtok < 0:
            raise ConfigError(f"prices must be >= 0 dollars per million tokens, got {self}")

    def cost(self, usage: Usage) -> float:
        """Dollars ``usage`` costs at these prices."""
        return (usage.input_tokens * self.input_per_mtok + usage.output_tokens * self.output_per_mtok) / 1e6


def priced(usage: Usage, prices: Prices | None) -> Usage:
    """``usage`` with its cost filled in from ``prices`` (unchanged when it has one, or no prices are known)."""
    if usage.cost is not None or prices is None:
        return usage
    return replace(usage, cost=prices.cost(usage))


class Budget:
    """What one run and the runs below it spent, against the run's limits (thread-safe: children run on threads).

    Args:
        limits: anything with ``max_model_calls``, ``max_tokens``, ``max_cost`` and ``prices`` (a RunLimits);
            None: no limits of its own (it still counts, and its parent's limits still hold).
        parent: the budget of the run that called this one, or None for a top-level run.
    """

    def __init__(self, limits: Any = None, parent: Budget | None = None) -> None:
        self.parent = parent
        self.max_model_calls: int | None = getattr(limits, "max_model_calls", None)
        self.max_tokens: int | None = getattr(limits, "max_tokens", None)
        self.max_cost: float | None = getattr(limits, "max_cost", None)
        table: Mapping[str, Prices] | None = getattr(limits, "prices", None)
        self.prices: Mapping[str, Prices] = dict(table) if table else (parent.prices if parent is not None else {})
        # One lock for a whole tree: a charge moves every budget up the chain at once.
        self._lock: threading.Lock = parent._lock if parent is not None else threading.Lock()
        self.spent = Usage()
        #: Model calls started below this budget and not yet charged: runs on parallel threads cannot all
        #: pass the check for the last call at once.
        self.reserved = 0
        self.unpriced = 0  # model calls whose cost is not known
        #: What each agent below (and including) this run spent, by its path ("codeact > researcher").
        self.by_agent: dict[str, Usage] = {}

    # --- the loops call these ----------------------------------------------------------------------

    def price(self, usage: Usage, model: Any) -> Usage:
        """``usage`` with its cost, from the model's own prices or this tree's table (by the model's name)."""
        if usage.cost is not None:
            return usage
        return priced(usage, self.prices.get(str(getattr(model, "name", ""))))

    def charge(self, agent: str, usage: Usage, *, reserved: bool = False) -> None:
        """Count ``usage`` (one model call of the agent at path ``agent``) here and in every budget above;
        ``reserved``: the call was reserved by :meth:`check` (``before_call``), which this settles."""
        with self._lock:
            budget: Budget | None = self
            while budget is not None:
                budget.reserved -= 1 if reserved else 0
                budget.spent = budget.spent + usage
                budget.unpriced += usage.requests if usage.cost is None else 0
                budget.by_agent[agent] = budget.by_agent.get(agent, Usage()) + usage
                budget = budget.parent

    def check(self, *, before_call: bool) -> None:
        """Raise :class:`BudgetExceeded` when a limit here or above is spent.

        ``before_call``: the next model call would start now, so a limit reached exactly is spent too;
        after a call only a limit gone past is (the reply that reached it is still used). A call allowed
        before it starts is reserved until :meth:`charge` (or :meth:`release`) settles it.
        """
        with self._lock:
            budget: Budget | None = self
            while budget is not None:
                message = budget._over(before_call)
                if message is not None:
                    raise BudgetExceeded(message)
                budget = budget.parent
            if before_call:
                budget = self
                while budget is not None:
                    budget.reserved += 1
                    budget = budget.parent

    def release(self) -> None:
        """Give back a call :meth:`check` reserved that was never made (or never charged: it failed)."""
        with self._lock:
            budget: Budget | None = self
            while budget is not None:
                budget.reserved -= 1
                budget = budget.parent

    def needs_prices(self, model: Any) -> str | None:
        """Why ``max_cost`` (here or above) cannot be enforced for ``model``'s calls, or None when it can."""
        if getattr(model, "prices", None) is not None or str(getattr(model, "name", "")) in self.prices:
            return None
        budget: Budget | None = self
        while budget is not None:
            if budget.max_cost is not None:
                return (f"max_cost={budget.max_cost} needs the prices of model {getattr(model, 'name', '?')!r}: "
                        "pass OpenAIModel(prices=Prices(input_per_mtok, output_per_mtok)) or "
                        "RunLimits(prices={model name: Prices(...)})")
            budget = budget.parent
        return None

    # --- what was spent ---------------------------------------------------------------------------

    def _over(self, before_call: bool) -> str | None:
        spent = self.spent

        def past(value: float, limit: float | None) -> bool:
            return limit is not None and (value >= limit if before_call else value > limit)

        if past(spent.requests + (self.reserved if before_call else 0), self.max_model_calls):
            what = f"max_model_calls={self.max_model_calls}: {spent.requests} model calls made"
        elif past(spent.total_tokens, self.max_tokens):
            what = f"max_tokens={self.max_tokens:,}: {spent.total_tokens:,} tokens used"
        elif self.max_cost is not None and past(spent.cost or 0.0, self.max_cost):
            what = f"max_cost=${self.max_cost:g}: ${spent.cost or 0.0:.4f} spent"
        else:
            return None
        return f"the run's budget is spent ({what}). Spent: {self.report()}. " \
               "Raise the limit in RunLimits, or give the agents less to do."

    def report(self) -> str:
        """What was spent, in total and by agent: ``"5 model calls, 1,234 tokens, $0.0012 (codeact: ...; ...)"``."""
        parts = "; ".join(f"{agent}: {_usage_text(u)}" for agent, u in self.by_agent.items())
        return f"{_usage_text(self.spent)}" + (f" ({parts})" if parts else "")


def _usage_text(u: Usage) -> str:
    text = f"{u.requests} model call{'s' if u.requests != 1 else ''}, {u.total_tokens:,} tokens"
    return text + (f", ${u.cost:.4f}" if u.cost is not None else "")


__all__ = ["Budget", "Prices", "priced"]
