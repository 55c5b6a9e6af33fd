"""Benchmark sweeps on a real Ray cluster: a head and a worker node in a private network namespace.

One cluster for the module (see :mod:`tests.ray_cluster`): every driver runs
inside the namespace, every node runs CodeAct sandboxes on this machine's
Docker engine through its socket. What is checked:

* an oracle sweep on the cluster gives the same episodes (success, turns,
  model and tool calls) as the same sweep run locally, with the run log,
  artifacts and report in the results directory as a local run leaves them;
* a sweep interrupted locally resumes on Ray, and one interrupted on Ray
  resumes locally, with every episode exactly once;
* a node killed (SIGKILL) while it runs episodes: they run again on the
  other node, every episode exactly once;
* engines named per node: a node mapped to an engine that is down fails its
  CodeAct episodes with that engine's name, the other node's succeed;
* the API key: never in the task payload, the results, the run log or the
  output; workers use their node's key unless the driver's is passed on
  purpose; the model's settings (base URL, name, temperature, seed) travel;
* tracing on in the driver: the sweep is one trace in Phoenix (a real OTLP
  receiver, reached from the cluster's namespace through tests/netns_bridge.py):
  the driver's ``bench.run`` is the parent of the workers' ``bench.episode``
  spans, and each episode's run, model calls and code actions are under it;
* without ray installed, one clear error saying how to install it; a head
  address where nothing answers fails at once (Ray alone retries for minutes).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from codeact.bench import BenchConfig, RayOptions, run_bench
from codeact.bench._progress import NoProgress
from codeact.bench._ray import _Node, parse_size
from codeact.errors import BenchError
from codeact.runlog import RunLog
from tests.ci import unavailable
from tests.netns_bridge import UnixToTcp
from tests.phoenix_server import trace_of
from tests.ray_cluster import RayCluster, unavailable_reason
from tests.test_bench import assert_report_matches_the_run_log

ROOT = Path(__file__).resolve().parent.parent
CODEACT = str(Path(sys.executable).parent / "codeact")
CLUSTER_KEY = "sk-cluster-node-key-5e1f"
SENTINEL_KEY = "sk-driver-SENTINEL-9c4b2a7d"

#: The sweep both executors run: 4 tasks (one draws a plot) x 2 agents x 2 repeats.
SUITES = ["tool-chains", "data-analysis"]
TASKS = ["shop-cheapest-lamp-in-stock", "web-ceo", "office-manager-chain", "da-plot-monthly-revenue"]
AGENTS = ["codeact", "react-json"]
REPEATS = 2
KEYS = {f"{suite}/{task}/{agent}/{r}" for suite, task in
        [("tool-chains", t) for t in TASKS[:3]] + [("data-analysis", TASKS[3])] for agent in AGENTS
        for r in range(REPEATS)}


def cli_args(out: Path) -> list[str]:
    args = ["bench", "run", "--model", "oracle", "--agents", ",".join(AGENTS), "--repeats", str(REPEATS),
            "--out", str(out), "--no-plots", "--concurrency", "2"]
    for suite in SUITES:
        args += ["--suite", suite]
    for task in TASKS:
        args += ["--task", task]
    return args


def lines(out: Path) -> list[dict[str, Any]]:
    path = out / "episodes.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def outcome(e: dict[str, Any]) -> tuple[Any, ...]:
    """What must not depend on where an episode ran (timings may)."""
    return (e["success"], e["status"], e["turns"], e["model_calls"], e["tool_calls"], e["tool_errors"],
            e["invalid_actions"], e["input_tokens"], e["output_tokens"], e["answer"], e["error"])


def assert_each_episode_once(out: Path, keys: set[str]) -> dict[str, dict[str, Any]]:
    found = lines(out)
    seen = [e["key"] for e in found]
    assert sorted(seen) == sorted(keys), {"duplicates": sorted({k for k in seen if seen.count(k) > 1}),
                                          "missing": sorted(keys - set(seen)), "extra": sorted(set(seen) - keys)}
    return {e["key"]: e for e in found}


def assert_same_outcomes(episodes: dict[str, dict[str, Any]], reference: dict[str, dict[str, Any]]) -> None:
    differ = {k: {"got": outcome(e), "want": outcome(reference[k])} for k, e in episodes.items()
              if outcome(e) != outcome(reference[k])}
    assert not differ, json.dumps(differ, indent=1, default=str)[:4000]


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


# --- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(docker_ready: None) -> Any:
    reason = unavailable_reason()
    if reason is not None:
        unavailable("the Ray tests", reason)
    with RayCluster(workers=1, cpus_per_node=2, env={"OPENAI_API_KEY": CLUSTER_KEY}) as c:
        yield c


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory: pytest.TempPathFactory, docker_ready: None) -> dict[str, dict[str, Any]]:
    """The sweep run locally (threads, a warm sandbox pool), in this process."""
    out = tmp_path_factory.mktemp("local") / "results"
    run_bench(BenchConfig(suites=SUITES, agents=AGENTS, model="oracle", repeats=REPEATS, tasks=TASKS,
                          concurrency=2, out=out), progress=NoProgress(), plots=False)
    episodes = assert_each_episode_once(out, KEYS)
    assert all(e["success"] for e in episodes.values()), {k: e["error"] for k, e in episodes.items()}
    return episodes


# --- without a cluster -----------------------------------------------------------------------------------


def test_without_ray_installed_the_error_says_how_to_install_it(tmp_path: Path) -> None:
    out = tmp_path / "results"
    code = textwrap.dedent(f"""
        import sys
        sys.modules["ray"] = None  # as if ray were not installed
        from codeact.bench import BenchConfig, run_bench
        from codeact.errors import RayUnavailable
        try:
            run_bench(BenchConfig(suites=["tool-chains"], model="oracle", out={str(out)!r}, ray="auto"))
        except RayUnavailable as exc:
            print("API:", exc)
        from codeact.cli import main
        main(["bench", "run", "--suite", "tool-chains", "--model", "oracle", "--out", {str(out)!r}, "--ray"])
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          check=False)
    assert "API: running episodes on Ray needs the ray package" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "pip install 'codeact[ray]'" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not out.exists()  # refused before anything was written


