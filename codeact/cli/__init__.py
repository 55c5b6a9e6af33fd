"""The ``codeact`` command line.

Commands: ``run``, ``chat``, ``demo``, ``logs``, ``doctor``, ``image``, ``sandbox``, ``mcp``, ``skills``,
``sessions``.
Every error a user can cause ends in one red ``Error: ...`` line on stderr and
a non-zero exit (2 for usage and configuration, 1 otherwise); set
``CODEACT_DEBUG=1`` to see tracebacks.

One module per command group (``run``, ``logs``, ``doctor``, ``admin``), all
on the group in :mod:`._app`. Only click and the standard library are
imported when the command line starts, so that ``codeact --help`` is fast;
rich, the agent, the sandbox, docker and openai are imported inside the
commands that need them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import admin, chat, doctor, logs, mcp, run  # noqa: F401 - each registers its commands on `cli`
from . import bench  # noqa: F401 - `codeact bench`, CodeAct against ReAct on task suites
from . import ui  # noqa: F401 - `codeact ui`, the web workspace
from . import skills  # noqa: F401 - `codeact skills`, functions kept for later sessions
from . import sessions  # noqa: F401 - `codeact sessions`, saved chat sessions
from ._app import cli

__all__ = ["cli", "main"]


def main(argv: Sequence[str] | None = None) -> Any:
    """The ``codeact`` console script."""
    return cli.main(args=list(argv) if argv is not None else None, prog_name="codeact")
