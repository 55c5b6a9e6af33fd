"""Errors raised by the sandbox package; all derive from :class:`SandboxError`.

Errors inside the *sandboxed code* are not exceptions on the host: they come
back as :attr:`ExecutionResult.error`. These classes are for faults of the
sandbox itself (no engine, no image, a kernel that will not start, ...).
"""

from __future__ import annotations


class SandboxError(Exception):
    """Root of every error the sandbox package raises."""


class BackendUnavailable(SandboxError):
    """The requested backend cannot run here (no Docker engine, no image, ...).

    The message says what to install or build.
    """


class ImageNotFound(BackendUnavailable):
    """The sandbox image is missing; build it with ``codeact image build``."""


class KernelStartError(SandboxError):
    """A kernel did not start or did not answer in time."""


class SandboxClosed(SandboxError):
    """The session was closed; open a new one."""


class FileTransferError(SandboxError):
    """A file could not be moved into or out of the sandbox."""


class FunctionRegistrationError(SandboxError):
    """A host function cannot be offered to the sandbox (bad name, clash, ...)."""


class PackageInstallError(SandboxError):
    """A package request the host could not (or would not) fulfil; ``kind`` says why.

    Kinds: ``not_found``, ``no_wheel`` (source-only, or nothing for the
    sandbox's platform), ``policy`` (the message names the rule),
    ``too_large``, ``conflict`` (``details`` lists the conflicting
    requirements), ``denied`` (the approval hook said no), ``unreachable``
    (the index), ``invalid`` (not a requirement), ``disabled``, ``internal``.
    In the sandbox the same error arrives as ``PackageInstallError`` with the
    same ``kind``, message and ``details``. See :mod:`sandbox.packages`.
    """

    def __init__(self, kind: str, message: str, details: "list[str] | tuple[str, ...]" = ()) -> None:
        super().__init__(message)
        self.kind = kind
        self.details = list(details)


class NetworkPolicyError(SandboxError, ValueError):
    """A :class:`sandbox.NetworkPolicy` (or its command-line options) that cannot be used; the message says
    which entry and what to write instead."""
