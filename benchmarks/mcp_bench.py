"""MCP overheads: a tool call made from sandbox code vs the same call with the SDK's client directly,
and `execute_python` through `codeact mcp serve` vs a direct `sandbox.run`.

    .venv/bin/python benchmarks/mcp_bench.py [--calls 400] [--rounds 20]
    .venv/bin/python benchmarks/mcp_bench.py --quick          # ~10 s: fewer calls, same measurements

The direct SDK calls and the calls from sandbox code are measured in
alternating blocks (``--rounds`` blocks of each, ``--calls`` calls in all per
measurement), so load from other processes on a shared machine falls on both
alike; the ratio is of the p50s over all blocks of one run, and the per-round
ratios show how noisy the run was. A plain host function called the same way
from the sandbox gives the bridge's own cost (the floor under any sandbox call);
one that blocks 2 ms (about an MCP call's time) gives the bridge's cost around
a call that waits, which is higher: both sides of the bridge sleep meanwhile.
The direct SDK call is also measured after a short idle pause before each
call, as a call from the sandbox meets the host's client and the server: on
this machine that alone costs more than a back-to-back call, with no codeact
code involved.

Prints a table and writes benchmarks/results/mcp_bench.json. Target: the
sandbox call's p50 at most 1.3x the direct SDK call's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TOOLBOX = str(ROOT / "tests" / "mcp_servers" / "toolbox.py")
CODEACT = str(Path(sys.executable).with_name("codeact"))
TARGET = 1.3
WARMUP = 20


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(int(q * len(values)), len(values) - 1)]


class DirectClient:
    """The reference: the SDK's ``Client`` over stdio on its own event loop; calls timed inside the loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.client: Any = None
        self._stop: asyncio.Event | None = None
        self._task: Any = None

    def __enter__(self) -> DirectClient:
        self.thread.start()
        ready = threading.Event()
        self._task = asyncio.run_coroutine_threadsafe(self._hold(ready), self.loop)
        if not ready.wait(60):
            raise RuntimeError("the toolbox server did not start")
        return self

    async def _hold(self, ready: threading.Event) -> None:
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters, stdio_client

        self._stop = asyncio.Event()
        params = StdioServerParameters(command=sys.executable, args=[TOOLBOX])
        with open(os.devnull, "w") as devnull:
            async with Client(stdio_client(params, errlog=devnull), cache=None) as client:
                self.client = client
                ready.set()
                await self._stop.wait()

    def block(self, n: int, pause: float = 0.0) -> list[float]:
        """``n`` calls, back to back or with ``pause`` seconds of sleep before each (only the call is timed)."""
        async def run() -> list[float]:
            times = []
            for _ in range(n):
                if pause:
                    await asyncio.sleep(pause)
                t = time.perf_counter()
                await self.client.call_tool("echo", {"text": "x"})
                times.append(time.perf_counter() - t)
            return times

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(600)

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._task.result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def plain_echo(text: str) -> str:
    """A plain host function: the bridge's floor."""
    return text


#: How long ``blocking_echo`` blocks: about as long as the direct SDK call takes.
BLOCK_SECONDS = 0.002

#: The sleep before each call of the "after a pause" direct measurement: about the time a call from the
#: sandbox spends in the bridge, during which the host's MCP client and the server have nothing to do.
PAUSE_SECONDS = 0.0007


def blocking_echo(text: str) -> str:
    """A plain host function that blocks like an MCP call does (the bridge around a call that waits)."""
    time.sleep(BLOCK_SECONDS)
    return text


def sandbox_block(sb: Any, function: str, n: int) -> list[float]:
    code = (f"import time\nts = []\nfor _ in range({n}):\n"
            f"    t = time.perf_counter(); {function}('x'); ts.append(time.perf_counter() - t)\n"
            "print(','.join(repr(x) for x in ts))")
    result = sb.run(code)
    assert result.error is None, result.error
    return [float(x) for x in result.stdout.strip().split(",")]


