"""MCP overheads: a tool call made from sandbox code vs the same call with the SDK's client directly,
and `execute_python` through `codeact mcp serve` vs a direct `sandbox.run`.

    .venv/bin/python benchmarks/mcp_bench.py [--calls 200]

Prints a table and writes benchmarks/results/mcp_bench.json. Targets: the
sandbox call's p50 at most 1.5x the direct SDK call's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TOOLBOX = str(ROOT / "tests" / "mcp_servers" / "toolbox.py")
CODEACT = str(Path(sys.executable).with_name("codeact"))


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(int(q * len(values)), len(values) - 1)]


def direct_sdk(calls: int) -> list[float]:
    """p50 of tools/call with the SDK's Client over stdio (the reference)."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    times: list[float] = []

    async def main() -> None:
        params = StdioServerParameters(command=sys.executable, args=[TOOLBOX])
        async with Client(stdio_client(params, errlog=open(os.devnull, "w")), cache=None) as client:
            for _ in range(10):
                await client.call_tool("echo", {"text": "x"})
            for _ in range(calls):
                t = time.perf_counter()
                await client.call_tool("echo", {"text": "x"})
                times.append(time.perf_counter() - t)

    anyio.run(main)
    return times


def from_sandbox(calls: int) -> list[float]:
    """The same call made by code in the Docker sandbox: stub -> host bridge -> MCPToolset -> server."""
    from codeact.mcp import MCPServerConfig, MCPToolset
    from sandbox import open_sandbox

    with MCPToolset([MCPServerConfig("tb", command=sys.executable, args=(TOOLBOX,))]) as tools:
        echo = next(t for t in tools if t.name == "echo")
        hf = echo.host_function(lambda args, kwargs: echo.call(echo.bind(args, kwargs)))
        with open_sandbox("docker", functions=[hf], timeout=600) as sb:
            code = (f"import time\nts = []\nfor _ in range(10): echo('x')\n"
                    f"for _ in range({calls}):\n    t = time.perf_counter(); echo('x'); ts.append(time.perf_counter() - t)\n"
                    "print(','.join(repr(x) for x in ts))")
            result = sb.run(code)
            assert result.error is None, result.error
            return [float(x) for x in result.stdout.strip().split(",")]


def serve_round_trip(calls: int) -> tuple[list[float], list[float]]:
    """execute_python through `codeact mcp serve` (stdio), and sandbox.run directly."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from sandbox import open_sandbox

    served: list[float] = []

    async def main() -> None:
        params = StdioServerParameters(command=CODEACT, args=["mcp", "serve"], env=dict(os.environ))
        async with Client(stdio_client(params, errlog=open(os.devnull, "w")), cache=None) as client:
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
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    sdk = direct_sdk(args.calls)
    sbx = from_sandbox(args.calls)
    served, direct = serve_round_trip(max(args.calls // 4, 20))
    rows = [
        ("MCP tool call, SDK client directly", sdk),
        ("MCP tool call from sandbox code", sbx),
        ("execute_python via codeact mcp serve", served),
        ("sandbox.run directly", direct),
    ]
    print(f"{'measurement':<40} {'n':>5} {'p50 ms':>9} {'p90 ms':>9} {'mean ms':>9}")
    out = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count()}, "results": {}}
    for name, values in rows:
        p50, p90, mean = pct(values, 0.5) * 1e3, pct(values, 0.9) * 1e3, statistics.mean(values) * 1e3
        print(f"{name:<40} {len(values):>5} {p50:>9.2f} {p90:>9.2f} {mean:>9.2f}")
        out["results"][name] = {"n": len(values), "p50_ms": p50, "p90_ms": p90, "mean_ms": mean}
    ratio = pct(sbx, 0.5) / pct(sdk, 0.5)
    serve_ratio = pct(served, 0.5) / pct(direct, 0.5)
    print(f"\nsandbox call / direct SDK call (p50): {ratio:.2f}x  (target <= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'})")
    print(f"execute_python via MCP / sandbox.run (p50): {serve_ratio:.2f}x")
    out["ratios"] = {"sandbox_call_over_sdk_p50": ratio, "target": 1.5, "serve_over_direct_run_p50": serve_ratio}
    results = ROOT / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "mcp_bench.json").write_text(json.dumps(out, indent=2))
    print(f"wrote {results / 'mcp_bench.json'}")


if __name__ == "__main__":
    main()
