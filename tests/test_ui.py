"""The web UI's server side without a browser: the token and Host checks over real HTTP, the
page events, sessions, approvals, idle timeout and the agent additions the UI relies on.

The browser tests are in ``test_ui_browser.py``.
"""

from __future__ import annotations

import http.client
import json
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from codeact.agent import CodeActAgent
from codeact.code_artifacts import output_bundles as _output_bundles
from codeact.errors import ConfigError, SessionBusy, SessionLimitReached, UIError
from codeact.events import Observation
from codeact.models import ScriptedModel
from codeact.runlog import RunLog
from codeact.tools import tool
from codeact.ui import UIOptions, UIServer
from codeact.ui._app import upload_name
from codeact.ui._security import Guard, allowed_hosts_for
from codeact.ui._wire import _traceback_of, dumps, output_items, shown
from sandbox.result import Output


@contextmanager
def serve(tmp_path: Path, replies: list[Any], *, tools: tuple[Any, ...] = (),
          options: UIOptions | None = None) -> Iterator[UIServer]:
    """A UI server on a free port over a scripted model and the local backend."""
    model = ScriptedModel(replies)
    log = RunLog(tmp_path / "runs.db")
    out = tmp_path / "artifacts"

    def factory(approve: Any) -> CodeActAgent:
        return CodeActAgent(model, list(tools), sandbox="local", approve=approve, log=log, output_dir=out,
                            stream_model=True)

    base = options or UIOptions()
    opts = UIOptions(**{**base.__dict__, "output_root": out})
    server = UIServer(factory, log=log, options=opts, settings={"model": "scripted", "backend": "local"})
    try:
        with server:
            yield server
    finally:
        log.close()