def test_ray_options_are_checked_before_anything_runs(tmp_path: Path) -> None:
    assert parse_size("2GiB") == parse_size("2g") == 2 * 1024**3
    assert parse_size("512M") == 512 * 1024**2 and parse_size(1000) == 1000
    for bad in (RayOptions(memory_per_episode="lots"), RayOptions(cpus_per_episode=0),
                RayOptions(engines='{"node-a": {"url": "tcp://h:2376", "colour": "red"}}'),
                RayOptions(engines="/no/such/engines.json"), RayOptions(address=" "),
                RayOptions(address="head-node"), RayOptions(address="10.0.0.2:99999")):
        with pytest.raises(BenchError):
            BenchConfig(suites=["tool-chains"], ray=bad, out=tmp_path / "x").validate()
    engines = RayOptions(engines={"10.0.0.7": "tcp://10.0.0.7:2376", "*": {"url": "unix:///var/run/docker.sock"}})
    assert {k: e.url for k, e in engines.node_engines().items()} == {
        "10.0.0.7": "tcp://10.0.0.7:2376", "*": "unix:///var/run/docker.sock"}
    node = _Node(node_id="abc", ip="10.0.0.7", hostname="box", labels={"codeact-node": "gpu-a", "zone": "z1"})
    assert node.engine_keys() == ["abc", "10.0.0.7", "box", "gpu-a", "codeact-node=gpu-a", "zone=z1", "*"]
    assert BenchConfig(suites=["x"], ray="10.0.0.2:6379").ray == RayOptions(address="10.0.0.2:6379")
    proc = subprocess.run([CODEACT, "bench", "run", "--suite", "tool-chains", "--model", "oracle",
                           "--ray-cpus-per-episode", "2", "--out", str(tmp_path / "y")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "--ray-cpus-per-episode only apply with --ray" in proc.stderr, proc.stderr


def test_an_address_where_nothing_answers_fails_at_once(tmp_path: Path) -> None:
    """Ray itself would retry for minutes; the driver probes HOST:PORT first."""
    import socket

    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(BenchError, match=f"nothing answers at the Ray address 127.0.0.1:{port}"):
            run_bench(BenchConfig(suites=["tool-chains"], agents=["react-json"], tasks=["web-ceo"], model="oracle",
                                  out=tmp_path / "results", ray=f"127.0.0.1:{port}"), progress=NoProgress())
    assert time.monotonic() - started < 30
    assert not (tmp_path / "results" / "episodes.jsonl").exists()


def test_the_driver_keeps_the_first_completion_of_an_episode(tmp_path: Path) -> None:
    """A retried task can complete twice (a result lost with its node, recomputed): the first one stands."""
    from codeact.bench import Episode, ResultsDir
    from codeact.bench._ray import RayExecutor, _Outcome
    from codeact.events import RunStarted

    results = ResultsDir(tmp_path / "results")
    results.open_run({"model": "oracle"})
    executor = RayExecutor(BenchConfig(suites=["tool-chains"], ray="auto", out=results.path), results, None,
                           NoProgress())
    executor._log = RunLog(results.runlog_path)
    key = "tool-chains/web-ceo/react-fc/0"

    def completion(run_id: str, answer: str) -> _Outcome:
        episode = Episode(key=key, suite="tool-chains", task="web-ceo", agent="react-fc", repeat=0, success=True,
                          status="success", answer=answer, run_id=run_id)
        return _Outcome(episode=episode, events=[RunStarted(run_id=run_id, step=0, task="t", model="oracle",
                                                            backend="host", tools=[])],
                        links=[(run_id, key)], files=[("work", "web-ceo/notes.txt", answer.encode())],
                        scratch="/nonexistent")

    executor._store(completion("run-first", "first"))
    executor._store(completion("run-second", "second"))
    executor.close()
    assert [e["answer"] for e in lines(results.path)] == ["first"] and executor.finished == 1
    assert (results.path / "work" / "web-ceo" / "notes.txt").read_text() == "first"
    with RunLog(results.runlog_path) as log:
        assert [r.id for r in log.list_runs(limit=None)] == ["run-first"]


# --- on the cluster --------------------------------------------------------------------------------------


def test_a_sweep_on_ray_gives_the_results_of_a_local_run(cluster: RayCluster, tmp_path: Path,
                                                         local_reference: dict[str, dict[str, Any]]) -> None:
    out = tmp_path / "results"
    proc = cluster.run([CODEACT, *cli_args(out), "--ray", cluster.address, "--ray-cpus-per-episode", "1",
                        "--ray-memory-per-episode", "256MiB"])
    assert f"{len(KEYS)} episodes run, 0 already done" in proc.stderr, proc.stderr[-2000:]
    episodes = assert_each_episode_once(out, KEYS)
    assert_same_outcomes(episodes, local_reference)
    assert_report_matches_the_run_log(out)
    with RunLog(out / "runs.db") as log:
        for e in episodes.values():
            run = log.get_run(e["run_id"])
            assert run.bench_episode == e["key"] and run.status == "success"
            assert run.backend == ("docker" if e["agent"] == "codeact" else "host")
        plots = [e for e in episodes.values() if e["task"] == "da-plot-monthly-revenue" and e["agent"] == "codeact"]
        for e in plots:  # the artifact came back from the worker, where a local run puts it
            (artifact,) = log.get_run(e["run_id"]).artifacts
            assert Path(artifact.path).parent == out / "artifacts" / e["run_id"]
            assert Path(artifact.path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "run.json").read_text())["model"] == "oracle"


def test_resume_across_executors_local_to_ray_and_back(cluster: RayCluster, tmp_path: Path,
                                                       local_reference: dict[str, dict[str, Any]]) -> None:
    out = tmp_path / "results"
    # 1. Locally (on the host), interrupted by Ctrl-C once two episodes are saved.
    local = subprocess.Popen([CODEACT, *cli_args(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: len(lines(out)) >= 2 or local.poll() is not None, 120, "two local episodes")
    local.send_signal(signal.SIGINT)
    _, err = local.communicate(timeout=60)
    assert local.returncode == 130 and "run the same command again to resume" in err, err[-2000:]
    first = len(lines(out))
    assert 2 <= first < len(KEYS)
    # 2. Resumed on Ray, interrupted again after one more episode.
    on_ray = cluster.popen([CODEACT, *cli_args(out), "--ray", cluster.address], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    wait_for(lambda: len(lines(out)) > first or on_ray.poll() is not None, 120, "an episode on Ray")
    on_ray.send_signal(signal.SIGINT)
    _, err = on_ray.communicate(timeout=60)
    assert on_ray.returncode == 130, err[-2000:]
    second = len(lines(out))
    assert first < second < len(KEYS), (first, second)
    # 3. Finished locally.
    proc = subprocess.run([CODEACT, *cli_args(out)], capture_output=True, text=True, timeout=300, check=False)
    assert f"{len(KEYS) - second} episodes run, {second} already done" in proc.stderr, proc.stderr[-2000:]
    episodes = assert_each_episode_once(out, KEYS)
    assert_same_outcomes(episodes, local_reference)
    with RunLog(out / "runs.db") as log:  # the finished runs are linked; the local ones cut off are marked so
        runs = [log.get_run(r.id) for r in log.list_runs(limit=None)]
        finished = {e["run_id"]: e["key"] for e in episodes.values()}
        assert {r.id: r.bench_episode for r in runs if r.id in finished} == finished
        assert {r.status for r in runs if r.id not in finished} <= {"interrupted", "cancelled"}


def test_engines_named_per_node(cluster: RayCluster, tmp_path: Path) -> None:
    out = tmp_path / "results"
    (worker,) = cluster.workers
    engines = json.dumps({f"w{worker}": "unix:///nonexistent/docker.sock", "*": "unix:///var/run/docker.sock"})
    cluster.run([CODEACT, "bench", "run", "--suite", "tool-chains", "--model", "oracle", "--agents", "codeact",
                 "--task", "shop-*", "--out", str(out), "--no-plots", "--ray", cluster.address,
                 "--ray-engines", engines, "--max-error-share", "1"])  # half the sandboxes fail: do not stop
    episodes = lines(out)
    assert len(episodes) == 8
    down = [e for e in episodes if not e["success"]]
    assert all(f"w{worker} (unix:///nonexistent/docker.sock)" in (e["error"] or "") for e in down), down
    # The outcome came back from the worker: the sandbox failed, not the model.
    assert {e["outcome"] for e in down} == {"sandbox_error"} and {e["outcome"] for e in episodes} == {
        "sandbox_error", "solved"}
    assert down and len(down) < len(episodes)  # SPREAD put episodes on both nodes; the head's engine works


SLOW_DRIVER = '''
import os, sys, time
import ray
from codeact.bench import BenchConfig, OracleModel, RayOptions, run_bench
from codeact.bench._progress import NoProgress

out, marks, address = sys.argv[1:4]

class SlowOracle:
    """The oracle, slowed down: episodes last long enough to be cut off."""
    def __init__(self, inner):
        self.inner, self.name = inner, "oracle"
    def complete(self, messages, **kw):
        time.sleep(0.6)
        return self.inner.complete(messages, **kw)
    def __getattr__(self, name):
        return getattr(self.inner, name)

def factory(task, kind, ctx):
    # Each start of an episode leaves a line: the raylet (parent of this worker) that ran it.
    with open(os.path.join(marks, f"{task.suite}__{task.id}__{kind}__{ctx.repeat}"), "a") as f:
        f.write(f"{os.getppid()}\\n")
    return SlowOracle(OracleModel(task, kind, context=ctx))

run = run_bench(BenchConfig(suites=["tool-chains"], agents=["codeact", "react-json"], model="oracle",
                            tasks=["shop-*"], out=out, ray=RayOptions(address)),
                model=factory, progress=NoProgress(), plots=False)
print("RAN", run.ran)
'''


def test_a_node_killed_mid_run_its_episodes_run_again_elsewhere(cluster: RayCluster, tmp_path: Path) -> None:
    if not cluster.workers:
        cluster.add_worker()
        cluster.wait_for_nodes(2)
    (worker,) = cluster.workers
    raylet = cluster.raylet(worker)
    out, marks = tmp_path / "results", tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "slow_driver.py"
    script.write_text(SLOW_DRIVER)
    driver = cluster.popen([sys.executable, str(script), str(out), str(marks), cluster.address],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def running_on_worker() -> set[str]:
        done = {e["key"].replace("/", "__") for e in lines(out)}
        return {p.name for p in marks.iterdir() if str(raylet) in p.read_text().split() and p.name not in done}

    wait_for(lambda: len(running_on_worker()) >= 2 or driver.poll() is not None, 120, "episodes on the worker node")
    time.sleep(0.5)
    cut = running_on_worker()
    killed = cluster.kill_worker(worker)
    assert raylet in killed and len(killed) >= 3  # the raylet, its agents and the episodes' workers
    stdout, stderr = driver.communicate(timeout=300)
    assert driver.returncode == 0, stderr[-3000:]
    assert "RAN 16" in stdout
    keys = {f"tool-chains/{t}/{a}/0" for t in ("shop-cheapest-lamp-in-stock", "shop-audio-average-stars",
                                               "shop-kettles-cart-eur", "shop-chair-most-five-stars",
                                               "shop-desk-shortest-lead", "shop-kitchen-low-stock",
                                               "shop-lamp-spread-gbp", "shop-audio-supplier-countries")
            for a in ("codeact", "react-json")}
    episodes = assert_each_episode_once(out, keys)
    failed = {k: e["error"] for k, e in episodes.items() if not e["success"]}
    assert not failed, failed
    assert cut, "no episode was running on the worker node when it was killed"
    for name in cut:  # started on the killed node, then again (to the end) on the head
        starts = (marks / name).read_text().split()
        assert starts[0] == str(raylet) and len(starts) >= 2 and starts[-1] != str(raylet), (name, starts)
    with RunLog(out / "runs.db") as log:  # one finished run per episode; the cut-off attempts left nothing
        runs = [log.get_run(r.id) for r in log.list_runs(limit=None)]
        assert sorted(r.bench_episode for r in runs) == sorted(keys)


KEY_DRIVER = '''
import json, os, sys
from codeact.bench import BenchConfig, RayOptions, run_bench
from codeact.bench._progress import NoProgress
from tests.openai_server import OpenAITestServer

out, address, pass_key = sys.argv[1], sys.argv[2], sys.argv[3] == "pass"
SENTINEL = os.environ["OPENAI_API_KEY"]  # the driver's key, as the CLI would take it
with OpenAITestServer(default_reply="Final Answer: 42") as server:
    run = run_bench(BenchConfig(suites=["tool-chains"], agents=["react-json"], model="test-model",
                                base_url=server.base_url, api_key=SENTINEL, temperature=0.3, seed=7,
                                tasks=["web-ceo", "shop-*lamp*"], out=out,
                                ray=RayOptions(address, pass_api_key=pass_key)),
                    progress=NoProgress(), plots=False)
    # The driver's own pre-flight request (with its own key, to its own endpoint) is not a worker's call.
    requests = [{"auth": r.headers.get("authorization"), "model": r.body.get("model"),
                 "temperature": r.body.get("temperature"), "seed": r.body.get("seed")}
                for r in server.chat_requests if "single word OK" not in json.dumps(r.messages)]
print("REQUESTS=" + json.dumps(requests))
print("EPISODES", run.ran, sorted(e.status for e in run.episodes))
'''


def test_the_api_key_never_travels_unless_asked_and_never_lands_in_results(cluster: RayCluster,
                                                                          tmp_path: Path) -> None:
    script = tmp_path / "key_driver.py"
    script.write_text(KEY_DRIVER)
    env = {"OPENAI_API_KEY": SENTINEL_KEY, "PYTHONPATH": str(ROOT)}
    for mode, key in (("node", CLUSTER_KEY), ("pass", SENTINEL_KEY)):
        out = tmp_path / mode
        proc = cluster.run([sys.executable, str(script), str(out), cluster.address, mode], env=env)
        requests = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("REQUESTS="))[9:])
        assert "EPISODES 3" in proc.stdout and len(requests) >= 3, proc.stdout
        # The workers made the calls with the driver's model settings and the key the mode says.
        assert all(r == {"auth": f"Bearer {key}", "model": "test-model", "temperature": 0.3, "seed": 7}
                   for r in requests), requests
        assert (out / "runs.db").is_file() and len(lines(out)) == 3
        for path in [p for p in out.rglob("*") if p.is_file()]:
            assert SENTINEL_KEY.encode() not in path.read_bytes(), path
        printed = [line for line in proc.stdout.splitlines() if not line.startswith("REQUESTS=")]
        assert not [line for line in printed if SENTINEL_KEY in line]
        assert SENTINEL_KEY not in proc.stderr
        if mode == "node":  # not asked to pass it: the key is nowhere in Ray's own files either
            for path in [p for p in cluster.tmp.rglob("*") if p.is_file() and not p.is_symlink()]:
                try:
                    data = path.read_bytes()
                except OSError:
                    continue
                assert SENTINEL_KEY.encode() not in data, path


TRACED_DRIVER = '''
import json, sys
from codeact import telemetry
from codeact.bench import BenchConfig, RayOptions, run_bench
from codeact.bench._progress import NoProgress

out, address, endpoint = sys.argv[1:4]
telemetry.configure(endpoint=endpoint, service_name="bench-driver")  # --otel ENDPOINT: no OTEL_* set here
run = run_bench(BenchConfig(suites=["tool-chains"], agents=["codeact", "react-json"], tasks=["web-ceo"],
                            model="oracle", out=out, ray=RayOptions(address)), progress=NoProgress(), report=False)
telemetry.shutdown()
print("EPISODES=" + json.dumps([{"key": e.key, "run_id": e.run_id, "agent": e.agent, "success": e.success}
                                for e in run.episodes]))
'''


def test_a_traced_sweep_on_ray_is_one_trace_from_the_driver_through_the_workers(cluster: RayCluster, phoenix: str,
                                                                               tmp_path: Path) -> None:
    port = int(phoenix.rsplit(":", 1)[1])
    sockets = tempfile.mkdtemp(prefix="otlp-", dir="/tmp")  # short: Unix socket paths
    bridge = UnixToTcp(os.path.join(sockets, "phoenix"), "127.0.0.1", port)
    inside = cluster.popen([sys.executable, "-m", "tests.netns_bridge", bridge.path], stdout=subprocess.PIPE,
                           cwd=ROOT)
    try:
        assert inside.stdout is not None
        endpoint = f"http://127.0.0.1:{int(inside.stdout.readline())}"  # Phoenix, as seen from the namespace
        script = tmp_path / "traced_driver.py"
        script.write_text(TRACED_DRIVER)
        env = {k: "" for k in os.environ if k.startswith("OTEL_")}  # the workers get theirs from the driver only
        proc = cluster.run([sys.executable, str(script), str(tmp_path / "results"), cluster.address, endpoint],
                           env={**env, "PYTHONPATH": str(ROOT)})
    finally:
        inside.kill()
        inside.wait(timeout=30)
        bridge.close()
        shutil.rmtree(sockets, ignore_errors=True)
    episodes = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("EPISODES="))[9:])
    assert len(episodes) == 2 and all(e["success"] for e in episodes), episodes

    # bench.run, 2 episodes, 2 runs, their chats (2 at least), a code action and the sandbox's start
    first = episodes[0]["run_id"]
    # The driver's bench.run ends last, so it may reach Phoenix after nine of the workers' spans.
    spans = trace_of(phoenix, lambda s: (s.get("attributes") or {}).get("codeact.run.id") == first, want=9,
                     until=lambda found: any(s["name"] == "bench.run" for s in found))
    by_id = {s["context"]["span_id"]: s for s in spans}
    names = sorted(s["name"] for s in spans)

    def children(span: dict[str, Any]) -> list[dict[str, Any]]:
        return [s for s in spans if s.get("parent_id") == span["context"]["span_id"]]

    [sweep] = [s for s in spans if s["name"] == "bench.run"]
    assert sweep.get("parent_id") is None, names
    attrs = sweep["attributes"]
    assert attrs["codeact.bench.executor"] == "ray" and attrs["codeact.bench.episodes"] == 2
    assert list(attrs["codeact.bench.agents"]) == ["codeact", "react-json"]
    assert list(attrs["codeact.bench.models"]) == ["oracle"] and attrs["codeact.bench.finished"] == 2
    assert "codeact.bench.node" not in attrs
    episode_spans = {s["attributes"]["codeact.bench.episode"]: s for s in children(sweep)
                     if s["name"].startswith("bench.episode ")}
    assert sorted(episode_spans) == sorted(e["key"] for e in episodes), names
    for e in episodes:
        span = episode_spans[e["key"]]
        assert span["attributes"]["codeact.bench.node"].startswith("127.0.0.1 (")  # made on a Ray worker
        [run] = [s for s in children(span) if s["name"].startswith("invoke_agent ")]
        assert run["attributes"]["codeact.run.id"] == e["run_id"]
        assert run["attributes"]["gen_ai.agent.name"] == e["agent"]
        under = {s["name"] for s in children(run)}
        assert "chat oracle" in under, (e["agent"], under)
        if e["agent"] == "codeact":
            assert "execute_code" in under, under
    assert all(s.get("parent_id") is None or s["parent_id"] in by_id for s in spans), "a span's parent is missing"
