"""What a model knows of its context window: given, else learned from a context-length error, else listed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError, ContextOverflowError
from ._failures import whole_error_text

#: The model list is read in at most this many seconds and bytes (OpenRouter's list of every model is ~1 MB).
MODEL_LIST_TIMEOUT = 10.0
MODEL_LIST_MAX_BYTES = 16 * 1024 * 1024


class ContextWindow:
    """The context window of one model, in tokens, from three sources in this order.

    The window given (the constructor's ``context_window``, or set later); the one the endpoint named in
    a context-length error (:meth:`overflow_error` learns it); the one its ``GET /models`` list states
    (:meth:`discover` reads it once).
    """

    def __init__(self, given: int | None) -> None:
        self.given = check_window(given)
        self.learned: int | None = None  # the number a context-length error named
        self.listed: int | None = None  # what GET /models said
        self._listed_read = False  # GET /models was tried (once per model)
        self._lock = threading.Lock()
        #: The bounds on reading the model list, in seconds and bytes.
        self.list_timeout = MODEL_LIST_TIMEOUT
        self.list_max_bytes = MODEL_LIST_MAX_BYTES

    @property
    def known(self) -> int | None:
        """What is known right now (no network), or None."""
        return self.given or self.learned or self.listed

    def discover(self, client: Callable[[], Any], name: str, timeout: float) -> int | None:
        """The window, reading the endpoint's model list (with the ``openai`` client ``client()``) the first
        time nothing else says it; never raises for the endpoint's sake."""
        if self.known is None:
            with self._lock:
                if not self._listed_read:
                    self.listed = self._read_listed(client, name, min(timeout, self.list_timeout))
                    self._listed_read = True
        return self.known

    def overflow_error(self, name: str, where: str, detail: str, exc: BaseException) -> ContextOverflowError:
        """The error for a context-length refusal, with the numbers it named; the window is remembered."""
        from ..context_window import overflow_numbers

        limit, requested = overflow_numbers(whole_error_text(exc, detail), getattr(exc, "body", None))
        if limit is not None:
            self.learned = limit
        numbers = [f"{limit} tokens"] if limit else []
        numbers += [f"the request needed {requested}"] if requested else []
        said = f" ({'; '.join(numbers)})" if numbers else ""
        return ContextOverflowError(
            f"the prompt is longer than the context window of {name!r}{said} at {where}; "
            "shorten the conversation or use a model with a longer context",
            limit=limit,
            requested=requested,
        )

    def _read_listed(self, client: Callable[[], Any], name: str, timeout: float) -> int | None:
        import json

        from ..context_window import window_from_model_list

        try:
            bounded = client().with_options(timeout=timeout, max_retries=0)
            with bounded.models.with_streaming_response.list() as response:
                if response.status_code != 200:
                    return None
                data = bytearray()
                for part in response.iter_bytes():
                    data += part
                    if len(data) > self.list_max_bytes:
                        return None
            return window_from_model_list(json.loads(bytes(data)), name)
        except Exception:  # any failure to read means unknown; the run goes on and may learn it from an error
            return None


def check_window(tokens: int | None) -> int | None:
    """``tokens`` when it is a positive whole number or None; ConfigError otherwise."""
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0):
        raise ConfigError(f"context_window must be a positive number of tokens, got {tokens!r}")
    return tokens