def request(server: UIServer, method: str, path: str, *, headers: dict[str, str] | None = None,
            body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        hdrs = {"Host": f"127.0.0.1:{server.port}", **(headers or {})}
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def token_header(server: UIServer) -> dict[str, str]:
    return {"X-CodeAct-Token": server.token}


def wait_for(session: Any, predicate: Any, *, after: int = 0, timeout: float = 30) -> dict[str, Any]:
    """The first event numbered above ``after`` that ``predicate`` accepts."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for _, data in session.events_after(after)[1]:
            event = json.loads(data)
            if predicate(event):
                return event
        time.sleep(0.05)
    raise AssertionError("no such event")


def wait_idle(session: Any, timeout: float = 60) -> list[dict[str, Any]]:
    """The session's events once its turn has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = [json.loads(d) for _, d in session.events_after(0)[1]]
        if events and events[-1]["type"] == "Idle" and not session.busy:
            return events
        time.sleep(0.05)
    raise AssertionError("the turn did not end")


# --------------------------------------------------------------------------- the guard


def test_host_header_check_accepts_only_this_server() -> None:
    guard = Guard("t", 8765, allowed_hosts_for("127.0.0.1"))
    for ok in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765", "LOCALHOST:8765"):
        assert guard.host_allowed(ok), ok
    for bad in ("evil.example:8765", "127.0.0.1.evil.example", "", None, "attacker.com"):
        assert not guard.host_allowed(bad), bad
    wildcard = Guard("t", 1, allowed_hosts_for("0.0.0.0"))
    assert wildcard.host_allowed("anything:1")  # the token is the check then
    named = Guard("t", 1, allowed_hosts_for("0.0.0.0", ["box.lan"]))
    assert named.host_allowed("box.lan:1") and not named.host_allowed("evil:1")


def test_every_request_without_the_token_is_refused(tmp_path: Path) -> None:
    with serve(tmp_path, []) as server:
        sid = server.workspace.create().id
        hdr = token_header(server)
        refused = [
            ("GET", "/", None, {}),
            ("GET", "/?token=wrong", None, {}),
            ("GET", "/static/app.js", None, {}),
            ("GET", "/api/sessions", None, {}),
            ("GET", f"/api/sessions/{sid}/events", None, {}),
            ("PUT", f"/api/sessions/{sid}/files/a.csv", b"x,y\n", {}),
            ("GET", f"/api/sessions/{sid}/files/a.csv", None, {}),
            ("POST", f"/api/sessions/{sid}/approvals/abc", b'{"allow": true}', {}),
            ("POST", f"/api/sessions/{sid}/messages", b'{"text": "hi"}', {}),
            ("POST", f"/api/sessions/{sid}/run", b'{"code": "print(1)"}', {}),
            ("POST", f"/api/sessions/{sid}/restart", b"{}", {}),
            ("GET", f"/api/sessions/{sid}/variables", None, {}),
            ("GET", "/api/runs/abc/files", None, {}),
            ("GET", "/api/runs/abc/artifacts/plot.png", None, {}),
            ("GET", "/api/runs", None, {}),
            ("GET", "/api/sessions", None, {"X-CodeAct-Token": "wrong"}),
        ]
        for method, path, body, headers in refused:
            status, _, text = request(server, method, path, headers=headers, body=body)
            assert status == 403, (method, path, status)
            assert b"token" in text

        # The token in the URL is traded for a cookie and dropped from the address bar.
        status, headers, _ = request(server, "GET", f"/?token={server.token}")
        assert status == 303 and headers["location"] == "/"
        cookie = headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        jar = {"Cookie": cookie.split(";", 1)[0]}
        status, headers, page = request(server, "GET", "/", headers=jar)
        assert status == 200 and b'name="codeact-token"' in page
        assert "script-src 'self'" in headers["content-security-policy"]
        assert "unsafe-inline" not in headers["content-security-policy"].split("style-src")[0]
        assert headers["x-frame-options"] == "DENY"

        # A cookie alone does not change anything (CSRF): state-changing requests need the header.
        for method, path, body in [("POST", f"/api/sessions/{sid}/messages", b'{"text": "hi"}'),
                                   ("POST", f"/api/sessions/{sid}/run", b'{"code": "print(1)"}'),
                                   ("POST", f"/api/sessions/{sid}/restart", b"{}"),
                                   ("PUT", f"/api/sessions/{sid}/files/a.csv", b"x"),
                                   ("POST", f"/api/sessions/{sid}/approvals/abc", b'{"allow": true}'),
                                   ("POST", "/api/sessions", b""),
                                   ("DELETE", f"/api/sessions/{sid}", None)]:
            assert request(server, method, path, headers=jar, body=body)[0] == 403, path
        # ... and another site's page cannot use the header either (Origin is checked).
        foreign = {**hdr, "Origin": "http://evil.example"}
        assert request(server, "POST", "/api/sessions", headers=foreign)[0] == 403
        for path, body in [(f"/api/sessions/{sid}/run", b'{"code": "print(1)"}'),
                           (f"/api/sessions/{sid}/restart", b"{}")]:
            assert request(server, "POST", path, headers=foreign, body=body)[0] == 403, path
        for path in (f"/api/sessions/{sid}/variables", "/api/runs/abc/files"):
            assert request(server, "GET", path, headers={**hdr, "Host": f"evil.example:{server.port}"})[0] == 403
        # A DNS-rebinding page reaches us under its own name: refused even with the token.
        assert request(server, "GET", "/api/sessions", headers={**hdr, "Host": f"evil.example:{server.port}"})[0] == 403

        # With the token: the same requests work.
        assert request(server, "GET", "/api/sessions", headers=hdr)[0] == 200
        assert request(server, "GET", "/api/sessions", headers=jar)[0] == 200
        status, _, body = request(server, "PUT", f"/api/sessions/{sid}/files/a.csv", headers=hdr, body=b"x,y\n1,2\n")
        assert status == 201, body
        status, headers, data = request(server, "GET", f"/api/sessions/{sid}/files/a.csv", headers=jar)
        assert status == 200 and data == b"x,y\n1,2\n"
        assert headers["content-disposition"].startswith("attachment")
        assert "sandbox" in headers["content-security-policy"]
        assert request(server, "POST", f"/api/sessions/{sid}/approvals/abc", headers=hdr,
                       body=b'{"allow": true}')[0] == 409  # no such approval open: refused for that reason
        assert request(server, "GET", f"/api/sessions/{sid}/variables", headers=jar)[0] == 200
        assert json.loads(request(server, "POST", f"/api/sessions/{sid}/restart", headers=hdr,
                                  body=b"{}")[2]) == {"restarted": True}  # the upload opened the sandbox
        assert request(server, "POST", f"/api/sessions/{sid}/run", headers=hdr, body=b'{"code": 1}')[0] == 400
        assert request(server, "POST", f"/api/sessions/{sid}/run", headers=hdr,
                       body=b'{"code": "print(1)"}')[0] == 202
        wait_idle(server.workspace.get(sid))


def test_a_non_loopback_host_needs_an_explicit_token(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="token"):
        UIServer(lambda approve: None, host="0.0.0.0", port=0)
    result = CliRunner().invoke(__import__("codeact.cli", fromlist=["cli"]).cli,
                                ["ui", "--host", "0.0.0.0", "--no-browser", "--backend", "local", "--no-log",
                                 "-m", "test-model"], env={"CODEACT_UI_TOKEN": ""})
    assert result.exit_code == 2
    assert "--token" in result.output and "CODEACT_UI_TOKEN" in result.output


def test_upload_names_are_plain_file_names() -> None:
    assert upload_name("sales 2024.csv") == "sales 2024.csv"
    assert upload_name("données.csv") == "données.csv"
    for bad in ("../etc/passwd", "a/b.csv", "a\\b.csv", ".bashrc", "", "x" * 300, "evil\u202e.csv", "nul\x00.csv"):
        with pytest.raises(UIError):
            upload_name(bad)


def test_uploads_over_the_limit_are_refused(tmp_path: Path) -> None:
    with serve(tmp_path, [], options=UIOptions(upload_limit=1000)) as server:
        sid = server.workspace.create().id
        status, _, body = request(server, "PUT", f"/api/sessions/{sid}/files/big.bin",
                                  headers=token_header(server), body=b"x" * 5000)
        assert status == 413 and b"upload limit" in body


# --------------------------------------------------------------------------- page events


def test_page_events_are_valid_json_whatever_the_sandbox_sends() -> None:
    text = dumps({"type": "CodeOutput", "text": "bad \udcff byte, new\nline, </script>"})
    assert "\n" not in text
    assert json.loads(text)["text"].startswith("bad ")


def test_observation_traceback_is_found() -> None:
    text = "some output\n\nError:\nTraceback (most recent call last):\n  File 1\nValueError: no"
    assert _traceback_of(text) == "Traceback (most recent call last):\n  File 1\nValueError: no"
    assert _traceback_of("x = ValueError:\nnothing") == ""


def test_rich_outputs_become_images_html_or_text() -> None:
    stored: list[tuple[str, bytes]] = []

    def store(mime: str, data: bytes) -> str:
        stored.append((mime, data))
        return f"/blob/{len(stored)}"

    png = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010100000000376ef9240000000a49444154789c63"
                        "600000000200015d0cf6bb0000000049454e44ae426082")
    items = output_items([{"image/png": png, "text/plain": "<Figure>"},
                          {"image/svg+xml": "<svg/>"},
                          {"text/html": "<table></table>", "text/plain": "df"},
                          {"text/plain": "42"}], store)
    assert [i["kind"] for i in items] == ["image", "image", "html", "text"]
    assert items[0]["src"] == "/blob/1" and stored[1] == ("image/svg+xml", b"<svg/>")


