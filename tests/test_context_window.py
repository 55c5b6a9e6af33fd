"""Knowing the context window and counting prompt tokens (issue 31, item 1).

The window: given, else read from the endpoint's model list, else learned from a context-length
error; always the real ``openai`` client over HTTP to the local test server, which enforces a
window in the error styles of OpenAI, vLLM and llama.cpp. Token counts: ``cl100k_base`` where it
is the model's tokenizer, a conservative estimate otherwise.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import pickle
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codeact import models as models_module
from codeact.models import _openai as openai_model_module
from codeact.catalog import cl100k_encoding
from codeact.context_window import (
    MESSAGE_OVERHEAD,
    TOOL_CALL_OVERHEAD,
    context_window,
    count_tokens,
    overflow_numbers,
    tokenizer_name,
    window_from_model_list,
)
from codeact.errors import ConfigError, ContextOverflowError, ModelError
from codeact.messages import ImagePart, Message, ModelResponse, ToolCallRequest
from codeact.models import OpenAIModel, ScriptedModel
from tests.openai_server import Fault, OpenAITestServer, free_port, prompt_tokens

pytestmark = pytest.mark.timeout(60)

LONG = [Message("system", "You are terse."), Message("user", "tell me about it " * 300)]
SHORT = [Message("user", "hi")]


def make_model(server: OpenAITestServer, **options: Any) -> OpenAIModel:
    settings_: dict[str, Any] = {"base_url": server.base_url, "api_key": "sk-test", "timeout": 5,
                                 "max_retries": 2, "backoff": 0.01, "max_backoff": 0.1}
    settings_.update(options)
    return OpenAIModel("test-model", **settings_)


def model_list_reads(server: OpenAITestServer) -> int:
    return sum(1 for r in server.requests if r.method == "GET" and r.path.endswith("/models"))


def cl100k(text: str) -> int:
    return len(cl100k_encoding().encode(text, disallowed_special=()))


# --------------------------------------------------------------------------- a given window


def test_a_given_window_wins_over_the_list_and_errors(openai_server: OpenAITestServer) -> None:
    openai_server.context_window, openai_server.announce_window = 300, True
    model = make_model(openai_server, context_window=2048)
    assert model.context_window == 2048 and context_window(model) == 2048
    assert model_list_reads(openai_server) == 0  # nothing to discover when it is given
    with pytest.raises(ContextOverflowError) as info:
        model.complete(LONG)
    assert info.value.limit == 300  # the error still says what the endpoint enforces
    assert context_window(model) == 2048  # ... but the given window stays the model's window
    model.context_window = 4096
    assert context_window(model) == 4096


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "4096"])
def test_a_bad_given_window_is_one_clear_error(openai_server: OpenAITestServer, bad: Any) -> None:
    with pytest.raises(ConfigError, match="context_window must be a positive number of tokens"):
        make_model(openai_server, context_window=bad)


def test_any_model_with_a_context_window_attribute() -> None:
    model = ScriptedModel(["hi"])
    assert context_window(model) is None
    model.context_window = 8000  # type: ignore[attr-defined]
    assert context_window(model) == 8000


# --------------------------------------------------------------------------- the model list


@pytest.mark.parametrize("field", [True, "max_model_len", "context_length", "context_window", "max_context_length",
                                   "loaded_context_length", "meta.n_ctx_train", "meta.n_ctx",
                                   "top_provider.context_length", "metadata.context_length"])
def test_window_read_from_the_model_list(field: bool | str) -> None:
    with OpenAITestServer(context_window=4096, announce_window=field) as server:
        model = make_model(server)
        assert model.context_window is None  # construction and the attribute never touch the network
        assert server.requests == []
        assert context_window(model) == 4096
        assert model.context_window == 4096


def test_model_list_is_read_once_and_lazily(openai_server: OpenAITestServer) -> None:
    model = make_model(openai_server)  # the list announces nothing
    assert openai_server.requests == []
    assert [context_window(model) for _ in range(3)] == [None, None, None]
    assert model_list_reads(openai_server) == 1
    model.complete(SHORT)
    assert context_window(model) is None and model_list_reads(openai_server) == 1
    announced = make_model(openai_server)
    openai_server.models = [{"id": "test-model", "max_model_len": 8192}]
    assert [context_window(announced) for _ in range(3)] == [8192] * 3
    assert model_list_reads(openai_server) == 2  # one per model instance


def test_the_model_named_is_picked_from_a_list_of_several(openai_server: OpenAITestServer) -> None:
    openai_server.models = [{"id": "small", "max_model_len": 1024}, {"id": "test-model", "context_length": 32768},
                            {"id": "big", "max_model_len": 131072}]
    assert context_window(make_model(openai_server)) == 32768
    # A server that lists one model under its own name (llama.cpp lists the file) serves that one.
    openai_server.models = [{"id": "/models/qwen2.5-7b-q4.gguf", "meta": {"n_ctx_train": 32768}}]
    assert context_window(make_model(openai_server)) == 32768
    openai_server.models = [{"id": "small", "max_model_len": 1024}, {"id": "big", "max_model_len": 131072}]
    assert context_window(make_model(openai_server)) is None  # several, none named: unknown


MALFORMED_LISTS = [
    b"not json at all",
    b"",
    b'{"data": [{"id": "test-model", "max_model_len": 40',  # cut short
    [1, 2, 3],
    {"data": "everything"},
    {"data": [1, None, "x"]},
    {"object": "list"},
    {"data": [{"id": "test-model", "max_model_len": "lots"}]},
    {"data": [{"id": "test-model", "max_model_len": -4096}]},
    {"data": [{"id": "test-model", "max_model_len": 0}]},
    {"data": [{"id": "test-model", "max_model_len": True}]},
    {"data": [{"id": "test-model", "max_model_len": 10**30}]},
    {"data": [{"id": "test-model", "max_model_len": 4096.5}]},
    {"data": [{"id": "test-model", "max_model_len": [4096]}]},
    {"data": [{"id": "test-model", "meta": "n_ctx_train=4096"}]},
    {"data": [{"id": {"nested": 1}, "max_model_len": 4096}, {"id": "other", "max_model_len": 4096}]},
]


@pytest.mark.parametrize("payload", MALFORMED_LISTS, ids=range(len(MALFORMED_LISTS)))
def test_a_malformed_model_list_means_unknown(openai_server: OpenAITestServer, payload: Any) -> None:
    openai_server.models_response = payload
    model = make_model(openai_server)
    assert context_window(model) is None
    assert model.complete(SHORT).text == "OK"  # and the run goes on


def test_an_oversized_model_list_is_not_read_to_the_end(openai_server: OpenAITestServer) -> None:
    entries = [{"id": f"model-{i}", "max_model_len": 4096} for i in range(2000)]
    openai_server.models_response = {"data": [*entries, {"id": "test-model", "max_model_len": 8192}]}
    model = make_model(openai_server)
    model._window.list_max_bytes = 10_000  # the bound (16 MB) scaled down to this list
    assert context_window(model) is None
    assert context_window(make_model(openai_server)) == 8192  # within the real bound it is read


def test_a_list_that_cannot_be_read_means_unknown() -> None:
    model = OpenAIModel("test-model", base_url=f"http://127.0.0.1:{free_port()}/v1", api_key="x", timeout=2)
    assert context_window(model) is None
    assert context_window(model) is None  # tried once; not again


def test_window_from_model_list_directly() -> None:
    assert window_from_model_list({"models": [{"name": "llama3", "context_length": "8192"}]}, "llama3") == 8192
    assert window_from_model_list([{"id": "m", "context_window": 131072.0}], "m") == 131072
    # LM Studio: the loaded context wins over the model's maximum.
    assert window_from_model_list({"data": [{"id": "m", "max_context_length": 131072,
                                             "loaded_context_length": 8192}]}, "m") == 8192
    assert window_from_model_list(None, "m") is None


# --------------------------------------------------------------------------- learned from a context-length error


def _call(model: OpenAIModel, how: str, messages: list[Message]) -> ModelResponse:
    if how == "complete":
        return model.complete(messages)
    if how == "acomplete":
        return asyncio.run(model.acomplete(messages))
    *_, final = model.stream(messages)
    assert isinstance(final, ModelResponse)
    return final


@pytest.mark.parametrize("how", ["complete", "stream", "acomplete"])
@pytest.mark.parametrize("style", ["openai", "vllm", "vllm-legacy", "llamacpp"])
def test_window_learned_from_each_error_style(style: str, how: str) -> None:
    with OpenAITestServer(context_window=500, window_error_style=style) as server:  # type: ignore[arg-type]
        max_tokens = None if style == "llamacpp" else 64
        model = make_model(server, max_tokens=max_tokens)
        server.plan_text("fits")
        with pytest.raises(ContextOverflowError) as info:
            _call(model, how, LONG)
        assert len(server.chat_requests) == 1  # never retried
        assert server.pending == 1  # the refused request consumed no planned reply
        error = info.value
        assert error.reason == "context_overflow"
        assert error.limit == 500
        assert error.requested == prompt_tokens(server.chat_requests[0].body) + (max_tokens or 0)
        assert f"({error.limit} tokens; the request needed {error.requested})" in str(error)
        assert model.context_window == 500 and context_window(model) == 500
        assert model_list_reads(server) == 0  # learned: no need to ask the list
        assert _call(model, how, SHORT).text == "fits"
        assert pickle.loads(pickle.dumps(error)).requested == error.requested  # Ray ships errors


def test_an_announced_window_then_a_smaller_enforced_one(openai_server: OpenAITestServer) -> None:
    # llama.cpp lists the length the model was trained for; the server may run with less (-c 512).
    openai_server.models = [{"id": "test-model", "meta": {"n_ctx_train": 32768}}]
    openai_server.context_window, openai_server.window_error_style = 512, "llamacpp"
    model = make_model(openai_server)
    assert context_window(model) == 32768
    with pytest.raises(ContextOverflowError):
        model.complete(LONG)
    assert context_window(model) == 512  # what the endpoint enforces wins over what it listed


# Real messages of endpoints that refuse a prompt for its length: (message, type, fields, limit, requested).
REFUSALS = [
    ("This model's maximum context length is 8192 tokens. However, your messages resulted in 9013 tokens. "
     "Please reduce the length of the messages.", "invalid_request_error", {}, 8192, 9013),
    ("This model's maximum context length is 4096 tokens. However, you requested 5120 tokens (4096 in the "
     "messages, 1024 in the completion). Please reduce the length of the messages or completion.",
     "BadRequestError", {}, 4096, 5120),
    ("This model's maximum context length is 4096 tokens. However, you requested 1024 output tokens and your prompt "
     "contains at least 4097 input tokens, for a total of at least 5121 tokens. Please reduce the length of the "
     "input prompt or the number of requested output tokens.", "BadRequestError", {}, 4096, 5121),
    ("The model has a maximum context length of 4096 tokens, but you requested 5000 tokens.", None, {}, 4096, 5000),
    ("This model's maximum context length is 1536 tokens. However, your request has 4176 input tokens. Please "
     "reduce the length of the input messages.", "BadRequestError", {}, 1536, 4176),
    ("'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context length is 4096 "
     "tokens and your request has 2778 input tokens (8000 > 4096 - 2778). None", "BadRequestError", {}, 4096, 10778),
    ("The decoder prompt (length 8825) is longer than the maximum model length of 8192. Make sure that "
     "`max_model_len` is no smaller than the number of text tokens.", "BadRequestError", {}, 8192, 8825),
    ("the request exceeds the available context size, try increasing it", "exceed_context_size_error",
     {"n_prompt_tokens": 5000, "n_ctx": 4096}, 4096, 5000),
    ("request (4476 tokens) exceeds the available context size (4096 tokens), try increasing it",
     "exceed_context_size_error", {"n_prompt_tokens": 4476, "n_ctx": 4096}, 4096, 4476),
    ("request (4476 tokens) exceeds the available context size (4096 tokens), try increasing it",
     "invalid_request_error", {}, 4096, 4476),
    ("Trying to keep the first 10136 tokens when context the overflows. However, the model is loaded with context "
     "length of only 7866 tokens, which is not enough. Try to load the model with a larger context length, or "
     "provide a shorter input", None, {}, 7866, 10136),
    ("Cannot truncate prompt with n_keep (15028) >= n_ctx (7424)", None, {}, 7424, 15028),
    ("This endpoint's maximum context length is 8192 tokens. However, you requested about 9500 tokens (9000 of "
     "text input, 500 in the output). Please reduce the length of either one.", None, {}, 8192, 9500),
    ("litellm.ContextWindowExceededError: litellm.BadRequestError: prompt is too long: 210000 tokens > 200000 "
     "maximum", None, {}, 200000, 210000),
    ("Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 `inputs` tokens and "
     "200 `max_new_tokens`", "validation", {}, 4096, 4200),
    ("Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length",
     "invalid_request_message_error", {}, 32768, 40000),
    ("The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).", None, {},
     1048576, 1200000),
    ("The input (5000 tokens) is longer than the model's context length (4096 tokens).", None, {}, 4096, 5000),
    ("This model's maximum prompt length is 131072 but the request contains 140000 tokens.", None, {},
     131072, 140000),
    ("Please reduce the length of the messages or completion. Current length is 9000 while limit is 8192",
     None, {}, 8192, 9000),
    ("the input length exceeds the context length", None, {}, None, None),  # Ollama: no numbers
]


@pytest.mark.parametrize(("message", "error_type", "fields", "limit", "requested"), REFUSALS,
                         ids=[r[0][:40] for r in REFUSALS])
def test_each_endpoint_refusal_is_an_overflow_with_its_numbers(
    openai_server: OpenAITestServer, message: str, error_type: str | None, fields: dict, limit: int | None,
    requested: int | None,
) -> None:
    error: dict[str, Any] = {"message": message, "type": error_type, "param": None, "code": 400, **fields}
    openai_server.plan(Fault("error", status=400, body={"error": error}))
    model = make_model(openai_server)
    with pytest.raises(ContextOverflowError) as info:
        model.complete(SHORT)
    assert len(openai_server.chat_requests) == 1  # not retried
    assert (info.value.limit, info.value.requested) == (limit, requested)
    assert model.context_window == limit
    assert overflow_numbers(message, fields) == (limit, requested)


@pytest.mark.parametrize("status", [400, 500])
def test_ollamas_bare_error_string_is_an_overflow(openai_server: OpenAITestServer, status: int) -> None:
    openai_server.plan(Fault("error", status=status, body={"error": "the input length exceeds the context length"}))
    with pytest.raises(ContextOverflowError) as info:
        make_model(openai_server).complete(SHORT)
    assert (info.value.limit, info.value.requested) == (None, None)
    assert len(openai_server.chat_requests) == 1


def test_numbers_past_the_first_300_characters_are_read(openai_server: OpenAITestServer) -> None:
    wrapped = ("litellm.ContextWindowExceededError: litellm.BadRequestError: OpenAIException - " * 4
               + "This model's maximum context length is 16384 tokens. However, your messages resulted in 17000 "
               "tokens. Please reduce the length of the messages.")
    openai_server.plan_error(400, wrapped)
    model = make_model(openai_server)
    with pytest.raises(ContextOverflowError) as info:
        model.complete(SHORT)
    assert (info.value.limit, info.value.requested) == (16384, 17000)
    assert model.context_window == 16384


def test_a_context_size_error_from_a_500_is_an_overflow_too(openai_server: OpenAITestServer) -> None:
    openai_server.plan_error(500, "the request exceeds the available context size, try increasing it",
                             type="server_error")
    with pytest.raises(ContextOverflowError):
        make_model(openai_server).complete(SHORT)
    assert len(openai_server.chat_requests) == 1


@pytest.mark.parametrize("message", [
    "Invalid value for 'temperature': must be between 0 and 2",
    "max_tokens is too large: 100000. This model supports at most 16384 completion tokens, whereas you provided "
    "100000.",
    "Invalid 'messages[1].content': string too long. Expected a string with maximum length 1048576",
])
def test_other_refusals_are_not_overflows(openai_server: OpenAITestServer, message: str) -> None:
    openai_server.plan_error(400, message)
    model = make_model(openai_server)
    with pytest.raises(ModelError) as info:
        model.complete(SHORT)
    assert type(info.value) is ModelError
    assert model.context_window is None


# --------------------------------------------------------------------------- counting tokens

CORPUS = {
    "english": (models_module.__doc__ or "") * 20,
    "code": inspect.getsource(openai_model_module),
    "json": json.dumps([{"id": i, "price": i * 1.37, "name": f"item{i}", "tags": ["a", "b"]} for i in range(300)]),
    "table": "\n".join(f"{i:4d}  {i * 0.123456:10.6f}  {i ** 2:8d}  {-i * 3.3:8.2f}" for i in range(300)),
    "chinese": ("长会话不会撞上上下文窗口。持久会话让聊天可以持续数天，"
                "但当对话超出模型的上下文窗口时，它仍然会失败。") * 20,
    "japanese": "日本語のテキストはトークナイザーによって扱いが大きく異なります。漢字、ひらがな、カタカナ。" * 20,
    "korean": "한국어 텍스트는 토크나이저마다 다르게 처리됩니다. 이 문장은 시험용입니다." * 20,
    "russian": "Длинные сессии никогда не упираются в окно контекста модели." * 20,
    "emoji": "🙂🚀🎉👍🏽✨" * 50,
    "rare cjk": "𠀀𠀁𠀂𪚥龘靐齉" * 30,
    "hex": "".join(f"{i * 2654435761 % 2 ** 32:08x}" for i in range(300)),
}


@pytest.mark.parametrize("name", ["gpt-4", "gpt-4-turbo", "gpt-4-0613", "gpt-4-32k", "gpt-3.5-turbo",
                                  "openai/gpt-4", "GPT-4"])
def test_gpt4_names_count_exactly_with_cl100k(name: str) -> None:
    model = ScriptedModel([], name=name)
    assert tokenizer_name(model) == "cl100k_base"
    call = ToolCallRequest("call_0", "get_weather", '{"city": "Paris"}')
    messages = [Message("system", CORPUS["english"][:3000]), Message("user", CORPUS["code"][:3000]),
                Message("assistant", "", tool_calls=(call,)), Message("tool", "18C", tool_call_id="call_0")]
    expected = sum(MESSAGE_OVERHEAD + cl100k(m.content) for m in messages)
    expected += TOOL_CALL_OVERHEAD + cl100k("get_weather") + cl100k('{"city": "Paris"}')
    assert count_tokens(model, messages) == expected


#: o200k_base token ids of a few texts, as an independent implementation (the Rust ``bpe-openai``
#: tokenizer with its own copy of the vocabulary) gives them.
O200K_IDS = {
    "hello world": [24912, 2375],
    "Die Größe des DataFrames ist 1234567.": [8796, 74095, 731, 4833, 45267, 2496, 220, 7633, 19354, 22, 13],
    "长会话不会撞上上下文窗口。": [11329, 6016, 13920, 88354, 173848, 4286, 176919, 4883, 165707, 788],
    "    def f(x):\n        return x**2\n": [271, 1056, 285, 4061, 1883, 309, 622, 1215, 410, 17, 198],
}


@pytest.mark.parametrize("name", ["gpt-4o", "gpt-4o-mini", "gpt-4o-2024-08-06", "chatgpt-4o-latest", "gpt-4.1",
                                  "gpt-4.1-nano", "gpt-4.5-preview", "gpt-5", "gpt-5-mini", "gpt-5.1", "o1",
                                  "o1-mini", "o3", "o3-mini", "o4-mini", "o4-mini-2025-04-16", "openai/gpt-4o",
                                  "ft:gpt-4o-mini:acme::abc123", "gpt-oss-20b", "gpt-oss:120b", "GPT-4o"])
def test_gpt4o_family_names_count_exactly_with_o200k(name: str) -> None:
    model = ScriptedModel([], name=name)
    assert tokenizer_name(model) == "o200k_base"
    messages = [Message("user", text) for text in O200K_IDS]
    assert count_tokens(model, messages) == sum(MESSAGE_OVERHEAD + len(ids) for ids in O200K_IDS.values())


def test_the_bundled_o200k_vocabulary_encodes_as_openai_does() -> None:
    from codeact.catalog import bundled_encoding

    encoding = bundled_encoding("o200k_base")
    for text, ids in O200K_IDS.items():
        assert encoding.encode(text) == ids and encoding.decode(ids) == text
    assert encoding.n_vocab == 200019  # 199998 ranks, <|endoftext|> 199999, <|endofprompt|> 200018
    # Counted as text, as the chat format sends it: special-token text in a message is not a special token.
    assert count_tokens(ScriptedModel([], name="gpt-4o"), [Message("user", "<|endoftext|>")]) > MESSAGE_OVERHEAD + 1


@pytest.mark.parametrize("name", ["qwen2.5-coder", "meta-llama/Llama-3.1-8B-Instruct", "test-model", "",
                                  "o1x", "o30", "gpt-4oo", "gpt-6", "my-o3-finetune"])
def test_other_names_get_the_estimate(name: str) -> None:
    assert tokenizer_name(ScriptedModel([], name=name)) == "estimate"


def test_a_given_tokenizer_counts(openai_server: OpenAITestServer) -> None:
    messages = [Message("user", "one two three four"), Message("assistant", "five six")]
    words = make_model(openai_server, tokenizer=lambda text: len(text.split()))
    assert tokenizer_name(words) == "custom"
    assert count_tokens(words, messages) == 2 * MESSAGE_OVERHEAD + 6
    words.tokenizer = lambda text: 1  # a new tokenizer counts anew (nothing cached from the old one)
    assert count_tokens(words, messages) == 2 * MESSAGE_OVERHEAD + 2
    exact = make_model(openai_server, tokenizer="cl100k_base")  # e.g. an Azure deployment of GPT-4 named "prod"
    assert tokenizer_name(exact) == "cl100k_base"
    assert count_tokens(exact, messages) == 2 * MESSAGE_OVERHEAD + cl100k("one two three four") + cl100k("five six")
    newer = make_model(openai_server, tokenizer="o200k_base")  # e.g. a GPT-4o deployment named "prod"
    assert tokenizer_name(newer) == "o200k_base"
    assert count_tokens(newer, [Message("user", "hello world")]) == MESSAGE_OVERHEAD + len(O200K_IDS["hello world"])
    with pytest.raises(ConfigError, match="tokenizer must be"):
        make_model(openai_server, tokenizer="p50k_base")


@pytest.mark.parametrize("kind", sorted(CORPUS))
def test_the_estimate_is_never_below_cl100k_on_the_corpus(kind: str) -> None:
    text = CORPUS[kind]
    estimate = count_tokens(ScriptedModel([], name="test-model"), [Message("user", text)])
    assert estimate >= MESSAGE_OVERHEAD + cl100k(text)
    if kind in ("english", "code"):
        assert estimate >= 1.25 * cl100k(text)  # room for tokenizers less thrifty than cl100k on prose and code
    if kind == "table":
        assert estimate >= sum(c.isdigit() for c in text)  # tokenizers that split numbers digit by digit


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400) | st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=400)
       | st.text(alphabet="0123456789 .,-\n", max_size=400))
def test_the_estimate_is_never_below_cl100k(text: str) -> None:
    estimate = count_tokens(ScriptedModel([], name="some-local-model"), [Message("user", text)])
    assert estimate >= MESSAGE_OVERHEAD + cl100k(text)


def test_images_count_their_tokens() -> None:
    image = ImagePart(b"\x89PNG...", width=1024, height=768)
    for name in ("gpt-4-turbo", "test-model"):
        model = ScriptedModel([], name=name)
        plain = count_tokens(model, [Message("user", "look")])
        assert count_tokens(model, [Message("user", "look", images=(image, image))]) == plain + 2 * image.tokens
    assert image.tokens == 765


def test_counts_are_additive_and_stable_over_a_growing_history() -> None:
    model = ScriptedModel([], name="test-model")
    history = [Message("user" if i % 2 else "assistant", f"step {i}: " + "x = 1\n" * (i % 7)) for i in range(200)]
    whole = count_tokens(model, history)
    assert whole == sum(count_tokens(model, [m]) for m in history)
    assert count_tokens(model, history) == whole  # counted again (from the per-message cache): the same
    copies = [Message(m.role, m.content) for m in history]  # equal messages made anew count the same
    assert count_tokens(model, copies) == whole
    assert count_tokens(model, []) == 0


def _png(width: int, height: int) -> bytes:
    """The head of a PNG (signature and IHDR): enough for the test server to read its size."""
    return b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\x0dIHDR" + struct.pack(">II", width, height) + b"\x08\x02\x00\x00\x00"


TOOLS = [{"type": "function", "function": {"name": "search", "description": "Search the web.", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}, "required": ["q"]}}}]


@pytest.mark.parametrize("name", ["gpt-4-turbo", "test-model"])
def test_counts_against_what_the_window_enforces(name: str) -> None:
    # What the compaction counts against what the test server enforces (cl100k): exact for a GPT-4
    # name, never below for the estimate, so a history that the count says fits always fits.
    call = ToolCallRequest("call_1", "search", json.dumps({"q": "context windows", "n": 10}))
    image = ImagePart(_png(600, 400), width=600, height=400)
    messages = [Message("system", CORPUS["code"][:2000]), Message("user", CORPUS["chinese"][:300], images=(image,)),
                Message("assistant", "", tool_calls=(call,)), Message("tool", CORPUS["table"][:1500],
                                                                      tool_call_id="call_1"),
                Message("user", CORPUS["json"][:1500])]
    with OpenAITestServer(models=[name]) as server:
        model = OpenAIModel(name, base_url=server.base_url, api_key="x", timeout=5)
        model.complete(messages, tools=TOOLS)
        enforced = prompt_tokens(server.chat_requests[-1].body)
    counted = count_tokens(model, messages, tools=TOOLS)
    if name == "test-model":
        assert counted >= enforced
    else:
        assert counted == enforced


# --------------------------------------------------------------------------- the test server's window


def test_the_test_server_enforces_its_window(openai_server: OpenAITestServer) -> None:
    import openai

    client = openai.OpenAI(base_url=openai_server.base_url, api_key="x", max_retries=0)
    openai_server.context_window = 40
    openai_server.plan_text("answer")
    fits = [{"role": "user", "content": "hello there"}]
    body = {"model": "test-model", "messages": fits}
    assert prompt_tokens(body) == MESSAGE_OVERHEAD + cl100k("hello there")
    reply = client.chat.completions.create(model="test-model", messages=fits)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "answer"
    assert reply.usage is not None and reply.usage.prompt_tokens == prompt_tokens(body)
    assert prompt_tokens(body) == 6
    with pytest.raises(openai.BadRequestError) as info:  # 6 prompt tokens + 35 for the completion > 40
        client.chat.completions.create(model="test-model", messages=fits, max_tokens=35)  # type: ignore[arg-type]
    assert info.value.code == "context_length_exceeded"
    too_long = [{"role": "user", "content": "word " * 50}]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="test-model", messages=too_long)  # type: ignore[arg-type]
    openai_server.window_error_style = "llamacpp"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="test-model", messages=too_long, stream=True)  # type: ignore[arg-type]
    assert info.value.body["n_ctx"] == 40  # type: ignore[index]
    assert info.value.body["n_prompt_tokens"] == prompt_tokens({"messages": too_long})  # type: ignore[index]
    assert openai_server.pending == 0
    listed = client.models.list().data[0]
    assert "max_model_len" not in (listed.model_extra or {})  # enforced, never announced
    openai_server.announce_window = "context_length"
    assert (client.models.list().data[0].model_extra or {})["context_length"] == 40
