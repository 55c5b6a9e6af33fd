"""The Chat Completions wire format: request bodies out, completions and streamed chunks in."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..messages import Message, ToolCallRequest
from ._failures import MalformedResponse


@dataclass(frozen=True)
class Sampling:
    """The request fields a model sends when they are set (never ``stop``)."""

    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    extra_body: dict[str, Any] | None = None


def request_body(name: str, messages: Sequence[Message], tools: Sequence[dict] | None, sampling: Sampling, *,
                 stream: bool, stream_usage: bool) -> dict[str, Any]:
    """The keyword arguments of ``chat.completions.create`` for ``messages`` (as they go out)."""
    body: dict[str, Any] = {"model": name, "messages": [m.to_openai() for m in messages]}
    if tools:
        body["tools"] = list(tools)
    if sampling.temperature is not None:
        body["temperature"] = sampling.temperature
    if sampling.max_tokens is not None:
        body["max_tokens"] = sampling.max_tokens
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if stream:
        body["stream"] = True
        if stream_usage:
            body["stream_options"] = {"include_usage": True}
    if sampling.extra_body:
        body["extra_body"] = dict(sampling.extra_body)
    return body


@dataclass(frozen=True)
class Completion:
    """What a ChatCompletion says: the message, the first choice's finish reason, the model and raw usage."""

    message: Message
    finish_reason: str | None
    model: str | None
    usage: Any


def parse_completion(raw: Any) -> Completion:
    """The parts of a ChatCompletion; :class:`MalformedResponse` if it is not one."""
    choices = getattr(raw, "choices", None)
    if not isinstance(choices, list) or not choices:
        # Some proxies answer 200 with an error object instead of an HTTP error.
        error = getattr(raw, "error", None)
        if error:
            detail = error.get("message", error) if isinstance(error, dict) else error
            raise MalformedResponse(f"an error object instead of a completion: {detail}")
        raise MalformedResponse(f"no choices in the response ({type(raw).__name__})")
    choice = choices[0]
    msg = getattr(choice, "message", None)
    if msg is None:
        raise MalformedResponse("the first choice has no message")
    content = getattr(msg, "content", None)
    if content is not None and not isinstance(content, str):
        raise MalformedResponse(f"message content is {type(content).__name__}, not text")
    calls: list[ToolCallRequest] = []
    for i, tc in enumerate(getattr(msg, "tool_calls", None) or ()):
        fn = getattr(tc, "function", None)
        if fn is None or not getattr(fn, "name", None):
            raise MalformedResponse("a tool call has no function name")
        calls.append(ToolCallRequest(getattr(tc, "id", None) or f"call_{i}", fn.name, fn.arguments or ""))
    message = Message("assistant", content or "", tool_calls=tuple(calls))
    return Completion(message, getattr(choice, "finish_reason", None), getattr(raw, "model", None) or None,
                      getattr(raw, "usage", None))


class StreamState:
    """Assembles a streamed completion: text, tool-call fragments, usage, finish reason."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.usage: Any = None
        self.finish_reason: str | None = None
        self.model = ""
        self.chunks = 0
        self.yielded = 0  # characters handed to the caller; > 0 means no more retries

    def add(self, chunk: Any) -> str:
        """Absorb one chunk; return its text delta ("" if none)."""
        self.chunks += 1
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
        self.model = getattr(chunk, "model", None) or self.model
        out: list[str] = []
        for choice in getattr(chunk, "choices", None) or ():
            if getattr(choice, "index", 0) not in (0, None):
                continue  # we ask for one choice; ignore any others
            if getattr(choice, "finish_reason", None):
                self.finish_reason = choice.finish_reason
            delta = getattr(choice, "delta", None)
            if delta is None:
                continue
            if getattr(delta, "content", None):
                out.append(delta.content)
            for tc in getattr(delta, "tool_calls", None) or ():
                self._add_call(tc)
        text = "".join(out)
        self.text.append(text)
        return text

    def _add_call(self, tc: Any) -> None:
        index = tc.index if getattr(tc, "index", None) is not None else len(self.calls)
        slot = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        if getattr(tc, "id", None) and not slot["id"]:
            slot["id"] = tc.id  # some servers repeat the id on every fragment
        fn = getattr(tc, "function", None)
        if fn is not None:
            # Same rule as the openai SDK's own accumulator: name and arguments are concatenated.
            slot["name"] += getattr(fn, "name", None) or ""
            slot["arguments"] += getattr(fn, "arguments", None) or ""

    def message(self) -> Message:
        calls = tuple(
            ToolCallRequest(slot["id"] or f"call_{index}", slot["name"], slot["arguments"])
            for index, slot in sorted(self.calls.items())
        )
        return Message("assistant", "".join(self.text), tool_calls=calls)
