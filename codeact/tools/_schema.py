"""Arguments: a tool's parameters as a JSON schema, and the validator of the arguments a model sends.

:class:`ArgumentsModel` builds both from a :class:`~._signature.ToolSignature`
with pydantic: type hints become JSON schema (``Literal``/``Enum`` -> enums,
dataclasses, TypedDicts and models -> inlined objects, ``Annotated``
descriptions, docstring descriptions), and the same model validates and
coerces arguments (``"3"`` -> ``3``, a dict -> a dataclass).

A value that already is what the annotation asks for reaches the function
as it was passed (``3`` for a ``float`` stays ``3``, a ``list[float]`` of
ints stays that list): code in the sandbox calls tools with Python values,
and the tool must see what a direct call would give it. Only values that
need converting (a JSON string for an int, a dict for a dataclass) are
replaced by their converted form.

Variadic parameters (the arguments dict is described in :mod:`._signature`): ``*args: T`` is a property
``args`` holding an array of ``T``, ``**kwargs: T`` a property ``kwargs``
holding an object whose values are ``T``; neither is required. Only literal
defaults appear in the schema (:func:`~._render.literal_source`).

A tool whose arguments are described by something other than Python type
hints (an MCP tool's JSON schema) needs only an object with the same two
members, ``json_schema`` and ``validate(arguments)``: :class:`ArgumentsValidator`.
"""

from __future__ import annotations

import copy
import difflib
import inspect
import types
from typing import Any, Mapping, Protocol, Union

import pydantic
import typing_extensions
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema, NoDefault

from ..errors import ToolArgumentError, ToolDefinitionError
from ._render import EMPTY, format_annotation, literal_source, plain_value, short_repr, stars
from ._signature import BY_KEYWORD, ToolSignature


class ArgumentsValidator(Protocol):
    """What a :class:`~codeact.tools.Tool` needs to describe and check its arguments."""

    @property
    def json_schema(self) -> dict[str, Any]:
        """The JSON schema (an object schema) of the arguments dict; callers must not mutate it."""
        ...

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as the tool receives them; raises ToolArgumentError."""
        ...


def _as_passed(original: Any, validated: Any, annotation: Any, kind: Any) -> Any:
    """The caller's own value when it already fits the annotation, else the validated (converted) one."""
    if kind is inspect.Parameter.VAR_POSITIONAL and isinstance(original, (list, tuple)) \
            and isinstance(validated, list) and len(original) == len(validated):
        return [o if _fits(o, v, annotation) else v for o, v in zip(original, validated, strict=True)]
    if kind is inspect.Parameter.VAR_KEYWORD and isinstance(original, Mapping) and isinstance(validated, dict) \
            and list(original) == list(validated):
        return {k: (o if _fits(o, validated[k], annotation) else validated[k]) for k, o in original.items()}
    return original if _fits(original, validated, annotation) else validated


def _fits(original: Any, validated: Any, annotation: Any) -> bool:
    try:
        if original is validated:
            return True
        if not bool(validated == original):  # converted to something else ("3" -> 3)
            return False
    except Exception:  # arrays and frames compare element-wise: keep what validation made
        return False
    target = annotation
    while typing_extensions.get_origin(target) is typing_extensions.Annotated:
        target = typing_extensions.get_args(target)[0]
    if target in (EMPTY, Any, object):
        return True
    origin = typing_extensions.get_origin(target) or target
    if origin is typing_extensions.Literal:
        return True
    args = typing_extensions.get_args(target)
    if origin is Union or origin is types.UnionType:
        return any(_fits(original, validated, arm) for arm in args)
    if not isinstance(origin, type):
        return False
    if origin is float:  # the numeric tower: an int is a fine float
        return isinstance(original, (int, float)) and not isinstance(original, bool)
    if origin is complex:
        return isinstance(original, (int, float, complex)) and not isinstance(original, bool)
    try:
        return isinstance(original, origin)
    except TypeError:
        return False


