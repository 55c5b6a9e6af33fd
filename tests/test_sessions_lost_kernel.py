"""A kernel lost during a code action, in a chat as a user runs it: on the real Docker sandbox, the model's
text from the scripted OpenAI-compatible server through the real ``openai`` client.

The loss is made from outside as it happens to users: the session's container is removed (``docker rm -f``,
what an engine restart does to it) while the action sleeps, or the kernel is killed by the memory limit.
A saved session (``SaveOptions(autosave=True)``) comes back from its last save before the model's next step,
within the same turn; one without a save starts a fresh kernel. The checks are what a user sees: the answers,
the observations, what the model was sent, and the containers left behind.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from codeact import CodeActAgent, OpenAIModel
from codeact.events import CodeOutput, RunFinished
from codeact.sessions import SaveOptions

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def code(source: str) -> str:
    return f"```python\n{source}\n```"


SLEEP = code("import time\nprint('sleeping', flush=True)\ntime.sleep(40)")


def containers(session: str) -> list[str]:
    """Ids of the containers (running or not) of the sandbox session named ``session``."""
    from sandbox._labels import LABEL

    done = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={LABEL}.session={session}"],
                          capture_output=True, text=True, check=True)
    return done.stdout.split()


def agent(server: Any, tmp_path: Path, **options: Any) -> CodeActAgent:
    model = OpenAIModel("test-model", base_url=server.base_url, api_key="x", max_retries=0)
    return CodeActAgent(model, sandbox="docker", log=str(tmp_path / "runs.db"), output_dir=tmp_path / "out",
                        execution_timeout=60, **options)


def removing_the_container_mid_action(chat: Any, task: str) -> Any:
    """``chat.stream(task)``; once the first action prints, its container is removed from outside (the action
    sleeps meanwhile). Returns the turn's result."""
    removed = False
    result = None
    for event in chat.stream(task):
        if isinstance(event, CodeOutput) and "sleeping" in event.text and not removed:
            ids = containers(chat.sandbox.name)
            assert ids
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, check=True)
            removed = True
        if isinstance(event, RunFinished):
            result = event.result
    assert removed and result is not None
    return result


def test_a_container_removed_during_an_action_comes_back_from_the_autosave_in_the_same_turn(
        openai_server: Any, tmp_path: Path) -> None:
    openai_server.plan_text(code("x = 41\nopen('notes.txt', 'w').write('saved')"))
    openai_server.plan_text(code("final_answer(x)"))
    openai_server.plan_text(SLEEP)
    openai_server.plan_text(code("print(x + 1, open('notes.txt').read())"))
    openai_server.plan_text(code("final_answer(x + 1)"))
    with agent(openai_server, tmp_path).session(save=SaveOptions(autosave=True, store=tmp_path / "snaps")) as chat:
        assert chat.send("set x").answer == 41
        lost_name = chat.sandbox.name
        result = removing_the_container_mid_action(chat, "add one")
        restored_name = chat.sandbox.name
        assert result.status == "success" and result.answer == 42, result
        assert restored_name != lost_name and containers(lost_name) == []
        failed, after = result.steps[0], result.steps[1]
        assert failed.error is not None and "KernelDied" in failed.error
        # The note is in the failed action's observation, the model read it before writing its next step.
        note = failed.observation
        assert "the Python session was lost" in note and lost_name in note, note
        assert "restored from the save made after step 2 of an earlier turn" in note, note
        assert "Restored: 1 variables (x), 1 files" in note, note
        assert "Lost: everything the code did after that save (step 1 of this turn)" in note, note
        sent = openai_server.chat_requests[3].messages  # the request for the turn's second step
        assert any("restored from the save made after step 2" in str(m.get("content")) for m in sent)
        assert after.error is None and after.observation.strip() == "42 saved", after.observation
        assert chat.restored is not None and chat.restored.restored == ("x",)
    assert containers(restored_name) == [] and containers(lost_name) == []


def test_a_kernel_killed_for_memory_comes_back_from_the_save_of_the_step_before(
        openai_server: Any, tmp_path: Path) -> None:
    """The memory limit's OOM killer takes the kernel (its container lives on) in the turn's second action:
    the session comes back from the save made after the first, the turn goes on."""
    openai_server.plan_text(code("x = 41\nprint('set')"))
    openai_server.plan_text(code("hog = bytearray(2 * 1024**3)"))
    openai_server.plan_text(code("print(x + 1, 'hog' in globals())"))
    openai_server.plan_text(code("final_answer(x + 1)"))
    names: list[str] = []
    with agent(openai_server, tmp_path, sandbox_options={"memory": "256m"}).session(
            save=SaveOptions(autosave=True, store=tmp_path / "snaps")) as chat:
        for event in chat.stream("set x, then use a lot of memory"):
            if type(event).__name__ == "Observation":
                names.append(chat.sandbox.name)
            if isinstance(event, RunFinished):
                result = event.result
        assert result.status == "success" and result.answer == 42, result
        killed = result.steps[1]
        assert killed.error is not None and killed.error.split(":")[0] in ("MemoryError", "KernelDied"), killed
        assert "restored from the save made after step 1 of this turn" in killed.observation, killed.observation
        assert "Lost: everything the code did after that save (step 2 of this turn)" in killed.observation
        assert result.steps[2].observation.strip() == "42 False"
        # The container the kernel died in (still running) was removed: the session went on in a new one.
        assert names[0] != names[1] == names[-1] and containers(names[0]) == [], names
    assert containers(names[1]) == []


