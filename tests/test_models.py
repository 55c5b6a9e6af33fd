"""Models: the real openai client over HTTP to a local OpenAI-compatible server; the scripted model."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from email.utils import formatdate

import pytest

from codeact.errors import (
    ConfigError,
    ContextOverflowError,
    ModelAuthError,
    ModelError,
    ModelNotFoundError,
    ModelOutputError,
    ModelUnavailableError,
)
from codeact.messages import Message, ModelResponse, ToolCallRequest, Usage
from codeact.models import AsyncModel, Model, OpenAIModel, ScriptedModel
from codeact.models._failures import parse_retry_after
from tests.openai_server import Fault, OpenAITestServer, ToolCall, free_port

pytestmark = pytest.mark.timeout(30)

MESSAGES = [Message("system", "You are terse."), Message("user", "Say hello.")]


def make_model(server: OpenAITestServer, **options: object) -> OpenAIModel:
    """A model with test-sized timeouts and backoff."""
    settings: dict = {"base_url": server.base_url, "api_key": "sk-test", "timeout": 5}
    settings.update(backoff=0.01, max_backoff=0.5)
    settings.update(options)
    return OpenAIModel("test-model", **settings)  # type: ignore[arg-type]


def assert_no_stop(server: OpenAITestServer) -> None:
    for req in server.chat_requests:
        assert "stop" not in req.body, req.body


def run_stream(model: OpenAIModel | ScriptedModel, messages=MESSAGES, **kw) -> tuple[list[str], ModelResponse]:
    parts = list(model.stream(messages, **kw))
    *deltas, final = parts
    assert all(isinstance(d, str) for d in deltas)
    assert isinstance(final, ModelResponse)
    return deltas, final  # type: ignore[return-value]


# --------------------------------------------------------------------------- happy paths


def test_complete_returns_text_usage_and_sends_messages(openai_server: OpenAITestServer) -> None:
    openai_server.plan_text("Hello!", usage=(12, 3))
    model = make_model(openai_server)

    r = model.complete(MESSAGES)

    assert r.text == "Hello!"
    assert r.message == Message("assistant", "Hello!")
    assert r.usage == Usage(12, 3, 1)
    assert r.finish_reason == "stop"
    assert r.model == "test-model"
    assert r.duration > 0
    (req,) = openai_server.chat_requests
    assert req.body["model"] == "test-model"
    assert req.body["messages"] == [m.to_openai() for m in MESSAGES]
    assert req.headers["authorization"] == "Bearer sk-test"
    assert "stream" not in req.body and "tools" not in req.body and "temperature" not in req.body
    assert_no_stop(openai_server)


def test_options_tools_and_extra_body_are_sent(openai_server: OpenAITestServer) -> None:
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]
    model = make_model(openai_server, temperature=0.2, max_tokens=64, extra_body={"top_k": 20})

    model.complete(MESSAGES, tools=tools)

    body = openai_server.chat_requests[0].body
    assert body["temperature"] == 0.2
    assert body["max_tokens"] == 64
    assert body["top_k"] == 20
    assert body["tools"] == tools
    assert_no_stop(openai_server)


def test_usage_is_estimated_when_the_server_sends_none(openai_server: OpenAITestServer) -> None:
    openai_server.plan_text("abcdefgh", send_usage=False)
    r = make_model(openai_server).complete(MESSAGES)
    chars = sum(len(m.content) for m in MESSAGES)
    assert r.usage == Usage((chars + 3) // 4, 2, 1)


def test_stream_yields_deltas_then_response_with_usage(openai_server: OpenAITestServer) -> None:
    text = "Hello, streaming world!"
    openai_server.plan_text(text, usage=(20, 5))

    deltas, final = run_stream(make_model(openai_server))

    assert len(deltas) > 1
    assert "".join(deltas) == text
    assert final.text == text
    assert final.usage == Usage(20, 5, 1)
    assert final.finish_reason == "stop"
    body = openai_server.chat_requests[0].body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert_no_stop(openai_server)


def test_stream_accepts_servers_without_usage(openai_server: OpenAITestServer) -> None:
    openai_server.plan_text("abcdefghijkl", send_usage=False)
    deltas, final = run_stream(make_model(openai_server))
    assert "".join(deltas) == "abcdefghijkl"
    assert final.usage.output_tokens == 3
    assert final.usage.input_tokens > 0


def test_stream_options_rejected_falls_back_without_them(openai_server: OpenAITestServer) -> None:
    openai_server.plan_error(400, "Unrecognized request argument supplied: stream_options")
    openai_server.plan_text("fine", send_usage=False)
    model = make_model(openai_server, max_retries=0)  # the fallback is not a retry

    _, final = run_stream(model)

    assert final.text == "fine"
    first, second = openai_server.chat_requests
    assert "stream_options" in first.body and "stream_options" not in second.body


def test_tool_calls_are_parsed(openai_server: OpenAITestServer) -> None:
    openai_server.plan_tool_call("get_weather", {"city": "Paris"}, call_id="call_abc")
    r = make_model(openai_server).complete(MESSAGES, tools=[])
    assert r.message.content == ""
    assert r.message.tool_calls == (ToolCallRequest("call_abc", "get_weather", '{"city": "Paris"}'),)
    assert r.finish_reason == "tool_calls"


def test_streamed_tool_calls_are_assembled(openai_server: OpenAITestServer) -> None:
    openai_server.plan_tool_calls(
        [ToolCall("search", {"query": "codeact agents", "limit": 5}, "call_1"), ToolCall("noop", "{}", "call_2")],
        text="Let me look.",
    )
    deltas, final = run_stream(make_model(openai_server))
    assert "".join(deltas) == "Let me look."  # argument fragments are not text
    assert final.message.tool_calls == (
        ToolCallRequest("call_1", "search", '{"query": "codeact agents", "limit": 5}'),
        ToolCallRequest("call_2", "noop", "{}"),
    )
    assert final.finish_reason == "tool_calls"


def test_list_models(openai_server: OpenAITestServer) -> None:
    openai_server.models = ["a-model", "b-model"]
    assert make_model(openai_server).list_models() == ["a-model", "b-model"]


# --------------------------------------------------------------------------- retries


def test_429_retry_after_is_honoured(openai_server: OpenAITestServer) -> None:
    openai_server.plan_rate_limit(retry_after=0.2)
    openai_server.plan_text("after the wait")

    r = make_model(openai_server).complete(MESSAGES)

    assert r.text == "after the wait"
    first, second = openai_server.chat_requests
    assert second.time - first.time >= 0.2
    assert r.duration >= 0.2  # duration covers all attempts


def test_429_retry_after_ms_is_honoured(openai_server: OpenAITestServer) -> None:
    openai_server.plan_rate_limit(retry_after=None, retry_after_ms=150)
    make_model(openai_server).complete(MESSAGES)
    first, second = openai_server.chat_requests
    assert second.time - first.time >= 0.15


def test_retry_after_is_capped_by_max_backoff(openai_server: OpenAITestServer) -> None:
    openai_server.plan_rate_limit(retry_after=20)
    r = make_model(openai_server, max_backoff=0.05).complete(MESSAGES)
    assert r.text == "OK"
    first, second = openai_server.chat_requests
    assert second.time - first.time < 5  # not 20 s


def test_parse_retry_after_forms() -> None:
    now = time.time()
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after": "0.25"}) == 0.25
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"retry-after": formatdate(now + 10, usegmt=True)}, now=now) == pytest.approx(10, abs=1)
    assert parse_retry_after({"retry-after": formatdate(now - 10, usegmt=True)}, now=now) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_500_then_success(openai_server: OpenAITestServer) -> None:
    openai_server.plan_server_error(500)
    openai_server.plan_server_error(503)
    openai_server.plan_text("recovered")
    assert make_model(openai_server).complete(MESSAGES).text == "recovered"
    assert len(openai_server.chat_requests) == 3


def test_malformed_json_then_success(openai_server: OpenAITestServer) -> None:
    openai_server.plan_malformed()
    openai_server.plan_text("valid")
    assert make_model(openai_server).complete(MESSAGES).text == "valid"
    assert len(openai_server.chat_requests) == 2


def test_malformed_stream_then_success(openai_server: OpenAITestServer) -> None:
    openai_server.plan_malformed()
    openai_server.plan_text("valid stream")
    deltas, final = run_stream(make_model(openai_server))
    assert "".join(deltas) == final.text == "valid stream"
    assert len(openai_server.chat_requests) == 2


def test_error_object_with_status_200_is_retried(openai_server: OpenAITestServer) -> None:
    # Some proxies answer 200 with an error body; that is not a completion.
    for _ in range(2):
        openai_server.plan(Fault("error", status=200, body={"error": {"message": "upstream overloaded"}}))
    with pytest.raises(ModelUnavailableError, match="upstream overloaded"):
        make_model(openai_server, max_retries=1).complete(MESSAGES)
    openai_server.plan(Fault("error", status=200, body={"error": {"message": "upstream overloaded"}}))
    assert make_model(openai_server).complete(MESSAGES).text == "OK"


def test_stalled_response_times_out_and_is_retried(openai_server: OpenAITestServer) -> None:
    openai_server.plan_stall(seconds=10)
    openai_server.plan_text("awake")
    r = make_model(openai_server, timeout=0.3).complete(MESSAGES)
    assert r.text == "awake"
    assert len(openai_server.chat_requests) == 2


def test_dropped_connection_is_retried(openai_server: OpenAITestServer) -> None:
    openai_server.plan_drop()
    openai_server.plan_text("reconnected")
    assert make_model(openai_server).complete(MESSAGES).text == "reconnected"
    assert len(openai_server.chat_requests) == 2


def test_stream_retries_before_the_first_delta(openai_server: OpenAITestServer) -> None:
    openai_server.plan_server_error(502)
    openai_server.plan_drop()
    openai_server.plan_text("third time lucky", usage=(7, 4))
    deltas, final = run_stream(make_model(openai_server))
    assert "".join(deltas) == "third time lucky"
    assert final.usage == Usage(7, 4, 1)
    assert len(openai_server.chat_requests) == 3


def test_stream_broken_after_deltas_is_not_retried(openai_server: OpenAITestServer) -> None:
    openai_server.plan_text("one two three four five six", drop_after_chunks=2)
    received: list[str] = []
    with pytest.raises(ModelUnavailableError, match="broke after 8 characters"):
        for part in make_model(openai_server).stream(MESSAGES):
            received.append(part)  # type: ignore[arg-type]
    assert "".join(received) == "one two "
    assert len(openai_server.chat_requests) == 1


def test_retries_exhausted_names_url_attempts_and_last_error(openai_server: OpenAITestServer) -> None:
    for _ in range(3):
        openai_server.plan_server_error(500, "boom from the test server")
    with pytest.raises(ModelUnavailableError) as info:
        make_model(openai_server, max_retries=2).complete(MESSAGES)
    msg = str(info.value)
    assert openai_server.base_url in msg
    assert "3 attempts" in msg
    assert "HTTP 500: boom from the test server" in msg
    assert len(openai_server.chat_requests) == 3


def test_a_refused_connection_is_retried_once_only() -> None:
    """Nothing listens on the port: one retry (a restarting server), not max_retries of them."""
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    model = OpenAIModel("test-model", base_url=base_url, timeout=2, max_retries=4, backoff=0.01)
    with pytest.raises(ModelUnavailableError) as info:
        model.complete(MESSAGES)
    msg = str(info.value)
    assert base_url in msg and "2 attempts" in msg and "connection failed" in msg and "refused" in msg
    assert "\n" not in msg
    assert info.value.reason == "unreachable"
    with pytest.raises(ModelUnavailableError, match="2 attempts"):
        list(model.stream(MESSAGES))


def test_a_host_name_that_does_not_resolve_is_retried_once_only() -> None:
    model = OpenAIModel("test-model", base_url="http://no-such-host.invalid/v1", timeout=2, max_retries=4,
                        backoff=0.01)
    with pytest.raises(ModelUnavailableError, match="2 attempts") as info:
        model.complete(MESSAGES)
    assert info.value.reason == "unreachable"


def test_failures_carry_their_reason(openai_server: OpenAITestServer) -> None:
    """What the bench sorts episodes by: the kind of failure, not its wording."""
    for _ in range(2):
        openai_server.plan_rate_limit(retry_after=0)
    with pytest.raises(ModelUnavailableError) as info:
        make_model(openai_server, max_retries=1).complete(MESSAGES)
    assert info.value.reason == "rate_limit"
    for _ in range(2):
        openai_server.plan_server_error(503)
    with pytest.raises(ModelUnavailableError) as info:
        make_model(openai_server, max_retries=1).complete(MESSAGES)
    assert info.value.reason == "server_error"
    for _ in range(2):
        openai_server.plan_malformed()
    with pytest.raises(ModelUnavailableError) as info:
        make_model(openai_server, max_retries=1).complete(MESSAGES)
    assert info.value.reason == "bad_reply"
    openai_server.plan_stall(seconds=5)
    with pytest.raises(ModelUnavailableError) as info:
        make_model(openai_server, max_retries=0, timeout=0.3).complete(MESSAGES)
    assert info.value.reason == "timeout"
    openai_server.plan_auth_error()
    with pytest.raises(ModelAuthError) as auth:
        make_model(openai_server).complete(MESSAGES)
    assert auth.value.reason == "auth"
    openai_server.plan_context_overflow()
    with pytest.raises(ContextOverflowError) as overflow:
        make_model(openai_server).complete(MESSAGES)
    assert overflow.value.reason == "context_overflow"
    import pickle

    copy = pickle.loads(pickle.dumps(info.value))  # Ray sends errors between processes
    assert copy.reason == "timeout" and str(copy) == str(info.value)


# --------------------------------------------------------------------------- errors that are not retried


@pytest.mark.parametrize("status", [401, 403])
def test_auth_error_is_not_retried(openai_server: OpenAITestServer, status: int) -> None:
    openai_server.plan_auth_error(status)
    with pytest.raises(ModelAuthError, match="rejected the API key \\(from api_key / --api-key\\)"):
        make_model(openai_server).complete(MESSAGES)
    assert len(openai_server.chat_requests) == 1


def test_model_not_found(openai_server: OpenAITestServer) -> None:
    openai_server.plan_model_not_found()
    with pytest.raises(ModelNotFoundError) as info:
        make_model(openai_server).complete(MESSAGES)
    msg = str(info.value)
    assert "'test-model'" in msg and openai_server.base_url in msg
    assert "does not exist" in msg  # the server's own words are kept
    assert len(openai_server.chat_requests) == 1


def test_context_overflow_by_code(openai_server: OpenAITestServer) -> None:
    openai_server.plan_context_overflow()
    with pytest.raises(ContextOverflowError, match="context window"):
        make_model(openai_server).complete(MESSAGES)
    assert len(openai_server.chat_requests) == 1


def test_context_overflow_by_message_only(openai_server: OpenAITestServer) -> None:
    # vLLM-style: no error code, only the text.
    openai_server.plan_error(400, "This model's maximum context length is 4096 tokens, but you requested 5000.")
    with pytest.raises(ContextOverflowError):
        run_stream(make_model(openai_server))


def test_other_400_is_a_model_error_without_retry(openai_server: OpenAITestServer) -> None:
    openai_server.plan_error(400, "Invalid value for 'temperature'", param="temperature")
    with pytest.raises(ModelError, match="HTTP 400: Invalid value for 'temperature'") as info:
        make_model(openai_server).complete(MESSAGES)
    assert type(info.value) is ModelError
    assert len(openai_server.chat_requests) == 1


def test_insufficient_quota_is_not_retried(openai_server: OpenAITestServer) -> None:
    openai_server.plan_error(429, "You exceeded your current quota.", code="insufficient_quota")
    with pytest.raises(ModelError, match="quota"):
        make_model(openai_server).complete(MESSAGES)
    assert len(openai_server.chat_requests) == 1


# --------------------------------------------------------------------------- configuration


def test_configuration_from_environment(openai_server: OpenAITestServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEACT_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")

    model = OpenAIModel(backoff=0.01)

    assert model.name == "env-model"
    assert model.base_url == openai_server.base_url
    assert model.complete(MESSAGES).text == "OK"
    req = openai_server.chat_requests[0]
    assert req.body["model"] == "env-model"
    assert req.headers["authorization"] == "Bearer sk-from-env"
    assert "sk-from-env" not in repr(model)


def test_arguments_win_over_environment(openai_server: OpenAITestServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEACT_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    model = OpenAIModel("arg-model", base_url=openai_server.base_url, api_key="sk-arg")
    model.complete(MESSAGES)
    req = openai_server.chat_requests[0]
    assert req.body["model"] == "arg-model" and req.headers["authorization"] == "Bearer sk-arg"


def test_missing_api_key_uses_a_placeholder(openai_server: OpenAITestServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    OpenAIModel("local", base_url=openai_server.base_url).complete(MESSAGES)
    assert openai_server.chat_requests[0].headers["authorization"] == "Bearer not-needed"


def test_missing_api_key_for_the_default_endpoint_is_named_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY is not set") as info:
        OpenAIModel("gpt-4o-mini")
    assert "OPENAI_BASE_URL" in str(info.value) and "api.openai.com" in str(info.value)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    OpenAIModel("gpt-4o-mini")  # constructing sends nothing


def test_a_401_without_a_key_names_the_unset_variable(openai_server: OpenAITestServer,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    openai_server.plan_auth_error()
    with pytest.raises(ModelAuthError, match="none was given \\(OPENAI_API_KEY is not set\\)"):
        OpenAIModel("m", base_url=openai_server.base_url).complete(MESSAGES)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    openai_server.plan_auth_error()
    with pytest.raises(ModelAuthError, match="rejected the API key \\(from OPENAI_API_KEY\\)"):
        OpenAIModel("m", base_url=openai_server.base_url).complete(MESSAGES)
    assert len(openai_server.chat_requests) == 2  # neither was retried


def test_missing_model_name_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CODEACT_MODEL", raising=False)
    with pytest.raises(ConfigError, match="CODEACT_MODEL") as info:
        OpenAIModel()
    assert "model=" in str(info.value)


def test_stop_in_extra_body_is_refused() -> None:
    with pytest.raises(ConfigError, match="stop"):
        OpenAIModel("m", extra_body={"stop": ["```"]})


def test_import_does_not_load_openai() -> None:
    code = "import sys, codeact.models; print('openai' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_models_satisfy_the_protocol(openai_server: OpenAITestServer) -> None:
    for model in (make_model(openai_server), ScriptedModel([])):
        assert isinstance(model, Model) and isinstance(model, AsyncModel)


class MinimalModel:
    """A user's model with only what the agents call: ``name``, ``complete`` and ``stream`` (no ``acomplete``)."""

    name = "minimal"

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.seen: list[list[Message]] = []

    def complete(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None) -> ModelResponse:
        self.seen.append(list(messages))
        return ModelResponse(Message("assistant", self.replies[len(self.seen) - 1]))

    def stream(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None
               ) -> Iterator[str | ModelResponse]:
        response = self.complete(messages, tools=tools)
        yield response.text
        yield response


