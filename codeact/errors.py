"""Errors raised by the codeact package; all derive from :class:`CodeActError`.

Every error a user can cause carries a message that says what to do. The CLI
prints that message (no traceback) and exits non-zero.
"""

from __future__ import annotations

from typing import Any


class CodeActError(Exception):
    """Root of every error the codeact package raises."""


class ConfigError(CodeActError):
    """Bad or missing configuration (an option, an environment variable, a config file)."""


class OutputTypeError(ConfigError):
    """An ``output_type`` or output schema that cannot describe an answer (a type pydantic cannot validate or
    describe as JSON, a schema that is not a valid JSON Schema); raised before any sandbox starts."""


class OutputValidationError(CodeActError):
    """A value does not fit a run's output type (:meth:`codeact.output.OutputSpec.validate`).

    ``problems`` are :class:`codeact.output.AnswerProblem` (where, what); ``errors`` the same as text lines.
    """

    def __init__(self, problems: list[Any]) -> None:
        self.problems = list(problems)
        self.errors = [str(p) for p in self.problems]
        super().__init__("; ".join(self.errors))


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


class AgentToolError(ToolError):
    """A child agent called as a tool (``agent.as_tool``) did not succeed, or could not be called.

    ``status`` is the child run's status (``error``, ``max_steps``, ``budget_exceeded``...) or ``refused``
    when no child run started (depth limit, a cycle, too many calls at once); ``run_id`` the child run's id.
    """

    def __init__(self, message: str, *, agent: str = "", status: str = "error", run_id: str | None = None,
                 error: str | None = None) -> None:
        super().__init__(message)
        self.agent, self.status, self.run_id, self.error = agent, status, run_id, error


class BudgetExceeded(CodeActError):
    """A run budget (``RunLimits.max_model_calls``, ``max_tokens``, ``max_cost``) is spent, for the run and the
    agents it called; the run ends with status ``budget_exceeded`` and this message says what went where."""


class ModelError(CodeActError):
    """The model endpoint failed.

    ``reason`` names the kind of failure for code that sorts failures (the
    benchmark does): ``unreachable``, ``timeout``, ``rate_limit``,
    ``server_error``, ``bad_reply``, ``auth``, ``not_found``,
    ``context_overflow``, ``refused`` (another 4xx) or ``error``.
    """

    reason: str = "error"

    def __init__(self, *args: object, reason: str | None = None) -> None:
        super().__init__(*args)
        if reason is not None:
            self.reason = reason


class ModelAuthError(ModelError):
    """401/403: the API key is missing or wrong."""

    reason = "auth"


class ModelNotFoundError(ModelError):
    """The endpoint does not serve the requested model."""

    reason = "not_found"


class ContextOverflowError(ModelError):
    """The prompt is longer than the model's context window.

    ``limit`` is the window and ``requested`` the tokens the request needed, as the endpoint
    named them, when it did (None otherwise): the prompt's, plus the completion's room when the
    endpoint counts that too (OpenAI and vLLM do when ``max_tokens`` is set). A prompt must lose
    at least ``requested - limit`` tokens to fit.
    """

    reason = "context_overflow"

    def __init__(self, message: str, *, limit: int | None = None, requested: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit
        self.requested = requested

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only numbers survive pickling (Ray sends errors between processes).
        return (_rebuild_overflow, (type(self), str(self), self.limit, self.requested), self.__dict__)


class ModelUnavailableError(ModelError):
    """The endpoint did not answer usefully after all retries (down, 5xx, 429, timeouts); ``reason`` says which."""

    reason = "unreachable"


class ModelOutputError(ModelError):
    """The endpoint answered with something that is not a usable completion."""

    reason = "bad_reply"


class RunCancelled(CodeActError):
    """A run was cancelled by its caller."""


class MCPServerError(CodeActError):
    """An MCP server could not be started or reached, or went away; the message names it and quotes its stderr."""

    def __init__(self, message: str, *, server: str = "", stderr: str = "") -> None:
        super().__init__(message)
        self.server = server
        self.stderr = stderr


class MCPToolError(ToolError):
    """An MCP tool reported an error (``isError``); the message is the server's."""


class UIError(CodeActError):
    """A request the web UI (``codeact ui``) cannot serve; the message, shown on the page, says why.

    ``status`` is the HTTP status the server answers with.
    """

    status = 400


class SessionNotFound(UIError):
    """No open UI session has this id (closed, or never existed)."""

    status = 404


class SessionBusy(UIError):
    """The UI session is running a turn; the request must wait until it ends (or Stop is pressed)."""

    status = 409


class SessionLimitReached(UIError):
    """As many UI sessions are open as ``--max-sessions`` allows; close one first."""

    status = 429


class UploadTooLarge(UIError):
    """An uploaded file is larger than the UI's upload limit (``--upload-limit``)."""

    status = 413


class RequestTooLarge(UIError):
    """A request body of the web UI's JSON API is larger than it accepts (a message, a schema, code)."""

    status = 413


class RunLogError(CodeActError):
    """The run log database cannot be opened, read or written."""


class RunNotFound(CodeActError, KeyError):
    """No run matches the given id or prefix, or the prefix matches several runs.

    It is also a :class:`KeyError`, so ``except KeyError`` works for callers
    that treat the log like a mapping.
    """

    def __init__(self, message: str, candidates: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: Run ids the caller may have meant (closest matches or the ambiguous ones).
        self.candidates: list[str] = list(candidates or [])

    def __str__(self) -> str:
        # KeyError.__str__ would print the repr of the message (quoted).
        return self.message


class AmbiguousRunId(RunNotFound):
    """A run id prefix matches more than one run."""


class BenchError(CodeActError):
    """A benchmark cannot run or report: a bad suite, task, option or results directory; the message says which."""


class RayUnavailable(BenchError):
    """A sweep asked for Ray (``--ray``), but the ``ray`` package is not installed: ``pip install 'codeact[ray]'``."""


class SavedSessionError(CodeActError):
    """A chat session cannot be saved or resumed (no run log, no kernel, a missing or foreign snapshot file)."""


class SkillError(CodeActError):
    """A skill cannot be saved, found or removed (bad name, too large, not a function, unknown)."""


def _rebuild_overflow(
    cls: type[ContextOverflowError], message: str, limit: int | None, requested: int | None
) -> ContextOverflowError:
    return cls(message, limit=limit, requested=requested)
