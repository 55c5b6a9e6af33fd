"""How one session's tools meet the code and the model: namespaces, helpers, the prompt's tool text.

A :class:`ToolSurface` is what a :class:`~codeact.agent.ChatSession` holds for
its tools. It resolves the disclosure once (``auto`` by the token budget),
keeps the :class:`ToolCatalog` current as tools come and go, places each
tool's host function where the code finds it (``tools.<group>`` and a
global name), adds the session's own functions (``search_tools``,
``describe``, and with skills ``save_skill`` and ``skills``), and writes the
prompt's tool text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sandbox.functions import HostFunction

from ..errors import CodeActError
from ..tools import Tool
from ._catalog import ToolCatalog
from ._disclosure import DEFAULT_TOOL_BUDGET, Disclosure, place, resolve_disclosure
from ._helpers import HELPER_NAMES, HELPER_STUBS, SEARCH_TOOLS, catalog_functions
from ._prompt import change_note, on_demand_section

Invoker = Callable[[Tool[Any, Any]], Callable[[tuple[Any, ...], dict[str, Any]], Any]]


class ToolSurface:
    """One session's tools as the sandbox and the prompt present them.

    Args:
        tools: the session's tools.
        disclosure: ``all``, ``on_demand`` or ``auto``.
        budget: tokens of stubs ``auto`` still shows.
        descriptions: what each group is for (MCP servers' instructions).
        skills: a :class:`~codeact.skills.SkillStore`, or None for no skills.
        namespaces: the sandbox can hold namespaces (``False`` for the restricted backend:
            ``auto`` then shows every stub, ``on_demand`` is refused).
        privacy_note: text for the prompt when a privacy filter is on.

    Raises:
        CodeActError: ``on_demand`` without namespaces, or a tool that takes the
            name of ``search_tools`` while the catalogue needs it.
    """

    def __init__(self, tools: Sequence[Tool[Any, Any]], *, disclosure: Disclosure = "auto",
                 budget: int = DEFAULT_TOOL_BUDGET, descriptions: Mapping[str, str] | None = None,
                 skills: Any = None, namespaces: bool = True, privacy_note: str = "") -> None:
        self.skills = skills
        self.privacy_note = privacy_note
        self._descriptions = dict(descriptions or {})
        self.catalog = ToolCatalog(tools, descriptions=self._descriptions)
        if not namespaces and disclosure == "on_demand":
            raise CodeActError("tool_disclosure='on_demand' needs the docker or local backend (the restricted "
                               "backend has no modules to import tools from); use 'all' or 'auto'")
        self.mode = resolve_disclosure("all" if not namespaces else disclosure, self.catalog.stubs(), budget)
        taken = {t.name for t in tools}
        if self.mode == "on_demand" and SEARCH_TOOLS in taken:
            raise CodeActError(f"a tool is named {SEARCH_TOOLS!r}, which on-demand disclosure needs for its "
                               "catalogue search; rename the tool or use tool_disclosure='all'")
        self._helper_names = [n for n in HELPER_NAMES if n not in taken]

    # --- the sandbox --------------------------------------------------------------------------

    def host_function(self, tool: Tool[Any, Any], invoker: Invoker) -> HostFunction:
        """``tool``'s host function, placed (``tools.<group>``, and global under its name)."""
        return place(tool.host_function(invoker(tool)), tool, self.mode)

    def host_functions(self, tools: Sequence[Tool[Any, Any]], invoker: Invoker) -> list[HostFunction]:
        """Every tool's host function, then the session's own functions."""
        functions = [self.host_function(t, invoker) for t in tools]
        functions += [f for f in catalog_functions(lambda: self.catalog) if f.name in self._helper_names]
        if self.skills is not None:
            from ..skills import skill_functions

            functions += skill_functions(self.skills)
        return functions

    def update(self, tools: Sequence[Tool[Any, Any]], descriptions: Mapping[str, str] | None = None) -> None:
        """The tools changed (an MCP server announced a new list): rebuild the catalogue; the mode stays."""
        if descriptions:
            self._descriptions.update(descriptions)
        self.catalog = ToolCatalog(tools, descriptions=self._descriptions)

    # --- the prompt ---------------------------------------------------------------------------

    def prompt_parts(self, tools: Sequence[Tool[Any, Any]]) -> tuple[list[Tool[Any, Any]], str, str]:
        """``(tools whose stubs the prompt shows, extra stubs, catalogue text)`` for the system prompt."""
        extra: list[str] = []
        sections: list[str] = []
        shown: list[Tool[Any, Any]] = list(tools)
        if self.mode == "on_demand":
            shown = []
            extra.append(HELPER_STUBS)
            sections.append(on_demand_section(self.catalog))
        if self.skills is not None:
            from ..skills import SAVE_SKILL_STUB, skills_section

            extra.append(SAVE_SKILL_STUB)
            sections.append(skills_section(self.skills))
        if self.privacy_note:
            sections.append(self.privacy_note)
        return shown, "\n\n".join(extra), "\n\n".join(sections)

    def change_note(self, added: Sequence[Tool[Any, Any]], removed: Sequence[str]) -> str | None:
        """The observation's note about changed tools on demand (None: the caller's own note, with stubs)."""
        if self.mode != "on_demand":
            return None
        return change_note(self.catalog, added, removed)
