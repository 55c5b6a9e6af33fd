"""The spans of a run, built on the OpenTelemetry API (imported only when tracing is on).

Names and attributes follow the OpenTelemetry GenAI semantic conventions
(``invoke_agent``, ``chat``, ``execute_tool``, ``gen_ai.*``) and the MCP ones
(``tools/call``, ``mcp.*``); what those conventions do not cover (a code
action, the sandbox's lifecycle) is named ``codeact.*``.

Agents are generators, so run, chat and code-action spans are never made
*current* across a ``yield`` (a context attached on one side of a yield and
detached on the other breaks the caller's context). They are created with an
explicit parent; only short synchronous sections (a tool call, a sandbox
start) attach a context, and the host decides which: the sandbox never
chooses a trace or span id. A tool call that code in the sandbox makes is
parented on the host from the code action the host knows is running.
"""

from __future__ import annotations

import itertools
import json
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping, Sequence
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagate import extract as _extract
from opentelemetry.propagate import inject as _inject
from opentelemetry.trace import SpanKind, Status, StatusCode

#: Characters of one captured content attribute (messages, code, tool arguments and results): code in
#: the sandbox decides how much it prints, and a collector drops whole spans that are too large.
MAX_CONTENT = 16_000

Redact = Callable[[str], str]


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("codeact")
    except Exception:  # a source checkout without metadata
        return "0"


def _cap(text: str, limit: int = MAX_CONTENT) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit:,} characters cut ...]\n{text[-half:]}"


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=repr)
    except Exception:  # content is best effort
        return repr(value)


def provider_name(model: Any) -> str:
    """``gen_ai.provider.name`` of a model object (``openai`` for any OpenAI-compatible endpoint)."""
    kind = type(model).__name__
    return "openai" if kind == "OpenAIModel" else kind.lower().removesuffix("model") or "unknown"


class Tracing:
    """Makes codeact's spans with one tracer; one per process (see :func:`codeact.telemetry.tracing`)."""

    def __init__(self, provider: Any, *, capture_content: bool = False, owned: bool = False,
                 endpoint: str | None = None, service_name: str | None = None, exports: bool = False) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("codeact", _version())
        self.capture_content = capture_content
        self._owned = owned
        #: What :func:`~codeact.telemetry.configure` was given (not the environment): other processes of
        #: the same run (Ray bench workers) get them as ``OTEL_*`` variables.
        self.endpoint = endpoint
        self.service_name = service_name
        #: The exporter is the one the environment names (OTLP by default), not one handed in by code.
        self.exports = exports

    @classmethod
    def from_sdk(cls, *, endpoint: str | None = None, service_name: str | None = None, exporter: Any = None,
                 capture_content: bool | None = None) -> Tracing:
        """An SDK TracerProvider with a batch processor; made the global provider when there is none yet
        (so that the MCP SDK's client spans, and the ``_meta`` trace context it sends, join our traces)."""
        import os

        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from ._env import capture_content_from_environment

        attributes = {"service.name": service_name} if service_name else {}
        resource = Resource.create(attributes)
        if not service_name and not os.environ.get("OTEL_SERVICE_NAME") and \
                str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource.create({"service.name": "codeact"}))
        exports = exporter is None
        if exporter is None:
            exporter = _exporter(endpoint)
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(exporter))
        if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            trace.set_tracer_provider(provider)
        if capture_content is None:
            capture_content = capture_content_from_environment()
        return cls(provider, capture_content=capture_content, owned=True, endpoint=endpoint,
                   service_name=service_name, exports=exports)

    def shutdown(self) -> None:
        """Flush and stop a provider this object made (a program's own provider is left alone)."""
        if self._owned:
            self.provider.shutdown()

    def flush(self, timeout: float = 30.0) -> bool:
        """Export the spans still queued now (a process that lives on after its work: a Ray worker)."""
        force_flush = getattr(self.provider, "force_flush", None)
        if force_flush is None:  # an API-only provider has nothing queued
            return True
        return bool(force_flush(int(timeout * 1000)))

    # --- parents from outside: a bench episode, an HTTP request, an MCP request --------------------

    @contextmanager
    def span(self, name: str, attributes: Mapping[str, Any] | None = None, *, parent: Any = None,
             kind: SpanKind = SpanKind.INTERNAL) -> Iterator[Any]:
        """A span made current for a synchronous section (no ``yield`` of a generator inside)."""
        with self.tracer.start_as_current_span(name, context=parent, kind=kind,
                                               attributes=dict(attributes or {})) as span:
            yield span

    @staticmethod
    def extract(carrier: Mapping[str, Any] | None) -> Any:
        """The context a W3C ``traceparent`` (HTTP headers, MCP ``_meta``) names, or None."""
        if not carrier:
            return None
        try:
            ctx = _extract({str(k).lower(): v for k, v in carrier.items() if isinstance(v, str)})
        except Exception:  # a malformed header starts a new trace
            return None
        return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None

    @staticmethod
    def inject(ctx: Any = None) -> dict[str, str]:
        """``ctx`` (default: the current context) as a W3C carrier (``traceparent``) for another process."""
        carrier: dict[str, str] = {}
        _inject(carrier, context=ctx)
        return carrier

    @staticmethod
    def current() -> Any:
        """The current context (to hand to a run on another thread)."""
        return otel_context.get_current()

    @staticmethod
    @contextmanager
    def attached(ctx: Any) -> Iterator[None]:
        """``ctx`` current for a synchronous section; nothing when ``ctx`` is None."""
        if ctx is None:
            yield
            return
        token = otel_context.attach(ctx)
        try:
            yield
        finally:
            otel_context.detach(token)

    # --- a run ---------------------------------------------------------------------------------

    def run(self, *, agent: str, run_id: str, model: Any, backend: str, task: str,
            redact: Redact | None = None, conversation: str | None = None) -> RunTrace:
        """Start the ``invoke_agent`` span of a run, a child of the current context."""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            "gen_ai.provider.name": provider_name(model),
            "gen_ai.request.model": str(getattr(model, "name", "?")),
            "codeact.run.id": run_id,
            "codeact.sandbox.backend": backend,
        }
        if conversation:
            attributes["gen_ai.conversation.id"] = conversation
        content = _Content(self.capture_content, redact)
        if content.on:
            attributes["gen_ai.input.messages"] = content.text(_json([{"role": "user", "parts": [
                {"type": "text", "content": task}]}]))
        span = self.tracer.start_span(f"invoke_agent {agent}", kind=SpanKind.INTERNAL, attributes=attributes)
        return RunTrace(self, span, content, run_id)


