"""``codeact mcp serve``'s save_session / restore_session, driven by the SDK's client over stdio, real Docker."""

from __future__ import annotations

import os
import re
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.mcp_servers.helpers import CODEACT

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]


async def text_of(client: Client, tool: str, args: dict) -> tuple[bool, str]:
    result = await client.call_tool(tool, args)
    return bool(result.is_error), "\n".join(b.text for b in result.content if b.type == "text")


def test_save_then_restore_in_another_client_session(tmp_path: Path) -> None:
    store = tmp_path / "snaps"
    params = StdioServerParameters(command=CODEACT, args=["mcp", "serve"],
                                   env={**os.environ, "CODEACT_SNAPSHOT_DIR": str(store)})

    async def main() -> None:
        async with Client(stdio_client(params)) as client:
            await text_of(client, "execute_python", {"code": "import numpy as np\narr = np.arange(5)\n"
                                                             "open('kept.txt', 'w').write('hi')\n"
                                                             "gen = (i for i in range(3))"})
            error, saved = await text_of(client, "save_session", {})
            assert not error, saved
            snapshot_id = re.search(r"saved snapshot (\S+)", saved).group(1)
            assert "not saved: gen" in saved
            error, again = await text_of(client, "save_session", {})  # nothing changed: the same snapshot
            assert not error and snapshot_id in again
        assert [p.stem for p in store.glob("*.snap")] == [snapshot_id]

        async with Client(stdio_client(params)) as client:  # a new server and client session
            error, report = await text_of(client, "restore_session", {"snapshot_id": snapshot_id})
            assert not error, report
            assert "restored 2 variables and 1 files" in report and "gen" in report
            _, out = await text_of(client, "execute_python", {"code": "print(int(arr.sum()), open('kept.txt').read())"})
            assert out == "10 hi"
            error, bad = await text_of(client, "restore_session", {"snapshot_id": "../../etc/passwd"})
            assert error and "is not a snapshot id" in bad
            error, missing = await text_of(client, "restore_session", {"snapshot_id": "20200101T000000-0123456789ab"})
            assert error and "no snapshot" in missing
            _, out = await text_of(client, "execute_python", {"code": "print(int(arr.sum()))"})
            assert out == "10"  # a failed restore leaves the session's sandbox as it was

    anyio.run(main)
