"""Where a sweep's episodes run: threads in this process, or Ray tasks across a cluster.

Both executors take the episodes still to run and append each finished one
to the same :class:`~codeact.bench.ResultsDir` from this process, so a sweep
can start on one and resume on the other.
"""

from __future__ import annotations

from typing import Any, Protocol

from ._runner import Runner


class EpisodeExecutor(Protocol):
    """Runs episodes and records each finished one in the results directory (from this process only)."""

    #: Episodes finished (and recorded) by this executor so far.
    finished: int

    def run(self, specs: list[Any], already: int) -> None:
        """Run ``specs`` (episodes not yet done); ``already`` were done before. Ctrl-C raises KeyboardInterrupt."""

    def close(self) -> None:
        """Release what the executor holds (sandbox pools, the run log, its Ray connection)."""


def make_executor(config: Any, results: Any, model: Any, progress: Any) -> EpisodeExecutor:
    """The local thread runner, or the Ray executor when ``config.ray`` is set."""
    if config.ray is not None:
        from ._ray import RayExecutor  # imports nothing of ray until it runs; kept lazy all the same

        return RayExecutor(config, results, model, progress)
    return Runner(config, results, model, progress)