class _Content:
    """Whether message and code content is recorded, and the privacy filter it passes first."""

    __slots__ = ("on", "redact")

    def __init__(self, on: bool, redact: Redact | None) -> None:
        self.on = on
        self.redact = redact

    def text(self, text: str) -> str:
        if self.redact is not None:
            try:
                text = self.redact(text)
            except Exception:  # a filter that fails records nothing rather than the value
                return "[not recorded: the privacy filter failed]"
        return _cap(text)


class RunTrace:
    """The spans of one run; every method is safe to call from any thread."""

    def __init__(self, tracing: Tracing, span: Any, content: _Content, run_id: str) -> None:
        self.tracing = tracing
        self.tracer = tracing.tracer
        self.span = span
        self.ctx = trace.set_span_in_context(span)
        self.content = content
        self.run_id = run_id
        self._call_ids = itertools.count(1)
        self._ended = False

    def end(self, result: Any) -> None:
        """End the run's span with its outcome (``RunResult``)."""
        if self._ended:
            return
        self._ended = True
        span = self.span
        status = getattr(result, "status", "error")
        usage = getattr(result, "usage", None)
        span.set_attribute("codeact.run.status", status)
        span.set_attribute("codeact.run.steps", len(getattr(result, "steps", ()) or ()))
        if usage is not None:
            span.set_attribute("gen_ai.usage.input_tokens", int(usage.input_tokens))
            span.set_attribute("gen_ai.usage.output_tokens", int(usage.output_tokens))
        if self.content.on and getattr(result, "answer", None) is not None:
            span.set_attribute("gen_ai.output.messages", self.content.text(_json([{"role": "assistant", "parts": [
                {"type": "text", "content": str(result.answer)}]}])))
        if status == "error":
            span.set_attribute("error.type", _error_type(getattr(result, "error", None)))
            span.set_status(Status(StatusCode.ERROR, str(getattr(result, "error", ""))[:500]))
        span.end()

    # --- model requests ------------------------------------------------------------------------

    def chat(self, model: Any, messages: Sequence[Any], *, stream: bool) -> ChatTrace:
        """Start the ``chat`` span of one model request (CLIENT kind)."""
        name = str(getattr(model, "name", "?"))
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider_name(model),
            "gen_ai.request.model": name,
            "gen_ai.request.stream": stream,
        }
        base_url = getattr(model, "base_url", None)
        if isinstance(base_url, str):
            parts = urlsplit(base_url)
            if parts.hostname:
                attributes["server.address"] = parts.hostname
                attributes["server.port"] = parts.port or (443 if parts.scheme == "https" else 80)
        if self.content.on:
            attributes["gen_ai.input.messages"] = self.content.text(_json([
                {"role": m.role, "parts": [{"type": "text", "content": m.content}]} for m in messages]))
        span = self.tracer.start_span(f"chat {name}", context=self.ctx, kind=SpanKind.CLIENT, attributes=attributes)
        return ChatTrace(span, self.content)

    def compacted(self, event: Any) -> None:
        """A ``compact_history`` span for a :class:`~codeact.events.Compacted` event (its time and counts)."""
        end = int(event.time * 1e9)
        attributes: dict[str, Any] = {
            "codeact.step": int(event.step),
            "codeact.compaction.reason": str(event.reason),
            "codeact.compaction.observations_masked": int(event.observations_masked),
            "codeact.compaction.messages_shortened": int(event.messages_shortened),
            "codeact.compaction.actions_shortened": int(event.actions_shortened),
            "codeact.compaction.turns_folded": int(event.turns_folded),
            "codeact.compaction.tokens_before": int(event.tokens_before),
            "codeact.compaction.tokens_after": int(event.tokens_after),
            "codeact.compaction.budget": int(event.budget),
        }
        if event.window:
            attributes["codeact.compaction.window"] = int(event.window)
        if event.usage.requests:
            attributes["gen_ai.usage.input_tokens"] = int(event.usage.input_tokens)
            attributes["gen_ai.usage.output_tokens"] = int(event.usage.output_tokens)
        span = self.tracer.start_span("compact_history", context=self.ctx, attributes=attributes,
                                      start_time=end - int(max(event.seconds, 0.0) * 1e9))
        span.end(end_time=end)

    # --- code actions ----------------------------------------------------------------------------

    def action(self, step: int, code: str) -> ActionTrace:
        """Start the span of a code action; tool calls made from it are its children."""
        attributes: dict[str, Any] = {"codeact.step": step, "codeact.code.chars": len(code)}
        if self.content.on:
            attributes["codeact.code"] = self.content.text(code)
        span = self.tracer.start_span("execute_code", context=self.ctx, attributes=attributes)
        return ActionTrace(span, trace.set_span_in_context(span), self.tracer)

    # --- tool calls ------------------------------------------------------------------------------

    def tool(self, name: str, arguments: Mapping[str, Any], *, parent: Any = None,
             call_id: str | None = None, step: int = 0) -> ToolTrace:
        """An ``execute_tool`` span, made current while the tool runs (an MCP call inside nests under it).

        ``parent`` is the host's context of the code action running now (None: the run).
        """
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": _cap(call_id, 128) if call_id else f"{self.run_id}-{next(self._call_ids)}",
            "gen_ai.tool.type": "function",
            "codeact.step": step,
        }
        if self.content.on:
            attributes["gen_ai.tool.call.arguments"] = self.content.text(_json(arguments))
        span = self.tracer.start_span(f"execute_tool {name}", context=parent if parent is not None else self.ctx,
                                      attributes=attributes)
        return ToolTrace(span, self.content)

    # --- the sandbox's lifecycle -------------------------------------------------------------------

    @contextmanager
    def sandbox(self, operation: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Any]:
        """A ``sandbox.<operation>`` span around a synchronous sandbox operation (start, install...)."""
        with self.tracer.start_as_current_span(f"sandbox.{operation}", context=self.ctx,
                                               attributes=dict(attributes or {})) as span:
            yield span

    def sandbox_done(self, operation: str, seconds: float, attributes: Mapping[str, Any], *,
                     parent: Any = None, error: str | None = None) -> None:
        """A ``sandbox.<operation>`` span for something that already happened and took ``seconds``."""
        end = time.time_ns()
        start = end - int(max(seconds, 0.0) * 1e9)
        span = self.tracer.start_span(f"sandbox.{operation}", context=parent if parent is not None else self.ctx,
                                      attributes=dict(attributes), start_time=start)
        if error:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=end)


