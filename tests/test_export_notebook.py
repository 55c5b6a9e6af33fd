"""An exported notebook runs top to bottom with ``jupyter nbconvert --execute``.

The run is real (the Docker sandbox, a host tool, an error, a time-out, a
step that prints nothing); only the model's text is scripted. The export is
then executed in a plain local kernel, where neither the sandbox nor the tool
exists.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from codeact import CodeActAgent
from codeact.export import export_notebook
from codeact.models import ScriptedModel
from codeact.observation import NOTHING_PRINTED
from codeact.runlog import RunLog

pytestmark = pytest.mark.docker


def double(n: int) -> int:
    """Twice n."""
    return n * 2


def code(source: str) -> str:
    return f"```python\n{source}\n```"


def outputs_text(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(str(out.get("text", "")))
        parts.extend(str(v) for v in out.get("data", {}).values())
        parts.extend(out.get("traceback", []))
    return "".join(parts)


def test_an_exported_run_executes_with_nbconvert(tmp_path: Path) -> None:
    model = ScriptedModel([
        code("value = double(21)\nprint('double:', value)"),
        code("print(missing_name)"),  # fails: the model fixes it in the next step, as models do
        code("import time\nwhile True:\n    time.sleep(0.1)"),  # runs out of time
        code("x = 1"),  # prints nothing: the model gets a hint the notebook must not show as output
        code("final_answer(value + x)"),
    ])
    db = tmp_path / "runs.db"
    agent = CodeActAgent(model, [double], sandbox="docker", log=str(db), output_dir=tmp_path / "out",
                         execution_timeout=3, max_steps=6)
    result = agent.run("double 21, then add one")
    assert result.status == "success" and result.answer == 43, result
    with RunLog(db) as log:
        record = log.get_run(result.run_id)
    assert record.steps[2].error and record.steps[2].error.startswith("TimeoutError"), record.steps[2].error
    notebook = tmp_path / "run.ipynb"
    export_notebook(record, notebook)

    exported = nbformat.read(notebook, as_version=4)
    assert not any(NOTHING_PRINTED in outputs_text(c) for c in exported.cells if c.cell_type == "code")
    executed = tmp_path / "executed.ipynb"
    proc = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
                           "--ExecutePreprocessor.timeout=120", str(notebook), "--output", executed.name],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]

    cells = nbformat.read(executed, as_version=4).cells
    code_cells = [c for c in cells if c.cell_type == "code"]
    setup, *steps = code_cells
    assert "def final_answer" in setup.source and "def double" in setup.source
    assert [c.source for c in steps] == [record.steps[i].code for i in (0, 1, 3, 4)]  # the endless loop is not run
    assert "double: 42" in outputs_text(steps[0])  # the tool's recorded result, replayed
    assert "NameError" in outputs_text(steps[1])  # failed here as in the run, and the notebook went on
    assert "final answer: 43" in outputs_text(steps[3])
    assert not any(NOTHING_PRINTED in outputs_text(c) for c in code_cells)
    shown = [c for c in cells if c.cell_type == "markdown" and "time.sleep(0.1)" in c.source]
    assert len(shown) == 1 and "ran out of time" in shown[0].source