def test_values_show_their_control_and_bidi_characters() -> None:
    """A tool call's arguments (an approval's too) and result: what the page shows is what the call gets, so
    a bidi override cannot make ``to='evil.example\u202emoc.knab'`` read as another address."""
    assert shown("pay evil.example\u202emoc.knab") == "pay evil.example\\u202emoc.knab"
    assert shown("a\x1b[2J\rb\x00\u2066c\u200f") == "a\\x1b[2J\\rb\\x00\\u2066c\\u200f"
    assert shown("two\nlines\tand a tab, é 中 🙂") == "two\nlines\tand a tab, é 中 🙂"
    assert shown({"to": "\u202e"}) == "{'to': '\\u202e'}"


def test_images_the_page_cannot_show_are_named_not_stored() -> None:
    """Read from their header on the host: bytes that are no image, or a header declaring a bomb, never reach the
    browser (which would try to decode 20000x20000 pixels); the page gets the reason as text."""
    stored: list[tuple[str, bytes]] = []

    def store(mime: str, data: bytes) -> str:
        stored.append((mime, data))
        return f"/blob/{len(stored)}"

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    def png(width: int, height: int) -> bytes:
        head = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
        rows = zlib.compress(b"\0" * 9)
        return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")

    items = output_items([{"image/png": b"\x89PNG\r\n\x1a\n<script>", "text/plain": "<b>alt</b>"},
                          {"image/png": png(20000, 20000)}, {"image/png": png(7000, 6000)},
                          {"image/jpeg": b"\xff\xd8\xff garbage"}, {"image/png": png(8, 8)}], store)
    assert [i["kind"] for i in items] == ["unshown"] * 4 + ["image"]
    assert items[0]["reason"] == "image/png not shown: not a PNG, JPEG, GIF or WebP image"
    assert items[0]["alt"] == "<b>alt</b>"
    assert "too many pixels" in items[1]["reason"]
    assert items[2]["reason"] == "image/png not shown: 7000x6000 pixels, over the limit of 36,000,000 pixels"
    assert items[3]["reason"].startswith("image/jpeg not shown: ")
    assert stored == [("image/png", png(8, 8))]


