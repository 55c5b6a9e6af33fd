"""The ``codeact`` command line: real commands against a real sandbox, run log and files.

Most tests drive the click app in-process with ``CliRunner``; a few start the
installed ``codeact`` script as a subprocess (startup imports, one-line errors,
Ctrl-C). The model is scripted: ``codeact demo`` has its own scripted replies,
and ``run``/``chat`` read ``$CODEACT_SCRIPTED_REPLIES``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from codeact.cli import cli
from codeact.runlog import RunLog

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A private run log and artifacts folder; no model configured."""
    db = tmp_path / "runs.db"
    out = tmp_path / "artifacts"
    monkeypatch.setenv("CODEACT_DB", str(db))
    monkeypatch.setenv("CODEACT_OUTPUT_DIR", str(out))
    for name in ("CODEACT_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY", "CODEACT_SCRIPTED_REPLIES", "CODEACT_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    return {"db": db, "out": out}


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def docker_sandbox(request: pytest.FixtureRequest) -> None:
    """The shared ``docker_ready`` fixture from conftest.py, or a local skip check when there is none."""
    try:
        request.getfixturevalue("docker_ready")
    except pytest.FixtureLookupError:
        from sandbox import docker_available

        reason = docker_available()
        if reason is not None:
            pytest.skip(f"Docker sandbox unavailable: {reason}")


def scripted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replies: list[str], name: str = "replies.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(replies), encoding="utf-8")
    monkeypatch.setenv("CODEACT_SCRIPTED_REPLIES", str(path))
    return path


def assert_one_line_error(stderr: str, *needles: str) -> None:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error: ")]
    assert len(errors) == 1, stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


SUM_REPLIES = [
    "I'll add the numbers.\n```python\ntotal = sum(range(10))\nprint(total)\n```",
    "```python\nfinal_answer({'sum': total})\n```",
]


def run_scripted_json(runner: CliRunner, *extra: str) -> dict:
    result = runner.invoke(cli, ["run", "Add the numbers 0..9", "--backend", "local", "--json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# --------------------------------------------------------------------------- basics


def test_help_lists_commands_and_version(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0
    for command in ("run", "chat", "demo", "logs", "doctor", "image", "sandbox"):
        assert f"  {command} " in result.stdout
    version = runner.invoke(cli, ["--version"])
    assert version.exit_code == 0
    assert version.stdout.startswith("codeact ")
    for args in (["run", "--help"], ["logs", "--help"], ["logs", "export", "--help"], ["image", "build", "--help"]):
        assert runner.invoke(cli, args).exit_code == 0, args


def test_bare_group_prints_help(runner: CliRunner) -> None:
    for args, needle in (([], "Commands:"), (["image"], "build"), (["sandbox"], "reap")):
        result = runner.invoke(cli, args)
        assert result.exit_code == 0 and needle in result.stdout and "Error" not in result.output


def test_subprocess_help_imports_nothing_heavy() -> None:
    """`codeact --help` stays fast: importing the CLI pulls in neither rich, openai, docker nor the sandbox."""
    code = ("import sys, codeact.cli; "
            "print([m for m in ('rich', 'openai', 'docker', 'sandbox', 'jupyter_client', 'nbformat') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def codeact_command() -> list[str]:
    script = Path(sys.executable).with_name("codeact")
    return [str(script)] if script.exists() else [sys.executable, "-m", "codeact.cli"]


def test_subprocess_errors_are_one_line(cli_env: dict[str, Path]) -> None:
    env = {**os.environ}
    proc = subprocess.run([*codeact_command(), "--version"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and proc.stdout.startswith("codeact ")
    proc = subprocess.run([*codeact_command(), "logs", "show", "does-not-exist"], capture_output=True, text=True,
                          env=env)
    assert proc.returncode == 1
    assert_one_line_error(proc.stderr, "No run with id 'does-not-exist'")
    proc = subprocess.run([*codeact_command(), "run", "hi", "--file", "missing.csv"], capture_output=True, text=True,
                          env=env)
    assert proc.returncode == 2
    assert_one_line_error(proc.stderr, "missing.csv")


# --------------------------------------------------------------------------- demo


def check_demo(result, out: Path, db: Path, backend: str) -> None:
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert "No model configured" in first and "scripted" in first
    assert "✔ success" in result.stdout
    pngs = sorted(out.glob("*/*.png"))
    assert pngs, result.output
    assert all(p.read_bytes().startswith(PNG_MAGIC) for p in pngs)
    assert [p.name for p in pngs] == ["monthly_sales_by_region.png"]  # saved and shown: kept once
    assert f"Artifacts are in {pngs[0].parent}" in result.stdout
    with RunLog(db) as log:
        (run,) = log.list_runs()
        record = log.get_run(run.id)
    assert record.status == "success"
    assert record.backend == backend
    assert record.answer["fastest_growing_region"] == "West"
    assert record.answer["plot"] == "monthly_sales_by_region.png"


def test_demo_scripted_local(runner: CliRunner, cli_env: dict[str, Path]) -> None:
    result = runner.invoke(cli, ["demo", "--backend", "local"])
    check_demo(result, cli_env["out"], cli_env["db"], "local")


@pytest.mark.docker
def test_demo_scripted_docker(runner: CliRunner, cli_env: dict[str, Path], docker_sandbox: None) -> None:
    result = runner.invoke(cli, ["demo", "--backend", "docker"])
    check_demo(result, cli_env["out"], cli_env["db"], "docker")


def test_demo_data_is_realistic() -> None:
    import pandas as pd

    from codeact.demo import demo_csv

    df = pd.read_csv(demo_csv())
    assert list(df.columns) == ["month", "region", "product", "units", "revenue"]
    assert 200 <= len(df) <= 500
    assert df["region"].nunique() == 4 and df["month"].nunique() == 24
    by_year = df.assign(year=df["month"].str[:4]).pivot_table(index="region", columns="year", values="revenue",
                                                               aggfunc="sum")
    growth = (by_year["2024"] / by_year["2023"] - 1).sort_values(ascending=False)
    assert growth.index[0] == "West" and growth.iloc[0] > 2 * growth.iloc[1]


# --------------------------------------------------------------------------- run


def test_run_json_with_scripted_replies(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        cli_env: dict[str, Path]) -> None:
    scripted(tmp_path, monkeypatch, SUM_REPLIES)
    data = run_scripted_json(runner)
    assert data["status"] == "success" and data["ok"] is True
    assert data["answer"] == {"sum": 45}
    assert [s["observation"] for s in data["steps"]][0] == "45"
    assert data["usage"]["requests"] == 2
    with RunLog(cli_env["db"]) as log:
        assert log.get_run(data["run_id"]).status == "success"


def test_run_renders_steps_and_summary(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scripted(tmp_path, monkeypatch, SUM_REPLIES)
    result = runner.invoke(cli, ["run", "Add the numbers 0..9", "--backend", "local", "--no-log"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Step 1" in out and "total = sum(range(10))" in out and "45" in out
    assert "Answer" in out and "{'sum': 45}" in out
    assert "✔ success · 2 steps" in out
    assert "not isolated" in result.stderr  # the explicit local backend says what it is


def test_run_task_from_stdin(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scripted(tmp_path, monkeypatch, ["The answer is 4."])
    result = runner.invoke(cli, ["run", "--json", "--backend", "local"], input="What is 2 + 2?\n")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["task"] == "What is 2 + 2?" and data["answer"] == "The answer is 4."


def test_run_max_steps_exits_1(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scripted(tmp_path, monkeypatch, ["```python\nprint('still working')\n```"] * 2)
    result = runner.invoke(cli, ["run", "loop", "--backend", "local", "--max-steps", "2", "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["status"] == "max_steps" and len(data["steps"]) == 2


def test_run_with_files_and_artifacts(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      cli_env: dict[str, Path]) -> None:
    data_file = tmp_path / "numbers.txt"
    data_file.write_text("1\n2\n3\n")
    scripted(tmp_path, monkeypatch, [
        "```python\nvals = [int(x) for x in open('numbers.txt')]\nopen('double.txt', 'w').write(str(sum(vals) * 2))\n"
        "final_answer(sum(vals))\n```",
    ])
    result = runner.invoke(cli, ["run", "sum numbers.txt", "-f", str(data_file), "--backend", "local"])
    assert result.exit_code == 0, result.output
    produced = list(cli_env["out"].glob("*/double.txt"))
    assert produced and produced[0].read_text() == "12"
    assert f"file saved: {produced[0]}" in result.stdout


# --------------------------------------------------------------------------- approvals and tools


TOOLS_SOURCE = '''
from codeact import tool


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file.

    Args:
        path: the file to delete
    """
    return f"deleted {path}"


def lookup(city: str) -> dict:
    """Weather for a city."""
    return {"city": city, "tomorrow": "sunny"}
'''

TOOL_REPLIES = [
    "```python\nprint(lookup('Paris')['tomorrow'])\ntry:\n    print(delete_file('/tmp/x'))\n"
    "except Exception as e:\n    print('refused:', e)\n```",
    "Done.",
]


def test_approval_denied_without_a_terminal(runner: CliRunner, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    tools = tmp_path / "mytools.py"
    tools.write_text(TOOLS_SOURCE)
    scripted(tmp_path, monkeypatch, TOOL_REPLIES)
    result = runner.invoke(cli, ["run", "clean up", "--backend", "local", "--tools", f"{tools}:ALL", "--json"])
    assert result.exit_code == 0, result.output
    assert "denied delete_file" in result.stderr and "--yes" in result.stderr
    data = json.loads(result.stdout)
    observation = data["steps"][0]["observation"]
    assert "sunny" in observation and "refused:" in observation and "did not allow" in observation
    calls = {c["name"]: c for c in data["steps"][0]["tool_calls"]}
    assert calls["lookup"]["error"] is None
    assert "ApprovalDenied" in calls["delete_file"]["error"]


def test_yes_approves(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = tmp_path / "mytools.py"
    tools.write_text(TOOLS_SOURCE)
    scripted(tmp_path, monkeypatch, TOOL_REPLIES)
    result = runner.invoke(cli, ["run", "clean up", "--backend", "local", "--tools", f"{tools}:delete_file,lookup",
                                 "--yes"])
    assert result.exit_code == 0, result.output
    assert "approved (--yes): delete_file" in result.stdout
    assert "deleted /tmp/x" in result.stdout


# --------------------------------------------------------------------------- chat


def test_chat_keeps_state_between_turns_and_resets(runner: CliRunner, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch, cli_env: dict[str, Path]) -> None:
    scripted(tmp_path, monkeypatch, [
        "```python\ny = 21\nprint('y set')\n```",
        "y is set.",
        "```python\nfinal_answer(y * 2)\n```",
        "```python\ntry:\n    print(y)\nexcept NameError:\n    final_answer('y is gone')\n```",
    ])
    session = "set y\n\ndouble y\n/help\n/reset\nprint y\n/exit\nnever read\n"
    result = runner.invoke(cli, ["chat", "--backend", "local"], input=session)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.count("✔ success") == 3
    assert "42" in out
    assert "New session" in out and "y is gone" in out
    assert "/reset" in out  # the /help text
    with RunLog(cli_env["db"]) as log:
        assert len(log.list_runs()) == 3


def test_chat_without_model_is_a_config_error(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["chat", "--backend", "local"], input="/exit\n")
    assert result.exit_code == 2
    assert_one_line_error(result.stderr, "no model configured", "CODEACT_MODEL")


# --------------------------------------------------------------------------- logs


@pytest.fixture
def logged_run(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    scripted(tmp_path, monkeypatch, SUM_REPLIES)
    return run_scripted_json(runner)["run_id"]


def test_logs_list_and_filters(runner: CliRunner, logged_run: str) -> None:
    result = runner.invoke(cli, ["logs"])
    assert result.exit_code == 0, result.output
    assert logged_run in result.stdout and "success" in result.stdout
    assert logged_run in runner.invoke(cli, ["logs", "list", "-n", "5"]).stdout
    data = json.loads(runner.invoke(cli, ["logs", "--json"]).stdout)
    assert [r["id"] for r in data] == [logged_run]
    empty = runner.invoke(cli, ["logs", "--status", "error"])
    assert empty.exit_code == 0 and "No runs with status error" in empty.stdout


def test_logs_db_option_wins(runner: CliRunner, logged_run: str, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    result = runner.invoke(cli, ["logs", "--db", str(other)])
    assert result.exit_code == 0 and "No runs" in result.stdout
    shown = runner.invoke(cli, ["logs", "show", logged_run[:6], "--db", str(other)])
    assert shown.exit_code == 1
    assert runner.invoke(cli, ["logs", "path", "--db", str(other)]).stdout.strip() == str(other)


def test_logs_show(runner: CliRunner, logged_run: str) -> None:
    result = runner.invoke(cli, ["logs", "show", logged_run[:5]])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert logged_run in out and "Add the numbers 0..9" in out
    assert "Step 1" in out and "total = sum(range(10))" in out and "{'sum': 45}" in out
    last = runner.invoke(cli, ["logs", "show"])
    assert last.exit_code == 0 and logged_run in last.stdout


def test_logs_export_jsonl_and_ipynb(runner: CliRunner, logged_run: str, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["logs", "export", logged_run, "--jsonl", "-"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["type"] for line in lines] == ["run", "step", "step", "result"]
    assert lines[-1]["answer"] == {"sum": 45}

    out = tmp_path / "run.jsonl"
    result = runner.invoke(cli, ["logs", "export", logged_run[:4], "--jsonl", str(out)])
    assert result.exit_code == 0 and len(out.read_text().splitlines()) == 4

    import nbformat

    nb_path = tmp_path / "nb" / "run.ipynb"
    result = runner.invoke(cli, ["logs", "export", logged_run, "--ipynb", str(nb_path)])
    assert result.exit_code == 0, result.output
    nb = nbformat.read(str(nb_path), as_version=4)
    nbformat.validate(nb)
    codes = [c.source for c in nb.cells if c.cell_type == "code"]
    assert "def final_answer" in codes[0]  # the set-up cell: the notebook runs top to bottom
    assert codes[1] == "total = sum(range(10))\nprint(total)"


def test_logs_errors(runner: CliRunner, logged_run: str) -> None:
    unknown = runner.invoke(cli, ["logs", "show", "zzzz"])
    assert unknown.exit_code == 1
    assert_one_line_error(unknown.stderr, "No run with id 'zzzz'", logged_run)
    both = runner.invoke(cli, ["logs", "export", logged_run])
    assert both.exit_code == 2
    assert_one_line_error(both.stderr, "--jsonl", "--ipynb")


def test_logs_show_on_empty_log(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["logs", "show"])
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "empty")


# --------------------------------------------------------------------------- errors


def test_missing_file_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["run", "analyse it", "--file", "nope.csv"])
    assert result.exit_code == 2
    assert_one_line_error(result.stderr, "nope.csv", "does not exist")


@pytest.mark.parametrize("spec, needle", [
    ("no_such_module_xyz:ALL", "no_such_module_xyz"),
    ("json:no_such_function", "no_such_function"),
    ("", "empty tool spec"),
])
def test_bad_tools_spec(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str,
                        needle: str) -> None:
    scripted(tmp_path, monkeypatch, SUM_REPLIES)
    result = runner.invoke(cli, ["run", "x", "--backend", "local", "--tools", spec])
    assert result.exit_code == 2, result.output
    assert_one_line_error(result.stderr, needle)


def test_no_model_configured(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["run", "hello", "--backend", "local"])
    assert result.exit_code == 2
    assert_one_line_error(result.stderr, "no model configured")


def test_bad_scripted_replies_file(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"not": "a list"}')
    monkeypatch.setenv("CODEACT_SCRIPTED_REPLIES", str(path))
    result = runner.invoke(cli, ["run", "hello", "--backend", "local"])
    assert result.exit_code == 2
    assert_one_line_error(result.stderr, "list of strings")


def test_backend_docker_without_docker(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scripted(tmp_path, monkeypatch, SUM_REPLIES)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    result = runner.invoke(cli, ["run", "x", "--backend", "docker"])
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "Docker sandbox is not ready", "codeact doctor", "--backend local")


@pytest.mark.parametrize("args", [[], ["--backend", "auto"]], ids=["default", "auto"])
def test_default_backend_fails_closed_without_docker(runner: CliRunner, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch, args: list[str]) -> None:
    """No Docker: an error that says what to do; the code never runs unisolated unless that is chosen."""
    scripted(tmp_path, monkeypatch, SUM_REPLIES)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    monkeypatch.delenv("CODEACT_BACKEND", raising=False)
    result = runner.invoke(cli, ["run", "x", "--json", *args])
    assert result.exit_code == 1, result.output
    assert_one_line_error(result.stderr, "Docker sandbox is not ready", "--backend local")
    assert result.stdout == ""


def test_local_backend_chosen_through_the_environment_warns(runner: CliRunner, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    scripted(tmp_path, monkeypatch, SUM_REPLIES)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    monkeypatch.setenv("CODEACT_BACKEND", "local")
    result = runner.invoke(cli, ["run", "x", "--json"])
    assert result.exit_code == 0, result.output
    assert "not isolated" in result.stderr
    assert json.loads(result.stdout)["status"] == "success"


def test_run_with_a_real_openai_compatible_endpoint(runner: CliRunner, openai_server: Any) -> None:
    openai_server.plan_text("```python\nprint(6 * 7)\n```", usage=(100, 10))
    openai_server.plan_text("```python\nfinal_answer(42)\n```", usage=(120, 8))
    result = runner.invoke(cli, ["run", "6 times 7?", "--backend", "local", "--json", "--model", "test-model",
                                 "--base-url", openai_server.base_url, "--api-key", "sk-test"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["answer"] == 42
    assert data["usage"] == {"input_tokens": 220, "output_tokens": 18, "requests": 2, "cost": None}
    assert openai_server.chat_requests[0].body["model"] == "test-model"


def test_model_auth_error_is_one_line(runner: CliRunner, openai_server: Any) -> None:
    openai_server.plan_auth_error()
    result = runner.invoke(cli, ["run", "hi", "--backend", "local", "--model", "test-model", "--base-url",
                                 openai_server.base_url])
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "OPENAI_API_KEY")
    assert "✘ error" in result.stdout


def test_demo_uses_a_configured_model(runner: CliRunner, openai_server: Any, monkeypatch: pytest.MonkeyPatch,
                                      cli_env: dict[str, Path]) -> None:
    from codeact.demo import SCRIPTED_REPLIES, _chart_reply

    for reply in SCRIPTED_REPLIES:
        openai_server.plan_text(reply if isinstance(reply, str) else _chart_reply("fastest growing: West"))
    monkeypatch.setenv("CODEACT_MODEL", "test-model")
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    result = runner.invoke(cli, ["demo", "--backend", "local"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].startswith("Running the demo with model test-model")
    assert len(openai_server.chat_requests) == 4
    assert list(cli_env["out"].glob("*/monthly_sales_by_region.png"))


# --------------------------------------------------------------------------- doctor, image, sandbox


def test_doctor(runner: CliRunner, cli_env: dict[str, Path]) -> None:
    result = runner.invoke(cli, ["doctor"])
    out = result.stdout
    assert "Python" in out and "Docker engine" in out and "sandbox image" in out and "local kernel" in out
    assert "WARN  model: not configured" in out
    assert f"run log: {cli_env['db']} is writable" in out
    assert result.exit_code == 0, out  # the local kernel works in the test environment
    assert "Traceback" not in result.output


def test_doctor_reports_an_unreachable_model(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEACT_MODEL", "some-model")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    result = runner.invoke(cli, ["doctor"])
    assert "FAIL  model: some-model at http://127.0.0.1:9/v1" in result.stdout
    assert "connection" in result.stdout.lower()
    assert result.exit_code == 1  # every FAIL is a non-zero exit, a model's too


def test_doctor_with_a_real_endpoint(runner: CliRunner, openai_server: Any) -> None:
    result = runner.invoke(cli, ["doctor", "--model", "test-model", "--base-url", openai_server.base_url])
    assert "OK    model: test-model" in result.stdout, result.stdout
    other = runner.invoke(cli, ["doctor", "--model", "other-model", "--base-url", openai_server.base_url])
    assert "WARN  model: the endpoint answers but does not list 'other-model'" in other.stdout


@pytest.mark.docker
def test_image_status_and_reap(runner: CliRunner, docker_sandbox: None) -> None:
    status = runner.invoke(cli, ["image", "status"])
    assert status.exit_code == 0, status.output
    assert "present" in status.stdout and "codeact-sandbox:" in status.stdout
    build = runner.invoke(cli, ["image", "build"])
    assert build.exit_code == 0, build.output
    assert "already built" in build.stdout
    reap = runner.invoke(cli, ["sandbox", "reap"])
    assert reap.exit_code == 0, reap.output


def test_image_status_without_docker(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    result = runner.invoke(cli, ["image", "status"])
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "no Docker engine answers")


# --------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_cancels_the_run_and_logs_it(tmp_path: Path, cli_env: dict[str, Path]) -> None:
    replies = tmp_path / "sleep.json"
    replies.write_text(json.dumps([
        "```python\nimport time\nprint('sleeping', flush=True)\ntime.sleep(120)\n```",
        "```python\nfinal_answer('woke up')\n```",
    ]))
    env = {**os.environ, "CODEACT_SCRIPTED_REPLIES": str(replies)}
    proc = subprocess.Popen([*codeact_command(), "run", "sleep", "--backend", "local"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        run_id = None
        while time.monotonic() < deadline:
            with RunLog(cli_env["db"]) as log:
                runs = log.list_runs()
                if runs and runs[0].step_count >= 1:
                    record = log.get_run(runs[0].id)
                    if record.steps and record.steps[0].code:
                        run_id = runs[0].id
                        break
            time.sleep(0.2)
        assert run_id, "the run never reached its code action"
        time.sleep(1.0)  # let the kernel start sleeping
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, (stdout, stderr)
    assert "Traceback" not in stderr
    assert f"Cancelled: run {run_id}" in stderr
    with RunLog(cli_env["db"]) as log:
        assert log.get_run(run_id).status == "cancelled"


def test_module_entry_point_runs() -> None:
    proc = subprocess.run([sys.executable, "-m", "codeact.cli", "logs", "--help"], capture_output=True, text=True,
                          cwd=REPO)
    assert proc.returncode == 0 and "run log" in proc.stdout


def test_config_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from codeact import config

    monkeypatch.setenv("CODEACT_MODEL", "env-model")
    assert config.model_name(None) == "env-model" and config.model_name("opt") == "opt"
    assert config.db_path(str(tmp_path / "x.db")) == tmp_path / "x.db"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:1234/v1/")
    assert config.base_url() == "http://localhost:1234/v1"
    model = config.build_model(None, scripted=False)
    assert model.name == "env-model" and model.base_url == "http://localhost:1234/v1"
    replies = scripted(tmp_path, monkeypatch, ["hi"])
    assert config.build_model("ignored").name == "scripted"
    assert config.load_scripted_replies(replies) == ["hi"]


def test_package_installs_are_rendered_with_hostile_names_escaped() -> None:
    import io

    from rich.console import Console

    from codeact.events import PackageInstall
    from codeact.cli.render import Renderer

    out = io.StringIO()
    renderer = Renderer(Console(file=out, width=120), live=False)
    renderer.event(PackageInstall(run_id="r", step=1, requirements=["msgpack"], source="runtime",
                                  packages=[{"name": "msgpack", "version": "1.1.0", "installed_bytes": 400_000}],
                                  seconds=0.4, resolved_from_cache=True))
    renderer.event(PackageInstall(run_id="r", step=2, requirements=["evil\x1b]0;owned\x07"], source="runtime",
                                  error_kind="denied", error="not on the allow list"))
    text = out.getvalue()
    assert "installed msgpack 1.1.0 (0.4 MB, from the host's cache" in text
    assert "not installed (denied): not on the allow list" in text
    assert "\x1b" not in text and "\\x1b" in text
