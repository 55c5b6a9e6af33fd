"""Reliability as faults, from outside: a full disk, an engine that dies, many writers, many clients.

Each test is the fault itself against the real parts: a small real file
system (tmpfs) filled up, a second real Docker engine killed with SIGKILL and
started again (``tests/docker_engines.py``; the machine's engine is never
touched), real ``codeact`` processes writing one run log, real MCP clients
over HTTP. Only the model's text is scripted. The checks are what a user sees
afterwards: files on disk, the run log, the terminal, the containers left.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest
from tests.ci import unavailable

ROOT = Path(__file__).resolve().parent.parent


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CODEACT_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY", "CODEACT_DEBUG")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def codeact(*args: str, env: dict[str, str], timeout: float = 300,
            stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "codeact.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, input=stdin)


def replies(path: Path, texts: list[str]) -> str:
    path.write_text(json.dumps(texts), encoding="utf-8")
    return str(path)


@contextlib.contextmanager
def small_filesystem(size: str = "4m") -> Iterator[Path]:
    """A real file system of ``size`` of our own (tmpfs), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    where = Path(tempfile.mkdtemp(prefix="codeact-full-"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        os.rmdir(where)
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)
        with contextlib.suppress(OSError):
            os.rmdir(where)


def partial_files(root: Path) -> list[str]:
    """Temporary files a write left behind (``.name.xxxx.part``, ``*.tmp``)."""
    return [str(p) for p in root.rglob("*") if p.name.endswith((".part", ".tmp")) or ".tmp-" in p.name]


# --- a full disk ---------------------------------------------------------------------------------------------

BIG_AND_SMALL = """```python
import os
open('big.png', 'wb').write(os.urandom(5_700_000))
open('small.csv', 'w').write('a,b\\n1,2\\n')
print('wrote both')
final_answer('done')
```"""


@pytest.mark.docker
def test_full_output_disk_keeps_what_fits_and_says_what_did_not(tmp_path: Path) -> None:
    """big.png (5.7 MB) cannot fit in 4 MB, small.csv (8 B) can: it is kept, and nobody claims big.png was saved."""
    with small_filesystem("4m") as disk:
        out = disk / "out"
        env = _env(CODEACT_DB=str(tmp_path / "runs.db"), CODEACT_OUTPUT_DIR=str(out),
                   CODEACT_SCRIPTED_REPLIES=replies(tmp_path / "r.json", [BIG_AND_SMALL]), COLUMNS="200")
        done = codeact("run", "write two files", "--backend", "docker", env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        (run_dir,) = list(out.iterdir())
        assert sorted(p.name for p in run_dir.iterdir()) == ["small.csv"]
        assert (run_dir / "small.csv").read_text() == "a,b\n1,2\n"
        assert partial_files(disk) == []
        terminal = done.stdout
        assert "file saved" in terminal and "small.csv" in terminal, terminal
        saved_lines = [line for line in terminal.splitlines() if "saved:" in line and "not saved" not in line]
        assert not any("big.png" in line for line in saved_lines), terminal
        # The run log says the same: one artifact, small.csv; the model was told big.png was not saved.
        from codeact.runlog import RunLog

        with RunLog(tmp_path / "runs.db") as log:
            record = log.last_run()
        assert record is not None
        assert [Path(a.path).name for a in record.artifacts] == ["small.csv"], record.artifacts
        observation = record.steps[0].observation or ""
        assert "big.png" in observation and "disk is full" in observation, observation


# --- the engine dies ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def second(docker_ready: None) -> Iterator[object]:
    """A second, real Docker engine of the tests' own (the machine's engine is never touched)."""
    from tests.docker_engines import SecondEngine, can_start_engines

    reason = can_start_engines()
    if reason is not None:
        unavailable("the engine-fault tests", reason)
    engine = SecondEngine(name="faulty")
    try:
        engine.start()
        yield engine
    finally:
        engine.remove()


def _left_on(engine: object, timeout: float = 60) -> list[dict]:
    """Our containers on ``engine`` once it settled (a restarted engine removes what died with it, soon after)."""
    import time

    deadline = time.monotonic() + timeout
    while _ours_on(engine) and time.monotonic() < deadline:
        time.sleep(0.5)
    return [{"name": c["Names"][0], "state": c["State"]} for c in _ours_on(engine)]


def _ours_on(engine: object) -> list[dict]:
    from sandbox._labels import LABEL

    if getattr(engine, "proc", None) is None:
        return []
    return engine.client().api.containers(all=True, filters={"label": LABEL})  # type: ignore[attr-defined]


@pytest.mark.docker
def test_engine_restarted_between_turns_the_chat_goes_on_from_its_autosave(second, tmp_path: Path) -> None:
    """The engine dies (SIGKILL) and comes back between two turns: the next turn runs in a new sandbox restored
    from the last autosave (the variable is there), and the model is told that the session was lost."""
    from codeact import CodeActAgent
    from codeact.models import ScriptedModel
    from codeact.sessions import SaveOptions

    model = ScriptedModel([
        "```python\nkept = 41 + 1\nopen('notes.txt', 'w').write('on disk')\nprint(kept)\n```",
        "```python\nfinal_answer(kept)\n```",
        "```python\nprint(kept, open('notes.txt').read())\n```",
        "```python\nfinal_answer(kept + 1)\n```",
    ])
    agent = CodeActAgent(model, sandbox="docker", sandbox_options={"engine": second.engine},
                         log=str(tmp_path / "runs.db"), output_dir=tmp_path / "out")
    with agent.session(save=SaveOptions(autosave=True, store=tmp_path / "snaps")) as chat:
        first = chat.send("set kept")
        assert first.status == "success" and first.answer == 42, first
        second.kill()
        second.start()
        again = chat.send("print kept")
        assert again.status == "success", again
        assert again.answer == 43
        assert again.steps[0].observation is not None and "42 on disk" in again.steps[0].observation
        told = [m.content for m in chat.messages if m.role == "user" and "print kept" in str(m.content)][0]
        assert "the Python session was lost" in str(told) and "kept" in str(told), told
    assert _left_on(second) == []


@pytest.mark.docker
def test_engine_restarted_during_a_code_action_the_turn_goes_on_from_its_autosave(second, tmp_path: Path) -> None:
    """The engine dies (SIGKILL) and comes back while a later action runs: the turn goes on, its next step runs
    in a new sandbox restored from the last autosave (the variable is there), and the model was told so."""
    import threading

    from codeact import CodeActAgent
    from codeact.events import CodeOutput, RunFinished
    from codeact.models import ScriptedModel
    from codeact.sessions import SaveOptions

    model = ScriptedModel([
        "```python\nx = 41\nfinal_answer(x)\n```",
        "```python\nimport time\nprint('sleeping', flush=True)\ntime.sleep(60)\n```",
        "```python\nprint(x + 1)\n```",
        "```python\nfinal_answer(x + 1)\n```",
    ])
    agent = CodeActAgent(model, sandbox="docker", sandbox_options={"engine": second.engine}, execution_timeout=90,
                         log=str(tmp_path / "runs.db"), output_dir=tmp_path / "out")

    def restart() -> None:
        second.kill()
        second.start()

    restarter = threading.Thread(target=restart)
    with agent.session(save=SaveOptions(autosave=True, store=tmp_path / "snaps")) as chat:
        assert chat.send("set x").answer == 41
        for event in chat.stream("add one"):
            if isinstance(event, CodeOutput) and not restarter.is_alive() and event.step == 1:
                restarter.start()
            if isinstance(event, RunFinished):
                result = event.result
        restarter.join()
        assert result.status == "success" and result.answer == 42, result
        failed, after = result.steps[0], result.steps[1]
        assert "restored from the save made after step 1 of an earlier turn" in (failed.observation or "")
        assert after.observation is not None and after.observation.strip() == "42", after.observation
        told = str(model.requests[2][-1].content)  # what the model read before its next step
        assert "the Python session was lost" in told and "Restored: 1 variables (x)" in told, told
    assert _left_on(second) == []


@pytest.mark.docker
def test_engine_killed_during_a_code_action_ends_it_with_an_error_naming_the_engine(second, tmp_path: Path) -> None:
    """``time.sleep(60)`` runs when the (TLS, remote) engine dies: the action ends well within its limit, its
    error names the engine, the run ends; back up, the engine holds nothing of ours (nothing for ``reap``)."""
    import threading
    import time

    from codeact import CodeActAgent
    from codeact.events import Observation
    from codeact.models import ScriptedModel

    model = ScriptedModel(["```python\nimport time\nprint('sleeping', flush=True)\ntime.sleep(60)\n```",
                           "The sandbox's engine went away; I stop here."])
    agent = CodeActAgent(model, sandbox="docker", sandbox_options={"engine": second.engine},
                         execution_timeout=50, log=str(tmp_path / "runs.db"), output_dir=tmp_path / "out")
    killer: threading.Timer | None = None
    observations: list[Observation] = []
    started = time.monotonic()
    for event in agent.stream("sleep"):
        if type(event).__name__ == "CodeOutput" and killer is None:
            killer = threading.Timer(1.0, second.kill)
            killer.start()
        if isinstance(event, Observation):
            observations.append(event)
            ended = time.monotonic()
    assert killer is not None
    killer.join()
    (observation,) = observations
    assert ended - started < 50, "the action waited past its own time limit"  # bound, not a speed claim
    assert observation.error is not None
    assert f"faulty ({second.url})" in observation.error, observation.error
    second.start()
    assert _left_on(second) == []


@pytest.mark.docker
def test_a_pool_refills_once_its_engine_is_back(second) -> None:
    """Warm sessions die with their engine: the pool never hands one out, and refills once the engine is back."""
    import time

    from sandbox import DockerSandbox, SandboxPool

    with SandboxPool(lambda: DockerSandbox(engine=second.engine, timeout=60), size=2) as pool:
        deadline = time.monotonic() + 120
        while pool.ready < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pool.ready == 2
        before = {c["Names"][0] for c in _ours_on(second)}
        second.kill()
        second.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            now = {c["Names"][0] for c in _ours_on(second) if c["State"] == "running"}
            if pool.ready == 2 and len(now) == 2 and not now & before:
                break
            time.sleep(0.2)
        assert pool.ready == 2 and not now & before, (before, now)
        with pool.acquire() as sb:
            result = sb.run("print(6 * 7)")
            assert result.stdout == "42\n" and not result.restarts, result
    assert _left_on(second) == [], before


# --- many writers ---------------------------------------------------------------------------------------------


def _start_ui(env: dict[str, str], *args: str) -> tuple[subprocess.Popen[str], str, list[str]]:
    """``codeact ui`` in a process of its own; (process, url with the token, its stderr lines)."""
    import re
    import threading
    import time

    proc = subprocess.Popen([sys.executable, "-m", "codeact.cli", "ui", "--no-browser", "--port", "0", *args],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True).start()  # type: ignore[union-attr]
    deadline = time.monotonic() + 120
    url = None
    while url is None and time.monotonic() < deadline and proc.poll() is None:
        url = next((m.group(0) for line in list(lines) if (m := re.search(r"http://\S+\?token=\S+", line))), None)
        time.sleep(0.1)
    assert url, "".join(lines)
    return proc, url, lines


class UIClient:
    """The web UI's HTTP API, as its page uses it (the token header, the Host it was started for)."""

    def __init__(self, url: str) -> None:
        import re

        m = re.match(r"http://([\d.]+):(\d+)/\?token=(\S+)", url)
        assert m, url
        self.host, self.port, self.token = m.group(1), int(m.group(2)), m.group(3)

    def call(self, method: str, path: str, body: object = None) -> tuple[int, object]:
        import http.client

        conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body).encode(),
                         headers={"Host": f"{self.host}:{self.port}", "X-CodeAct-Token": self.token,
                                  "Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        return resp.status, (json.loads(data) if data else None)


def _stop(proc: subprocess.Popen[str]) -> None:
    import signal

    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_eight_processes_write_one_run_log(tmp_path: Path) -> None:
    """``run`` x4, ``chat`` x2 (stdin), ``ui`` (two chats over HTTP) and ``bench`` write one run log at once:
    no "database is locked", every run recorded, the file intact."""
    import sqlite3
    import time

    out = tmp_path / "bench"
    db = out / "runs.db"  # bench keeps its runs in <out>/runs.db: everyone else writes there too
    reply = "```python\nx = sum(range(10))\nprint(x)\nfinal_answer(x)\n```"
    env = _env(CODEACT_DB=str(db), CODEACT_OUTPUT_DIR=str(tmp_path / "out"),
               CODEACT_SCRIPTED_REPLIES=replies(tmp_path / "r.json", [reply] * 40),
               CODEACT_SNAPSHOT_DIR=str(tmp_path / "snaps"))
    py = [sys.executable, "-m", "codeact.cli"]
    pipe = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, "env": env}
    ui, url, ui_lines = _start_ui(env, "--backend", "restricted")
    procs: list[tuple[str, subprocess.Popen[str]]] = []
    try:
        client = UIClient(url)
        sessions = [client.call("POST", "/api/sessions")[1]["id"] for _ in range(2)]  # type: ignore[index]
        procs += [("run", subprocess.Popen(py + ["run", f"run {i}", "--backend", "restricted"], **pipe))
                  for i in range(4)]
        for i in range(2):
            chat = subprocess.Popen(py + ["chat", "--backend", "restricted"], stdin=subprocess.PIPE, **pipe)
            chat.stdin.write(f"chat {i} turn 1\nchat {i} turn 2\n")  # type: ignore[union-attr]
            chat.stdin.close()  # type: ignore[union-attr]
            chat.stdin = None
            procs.append(("chat", chat))
        bench_env = {k: v for k, v in env.items() if k != "CODEACT_SCRIPTED_REPLIES"}
        procs.append(("bench", subprocess.Popen(
            py + ["bench", "run", "--suite", "tool-chains", "--model", "oracle", "--agents", "codeact,react-json",
                  "--backend", "restricted", "--task", "shop-cheapest-lamp-in-stock", "--task",
                  "shop-audio-average-stars", "--concurrency", "2", "--out", str(out), "--no-plots"],
            **{**pipe, "env": bench_env})))
        for i, sid in enumerate(sessions):
            assert client.call("POST", f"/api/sessions/{sid}/messages", {"text": f"ui {i}"})[0] == 202
        outputs = []
        for name, proc in procs:
            stdout, stderr = proc.communicate(timeout=300)
            outputs.append(stdout + stderr)
            assert proc.returncode == 0, (name, stderr[-2000:])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            runs = client.call("GET", "/api/runs")[1]["runs"]  # type: ignore[index]
            if sum(1 for r in runs if r["task"].startswith("ui ") and r["status"] == "success") == 2:
                break
            time.sleep(0.2)
    finally:
        _stop(ui)
        for _, proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for text in outputs + ["".join(ui_lines)]:
        assert "locked" not in text.lower() and "Traceback" not in text, text[-2000:]
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rows = conn.execute("SELECT task, status FROM runs").fetchall()
    tasks = sorted(t for t, _ in rows)
    assert [t for t in tasks if t.startswith(("run ", "chat ", "ui "))] == sorted(
        [f"run {i}" for i in range(4)] + [f"chat {i} turn {j}" for i in range(2) for j in (1, 2)]
        + ["ui 0", "ui 1"]), tasks
    assert len(rows) == 14, tasks  # and the bench's four episodes
    assert {s for _, s in rows} == {"success"}, rows


# --- load -----------------------------------------------------------------------------------------------------


@pytest.mark.docker
def test_sixteen_mcp_clients_keep_their_own_state_and_leave_nothing(tmp_path: Path) -> None:
    """16 SDK clients over streamable HTTP, 20 calls each (set, read back, write a file, list files): no error,
    no cross-talk, every container gone once they leave; 8 clients SIGKILLed mid-call leave nothing either
    (their sandboxes go with the idle timeout: a killed client cannot say goodbye)."""
    from tests.mcp_load import kill_mid_call, mcp_server, run_load, summary, wait_no_containers

    with mcp_server(max_sessions=24, idle_timeout=15, timeout=30,
                    env={"CODEACT_OUTPUT_DIR": str(tmp_path / "out")}) as (url, server):
        result = run_load(url, clients=16, calls=20)
        figures = summary(result)
        assert result.errors == [] and result.crosstalk == [], figures
        assert result.calls == 16 * 20, figures
        left, _ = wait_no_containers(server.pid, timeout=60)
        assert left == [], f"containers left after the clients closed: {left}"
        assert kill_mid_call(url, clients=8) == 8
        left, _ = wait_no_containers(server.pid, timeout=120)
        log = Path(server.log_path).read_text(errors="replace")[-3000:]  # type: ignore[attr-defined]
        assert left == [], f"containers left after 8 clients were killed mid-call: {left}\n{log}"
        assert server.poll() is None  # the server is still up, and serves
        again = run_load(url, clients=1, calls=4)
        assert again.errors == [] and again.crosstalk == [], summary(again)
        left, _ = wait_no_containers(server.pid, timeout=60)
        assert left == []


def test_eight_ui_chats_at_once_finish_without_cross_talk(tmp_path: Path) -> None:
    """``codeact ui`` with 8 chats sent at once over its HTTP API: all finish, each kernel holds only its own value."""
    import time

    # One reply per chat, each a different value: whichever chat gets which, no two may end up sharing one.
    texts = [f"```python\nmine = 'value {k}'\nfinal_answer(mine)\n```" for k in range(8)]
    env = _env(CODEACT_DB=str(tmp_path / "runs.db"), CODEACT_OUTPUT_DIR=str(tmp_path / "out"),
               CODEACT_SCRIPTED_REPLIES=replies(tmp_path / "r.json", texts),
               CODEACT_SNAPSHOT_DIR=str(tmp_path / "snaps"))
    ui, url, lines = _start_ui(env, "--backend", "local", "--max-sessions", "8")
    try:
        client = UIClient(url)
        sessions = []
        for _ in range(8):
            status, body = client.call("POST", "/api/sessions")
            assert status == 201, body
            sessions.append(body["id"])  # type: ignore[index]
        for i, sid in enumerate(sessions):
            assert client.call("POST", f"/api/sessions/{sid}/messages", {"text": f"chat {i}"})[0] == 202
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            runs = client.call("GET", "/api/runs")[1]["runs"]  # type: ignore[index]
            if sum(r["status"] != "running" for r in runs if r["task"].startswith("chat ")) == 8:
                break
            time.sleep(0.2)
        assert sorted(r["task"] for r in runs) == [f"chat {i}" for i in range(8)], runs
        assert all(r["status"] == "success" for r in runs), runs
        held = []
        for sid in sessions:
            status, body = client.call("GET", f"/api/sessions/{sid}/variables")
            assert status == 200, body
            values = [json.dumps(v) for v in body["variables"] if v.get("name") == "mine"]  # type: ignore[index]
            assert len(values) == 1, body
            held.append(next(f"value {k}" for k in range(8) if f"value {k}" in values[0]))
        assert sorted(held) == [f"value {k}" for k in range(8)], held  # eight kernels, eight values
    finally:
        _stop(ui)
    assert "Traceback" not in "".join(lines), "".join(lines)[-3000:]


def _fill(disk: Path) -> Path:
    """Fill ``disk`` to the last byte with one file (removed by the caller to free it again)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 1 << 16, 4096, 512, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                continue
    finally:
        os.close(fd)
    return filler


@pytest.mark.docker
def test_full_data_directory_the_chat_answers_and_loses_nothing_it_had(tmp_path: Path) -> None:
    """Run log, snapshots and artifacts on one small file system, filled up between two turns: the turn still
    answers; the log warns once per run at most and stays intact; the failed save is an error event and leaves
    no half-written file; the previous snapshot still restores."""
    import sqlite3
    import warnings

    from codeact import CodeActAgent
    from codeact.events import ErrorEvent
    from codeact.models import ScriptedModel
    from codeact.sessions import SaveOptions
    from sandbox import DockerSandbox
    from sandbox.snapshot import Snapshot

    model = ScriptedModel([
        "```python\nkept = 21\nprint(kept)\n```", "```python\nfinal_answer(kept)\n```",
        "```python\nbig = 'x' * 3_000_000\nopen('out.txt', 'w').write(big)\nprint(kept * 2)\n```",
        "```python\nfinal_answer(kept * 2)\n```",
    ])
    with small_filesystem("16m") as disk:
        snaps = disk / "snaps"
        agent = CodeActAgent(model, sandbox="docker", log=str(disk / "runs.db"), output_dir=disk / "out")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with agent.session(save=SaveOptions(autosave=True, store=snaps, on_close=False)) as chat:
                first = chat.send("set kept")
                assert first.answer == 21
                before = sorted(p.name for p in snaps.iterdir())
                assert before, "the first turn was saved"
                filler = _fill(disk)
                events = list(chat.stream("double it"))
            log_warnings = [w for w in caught if "run log" in str(w.message)]
        finished = events[-1].result  # type: ignore[attr-defined]
        assert finished.status == "success" and finished.answer == 42, finished
        assert len(log_warnings) <= 1, [str(w.message) for w in log_warnings]
        saves = [e for e in events if isinstance(e, ErrorEvent) and e.kind == "session"]
        assert saves and all("could not be saved" in e.message for e in saves), saves
        assert not (disk / "out").exists() or partial_files(disk / "out") == []
        assert partial_files(disk) == [], partial_files(disk)
        filler.unlink()
        with contextlib.closing(sqlite3.connect(disk / "runs.db")) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            assert conn.execute("SELECT count(*) FROM runs WHERE task = 'set kept'").fetchone() == (1,)
            second = conn.execute("SELECT status FROM runs WHERE task = 'double it'").fetchall()
        # Either the log said once that it could not record the turn, or it had room and recorded it whole.
        assert (len(log_warnings) == 1 and "could not record this run" in str(log_warnings[0].message)
                or second == [("success",)]), (second, [str(w.message) for w in log_warnings])
        newest = max((snaps / name for name in before if name.endswith(".snap")), key=lambda p: p.stat().st_mtime)
        with DockerSandbox.restore(Snapshot.open(newest)) as sb:
            assert sb.run("print(kept)").stdout == "21\n"
