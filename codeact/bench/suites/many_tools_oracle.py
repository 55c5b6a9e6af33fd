"""Oracles for CodeAct with tools found on demand, and token counts with one real tokenizer.

:class:`SearchingOracle` plays CodeAct under ``tool_disclosure="on_demand"``
on any task with a plan. It finds the tools the way a model has to, not
with the names it already knows:

1. it searches with the task's own wording and prints the results
   (``print(search_tools(<the task>, limit=10))``);
2. for each tool its plan needs that the printed results do not show, it
   searches again, part by part of the task's wording (sentences, clauses),
   and prints those results too;
3. it imports what the printed results name (``from tools.crm import
   search_customers``) and runs the plan as one code action.

It reads only the observations: a tool is usable only if a search printed
where it lives. If a tool is still not found after the second search, it
gives up with a plain-text answer that says so (the episode fails).

:class:`TokenCounter` wraps any model and replaces its token usage with a
count by :func:`codeact.catalog.count_tokens` (``cl100k_base``, bundled) over
what the request really carries: every message, plus the function schemas a
function-calling request sends. The same count for every agent kind.
"""

from __future__ import annotations

import ast
import builtins
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from codeact.bench._oracle import ORACLE, WholeReplies
from codeact.bench._task import Task
from codeact.catalog import count_tokens, query_parts
from codeact.messages import Message, ModelResponse, Usage
from codeact.models import estimate_tokens
from sandbox.pyparse import AST_LOCK, parse

_FOUND = re.compile(r"^(tools\.(\w+)\.(\w+)|(\w+))\(", re.MULTILINE)


class SearchingOracle(WholeReplies):
    """Replays ``task``'s plan as CodeAct with on-demand tools (see the module docs).

    Args:
        task: a task with an oracle plan.
        limit: results of the first search (the later ones show 5 per part).
    """

    def __init__(self, task: Task, *, limit: int = 10) -> None:
        from codeact.errors import BenchError

        if task.oracle is None:
            raise BenchError(f"task {task.key} has no oracle solution; run it with a real model")
        self.name = ORACLE
        self.task = task
        self.limit = limit
        with AST_LOCK:  # the plan's code is built from ASTs on an episode's thread: see sandbox.pyparse
            self.code = task.oracle.code_action()
            self.needed = _called_names(self.code)
        self._turn = 0
        self._searched_parts = False

    def __repr__(self) -> str:
        return f"SearchingOracle(task={self.task.key!r})"

    # --- the Model protocol ---------------------------------------------------------------

    def complete(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None) -> ModelResponse:
        reply = self._reply(list(messages))
        self._turn += 1
        prompt_chars = sum(len(m.content) for m in messages)
        usage = Usage(estimate_tokens(prompt_chars), estimate_tokens(len(reply)), 1)
        return ModelResponse(message=Message("assistant", reply), usage=usage, duration=0.0, model=ORACLE,
                             finish_reason="stop")

    # --- replies ---------------------------------------------------------------------------

    def _reply(self, messages: list[Message]) -> str:
        if self._turn == 0:
            return _code(f"print(search_tools({self.task.instruction!r}, limit={self.limit}))")
        found = self._found(messages)
        missing = [n for n in self.needed if n not in found]
        if missing and not self._searched_parts:
            self._searched_parts = True
            parts = query_parts(self.task.instruction)
            lines = [f"for part in {parts!r}:", "    print(search_tools(part, limit=5))"]
            return _code("\n".join(lines))
        if missing:
            return f"The oracle could not find these tools by searching: {', '.join(missing)}."
        if self._turn > 3 or _acted(messages):
            last = next((m.content for m in reversed(messages) if m.role == "user"), "")
            return "The oracle's code action did not finish the task. Its output:\n" + last[:2000]
        imports = []
        for name in self.needed:
            where = found[name]
            if where:
                imports.append(f"from {where} import {name}")
        return _code("\n".join(imports + [self.code]))

    def _found(self, messages: list[Message]) -> dict[str, str]:
        """Tool name -> its namespace ('' for a global function), from every observation so far."""
        found: dict[str, str] = {}
        for m in messages:
            if m.role != "user" or not m.content.startswith("Observation:"):
                continue
            for match in _FOUND.finditer(m.content):
                if match.group(2):
                    found.setdefault(match.group(3), f"tools.{match.group(2)}")
                else:
                    found.setdefault(match.group(4), "")
        return found


def _code(text: str) -> str:
    return f"```python\n{text}\n```"


def _acted(messages: list[Message]) -> bool:
    return any(m.role == "assistant" and "final_answer(" in m.content for m in messages)


def _called_names(code: str) -> list[str]:
    """The functions ``code`` calls that it neither defines nor gets from builtins (its tools), in order."""
    tree = parse(code)
    assigned = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id
            if name not in names and name not in assigned and not hasattr(builtins, name) and name != "final_answer":
                names.append(name)
    return names


class TokenCounter:
    """A model wrapper whose usage is counted with ``cl100k_base`` over the whole request (see module docs).

    Each message counts its text, its tool calls' names and arguments and 4
    tokens of chat framing; a function-calling request adds its schemas as JSON.

    Example::

        model = TokenCounter(OracleModel(task, "react-fc", context=ctx))
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "model")

    def __repr__(self) -> str:
        return f"TokenCounter({self.inner!r})"

    def complete(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None) -> ModelResponse:
        response = self.inner.complete(messages, tools=tools) if tools else self.inner.complete(messages)
        return self._counted(messages, tools, response)

    def stream(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None
               ) -> Iterator[str | ModelResponse]:
        response = self.complete(messages, tools=tools)
        if response.text:
            yield response.text
        yield response

    async def acomplete(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None) -> ModelResponse:
        return self.complete(messages, tools=tools)

    @staticmethod
    def _counted(messages: Sequence[Message], tools: Sequence[dict] | None, response: ModelResponse) -> ModelResponse:
        prompt = sum(_message_tokens(m) for m in messages) + 3
        if tools:
            prompt += count_tokens(json.dumps(list(tools), ensure_ascii=False))
        completion = _message_tokens(response.message) - 4
        return replace(response, usage=Usage(prompt, max(completion, 1), 1))


def _message_tokens(m: Message) -> int:
    text = m.content + "".join(c.name + c.arguments for c in m.tool_calls)
    return count_tokens(text) + 4


def oracle_factory(task: Task, kind: str, ctx: Any) -> Any:
    """The bench's model factory for ``many-tools``: oracles that count tokens with ``cl100k_base``.

    ``codeact-on-demand`` gets a :class:`SearchingOracle` (it finds its tools by
    searching); every other kind the plain oracle of its agent.

    Example::

        run_bench(BenchConfig(suites=["many-tools"], agents=["codeact-all", "codeact-on-demand"]),
                  model=oracle_factory)
    """
    from codeact.bench._agents import agent_base
    from codeact.bench._oracle import OracleModel

    if kind == "codeact-on-demand":
        return TokenCounter(SearchingOracle(task))
    return TokenCounter(OracleModel(task, agent_base(kind), context=ctx))
