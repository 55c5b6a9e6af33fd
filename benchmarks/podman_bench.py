#!/usr/bin/env python3
"""Sessions on a rootful Podman engine, beside runc on the local Docker engine (a script, not a test).

By default the script starts a Podman service of its own (``podman system
service`` on a socket in a temporary directory, its storage on a tmpfs, runc
as the OCI runtime: ``tests/podman_engine.py``), copies the sandbox image
into it from the local Docker engine, measures, and removes it all;
``--engine unix:///path/podman.sock`` measures a running service instead.
Must run as root (a rootful service; the direct link needs root too). The
service's storage is in memory, Docker's on disk: after the first session
both read the image from the page cache, so the rows compare the engines.

Rows, the same as ``walls_bench.py`` measures for runc and runsc on Docker
(each a median over repetitions; ``--quick`` takes fewer):

* start to first result: ``DockerSandbox(...)`` constructor, start, the
  first ``run("1")`` (after one warm-up session);
* trivial cell: the round trip of ``run("x = 1")``;
* tool call from code: one host-function call made by the sandboxed code,
  timed in the code, with the transport in use (``direct`` or ``exec``);
* pandas import: ``import pandas`` in a fresh kernel;
* write 100 MB to /workspace (an in-memory volume on both engines), timed in
  the code, with an fsync.

    .venv/bin/python benchmarks/podman_bench.py            # about 2 minutes
    .venv/bin/python benchmarks/podman_bench.py --quick
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from walls_bench import column, print_table  # noqa: E402 - the walls are measured one way, by walls_bench

DOCKER = "unix:///var/run/docker.sock"
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--engine", metavar="URL", help="a running Podman service (default: start one here)")
    parser.add_argument("--no-docker", action="store_true", help="only Podman, not runc on the local Docker engine")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "podman.json"))
    args = parser.parse_args()

    from sandbox.engines import Engine, connect, is_podman
    from sandbox.image import default_image_tag, ensure_image

    service, scratch = None, None
    if args.engine:
        podman = Engine("podman", args.engine)
    else:
        from tests.podman_engine import PodmanService, can_start_podman

        reason = can_start_podman()
        if reason:
            print(f"cannot start a Podman service: {reason}", file=sys.stderr)
            return 2
        scratch = tempfile.mkdtemp(prefix="podman-bench-")
        os.environ["TMPDIR"] = scratch  # the service's directory goes there
        tempfile.tempdir = None
        service = PodmanService()
        service.start()
        podman = service.engine
    columns: dict[str, dict[str, Any]] = {}
    try:
        client = connect(podman)
        if not is_podman(client):
            print(f"{podman.url} is not a Podman service", file=sys.stderr)
            return 2
        t = time.perf_counter()
        how = ensure_image(client, default_image_tag(), source=connect(DOCKER))
        copied = time.perf_counter() - t
        version = client.version().get("Version", "?")
        runtime = service.runtime if service is not None else "the service's"
        targets = [] if args.no_docker else [("runc @ Docker", DOCKER, {"engine": DOCKER})]
        targets.append((f"Podman {version}", podman.url, {"engine": podman.url, "oci_runtime": runtime,
                                                           "image": how, "image_seconds": round(copied, 1)}))
        for label, url, meta in targets:
            print(f"measuring {label} ...", file=sys.stderr)
            # The service chose its OCI runtime when it started: the sandbox names none.
            columns[label] = {**meta, **column(url, "runc" if url == DOCKER else None, args.quick)}
    finally:
        if service is not None:
            service.remove()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)

    labels = list(columns)
    print_table(columns, width=16)
    for label in labels:
        for error in columns[label].get("errors", []):
            print(f"{label}: {error}", file=sys.stderr)
    podman_meta = columns[labels[-1]] if labels else {}
    if "image" in podman_meta:
        print(f"\nimage on Podman: {podman_meta['image']} ({podman_meta['image_seconds']} s)")
    load = os.getloadavg()[0]
    print(f"load average at the end: {load:.2f} ({os.cpu_count()} cores)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"columns": columns, "load_average": load, "quick": args.quick}, indent=2))
    print(f"wrote {args.out}")
    return 1 if any(c.get("errors") for c in columns.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
