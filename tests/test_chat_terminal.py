"""``codeact chat`` and ``codeact run`` in a real pseudo-terminal, as a person uses them.

The CLI runs as a subprocess on the slave side of a pty (so it is a terminal: the
live view is on, Ctrl-C is a byte the line discipline turns into SIGINT for the
foreground process group), against the real Docker sandbox. The model is the
local OpenAI-compatible test server with scripted replies, or
``$CODEACT_SCRIPTED_REPLIES``. No step waits on a clock: a host tool holds the
code until the test has seen what it waits for.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import signal
import struct
import sys
import termios
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from codeact.agent import USER_INTERRUPT_NOTE
from codeact.runlog import RunLog

pytestmark = pytest.mark.docker

#: Generous bounds for "did not hang"; never a speed assertion.
WAIT = 120.0

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]")


def codeact_command() -> list[str]:
    script = Path(sys.executable).with_name("codeact")
    return [str(script)] if script.exists() else [sys.executable, "-m", "codeact.cli"]


class Terminal:
    """A command on a pseudo-terminal: type into it, wait for text on its screen, collect its exit status."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: exec at once (the parent has threads)
            try:
                os.chdir(cwd)
                os.execvpe(argv[0], argv, env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
        self._raw = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.returncode: int | None = None

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                return
            if not data:
                return
            with self._lock:
                self._raw += data

    @property
    def screen(self) -> str:
        """Everything written so far, escape sequences and carriage returns removed."""
        with self._lock:
            text = self._raw.decode("utf-8", "replace")
        return _ANSI.sub("", text).replace("\r", "")

    def expect(self, needle: str, since: int = 0, timeout: float = WAIT) -> int:
        """Wait until ``needle`` is on the screen after offset ``since``; returns the offset after it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen
            at = screen.find(needle, since)
            if at >= 0:
                return at + len(needle)
            if self.poll() is not None and self.screen == screen:
                break
            time.sleep(0.05)
        raise AssertionError(f"{needle!r} did not appear (exit status {self.returncode}); screen:\n{self.screen}")

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float = WAIT) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"the command did not end; screen:\n{self.screen}")
            time.sleep(0.05)
        self._reader.join(5)
        assert self.returncode is not None
        return self.returncode

    def close(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            self.wait(30)
        os.close(self.fd)


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CODEACT_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY", "CODEACT_SCRIPTED_REPLIES",
                        "CODEACT_DEBUG", "NO_COLOR", "CI", "GITHUB_ACTIONS")}
    # CI=true would make rich treat the terminal as not interactive; this test is about a person at one.
    env.update({"CODEACT_DB": str(tmp_path / "runs.db"), "CODEACT_OUTPUT_DIR": str(tmp_path / "artifacts"),
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


def chat_argv(server: Any) -> list[str]:
    return [*codeact_command(), "chat", "--model", "test-model", "--base-url", server.base_url, "--api-key", "sk-test"]


def code(source: str) -> str:
    return f"```python\n{source}\n```"


LOOP = code("import time\nprint('loop' + '-started', flush=True)\nwhile True:\n    time.sleep(0.05)")


def test_ctrl_c_in_chat_interrupts_the_code_and_keeps_the_variables(
        openai_server: Any, cli_env: dict[str, str], tmp_path: Path, terminals: Any) -> None:
    openai_server.plan_text(code("x = 41\nfinal_answer('x is' + ' set')"))
    openai_server.plan_text(LOOP)
    openai_server.plan_text(code("final_answer(x + 1)"))
    term = terminals(chat_argv(openai_server), cli_env, tmp_path)
    at = term.expect("> ")
    term.send("set x\r")
    at = term.expect("x is set", at)
    at = term.expect("> ", at)
    term.send("loop for ever\r")
    at = term.expect("loop-started", at)  # the code's output, live (it never ends on its own)
    term.send("\x03")
    at = term.expect("the session keeps its variables", at)
    at = term.expect("> ", at)
    assert len(openai_server.chat_requests) == 2, "the interrupted turn went back to the model"
    term.send("what is x + 1?\r")
    at = term.expect("> ", at)
    term.send("/exit\r")
    assert term.wait() == 0, term.screen
    print(term.screen)
    assert "site-packages" not in term.screen and "codeact/cli" not in term.screen  # no traceback of our own

    # The variable set before the interrupt was still there after it: same kernel, same session.
    with RunLog(cli_env["CODEACT_DB"]) as log:
        runs = log.list_runs()
        assert [r.status for r in runs] == ["success", "cancelled", "success"], term.screen
        assert log.get_run(runs[0].id).answer == 42, term.screen
    # The model's next request has the interrupted step's observation, which says the user did it.
    third = openai_server.chat_requests[2].messages
    observations = [m["content"] for m in third if m["role"] == "user" and "Observation" in str(m["content"])]
    assert any("KeyboardInterrupt" in o and USER_INTERRUPT_NOTE in o for o in observations), observations


def test_two_ctrl_c_in_a_row_quit_the_chat(openai_server: Any, cli_env: dict[str, str], tmp_path: Path,
                                           terminals: Any) -> None:
    openai_server.plan_text(LOOP)
    term = terminals(chat_argv(openai_server), cli_env, tmp_path)
    at = term.expect("> ")
    term.send("loop for ever\r")
    at = term.expect("loop-started", at)
    term.send("\x03")
    at = term.expect("Ctrl-C again to quit", at)  # two presses at once would reach Python as one signal
    term.send("\x03")
    assert term.wait() == 130, term.screen
    assert "site-packages" not in term.screen and "codeact/cli" not in term.screen
    with RunLog(cli_env["CODEACT_DB"]) as log:
        assert [r.status for r in log.list_runs()] == ["cancelled"]


def test_ctrl_c_at_the_prompt_twice_quits(openai_server: Any, cli_env: dict[str, str], tmp_path: Path,
                                          terminals: Any) -> None:
    term = terminals(chat_argv(openai_server), cli_env, tmp_path)
    at = term.expect("> ")
    term.send("\x03")
    at = term.expect("Ctrl-C again to quit", at)
    term.send("\x03")
    assert term.wait() == 130, term.screen


TOOLS = '''
import os
import time


def wait_for_go() -> str:
    """Wait until the test says go (a file it creates), at most two minutes."""
    deadline = time.monotonic() + 120
    while not os.path.exists(os.environ["GO_FILE"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return "go"
'''


def test_run_shows_the_codes_output_while_it_runs(cli_env: dict[str, str], tmp_path: Path, terminals: Any) -> None:
    (tmp_path / "gate.py").write_text(TOOLS)
    go = tmp_path / "go"
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([code(
        "print('first' + '-line', flush=True)\nwait_for_go()\nprint('second' + '-line')\nfinal_answer('all' + ' done')"
    )]))
    env = {**cli_env, "CODEACT_SCRIPTED_REPLIES": str(replies), "GO_FILE": str(go)}
    term = terminals([*codeact_command(), "run", "print two lines", "--tools", f"{tmp_path / 'gate.py'}:ALL"],
                     env, tmp_path)
    # The code is still running (it waits for the go file) when its first line shows.
    at = term.expect("first-line")
    assert "second-line" not in term.screen and not go.exists()
    go.touch()
    term.expect("second-line", at)
    term.expect("all done", at)
    assert term.wait() == 0, term.screen