@pytest.mark.filterwarnings("ignore::sandbox.UnsafeBackendWarning")  # restricted: trusted code only
@pytest.mark.parametrize("stream", [False, True])
def test_a_model_with_only_what_the_agents_use_runs_codeact(stream: bool) -> None:
    from codeact import CodeActAgent

    model = MinimalModel(["```python\nfinal_answer(6 * 7)\n```"])
    assert isinstance(model, Model) and not isinstance(model, AsyncModel)
    result = CodeActAgent(model, sandbox="restricted", log=False, stream_model=stream).run("What is 6 times 7?")
    assert (result.status, result.answer, len(model.seen)) == ("success", 42, 1)
    assert model.seen[0][-1].content.endswith("What is 6 times 7?")


# --------------------------------------------------------------------------- async


def test_acomplete_works_and_retries(openai_server: OpenAITestServer) -> None:
    openai_server.plan_server_error(500)
    openai_server.plan_rate_limit(retry_after=0.1)
    openai_server.plan_text("async hello", usage=(9, 2))
    model = make_model(openai_server)

    r = asyncio.run(model.acomplete(MESSAGES))

    assert r.text == "async hello"
    assert r.usage == Usage(9, 2, 1)
    reqs = openai_server.chat_requests
    assert len(reqs) == 3
    assert reqs[2].time - reqs[1].time >= 0.1
    # A second event loop gets a working client too.
    assert asyncio.run(model.acomplete(MESSAGES)).text == "OK"
    assert_no_stop(openai_server)


