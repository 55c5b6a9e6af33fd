"""A plot both saved and shown is one artifact of the run, under the name the code gave it.

Through the real Docker sandbox: matplotlib's ``savefig`` then ``plt.show()``
(the model's usual way), the saved file displayed again, and a second,
different plot that must stay an artifact of its own. Saved at another
resolution than the inline backend shows (the demo's ``dpi=120``), the
figure is shown as the file it was saved to; changed after saving, as itself.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from codeact import CodeActAgent
from codeact.events import Observation
from codeact.models import ScriptedModel
from codeact.runlog import RunLog


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


@pytest.mark.docker
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


#: The demo's way: saved at 120 dpi (the inline backend shows at the figure's own dpi, other bytes), then
#: shown; a second figure changed after it was saved, which must be shown as it is now, not as its file.
RESOLUTION = """```python
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(6, 3))
ax.plot([1, 2, 3], [1, 4, 9])
fig.savefig("monthly_sales_by_region.png", dpi=120)
plt.show()
other, ax2 = plt.subplots()
ax2.plot([3, 2, 1])
other.savefig("draft.png", dpi=120)
ax2.set_title("changed after saving")
plt.show()
final_answer('plotted')
```"""


@pytest.mark.parametrize("backend", [pytest.param("docker", marks=pytest.mark.docker), "local"])
def test_a_plot_saved_at_another_resolution_then_shown_is_kept_once(tmp_path: Path, backend: str) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the local backend's warning that it is no boundary
        events = list(CodeActAgent(ScriptedModel([RESOLUTION]), sandbox=backend, log=False,
                                   output_dir=tmp_path / "out").stream("plot"))
    observation = [e for e in events if isinstance(e, Observation)][0]
    run_dir = tmp_path / "out" / observation.run_id
    files = sorted(p.name for p in run_dir.iterdir())
    assert files == ["draft.png", "monthly_sales_by_region.png", "step1_figure2.png"], files
    saved = (run_dir / "monthly_sales_by_region.png").read_bytes()
    assert observation.images[0] == saved  # what was shown is the file, at its 120 dpi
    assert observation.images[1] != (run_dir / "draft.png").read_bytes()  # changed since: shown as it is
    assert "shown, saved as monthly_sales_by_region.png" in observation.text
