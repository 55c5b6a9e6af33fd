"""`codeact mcp serve` driven by the SDK's own client over stdio, streamable HTTP and SSE, with real
Docker sandboxes behind it."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.mcp_servers.helpers import CODEACT, assert_no_leftovers, free_port, running

pytestmark = pytest.mark.docker
TOKEN = "test-token-123"
PLOT = ("import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [3, 1, 2])\n"
        "plt.show()")


@pytest.fixture(autouse=True, scope="module")
def _no_leftover_servers():
    yield
    assert_no_leftovers(20)


@pytest.fixture(scope="module")
def http_server():
    port = free_port()
    with running([CODEACT, "mcp", "serve", "--transport", "http", "--port", str(port), "--max-sessions", "2",
                  "--token", TOKEN, "--output-limit", "300", "--disconnect-grace", "3"], port) as proc:
        http_server_pid[:] = [proc.pid]
        yield f"http://127.0.0.1:{port}/mcp"


#: The pid of the http_server fixture's process (its containers carry it in a label).
http_server_pid: list[int] = []


@pytest.fixture(scope="module")
def sse_server():
    port = free_port()
    with running([CODEACT, "mcp", "serve", "--transport", "sse", "--port", str(port), "--max-sessions", "1"], port):
        yield f"http://127.0.0.1:{port}/sse"


def http_client(url: str, token: str | None = TOKEN) -> Client:
    """A Client for the HTTP server; its httpx client is closed with it."""
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"} if token else None)
    transport = streamable_http_client(url, http_client=http)

    class Owned(Client):  # closes the httpx client the transport does not own
        async def __aexit__(self, *exc):  # type: ignore[override]
            try:
                await super().__aexit__(*exc)
            finally:
                await http.aclose()

    return Owned(transport)


async def run_code(client: Client, code: str):
    result = await client.call_tool("execute_python", {"code": code})
    return result, "\n".join(b.text for b in result.content if b.type == "text")


def test_stdio_session_keeps_state_returns_images_and_runs_tasks(tmp_path):
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(["```python\nprint(secret * 2)\n```", "```python\nfinal_answer(secret + 1)\n```"]))
    params = StdioServerParameters(command=CODEACT, args=["mcp", "serve", "--no-log"],
                                   env={**os.environ, "CODEACT_SCRIPTED_REPLIES": str(replies),
                                        "CODEACT_OUTPUT_DIR": str(tmp_path / "out")})

    async def main() -> None:
        async with Client(stdio_client(params)) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == {"execute_python", "upload_file", "download_file", "list_files", "reset_session",
                             "save_session", "restore_session", "run_task", "get_run"}
            _, text = await run_code(client, "secret = 41\nprint('set')")
            assert text == "set"
            _, text = await run_code(client, "secret + 1")
            assert text == "Out: 42"
            result, _ = await run_code(client, PLOT)
            images = [b for b in result.content if b.type == "image"]
            assert images and images[0].mime_type == "image/png"
            result, text = await run_code(client, "1/0")
            assert result.is_error and "ZeroDivisionError" in text
            await client.call_tool("upload_file", {"path": "data/a.txt", "content": "hello"})
            listing = await client.call_tool("list_files", {})
            assert {"path": "data/a.txt", "size": 5} in listing.structured_content["result"]
            got = await client.call_tool("download_file", {"path": "data/a.txt"})
            assert got.content[0].text == "hello"
            progress: list[tuple] = []

            async def on_progress(value, total, message):
                progress.append((value, total, message))

            done = await client.call_tool("run_task", {"task": "double the secret"}, progress_callback=on_progress)
            answer = done.structured_content
            assert answer["status"] == "success" and answer["answer"] == 42  # the agent used this session's kernel
            assert answer["log"] is None  # --no-log: no run log to read, get_run still works
            got = await client.call_tool("get_run", {"run_id": answer["run_id"]})
            assert "82" in got.structured_content["step_details"][0]["observation"]
            assert any("running code" in (m or "") for _, _, m in progress)
            await client.call_tool("reset_session", {})
            _, text = await run_code(client, "print('secret' in dir())")
            assert text == "False"

    anyio.run(main)


def test_http_requires_the_token(http_server):
    response = httpx2.post(http_server, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    assert response.status_code == 401
    wrong = httpx2.post(http_server, json={}, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401


def test_http_sessions_are_isolated_capped_and_freed_on_disconnect(http_server):
    async def main() -> None:
        async with http_client(http_server) as a, http_client(http_server) as b:
            await run_code(a, "who = 'a'")
            await run_code(b, "who = 'b'")
            _, text_a = await run_code(a, "print(who)")
            _, text_b = await run_code(b, "print(who)")
            assert (text_a, text_b) == ("a", "b")
            _, long = await run_code(a, "print('x' * 5000)")
            assert len(long) < 600 and "x" in long  # --output-limit 300, head and tail kept
            async with http_client(http_server) as c:  # a third session: over --max-sessions 2
                result, text = await run_code(c, "print(1)")
                assert result.is_error and "all 2 sandboxes of this server are in use" in text
        # a and b disconnected: their sandboxes are gone, so new sessions get one
        async with http_client(http_server) as d:
            with anyio.fail_after(120):
                while True:
                    result, text = await run_code(d, "print('fresh' if 'who' not in dir() else who)")
                    if not result.is_error:
                        break
                    await anyio.sleep(0.5)  # the server is still closing the old sessions
            assert text == "fresh"

    anyio.run(main)


#: A client that opens a session, starts its sandbox, says so and waits to be killed (never ending its session).
VANISHING_CLIENT = """
import sys, anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

