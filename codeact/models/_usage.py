"""Token counts of prompts and replies, for servers that report none and for the scripted model."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..messages import Message


def estimate_tokens(chars: int) -> int:
    """A rough token count for ``chars`` characters (4 characters per token, rounded up)."""
    return (max(chars, 0) + 3) // 4


def prompt_tokens(messages: Sequence[Message]) -> int:
    """An estimate of the prompt tokens of ``messages``: the text (4 characters a token) and the images."""
    from ..images import image_tokens

    return estimate_tokens(message_chars(messages)) + image_tokens(messages)


def reply_tokens(message: Message) -> int:
    """An estimate of the tokens of one reply (its text and its tool calls, 4 characters a token)."""
    return estimate_tokens(message_chars((message,)))


def reported_prompt_tokens(usage: Any) -> int | None:
    """The prompt tokens a response's usage object reports (None when absent or not a count)."""
    value = getattr(usage, "prompt_tokens", None) if usage is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def message_chars(messages: Iterable[Message]) -> int:
    """The characters of ``messages``: their text and their tool calls' names and arguments."""
    total = 0
    for m in messages:
        total += len(m.content)
        for call in m.tool_calls:
            total += len(call.name) + len(call.arguments)
    return total
