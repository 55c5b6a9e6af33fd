"""Isolated, stateful Python execution that can call back into host functions.

Knows nothing about LLMs: a notebook service or an MCP code tool can use it
on its own. Three backends share one interface (:class:`Sandbox`):

* :class:`DockerSandbox` — a kernel in a locked-down container (the default);
* :class:`LocalSandbox` — a kernel subprocess; NOT a security boundary;
* :class:`RestrictedSandbox` — RestrictedPython in-process; NOT a security boundary.

Example::

    from sandbox import open_sandbox

    def get_weather(city: str) -> dict:
        "Weather for the next three days in a city."
        return {"tomorrow": "sunny"}

    with open_sandbox(functions=[get_weather]) as sb:      # docker if it can, else local
        r = sb.run("print(get_weather('Beijing')['tomorrow'])")
        print(r.stdout, r.error, r.duration)
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Literal

from .base import DEFAULT_OUTPUT_LIMIT, DEFAULT_TIMEOUT, FileInfo, Sandbox
from .errors import (
    BackendUnavailable,
    FileTransferError,
    FunctionRegistrationError,
    ImageNotFound,
    KernelStartError,
    SandboxClosed,
    SandboxError,
)
from .functions import FunctionSpec, HostFunction
from .result import ExecutionError, ExecutionResult, FunctionCall, Output

BackendName = Literal["auto", "docker", "local", "restricted"]

__all__ = [
    "open_sandbox", "docker_available", "Sandbox", "DockerSandbox", "LocalSandbox", "RestrictedSandbox",
    "SandboxPool", "reap", "HostFunction", "FunctionSpec", "ExecutionResult", "ExecutionError", "Output",
    "FunctionCall", "FileInfo", "SandboxError", "BackendUnavailable", "ImageNotFound", "KernelStartError",
    "SandboxClosed", "FileTransferError", "FunctionRegistrationError", "DEFAULT_TIMEOUT", "DEFAULT_OUTPUT_LIMIT",
]

_LAZY = {
    "DockerSandbox": ".container",
    "reap": ".container",
    "LocalSandbox": ".local",
    "RestrictedSandbox": ".restricted",
    "SandboxPool": ".pool",
}


def __getattr__(name: str) -> Any:
    # Backends import docker/jupyter_client/RestrictedPython; load them on first use.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'sandbox' has no attribute {name!r}")


class UnsafeBackendWarning(UserWarning):
    """The sandbox in use is not a security boundary."""


def docker_available(image: str | None = None) -> str | None:
    """``None`` when the Docker backend can run here, else the reason it cannot."""
    try:
        from .container import docker_client
        from .image import default_image_tag, image_exists

        client = docker_client(timeout=10)
        tag = image or default_image_tag()
        if not image_exists(tag, client):
            return f"the sandbox image {tag} is not built (run `codeact image build`)"
        return None
    except BackendUnavailable as exc:
        return str(exc)


def open_sandbox(
    backend: BackendName = "auto",
    *,
    functions: list[Callable[..., Any] | HostFunction] | tuple = (),
    **options: Any,
) -> Any:
    """Create a session of the chosen backend (not yet started; use it in ``with``).

    ``auto`` picks docker when an engine answers and the image exists, and
    otherwise local, with a warning that names the risk. ``options`` go to the
    backend's constructor (``timeout``, ``memory``, ``network``, ...).
    """
    if backend == "auto":
        reason = docker_available(options.get("image"))
        if reason is None:
            backend = "docker"
        else:
            warnings.warn(
                f"Docker sandbox unavailable ({reason}); running code in a LOCAL kernel with your "
                "user's permissions — this is not isolated. Fix Docker or pass backend='local' to silence this.",
                UnsafeBackendWarning,
                stacklevel=2,
            )
            backend = "local"
            options.pop("image", None)
    if backend == "docker":
        from .container import DockerSandbox

        return DockerSandbox(functions, **options)
    if backend == "local":
        from .local import LocalSandbox

        return LocalSandbox(functions, **options)
    if backend == "restricted":
        from .restricted import RestrictedSandbox

        return RestrictedSandbox(functions, **options)
    raise SandboxError(f"unknown sandbox backend {backend!r}; choose auto, docker, local or restricted")
