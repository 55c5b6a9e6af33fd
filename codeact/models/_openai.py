"""The OpenAI-compatible model: any Chat Completions endpoint (OpenAI, vLLM, Ollama, llama.cpp server, LiteLLM, ...).

:class:`OpenAIModel` holds the settings and the HTTP clients and runs each call's loop of attempts;
the parts it hands work to are its siblings: :mod:`._wire` (request bodies, completions, stream
chunks), :mod:`._failures` (what an error means, retries and backoff), :mod:`._vision` (the fallback
to text only for endpoints that take no images) and :mod:`._window` (the context window).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, ContextOverflowError, ModelUnavailableError
from ..messages import Message, ModelResponse, Usage
from ..settings import API_KEY_ENV, BASE_URL_ENV, MODEL_ENV, env
from ._failures import Attempts, EndpointErrors, MalformedResponse, rejects_stream_options
from ._usage import prompt_tokens, reply_tokens, reported_prompt_tokens
from ._vision import ImageFallback, sent_messages
from ._window import ContextWindow, check_window
from ._wire import Sampling, StreamState, parse_completion, request_body

if TYPE_CHECKING:
    import openai

    from ..budget import Prices

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Local servers (vLLM, Ollama, llama.cpp) ignore the key, but the openai client insists on one.
PLACEHOLDER_API_KEY = "not-needed"


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
            ``"cl100k_base"``, ``"o200k_base"``, ``"estimate"``, or a function that returns a text's
            tokens (e.g. ``lambda text: len(hf_tokenizer.encode(text, add_special_tokens=False))``);
            default: by the model's name (``cl100k_base`` for GPT-3.5/4, ``o200k_base`` for GPT-4o,
            GPT-4.1, GPT-5 and the o-series, the estimate otherwise).
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
        name = model or env(MODEL_ENV)
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
        self.base_url: str = (base_url or env(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")
        env_key = env(API_KEY_ENV)
        # Where the key came from, for error messages: "api_key", the variable's name, or "" (none given).
        key_source = "api_key" if api_key else (API_KEY_ENV if env_key else "")
        if not key_source and self.base_url == DEFAULT_BASE_URL:
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
        #: Send images (Message.images) as image parts. Turned off for good when the endpoint rejects them.
        #: (``CODEACT_IMAGES=0`` is read by :mod:`codeact.settings`, which the agents and the CLI consult.)
        self.vision = True if vision is None else bool(vision)
        self._window = ContextWindow(context_window)
        if tokenizer is not None and not callable(tokenizer) and tokenizer not in ("cl100k_base", "o200k_base",
                                                                                   "estimate"):
            raise ConfigError(f"tokenizer must be 'cl100k_base', 'o200k_base', 'estimate' or a function text -> "
                              f"tokens, got {tokenizer!r}")
        #: How :func:`codeact.context_window.count_tokens` counts this model's prompts.
        self.tokenizer = tokenizer
        self._errors = EndpointErrors(self, key_source, self._overflow)
        self._lock = threading.Lock()
        self._client: openai.OpenAI | None = None
        self._aclient: openai.AsyncOpenAI | None = None
        self._aclient_loop: object | None = None
        # Some older servers reject stream_options; we drop it for this instance once they do.
        self._stream_usage = True

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

    @property
    def context_window(self) -> int | None:
        """What is known of the context window in tokens right now (no network), or None.

        The window given to the constructor (or set here); else the one the endpoint named in a
        context-length error; else the one its model list states, once :meth:`discover_context_window`
        has read it.
        """
        return self._window.known

    @context_window.setter
    def context_window(self, tokens: int | None) -> None:
        self._window.given = check_window(tokens)

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
        return self._window.discover(self._sync_client, self.name, self.timeout)

    def _overflow(self, where: str, detail: str, exc: BaseException) -> ContextOverflowError:
        return self._window.overflow_error(self.name, where, detail, exc)

    # -- images, requests and usage

    def _remember_no_images(self, exc: BaseException, said: bool) -> None:
        """Vision off for this instance (every later request is text only), with one warning."""
        with self._lock:
            first, self.vision = self.vision, False
        if not first:
            return
        import warnings

        from ._failures import error_detail

        status = getattr(exc, "status_code", "?")
        why = (f"{error_detail(exc)}" if said else
               f"a request with image parts failed with HTTP {status}: {error_detail(exc)}; the same request "
               "without them was answered")
        warnings.warn(f"{self.base_url} (model {self.name!r}) does not take images ({why}); sending text only "
                      "from now on (vision=False, --no-images or CODEACT_IMAGES=0 skip images from the start)",
                      stacklevel=4)

    def _request(self, messages: Sequence[Message], tools: Sequence[dict] | None, *, stream: bool,
                 images: bool = True) -> dict[str, Any]:
        sampling = Sampling(self.temperature, self.max_tokens, self.seed, self.extra_body)
        return request_body(self.name, sent_messages(messages, images=images and self.vision), tools, sampling,
                            stream=stream, stream_usage=self._stream_usage)

    def _usage(self, raw: Any, messages: Sequence[Message], reply: Message) -> Usage:
        from ..budget import priced

        prompt = getattr(raw, "prompt_tokens", None) if raw is not None else None
        if prompt is None:
            # The server did not report usage (common for local servers): estimate quietly.
            tokens = Usage(prompt_tokens(sent_messages(messages, images=self.vision)), reply_tokens(reply), 1)
        else:
            tokens = Usage(int(prompt), int(getattr(raw, "completion_tokens", None) or 0), 1)
        return priced(tokens, self.prices)

    def _response(self, raw: Any, messages: Sequence[Message], attempts: Attempts) -> ModelResponse:
        """Turn a ChatCompletion into a ModelResponse; MalformedResponse if it is not one."""
        parsed = parse_completion(raw)
        return ModelResponse(
            message=parsed.message,
            usage=self._usage(parsed.usage, messages, parsed.message),
            duration=attempts.elapsed(),
            model=parsed.model or self.name,
            finish_reason=parsed.finish_reason,
            prompt_tokens=reported_prompt_tokens(parsed.usage),
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
        client = self._sync_client()
        completion = _Completion(self, list(messages), tools)
        while True:
            try:
                return completion.answered(client.chat.completions.create(**completion.body))
            except Exception as exc:
                time.sleep(completion.delay_after(exc))

    async def acomplete(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None) -> ModelResponse:
        """Async :meth:`complete` (``AsyncOpenAI``; same retry policy, waits with ``asyncio.sleep``).

        Example::

            r = await model.acomplete([Message("user", "hi")])
        """
        import asyncio

        client = self._async_client()
        completion = _Completion(self, list(messages), tools)
        while True:
            try:
                return completion.answered(await client.chat.completions.create(**completion.body))
            except Exception as exc:
                await asyncio.sleep(completion.delay_after(exc))

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
        attempts = Attempts(self._errors)
        fallback = ImageFallback(self._remember_no_images)
        while True:
            state = StreamState()
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
                    raise MalformedResponse("the stream ended without any chunk")
                break
            except Exception as exc:
                if state.yielded:
                    failure = self._errors.classify(exc)  # non-retryable errors keep their own type
                    raise ModelUnavailableError(
                        f"the stream from {self.base_url} (model {self.name!r}) broke after "
                        f"{state.yielded} characters: {failure.summary}",
                        reason=failure.reason,
                    ) from exc
                if self._stream_usage and rejects_stream_options(exc):
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
            prompt_tokens=reported_prompt_tokens(state.usage),
        )

    def list_models(self) -> list[str]:
        """Model ids the endpoint serves (``GET /models``), with the same retry policy.

        Example::

            OpenAIModel("x", base_url="http://localhost:8000/v1").list_models()
        """
        client = self._sync_client()
        attempts = Attempts(self._errors)
        while True:
            try:
                return [m.id for m in client.models.list()]
            except Exception as exc:
                time.sleep(attempts.delay_after(exc))


class _Completion:
    """One non-streamed completion's request and retry state: the policy :meth:`OpenAIModel.complete` and
    :meth:`OpenAIModel.acomplete` share; only how they wait between attempts differs."""

    def __init__(self, model: OpenAIModel, messages: list[Message], tools: Sequence[dict] | None) -> None:
        self.model = model
        self.messages = messages
        self.tools = tools
        self.body = model._request(messages, tools, stream=False)
        self.attempts = Attempts(model._errors)
        self.fallback = ImageFallback(model._remember_no_images)

    def answered(self, raw: Any) -> ModelResponse:
        """The response parsed (raises for a malformed one, which counts as a failed attempt)."""
        response = self.model._response(raw, self.messages, self.attempts)
        self.fallback.answered()
        return response

    def delay_after(self, exc: BaseException) -> float:
        """Seconds to wait before the next attempt (0: ask again at once, text only, when the server refused
        the images); raises when retrying cannot help or no attempt is left."""
        if self.fallback.drops(exc, self.body):
            self.body = self.model._request(self.messages, self.tools, stream=False, images=False)
            return 0.0
        self.fallback.failed()
        return self.attempts.delay_after(exc)
