"""Durable sessions in the web workspace: the idle timeout saves and restores a session, a restart of
``codeact ui`` keeps it (History's Resume, in Chromium), and the manifest reaches the page as text.

The model is scripted (ScriptedModel in-process; the local OpenAI-compatible test
server for the real ``codeact ui`` command); the sandboxes are real Docker ones.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from codeact.agent import CodeActAgent
from codeact.models import ScriptedModel
from codeact.runlog import RunLog
from codeact.ui import UIOptions, UIServer
from tests.openai_server import OpenAITestServer
from tests.test_ui import request, token_header, wait_idle
from tests.ci import unavailable
from tests.test_ui_browser import (CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, code_reply, open_page, send,
                                   variable, wait_turn_done)

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium for this module only: Playwright's sync API keeps an event loop running in this
    thread while it is open, and later modules call asyncio.run()."""
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        unavailable("browser tests", "the playwright package is not installed (pip install playwright)")
    if not Path(CHROMIUM).exists():
        unavailable("browser tests", f"no Chromium at {CHROMIUM} (apt-get install chromium, or set CODEACT_CHROMIUM)")
    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@contextmanager
def serve(tmp_path: Path, model: ScriptedModel, options: UIOptions | None = None) -> Iterator[UIServer]:
    log = RunLog(tmp_path / "runs.db")
    out = tmp_path / "artifacts"

    def factory(approve: Any) -> CodeActAgent:
        return CodeActAgent(model, sandbox="docker", approve=approve, log=log, output_dir=out)

    opts = UIOptions(output_root=out, snapshot_dir=tmp_path / "snaps", **(options.__dict__ if options else {}))
    server = UIServer(factory, log=log, options=opts, settings={"model": "scripted", "backend": "docker"})
    try:
        with server:
            yield server
    finally:
        log.close()


def test_the_idle_timeout_saves_the_sandbox_and_the_next_message_restores_it(tmp_path: Path) -> None:
    model = ScriptedModel([code_reply("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\nprint(df.shape)"),
                           "loaded",
                           code_reply("print(int(df.a.sum()))"), "six"])
    with serve(tmp_path, model) as server:
        session = server.workspace.create()
        session.send("load df")
        wait_idle(session)
        assert server.workspace.free_idle(now=time.monotonic() + 10_000) == [session.id]
        assert not session.summary()["sandbox_open"]
        session.send("sum it")
        events = wait_idle(session)
    freed = next(e for e in events if e["type"] == "SandboxFreed")
    assert "saved and closed" in freed["message"] and "restores it" in freed["message"]
    notices = [e["message"] for e in events if e["type"] == "Notice"]
    assert any("restored from the snapshot" in n and "restored 2 variables" in n for n in notices), notices
    assert [e for e in events if e["type"] == "Observation"][-1]["stdout"].strip() == "6"
    assert "restored from a snapshot" in model.requests[-2][-1].content  # the model was told, too


def test_history_resume_over_http_after_a_restart_and_the_manifest_is_text(tmp_path: Path) -> None:
    hostile = ("class Evil:\n    def __reduce__(self):\n        raise ValueError('<img src=x onerror=alert(1)>')\n"
               "evil = Evil()\nimport pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\nprint('ready')")
    first = ScriptedModel([code_reply(hostile), "ready"])
    with serve(tmp_path, first) as server:
        session = server.workspace.create()
        session.send("make things")
        wait_idle(session)
        run_id = session.run_ids[-1]
    # the server stopped: its sessions were saved
    second = ScriptedModel([code_reply("print(int(df.a.sum()))"), "six"])
    with serve(tmp_path, second) as server:
        hdr = token_header(server)
        status, _, body = request(server, "GET", "/api/runs", headers=hdr)
        assert status == 200 and json.loads(body)["runs"][0]["resumable"] is True
        status, _, body = request(server, "POST", f"/api/runs/{run_id[:8]}/resume", headers=hdr)
        assert status == 201, body
        session = server.workspace.get(json.loads(body)["id"])
        events = [json.loads(d) for _, d in session.events_after(0)[1]]
        assert [e["type"] for e in events][:2] == ["RunStarted", "ModelOutput"]  # the conversation so far
        notice = next(e["message"] for e in events if e["type"] == "Notice")
        assert notice.startswith("Resumed: restored 3 variables") and "<img src=x onerror=alert(1)>" in notice
        status, _, body = request(server, "GET", f"/api/sessions/{session.id}/variables", headers=hdr)
        assert "df" in body.decode()
        session.send("sum it")
        events = wait_idle(session)
        assert [e for e in events if e["type"] == "Observation"][-1]["stdout"].strip() == "6"
        status, _, body = request(server, "POST", "/api/runs/nosuchrun/resume", headers=hdr)
        assert status == 404 and "No run" in json.loads(body)["error"]


