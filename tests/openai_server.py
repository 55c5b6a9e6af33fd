"""A real, scriptable OpenAI-compatible HTTP server for tests and benchmarks.

It speaks just enough of the OpenAI API for the real ``openai`` client:
``POST /v1/chat/completions`` (JSON and SSE streaming, with the usage chunk when
the client asks for ``stream_options={"include_usage": True}``) and
``GET /v1/models``. It runs on 127.0.0.1 on a free port in background threads.

Replies come from a queue of planned items, consumed one per chat request.
An item is a :class:`Reply` (text and/or tool calls) or a :class:`Fault`
(HTTP error, malformed body, stall, dropped connection). When the queue is
empty the server answers with ``default_reply`` (a string, or a callable that
sees the request and returns a string, a Reply or a Fault). Every request is
recorded in ``server.requests`` for assertions.

Example::

    with OpenAITestServer() as server:
        server.plan_rate_limit(retry_after=0.2)
        server.plan_text("Hello!", usage=(12, 3))
        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        ...
        assert len(server.chat_requests) == 2

In pytest, ask for the ``openai_server`` fixture (defined in ``tests/conftest.py``)::

    def test_something(openai_server):
        openai_server.plan_text("hi")
        model = OpenAIModel("test-model", base_url=openai_server.base_url)

Faults apply to streaming and non-streaming requests alike (status errors are
sent before any SSE data).

An enforced context window (``OpenAITestServer(context_window=N)``) refuses every chat
request whose prompt (+ ``max_tokens`` where the style counts it) exceeds N tokens with
HTTP 400 and the error body a real server sends (``window_error_style``: ``"openai"``,
``"vllm"``, ``"vllm-legacy"`` or ``"llamacpp"``), before any planned reply is consumed.
The prompt is counted by :func:`prompt_tokens` (``cl100k_base``, documented there). The
window is announced in the model list only with ``announce_window``.
"""

from __future__ import annotations

import itertools
import json
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Union

__all__ = [
    "Fault",
    "OpenAITestServer",
    "RecordedRequest",
    "Reply",
    "ToolCall",
    "free_port",
    "prompt_tokens",
]


# --------------------------------------------------------------------------- plan items


