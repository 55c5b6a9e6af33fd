"""What an endpoint's failures mean, and the retry policy: which errors are final, which are retried, how long to wait.

:class:`EndpointErrors` turns an exception from the ``openai`` client (or from reading a stream) into
either the final :class:`~codeact.errors.ModelError` to raise (a rejected key, an unknown model, a
prompt over the context window, a refusal) or a retryable :class:`Failure`; :class:`Attempts` counts
one call's retries against ``max_retries`` and says how long to wait before the next.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import ContextOverflowError, ModelAuthError, ModelError, ModelNotFoundError, ModelUnavailableError
from ..settings import API_KEY_ENV

#: Retries after a connection that was refused or a host name that does not resolve: nothing listens
#: there, so waiting rarely helps; one retry covers a server that is just restarting.
UNREACHABLE_RETRIES = 1

MALFORMED_HINT = "check that base_url points at an OpenAI-compatible API root (often ending in /v1)"
TIMEOUT_HINT = "check that the server is up and not overloaded, or raise timeout"


class MalformedResponse(Exception):
    """The endpoint answered 2xx with something that is not a usable completion (retryable)."""


@dataclass(frozen=True)
class Failure:
    """A retryable failure: a one-line summary, the server's Retry-After, and how many retries it deserves.

    ``reason`` is the :attr:`ModelError.reason` of the error raised when the
    retries run out; ``retries`` caps ``max_retries`` for this kind of failure.
    """

    summary: str
    retry_after: float | None = None
    hint: str = "check that the server is running and that base_url / OPENAI_BASE_URL is right"
    reason: str = "unreachable"
    retries: int | None = None


class Endpoint(Protocol):
    """The settings of a model the error policy reads at each failure (a user may change them between calls)."""

    name: str
    base_url: str
    timeout: float
    max_retries: int
    backoff: float
    max_backoff: float


#: Builds the error for a context-length refusal: ``(where, detail, exc) -> ContextOverflowError``.
MakeOverflowError = Callable[[str, str, BaseException], ContextOverflowError]


class EndpointErrors:
    """The error policy of one model: final errors, retryable failures and the backoff between retries.

    Args:
        endpoint: the model (its name, base URL, timeout and retry settings are read at each failure).
        key_source: where the API key came from, for the messages: ``"api_key"``, the variable's name,
            or ``""`` (none given).
        overflow: builds the error for a prompt over the context window (and learns the window from it).
    """

    def __init__(self, endpoint: Endpoint, key_source: str, overflow: MakeOverflowError) -> None:
        self.endpoint = endpoint
        self.key_source = key_source
        self.overflow = overflow
        self.random = random.Random()  # per model: jitter without touching global state

    def classify(self, exc: BaseException) -> Failure:
        """A retryable failure's summary, or raise the final error for ``exc``."""
        import json

        import openai

        model = self.endpoint
        if isinstance(exc, openai.APIStatusError):
            status, code, detail = exc.status_code, exc.code, error_detail(exc)
            where = f"{model.base_url} (HTTP {status}: {detail})"
            if status in (401, 403):
                raise self._auth_error(status, detail) from exc
            if status == 404 or code == "model_not_found":
                raise ModelNotFoundError(
                    f"model {model.name!r} not found at {where}; check the model name "
                    f"(GET {model.base_url}/models lists them) and that the base URL is the API root "
                    "(often ending in /v1)"
                ) from exc
            if status in (400, 413, 422, 500) and is_context_overflow(code, detail, exc):
                raise self.overflow(where, detail, exc) from exc
            if status == 429 and code == "insufficient_quota":
                raise ModelError(f"{where}: the account's quota is used up; check the plan and billing",
                                 reason="rate_limit") from exc
            retry_after = parse_retry_after(exc.response.headers)
            if status == 429:
                hint = "the endpoint is rate limiting: wait, or raise max_retries / max_backoff"
                return Failure(f"HTTP 429: {detail}", retry_after, hint, reason="rate_limit")
            if status in (408, 409) or status >= 500:
                return Failure(f"HTTP {status}: {detail}", retry_after, reason="server_error")
            raise ModelError(f"{where} refused the request for model {model.name!r}", reason="refused") from exc
        if isinstance(exc, openai.APITimeoutError):
            return Failure(f"timed out after {model.timeout:g}s", None, TIMEOUT_HINT, reason="timeout")
        if isinstance(exc, openai.APIConnectionError):
            return Failure(f"connection failed ({_cause(exc)})",
                           retries=UNREACHABLE_RETRIES if nothing_listens(exc) else None)
        if isinstance(exc, (openai.APIResponseValidationError, json.JSONDecodeError, MalformedResponse)):
            return Failure(f"malformed response ({exc})", None, MALFORMED_HINT, reason="bad_reply")
        if isinstance(exc, openai.APIError):
            # E.g. an error event inside a stream: no status code, only a message.
            detail = error_detail(exc)
            if is_context_overflow(exc.code, detail, exc):
                raise self.overflow(f"{model.base_url} ({detail})", detail, exc) from exc
            return Failure(f"error from the server: {detail}", reason="server_error")
        for module in ("httpx2", "httpx"):  # transport errors raised while reading a stream
            httpx = _loaded_module(module)
            if httpx is not None and isinstance(exc, httpx.TransportError):
                if isinstance(exc, httpx.TimeoutException):
                    return Failure(f"timed out after {model.timeout:g}s", None, TIMEOUT_HINT, reason="timeout")
                return Failure(f"connection failed ({type(exc).__name__}: {exc})",
                               retries=UNREACHABLE_RETRIES if nothing_listens(exc) else None)
        raise exc  # not an endpoint problem (a bug, KeyboardInterrupt, ...): let it through unchanged

    def _auth_error(self, status: int, detail: str) -> ModelAuthError:
        model = self.endpoint
        if self.key_source:
            given = "api_key / --api-key" if self.key_source == "api_key" else self.key_source
            what = f"rejected the API key (from {given})"
            fix = f"check the key in {given}"
        else:
            what = f"wants an API key and none was given ({API_KEY_ENV} is not set)"
            fix = f"set {API_KEY_ENV} (or pass --api-key)"
        return ModelAuthError(f"{model.base_url} {what} for model {model.name!r} (HTTP {status}: {detail}); {fix}")

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``attempt`` (from 1): the server's Retry-After, else backoff."""
        model = self.endpoint
        if retry_after is not None:
            return min(retry_after, model.max_backoff)
        base = min(model.backoff * 2 ** (attempt - 1), model.max_backoff)
        # "Equal jitter": clients that failed together do not retry together, and
        # nobody waits less than half the nominal backoff.
        return base * (0.5 + 0.5 * self.random.random())


