"""The three ReAct action formats: how tools are shown, how actions are read, how results go back.

* ``function-calling`` (agent kind ``react-fc``): the native OpenAI tools API.
  Tools travel as function schemas in ``tools=[...]``; the model may ask for
  several calls in one turn; each result goes back as a ``tool`` message
  answering its call id.
* ``json`` (``react-json``): the prompted format of the CodeAct paper's
  comparison. Tools are listed in the system prompt as JSON schemas; a reply
  holds ``Action: {"name": ..., "arguments": {...}}``; the result comes back
  as a user message ``Observation: ...``. One action per turn.
* ``text`` (``react-text``): the same with ``Action: tool(arg=value, ...)``,
  arguments written as Python literals; the non-finite floats too
  (``float('inf')``, ``float('-inf')``, ``float('nan')``, ``math.inf``,
  ``math.nan``, ``inf``, ``nan``), read without evaluating anything.

Every format also offers ``final_answer(answer)``; a reply with no action at
all is taken as the final answer (as CodeAct takes a reply without code).
A format never raises on what the model wrote: anything it cannot read
becomes a :class:`Decision` with a ``problem`` the model is told about.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from sandbox.pyparse import parse

from ..messages import Message, ModelResponse
from ..tools import Tool

FINAL_ANSWER = "final_answer"
FINAL_ANSWER_DOC = "Finish the task and give the answer to the user."

#: Agent kind for each format name (and the names accepted for each).
FORMATS = {"function-calling": "react-fc", "json": "react-json", "text": "react-text"}
_ALIASES = {"fc": "function-calling", "function_calling": "function-calling", "functions": "function-calling",
            "react-fc": "function-calling", "react-json": "json", "react-text": "text"}


def format_name(name: str) -> str:
    """The canonical format name for ``name`` (``fc`` and agent kinds accepted); ValueError if unknown."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in FORMATS:
        raise ValueError(f"unknown ReAct action format {name!r}; choose one of {', '.join(FORMATS)}")
    return key


@dataclass(frozen=True)
class ActionCall:
    """One tool call the model asked for, as read from its reply.

    ``arguments`` is the tool's arguments dict (JSON formats); ``python`` the
    ``(args, kwargs)`` of a Python-style call (text format), bound with
    :meth:`Tool.bind`. ``problem`` says why the call cannot run (its
    arguments are not valid JSON, ...); ``call_id`` is function calling's id.
    """

    name: str
    arguments: dict[str, Any] | None = None
    python: tuple[tuple[Any, ...], dict[str, Any]] | None = None
    call_id: str | None = None
    problem: str | None = None
    raw: str = ""


@dataclass(frozen=True)
class Decision:
    """What a reply asks for: calls to run, a final answer, or nothing usable (``problem``)."""

    calls: tuple[ActionCall, ...] = ()
    final: bool = False
    answer: Any = None
    problem: str | None = None
    #: Said to the model with the observation (e.g. that only the first action ran).
    note: str = ""


@dataclass(frozen=True)
class CallOutcome:
    """A call's observation text for the model, and whether it failed."""

    call: ActionCall
    text: str
    failed: bool = False


class ActionFormat(Protocol):
    """How one ReAct variant talks to the model."""

    name: str  # "function-calling", "json", "text"
    kind: str  # the agent kind: "react-fc", ...

    def tools_param(self, tools: Sequence[Tool[Any, Any]],
                    answer_schema: dict[str, Any] | None = None) -> list[dict[str, Any]] | None:
        """Function schemas for the API's ``tools=`` (None: the tools are in the prompt).

        ``answer_schema``: the JSON Schema final_answer's ``answer`` must match (a run's ``output_type``)."""
        ...

    def render_tools(self, tools: Sequence[Tool[Any, Any]]) -> str:
        """The tools as the system prompt's ``$tools`` shows them."""
        ...

    def parse(self, response: ModelResponse) -> Decision:
        """Read the reply; never raises."""
        ...

    def turn_messages(self, response: ModelResponse, outcomes: Sequence[CallOutcome], note: str) -> list[Message]:
        """The messages this turn adds to the history: the reply, then its results."""
        ...

    def feedback_messages(self, response: ModelResponse, feedback: str) -> list[Message]:
        """The messages for a reply that could not be used at all."""
        ...


