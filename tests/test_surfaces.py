"""Options that exist in Python, on every surface: typed answers from the terminal and the web workspace
(``--output-schema``, ``/type``, the page's schema box, the bounds a schema from outside must keep), and
``--context-window``, ``--condenser``, ``--no-images`` with their environment variables.

The CLI runs as a subprocess against ``tests/openai_server.py`` (a real OpenAI-compatible endpoint with
scripted replies); the web workspace is driven over its HTTP API. The restricted backend keeps these fast:
what is tested here is the surface, not the sandbox (``test_mcp_serve_schema.py`` tests a hostile MCP
client against the Docker sandbox).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from codeact.agent import CodeActAgent
from codeact.cli import cli
from codeact.errors import OutputTypeError
from codeact.models import ScriptedModel
from codeact.output import (
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_EXPANDED,
    MAX_SCHEMA_REFS,
    check_schema_bounds,
    schema_output,
)
from codeact.runlog import RunLog
from codeact.ui import UIOptions, UIServer

REPO = Path(__file__).resolve().parents[1]
SCHEMA = {"title": "Growth", "type": "object", "required": ["region", "growth"],
          "properties": {"region": {"type": "string"}, "growth": {"type": "number"}}}


def py(source: str) -> str:
    return f"```python\n{source}\n```"


def ref_bomb(levels: int) -> dict[str, Any]:
    defs = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
            for i in range(levels)}
    defs[f"d{levels}"] = {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def codeact_command() -> list[str]:
    script = Path(sys.executable).with_name("codeact")
    return [str(script)] if script.exists() else [sys.executable, "-m", "codeact.cli"]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The CLI's environment: a private run log, no model configured, this checkout imported."""
    out = {k: v for k, v in os.environ.items()
           if not k.startswith("CODEACT_") and k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "CODEACT_MODEL")}
    out.update({"CODEACT_DB": str(tmp_path / "runs.db"), "CODEACT_OUTPUT_DIR": str(tmp_path / "out"),
                "PYTHONPATH": str(REPO), "COLUMNS": "120"})
    return out


def codeact(args: list[str], env: dict[str, str], server: Any = None, stdin: str = "",
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    model = ["-m", "test-model", "--base-url", server.base_url, "--api-key", "x"] if server is not None else []
    return subprocess.run([*codeact_command(), *args, *model], input=stdin, capture_output=True, text=True,
                          env=env, timeout=120, cwd=cwd)


def error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("Error: ")]


# --------------------------------------------------------------------------- the bounds