def test_acomplete_maps_errors(openai_server: OpenAITestServer) -> None:
    openai_server.plan_auth_error()
    with pytest.raises(ModelAuthError):
        asyncio.run(make_model(openai_server).acomplete(MESSAGES))
    assert len(openai_server.chat_requests) == 1


def test_acomplete_concurrent_calls(openai_server: OpenAITestServer) -> None:
    openai_server.default_reply = lambda req: f"echo: {req.last_user_text}"
    model = make_model(openai_server)

    async def main() -> list[str]:
        rs = await asyncio.gather(*(model.acomplete([Message("user", f"q{i}")]) for i in range(5)))
        return [r.text for r in rs]

    assert asyncio.run(main()) == [f"echo: q{i}" for i in range(5)]


# --------------------------------------------------------------------------- scripted model


def test_scripted_replies_in_order_and_records_requests() -> None:
    model = ScriptedModel(["first", Message("assistant", "second")])
    a = model.complete([Message("user", "one")])
    b = model.complete([Message("user", "one"), a.message, Message("user", "two")], tools=[{"type": "function"}])
    assert (a.text, b.text) == ("first", "second")
    assert model.requests == [
        [Message("user", "one")],
        [Message("user", "one"), Message("assistant", "first"), Message("user", "two")],
    ]
    assert model.tool_schemas == [None, [{"type": "function"}]]
    assert model.remaining == 0
    assert a.duration == 0.0 and a.model == "scripted"
    assert a.usage == Usage(1, 2, 1)  # "one" -> 1 token, "first" -> 2 tokens (chars / 4, rounded up)


