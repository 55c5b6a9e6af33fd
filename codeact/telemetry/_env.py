"""What the standard OpenTelemetry environment asks for, read without importing OpenTelemetry.

The lowest module of the package: ``codeact.telemetry`` and its span builders both read it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

INSTALL_HINT = "install the OpenTelemetry extra: pip install 'codeact[otel]'"


def enabled_by_environment(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the standard OpenTelemetry environment asks for traces to be exported."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
                or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip())


def capture_content_from_environment(environ: Mapping[str, str] | None = None) -> bool:
    """``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``: true (or a mode that records on spans)."""
    env = os.environ if environ is None else environ
    value = env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").strip().lower()
    return value in ("true", "1", "yes", "span_only", "span_and_event")


def is_secret(name: str) -> bool:
    """Whether an ``OTEL_*`` variable may hold a secret: the exporter's headers often carry an API token."""
    return "HEADERS" in name.upper()


def otel_environment(environ: Mapping[str, str] | None = None, *, secrets: bool = False) -> dict[str, str]:
    """The ``OTEL_*`` variables of this environment (without the header ones unless ``secrets``)."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if k.startswith("OTEL_") and (secrets or not is_secret(k))}
