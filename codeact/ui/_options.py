"""The web UI's options and how it builds each session's agent."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Builds the agent of one UI session; it must pass ``approve`` on to :class:`CodeActAgent`.
AgentFactory = Callable[[Callable[[Any], bool]], Any]


@dataclass(frozen=True)
class UIOptions:
    """Limits and behaviour of the web UI's sessions.

    Example::

        UIOptions(max_sessions=2, idle_timeout=600, upload_limit=10 * 2**20)
    """

    #: Sessions (tabs) open at once, each with its own sandbox.
    max_sessions: int = 4
    #: Seconds without a request or a running turn after which a session's sandbox is closed.
    idle_timeout: float = 30 * 60
    #: Bytes of one uploaded file.
    upload_limit: int = 100 * 1024 * 1024
    #: Approve every call of tools that require approval (``--yes``); the page shows each.
    auto_approve: bool = False
    #: Host files copied into every session with its first message (``--file``).
    files: tuple[Path, ...] = ()
    #: Where the agent writes artifacts (``<output_root>/<run id>/``), for downloads.
    output_root: Path = field(default_factory=lambda: Path("artifacts"))
    #: Bytes of page events a session keeps for replay; older ones are dropped (History has them).
    event_buffer_bytes: int = 32 * 1024 * 1024
    #: Bytes of images (plots, SVG) a session keeps for the page.
    blob_bytes: int = 256 * 1024 * 1024
    #: Characters of live output per step sent to the page (the observation still has the rest).
    live_output_chars: int = 1_000_000
    #: Bytes of one file downloaded through the page.
    download_limit: int = 256 * 1024 * 1024
    #: Save a session (sandbox snapshot + its place in the run log) when it closes, when the server stops
    #: and when the idle timeout frees its sandbox (then the next message restores it). Needs the run log.
    save_sessions: bool = True
    #: Where saved sessions go (None: ``$CODEACT_SNAPSHOT_DIR`` or the data dir's ``snapshots``).
    snapshot_dir: Path | None = None
    #: Snapshots kept per session (None: all).
    keep_snapshots: int | None = 3
    #: Save after every step as well (so that even a killed server resumes at the last step).
    autosave: bool = False
