"""The package as a user installs it: ``python -m build`` makes a wheel and an sdist that carry everything
codeact needs at run time, and in a clean venv outside the repository ``pip install codeact-*.whl``, then
``codeact --version``, ``codeact image build`` and ``codeact demo`` work.

One build and one venv serve the whole module (pip's cache makes the install a matter of seconds after the
first time on a machine).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Iterator

import pytest

import codeact

REPO = Path(__file__).resolve().parents[1]

#: Files the code loads at run time (importlib.resources / Path(__file__)), by where they land in the wheel.
RUNTIME_FILES = [
    "sandbox/recipes/Dockerfile",
    "sandbox/recipes/debian-base.sh",
    "sandbox/recipes/requirements.txt",
    "sandbox/recipes/full.txt",
    "sandbox/runtime/__init__.py",
    "codeact/prompts/codeact.md",
    "codeact/prompts/react_fc.md",
    "codeact/data/sales.csv",
    "codeact/catalog/data/cl100k_base.tiktoken.gz",
    "codeact/catalog/data/o200k_base.tiktoken.gz",
    "codeact/ui/static/index.html",
    "codeact/py.typed",
    "sandbox/py.typed",
]


def _clean_env(tmp: Path) -> dict[str, str]:
    """The environment of a user with nothing of this checkout on their path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "CODEACT_"))}
    env["HOME"] = str(tmp / "home")
    env["CODEACT_DB"] = str(tmp / "runs.db")
    env["CODEACT_OUTPUT_DIR"] = str(tmp / "artifacts")
    return env


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The wheel and sdist's directory, and what the build printed."""
    out = tmp_path_factory.mktemp("dist")
    build = subprocess.run([sys.executable, "-m", "build", "--wheel", "--sdist", "--outdir", str(out), str(REPO)],
                           check=True, capture_output=True, text=True, timeout=600)
    return out, build.stdout + build.stderr


@pytest.fixture(scope="module")
def dist(built: tuple[Path, str]) -> Path:
    return built[0]


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A clean venv outside the repository with the wheel installed: (its bin directory, the environment)."""
    tmp = tmp_path_factory.mktemp("wheelvenv")
    (tmp / "home").mkdir()
    env = _clean_env(tmp)
    subprocess.run([sys.executable, "-m", "venv", str(tmp / "venv")], check=True, timeout=300, env=env)
    (wheel,) = dist.glob("codeact-*.whl")
    pip = subprocess.run([str(tmp / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
                         capture_output=True, text=True, timeout=900, env=env, cwd=tmp)
    assert pip.returncode == 0, pip.stderr[-3000:]
    yield tmp / "venv" / "bin", env


def test_the_wheel_and_the_sdist_carry_what_runs(dist: Path) -> None:
    (wheel,) = dist.glob(f"codeact-{codeact.__version__}-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [f for f in RUNTIME_FILES if f not in names]
    assert not missing, f"the wheel lacks {missing}"
    assert any(n.startswith("codeact/bench/suites/data/") and n.endswith(".csv") for n in names)
    assert any(n.startswith("codeact/ui/static/vendor/") for n in names)
    assert not any(n.startswith(("tests/", "benchmarks/")) for n in names)
    (sdist,) = dist.glob(f"codeact-{codeact.__version__}.tar.gz")
    with tarfile.open(sdist) as tar:
        members = {m.split("/", 1)[1] for m in tar.getnames() if "/" in m}
    for needed in ("images/Dockerfile", "images/debian-base.sh", "sandbox/runtime/__init__.py", "pyproject.toml",
                   "codeact/prompts/codeact.md"):
        assert needed in members, f"the sdist lacks {needed}"


def test_the_build_warns_of_no_directory_left_out_of_the_packages(built: tuple[Path, str]) -> None:
    # setuptools warns "Package 'codeact.data' is absent from the `packages` configuration" for a directory
    # whose files ship as package data but that is not listed (a later setuptools stops shipping it).
    _, log = built
    assert "is absent from the `packages` configuration" not in log, log[log.find("absent from") - 400:][:1200]


def test_the_installed_wheel_says_its_version(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = installed
    out = subprocess.run([str(bin_dir / "codeact"), "--version"], capture_output=True, text=True, timeout=60,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == f"codeact {codeact.__version__}"
    # It is the installed copy that runs, not this checkout.
    where = subprocess.run([str(bin_dir / "python"), "-c", "import codeact, sandbox; print(codeact.__file__); "
                            "print(sandbox.__file__)"], capture_output=True, text=True, timeout=60, env=env,
                           cwd=tmp_path)
    assert where.returncode == 0 and str(REPO) not in where.stdout and "site-packages" in where.stdout


@pytest.mark.docker
def test_the_installed_wheel_builds_the_image_and_runs_the_demo(installed: tuple[Path, dict[str, str]],
                                                                tmp_path: Path) -> None:
    bin_dir, env = installed
    build = subprocess.run([str(bin_dir / "codeact"), "image", "build"], capture_output=True, text=True,
                           timeout=900, env=env, cwd=tmp_path)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    demo = subprocess.run([str(bin_dir / "codeact"), "demo"], capture_output=True, text=True, timeout=600,
                          env=env, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "success" in demo.stdout and "compound_monthly_growth_pct" in demo.stdout
    assert list(Path(env["CODEACT_OUTPUT_DIR"]).rglob("*.png")), "the demo's plot was not saved"
