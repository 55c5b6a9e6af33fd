"""Tools described by a JSON schema (an MCP server's): the Python stub, the signature and the validator.

A tool that is not a Python function arrives as a name, a description and a
JSON schema of its arguments (and maybe one of its result). This module
turns that into the three parts a :class:`~codeact.tools.Tool` is built from
(see :mod:`._tool`):

* a :class:`~._signature.ToolSignature` whose annotations are Python type
  text rendered from the schema: ``str``, ``int | None``, ``list[Item]``,
  ``Literal['a', 'b']``, ``dict[str, float]``; objects with properties get a
  name (their ``title``, else the property's name in CamelCase) and are
  listed in the stub's "Types" section with their keys, like the
  TypedDicts of Python tools; ``$ref`` is followed (local references only)
  with a depth guard, so recursive schemas end in the type's name;
* a :class:`JsonSchemaArguments` validator: names first (unknown ones with a
  suggestion, missing required ones), then the values against the schema
  with ``jsonschema``, every problem at once, as a
  :class:`~codeact.errors.ToolArgumentError` that ends with the signature;
* the Python names of the parameters: a property whose name is not an
  identifier (``file-path``, ``from``) gets one (``file_path``, ``from_``)
  and is sent under its own name.

Example::

    schema = {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "city name"},
        "unit": {"enum": ["C", "F"], "default": "C"}}}
    sig, names, types = signature_from_schema("weather", schema)
    sig.render()       # "(city: str, unit: Literal['C', 'F'] = 'C')"
"""

from __future__ import annotations

import difflib
import inspect
import keyword
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import ToolArgumentError, ToolDefinitionError
from ._render import literal_source, short_repr
from ._signature import ToolSignature

#: How deep a schema is rendered before the rest shows as ``Any``.
MAX_DEPTH = 8
#: Errors listed in one ToolArgumentError.
MAX_ERRORS = 10

_SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}


class _Omitted:
    """The default of an optional property without a literal default: shown as ``...``, never sent."""

    def __repr__(self) -> str:
        return "..."


OMITTED = _Omitted()


# --------------------------------------------------------------------------- names


def python_name(name: str, taken: set[str] | frozenset[str] = frozenset()) -> str:
    """A Python identifier for ``name`` that is not a keyword and not in ``taken``.

    >>> python_name("file-path"), python_name("from"), python_name("2d")
    ('file_path', 'from_', '_2d')
    """
    text = re.sub(r"\W", "_", name, flags=re.ASCII) or "_"
    if text[0].isdigit():
        text = "_" + text
    if keyword.iskeyword(text) or keyword.issoftkeyword(text):
        text += "_"
    base, n = text, 2
    while text in taken:
        text, n = f"{base}_{n}", n + 1
    return text


def _type_name(hint: str) -> str:
    """``shipping address`` / ``shipping_address`` -> ``ShippingAddress``."""
    words = [w for w in re.split(r"[^0-9A-Za-z]+", hint) if w]
    text = "".join(w[:1].upper() + w[1:] for w in words) or "Object"
    return "_" + text if text[0].isdigit() else text


# --------------------------------------------------------------------------- rendering types


@dataclass
class _ObjectType:
    name: str
    keys: list[tuple[str, str, bool, str]]  # (key, type text, required, description)


@dataclass
class SchemaTypes:
    """The named object types a schema uses, in order of first use."""

    objects: list[_ObjectType] = field(default_factory=list)

    def section(self) -> str:
        """The stub docstring's "Types" section ("" when there are none)."""
        if not self.objects:
            return ""
        lines = ["Types (dicts with these keys):"]
        for obj in self.objects:
            keys = ", ".join(f'"{k}": {t}' + ("" if required else " = ...") for k, t, required, _ in obj.keys)
            lines.append(f"    {obj.name}: {{{keys}}}")
            for key, _, _, description in obj.keys:
                if description:
                    lines.append(f"        {key}: {_one_line(description)}")
        return "\n".join(lines)