def test_observation_outputs_are_bounded() -> None:
    png = b"\x89PNG" + b"0" * 100
    outputs = [Output({"text/html": "<p>" + "x" * 5000 + "</p>", "text/plain": "big"}),
               Output({"image/png": png, "text/plain": "<Figure>"}),
               Output({"text/html": "<b>small</b>"})]
    bundles = _output_bundles(outputs, limit=1000)
    assert "not kept" in bundles[0]["text/plain"] and "text/html" not in bundles[0]
    assert bundles[1]["image/png"] is png
    assert bundles[2] == {"text/html": "<b>small</b>"}


# --------------------------------------------------------------------------- agent additions


def test_chat_session_upload_list_and_download(tmp_path: Path) -> None:
    csv = tmp_path / "sales.csv"
    csv.write_text("month,revenue\n1,10\n")
    model = ScriptedModel(["```python\nimport os\nprint(sorted(os.listdir('.')))\n```", "done", "ok"])
    agent = CodeActAgent(model, sandbox="local", log=False, output_dir=tmp_path / "out")
    with agent.session() as chat:
        assert chat.list_files() == []
        chat.upload(csv)
        assert [f.path for f in chat.list_files()] == ["sales.csv"]
        assert chat.download("sales.csv") == csv.read_bytes()
        result = chat.send("what files?")
        assert result.ok
        assert "sales.csv (19 bytes); header: month,revenue" in model.requests[0][0].content  # the system prompt
        chat.upload(csv, "more.csv")
        chat.send("and now?")
        assert "New files in the working directory:\n- more.csv" in model.requests[2][-1].content
    with pytest.raises(Exception, match="closed"):
        chat.upload(csv)


