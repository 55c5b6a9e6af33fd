"""The terminal view (codeact.cli.render): every run status renders, live and from the run log."""

from __future__ import annotations

import io
from typing import get_args

import pytest
from rich.console import Console

from codeact.cli import render
from codeact.cli._app import STATUSES as CLI_STATUSES
from codeact.events import RunFinished, RunResult, RunStatus
from codeact.messages import Usage
from codeact.runlog import RunRecord, RunSummary

ALL_STATUSES = get_args(RunStatus)


def test_every_status_has_a_colour_an_icon_and_a_filter() -> None:
    assert set(render.STATUS_STYLE) == set(render.STATUS_ICON) == set(ALL_STATUSES) == set(CLI_STATUSES)
    import codeact.render as moved  # the old path re-exports the new one

    assert moved.STATUS_STYLE is render.STATUS_STYLE and moved.Renderer is render.Renderer


@pytest.mark.parametrize("status", ALL_STATUSES)
def test_each_status_renders_live_and_from_the_log(status: str) -> None:
    out = io.StringIO()
    renderer = render.Renderer(Console(file=out, width=200), err_console=Console(file=io.StringIO()), live=False)
    result = RunResult(run_id="r1", task="t", answer="42", status=status, error=f"why {status}",  # type: ignore[arg-type]
                       usage=Usage(10, 5, 1), duration=1.5)
    renderer.event(RunFinished(run_id="r1", step=1, result=result))
    renderer.answer("42", status)
    summary = RunSummary(id="r1", task="t", model="m", backend="local", status=status, started=1.0, finished=2.0,
                         duration=1.0, step_count=1, usage=Usage(10, 5, 1), error=f"why {status}")
    renderer.runs_table([summary])
    renderer.run_tree(summary, lambda run: ([], {}))
    renderer.run_record(RunRecord(id="r1", task="t", model="m", backend="local", tools=[], files=[], status=status,
                                  answer="42", answer_type="str", error=f"why {status}", started=1.0, finished=2.0,
                                  duration=1.0, usage=Usage(10, 5, 1)))
    text = out.getvalue()
    assert f"{render.STATUS_ICON[status]} {status}" in text
    if status in render.ERROR_STATUSES:
        assert f"{status}: why {status}" in text