class _Renderer:
    """Renders the subschemas of one root schema as Python type text."""

    def __init__(self, root: Mapping[str, Any], types: SchemaTypes) -> None:
        self.root = root
        self.types = types
        self._named: dict[int, str] = {}  # id(schema object) -> its type name
        self._expanding: set[str] = set()

    def render(self, schema: Any, hint: str, depth: int = 0) -> str:
        if schema is True or schema is None or schema == {}:
            return "Any"
        if schema is False or not isinstance(schema, Mapping) or depth > MAX_DEPTH:
            return "Any"
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return self._ref(ref, schema, hint, depth)
        if "const" in schema:
            return self._literal([schema["const"]])
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self._literal(schema["enum"])
        for combiner in ("anyOf", "oneOf"):
            members = schema.get(combiner)
            if isinstance(members, list) and members:
                return _union(self.render(m, hint, depth + 1) for m in members)
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and all_of:
            merged = _merge_all_of(all_of, self, depth)
            if merged is None:
                return "Any"
            rest = {k: v for k, v in schema.items() if k != "allOf"}
            return self.render({**merged, **rest}, hint, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            return _union(self.render({**schema, "type": k}, hint, depth + 1) for k in kind)
        if kind in _SCALARS:
            return _SCALARS[kind]
        if kind == "array" or (kind is None and ("items" in schema or "prefixItems" in schema)):
            return self._array(schema, hint, depth)
        if kind == "object" or (kind is None and "properties" in schema):
            return self._object(schema, hint, depth)
        return "Any"

    def _ref(self, ref: str, schema: Mapping[str, Any], hint: str, depth: int) -> str:
        target = resolve_ref(self.root, ref)
        if target is None:
            return "Any"
        name = _type_name(ref.rsplit("/", 1)[-1])
        if name in self._expanding:  # a recursive type: its name stands for it
            return name
        self._expanding.add(name)
        try:
            merged = dict(target)
            merged.setdefault("title", name)
            return self.render(merged, name, depth + 1)
        finally:
            self._expanding.discard(name)

    def _literal(self, values: list[Any]) -> str:
        texts = []
        for v in values:
            text = literal_source(v)
            if text is None:
                return "Any"
            texts.append(text)
        return "Literal[" + ", ".join(texts) + "]"

    def _array(self, schema: Mapping[str, Any], hint: str, depth: int) -> str:
        prefix = schema.get("prefixItems")
        if isinstance(prefix, list) and prefix and schema.get("items") is False:
            return "tuple[" + ", ".join(self.render(s, hint, depth + 1) for s in prefix) + "]"
        items = schema.get("items")
        item_hint = hint[:-1] if hint.endswith("s") and len(hint) > 1 else hint + "_item"
        if isinstance(items, list):  # draft 4-7 tuple form
            if not items:
                return "list[Any]"
            return "tuple[" + ", ".join(self.render(s, item_hint, depth + 1) for s in items) + "]"
        return f"list[{self.render(items, item_hint, depth + 1)}]"

    def _object(self, schema: Mapping[str, Any], hint: str, depth: int) -> str:
        props = schema.get("properties")
        if not isinstance(props, Mapping) or not props:
            extra = schema.get("additionalProperties")
            value = self.render(extra, hint, depth + 1) if isinstance(extra, Mapping) else "Any"
            return f"dict[str, {value}]"
        key = id(schema)
        if key in self._named:
            return self._named[key]
        title = schema.get("title")
        name = _type_name(title if isinstance(title, str) and title.strip() else hint)
        taken = {o.name for o in self.types.objects}
        base, n = name, 2
        while name in taken:
            name, n = f"{base}{n}", n + 1
        self._named[key] = name
        obj = _ObjectType(name, [])
        self.types.objects.append(obj)
        required = set(schema.get("required") or ())
        for prop, sub in props.items():
            text = self.render(sub, str(prop), depth + 1)
            description = sub.get("description", "") if isinstance(sub, Mapping) else ""
            obj.keys.append((str(prop), text, prop in required, description if isinstance(description, str) else ""))
        return name


def _union(texts: Any) -> str:
    seen: list[str] = []
    for text in texts:
        for part in _split_union(text):
            if part not in seen:
                seen.append(part)
    if "Any" in seen:
        return "Any"
    if "None" in seen:  # `X | None` reads best with None last
        seen = [t for t in seen if t != "None"] + ["None"]
    return " | ".join(seen) if seen else "Any"


def _split_union(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "|" and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def _merge_all_of(members: list[Any], renderer: _Renderer, depth: int) -> dict[str, Any] | None:
    """``allOf`` of object schemas as one object schema; None when the members are not all objects."""
    merged: dict[str, Any] = {"type": "object", "properties": {}, "required": []}
    for member in members:
        if isinstance(member, Mapping) and isinstance(member.get("$ref"), str):
            member = resolve_ref(renderer.root, member["$ref"]) or {}
        if not isinstance(member, Mapping):
            return None
        if len(members) == 1:
            return dict(member)
        if member.get("type", "object") != "object" and "properties" not in member:
            return None
        merged["properties"].update(member.get("properties") or {})
        merged["required"].extend(member.get("required") or [])
    return merged


def resolve_ref(root: Mapping[str, Any], ref: str) -> Mapping[str, Any] | None:
    """The subschema a local ``$ref`` (``#/$defs/X``, ``#/definitions/X``, any ``#/...`` pointer) names."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return None  # remote references are never fetched
    node = json_pointer(root, ref[1:])
    return node if isinstance(node, Mapping) else None


def json_pointer(root: Any, pointer: str) -> Any:
    """The node a JSON Pointer (``/$defs/X``, RFC 6901: ``~1`` is ``/``, ``~0`` is ``~``) names in ``root``,
    or None when it names nothing."""
    node = root
    for part in pointer[1:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def render_type(schema: Any, root: Mapping[str, Any] | None = None, hint: str = "value",
                types: SchemaTypes | None = None) -> str:
    """Python type text for a JSON schema.

    >>> render_type({"type": "array", "items": {"type": ["string", "null"]}})
    'list[str | None]'
    """
    root = root if root is not None else (schema if isinstance(schema, Mapping) else {})
    return _Renderer(root, types if types is not None else SchemaTypes()).render(schema, hint)


# --------------------------------------------------------------------------- the signature


def signature_from_schema(
    name: str, input_schema: Mapping[str, Any], output_schema: Mapping[str, Any] | None = None
) -> tuple[ToolSignature, dict[str, str], SchemaTypes]:
    """The tool's signature, its Python -> JSON parameter names, and the types it uses.

    Required properties come first (in the schema's order), then the optional
    ones, whose default is the schema's ``default`` when it is a literal and
    ``...`` otherwise (the server applies it: an argument left out is not sent).

    Raises:
        ToolDefinitionError: the input schema is not an object schema.
    """
    if not isinstance(input_schema, Mapping):
        raise ToolDefinitionError(
            f"tool {name!r}: its input schema must be a JSON object, not {type(input_schema).__name__}")
    root_type = input_schema.get("type", "object")
    if root_type != "object" and not (isinstance(root_type, list) and "object" in root_type):
        raise ToolDefinitionError(
            f"tool {name!r}: its input schema must describe an object (type 'object'), not {root_type!r}")
    types = SchemaTypes()
    renderer = _Renderer(input_schema, types)
    props = input_schema.get("properties") or {}
    if not isinstance(props, Mapping):
        raise ToolDefinitionError(f"tool {name!r}: 'properties' of its input schema must be an object")
    required = [p for p in (input_schema.get("required") or []) if p in props]
    order = required + [p for p in props if p not in required]
    names: dict[str, str] = {}
    params: list[inspect.Parameter] = []
    descriptions: dict[str, str] = {}
    for json_name in order:
        sub = props[json_name]
        py = python_name(str(json_name), set(names))
        names[py] = json_name
        annotation = renderer.render(sub, str(json_name))
        default: Any = inspect.Parameter.empty
        if json_name not in required:
            default = OMITTED
            if isinstance(sub, Mapping) and "default" in sub and literal_source(sub["default"]) is not None:
                default = sub["default"]
        params.append(inspect.Parameter(py, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=annotation,
                                        default=default))
        description = _describe(sub)
        if py != json_name:
            description = (description + " " if description else "") + f"(sent as {json_name!r})"
        if description:
            descriptions[py] = description
    returns: Any = inspect.Signature.empty
    if output_schema is not None:
        returns = _Renderer(output_schema, types).render(output_schema, f"{name}_result")
    signature = inspect.Signature(params, return_annotation=returns)
    return ToolSignature(name, signature, descriptions), names, types


def _describe(schema: Any) -> str:
    if not isinstance(schema, Mapping):
        return ""
    text = schema.get("description")
    text = text.strip() if isinstance(text, str) else ""
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt:
        text = (text + " " if text else "") + f"(format: {fmt})"
    return text


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- validation


class JsonSchemaArguments:
    """Validator of a schema-described tool's arguments (an :class:`~._schema.ArgumentsValidator`).

    :meth:`validate` takes the arguments dict under the Python names of the
    signature and returns it under the schema's own names, ready to send.
    Values are checked with ``jsonschema`` (the draft the schema declares,
    2020-12 when it declares none); local ``$ref`` s resolve, remote ones are
    never fetched. A schema that is itself invalid is not used for checking
    (the names still are): the server checks again anyway.
    """

    def __init__(self, signature: ToolSignature, schema: Mapping[str, Any], names: Mapping[str, str]) -> None:
        self.signature = signature
        self.name = signature.name
        self._schema = dict(schema)
        self._names = dict(names)
        self._validator: Any = None
        try:
            import jsonschema
            from jsonschema.validators import validator_for

            cls = validator_for(self._schema, default=jsonschema.Draft202012Validator)
            cls.check_schema(self._schema)
            self._validator = cls(self._schema)
        except Exception:  # an invalid or unusual schema: check names only, the server checks values
            self._validator = None

    @property
    def json_schema(self) -> dict[str, Any]:
        return self._schema

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Check names and values; return the arguments under the schema's names.

        Raises:
            ToolArgumentError: unknown or missing names, values the schema
                rejects, values that are not JSON; all at once, then the signature.
        """
        if not isinstance(arguments, Mapping):
            raise ToolArgumentError(
                f"tool {self.name!r} takes its arguments as a dict of name -> value, "
                f"got {type(arguments).__name__}: {short_repr(arguments)}"
            )
        problems: list[str] = []
        by_json = {json: py for py, json in self._names.items()}
        out: dict[str, Any] = {}
        unknown: list[str] = []
        for key, value in arguments.items():
            json_name = self._names.get(key) if isinstance(key, str) else None
            if json_name is None and isinstance(key, str) and key in by_json:
                json_name = key  # the schema's own name works too
            if json_name is None:
                unknown.append(str(key))
                continue
            try:
                out[json_name] = to_json(value, by_json.get(json_name, json_name))
            except ToolArgumentError as exc:
                problems.append(str(exc))
        for p in self.signature.parameters:
            if p.default is inspect.Parameter.empty and self._names[p.name] not in out and p.name not in unknown:
                problems.append(f"{p.name}: missing required argument (expected {_annotation(p)})")
        if unknown:
            valid = [p.name for p in self.signature.parameters]
            parts = []
            for key in unknown:
                close = difflib.get_close_matches(key, valid, n=1)
                parts.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            noun = "argument" if len(unknown) == 1 else "arguments"
            problems.append(f"unknown {noun} {', '.join(parts)}; "
                            + (f"valid arguments: {', '.join(valid)}" if valid else "this tool takes no arguments"))
        if not problems and self._validator is not None:
            problems.extend(self._schema_problems(out, by_json))
        if problems:
            shown = problems[:MAX_ERRORS]
            if len(problems) > MAX_ERRORS:
                shown.append(f"... and {len(problems) - MAX_ERRORS} more")
            raise ToolArgumentError(
                f"invalid arguments for tool {self.name!r}:\n" + "\n".join(f"- {line}" for line in shown)
                + f"\nexpected: {self.signature.usage()}"
            )
        return out

    def _schema_problems(self, instance: dict[str, Any], by_json: Mapping[str, str]) -> list[str]:
        try:
            errors = sorted(self._validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
        except Exception:  # an unresolvable $ref, a regex Python cannot compile: the server checks
            return []
        lines = []
        for error in errors:
            path = list(error.absolute_path)
            where = by_json.get(str(path[0]), str(path[0])) if path else ""
            for part in path[1:]:
                where += f"[{part!r}]"
            message = _one_line(error.message, 300)
            if error.validator == "required" and not path:
                continue  # reported above as a missing argument
            lines.append(f"{where}: {message}" if where else message)
        return lines


def _annotation(p: inspect.Parameter) -> str:
    return p.annotation if isinstance(p.annotation, str) else "a value"


def to_json(value: Any, where: str, depth: int = 0) -> Any:
    """``value`` as JSON data (tuples and sets become lists); a ToolArgumentError for anything else."""
    if depth > 100:
        raise ToolArgumentError(f"{where}: nested too deeply to send as JSON")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ToolArgumentError(f"{where}: {value!r} cannot be sent as JSON (use a finite number or None)")
        return float(value)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ToolArgumentError(f"{where}: dict keys sent as JSON must be strings, got {short_repr(k)}")
            out[k] = to_json(v, f"{where}[{k!r}]", depth + 1)
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
    item = getattr(value, "item", None)  # numpy and pandas scalars
    if callable(item) and type(value).__module__.split(".")[0] in ("numpy", "pandas"):
        try:
            return to_json(item(), where, depth + 1)
        except ToolArgumentError:
            raise
        except Exception:
            pass
    tolist = getattr(value, "tolist", None)  # numpy arrays
    if callable(tolist) and type(value).__module__.split(".")[0] == "numpy":
        return to_json(tolist(), where, depth + 1)
    raise ToolArgumentError(
        f"{where}: a {type(value).__name__} cannot be sent as JSON; pass str, int, float, bool, None, "
        "or lists and dicts of them"
    )