async def main():
    http = create_mcp_http_client(headers={"Authorization": "Bearer " + sys.argv[2]})
    async with Client(streamable_http_client(sys.argv[1], http_client=http)) as client:
        result = await client.call_tool("execute_python", {"code": "print('up')"})
        print(result.content[0].text, flush=True)
        await anyio.sleep(3600)

anyio.run(main)
"""


def _sandboxes_of(pid: int) -> list[str]:
    out = subprocess.run(["docker", "ps", "-q", "--filter", f"label=io.codeact.sandbox.pid={pid}"],
                         capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.split()


def test_http_a_client_that_vanishes_frees_its_sandbox_long_before_the_idle_timeout(http_server):
    (pid,) = http_server_pid
    before = set(_sandboxes_of(pid))
    client = subprocess.Popen([sys.executable, "-c", VANISHING_CLIENT, http_server, TOKEN], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert client.stdout is not None and client.stdout.readline().strip() == "up", client.stderr
        (mine,) = set(_sandboxes_of(pid)) - before  # the client's session has its container
        client.kill()  # gone without a DELETE: only its event stream's end tells the server
        client.wait(30)
        killed = time.monotonic()
        while mine in _sandboxes_of(pid):
            assert time.monotonic() - killed < 60, "the sandbox of a vanished client is still running"
            time.sleep(0.5)
        # --disconnect-grace 3 against --idle-timeout 900: freed after the grace, not the idle timeout
        assert time.monotonic() - killed >= 2.5
    finally:
        client.kill()
        client.wait(30)


def test_sse_transport_keeps_state_and_frees_on_disconnect(sse_server):
    async def main() -> None:
        async with Client(sse_client(sse_server)) as client:
            await run_code(client, "n = 5")
            _, text = await run_code(client, "print(n * 2)")
            assert text == "10"
        async with Client(sse_client(sse_server)) as again:  # --max-sessions 1: the first was freed
            with anyio.fail_after(120):
                while True:
                    result, text = await run_code(again, "print('n' in dir())")
                    if not result.is_error:
                        break
                    await anyio.sleep(0.5)
            assert text == "False"

    anyio.run(main)


def test_doc_snippet_for_claude_desktop_is_valid_config():
    from pathlib import Path

    from codeact.mcp import parse_config

    doc = (Path(__file__).resolve().parent.parent / "docs" / "mcp.md").read_text()
    snippet = doc.split("<!-- claude-desktop-config -->", 1)[1].split("```json", 1)[1].split("```", 1)[0]
    (server,) = parse_config(json.loads(snippet), "docs/mcp.md")
    assert (server.command, server.args) == ("codeact", ("mcp", "serve"))


def test_run_task_returns_its_run_id_to_fetch_the_log_and_artifacts_and_writes_no_info_lines(tmp_path):
    """A real model endpoint (the OpenAI test server: httpx requests on every model call) behind `mcp serve`."""
    from tests.openai_server import OpenAITestServer

    from codeact.runlog import RunLog

    db = tmp_path / "runs.db"
    errlog = (tmp_path / "serve.stderr").open("w+")
    with OpenAITestServer() as model:
        model.plan_text(f"Plotting.\n```python\n{PLOT}\nprint('plotted')\n```")
        model.plan_text("```python\nfinal_answer({'total': 42})\n```")
        params = StdioServerParameters(
            command=CODEACT, args=["mcp", "serve", "--model", "test-model", "--base-url", model.base_url,
                                   "--api-key", "x", "--db", str(db)],
            env={**os.environ, "CODEACT_OUTPUT_DIR": str(tmp_path / "out")})

        async def main() -> str:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                done = await client.call_tool("run_task", {"task": "plot, then answer"})
                summary = done.structured_content
                assert not done.is_error and summary["status"] == "success", done.content
                assert summary["answer"] == {"total": 42} and summary["steps"] == 2
                run_id = summary["run_id"]
                assert summary["log"] == f"codeact://runs/{run_id}"
                assert json.loads(done.content[0].text)["run_id"] == run_id  # clients without structured content

                got = (await client.call_tool("get_run", {"run_id": run_id})).structured_content
                assert got["task"] == "plot, then answer"
                step = got["step_details"][0]
                assert "plt.plot" in step["code"] and "plotted" in step["observation"]
                (figure,) = [a for a in got["artifacts"] if a["name"].endswith(".png")]
                assert figure["uri"] == f"codeact://runs/{run_id}/artifacts/{figure['name']}"

                log = await client.read_resource(f"codeact://runs/{run_id}")
                lines = [json.loads(line) for line in log.contents[0].text.splitlines()]
                assert lines and run_id in json.dumps(lines[0])
                png = await client.read_resource(figure["uri"])
                assert base64.b64decode(png.contents[0].blob).startswith(b"\x89PNG")

                # only this server's runs, only the artifacts a run reported
                missing = await client.call_tool("get_run", {"run_id": "not-a-run"})
                assert missing.is_error and "no run 'not-a-run' was started by this server" in missing.content[0].text
                with pytest.raises(Exception, match="has no artifact 'nope.png'"):
                    await client.read_resource(f"codeact://runs/{run_id}/artifacts/nope.png")
                for bad in (f"codeact://runs/{run_id}/artifacts/..%2F..%2Fruns.db",  # the SDK or the run refuses
                            f"codeact://runs/{run_id}/artifacts/%2Fetc%2Fpasswd"):
                    with pytest.raises(Exception, match="has no artifact|Unknown resource"):
                        await client.read_resource(bad)
                with pytest.raises(Exception, match="no run 'other' was started by this server"):
                    await client.read_resource("codeact://runs/other")
                await run_code(client, "print('one more call')")
                return run_id

        run_id = anyio.run(main)
    # the run is in the host's run log too (`codeact logs show <id>`)
    assert RunLog(db).get_run(run_id).status == "success"
    errlog.seek(0)
    stderr = errlog.read()
    errlog.close()
    assert "HTTP Request" not in stderr and "INFO" not in stderr and "Processing request" not in stderr, stderr


def test_serve_logging_keeps_warnings_and_errors_but_no_info(tmp_path):
    """The logging `mcp serve` sets up (through build_server) in a process of its own, as the command has it."""
    import subprocess
    import sys

    script = ("import logging\n"
              "from codeact.mcp import ServeOptions, build_server\n"
              "build_server(ServeOptions(backend='restricted'))\n"
              "logging.getLogger('httpx').info('HTTP Request: POST /v1/chat/completions')\n"
              "logging.getLogger('codeact').warning('a warning stays')\n"
              "logging.getLogger('mcp').error('an error stays')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    assert "a warning stays" in done.stderr and "an error stays" in done.stderr
    assert "HTTP Request" not in done.stderr
