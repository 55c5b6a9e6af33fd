"""The hidden run context: what the agent passes to a tool and the model never sees."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, Union

import typing_extensions

DepsT = TypeVar("DepsT")


@dataclass
class RunContext(Generic[DepsT]):
    """What the agent knows about the current call; hidden from the model.

    Annotate one parameter of a tool with ``RunContext`` (or ``RunContext[MyDeps]``)
    and the agent fills it on every call. It never appears in the JSON schema,
    the Python stub or the sandbox signature.

    Example::

        @tool
        def whoami(ctx: RunContext[Deps], greeting: str = "hi") -> str:
            \"\"\"Greet the current user.\"\"\"
            return f"{greeting} {ctx.deps.user_id}"

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


def is_run_context(annotation: Any) -> bool:
    """True for ``RunContext``, ``RunContext[X]``, ``Optional[RunContext]`` and ``Annotated`` forms."""
    while typing.get_origin(annotation) is typing_extensions.Annotated:
        annotation = typing.get_args(annotation)[0]
    if annotation is RunContext or typing.get_origin(annotation) is RunContext:
        return True
    # Optional[RunContext] is accepted too: the agent always passes one.
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return len(args) == 1 and is_run_context(args[0])
    return False
