"""Durable chat sessions at the library level (codeact.sessions) on the real Docker sandbox.

The model's text is scripted (ScriptedModel records every request); everything
else is real: the sandbox, its snapshots in a store on disk, the run log.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from codeact import CodeActAgent, ScriptedModel
from codeact.errors import SavedSessionError
from codeact.runlog import RunLog
from codeact.sessions import SaveOptions

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]


def code(source: str) -> str:
    return f"```python\n{source}\n```"


@pytest.fixture
def log(tmp_path: Path) -> RunLog:
    with RunLog(tmp_path / "runs.db") as log:
        yield log


def agent(model: ScriptedModel, log: RunLog, tmp_path: Path, **options) -> CodeActAgent:
    return CodeActAgent(model, log=log, output_dir=tmp_path / "out", **options)


def snap_files(store: Path) -> list[str]:
    return sorted(p.stem for p in store.glob("*.snap"))


def test_a_closed_session_resumes_with_its_conversation_and_variables(log: RunLog, tmp_path: Path) -> None:
    store = tmp_path / "snaps"
    first = ScriptedModel([
        code("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\ngen = (i for i in range(3))\nprint(df.shape)"),
        "```text\nnot python\n```",              # a reply without Python: feedback, then the model goes on
        "df has 3 rows.",
        code("def total():\n    return int(df.a.sum())\nfinal_answer(total())"),
    ])
    with agent(first, log, tmp_path).session(save=SaveOptions(store=store)) as chat:
        assert chat.send("load df").answer == "df has 3 rows."
        assert chat.send("sum it").answer == 6
        original = [(m.role, m.content) for m in chat.messages[1:]]
        session_id = chat.session_id
    (row,) = log.list_snapshots()
    assert row.session == session_id and len(row.runs) == 2 and snap_files(store) == [row.id]
    assert {v["name"] for v in row.manifest["variables"]} == {"pd", "df", "gen", "total"}

    second = ScriptedModel([code("final_answer(total() * 10)")])
    with agent(second, log, tmp_path).session(resume=row.runs[0][:6], save=SaveOptions(store=store)) as chat:
        report = chat.restored
        assert set(report.restored) == {"pd", "df", "total"} and [n for n, _ in report.not_saved] == ["gen"]
        assert chat.send("ten times the total").answer == 60
    sent = second.requests[0]
    assert sent[0].role == "system"
    rebuilt = [(m.role, m.content) for m in sent[1:-1]]
    assert rebuilt == original  # the conversation, as the first session had it
    note = sent[-1].content
    assert "Restored: 3 variables (df, pd, total)" in note and "gen (" in note and "Not restored" in note
    assert "Nothing ran after the snapshot was saved." in note and note.endswith("ten times the total")

    rows = log.list_snapshots()
    assert len(rows) == 2 and rows[0].parent == row.id and rows[0].session != session_id
    assert rows[0].runs[:2] == row.runs and len(rows[0].runs) == 3


def test_a_resumed_session_keeps_the_agents_time_limit(log: RunLog, tmp_path: Path) -> None:
    store = tmp_path / "snaps"
    with agent(ScriptedModel([code("x = 5\nfinal_answer(x)")]), log, tmp_path).session(
            save=SaveOptions(store=store)) as chat:
        assert chat.send("set x").answer == 5
    (row,) = log.list_snapshots()
    # Within the agent's 3 s, not the sandbox's default 30 s: the sleep is stopped and the model told.
    model = ScriptedModel([code("import time\ntime.sleep(12)\nfinal_answer('slept')"), code("final_answer(x)")])
    with agent(model, log, tmp_path, execution_timeout=3).session(resume=row.id) as chat:
        result = chat.send("sleep, then x")
    assert result.answer == 5
    observation = model.requests[1][-1].content
    assert "ran longer than 3 s and was interrupted" in observation, observation


def test_autosave_saves_only_what_changed_and_keeps_the_newest(log: RunLog, tmp_path: Path) -> None:
    store = tmp_path / "snaps"
    model = ScriptedModel([
        code("x = 1\nprint(x)"),
        code("print(x)"),                   # changes nothing
        code("y = 2\nprint(y)"),
        code("z = 3\nprint(z)"),
        "done",
    ])
    with agent(model, log, tmp_path, max_steps=6).session(save=SaveOptions(store=store, autosave=True, keep=2,
                                                                            on_close=False)) as chat:
        result = chat.send("go")
        rows = log.list_snapshots(session=chat.session_id)
    assert result.status == "success"
    # steps 1..4 saved after each step, and the final reply: files only for steps 1, 3 and 4; two kept
    assert len(rows) == 2 and snap_files(store) == sorted(r.id for r in rows)
    newest, older = rows
    assert newest.step == 5 and newest.run_id == result.run_id  # moved on by the final reply (no new file)
    assert newest.since == older.id and newest.parent == older.id
    reused = {v["name"]: v["reused"] for v in newest.manifest["variables"]}
    assert reused == {"x": True, "y": True, "z": False}  # only z was pickled and copied out again


def test_resuming_one_snapshot_twice_gives_two_branches(log: RunLog, tmp_path: Path) -> None:
    store = tmp_path / "snaps"
    with agent(ScriptedModel([code("n = 1\nfinal_answer(n)")]), log, tmp_path).session(
            save=SaveOptions(store=store)) as chat:
        chat.send("n")
    (base,) = log.list_snapshots()
    branches = []
    for value in (10, 20):
        model = ScriptedModel([code(f"n += {value}\nfinal_answer(n)")])
        with agent(model, log, tmp_path).session(resume=base.id, save=SaveOptions(store=store)) as chat:
            branches.append(chat.send("add").answer)
    assert branches == [11, 21]  # the second branch did not see the first one's change
    rows = [r for r in log.list_snapshots() if r.id != base.id]
    assert len(rows) == 2 and {r.parent for r in rows} == {base.id} and len({r.session for r in rows}) == 2


def test_saving_needs_a_kernel_and_the_run_log(log: RunLog, tmp_path: Path) -> None:
    with pytest.warns(UserWarning):
        restricted = agent(ScriptedModel([code("final_answer(1)")]), log, tmp_path, sandbox="restricted")
        with restricted.session() as chat:
            chat.send("one")
            with pytest.raises(SavedSessionError, match="restricted.*docker"):
                chat.save()
    with pytest.raises(SavedSessionError, match="run log"):
        CodeActAgent(ScriptedModel([]), log=False).session(save=True)
    with pytest.raises(SavedSessionError, match="No saved session"):
        agent(ScriptedModel([]), log, tmp_path).session(resume="nothing-here")


def test_autosave_writes_deltas_and_removing_their_bases_never_breaks_a_resume(log: RunLog, tmp_path: Path) -> None:
    from codeact.sessions import delete

    store = tmp_path / "snaps"
    model = ScriptedModel([
        code("import numpy as np\nbig = np.arange(1_000_000)\nprint(big.size)"),
        code("y = 2\nprint(y)"),
        code("z = 3\nprint(z)"),
        "done",
    ])
    with agent(model, log, tmp_path, max_steps=6).session(save=SaveOptions(store=store, autosave=True, keep=2,
                                                                            on_close=False)) as chat:
        chat.send("go")
        rows = log.list_snapshots(session=chat.session_id)
    newest, older = rows
    from sandbox import Snapshot

    snap = Snapshot.open(newest.path)
    assert snap.base == older.id and snap.size < 1_000_000  # z only, not the 8 MB array again
    assert snap_files(store) == sorted([newest.id, older.id])  # the whole first save is held, not listed
    delete(log, older)  # `codeact sessions rm`: the newest still needs it
    assert snap_files(store) == [newest.id] and len(list((store / ".held").glob("*.snap"))) == 2
    resumed = ScriptedModel([code("final_answer(int(big.sum()) + y + z)")])
    with agent(resumed, log, tmp_path).session(resume=newest.id, save=SaveOptions(store=store, on_close=False)) as c:
        assert c.send("sum").answer == 499999500000 + 5
    delete(log, newest)
    assert snap_files(store) == [] and list((store / ".held").glob("*.snap")) == []  # nothing needs them now