def final_answer_schema(answer_schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """The final_answer function; ``answer_schema`` (a run's ``output_type``) is its ``answer``'s schema, whose
    remaining ``$defs`` (recursive types) move to the parameters' root, where its references point."""
    answer: dict[str, Any] = {"description": "the answer: a string, a number, a list or an object"}
    parameters: dict[str, Any] = {"type": "object", "properties": {"answer": answer}, "required": ["answer"]}
    if answer_schema is not None:
        answer = copy.deepcopy(answer_schema)
        defs = answer.pop("$defs", None)
        parameters["properties"]["answer"] = answer
        if defs:
            parameters["$defs"] = defs
    return {"type": "function", "function": {"name": FINAL_ANSWER, "description": FINAL_ANSWER_DOC,
                                             "parameters": parameters}}


_FINAL_TEXT = re.compile(r"^\s*(?:\*\*)?final\s+answer(?:\*\*)?\s*:\s*", re.I | re.M)
_THOUGHT = re.compile(r"^\s*thought\s*:\s*", re.I)


def plain_answer(text: str) -> str:
    """The answer in a reply without an action: after ``Final Answer:``, else the text without ``Thought:``."""
    m = _FINAL_TEXT.search(text)
    if m:
        return text[m.end():].strip()
    return _THOUGHT.sub("", text.strip(), count=1).strip()


def final_answer_value(arguments: dict[str, Any] | None) -> tuple[bool, Any]:
    """(ok, answer) from final_answer's arguments: ``answer``, or the only value given."""
    if not isinstance(arguments, dict):
        return False, None
    if "answer" in arguments:
        return True, arguments["answer"]
    if len(arguments) == 1:
        return True, next(iter(arguments.values()))
    return False, None


# --------------------------------------------------------------------------- function calling


class FunctionCallingFormat:
    """Native function calling; several calls per turn; results as ``tool`` messages."""

    name = "function-calling"
    kind = "react-fc"

    def tools_param(self, tools: Sequence[Tool[Any, Any]],
                    answer_schema: dict[str, Any] | None = None) -> list[dict[str, Any]] | None:
        return [t.openai_schema() for t in tools] + [final_answer_schema(answer_schema)]

    def render_tools(self, tools: Sequence[Tool[Any, Any]]) -> str:
        return ""  # the tools travel in the API's tools parameter

    def parse(self, response: ModelResponse) -> Decision:
        requests = response.message.tool_calls
        if not requests:
            text = response.text.strip()
            if not text:
                return Decision(problem="Your reply was empty. Call a tool, or call final_answer with the answer.")
            return Decision(final=True, answer=plain_answer(text))
        calls = []
        for i, request in enumerate(requests):
            call_id = request.id or f"call_{i}"
            raw = request.arguments or ""
            problem = None
            arguments: dict[str, Any] | None = None
            try:
                value = json.loads(raw) if raw.strip() else {}
            except ValueError as exc:
                problem = (f"the arguments of your call to {request.name} are not valid JSON ({exc}): "
                           f"{_clip(raw)}. Send them as one JSON object.")
            else:
                if isinstance(value, dict):
                    arguments = value
                else:
                    problem = (f"the arguments of your call to {request.name} must be a JSON object of named "
                               f"arguments, not {type(value).__name__}: {_clip(raw)}")
            calls.append(ActionCall(request.name, arguments, call_id=call_id, problem=problem, raw=raw))
        return Decision(calls=tuple(calls))

    def turn_messages(self, response: ModelResponse, outcomes: Sequence[CallOutcome], note: str) -> list[Message]:
        out = [Message("assistant", response.text, tool_calls=response.message.tool_calls)]
        answered = {o.call.call_id: o.text for o in outcomes}
        # The API wants every call of the assistant message answered before the next turn.
        for i, request in enumerate(response.message.tool_calls):
            call_id = request.id or f"call_{i}"
            text = answered.get(call_id, "Not run.")
            out.append(Message("tool", text, tool_call_id=call_id))
        if note:
            out.append(Message("user", note))
        return out

    def feedback_messages(self, response: ModelResponse, feedback: str) -> list[Message]:
        # Only a reply without any call is unusable as a whole (bad calls are answered one by one).
        return [Message("assistant", response.text), Message("user", feedback)]


# --------------------------------------------------------------------------- prompted formats

_ACTION = re.compile(r"^[ \t>*_`]*action[ \t*_`]*:[ \t]*", re.I | re.M)


def _clip(text: str, limit: int = 300) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _PromptedFormat:
    """Common part of the json and text formats: one action per turn, results as Observation messages."""

    name = ""
    kind = ""
    example = ""

    def tools_param(self, tools: Sequence[Tool[Any, Any]],
                    answer_schema: dict[str, Any] | None = None) -> list[dict[str, Any]] | None:
        return None

    def parse(self, response: ModelResponse) -> Decision:
        text = response.text or ""
        actions = list(_ACTION.finditer(text))
        final = _FINAL_TEXT.search(text)
        if not actions or (final is not None and final.start() < actions[0].start()):
            if not text.strip():
                return Decision(problem=f"Your reply was empty. Reply with a Thought and an Action, e.g. "
                                        f"{self.example}")
            return Decision(final=True, answer=plain_answer(text))
        body = text[actions[0].end():]
        call, problem = self._read_action(body)
        if problem is not None:
            return Decision(problem=problem)
        assert call is not None
        note = ""
        if len(actions) > 1:
            note = "(Only the first Action of your reply ran: one action per turn.)"
        return Decision(calls=(call,), note=note)

    def _read_action(self, body: str) -> tuple[ActionCall | None, str | None]:
        raise NotImplementedError

    def turn_messages(self, response: ModelResponse, outcomes: Sequence[CallOutcome], note: str) -> list[Message]:
        text = "\n".join(o.text for o in outcomes)
        if note:
            text += "\n" + note
        return [Message("assistant", response.text), Message("user", f"Observation: {text}")]

    def feedback_messages(self, response: ModelResponse, feedback: str) -> list[Message]:
        return [Message("assistant", response.text), Message("user", f"Observation: Error: {feedback}")]


def _strip_fence(body: str) -> str:
    """The action text without a Markdown fence or inline backticks around it."""
    stripped = body.lstrip()
    fence = re.match(r"```[\w+-]*[ \t]*\n?", stripped)
    if fence:
        stripped = stripped[fence.end():]
        end = stripped.find("```")
        return stripped if end < 0 else stripped[:end]
    if stripped.startswith("`"):
        return stripped.strip("`")
    return stripped


class JsonFormat(_PromptedFormat):
    """``Action: {"name": "tool", "arguments": {...}}``."""

    name = "json"
    kind = "react-json"
    example = 'Action: {"name": "tool_name", "arguments": {"argument": "value"}}'

    def render_tools(self, tools: Sequence[Tool[Any, Any]]) -> str:
        specs = [{"name": t.name, "description": t.description, "arguments": t.parameters} for t in tools]
        specs.append({"name": FINAL_ANSWER, "description": FINAL_ANSWER_DOC,
                      "arguments": final_answer_schema()["function"]["parameters"]})
        return "\n".join(json.dumps(s, ensure_ascii=False) for s in specs)

    def _read_action(self, body: str) -> tuple[ActionCall | None, str | None]:
        text = _strip_fence(body).lstrip()
        start = text.find("{")
        if start < 0 or text[:start].strip():
            return None, (f"the Action must be a JSON object such as {self.example}; got: {_clip(body)}")
        try:
            value, end = json.JSONDecoder().raw_decode(text, start)
        except ValueError as exc:
            return None, (f"the Action is not valid JSON ({exc}): {_clip(text)}. "
                          f"Write it as one JSON object such as {self.example}")
        raw = text[start:end]
        if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"].strip():
            return None, f'the Action needs a "name" (the tool) and "arguments" (an object): {_clip(raw)}'
        arguments = value.get("arguments", value.get("args", {}))
        if arguments is None:
            arguments = {}
        if isinstance(arguments, str):  # some models JSON-encode the arguments twice
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments) if arguments.strip() else {}
        if not isinstance(arguments, dict):
            return None, (f'"arguments" must be a JSON object of named arguments, not '
                          f"{type(arguments).__name__}: {_clip(raw)}")
        return ActionCall(value["name"].strip(), arguments, raw=raw), None