def start_ui(env: dict[str, str], llm: OpenAITestServer) -> tuple[subprocess.Popen[str], str, list[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "codeact.cli", "ui", "--no-browser", "--port", "0",
                             "--backend", "docker", "-m", "test-model", "--base-url", llm.base_url,
                             "--api-key", "sk-test"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True).start()
    deadline = time.monotonic() + 120
    url = None
    while url is None and time.monotonic() < deadline and proc.poll() is None:
        url = next((m.group(0) for line in lines if (m := re.search(r"http://\S+\?token=\S+", line))), None)
        time.sleep(0.1)
    assert url, "".join(lines)
    return proc, url, lines


def stop_ui(proc: subprocess.Popen[str], lines: list[str]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    assert proc.returncode in (0, 130), "".join(lines)


def test_restart_codeact_ui_and_resume_from_history_in_chromium(browser: Any, openai_server: OpenAITestServer,
                                                                tmp_path: Path) -> None:
    from playwright.sync_api import expect

    env = {**os.environ, "CODEACT_DB": str(tmp_path / "runs.db"), "CODEACT_OUTPUT_DIR": str(tmp_path / "out"),
           "CODEACT_SNAPSHOT_DIR": str(tmp_path / "snaps")}
    env.pop("CODEACT_SCRIPTED_REPLIES", None)
    openai_server.plan_text(code_reply("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3], 'b': list('xyz')})\n"
                                       "print(df.shape)"))
    openai_server.plan_text("df is loaded.")
    proc, url, lines = start_ui(env, openai_server)
    try:
        with open_page(browser, url) as page:
            send(page, "load df")
            wait_turn_done(page, 1)
            expect(variable(page, "df").locator(".var-type")).to_contain_text("DataFrame")
    finally:
        stop_ui(proc, lines)  # the sessions are saved as the server stops
    assert list((tmp_path / "snaps").glob("*.snap")), "".join(lines)

    openai_server.plan_text(code_reply("print(int(df.a.sum()), ''.join(df.b))"))
    openai_server.plan_text("The sum is 6.")
    proc, url, lines = start_ui(env, openai_server)
    try:
        with open_page(browser, url) as page:
            page.click("#show-history")
            row = page.locator("#history-list tr.run").first
            expect(row).to_contain_text("saved")
            row.click()
            expect(page.locator("#history-resume")).to_be_visible()
            page.click("#history-resume")
            expect(page.locator("#composer")).to_be_visible()
            conversation = page.locator("#conversations .conversation:not([hidden])")
            expect(conversation).to_contain_text("load df")             # the conversation so far
            expect(conversation).to_contain_text("Resumed: restored")   # what came back
            expect(variable(page, "df").locator(".var-type")).to_contain_text("DataFrame")  # still there
            send(page, "sum of a, and b joined?")
            t = conversation.locator("article.turn").nth(1)  # after the resumed turn
            expect(t.locator(".run-status")).to_be_visible()
            expect(t.locator(".live-output")).to_have_text("6 xyz\n")
    finally:
        stop_ui(proc, lines)
    told = openai_server.chat_requests[2].messages[-1]["content"]
    assert "restored from a snapshot" in told and "Restored: 2 variables (df, pd)" in told, told