def test_scripted_callable_replies_see_the_conversation() -> None:
    model = ScriptedModel(
        [
            "```python\nprint(6 * 7)\n```",
            lambda msgs: f"The answer is {msgs[-1].content.strip()}.",
            lambda msgs: Message("assistant", "", tool_calls=(ToolCallRequest("c1", "done", "{}"),)),
        ]
    )
    first = model.complete([Message("user", "6*7?")])
    second = model.complete([Message("user", "6*7?"), first.message, Message("user", "42\n")])
    third = model.complete([Message("user", "finish")])
    assert second.text == "The answer is 42."
    assert third.message.tool_calls[0].name == "done"
    assert third.finish_reason == "tool_calls"


def test_scripted_exhaustion_is_a_clear_error() -> None:
    model = ScriptedModel(["only one", "two"])
    model.complete([])
    model.complete([])
    with pytest.raises(ModelOutputError, match=r"scripted model has no reply left \(2 given\)"):
        model.complete([Message("user", "more?")])
    assert len(model.requests) == 3  # the failed call is recorded too


def test_scripted_stream_chunks_then_response() -> None:
    text = "The quick brown fox jumps over the lazy dog."
    model = ScriptedModel([text, ""])
    deltas, final = run_stream(model, [Message("user", "go")])
    assert 1 < len(deltas) <= 4
    assert "".join(deltas) == final.text == text
    assert final.usage.output_tokens == (len(text) + 3) // 4
    deltas, final = run_stream(model, [Message("user", "go")])
    assert deltas == [] and final.text == ""


