"""The times a run shows live are the times ``codeact logs show`` shows for it afterwards.

Each step's header carries the model's time (next to its tokens) and the
observation panel the code's time, live and from the run log alike. The run
is real (the Docker sandbox, the run log); the model is scripted, with a
delay so that the model's time and the step's whole time differ.
"""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import pytest
from rich.console import Console

from codeact import CodeActAgent
from codeact.models import ScriptedModel
from codeact.cli.render import Renderer
from codeact.runlog import RunLog

pytestmark = pytest.mark.docker


def slow(reply: str, seconds: float = 0.3):  # a ScriptedModel reply
    def answer(messages: object) -> str:
        time.sleep(seconds)  # the model "thinks"
        return reply

    return answer


def times(text: str) -> list[str]:
    """The step headers and observation titles, in order."""
    return re.findall(r"(Step \d+[^─\n]*|observation · [^─\n]*)", text)


def test_logs_show_has_the_step_times_shown_live(tmp_path: Path) -> None:
    model = ScriptedModel([
        slow("```python\nimport time\ntime.sleep(1.5)\nprint('slept')\n```"),
        slow("```python\nfinal_answer('done')\n```"),
    ])
    db = tmp_path / "runs.db"
    agent = CodeActAgent(model, sandbox="docker", log=str(db), output_dir=tmp_path / "out")
    live = io.StringIO()
    renderer = Renderer(Console(file=live, width=120), live=False)
    for event in agent.stream("sleep, then answer"):
        renderer.event(event)
    renderer.close()

    with RunLog(db) as log:
        record = log.last_run()
    shown = io.StringIO()
    Renderer(Console(file=shown, width=120), live=False).run_record(record)

    live_times, logged_times = times(live.getvalue()), times(shown.getvalue())
    assert len(live_times) == 3, live.getvalue()  # two steps, one observation
    assert logged_times == live_times, (live.getvalue(), shown.getvalue())
    # The header is the model's time (about 0.3 s), not the step's (which includes the 1.5 s of code).
    assert record.steps[0].duration > record.steps[0].model_time + 1.0
    assert "ms" in live_times[0], live_times
