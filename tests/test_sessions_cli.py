"""Durable sessions through the real CLI: ``codeact chat --autosave`` killed with SIGKILL mid-chat, then
``codeact chat --resume``; ``codeact sessions list|show|rm``.

The CLI runs on a pseudo-terminal against the real Docker sandbox; the model is
the local OpenAI-compatible test server (scripted replies, every request recorded).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from codeact.runlog import RunLog
from tests.test_chat_terminal import WAIT, Terminal, code, codeact_command

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CODEACT_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY", "CODEACT_SCRIPTED_REPLIES",
                        "CODEACT_DEBUG", "NO_COLOR", "CI", "GITHUB_ACTIONS")}
    env.update({"CODEACT_DB": str(tmp_path / "runs.db"), "CODEACT_OUTPUT_DIR": str(tmp_path / "artifacts"),
                "CODEACT_SNAPSHOT_DIR": str(tmp_path / "snapshots"),
                "TERM": "xterm-256color", "COLUMNS": "140", "LINES": "40", "PYTHONUNBUFFERED": "1"})
    return env


@pytest.fixture
def terminals() -> Any:
    opened: list[Terminal] = []

    def start(argv: list[str], env: dict[str, str], cwd: Path) -> Terminal:
        term = Terminal(argv, env, cwd)
        opened.append(term)
        return term

    yield start
    for term in opened:
        term.close()


def chat_argv(server: Any, *more: str) -> list[str]:
    return [*codeact_command(), "chat", "--model", "test-model", "--base-url", server.base_url,
            "--api-key", "sk-test", *more]


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*codeact_command(), *args], env=env, capture_output=True, text=True, timeout=WAIT)


def test_kill_9_mid_chat_then_resume_has_the_last_completed_step(
        openai_server: Any, cli_env: dict[str, str], tmp_path: Path, terminals: Any) -> None:
    openai_server.plan_text(code("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\nx = 41\n"
                                 "print('step' + '-one-done')"))
    openai_server.plan_text(code("x = 1000\nprint('step' + '-two-running', flush=True)\nimport time\n"
                                 "while True:\n    time.sleep(0.05)"))
    term = terminals(chat_argv(openai_server, "--autosave"), cli_env, tmp_path)
    at = term.expect("> ")
    term.send("make df and x\r")
    at = term.expect("step-two-running", at)
    os.kill(term.pid, signal.SIGKILL)  # the CLI dies at once: no save at the end, no clean-up
    term.wait()

    with RunLog(cli_env["CODEACT_DB"]) as log:
        (run,) = log.list_runs()
        assert run.status == "interrupted"
        (saved,) = log.list_snapshots()
    assert saved.run_id == run.id and saved.step == 1  # the autosave after step 1; step 2 never completed
    assert {v["name"] for v in saved.manifest["variables"]} >= {"df", "x", "pd"}

    openai_server.plan_text(code("print('x =', x, 'sum =', int(df.a.sum()))"))
    openai_server.plan_text("x is 41 and the sum is 6.")
    term = terminals(chat_argv(openai_server, "--resume", run.id), cli_env, tmp_path)
    at = term.expect("Resumed: restored ")
    at = term.expect("> ", at)
    term.send("what are x and the sum of df.a?\r")
    at = term.expect("x is 41 and the sum is 6.", at)
    at = term.expect("> ", at)
    term.send("/exit\r")
    assert term.wait() == 0, term.screen
    assert "Saved session" in term.screen and "Traceback" not in term.screen

    first = openai_server.chat_requests[2].messages  # the model's first request after the resume
    roles = [m["role"] for m in first]
    assert roles[:4] == ["system", "user", "assistant", "user"], roles  # the conversation, rebuilt
    assert first[1]["content"] == "make df and x" and "step-one-done" in first[3]["content"]
    note = first[-1]["content"]
    assert "restored from a snapshot" in note and "after step 1" in note, note
    assert "Restored: 3 variables (df, pd, x)" in note, note
    assert "Lost:" in note and "x = 1000" in note and "while True" in note, note  # step 2 and its code
    assert note.endswith("what are x and the sum of df.a?"), note
    # the restored kernel had step 1's x, not the killed step's
    observation = openai_server.chat_requests[3].messages[-1]["content"]
    assert "x = 41 sum = 6" in observation, observation


def test_sessions_list_show_rm_and_a_hostile_manifest_is_printed_as_text(
        openai_server: Any, cli_env: dict[str, str], tmp_path: Path, terminals: Any) -> None:
    # Hostile code: a variable whose pickling fails with a message full of markup and escapes.
    hostile = ("class Evil:\n    def __reduce__(self):\n        raise ValueError('[bold red]owned[/] <script>alert(1)"
               "</script> \\x1b]8;;http://evil\\x07link\\x1b]8;;\\x07 \\x1b[2J')\nevil = Evil()\nkept = 7")
    openai_server.plan_text(code(hostile + "\nfinal_answer('ok')"))
    term = terminals(chat_argv(openai_server), cli_env, tmp_path)
    at = term.expect("> ")
    term.send("define things\r")
    at = term.expect("> ", term.expect("ok", at))
    term.send("/save\r")
    at = term.expect("Saved session", at)
    at = term.expect("> ", at)
    term.send("/exit\r")
    assert term.wait() == 0, term.screen

    listed = cli(cli_env, "sessions", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert len(rows) == 1  # /save and the save at the end: nothing changed between them, one snapshot
    (row,) = rows
    assert {"kept", "Evil"} <= {v["name"] for v in row["variables"]}
    assert row["not_saved"][0]["name"] == "evil"

    shown = cli(cli_env, "sessions", "show", row["session"])
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "\x1b" not in out and "\x07" not in out  # escapes are shown as text, never sent to the terminal
    assert "[bold red]owned[/] <script>" in out and "\\x1b" in out
    assert f"resume with: codeact chat --resume {row['id']}" in out

    snap_file = Path(cli_env["CODEACT_SNAPSHOT_DIR"]) / f"{row['id']}.snap"
    assert snap_file.is_file()
    missing = cli(cli_env, "sessions", "rm", "nosuchthing")
    assert missing.returncode == 1 and "No saved session" in missing.stderr, missing.stderr
    removed = cli(cli_env, "sessions", "rm", row["session"][:6])
    assert removed.returncode == 0, removed.stderr
    assert not snap_file.exists()
    assert json.loads(cli(cli_env, "sessions", "--json").stdout) == []
    with RunLog(cli_env["CODEACT_DB"]) as log:
        assert len(log.list_runs()) == 1  # the run itself stays


def test_resume_of_nothing_is_one_clear_error(cli_env: dict[str, str], openai_server: Any) -> None:
    out = subprocess.run(chat_argv(openai_server, "--resume", "abc123"), env=cli_env, capture_output=True,
                         text=True, timeout=WAIT, input="/exit\n")
    assert out.returncode == 1, out.stderr
    assert "No saved session" in out.stderr and "codeact sessions list" in out.stderr
    assert "Traceback" not in out.stderr
