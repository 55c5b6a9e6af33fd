"""Environment switches the library reads while it runs (the agents, sessions, models), not only the CLI.

Each is read when it is needed, never cached, so a test or a long-lived process can change it.
A command-line option or a constructor argument, when given, wins over the variable.

=========================  ===========================================================
``CODEACT_IMAGES``         ``0`` sends the model no images (:func:`images_enabled`; default on: the plots
                           and images of a step go to the model with its observation)
``CODEACT_OUTPUT_DIR``     where run artifacts go (:func:`output_root`; default
                           ``<user data dir>/codeact/artifacts``)
``CODEACT_SNAPSHOT_DIR``   where saved sessions go (:func:`snapshot_dir`; default
                           ``<user data dir>/codeact/snapshots``)
``CODEACT_MODEL``          the model name :class:`codeact.models.OpenAIModel` uses when given none
``OPENAI_BASE_URL``        the API root it uses when given none (default: OpenAI's)
``OPENAI_API_KEY``         the API key it uses when given none
=========================  ===========================================================

What the CLI alone resolves (the backend, the run log database, debugging, scripted replies) is in
:mod:`codeact.config`.

Example::

    from codeact.settings import images_enabled

    if images_enabled():          # CODEACT_IMAGES unset or 1
        ...
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ConfigError

__all__ = [
    "API_KEY_ENV",
    "BASE_URL_ENV",
    "IMAGES_ENV",
    "MODEL_ENV",
    "OUTPUT_DIR_ENV",
    "SNAPSHOT_DIR_ENV",
    "env",
    "images_enabled",
    "output_root",
    "snapshot_dir",
]

IMAGES_ENV = "CODEACT_IMAGES"
OUTPUT_DIR_ENV = "CODEACT_OUTPUT_DIR"
SNAPSHOT_DIR_ENV = "CODEACT_SNAPSHOT_DIR"
MODEL_ENV = "CODEACT_MODEL"
BASE_URL_ENV = "OPENAI_BASE_URL"
#: The environment variable the OpenAI client reads its key from (the default endpoint needs one).
API_KEY_ENV = "OPENAI_API_KEY"


def env(name: str) -> str:
    """The environment variable ``name``, stripped ('' when unset)."""
    return os.environ.get(name, "").strip()


def images_enabled(option: bool | None = None) -> bool:
    """Whether the model gets images: ``option`` when given (``--no-images`` is False), else
    ``$CODEACT_IMAGES``, else on.

    Raises:
        ConfigError: ``$CODEACT_IMAGES`` is not a yes/no value.
    """
    if option is not None:
        return bool(option)
    value = env(IMAGES_ENV).lower()
    if value in ("", "1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{IMAGES_ENV}={value!r}: use 0 to send the model no images, or 1 (the default) to send them")


def output_root(option: str | os.PathLike[str] | None = None) -> Path:
    """Where run artifacts go (``<root>/<run id>/``): ``option`` (``--output-dir``), ``$CODEACT_OUTPUT_DIR``
    or ``<user data dir>/codeact/artifacts``."""
    if option:
        return Path(option).expanduser()
    value = env(OUTPUT_DIR_ENV)
    if value:
        return Path(value).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("codeact")) / "artifacts"


def snapshot_dir(option: str | os.PathLike[str] | None = None) -> Path:
    """Where saved sessions go: ``option`` (``--snapshot-dir``), else ``$CODEACT_SNAPSHOT_DIR``, else
    ``<user data dir>/codeact/snapshots``."""
    if option:
        return Path(option).expanduser()
    value = env(SNAPSHOT_DIR_ENV)
    if value:
        return Path(value).expanduser()
    from sandbox.snapshot import default_store_dir

    return default_store_dir()