def killing_the_idle_kernel(chat: Any, pid: int) -> str:
    """Kill the kernel ``pid`` from outside while no code runs (its container lives on); returns the sandbox's
    account of the loss once it has seen it."""
    sb = chat.sandbox
    killed = sb.container.exec_run(["python3", "-c", f"import os; os.kill({pid}, 9)"], user="1000")
    assert killed.exit_code in (0, 137), killed.output  # 137: swept up with the kernel by the supervisor
    deadline = time.monotonic() + 20
    while sb.kernel_lost is None:
        assert time.monotonic() < deadline, "the sandbox never saw its kernel die"
        time.sleep(0.1)
    return sb.kernel_lost


def test_a_kernel_killed_between_turns_comes_back_from_the_autosave_with_the_next_message(
        openai_server: Any, tmp_path: Path) -> None:
    """The kernel dies while the chat waits for its next message (its container lives on, files and all): the
    next turn does not start on a fresh kernel without the variables, it starts from the save."""
    openai_server.plan_text(code("x = 41\nimport os\nprint(os.getpid())"))
    openai_server.plan_text(code("final_answer(x)"))
    openai_server.plan_text(code("print(x + 1)"))
    openai_server.plan_text(code("final_answer(x + 1)"))
    with agent(openai_server, tmp_path).session(save=SaveOptions(autosave=True, store=tmp_path / "snaps")) as chat:
        first = chat.send("set x")
        assert first.answer == 41, first
        lost_name = chat.sandbox.name
        why = killing_the_idle_kernel(chat, int(first.steps[0].observation.strip()))
        assert "SIGKILL" in why, why
        result = chat.send("add one")
        assert result.status == "success" and result.answer == 42, result
        assert result.steps[0].error is None and result.steps[0].observation.strip() == "42", result.steps[0]
        sent = openai_server.chat_requests[2].messages  # the request for the second turn's first step
        note = str(sent[-1].get("content"))
        assert "restored from the save made after step 2 of an earlier turn" in note, note
        assert "SIGKILL" in note, note
        assert chat.sandbox.name != lost_name and containers(lost_name) == []
        restored_name = chat.sandbox.name
    assert containers(restored_name) == []


def test_without_a_save_the_lost_kernel_starts_fresh_and_says_so(openai_server: Any, tmp_path: Path) -> None:
    openai_server.plan_text(code("x = 41\nfinal_answer(x)"))
    openai_server.plan_text(SLEEP)
    openai_server.plan_text(code("print(x + 1)"))
    openai_server.plan_text(code("final_answer('x is gone')"))
    with agent(openai_server, tmp_path).session() as chat:
        assert chat.send("set x").answer == 41
        name = chat.sandbox.name
        result = removing_the_container_mid_action(chat, "add one")
        assert result.status == "success" and result.answer == "x is gone", result
        failed, after = result.steps[0], result.steps[1]
        assert "went away during this run; the next run starts a new one with a fresh kernel" in failed.observation
        assert "restored" not in failed.observation, failed.observation
        assert after.error is not None and after.error.startswith("NameError"), after
        assert "files from earlier runs are gone" in after.observation, after.observation
        assert chat.sandbox.name == name and len(containers(name)) == 1  # a new container of the same session
    assert containers(name) == []


def test_a_workspace_cell_that_loses_the_kernel_comes_back_from_the_autosave(
        openai_server: Any, tmp_path: Path) -> None:
    """The web workspace's cells (the analyst's own code) restore the same way; the variables panel shows it."""
    from codeact.ui._chat import workspace_chat

    chat = workspace_chat(agent(openai_server, tmp_path),
                          save=SaveOptions(autosave=True, store=tmp_path / "snaps"))
    with chat:
        def cell(source: str) -> Any:
            return [e for e in chat.run_cell(source) if isinstance(e, RunFinished)][0].result

        assert cell("x = 41").status == "success"
        killed = cell("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
        assert killed.status == "error" and "killed by SIGKILL" in killed.steps[0].error
        assert "restored from the save made after step 1 of an earlier turn" in killed.steps[0].observation
        assert [v.name for v in chat.variables.variables] == ["x"]
        assert cell("print(x + 1)").steps[0].observation.strip() == "42"
        name = chat.sandbox.name
    assert containers(name) == []
