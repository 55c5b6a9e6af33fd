"""Any Python callable is a tool, and values cross the sandbox boundary as the same Python values.

Third-party callables (builtins, math, operator, functools.partial, methods of
live objects, numpy ufuncs, ...) are handed to the real agent unchanged and
called from a code action in the sandbox; what comes back (through the tool
result into the sandbox, and through ``final_answer`` back to the host) is
compared with calling the same function directly on the host: ``==`` and
``type()``. The same contract holds on every backend.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import fractions
import functools
import math
import operator
import textwrap
import threading
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import pandas as pd
import pytest

from codeact import CodeActAgent, ScriptedModel
from codeact.tools import Tool

BACKENDS = [pytest.param("docker", marks=pytest.mark.docker, id="docker"), pytest.param("local", id="local"),
            pytest.param("restricted", id="restricted")]


def py(code: str) -> str:
    return f"Calling the tools.\n```python\n{textwrap.dedent(code).strip()}\n```"


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def bump(self, by: int = 1) -> int:
        """Add to the counter; return the new value."""
        self.n += by
        return self.n

    @classmethod
    def named(cls, name: str) -> str:
        """The class's name with a suffix."""
        return f"{cls.__name__}:{name}"

    @staticmethod
    def double(x: float) -> float:
        """Twice x."""
        return 2 * x


class Scaler:
    def __call__(self, values: list, factor: float = 2.0) -> list:
        """Scale every value."""
        return [v * factor for v in values]


def every_kind(a, /, b, *rest, c, d=3, **extra):
    """Every parameter kind at once."""
    return (a, b, rest, c, d, extra)


def untyped(x, y=None):
    """No hints at all."""
    return {x: y}


def minimum_value(*args):
    """The smallest argument."""
    return min(args)


def pair() -> tuple:
    """A tuple, not a list."""
    return ("A", 3)


def odd_values() -> dict:
    """Values JSON cannot carry."""
    return {
        1: "int key", (2, "t"): frozenset({1, 2}), "set": {3}, "bytes": b"\x00\xff", "ba": bytearray(b"ab"),
        "complex": 1 + 2j, "decimal": decimal.Decimal("1.10"), "fraction": fractions.Fraction(1, 3),
        "when": dt.datetime(2024, 5, 17, 8, 30, tzinfo=dt.timezone(dt.timedelta(hours=2), "CEST")),
        "date": dt.date(2024, 1, 1), "time": dt.time(12, 0), "delta": dt.timedelta(days=1, seconds=3),
        "uuid": uuid.UUID(int=7), "path": PurePosixPath("/a/b"), "nan": float("nan"), "neg0": -0.0,
        "big": 2**100, "inf": float("inf"),
    }


def frame() -> pd.DataFrame:
    """A small DataFrame."""
    return pd.DataFrame({"city": ["Oslo", "Lima"], "temp": [3.5, 19.0], "rain": [True, False]},
                        index=pd.Index([10, 20], name="id"))


def array() -> np.ndarray:
    """A 2-D float array."""
    return np.arange(6, dtype=np.float32).reshape(2, 3)


_counter = Counter()
CALLABLES: dict[str, tuple[Any, tuple, dict]] = {
    # name: (callable, args, kwargs)
    "max": (max, (3, 1, 2), {}),
    "min": (min, ([4, 5, 1],), {}),
    "sum": (sum, ([1, 2, 3],), {"start": 10}),
    "len": (len, ("hello",), {}),
    "sorted": (sorted, ([3, 1, 2],), {"reverse": True}),
    "hypot": (math.hypot, (3, 4), {}),
    "pow": (math.pow, (2, 10), {}),
    "second": (operator.itemgetter(1), (("a", "b", "c"),), {}),
    "add": (operator.add, (2, 3), {}),
    "power_of_two": (functools.partial(pow, 2), (8,), {}),
    "bump": (_counter.bump, (), {"by": 5}),
    "named": (Counter.named, ("x",), {}),
    "double": (Counter.double, (2.5,), {}),
    "scale": (Scaler(), ([1, 2],), {"factor": 3}),
    "np_add": (np.add, (np.array([1, 2]), np.array([3, 4])), {}),
    "np_mean": (np.mean, ([1.0, 2.0, 4.5],), {}),
    "upper": (str.upper, ("shout",), {}),
    "fromkeys": (dict.fromkeys, (("a", "b"), 0), {}),
    "every_kind": (every_kind, (1, 2, 3, 4), {"c": 5, "z": 6}),
    "untyped": (untyped, (1,), {"y": (2, 3)}),
    "minimum_value": (minimum_value, (3, 1, 2), {}),
    "pair": (pair, (), {}),
    "odd_values": (odd_values, (), {}),
    "frame": (frame, (), {}),
    "array": (array, (), {}),
}


