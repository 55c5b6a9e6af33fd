"""The tools of one CodeAct chat session as the sandbox's code calls them and the prompt shows them.

The host side of every call from sandboxed code (bind the arguments, put the
privacy filter's values back, approve, call, report), the tools a live source
(an MCP server) adds or withdraws between steps, and ``final_answer``.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

from sandbox.functions import HostFunction

from .action_state import ActionState
from .catalog import ToolSurface
from .errors import CodeActError
from .events import ToolCall
from .observation import truncate_middle
from .privacy import ChatPrivacy
from .run import Approvals, ainvoke_tool, invoke_tool, tools_to_add
from .tools import Tool, run_hooks
from .values import preview

#: Name of the function that ends a run from inside the code.
FINAL_ANSWER = "final_answer"


class ToolSettings(Protocol):
    """What a chat's tools are made from (a :class:`~codeact.agent.CodeActAgent` has it all)."""

    tools: list[Tool[Any, Any]]
    deps: Any
    skills: Any
    approve: Any
    auto_approve_skills: bool
    tool_disclosure: Any
    tool_budget: int


class ChatTools:
    """The tools one chat session offers now, and the host side of calling them from the sandbox.

    ``current`` returns the run in progress (calls come only while one runs);
    ``privacy`` is the session's privacy filter.
    """

    def __init__(self, agent: ToolSettings, approvals: Approvals, current: Callable[[], ActionState | None],
                 privacy: ChatPrivacy, *, restricted: bool) -> None:
        self.agent = agent
        self._approvals = approvals
        self._current = current
        self._privacy = privacy
        self._restricted = restricted
        #: The tools by name as the sandbox has them now (the agent's, plus those added, less those withdrawn).
        self.now: dict[str, Tool[Any, Any]] = {t.name: t for t in agent.tools}
        #: Live tool sources (MCP servers) by id: (source, the version the sandbox has).
        self._sources: dict[int, tuple[Any, Any]] = {}
        #: How the tools appear in the sandbox and the prompt (made when a sandbox opens).
        self.surface: ToolSurface | None = None

    # --- the sandbox's host functions -----------------------------------------------------------

    def host_functions(self) -> list[HostFunction]:
        """The host functions of a sandbox opening now: every tool as the surface shows it, and ``final_answer``."""
        agent = self.agent
        self.surface = self._make_surface()
        self.now = {t.name: t for t in agent.tools}
        self._sources = {id(t.toolset): (t.toolset, t.toolset.version) for t in agent.tools
                         if getattr(t, "toolset", None) is not None}
        functions = self.surface.host_functions(agent.tools, self.invoker)
        functions.append(HostFunction(self._final_answer, name=FINAL_ANSWER,
                                      doc="Finish the task and return `answer` to the user."))
        return functions

    def _final_answer(self, answer: Any) -> None:
        state = self._current()
        assert state is not None
        state.give_answer(answer)

    def _make_surface(self) -> ToolSurface:
        agent = self.agent
        from .privacy import PROMPT_NOTE

        skills = None
        if agent.skills is not None:
            from .skills import SessionSkills

            state = self._current()
            above = getattr(state.link, "approver", None) if state is not None else None  # the top run's
            can_ask = agent.approve is not None or agent.auto_approve_skills or above is not None
            skills = SessionSkills(agent.skills, self._approve_skill if can_ask else None)
        return ToolSurface(agent.tools, disclosure=agent.tool_disclosure, budget=agent.tool_budget,
                           descriptions=group_descriptions(agent.tools), skills=skills,
                           namespaces=not self._restricted,
                           privacy_note=PROMPT_NOTE if self._privacy.on else "")

    def _approve_skill(self, request: Any) -> bool:
        """Ask about saving a skill (:class:`~codeact.skills.SkillApproval`) as tools that require approval are
        asked: one question at a time, the human's time off the code's clock, no save after a late yes; the
        top run's approver when this run is an agent called as a tool (the request names the agent)."""
        from dataclasses import replace

        state = self._current()
        request = replace(request, run_id=state.run_id if state else "", step=state.step if state else 0)
        if self.agent.auto_approve_skills:
            return True
        return self._approvals.ask(request, state.link if state else None)

    # --- a call from the sandbox ----------------------------------------------------------------

    def invoker(self, tool: Tool[Any, Any]) -> Callable[[tuple[Any, ...], dict[str, Any]], Any]:
        """The host side of a tool called from sandboxed code: bind, approve, call, record.

        For a tool with an event loop of its own (``Tool.loop``: an MCP tool) the invoker is async and
        each call runs as a task on that loop, with no worker thread in between.
        """

        def invoke(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            state, arguments = self._bind(tool, args, kwargs)
            with run_hooks(self._hooks(state, tool)):
                value = invoke_tool(tool, arguments, run_id=state.run_id, step=state.step, deps=self.agent.deps,
                                    approvals=self._approvals, report=state.report,
                                    trace=state.trace, trace_parent=state.action_ctx, link=state.link)
            return self._returned(state, tool, value)

        async def ainvoke(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            state, arguments = self._bind(tool, args, kwargs)
            with run_hooks(self._hooks(state, tool)):
                value = await ainvoke_tool(tool, arguments, run_id=state.run_id, step=state.step,
                                           deps=self.agent.deps, approvals=self._approvals, report=state.report,
                                           trace=state.trace, trace_parent=state.action_ctx, link=state.link)
            return self._returned(state, tool, value)

        return ainvoke if tool.loop is not None else invoke

    def _bind(self, tool: Tool[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
              ) -> tuple[ActionState, dict[str, Any]]:
        """The run a sandbox call belongs to and the call's arguments dict (reported when they do not bind)."""
        state = self._current()
        assert state is not None
        try:
            arguments = tool.bind(args, kwargs)
            arguments = self._privacy.restore_arguments(arguments)  # placeholders the model wrote: the values
        except Exception as exc:
            shown = {"args": list(args), **kwargs}
            state.report(ToolCall(run_id=state.run_id, step=state.step, name=tool.name,
                                  arguments={k: preview(v) for k, v in shown.items()},
                                  error=f"{type(exc).__name__}: {exc}"))
            raise
        return state, arguments

    def _hooks(self, state: ActionState, tool: Tool[Any, Any]) -> Any:
        return state.turn.artifacts.tool_hooks(tool.name, state.run_id, lambda: state.step, state.report)

    def _returned(self, state: ActionState, tool: Tool[Any, Any], value: Any) -> Any:
        self._privacy.learn(tool.name, value)
        if tool.return_direct:
            state.give_answer(value)
        return value

    # --- tools that come and go -------------------------------------------------------------------

    def add(self, sandbox: Any, tools: Sequence[Tool[Any, Any] | Callable[..., Any]]) -> list[Tool[Any, Any]]:
        """Register ``tools`` in ``sandbox`` and offer them from now on; CodeActError when a name is taken."""
        new = tools_to_add(tools, self.now, FINAL_ANSWER)
        if new:
            sandbox.register(*self._functions(new))
            for t in new:
                self.now[t.name] = t
        return new

    def _functions(self, tools: Sequence[Tool[Any, Any]]) -> list[HostFunction]:
        surface = self.surface
        return [surface.host_function(t, self.invoker) if surface is not None else t.host_function(self.invoker(t))
                for t in tools]

    def changes(self, sandbox: Any) -> tuple[list[Tool[Any, Any]], list[str], str]:
        """(added, removed, problem): what the live sources (MCP servers) changed since the last look, now
        registered in ``sandbox`` or withdrawn from it; ``problem`` says why the sandbox could not be updated."""
        changed = [src for src, seen in self._sources.values() if getattr(src, "version", seen) != seen]
        if not changed or sandbox is None:
            return [], [], ""
        added: list[Tool[Any, Any]] = []
        removed: list[str] = []
        for src in changed:
            self._sources[id(src)] = (src, src.version)
            now = {t.name: t for t in list(src)}
            before = {n: t for n, t in self.now.items() if getattr(t, "toolset", None) is src}
            removed.extend(n for n in before if n not in now)
            added.extend(t for n, t in now.items() if before.get(n) is not t
                         and getattr(self.now.get(n), "toolset", src) is src)
        try:
            if removed:
                sandbox.unregister(*removed)
            if added:
                sandbox.register(*self._functions(added))
        except Exception as exc:  # the model hears about it; the run goes on
            return [], [], f"Note: the tools changed but the sandbox could not be updated: {exc}"
        for name in removed:
            self.now.pop(name, None)
        for t in added:
            self.now[t.name] = t
        return added, removed, ""

    def catalog_note(self, added: list[Tool[Any, Any]], removed: list[str]) -> str | None:
        """Bring the catalogue up to date with the tools; the on-demand note for the model, or None (the
        caller names the tools with their stubs)."""
        surface = self.surface
        if surface is None:
            return None
        tools = list(self.now.values())
        surface.update(tools, group_descriptions(tools))
        return surface.change_note(added, removed)

    @property
    def on_demand(self) -> bool:
        """Whether the prompt carries a catalogue (rewritten when the tools change) instead of every stub."""
        return self.surface is not None and self.surface.mode == "on_demand"

    def prompt_parts(self) -> tuple[list[Tool[Any, Any]], str, str]:
        """(tools shown with stubs, extra stubs, catalogue) for the system prompt."""
        tools = list(self.now.values()) or self.agent.tools
        return self.surface.prompt_parts(tools) if self.surface is not None else (tools, "", "")

    def answer_names(self) -> set[str]:
        """Names the answer's classes must not shadow in the kernel."""
        return {*self.now, FINAL_ANSWER}


def change_note(added: Sequence[Tool[Any, Any]], removed: Sequence[str]) -> str:
    """The note that tells the model which tools an MCP server added, changed or removed (with stubs)."""
    lines = ["Note: an MCP server changed its tools."]
    if added:
        stubs = "\n\n".join(t.python_stub() for t in added)
        lines.append("New or changed tools (call them like the others):\n" + truncate_middle(stubs, 4000))
    if removed:
        lines.append("Removed tools (no longer callable): " + ", ".join(removed))
    return "\n".join(lines)


def group_descriptions(tools: Sequence[Tool[Any, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for source in {id(t.toolset): t.toolset for t in tools if getattr(t, "toolset", None) is not None}.values():
        out.update(getattr(source, "group_descriptions", None) or {})
    return out


__all__ = ["ChatTools", "FINAL_ANSWER", "change_note", "group_descriptions", "CodeActError"]
