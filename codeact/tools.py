"""Tools: Python functions an agent can call, described for a model and validated on the host.

A :class:`Tool` wraps a function. Its JSON schema comes from the type hints and
the docstring (Google, NumPy or reST style), so one definition serves both
agent styles: CodeAct prompts show :meth:`Tool.python_stub`, function-calling
agents send :meth:`Tool.openai_schema`. Arguments are validated (and coerced:
``"3"`` becomes ``3``, a dict becomes a dataclass) before the function runs,
and a bad call raises :class:`~codeact.errors.ToolArgumentError` with a message
a model can act on.

Example::

    from typing import Literal
    from codeact.tools import RunContext, tool

    @tool
    def get_daily_weather(city: str, days: int = 3, unit: Literal["C", "F"] = "C") -> str:
        \"\"\"Weather for today, tomorrow and the day after in a city.

        Args:
            city: city name, e.g. 北京
            days: how many days to report, starting today
            unit: temperature unit
        \"\"\"
        return f"{city}: sunny for {days} days"

    @tool(requires_approval=True)
    def send_email(ctx: RunContext[dict], to: str, body: str) -> None:
        \"\"\"Send an email from the current user's account.\"\"\"
        account = ctx.deps["account"]   # ctx is filled by the agent, never by the model
        ...

    get_daily_weather("Paris")                       # still a plain function
    get_daily_weather.call({"city": "Paris", "days": "2"})
    print(get_daily_weather.python_stub())           # def get_daily_weather(city: str, ...
    get_daily_weather.openai_schema()                # {"type": "function", ...}

Tools only run on the host. The sandbox receives :meth:`Tool.host_function`, a
stub with the same signature whose calls come back to the host.
"""

from __future__ import annotations

import ast
import asyncio
import contextvars
import copy
import dataclasses
import difflib
import enum
import functools
import importlib
import importlib.util
import inspect
import keyword
import os
import sys
import threading
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import (
    Any,
    Awaitable,
    Callable,
    Generic,
    Iterable,
    Literal,
    Mapping,
    ParamSpec,
    TypeVar,
    Union,
    overload,
)

import docstring_parser
import pydantic
import typing_extensions
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema

from .errors import ConfigError, ToolArgumentError, ToolDefinitionError, UnknownToolError

if typing.TYPE_CHECKING:  # sandbox.functions is light, but only host_function() needs it
    from sandbox.functions import HostFunction

__all__ = [
    "RunContext",
    "Tool",
    "tool",
    "ensure_tools",
    "load_tools",
]

P = ParamSpec("P")
R = TypeVar("R")
DepsT = TypeVar("DepsT")

_EMPTY = inspect.Parameter.empty
_MAX_INPUT_REPR = 80


# --------------------------------------------------------------------------- run context


@dataclass
class RunContext(Generic[DepsT]):
    """What the agent knows about the current call; hidden from the model.

    Annotate one parameter of a tool with ``RunContext`` (or ``RunContext[MyDeps]``)
    and the agent fills it on every call. It never appears in the JSON schema,
    the Python stub or the sandbox signature.

    Attributes:
        run_id: id of the agent run making the call ("" outside a run).
        step: 1-based step number of the run (0 outside a run).
        deps: whatever the user passed to the agent as dependencies
            (a user id, a database handle, an API client...).
        metadata: free-form request metadata.
    """

    run_id: str = ""
    step: int = 0
    deps: DepsT = None  # type: ignore[assignment]
    metadata: dict[str, Any] = field(default_factory=dict)


def _is_run_context(annotation: Any) -> bool:
    annotation = _strip_annotated(annotation)
    if annotation is RunContext:
        return True
    origin = typing.get_origin(annotation)
    if origin is RunContext:
        return True
    # Optional[RunContext] is accepted too: the agent always passes one.
    if _is_union(annotation):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return len(args) == 1 and _is_run_context(args[0])
    return False


# --------------------------------------------------------------------------- typing helpers