class ChatTrace:
    __slots__ = ("span", "content", "started", "first")

    def __init__(self, span: Any, content: _Content) -> None:
        self.span = span
        self.content = content
        self.started = time.perf_counter()
        self.first: float | None = None

    def first_chunk(self) -> None:
        """The stream's first text arrived (time to first token)."""
        if self.first is None:
            self.first = time.perf_counter() - self.started
            self.span.set_attribute("gen_ai.response.time_to_first_chunk", self.first)

    def end(self, response: Any) -> None:
        span = self.span
        usage = response.usage
        span.set_attribute("gen_ai.usage.input_tokens", int(usage.input_tokens))
        span.set_attribute("gen_ai.usage.output_tokens", int(usage.output_tokens))
        if response.model:
            span.set_attribute("gen_ai.response.model", str(response.model))
        if response.finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [str(response.finish_reason)])
        if self.content.on:
            span.set_attribute("gen_ai.output.messages", self.content.text(_json([{
                "role": "assistant", "parts": [{"type": "text", "content": response.text or ""}],
                "finish_reason": response.finish_reason or ""}])))
        span.end()

    def fail(self, exc: BaseException) -> None:
        self.span.set_attribute("error.type", getattr(exc, "reason", None) or type(exc).__name__)
        self.span.set_status(Status(StatusCode.ERROR, str(exc)[:500]))
        self.span.end()