def test_a_stopped_turn_does_not_run_the_code_the_model_was_writing(tmp_path: Path) -> None:
    cancel = threading.Event()
    marker = tmp_path / "ran"

    def reply(messages: Any) -> str:
        cancel.set()  # Stop pressed while the model was answering
        return f"```python\nopen({str(marker)!r}, 'w').write('x')\n```"

    agent = CodeActAgent(ScriptedModel([reply]), sandbox="local", log=False, output_dir=tmp_path / "out")
    result = agent.run("write the file", cancel=cancel)
    assert result.status == "cancelled" and "before the code of step 1 ran" in (result.error or "")
    assert not marker.exists()


def test_observation_event_carries_rich_outputs(tmp_path: Path) -> None:
    code = ("```python\nfrom IPython.display import HTML, SVG, display\ndisplay(HTML('<b>bold</b>'))\n"
            "display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\"/>'))\n```")
    agent = CodeActAgent(ScriptedModel([code, "done"]), sandbox="local", log=False, output_dir=tmp_path / "out")
    (obs,) = [e for e in agent.stream("show") if isinstance(e, Observation)]
    assert obs.outputs[0]["text/html"] == "<b>bold</b>"
    assert "image/svg+xml" in obs.outputs[1]


# --------------------------------------------------------------------------- sessions


def test_events_after_returns_exactly_the_kept_events_above_a_number() -> None:
    from codeact.ui._session import UISession

    session = UISession("s1", "Session 1", lambda approve: None, UIOptions(event_buffer_bytes=2000))
    for n in range(1, 201):
        session.publish({"type": "Notice", "message": f"note {n}"})
    kept_from = session.events_after(0)[1][0][0]
    assert 1 < kept_from < 200  # the cap dropped the oldest
    for after in (0, kept_from - 2, kept_from - 1, kept_from, 150, 199, 200, 500):
        lost, batch = session.events_after(after)
        assert [seq for seq, _ in batch] == list(range(max(after, kept_from - 1) + 1, 201))
        assert lost == max(0, kept_from - 1 - after)
        assert all(json.loads(data)["message"] == f"note {seq}" for seq, data in batch)


def test_streams_and_polls_read_every_event_while_a_turn_publishes() -> None:
    """Readers hammering the buffer see every event once, in order, while the publisher runs."""
    from codeact.ui._session import UISession

    session = UISession("s1", "Session 1", lambda approve: None, UIOptions())
    total = 3000
    seen: list[list[int]] = []
    done = threading.Event()

    def reader() -> None:
        mine: list[int] = []
        after = 0
        while not done.is_set() or after < total:
            for seq, _ in session.events_after(after)[1]:
                mine.append(seq)
                after = seq
        seen.append(mine)

    readers = [threading.Thread(target=reader) for _ in range(8)]
    for t in readers:
        t.start()
    for n in range(total):
        session.publish({"type": "CodeOutput", "text": f"line {n}\n"})
    done.set()
    for t in readers:
        t.join(60)
    assert len(seen) == 8 and all(mine == list(range(1, total + 1)) for mine in seen)


def test_session_cap_and_busy_session(tmp_path: Path) -> None:
    code = "```python\nimport time\ntime.sleep(1.5)\nprint('slept')\n```"
    with serve(tmp_path, [code, "done"], options=UIOptions(max_sessions=2)) as server:
        first = server.workspace.create()
        server.workspace.create()
        with pytest.raises(SessionLimitReached, match="close one"):
            server.workspace.create()
        first.send("sleep")
        with pytest.raises(SessionBusy, match="Stop"):
            first.send("again")
        with pytest.raises(SessionBusy):
            first.upload("x.csv", tmp_path / "whatever")
        events = wait_idle(first)
        assert any(e["type"] == "RunFinished" and e["status"] == "success" for e in events)
        server.workspace.close(first.id)
        server.workspace.create()  # room again


