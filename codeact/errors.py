"""Errors raised by the codeact package; all derive from :class:`CodeActError`.

Every error a user can cause carries a message that says what to do. The CLI
prints that message (no traceback) and exits non-zero.
"""

from __future__ import annotations


class CodeActError(Exception):
    """Root of every error the codeact package raises."""


class ConfigError(CodeActError):
    """Bad or missing configuration (an option, an environment variable, a config file)."""


class ToolError(CodeActError):
    """A problem with a tool definition or a tool call."""


class ToolDefinitionError(ToolError):
    """A function cannot be turned into a tool (unsupported type, bad name, ...)."""


class ToolArgumentError(ToolError):
    """Arguments given to a tool do not match its schema; the message says which and why."""


class UnknownToolError(ToolError):
    """A tool name that is not registered."""


class ApprovalDenied(ToolError):
    """A human (or the approval callback) refused a tool call."""


class ModelError(CodeActError):
    """The model endpoint failed."""


class ModelAuthError(ModelError):
    """401/403: the API key is missing or wrong."""


class ModelNotFoundError(ModelError):
    """The endpoint does not serve the requested model."""


class ContextOverflowError(ModelError):
    """The prompt is longer than the model's context window."""


class ModelUnavailableError(ModelError):
    """The endpoint did not answer usefully after all retries (down, 5xx, 429, timeouts)."""


class ModelOutputError(ModelError):
    """The endpoint answered with something that is not a usable completion."""


class RunCancelled(CodeActError):
    """A run was cancelled by its caller."""