def _tools() -> list[Tool]:
    return [Tool(fn, name=name) for name, (fn, _, _) in CALLABLES.items()]


def _same(got: Any, want: Any) -> bool:
    """``==`` and ``type()``, recursively; NaN equals itself, numpy/pandas compare as they are meant to."""
    if type(got) is not type(want):
        return False
    if isinstance(want, pd.DataFrame):
        return want.equals(got) and list(want.dtypes) == list(got.dtypes) and want.index.equals(got.index) \
            and want.index.name == got.index.name
    if isinstance(want, np.ndarray):
        return want.dtype == got.dtype and want.shape == got.shape and bool((want == got).all())
    if isinstance(want, float) and math.isnan(want):
        return math.isnan(got)
    if isinstance(want, float):
        return want == got and math.copysign(1, want) == math.copysign(1, got)
    if isinstance(want, dict):
        return list(want) == list(got) and all(_same(got[k], want[k]) for k in want)
    if isinstance(want, (list, tuple)):
        return len(want) == len(got) and all(_same(g, w) for g, w in zip(got, want, strict=True))
    return bool(want == got)


@pytest.mark.parametrize("backend", BACKENDS)
def test_third_party_callables_as_tools_give_the_same_values(backend: str, tmp_path: Path) -> None:
    calls = "\n".join(f"results[{name!r}] = {name}(*{args!r}, **{kwargs!r})"
                      if not any(isinstance(a, np.ndarray) for a in args)
                      else f"results[{name!r}] = {name}(np.array({args[0].tolist()!r}), np.array({args[1].tolist()!r}))"
                      for name, (_, args, kwargs) in CALLABLES.items())
    code = "import numpy as np\nresults = {}\n" + calls + "\nfinal_answer(results)"
    if backend == "restricted":
        code = code.replace("import numpy as np\n", "import numpy as np\n")
    agent = CodeActAgent(ScriptedModel([py(code)]), _tools(), sandbox=backend, log=False,
                         output_dir=tmp_path / "out", execution_timeout=60)
    _counter.n = 0
    result = agent.run("Call every tool")
    assert result.status == "success", result.steps[-1].observation
    got = result.answer
    _counter.n = 0  # the run bumped it once; do the same directly
    for name, (fn, args, kwargs) in CALLABLES.items():
        want = fn(*args, **kwargs)
        assert _same(got[name], want), (
            f"{name}: {got[name]!r} ({type(got[name]).__name__}) != {want!r} ({type(want).__name__})")


def test_variadic_tools_work_through_function_calling_schemas_too() -> None:
    t = Tool(every_kind)
    schema = t.openai_schema()["function"]["parameters"]
    assert {"a", "b", "rest", "c", "d", "extra"} <= set(schema["properties"])
    assert t.call({"a": 1, "b": 2, "rest": [3, 4], "c": 5, "extra": {"z": 6}}) == every_kind(1, 2, 3, 4, c=5, z=6)
    assert Tool(max).call({"args": [3, 1, 2]}) == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_exceptions_keep_their_builtin_type_and_others_become_tool_errors(backend: str, tmp_path: Path) -> None:
    class QuotaExceeded(Exception):
        pass

    def lookup(key: str) -> str:
        """Fails with KeyError."""
        raise KeyError(key)

    def quota() -> None:
        """Fails with a custom error."""
        raise QuotaExceeded("5 of 5 used")

    code = """
        out = []
        try:
            lookup('k')
        except KeyError as e:
            out.append(('KeyError', str(e), isinstance(e, KeyError) and isinstance(e, ToolError)))
        try:
            quota()
        except ToolError as e:
            out.append(('ToolError', e.type_name.rsplit('.', 1)[-1], e.message))
        try:
            lookup('x')
        except Exception as e:
            out.append(('host paths', 'test_native_tools' in str(e) + repr(e.args)))
        final_answer(out)
    """
    agent = CodeActAgent(ScriptedModel([py(code)]), [lookup, quota], sandbox=backend, log=False,
                         output_dir=tmp_path / "out")
    result = agent.run("errors")
    assert result.answer == [("KeyError", "'k'", True), ("ToolError", "QuotaExceeded", "5 of 5 used"),
                             ("host paths", False)], result.steps[-1].observation  # nothing of the host's traceback


