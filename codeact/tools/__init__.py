"""Tools: Python callables an agent can call, described for a model and validated on the host.

A :class:`Tool` wraps any callable: a function (``async`` too), a builtin or C
function, a bound method, a ``functools.partial``, a callable object, a class.
Its JSON schema comes from the signature, the type hints (missing ones mean
``Any``) and the docstring (Google, NumPy or reST style), so one definition
serves both agent styles: CodeAct prompts show :meth:`Tool.python_stub`,
function-calling agents send :meth:`Tool.openai_schema` and pass the model's
arguments to :meth:`Tool.call`. Arguments are validated (and coerced: ``"3"``
becomes ``3``, a dict becomes a dataclass) before the function runs, and a bad
call raises :class:`~codeact.errors.ToolArgumentError` with a message a model
can act on.

Example::

    from typing import Literal
    from codeact.tools import RunContext, Tool, tool

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

    biggest = Tool(max)                              # a builtin: (*args, **kwargs) and its docstring
    biggest.call({"args": [3, 1, 2]})                # 3

The arguments dict
------------------

Every tool call is a dict from parameter names to values, whichever way it
arrives (:meth:`Tool.bind` from a Python call in the sandbox, or a
function-calling model's JSON). Variadic parameters appear under their own
names: ``*args`` as a list of the extra positional arguments, ``**kwargs`` as
a dict of the extra keywords::

    def f(a, /, b, *rest, c, d=3, **options): ...

    f(1, 2, 3, 4, c=5, x=6)   <->   {"a": 1, "b": 2, "rest": [3, 4], "c": 5, "options": {"x": 6}}

:meth:`Tool.openai_schema` describes exactly this dict (``rest`` an array,
``options`` an object) and :meth:`Tool.call` calls ``f`` with that layout.

Defaults stay on the host
-------------------------

Only literal defaults (``None``, bools, numbers, short strings and bytes, and
small tuples, lists, dicts and sets of them) appear in the stub, the schema
and the sandbox signature. Any other default shows as ``...`` and the host
applies it, so a default such as an API client never reaches the sandbox.

Tools only run on the host. The sandbox receives :meth:`Tool.host_function`, a
stub with the same signature whose calls come back to the host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._context import RunContext, RunHooks, run_hooks
from ._execution import to_daemon_thread
from ._loading import load_tools
from ._render import format_annotation, is_structured, strip_annotated, structured_fields
from ._schema import clean_schema, inline_defs
from ._tool import Tool, ensure_tools, tool

if TYPE_CHECKING:  # pragma: no cover
    from ._json_schema import json_pointer, python_name, to_json

__all__ = [
    "RunContext",
    "Tool",
    "tool",
    "ensure_tools",
    "load_tools",
    # For the agents: what a running agent offers the tool being called, and how a sync tool runs from async code.
    "RunHooks",
    "run_hooks",
    "to_daemon_thread",
    # For what else describes Python types and JSON schemas to a model (output types, MCP tools).
    "clean_schema",
    "format_annotation",
    "inline_defs",
    "is_structured",
    "json_pointer",
    "python_name",
    "strip_annotated",
    "structured_fields",
    "to_json",
]

#: Names read from ``_json_schema`` on first use (only schema-described tools need it).
_JSON_SCHEMA_NAMES = frozenset({"json_pointer", "python_name", "to_json"})


def __getattr__(name: str) -> Any:
    if name in _JSON_SCHEMA_NAMES:
        from . import _json_schema

        return getattr(_json_schema, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
