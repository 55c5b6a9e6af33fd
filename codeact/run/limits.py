"""What one run may use: steps, artifacts, images, model calls, tokens, money, depth.

:class:`RunLimits` configures every agent kind (CodeAct, ReAct, the web workspace's cells);
:class:`ArtifactQuota` is the one count of what a run may still keep on the host, whoever keeps
it (a file the code wrote, a figure it showed, an artifact a tool saved).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from ..errors import CodeActError, ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from ..budget import Prices


@dataclass(frozen=True)
class RunLimits:
    """Budgets of one run that the code in the sandbox could otherwise run up.

    Files the code writes in the working directory are copied to the run's
    output directory after each step, within these caps (beyond them, the
    observation says what was not copied); artifacts tools save count
    against the same caps.

    ``max_model_calls``, ``max_tokens`` and ``max_cost`` (dollars) hold for the
    run and every agent it calls (``agent.as_tool``): checked after each model
    call and before the next, they end the whole tree with status
    ``budget_exceeded`` (see :mod:`codeact.budget`). ``prices`` maps model names
    to :class:`~codeact.budget.Prices` for models that do not know their own.
    ``max_depth``: how deep agents may call agents below a top-level run.
    """

    max_artifact_files_per_step: int = 20
    max_artifact_bytes_per_step: int = 50 * 1024 * 1024
    max_artifact_files_per_run: int = 200
    max_artifact_bytes_per_run: int = 200 * 1024 * 1024
    #: Images (figures, image files, tool images) sent to the model with one observation; the rest are named.
    max_images_per_step: int = 4
    #: Longest side, in pixels, of an image sent to the model (it is downscaled and re-encoded).
    max_image_side: int = 1024
    max_model_calls: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    prices: Mapping[str, Prices] | None = None
    max_depth: int = 3

    def __post_init__(self) -> None:
        for name in ("max_model_calls", "max_tokens", "max_cost"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise CodeActError(f"RunLimits({name}={value!r}): a budget must be > 0 (or None for no limit)")
        if self.max_depth < 0:
            raise CodeActError(f"RunLimits(max_depth={self.max_depth}): must be >= 0")


def check_max_steps(max_steps: int) -> int:
    """``max_steps`` as every agent takes it: at least one step. Raises :class:`ConfigError` otherwise."""
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ConfigError(f"max_steps must be an integer of at least 1, got {max_steps!r}")
    return max_steps


def default_output_root() -> Path:
    """Where runs keep their artifacts unless told otherwise: ``$CODEACT_OUTPUT_DIR`` or the user data dir."""
    from ..settings import output_root

    return output_root()


class ArtifactQuota:
    """What one run may still copy to the host (files and bytes, per step and per run).

    Thread-safe: the tools of one code action may save artifacts from several threads at once.
    """

    def __init__(self, limits: RunLimits) -> None:
        self.limits = limits
        self.files = self.bytes = 0
        self.step = 0
        self.step_files = self.step_bytes = 0
        self.lock = threading.Lock()

    def take(self, size: int, step: int) -> bool:
        """Count ``size`` bytes of one file against step ``step`` and the run; False (nothing counted) when over."""
        with self.lock:
            if step != self.step:
                self.step, self.step_files, self.step_bytes = step, 0, 0
            lim = self.limits
            if (self.step_files + 1 > lim.max_artifact_files_per_step
                    or self.files + 1 > lim.max_artifact_files_per_run
                    or self.step_bytes + size > lim.max_artifact_bytes_per_step
                    or self.bytes + size > lim.max_artifact_bytes_per_run):
                return False
            self.step_files += 1
            self.files += 1
            self.step_bytes += size
            self.bytes += size
            return True

    def grow(self, extra: int, step: int) -> bool:
        """Count ``extra`` more bytes of a file already counted (it grew since it was listed)."""
        with self.lock:
            lim = self.limits
            if (self.step_bytes + extra > lim.max_artifact_bytes_per_step
                    or self.bytes + extra > lim.max_artifact_bytes_per_run):
                return False
            self.step_bytes += extra
            self.bytes += extra
            return True

    def reason(self, size: int) -> str:
        """Why a file of ``size`` bytes was not kept."""
        lim = self.limits
        if self.step_files + 1 > lim.max_artifact_files_per_step:
            return f"over the limit of {lim.max_artifact_files_per_step} files per step"
        if self.files + 1 > lim.max_artifact_files_per_run:
            return f"over the limit of {lim.max_artifact_files_per_run} files per run"
        if self.step_bytes + size > lim.max_artifact_bytes_per_step:
            return f"over the limit of {lim.max_artifact_bytes_per_step:,} bytes per step"
        return f"over the limit of {lim.max_artifact_bytes_per_run:,} bytes per run"