def test_scripted_acomplete() -> None:
    model = ScriptedModel(["async scripted"], name="replay")
    r = asyncio.run(model.acomplete([Message("user", "hi")]))
    assert r.text == "async scripted" and r.model == "replay"


# --------------------------------------------------------------------------- function calling (ReAct)


def test_interleaved_streamed_tool_calls_are_assembled(openai_server: OpenAITestServer) -> None:
    # Three calls whose fragments arrive interleaved, names split across chunks, ids only once,
    # arguments in 3-character pieces: the real openai client parses the SSE, our state assembles it.
    calls = (ToolCall("get_weather", {"city": "Paris", "days": 3}, "call_a"),
             ToolCall("get_weather", {"city": "Oslo"}, "call_b"),
             ToolCall("convert_currency", {"amount": 12.5, "to_currency": "EUR"}, "call_c"))
    openai_server.plan_tool_calls(calls, text="Checking.", interleave_tool_calls=True, fragment_size=3)
    deltas, final = run_stream(make_model(openai_server), tools=[{"type": "function", "function": {"name": "x"}}])
    assert "".join(deltas) == "Checking."  # fragments never leak into the text
    assert final.message.tool_calls == (
        ToolCallRequest("call_a", "get_weather", '{"city": "Paris", "days": 3}'),
        ToolCallRequest("call_b", "get_weather", '{"city": "Oslo"}'),
        ToolCallRequest("call_c", "convert_currency", '{"amount": 12.5, "to_currency": "EUR"}'),
    )
    assert final.finish_reason == "tool_calls"
    (request,) = openai_server.chat_requests
    assert request.stream and request.body["tools"][0]["function"]["name"] == "x"


