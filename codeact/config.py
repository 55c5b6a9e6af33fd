"""Configuration the CLI resolves from options and the environment.

Order everywhere: a command-line option, then an environment variable, then
a default. The switches the library itself reads while it runs (images, the
artifact and snapshot directories, the model endpoint) live in
:mod:`codeact.settings`; they are re-exported here.

=========================  ===========================================================
``CODEACT_MODEL``          model name (``--model``)
``OPENAI_BASE_URL``        API root of an OpenAI-compatible endpoint (``--base-url``)
``OPENAI_API_KEY``         API key (``--api-key``)
``CODEACT_DB``             run log database (``--db``)
``CODEACT_OUTPUT_DIR``     where run artifacts go (``--output-dir``)
``CODEACT_SCRIPTED_REPLIES``  testing/replay: a JSON file holding a list of strings;
                           when set, ``run`` and ``chat`` replay these replies with a
                           :class:`~codeact.models.ScriptedModel` instead of calling a
                           model (no network, deterministic). Not for normal use.
``CODEACT_BACKEND``        sandbox backend (``--backend``): ``docker`` (default), or
                           ``local`` / ``restricted`` to choose an unisolated one knowingly
``CODEACT_RUNTIME``        the Docker engine's container runtime for the sandbox (``--runtime``), e.g.
                           ``runsc`` (gVisor, registered with the engine); default: the engine's own
``CODEACT_DEBUG``          ``1`` shows tracebacks instead of one-line errors
``CODEACT_SNAPSHOT_DIR``   where saved sessions go (``--snapshot-dir``; default
                           ``<user data dir>/codeact/snapshots``)
``CODEACT_SNAPSHOT_KEEP``  snapshots kept per session (``--keep-snapshots``; default 3, ``all`` keeps every one)
``CODEACT_IMAGES``         ``0`` sends the model no images (``--no-images``; default on: the plots and
                           images of a step go to the model with its observation)
``CODEACT_CONTEXT_WINDOW``  the model's context window in tokens (``--context-window``; default: what the
                           endpoint says, else unknown); compaction fits the history into it
``CODEACT_CONDENSER``      how old turns are folded (``--condenser``): ``fold`` (default) or ``summary``
                           (the model also writes a summary; its calls count in the run's usage)
``CODEACT_ALLOW_HOSTS``    hosts the sandboxed code may reach through the host's proxy (``--allow-host``;
                           space- or comma-separated; docker backend; see ``sandbox.network``)
``CODEACT_NETWORK_SECRETS``  a JSON file of headers the proxy adds per host (``--network-secrets``)
=========================  ===========================================================

Importing this module is cheap: models are imported when one is built.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from .errors import ConfigError
# The switches the library reads while it runs, re-exported (``codeact.config.images_enabled`` keeps working).
from .settings import BASE_URL_ENV as BASE_URL_ENV
from .settings import IMAGES_ENV as IMAGES_ENV
from .settings import MODEL_ENV as MODEL_ENV
from .settings import OUTPUT_DIR_ENV as OUTPUT_DIR_ENV
from .settings import SNAPSHOT_DIR_ENV as SNAPSHOT_DIR_ENV
from .settings import env as env
from .settings import images_enabled as images_enabled
from .settings import output_root as output_root
from .settings import snapshot_dir as snapshot_dir

DB_ENV = "CODEACT_DB"
SCRIPTED_ENV = "CODEACT_SCRIPTED_REPLIES"
DEBUG_ENV = "CODEACT_DEBUG"
BACKEND_ENV = "CODEACT_BACKEND"
RUNTIME_ENV = "CODEACT_RUNTIME"
SNAPSHOT_KEEP_ENV = "CODEACT_SNAPSHOT_KEEP"
CONTEXT_WINDOW_ENV = "CODEACT_CONTEXT_WINDOW"
CONDENSER_ENV = "CODEACT_CONDENSER"
#: How old turns may be folded (:mod:`codeact.compaction`).
CONDENSERS = ("fold", "summary")
#: Snapshots of one chat session kept by default (the newest; older ones are deleted after each save).
DEFAULT_SNAPSHOT_KEEP = 3
#: The sandbox backends a configuration may name.
Backend = Literal["docker", "local", "restricted"]
BACKENDS: tuple[Backend, ...] = ("docker", "local", "restricted")

NO_MODEL_HINT = (
    "no model configured: pass --model NAME or set CODEACT_MODEL "
    "(for a local or non-OpenAI server also set OPENAI_BASE_URL, e.g. http://localhost:11434/v1, "
    "and OPENAI_API_KEY if it needs one)"
)


def backend(option: str | None = None) -> Backend:
    """The sandbox backend from ``--backend`` or ``$CODEACT_BACKEND``; ``docker`` when neither is set.

    ``auto`` (accepted from older configurations) means docker: nothing falls
    back to an unisolated backend unless it is named.
    """
    value = (option or "").strip().lower() or env(BACKEND_ENV).lower() or "docker"
    if value == "auto":
        value = "docker"
    for name in BACKENDS:
        if value == name:
            return name
    raise ConfigError(f"unknown sandbox backend {value!r} (from {'--backend' if option else BACKEND_ENV}); "
                      f"choose one of {', '.join(BACKENDS)}")


def runtime(option: str | None = None, *, backend: str = "docker") -> str | None:
    """The Docker sandbox's container runtime from ``--runtime`` or ``$CODEACT_RUNTIME`` (e.g. ``runsc`` for
    gVisor); None when neither is set: the engine's default runtime (runc).

    Raises:
        ConfigError: not a runtime name, or a runtime with a backend other than docker.
    """
    source = "--runtime" if (option or "").strip() else RUNTIME_ENV
    value = (option or "").strip() or env(RUNTIME_ENV)
    if not value:
        return None
    if not all(c.isalnum() or c in "._-" for c in value) or len(value) > 64:
        raise ConfigError(f"{source}={value!r} is not a runtime name: give the name the Docker engine lists under "
                          "Runtimes in `docker info` (e.g. runsc for gVisor, runc for the default)")
    if backend != "docker":
        raise ConfigError(f"{source}={value}: a container runtime needs the docker backend, not {backend} "
                          f"(drop --backend {backend}, or unset {RUNTIME_ENV})")
    return value


def context_window(option: int | str | None = None) -> int | None:
    """The model's context window from ``--context-window`` or ``$CODEACT_CONTEXT_WINDOW``; None when neither
    is set (the endpoint's, when it says).

    Raises:
        ConfigError: not a whole number of tokens of at least 1,024.
    """
    source = "--context-window" if option not in (None, "") else CONTEXT_WINDOW_ENV
    value = str(option).strip() if option not in (None, "") else env(CONTEXT_WINDOW_ENV)
    if not value:
        return None
    if not value.isdigit() or not 1024 <= int(value) <= 100_000_000:
        raise ConfigError(f"{source}={value!r}: give the model's context window in tokens, a whole number from "
                          "1024, e.g. 32768")
    return int(value)


_window = context_window  # build_model's argument of that name hides the function


def condenser(option: str | None = None) -> str:
    """How old turns are folded, from ``--condenser`` or ``$CODEACT_CONDENSER``: ``fold`` (the default) or
    ``summary``.

    Raises:
        ConfigError: another value.
    """
    source = "--condenser" if (option or "").strip() else CONDENSER_ENV
    value = (option or "").strip().lower() or env(CONDENSER_ENV).lower() or "fold"
    if value not in CONDENSERS:
        raise ConfigError(f"{source}={value!r}: choose fold (a \"session so far\" block) or summary (the same, plus "
                          "a summary the model writes)")
    return value


def docker_fix_hint() -> str:
    """What to do when no Docker engine answers: about ``DOCKER_HOST`` when it is set, else install Docker."""
    host = env("DOCKER_HOST")
    if host:
        return (f"DOCKER_HOST is set to {host} and nothing answers there: start the engine at that address "
                "(or fix the address and its TLS settings), or unset DOCKER_HOST to use this machine's Docker")
    return ("install and start Docker (e.g. `apt-get install docker.io && dockerd &`, or "
            "`scripts/dev.sh setup` in a checkout)")


def debug_enabled() -> bool:
    return env(DEBUG_ENV).lower() not in ("", "0", "false", "no")


def model_name(option: str | None = None) -> str:
    """The model name from ``--model`` or ``$CODEACT_MODEL`` ('' when neither is set)."""
    return (option or "").strip() or env(MODEL_ENV)


def model_configured(option: str | None = None) -> bool:
    return bool(model_name(option))


def base_url(option: str | None = None) -> str:
    from .models import DEFAULT_BASE_URL

    return ((option or "").strip() or env(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")


def scripted_replies_path() -> Path | None:
    value = env(SCRIPTED_ENV)
    return Path(value).expanduser() if value else None


def load_scripted_replies(path: str | os.PathLike[str]) -> list[str]:
    """Replies from a JSON file holding a list of strings.

    Raises:
        ConfigError: the file is missing or is not a JSON list of strings.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{SCRIPTED_ENV}={p}: file not found") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{SCRIPTED_ENV}={p}: cannot read a JSON list of strings ({exc})") from None
    if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
        raise ConfigError(f"{SCRIPTED_ENV}={p}: expected a JSON list of strings (one model reply each)")
    return data


