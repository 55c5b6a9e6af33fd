"""The :class:`Tool` record, the :func:`tool` decorator and :func:`ensure_tools`.

A ``Tool`` is thin: a name, a description, flags, and three parts that do
the work, each replaceable:

* a :class:`~._signature.ToolSignature`: the parameters the model sees, the
  prompt stub, the sandbox signature, and :meth:`Tool.bind`;
* an :class:`~._schema.ArgumentsValidator`: the JSON schema and
  :meth:`Tool.validate`;
* an :data:`~._execution.Invoke`: how valid arguments become a call.

``Tool(func)`` builds all three from a Python callable. A tool without a
Python function (an MCP server's) builds them from its JSON schema and hands
them to :meth:`Tool._assemble`; nothing else in ``Tool`` assumes ``func`` has
a Python signature.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import keyword
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, Mapping, ParamSpec, Sequence, TypeVar, overload

from ..errors import ToolDefinitionError
from . import _execution
from ._context import RunContext
from ._schema import ArgumentsModel, ArgumentsValidator
from ._render import python_stub, stub_docstring
from ._signature import ToolSignature, docstring_of, read_callable

if TYPE_CHECKING:  # sandbox.functions is light, but only host_function() needs it
    from sandbox.functions import HostFunction

P = ParamSpec("P")
R = TypeVar("R")


class Tool(Generic[P, R]):
    """A function the agent can call, with its schema, stub and validator.

    Create one with :func:`tool` (``@tool`` or ``@tool(...)``) or ``Tool(func, ...)``.
    Any callable works: functions (``async`` too), builtins and C functions,
    bound methods, ``functools.partial`` objects, callable objects, classes.
    Calling the ``Tool`` calls the function unchanged; the agent uses
    :meth:`call` / :meth:`acall`, which validate the model's arguments first.

    Example::

        import math

        hypot = Tool(math.hypot)              # no __text_signature__: (*args, **kwargs)
        hypot.bind((3, 4), {})                # {'args': [3, 4]}
        hypot.call({"args": [3, 4]})          # 5.0
        biggest = Tool(max)                   # named like a builtin: the stub says so

    Attributes:
        name: the name the model calls (a Python identifier).
        description: the docstring's summary and body (no Args section), or
            the ``description`` given; the docstring's Returns text is appended.
        func: the wrapped callable.
        is_async: calling ``func`` returns an awaitable (``async def``).
        return_direct: the tool's result ends the run and is the final answer.
        requires_approval: a human (or approval callback) must allow each call.
        timeout: seconds one call may take (``None``: no limit of its own).
        context_param: name of the hidden :class:`RunContext` parameter, or None.
        signature: the public signature (context parameter removed), with the
            real annotations and defaults.
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
    #: A live source of tools (an MCP connection) this tool came from, or None. Between steps
    #: the agent asks it for the tools it offers now: a server may add, change or remove tools.
    toolset: Any = None
    #: The namespace the tool lives in inside the sandbox (``tools.<group>.<local_name>``), or
    #: None for a global function. An MCP tool's group is its server's name.
    group: str | None = None
    #: The tool's name inside its group (``name`` unless a toolset chose another, e.g. when
    #: ``name`` carries a prefix that keeps it unique among all tools).
    local_name: str
    #: The event loop (on a thread of its own) where :meth:`acall` runs natively, or None. An MCP
    #: tool's is its toolset's loop: given an async ``invoke``, :meth:`host_function` runs each call
    #: from the sandbox as a task there, with no thread in between.
    loop: asyncio.AbstractEventLoop | None = None

    def __init__(
        self,
        func: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        return_direct: bool = False,
        requires_approval: bool = False,
        timeout: float | None = None,
        group: str | None = None,
    ) -> None:
        if isinstance(func, Tool):
            func = func.func
        info = read_callable(func, name)
        interface = ToolSignature.from_signature(info.name, info.signature, info.doc.params)
        self._assemble(
            name=info.name,
            func=info.func,
            interface=interface,
            arguments=ArgumentsModel(interface),
            invoke=_execution.function_invoker(info.func, info.signature, interface.context_param),
            is_async=info.is_async,
            summary=info.doc.description,
            returns=info.doc.returns,
            usage=info.doc.usage,
            description=description,
            return_direct=return_direct,
            requires_approval=requires_approval,
            timeout=timeout,
            group=group,
        )
        # Look like the wrapped function to introspection (help(), inspect.signature, pickling by name).
        self.__wrapped__ = info.func
        self.__doc__ = docstring_of(info.func) or None
        self.__name__ = getattr(info.func, "__name__", info.name)
        self.__qualname__ = getattr(info.func, "__qualname__", info.name)
        self.__module__ = getattr(info.func, "__module__", None) or __name__

    def _assemble(
        self,
        *,
        name: str,
        func: Callable[..., Any],
        interface: ToolSignature,
        arguments: ArgumentsValidator,
        invoke: _execution.Invoke,
        is_async: bool,
        summary: str = "",
        returns: str = "",
        usage: Sequence[str] = (),
        description: str | None = None,
        return_direct: bool = False,
        requires_approval: bool = False,
        timeout: float | None = None,
        types_doc: str = "",
        group: str | None = None,
    ) -> None:
        """Set every field from its parts; the one place a ``Tool`` is put together.

        ``Tool(func)`` reads the parts from a Python callable; a tool described
        by a JSON schema (MCP) builds ``interface`` (a signature synthesized
        from the schema, text annotations), ``arguments`` (a JSON-schema
        validator) and ``invoke`` (its call function) and calls this on
        ``Tool.__new__(Tool)``.
        """
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
            raise ToolDefinitionError(f"tool {name!r}: timeout must be a positive number of seconds or None")
        if group is not None and (not isinstance(group, str) or not group.isidentifier() or keyword.iskeyword(group)):
            raise ToolDefinitionError(f"tool {name!r}: group {group!r} must be a Python identifier (it becomes "
                                      f"the namespace tools.<group> in the sandbox)")
        self.name = name
        self.group = group
        self.local_name = name
        self.func = func
        self.is_async = bool(is_async)
        self.return_direct = bool(return_direct)
        self.requires_approval = bool(requires_approval)
        self.timeout = float(timeout) if timeout is not None else None
        self.context_param = interface.context_param
        self.signature = interface.signature
        self._interface = interface
        self._arguments = arguments
        self._invoke = invoke
        self._usage = tuple(usage)
        self._types_doc = types_doc  # a schema-described tool's named object types (see from_schema)
        self._returns_doc = returns if description is None else ""
        # Function-calling schemas have no place for the return value, so the
        # description carries the Returns text; the stub gives it its own section.
        self._summary = inspect.cleandoc(description) if description is not None else summary
        self.description = self._summary
        if self._returns_doc:
            self.description = (self._summary + "\n\n" if self._summary else "") + f"Returns: {self._returns_doc}"

    # ------------------------------------------------------------------ public API

    @property
    def parameters(self) -> dict[str, Any]:
        """JSON schema (an object schema) of the arguments dict; a fresh copy.

        ``*args`` is an array property and ``**kwargs`` an object property, each
        under the parameter's own name; only literal defaults are shown.
        """
        return copy.deepcopy(self._arguments.json_schema)

    @property
    def qualified_name(self) -> str:
        """Where the code finds the tool: ``tools.<group>.<local_name>``, or ``name`` for a global tool."""
        return f"tools.{self.group}.{self.local_name}" if self.group else self.name

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the wrapped function directly, without validation."""
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        flags = [f for f, on in (("return_direct", self.return_direct), ("requires_approval", self.requires_approval))
                 if on]
        return f"Tool({self.name}{self._interface.render()}{', ' + ', '.join(flags) if flags else ''})"

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Validate and coerce the model's arguments; return what the function will receive.

        Values are converted to the annotated types (``"3"`` -> ``3`` for
        ``int``, a dict -> a dataclass or pydantic model, a string -> an Enum
        member); ``*args`` items and ``**kwargs`` values one by one against
        their annotation. Arguments the caller left out are not filled in, so
        the function's own defaults apply.

        Example::

            get_daily_weather.validate({"city": "Oslo", "days": "4"})   # {'city': 'Oslo', 'days': 4}

        Raises:
            ToolArgumentError: naming the tool, each bad argument with what was
                expected and what was received, missing required arguments, and
                unknown argument names next to the valid ones.
        """
        return self._arguments.validate(arguments)

    def bind(self, args: tuple[Any, ...] | list[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Map a Python call ``tool(*args, **kwargs)`` to the arguments dict.

        Extra positional arguments go to ``*args`` and unknown keywords to
        ``**kwargs`` when the function has them, under those parameters' own
        names, so ``bind`` and :meth:`call` speak the same dict. Defaults are
        not filled in; missing names, and unknown ones without ``**kwargs``,
        are left for :meth:`validate`, which reports them all at once.

        Example::

            def f(a, /, b, *rest, c, d=3, **options): ...

            Tool(f).bind((1, 2, 3, 4), {"c": 5, "x": 6})
            # {'a': 1, 'b': 2, 'rest': [3, 4], 'c': 5, 'options': {'x': 6}}

        Raises:
            ToolArgumentError: the call cannot be mapped: too many positional
                arguments, a value given twice, a positional-only argument
                passed by keyword.
        """
        return self._interface.bind(args, kwargs)

    def calling(self, func: Callable[..., Any]) -> Tool[P, R]:
        """A copy of this tool that runs ``func`` instead, called as this tool's function would be (with its
        signature's layout); the name, texts, schema and validation are this tool's (their parts are immutable,
        so the copy shares them). For many tools of one template, each bound to its own object."""
        copied = copy.copy(self)
        copied.func = func
        copied._invoke = _execution.function_invoker(func, self.signature, self.context_param)
        return copied

    def call(self, arguments: Mapping[str, Any], context: RunContext[Any] | None = None) -> Any:
        """Validate ``arguments`` and run the tool; return its result.

        Async tools run to completion here: with ``asyncio.run`` when no event
        loop runs in this thread, else on a worker thread. ``context`` fills the
        hidden context parameter (a default :class:`RunContext` when omitted).

        Example::

            Tool(max).call({"args": [3, 1, 2]})       # 3

        Raises:
            ToolArgumentError: the arguments do not validate (the tool did not run).
            TimeoutError: the tool has a ``timeout`` and did not finish in time.
            Exception: whatever the tool itself raises.
        """
        values = self.validate(arguments)
        return _execution.run(
            functools.partial(self._invoke, values, context),
            is_async=self.is_async, timeout=self.timeout, name=self.name,
        )

    async def acall(self, arguments: Mapping[str, Any], context: RunContext[Any] | None = None) -> Any:
        """Async :meth:`call`. Sync tools run in a worker thread so the event loop stays free."""
        values = self.validate(arguments)
        return await _execution.arun(
            functools.partial(self._invoke, values, context),
            is_async=self.is_async, timeout=self.timeout, name=self.name,
        )

    def python_stub(self) -> str:
        """A Python function definition (signature + docstring) for a CodeAct prompt.

        Defaults that are not literals show as ``...``. Example output::

            def get_daily_weather(city: str, days: int = 3) -> str:
                \"\"\"Weather for today, tomorrow and the day after in a city.

                Args:
                    city: city name, e.g. 北京
                    days: how many days to report
                \"\"\"
        """
        return python_stub(self.name, _stub_docstring(self), self._interface.display(), is_async=self.is_async)

    def openai_schema(self) -> dict[str, Any]:
        """The tool as an OpenAI function-calling definition (``tools=[...]`` item).

        The model's arguments for it go to :meth:`call` as they are.
        """
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def host_function(self, invoke: Callable[[tuple[Any, ...], dict[str, Any]], Any]) -> HostFunction:
        """A :class:`sandbox.functions.HostFunction` that offers this tool to sandboxed code.

        The sandbox stub gets the tool's name, public signature (literal
        defaults only, others ``...``) and docstring, and whether the tool is
        async. Each call from the sandbox runs ``invoke(args, kwargs)`` on the
        host with what the sandboxed code passed; the agent supplies ``invoke``
        so it can log, ask for approval, bind and validate (:meth:`bind`,
        :meth:`call`) and pass the run context. Defaults are applied here.

        An ``async def invoke`` (for a tool with a :attr:`loop`, awaiting
        :meth:`acall`) runs as a task on that loop; it must not block it.

        Raises:
            ToolDefinitionError: ``invoke`` is async but the tool has no loop.
        """
        from sandbox.functions import HostFunction

        run_tool: Callable[..., Any]
        options: dict[str, Any] = {}
        if inspect.iscoroutinefunction(invoke):
            if self.loop is None:
                raise ToolDefinitionError(f"tool {self.name!r} has no event loop of its own (Tool.loop), so its "
                                          "host function takes a plain invoke, not an async one")

            async def run_tool_async(*args: Any, **kwargs: Any) -> Any:
                return await invoke(args, kwargs)

            run_tool, options["loop"] = run_tool_async, self.loop
        else:
            def run_tool_sync(*args: Any, **kwargs: Any) -> Any:
                return invoke(args, kwargs)

            run_tool = run_tool_sync
        if "is_async" in _host_function_options():
            options["is_async"] = self.is_async
        return HostFunction(
            run_tool,
            name=self.name,
            doc=_stub_docstring(self),
            signature=self._interface.display(),
            timeout=self.timeout,
            **options,
        )

    @classmethod
    def from_schema(
        cls,
        name: str,
        description: str,
        input_schema: Mapping[str, Any],
        call: Callable[[dict[str, Any], RunContext[Any] | None], Any],
        *,
        output_schema: Mapping[str, Any] | None = None,
        is_async: bool = False,
        return_direct: bool = False,
        requires_approval: bool = False,
        timeout: float | None = None,
        group: str | None = None,
    ) -> Tool[..., Any]:
        """A tool described by a JSON schema instead of a Python signature (an MCP server's tool).

        The schema becomes a typed Python stub (nested objects listed with
        their keys, ``Literal`` for enums, ``X | None``, ``list[...]``, local
        ``$ref`` s followed) whose docstring carries ``description`` and each
        property's description; ``output_schema``, when given, is the return
        type. Arguments are validated against the schema (names, then values
        with ``jsonschema``) and ``call(arguments, context)`` receives them as
        a JSON-ready dict under the schema's own property names.

        Example::

            def weather(arguments, context):
                return f"{arguments['city']}: sunny"

            t = Tool.from_schema("weather", "Weather in a city.", {
                "type": "object", "required": ["city"],
                "properties": {"city": {"type": "string", "description": "city name"}}}, weather)
            t.call({"city": "Oslo"})          # 'Oslo: sunny'
            print(t.python_stub())            # def weather(city: str): ...

        Raises:
            ToolDefinitionError: ``name`` is not an identifier, or the input
                schema does not describe an object.
        """
        from ._json_schema import JsonSchemaArguments, signature_from_schema

        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise ToolDefinitionError(
                f"{name!r} cannot be a tool name: tools become Python functions, so the name must be "
                "a valid identifier that is not a keyword"
            )
        interface, names, types = signature_from_schema(name, input_schema, output_schema)

        def invoke(values: Mapping[str, Any], context: RunContext[Any] | None) -> Any:
            return call(dict(values), context)

        self = cls.__new__(cls)
        self._assemble(
            name=name,
            func=call,
            interface=interface,
            arguments=JsonSchemaArguments(interface, input_schema, names),
            invoke=invoke,
            is_async=is_async,
            summary=inspect.cleandoc(description or ""),
            return_direct=return_direct,
            requires_approval=requires_approval,
            timeout=timeout,
            types_doc=types.section(),
            group=group,
        )
        self.__name__ = self.__qualname__ = name
        self.__doc__ = _stub_docstring(self) or None
        self.__module__ = getattr(call, "__module__", None) or __name__
        return self


@functools.lru_cache(maxsize=1)
def _stub_docstring(t: Tool[Any, Any]) -> str:
    """The docstring of ``t``'s Python stub: its summary, arguments, returns and usage, then its types."""
    doc = stub_docstring(t._interface, t._summary, t._returns_doc, t._usage)
    if t._types_doc:
        doc = (doc + "\n\n" if doc else "") + t._types_doc
    return doc


def _host_function_options() -> frozenset[str]:
    """The keyword options this version of ``HostFunction`` takes (``is_async`` is new)."""
    from sandbox.functions import HostFunction

    return frozenset(inspect.signature(HostFunction.__init__).parameters)


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
    group: str | None = None,
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
    group: str | None = None,
) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """Make a callable a :class:`Tool`; use bare (``@tool``) or with options (``@tool(...)``).

    Example::

        @tool(timeout=10)
        def get_daily_weather(city: str, days: int = 3) -> str:
            \"\"\"Weather for the next days in a city.\"\"\"
            ...

        lookup = tool(name="lookup")(operator.itemgetter("id"))   # objects without __name__ need name=

    Args:
        func: the function (given when used bare).
        name: the name the model uses; defaults to the callable's ``__name__``.
            A builtin's name (``max``, ``sum``) is allowed; the stub says it
            shadows the builtin.
        description: overrides the docstring's description.
        return_direct: the tool's result ends the run as the final answer.
        requires_approval: each call needs approval before it runs.
        timeout: seconds one call may take.
        group: a namespace for the tool in the sandbox: ``@tool(group="shop")`` makes it
            ``tools.shop.<name>`` (``from tools.shop import <name>``); without one it is global.

    Raises:
        ToolDefinitionError: the name is not an identifier or missing, a
            parameter type has no JSON schema, a type hint cannot be resolved, ...
    """

    def make(f: Callable[P, R]) -> Tool[P, R]:
        return Tool(
            f,
            name=name,
            description=description,
            return_direct=return_direct,
            requires_approval=requires_approval,
            timeout=timeout,
            group=group,
        )

    if func is None:
        return make
    return make(func)


def ensure_tools(items: Iterable[Tool[Any, Any] | Callable[..., Any]]) -> list[Tool[Any, Any]]:
    """Turn a list of tools and plain callables into tools; names must be unique.

    Example::

        ensure_tools([get_daily_weather, max, tool(name="first")(operator.itemgetter(0))])

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
                f"two tools are named {t.name!r} ({origin(seen[t.name])} and {origin(t)}); "
                "rename one with @tool(name=...)"
            )
        seen[t.name] = t
        out.append(t)
    return out


def origin(t: Tool[Any, Any]) -> str:
    """Where a tool's function is defined, for messages: ``module.qualname``."""
    module = getattr(t.func, "__module__", None)
    qualname = getattr(t.func, "__qualname__", None) or t.name
    return f"{module}.{qualname}" if module else qualname
