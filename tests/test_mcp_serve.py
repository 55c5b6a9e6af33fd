"""`codeact mcp serve` driven by the SDK's own client over stdio, streamable HTTP and SSE, with real
Docker sandboxes behind it."""

from __future__ import annotations

import json
import os

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
                  "--token", TOKEN, "--output-limit", "300"], port):
        yield f"http://127.0.0.1:{port}/mcp"


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
    params = StdioServerParameters(command=CODEACT, args=["mcp", "serve"],
                                   env={**os.environ, "CODEACT_SCRIPTED_REPLIES": str(replies)})

    async def main() -> None:
        async with Client(stdio_client(params)) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == {"execute_python", "upload_file", "download_file", "list_files", "reset_session",
                             "save_session", "restore_session", "run_task"}
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
            answer = done.content[0].text
            assert "status: success" in answer and "answer: 42" in answer  # the agent used this session's kernel
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