def build_model(
    model: str | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    timeout: float | None = None,
    scripted: bool = True,
    images: bool | None = None,
    context_window: int | None = None,
) -> Any:
    """The model the CLI talks to.

    ``$CODEACT_SCRIPTED_REPLIES`` (when ``scripted`` is true) wins over
    everything: a :class:`ScriptedModel` that replays the file's replies.
    Otherwise an :class:`OpenAIModel` for ``model`` / ``$CODEACT_MODEL``.
    ``images``: False for ``--no-images``; None leaves it to ``$CODEACT_IMAGES``. ``context_window``: the
    model's window in tokens (``--context-window``); None leaves it to ``$CODEACT_CONTEXT_WINDOW``, then to
    the endpoint.

    Raises:
        ConfigError: no model configured, or a bad replies file.
    """
    path = scripted_replies_path() if scripted else None
    if path is not None:
        from .models import ScriptedModel

        scripted_model = ScriptedModel(load_scripted_replies(path), name="scripted", vision=images_enabled(images))
        window = _window(context_window)
        if window is not None:
            scripted_model.context_window = window  # type: ignore[attr-defined]  # what compaction reads
        return scripted_model
    name = model_name(model)
    if not name:
        raise ConfigError(NO_MODEL_HINT)
    from .models import OpenAIModel

    options: dict[str, Any] = {"base_url": base_url or None, "api_key": api_key or None,
                               "vision": images_enabled(images), "context_window": _window(context_window)}
    if timeout is not None:
        options["timeout"] = timeout
    return OpenAIModel(name, **options)


def db_path(option: str | os.PathLike[str] | None = None) -> Path:
    """The run log database: ``--db``, else ``$CODEACT_DB``, else the user data directory."""
    if option:
        return Path(option).expanduser()
    from .runlog import default_db_path

    return default_db_path()


def snapshot_keep(option: int | str | None = None) -> int | None:
    """Snapshots kept per session: ``--keep-snapshots``, ``$CODEACT_SNAPSHOT_KEEP`` or 3; None keeps all.

    Raises:
        ConfigError: not a positive whole number or ``all``.
    """
    source = "--keep-snapshots" if option not in (None, "") else SNAPSHOT_KEEP_ENV
    value = str(option).strip().lower() if option not in (None, "") else env(SNAPSHOT_KEEP_ENV).lower()
    if not value:
        return DEFAULT_SNAPSHOT_KEEP
    if value == "all":
        return None
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"{source}={value!r}: give a number of snapshots to keep per session (1 or more), "
                          "or 'all'")
    return int(value)
