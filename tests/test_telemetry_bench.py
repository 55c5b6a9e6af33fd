"""A bench sweep is one trace: ``bench.run`` → ``bench.episode`` → the episode's run, on the local executor (in-memory
exporter), and what a Ray sweep sends its workers so that theirs join it (tests/test_bench_ray.py follows a real
Ray sweep into Phoenix)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra (opentelemetry-sdk) is part of the test extras")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from codeact import telemetry
from codeact.bench import BenchConfig, RayOptions, run_bench
from codeact.bench._progress import NoProgress
from codeact.telemetry._spans import Tracing

TASKS = ["web-ceo", "shop-cheapest-lamp-in-stock"]
AGENTS = ["codeact", "react-json"]


@pytest.mark.filterwarnings("ignore::UserWarning")  # the restricted backend's warning: the oracle's code
def test_a_local_sweep_is_one_trace_with_each_run_under_its_episode(spans: InMemorySpanExporter,
                                                                     tmp_path: Path) -> None:
    run = run_bench(BenchConfig(suites=["tool-chains"], agents=AGENTS, tasks=TASKS, model="oracle",
                                backend="restricted", concurrency=2, out=tmp_path / "results"),
                    progress=NoProgress(), report=False)
    assert run.ran == 4 and all(e.success for e in run.episodes), [(e.key, e.error) for e in run.episodes]
    finished = list(spans.get_finished_spans())
    by_id = {s.context.span_id: s for s in finished}
    assert len({s.context.trace_id for s in finished}) == 1, sorted({s.name for s in finished})

    [sweep] = [s for s in finished if s.name == "bench.run"]
    assert sweep.parent is None
    attrs = sweep.attributes
    assert attrs["codeact.bench.executor"] == "local" and attrs["codeact.bench.episodes"] == 4
    assert list(attrs["codeact.bench.suites"]) == ["tool-chains"] and list(attrs["codeact.bench.agents"]) == AGENTS
    assert list(attrs["codeact.bench.models"]) == ["oracle"] and attrs["codeact.bench.finished"] == 4

    episodes = {s.attributes["codeact.bench.episode"]: s for s in finished if s.name.startswith("bench.episode ")}
    assert sorted(episodes) == sorted(e.key for e in run.episodes)
    assert all(s.parent.span_id == sweep.context.span_id for s in episodes.values())  # across threads
    runs = {s.attributes["codeact.run.id"]: s for s in finished if s.name.startswith("invoke_agent ")}
    for e in run.episodes:  # each run under the span of its own episode
        agent_run = runs[e.run_id]
        assert by_id[agent_run.parent.span_id] is episodes[e.key], e.key
        assert agent_run.attributes["gen_ai.agent.name"] == e.agent
        children = {s.name for s in finished if s.parent is not None and s.parent.span_id == agent_run.context.span_id}
        assert "chat oracle" in children, (e.key, children)
        if e.agent == "codeact":
            assert "execute_code" in children, (e.key, children)


def test_without_tracing_a_sweep_makes_no_span_and_sends_no_otel_environment(monkeypatch: pytest.MonkeyPatch,
                                                                              tmp_path: Path) -> None:
    from codeact.bench._ray import RayExecutor

    monkeypatch.setattr(telemetry, "_tracing", None)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "sweeper")  # names a service, asks for no exporter
    executor = RayExecutor(BenchConfig(suites=["tool-chains"], ray="auto", out=tmp_path), None, None, NoProgress())
    assert "runtime_env" not in executor._task_options()


def test_a_ray_sweep_sends_its_workers_the_tracing_of_the_driver(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    """The OTEL_* variables travel in the task's runtime_env; configure()'s endpoint and service name replace
    theirs; the headers (a token, often) only when secrets are passed on purpose."""
    from codeact.bench._ray import RayExecutor

    for name in [k for k in os.environ if k.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://old:4318/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer tok-SECRET")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=lab")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-driver")
    provider = TracerProvider()
    monkeypatch.setattr(telemetry, "_tracing", Tracing(provider, endpoint="http://collector:4318",
                                                       service_name="sweep"))
    try:
        def env(pass_api_key: bool) -> dict[str, str]:
            config = BenchConfig(suites=["tool-chains"], ray=RayOptions(pass_api_key=pass_api_key), out=tmp_path)
            return dict(RayExecutor(config, None, None, NoProgress())._task_options()["runtime_env"]["env_vars"])

        assert env(False) == {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SERVICE_NAME": "sweep",
                              "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=lab"}
        assert env(True) == {**env(False), "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer tok-SECRET",
                             "OPENAI_API_KEY": "sk-driver"}
    finally:
        provider.shutdown()


def test_otel_alone_turns_the_workers_on_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--otel`` with no OTEL_* set exports to the OTLP default; the workers must export too, and a program's
    own exporter (handed in by code) is not one the workers can rebuild."""
    for name in [k for k in os.environ if k.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    provider = TracerProvider()
    try:
        monkeypatch.setattr(telemetry, "_tracing", Tracing(provider, exports=True))
        assert telemetry.environment_for_workers() == {"OTEL_TRACES_EXPORTER": "otlp"}
        monkeypatch.setattr(telemetry, "_tracing", Tracing(provider))
        assert telemetry.environment_for_workers() == {}
    finally:
        provider.shutdown()
