"""The ``codeact`` command group, its error handling and the options commands share.

Only click and the standard library are imported here, so that ``codeact
--help`` starts fast; each command imports what it needs when it runs.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, get_args

import click

from .. import __version__
from .. import config as cfg
from ..errors import CodeActError, ConfigError, ToolDefinitionError, UnknownToolError
from ..events import RunStatus

if TYPE_CHECKING:  # pragma: no cover
    from ..events import Event, RunResult
    from .render import Renderer
    from ..runlog import RunLog

BACKENDS = ("docker", "local", "restricted", "auto")
#: Every run status (``codeact logs --status``).
STATUSES: tuple[str, ...] = get_args(RunStatus)
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


# --------------------------------------------------------------------------- errors


class UserError(click.ClickException):
    """An error the user can fix; printed as one line. ``exit_code`` 1 unless given."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        # click types exit_code as a ClassVar yet reads it from the instance; each UserError carries its own code
        self.exit_code = exit_code  # type: ignore[misc]


class RunCancelledByUser(Exception):
    """Ctrl-C during a run; the run was logged as cancelled."""

    def __init__(self, run_id: str | None, during_code: bool) -> None:
        super().__init__(run_id or "")
        self.run_id = run_id
        self.during_code = during_code


def error_line(message: str) -> None:
    from ..terminal import safe

    message = safe(message)  # error messages can carry text from the sandbox
    message = " ".join(str(message).split()) if "\n" not in str(message).strip() else str(message).strip()
    click.secho("Error: ", fg="red", bold=True, err=True, nl=False)
    click.secho(message, fg="red", err=True)


def _is_from(exc: BaseException, root: str, package: str) -> bool:
    """True when ``exc`` derives from a class named ``root`` defined in ``package`` (no import needed)."""
    return any(c.__name__ == root and c.__module__.split(".")[0] == package for c in type(exc).__mro__)


def _exit_code_for(exc: BaseException) -> int:
    if isinstance(exc, (ConfigError, ToolDefinitionError, UnknownToolError)):
        return 2
    return 1


def message_for(exc: BaseException) -> str:
    if isinstance(exc, CodeActError) or _is_from(exc, "SandboxError", "sandbox"):
        return str(exc) or type(exc).__name__
    if _is_from(exc, "DockerException", "docker"):
        return f"Docker: {exc}"
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return (f"unexpected {type(exc).__name__}: {exc} "
            f"(probably a bug in codeact; set {cfg.DEBUG_ENV}=1 to see the traceback)")


