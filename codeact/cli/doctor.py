"""``codeact doctor``: what works here and what to fix."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from .. import __version__
from .. import config as cfg

from ._app import (
    CONTEXT_SETTINGS,
    cli,
    model_options,
    db_option,
    message_for,
    runtime_option,
    runtime_setting,
)


class _Checks:
    def __init__(self) -> None:
        self.results: dict[str, str] = {}

    def report(self, key: str, status: str, what: str, detail: str, fix: str = "") -> None:
        self.results[key] = status
        colour = {"OK": "green", "FAIL": "red", "WARN": "yellow", "INFO": "cyan"}[status]
        click.secho(f"{status:<4}", fg=colour, bold=True, nl=False)
        click.echo(f"  {what}: {detail}")
        if fix and status != "OK":
            click.secho(f"      → {fix}", fg=colour)


def _check_engines(checks: _Checks, tag: str) -> None:
    """Every engine of ``$CODEACT_ENGINES``: reachable, version, free capacity, the image."""
    from sandbox.engines import ENGINES_ENV, load_engines
    from sandbox.errors import SandboxError

    try:
        engines = load_engines()
    except SandboxError as exc:
        checks.report("engines", "FAIL", "engine pool", str(exc), f"fix {ENGINES_ENV} (see README: Scaling out)")
        return
    if not engines:
        return
    from sandbox.engines import connect

    down = 0
    for engine in engines:
        key = f"engine:{engine.name}"
        try:
            client = connect(engine, timeout=5)
        except Exception as exc:
            down += 1
            checks.report(key, "WARN", f"engine {engine.name}", str(exc).split("; ")[0],
                          "start it or fix its URL/TLS files; sessions go to the other engines meanwhile")
            continue
        try:
            version = client.version().get("Version", "?")
            from sandbox.container import LABEL

            busy = len(client.api.containers(filters={"label": LABEL}))
            from sandbox.image import image_exists

            image = "image present" if image_exists(tag, client) else "image not there yet (copied on first use)"
            checks.report(key, "OK", f"engine {engine.name}",
                          f"{engine.url}: Docker {version}, {max(0, engine.max_sessions - busy)}/{engine.max_sessions} "
                          f"sessions free, {image}")
        finally:
            client.close()
    if down == len(engines):
        checks.report("engines", "FAIL", "engine pool", f"none of the {len(engines)} engines in {ENGINES_ENV} answers",
                      "start at least one engine")


#: Seconds per request to the model endpoint. A local server that answers one request at a time
#: (llama.cpp's Python server) makes even GET /models wait for the reply it is generating.
_ENDPOINT_TIMEOUT = 30.0


def _check_model(checks: _Checks, model: str | None, base_url: str | None, api_key: str | None) -> None:
    name = cfg.model_name(model)
    url = cfg.base_url(base_url)
    if not name:
        checks.report("model", "WARN", "model", "not configured (CODEACT_MODEL is unset)",
                      "set CODEACT_MODEL (and OPENAI_BASE_URL / OPENAI_API_KEY for your endpoint) or pass --model; "
                      "`codeact demo` works without one")
        return
    from ..errors import ConfigError, ModelError, ModelNotFoundError
    from ..models import API_KEY_ENV, OpenAIModel

    where = f"{name} at {url}"
    try:
        m = OpenAIModel(name, base_url=base_url or None, api_key=api_key or None, timeout=_ENDPOINT_TIMEOUT,
                        max_retries=0, max_tokens=1)
    except ConfigError as exc:  # no API key for the default endpoint: nothing to ask
        checks.report("model", "FAIL", "model", f"{where}: {exc}", f"set {API_KEY_ENV} or OPENAI_BASE_URL")
        return
    try:
        try:
            ids = m.list_models()
        except ModelNotFoundError:
            ids = None  # the server has no /models; ask for one token instead
        if ids is None:
            from ..messages import Message

            m.complete([Message("user", "Reply with OK.")])
            checks.report("model", "OK", "model", f"{where} answered a 1-token completion")
        elif name in ids:
            checks.report("model", "OK", "model", f"{where} (listed by GET /models)")
        else:
            listed = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
            checks.report("model", "WARN", "model", f"the endpoint answers but does not list {name!r} "
                          f"({len(ids)} models: {listed or 'none'})",
                          "check the model name (GET /models lists what the server serves)")
    except ModelError as exc:
        checks.report("model", "FAIL", "model", f"{where}: {exc}",
                      "check OPENAI_BASE_URL, OPENAI_API_KEY and that the server is running")
        return
    finally:
        m.close()
    if checks.results.get("model") != "OK":
        return
    _check_window(checks, name, base_url, api_key)
    _check_images(checks, name, base_url, api_key)


def _check_window(checks: _Checks, name: str, base_url: str | None, api_key: str | None) -> None:
    """The model's context window, as a run discovers it (the endpoint's model list)."""
    from ..models import OpenAIModel

    m = OpenAIModel(name, base_url=base_url or None, api_key=api_key or None, timeout=_ENDPOINT_TIMEOUT,
                    max_retries=0)
    try:
        window = m.discover_context_window()
    finally:
        m.close()
    if window is not None:
        checks.report("window", "OK", "context window", f"{window:,} tokens (stated by GET /models)")
    else:
        checks.report("window", "INFO", "context window",
                      "unknown: GET /models does not state it; a run learns it from the first request the server "
                      "refuses as too long, then folds the conversation to fit",
                      "to fold before that, give it: OpenAIModel(..., context_window=N) with the server's window "
                      "(llama.cpp -c/--n_ctx, Ollama num_ctx, vLLM --max-model-len)")


#: A 1x1 transparent PNG: the image part of the probe request.
_PIXEL_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6300010000050001" "0d0a2db40000000049454e44ae426082")


def _check_images(checks: _Checks, name: str, base_url: str | None, api_key: str | None) -> None:
    """Whether the endpoint takes image parts: one tiny request with a 1x1 PNG, as a run sends plots."""
    import warnings

    from ..errors import ModelError
    from ..messages import ImagePart, Message
    from ..models import OpenAIModel

    m = OpenAIModel(name, base_url=base_url or None, api_key=api_key or None, timeout=_ENDPOINT_TIMEOUT, max_retries=0,
                    max_tokens=1, vision=True)
    pixel = ImagePart(_PIXEL_PNG, width=1, height=1, name="pixel.png")
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            m.complete([Message("user", "Reply with OK.", images=(pixel,))])
    except ModelError as exc:
        checks.report("images", "WARN", "images", f"not known: the request with a 1x1 PNG failed: {exc}",
                      "check the server's log; --no-images (CODEACT_IMAGES=0) sends text only")
        return
    finally:
        m.close()
    if m.vision:
        checks.report("images", "OK", "images", "accepted (a request with a 1x1 PNG image part was answered)")
        return
    why = next((str(w.message) for w in said if "does not take images" in str(w.message)), "")
    why = why.split(" does not take images (", 1)[-1].split("; sending text only", 1)[0].rstrip(")")
    why = why if len(why) <= 200 else why[:199] + "…"
    checks.report("images", "INFO", "images",
                  f"refused ({why}); a run sends its plots as text lines instead, after one failed request",
                  "--no-images (CODEACT_IMAGES=0) skips that request; for plots the model sees, serve a vision "
                  "model (llama.cpp: a multimodal chat format with --clip_model_path; Ollama: a vision model; "
                  "vLLM: a multimodal model)")


@cli.command(context_settings=CONTEXT_SETTINGS)
@model_options
@db_option
@click.option("--mcp", "mcp_files", multiple=True, metavar="FILE", type=click.Path(dir_okay=False),
              help="Also check the MCP servers of this mcpServers JSON file (repeatable).")
@click.option("--mcp-server", "mcp_specs", multiple=True, metavar="NAME=COMMAND",
              help="Also check this MCP server (repeatable).")
@runtime_option
def doctor(model: str | None, base_url: str | None, api_key: str | None, db: str | None,
           mcp_files: tuple[str, ...] = (), mcp_specs: tuple[str, ...] = ()) -> None:
    """Check this machine: Python, Docker, the sandbox image, the local kernel, the model, the run log.

    Exit status 0 when no check FAILs (WARN and INFO are fine); 1 otherwise.
    """
    import importlib.util
    import platform

    checks = _Checks()
    click.echo(f"codeact {__version__} ({Path(__file__).parent})")
    py = sys.version_info
    if py >= (3, 10):
        checks.report("python", "OK", "Python", f"{platform.python_version()} ({sys.executable})")
    else:
        checks.report("python", "FAIL", "Python", platform.python_version(), "codeact needs Python 3.10 or newer")

    # Docker engine and image.
    from sandbox.errors import BackendUnavailable

    client = None
    try:
        from sandbox.container import docker_client

        client = docker_client(timeout=5)
        version = client.version().get("Version", "?")
        checks.report("docker", "OK", "Docker engine", f"answers (server {version})")
        _check_limits(checks, client)
    except BackendUnavailable as exc:
        checks.report("docker", "FAIL", "Docker engine", str(exc).split("; ")[0], cfg.docker_fix_hint())
    except Exception as exc:
        checks.report("docker", "FAIL", "Docker engine", f"{type(exc).__name__}: {exc}", "check the Docker engine")
    from sandbox.image import default_image_tag, image_exists

    tag = default_image_tag()
    if client is None:
        checks.report("image", "FAIL", "sandbox image", f"{tag}: cannot check without a Docker engine",
                      "start Docker, then `codeact image build`")
    else:
        try:
            if image_exists(tag, client):
                checks.report("image", "OK", "sandbox image", f"{tag} is present")
            else:
                checks.report("image", "FAIL", "sandbox image", f"{tag} is not built", "run `codeact image build`")
        except Exception as exc:
            checks.report("image", "FAIL", "sandbox image", f"{tag}: {exc}", "run `codeact image build`")

    _check_engines(checks, tag)

    # Local kernel.
    missing = [m for m in ("ipykernel", "jupyter_client") if importlib.util.find_spec(m) is None]
    if missing:
        checks.report("local", "FAIL", "local kernel", f"{', '.join(missing)} not importable",
                      f"pip install {' '.join(missing)}")
    else:
        import importlib.metadata as md

        data = [m for m in ("pandas", "matplotlib") if importlib.util.find_spec(m) is None]
        extra = f"; {', '.join(data)} missing for data analysis (pip install 'codeact[data]')" if data else ""
        checks.report("local", "OK", "local kernel", f"ipykernel {md.version('ipykernel')} importable{extra}")

    _check_model(checks, model, base_url, api_key)
    if mcp_files or mcp_specs:
        _check_mcp(checks, mcp_files, mcp_specs)

    # Run log.
    path = cfg.db_path(db)
    try:
        import sqlite3

        from ..runlog import RunLog

        RunLog(path).close()
        conn = sqlite3.connect(str(path), timeout=5)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
        finally:
            conn.close()
        checks.report("log", "OK", "run log", f"{path} is writable")
    except Exception as exc:
        checks.report("log", "FAIL", "run log", f"{path}: {message_for(exc)}",
                      "pass --db PATH or set CODEACT_DB to a writable location")

    if client is not None:
        _check_isolation_extras(checks, client)
        runtime = runtime_setting()
        if runtime is not None and checks.results.get("image") == "OK":
            _check_runtime(checks, client, runtime)

    docker_ok = checks.results.get("docker") == "OK" and checks.results.get("image") == "OK"
    local_ok = checks.results.get("local") == "OK"
    failed = [key for key, status in checks.results.items() if status == "FAIL"]
    if docker_ok:
        click.secho("Ready: code runs in the Docker sandbox.", fg="green", bold=True)
    else:
        click.secho("Not ready: the Docker sandbox (the default) cannot run code here; fix what is marked "
                    "above.", fg="red", bold=True)
        if local_ok:
            click.echo("Code can run WITHOUT isolation if you choose it: --backend local (or CODEACT_BACKEND=local).")
    if failed:
        click.secho(f"{len(failed)} check{'s' if len(failed) != 1 else ''} FAILED: {', '.join(failed)}.",
                    fg="red", bold=True)
    raise click.exceptions.Exit(1 if failed else 0)


def _check_mcp(checks: _Checks, files: tuple[str, ...], specs: tuple[str, ...]) -> None:
    """Start each configured MCP server, list its tools, time it; say what to fix."""
    from ..errors import CodeActError
    from ..mcp import MCPToolset
    from ..terminal import safe
    from .mcp import mcp_servers

    try:
        servers = mcp_servers(files, specs)
    except CodeActError as exc:
        checks.report("mcp", "FAIL", "MCP configuration", message_for(exc), "fix the file or option named above")
        return
    for server in servers:
        key = f"mcp:{server.name}"
        with MCPToolset([server], on_error="skip") as toolset:
            (status,) = toolset.status()
        if status.ok:
            names = ", ".join(status.tools[:8]) + (", ..." if len(status.tools) > 8 else "")
            checks.report(key, "OK", f"MCP server {server.name}",
                          safe(f"{len(status.tools)} tools in {status.list_seconds:.1f} s ({names})"))
        else:
            checks.report(key, "FAIL", f"MCP server {server.name}", safe(status.error or "not connected"),
                          f"check {server.where}: the command, its arguments and environment (run it by hand to see)")


def _check_limits(checks: _Checks, client: Any) -> None:
    """The engine holds a container's memory and process limits (a rootless one on cgroup v1 ignores them)."""
    from sandbox.engines import limits_ignored

    ignored = limits_ignored(client)
    if ignored:
        checks.report("limits", "FAIL", "resource limits", f"the engine would ignore them: {ignored}",
                      "use a rootful engine, or a cgroup v2 host that delegates the memory and pids controllers "
                      "to your user (sandboxes refuse to start on this one)")
    else:
        checks.report("limits", "OK", "resource limits", "the engine holds memory and process limits")


