"""OpenTelemetry traces of runs: a second, standard way out next to the SQLite run log.

Off by default, and then free: this module imports nothing of OpenTelemetry
and every hook costs one attribute check. Tracing is on when

- the CLI got ``--otel`` (or the program called :func:`configure`), or
- the standard environment names an exporter: ``OTEL_EXPORTER_OTLP_ENDPOINT``,
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_TRACES_EXPORTER`` (``otlp``,
  ``console``), unless ``OTEL_SDK_DISABLED=true``; or
- the program already installed a global OpenTelemetry ``TracerProvider``
  (Logfire, Phoenix's ``register()``, your own SDK set-up): codeact's spans
  then go wherever that provider sends them.

Spans follow the OpenTelemetry GenAI semantic conventions (``invoke_agent``,
``chat``, ``execute_tool``) plus codeact's own for code actions and the sandbox;
docs/observability.md lists what each carries. Message and code content is
recorded only with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``,
and then through the run's privacy filter.

Needs the ``otel`` extra: ``pip install 'codeact[otel]'``.

Example::

    from codeact import telemetry

    telemetry.configure(endpoint="http://127.0.0.1:6006", service_name="my-agent")
    agent.run("...")          # spans go to the collector as the run goes
    telemetry.shutdown()      # flush what is still queued
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ._env import INSTALL_HINT, capture_content_from_environment, enabled_by_environment

if TYPE_CHECKING:  # pragma: no cover
    from ._spans import RunTrace, Tracing

__all__ = ["configure", "tracing", "active", "shutdown", "start_run", "mcp_call", "enabled_by_environment",
           "capture_content_from_environment", "INSTALL_HINT", "span", "span_failed", "code_result",
           "environment_for_workers", "RunTrace", "Tracing"]

_UNSET: Any = object()
#: The process's tracing: _UNSET (not decided yet), None (off) or a Tracing.
_tracing: Any = _UNSET
_lock = threading.Lock()


def tracing() -> Tracing | None:
    """The process's :class:`Tracing`, or None when tracing is off.

    Called once per run (not per step): the run keeps what it got. The first
    call decides from the environment; later ones only notice a global
    ``TracerProvider`` the program installed since.
    """
    t = _tracing
    if t is _UNSET:
        with _lock:
            if _tracing is _UNSET:
                _decide()
        t = _tracing
    if t is None and "opentelemetry.trace" in sys.modules:  # cheap: only when someone imported OTel
        t = _from_global_provider()
    return t


def configure(*, endpoint: str | None = None, service_name: str | None = None,
              exporter: Any = None, capture_content: bool | None = None) -> Tracing:
    """Turn tracing on (``--otel``): an OTLP/HTTP exporter behind a batch processor.

    Args:
        endpoint: the collector's OTLP/HTTP base URL (``http://host:4318``; traces go to
            ``<endpoint>/v1/traces``); default ``$OTEL_EXPORTER_OTLP_ENDPOINT`` or
            ``$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else the OTLP default ``http://localhost:4318``.
        service_name: ``service.name`` of the spans; default ``$OTEL_SERVICE_NAME``, else ``codeact``.
        exporter: a span exporter to use instead of OTLP (tests: an in-memory exporter).
        capture_content: record messages and code (through the privacy filter); default
            ``$OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``.

    Raises:
        ConfigError: the OpenTelemetry SDK is not installed.
    """
    global _tracing
    with _lock:
        _tracing = _build(endpoint=endpoint, service_name=service_name, exporter=exporter,
                          capture_content=capture_content)
        return _tracing


def shutdown() -> None:
    """Flush the spans still queued and stop tracing (the CLI calls it on exit)."""
    global _tracing
    with _lock:
        t, _tracing = _tracing, _UNSET
    if t is not _UNSET and t is not None:
        t.shutdown()




def _decide() -> None:
    global _tracing
    if not enabled_by_environment():
        _tracing = None
        return
    try:
        _tracing = _build()
    except ConfigError as exc:  # the environment asks for traces the install cannot make: say so once
        import warnings

        warnings.warn(f"OpenTelemetry tracing is asked for by the environment but off: {exc}", stacklevel=3)
        _tracing = None


def _build(**options: Any) -> Tracing:
    try:
        from . import _spans

        return _spans.Tracing.from_sdk(**options)
    except ImportError as exc:  # the API comes with mcp; the SDK and the exporter only with the extra
        raise ConfigError(f"OpenTelemetry tracing needs the OpenTelemetry SDK ({exc}); {INSTALL_HINT}") from None


def _from_global_provider() -> Tracing | None:
    """A Tracing over a TracerProvider the program installed itself, or None while there is none."""
    global _tracing
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    with _lock:
        if _tracing is None:
            from ._spans import Tracing

            _tracing = Tracing(provider, capture_content=capture_content_from_environment())
        return _tracing


def start_run(*, agent: str, run_id: str, model: Any, backend: str, task: str, redact: Any = None) -> Any:
    """The run's :class:`RunTrace` (its ``invoke_agent`` span started under the
    current context), or None when tracing is off. The agents call it once per run."""
    t = tracing()
    if t is None:
        return None
    return t.run(agent=agent, run_id=run_id, model=model, backend=backend, task=task, redact=redact)


def environment_for_workers(*, secrets: bool = False) -> dict[str, str]:
    """The environment that turns on the same tracing in another process (a Ray bench worker); {} when off.

    The ``OTEL_*`` variables of this process, with the endpoint and service name given to :func:`configure`
    in their place (``configure()`` alone, as ``--otel`` does: ``OTEL_TRACES_EXPORTER=otlp``).
    ``OTEL_EXPORTER_OTLP_(TRACES_)HEADERS`` often hold a token: they are left out unless ``secrets``.
    A program's own ``TracerProvider`` or exporter set up in code does not travel.
    """
    t = tracing()
    if t is None:
        return {}
    from ._env import otel_environment

    env = otel_environment(secrets=secrets)
    if t.endpoint:
        env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)  # configure(endpoint=) wins over it here too
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = t.endpoint
    if t.service_name:
        env["OTEL_SERVICE_NAME"] = t.service_name
    if t.exports and not enabled_by_environment(env):
        env["OTEL_TRACES_EXPORTER"] = "otlp"  # --otel alone: the OTLP default (localhost:4318), as here
    return env


def active() -> Tracing | None:
    """The tracing a run already decided on (None when off or not decided): for hot paths inside a run."""
    t = _tracing
    return None if t is _UNSET else t


def mcp_call(server: str, transport: str | None, tool: str) -> Any:
    """A ``tools/call`` CLIENT span (MCP conventions) around one MCP tool call; a no-op when tracing is off.

    The MCP SDK's own client span nests under it and carries the trace context to the server in ``_meta``.
    """
    t = active()
    if t is None:
        return _NULL
    return t.span(f"tools/call {tool}", {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "network.transport": "pipe" if transport == "stdio" else "tcp",
        "codeact.mcp.server": server,
    }, kind=_client_kind())


def _client_kind() -> Any:
    from opentelemetry.trace import SpanKind

    return SpanKind.CLIENT


class _Null:
    """A reusable no-op context manager (``contextlib.nullcontext`` allocates per use)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NULL = _Null()


