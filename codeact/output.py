"""Typed answers: the type a run's final answer must have, shown to the model and checked on the host.

``agent.run(task, output_type=Report)`` asks for a ``Report``; ``result.answer`` is one::

    from pydantic import BaseModel

    class Growth(BaseModel):
        region: str
        growth_pct: float

    result = agent.run("Which region grew fastest?", files=["sales.csv"], output_type=Growth)
    if result.ok:
        print(result.answer.region)          # a Growth
    else:
        print(result.status, result.error)   # "invalid_output": the last value is in result.answer

Two parts:

* :class:`OutputSpec`: what the answer must be. ``OutputSpec(T)`` takes
  anything pydantic validates (a ``BaseModel``, a dataclass, a ``TypedDict``,
  ``list[int]``, ``Literal[...]``, an ``Enum``...; through
  ``pydantic.TypeAdapter``), :meth:`OutputSpec.from_json_schema` a JSON Schema
  (checked with ``jsonschema``), :meth:`OutputSpec.of` either (a dict is a
  JSON Schema). A spec renders the instructions the model
  reads with the task (the type as Python, its classes as stubs, or the
  schema), validates a value (lax: a dict becomes the model or dataclass, a
  tuple a list) and gives the JSON Schema of the ReAct agents'
  ``final_answer`` tool.
* :class:`AnswerCheck`: one turn's attempts. Each answer is validated; one
  that does not fit goes back to the model with the problems by field path
  (``items[0].price: Input should be a valid number``), up to ``retries``
  times; then the turn ends with status ``invalid_output``, the last value
  kept in ``result.answer`` and the reason in ``result.error``.

Values cross the sandbox bridge through the codec, so the model passes plain
data (dicts, lists, str, numbers). The CodeAct kernel (docker and local
backends) also gets a small constructor for each class of the type
(:meth:`OutputSpec.kernel_source`): ``final_answer(Report(region="EU", ...))``
works and sends the same dict.

A type pydantic cannot describe, or a schema that is not a valid JSON
Schema, is an :class:`~codeact.errors.OutputTypeError` when the spec is made,
before any sandbox starts.

A schema that comes from outside the program (``codeact run/chat
--output-schema FILE``, the web workspace's schema box, ``mcp serve``'s
``run_task(output_schema=...)``) goes through :func:`schema_output`, which
first checks it against bounds (:func:`check_schema_bounds`): at most
:data:`MAX_SCHEMA_BYTES` bytes as JSON, :data:`MAX_SCHEMA_DEPTH` levels of
nesting, :data:`MAX_SCHEMA_REFS` references (``$ref``, ``$dynamicRef``,
``$recursiveRef``), each inside the schema (``#...``), and
:data:`MAX_SCHEMA_EXPANDED` schema nodes with every reference followed (a
"ref bomb" whose definitions refer to the next one twice would cost
validation 2**n steps). The check walks the value without recursion and
stops at the first bound passed, so a hostile schema is refused in
milliseconds.
"""

from __future__ import annotations

import copy
import inspect
import json
import keyword
import reprlib
import typing
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .errors import OutputTypeError, OutputValidationError
from .events import ErrorEvent, RunResult

#: Problems listed in one message to the model.
MAX_PROBLEMS = 10
#: Characters of a JSON Schema shown in the prompt; a longer one is an error (it would crowd out the task).
MAX_SCHEMA_CHARS = 20_000
#: Bounds of a JSON Schema from outside the program (:func:`check_schema_bounds`): bytes as compact JSON,
MAX_SCHEMA_BYTES = 64 * 1024
#: levels of nested objects and arrays,
MAX_SCHEMA_DEPTH = 32
#: references (``$ref``, ``$dynamicRef``, ``$recursiveRef``),
MAX_SCHEMA_REFS = 64
#: and schema nodes (objects and arrays) counted with every reference followed (a recursive reference once).
MAX_SCHEMA_EXPANDED = 20_000
#: Default number of times a value that does not fit goes back to the model before the run gives up.
DEFAULT_RETRIES = 2

