"""The runnable examples (examples/*.py) with their scripted replies, on a real local kernel."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from codeact import RunLog

pytestmark = pytest.mark.timeout(180)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture
def load(monkeypatch: pytest.MonkeyPatch):
    """Import an example script as a module (its folder on sys.path, like `python examples/x.py`)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.delenv("CODEACT_MODEL", raising=False)

    def loader(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, spec.name, module)  # as an import does: pydantic resolves names there
        spec.loader.exec_module(module)
        return module

    return loader


def common_args(tmp_path: Path) -> list[str]:
    return ["--scripted", "--sandbox", "local", "--output-dir", str(tmp_path / "out"),
            "--log", str(tmp_path / "runs.db")]


def test_data_analysis(load, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = load("data_analysis")
    result = example.main(common_args(tmp_path))
    assert result.status == "success", result.error
    answer = result.answer
    assert type(answer).__name__ == "OrdersSummary"  # output_type: the answer is the example's pydantic model
    assert list(answer.top_products) == ["latte", "americano", "flat white"]
    assert answer.top_products["latte"] == 16192.0
    assert answer.busiest_weekday == "Friday"
    assert answer.fastest_growing_store == "Guomao"
    assert answer.growth_pct == {"Guomao": 34.5, "Zhongguancun": 33.0, "Wangjing": 28.7}
    assert answer.chart == "weekly_revenue.png"
    assert len(result.steps) == 3

    run_dir = tmp_path / "out" / result.run_id
    chart = run_dir / "weekly_revenue.png"
    assert chart in result.artifacts
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # saved at 120 dpi, then shown: shown as the file, so kept once (no step3_figure1.png beside it)
    assert not any(p.name.startswith("step3_figure") for p in result.artifacts), result.artifacts

    out = capsys.readouterr().out
    assert "Task: orders.csv holds twelve weeks" in out
    assert "status: success" in out
    assert '"busiest_weekday": "Friday"' in out
    record = RunLog(tmp_path / "runs.db").get_run(result.run_id)
    assert record.status == "success" and record.files == ["orders.csv"]


def test_weather_running(load, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = load("weather_running")
    result = example.main(common_args(tmp_path) + ["--quiet"])
    assert result.status == "success", result.error
    answer = result.answer
    assert answer["city"] == "北京" and answer["date"] == "2025-05-18"
    assert answer["suitable"] is True
    assert "适合跑步" in answer["summary"] and "14~25°C" in answer["summary"]
    assert answer["checks"]["空气质量"] == "AQI 62"
    calls = [c for step in result.steps for c in step.tool_calls]
    assert [(c.name, c.arguments) for c in calls] == [("get_daily_weather", {"city": "北京"})]
    out = capsys.readouterr().out
    assert "适合跑步" in out and "Task:" not in out  # --quiet prints only the answer


def test_weather_tool_directly(load) -> None:
    example = load("weather_running")
    assert example.get_daily_weather("Harbin")["days"][1]["wind_level"] == 6
    with pytest.raises(ValueError, match="cities available"):
        example.get_daily_weather("Atlantis")


def test_file_chores_approved(load, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = load("file_chores")
    outbox = tmp_path / "outbox"
    result = example.main(common_args(tmp_path) + ["--yes", "--outbox", str(outbox)])
    assert result.status == "success", result.error
    answer = result.answer
    report = outbox / "expenses_report.md"
    assert answer["report"] == str(report)
    assert answer["total"] == 4485.9
    assert answer["per_person"] == {"Alice": 788.4, "Bob": 2638.5, "Chen": 1059.0}
    assert len(answer["over_500"]) == 3 and any("Flight" in item for item in answer["over_500"])
    text = report.read_text(encoding="utf-8")
    assert "| Bob | 2,638.50 |" in text and "total **4,485.90**" in text
    assert "approved in advance for the customer workshop" in text
    assert "[approval] allowed (--yes)" in capsys.readouterr().out
    # The inbox is read, never changed.
    assert sorted(p.name for p in (EXAMPLES / "data" / "inbox").iterdir()) == [
        "expenses_alice.csv", "expenses_bob.csv", "expenses_chen.csv", "meeting_minutes.txt", "notes.txt"]


def test_file_chores_denied_without_a_terminal(load, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    example = load("file_chores")
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False, raising=False)
    outbox = tmp_path / "outbox"
    result = example.main(common_args(tmp_path) + ["--outbox", str(outbox)])
    assert result.status == "success"
    assert result.answer["report"] is None and result.answer["total"] == 4485.9
    assert not outbox.exists() or not any(outbox.iterdir())
    [denied] = [c for s in result.steps for c in s.tool_calls if c.name == "save_report"]
    assert "ApprovalDenied" in denied.error
    assert "[approval] denied" in capsys.readouterr().out


def test_file_chores_tools_stay_inside_their_folders(load, tmp_path: Path) -> None:
    example = load("file_chores")
    list_inbox, read_inbox_file, save_report = example.inbox_tools(EXAMPLES / "data" / "inbox", tmp_path / "o")
    assert {f["name"] for f in list_inbox()} >= {"notes.txt", "expenses_bob.csv"}
    with pytest.raises(ValueError, match="plain file name"):
        read_inbox_file("../weather.json")
    with pytest.raises(ValueError, match="plain file name"):
        save_report("../escape.md", "x")


def test_example_runs_as_a_script(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CODEACT_MODEL"}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "weather_running.py"), "--sandbox", "local", "--quiet",
         "--output-dir", str(tmp_path / "out"), "--log", str(tmp_path / "runs.db")],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert '"suitable": true' in proc.stdout  # no model configured: the scripted replies ran
