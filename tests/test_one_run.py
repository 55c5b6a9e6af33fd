"""One run, one transcript: the turn loop written once for every agent kind, the conversation's shapes in one place.

The resume test runs a real chat on the Docker sandbox (scripted model text,
everything else real: kernel, snapshots, run log, artifacts) and rebuilds it
from the run log. The others pin what used to differ between the copies of
the loop (CodeAct, ReAct, the web workspace's cells).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from codeact import CodeActAgent, ReActAgent, ScriptedModel, tool
from codeact.errors import ConfigError
from codeact.events import Compacted, Observation
from codeact.messages import Message
from codeact.run import RunLimits
from codeact.runlog import RunLog
from codeact.sessions import SaveOptions
from codeact.tools import RunContext


def code(source: str) -> str:
    return f"```python\n{source}\n```"


PLOT = ("import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        "plt.plot(df.a, df.b)\nplt.show()\nprint('plotted')")


def chat_replies() -> list[str]:
    return [
        code("import pandas as pd\ndf = pd.read_csv('data.csv')\nprint(df.shape)"),  # turn 1
        "Loaded: 2 rows.",
        code(PLOT),                                          # turn 2 (new file, typed answer, a figure)
        code("final_answer('four')"),                        # does not fit int: feedback in the observation
        code("final_answer(int(df.a.sum()))"),
        code("numbers = " + repr(list(range(400))) + "\nprint(len(numbers))"),  # turn 3: a long message
        "Stored 400 numbers.",
        code("print(sum(numbers))"),                         # turn 4: compaction folds turns 1-3
        "The sum is printed.",
        code("print(len(numbers))"),                         # turn 5, after the save
        "Still 400.",
    ]


@pytest.mark.docker
@pytest.mark.timeout(600)
def test_a_resumed_chat_has_the_live_history_message_for_message(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("a,b\n1,2\n3,4\n")
    (tmp_path / "more.csv").write_text("c\n5\n")
    long_task = "Keep these numbers for later: " + " ".join(str(n) for n in range(400))
    with RunLog(tmp_path / "runs.db") as log:
        model = ScriptedModel(chat_replies())
        agent = CodeActAgent(model, log=log, output_dir=tmp_path / "out", history_budget=2600)
        events: list[object] = []
        with agent.session(save=SaveOptions(store=tmp_path / "snaps")) as live:
            for task, kwargs in [("Load data.csv", {"files": [tmp_path / "data.csv"]}),
                                 ("Plot it, then give the sum of a", {"files": [tmp_path / "more.csv"],
                                                                      "output_type": int}),
                                 (long_task, {}), ("Now sum them", {})]:
                events += list(live.stream(task, **kwargs))
            assert [e.result.status for e in events if type(e).__name__ == "RunFinished"] == ["success"] * 4
            assert any(isinstance(e, Compacted) for e in events), "the chat must have been compacted"
            sent = [e for e in events if isinstance(e, Observation) and e.sent_images]
            assert len(sent) == 1 and sent[0].sent_images[0].endswith(".png")
            live_history = list(live.messages)
            assert sum(bool(m.images) for m in live_history) == 1
            second_task = live_history[live.turn_starts[1]].content
            assert "New files in the working directory:\n- more.csv" in second_task and "int" in second_task
            record = live.save()

            again = ScriptedModel([code("print(len(numbers))"), "Still 400."])
            resumed_agent = CodeActAgent(again, log=log, output_dir=tmp_path / "out", history_budget=2600)
            with resumed_agent.session(resume=record.id) as resumed:
                assert resumed.messages == live_history  # system prompt, tasks, notes, observations, images
                assert resumed.turn_starts == live.turn_starts

                # Both go on with the same turn: the model gets the same history (the resumed one's message
                # starts with what the restore brought back).
                assert live.send("How many numbers?").status == "success"
                assert resumed.send("How many numbers?").status == "success"
                live_request, resumed_request = model.requests[-2], again.requests[0]
                assert resumed_request[:-1] == live_request[:-1]
                assert resumed_request[-1].content.endswith(live_request[-1].content)
                assert resumed_request[-1].content.startswith("[Note: this session was restored")


def test_every_agent_kind_refuses_zero_steps() -> None:
    for make in (lambda: CodeActAgent(ScriptedModel([]), sandbox="restricted", max_steps=0, log=None),
                 lambda: ReActAgent(ScriptedModel([]), max_steps=0, log=None)):
        with pytest.raises(ConfigError, match="max_steps"):
            make()


@tool
def two_charts(ctx: RunContext, n: int) -> str:
    """Save two charts as artifacts."""
    ctx.add_artifact("one.png", b"\x89PNG one", "image/png")
    ctx.add_artifact("two.png", b"\x89PNG two", "image/png")
    return "saved"


def test_react_tools_meet_the_per_step_artifact_cap_as_codeact_tools_do(tmp_path: Path) -> None:
    model = ScriptedModel([ScriptedModel.tool_calls(("two_charts", {"n": 1})), "done"])
    agent = ReActAgent(model, [two_charts], log=None, output_dir=tmp_path / "out",
                       limits=RunLimits(max_artifact_files_per_step=1))
    result = agent.run("Make charts")
    (step, _) = result.steps
    assert "over the limit of 1 files per step" in (step.observation or "")
    assert [p.name for p in result.artifacts] == ["one.png"]


def test_react_fills_every_placeholder_of_its_template() -> None:
    model = ScriptedModel(["done"])
    agent = ReActAgent(model, [two_charts], format="json", log=None,
                       system_prompt="Tools:\n$tools\nPackages: [$packages] Catalog: [$catalog] Keep $HOME")
    agent.run("hi")
    system = model.requests[0][0].content
    assert "$packages" not in system and "$catalog" not in system and "Packages: [] Catalog: []" in system
    assert "two_charts" in system and "$HOME" in system  # unknown names stay as written


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_a_web_cell_names_only_the_files_the_host_kept(tmp_path: Path) -> None:
    from codeact.ui._chat import WorkspaceChat

    agent = CodeActAgent(ScriptedModel([]), log=None, output_dir=tmp_path / "out",
                         limits=RunLimits(max_artifact_files_per_step=1))
    with WorkspaceChat(agent) as chat:
        events = list(chat.run_cell("for name in ('a.txt', 'b.txt'):\n    open(name, 'w').write(name)"))
    (observation,) = [e for e in events if isinstance(e, Observation)]
    assert observation.artifacts == ["a.txt"]  # b.txt was over the cap: written, not kept
    assert "b.txt" in observation.text and "over the limit" in observation.text


def test_the_transcript_recognises_only_its_own_observations() -> None:
    from codeact import transcript

    shown = transcript.observation_message("42")
    assert transcript.is_observation(shown) and not transcript.is_observation(Message("user", "Observation? no"))
    elided = transcript.elided_observation(Message("user", shown.content + "x" * 500))
    assert elided is not None and elided.content.startswith("Observation: [elided")
    assert transcript.elided_observation(Message("user", "a task")) is None