def _check_isolation_extras(checks: _Checks, client: Any) -> None:
    """Optional hardening of the engine: user-namespace remapping and gVisor (informational)."""
    try:
        info = client.info()
    except Exception:
        return
    security = " ".join(info.get("SecurityOptions") or [])
    if "userns" in security:
        checks.report("userns", "OK", "user namespaces", "the engine remaps container users (userns-remap)")
    else:
        checks.report("userns", "INFO", "user namespaces", "not enabled (containers' uid 1000 is the host's uid 1000)",
                      'optional: "userns-remap": "default" in /etc/docker/daemon.json (see README, Security)')
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    default = info.get("DefaultRuntime") or "runc"
    checks.report("runtimes", "INFO", "container runtimes",
                  f"{', '.join(runtimes) or '?'} (default {default}; choose one with --runtime or "
                  f"{cfg.RUNTIME_ENV})")
    if "runsc" in runtimes:
        checks.report("gvisor", "OK", "gVisor", "runtime runsc is installed: --runtime runsc, "
                      "DockerSandbox(runtime='runsc')")
    else:
        checks.report("gvisor", "INFO", "gVisor", f"not installed (runtimes: {', '.join(runtimes) or '?'})",
                      "optional: install gVisor for a second kernel boundary (see README, Security)")


