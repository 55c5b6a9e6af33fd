"""A plot both saved and shown is one artifact of the run, under the name the code gave it.

Through the real Docker sandbox: matplotlib's ``savefig`` then ``plt.show()``
(the model's usual way), the saved file displayed again, and a second,
different plot that must stay an artifact of its own.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from codeact import CodeActAgent
from codeact.events import Observation
from codeact.models import ScriptedModel
from codeact.runlog import RunLog

pytestmark = pytest.mark.docker

CODE = """```python
import matplotlib.pyplot as plt
from IPython.display import Image, display

plt.plot([1, 2, 3], [1, 4, 9])
plt.title('squares')
plt.savefig('plot.png')
display(Image('plot.png'))
plt.show()
plt.plot([3, 2, 1])
plt.title('another plot')
plt.show()
final_answer('plotted')
```"""


def test_a_plot_saved_and_shown_is_kept_once(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    agent = CodeActAgent(ScriptedModel([CODE]), sandbox="docker", log=str(db), output_dir=tmp_path / "out")
    events = list(agent.stream("plot squares"))
    (observation,) = [e for e in events if isinstance(e, Observation)]
    assert len(observation.images) == 3  # shown three times: the saved file, the same figure, another one

    run_dir = tmp_path / "out" / observation.run_id
    files = sorted(p.name for p in run_dir.iterdir())
    assert files == ["plot.png", "step1_figure3.png"], files
    contents = {hashlib.sha256((run_dir / name).read_bytes()).hexdigest() for name in files}
    assert len(contents) == 2
    assert sorted(observation.artifacts) == files
    # The model learns where each picture it showed was kept.
    assert observation.text.count("shown, saved as plot.png") == 2, observation.text
    assert "shown, saved as step1_figure3.png" in observation.text
    with RunLog(db) as log:
        record = log.get_run(observation.run_id)
    assert sorted(Path(a.path).name for a in record.artifacts) == files
