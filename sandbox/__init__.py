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

    with open_sandbox(functions=[get_weather]) as sb:      # docker; an error if Docker is not ready
        r = sb.run("print(get_weather('Beijing')['tomorrow'])")
        print(r.stdout, r.error, r.duration)

The default never runs code outside the isolated backend: without a working
Docker engine and image, :func:`open_sandbox` raises
:class:`BackendUnavailable` with what to do. ``local`` and ``restricted`` are
explicit choices (an argument, or ``CODEACT_BACKEND``) and warn each time
with :class:`UnsafeBackendWarning`.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Literal

from .base import DEFAULT_OUTPUT_LIMIT, DEFAULT_TIMEOUT, FileInfo, Sandbox, SessionSource
from .errors import (
    BackendUnavailable,
    FileTransferError,
    FunctionRegistrationError,
    ImageNotFound,
    KernelStartError,
    NetworkPolicyError,
    PackageInstallError,
    SandboxClosed,
    SandboxError,
)
from .functions import FunctionSpec, HostCall, HostFunction, current_call
from .limits import Limits
from .result import Elided, ExecutionError, ExecutionResult, FunctionCall, KernelRestart, Output

BackendName = Literal["auto", "docker", "local", "restricted"]

__all__ = [
    "open_sandbox", "docker_available", "runtime_problem", "Sandbox", "SessionSource", "EnginePool", "Engine",
    "DockerSandbox", "LocalSandbox", "RestrictedSandbox",
    "SandboxPool", "reap", "HostFunction", "HostCall", "current_call", "FunctionSpec", "Limits",
    "ExecutionResult", "ExecutionError", "Output", "FunctionCall", "KernelRestart", "Elided", "FileInfo",
    "SandboxError",
    "BackendUnavailable", "ImageNotFound", "KernelStartError", "SandboxClosed", "FileTransferError",
    "FunctionRegistrationError", "UnsafeBackendWarning", "DEFAULT_TIMEOUT", "DEFAULT_OUTPUT_LIMIT",
    "PackagePolicy", "PackageInstallError", "Snapshot", "SnapshotStore", "SnapshotError", "RestoreReport",
    "NetworkPolicy", "NetworkPolicyError", "NetworkRecord",
]

_LAZY = {
    "DockerSandbox": ".container",
    "reap": ".container",
    "LocalSandbox": ".local",
    "RestrictedSandbox": ".restricted",
    "SandboxPool": ".pool",
    "PackagePolicy": ".packages",
    "NetworkPolicy": ".network",
    "NetworkRecord": ".network",
    "EnginePool": ".engine_pool",
    "Engine": ".engines",
    "Snapshot": ".snapshot",
    "SnapshotStore": ".snapshot",
    "SnapshotError": ".snapshot",
    "RestoreReport": ".snapshot",
}


def __getattr__(name: str) -> Any:
    # Backends import docker/jupyter_client/RestrictedPython; load them on first use.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'sandbox' has no attribute {name!r}")


class UnsafeBackendWarning(UserWarning):
    """The sandbox in use is not a security boundary."""


#: Why each unisolated backend is not a boundary (said in its warning).
UNSAFE_BACKENDS = {
    "local": "a kernel process on this machine, running as your user: the code can read and write your files "
             "and reach your network",
    "restricted": "RestrictedPython inside this process: known escapes exist, and C code can freeze the process",
}


def docker_available(image: str | None = None) -> str | None:
    """``None`` when the Docker backend can run here, else the reason it cannot and what to do."""
    try:
        from .container import check_limits_held, docker_client
        from .image import default_image_tag, image_exists

        client = docker_client(timeout=10)
        check_limits_held(client)
        tag = image or default_image_tag()
        if not image_exists(tag, client):
            return f"the sandbox image {tag} is not built (run `codeact image build`)"
        return None
    except BackendUnavailable as exc:
        return str(exc)


def runtime_problem(runtime: str, client: Any = None) -> str | None:
    """``None`` when the Docker engine (``client``, default: the one the ``docker`` CLI would use) has the
    container runtime ``runtime`` (e.g. ``runsc``), else what is wrong and what to do."""
    try:
        from .container import docker_client, engine_runtimes, unknown_runtime

        client = client or docker_client(timeout=10)
        return None if runtime in engine_runtimes(client) else str(unknown_runtime(client, runtime))
    except BackendUnavailable as exc:
        return str(exc)


def warn_unsafe(backend: str, stacklevel: int = 2) -> None:
    """Warn that ``backend`` (local, restricted) is not a security boundary, saying why."""
    warnings.warn(
        f"the {backend!r} sandbox is not a security boundary ({UNSAFE_BACKENDS[backend]}); "
        "use it only for trusted code. The default, 'docker', isolates the code.",
        UnsafeBackendWarning,
        stacklevel=stacklevel + 1,
    )


def open_sandbox(
    backend: BackendName = "docker",
    *,
    functions: list[Callable[..., Any] | HostFunction] | tuple = (),
    **options: Any,
) -> Any:
    """Create a session of the chosen backend (not yet started; use it in ``with``).

    ``docker`` (the default; ``auto`` is a synonym) never falls back to an
    unisolated backend: when Docker is not ready it raises
    :class:`BackendUnavailable` saying how to fix it. ``local`` and
    ``restricted`` run code without isolation and warn with
    :class:`UnsafeBackendWarning`. ``options`` go to the backend's
    constructor (``timeout``, ``memory``, ``network``, ``limits``, ...);
    ``network=NetworkPolicy(allow=[...])`` opens HTTP(S) to listed hosts only
    (docker; see :mod:`sandbox.network`).
    """
    if backend in ("docker", "auto"):
        from .container import DockerSandbox

        return DockerSandbox(functions, **options)
    if backend == "local":
        from .local import LocalSandbox

        warn_unsafe("local")
        return LocalSandbox(functions, **options)
    if backend == "restricted":
        from .restricted import RestrictedSandbox

        warn_unsafe("restricted")
        return RestrictedSandbox(functions, **options)
    raise SandboxError(f"unknown sandbox backend {backend!r}; choose docker, local or restricted")