class TextFormat(_PromptedFormat):
    """``Action: tool(arg=value, ...)`` with Python literals as values."""

    name = "text"
    kind = "react-text"
    example = 'Action: tool_name(argument="value")'

    def render_tools(self, tools: Sequence[Tool[Any, Any]]) -> str:
        lines = []
        for t in tools:
            head = t.python_stub().split("\n", 1)[0]
            signature = head[len("def "):].rstrip(":") if head.startswith("def ") else t.name
            description = " ".join(t.description.split())
            lines.append(f"- {signature}: {description}")
        lines.append(f"- {FINAL_ANSWER}(answer): {FINAL_ANSWER_DOC}")
        return "\n".join(lines)

    def _read_action(self, body: str) -> tuple[ActionCall | None, str | None]:
        text = _strip_fence(body).strip()
        call_node, raw = _first_call(text)
        if call_node is None:
            return None, (f"the Action must be one tool call such as {self.example}; got: {_clip(text)}")
        if not isinstance(call_node.func, ast.Name):
            return None, f"call a tool by its name, e.g. {self.example}; got: {_clip(raw)}"
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for node in [*call_node.args, *(kw.value for kw in call_node.keywords)]:
            if isinstance(node, ast.Starred) or any(kw.arg is None for kw in call_node.keywords):
                return None, f"write each argument out; * and ** unpacking is not allowed: {_clip(raw)}"
        try:
            args = [literal_value(node) for node in call_node.args]
            kwargs = {str(kw.arg): literal_value(kw.value) for kw in call_node.keywords}
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            bad = next((n for n in [*call_node.args, *(kw.value for kw in call_node.keywords)] if not _is_literal(n)),
                       None)
            what = f"`{_clip(ast.unparse(bad), 60)}` is not" if bad is not None else "some value is not"
            return None, (f"argument values must be Python literals (strings in quotes, numbers, float('inf'), "
                          f"True/False/None, lists and dicts of them); {what}: {_clip(raw)}")
        return ActionCall(call_node.func.id, python=(tuple(args), kwargs), raw=raw), None


