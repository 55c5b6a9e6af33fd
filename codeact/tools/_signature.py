"""Signatures: read the signature of any callable, and map Python calls onto it.

* reading: :func:`read_callable` accepts anything callable: functions,
  builtins and C functions (their ``__text_signature__``; without one,
  ``(*args, **kwargs)`` and the docstring), bound methods, ``functools.partial``,
  callable objects, ``staticmethod`` objects and classes (their constructor).
  Type hints are resolved (``from __future__ import annotations``); missing
  hints mean ``Any``. Docstrings are parsed (Google, NumPy, reST), with the
  call-form lines C functions start with (``max(iterable, *[, key=func])``)
  set apart.
* the model-facing signature: :class:`ToolSignature` is what the model sees of
  a tool, the public parameters (the hidden :class:`RunContext` parameter
  removed) with their descriptions, shown through :mod:`._render`.
* binding: :meth:`ToolSignature.bind` maps ``tool(*args, **kwargs)`` to the
  arguments dict.

The arguments dict uses the parameters' own names. ``*args`` collects the
extra positional arguments as a list under its own name, ``**kwargs`` the extra
keywords as a dict under its own name::

    def f(a, /, b, *rest, c, d=3, **options): ...

    f(1, 2, 3, 4, c=5, x=6)  ->  {"a": 1, "b": 2, "rest": [3, 4], "c": 5, "options": {"x": 6}}

That is what :meth:`Tool.openai_schema` describes (``rest`` an array,
``options`` an object) and what function-calling models send.

A signature need not come from a Python function: :class:`ToolSignature`
takes any ``inspect.Signature``, whose annotations may be plain text (a
signature synthesized from an MCP tool's JSON schema).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import keyword
import re
import sys
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import docstring_parser
import typing_extensions
from pydantic.fields import FieldInfo

from ..errors import ToolArgumentError, ToolDefinitionError
from ._context import is_run_context
from ._render import EMPTY, format_annotation, render_signature, shown_default
POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
BY_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)

#: The signature given to callables that have none (``max``, ``min``, ``math.hypot``...).
VARIADIC_SIGNATURE = inspect.Signature(
    [
        inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
        inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
    ]
)

# --------------------------------------------------------------------------- docstrings


@dataclass(frozen=True)
class Doc:
    """A parsed docstring.

    Attributes:
        description: summary and body, without Args/Returns/... sections.
        params: parameter name -> description (``x1, x2 : array_like`` gives both).
        returns: the Returns text.
        usage: leading call-form lines of a C function's docstring
            (``max(iterable, *[, default=obj, key=func]) -> value``).
    """

    description: str = ""
    params: Mapping[str, str] = dataclasses.field(default_factory=dict)
    returns: str = ""
    usage: tuple[str, ...] = ()


_USAGE_HEAD = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)\(.*\)\s*(?:-+>.*)?$")


def parse_docstring(doc: str, names: Iterable[str] = ()) -> Doc:
    """Parse a Google, NumPy, reST or Epydoc docstring.

    Leading lines that are call forms of one of ``names`` (as C functions and
    numpy ufuncs start their docstrings) go to :attr:`Doc.usage`, not into
    the description.
    """
    usage, doc = _split_usage(doc, set(names))
    if not doc.strip():
        return Doc(usage=usage)
    parsed = docstring_parser.parse(doc)  # auto-detects Google, NumPy, reST, Epydoc
    short = (parsed.short_description or "").strip()
    long = (parsed.long_description or "").strip()
    # docstring_parser cuts the summary after its first line; a summary that
    # wraps onto the next line continues there, not in a new paragraph.
    joiner = "\n\n" if parsed.blank_after_short_description else "\n"
    description = joiner.join(part for part in (short, long) if part)
    params: dict[str, str] = {}
    for p in parsed.params:
        if p.description:
            for name in p.arg_name.split(","):  # NumPy style documents `x1, x2 : array_like` together
                name = name.strip().lstrip("*").split(" ")[0]
                if name:
                    params[name] = inspect.cleandoc(p.description)
    returns = ""
    if parsed.returns is not None and parsed.returns.description:
        returns = inspect.cleandoc(parsed.returns.description)
    return Doc(description, params, returns, usage)


def _split_usage(doc: str, names: set[str]) -> tuple[tuple[str, ...], str]:
    lines = doc.splitlines()
    end = 0
    while end < len(lines) and lines[end].strip():
        end += 1
    heads = [line for line in lines[:end] if not line[:1].isspace()]
    matches = [_USAGE_HEAD.match(line.strip()) for line in heads]
    if not heads or not all(m is not None and m.group("name").rsplit(".", 1)[-1] in names for m in matches):
        return (), doc
    return tuple(lines[:end]), "\n".join(lines[end:]).strip()


def docstring_of(func: Any) -> str:
    """The docstring that documents calling ``func``.

    A partial's is its function's (not ``functools.partial``'s own); a callable
    object's is its ``__call__`` method's when that has one, else its class's.
    """
    while isinstance(func, functools.partial):
        func = func.func
    if not (inspect.isroutine(func) or inspect.isclass(func)):
        call = _call_method(func)
        if inspect.isfunction(call) and call.__doc__:  # its own, not one inherited from `type`
            return inspect.cleandoc(call.__doc__)
    return inspect.getdoc(func) or ""


def param_description(annotation: Any, docstring_text: str) -> str:
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


# --------------------------------------------------------------------------- reading a callable


@dataclass(frozen=True)
class CallableInfo:
    """What :func:`read_callable` learns about a callable.

    Attributes:
        func: the callable to call (a ``staticmethod`` object is unwrapped).
        name: the tool name (``name=`` or the callable's ``__name__``).
        signature: the full signature, type hints resolved (context parameter included).
        synthesized: True when the callable has no signature and got ``(*args, **kwargs)``.
        doc: its parsed docstring.
        is_async: calling it returns an awaitable (``async def``, also behind
            a partial, or an object whose ``__call__`` is ``async def``).
    """

    func: Callable[..., Any]
    name: str
    signature: inspect.Signature
    synthesized: bool
    doc: Doc
    is_async: bool


def read_callable(func: Any, name: str | None = None) -> CallableInfo:
    """Read the signature, type hints and docstring of any callable.

    Raises:
        ToolDefinitionError: not callable, a generator, no ``__name__`` and no
            ``name=``, a name that cannot be a Python function's, or a type
            hint that cannot be resolved.
    """
    if isinstance(func, staticmethod):
        func = func.__func__
    if isinstance(func, classmethod):
        raise ToolDefinitionError(
            f"cannot make a tool from a bare classmethod object ({func.__func__.__qualname__}); "
            "take it from its class (MyClass.method), which binds it"
        )
    if not callable(func):
        raise ToolDefinitionError(f"cannot make a tool from a {type(func).__name__} object: it is not callable")
    tool_name = _name_of(func, name)
    if _is_generator_callable(func):
        raise ToolDefinitionError(
            f"tool {tool_name!r} is a generator function; tools must return their result (collect it into a list)"
        )
    try:
        signature, synthesized = inspect.signature(func), False
    except (TypeError, ValueError):  # a builtin without __text_signature__ (max, min, math.hypot ...)
        signature, synthesized = VARIADIC_SIGNATURE, True
    if not synthesized:
        hints = _resolve_hints(func, signature, tool_name)
        signature = signature.replace(
            parameters=[p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()],
            return_annotation=hints.get("return", signature.return_annotation),
        )
    if inspect.isclass(func):  # the constructor returns an instance, whatever __init__ says
        signature = signature.replace(return_annotation=func)
    # C docstrings open with call forms of their own name: max(...), itemgetter(item, ...) --> ...
    target = _unwrap_partial(func)
    own_names = {tool_name, getattr(target, "__name__", tool_name)}
    if not (inspect.isroutine(target) or inspect.isclass(target)):
        own_names.add(type(target).__name__)
    doc = parse_docstring(docstring_of(func), own_names)
    if doc.usage and (synthesized and (inspect.isroutine(func) or inspect.isclass(func))):
        # The call forms are all the model has to go on: keep them, under the tool's name.
        usage = tuple(_rename_usage(line, tool_name) for line in doc.usage)
        doc = dataclasses.replace(doc, usage=usage)
    else:
        doc = dataclasses.replace(doc, usage=())
    return CallableInfo(func, tool_name, signature, synthesized, doc, _is_coroutine_callable(func))


def _name_of(func: Any, name: str | None) -> str:
    if name is None:
        name = getattr(func, "__name__", None)
        if not isinstance(name, str):
            raise ToolDefinitionError(
                f"cannot name a tool after a {type(func).__module__}.{type(func).__qualname__} object: it has "
                "no __name__ (partials, operator.itemgetter(...) and callable instances have none); pass name=..., "
                "e.g. Tool(obj, name='lookup') or tool(name='lookup')(obj)"
            )
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ToolDefinitionError(
            f"{name!r} cannot be a tool name: tools become Python functions, so the name must be "
            "a valid identifier that is not a keyword; pass name=... to @tool"
        )
    return name


def _rename_usage(line: str, tool_name: str) -> str:
    match = _USAGE_HEAD.match(line.strip())
    if match is None or line[:1].isspace():
        return line
    return tool_name + line.strip()[len(match.group("name")) :]


def _unwrap_partial(func: Any) -> Any:
    while isinstance(func, functools.partial):
        func = func.func
    return func


def _is_coroutine_callable(func: Any) -> bool:
    func = _unwrap_partial(func)
    if inspect.iscoroutinefunction(func):
        return True
    if inspect.isroutine(func) or inspect.isclass(func):
        return False
    return inspect.iscoroutinefunction(_call_method(func))


def _call_method(obj: Any) -> Any:
    """The ``__call__`` that calling the instance ``obj`` runs: the one its class defines.

    A class without one resolves to its metaclass's slot wrapper, which is
    neither a function nor a coroutine or generator function.
    """
    return type(obj).__call__


def _is_generator_callable(func: Any) -> bool:
    func = _unwrap_partial(func)
    if not (inspect.isroutine(func) or inspect.isclass(func)):
        func = _call_method(func)
    return inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func)


def _hint_sources(func: Any) -> list[Any]:
    """Where the type hints of ``func``'s parameters are written, lowest priority first."""
    target = _unwrap_partial(func)
    if inspect.isclass(target):
        sources: list[Any] = [target]  # dataclasses and models: the fields
        for method in ("__new__", "__init__"):
            impl = inspect.getattr_static(target, method, None)
            if isinstance(impl, staticmethod):
                impl = impl.__func__
            if inspect.isfunction(impl):
                sources.append(impl)
        return sources
    if inspect.isroutine(target):
        return [target]
    return [_call_method(target)]


def _resolve_hints(func: Any, signature: inspect.Signature, tool_name: str) -> dict[str, Any]:
    """Type hints with text annotations (``from __future__ import annotations``) evaluated."""
    hints: dict[str, Any] = {}
    failure: Exception | None = None
    sources = _hint_sources(func)
    for source in sources:
        try:
            hints.update(typing.get_type_hints(source, include_extras=True))
        except (NameError, AttributeError, SyntaxError) as exc:
            failure = exc
        except Exception:  # not a resolution problem (e.g. a builtin without annotations)
            continue
    if failure is None:
        return hints
    # Some hint did not resolve: evaluate the text annotations one by one to name the culprit.
    namespace = _globals_of(sources[-1])
    for p in signature.parameters.values():
        if isinstance(p.annotation, str) and p.name not in hints:
            try:
                hints[p.name] = eval(p.annotation, namespace)  # the tool author's own annotation
            except Exception as exc:
                raise ToolDefinitionError(
                    f"tool {tool_name!r}: cannot resolve the type of parameter {p.name!r} "
                    f"({p.annotation!r}): {exc}. Define or import that type at module level, "
                    "where the function is defined"
                ) from failure
    returns = signature.return_annotation
    if isinstance(returns, str) and "return" not in hints:
        try:
            hints["return"] = eval(returns, namespace)
        except Exception as exc:
            if not inspect.isclass(_unwrap_partial(func)):
                raise ToolDefinitionError(f"tool {tool_name!r}: cannot resolve its type hints: {exc}") from failure
    return hints


def _globals_of(source: Any) -> dict[str, Any]:
    if inspect.isclass(source):
        module = sys.modules.get(source.__module__)
        return dict(vars(module)) if module is not None else {}
    return dict(getattr(inspect.unwrap(source), "__globals__", {}))


# --------------------------------------------------------------------------- the model-facing signature


class ToolSignature:
    """What a model sees of a tool's parameters, and how a Python call maps onto them.

    ``signature`` is the public signature: the hidden :class:`RunContext`
    parameter removed, annotations real types (or plain text, for a tool built
    from a JSON schema), defaults the real ones (shown only through
    :meth:`display`). ``descriptions`` maps parameter names to their text.

    Example::

        def f(ctx: RunContext, a: int, /, *rest: int, scale: float = 1.0, **options: str) -> int: ...

        sig = ToolSignature.from_signature("f", inspect.signature(f))
        sig.render()                         # '(a: int, /, *rest: int, scale: float = 1.0, **options: str) -> int'
        sig.bind((1, 2, 3), {"x": "y"})      # {'a': 1, 'rest': [2, 3], 'options': {'x': 'y'}}
    """

    def __init__(
        self,
        name: str,
        signature: inspect.Signature,
        descriptions: Mapping[str, str] | None = None,
        context_param: str | None = None,
    ) -> None:
        self.name = name
        self.signature = signature
        self.descriptions = dict(descriptions or {})
        self.context_param = context_param
        params = list(signature.parameters.values())
        self.var_positional = next((p for p in params if p.kind is p.VAR_POSITIONAL), None)
        self.var_keyword = next((p for p in params if p.kind is p.VAR_KEYWORD), None)

    @classmethod
    def from_signature(
        cls, name: str, full_signature: inspect.Signature, doc_params: Mapping[str, str] | None = None
    ) -> ToolSignature:
        """Split the context parameter off a function's signature; attach parameter descriptions.

        Raises:
            ToolDefinitionError: two context parameters, or a variadic one.
        """
        doc_params = doc_params or {}
        context: str | None = None
        public: list[inspect.Parameter] = []
        descriptions: dict[str, str] = {}
        for p in full_signature.parameters.values():
            if is_run_context(p.annotation):
                if context is not None:
                    raise ToolDefinitionError(
                        f"tool {name!r} has two RunContext parameters ({context!r} and {p.name!r}); keep one"
                    )
                if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                    raise ToolDefinitionError(
                        f"tool {name!r}: the RunContext parameter {p.name!r} cannot be *args/**kwargs")
                context = p.name
                continue
            public.append(p)
            text = param_description(p.annotation, doc_params.get(p.name, ""))
            if text:
                descriptions[p.name] = text
        return cls(name, full_signature.replace(parameters=public), descriptions, context)

    @property
    def parameters(self) -> list[inspect.Parameter]:
        return list(self.signature.parameters.values())

    @property
    def named(self) -> list[inspect.Parameter]:
        """The parameters that are not ``*args`` or ``**kwargs``."""
        return [p for p in self.parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    def display(self) -> inspect.Signature:
        """The public signature as the prompt and the sandbox get it.

        Annotations become text (the sandbox has none of the user's classes;
        enums show as a ``Literal`` of their values); defaults become their
        literal value, or :data:`ELIDED` (shown as ``...``). Nothing here has
        a ``repr()`` other than builtin literals'.
        """
        params = []
        for p in self.parameters:
            annotation = format_annotation(p.annotation) if p.annotation is not EMPTY else EMPTY
            params.append(p.replace(annotation=annotation, default=shown_default(p.default)))
        returns = self.signature.return_annotation
        return self.signature.replace(
            parameters=params, return_annotation=format_annotation(returns) if returns is not EMPTY else EMPTY
        )

    def render(self) -> str:
        """``(city: str, days: int = 3) -> str``."""
        return render_signature(self.display())

    def usage(self) -> str:
        """``name(city: str, days: int = 3) -> str``, for error messages."""
        return f"{self.name}{self.render()}"

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Map a Python call ``tool(*args, **kwargs)`` to the arguments dict.

        Extra positional arguments go to ``*args`` (as a list, under its name),
        keywords that name no parameter to ``**kwargs`` (as a dict, under its
        name), as Python would. Defaults are not filled in; missing names, and
        unknown names when there is no ``**kwargs``, are left for validation,
        which reports them all at once with suggestions.

        Raises:
            ToolArgumentError: the call cannot be mapped: too many positional
                arguments, a value given twice, a positional-only argument
                passed by keyword, ``*args``' own name used as a keyword.
        """
        params = self.signature.parameters
        positional = [p for p in params.values() if p.kind in POSITIONAL]
        usage = _SignatureHint(self)  # rendered only in an error message, not on every call
        # Not strict: args beyond the named positionals go to *args (or are refused) below.
        out: dict[str, Any] = {p.name: value for p, value in zip(positional, args, strict=False)}
        if len(args) > len(positional):
            if self.var_positional is None:
                raise ToolArgumentError(
                    f"tool {self.name!r} takes {len(positional)} positional argument"
                    f"{'' if len(positional) == 1 else 's'} but {len(args)} were given{usage}"
                )
            out[self.var_positional.name] = list(args[len(positional) :])
        extra: dict[str, Any] = {}
        for key, value in kwargs.items():
            param = params.get(key)
            if param is not None and param.kind in BY_KEYWORD:
                if key in out:
                    raise ToolArgumentError(f"tool {self.name!r} got multiple values for argument {key!r}{usage}")
                out[key] = value
            elif self.var_keyword is not None and key != self.context_param:
                extra[key] = value  # unknown names, and positional-only names, as Python does
            elif param is not None and param.kind is param.POSITIONAL_ONLY:
                raise ToolArgumentError(
                    f"tool {self.name!r}: argument {key!r} is positional-only; pass it by position{usage}")
            elif param is not None:  # the name of *args (there is no **kwargs)
                raise ToolArgumentError(
                    f"tool {self.name!r} got an unexpected keyword argument {key!r}: *{key} collects extra "
                    f"positional arguments; pass them by position{usage}"
                )
            else:
                out[key] = value  # unknown, or the context parameter: validation explains
        if extra:
            out[self.var_keyword.name] = extra  # type: ignore[union-attr]
        return out


class _SignatureHint:
    """``; its signature is name(...)`` for :meth:`ToolSignature.bind`'s errors, rendered when formatted."""

    __slots__ = ("signature",)

    def __init__(self, signature: ToolSignature) -> None:
        self.signature = signature

    def __format__(self, spec: str) -> str:
        return f"; its signature is {self.signature.usage()}"