def span(name: str, attributes: Any = None) -> Any:
    """A span made current for a synchronous section (or an ``await`` in one task); a no-op when off.

    For the servers' own work (``codeact mcp serve``'s sandbox start and code runs); runs make theirs.
    """
    t = tracing()
    if t is None:
        return _NULL
    return t.span(name, attributes)


def span_failed(target: Any, exc: BaseException) -> None:
    """Mark the span ``span(...)`` yielded as failed with ``exc``'s type (nothing when off)."""
    if target is None:
        return
    from opentelemetry.trace import Status, StatusCode

    target.set_attribute("error.type", type(exc).__name__)
    target.set_status(Status(StatusCode.ERROR, str(exc)[:200]))


def code_result(target: Any, result: Any) -> None:
    """Record a sandbox ``ExecutionResult`` on the span ``span(...)`` yielded (nothing when off)."""
    if target is not None:
        from opentelemetry import trace

        from ._spans import describe_result, restart_spans

        describe_result(target, result)
        t = active()
        if t is not None:
            restart_spans(t.tracer, trace.set_span_in_context(target), result)


class TraceparentMiddleware:
    """ASGI middleware: each HTTP request is a SERVER span that continues the caller's W3C ``traceparent``.

    A pass-through when tracing is off. Work the request starts on other threads keeps the
    context when it is handed over with :func:`contextvars.copy_context`.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        t = tracing() if scope.get("type") == "http" else None
        if t is None:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers") or ()
                   if k in (b"traceparent", b"tracestate")}
        route = scope.get("path", "")
        with t.span(f"{scope.get('method', 'GET')} {route[:100]}", {
                "http.request.method": scope.get("method", "GET"), "url.path": route[:500]},
                parent=t.extract(headers), kind=_server_kind()):
            await self.app(scope, receive, send)


def _server_kind() -> Any:
    from opentelemetry.trace import SpanKind

    return SpanKind.SERVER


def __getattr__(name: str) -> Any:
    """:class:`RunTrace` and :class:`Tracing`, read on first use: their module needs OpenTelemetry (the ``otel``
    extra), which this package does not import until tracing is on."""
    if name in ("RunTrace", "Tracing"):
        from . import _spans

        return getattr(_spans, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
