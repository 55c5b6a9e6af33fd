"""Calls running at once, as the attacker: their arguments cannot hold unbounded host memory.

Each call's arguments stay on the host while its tool runs. Before the
in-flight budget (``Limits.max_call_memory``), 32 calls at once could hold
32 x ``max_payload`` (2 GiB by default) plus what their JSON expands to.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.timeout(240)]


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class _PeakRSS:
    def __init__(self) -> None:
        self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, _rss())

    def __enter__(self) -> _PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


HOLD_MANY = r"""
import threading
blob = b'x' * (30 * 2**20)
outcomes = []
def one():
    try:
        outcomes.append(hold(blob))
    except MemoryError as e:
        outcomes.append('refused: ' + str(e)[:60])
threads = [threading.Thread(target=one) for _ in range(16)]
for t in threads: t.start()
for t in threads: t.join()
print(sum(1 for o in outcomes if o == 30 * 2**20), sum(1 for o in outcomes if str(o).startswith('refused')))
print(next((o for o in outcomes if str(o).startswith('refused')), ''))
"""


def test_calls_running_at_once_cannot_hold_unbounded_host_memory() -> None:
    from sandbox import DockerSandbox

    def hold(data: bytes) -> int:
        time.sleep(3)  # the arguments stay on the host while the tool runs
        return len(data)

    with DockerSandbox(functions=[hold], timeout=120, function_timeout=60, memory="2g") as sb:
        sb.run("1")
        gc.collect()
        base = _rss()
        with _PeakRSS() as peak:
            r = sb.run(HOLD_MANY)
        assert r.error is None, r.error
        served, refused = (int(x) for x in r.stdout.split("\n")[0].split())
        assert served + refused == 16 and served >= 1 and refused >= 1, r.stdout
        assert "refused: the arguments of the host-function calls running now" in r.stdout
        growth = peak.peak - base
        # 16 x 30 MB held at once would be ~1 GB (payload + decoded copy); the default budget is 512 MiB.
        assert growth < 600 * 2**20, f"host RSS grew by {growth / 2**20:.0f} MB"
        # Once those calls end, their budget is free again.
        assert sb.run("print(hold(b'abc'))").stdout == "3\n"


def test_the_budget_never_refuses_a_lone_call_of_the_largest_payload() -> None:
    from sandbox import DockerSandbox, Limits

    def size(data: Any) -> int:
        return len(data)

    limits = Limits(max_payload=40 * 2**20, max_call_memory=2**20)
    with DockerSandbox(functions=[size], limits=limits, timeout=60) as sb:
        r = sb.run("print(size(b'x' * (30 * 2**20)))")
        assert r.error is None and r.stdout == f"{30 * 2**20}\n", (r.error, r.stdout)


def test_a_call_with_more_values_than_max_call_items_is_refused() -> None:
    from sandbox import DockerSandbox, Limits

    def count(data: Any) -> int:
        return len(data)

    with DockerSandbox(functions=[count], limits=Limits(max_call_items=10_000), timeout=60) as sb:
        r = sb.run("print(count(list(range(5000))))")
        assert r.stdout == "5000\n", (r.error, r.stdout)
        r = sb.run("try:\n    count([[]] * 20000)\nexcept Exception as e:\n    print(type(e).__name__, e)")
        assert r.error is None and "ValueError" in r.stdout and "max_items" in r.stdout, r.stdout