def tool_calls(calls: int, rounds: int) -> dict[str, Any]:
    """Direct SDK calls, MCP calls from sandbox code and plain host-function calls, in alternating blocks."""
    from codeact.mcp import MCPServerConfig, MCPToolset
    from sandbox import open_sandbox

    per_block = max(calls // rounds, 1)
    sdk: list[float] = []
    sdk_paused: list[float] = []
    mcp: list[float] = []
    floor: list[float] = []
    blocking: list[float] = []
    round_ratios: list[float] = []
    with DirectClient() as direct, \
            MCPToolset([MCPServerConfig("tb", command=sys.executable, args=(TOOLBOX,))]) as tools:
        echo = next(t for t in tools if t.name == "echo")

        async def invoke(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            # As the agent's invoker does for a tool with a loop: each call is a task on the toolset's loop.
            return await echo.acall(echo.bind(args, kwargs))

        hf = echo.host_function(invoke)
        with open_sandbox("docker", functions=[hf, plain_echo, blocking_echo], timeout=600) as sb:
            direct.block(WARMUP)
            direct.block(WARMUP, PAUSE_SECONDS)
            sandbox_block(sb, "echo", WARMUP)
            sandbox_block(sb, "plain_echo", WARMUP)
            sandbox_block(sb, "blocking_echo", WARMUP)
            for r in range(rounds):
                steps = [("sdk", lambda: direct.block(per_block)),
                         ("sdk_paused", lambda: direct.block(per_block, PAUSE_SECONDS)),
                         ("mcp", lambda: sandbox_block(sb, "echo", per_block)),
                         ("floor", lambda: sandbox_block(sb, "plain_echo", per_block)),
                         ("blocking", lambda: sandbox_block(sb, "blocking_echo", per_block))]
                # rotate, so no measurement always follows the same one
                steps = steps[r % len(steps):] + steps[:r % len(steps)]
                got = {name: step() for name, step in steps}
                sdk += got["sdk"]
                sdk_paused += got["sdk_paused"]
                mcp += got["mcp"]
                floor += got["floor"]
                blocking += got["blocking"]
                round_ratios.append(pct(got["mcp"], 0.5) / pct(got["sdk"], 0.5))
    return {"sdk": sdk, "sdk_paused": sdk_paused, "mcp": mcp, "floor": floor, "blocking": blocking,
            "round_ratios": round_ratios}


def serve_round_trip(calls: int) -> tuple[list[float], list[float]]:
    """execute_python through `codeact mcp serve` (stdio), and sandbox.run directly."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from sandbox import open_sandbox

    served: list[float] = []

    async def main() -> None:
        params = StdioServerParameters(command=CODEACT, args=["mcp", "serve"], env=dict(os.environ))
        with open(os.devnull, "w") as devnull:
            async with Client(stdio_client(params, errlog=devnull), cache=None) as client:
                for _ in range(5):
                    await client.call_tool("execute_python", {"code": "1"})
                for _ in range(calls):
                    t = time.perf_counter()
                    await client.call_tool("execute_python", {"code": "x = 1"})
                    served.append(time.perf_counter() - t)

    anyio.run(main)
    direct: list[float] = []
    with open_sandbox("docker", timeout=60) as sb:
        for _ in range(5):
            sb.run("1")
        for _ in range(calls):
            t = time.perf_counter()
            sb.run("x = 1")
            direct.append(time.perf_counter() - t)
    return served, direct


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=400, help="tool calls per measurement (default 400)")
    parser.add_argument("--rounds", type=int, default=20, help="alternating blocks of each measurement (default 20)")
    parser.add_argument("--quick", action="store_true", help="150 calls in 10 rounds, 20 execute_python calls")
    args = parser.parse_args()
    calls, rounds, serve_calls = (150, 10, 20) if args.quick else (args.calls, args.rounds, max(args.calls // 8, 20))
    measured = tool_calls(calls, rounds)
    served, direct = serve_round_trip(serve_calls)
    rows = [
        ("MCP tool call, SDK client directly", measured["sdk"]),
        (f"  the same, {PAUSE_SECONDS * 1e3:g} ms idle before each call", measured["sdk_paused"]),
        ("MCP tool call from sandbox code", measured["mcp"]),
        ("plain host function from sandbox code", measured["floor"]),
        (f"plain host function blocking {BLOCK_SECONDS * 1e3:g} ms", measured["blocking"]),
        ("execute_python via codeact mcp serve", served),
        ("sandbox.run directly", direct),
    ]
    print(f"{'measurement':<40} {'n':>5} {'p50 ms':>9} {'p90 ms':>9} {'mean ms':>9}")
    out: dict[str, Any] = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                       "load_average": os.getloadavg()}, "results": {}}
    for name, values in rows:
        p50, p90, mean = pct(values, 0.5) * 1e3, pct(values, 0.9) * 1e3, statistics.mean(values) * 1e3
        print(f"{name:<40} {len(values):>5} {p50:>9.2f} {p90:>9.2f} {mean:>9.2f}")
        out["results"][name] = {"n": len(values), "p50_ms": p50, "p90_ms": p90, "mean_ms": mean}
    sdk50 = pct(measured["sdk"], 0.5)
    ratio = pct(measured["mcp"], 0.5) / sdk50
    floor_ratio = (sdk50 + pct(measured["floor"], 0.5)) / sdk50
    serve_ratio = pct(served, 0.5) / pct(direct, 0.5)
    rr = measured["round_ratios"]
    print(f"\nsandbox call / direct SDK call (p50): {ratio:.2f}x  (target <= {TARGET}x: "
          f"{'met' if ratio <= TARGET else 'NOT met'}); per round: {', '.join(f'{r:.2f}' for r in rr)}")
    print(f"  the bridge alone would make it {floor_ratio:.2f}x (direct SDK call + a plain host function's p50)")
    # The bridge costs more around a call that waits than around one that returns at once: the sandbox's
    # kernel (and the host's reader) sleep meanwhile, and waking them takes longer the busier the machine is.
    blocked_extra = pct(measured["blocking"], 0.5) - BLOCK_SECONDS
    print(f"  the bridge around a call that blocks {BLOCK_SECONDS * 1e3:g} ms costs {blocked_extra * 1e3:.2f} ms "
          f"(around one that returns at once: {pct(measured['floor'], 0.5) * 1e3:.2f} ms); with that cost the "
          f"sandbox call would be {(sdk50 + blocked_extra) / sdk50:.2f}x")
    # The direct client calls back to back; a call from the sandbox reaches the client only after the bridge,
    # so the client and the server have sat idle a moment, and on this machine a call after a pause costs more
    # (waking idle CPUs and threads), with no codeact code involved. This ratio leaves that cost out.
    paused_ratio = pct(measured["mcp"], 0.5) / pct(measured["sdk_paused"], 0.5)
    print(f"  against the SDK client called after {PAUSE_SECONDS * 1e3:g} ms idle: {paused_ratio:.2f}x "
          f"(that direct call alone is {pct(measured['sdk_paused'], 0.5) / sdk50:.2f}x a back-to-back one)")
    print(f"execute_python via MCP / sandbox.run (p50): {serve_ratio:.2f}x")
    print(f"load average while running: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    out["ratios"] = {"sandbox_call_over_sdk_p50": ratio, "target": TARGET, "per_round": rr,
                     "floor_over_sdk_p50": floor_ratio, "serve_over_direct_run_p50": serve_ratio,
                     "blocking_floor_over_sdk_p50": (sdk50 + blocked_extra) / sdk50,
                     "sandbox_call_over_paused_sdk_p50": paused_ratio}
    results = ROOT / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "mcp_bench.json").write_text(json.dumps(out, indent=2))
    print(f"wrote {results / 'mcp_bench.json'}")


if __name__ == "__main__":
    main()