#: Spellings of the non-finite floats the text format reads: bare names, ``math.<name>``, ``float('<text>')``.
_NONFINITE_NAMES = {"inf": float("inf"), "Infinity": float("inf"), "nan": float("nan"), "NaN": float("nan")}
_NONFINITE_MATH = {"inf": float("inf"), "nan": float("nan")}
_NONFINITE_TEXT = {"inf": float("inf"), "+inf": float("inf"), "-inf": float("-inf"), "infinity": float("inf"),
                   "+infinity": float("inf"), "-infinity": float("-inf"), "nan": float("nan"),
                   "+nan": float("nan"), "-nan": float("nan")}


class _NonFinite(ast.NodeTransformer):
    """Replace the spellings of inf and nan by float constants, so ``ast.literal_eval`` reads them.

    Only these exact shapes are replaced; nothing is looked up or called."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        value = _NONFINITE_NAMES.get(node.id)
        return ast.copy_location(ast.Constant(value), node) if value is not None else node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if isinstance(node.value, ast.Name) and node.value.id == "math" and node.attr in _NONFINITE_MATH:
            return ast.copy_location(ast.Constant(_NONFINITE_MATH[node.attr]), node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if (isinstance(node.func, ast.Name) and node.func.id == "float" and len(node.args) == 1
                and not node.keywords and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)):
            value = _NONFINITE_TEXT.get(node.args[0].value.strip().lower())
            if value is not None:
                return ast.copy_location(ast.Constant(value), node)
        return node  # anything else stays a call, which literal_eval refuses


def literal_value(node: ast.AST) -> Any:
    """``ast.literal_eval`` of ``node``, also reading ``float('inf')``, ``math.inf``, ``inf``, ``nan`` and the like.

    Raises:
        ValueError: (and what ``literal_eval`` raises) the node is not such a literal.
    """
    import copy

    return ast.literal_eval(_NonFinite().visit(copy.deepcopy(node)))


def python_literal(value: Any) -> str:
    """``value`` written as the text format reads it: ``repr``, with ``float('inf')``/``float('nan')`` for the
    non-finite floats (whose repr, ``inf``, is not a literal), inside lists, tuples, sets and dicts too."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({repr(value)!r})"
    if type(value) in (list, tuple, set, frozenset, dict) and _has_nonfinite(value):
        if isinstance(value, dict):
            return "{" + ", ".join(f"{python_literal(k)}: {python_literal(v)}" for k, v in value.items()) + "}"
        items = [python_literal(v) for v in value]
        if isinstance(value, list):
            return "[" + ", ".join(items) + "]"
        if isinstance(value, tuple):
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        return "{" + ", ".join(items) + "}"
    return repr(value)


def _has_nonfinite(value: Any, depth: int = 0) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if depth > 50:
        return False
    if isinstance(value, dict):
        return any(_has_nonfinite(k, depth + 1) or _has_nonfinite(v, depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_has_nonfinite(v, depth + 1) for v in value)
    return False


def _is_literal(node: ast.AST) -> bool:
    try:
        literal_value(node)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _first_call(text: str) -> tuple[ast.Call | None, str]:
    """The first ``name(...)`` expression at the start of ``text`` (it may span lines), and its source."""
    text = text[:20_000]
    for m in re.finditer(r"\)", text):
        candidate = text[: m.end()]
        try:
            tree = parse(candidate.strip(), mode="eval")
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            continue
        if isinstance(tree.body, ast.Call):
            return tree.body, candidate.strip()
        return None, candidate.strip()
    return None, text


def make_format(name: str) -> ActionFormat:
    """The format object for a format name or agent kind."""
    formats: dict[str, Callable[[], ActionFormat]] = {
        "function-calling": FunctionCallingFormat, "json": JsonFormat, "text": TextFormat}
    return formats[format_name(name)]()


__all__ = ["ActionCall", "ActionFormat", "CallOutcome", "Decision", "FORMATS", "FunctionCallingFormat",
           "JsonFormat", "TextFormat", "format_name", "make_format", "plain_answer", "final_answer_value",
           "FINAL_ANSWER", "literal_value", "python_literal"]