# --------------------------------------------------------------------------- image


def _check_runtime(checks: _Checks, client: Any, runtime: str) -> None:
    """The chosen runtime: the engine has it, and a sandbox starts with it and runs code."""
    import time

    from sandbox import runtime_problem

    problem = runtime_problem(runtime, client)
    if problem is not None:
        what, _, fix = problem.partition("; ")
        checks.report("runtime", "FAIL", f"runtime {runtime}", what, fix)
        return
    from sandbox import DockerSandbox

    started = time.perf_counter()
    try:
        with DockerSandbox(client=client, runtime=runtime, timeout=60) as sb:
            result = sb.run("print(6 * 7)")
        ok = result.ok and result.stdout.strip() == "42"
        detail = "" if ok else (str(result.error) if result.error else result.stdout[:200])
    except Exception as exc:
        ok, detail = False, message_for(exc)
    if ok:
        checks.report("runtime", "OK", f"runtime {runtime}",
                      f"a sandbox started and ran code in {time.perf_counter() - started:.1f} s")
    else:
        checks.report("runtime", "FAIL", f"runtime {runtime}", f"a sandbox did not run code: {detail}",
                      "see the engine's log (and for runsc its --debug-log); `docker run --rm --runtime "
                      f"{runtime} hello-world` reproduces it outside codeact")