class Attempts:
    """Retry bookkeeping for one call (all attempts share one start time and one budget)."""

    def __init__(self, errors: EndpointErrors) -> None:
        self.errors = errors
        self.count = 0
        self.start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def delay_after(self, exc: BaseException) -> float:
        """Seconds to wait before retrying after ``exc``; raises if the call must stop here."""
        self.count += 1
        failure = self.errors.classify(exc)  # raises for errors that retrying cannot fix
        model = self.errors.endpoint
        limit = model.max_retries if failure.retries is None else min(model.max_retries, failure.retries)
        if self.count > limit:
            raise ModelUnavailableError(
                f"no usable answer from {model.base_url} (model {model.name!r}) after "
                f"{self.count} attempt{'s' if self.count != 1 else ''} in {self.elapsed():.1f}s "
                f"(last error: {failure.summary}); {failure.hint}",
                reason=failure.reason,
            ) from exc
        return self.errors.delay(self.count, failure.retry_after)


def parse_retry_after(headers: Any, now: float | None = None) -> float | None:
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


def error_detail(exc: Any) -> str:
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


def whole_error_text(exc: Any, detail: str) -> str:
    """The server's error message not cut short (:func:`error_detail` keeps 300 characters for messages)."""
    body = getattr(exc, "body", None)
    message = body.get("message") if isinstance(body, dict) else body
    if not isinstance(message, str) or not message:
        message = getattr(exc, "message", None)
    return message if isinstance(message, str) and len(message) > len(detail) else detail


def is_context_overflow(code: str | None, detail: str, exc: Any = None) -> bool:
    """Whether an error says the prompt is longer than the context window."""
    from ..context_window import is_context_overflow as says_overflow

    return says_overflow(code, whole_error_text(exc, detail), getattr(exc, "type", None), getattr(exc, "body", None))


def rejects_stream_options(exc: BaseException) -> bool:
    """Whether ``exc`` is a server refusing the ``stream_options`` field (some older servers do)."""
    import openai

    return (isinstance(exc, openai.APIStatusError) and exc.status_code in (400, 422)
            and "stream_options" in error_detail(exc))


def nothing_listens(exc: BaseException) -> bool:
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


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    if cause is None:
        return str(exc)
    return f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__


def _loaded_module(name: str) -> Any:
    import sys

    # Only modules already imported can have raised the exception; never import here.
    return sys.modules.get(name)