def test_the_server_really_interleaves(openai_server: OpenAITestServer) -> None:
    # The fixture itself: with interleaving on, fragments of different calls alternate.
    import openai

    openai_server.plan_tool_calls((ToolCall("aa", {"x": 1}, "i1"), ToolCall("bb", {"y": 2}, "i2")),
                                  interleave_tool_calls=True, fragment_size=2)
    client = openai.OpenAI(base_url=openai_server.base_url, api_key="k", max_retries=0)
    order = []
    with client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True) as chunks:
        for chunk in chunks:
            for choice in chunk.choices:
                for tc in choice.delta.tool_calls or ():
                    order.append(tc.index)
    assert order[:4] == [0, 1, 0, 1]


def test_seed_and_temperature_are_sent(openai_server: OpenAITestServer) -> None:
    openai_server.plan_text("ok")
    make_model(openai_server, seed=7, temperature=0.0).complete(MESSAGES)
    (request,) = openai_server.chat_requests
    assert request.body["seed"] == 7 and request.body["temperature"] == 0.0
    openai_server.plan_text("ok")
    make_model(openai_server).complete(MESSAGES)
    assert "seed" not in openai_server.chat_requests[-1].body


def test_scripted_tool_call_replies() -> None:
    model = ScriptedModel([ScriptedModel.tool_calls(("add", {"a": 1}), ("bad", "{not json"), text="Two calls.")])
    r = model.complete(MESSAGES, tools=[{"type": "function"}])
    assert r.text == "Two calls." and r.finish_reason == "tool_calls"
    assert r.message.tool_calls == (ToolCallRequest("call_0", "add", '{"a": 1}'),
                                    ToolCallRequest("call_1", "bad", "{not json"))
    assert model.tool_schemas == [[{"type": "function"}]]