class CodeActGroup(click.Group):
    """The root group: turns every exception into one ``Error:`` line and an exit code."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        import warnings

        code: int
        previous_showwarning = warnings.showwarning
        warnings.showwarning = _show_warning
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                              standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else 0
        except click.exceptions.Abort:
            click.secho("Aborted.", fg="yellow", err=True)
            code = 130
        except click.UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError" and exc.ctx is not None:  # `codeact`, `codeact image`
                click.echo(exc.ctx.get_help())
                code = 0
                return self._finish(code, standalone_mode)
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            error_line(exc.format_message() + hint)
            code = exc.exit_code
        except click.ClickException as exc:
            error_line(exc.format_message())
            code = exc.exit_code
        except KeyboardInterrupt:
            click.secho("Interrupted.", fg="yellow", err=True)
            code = 130
        except Exception as exc:  # the one place that reports everything
            if cfg.debug_enabled():
                import traceback

                traceback.print_exc()
            error_line(message_for(exc))
            code = _exit_code_for(exc)
        finally:
            warnings.showwarning = previous_showwarning
            telemetry = sys.modules.get("codeact.telemetry")
            if telemetry is not None:  # only when something used it: flush the spans still queued
                telemetry.shutdown()
        return self._finish(code, standalone_mode)

    @staticmethod
    def _finish(code: int, standalone_mode: bool) -> int:
        if standalone_mode:
            sys.exit(code)
        return code


def _show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                  line: Any = None) -> None:
    click.secho(f"Warning: {message}", fg="yellow", err=True)


# --------------------------------------------------------------------------- the group


@click.group(cls=CodeActGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "-V", "--version", prog_name="codeact", message="%(prog)s %(version)s")
@click.option("--otel", is_flag=True,
              help="Send OpenTelemetry traces over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT, default localhost:4318); "
                   "needs codeact[otel]. The OTEL_* variables alone turn it on too. See docs/observability.md.")
def cli(otel: bool = False) -> None:
    """codeact: an LLM agent that acts by writing Python.

    The model answers with Python code that calls your tools as ordinary
    functions; the code runs in an isolated, stateful Jupyter kernel (Docker
    by default) and what it prints is the model's next observation.

    \b
    Quick start:
      codeact doctor                        check Docker, the sandbox image, the model
      codeact demo                          a data-analysis run (works without a model)
      codeact run "How many rows in data.csv?" --file data.csv
      codeact chat --tools mytools.py:ALL   a multi-turn session
      codeact logs                          recent runs; `codeact logs show ID`

    \b
    Environment: CODEACT_MODEL, OPENAI_BASE_URL, OPENAI_API_KEY (the model);
    CODEACT_DB (run log); CODEACT_OUTPUT_DIR (artifacts); CODEACT_RUNTIME (e.g. runsc: gVisor);
    CODEACT_IMAGES=0, CODEACT_CONTEXT_WINDOW, CODEACT_CONDENSER (what the model gets);
    CODEACT_DEBUG=1 (tracebacks).
    """
    if otel:
        from .. import telemetry

        telemetry.configure()


# --------------------------------------------------------------------------- shared options


def model_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--api-key", metavar="KEY", help="API key [env: OPENAI_API_KEY].")(f)
    f = click.option("--base-url", metavar="URL",
                     help="OpenAI-compatible API root, e.g. http://localhost:11434/v1 [env: OPENAI_BASE_URL].")(f)
    f = click.option("-m", "--model", metavar="NAME", help="Model name [env: CODEACT_MODEL].")(f)
    return f


#: Where ``--runtime`` leaves its value for :func:`runtime_setting`.
RUNTIME_META = "codeact.runtime"


def runtime_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--runtime NAME``: the Docker engine's container runtime for the sandbox; :func:`runtime_setting` reads it."""
    def store(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value:
            ctx.meta[RUNTIME_META] = value

    return click.option(
        "--runtime", metavar="NAME", expose_value=False, callback=store,
        help="Container runtime of the Docker sandbox, as the engine names it: runsc (gVisor: a second kernel "
             "boundary, slower per call; see README, Security) or runc [default: the engine's; "
             f"env: {cfg.RUNTIME_ENV}].")(f)


def runtime_setting(backend: str = "docker", ctx: click.Context | None = None) -> str | None:
    """The runtime from ``--runtime`` or ``$CODEACT_RUNTIME`` (None: the engine's default).

    Raises:
        ConfigError: not a runtime name, or one given with a backend other than docker.
    """
    ctx = ctx or click.get_current_context(silent=True)
    value = None
    while ctx is not None and value is None:
        value = ctx.meta.get(RUNTIME_META)
        ctx = ctx.parent
    return cfg.runtime(value, backend=backend)


def backend_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--backend`` and ``--runtime`` (the latter read with :func:`runtime_setting`)."""
    f = runtime_option(f)
    return click.option(
        "-b", "--backend", type=click.Choice(BACKENDS), default=None,
        help="Sandbox: docker (the default: isolated; an error if Docker is not ready), local (a kernel "
             "process; NOT isolated), restricted (RestrictedPython in-process; NOT isolated) [env: CODEACT_BACKEND].",
    )(f)


def db_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--db", metavar="PATH", type=click.Path(dir_okay=False),
                        help="Run log database [env: CODEACT_DB].")(f)


#: Where ``--allow-mcp-tools`` leaves its value for :func:`codeact.cli.mcp.open_mcp`.
MCP_META = "codeact.mcp"


def _allow_mcp_tools(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    ctx.meta.setdefault(MCP_META, {})["allow_all_tools"] = bool(value)


def mcp_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--mcp FILE``, ``--mcp-server NAME=COMMAND``, ``--mcp-on-error`` and ``--allow-mcp-tools``
    (see codeact.cli.mcp.open_mcp)."""
    f = click.option("--allow-mcp-tools", is_flag=True, expose_value=False, callback=_allow_mcp_tools,
                     help="Let every MCP tool run without asking (warns). Default: tools the server marks "
                          "read-only run, others ask (and are refused without a terminal) unless listed in "
                          "their server's \"alwaysAllow\".")(f)
    f = click.option("--mcp-on-error", type=click.Choice(["stop", "skip"]), default="stop", show_default=True,
                     help="When an MCP server cannot start: stop with an error, or skip it and go on.")(f)
    f = click.option("--mcp-server", "mcp_specs", multiple=True, metavar="NAME=COMMAND",
                     help='An MCP server whose tools the agent may call, e.g. "time=mcp-server-time" or '
                          '"tasks=http://127.0.0.1:8000/mcp" (repeatable).')(f)
    f = click.option("--mcp", "mcp_files", multiple=True, metavar="FILE", type=click.Path(dir_okay=False),
                     help="An mcpServers JSON file (as Claude Desktop and Cursor use): the servers' tools "
                          "become functions in the sandbox (repeatable).")(f)
    return f


#: Where package options (``--packages`` and the policy options) leave their values for :func:`make_agent`.
PACKAGES_META = "codeact.packages"


def _package_option(key: str, many: bool = False) -> Callable[[click.Context, click.Parameter, Any], None]:
    def store(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        meta = ctx.meta.setdefault(PACKAGES_META, {})
        if many:
            meta[key] = [part.strip() for item in value or () for part in str(item).split(",") if part.strip()]
        else:
            meta[key] = value
    return store


def package_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--packages`` and the package policy options; :func:`make_agent` reads them (they are not arguments)."""
    f = click.option("--max-packages-size", metavar="MB", type=click.FloatRange(min=0), expose_value=False,
                     callback=_package_option("max_mb"),
                     help="Megabytes of packages one sandbox may add in all (default: 2 GiB).")(f)
    f = click.option("--deny-package", metavar="PATTERN", multiple=True, expose_value=False,
                     callback=_package_option("deny", many=True),
                     help="Never install packages matching PATTERN, e.g. 'torch*' (repeatable).")(f)
    f = click.option("--allow-package", metavar="PATTERN", multiple=True, expose_value=False,
                     callback=_package_option("allow", many=True),
                     help="Install only packages matching a PATTERN, dependencies included (repeatable).")(f)
    f = click.option("--offline", is_flag=True, expose_value=False, callback=_package_option("offline"),
                     help="Install packages only from --wheelhouse: no index is contacted.")(f)
    f = click.option("--wheelhouse", metavar="DIR", type=click.Path(exists=True, file_okay=False),
                     expose_value=False, callback=_package_option("wheelhouse"),
                     help="A directory of wheels to install packages from (the only source with --offline).")(f)
    f = click.option("--extra-index-url", metavar="URL", multiple=True, expose_value=False,
                     callback=_package_option("extra_index_urls", many=True),
                     help="Another package index for installs (repeatable).")(f)
    f = click.option("--index-url", metavar="URL", expose_value=False, callback=_package_option("index_url"),
                     help="Package index (a private mirror) for installs [default: the host pip's].")(f)
    f = click.option("--packages", metavar="LIST", multiple=True, expose_value=False,
                     callback=_package_option("packages", many=True),
                     help="Python packages to install in the sandbox before the run, e.g. scikit-learn,seaborn "
                          "(the host fetches them; the sandbox stays offline). The code can install more with "
                          "install(), which asks first unless --yes.")(f)
    return f


def package_settings(ctx: click.Context | None = None) -> dict[str, Any]:
    """CodeActAgent options from :func:`package_options`: packages, package_policy, approve_installs ({} without)."""
    ctx = ctx or click.get_current_context(silent=True)
    meta = None
    while ctx is not None and meta is None:
        meta = ctx.meta.get(PACKAGES_META)
        ctx = ctx.parent
    if meta is None:
        return {}
    from sandbox.packages import PackagePolicy

    max_mb = meta.get("max_mb")
    size_cap: dict[str, Any] = {"max_total_bytes": int(max_mb * 1e6)} if max_mb is not None else {}  # else the default
    policy = PackagePolicy(allow=tuple(meta.get("allow") or ()), deny=tuple(meta.get("deny") or ()),
                           index_url=meta.get("index_url"), extra_index_urls=tuple(meta.get("extra_index_urls") or ()),
                           wheelhouse=meta.get("wheelhouse"), offline=bool(meta.get("offline")), **size_cap)
    return {"packages": list(meta.get("packages") or ()), "package_policy": policy, "approve_installs": True}


#: Where the network options leave their values for :func:`network_settings`.
NETWORK_META = "codeact.network"
ALLOW_HOSTS_ENV = "CODEACT_ALLOW_HOSTS"
NETWORK_SECRETS_ENV = "CODEACT_NETWORK_SECRETS"


def network_options(allow_flag: str = "--allow-host") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--allow-host`` (``allow_flag``: ``codeact ui`` already has an ``--allow-host`` of its own) and
    ``--network-secrets``: the sandbox's network allow-list (read with :func:`network_settings`)."""
    def store(key: str) -> Callable[[click.Context, click.Parameter, Any], None]:
        def put(ctx: click.Context, param: click.Parameter, value: Any) -> None:
            if not value:
                return
            from sandbox.network import NetworkPolicy, NetworkPolicyError

            try:  # a bad pattern or file is said now, before anything starts
                NetworkPolicy.from_options(value if key == "allow" else (), None if key == "allow" else value)
            except NetworkPolicyError as exc:
                raise click.BadParameter(str(exc)) from None
            ctx.meta.setdefault(NETWORK_META, {})[key] = value
        return put

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        f = click.option("--network-secrets", metavar="FILE", type=click.Path(dir_okay=False),
                         envvar=NETWORK_SECRETS_ENV, expose_value=False, callback=store("secrets"),
                         help='A JSON file {"host": {"Header": "value"}}: headers the host-side proxy adds to the '
                              "code's requests to that host (which it allows); the sandbox never sees them. The "
                              f"code uses http:// URLs for these hosts; the proxy speaks HTTPS [env: "
                              f"{NETWORK_SECRETS_ENV}].")(f)
        f = click.option(allow_flag, "allow_network_hosts", metavar="PATTERN", multiple=True,
                         envvar=ALLOW_HOSTS_ENV, expose_value=False, callback=store("allow"),
                         help="A host the sandboxed code may reach over HTTP(S), e.g. api.example.com or "
                              "*.example.org (repeatable; docker backend). Everything else stays unreachable "
                              f"[env: {ALLOW_HOSTS_ENV}, comma-separated].")(f)
        return f
    return decorate


def network_settings(ctx: click.Context | None = None, *, backend: str | None = None) -> Any:
    """The :class:`sandbox.NetworkPolicy` of :func:`network_options`, or None without them."""
    ctx = ctx or click.get_current_context(silent=True)
    meta = None
    while ctx is not None and meta is None:
        meta = ctx.meta.get(NETWORK_META)
        ctx = ctx.parent
    if not meta:
        return None
    from sandbox.network import NetworkPolicy, NetworkPolicyError

    try:
        policy = NetworkPolicy.from_options(meta.get("allow") or (), meta.get("secrets"))
    except NetworkPolicyError as exc:
        raise ConfigError(f"network allow-list: {exc}") from None
    if policy is not None and backend is not None and backend != "docker":
        raise ConfigError(f"a network allow-list (--allow-host) needs the docker backend (the {backend} backend "
                          "has no network boundary to open)")
    return policy


#: Where ``--no-images`` leaves its value for :func:`images_setting`.
IMAGES_META = "codeact.no_images"


def images_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--no-images``: the model gets no images; :func:`images_setting` reads it (it is not an argument)."""
    def store(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value:
            ctx.meta[IMAGES_META] = True

    return click.option("--no-images", is_flag=True, expose_value=False, callback=store,
                        help="Send the model no images (plots the code shows, image files, tool images); "
                             "by default they go with the next observation [env: CODEACT_IMAGES=0].")(f)


def images_setting(ctx: click.Context | None = None) -> bool | None:
    """False after ``--no-images``; None otherwise (``$CODEACT_IMAGES`` decides, see :func:`config.images_enabled`)."""
    ctx = ctx or click.get_current_context(silent=True)
    return False if ctx is not None and ctx.meta.get(IMAGES_META) else None


#: Where ``--context-window`` and ``--condenser`` leave their values for :func:`compaction_settings`.
COMPACTION_META = "codeact.compaction"


def compaction_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--context-window N`` and ``--condenser fold|summary``; :func:`compaction_settings` reads them."""
    def store(key: str) -> Callable[[click.Context, click.Parameter, Any], None]:
        def put(ctx: click.Context, param: click.Parameter, value: Any) -> None:
            if value is not None:
                ctx.meta.setdefault(COMPACTION_META, {})[key] = value
        return put

    f = click.option("--condenser", type=click.Choice(cfg.CONDENSERS), default=None, expose_value=False,
                     callback=store("condenser"),
                     help="How old turns are folded when the history outgrows the window: fold (a \"session so "
                          "far\" block) or summary (the same, plus a summary the model writes; its calls count in "
                          f"the usage) [default: fold; env: {cfg.CONDENSER_ENV}].")(f)
    f = click.option("--context-window", type=click.IntRange(min=1024), default=None, metavar="TOKENS",
                     expose_value=False, callback=store("context_window"),
                     help="The model's context window in tokens, when the endpoint does not say it (compaction "
                          f"fits the history into it) [env: {cfg.CONTEXT_WINDOW_ENV}].")(f)
    return f


def compaction_settings(ctx: click.Context | None = None) -> tuple[int | None, str]:
    """(the context window, the condenser) from :func:`compaction_options` or their environment variables.

    Raises:
        ConfigError: a bad ``$CODEACT_CONTEXT_WINDOW`` or ``$CODEACT_CONDENSER``.
    """
    ctx = ctx or click.get_current_context(silent=True)
    meta = None
    while ctx is not None and meta is None:
        meta = ctx.meta.get(COMPACTION_META)
        ctx = ctx.parent
    meta = meta or {}
    return cfg.context_window(meta.get("context_window")), cfg.condenser(meta.get("condenser"))


#: Where the tool options (disclosure, skills, privacy) leave their values for :func:`make_agent`.
TOOLS_META = "codeact.tool_settings"


def _tool_option(key: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def store(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        ctx.meta.setdefault(TOOLS_META, {})[key] = value
    return store


def tool_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--tool-disclosure``, ``--tool-budget``, skills and privacy options; :func:`make_agent` reads them."""
    f = click.option("--private-field", metavar="TOOL=PATH", multiple=True, expose_value=False,
                     callback=_tool_option("private_fields"),
                     help="Hide a field of a tool's results from the model, e.g. get_customer=$.name "
                          "(a JSON path; repeatable).")(f)
    f = click.option("--private-images", is_flag=True, expose_value=False, callback=_tool_option("private_images"),
                     help="With --private / --private-field: send the model images too (figures, image files); "
                          "withheld by default, as an image may show what the filter hides.")(f)
    f = click.option("--private", metavar="PATTERN", multiple=True, expose_value=False,
                     callback=_tool_option("private"),
                     help="Show the model placeholders (<EMAIL_1>) instead of values matching PATTERN: email, "
                          "phone or LABEL=REGEX (repeatable). The sandbox keeps the real values; the run log "
                          "records placeholders.")(f)
    f = click.option("--no-skills", is_flag=True, expose_value=False, callback=_tool_option("no_skills"),
                     help="No skills: neither save_skill nor `from skills import ...`.")(f)
    f = click.option("--approve-skills", is_flag=True, expose_value=False, callback=_tool_option("approve_skills"),
                     help="Save the skills the code offers without asking (warns; --yes does not cover "
                          "skills: each save is asked on the terminal, and refused without one).")(f)
    f = click.option("--skills-dir", metavar="DIR", type=click.Path(file_okay=False), envvar="CODEACT_SKILLS_DIR",
                     expose_value=False, callback=_tool_option("skills_dir"),
                     help="Where skills are kept; give several projects the same DIR to share them "
                          "[default: this project's own store in the user data directory; "
                          "env: CODEACT_SKILLS_DIR].")(f)
    return disclosure_options(f)


def disclosure_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--tool-disclosure`` and ``--tool-budget`` (read with :func:`tool_settings`)."""
    f = click.option("--tool-budget", metavar="TOKENS", type=click.IntRange(min=0), default=None,
                     expose_value=False, callback=_tool_option("tool_budget"),
                     help="With --tool-disclosure auto: tokens of tool stubs the prompt may carry (default 2000).")(f)
    f = click.option("--tool-disclosure", type=click.Choice(["auto", "all", "on_demand", "on-demand"]),
                     default=None, expose_value=False, callback=_tool_option("tool_disclosure"),
                     help="Tools in the prompt: every stub (all), or a catalogue the code searches with "
                          "search_tools() (on_demand); auto picks all while the stubs fit --tool-budget "
                          "[default: auto].")(f)
    return f


def tool_settings(ctx: click.Context | None = None, *, backend: str | None = None) -> dict[str, Any]:
    """CodeActAgent options from :func:`tool_options` (tool_disclosure, tool_budget, skills, privacy)."""
    ctx = ctx or click.get_current_context(silent=True)
    meta = None
    while ctx is not None and meta is None:
        meta = ctx.meta.get(TOOLS_META)
        ctx = ctx.parent
    meta = meta or {}
    out: dict[str, Any] = {}
    if meta.get("tool_disclosure"):
        out["tool_disclosure"] = str(meta["tool_disclosure"]).replace("-", "_")
    if meta.get("tool_budget") is not None:
        out["tool_budget"] = int(meta["tool_budget"])
    if "no_skills" in meta and not meta["no_skills"] and backend != "restricted":
        from ..skills import SkillStore

        out["skills"] = store = SkillStore(meta.get("skills_dir") or None)
        if meta.get("approve_skills"):
            from ..terminal import safe

            click.secho(f"Warning: --approve-skills: functions the code offers are saved to {safe(store.path)} "
                        "without asking, and every later session with that store sees them.", fg="yellow", err=True)
    if meta.get("private") or meta.get("private_fields"):
        out["privacy"] = _privacy_filter(meta.get("private") or (), meta.get("private_fields") or (),
                                         send_images=bool(meta.get("private_images")))
    return out


def _privacy_filter(patterns: Sequence[str], fields: Sequence[str], *, send_images: bool = False) -> Any:
    from ..privacy import BUILTIN_PATTERNS, PrivacyFilter

    specs: list[Any] = []
    for item in patterns:
        if item in BUILTIN_PATTERNS:
            specs.append(item)
        elif "=" in item:
            label, _, regex = item.partition("=")
            specs.append((label.strip(), regex))
        else:
            raise click.BadParameter(f"{item!r}: give email, phone or LABEL=REGEX", param_hint="--private")
    by_tool: dict[str, list[str]] = {}
    for item in fields:
        tool, sep, path = item.partition("=")
        if not sep or not tool.strip() or not path.strip():
            raise click.BadParameter(f"{item!r}: give TOOL=PATH, e.g. get_customer=$.email",
                                     param_hint="--private-field")
        by_tool.setdefault(tool.strip(), []).append(path.strip())
    return PrivacyFilter(patterns=specs, fields=by_tool, send_images=send_images)


def agent_settings(*, backend: str | None = None) -> dict[str, Any]:
    """Every CodeActAgent option the command's option decorators stored (packages, tools, skills, privacy).

    Read it while the command runs (the click context is per thread) and hand it
    to :func:`make_agent` when agents are made later on other threads.
    """
    out = {**package_settings(), **tool_settings(backend=backend)}
    out["condenser"] = compaction_settings()[1]
    options: dict[str, Any] = {}
    runtime = runtime_setting(backend or "docker")
    if runtime:
        options["runtime"] = runtime
    policy = network_settings(backend=backend)
    if policy is not None:
        options["network"] = policy
    if options:
        out["sandbox_options"] = options
    return out


def agent_options(f: Callable[..., Any] | None = None, *, allow_flag: str = "--allow-host") -> Any:
    """The options of commands that run an agent (``@agent_options``, or ``@agent_options(allow_flag=...)`` where
    ``--allow-host`` means something else)."""
    if f is None:
        return lambda g: agent_options(g, allow_flag=allow_flag)
    f = network_options(allow_flag)(f)
    f = tool_options(f)
    f = package_options(f)
    f = mcp_options(f)
    f = click.option("--no-log", is_flag=True, help="Do not record the run in the run log.")(f)
    f = compaction_options(f)
    f = images_option(f)
    f = db_option(f)
    f = click.option("-o", "--output-dir", metavar="DIR", type=click.Path(file_okay=False),
                     help="Artifacts go to DIR/<run id>/ [env: CODEACT_OUTPUT_DIR].")(f)
    f = click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
                     metavar="S", help="Seconds one code action may run.")(f)
    f = click.option("--max-steps", type=click.IntRange(min=1), default=10, show_default=True,
                     help="Model turns before the run stops.")(f)
    f = click.option("-y", "--yes", is_flag=True,
                     help="Approve every call of tools that require approval, and every package install the "
                          "code asks for (default: ask; deny without a terminal). Not skill saves: "
                          "--approve-skills.")(f)
    f = backend_option(f)
    f = model_options(f)
    f = click.option("-t", "--tools", "tool_specs", multiple=True, metavar="SPEC",
                     help="Tools to offer: module:ALL, module:name1,name2 or path/to/file.py:ALL (repeatable).")(f)
    f = click.option("-f", "--file", "files", multiple=True,
                     type=click.Path(exists=True, dir_okay=False, readable=True),
                     help="A file to copy into the sandbox's working directory (repeatable).")(f)
    return f



def output_schema_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--output-schema FILE``: a JSON Schema the answers must match (read with :func:`load_output_schema`)."""
    return click.option(
        "--output-schema", "output_schema", metavar="FILE", type=click.Path(dir_okay=False),
        help="A JSON Schema file the answer must match (the model is shown it; an answer that does not match "
             "goes back to it, twice at most); the answer is shown as validated JSON. At most 64 KiB, 32 levels "
             "of nesting, 64 $refs (all inside the file).")(f)


def load_output_schema(path: str, option: str = "--output-schema") -> Any:
    """The :class:`~codeact.output.OutputSpec` of the JSON Schema in file ``path`` (bounds checked first, see
    :func:`codeact.output.schema_output`).

    Raises:
        ConfigError: the file cannot be read, is too large, is not JSON, or is not a valid JSON Schema; the
            message names ``option`` and the file.
    """
    from ..output import MAX_SCHEMA_BYTES, schema_output

    where = f"{option} {path}" if option else path
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_SCHEMA_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > MAX_SCHEMA_BYTES:
        raise ConfigError(f"{where}: the file is larger than {MAX_SCHEMA_BYTES:,} bytes (the largest output "
                          "schema accepted)")
    try:
        return schema_output(data)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


# --------------------------------------------------------------------------- helpers


def load_tools(specs: Sequence[str]) -> list[Any]:
    if not specs:
        return []
    from ..tools import ensure_tools, load_tools

    tools: list[Any] = []
    for spec in specs:
        tools.extend(load_tools(spec))
    return ensure_tools(tools)


def resolve_backend(backend: str | None, renderer: Renderer) -> str:
    """The backend to use: docker unless local or restricted is named; Docker's absence is an error."""
    name = cfg.backend(backend)
    if name != "docker":
        runtime_setting(name)  # a runtime needs the docker backend: say so rather than ignore it
        from sandbox import UNSAFE_BACKENDS

        renderer.notice(f"Note: the {name} backend is not isolated ({UNSAFE_BACKENDS[name]}); "
                        "use it only for trusted code.")
        return name
    from sandbox import docker_available

    reason = docker_available()
    if reason is not None:
        raise UserError(
            f"the Docker sandbox is not ready: {reason}; `codeact doctor` shows what to fix. To run code "
            f"WITHOUT isolation instead, choose it knowingly: --backend local (or {cfg.BACKEND_ENV}=local)"
        )
    check_runtime(runtime_setting(name))
    return "docker"


def check_runtime(runtime: str | None) -> None:
    """A named runtime must be one the Docker engine has: else one error that says what to do."""
    if runtime is None:
        return
    from sandbox import runtime_problem

    problem = runtime_problem(runtime)
    if problem is not None:
        raise UserError(f"{problem} (--runtime / {cfg.RUNTIME_ENV})")


def open_log(db: str | None, no_log: bool) -> RunLog | None:
    if no_log:
        return None
    from ..runlog import RunLog

    return RunLog(cfg.db_path(db))


def stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, AttributeError):
        return False


def skills_auto_approved(ctx: click.Context | None = None) -> bool:
    """The command was given ``--approve-skills`` (read on the command's thread)."""
    ctx = ctx or click.get_current_context(silent=True)
    while ctx is not None:
        meta = ctx.meta.get(TOOLS_META)
        if meta is not None:
            return bool(meta.get("approve_skills"))
        ctx = ctx.parent
    return False


def make_approver(renderer: Renderer, yes: bool) -> Callable[[Any], bool]:
    from .render import call_text, short
    from ._skill_prompt import approve_skill

    auto_skills = skills_auto_approved()

    def approve(request: Any) -> bool:
        from ..skills import SkillApproval

        if isinstance(request, SkillApproval):  # --yes does not cover code kept for later sessions
            return approve_skill(renderer, request, auto=auto_skills, interactive=stdin_is_tty())
        call = short(call_text(request.tool, request.arguments), 200)
        if yes:
            renderer.note(f"approved (--yes): {call}", style="yellow")
            return True
        if not stdin_is_tty():
            renderer.warning(f"denied {call}: {request.tool} requires approval and there is no terminal "
                             "to ask (pass --yes to approve such calls; for an MCP tool, list it in its "
                             "server's \"alwaysAllow\" or pass --allow-mcp-tools)")
            return False
        renderer.approval_request(request.tool, request.arguments, request.step, getattr(request, "agent", ""))
        try:
            allowed = click.confirm(f"Allow this call to {request.tool}?", default=False, err=True)
        except click.exceptions.Abort:
            allowed = False
        renderer.note(("approved: " if allowed else "denied: ") + call, style="green" if allowed else "yellow")
        renderer.wait(f"step {request.step}: running the code")
        return allowed

    return approve


@contextmanager
def sigint_guard(on_press: Callable[[], bool] | None = None) -> Iterator[None]:
    """First Ctrl-C raises KeyboardInterrupt; the next one is ignored while the run cleans up; a third forces.

    ``on_press`` sees each Ctrl-C first (on the main thread, inside the signal handler: it must not block,
    so it sets flags and starts threads); when it returns True it has handled the press and the run goes on.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    presses = [0]

    def handler(signum: int, frame: Any) -> None:
        if presses[0] == 0 and on_press is not None and on_press():
            return
        presses[0] += 1
        if presses[0] == 1:
            raise KeyboardInterrupt
        if presses[0] == 2:
            click.secho("Cancelling: closing the sandbox (press Ctrl-C again to force quit) ...", fg="yellow",
                        err=True)
            return
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def mark_cancelled(log: RunLog | None, run_id: str | None, task: str) -> None:
    """Record a run stopped by Ctrl-C as cancelled, unless the agent already did."""
    if log is None or run_id is None:
        return
    from ..events import RunFinished, RunResult

    try:
        if log.get_run(run_id).status != "running":
            return
        log.record(RunFinished(run_id=run_id, result=RunResult(
            run_id=run_id, task=task, status="cancelled", error="interrupted by the user (Ctrl-C)")))
    except Exception:  # never let the log hide the cancellation
        pass


def drive(events: Iterator[Event], renderer: Renderer | None, log: RunLog | None, task: str,
           *, quiet_renderer: Renderer | None = None, on_ctrl_c: Callable[[], bool] | None = None) -> RunResult:
    """Consume a run's events, rendering them; Ctrl-C cancels the run cleanly.

    ``on_ctrl_c`` may take a Ctrl-C over (see :func:`sigint_guard`): ``codeact chat`` interrupts the
    running code and keeps the session.
    """
    from ..events import CodeAction, ErrorEvent, Observation, RunFinished, RunStarted

    result: RunResult | None = None
    run_id: str | None = None
    in_code = False
    with sigint_guard(on_ctrl_c):
        try:
            for event in events:
                if isinstance(event, RunStarted):
                    run_id = event.run_id
                elif isinstance(event, CodeAction):
                    in_code = True
                elif isinstance(event, Observation):
                    in_code = False
                if renderer is not None:
                    renderer.event(event)
                elif quiet_renderer is not None and isinstance(event, ErrorEvent) and event.fatal:
                    quiet_renderer.error(event.message)
                if isinstance(event, RunFinished):
                    result = event.result
        except KeyboardInterrupt:
            for r in (renderer, quiet_renderer):
                if r is not None:
                    r.pause()
            close = getattr(events, "close", None)
            if close is not None:
                close()  # a suspended run: the agent logs it as cancelled and closes its sandbox
            mark_cancelled(log, run_id, task)
            raise RunCancelledByUser(run_id, in_code) from None
        finally:
            for r in (renderer, quiet_renderer):
                if r is not None:
                    r.close()
    assert result is not None, "the run ended without a RunFinished event"
    return result


def result_json(result: RunResult) -> str:
    import json

    from ..runlog import jsonable

    from ..terminal import safe_json

    data = jsonable(result)
    data["ok"] = result.ok
    return safe_json(json.dumps(data, ensure_ascii=False, indent=2))


def cancelled_message(exc: RunCancelledByUser, log: RunLog | None) -> str:
    if exc.run_id and log is not None:
        return f"Cancelled: run {exc.run_id} was stopped and logged as cancelled."
    return "Cancelled."


def engine_pool(timeout: float, runtime: str | None = None) -> Any:
    """An :class:`sandbox.EnginePool` over the engines in ``$CODEACT_ENGINES``, or None when unset.

    Without it, sandboxes go to the engine the ``docker`` CLI would use
    (``DOCKER_HOST``, ``DOCKER_TLS_VERIFY``, ``DOCKER_CERT_PATH``, the current context).
    """
    from sandbox.engine_pool import EnginePool
    from sandbox.engines import ENGINES_ENV, load_engines
    from sandbox.errors import SandboxError

    try:
        engines = load_engines()
    except SandboxError as exc:
        raise ConfigError(f"{ENGINES_ENV}: {exc}") from None
    if not engines:
        return None
    return EnginePool(engines, sandbox_options={"timeout": timeout, **({"runtime": runtime} if runtime else {})})


def make_agent(model: Any, tools: list[Any], backend: str, *, max_steps: int, timeout: float,
                output_root: Path, log: RunLog | None, approve: Callable[[Any], bool], stream: bool,
                settings: dict[str, Any] | None = None) -> Any:
    """The command's CodeActAgent; ``settings`` (:func:`agent_settings`) when called off the command's thread."""
    from ..agent import CodeActAgent

    options = settings if settings is not None else agent_settings(backend=backend)
    runtime = (options.get("sandbox_options") or {}).get("runtime")
    sandbox: Any = engine_pool(timeout, runtime) if backend == "docker" else backend
    return CodeActAgent(model, tools, sandbox=sandbox or backend, max_steps=max_steps, approve=approve,
                        log=log if log is not None else False, output_dir=output_root, stream_model=stream,
                        execution_timeout=timeout, **options)


def renderers(output_root: Path, as_json: bool = False) -> tuple[Renderer | None, Renderer]:
    """(renderer for the steps or None with --json, renderer for notes and errors)."""
    from rich.console import Console

    from .render import Renderer

    err = Console(stderr=True, highlight=False)
    if as_json:
        quiet = Renderer(console=err, err_console=err, output_root=output_root, live=False)
        return None, quiet
    r = Renderer(err_console=err, output_root=output_root)
    return r, r


# --------------------------------------------------------------------------- run