@dataclass(frozen=True)
class ToolCall:
    """A native function call the server puts in a reply.

    ``arguments`` may be a dict (serialised to JSON) or raw JSON text.
    ``id`` defaults to ``call_<n>``.
    """

    name: str
    arguments: str | dict[str, Any] = field(default_factory=dict)
    id: str | None = None

    def arguments_json(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass(frozen=True)
class Reply:
    """A successful completion.

    Attributes:
        text: assistant content ("" with tool calls is sent as ``null``, like OpenAI).
        tool_calls: native function calls to include.
        usage: ``(prompt_tokens, completion_tokens)``; default: characters / 4.
        send_usage: False imitates servers that never report usage (not even
            when streaming with ``include_usage``).
        finish_reason: default "tool_calls" when there are tool calls, else "stop".
        chunks: explicit streaming pieces of ``text`` (default: 4-character pieces).
        delay: seconds to wait before answering (simulated model latency).
        drop_after_chunks: streaming only: close the connection abruptly after
            this many content chunks (a stream that breaks mid-way).
        interleave_tool_calls: streaming only: send the fragments of several
            tool calls interleaved (call 0, call 1, call 0, ...), each call's
            name split across two fragments and its id only on the first, as
            some servers do; default: one call after the other, like OpenAI.
        fragment_size: streaming only: characters of arguments per fragment.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: tuple[int, int] | None = None
    send_usage: bool = True
    finish_reason: str | None = None
    chunks: tuple[str, ...] | None = None
    delay: float = 0.0
    drop_after_chunks: int | None = None
    interleave_tool_calls: bool = False
    fragment_size: int = 7


FaultKind = Literal["error", "malformed", "stall", "drop"]


@dataclass(frozen=True)
class Fault:
    """A failure the server produces instead of a completion.

    kind:
        ``"error"``: HTTP ``status`` with JSON ``body`` and extra ``headers``.
        ``"malformed"``: HTTP 200, JSON content type, body that is not JSON
        (for streaming: one SSE event whose data is not JSON).
        ``"stall"``: read the request, send nothing for ``seconds``, then close.
        ``"drop"``: read the request, then close the connection without a response.
    """

    kind: FaultKind
    status: int = 500
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


PlanItem = Union[str, Reply, Fault]
WindowErrorStyle = Literal["openai", "vllm", "vllm-legacy", "llamacpp"]
DefaultReply = Union[str, Callable[["RecordedRequest"], PlanItem]]


def _error_body(message: str, *, type: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    # Same shape as api.openai.com error responses.
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


# --------------------------------------------------------------------------- recorded requests


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request the server received.

    ``headers`` has lower-case names; ``body`` is the parsed JSON body (None if
    absent or not JSON); ``time`` is ``time.monotonic()`` at arrival.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    time: float

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The ``messages`` of a chat request ([] otherwise)."""
        return list(self.body.get("messages", [])) if isinstance(self.body, dict) else []

    @property
    def stream(self) -> bool:
        return isinstance(self.body, dict) and bool(self.body.get("stream"))

    @property
    def image_urls(self) -> list[str]:
        """The ``image_url`` URLs of every message's content parts, in order."""
        return [url for m in self.messages for url in _image_urls(m)]

    @property
    def last_user_images(self) -> list[str]:
        """The ``image_url`` URLs of the last user message ([] when it has none)."""
        for m in reversed(self.messages):
            if m.get("role") == "user":
                return _image_urls(m)
        return []

    @property
    def last_user_text(self) -> str:
        """Content of the last user message (handy in ``default_reply`` callables)."""
        for m in reversed(self.messages):
            if m.get("role") == "user":
                c = m.get("content")
                return c if isinstance(c, str) else json.dumps(c)
        return ""


def _image_urls(message: Any) -> list[str]:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [str((part.get("image_url") or {}).get("url", "")) for part in content
            if isinstance(part, dict) and part.get("type") == "image_url"]


#: What OpenAI answers (HTTP 400) when a model without vision gets an image part.
OPENAI_NO_IMAGES = "Invalid content type. image_url is only supported by certain models."


# --------------------------------------------------------------------------- the server


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on right now (for "endpoint down" tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class _HTTPServer(ThreadingHTTPServer):
    # Non-daemon handler threads, joined by server_close(): shutdown is clean, and
    # stalls wake up early because they wait on the owner's stop event.
    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True

    owner: OpenAITestServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        # A client that hangs up early (timeout, closed stream) is normal in fault tests.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class OpenAITestServer:
    """A scriptable OpenAI-compatible server on ``127.0.0.1:<free port>``.

    Args:
        default_reply: answer when the plan queue is empty: a string, or a
            callable ``(RecordedRequest) -> str | Reply | Fault``.
        models: ids listed by ``GET /v1/models``; a dict is listed as it is
            (merged over ``{"id": ..., "object": "model", ...}``), for lists with extra fields.
        context_window: enforce a window of this many tokens (None: no limit):
            a larger request gets HTTP 400 in ``window_error_style``.
        announce_window: list the window in ``GET /v1/models``: True as vLLM's
            ``max_model_len``, or the field name to use (``"context_length"``,
            ``"context_window"``, ``"max_context_length"``, ``"meta.n_ctx_train"``, ...).
        window_error_style: the refusal's body: ``"openai"`` (``context_length_exceeded``),
            ``"vllm"`` (current vLLM), ``"vllm-legacy"`` (vLLM's older top-level error object),
            ``"llamacpp"`` (``exceed_context_size_error`` with ``n_ctx``/``n_prompt_tokens``,
            a message without numbers; the prompt alone is counted, as llama.cpp does).
        models_response: answer ``GET /v1/models`` with this instead (bytes are sent raw,
            anything else as JSON), for malformed lists.
        reject_images: an error message: every chat request with an image part
            is answered HTTP 400 with it (a model without vision), whatever is
            planned; the plan is not consumed. E.g. :data:`OPENAI_NO_IMAGES`.

    Attributes:
        base_url: ``http://127.0.0.1:PORT/v1`` (pass it as ``base_url=``).
        requests: every request received, in order (a copy).
        chat_requests: the ``/chat/completions`` requests only.
    """

    def __init__(
        self,
        *,
        default_reply: DefaultReply = "OK",
        models: Sequence[str | dict[str, Any]] = ("test-model",),
        context_window: int | None = None,
        announce_window: bool | str = False,
        window_error_style: WindowErrorStyle = "openai",
        models_response: Any = None,
        reject_images: str | None = None,
    ) -> None:
        self.default_reply: DefaultReply = default_reply
        self.reject_images = reject_images
        self.models = list(models)
        self.context_window = context_window
        self.announce_window = announce_window
        self.window_error_style: WindowErrorStyle = window_error_style
        self.models_response = models_response
        self._plan: deque[PlanItem] = deque()
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ids = itertools.count(1)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""

    # -- lifecycle

    def start(self) -> OpenAITestServer:
        """Bind a free port and serve in a background thread; returns self."""
        if self._httpd is not None:
            return self
        self._stop.clear()
        httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        port = httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=f"openai-test-server-{port}", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, wake stalled handlers, join all threads, free the port."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stop.set()
        httpd.shutdown()
        httpd.server_close()  # joins handler threads (block_on_close)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> OpenAITestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- planning

    def plan(self, *items: PlanItem) -> None:
        """Queue replies/faults; a plain string means ``Reply(text=...)``."""
        with self._lock:
            self._plan.extend(items)

    def plan_text(self, text: str, **options: Any) -> None:
        """Queue a text reply; ``options`` are :class:`Reply` fields (usage, chunks, delay, ...)."""
        self.plan(Reply(text=text, **options))

    def plan_tool_call(
        self, name: str, arguments: str | dict[str, Any] | None = None, *, call_id: str | None = None, text: str = ""
    ) -> None:
        """Queue a reply with one native function call."""
        self.plan(Reply(text=text, tool_calls=(ToolCall(name, arguments or {}, call_id),)))

    def plan_tool_calls(self, calls: Sequence[ToolCall], *, text: str = "", **options: Any) -> None:
        """Queue a reply with several native function calls."""
        self.plan(Reply(text=text, tool_calls=tuple(calls), **options))

    def plan_error(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        type: str = "invalid_request_error",
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Queue an HTTP error with an OpenAI-style JSON error body."""
        body = _error_body(message, type=type, code=code, param=param)
        self.plan(Fault("error", status=status, body=body, headers=dict(headers or {})))

    def plan_rate_limit(self, retry_after: float | str | None = 0.2, *, retry_after_ms: float | None = None) -> None:
        """Queue a 429. ``retry_after``: seconds (sent as a number) or a raw header
        value such as an HTTP-date; ``retry_after_ms`` adds a ``retry-after-ms`` header."""
        headers: dict[str, str] = {}
        if retry_after is not None:
            headers["Retry-After"] = retry_after if isinstance(retry_after, str) else f"{retry_after:g}"
        if retry_after_ms is not None:
            headers["retry-after-ms"] = f"{retry_after_ms:g}"
        self.plan_error(
            429,
            "Rate limit reached for requests. Please try again later.",
            code="rate_limit_exceeded",
            type="requests",
            headers=headers,
        )

    def plan_server_error(
        self, status: int = 500, message: str = "The server had an error while processing your request."
    ) -> None:
        """Queue a 5xx with an OpenAI-style body."""
        self.plan_error(status, message, code=None, type="server_error")

    def plan_auth_error(self, status: int = 401) -> None:
        """Queue a 401 (or 403) like OpenAI's for a wrong key."""
        message = (
            "Incorrect API key provided: sk-****. "
            "You can find your API key at https://platform.openai.com/account/api-keys."
        )
        self.plan_error(status, message, code="invalid_api_key")

    def plan_model_not_found(self) -> None:
        """Queue a 404 like OpenAI's for an unknown model (message names the requested model)."""
        # The model name is only known when the request arrives: "{model}" is filled in then.
        self.plan(
            Fault(
                "error",
                status=404,
                body=_error_body(
                    "The model `{model}` does not exist or you do not have access to it.",
                    type="invalid_request_error",
                    code="model_not_found",
                ),
            )
        )

    def plan_context_overflow(self, limit: int = 8192, requested: int = 9001) -> None:
        """Queue a 400 ``context_length_exceeded`` like OpenAI's."""
        self.plan_error(
            400,
            f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
            f"{requested} tokens. Please reduce the length of the messages.",
            code="context_length_exceeded",
            param="messages",
        )

    def plan_malformed(self) -> None:
        """Queue a 200 response whose body is not JSON."""
        self.plan(Fault("malformed"))

    def plan_stall(self, seconds: float = 5.0) -> None:
        """Queue a response that sends nothing for ``seconds`` (use > client timeout), then closes."""
        self.plan(Fault("stall", seconds=seconds))

    def plan_drop(self) -> None:
        """Queue a connection that is closed without any response."""
        self.plan(Fault("drop"))

    def clear(self) -> None:
        """Forget planned items and recorded requests."""
        with self._lock:
            self._plan.clear()
            self._requests.clear()

    # -- inspection

    @property
    def pending(self) -> int:
        """Planned items not consumed yet."""
        with self._lock:
            return len(self._plan)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    # -- used by the handler

    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(req)

    def _next_item(self, req: RecordedRequest) -> PlanItem:
        with self._lock:
            if self._plan:
                return self._plan.popleft()
        default = self.default_reply
        return default(req) if callable(default) else default

    def _next_id(self) -> str:
        return f"chatcmpl-test{next(self._ids)}"

    def _model_entries(self) -> list[dict[str, Any]]:
        entries = []
        for m in self.models:
            entry: dict[str, Any] = {"id": m if isinstance(m, str) else m.get("id"), "object": "model",
                                     "created": 0, "owned_by": "test"}
            if isinstance(m, dict):
                entry.update(m)
            elif self.context_window is not None and self.announce_window:
                field_name = "max_model_len" if self.announce_window is True else str(self.announce_window)
                node = entry
                *parents, leaf = field_name.split(".")
                for part in parents:
                    node = node.setdefault(part, {})
                node[leaf] = self.context_window
            entries.append(entry)
        return entries

    def _window_refusal(self, req: RecordedRequest) -> dict[str, Any] | None:
        """The error body when the request does not fit the window (None when it fits)."""
        window = self.context_window
        if window is None:
            return None
        prompt = prompt_tokens(req.body)
        completion = 0
        if self.window_error_style != "llamacpp":
            asked = req.body.get("max_completion_tokens", req.body.get("max_tokens"))
            completion = asked if isinstance(asked, int) and asked > 0 else 0
        total = prompt + completion
        if total <= window:
            return None
        style = self.window_error_style
        if style == "llamacpp":
            message = "the request exceeds the available context size, try increasing it"
            return {"error": {"code": 400, "message": message, "type": "exceed_context_size_error",
                              "n_prompt_tokens": prompt, "n_ctx": window}}
        if style == "vllm":
            message = (f"This model's maximum context length is {window} tokens. However, you requested {completion} "
                       f"output tokens and your prompt contains {prompt} input tokens, for a total of {total} tokens. "
                       "Please reduce the length of the input prompt or the number of requested output tokens.")
            return {"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}}
        if style == "vllm-legacy":
            message = (f"This model's maximum context length is {window} tokens. However, you requested {total} tokens "
                       f"({prompt} in the messages, {completion} in the completion). "
                       "Please reduce the length of the messages or completion.")
            return {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}
        if completion:
            message = (f"This model's maximum context length is {window} tokens. However, you requested {total} tokens "
                       f"({prompt} in the messages, {completion} in the completion). "
                       "Please reduce the length of the messages or completion.")
        else:
            message = (f"This model's maximum context length is {window} tokens. However, your messages resulted in "
                       f"{prompt} tokens. Please reduce the length of the messages.")
        return _error_body(message, type="invalid_request_error", code="context_length_exceeded",
                           param="messages")


#: Tokens the server adds per message and per tool call (the same as :mod:`codeact.context_window`).
_MESSAGE_OVERHEAD, _TOOL_CALL_OVERHEAD = 4, 8


def _cl100k(text: str) -> int:
    from codeact.catalog._tokens import count_tokens

    return count_tokens(text)


def _image_tokens(url: str) -> int:
    """OpenAI's tile rule for a PNG data URL (its size read from the IHDR chunk); 765 for anything else."""
    import base64
    import binascii

    from codeact.messages import ImagePart

    if url.startswith("data:image/png;base64,"):
        try:
            head = base64.b64decode(url.split(",", 1)[1][:64] + "==")
        except (binascii.Error, ValueError):
            head = b""
        if head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) >= 24:
            width, height = struct.unpack(">II", head[16:24])
            return ImagePart(b"", width=width, height=height).tokens
    return 765


def prompt_tokens(body: Any) -> int:
    """The prompt tokens of a chat request, by the test server's rule.

    Each message costs 4 plus the ``cl100k_base`` tokens of its text (a string, or the text
    parts of a list); each tool call 8 plus the tokens of its name and arguments; each
    ``image_url`` part by OpenAI's tile rule (PNG data URLs; 765 otherwise); the request's
    ``tools`` the tokens of their JSON. This is :func:`codeact.context_window.count_tokens`
    for an OpenAI GPT-4 name (plus the tools), so for any other name that estimate is never
    below this count.
    """
    if not isinstance(body, dict):
        return 0
    total = 0
    for m in body.get("messages") or ():
        if not isinstance(m, dict):
            continue
        total += _MESSAGE_OVERHEAD
        content = m.get("content")
        if isinstance(content, str):
            total += _cl100k(content) if content else 0
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "text":
                    total += _cl100k(str(part.get("text") or ""))
                elif part.get("type") == "image_url":
                    url = part.get("image_url", {}).get("url", "") if isinstance(part.get("image_url"), dict) else ""
                    total += _image_tokens(str(url))
        for call in m.get("tool_calls") or ():
            fn = call.get("function", {}) if isinstance(call, dict) else {}
            total += _TOOL_CALL_OVERHEAD + _cl100k(str(fn.get("name") or "")) + _cl100k(str(fn.get("arguments") or ""))
    if body.get("tools"):
        total += _cl100k(json.dumps(body["tools"]))
    return total


def _estimate(chars: int) -> int:
    return max(1, (chars + 3) // 4)


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 so streams use chunked encoding: a connection dropped mid-stream is then
    # an error for the client, not a silently shorter body. Every response closes the
    # connection, so no handler thread lingers on an idle keep-alive socket.
    protocol_version = "HTTP/1.1"
    timeout = 30  # socket read timeout: a silent client cannot block shutdown forever
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # silence stderr logging
        pass

    @property
    def owner(self) -> OpenAITestServer:
        return self.server.owner

    # -- routing

    def do_GET(self) -> None:
        req = self._read_request()
        if req.path.rstrip("/").endswith("/models"):
            raw = self.owner.models_response
            if isinstance(raw, bytes):
                self._send_bytes(200, raw, "application/json")
            elif raw is not None:
                self._send_json(200, raw)
            else:
                self._send_json(200, {"object": "list", "data": self.owner._model_entries()})
        else:
            self._send_json(404, _error_body(f"Unknown path {req.path}", type="invalid_request_error", code=None))

    def do_POST(self) -> None:
        req = self._read_request()
        if not req.path.rstrip("/").endswith("/chat/completions"):
            self._send_json(404, _error_body(f"Unknown path {req.path}", type="invalid_request_error", code=None))
            return
        if not isinstance(req.body, dict):
            error = _error_body("Request body is not a JSON object", type="invalid_request_error", code=None)
            self._send_json(400, error)
            return
        if self.owner.reject_images and req.image_urls:
            error = _error_body(self.owner.reject_images, type="invalid_request_error", code=None, param="messages")
            self._send_json(400, error)
            return
        refusal = self.owner._window_refusal(req)
        if refusal is not None:
            self._send_json(400, refusal)
            return
        item = self.owner._next_item(req)
        if isinstance(item, str):
            item = Reply(text=item)
        if isinstance(item, Fault):
            self._fault(item, req)
        elif req.stream:
            self._stream_reply(item, req)
        else:
            self._json_reply(item, req)

    # -- io helpers

    def _read_request(self) -> RecordedRequest:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        req = RecordedRequest(
            method=self.command,
            path=self.path.split("?", 1)[0],
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            time=time.monotonic(),
        )
        self.owner._record(req)
        return req

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self._send_bytes(status, data, "application/json", headers)

    def _send_bytes(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def _start_sse(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _sse(self, payload: Any) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        self._write_chunk(f"data: {text}\n\n".encode())

    def _end_sse(self) -> None:
        self._sse("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _abort(self) -> None:
        """Close the TCP connection at once (RST), without finishing the response."""
        self.close_connection = True
        try:
            # SO_LINGER 0 makes close() send RST: the client sees a hard connection error.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- faults

    def _fault(self, fault: Fault, req: RecordedRequest) -> None:
        if fault.kind == "error":
            body = fault.body
            if isinstance(body, dict) and isinstance(body.get("error"), dict):
                err = dict(body["error"])
                if isinstance(err.get("message"), str):
                    err["message"] = err["message"].replace("{model}", str(req.body.get("model")))
                body = {**body, "error": err}
            self._send_json(fault.status, body if body is not None else {}, fault.headers)
        elif fault.kind == "malformed":
            if req.stream:
                self._start_sse()
                self._write_chunk(b'data: {"id": "chatcmpl-broken", "choices": [\n\n')
                self._end_sse()
            else:
                self._send_bytes(200, b'{"id": "chatcmpl-broken", "choices": [{"index": 0, "mess', "application/json")
        elif fault.kind == "stall":
            self.owner._stop.wait(fault.seconds)
            self._abort()
        elif fault.kind == "drop":
            self._abort()
        else:  # pragma: no cover - guarded by the Literal type
            raise ValueError(f"unknown fault kind {fault.kind!r}")

    # -- replies

    def _usage(self, reply: Reply, req: RecordedRequest) -> dict[str, int]:
        if reply.usage is not None:
            p, c = reply.usage
        else:
            prompt_chars = sum(len(str(m.get("content") or "")) for m in req.messages)
            out_chars = len(reply.text) + sum(len(t.name) + len(t.arguments_json()) for t in reply.tool_calls)
            p, c = _estimate(prompt_chars), _estimate(out_chars)
            if self.owner.context_window is not None:  # a server that enforces a window counts what it enforces
                p = prompt_tokens(req.body)
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    @staticmethod
    def _finish_reason(reply: Reply) -> str:
        return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")

    @staticmethod
    def _call_ids(reply: Reply) -> list[str]:
        return [t.id or f"call_{i}" for i, t in enumerate(reply.tool_calls)]

    def _tool_call_fragments(self, reply: Reply) -> list[dict[str, Any]]:
        """The streamed ``delta.tool_calls`` items of a reply, in sending order."""
        size = max(1, reply.fragment_size)
        per_call: list[list[dict[str, Any]]] = []
        for index, (call_id, t) in enumerate(zip(self._call_ids(reply), reply.tool_calls, strict=True)):
            args = t.arguments_json()
            pieces = [args[i : i + size] for i in range(0, len(args), size)]
            if reply.interleave_tool_calls:
                # The id once, the name in two halves, then the argument pieces.
                half = max(1, len(t.name) // 2)
                frags = [{"index": index, "id": call_id, "type": "function", "function": {"name": t.name[:half]}},
                         {"index": index, "function": {"name": t.name[half:], "arguments": ""}}]
            else:
                # Like OpenAI: the first delta carries id and name, then argument fragments follow.
                frags = [{"index": index, "id": call_id, "type": "function",
                          "function": {"name": t.name, "arguments": ""}}]
            frags += [{"index": index, "function": {"arguments": piece}} for piece in pieces]
            per_call.append(frags)
        if not reply.interleave_tool_calls:
            return [f for frags in per_call for f in frags]
        out: list[dict[str, Any]] = []
        for round_ in itertools.zip_longest(*per_call):
            out.extend(f for f in round_ if f is not None)
        return out

    def _json_reply(self, reply: Reply, req: RecordedRequest) -> None:
        if reply.delay:
            self.owner._stop.wait(reply.delay)
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or (None if reply.tool_calls else "")}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": t.name, "arguments": t.arguments_json()}}
                for cid, t in zip(self._call_ids(reply), reply.tool_calls, strict=True)
            ]
        payload: dict[str, Any] = {
            "id": self.owner._next_id(),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": req.body.get("model", ""),
            "choices": [
                {"index": 0, "message": message, "finish_reason": self._finish_reason(reply), "logprobs": None}
            ],
        }
        if reply.send_usage:
            payload["usage"] = self._usage(reply, req)
        self._send_json(200, payload)

    def _stream_reply(self, reply: Reply, req: RecordedRequest) -> None:
        if reply.delay:
            self.owner._stop.wait(reply.delay)
        cid, model, created = self.owner._next_id(), req.body.get("model", ""), int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            }

        self._start_sse()
        self._sse(chunk({"role": "assistant", "content": ""}))
        pieces = reply.chunks
        if pieces is None:
            pieces = tuple(reply.text[i : i + 4] for i in range(0, len(reply.text), 4))
        for n, piece in enumerate(pieces):
            if reply.drop_after_chunks is not None and n >= reply.drop_after_chunks:
                self._abort()
                return
            self._sse(chunk({"content": piece}))
        for fragment in self._tool_call_fragments(reply):
            self._sse(chunk({"tool_calls": [fragment]}))
        self._sse(chunk({}, self._finish_reason(reply)))
        options = req.body.get("stream_options") or {}
        if reply.send_usage and isinstance(options, dict) and options.get("include_usage"):
            self._sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                       "choices": [], "usage": self._usage(reply, req)})
        self._end_sse()
