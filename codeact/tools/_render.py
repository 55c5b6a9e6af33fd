"""Rendering for a model: types as text, literal defaults, signatures, and the Python stub of a tool.

Everything here produces text that reaches a prompt or the sandbox, so one
rule holds throughout: defaults are shown only when they are *literals*
(:func:`literal_source`); any other default shows as ``...`` (the typeshed
convention) and the host applies the real one. A default such as an API
client never leaves the host, and its ``repr()`` is never called.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import enum
import inspect
import types
import typing
from typing import Any, Iterable, Literal, Mapping, Protocol, Sequence, TypeVar, Union

import pydantic
import typing_extensions

from sandbox.pyparse import parse

EMPTY = inspect.Parameter.empty

#: A literal default whose source is longer than this shows as ``...`` too.
MAX_LITERAL_CHARS = 60
_MAX_INPUT_REPR = 80


# --------------------------------------------------------------------------- literal defaults


class _Elided:
    """A default the model and the sandbox see as ``...``: the host applies the real one."""

    def __repr__(self) -> str:
        return "..."


ELIDED = _Elided()

_SCALARS = (type(None), bool, int, float, str, bytes)
_CONTAINERS = (tuple, list, set, frozenset, dict)


def literal_source(value: Any) -> str | None:
    """Python source for ``value`` if it is a short literal, else None.

    Literals are ``None``, bools, numbers, strings, bytes, and tuples, lists,
    dicts, sets and frozensets of literals (exact types, not subclasses, so no
    user-defined ``__repr__`` runs), whose source is at most
    :data:`MAX_LITERAL_CHARS` characters and evaluates back to an equal value.
    ``repr()`` is only ever called on such values.

    >>> literal_source((1, "a")), literal_source(object()), literal_source("x" * 100)
    ("(1, 'a')", None, None)
    """
    if not _is_literal_data(value, 0):
        return None
    text = _source(value)
    if len(text) > MAX_LITERAL_CHARS:
        return None
    try:
        back = _evaluate(parse(text, mode="eval").body)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return text if type(back) is type(value) and back == value else None


def _is_literal_data(value: Any, depth: int) -> bool:
    kind = type(value)
    if kind in (str, bytes):
        return len(value) <= MAX_LITERAL_CHARS
    if kind in _SCALARS:
        return True
    if kind not in _CONTAINERS or depth > 8 or len(value) > MAX_LITERAL_CHARS:
        return False
    if kind is dict:
        return all(_is_literal_data(k, depth + 1) and _is_literal_data(v, depth + 1) for k, v in value.items())
    return all(_is_literal_data(item, depth + 1) for item in value)


def _source(value: Any) -> str:
    """Source text of literal data (checked by :func:`_is_literal_data`): builtin reprs only."""
    kind = type(value)
    if kind is frozenset:
        return f"frozenset({_source(set(value))})" if value else "frozenset()"
    if kind is set:
        return "{" + ", ".join(_source(v) for v in value) + "}" if value else "set()"
    if kind is tuple:
        inner = ", ".join(_source(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if kind is list:
        return "[" + ", ".join(_source(v) for v in value) + "]"
    if kind is dict:
        return "{" + ", ".join(f"{_source(k)}: {_source(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _evaluate(node: ast.expr) -> Any:
    """``ast.literal_eval`` plus ``set()`` and ``frozenset({...})``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        if node.func.id in ("set", "frozenset") and len(node.args) <= 1:
            items = _evaluate(node.args[0]) if node.args else set()
            if isinstance(items, set):
                return frozenset(items) if node.func.id == "frozenset" else items
        raise ValueError("not a literal")
    if isinstance(node, ast.Tuple):
        return tuple(_evaluate(e) for e in node.elts)
    if isinstance(node, ast.List):
        return [_evaluate(e) for e in node.elts]
    if isinstance(node, ast.Set):
        return {_evaluate(e) for e in node.elts}
    if isinstance(node, ast.Dict):
        return {_evaluate(k): _evaluate(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
    return ast.literal_eval(node)


def plain_value(value: Any) -> Any:
    """An enum member's value (the sandbox has no enum classes); anything else unchanged."""
    return value.value if isinstance(value, enum.Enum) else value


def shown_default(value: Any) -> Any:
    """The default as the model and the sandbox see it: a literal value, or :data:`ELIDED`."""
    if value is EMPTY:
        return EMPTY
    plain = plain_value(value)
    return plain if literal_source(plain) is not None else ELIDED


def default_text(value: Any) -> str:
    """The default as Python source: its literal source, or ``...``."""
    return literal_source(plain_value(value)) or "..."


# --------------------------------------------------------------------------- type annotations


def strip_annotated(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing_extensions.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def is_union(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    return origin is Union or origin is types.UnionType


def is_structured(tp: Any) -> bool:
    """A class whose values the model passes as a JSON object (dataclass, model, TypedDict)."""
    if not isinstance(tp, type):
        return False
    return (
        dataclasses.is_dataclass(tp)
        or typing_extensions.is_typeddict(tp)
        or (issubclass(tp, pydantic.BaseModel) and tp is not pydantic.BaseModel)
    )


def format_annotation(annotation: Any) -> str:
    """Readable Python text for a type: ``list[str]``, ``int | None``, ``Literal['a', 'b']``.

    Enums render as a ``Literal`` of their values because the sandbox does not
    have the enum class; the host turns the value back into the member.
    Text annotations (a stub built from a JSON schema) are returned as they are.
    """
    if annotation is EMPTY:
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
        return format_annotation(args[0])
    if origin is Literal:
        return "Literal[" + ", ".join(literal_source(plain_value(a)) or "..." for a in args) + "]"
    if is_union(annotation):
        return " | ".join(format_annotation(a) for a in args)
    if isinstance(annotation, list):  # the parameter list of Callable[[...], R]
        return "[" + ", ".join(format_annotation(a) for a in annotation) + "]"
    if origin is not None:
        name = getattr(origin, "__name__", None) or str(origin).replace("typing.", "")
        if not args:
            return name
        return f"{name}[{', '.join(format_annotation(a) for a in args)}]"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        values = [literal_source(m.value) or "..." for m in annotation]
        return "Literal[" + ", ".join(values) + "]" if values else annotation.__name__
    if isinstance(annotation, (type, TypeVar)) or hasattr(annotation, "__supertype__"):
        return annotation.__name__  # classes, TypeVars, NewTypes
    return str(annotation).replace("typing.", "")


def stars(p: inspect.Parameter) -> str:
    """How a parameter's name is written in a signature: ``*`` for ``*args``, ``**`` for ``**kwargs``, else ``""``."""
    if p.kind is p.VAR_POSITIONAL:
        return "*"
    if p.kind is p.VAR_KEYWORD:
        return "**"
    return ""


def render_signature(signature: inspect.Signature) -> str:
    """``(city: str, days: int = 3) -> str``: no quotes around text annotations, and
    defaults that are not literals shown as ``...``."""
    parts: list[str] = []
    seen_keyword_only = False
    params = list(signature.parameters.values())
    for index, p in enumerate(params):
        if p.kind is p.KEYWORD_ONLY and not seen_keyword_only:
            parts.append("*")
        if p.kind in (p.KEYWORD_ONLY, p.VAR_POSITIONAL):
            seen_keyword_only = True
        text = stars(p) + p.name
        annotation = format_annotation(p.annotation)
        if annotation:
            text += f": {annotation}"
        if p.default is not EMPTY:
            text += f" = {default_text(p.default)}" if annotation else f"={default_text(p.default)}"
        parts.append(text)
        is_last_positional_only = p.kind is p.POSITIONAL_ONLY and (
            index + 1 == len(params) or params[index + 1].kind is not p.POSITIONAL_ONLY
        )
        if is_last_positional_only:
            parts.append("/")
    text = f"({', '.join(parts)})"
    returns = format_annotation(signature.return_annotation)
    return f"{text} -> {returns}" if returns else text


def short_repr(value: Any) -> str:
    """``repr`` of a value the *caller* sent (never of a default), cut to a readable length."""
    text = repr(value)
    return text if len(text) <= _MAX_INPUT_REPR else text[: _MAX_INPUT_REPR - 3] + "..."



def shadows_builtin(name: str) -> bool:
    """True when a tool of this name hides a Python builtin (``sum``, ``max``, ``print``...) in the sandbox."""
    return not name.startswith("_") and name in vars(builtins)


# --------------------------------------------------------------------------- stubs


def python_stub(name: str, docstring: str, signature: inspect.Signature, *, is_async: bool = False) -> str:
    """A Python function definition: ``def name(signature):`` and the docstring.

    ``signature`` is a display signature (:meth:`ToolSignature.display`);
    ``is_async`` makes it ``async def`` (the sandbox's stub must be awaited).
    The result always parses as Python.
    """
    header = f"{'async ' if is_async else ''}def {name}{render_signature(signature)}:"
    if not docstring:
        return header + "\n    ..."
    doc = docstring.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if doc.endswith('"'):
        doc += " "  # a closing quote would merge with the docstring's own quotes
    if "\n" not in doc:
        return f'{header}\n    """{doc}"""'
    return f'{header}\n    """{indent(doc, "    ").lstrip()}\n    """'


class DocumentedSignature(Protocol):
    """What a stub's docstring reads of a signature (:class:`._signature.ToolSignature` is one).

    Declared here so that rendering stays below the signature module, which renders itself with this one.
    """

    @property
    def name(self) -> str: ...

    @property
    def parameters(self) -> Sequence[inspect.Parameter]: ...

    @property
    def descriptions(self) -> Mapping[str, str]: ...


def stub_docstring(sig: DocumentedSignature, summary: str, returns: str = "", usage: Sequence[str] = ()) -> str:
    """The docstring of a tool's stub: summary, Args, Returns, call forms, types, builtin note."""
    sections = []
    if summary:
        sections.append(summary)
    documented = [p for p in sig.parameters if sig.descriptions.get(p.name)]
    if documented:
        lines = ["Args:"]
        for p in documented:
            first, *rest = sig.descriptions[p.name].splitlines() or [""]
            lines.append(f"    {stars(p)}{p.name}: {first}")
            lines.extend(f"        {line}" if line.strip() else "" for line in rest)
        sections.append("\n".join(lines))
    if returns:
        sections.append("Returns:\n" + indent(returns, "    "))
    if usage:
        sections.append("Call forms:\n" + indent("\n".join(usage), "    "))
    types_section = _types_section(p.annotation for p in sig.parameters)
    if types_section:
        sections.append(types_section)
    if shadows_builtin(sig.name):
        sections.append(
            f"Note: `{sig.name}` is this tool here; it shadows Python's built-in `{sig.name}`.\n"
            f"For the built-in, use `import builtins; builtins.{sig.name}(...)`."
        )
    return "\n\n".join(sections)


def indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line if line.strip() else "" for line in text.splitlines())


def _types_section(annotations: Iterable[Any]) -> str:
    """Describe the dataclasses, models and TypedDicts used by the parameters.

    The sandbox does not have these classes; the model passes dicts with
    these keys and the host builds the objects.
    """
    found: list[type] = []

    def visit(tp: Any) -> None:  # depth first, so types are listed in order of first use
        tp = strip_annotated(tp)
        if is_structured(tp):
            if tp not in found:
                found.append(tp)
                for _, annotation, _ in structured_fields(tp):
                    visit(annotation)
        elif typing.get_origin(tp) is not Literal:
            for arg in typing.get_args(tp):
                visit(arg)

    for annotation in annotations:
        visit(annotation)
    if not found:
        return ""
    lines = ["Types (pass dicts with these keys):"]
    for tp in found:
        keys = []
        for name, annotation, default in structured_fields(tp):
            text = f'"{name}": {format_annotation(annotation)}'
            if default is not EMPTY:
                text += f" = {default}"
            keys.append(text)
        lines.append(f"    {tp.__name__}: {{{', '.join(keys)}}}")
    return "\n".join(lines)


_NOT_REQUIRED = {typing_extensions.NotRequired, getattr(typing, "NotRequired", typing_extensions.NotRequired)}
_REQUIRED = {typing_extensions.Required, getattr(typing, "Required", typing_extensions.Required)}


def structured_fields(tp: type) -> list[tuple[str, Any, Any]]:
    """(name, annotation, default text or EMPTY) for a dataclass, pydantic model or TypedDict."""
    out: list[tuple[str, Any, Any]] = []
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        for name, info in tp.model_fields.items():
            annotation = info.annotation if info.annotation is not None else Any
            default = EMPTY if info.is_required() else ("..." if info.default_factory else default_text(info.default))
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
                default = default_text(f.default)
            elif f.default_factory is not dataclasses.MISSING:
                default = "..."
            else:
                default = EMPTY
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
        out.append((name, annotation, EMPTY if is_required else "..."))
    return out