def test_schema_bounds_refuse_hostile_schemas_fast_and_keep_good_ones() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(100_000):  # far past Python's recursion limit: the walk must not recurse
        deep = {"items": deep}
    hostile = {
        "huge": ({"enum": ["x" * 1000] * 100}, f"larger than {MAX_SCHEMA_BYTES:,} bytes"),
        "deep": (deep, f"nested more than {MAX_SCHEMA_DEPTH} levels"),
        "refs": ({"anyOf": [{"$ref": "#"}] * (MAX_SCHEMA_REFS + 1)}, f"more than {MAX_SCHEMA_REFS} references"),
        "bomb": (ref_bomb(24), f"expand to more than {MAX_SCHEMA_EXPANDED:,}"),
        "anchor bomb": ({"$defs": {f"d{i}": {"$anchor": f"a{i}", "allOf": [{"$ref": f"#a{i + 1}"}] * 2}
                                   for i in range(24)} | {"d24": {"$anchor": "a24"}}, "$ref": "#a0"},
                        "expand to more than"),
        "remote": ({"$ref": "https://example.org/s.json"}, "refers outside itself"),
        "not json": ({"type": {1, 2}}, "not JSON data"),
    }
    for name, (schema, needle) in hostile.items():
        started = time.perf_counter()
        with pytest.raises(OutputTypeError, match=re.escape(needle)):
            check_schema_bounds(schema)
        assert time.perf_counter() - started < 5, name  # "did not hang", not a speed target
    tree = {"$defs": {"node": {"type": "object", "properties": {
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}, "$ref": "#/$defs/node"}
    check_schema_bounds(tree)  # a recursive schema is fine: it validates as deep as the answer goes
    assert schema_output(json.dumps(tree)).check({"children": [{"children": []}]})[1] == []
    with pytest.raises(OutputTypeError, match=f"at most {MAX_SCHEMA_BYTES:,}"):
        schema_output("[" * (MAX_SCHEMA_BYTES + 1))
    with pytest.raises(OutputTypeError, match="nested more than"):
        schema_output("[" * 30_000 + "]" * 30_000)  # within the byte bound, past the parser's recursion


# --------------------------------------------------------------------------- the terminal


def test_chat_output_schema_types_every_turn_and_type_the_next_one(openai_server: Any, env: dict[str, str],
                                                                   tmp_path: Path) -> None:
    (tmp_path / "growth.json").write_text(json.dumps(SCHEMA))
    (tmp_path / "city.json").write_text(json.dumps({"title": "City", "type": "object", "required": ["city"],
                                                    "properties": {"city": {"type": "string"}}}))
    openai_server.plan_text(py("final_answer({'region': 'West', 'growth': 12.5})"))
    openai_server.plan_text(py("final_answer('a free answer')"))
    openai_server.plan_text(py("final_answer({'city': 'Oslo'})"))
    openai_server.plan_text(py("final_answer({'region': 'East'})"))  # does not match: goes back to the model
    openai_server.plan_text(py("final_answer({'region': 'East', 'growth': 3})"))
    session = "first\n/type off\nsecond\n/type missing.json\n/type city.json\nthird\nfourth\n/exit\n"
    proc = codeact(["chat", "--backend", "restricted", "--no-save", "--output-schema", "growth.json"], env,
                   openai_server, session, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # Typed answers are pretty-printed JSON under a title naming the schema.
    assert out.count("Answer (JSON, valid against JSON Schema `Growth`)") == 2, out
    assert '"region": "West",\n' in re.sub(r"[│ ]*\n[│ ]*", "\n", out)
    assert "Answer (JSON, valid against JSON Schema `City`)" in out
    assert "a free answer" in out and "The next answer is free" in out
    assert "Warning: /type missing.json: cannot read it" in proc.stderr
    first, second, third, fourth, retry = openai_server.chat_requests
    assert '"growth": {"type": "number"}' in first.messages[1]["content"]
    assert "JSON Schema" not in second.messages[-1]["content"]  # /type off: this turn is free
    assert '"city": {"type": "string"}' in third.messages[-1]["content"]  # /type: the next turn only
    assert '"growth": {"type": "number"}' in fourth.messages[-1]["content"]  # then --output-schema again
    assert "'growth' is a required property" in retry.messages[-1]["content"]


@pytest.mark.parametrize("content, needle", [
    ("{not json", "not valid JSON"),
    (json.dumps({"type": 5}), "not a valid JSON Schema"),
    (json.dumps(ref_bomb(30)), "expand to more than"),
    (json.dumps({"enum": ["x" * 70_000]}), f"larger than {MAX_SCHEMA_BYTES:,} bytes"),
])
def test_chat_bad_schema_file_is_one_error_naming_it_before_any_sandbox(env: dict[str, str], tmp_path: Path,
                                                                       content: str, needle: str) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(content)
    env = {**env, "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}  # had it looked for Docker, it would say
    result = CliRunner().invoke(cli, ["chat", "--backend", "docker", "-m", "m", "--output-schema", str(schema)],
                                env=env)
    assert result.exit_code == 2, result.output
    errors = error_lines(result.stderr)
    assert len(errors) == 1 and needle in errors[0] and f"--output-schema {schema}" in errors[0], result.stderr
    assert "Docker" not in result.stderr


def test_context_window_and_condenser_reach_the_model_from_options_and_environment(
        openai_server: Any, env: dict[str, str]) -> None:
    def reply(request: Any) -> str:
        return py("\n".join(f"v{i} = {i}" for i in range(40)) + "\nprint('y' * 3000)\nfinal_answer('done')")

    openai_server.default_reply = reply
    task = "compute " + "word " * 300 + "\n"
    model = ["-m", "test-model", "--base-url", openai_server.base_url, "--api-key", "x"]
    # Without a window the history fits the default budget: nothing is condensed, no summary is asked for.
    plain = CliRunner().invoke(cli, ["chat", "--backend", "restricted", "--no-save", *model], env=env,
                               input=task * 2 + "/exit\n")
    assert plain.exit_code == 0 and "condensed" not in plain.stdout, plain.output
    summaries = [r for r in openai_server.chat_requests if "You condense" in r.messages[0]["content"]]
    assert not summaries
    # --context-window 2048: the earlier turn is folded; --condenser summary: the model writes its summary.
    folded = codeact(["chat", "--backend", "restricted", "--no-save", "--context-window", "2048",
                      "--condenser", "summary"], env, openai_server, task * 2 + "/exit\n")
    assert folded.returncode == 0, folded.stderr
    assert "earlier turns condensed: 1 turn folded" in folded.stdout
    summaries = [r for r in openai_server.chat_requests if "You condense" in r.messages[0]["content"]]
    assert len(summaries) == 1
    # The same from the environment, for `run` (in process; one turn: old observations are masked).
    steps = [py("print('z' * 6000)"), py("print('z' * 6000)"), py("final_answer('done')")]
    for text in steps:
        openai_server.plan_text(text)
    ran = CliRunner().invoke(cli, ["run", "go", "--backend", "restricted", *model],
                             env={**env, "CODEACT_CONTEXT_WINDOW": "2048", "CODEACT_CONDENSER": "summary"})
    assert ran.exit_code == 0 and "earlier turns condensed: 1 observation masked" in ran.stdout, ran.output
    for name, value in (("CODEACT_CONDENSER", "nope"), ("CODEACT_CONTEXT_WINDOW", "lots")):
        bad = CliRunner().invoke(cli, ["run", "go", "--backend", "restricted", "-m", "m"], env={**env, name: value})
        assert bad.exit_code == 2 and f"{name}={value!r}" in error_lines(bad.stderr)[0], bad.stderr


@pytest.mark.parametrize("command", [["run"], ["chat"], ["ui"], ["bench", "run"], ["mcp", "serve"]])
def test_every_surface_lists_the_options_and_their_environment_variables(command: list[str]) -> None:
    text = " ".join(CliRunner().invoke(cli, [*command, "--help"], terminal_width=200).output.split())
    for needle in ("--context-window TOKENS", "env: CODEACT_CONTEXT_WINDOW", "--condenser [fold|summary]",
                   "env: CODEACT_CONDENSER"):
        assert needle in text, (command, needle)
    if command[0] in ("run", "chat", "ui"):
        assert "--no-images" in text and "CODEACT_IMAGES=0" in text
    if command[0] in ("run", "chat"):
        assert "--output-schema FILE" in text


def test_bench_and_mcp_serve_check_the_condenser_and_window() -> None:
    from codeact.bench import BenchConfig
    from codeact.errors import BenchError, ConfigError
    from codeact.mcp import ServeOptions

    BenchConfig(suites=["x"], condenser="summary", context_window=4096).validate()
    with pytest.raises(BenchError, match="unknown condenser 'nope'"):
        BenchConfig(suites=["x"], condenser="nope").validate()
    with pytest.raises(BenchError, match="context_window must be at least 1024"):
        BenchConfig(suites=["x"], context_window=10).validate()
    assert ServeOptions(condenser="summary").condenser == "summary"
    with pytest.raises(ConfigError, match="unknown condenser 'nope'"):
        ServeOptions(condenser="nope")


def test_ui_takes_no_images_context_window_and_condenser(openai_server: Any, env: dict[str, str]) -> None:
    proc = subprocess.Popen([*codeact_command(), "ui", "--no-browser", "--port", "0", "--backend", "restricted",
                             "--no-images", "--context-window", "4096", "-m", "test-model", "--base-url",
                             openai_server.base_url, "--api-key", "x"],
                            env={**env, "CODEACT_CONDENSER": "summary"}, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        url = ""
        deadline = time.monotonic() + 60
        while not url and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "codeact ui exited"
            found = re.search(r"codeact ui: (http://\S+)", line)
            url = found.group(1) if found else ""
        port, token = re.search(r":(\d+)/\?token=(\S+)", url).groups()  # type: ignore[union-attr]
        conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
        conn.request("GET", "/api/settings", headers={"X-CodeAct-Token": token, "Host": f"127.0.0.1:{port}"})
        settings = json.loads(conn.getresponse().read())
        conn.close()
        assert settings["images"] is False and settings["context_window"] == 4096
        assert settings["condenser"] == "summary"
    finally:
        proc.terminate()
        proc.wait(30)


# --------------------------------------------------------------------------- the web workspace


@contextmanager
def serve(tmp_path: Path, replies: list[str]) -> Iterator[tuple[UIServer, ScriptedModel]]:
    model = ScriptedModel(replies)
    log = RunLog(tmp_path / "runs.db")

    def factory(approve: Any) -> CodeActAgent:
        return CodeActAgent(model, [], sandbox="restricted", approve=approve, log=log,
                            output_dir=tmp_path / "out")

    server = UIServer(factory, log=log, options=UIOptions(output_root=tmp_path / "out"), settings={})
    try:
        with server:
            yield server, model
    finally:
        log.close()


def post(server: UIServer, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("POST", path, body=body, headers={"Host": f"127.0.0.1:{server.port}",
                                                       "X-CodeAct-Token": server.token,
                                                       "Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def turn_events(session: Any, after: int = 0, timeout: float = 60) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = [json.loads(d) for seq, d in session.events_after(after)[1]]
        if events and events[-1]["type"] == "Idle" and not session.busy:
            return events
        time.sleep(0.05)
    raise AssertionError("the turn did not end")


def test_web_schema_box_types_the_answer_and_refuses_hostile_schemas(tmp_path: Path) -> None:
    replies = [py("final_answer({'region': 'West', 'growth': '12'})"),
               py("final_answer({'region': 'West', 'growth': 12})"), py("final_answer({'a': 1})")]
    with serve(tmp_path, replies) as (server, model):
        session = server.workspace.create()
        path = f"/api/sessions/{session.id}/messages"
        # Hostile or broken schemas from the page: refused with the reason, no turn starts.
        for schema, needle in [(json.dumps(ref_bomb(30)), "expand to more than"),
                               ('{"items": ' * 40 + "{}" + "}" * 40, "nested more than"),
                               ("x" * (MAX_SCHEMA_BYTES + 1), f"at most {MAX_SCHEMA_BYTES:,}"),
                               ('{"type": 5}', "not a valid JSON Schema")]:
            status, body = post(server, path, json.dumps({"text": "go", "output_schema": schema}).encode())
            assert status == 400 and needle in body["error"], body
        status, body = post(server, path, json.dumps({"text": "go", "output_schema": 5}).encode())
        assert status == 400 and "output_schema" in body["error"]
        status, body = post(server, path, b'{"text": "' + b"x" * (5 * 1024 * 1024) + b'"}')
        assert status == 413 and "larger than" in body["error"]
        assert not model.requests and not session.run_ids
        # A good one: the answer is checked (a retry), then sent as pretty-printed JSON with the schema's name.
        status, _ = post(server, path, json.dumps({"text": "Fastest region?",
                                                   "output_schema": json.dumps(SCHEMA)}).encode())
        assert status == 202
        events = turn_events(session)
        answer = next(e for e in events if e["type"] == "FinalAnswer")
        assert answer["status"] == "success" and answer["answer"]["schema"] == "JSON Schema `Growth`"
        assert answer["answer"]["json"] == json.dumps({"region": "West", "growth": 12}, indent=2)
        assert "growth: '12' is not of type 'number'" in model.requests[1][-1].content
        # Without a schema the next turn is free: no JSON, no schema in the prompt.
        seen = session.last_seq
        status, _ = post(server, path, json.dumps({"text": "again"}).encode())
        assert status == 202
        answer = next(e for e in turn_events(session, seen) if e["type"] == "FinalAnswer")
        assert "json" not in answer["answer"] and "JSON Schema" not in model.requests[2][-1].content
