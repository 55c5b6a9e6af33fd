"""A new session's sandbox starts while the model writes its first reply (the cold start is overlapped, not cut).

The scripted model's first reply waits until the session's kernel is up: if the start waited for the model (as
it did), the reply would never come and the test would fail at the wait's bound. A start that fails on its
thread is reported as the failure it is: fatal when the turn needs the sandbox, a note when it did not.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from codeact import CodeActAgent, ScriptedModel
from codeact.events import ErrorEvent, Event, FinalAnswer, RunFinished

pytestmark = [pytest.mark.docker, pytest.mark.timeout(180)]


def py(code: str) -> str:
    return f"Let me run it.\n```python\n{code}\n```"


def events_of(agent: CodeActAgent, task: str, **options: Any) -> list[Event]:
    return list(agent.stream(task, **options))


def test_the_sandbox_starts_while_the_model_writes_its_first_reply(tmp_path: Path) -> None:
    data = tmp_path / "numbers.csv"
    data.write_text("a\n1\n2\n")
    chats: list[Any] = []
    seen: dict[str, Any] = {}

    def first_reply(messages: Any) -> str:
        chat = chats[0]
        deadline = time.monotonic() + 60
        # The kernel comes up while this reply is being "written" (KernelSandbox._sup: its supervisor stream).
        while getattr(chat.sandbox, "_sup", None) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        seen["started_during_the_model_call"] = getattr(chat.sandbox, "_sup", None) is not None
        return py("print(open('numbers.csv').read().split())")

    model = ScriptedModel([first_reply, "The numbers are 1 and 2."])
    agent = CodeActAgent(model, sandbox="docker", log=tmp_path / "runs.db", output_dir=tmp_path / "out")
    with agent.session() as chat:
        chats.append(chat)
        events = list(chat.stream("Read numbers.csv", files=[data]))
    result = events[-1].result  # type: ignore[attr-defined]
    assert seen["started_during_the_model_call"]
    assert result.status == "success", result
    # The file was put in before the first code action ran, and the model was told about it up front.
    assert "['a', '1', '2']" in result.steps[0].observation
    assert "numbers.csv" in model.requests[0][0].content + model.requests[0][1].content


def test_files_of_a_turn_that_ran_no_code_are_there_for_the_next(tmp_path: Path) -> None:
    data = tmp_path / "notes.txt"
    data.write_text("kept for later")
    model = ScriptedModel(["I have the file; what should I do with it?", py("print(open('notes.txt').read())"),
                           "It says: kept for later."])
    agent = CodeActAgent(model, sandbox="docker", log=tmp_path / "runs.db", output_dir=tmp_path / "out")
    with agent.session() as chat:
        first = list(chat.stream("Here is a file", files=[data]))
        assert first[-1].result.status == "success"  # type: ignore[attr-defined]
        assert not [e for e in first if isinstance(e, ErrorEvent)]
        assert [f.path for f in chat.list_files()] == ["notes.txt"]
        second = list(chat.stream("Read it"))
    result = second[-1].result  # type: ignore[attr-defined]
    assert result.status == "success" and result.steps[0].observation.strip() == "kept for later", result


def test_a_start_that_fails_on_its_thread_fails_the_first_code_action(tmp_path: Path) -> None:
    """Docker refuses a 1 MiB memory limit when it starts the container (not when the sandbox is made)."""
    model = ScriptedModel([py("print(1)")])
    agent = CodeActAgent(model, sandbox="docker", sandbox_options={"memory": "1m"}, log=tmp_path / "runs.db",
                         output_dir=tmp_path / "out")
    events = events_of(agent, "print one")
    result = events[-1].result  # type: ignore[attr-defined]
    assert result.status == "error", result
    fatal = [e for e in events if isinstance(e, ErrorEvent) and e.fatal]
    assert fatal and fatal[0].kind == "sandbox" and "memory" in fatal[0].message.lower(), fatal
    assert len(model.requests) == 1  # the model was asked once; nothing ran


def test_a_start_that_fails_when_the_turn_needed_no_sandbox_is_a_note(tmp_path: Path) -> None:
    model = ScriptedModel(["Hello! No code needed for that.", py("print(2)")])
    agent = CodeActAgent(model, sandbox="docker", sandbox_options={"memory": "1m"}, log=tmp_path / "runs.db",
                         output_dir=tmp_path / "out")
    with agent.session() as chat:
        events = list(chat.stream("Say hello"))
        assert isinstance(events[-1], RunFinished) and events[-1].result.status == "success"
        assert any(isinstance(e, FinalAnswer) for e in events)
        notes = [e for e in events if isinstance(e, ErrorEvent)]
        assert notes and not notes[0].fatal and notes[0].kind == "sandbox", notes
        assert chat.sandbox is None  # the next turn opens one again (and fails the same way, loudly)
        again = list(chat.stream("Now print two"))
        assert again[-1].result.status == "error"  # type: ignore[attr-defined]
