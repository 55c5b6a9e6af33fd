"""Tool disclosure: every stub in the prompt (``all``), a catalogue and a search (``on_demand``), or ``auto``.

``auto`` shows every stub while they fit a token budget (counted with
:func:`~._tokens.count_tokens`) and switches to ``on_demand`` above it. The
choice is made once per session, when its first prompt is built, so that a
conversation does not change style half-way.

Where the tools live in the sandbox does not depend on it: a grouped tool (an
MCP server's, or ``Tool(group=...)``) is importable from ``tools.<group>``
and is also a global function under its ``name`` (as the ``all`` prompt's
stubs show it). The on-demand prompt teaches the imports; the globals cost no
prompt tokens and keep code written either way working (a session's
disclosure may be ``all`` for a few tools and ``on_demand`` for many).
Ungrouped tools are global.
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

from ..errors import ConfigError
from ._tokens import count_tokens

Disclosure = Literal["all", "on_demand", "auto"]
DISCLOSURES = ("all", "on_demand", "auto")
#: Tokens of stubs ``auto`` still puts in the prompt.
DEFAULT_TOOL_BUDGET = 2000


def check_disclosure(mode: Any, budget: Any) -> None:
    """Raises :class:`ConfigError` for a mode or budget that cannot work, saying what to give."""
    if mode not in DISCLOSURES:
        raise ConfigError(f"tool_disclosure must be one of {', '.join(map(repr, DISCLOSURES))}, not {mode!r}")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ConfigError(f"tool_budget must be a number of tokens (an int >= 0), not {budget!r}")


def resolve_disclosure(mode: Disclosure, stubs: str, budget: int = DEFAULT_TOOL_BUDGET) -> Literal["all", "on_demand"]:
    """``all`` or ``on_demand`` for ``mode``; ``auto`` compares the tokens of ``stubs`` with ``budget``.

    Example::

        resolve_disclosure("auto", catalog.stubs(), 2000)     # 'on_demand' for 300 MCP tools
    """
    check_disclosure(mode, budget)
    if mode != "auto":
        return mode
    if len(stubs.encode("utf-8")) <= budget:  # a token is at least one byte: no need to count
        return "all"
    return "all" if count_tokens(stubs) <= budget else "on_demand"


def place(host_function: Any, tool: Any, disclosure: str = "all") -> Any:
    """Put ``tool``'s host function where the code finds it (see the module docs); returns it.

    ``disclosure`` does not change the place (kept so that callers can say which mode they are in).
    """
    group = getattr(tool, "group", None)
    if group:
        host_function.place(f"tools.{group}", local_name=getattr(tool, "local_name", None) or tool.name,
                            exported=True)
    return host_function


def grouped(tools: Sequence[Any]) -> bool:
    return any(getattr(t, "group", None) for t in tools)
