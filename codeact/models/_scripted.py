"""The scripted model: replays given replies (tests, demos, replays)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Union

from ..errors import ModelOutputError
from ..messages import Message, ModelResponse, ToolCallRequest, Usage
from ._usage import prompt_tokens, reply_tokens

#: One scripted reply: the assistant's text, a whole :class:`Message`, or ``(messages) -> str | Message``.
ScriptedReply = Union[str, Message, Callable[[list[Message]], Union[str, Message]]]


class ScriptedModel:
    """Replays given replies in order, for tests, demos and replays. Zero latency.

    Each reply is a ``str`` (an assistant message), a :class:`Message`, or a
    callable ``(messages) -> str | Message`` that can react to the conversation
    so far (e.g. to the last observation). Every call's messages are recorded in
    ``.requests`` and its ``tools`` in ``.tool_schemas``. Usage is estimated as
    characters / 4, plus each image's tokens (:attr:`ImagePart.tokens`).

    Example::

        model = ScriptedModel([
            "```python\\nprint(1 + 1)\\n```",
            lambda msgs: f"The answer is {msgs[-1].content.strip()}",
        ])
        model.complete([Message("user", "1+1?")]).text
        assert len(model.requests) == 1

    Raises:
        ModelOutputError: when asked for more replies than were given.
    """

    def __init__(self, replies: Iterable[ScriptedReply], *, name: str = "scripted", vision: bool | None = None) -> None:
        self.name = name
        #: Whether the agents attach images to observations for this model (as OpenAIModel's ``vision``).
        self.vision = True if vision is None else bool(vision)
        self._replies: list[ScriptedReply] = list(replies)
        self._next = 0
        self.requests: list[list[Message]] = []
        self.tool_schemas: list[list[dict] | None] = []

    def __repr__(self) -> str:
        return f"ScriptedModel(name={self.name!r}, replies={len(self._replies)}, used={self._next})"

    @staticmethod
    def tool_calls(*calls: tuple[str, Any], text: str = "") -> Message:
        """A scripted reply that asks for native function calls (ReAct function calling).

        Each call is ``(name, arguments)`` with ``arguments`` a dict (sent as
        JSON) or raw JSON text (to script malformed arguments); ids are
        ``call_0``, ``call_1``, ...

        Example::

            model = ScriptedModel([
                ScriptedModel.tool_calls(("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo"})),
                "Paris is warmer.",
            ])
        """
        import json

        requests = tuple(
            ToolCallRequest(f"call_{i}", name, arguments if isinstance(arguments, str) else json.dumps(arguments))
            for i, (name, arguments) in enumerate(calls)
        )
        return Message("assistant", text, tool_calls=requests)

    @property
    def remaining(self) -> int:
        """Replies not used yet."""
        return len(self._replies) - self._next

    def _reply(self, messages: Sequence[Message], tools: Sequence[dict] | None) -> Message:
        history = list(messages)
        self.requests.append(history)
        self.tool_schemas.append(list(tools) if tools is not None else None)
        if self._next >= len(self._replies):
            raise ModelOutputError(f"scripted model has no reply left ({len(self._replies)} given)")
        reply = self._replies[self._next]
        self._next += 1
        if callable(reply) and not isinstance(reply, Message):
            reply = reply(list(history))  # a copy: the callable must not edit the record
        if isinstance(reply, str):
            return Message("assistant", reply)
        if isinstance(reply, Message):
            return reply
        raise TypeError(f"scripted reply #{self._next} must be str or Message, got {type(reply).__name__}")

    def _response(self, messages: Sequence[Message], reply: Message) -> ModelResponse:
        usage = Usage(prompt_tokens(messages), reply_tokens(reply), 1)
        finish = "tool_calls" if reply.tool_calls else "stop"
        return ModelResponse(message=reply, usage=usage, duration=0.0, model=self.name, finish_reason=finish)

    def complete(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None) -> ModelResponse:
        """The next scripted reply."""
        reply = self._reply(messages, tools)
        return self._response(messages, reply)

    def stream(
        self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None
    ) -> Iterator[str | ModelResponse]:
        """The next scripted reply in up to 4 text chunks, then the ModelResponse."""
        reply = self._reply(messages, tools)
        text = reply.content
        size = max(1, -(-len(text) // 4))
        for i in range(0, len(text), size):
            yield text[i : i + size]
        yield self._response(messages, reply)

    async def acomplete(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None) -> ModelResponse:
        """Same as :meth:`complete`."""
        return self.complete(messages, tools=tools)