def test_approval_waits_for_the_page_and_a_denial_reaches_the_model(tmp_path: Path) -> None:
    calls: list[str] = []

    @tool(requires_approval=True)
    def delete_rows(table: str) -> str:
        """Delete every row of a table."""
        calls.append(table)
        return f"deleted {table}"

    code = ("```python\ntry:\n    print(delete_rows('sales'))\nexcept Exception as exc:\n"
            "    print('refused:', exc)\n```")
    with serve(tmp_path, [code, "ok", code, "ok"], tools=(delete_rows,)) as server:
        session = server.workspace.create()
        for allow in (True, False):
            start = session.last_seq
            session.send("clean up")
            asked = wait_for(session, lambda e: e["type"] == "ApprovalRequested", after=start)
            assert asked["tool"] == "delete_rows" and asked["arguments"] == {"table": "sales"}
            time.sleep(0.3)
            assert session.busy  # the agent waits for the page
            status, _, _ = request(server, "POST", f"/api/sessions/{session.id}/approvals/{asked['id']}",
                                   headers=token_header(server), body=json.dumps({"allow": allow}).encode())
            assert status == 200
            events = wait_idle(session)
        assert calls == ["sales"]  # approved once, denied once
        observations = [e["text"] for e in events if e["type"] == "Observation"]
        assert "deleted sales" in observations[0]
        assert "refused:" in observations[1] and "did not allow" in observations[1]


def test_idle_timeout_frees_the_sandbox_and_the_next_message_starts_a_new_one(tmp_path: Path) -> None:
    # Without saving (test_sessions_ui.py: with it, the next message restores the session).
    with serve(tmp_path, ["```python\nx = 1\nprint(x)\n```", "one",
                          "```python\nprint('x' in globals())\n```", "two"],
               options=UIOptions(save_sessions=False)) as server:
        session = server.workspace.create()
        session.send("set x")
        wait_idle(session)
        assert session.summary()["sandbox_open"]
        assert server.workspace.free_idle(now=time.monotonic() + 10_000) == [session.id]
        assert not session.summary()["sandbox_open"]
        session.send("is x there?")
        events = wait_idle(session)
        kinds = [e["type"] for e in events]
        assert "SandboxFreed" in kinds
        assert kinds.index("SandboxFreed") < kinds.index("Notice", kinds.index("SandboxFreed"))
        assert [e for e in events if e["type"] == "Observation"][-1]["stdout"].strip() == "False"


@pytest.mark.docker
def test_history_shows_a_stored_dataframe_answer_as_a_table(tmp_path: Path) -> None:
    # The run log keeps answers as codec previews; the history page must restore them, not print the tree.
    from codeact.ui._history import History

    code = ("```python\nimport pandas as pd\n"
            "final_answer(pd.DataFrame({'city': ['Oslo', 'Lima'], 'temp': [3.5, 19.0]}))\n```")
    log = RunLog(tmp_path / "runs.db")
    agent = CodeActAgent(ScriptedModel([code]), [], log=log, output_dir=tmp_path / "out")
    result = agent.run("a table")
    assert result.status == "success"
    answers = [e["answer"] for e in History(log).events(result.run_id)["events"] if e["type"] == "FinalAnswer"]
    assert len(answers) == 1
    assert "<td>Oslo</td>" in answers[0]["html"]
    assert "Lima" in answers[0]["text"] and "$" not in answers[0]["text"]


# --------------------------------------------------------------------------- the analyst's own hand


