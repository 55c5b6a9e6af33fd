"""A run's artifacts on the host: its output directory, one budget, and what tools save during a step."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable

from sandbox.hostfiles import check_relative_path, write_confined

from ..errors import CodeActError
from ..events import RunResult, ToolProgress
from ..images import is_image_mime
from ..tools import RunHooks
from .limits import ArtifactQuota, RunLimits


class RunArtifacts:
    """Where one run keeps files (``<output root>/<run id>/``) and how many it may still keep.

    Every agent kind saves through it: CodeAct's files and figures, any tool's
    :meth:`RunContext.add_artifact <codeact.tools.RunContext.add_artifact>`. Each
    kept file goes on ``result.artifacts``; what tools saved during the current
    step is listed until :meth:`take_step` hands it to that step's observation.
    """

    def __init__(self, output_root: Path, run_id: str, limits: RunLimits, result: RunResult[Any]) -> None:
        self.directory = output_root / run_id
        self.budget = ArtifactQuota(limits)
        self.result = result
        self._lock = threading.Lock()
        self._tool_names: list[str] = []
        self._tool_images: list[tuple[str, bytes]] = []

    def save(self, name: str, data: bytes, step: int) -> Path:
        """Keep ``data`` as ``name`` (a plain relative path) for step ``step``; CodeActError when over the budget."""
        check_relative_path(name)
        if not self.budget.take(len(data), step):
            raise CodeActError(self.budget.reason(len(data)))
        return self.write(name, data)

    def write(self, name: str, data: bytes) -> Path:
        """Write ``data`` as ``name`` below the run's directory (never through a link) and list it on the
        result, once; the budget was taken by the caller. Raises OSError or UnsafePath."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = write_confined(self.directory, name, bytes(data))
        with self._lock:
            if path not in self.result.artifacts:
                self.result.artifacts.append(path)
        return path

    def save_for_tool(self, name: str, data: bytes, mime: str, step: int) -> str:
        """A tool's artifact (``RunContext.add_artifact``): kept, named in the step's observation, an image
        among the step's images for the model."""
        self.save(name, data, step)
        with self._lock:
            self._tool_names.append(name)
            if is_image_mime(mime):
                self._tool_images.append((name, bytes(data)))
        return name

    def take_step(self) -> tuple[list[str], list[tuple[str, bytes]]]:
        """(names, images) of what tools saved since the last call, and forget them."""
        with self._lock:
            names, images = self._tool_names, self._tool_images
            self._tool_names, self._tool_images = [], []
        return names, images

    def tool_hooks(self, tool_name: str, run_id: str, step: Callable[[], int],
                   report: Callable[[ToolProgress], None]) -> RunHooks:
        """``RunContext.add_artifact`` and ``report_progress`` for one call of ``tool_name``."""

        def add_artifact(name: str, data: bytes, mime: str) -> str:
            return self.save_for_tool(name, data, mime, step())

        def report_progress(progress: float, total: float | None = None, message: str | None = None) -> None:
            report(ToolProgress(run_id=run_id, step=step(), name=tool_name, progress=float(progress),
                                total=None if total is None else float(total),
                                message=None if message is None else str(message)[:500]))

        return RunHooks(add_artifact=add_artifact, report_progress=report_progress)
