"""What a sweep is (:class:`BenchConfig`), what it gave (:class:`BenchRun`), and which tasks it runs."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..errors import BenchError
from ..react import AGENT_KINDS
from ._agents import CODEACT_VARIANTS
from ._oracle import ORACLE
from ._ray_options import RayOptions, import_ray
from ._report import Report
from ._store import Episode, ResultsDir
from ._task import Task

BACKENDS = ("docker", "local", "restricted")

#: A model for every episode, or a factory ``(task, agent kind, context) -> model``.
ModelSpec = Any


@dataclass
class BenchConfig:
    """What to run. Only ``suites`` is required; see ``codeact bench run --help`` for each option.

    ``model`` is one model name or a list of them (every agent runs every task
    on each; the report has a column per model x agent).

    Example::

        config = BenchConfig(suites=["tool-chains"], agents=["codeact", "react-json"], model="oracle",
                             concurrency=4, out="results/")
        run = run_bench(config)
        print(run.report.overall["codeact"].success_rate.mean)
    """

    suites: Sequence[str]
    agents: Sequence[str] = AGENT_KINDS
    model: str | Sequence[str] = ORACLE
    base_url: str | None = None
    api_key: str | None = None  # never written to the results
    temperature: float = 0.0
    seed: int = 0
    repeats: int = 1
    concurrency: int = 4
    backend: str = "docker"
    #: The Docker engine's container runtime for the CodeAct sandboxes (``runsc`` for gVisor); None: the engine's.
    runtime: str | None = None
    out: str | os.PathLike[str] = "results"
    tasks: Sequence[str] = ()  # glob patterns over task ids or suite/id keys
    max_turns: int | None = None  # overrides every task's turn limit
    episode_timeout: float = 600.0
    model_timeout: float = 120.0
    execution_timeout: float = 60.0
    #: The most tokens one model reply may take (each request's ``max_tokens``); None leaves it to the
    #: endpoint, which for a local server is often the rest of its window: a model that never stops
    #: then writes for minutes per turn, and the reply has no room the conversation's folding can keep.
    max_reply_tokens: int | None = 1024
    price_in: float | None = None  # USD per million prompt tokens
    price_out: float | None = None  # USD per million completion tokens
    retry_errors: bool = False
    stream: bool = False
    #: Stop the run when more than this share of the recent episodes failed in the infrastructure
    #: (model endpoint, sandbox, timeouts); 1.0 never stops.
    max_error_share: float = 0.5
    #: Check the endpoint (one tiny request per model) and the sandbox (one started) before the first episode.
    preflight: bool = True
    #: Run the episodes as Ray tasks across a cluster: a :class:`RayOptions`, or just its address
    #: (``"auto"``, ``"host:port"``, ``"local"``). ``None`` runs them on threads here.
    ray: RayOptions | str | None = None
    #: The CodeAct sandboxes' network allow-list (a :class:`sandbox.NetworkPolicy`; docker backend), or None
    #: for no network. Never written to the results (its secrets stay in this process and the Ray workers).
    network: Any = None
    #: The models' context window in tokens, when the endpoint does not say it (None: what it says).
    context_window: int | None = None
    #: How the agents fold old turns: ``fold`` or ``summary`` (see :class:`~codeact.agent.CodeActAgent`).
    condenser: str = "fold"

    def __post_init__(self) -> None:
        if isinstance(self.ray, str):
            self.ray = RayOptions(address=self.ray)

    @property
    def models(self) -> list[str]:
        """The model names, in order (one for a single model)."""
        names = [self.model] if isinstance(self.model, str) else list(self.model)
        return [str(n).strip() for n in names]

    def validate(self) -> None:
        """Raises :class:`BenchError` for an option that cannot work, saying which and why."""
        unknown = [a for a in self.agents if a not in AGENT_KINDS and a not in CODEACT_VARIANTS]
        if unknown or not self.agents:
            raise BenchError(f"unknown agent(s) {', '.join(unknown) or '(none given)'}; "
                             f"choose from {', '.join([*AGENT_KINDS, *CODEACT_VARIANTS])}")
        if len(set(self.agents)) != len(self.agents):
            raise BenchError("an agent is listed twice in --agents")
        if self.backend not in BACKENDS:
            raise BenchError(f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}")
        if self.runtime and self.backend != "docker":
            raise BenchError(f"runtime {self.runtime!r} needs the docker backend, not {self.backend}")
        for name in ("repeats", "concurrency"):
            if int(getattr(self, name)) < 1:
                raise BenchError(f"{name} must be at least 1")
        if self.max_turns is not None and self.max_turns < 1:
            raise BenchError("max_turns must be at least 1")
        if self.max_reply_tokens is not None and (isinstance(self.max_reply_tokens, bool)
                                                  or int(self.max_reply_tokens) < 1):
            raise BenchError("max_reply_tokens must be at least 1 (or None: the endpoint's own limit)")
        for name in ("episode_timeout", "model_timeout", "execution_timeout"):
            if float(getattr(self, name)) <= 0:
                raise BenchError(f"{name} must be > 0 seconds")
        if (self.price_in is None) != (self.price_out is None):
            raise BenchError("give both prices (prompt and completion, USD per million tokens) or neither")
        models = self.models
        if not models or not all(models):
            raise BenchError("no model: give --model NAME (or --model oracle to replay the reference solutions)")
        if len(set(models)) != len(models):
            raise BenchError("a model is listed twice in --model")
        if not 0 < float(self.max_error_share) <= 1:
            raise BenchError("max_error_share must be > 0 and <= 1 (1 never stops a run)")
        if self.condenser not in ("fold", "summary"):
            raise BenchError(f"unknown condenser {self.condenser!r}; choose fold or summary")
        if self.context_window is not None and int(self.context_window) < 1024:
            raise BenchError("context_window must be at least 1024 tokens (or None: what the endpoint says)")
        if self.network is not None and self.ray is not None:
            raise BenchError("network= (--allow-host) applies to episodes run here; with --ray the workers would "
                             "need the policy's secrets: run without --ray")
        if self.network is not None and self.backend != "docker":
            raise BenchError("network= (--allow-host) needs the docker backend")
        if self.ray is not None:
            if not isinstance(self.ray, RayOptions):
                raise BenchError(f"ray must be RayOptions(...) or an address string, not {type(self.ray).__name__}")
            self.ray.validate()
            import_ray()  # fail now, before anything is written, when ray is not installed


@dataclass
class BenchRun:
    """What :func:`run_bench` did: every finished episode in the directory, the report, the files written."""

    results: ResultsDir
    episodes: list[Episode]
    ran: int
    skipped: int
    wall_time: float
    report: Report
    written: list[Path] = field(default_factory=list)
    #: Why the run stopped before its last episode (too many infrastructure errors), or None.
    stopped: str | None = None




def select_tasks(tasks: Sequence[Task], patterns: Sequence[str]) -> list[Task]:
    """The tasks whose id or ``suite/id`` matches one of the glob ``patterns`` (all when none)."""
    if not patterns:
        return list(tasks)
    return [t for t in tasks if any(fnmatch.fnmatchcase(t.id, p) or fnmatch.fnmatchcase(t.key, p) for p in patterns)]

