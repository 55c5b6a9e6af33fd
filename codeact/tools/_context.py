"""The hidden run context: what the agent passes to a tool and the model never sees."""

from __future__ import annotations

import contextlib
import contextvars
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterator, TypeVar, Union

import typing_extensions

DepsT = TypeVar("DepsT")

#: ``add_artifact(name, data, mime) -> saved name``: keep bytes a tool produced as an artifact of the run.
AddArtifact = Callable[[str, bytes, str], str]
#: ``report_progress(progress, total, message)``: a long tool call says how far it got.
ReportProgress = Callable[[float, "float | None", "str | None"], None]


@dataclass(frozen=True)
class RunHooks:
    """What the running agent offers the tool being called (see :func:`run_hooks`)."""

    add_artifact: AddArtifact | None = None
    report_progress: ReportProgress | None = None


# Frozen, so every context may share this one "no hooks" value.
_NO_HOOKS = RunHooks()
_hooks: contextvars.ContextVar[RunHooks] = contextvars.ContextVar("codeact_run_hooks", default=_NO_HOOKS)


@contextlib.contextmanager
def run_hooks(hooks: RunHooks) -> Iterator[None]:
    """Offer ``hooks`` to every :class:`RunContext` created in this context (the agent wraps each tool call)."""
    token = _hooks.set(hooks)
    try:
        yield
    finally:
        _hooks.reset(token)


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
        add_artifact: ``add_artifact(name, data, mime) -> saved name`` keeps bytes
            the tool produced (an image, a file) as an artifact of the run and
            returns the name it was saved under; None outside a run.
        report_progress: ``report_progress(progress, total, message)`` reports
            how far a long call got (a ``ToolProgress`` event); None outside a run.
    """

    run_id: str = ""
    step: int = 0
    deps: DepsT = None  # type: ignore[assignment]
    metadata: dict[str, Any] = field(default_factory=dict)
    add_artifact: AddArtifact | None = field(default_factory=lambda: _hooks.get().add_artifact, repr=False)
    report_progress: ReportProgress | None = field(default_factory=lambda: _hooks.get().report_progress, repr=False)


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