class _Absent:
    """The pydantic-side default of a parameter whose default is not a literal.

    The model and the schema never see the real default (it may be an API
    client); the host applies it by leaving the argument out of the call.
    """

    def __repr__(self) -> str:
        return "..."


_ABSENT = _Absent()


class _SchemaGenerator(GenerateJsonSchema):
    """Pydantic's generator, showing literal defaults only.

    Any other default (a sentinel object, a client, a long string) is left
    out of the schema without being serialised or ``repr()``-ed; the
    function applies it itself.
    """

    def get_default_value(self, schema: Any) -> Any:
        default = super().get_default_value(schema)
        if default is NoDefault or literal_source(plain_value(default)) is None:
            return NoDefault
        return default

    def emit_warning(self, kind: Any, detail: str) -> None:
        if kind == "non-serializable-default":
            return
        super().emit_warning(kind, detail)


class ArgumentsModel:
    """Validator and JSON schema of a tool's arguments, from its :class:`ToolSignature`.

    Example::

        def tag(name: str, *values: int, **labels: str) -> None: ...

        model = ArgumentsModel(ToolSignature.from_signature("tag", inspect.signature(tag)))
        model.json_schema["properties"]["values"]    # {'type': 'array', 'items': {'type': 'integer'}}
        model.validate({"name": "n", "values": ["1", 2], "labels": {"k": "v"}})
        # {'name': 'n', 'values': [1, 2], 'labels': {'k': 'v'}}

    Raises:
        ToolDefinitionError: a parameter's type has no JSON schema.
    """

    def __init__(self, signature: ToolSignature) -> None:
        self.signature = signature
        self.name = signature.name
        # Fields get neutral names (p0, p1...) and the real name as alias, so a
        # parameter may be called `json`, `copy`, `model_x` or `_x` without
        # clashing with BaseModel attributes.
        self._fields = {p.name: f"p{index}" for index, p in enumerate(signature.parameters)}
        fields = {self._fields[p.name]: _field(p, signature.descriptions.get(p.name, "")) for p in signature.parameters}
        config = pydantic.ConfigDict(extra="forbid", protected_namespaces=(), populate_by_name=False)
        try:
            self._model = pydantic.create_model(f"{self.name}_arguments", __config__=config, **fields)  # type: ignore[call-overload]
            raw = self._model.model_json_schema(by_alias=True, schema_generator=_SchemaGenerator)
        except Exception as exc:  # pydantic raises several types here; find the parameter at fault
            raise self._unsupported_type_error(exc) from exc
        self._json_schema = _object_schema(raw)

    @property
    def json_schema(self) -> dict[str, Any]:
        return self._json_schema

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Validate and coerce the arguments; return what the function will receive.

        Arguments left out are not filled in: the function's own defaults apply.

        Raises:
            ToolArgumentError: every problem at once (bad values with what was
                expected and received, missing and unknown names with the
                valid ones), then the tool's signature.
        """
        if not isinstance(arguments, Mapping):
            raise ToolArgumentError(
                f"tool {self.name!r} takes its arguments as a JSON object (a dict of name -> value), "
                f"got {type(arguments).__name__}: {short_repr(arguments)}"
            )
        bad_keys = [k for k in arguments if not isinstance(k, str)]
        if bad_keys:
            raise ToolArgumentError(f"tool {self.name!r}: argument names must be strings, got {bad_keys!r}")
        sig = self.signature
        problems: list[str] = []
        unknown = [k for k in arguments if k not in self._fields]
        instance = None
        try:
            instance = self._model.model_validate(dict(arguments))
        except pydantic.ValidationError as exc:
            problems.extend(self._describe_errors(exc.errors(include_url=False)))
        values: dict[str, Any] = {}
        if instance is not None:
            for p in sig.parameters:
                field = self._fields[p.name]
                variadic = p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                # A Field(default=...) inside Annotated, with no Python default, must be passed.
                if field in instance.model_fields_set or (p.default is EMPTY and not variadic):
                    validated = getattr(instance, field)
                    if p.name in arguments:
                        validated = _as_passed(arguments[p.name], validated, p.annotation, p.kind)
                    values[p.name] = validated
        if sig.var_keyword is not None and isinstance(arguments.get(sig.var_keyword.name), Mapping):
            problems.extend(self._keyword_clashes(arguments[sig.var_keyword.name]))
        if unknown:
            problems.append(self._describe_unknown(unknown))
        if problems:
            raise ToolArgumentError(
                f"invalid arguments for tool {self.name!r}:\n"
                + "\n".join(f"- {line}" for line in problems)
                + f"\nexpected: {sig.usage()}"
            )
        return values

    # ------------------------------------------------------------------ errors

    def _unsupported_type_error(self, exc: Exception) -> ToolDefinitionError:
        for p in self.signature.parameters:
            try:
                pydantic.TypeAdapter(_field(p, "")[0]).json_schema(schema_generator=_SchemaGenerator)
            except Exception as param_exc:
                what = f"{stars(p)}{p.name}" if stars(p) else f"parameter {p.name!r}"
                return ToolDefinitionError(
                    f"tool {self.name!r}: {what} has type {format_annotation(p.annotation)}, which cannot be "
                    f"described as JSON ({_first_line(param_exc)}). Use a JSON-compatible type (str, int, float, "
                    "bool, list, dict, Literal, Enum, TypedDict, a dataclass or a pydantic model); to give the tool "
                    "an object the model should not see, annotate a parameter with RunContext and pass the object "
                    "as deps"
                )
        return ToolDefinitionError(
            f"tool {self.name!r}: cannot build a JSON schema for its parameters: {_first_line(exc)}")

    def _describe_errors(self, errors: list[Any]) -> list[str]:
        """One line per pydantic error: where, what was expected, what was received."""
        by_name = self.signature.signature.parameters
        lines = []
        for error in errors:
            kind, loc = error["type"], tuple(error["loc"])
            if kind == "extra_forbidden" and len(loc) == 1:
                continue  # unknown names are listed together, with the valid ones
            param = by_name.get(str(loc[0])) if loc else None
            where, expected = _format_loc(loc), ""
            if param is not None:
                where, expected = _where_and_expected(param, loc)
            if kind == "missing":
                what = "missing required argument" if len(loc) == 1 else "missing required key"
                lines.append(f"{where}: {what}" + (f" (expected {expected})" if expected else ""))
                continue
            received = error.get("input")
            line = f"{where}: {error['msg']}"
            if expected:
                line += f"; expected {expected}"
            line += f"; received {short_repr(received)} ({type(received).__name__})"
            lines.append(line)
        return lines

    def _keyword_clashes(self, extra: Mapping[str, Any]) -> list[str]:
        """Keys of ``**kwargs`` that name a parameter the tool already has: Python would not allow them."""
        sig = self.signature
        kw = sig.var_keyword.name  # type: ignore[union-attr]
        params = sig.signature.parameters
        lines = []
        for key in extra:
            if key == sig.context_param:
                lines.append(f"{kw}[{key!r}]: {key!r} is filled in by the agent; do not pass it")
            elif key in params and params[key].kind in BY_KEYWORD:
                lines.append(f"{kw}[{key!r}]: {key!r} is a parameter of its own; pass it as {key!r}, not inside {kw!r}")
        return lines

    def _describe_unknown(self, unknown: list[str]) -> str:
        sig = self.signature
        valid = [p.name for p in sig.parameters]
        parts = []
        for name in unknown:
            if name == sig.context_param:
                parts.append(f"{name!r} (filled in by the agent; do not pass it)")
                continue
            close = difflib.get_close_matches(name, valid, n=1)
            parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        noun = "argument" if len(unknown) == 1 else "arguments"
        listed = []
        for p in sig.parameters:
            if p.kind is p.VAR_POSITIONAL:
                listed.append(f"{p.name} (a list of extra positional arguments)")
            elif p.kind is p.VAR_KEYWORD:
                listed.append(f"{p.name} (an object of extra keyword arguments)")
            else:
                listed.append(p.name)
        text = f"unknown {noun} {', '.join(parts)}; "
        text += f"valid arguments: {', '.join(listed)}" if listed else "this tool takes no arguments"
        if sig.var_keyword is not None:
            others = [n for n in unknown if n != sig.context_param]
            if others:
                example = ", ".join(f"{n!r}: ..." for n in others)
                bag = sig.var_keyword.name
                text += f"; extra keyword arguments go inside {bag!r}: {{{bag!r}: {{{example}}}}}"
        return text


# --------------------------------------------------------------------------- fields and schema


def strip_string_metadata(annotation: Any) -> Any:
    """Remove plain-string ``Annotated`` metadata (descriptions), keep everything else."""
    if typing_extensions.get_origin(annotation) is not typing_extensions.Annotated:
        return annotation
    inner, *metadata = typing_extensions.get_args(annotation)
    kept = [m for m in metadata if not isinstance(m, str)]
    return typing_extensions.Annotated[(inner, *kept)] if kept else inner


def _field(p: inspect.Parameter, description: str) -> tuple[Any, FieldInfo]:
    """The pydantic field of one parameter: its type and a Field with alias, description, default."""
    annotation = Any if p.annotation is EMPTY else strip_string_metadata(p.annotation)
    kwargs: dict[str, Any] = {"alias": p.name}
    if description:
        kwargs["description"] = description
    if p.kind is p.VAR_POSITIONAL:
        annotation, kwargs["default"] = list[annotation], _ABSENT  # type: ignore[valid-type]
    elif p.kind is p.VAR_KEYWORD:
        annotation, kwargs["default"] = dict[str, annotation], _ABSENT  # type: ignore[valid-type]
    elif p.default is not EMPTY:
        # Only literal defaults reach pydantic (and so the schema); validation never fills defaults in.
        kwargs["default"] = p.default if literal_source(plain_value(p.default)) is not None else _ABSENT
    return annotation, pydantic.Field(**kwargs)


def _where_and_expected(param: inspect.Parameter, loc: tuple[Any, ...]) -> tuple[str, str]:
    """``('labels', 'a')`` for ``**labels: int`` -> ``("labels['a']", "int")``."""
    annotation = format_annotation(param.annotation) if param.annotation is not EMPTY else ""
    if param.kind is param.VAR_POSITIONAL:
        if len(loc) == 1:
            return param.name, f"a list of {annotation}" if annotation else "a list"
        return _format_loc(loc), annotation if len(loc) == 2 else ""
    if param.kind is param.VAR_KEYWORD:
        if len(loc) == 1:
            return param.name, "an object (a dict of name -> value)"
        rest = _format_loc(("",) + loc[2:])
        return f"{param.name}[{loc[1]!r}]{rest}", annotation if len(loc) == 2 else ""
    return _format_loc(loc), annotation if len(loc) == 1 else ""


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


def _object_schema(raw: dict[str, Any]) -> dict[str, Any]:
    """The arguments schema: ``type``, ``properties``, ``required``, ``additionalProperties`` first."""
    schema = clean_schema(inline_defs(raw))
    ordered: dict[str, Any] = {"type": "object", "properties": schema.pop("properties", {})}
    if "required" in schema:
        ordered["required"] = schema.pop("required")
    schema.pop("additionalProperties", None)
    ordered["additionalProperties"] = False
    schema.pop("type", None)
    ordered.update(schema)  # $defs, if any recursive types remain
    return ordered


# Keys whose values are maps from names to schemas, not schemas themselves.
_NAME_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties", "dependentSchemas"})
# Keys whose values are data, never schemas.
_DATA_KEYS = frozenset({"default", "enum", "const", "examples", "required"})


def clean_schema(node: Any) -> Any:
    """Drop pydantic's auto-generated ``title`` keywords (never a property called title)."""
    if isinstance(node, list):
        return [clean_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _DATA_KEYS:
            out[key] = value
        elif key in _NAME_MAPS and isinstance(value, dict):
            out[key] = {name: clean_schema(sub) for name, sub in value.items()}
        else:
            out[key] = clean_schema(value)
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


def inline_defs(schema: dict[str, Any]) -> dict[str, Any]:
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
