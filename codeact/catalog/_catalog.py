"""The catalogue of an agent's tools: where each lives in the sandbox, how to find it, how to read it.

A :class:`ToolCatalog` is host data built from the tools: one
:class:`ToolEntry` per tool (its place in the sandbox, ``tools.<group>.<name>``
or a global name, its one-line summary and signature) and one
:class:`Namespace` per group (an MCP server, or a ``group=`` of Python tools)
with its description and size. It answers the three questions the code in
the sandbox asks through ``search_tools``, ``describe`` and the prompt's
catalogue: which tools fit a need (BM25, see :mod:`._search`), what exactly
one of them takes and returns, and what there is at all.

Example::

    catalog = ToolCatalog(tools, descriptions={"crm": "Customers and deals"})
    [e.qualified_name for e in catalog.search("find a customer by e-mail", limit=3)]
    print(catalog.describe("tools.crm.find_customer"))
    print(catalog.render())        # the prompt's catalogue: namespaces, counts, how to search
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ToolDefinitionError
from ..tools import Tool
from ._search import SearchIndex

#: Characters of a signature shown in search results (``describe`` shows it whole).
MAX_SIGNATURE = 240
#: Characters of a summary line.
MAX_SUMMARY = 200
#: Most results one search returns.
MAX_RESULTS = 50


@dataclass(frozen=True)
class ToolEntry:
    """One tool as the catalogue lists it.

    Attributes:
        name: the tool's name on the host (events, the run log).
        qualified_name: where the code finds it: ``tools.crm.get_customer``, or ``get_weather``.
        group: its namespace's group (``crm``), or None for a global tool.
        local_name: its name inside the group (the name to import).
        summary: the first line of its description.
        signature: ``(customer_id: str) -> dict``.
    """

    name: str
    qualified_name: str
    group: str | None
    local_name: str
    summary: str
    signature: str
    tool: Tool[Any, Any] = field(compare=False, repr=False)

    @property
    def import_line(self) -> str:
        """``from tools.crm import get_customer`` (empty for a global tool: it needs no import)."""
        return f"from tools.{self.group} import {self.local_name}" if self.group else ""

    def record(self) -> dict[str, str]:
        """The search result the sandbox receives (plain data)."""
        signature = self.signature if len(self.signature) <= MAX_SIGNATURE else self.signature[:MAX_SIGNATURE - 1] + "…"
        return {"name": self.qualified_name, "signature": signature, "summary": self.summary,
                "import": self.import_line}


@dataclass(frozen=True)
class Namespace:
    """A group of tools: ``tools.<group>``, or the global functions (``group`` None)."""

    group: str | None
    description: str
    tools: tuple[str, ...]  # qualified names

    @property
    def path(self) -> str:
        return f"tools.{self.group}" if self.group else "(global)"


class ToolCatalog:
    """The tools of a run, by namespace, with a search index (built on the first search).

    Args:
        tools: the tools (grouped ones live in ``tools.<group>``, the rest are global).
        descriptions: what each group is for, by group name (an MCP server's
            instructions; shown in the prompt's catalogue).

    Raises:
        ToolDefinitionError: two tools of one group share a local name.
    """

    def __init__(self, tools: Sequence[Tool[Any, Any]], *, descriptions: Mapping[str, str] | None = None) -> None:
        self.entries: list[ToolEntry] = []
        self._by_name: dict[str, ToolEntry] = {}
        seen: dict[str, Tool[Any, Any]] = {}
        for t in tools:
            entry = _entry(t)
            if entry.qualified_name in seen:
                raise ToolDefinitionError(f"two tools would both be {entry.qualified_name} in the sandbox "
                                          f"({seen[entry.qualified_name].name} and {t.name}); rename one")
            seen[entry.qualified_name] = t
            self.entries.append(entry)
            self._by_name[entry.qualified_name] = entry
            self._by_name.setdefault(entry.name, entry)
        descriptions = dict(descriptions or {})
        groups: dict[str | None, list[str]] = {}
        for e in self.entries:
            groups.setdefault(e.group, []).append(e.qualified_name)
        self.namespaces = [Namespace(g, _first_line(descriptions.get(g, "") if g else "", 300), tuple(names))
                           for g, names in sorted(groups.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))]
        self._index: SearchIndex | None = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Any:
        return iter(self.entries)

    # --- finding ------------------------------------------------------------------------------

    def search(self, query: str, limit: int = 10) -> list[ToolEntry]:
        """The tools that best match ``query`` (BM25 over names, descriptions and parameters), best first.

        Only tools sharing a word (after stemming) with the query are returned.
        """
        limit = max(0, min(int(limit), MAX_RESULTS))
        with self._lock:
            if self._index is None:
                self._index = SearchIndex([(e.qualified_name, _name_text(e), _body_text(e)) for e in self.entries])
            index = self._index
        return [self.entries[i] for i, _ in index.search(str(query), limit)]

    def resolve(self, name: str) -> ToolEntry:
        """The entry for ``name``: ``tools.crm.get_customer``, ``crm.get_customer``, a global name or the host name.

        A bare local name works when one tool has it.

        Raises:
            LookupError: no such tool (the message suggests close names).
        """
        text = str(name).strip()[:300]
        for candidate in (text, f"tools.{text}"):
            if candidate in self._by_name:
                return self._by_name[candidate]
        local = [e for e in self.entries if e.local_name == text]
        if len(local) == 1:
            return local[0]
        if len(local) > 1:
            raise LookupError(f"{text!r} is in several namespaces: {', '.join(e.qualified_name for e in local)}; "
                              "give the full name")
        close = difflib.get_close_matches(text, list(self._by_name), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else "; search_tools('what you need') finds tools"
        raise LookupError(f"no tool named {text!r}{hint}")

    def describe(self, name: str) -> str:
        """The tool's full stub (signature, docstring with every parameter), with where it lives.

        Raises:
            LookupError: as :meth:`resolve`.
        """
        entry = self.resolve(name)
        stub = entry.tool.python_stub()
        if entry.local_name != entry.tool.name:
            head, sep, rest = stub.partition(f"def {entry.tool.name}(")
            stub = f"{head}def {entry.local_name}({rest}" if sep else stub
        where = f"# {entry.qualified_name}" + (f"  ({entry.import_line})" if entry.import_line else "  (global)")
        return f"{where}\n{stub}"

    # --- the prompt ---------------------------------------------------------------------------

    def stubs(self) -> str:
        """Every tool's stub, as the ``all`` disclosure puts them in the prompt."""
        return "\n\n".join(e.tool.python_stub() for e in self.entries)

    def render(self) -> str:
        """The prompt's catalogue for on-demand disclosure: each namespace, its description and size."""
        lines = []
        for ns in self.namespaces:
            count = f"{len(ns.tools)} tool{'s' if len(ns.tools) != 1 else ''}"
            about = ns.description or _examples(ns)
            if ns.group is None:
                lines.append(f"- global functions ({count}, call them by name): {about}")
            else:
                lines.append(f"- {ns.path} ({count}): {about}")
        return "\n".join(lines)


# --- entries ---------------------------------------------------------------------------------


def _entry(t: Tool[Any, Any]) -> ToolEntry:
    group = getattr(t, "group", None)
    local = getattr(t, "local_name", None) or t.name
    qualified = f"tools.{group}.{local}" if group else t.name
    header = t.python_stub().split("\n", 1)[0]
    signature = header.split(f"def {t.name}", 1)[-1].rstrip(":")
    return ToolEntry(t.name, qualified, group, local, _first_line(t.description, MAX_SUMMARY), signature, t)


def _first_line(text: str, limit: int) -> str:
    line = next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _name_text(e: ToolEntry) -> str:
    return f"{e.local_name} {e.group or ''}"


def _body_text(e: ToolEntry) -> str:
    parts = [e.tool.description or ""]
    props = e.tool.parameters.get("properties") or {}
    for pname, schema in props.items():
        parts.append(str(pname))
        if isinstance(schema, dict) and isinstance(schema.get("description"), str):
            parts.append(schema["description"])
    return "\n".join(parts)


def _examples(ns: Namespace) -> str:
    names = [q.rsplit(".", 1)[-1] for q in ns.tools[:4]]
    more = ", ..." if len(ns.tools) > 4 else ""
    return "e.g. " + ", ".join(names) + more
