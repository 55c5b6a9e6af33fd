"""`codeact mcp serve`'s run_task against a hostile client: output schemas that are huge, deeply nested or ref
bombs are refused fast, with a clear error, before any sandbox starts; a good schema still works."""

from __future__ import annotations

import json
import os
import subprocess
import time

import anyio
import psutil
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from codeact.output import MAX_SCHEMA_BYTES, MAX_SCHEMA_DEPTH, MAX_SCHEMA_REFS
from tests.mcp_servers.helpers import CODEACT, assert_no_leftovers

pytestmark = pytest.mark.docker

GOOD = {"type": "object", "required": ["region", "growth"],
        "properties": {"region": {"type": "string"}, "growth": {"type": "number"}}}


def ref_bomb(levels: int) -> dict:
    """Each definition refers to the next twice: validating anything walks 2**levels paths."""
    defs = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
            for i in range(levels)}
    defs[f"d{levels}"] = {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def nested(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


HOSTILE = {
    "huge": ({"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 200}
                                               for i in range(2000)}}, f"larger than {MAX_SCHEMA_BYTES:,} bytes"),
    "deep": (nested(150), f"nested more than {MAX_SCHEMA_DEPTH} levels"),
    "many refs": ({"$defs": {"a": {"type": "string"}},
                   "anyOf": [{"$ref": "#/$defs/a"}] * (MAX_SCHEMA_REFS + 1)},
                  f"more than {MAX_SCHEMA_REFS} references"),
    "ref bomb": (ref_bomb(25), "expand to more than"),
    "outside ref": ({"$ref": "http://127.0.0.1:9/schema.json"}, "refers outside itself"),
}


def containers_of(pid: int) -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=io.codeact.sandbox.pid={pid}"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return out.split()


def serve_pid() -> int:
    found = [p.pid for p in psutil.Process().children(recursive=True)
             if "mcp serve" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE]
    assert len(found) == 1, found
    return found[0]


def test_hostile_output_schemas_are_refused_before_any_sandbox(tmp_path):
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(["```python\nfinal_answer({'region': 'West', 'growth': 12.5})\n```"]))
    params = StdioServerParameters(command=CODEACT, args=["mcp", "serve", "--no-log"],
                                   env={**os.environ, "CODEACT_SCRIPTED_REPLIES": str(replies),
                                        "CODEACT_OUTPUT_DIR": str(tmp_path / "out")})

    async def main() -> None:
        with (tmp_path / "serve.stderr").open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                pid = serve_pid()
                for name, (schema, needle) in HOSTILE.items():
                    started = time.monotonic()
                    with anyio.fail_after(30):
                        refused = await client.call_tool("run_task", {"task": "x", "output_schema": schema})
                    took = time.monotonic() - started
                    text = refused.content[0].text
                    assert refused.is_error and "output_schema: the output schema" in text, (name, text)
                    assert needle in text, (name, text)
                    print(f"{name}: refused in {took * 1000:.0f} ms")
                    assert containers_of(pid) == [], name  # no sandbox was started for it
                done = await client.call_tool("run_task", {"task": "Fastest region?", "output_schema": GOOD})
                assert not done.is_error, done.content
                assert done.structured_content["status"] == "success"
                assert done.structured_content["answer"] == {"region": "West", "growth": 12.5}
                assert len(containers_of(pid)) == 1  # the good one ran in this session's sandbox

    anyio.run(main)
    assert_no_leftovers(20)
