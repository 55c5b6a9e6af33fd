"""What the agents need from a language model (:class:`Model`), and the optional asyncio half (:class:`AsyncModel`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol, runtime_checkable

from ..messages import Message, ModelResponse


@runtime_checkable
class Model(Protocol):
    """What an agent needs from a language model: a ``name``, :meth:`complete` and :meth:`stream`.

    The agents call :meth:`complete` for each step, or :meth:`stream` when they stream the model's
    text (``stream_model=True``, the CLI and the UI). ``tools`` are OpenAI function schemas
    (``{"type": "function", "function": {...}}``) for native function calling; the CodeAct loop
    passes none. Nothing else is required: a model's ``vision``, ``context_window``, ``max_tokens``,
    ``prices`` and ``tokenizer`` are read when present. :class:`AsyncModel` adds ``acomplete`` for
    asyncio code; no agent calls it.

    Example::

        class Echo:
            name = "echo"

            def complete(self, messages, *, tools=None):
                return ModelResponse(Message("assistant", messages[-1].content))

            def stream(self, messages, *, tools=None):
                yield self.complete(messages, tools=tools)

        CodeActAgent(Echo(), sandbox="restricted")
    """

    name: str

    def complete(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None) -> ModelResponse:
        """One completion for ``messages``."""
        ...

    def stream(
        self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None
    ) -> Iterator[str | ModelResponse]:
        """Yield text deltas as they arrive, then exactly one final :class:`ModelResponse`."""
        ...


@runtime_checkable
class AsyncModel(Model, Protocol):
    """A :class:`Model` that can also be awaited (:class:`OpenAIModel` and :class:`ScriptedModel` are).

    Optional: the agents never call :meth:`acomplete`; it is for your own asyncio code.

    Example::

        async def ask(model: AsyncModel, question: str) -> str:
            return (await model.acomplete([Message("user", question)])).text
    """

    async def acomplete(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None) -> ModelResponse:
        """Like :meth:`complete`, for asyncio code."""
        ...
