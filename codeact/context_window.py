"""How long a model's context window is, and how many tokens a prompt takes of it.

The compaction of long sessions (:mod:`codeact.compaction`) asks two things:

- :func:`context_window` — the window of a model in tokens: ``OpenAIModel(context_window=N)``
  when given; else what the endpoint reports in its model list (``max_model_len``,
  ``context_length``...); else what a context-length error taught (the number the endpoint
  named); else None (unknown).
- :func:`count_tokens` — the prompt tokens a list of messages takes: the model's real
  tokenizer where one is known, a conservative estimate otherwise; images count by
  :attr:`codeact.messages.ImagePart.tokens`.

Example::

    from codeact.context_window import context_window, count_tokens

    window = context_window(model)          # e.g. 8192, or None
    used = count_tokens(model, messages)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .messages import Message

#: Tokens every message costs beyond its text (role, separators), as chat templates add them.
MESSAGE_OVERHEAD = 4


def context_window(model: Any) -> int | None:
    """The model's context window in tokens, or None when nothing says it."""
    window = getattr(model, "context_window", None)
    return int(window) if isinstance(window, int) and window > 0 else None


def count_tokens(model: Any, messages: Sequence[Message]) -> int:
    """Prompt tokens ``messages`` take for ``model`` (an estimate that errs high when the tokenizer is unknown)."""
    total = 0
    for m in messages:
        chars = len(m.content) + sum(len(c.name) + len(c.arguments) for c in m.tool_calls)
        total += MESSAGE_OVERHEAD + (chars + 2) // 3 + sum(image.tokens for image in m.images)
    return total