def test_a_users_cell_runs_as_a_code_action_and_the_model_is_told(tmp_path: Path) -> None:
    """The cell: live output, tool calls, artifacts, the run log (as the user's code), the variables
    panel, and a note on top of the model's next message."""
    calls: list[int] = []

    @tool
    def double(n: int) -> int:
        """Twice n."""
        calls.append(n)
        return 2 * n

    cell = "x = double(21)\nopen('mine.txt', 'w').write('kept')\nprint('from the user', x)"
    replies = ["```python\ny = x + 1\nprint(y)\n```", "y is 43."]
    with serve(tmp_path, replies, tools=(double,)) as server:
        session = server.workspace.create()
        session.run_code(cell)
        events = wait_idle(session)
        kinds = [e["type"] for e in events]
        assert kinds[:3] == ["RunStarted", "CodeAction", "ToolCall"] and kinds[-2:] == ["RunFinished", "Idle"]
        started = events[0]
        assert started["agent"] == "user" and started["task"] == cell
        assert any(e["type"] == "CodeOutput" and "from the user 42" in e["text"] for e in events)  # live
        (obs,) = [e for e in events if e["type"] == "Observation"]
        assert obs["artifacts"] == ["mine.txt"] and calls == [21]
        assert [e["status"] for e in events if e["type"] == "RunFinished"] == ["success"]
        listing = session.variables()
        assert {"name": "x", "type": "int", "repr": "42"} in listing["variables"]
        assert not any(v["name"] in ("double", "final_answer", "In", "Out") for v in listing["variables"])

        # Recorded as the user's code, apart from the model's runs.
        record = server.history.log.get_run(started["run_id"])
        assert record.agent == "user" and record.steps[0].code == cell and not record.steps[0].model_output
        assert (tmp_path / "artifacts" / started["run_id"] / "mine.txt").read_text() == "kept"

        after = session.last_seq
        session.send("what is y?")
        events = wait_idle(session)
        first = server.workspace.factory(None).model.requests[0]
        told = first[-1].content
        assert told.endswith("what is y?") and "The user ran this code" in told
        assert "x = double(21)" in told and "from the user 42" in told
        assert [e["stdout"] for e in events if e["type"] == "Observation" and e["seq"] > after] == ["43\n"]
        assert {"name": "y", "type": "int", "repr": "43"} in session.variables()["variables"]  # after the step
        assert "The user ran" not in server.workspace.factory(None).model.requests[1][-1].content  # told once
        assert [r.agent for r in server.history.log.list_runs()] == ["codeact", "user"]


def test_stop_ends_a_users_cell_and_restart_clears_variables_keeps_files(tmp_path: Path) -> None:
    with serve(tmp_path, ["```python\nprint(sorted(os.listdir('.')) if 'os' in globals() else 'no os')\n```",
                          "ok"]) as server:
        session = server.workspace.create()
        assert session.restart() is False  # no kernel yet: nothing to restart
        session.run_code("import os\nkeep = 1\nopen('data.txt', 'w').write('x')\n"
                         "import time\nprint('looping', flush=True)\nwhile True:\n    time.sleep(0.05)")
        wait_for(session, lambda e: e["type"] == "CodeOutput" and "looping" in e["text"])
        with pytest.raises(SessionBusy):
            session.restart()
        with pytest.raises(SessionBusy):
            session.run_code("print(2)")
        assert session.stop()
        events = wait_idle(session)
        (finished,) = [e for e in events if e["type"] == "RunFinished"]
        assert finished["status"] == "cancelled"
        assert "KeyboardInterrupt" in [e for e in events if e["type"] == "Observation"][0]["error"]
        assert {v["name"] for v in session.variables()["variables"]} == {"keep"}  # the kernel kept them

        assert session.restart() is True
        assert session.variables()["variables"] == []
        assert [f["path"] for f in session.files()["workspace"]] == ["data.txt"]  # files stay
        assert wait_for(session, lambda e: e["type"] == "KernelRestarted")
        session.send("what is left?")
        events = wait_idle(session)
        told = server.workspace.factory(None).model.requests[0][-1].content
        assert "The user restarted the kernel" in told and "looping" in told  # the stopped cell, then the restart
        assert told.index("looping") < told.index("restarted the kernel")
        assert [e["stdout"] for e in events if e["type"] == "Observation"][-1] == "no os\n"