class ActionTrace:
    """The span of one code action and the context its tool calls are parented on."""

    __slots__ = ("span", "ctx", "tracer")

    def __init__(self, span: Any, ctx: Any, tracer: Any) -> None:
        self.span = span
        self.ctx = ctx
        self.tracer = tracer

    def end(self, result: Any, error: BaseException | None) -> None:
        """End with the sandbox's ``ExecutionResult``, or the exception ``run()`` raised (or neither: abandoned)."""
        span = self.span
        if result is not None:
            describe_result(span, result)
            restart_spans(self.tracer, self.ctx, result)
            span.end()
            return
        if error is not None:
            outcome = "sandbox_error"
            span.set_attribute("error.type", type(error).__name__)
            span.set_status(Status(StatusCode.ERROR, str(error)[:500]))
        else:
            outcome = "abandoned"
        span.set_attribute("codeact.code.outcome", outcome)
        span.end()


def describe_result(span: Any, result: Any) -> None:
    """A sandbox ``ExecutionResult`` as attributes of ``span`` (output size, outcome, error type)."""
    stdout, stderr = result.stdout or "", result.stderr or ""
    span.set_attribute("codeact.output.chars", len(stdout) + len(stderr))
    span.set_attribute("codeact.output.rich", len(result.outputs or ()))
    span.set_attribute("codeact.output.truncated", bool(result.truncated))
    if getattr(result, "restarted", False):
        span.set_attribute("codeact.sandbox.restarted", True)
    err = result.error
    if err is None:
        outcome = "ok"
    else:
        kind = str(err.type)[:100] or "Exception"  # the kernel names it: bounded, never an id
        outcome = "timeout" if result.timed_out else ("interrupted" if kind == "KeyboardInterrupt" else "error")
        span.set_attribute("error.type", kind)
        span.set_status(Status(StatusCode.ERROR, str(err.message)[:200]))
    span.set_attribute("codeact.code.outcome", outcome)


def restart_spans(tracer: Any, parent: Any, result: Any) -> None:
    """A ``sandbox.restart`` span, at the time it happened, for each kernel restart the result reports.

    A restart asked for between runs (``/restart``) is reported by the next run, so its span may begin before
    its parent's.
    """
    for restart in getattr(result, "restarts", None) or ():
        start = int(restart.started * 1e9)
        span = tracer.start_span("sandbox.restart", context=parent, start_time=start,
                                 attributes={"codeact.sandbox.operation": "restart",
                                             "codeact.sandbox.restart.reason": str(restart.reason)[:200]})
        span.end(end_time=start + int(max(restart.seconds, 0.0) * 1e9))


class ToolTrace:
    """An ``execute_tool`` span: a context manager that makes it current on this thread while the tool runs."""

    __slots__ = ("span", "content", "_token")

    def __init__(self, span: Any, content: _Content) -> None:
        self.span = span
        self.content = content
        self._token: Any = None

    def __enter__(self) -> ToolTrace:
        self._token = otel_context.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        otel_context.detach(self._token)
        if exc is not None:
            self.span.set_attribute("error.type", type(exc).__name__)
            self.span.set_status(Status(StatusCode.ERROR, str(exc)[:500]))
        self.span.end()

    def result(self, value: Any) -> None:
        if self.content.on:
            self.span.set_attribute("gen_ai.tool.call.result", self.content.text(_json(value)))


def _error_type(error: Any) -> str:
    text = str(error or "")
    head = text.split(":", 1)[0].strip()
    return head if head.isidentifier() else "error"


def _exporter(endpoint: str | None) -> Any:
    """The exporter the environment (or ``--otel``'s endpoint) names: OTLP over HTTP by default."""
    import os

    from ..errors import ConfigError
    from ._env import INSTALL_HINT

    kind = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if kind != "otlp":
        raise ConfigError(f"OTEL_TRACES_EXPORTER={kind!r} is not supported by codeact; use otlp or console")
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip().lower()
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
        except ImportError:
            raise ConfigError("OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc "
                              "(pip install opentelemetry-exporter-otlp-proto-grpc), or use http/protobuf") from None
        return GrpcExporter(endpoint=endpoint) if endpoint else GrpcExporter()
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise ConfigError(f"the OTLP/HTTP exporter is not installed; {INSTALL_HINT}") from None
    if endpoint:
        return OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")
    return OTLPSpanExporter()  # OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, else localhost:4318
