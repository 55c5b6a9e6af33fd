"""Where suites come from: the shipped ones by name, yours from a Python file or an installed module.

A suite module (or file) offers a function that returns its tasks::

    # my_suite.py
    from codeact.bench import Task

    NAME = "my-suite"                  # optional; default: the file's or module's name
    DESCRIPTION = "What it measures"   # optional
    VERSION = "2"                      # optional; recorded with the results (a digest of the tasks is, always)

    def tasks():
        return [Task(id="t1", instruction="...", tools=[...], expected=...), ...]

and is named on the command line as ``path/to/my_suite.py``, ``my_pkg.my_suite``,
or with a function other than ``tasks``: ``my_suite.py:hard_tasks``. A shipped
suite's part is named the same way (``bfcl-multi-turn:base``) and is a suite
of its own, named so. Relative
file paths in tasks are relative to the suite file's directory.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable

from ..errors import BenchError
from ._task import Suite, Task

#: The suites shipped with codeact, by name.
BUILTIN_SUITES = {
    "tool-chains": "codeact.bench.suites.tool_chains",
    "data-analysis": "codeact.bench.suites.data_analysis",
    "many-tools": "codeact.bench.suites.many_tools",
    "bfcl-multi-turn": "codeact.bench.suites.bfcl_multi_turn",
}


def list_suites() -> list[str]:
    """Names of the shipped suites."""
    return list(BUILTIN_SUITES)


def load_suite(spec: str) -> Suite:
    """Load one suite: a shipped name, a ``.py`` file or an importable module, optionally ``:function``.

    Raises:
        BenchError: it cannot be found or imported, the function is missing,
            or what it returns is not a list of unique :class:`Task` objects.
    """
    spec = spec.strip()
    if not spec:
        raise BenchError("empty suite name; see `codeact bench list` for the shipped suites")
    if spec in BUILTIN_SUITES:
        module = importlib.import_module(BUILTIN_SUITES[spec])
        return _from_module(module, "tasks", spec, spec)
    target, _, function = spec.partition(":")
    if target in BUILTIN_SUITES:  # a part of a shipped suite, e.g. bfcl-multi-turn:base (a suite of its own)
        module = importlib.import_module(BUILTIN_SUITES[target])
        if not function.isidentifier() or function.startswith("_") or function == "tasks" \
                or not callable(getattr(module, function, None)):
            raise BenchError(f"suite {target} has no part {function!r}"
                             + (f"; parts: {', '.join(getattr(module, 'PARTS', ()))}" if getattr(module, "PARTS", ())
                                else ""))
        return _from_module(module, function, spec, spec)
    if function and not function.isidentifier():
        target, function = spec, ""  # a Windows drive letter, not a function
    function = function or "tasks"
    if target.endswith(".py") or "/" in target or Path(target).is_file():
        path = Path(target).expanduser()
        if not path.is_file():
            raise BenchError(f"suite file {target} not found; shipped suites: {', '.join(BUILTIN_SUITES)}")
        module = _import_file(path)
        return _from_module(module, function, path.stem.replace("_", "-"), str(path))
    try:
        module = importlib.import_module(target)
    except ImportError as exc:
        raise BenchError(f"cannot import suite module {target!r} ({exc}); shipped suites: "
                         f"{', '.join(BUILTIN_SUITES)}; a file needs its .py path") from exc
    return _from_module(module, function, target.rsplit(".", 1)[-1].replace("_", "-"), target)


def load_suites(specs: Iterable[str]) -> list[Suite]:
    """Several suites; their names must differ.

    Raises:
        BenchError: as :func:`load_suite`, or two suites share a name.
    """
    suites: list[Suite] = []
    for spec in specs:
        suite = load_suite(spec)
        if any(s.name == suite.name for s in suites):
            raise BenchError(f"two suites are named {suite.name!r}; set NAME in one of them")
        suites.append(suite)
    if not suites:
        raise BenchError("no suite given; see `codeact bench list`")
    return suites


def _import_file(path: Path) -> ModuleType:
    name = f"codeact_bench_suite_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise BenchError(f"cannot load suite file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except BenchError:
        raise
    except Exception as exc:
        sys.modules.pop(name, None)
        raise BenchError(f"suite file {path} failed to import: {type(exc).__name__}: {exc}") from exc
    return module


def _from_module(module: ModuleType, function: str, default_name: str, source: str) -> Suite:
    make = getattr(module, function, None)
    if not callable(make):
        raise BenchError(f"suite {source} has no function {function}() returning its tasks")
    try:
        items: Any = make()
        tasks = list(items)
    except BenchError:
        raise
    except Exception as exc:
        raise BenchError(f"suite {source}: {function}() failed: {type(exc).__name__}: {exc}") from exc
    name = str(getattr(module, "NAME", "") or default_name)
    file = getattr(module, "__file__", None)
    root = Path(file).resolve().parent if file else Path.cwd()
    seen: set[str] = set()
    out: list[Task] = []
    for item in tasks:
        if not isinstance(item, Task):
            raise BenchError(f"suite {source}: {function}() returned {type(item).__name__}; return Task objects")
        if item.id in seen:
            raise BenchError(f"suite {source}: two tasks have the id {item.id!r}")
        seen.add(item.id)
        files = tuple(f if f.is_absolute() else root / f for f in item.files)
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise BenchError(f"suite {source}, task {item.id}: file(s) not found: {', '.join(missing)}")
        out.append(replace(item, suite=name, files=files))
    if not out:
        raise BenchError(f"suite {source}: {function}() returned no tasks")
    return Suite(name=name, tasks=tuple(out), description=str(getattr(module, "DESCRIPTION", "") or ""),
                 source=source, version=str(getattr(module, "VERSION", "") or ""))