_REPR = reprlib.Repr()
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 5
_REPR.maxlevel = 3


@dataclass(frozen=True)
class AnswerProblem:
    """One reason a value does not fit: where (``items[0].price``; "" for the answer itself) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '(the answer)'}: {self.message}"


class OutputSpec:
    """What a run's final answer must be: ``OutputSpec(T)`` for a Python type, :meth:`from_json_schema` for a
    JSON Schema, :meth:`of` for either (and for a spec, returned as it is).

    ``OutputSpec(T)`` takes anything ``pydantic.TypeAdapter`` validates and can describe as JSON (a BaseModel,
    a dataclass, a TypedDict, ``list[int]``, ``Literal[...]``, an Enum...); validation is lax (a dict becomes
    the model or dataclass, ``"2.5"`` a float).

    Attributes:
        name: the type as the model reads it (``Report``, ``list[int]``, the schema's title).

    Raises:
        OutputTypeError: (a ConfigError) pydantic cannot validate the type or describe it as a JSON Schema.
    """

    name: str = "value"

    def __init__(self, output_type: Any) -> None:
        import pydantic

        from .tools import clean_schema, format_annotation, inline_defs, is_structured, strip_annotated

        self.type = output_type
        try:
            self.adapter: pydantic.TypeAdapter[Any] | None = pydantic.TypeAdapter(output_type)
            raw = self.adapter.json_schema()
        except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError, TypeError, ValueError,
                NameError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            first = first.split(". Set `arbitrary_types_allowed", 1)[0].rstrip(".")
            raise OutputTypeError(
                f"output_type={_type_text(output_type)} cannot be used as an answer type: {first}. Use a type "
                "pydantic can validate and describe as JSON: a BaseModel, a dataclass or TypedDict with annotated "
                "fields, list[int], Literal[...], an Enum, or combinations of them; or a JSON Schema dict") from None
        self._schema = clean_schema(inline_defs(raw))
        base = strip_annotated(output_type)
        self.name = base.__name__ if is_structured(base) else format_annotation(output_type)
        self.classes = _classes(output_type)

    @property
    def label(self) -> str:
        """How messages name what the answer must be: ``the type `Report```."""
        return f"the type `{self.name}`"

    @staticmethod
    def of(output_type: Any) -> OutputSpec | None:
        """The spec for ``output_type``: None for None, a spec as it is, a dict as a JSON Schema, else a type.

        Raises:
            OutputTypeError: an unusable type or schema.
        """
        if output_type is None:
            return None
        if isinstance(output_type, OutputSpec):
            return output_type
        if isinstance(output_type, Mapping):
            return SchemaOutput(dict(output_type))
        return OutputSpec(output_type)

    @staticmethod
    def from_json_schema(schema: Any, *, name: str | None = None) -> SchemaOutput:
        """A spec that validates answers against the JSON Schema ``schema`` (a dict) with ``jsonschema``.

        Raises:
            OutputTypeError: ``schema`` is not a valid JSON Schema (of the draft it declares; 2020-12 when none).
        """
        return SchemaOutput(schema, name=name)

    def json_schema(self) -> dict[str, Any]:
        """The answer's JSON Schema (definitions inlined where they are not recursive); do not mutate it."""
        return self._schema

    def validate(self, value: Any) -> Any:
        """``value`` as the type (e.g. a BaseModel instance).

        Raises:
            OutputValidationError: it does not fit; ``.problems`` lists where and why.
        """
        validated, problems = self.check(value)
        if problems:
            raise OutputValidationError(problems)
        return validated

    def check(self, value: Any) -> tuple[Any, list[AnswerProblem]]:
        """``(value as the type, [])`` when it fits, else ``(value, problems)``. Never raises."""
        import pydantic

        assert self.adapter is not None
        try:
            return self.adapter.validate_python(value, strict=False), []
        except pydantic.ValidationError as exc:
            return value, [_pydantic_problem(e) for e in exc.errors(include_url=False)]
        except Exception as exc:  # a validator of the user's type raised something else
            return value, [AnswerProblem("", f"{type(exc).__name__}: {exc}")]

    def check_text(self, text: str) -> tuple[Any, list[AnswerProblem]]:
        """:meth:`check` for a reply's text (an answer given without code): the text itself, or the JSON
        value it holds (a reply of ``[1, 2, 3]`` for ``list[int]``)."""
        value, problems = self.check(text)
        if not problems:
            return value, problems
        data = _json_in(text)
        if data is not _NO_JSON:
            json_value, json_problems = self.check(data)
            return (json_value, json_problems) if not json_problems else (text, json_problems)
        return text, problems

    def prompt_text(self, *, final: str = "final_answer(value)", constructors: bool = False) -> str:
        """What the model is told with the task: the type (its classes as stubs), and that ``final`` must fit it.

        ``constructors``: the kernel defines the type's classes (:meth:`kernel_source`), so the text offers them.
        """
        lines = [f"The answer must be of type `{self.name}`: end with `{final}` where the value fits this type. "
                 "It is checked, and a value that does not fit comes back to you with the problems."]
        if self.classes:
            stubs = "\n\n".join(_class_stub(tp) for tp in self.classes)
            if constructors:
                lines.append("Pass plain data (dicts with these keys, lists, str, numbers) or build it with the "
                             "classes below, which are defined in your session (each makes the dict):")
            else:
                lines.append("Pass plain data: dicts with these keys, lists, str, numbers.")
            lines.append(f"```python\n{stubs}\n```")
        return "\n".join(lines)

    def kernel_source(self, reserved: Iterable[str] = ()) -> str:
        """Python that defines a constructor for each class of the type in the kernel ("" for none).

        Each is a ``dict`` subclass (the codec sends it as a plain dict): ``Report(region="EU")``, positional
        arguments in field order, attribute access. Names in ``reserved`` (tools) are left alone.
        """
        from .tools import structured_fields

        taken = set(reserved)
        defined: list[str] = []
        for tp in self.classes:
            name = tp.__name__
            if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_") or name in taken:
                continue
            taken.add(name)
            fields = tuple(str(f) for f, _, _ in structured_fields(tp))
            doc = _quoted(_docstring(tp) or f"Part of the answer ({name}).")
            defined.append(f'class {name}(_CodeActAnswer):\n    """{doc}"""\n    _fields = {fields!r}\n')
        if not defined:
            return ""
        return _KERNEL_BASE + "\n\n" + "\n\n".join(defined) + "\ndel _CodeActAnswer\n"

    def schema_prompt(self, *, final: str = "final_answer(value)") -> str:
        """The instructions with the answer's JSON Schema (for formats whose actions are JSON)."""
        schema = json.dumps(self.json_schema(), ensure_ascii=False)  # one line: the fewest tokens
        return (f"The answer must be JSON data (objects, arrays, strings, numbers, true/false, null) matching this "
                f"JSON Schema: end with `{final}` where the value fits it. It is checked, and a value that does "
                f"not fit comes back to you with the problems.\n```json\n{schema}\n```")

    def react_prompt(self, *, function_calling: bool) -> str:
        """What a ReAct agent's model is told with the task: with function calling the final_answer tool carries
        the schema; the prompted formats get it in the text."""
        if function_calling:
            return (f"The answer must be of type `{self.name}`: call final_answer with it; its `answer` parameter "
                    "has the answer's JSON Schema. It is checked, and a value that does not fit comes back to you "
                    "with the problems.")
        return self.schema_prompt(final="final_answer(answer=...)")


class SchemaOutput(OutputSpec):
    """An answer that is JSON data matching a JSON Schema, validated with ``jsonschema``."""

    def __init__(self, schema: Any, *, name: str | None = None) -> None:  # no super().__init__: no type here
        import jsonschema
        from jsonschema.validators import validator_for

        if not isinstance(schema, dict):
            raise OutputTypeError(f"an output schema must be a JSON object (a JSON Schema), not "
                                  f"{type(schema).__name__}")
        try:
            cls = validator_for(schema, default=jsonschema.Draft202012Validator)
            cls.check_schema(schema)
        except jsonschema.SchemaError as exc:
            where = "/".join(str(p) for p in exc.absolute_path)
            raise OutputTypeError(f"the output schema is not a valid JSON Schema: {exc.message}"
                                  + (f" (at {where})" if where else "")) from None
        try:
            text = json.dumps(schema, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise OutputTypeError(f"the output schema is not JSON data: {exc}") from None
        if len(text) > MAX_SCHEMA_CHARS:
            raise OutputTypeError(f"the output schema has {len(text):,} characters as JSON; at most "
                                  f"{MAX_SCHEMA_CHARS:,} fit in the prompt")
        self.type = None
        self.adapter = None
        self.classes = []
        self.schema = copy.deepcopy(schema)
        self._schema = copy.deepcopy(schema)
        self._validator = cls(self.schema)
        title = name or (schema.get("title") if isinstance(schema.get("title"), str) else None) or "JSON Schema"
        self.name = _one_line(title, 80)  # it names the schema in every message about the answer

    @property
    def label(self) -> str:
        return "the JSON Schema" if self.name == "JSON Schema" else f"the JSON Schema `{self.name}`"

    def check(self, value: Any) -> tuple[Any, list[AnswerProblem]]:
        from .errors import ToolArgumentError
        from .tools import to_json

        try:
            data = to_json(value, "")
        except ToolArgumentError as exc:
            return value, [AnswerProblem("", str(exc).lstrip(": "))]
        try:
            errors = sorted(self._validator.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
        except Exception as exc:  # an unresolvable $ref, a regex Python cannot compile
            return data, [AnswerProblem("", f"the schema could not be applied: {type(exc).__name__}: {exc}")]
        return data, [AnswerProblem(_path(tuple(e.absolute_path)), _one_line(e.message)) for e in errors]

    def prompt_text(self, *, final: str = "final_answer(value)", constructors: bool = False) -> str:
        return self.schema_prompt(final=final)

    def kernel_source(self, reserved: Iterable[str] = ()) -> str:
        return ""


def check_schema_bounds(schema: Any) -> None:
    """Refuse a JSON Schema value that is too large, too deep, has too many references, a reference outside
    itself, or references that multiply (see the module docstring for the bounds). Cheap, never recursive.

    Raises:
        OutputTypeError: a bound is passed (the message names it and the limit).
    """
    size, refs, targets = _walk_bounds(schema)
    if size > MAX_SCHEMA_BYTES:
        raise OutputTypeError(f"the output schema is larger than {MAX_SCHEMA_BYTES:,} bytes as JSON")
    for ref in refs:
        if not ref.startswith("#"):
            raise OutputTypeError(f"the output schema refers outside itself ($ref {ref[:80]!r}): only references "
                                  "inside the schema (#/$defs/...) are allowed")
    _check_expansion(schema, targets)


def schema_output(source: Any, *, name: str | None = None) -> SchemaOutput:
    """The spec of a JSON Schema from outside the program: ``source`` is its JSON text (str or bytes) or the
    parsed value. Bounds are checked first (:func:`check_schema_bounds`), then that it is a JSON Schema.

    Raises:
        OutputTypeError: too large, too deep, too many or outside references, not JSON, not a JSON Schema.
    """
    if isinstance(source, (str, bytes, bytearray)):
        raw = source.encode("utf-8") if isinstance(source, str) else bytes(source)
        if len(raw) > MAX_SCHEMA_BYTES:
            raise OutputTypeError(f"the output schema has {len(raw):,} bytes; at most {MAX_SCHEMA_BYTES:,} "
                                  "are accepted")
        try:
            source = json.loads(raw)
        except RecursionError:
            raise OutputTypeError(f"the output schema is nested more than {MAX_SCHEMA_DEPTH} levels deep") \
                from None
        except ValueError as exc:
            raise OutputTypeError(f"the output schema is not valid JSON ({exc}); give a JSON Schema") from None
    check_schema_bounds(source)
    return SchemaOutput(source, name=name)


_REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")
_ANCHOR_KEYS = ("$anchor", "$dynamicAnchor")


def _scalar_bytes(value: Any) -> int:
    if isinstance(value, str):
        return len(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if value is None or isinstance(value, bool):
        return 4 if value in (None, True) else 5
    if isinstance(value, (int, float)):
        return len(repr(value)) if isinstance(value, int) else len(json.dumps(value))
    raise OutputTypeError(f"the output schema holds a {type(value).__name__}, which is not JSON data")


def _walk_bounds(schema: Any) -> tuple[int, list[str], dict[str, Any]]:
    """(bytes as compact JSON, the references, the anchors by name); stops at the first bound passed."""
    size = 0
    refs: list[str] = []
    anchors: dict[str, Any] = {}
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping):
            if depth > MAX_SCHEMA_DEPTH:
                raise OutputTypeError(f"the output schema is nested more than {MAX_SCHEMA_DEPTH} levels deep")
            size += 2 + max(0, len(node) - 1)
            for key, value in node.items():
                if not isinstance(key, str):
                    raise OutputTypeError("the output schema has a key that is not a string")
                size += _scalar_bytes(key) + 1
                if key in _REF_KEYS and isinstance(value, str):
                    refs.append(value)
                    if len(refs) > MAX_SCHEMA_REFS:
                        raise OutputTypeError(f"the output schema has more than {MAX_SCHEMA_REFS} references "
                                              "($ref)")
                elif key in _ANCHOR_KEYS and isinstance(value, str):
                    anchors.setdefault(value, node)
                stack.append((value, depth + 1))
        elif isinstance(node, (list, tuple)):
            if depth > MAX_SCHEMA_DEPTH:
                raise OutputTypeError(f"the output schema is nested more than {MAX_SCHEMA_DEPTH} levels deep")
            size += 2 + max(0, len(node) - 1)
            stack.extend((item, depth + 1) for item in node)
        else:
            size += _scalar_bytes(node)
        if size > MAX_SCHEMA_BYTES:
            raise OutputTypeError(f"the output schema is larger than {MAX_SCHEMA_BYTES:,} bytes as JSON")
    return size, refs, anchors


def _resolve_ref(root: Any, ref: str, anchors: dict[str, Any]) -> Any:
    """The node a local reference names (None when it cannot be found here: validation then reports it)."""
    from urllib.parse import unquote

    fragment = unquote(ref[1:])
    if not fragment.startswith("/"):
        return root if not fragment else anchors.get(fragment)
    from .tools import json_pointer

    return json_pointer(root, fragment)


def _check_expansion(root: Any, anchors: dict[str, Any]) -> None:
    """Count the schema's nodes with every reference followed (memoised; a reference back into the path being
    counted counts once), and refuse more than :data:`MAX_SCHEMA_EXPANDED`."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    # An explicit stack of (node, children pending?) so that depth costs no recursion.
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if not done:
            if key in sizes or key in on_path:
                continue
            on_path.add(key)
            stack.append((node, True))
            for child in _children(root, node, anchors):
                if id(child) not in sizes and id(child) not in on_path:
                    stack.append((child, False))
            continue
        total = 1
        for child in _children(root, node, anchors):
            total += sizes.get(id(child), 1)  # a child still on the path: a recursive reference, once
            if total > MAX_SCHEMA_EXPANDED:
                break
        on_path.discard(key)
        sizes[key] = total
        if total > MAX_SCHEMA_EXPANDED:
            raise OutputTypeError(f"the output schema's references expand to more than {MAX_SCHEMA_EXPANDED:,} "
                                  "schema nodes (references that refer to others several times multiply); "
                                  "define the parts once")


def _children(root: Any, node: Any, anchors: dict[str, Any]) -> list[Any]:
    if isinstance(node, Mapping):
        out = []
        for key, value in node.items():
            if key in _REF_KEYS and isinstance(value, str):
                target = _resolve_ref(root, value, anchors)
                if isinstance(target, (Mapping, list)):
                    out.append(target)
            elif isinstance(value, (Mapping, list)):
                out.append(value)
        return out
    if isinstance(node, list):
        return [item for item in node if isinstance(item, (Mapping, list))]
    return []


class AnswerCheck:
    """One turn's attempts at its final answer, against ``spec`` (None: any answer is accepted).

    :meth:`check` / :meth:`check_text` validate one attempt. When it does not
    fit, ``feedback`` is what the model is told and the turn goes on; after
    ``retries`` such retries the next misfit sets :attr:`exhausted` and the
    turn must end with status ``invalid_output`` (:meth:`finish`).
    """

    def __init__(self, spec: OutputSpec | None, retries: int = DEFAULT_RETRIES, *,
                 final: str = "final_answer(value)") -> None:
        if retries < 0:
            raise OutputTypeError(f"output_retries must be 0 or more, got {retries}")
        self.spec = spec
        self.retries = retries
        self.final = final
        self.failures = 0
        self.last: Any = None
        self.tried = False
        self.exhausted = False
        self.error: str | None = None

    def check(self, value: Any) -> Verdict:
        """An answer given through ``final_answer`` (or a tool's direct return)."""
        if self.spec is None:
            return Verdict(True, value)
        value, problems = self.spec.check(value)
        return self._verdict(value, problems, text=False)

    def check_text(self, text: str) -> Verdict:
        """An answer given as a reply's text (no code, no action)."""
        if self.spec is None:
            return Verdict(True, text)
        value, problems = self.spec.check_text(text)
        return self._verdict(value, problems, text=True)

    def _verdict(self, value: Any, problems: list[AnswerProblem], *, text: bool) -> Verdict:
        assert self.spec is not None
        self.last, self.tried = value, True
        if not problems:
            return Verdict(True, value)
        self.failures += 1
        listed = "\n".join(f"- {p}" for p in problems[:MAX_PROBLEMS])
        if len(problems) > MAX_PROBLEMS:
            listed += f"\n- ... and {len(problems) - MAX_PROBLEMS} more"
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        head = (f"Your reply had no code or action, so its text was taken as the final answer, but the answer "
                f"must fit {self.spec.label} ({count}):" if text
                else f"The final answer does not fit {self.spec.label} ({count}):")
        left = self.retries - self.failures + 1
        if self.failures > self.retries:
            self.exhausted = True
            self.error = (f"no valid answer: the answer did not fit {self.spec.label} after {self.failures} "
                          f"tr{'ies' if self.failures != 1 else 'y'} (result.answer holds the last value): "
                          + "; ".join(str(p) for p in problems[:3]))
            tail = "The run ends here without a valid answer."
        else:
            tries = f"{left} more tr{'ies' if left != 1 else 'y'} before the run ends"
            tail = (f"Call `{self.final}` with a value that fits ({tries})." if text
                    else f"Fix the value and call `{self.final}` again ({tries}).")
        return Verdict(False, value, feedback=f"{head}\n{listed}\n{tail}")


@dataclass(frozen=True)
class Verdict:
    """An attempt at the answer: ``ok`` and the validated ``value``, or the ``feedback`` for the model."""

    ok: bool
    value: Any
    feedback: str = ""


def gave_up(result: RunResult[Any], check: AnswerCheck, step: int) -> ErrorEvent:
    """End ``result`` with status ``invalid_output`` (its answer the last value tried); the event that says so."""
    result.status, result.answer, result.error = "invalid_output", check.last, check.error
    return ErrorEvent(run_id=result.run_id, step=step, message=check.error or "no valid answer", kind="output",
                      fatal=True)


# --------------------------------------------------------------------------- helpers


_NO_JSON = object()


def _json_in(text: str) -> Any:
    """The JSON value a reply's text holds (whole, or in one fenced block), else ``_NO_JSON``."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0].strip()
    if not body or body[0] not in "[{\"-0123456789tfn":
        return _NO_JSON
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return _NO_JSON


def _path(loc: tuple[Any, ...]) -> str:
    """``('items', 0, 'price')`` -> ``items[0].price``; ``()`` -> ""."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _pydantic_problem(error: Mapping[str, Any]) -> AnswerProblem:
    message = _one_line(str(error.get("msg", "invalid")))
    if error.get("type") != "missing":
        message += f" (got {_safe_repr(error.get('input'))})"
    return AnswerProblem(_path(tuple(error.get("loc", ()))), message)


def _safe_repr(value: Any) -> str:
    try:
        return _REPR.repr(value)
    except Exception:
        return f"<{type(value).__name__}>"


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _type_text(tp: Any) -> str:
    try:
        from .tools import format_annotation

        return format_annotation(tp)
    except Exception:
        return repr(tp)


def _classes(output_type: Any) -> list[type]:
    """The dataclasses, models and TypedDicts the type uses, in order of first use (depth first)."""
    from .tools import is_structured, strip_annotated, structured_fields

    found: list[type] = []

    def visit(tp: Any, depth: int) -> None:
        tp = strip_annotated(tp)
        if depth > 20:
            return
        if is_structured(tp):
            if tp not in found:
                found.append(tp)
                for _, annotation, _ in structured_fields(tp):
                    visit(annotation, depth + 1)
        elif typing.get_origin(tp) is not typing.Literal:
            for arg in typing.get_args(tp):
                visit(arg, depth + 1)

    visit(output_type, 0)
    return found


def _docstring(tp: type) -> str:
    """The class's own docstring ("" for none, and for the one ``@dataclass`` makes up)."""
    import inspect

    doc = tp.__dict__.get("__doc__") or ""
    if not isinstance(doc, str) or doc.startswith(f"{tp.__name__}("):
        return ""
    return inspect.cleandoc(doc)


def _quoted(doc: str) -> str:
    """``doc`` made safe between triple double quotes."""
    doc = doc.replace("\\", "\\\\").replace('"""', "'''")
    return doc + " " if doc.endswith('"') else doc


def _class_stub(tp: type) -> str:
    """``class Report:`` with its docstring and annotated fields (descriptions as comments)."""
    import pydantic

    from .tools import format_annotation, structured_fields

    descriptions: dict[str, str] = {}
    if issubclass(tp, pydantic.BaseModel):
        for name, info in tp.model_fields.items():
            if info.description:
                descriptions[info.alias or name] = _one_line(info.description, 200)
    lines = [f"class {tp.__name__}:"]
    doc = _docstring(tp)
    if doc:
        doc = _quoted(doc)
        indented = "\n".join("    " + line if line.strip() else "" for line in doc.splitlines())
        lines.append(f'    """{doc}"""' if "\n" not in doc else f'    """{indented.lstrip()}\n    """')
    fields = structured_fields(tp)
    for name, annotation, default in fields:
        text = f"    {name}: {format_annotation(annotation)}"
        if default is not inspect.Parameter.empty:  # structured_fields' mark of a field without a default
            text += f" = {default}"
        if name in descriptions:
            text += f"  # {descriptions[name]}"
        lines.append(text)
    if not fields:
        lines.append("    pass")
    return "\n".join(lines)


#: The kernel's base of the answer constructors (:meth:`OutputSpec.kernel_source`).
_KERNEL_BASE = '''\
class _CodeActAnswer(dict):
    """Builds the dict final_answer sends; the host checks it against the answer's type."""

    _fields = ()

    def __init__(self, *args, **kwargs):
        if len(args) > len(self._fields):
            raise TypeError(f"{type(self).__name__}() takes at most {len(self._fields)} positional arguments "
                            f"({len(args)} given); its fields are {', '.join(self._fields)}")
        for name, value in zip(self._fields, args):
            if name in kwargs:
                raise TypeError(f"{type(self).__name__}() got multiple values for {name!r}")
            kwargs[name] = value
        dict.__init__(self, kwargs)

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}") from None

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.items())})"
'''


__all__ = ["AnswerCheck", "AnswerProblem", "OutputSpec", "OutputValidationError", "SchemaOutput", "Verdict",
           "DEFAULT_RETRIES", "MAX_SCHEMA_BYTES", "MAX_SCHEMA_DEPTH", "MAX_SCHEMA_EXPANDED", "MAX_SCHEMA_REFS",
           "check_schema_bounds", "gave_up", "schema_output"]
