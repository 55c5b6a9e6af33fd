"""Typed final answers: an :class:`OutputSpec` describes the shape ``final_answer()`` must get.

A spec is built from a Python type (anything ``pydantic.TypeAdapter`` validates: a BaseModel,
dataclass, TypedDict, ``list[int]``, Literal, Enum) or from a JSON Schema dict. It gives the
prompt text, validation with errors by field path, and the JSON schema for a final-answer tool.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any

import jsonschema
import pydantic
import typing_extensions

from codeact.errors import CodeActError, ConfigError


class OutputValidationError(CodeActError):
    """A final answer does not fit the expected type; the message lists errors by field path."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


def _type_text(tp: Any) -> str:
    """The expected type as Python: a class stub for models/dataclasses/TypedDicts, else the annotation."""
    fields: list[tuple[str, Any, str | None]] = []
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        fields = [(n, f.annotation, f.description) for n, f in tp.model_fields.items()]
    elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        fields = [(f.name, hints.get(f.name, Any), f.metadata.get("description")) for f in dataclasses.fields(tp)]
    elif typing_extensions.is_typeddict(tp):
        fields = [(n, a, None) for n, a in typing.get_type_hints(tp).items()]
    else:
        return _annotation(tp)
    lines = [f"class {tp.__name__}:"]
    doc = (tp.__doc__ or "").strip()
    if doc and not doc.startswith(tp.__name__ + "("):  # dataclasses get an auto-generated signature doc
        lines.append(f'    """{doc}"""')
    for name, ann, desc in fields:
        lines.append(f"    {name}: {_annotation(ann)}" + (f"  # {desc}" if desc else ""))
    if len(lines) == 1:
        lines.append("    pass")
    return "\n".join(lines)


def _annotation(tp: Any) -> str:
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    return repr(tp).replace("typing.", "")


class OutputSpec:
    """The expected shape of a run's final answer.

    Build it with ``OutputSpec(SomeType)`` or ``OutputSpec.from_json_schema(schema)``.
    Raises :class:`ConfigError` when the type or schema cannot be used.
    """

    def __init__(self, output_type: Any) -> None:
        self.output_type = output_type
        self._schema_dict: dict[str, Any] | None = None
        self._validator: Any = None
        try:
            self._adapter: pydantic.TypeAdapter[Any] | None = pydantic.TypeAdapter(output_type)
            self._json_schema = self._adapter.json_schema()
        except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError) as exc:
            raise ConfigError(
                f"output_type={output_type!r} cannot be used as an answer type ({str(exc).splitlines()[0]}): "
                "use a pydantic BaseModel, dataclass, TypedDict or a plain type such as list[int], "
                "or pass a JSON Schema dict"
            ) from exc

    @classmethod
    def from_json_schema(cls, schema: dict[str, Any]) -> OutputSpec:
        """A spec from a JSON Schema dict; raises :class:`ConfigError` if the schema is invalid."""
        if not isinstance(schema, dict):
            raise ConfigError(f"an output JSON Schema must be a JSON object, got {type(schema).__name__}")
        validator_cls = jsonschema.validators.validator_for(schema)
        try:
            validator_cls.check_schema(schema)
        except jsonschema.SchemaError as exc:
            path = ".".join(str(p) for p in exc.absolute_path) or "(root)"
            raise ConfigError(f"invalid output JSON Schema at {path}: {exc.message}; fix the schema") from exc
        spec = cls.__new__(cls)
        spec.output_type = None
        spec._adapter = None
        spec._schema_dict = schema
        spec._json_schema = schema
        spec._validator = validator_cls(schema)
        return spec

    @classmethod
    def of(cls, output_type: Any) -> OutputSpec:
        """``output_type`` as a spec: a spec is returned as is, a dict is a JSON Schema, else a type."""
        if isinstance(output_type, OutputSpec):
            return output_type
        if isinstance(output_type, dict):
            return cls.from_json_schema(output_type)
        return cls(output_type)

    def json_schema(self) -> dict[str, Any]:
        """The JSON Schema of the expected answer (for a final-answer tool's parameters)."""
        return self._json_schema

    def prompt_text(self) -> str:
        """Text for the task message saying what ``final_answer()`` must get."""
        if self._schema_dict is not None:
            shape = "a value matching this JSON Schema:\n" + json.dumps(self._schema_dict, indent=2)
        else:
            shape = "a value of this type:\n```python\n" + _type_text(self.output_type) + "\n```"
        return (
            f"The final answer must be {shape}\n"
            "Pass it to final_answer() as plain data (dicts, lists, str, int, float, bool, None)."
        )

    def validate(self, value: Any) -> Any:
        """The validated value (e.g. a BaseModel instance); raises :class:`OutputValidationError`."""
        if self._adapter is not None:
            try:
                return self._adapter.validate_python(value)
            except pydantic.ValidationError as exc:
                errors = [
                    f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}" for err in exc.errors()
                ]
                raise OutputValidationError(errors) from None
        found = sorted(self._validator.iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
        if found:
            raise OutputValidationError(
                [f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}" for e in found]
            )
        return value

    def retry_message(self, error: OutputValidationError) -> str:
        """The observation given to the model when its answer does not fit."""
        return (
            f"Your final answer does not fit the expected type: {error}. "
            "Call final_answer(...) again with a value that fits."
        )


class AnswerCheck:
    """One turn's answer checking: validates each answer, counting the retries the model has left."""

    def __init__(self, spec: OutputSpec | None, retries: int) -> None:
        self.spec, self.retries = spec, retries

    def settle(self, value: Any, result: Any) -> str | None:
        """Set ``result.answer``/``status``; return a retry message when the model should try again."""
        result.answer, result.status = value, "success"
        if self.spec is None:
            return None
        try:
            result.answer = self.spec.validate(value)
            return None
        except OutputValidationError as exc:
            if self.retries > 0:
                self.retries -= 1
                return self.spec.retry_message(exc)
            result.status, result.error = "invalid_output", f"the final answer does not fit the expected type: {exc}"
            return None
