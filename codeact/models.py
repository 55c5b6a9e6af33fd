"""Language models behind one small interface.

- :class:`Model`: the protocol the agents use (``complete``, ``stream``, ``acomplete``).
- :class:`OpenAIModel`: any OpenAI-compatible Chat Completions endpoint (OpenAI,
  vLLM, Ollama, llama.cpp server, LiteLLM, DashScope, ...), with streaming,
  retries with backoff and token usage.
- :class:`ScriptedModel`: replays given replies (tests, demos, replays).

Nothing here sends the ``stop`` parameter: some reasoning models reject it, and
the agents never need it for correctness.

Example::

    from codeact.messages import Message
    from codeact.models import OpenAIModel

    model = OpenAIModel("gpt-4o-mini")          # or CODEACT_MODEL=... in the environment
    reply = model.complete([Message("user", "Say hi")])
    print(reply.text, reply.usage.total_tokens)

``openai`` is imported on first use, so importing this module stays cheap.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Union, runtime_checkable

from .errors import (
    ConfigError,
    ContextOverflowError,
    ModelAuthError,
    ModelError,
    ModelNotFoundError,
    ModelOutputError,
    ModelUnavailableError,
)
from .messages import Message, ModelResponse, ToolCallRequest, Usage

if TYPE_CHECKING:
    import openai
    from .budget import Prices

__all__ = ["Model", "OpenAIModel", "ScriptedModel", "ScriptedReply", "estimate_tokens"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Local servers (vLLM, Ollama, llama.cpp) ignore the key, but the openai client insists on one.
PLACEHOLDER_API_KEY = "not-needed"

#: The environment variable the OpenAI client reads its key from (the default endpoint needs one).
API_KEY_ENV = "OPENAI_API_KEY"


@runtime_checkable
class Model(Protocol):
    """What an agent needs from a language model.

    ``tools`` are OpenAI function schemas (``{"type": "function", "function": {...}}``)
    for native function calling; the CodeAct loop passes none.

    Example::

        def ask(model: Model, question: str) -> str:
            return model.complete([Message("user", question)]).text
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

    async def acomplete(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None) -> ModelResponse:
        """Like :meth:`complete`, for asyncio code."""
        ...


def estimate_tokens(chars: int) -> int:
    """A rough token count for ``chars`` characters (4 characters per token, rounded up)."""
    return (max(chars, 0) + 3) // 4


def _prompt_tokens(messages: Sequence[Message]) -> int:
    """An estimate of the prompt tokens of ``messages``: the text (4 characters a token) and the images."""
    from .images import image_tokens

    return estimate_tokens(_message_chars(messages)) + image_tokens(messages)


def _reported_prompt_tokens(usage: Any) -> int | None:
    """The prompt tokens a response's usage object reports (None when absent or not a count)."""
    value = getattr(usage, "prompt_tokens", None) if usage is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _message_chars(messages: Iterable[Message]) -> int:
    total = 0
    for m in messages:
        total += len(m.content)
        for call in m.tool_calls:
            total += len(call.name) + len(call.arguments)
    return total


def _reply_chars(message: Message) -> int:
    return _message_chars((message,))


# --------------------------------------------------------------------------- OpenAI-compatible


class _MalformedResponse(Exception):
    """The endpoint answered 2xx with something that is not a usable completion (retryable)."""


#: Retries after a connection that was refused or a host name that does not resolve: nothing listens
#: there, so waiting rarely helps; one retry covers a server that is just restarting.
UNREACHABLE_RETRIES = 1


@dataclass(frozen=True)
class _Failure:
    """A retryable failure: a one-line summary, the server's Retry-After, and how many retries it deserves.

    ``reason`` is the :attr:`ModelError.reason` of the error raised when the
    retries run out; ``retries`` caps ``max_retries`` for this kind of failure.
    """

    summary: str
    retry_after: float | None = None
    hint: str = "check that the server is running and that base_url / OPENAI_BASE_URL is right"
    reason: str = "unreachable"
    retries: int | None = None


