"""``search_tools`` and ``describe``: the catalogue's functions in every session.

Both run on the host (the catalogue is host data; the kernel only sends a
query or a name and gets plain data back). Each comes with a small face in
the kernel (a ``HostFunction`` wrapper, standard library only): search
results become records whose ``repr`` reads well when printed, and
``describe`` prints, accepts the function itself as well as its name, and
falls back to ``help()`` for anything that is not a tool.

What arrives from the sandbox is hostile: a query is cut to
:data:`~._search.MAX_QUERY_CHARS`, the limit is clamped, a name is only
looked up, never evaluated.
"""

from __future__ import annotations

from typing import Any, Callable

from sandbox.functions import HostFunction

from ._catalog import MAX_RESULTS, ToolCatalog

SEARCH_TOOLS = "search_tools"
DESCRIBE = "describe"
#: Names the agent's own functions take in the sandbox; a tool cannot have them.
HELPER_NAMES = (SEARCH_TOOLS, DESCRIBE)

#: How the prompt shows them (on-demand disclosure).
HELPER_STUBS = '''def search_tools(query: str, limit: int = 10) -> list[ToolInfo]:
    """Find tools for a need, best match first: each result has .name (where the tool lives),
    .signature, .summary and .import_line. print() the list to read it."""

def describe(tool) -> None:
    """Print a tool's full documentation: signature, every parameter, what it returns.
    `tool` is the function or its name ("tools.crm.get_customer"). help(tool) works too."""'''

_SEARCH_WRAPPER = '''
class ToolInfo:
    """A tool found by search_tools(): .name (where it lives), .signature, .summary, .import_line."""

    __slots__ = ("name", "signature", "summary", "import_line")

    def __init__(self, record):
        self.name = str(record.get("name", ""))
        self.signature = str(record.get("signature", ""))
        self.summary = str(record.get("summary", ""))
        self.import_line = str(record.get("import", ""))

    def __repr__(self):
        return "%s%s  # %s" % (self.name, self.signature, self.summary) if self.summary else self.name + self.signature


class ToolList(list):
    """search_tools() results: a list of ToolInfo that prints one tool per line."""

    def __repr__(self):
        if not self:
            return "[] (no tool matches; try other words)"
        return "\\n".join(repr(t) for t in self)

    __str__ = __repr__


def search_tools(query, limit=10):
    """Find tools for a need, best match first (ranked over names, descriptions and parameters).

    Returns a list of ToolInfo (.name, .signature, .summary, .import_line); print it to read it.
    Then import what you need, e.g. ``from tools.crm import get_customer``, and call describe(tool)
    (or help(tool)) for the full documentation.

    Example: print(search_tools("convert an amount between currencies"))
    """
    return ToolList(ToolInfo(r) for r in __host__(query, limit) if isinstance(r, dict))
'''

_DESCRIBE_WRAPPER = '''
def describe(tool):
    """Print a tool's full documentation: signature, every parameter, what it returns.

    ``tool`` is the function (``describe(get_customer)``), a search result, or a name
    (``describe("tools.crm.get_customer")``). For anything that is not a tool, this is help().
    """
    name = tool
    if not isinstance(tool, str):
        if type(tool).__name__ == "ToolInfo" and isinstance(getattr(tool, "name", None), str):
            name = tool.name
        elif getattr(tool, "__wrapped_host_function__", False):
            module = getattr(tool, "__module__", "") or ""
            name = (module + "." if module.startswith("tools.") else "") + getattr(tool, "__name__", "")
        else:
            help(tool)
            return None
    try:
        print(__host__(name))
    except LookupError:
        if isinstance(tool, str):
            raise
        help(tool)
    return None
'''


def catalog_functions(catalog: Callable[[], ToolCatalog]) -> list[HostFunction]:
    """``search_tools`` and ``describe`` for a session; ``catalog()`` gives the catalogue of the moment."""

    def search_tools(query: str, limit: int = 10) -> list[dict[str, Any]]:
        if not isinstance(query, str):
            raise TypeError(f"search_tools(query): query must be a string describing what you need, "
                            f"not {type(query).__name__}")
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError("search_tools(query, limit): limit must be an int")
        return [e.record() for e in catalog().search(query, max(1, min(limit, MAX_RESULTS)))]

    def describe(tool: str) -> str:
        if not isinstance(tool, str):
            raise TypeError("describe(tool): give the tool (or its name as a string)")
        return catalog().describe(tool)

    return [
        HostFunction(search_tools, name=SEARCH_TOOLS, doc="Find tools for a need, best match first.")
        .place(wrapper=_SEARCH_WRAPPER),
        HostFunction(describe, name=DESCRIBE, doc="Print a tool's full documentation.")
        .place(wrapper=_DESCRIBE_WRAPPER),
    ]