@pytest.mark.docker
def test_parallel_calls_from_threads_run_concurrently_on_the_host(tmp_path: Path) -> None:
    running = [0]
    most = [0]
    lock = threading.Lock()

    def slow_lookup(i: int) -> int:
        """Takes one second."""
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(1.0)
        with lock:
            running[0] -= 1
        return i * i

    code = """
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(8) as ex:
            final_answer(list(ex.map(slow_lookup, range(8))))
    """
    agent = CodeActAgent(ScriptedModel([py(code)]), [slow_lookup], log=False, output_dir=tmp_path / "out")
    result = agent.run("in parallel")
    assert result.answer == [i * i for i in range(8)]
    assert most[0] == 8  # all eight were running on the host at the same time


@pytest.mark.docker
def test_async_tools_are_awaited_from_code_actions(tmp_path: Path) -> None:
    async def fetch(url: str) -> str:
        """Fetch a URL."""
        await asyncio.sleep(0.05)
        return f"<html>{url}</html>"

    code = """
        import asyncio
        one = await fetch('a')
        many = await asyncio.gather(*(fetch(u) for u in 'bcd'))
        final_answer([one, many])
    """
    agent = CodeActAgent(ScriptedModel([py(code)]), [fetch], log=False, output_dir=tmp_path / "out")
    assert "async def fetch(url: str) -> str:" in agent.tools[0].python_stub()
    result = agent.run("fetch")
    assert result.answer == ["<html>a</html>", ["<html>b</html>", "<html>c</html>", "<html>d</html>"]]


@pytest.mark.docker
def test_large_results_arrive_and_over_the_cap_say_how_to_raise_it(tmp_path: Path) -> None:
    from sandbox import Limits

    def blob(mb: int) -> bytes:
        """``mb`` megabytes."""
        return b"x" * (mb * 2**20)

    def table(rows: int) -> pd.DataFrame:
        """A numeric table."""
        return pd.DataFrame({"a": np.arange(rows, dtype=np.int64), "b": np.ones(rows)})

    code = """
        b = blob(50)
        t = table(2_000_000)
        out = [len(b), type(b).__name__, t.shape, str(t.dtypes['a'])]
        try:
            blob(70)
        except Exception as e:
            out.append(str(e))
        final_answer(out)
    """
    agent = CodeActAgent(ScriptedModel([py(code)]), [blob, table], log=False, output_dir=tmp_path / "out",
                         sandbox_options={"limits": Limits(max_payload=64 * 2**20), "memory": "2g"},
                         execution_timeout=120)
    result = agent.run("big")
    n, kind, shape, dtype, error = result.answer
    assert (n, kind, shape, dtype) == (50 * 2**20, "bytes", (2_000_000, 2), "int64")
    assert "max_payload" in error and "cannot be sent" in error


@pytest.mark.docker
def test_hostile_payloads_are_refused_quickly_and_the_host_stays_responsive(tmp_path: Path) -> None:
    from sandbox import DockerSandbox

    def echo(x: Any = None) -> Any:
        return x

    with DockerSandbox(functions=[echo], timeout=60, memory="2g") as sb:
        started = time.monotonic()
        r = sb.run("""
out = []
for value in ['x' * (1 << 30), None]:
    try:
        echo(value)
        out.append('sent')
    except ValueError as e:
        out.append('refused' if 'cannot be sent' in str(e) else str(e))
deep = []
for _ in range(10**6):
    deep = [deep]
try:
    echo(deep)
except ValueError as e:
    out.append('deep refused')
import time
t = time.perf_counter()
for i in range(10000):
    echo(i)
out.append(round(time.perf_counter() - t, 1))
print(out)
""")
        assert r.error is None, r.error
        assert r.stdout.startswith("['refused', 'sent', 'deep refused', "), r.stdout
        assert len(r.calls) == 10_000 and any("were not recorded" in n for n in r.notices)  # the record cap
        assert time.monotonic() - started < 120
        assert sb.run("print(echo('ok'))").stdout == "ok\n"
