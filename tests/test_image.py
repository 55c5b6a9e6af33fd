"""The sandbox image: its recipe (one file of pins), its tag (a hash of the recipe) and the lean image itself."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sandbox import image as image_mod
from sandbox.image import FLAVORS, image_tag, read_recipe, recipe_hash
from sandbox.packages import canonical_name

pytestmark = pytest.mark.timeout(300)


def names(pins: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pin in pins:
        name, sep, version = pin.partition("==")
        assert sep and version, f"{pin!r} is not pinned to one version"
        out[canonical_name(name)] = version
    return out


def test_recipe_pins_every_distribution_for_one_python() -> None:
    lean, full = read_recipe("lean"), read_recipe("full")
    assert lean.python == "3.11" and lean.glibc == (2, 36)
    assert set(lean.top_level) == {"numpy", "pandas", "matplotlib"}
    lean_pins, full_pins = names(lean.pins), names(full.pins)
    assert {"numpy", "pandas", "matplotlib", "ipykernel", "pyzmq"} <= set(lean_pins)
    assert set(lean_pins) <= set(full_pins) and full.base_pins == lean.pins
    assert {"scikit-learn", "scipy", "statsmodels", "seaborn", "pyarrow", "openpyxl"} <= set(full_pins) - set(lean_pins)
    assert set(lean.exclude) <= set(lean_pins)  # left out of the image, but pinned: the resolution is stable
    with pytest.raises(Exception, match="unknown image flavour"):
        read_recipe("huge")


def test_tag_is_the_recipe_hash_and_follows_the_pins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert image_tag("lean") == f"codeact-sandbox:{recipe_hash('lean')}"
    assert image_tag("full") == f"codeact-sandbox:full-{recipe_hash('full')}"
    assert image_tag("lean") == image_tag("lean") and image_tag("lean") != image_tag("full").replace("full-", "")
    copy = tmp_path / "images"
    shutil.copytree(image_mod.recipe_dir(), copy)
    monkeypatch.setattr(image_mod, "recipe_dir", lambda: copy)
    before_lean, before_full = recipe_hash("lean"), recipe_hash("full")
    (copy / "full.txt").write_text((copy / "full.txt").read_text().replace("openpyxl==", "openpyxl==0.0.1#"))
    assert recipe_hash("lean") == before_lean and recipe_hash("full") != before_full  # only full changed
    (copy / "requirements.txt").write_text((copy / "requirements.txt").read_text() + "tabulate==0.10.0\n")
    assert recipe_hash("lean") != before_lean
    assert "tabulate==0.10.0" in read_recipe("lean").pins


def test_flavor_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CODEACT_SANDBOX_IMAGE", raising=False)
    monkeypatch.setenv("CODEACT_SANDBOX_FLAVOR", "full")
    assert image_mod.default_image_tag() == image_tag("full")
    monkeypatch.setenv("CODEACT_SANDBOX_FLAVOR", "lean")
    assert image_mod.default_image_tag() == image_tag("lean")
    monkeypatch.setenv("CODEACT_SANDBOX_IMAGE", "mine:1")
    assert image_mod.default_image_tag() == "mine:1"
    assert FLAVORS == ("lean", "full")


@pytest.mark.docker
def test_lean_image_is_small_and_holds_exactly_the_pinned_wheels() -> None:
    from sandbox.container import docker_client

    client = docker_client()
    tag = image_tag("lean")
    img = client.images.get(tag)
    assert img.attrs["Size"] <= 450 * 1024**2, f"{tag} is {img.attrs['Size'] / 1e6:.0f} MB"
    labels = img.labels
    recipe = read_recipe("lean")
    expected = {n: v for n, v in names(recipe.pins).items() if n not in recipe.exclude}
    assert {canonical_name(k): v for k, v in json.loads(labels["io.codeact.packages"]).items()} == expected
    assert labels["io.codeact.python"] == "3.11" and labels["io.codeact.flavor"] == "lean"
    probe = ("import importlib.metadata as m, importlib.util as u, shutil, sys\n"
             "print(sys.version_info[:2], m.version('pandas'), m.version('numpy'), m.version('ipykernel'))\n"
             "print([x for x in ('debugpy', 'jedi') if u.find_spec(x)], shutil.which('gcc'), shutil.which('pip'))")
    out = client.containers.run(tag, ["python3", "-c", probe], network_mode="none", remove=True).decode()
    assert out.splitlines() == [f"(3, 11) {expected['pandas']} {expected['numpy']} {expected['ipykernel']}",
                                "[] None None"]


@pytest.mark.docker
def test_build_is_skipped_for_an_unchanged_recipe() -> None:
    result = image_mod.build_image(flavor="lean")
    assert result.skipped and result.tag == image_tag("lean")


@pytest.mark.docker
def test_dataframes_cross_the_bridge_with_the_host_dtypes() -> None:
    import pandas as pd

    from sandbox import DockerSandbox

    def echo(df: pd.DataFrame) -> pd.DataFrame:
        return df

    with DockerSandbox(functions=[echo]) as sb:
        r = sb.run("import pandas as pd\nd = echo(pd.DataFrame({'s': ['a', 'b'], 'n': [1, 2]}))\n"
                   "print(pd.__version__, dict(d.dtypes.astype(str)))")
        assert r.error is None, r.error
        assert r.stdout.strip() == f"{pd.__version__} {dict(pd.DataFrame({'s': ['a'], 'n': [1]}).dtypes.astype(str))}"