def _parse_retry_after(headers: Any, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP-date)."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from datetime import timezone
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # HTTP-dates are GMT
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _error_detail(exc: Any) -> str:
    """The server's own error message, on one line."""
    body = getattr(exc, "body", None)
    detail: Any = None
    if isinstance(body, dict):
        detail = body.get("message") or body.get("detail") or body.get("error")
        if isinstance(detail, dict):  # {"error": {"message": ...}} arriving unwrapped
            detail = detail.get("message") or detail
    elif isinstance(body, str) and body.strip():  # {"error": "..."} (Ollama): the client keeps only the string
        detail = body
    if not detail:
        detail = getattr(exc, "message", None) or str(exc)
    text = " ".join(str(detail).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    if cause is None:
        return str(exc)
    return f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__


def _nothing_listens(exc: BaseException) -> bool:
    """True when the chain of ``exc`` holds a refused connection or a host name that does not resolve."""
    import errno
    import socket

    seen: set[int] = set()
    node: BaseException | None = exc
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        if isinstance(node, (ConnectionRefusedError, socket.gaierror)):
            return True
        if isinstance(node, OSError) and node.errno == errno.ECONNREFUSED:
            return True
        node = node.__cause__ or node.__context__
    return False


def _optional_module(name: str) -> Any:
    import sys

    # Only modules already imported can have raised the exception; never import here.
    return sys.modules.get(name)


#: Words of an error that says the endpoint takes no image parts (OpenAI "Invalid content type. image_url is
#: only supported by certain models.", vLLM "... is not a multimodal model", llama.cpp "image input is not
#: supported", LiteLLM/Ollama "... does not support vision/images", TGI "unknown variant `image_url`").
_IMAGE_WORDS = ("image", "vision", "multimodal", "multi-modal")
_REFUSAL_WORDS = ("not support", "only supported", "unsupported", "not a multimodal", "invalid content type",
                  "unknown variant", "not enabled", "not allowed", "does not accept", "doesn't support",
                  "cannot", "can't", "no vision", "not multimodal", "must be a string")


def _rejects_images(detail: str) -> bool:
    text = detail.lower()
    return any(w in text for w in _IMAGE_WORDS) and any(w in text for w in _REFUSAL_WORDS)


def _has_image_parts(body: dict[str, Any]) -> bool:
    return any(isinstance(m.get("content"), list) and any(p.get("type") == "image_url" for p in m["content"])
               for m in body.get("messages", ()))


def _is_context_overflow(code: str | None, detail: str, exc: Any = None) -> bool:
    from .context_window import is_context_overflow

    return is_context_overflow(code, _whole_error_text(exc, detail), getattr(exc, "type", None),
                               getattr(exc, "body", None))


def _whole_error_text(exc: Any, detail: str) -> str:
    """The server's error message not cut short (:func:`_error_detail` keeps 300 characters for messages)."""
    body = getattr(exc, "body", None)
    message = body.get("message") if isinstance(body, dict) else body
    if not isinstance(message, str) or not message:
        message = getattr(exc, "message", None)
    return message if isinstance(message, str) and len(message) > len(detail) else detail


_MALFORMED_HINT = "check that base_url points at an OpenAI-compatible API root (often ending in /v1)"
_TIMEOUT_HINT = "check that the server is up and not overloaded, or raise timeout"


class _Attempts:
    """Retry bookkeeping for one call (all attempts share one start time and one budget)."""

    def __init__(self, model: OpenAIModel) -> None:
        self.model = model
        self.count = 0
        self.start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def delay_after(self, exc: BaseException) -> float:
        """Seconds to wait before retrying after ``exc``; raises if the call must stop here."""
        self.count += 1
        failure = self.model._classify(exc)  # raises for errors that retrying cannot fix
        limit = self.model.max_retries if failure.retries is None else min(self.model.max_retries, failure.retries)
        if self.count > limit:
            raise ModelUnavailableError(
                f"no usable answer from {self.model.base_url} (model {self.model.name!r}) after "
                f"{self.count} attempt{'s' if self.count != 1 else ''} in {self.elapsed():.1f}s "
                f"(last error: {failure.summary}); {failure.hint}",
                reason=failure.reason,
            ) from exc
        return self.model._delay(self.count, failure.retry_after)


class _ImageFallback:
    """One call's fallback to text only (see :meth:`OpenAIModel._drop_images`): images are dropped after
    the first failure of a request that had them; the model remembers it when the text-only request
    that followed at once was answered (a failure right after proves nothing about the images)."""

    def __init__(self, model: OpenAIModel) -> None:
        self.model = model
        self.dropped = False
        self.cause: BaseException | None = None  # the failure the next answer would blame on the images

    def drops(self, exc: BaseException, body: dict[str, Any]) -> bool:
        if self.dropped or not self.model._drop_images(exc, body):
            return False
        self.dropped, self.cause = True, exc
        return True

    def failed(self) -> None:
        self.cause = None

    def answered(self) -> None:
        if self.cause is not None:
            self.model._remember_no_images(self.cause)
            self.cause = None


class _StreamState:
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
                index = tc.index if getattr(tc, "index", None) is not None else len(self.calls)
                slot = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
                if getattr(tc, "id", None) and not slot["id"]:
                    slot["id"] = tc.id  # some servers repeat the id on every fragment
                fn = getattr(tc, "function", None)
                if fn is not None:
                    # Same rule as the openai SDK's own accumulator: name and arguments are concatenated.
                    slot["name"] += getattr(fn, "name", None) or ""
                    slot["arguments"] += getattr(fn, "arguments", None) or ""
        text = "".join(out)
        self.text.append(text)
        return text

    def message(self) -> Message:
        calls = tuple(
            ToolCallRequest(slot["id"] or f"call_{index}", slot["name"], slot["arguments"])
            for index, slot in sorted(self.calls.items())
        )
        return Message("assistant", "".join(self.text), tool_calls=calls)


class OpenAIModel:
    """A model behind any OpenAI-compatible Chat Completions endpoint.

    Args:
        model: model name; default ``$CODEACT_MODEL``.
        base_url: API root (e.g. ``http://localhost:8000/v1``); default ``$OPENAI_BASE_URL``,
            else OpenAI.
        api_key: default ``$OPENAI_API_KEY``, else a placeholder (fine for local servers).
        temperature, max_tokens, seed: sent only when given (``seed`` asks the
            endpoint for reproducible sampling where it supports that).
        timeout: seconds per HTTP attempt (for streams: between chunks).
        max_retries: retries after the first attempt, on 408/409/429/5xx, timeouts,
            connection errors and malformed responses. Auth, not-found, context
            overflow and other 4xx errors are never retried; a refused connection
            or a host name that does not resolve is retried once at most.
        backoff, max_backoff: exponential backoff ``backoff * 2**n`` seconds with
            jitter, capped at ``max_backoff``; a server's ``Retry-After`` /
            ``retry-after-ms`` wins (also capped).
        extra_body: extra JSON fields for the request body (e.g. ``{"top_k": 20}``).
        vision: send the images of messages (plots, tool images) as image parts; default on, unless
            ``CODEACT_IMAGES=0``. An endpoint that answers 400 "this model takes no images" gets that
            request again text only (each image named in a line), no images for the rest of this
            instance's life, and one warning.
        context_window: the model's context window in tokens, when you know it (it wins over
            anything the endpoint says). Otherwise :meth:`discover_context_window` reads it from
            the endpoint's model list on first need, and a context-length error teaches it.
        tokenizer: how :func:`codeact.context_window.count_tokens` counts this model's prompts:
            ``"cl100k_base"``, ``"estimate"``, or a function that returns a text's tokens (e.g.
            ``lambda text: len(hf_tokenizer.encode(text, add_special_tokens=False))``); default:
            by the model's name (``cl100k_base`` for GPT-3.5/4, the estimate otherwise).
        prices: a :class:`codeact.budget.Prices` (dollars per million input and output
            tokens): each response's usage carries its ``cost``, and ``RunLimits(max_cost=)`` works.

    Raises:
        ConfigError: no model name, a bad option, or no API key for OpenAI's own
            endpoint (the default base URL), which needs one: the message names
            ``OPENAI_API_KEY``, at once, before anything is sent.

    Example::

        model = OpenAIModel("qwen2.5-coder", base_url="http://localhost:11434/v1")
        for part in model.stream([Message("user", "Count to 3")]):
            if isinstance(part, str):
                print(part, end="")
            else:
                print("\\n", part.usage)
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        timeout: float = 120,
        max_retries: int = 4,
        backoff: float = 1.0,
        max_backoff: float = 30,
        extra_body: dict[str, Any] | None = None,
        vision: bool | None = None,
        context_window: int | None = None,
        tokenizer: str | Callable[[str], int] | None = None,
        prices: Prices | None = None,
    ) -> None:
        name = model or os.environ.get("CODEACT_MODEL", "").strip()
        if not name:
            raise ConfigError("no model name: pass model=... (e.g. OpenAIModel('gpt-4o-mini')) or set CODEACT_MODEL")
        if timeout <= 0:
            raise ConfigError(f"timeout must be > 0 seconds, got {timeout}")
        if max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {max_retries}")
        if backoff < 0 or max_backoff < 0:
            raise ConfigError("backoff and max_backoff must be >= 0")
        if extra_body and "stop" in extra_body:
            raise ConfigError(
                "extra_body must not contain 'stop': some reasoning models reject it and codeact does not need it"
            )
        self.name: str = name
        self.base_url: str = (base_url or os.environ.get("OPENAI_BASE_URL", "").strip() or DEFAULT_BASE_URL).rstrip("/")
        env_key = os.environ.get(API_KEY_ENV, "").strip()
        #: Where the key came from, for error messages: "api_key", the variable's name, or "" (none given).
        self._key_source = "api_key" if api_key else (API_KEY_ENV if env_key else "")
        if not self._key_source and self.base_url == DEFAULT_BASE_URL:
            raise ConfigError(
                f"{API_KEY_ENV} is not set, and {DEFAULT_BASE_URL} (the default endpoint, used because neither "
                f"base_url nor OPENAI_BASE_URL is set) needs an API key: set {API_KEY_ENV} (or pass --api-key / "
                "api_key=...), or set OPENAI_BASE_URL (--base-url) to a server that needs none, e.g. "
                "http://localhost:11434/v1"
            )
        self._api_key = api_key or env_key or PLACEHOLDER_API_KEY
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed = seed
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.extra_body = dict(extra_body) if extra_body else None
        #: Dollars per million tokens (codeact.budget.Prices): each response's usage then carries its cost.
        self.prices = prices
        self._random = random.Random()  # per instance: jitter without touching global state
        self._lock = threading.Lock()
        self._client: openai.OpenAI | None = None
        self._aclient: openai.AsyncOpenAI | None = None
        self._aclient_loop: object | None = None
        # Some older servers reject stream_options; we drop it for this instance once they do.
        self._stream_usage = True
        #: Send images (Message.images) as image parts. Turned off for good when the endpoint rejects them.
        #: (``CODEACT_IMAGES=0`` is read by :mod:`codeact.config`, which the agents and the CLI consult.)
        self.vision = True if vision is None else bool(vision)
        self._init_window(context_window)
        if tokenizer is not None and not callable(tokenizer) and tokenizer not in ("cl100k_base", "estimate"):
            raise ConfigError(f"tokenizer must be 'cl100k_base', 'estimate' or a function text -> tokens, got "
                              f"{tokenizer!r}")
        self.tokenizer = tokenizer

    def __repr__(self) -> str:  # never show the API key
        return f"OpenAIModel({self.name!r}, base_url={self.base_url!r})"

    # -- clients (created once, on first use, so that importing/constructing stays cheap)

    def _client_options(self) -> dict[str, Any]:
        # max_retries=0: we retry ourselves, with our own policy and error messages.
        return {"api_key": self._api_key, "base_url": self.base_url, "timeout": self.timeout, "max_retries": 0}

    def _sync_client(self) -> openai.OpenAI:
        with self._lock:
            if self._client is None:
                import openai

                self._client = openai.OpenAI(**self._client_options())
            return self._client

    def _async_client(self) -> openai.AsyncOpenAI:
        import asyncio

        loop = asyncio.get_running_loop()
        with self._lock:
            # An async HTTP pool belongs to the loop that opened its connections; a new
            # loop (e.g. a second asyncio.run) gets a new client instead of dead sockets.
            if self._aclient is None or self._aclient_loop is not loop:
                import openai

                self._aclient = openai.AsyncOpenAI(**self._client_options())
                self._aclient_loop = loop
            return self._aclient

    def close(self) -> None:
        """Close the HTTP connections of the sync client (the async one closes with its loop)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def __enter__(self) -> OpenAIModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the context window: given, else learned from a context-length error, else listed by the endpoint

    #: The model list is read in at most this many seconds and bytes (OpenRouter's list of every model is ~1 MB).
    _MODEL_LIST_TIMEOUT = 10.0
    _MODEL_LIST_MAX_BYTES = 16 * 1024 * 1024

    def _init_window(self, given: int | None) -> None:
        self._set_given_window(given)
        self._learned_window: int | None = None  # the number a context-length error named
        self._listed_window: int | None = None  # what GET /models said
        self._window_listed = False  # GET /models was tried (once per instance)
        self._window_lock = threading.Lock()

    @property
    def context_window(self) -> int | None:
        """What is known of the context window in tokens right now (no network), or None.

        The window given to the constructor (or set here); else the one the endpoint named in a
        context-length error; else the one its model list states, once :meth:`discover_context_window`
        has read it.
        """
        return self._given_window or self._learned_window or self._listed_window

    @context_window.setter
    def context_window(self, tokens: int | None) -> None:
        self._set_given_window(tokens)

    def _set_given_window(self, tokens: int | None) -> None:
        if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0):
            raise ConfigError(f"context_window must be a positive number of tokens, got {tokens!r}")
        self._given_window = tokens

    def discover_context_window(self) -> int | None:
        """The context window, reading the endpoint's model list the first time nothing else says it.

        ``GET /models`` is read once per instance, bounded in time and size; vLLM's
        ``max_model_len``, and ``context_length``, ``context_window``, ``max_context_length``,
        llama.cpp's ``meta.n_ctx_train`` and the like are understood. An endpoint that lists no
        window, answers with something malformed or does not answer means unknown (None): this
        never raises for the endpoint's sake.

        Example::

            OpenAIModel("qwen2.5-coder", base_url="http://localhost:8000/v1").discover_context_window()  # 32768
        """
        if self.context_window is None:
            with self._window_lock:
                if not self._window_listed:
                    self._listed_window = self._read_listed_window()
                    self._window_listed = True
        return self.context_window

    def _read_listed_window(self) -> int | None:
        import json

        from .context_window import window_from_model_list

        try:
            timeout = min(self.timeout, self._MODEL_LIST_TIMEOUT)
            client = self._sync_client().with_options(timeout=timeout, max_retries=0)
            with client.models.with_streaming_response.list() as response:
                if response.status_code != 200:
                    return None
                data = bytearray()
                for part in response.iter_bytes():
                    data += part
                    if len(data) > self._MODEL_LIST_MAX_BYTES:
                        return None
            return window_from_model_list(json.loads(bytes(data)), self.name)
        except Exception:  # any failure to read means unknown; the run goes on and may learn it from an error
            return None

    def _overflow(self, where: str, detail: str, exc: BaseException) -> ContextOverflowError:
        """The error for a context-length refusal, with the numbers it named; the window is remembered."""
        from .context_window import overflow_numbers

        limit, requested = overflow_numbers(_whole_error_text(exc, detail), getattr(exc, "body", None))
        if limit is not None:
            self._learned_window = limit
        numbers = [f"{limit} tokens"] if limit else []
        numbers += [f"the request needed {requested}"] if requested else []
        said = f" ({'; '.join(numbers)})" if numbers else ""
        return ContextOverflowError(
            f"the prompt is longer than the context window of {self.name!r}{said} at {where}; "
            "shorten the conversation or use a model with a longer context",
            limit=limit,
            requested=requested,
        )

    # -- request / response

    def _sent(self, messages: Sequence[Message], *, images: bool = True) -> Sequence[Message]:
        """The messages as they go out: without image parts (each named in a line) when vision is off."""
        if (images and self.vision) or not any(m.images for m in messages):
            return messages
        from .images import without_images

        return without_images(messages)

    def _drop_images(self, exc: BaseException, body: dict[str, Any]) -> bool:
        """True when the request ``body`` carried image parts and failed with ``exc`` in a way that
        dropping them may fix: the call is then made again text only, once (never for a request
        without image parts: no loop).

        Any HTTP 4xx or 5xx qualifies but for the key (401, 403), the model's name (404), a rate limit
        (429) and a prompt over the context window (compaction's business). Servers word "no images"
        in many ways, and some just fail (llama.cpp's Python server: HTTP 500 "can only concatenate
        str (not "list") to str"). An error that says so in words (:func:`_rejects_images`) turns
        vision off at once; any other is remembered only once the text-only call has succeeded
        (:meth:`_remember_no_images`).
        """
        import openai

        if not (isinstance(exc, openai.APIStatusError) and 400 <= exc.status_code < 600
                and exc.status_code not in (401, 403, 404, 429) and _has_image_parts(body)):
            return False
        detail = _error_detail(exc)
        if _is_context_overflow(exc.code, detail, exc):
            return False
        if _rejects_images(detail):
            self._remember_no_images(exc, said=True)
        return True

    def _remember_no_images(self, exc: BaseException, *, said: bool = False) -> None:
        """Vision off for this instance (every later request is text only), with one warning."""
        with self._lock:
            first, self.vision = self.vision, False
        if not first:
            return
        import warnings

        status = getattr(exc, "status_code", "?")
        why = (f"{_error_detail(exc)}" if said else
               f"a request with image parts failed with HTTP {status}: {_error_detail(exc)}; the same request "
               "without them was answered")
        warnings.warn(f"{self.base_url} (model {self.name!r}) does not take images ({why}); sending text only "
                      "from now on (vision=False, --no-images or CODEACT_IMAGES=0 skip images from the start)",
                      stacklevel=4)

    def _request(self, messages: Sequence[Message], tools: Sequence[dict] | None, *, stream: bool,
                 images: bool = True) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.name,
                                "messages": [m.to_openai() for m in self._sent(messages, images=images)]}
        if tools:
            body["tools"] = list(tools)
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.seed is not None:
            body["seed"] = self.seed
        if stream:
            body["stream"] = True
            if self._stream_usage:
                body["stream_options"] = {"include_usage": True}
        if self.extra_body:
            body["extra_body"] = dict(self.extra_body)
        return body

    def _usage(self, raw: Any, messages: Sequence[Message], reply: Message) -> Usage:
        from .budget import priced

        return priced(self._tokens(raw, messages, reply), self.prices)

    def _tokens(self, raw: Any, messages: Sequence[Message], reply: Message) -> Usage:
        prompt = getattr(raw, "prompt_tokens", None) if raw is not None else None
        if prompt is None:
            # The server did not report usage (common for local servers): estimate quietly.
            return Usage(_prompt_tokens(self._sent(messages)), estimate_tokens(_reply_chars(reply)), 1)
        completion = getattr(raw, "completion_tokens", None) or 0
        return Usage(int(prompt), int(completion), 1)

    def _response(self, raw: Any, messages: Sequence[Message], attempts: _Attempts) -> ModelResponse:
        """Turn a ChatCompletion into a ModelResponse; _MalformedResponse if it is not one."""
        choices = getattr(raw, "choices", None)
        if not isinstance(choices, list) or not choices:
            # Some proxies answer 200 with an error object instead of an HTTP error.
            error = getattr(raw, "error", None)
            if error:
                detail = error.get("message", error) if isinstance(error, dict) else error
                raise _MalformedResponse(f"an error object instead of a completion: {detail}")
            raise _MalformedResponse(f"no choices in the response ({type(raw).__name__})")
        choice = choices[0]
        msg = getattr(choice, "message", None)
        if msg is None:
            raise _MalformedResponse("the first choice has no message")
        content = getattr(msg, "content", None)
        if content is not None and not isinstance(content, str):
            raise _MalformedResponse(f"message content is {type(content).__name__}, not text")
        calls: list[ToolCallRequest] = []
        for i, tc in enumerate(getattr(msg, "tool_calls", None) or ()):
            fn = getattr(tc, "function", None)
            if fn is None or not getattr(fn, "name", None):
                raise _MalformedResponse("a tool call has no function name")
            calls.append(ToolCallRequest(getattr(tc, "id", None) or f"call_{i}", fn.name, fn.arguments or ""))
        message = Message("assistant", content or "", tool_calls=tuple(calls))
        reported = getattr(raw, "usage", None)
        return ModelResponse(
            message=message,
            usage=self._usage(reported, messages, message),
            duration=attempts.elapsed(),
            model=getattr(raw, "model", None) or self.name,
            finish_reason=getattr(choice, "finish_reason", None),
            prompt_tokens=_reported_prompt_tokens(reported),
        )

    # -- error policy

    def _classify(self, exc: BaseException) -> _Failure:
        """A retryable failure's summary, or raise the final error for ``exc``."""
        import json

        import openai

        if isinstance(exc, openai.APIStatusError):
            status, code, detail = exc.status_code, exc.code, _error_detail(exc)
            where = f"{self.base_url} (HTTP {status}: {detail})"
            if status in (401, 403):
                if self._key_source:
                    given = "api_key / --api-key" if self._key_source == "api_key" else self._key_source
                    what = f"rejected the API key (from {given})"
                    fix = f"check the key in {given}"
                else:
                    what = f"wants an API key and none was given ({API_KEY_ENV} is not set)"
                    fix = f"set {API_KEY_ENV} (or pass --api-key)"
                raise ModelAuthError(
                    f"{self.base_url} {what} for model {self.name!r} (HTTP {status}: {detail}); {fix}"
                ) from exc
            if status == 404 or code == "model_not_found":
                raise ModelNotFoundError(
                    f"model {self.name!r} not found at {where}; check the model name "
                    f"(GET {self.base_url}/models lists them) and that the base URL is the API root "
                    "(often ending in /v1)"
                ) from exc
            if status in (400, 413, 422, 500) and _is_context_overflow(code, detail, exc):
                raise self._overflow(where, detail, exc) from exc
            if status == 429 and code == "insufficient_quota":
                raise ModelError(f"{where}: the account's quota is used up; check the plan and billing",
                                 reason="rate_limit") from exc
            retry_after = _parse_retry_after(exc.response.headers)
            if status == 429:
                hint = "the endpoint is rate limiting: wait, or raise max_retries / max_backoff"
                return _Failure(f"HTTP 429: {detail}", retry_after, hint, reason="rate_limit")
            if status in (408, 409) or status >= 500:
                return _Failure(f"HTTP {status}: {detail}", retry_after, reason="server_error")
            raise ModelError(f"{where} refused the request for model {self.name!r}", reason="refused") from exc
        if isinstance(exc, openai.APITimeoutError):
            return _Failure(f"timed out after {self.timeout:g}s", None, _TIMEOUT_HINT, reason="timeout")
        if isinstance(exc, openai.APIConnectionError):
            return _Failure(f"connection failed ({_cause(exc)})",
                            retries=UNREACHABLE_RETRIES if _nothing_listens(exc) else None)
        if isinstance(exc, (openai.APIResponseValidationError, json.JSONDecodeError, _MalformedResponse)):
            return _Failure(f"malformed response ({exc})", None, _MALFORMED_HINT, reason="bad_reply")
        if isinstance(exc, openai.APIError):
            # E.g. an error event inside a stream: no status code, only a message.
            detail = _error_detail(exc)
            if _is_context_overflow(exc.code, detail, exc):
                raise self._overflow(f"{self.base_url} ({detail})", detail, exc) from exc
            return _Failure(f"error from the server: {detail}", reason="server_error")
        for module in ("httpx2", "httpx"):  # transport errors raised while reading a stream
            httpx = _optional_module(module)
            if httpx is not None and isinstance(exc, httpx.TransportError):
                if isinstance(exc, httpx.TimeoutException):
                    return _Failure(f"timed out after {self.timeout:g}s", None, _TIMEOUT_HINT, reason="timeout")
                return _Failure(f"connection failed ({type(exc).__name__}: {exc})",
                                retries=UNREACHABLE_RETRIES if _nothing_listens(exc) else None)
        raise exc  # not an endpoint problem (a bug, KeyboardInterrupt, ...): let it through unchanged

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_backoff)
        base = min(self.backoff * 2 ** (attempt - 1), self.max_backoff)
        # "Equal jitter": clients that failed together do not retry together, and
        # nobody waits less than half the nominal backoff.
        return base * (0.5 + 0.5 * self._random.random())

    def _rejects_stream_options(self, exc: BaseException) -> bool:
        import openai

        return (
            self._stream_usage
            and isinstance(exc, openai.APIStatusError)
            and exc.status_code in (400, 422)
            and "stream_options" in _error_detail(exc)
        )

    # -- public API

    def complete(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None) -> ModelResponse:
        """One completion, retried per the policy; ``duration`` covers all attempts.

        Raises:
            ModelAuthError, ModelNotFoundError, ContextOverflowError: at once, no retry.
            ModelUnavailableError: retries exhausted.
            ModelError: any other refusal (e.g. a 400 for a bad parameter).

        Example::

            r = model.complete([Message("system", "Be brief."), Message("user", "2+2?")])
            r.text, r.usage.input_tokens, r.usage.output_tokens
        """
        messages = list(messages)
        client = self._sync_client()
        body = self._request(messages, tools, stream=False)
        attempts = _Attempts(self)
        fallback = _ImageFallback(self)
        while True:
            try:
                raw = client.chat.completions.create(**body)
                response = self._response(raw, messages, attempts)
                fallback.answered()
                return response
            except Exception as exc:
                if fallback.drops(exc, body):
                    body = self._request(messages, tools, stream=False, images=False)  # again, text only
                    continue
                fallback.failed()
                time.sleep(attempts.delay_after(exc))

    async def acomplete(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None) -> ModelResponse:
        """Async :meth:`complete` (``AsyncOpenAI``; same retry policy, waits with ``asyncio.sleep``).

        Example::

            r = await model.acomplete([Message("user", "hi")])
        """
        import asyncio

        messages = list(messages)
        client = self._async_client()
        body = self._request(messages, tools, stream=False)
        attempts = _Attempts(self)
        fallback = _ImageFallback(self)
        while True:
            try:
                raw = await client.chat.completions.create(**body)
                response = self._response(raw, messages, attempts)
                fallback.answered()
                return response
            except Exception as exc:
                if fallback.drops(exc, body):
                    body = self._request(messages, tools, stream=False, images=False)  # again, text only
                    continue
                fallback.failed()
                await asyncio.sleep(attempts.delay_after(exc))

    def stream(
        self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None
    ) -> Iterator[str | ModelResponse]:
        """Yield text deltas, then one :class:`ModelResponse` (full message, usage, duration).

        Failures are retried only until the first delta has been yielded; a stream
        that breaks later raises :class:`ModelUnavailableError` (the caller already
        holds part of the answer). Tool-call fragments are assembled into
        ``response.message.tool_calls``; they are not yielded as text. Usage comes
        from the server's usage chunk, or is estimated when the server sends none.

        Example::

            for part in model.stream(messages):
                if isinstance(part, str):
                    print(part, end="", flush=True)
                else:
                    response = part
        """
        messages = list(messages)
        client = self._sync_client()
        attempts = _Attempts(self)
        fallback = _ImageFallback(self)
        while True:
            state = _StreamState()
            body = self._request(messages, tools, stream=True, images=not fallback.dropped)
            try:
                chunks = client.chat.completions.create(**body)
                try:
                    for chunk in chunks:
                        delta = state.add(chunk)
                        if delta:
                            state.yielded += len(delta)
                            yield delta
                finally:
                    chunks.close()
                if state.chunks == 0:
                    raise _MalformedResponse("the stream ended without any chunk")
                break
            except Exception as exc:
                if state.yielded:
                    failure = self._classify(exc)  # non-retryable errors keep their own type
                    raise ModelUnavailableError(
                        f"the stream from {self.base_url} (model {self.name!r}) broke after "
                        f"{state.yielded} characters: {failure.summary}",
                        reason=failure.reason,
                    ) from exc
                if self._rejects_stream_options(exc):
                    self._stream_usage = False
                    continue  # the server's fault, not a failed attempt: ask again without it
                if fallback.drops(exc, body):
                    continue  # again, text only
                fallback.failed()
                time.sleep(attempts.delay_after(exc))
        fallback.answered()
        message = state.message()
        yield ModelResponse(
            message=message,
            usage=self._usage(state.usage, messages, message),
            duration=attempts.elapsed(),
            model=state.model or self.name,
            finish_reason=state.finish_reason,
            prompt_tokens=_reported_prompt_tokens(state.usage),
        )

    def list_models(self) -> list[str]:
        """Model ids the endpoint serves (``GET /models``), with the same retry policy.

        Example::

            OpenAIModel("x", base_url="http://localhost:8000/v1").list_models()
        """
        client = self._sync_client()
        attempts = _Attempts(self)
        while True:
            try:
                return [m.id for m in client.models.list()]
            except Exception as exc:
                time.sleep(attempts.delay_after(exc))


# --------------------------------------------------------------------------- scripted


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
        usage = Usage(_prompt_tokens(messages), estimate_tokens(_reply_chars(reply)), 1)
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