def test_the_variable_listing_is_bounded_whatever_the_kernel_prints() -> None:
    from codeact.ui._variables import MARKER, MAX_NAME, MAX_REPR, MAX_TYPE, MAX_VARIABLES, parse_listing

    def listing(data: Any) -> str:
        return "noise\n" + MARKER + json.dumps(data) + "\n"

    many = [{"name": "<img src=x onerror=alert(1)>\u202e" + "n" * 100, "type": "T" * 100, "repr": "r\x1b[31m" * 40}
            for _ in range(300)]
    parsed = parse_listing(listing({"variables": many + [{"name": 5}, "junk", None], "total": 10**12}))
    assert len(parsed.variables) == MAX_VARIABLES and parsed.total == MAX_VARIABLES  # an absurd total is ignored
    first = parsed.variables[0]
    assert len(first.name) <= MAX_NAME and len(first.type) <= MAX_TYPE and len(first.repr) <= MAX_REPR
    assert "\u202e" not in first.name and "\\u202e" in first.name and "\x1b" not in first.repr
    for hostile in ("[" * 100_000, '{"variables": 3}', "null", '{"variables": [[1], {"name": ""}]}', "x" * 10):
        result = parse_listing(MARKER + hostile)
        assert result.variables == () and (result.error or hostile.startswith('{"variables": [['))
    assert parse_listing("x" * 10_000_000).error == "the kernel's variable listing was too large to show"
    assert parse_listing("no marker at all").error
    ok = parse_listing(listing({"variables": [{"name": "df", "type": "DataFrame", "repr": "3 x 2 (a, b)"}],
                                "total": 7}))
    assert ok.wire() == {"variables": [{"name": "df", "type": "DataFrame", "repr": "3 x 2 (a, b)"}], "total": 7,
                         "error": None}


@pytest.mark.docker
def test_a_kernel_that_forges_its_variable_listing_gets_nothing_through(tmp_path: Path) -> None:
    """As the attacker: the model's code takes over print() so the listing the host reads is forged
    (thousands of entries, huge strings, markup, a JSON bomb), or never comes (print hangs)."""
    from codeact.ui._chat import WorkspaceChat
    from codeact.ui._variables import MAX_NAME, MAX_REPR, MAX_VARIABLES

    forge = ("import builtins, json, sys, time\n"
             "_print = builtins.print\n"
             "def forged(*args, **kwargs):\n"
             "    if args and str(args[0]).startswith('__codeact_variables__:'):\n"
             "        sys.stdout.write('__codeact_variables__:' + MODE() + '\\n')\n"
             "    else:\n"
             "        _print(*args, **kwargs)\n"
             "builtins.print = forged\n")
    # More entries than the host keeps, each string over its limit, all within the sandbox's output cap.
    flood = ("MODE = lambda: json.dumps({'variables': [{'name': '<img src=x onerror=alert(1)>' + 'n' * 60,"
             " 'type': 'T' * 90, 'repr': 'r' * 170}] * 230, 'total': -5})\nprint('armed')")
    bomb = "MODE = lambda: '[' * 200_000\nprint('bomb')"
    hang = "def MODE():\n    while True:\n        time.sleep(1)\nprint('hang')"
    model = ScriptedModel([f"```python\n{forge}{flood}\n```", f"```python\n{bomb}\n```",
                           f"```python\n{hang}\n```", "```python\nprint('still here')\n```", "done"])
    agent = CodeActAgent(model, sandbox="docker", log=False, output_dir=tmp_path / "out", max_steps=5)
    chat = WorkspaceChat(agent)
    seen: list[Any] = []
    try:
        started = time.monotonic()
        for event in chat.stream("go"):
            if isinstance(event, Observation):
                seen.append(chat.variables)
        elapsed = time.monotonic() - started
    finally:
        chat.close()
    flooded, bombed, hung, after = seen
    assert len(flooded.variables) == MAX_VARIABLES and flooded.total == MAX_VARIABLES
    assert all(len(v.name) <= MAX_NAME and len(v.repr) <= MAX_REPR for v in flooded.variables)
    assert bombed.variables == () and bombed.error
    assert hung.variables == () and hung.error  # the listing's time limit ended it
    assert after.error is None or after.variables == ()  # the session goes on
    assert elapsed < 300  # did not hang (generous: the hanging listing takes its 10 s limit)