def _strip_annotated(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing_extensions.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _is_union(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    return origin is Union or origin is types.UnionType


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and typing_extensions.is_typeddict(tp)


def _is_structured(tp: Any) -> bool:
    """A class whose values the model passes as a JSON object (dataclass, model, TypedDict)."""
    if not isinstance(tp, type):
        return False
    return (
        dataclasses.is_dataclass(tp)
        or _is_typeddict(tp)
        or (issubclass(tp, pydantic.BaseModel) and tp is not pydantic.BaseModel)
    )


def _format_annotation(annotation: Any) -> str:
    """Readable Python text for a type: ``list[str]``, ``int | None``, ``Literal['a', 'b']``.

    Enums render as a ``Literal`` of their values because the sandbox does not
    have the enum class; the host turns the value back into the member.
    """
    if annotation is _EMPTY:
        return ""
    if isinstance(annotation, str):
        return annotation
    if isinstance(annotation, typing.ForwardRef):
        return annotation.__forward_arg__
    if annotation is None or annotation is type(None):
        return "None"
    if annotation is Ellipsis:
        return "..."
    if annotation is Any:
        return "Any"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing_extensions.Annotated:
        return _format_annotation(args[0])
    if origin is Literal:
        return "Literal[" + ", ".join(repr(_plain_value(a)) for a in args) + "]"
    if _is_union(annotation):
        return " | ".join(_format_annotation(a) for a in args)
    if isinstance(annotation, list):  # the parameter list of Callable[[...], R]
        return "[" + ", ".join(_format_annotation(a) for a in annotation) + "]"
    if origin is not None:
        name = getattr(origin, "__name__", None) or str(origin).replace("typing.", "")
        if not args:
            return name
        return f"{name}[{', '.join(_format_annotation(a) for a in args)}]"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        values = [repr(m.value) for m in annotation]
        return "Literal[" + ", ".join(values) + "]" if values else annotation.__name__
    if isinstance(annotation, (type, TypeVar)) or hasattr(annotation, "__supertype__"):
        return annotation.__name__  # classes, TypeVars, NewTypes
    return str(annotation).replace("typing.", "")


def _plain_value(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def _format_default(value: Any) -> str:
    """The default as Python source; ``...`` when its repr is not a literal."""
    value = _plain_value(value)
    text = repr(value)
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return "..."
    return text


def _render_signature(signature: inspect.Signature) -> str:
    """``(city: str, days: int = 3) -> str`` without the quotes ``str(Signature)`` puts
    around string annotations; defaults that are not literals show as ``...``."""
    parts: list[str] = []
    seen_keyword_only = False
    params = list(signature.parameters.values())
    for index, p in enumerate(params):
        if p.kind is p.KEYWORD_ONLY and not seen_keyword_only:
            parts.append("*")
        if p.kind in (p.KEYWORD_ONLY, p.VAR_POSITIONAL):
            seen_keyword_only = True
        text = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
        annotation = _format_annotation(p.annotation)
        if annotation:
            text += f": {annotation}"
        if p.default is not _EMPTY:
            text += f" = {_format_default(p.default)}" if annotation else f"={_format_default(p.default)}"
        parts.append(text)
        is_last_positional_only = p.kind is p.POSITIONAL_ONLY and (
            index + 1 == len(params) or params[index + 1].kind is not p.POSITIONAL_ONLY
        )
        if is_last_positional_only:
            parts.append("/")
    text = f"({', '.join(parts)})"
    returns = _format_annotation(signature.return_annotation)
    return f"{text} -> {returns}" if returns else text


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_INPUT_REPR else text[: _MAX_INPUT_REPR - 3] + "..."


# --------------------------------------------------------------------------- JSON schema helpers


class _SchemaGenerator(GenerateJsonSchema):
    """Pydantic's generator, minus the warning for defaults JSON cannot hold.

    Such defaults (a sentinel object, a compiled regex) are simply left out of
    the schema; the function applies them itself.
    """

    def emit_warning(self, kind: Any, detail: str) -> None:
        if kind == "non-serializable-default":
            return
        super().emit_warning(kind, detail)


# Keys whose values are maps from names to schemas, not schemas themselves.
_NAME_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties", "dependentSchemas"})
# Keys whose values are data, never schemas.
_DATA_KEYS = frozenset({"default", "enum", "const", "examples", "required"})


def _clean_schema(node: Any) -> Any:
    """Drop pydantic's auto-generated ``title`` keywords (never a property called title)."""
    if isinstance(node, list):
        return [_clean_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _DATA_KEYS:
            out[key] = value
        elif key in _NAME_MAPS and isinstance(value, dict):
            out[key] = {name: _clean_schema(sub) for name, sub in value.items()}
        else:
            out[key] = _clean_schema(value)
    return out


def _collect_refs(node: Any, found: set[str]) -> set[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            found.add(ref[len("#/$defs/") :])
        for key, value in node.items():
            if key not in _DATA_KEYS:
                _collect_refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _collect_refs(value, found)
    return found


def _inline_defs(schema: dict[str, Any]) -> dict[str, Any]:
    """Inline every ``$defs`` entry that is not recursive.

    Models read a self-contained schema more reliably; recursive types (a tree
    node that contains nodes) cannot be inlined, so those stay in ``$defs``,
    which JSON schema and OpenAI both accept.
    """
    defs: dict[str, Any] = schema.get("$defs", {})
    if not defs:
        return schema
    direct = {name: _collect_refs(body, set()) for name, body in defs.items()}

    def reaches(start: str, target: str) -> bool:
        seen, todo = set(), list(direct.get(start, ()))
        while todo:
            name = todo.pop()
            if name == target:
                return True
            if name not in seen:
                seen.add(name)
                todo.extend(direct.get(name, ()))
        return False

    recursive = {name for name in defs if reaches(name, name)}

    def resolve(node: Any) -> Any:
        if isinstance(node, list):
            return [resolve(v) for v in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            name = ref[len("#/$defs/") :]
            if name in defs and name not in recursive:
                merged = copy.deepcopy(resolve(defs[name]))
                # Sibling keys (the parameter's description, default) win over the type's.
                merged.update({k: resolve(v) for k, v in node.items() if k != "$ref"})
                return merged
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "$defs":
                continue
            out[key] = value if key in _DATA_KEYS else resolve(value)
        if "allOf" in out and isinstance(out["allOf"], list) and len(out["allOf"]) == 1:
            only = out.pop("allOf")[0]
            if isinstance(only, dict):
                out = {**only, **out}
        return out

    result = resolve(schema)
    if recursive:
        result["$defs"] = {name: resolve(defs[name]) for name in defs if name in recursive}
    return result


# --------------------------------------------------------------------------- docstrings


@dataclass(frozen=True)
class _Doc:
    description: str
    params: dict[str, str]
    returns: str


def _parse_docstring(doc: str) -> _Doc:
    if not doc.strip():
        return _Doc("", {}, "")
    parsed = docstring_parser.parse(doc)  # auto-detects Google, NumPy, reST, Epydoc
    parts = [p.strip() for p in (parsed.short_description, parsed.long_description) if p and p.strip()]
    params = {}
    for p in parsed.params:
        if p.description:
            params[p.arg_name.lstrip("*").split(" ")[0]] = inspect.cleandoc(p.description)
    returns = ""
    if parsed.returns is not None and parsed.returns.description:
        returns = inspect.cleandoc(parsed.returns.description)
    return _Doc("\n\n".join(parts), params, returns)


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line if line.strip() else "" for line in text.splitlines())


# --------------------------------------------------------------------------- the Tool type


@dataclass(frozen=True)
class _Param:
    """One model-visible parameter and the name of its field in the validation model."""

    name: str
    field: str
    parameter: inspect.Parameter
    annotation: Any  # resolved type hint (Any when missing), Annotated kept
    description: str


class Tool(Generic[P, R]):
    """A function the agent can call, with its schema, stub and validator.

    Create one with :func:`tool` (``@tool`` or ``@tool(...)``) or ``Tool(func, ...)``.
    Calling the object calls the function unchanged; the agent uses
    :meth:`call` / :meth:`acall`, which validate the model's arguments first.

    Attributes:
        name: the name the model calls (a Python identifier).
        description: the docstring's summary and body (no Args section), or
            the ``description`` given; the docstring's Returns text is appended.
        func: the wrapped function.
        is_async: True for ``async def`` functions.
        return_direct: the tool's result ends the run and is the final answer.
        requires_approval: a human (or approval callback) must allow each call.
        timeout: seconds one call may take (``None``: no limit of its own).
        context_param: name of the hidden :class:`RunContext` parameter, or None.
        signature: the public signature (context parameter removed).
    """

    name: str
    description: str
    func: Callable[P, R]
    is_async: bool
    return_direct: bool
    requires_approval: bool
    timeout: float | None
    context_param: str | None
    signature: inspect.Signature

    def __init__(
        self,
        func: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        return_direct: bool = False,
        requires_approval: bool = False,
        timeout: float | None = None,
    ) -> None:
        if isinstance(func, Tool):
            func = func.func
        if not callable(func):
            raise ToolDefinitionError(f"cannot make a tool from {func!r}: it is not callable")
        tool_name = name if name is not None else getattr(func, "__name__", None) or type(func).__name__
        if not isinstance(tool_name, str) or not tool_name.isidentifier() or keyword.iskeyword(tool_name):
            raise ToolDefinitionError(
                f"{tool_name!r} cannot be a tool name: tools become Python functions, so the name must be "
                "a valid identifier that is not a keyword; pass name=... to @tool"
            )
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
            raise ToolDefinitionError(f"tool {tool_name!r}: timeout must be a positive number of seconds or None")
        if inspect.isasyncgenfunction(func) or inspect.isgeneratorfunction(func):
            raise ToolDefinitionError(
                f"tool {tool_name!r} is a generator function; tools must return their result (collect it into a list)"
            )

        self.name = tool_name
        self.func = func
        self.is_async = _is_coroutine_callable(func)
        self.return_direct = bool(return_direct)
        self.requires_approval = bool(requires_approval)
        self.timeout = float(timeout) if timeout is not None else None

        try:
            full_signature = inspect.signature(func)
        except (TypeError, ValueError) as exc:
            raise ToolDefinitionError(f"tool {tool_name!r}: cannot read the signature of {func!r}: {exc}") from exc
        hints = _resolve_hints(func, full_signature, tool_name)
        self._full_signature = full_signature.replace(
            parameters=[p.replace(annotation=hints.get(p.name, p.annotation)) for p in full_signature.parameters.values()],
            return_annotation=hints.get("return", full_signature.return_annotation),
        )

        doc = _parse_docstring(_docstring_of(func))
        self._returns_doc = doc.returns
        # Function-calling schemas have no place for the return value, so the
        # description carries the Returns text; the stub gives it its own section.
        self._summary = inspect.cleandoc(description) if description is not None else doc.description
        self.description = self._summary
        if description is None and doc.returns:
            self.description = (self._summary + "\n\n" if self._summary else "") + f"Returns: {doc.returns}"

        self.context_param = None
        params: list[_Param] = []
        self._var_keyword: inspect.Parameter | None = None
        for index, p in enumerate(self._full_signature.parameters.values()):
            if _is_run_context(p.annotation):
                if self.context_param is not None:
                    raise ToolDefinitionError(
                        f"tool {tool_name!r} has two RunContext parameters ({self.context_param!r} and {p.name!r}); keep one"
                    )
                if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                    raise ToolDefinitionError(f"tool {tool_name!r}: the RunContext parameter {p.name!r} cannot be *args/**kwargs")
                self.context_param = p.name
                continue
            if p.kind is p.VAR_POSITIONAL:
                raise ToolDefinitionError(
                    f"tool {tool_name!r}: *{p.name} cannot be described to a model; "
                    f"replace it with a named parameter such as `{p.name}: list[...]`"
                )
            if p.kind is p.VAR_KEYWORD:
                self._var_keyword = p
                continue
            annotation = Any if p.annotation is _EMPTY else p.annotation
            params.append(_Param(p.name, f"p{index}", p, annotation, _param_description(annotation, doc.params.get(p.name, ""))))
        self._params = params
        self._by_name = {p.name: p for p in params}

        self.signature = self._full_signature.replace(
            parameters=[p for p in self._full_signature.parameters.values() if p.name != self.context_param]
        )
        self._model, self._extra_adapter = self._build_validator()
        self._parameters = self._build_schema()

        # Look like the wrapped function to introspection (help(), inspect.signature, pickling by name).
        self.__wrapped__ = func
        self.__doc__ = _docstring_of(func) or None
        self.__name__ = getattr(func, "__name__", tool_name)
        self.__qualname__ = getattr(func, "__qualname__", tool_name)
        self.__module__ = getattr(func, "__module__", None) or __name__

    # ------------------------------------------------------------------ construction helpers

    def _field_info(self, p: _Param) -> tuple[Any, FieldInfo]:
        annotation = _strip_string_metadata(p.annotation)
        kwargs: dict[str, Any] = {"alias": p.name}
        if p.description:
            kwargs["description"] = p.description
        if p.parameter.default is not _EMPTY:
            kwargs["default"] = p.parameter.default
        return annotation, pydantic.Field(**kwargs)

    def _build_validator(self) -> tuple[type[pydantic.BaseModel], pydantic.TypeAdapter[Any] | None]:
        # Fields get neutral names (p0, p1...) and the real name as alias, so a
        # parameter may be called `json`, `copy`, `model_x` or `_x` without
        # clashing with BaseModel attributes.
        fields = {p.field: self._field_info(p) for p in self._params}
        config = pydantic.ConfigDict(
            extra="allow" if self._var_keyword is not None else "forbid",
            protected_namespaces=(),
            populate_by_name=False,
        )
        try:
            model = pydantic.create_model(f"{self.name}_arguments", __config__=config, **fields)  # type: ignore[call-overload]
            model.model_json_schema(schema_generator=_SchemaGenerator)
        except Exception as exc:  # pydantic raises several types here; find the parameter at fault
            raise self._unsupported_type_error(exc) from exc
        extra_adapter = None
        if self._var_keyword is not None and self._var_keyword.annotation is not _EMPTY:
            try:
                extra_adapter = pydantic.TypeAdapter(dict[str, _strip_string_metadata(self._var_keyword.annotation)])
                extra_adapter.json_schema()
            except Exception as exc:
                raise ToolDefinitionError(
                    f"tool {self.name!r}: **{self._var_keyword.name} has type "
                    f"{_format_annotation(self._var_keyword.annotation)}, which has no JSON schema ({_first_line(exc)})"
                ) from exc
        return model, extra_adapter

    def _unsupported_type_error(self, exc: Exception) -> ToolDefinitionError:
        for p in self._params:
            try:
                pydantic.TypeAdapter(self._field_info(p)[0]).json_schema(schema_generator=_SchemaGenerator)
            except Exception as param_exc:
                return ToolDefinitionError(
                    f"tool {self.name!r}: parameter {p.name!r} has type {_format_annotation(p.annotation)}, "
                    f"which cannot be described as JSON ({_first_line(param_exc)}). Use a JSON-compatible type "
                    "(str, int, float, bool, list, dict, Literal, Enum, TypedDict, a dataclass or a pydantic model); "
                    "to give the tool an object the model should not see, annotate a parameter with RunContext "
                    "and pass the object as deps"
                )
        return ToolDefinitionError(f"tool {self.name!r}: cannot build a JSON schema for its parameters: {_first_line(exc)}")

    def _build_schema(self) -> dict[str, Any]:
        raw = self._model.model_json_schema(by_alias=True, schema_generator=_SchemaGenerator)
        schema = _clean_schema(_inline_defs(raw))
        schema.setdefault("properties", {})
        if self._var_keyword is not None:
            if self._extra_adapter is not None:
                extra = _clean_schema(_inline_defs(self._extra_adapter.json_schema(schema_generator=_SchemaGenerator)))
                schema["additionalProperties"] = extra.get("additionalProperties", True)
            else:
                schema["additionalProperties"] = True
        ordered = {"type": "object", "properties": schema.pop("properties")}
        for key in ("required", "additionalProperties"):
            if key in schema:
                ordered[key] = schema.pop(key)
        schema.pop("type", None)
        ordered.update(schema)  # $defs, if any recursive types remain
        return ordered

    # ------------------------------------------------------------------ public API

    @property
    def parameters(self) -> dict[str, Any]:
        """JSON schema (an object schema) of the arguments the model passes; a fresh copy."""
        return copy.deepcopy(self._parameters)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the wrapped function directly, without validation."""
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        flags = [f for f, on in (("return_direct", self.return_direct), ("requires_approval", self.requires_approval)) if on]
        return f"Tool({self.name}{_render_signature(self.signature)}{', ' + ', '.join(flags) if flags else ''})"

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Validate and coerce the model's arguments; return what the function will receive.

        Values are converted to the annotated types (``"3"`` -> ``3`` for
        ``int``, a dict -> a dataclass or pydantic model, a string -> an Enum
        member). Arguments the caller left out are not filled in, so the
        function's own defaults apply.

        Raises:
            ToolArgumentError: naming the tool, each bad argument with what was
                expected and what was received, missing required arguments, and
                unknown argument names next to the valid ones.
        """
        if not isinstance(arguments, Mapping):
            raise ToolArgumentError(
                f"tool {self.name!r} takes its arguments as a JSON object (a dict of name -> value), "
                f"got {type(arguments).__name__}: {_short_repr(arguments)}"
            )
        bad_keys = [k for k in arguments if not isinstance(k, str)]
        if bad_keys:
            raise ToolArgumentError(f"tool {self.name!r}: argument names must be strings, got {bad_keys!r}")
        problems: list[str] = []
        unknown = [] if self._var_keyword is not None else [k for k in arguments if k not in self._by_name]
        instance = None
        try:
            instance = self._model.model_validate(dict(arguments))
        except pydantic.ValidationError as exc:
            problems.extend(self._describe_errors(exc.errors(include_url=False)))
        values: dict[str, Any] = {}
        if instance is not None:
            for p in self._params:
                # A Field(default=...) inside Annotated, with no Python default, must be passed.
                if p.field in instance.model_fields_set or p.parameter.default is _EMPTY:
                    values[p.name] = getattr(instance, p.field)
            extra = dict(instance.model_extra or {})
            if extra and self._extra_adapter is not None:
                try:
                    extra = self._extra_adapter.validate_python(extra)
                except pydantic.ValidationError as exc:
                    problems.extend(self._describe_errors(exc.errors(include_url=False), annotation=self._var_keyword))
            values.update(extra)
        if unknown:
            problems.append(self._describe_unknown(unknown))
        if problems:
            raise ToolArgumentError(
                f"invalid arguments for tool {self.name!r}:\n"
                + "\n".join(f"- {line}" for line in problems)
                + f"\nexpected: {self.name}{_render_signature(self._display_signature())}"
            )
        return values

    def bind(self, args: tuple[Any, ...] | list[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Map a Python call ``tool(*args, **kwargs)`` to a dict of named arguments.

        Uses the public signature (no context parameter). Defaults are not
        filled in, and missing or unknown names are left for :meth:`validate`,
        which reports them all at once with suggestions.

        Raises:
            ToolArgumentError: the call cannot be mapped: too many positional
                arguments, a value given twice, a positional-only argument
                passed by keyword.
        """
        params = self.signature.parameters
        positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        usage = f"; its signature is {self.name}{_render_signature(self._display_signature())}"
        if len(args) > len(positional):
            raise ToolArgumentError(
                f"tool {self.name!r} takes {len(positional)} positional argument"
                f"{'' if len(positional) == 1 else 's'} but {len(args)} were given{usage}"
            )
        out = {p.name: value for p, value in zip(positional, args)}
        for key, value in kwargs.items():
            if key in out:
                raise ToolArgumentError(f"tool {self.name!r} got multiple values for argument {key!r}{usage}")
            param = params.get(key)
            if param is not None and param.kind is param.POSITIONAL_ONLY:
                raise ToolArgumentError(
                    f"tool {self.name!r}: argument {key!r} is positional-only; pass it by position{usage}"
                )
            out[key] = value
        return out

    def call(self, arguments: Mapping[str, Any], context: RunContext[Any] | None = None) -> Any:
        """Validate ``arguments`` and run the tool; return its result.

        Async tools run to completion here: with ``asyncio.run`` when no event
        loop runs in this thread, else on a worker thread. ``context`` fills the
        hidden context parameter (a default :class:`RunContext` when omitted).

        Raises:
            ToolArgumentError: the arguments do not validate (the tool did not run).
            TimeoutError: the tool has a ``timeout`` and did not finish in time.
            Exception: whatever the tool itself raises.
        """
        args, kwargs = self._call_arguments(self.validate(arguments), context)
        if self.is_async:
            return _run_sync(self._await_with_timeout(self.func(*args, **kwargs)))
        if self.timeout is None:
            result = self.func(*args, **kwargs)
        else:
            result = _call_in_thread(functools.partial(self.func, *args, **kwargs), self.timeout, self.name)
        if inspect.isawaitable(result):  # a sync wrapper around a coroutine function
            result = _run_sync(self._await_with_timeout(result))
        return result

    async def acall(self, arguments: Mapping[str, Any], context: RunContext[Any] | None = None) -> Any:
        """Async :meth:`call`. Sync tools run in a worker thread so the event loop stays free."""
        args, kwargs = self._call_arguments(self.validate(arguments), context)
        if self.is_async:
            return await self._await_with_timeout(self.func(*args, **kwargs))
        result = await self._await_with_timeout(_to_daemon_thread(functools.partial(self.func, *args, **kwargs), self.name))
        if inspect.isawaitable(result):
            result = await self._await_with_timeout(result)
        return result

    def python_stub(self) -> str:
        """A Python function definition (signature + docstring) for a CodeAct prompt.

        Example output::

            def get_daily_weather(city: str, days: int = 3) -> str:
                \"\"\"Weather for today, tomorrow and the day after in a city.

                Args:
                    city: city name, e.g. 北京
                    days: how many days to report
                \"\"\"
        """
        doc = self._stub_docstring()
        header = f"def {self.name}{_render_signature(self._display_signature())}:"
        if not doc:
            return header + "\n    ..."
        doc = doc.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
        if doc.endswith('"'):
            doc += " "  # a closing quote would merge with the docstring's own quotes
        if "\n" not in doc:
            return f'{header}\n    """{doc}"""'
        return f'{header}\n    """{_indent(doc, "    ").lstrip()}\n    """'

    def openai_schema(self) -> dict[str, Any]:
        """The tool as an OpenAI function-calling definition (``tools=[...]`` item)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def host_function(self, invoke: Callable[[tuple[Any, ...], dict[str, Any]], Any]) -> HostFunction:
        """A :class:`sandbox.functions.HostFunction` that offers this tool to sandboxed code.

        The sandbox stub gets the tool's name, public signature and docstring.
        Each call from the sandbox runs ``invoke(args, kwargs)`` on the host;
        the agent supplies ``invoke`` so it can log, ask for approval, bind and
        validate (:meth:`bind`, :meth:`call`) and pass the run context.
        """
        from sandbox.functions import HostFunction

        def run_tool(*args: Any, **kwargs: Any) -> Any:
            return invoke(args, kwargs)

        return HostFunction(
            run_tool,
            name=self.name,
            doc=self._stub_docstring(),
            signature=self._display_signature(),
            timeout=self.timeout,
        )

    # ------------------------------------------------------------------ call helpers

    def _call_arguments(
        self, values: dict[str, Any], context: RunContext[Any] | None
    ) -> tuple[list[Any], dict[str, Any]]:
        if self.context_param is not None and context is None:
            context = RunContext(run_id="", step=0)
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        named = set()
        for p in self._full_signature.parameters.values():
            named.add(p.name)
            if p.kind is p.VAR_KEYWORD:
                continue
            present = p.name == self.context_param or p.name in values
            value = context if p.name == self.context_param else values.get(p.name, p.default)
            if p.kind is p.POSITIONAL_ONLY:
                args.append(value)  # absent ones have a default (validate ensured it)
            elif present:
                kwargs[p.name] = value
        for name, value in values.items():
            if name not in named:
                kwargs[name] = value
        return args, kwargs

    def _describe_errors(self, errors: list[Any], annotation: inspect.Parameter | None = None) -> list[str]:
        """One line per pydantic error: where, what was expected, what was received."""
        lines = []
        for error in errors:
            kind, loc = error["type"], tuple(error["loc"])
            if kind == "extra_forbidden" and len(loc) == 1:
                continue  # unknown names are listed together, with the valid ones
            where = _format_loc(loc)
            if annotation is not None:  # an extra keyword argument checked against **kwargs
                expected = _format_annotation(annotation.annotation)
            else:
                param = self._by_name.get(str(loc[0])) if loc else None
                expected = _format_annotation(param.annotation) if param is not None and len(loc) == 1 else ""
            if kind == "missing":
                what = "missing required argument" if len(loc) == 1 else "missing required key"
                lines.append(f"{where}: {what}" + (f" (expected {expected})" if expected else ""))
                continue
            received = error.get("input")
            line = f"{where}: {error['msg']}"
            if expected:
                line += f"; expected {expected}"
            line += f"; received {_short_repr(received)} ({type(received).__name__})"
            lines.append(line)
        return lines

    def _describe_unknown(self, unknown: list[str]) -> str:
        valid = [p.name for p in self._params]
        parts = []
        for name in unknown:
            if name == self.context_param:
                parts.append(f"{name!r} (filled in by the agent; do not pass it)")
                continue
            close = difflib.get_close_matches(name, valid, n=1)
            parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        noun = "argument" if len(unknown) == 1 else "arguments"
        listing = f"valid arguments: {', '.join(valid)}" if valid else "this tool takes no arguments"
        return f"unknown {noun} {', '.join(parts)}; {listing}"

    async def _await_with_timeout(self, awaitable: Awaitable[Any]) -> Any:
        if self.timeout is None:
            return await awaitable
        try:
            return await asyncio.wait_for(awaitable, self.timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"tool {self.name!r} did not finish within {self.timeout:g} s") from None

    # ------------------------------------------------------------------ rendering helpers

    def _display_signature(self) -> inspect.Signature:
        """The public signature with readable string annotations and plain defaults.

        Used for the prompt stub and the sandbox stub, where the user's classes
        do not exist: annotations become text, enum defaults their values.
        """
        params = []
        for p in self.signature.parameters.values():
            annotation = _format_annotation(p.annotation) if p.annotation is not _EMPTY else _EMPTY
            default = _plain_value(p.default) if p.default is not _EMPTY else _EMPTY
            params.append(p.replace(annotation=annotation, default=default))
        ret = self.signature.return_annotation
        return self.signature.replace(
            parameters=params, return_annotation=_format_annotation(ret) if ret is not _EMPTY else _EMPTY
        )

    def _stub_docstring(self) -> str:
        sections = []
        if self._summary:
            sections.append(self._summary)
        documented = [p for p in self._params if p.description]
        if documented:
            lines = ["Args:"]
            for p in documented:
                first, *rest = p.description.splitlines()
                lines.append(f"    {p.name}: {first}")
                lines.extend(f"        {line}" if line.strip() else "" for line in rest)
            sections.append("\n".join(lines))
        if self._returns_doc:
            sections.append("Returns:\n" + _indent(self._returns_doc, "    "))
        types_section = self._types_section()
        if types_section:
            sections.append(types_section)
        return "\n\n".join(sections)

    def _types_section(self) -> str:
        """Describe dataclasses, models and TypedDicts used by the parameters.

        The sandbox does not have these classes; the model passes dicts with
        these keys and the host builds the objects.
        """
        found: list[type] = []

        def visit(tp: Any) -> None:  # depth first, so types are listed in order of first use
            tp = _strip_annotated(tp)
            if _is_structured(tp):
                if tp not in found:
                    found.append(tp)
                    for _, annotation, _ in _structured_fields(tp):
                        visit(annotation)
            elif typing.get_origin(tp) is not Literal:
                for arg in typing.get_args(tp):
                    visit(arg)

        for p in self._params:
            visit(p.annotation)
        if self._var_keyword is not None:
            visit(self._var_keyword.annotation)
        if not found:
            return ""
        lines = ["Types (pass dicts with these keys):"]
        for tp in found:
            keys = []
            for name, annotation, default in _structured_fields(tp):
                text = f'"{name}": {_format_annotation(annotation)}'
                if default is not _EMPTY:
                    text += f" = {default}"
                keys.append(text)
            lines.append(f"    {tp.__name__}: {{{', '.join(keys)}}}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- module helpers


def _format_loc(loc: tuple[Any, ...]) -> str:
    """``('points', 0, 'x')`` -> ``points[0].x``."""
    if not loc:
        return "arguments"
    text = str(loc[0])
    for part in loc[1:]:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    # Pydantic's advice (arbitrary_types_allowed, __get_pydantic_core_schema__) is for
    # pydantic users; a tool author needs a different fix, which our message gives.
    return text.split(". Set `arbitrary_types_allowed", 1)[0].rstrip(".")


def _docstring_of(func: Any) -> str:
    """The docstring of the function a partial wraps, not ``functools.partial``'s own."""
    while isinstance(func, functools.partial):
        func = func.func
    return inspect.getdoc(func) or ""


def _is_coroutine_callable(func: Any) -> bool:
    while isinstance(func, functools.partial):
        func = func.func
    if inspect.iscoroutinefunction(func):
        return True
    call = getattr(type(func), "__call__", None)
    return not inspect.isroutine(func) and inspect.iscoroutinefunction(call)


def _resolve_hints(func: Callable[..., Any], signature: inspect.Signature, tool_name: str) -> dict[str, Any]:
    """Type hints with string annotations (``from __future__ import annotations``) evaluated."""
    target: Any = func
    while isinstance(target, functools.partial):
        target = target.func
    if not (inspect.isroutine(target) or inspect.isclass(target)):
        target = getattr(type(target), "__call__", target)
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception as exc:  # NameError for undefined names, TypeError for odd objects
        if not isinstance(exc, (NameError, AttributeError, SyntaxError)):
            # Not a resolution problem (e.g. a builtin without annotations): use the signature as is.
            return {}
        globalns = getattr(inspect.unwrap(target), "__globals__", {})
        for p in signature.parameters.values():
            if isinstance(p.annotation, str):
                try:
                    eval(p.annotation, globalns)  # noqa: S307 - the user's own annotation text
                except Exception as param_exc:
                    raise ToolDefinitionError(
                        f"tool {tool_name!r}: cannot resolve the type of parameter {p.name!r} "
                        f"({p.annotation!r}): {param_exc}. Define or import that type at module level, "
                        "where the function is defined"
                    ) from exc
        raise ToolDefinitionError(f"tool {tool_name!r}: cannot resolve its type hints: {exc}") from exc


def _strip_string_metadata(annotation: Any) -> Any:
    """Remove plain-string ``Annotated`` metadata (descriptions), keep everything else."""
    if typing.get_origin(annotation) is not typing_extensions.Annotated:
        return annotation
    inner, *metadata = typing.get_args(annotation)
    kept = [m for m in metadata if not isinstance(m, str)]
    return typing_extensions.Annotated[(inner, *kept)] if kept else inner


def _param_description(annotation: Any, docstring_text: str) -> str:
    """A pydantic ``Field(description=...)`` wins, then an ``Annotated`` string, then the docstring."""
    if typing.get_origin(annotation) is typing_extensions.Annotated:
        metadata = typing.get_args(annotation)[1:]
        for m in metadata:
            if isinstance(m, FieldInfo) and m.description:
                return m.description
        strings = [m for m in metadata if isinstance(m, str)]
        if strings:
            return " ".join(s.strip() for s in strings)
    return docstring_text


def _structured_fields(tp: type) -> list[tuple[str, Any, Any]]:
    """(name, annotation, default text or _EMPTY) for a dataclass, pydantic model or TypedDict."""
    out: list[tuple[str, Any, Any]] = []
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        for name, info in tp.model_fields.items():
            annotation = info.annotation if info.annotation is not None else Any
            default = _EMPTY if info.is_required() else ("..." if info.default_factory else _format_default(info.default))
            out.append((info.alias or name, annotation, default))
        return out
    try:
        hints = typing.get_type_hints(tp, include_extras=True)
    except Exception:
        hints = {}
    if dataclasses.is_dataclass(tp):
        for f in dataclasses.fields(tp):
            if not f.init:
                continue
            if f.default is not dataclasses.MISSING:
                default = _format_default(f.default)
            elif f.default_factory is not dataclasses.MISSING:
                default = "..."
            else:
                default = _EMPTY
            out.append((f.name, hints.get(f.name, f.type), default))
        return out
    required = getattr(tp, "__required_keys__", frozenset(hints))
    for name, annotation in hints.items():
        is_required = name in required
        # With `from __future__ import annotations` the class cannot see
        # NotRequired[...] when it is created; the resolved hint can.
        origin = typing.get_origin(annotation)
        if origin in _NOT_REQUIRED:
            is_required, annotation = False, typing.get_args(annotation)[0]
        elif origin in _REQUIRED:
            is_required, annotation = True, typing.get_args(annotation)[0]
        # Keys that may be left out are shown with a `= ...` default.
        out.append((name, annotation, _EMPTY if is_required else "..."))
    return out


_NOT_REQUIRED = {typing_extensions.NotRequired, getattr(typing, "NotRequired", typing_extensions.NotRequired)}
_REQUIRED = {typing_extensions.Required, getattr(typing, "Required", typing_extensions.Required)}


def _run_sync(coroutine: Awaitable[Any]) -> Any:
    """Run a coroutine to completion from sync code, whether or not a loop runs here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_as_coroutine(coroutine))
    # A loop already runs in this thread (we are called from async code through a
    # sync API); asyncio.run would fail, so use a private loop on another thread.
    return _call_in_thread(lambda: asyncio.run(_as_coroutine(coroutine)), None, "")


async def _to_daemon_thread(fn: Callable[[], Any], tool_name: str) -> Any:
    """Await ``fn()`` run on a daemon thread.

    Not ``asyncio.to_thread``: the loop's executor is joined when the loop
    closes, so a sync tool abandoned after its timeout would hold up
    ``asyncio.run`` until it finished anyway.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():  # it may have been cancelled by a timeout
            (future.set_result if ok else future.set_exception)(value)

    def target() -> None:
        try:
            outcome = (True, context.run(fn))
        except BaseException as exc:  # handed to the awaiting task
            outcome = (False, exc)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:
            pass  # the loop is closed: nobody waits for this result any more

    threading.Thread(target=target, name=f"tool-{tool_name}", daemon=True).start()
    return await future


async def _as_coroutine(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _call_in_thread(fn: Callable[[], Any], timeout: float | None, tool_name: str) -> Any:
    """Run ``fn`` on a daemon thread and wait at most ``timeout`` seconds.

    A daemon thread (not an executor) because Python cannot kill a thread: a
    call that overruns its timeout is abandoned and must not keep the process
    alive at exit.
    """
    outcome: dict[str, Any] = {}
    done = threading.Event()
    context = contextvars.copy_context()

    def target() -> None:
        try:
            outcome["value"] = context.run(fn)
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc
        finally:
            done.set()

    thread = threading.Thread(target=target, name=f"tool-{tool_name or 'async'}", daemon=True)
    thread.start()
    if not done.wait(timeout):
        raise TimeoutError(f"tool {tool_name!r} did not finish within {timeout:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


# --------------------------------------------------------------------------- decorator and loaders


@overload
def tool(func: Callable[P, R], /) -> Tool[P, R]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    return_direct: bool = False,
    requires_approval: bool = False,
    timeout: float | None = None,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    func: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    return_direct: bool = False,
    requires_approval: bool = False,
    timeout: float | None = None,
) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """Make a function a :class:`Tool`; use bare (``@tool``) or with options (``@tool(...)``).

    Args:
        func: the function (given when used bare).
        name: the name the model uses; defaults to the function's name.
        description: overrides the docstring's description.
        return_direct: the tool's result ends the run as the final answer.
        requires_approval: each call needs approval before it runs.
        timeout: seconds one call may take.

    Raises:
        ToolDefinitionError: the name is not an identifier, a parameter type
            has no JSON schema, a type hint cannot be resolved, ...
    """

    def make(f: Callable[P, R]) -> Tool[P, R]:
        return Tool(
            f,
            name=name,
            description=description,
            return_direct=return_direct,
            requires_approval=requires_approval,
            timeout=timeout,
        )

    if func is None:
        return make
    return make(func)


def ensure_tools(items: Iterable[Tool[Any, Any] | Callable[..., Any]]) -> list[Tool[Any, Any]]:
    """Turn a list of tools and plain functions into tools; names must be unique.

    Raises:
        ToolDefinitionError: an item is not callable or cannot become a tool,
            or two tools share a name.
    """
    out: list[Tool[Any, Any]] = []
    seen: dict[str, Tool[Any, Any]] = {}
    for item in items:
        t = item if isinstance(item, Tool) else Tool(item)
        if t.name in seen:
            if seen[t.name] is t:
                raise ToolDefinitionError(f"tool {t.name!r} is listed twice; list it once")
            raise ToolDefinitionError(
                f"two tools are named {t.name!r} ({_origin(seen[t.name])} and {_origin(t)}); "
                "rename one with @tool(name=...)"
            )
        seen[t.name] = t
        out.append(t)
    return out


def _origin(t: Tool[Any, Any]) -> str:
    module = getattr(t.func, "__module__", None)
    qualname = getattr(t.func, "__qualname__", None) or t.name
    return f"{module}.{qualname}" if module else qualname


def load_tools(spec: str) -> list[Tool[Any, Any]]:
    """Load tools named by a CLI spec.

    Forms: ``"package.module:ALL"``, ``"package.module:name1,name2"``,
    ``"path/to/file.py:ALL"``, ``"path/to/file.py:name"``. ``ALL`` takes every
    :class:`Tool` object in the module plus every public function defined in
    that module that has a docstring. A name may refer to a Tool or to a
    plain function (converted with :func:`tool`). Without ``:names``, ALL is
    meant.

    Raises:
        ConfigError: the spec is malformed, or the module or file does not exist
            or fails to import.
        UnknownToolError: a requested name is not in the module (the message
            lists what is).
        ToolDefinitionError: an object cannot become a tool, or two share a name.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError("empty tool spec; use 'package.module:ALL', 'module:name1,name2' or 'path/to/file.py:name'")
    target, sep, names_text = spec.strip().rpartition(":")
    if not sep or not target or (len(target) == 1 and target.isalpha()):
        # No colon, or only a Windows drive letter before it: the whole spec is the target.
        target, names_text = spec.strip(), "ALL"
    names = [n.strip() for n in names_text.split(",")]
    if not names or any(not n for n in names):
        raise ConfigError(f"tool spec {spec!r}: list tool names after ':' separated by commas, or use ALL")

    module = _import_target(target, spec)
    if names == ["ALL"]:
        return ensure_tools(_all_tools(module, target))

    namespace = vars(module)
    # A name is a module attribute or the name of a Tool (@tool(name=...) may differ).
    by_tool_name = {obj.name: obj for obj in namespace.values() if isinstance(obj, Tool)}
    tools: list[Tool[Any, Any]] = []
    for name in names:
        if name in namespace:
            obj = namespace[name]
        elif name in by_tool_name:
            obj = by_tool_name[name]
        else:
            candidates = _candidate_names(module)
            hint = difflib.get_close_matches(name, candidates + list(namespace), n=1)
            raise UnknownToolError(
                f"{target} has no tool or function named {name!r}"
                + (f" (did you mean {hint[0]!r}?)" if hint else "")
                + f"; available: {', '.join(candidates) or 'none'}"
            )
        if isinstance(obj, Tool):
            tools.append(obj)
        elif callable(obj) and not inspect.isclass(obj):
            tools.append(Tool(obj))
        else:
            raise ToolDefinitionError(f"{target}:{name} is a {type(obj).__name__}, not a function or tool")
    return ensure_tools(tools)


def _looks_like_file(target: str) -> bool:
    return target.endswith(".py") or "/" in target or os.sep in target


def _import_target(target: str, spec: str) -> types.ModuleType:
    if _looks_like_file(target):
        return _import_file(Path(target), spec)
    if not all(part.isidentifier() for part in target.split(".")):
        raise ConfigError(
            f"tool spec {spec!r}: {target!r} is neither a module path (package.module) nor a .py file"
        )
    try:
        return _import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name and (target == exc.name or target.startswith(exc.name + ".")):
            raise ConfigError(
                f"tool spec {spec!r}: no module named {exc.name!r}; check the spelling, install the package, "
                "or run from the directory that contains it (or give a path: path/to/file.py:ALL)"
            ) from None
        raise ConfigError(f"importing {target!r} for the tool spec failed: {exc}") from exc
    except Exception as exc:
        raise ConfigError(f"importing {target!r} for the tool spec failed: {type(exc).__name__}: {exc}") from exc


def _import_module(target: str) -> types.ModuleType:
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError:
        # Like `python -m`, look in the current directory too; the console
        # script does not put it on sys.path. Only for this import.
        cwd = os.getcwd()
        if cwd in sys.path or "" in sys.path:
            raise
        sys.path.insert(0, cwd)
        try:
            return importlib.import_module(target)
        finally:
            sys.path.remove(cwd)


def _import_file(path: Path, spec: str) -> types.ModuleType:
    if not path.is_file():
        parent = path.parent if str(path.parent) else Path(".")
        near = sorted(p.name for p in parent.glob("*.py")) if parent.is_dir() else []
        raise ConfigError(
            f"tool spec {spec!r}: file {str(path)!r} does not exist"
            + (f"; Python files in {str(parent)!r}: {', '.join(near)}" if near else "")
        )
    resolved = path.resolve()
    # A unique module name per file, registered in sys.modules: dataclasses and
    # pydantic look a class's module up there to resolve its annotations.
    module_name = f"codeact_tools_{resolved.stem}_{abs(hash(str(resolved))):x}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    module_spec = importlib.util.spec_from_file_location(module_name, resolved)
    if module_spec is None or module_spec.loader is None:
        raise ConfigError(f"tool spec {spec!r}: cannot import {str(path)!r} as Python")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    # The file may import its sibling modules, as it could when run as a script.
    directory = str(resolved.parent)
    added = directory not in sys.path
    if added:
        sys.path.insert(0, directory)
    try:
        module_spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(module_name, None)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise ConfigError(f"importing {str(path)!r} for the tool spec failed: {type(exc).__name__}: {exc}") from exc
    finally:
        if added and directory in sys.path:
            sys.path.remove(directory)
    return module


def _public_functions(module: types.ModuleType) -> list[tuple[str, Callable[..., Any]]]:
    """Public functions defined in ``module`` itself (not imported into it) that have a docstring."""
    return [
        (name, obj)
        for name, obj in vars(module).items()
        if inspect.isfunction(obj)
        and not name.startswith("_")
        and obj.__module__ == module.__name__
        and inspect.getdoc(obj)
    ]


def _candidate_names(module: types.ModuleType) -> list[str]:
    tools: list[Tool[Any, Any]] = []
    for obj in vars(module).values():
        if isinstance(obj, Tool) and not any(obj is t for t in tools):
            tools.append(obj)
    wrapped = {id(t.func) for t in tools}
    return [t.name for t in tools] + [name for name, f in _public_functions(module) if id(f) not in wrapped]


def _all_tools(module: types.ModuleType, target: str) -> list[Tool[Any, Any]]:
    found: list[Tool[Any, Any]] = []
    for obj in vars(module).values():
        if isinstance(obj, Tool) and not any(obj is t for t in found):
            found.append(obj)
    wrapped = {id(t.func) for t in found}
    for name, func in _public_functions(module):
        if id(func) in wrapped:  # `x = tool(f)` keeps f around too; offer it once
            continue
        try:
            found.append(Tool(func))
        except ToolDefinitionError as exc:
            raise ToolDefinitionError(
                f"{exc}. ({target}:ALL takes every public function with a docstring; make helper "
                f"functions private (_{name}) or name the tools: {target}:tool1,tool2)"
            ) from exc
    if not found:
        raise ToolDefinitionError(
            f"{target} defines no tools: decorate functions with @tool, or give public functions a docstring"
        )
    return found
