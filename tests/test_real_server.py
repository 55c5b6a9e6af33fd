"""The real-server tier: codeact against llama.cpp's OpenAI-compatible server on a small real model.

Every other model-facing test talks to tests/openai_server.py, which fails the way we wrote it to.
Here the server is llama-cpp-python's (tests/llama_server.py: SmolLM2-135M-Instruct, a 2,048-token
window it enforces, its own chat template, its own token counts and error shapes), reached through
the real ``openai`` client. The model is tiny and mostly wrong: these tests assert what codeact does
(a classified status, no crash, no hang, counts that add up, nothing lost), never what the model says.

A recording proxy (:class:`Recorder`) sits between the client and the server where a test needs the
server's own numbers: every request, its HTTP status and the usage the server reported.

Where a test needs one exact step the small model would not write (code that plots, code that calls a
child agent), :class:`ScriptedFirst` gives the first replies and every later call goes to the server.
"""

from __future__ import annotations

import http.client
import json
import random
import re
import threading
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from codeact import CodeActAgent, OpenAIModel
from codeact.context_window import context_window
from codeact.errors import ContextOverflowError
from codeact.events import Compacted, ModelOutput, Observation, RunFinished, TextDelta
from codeact.messages import Message, ModelResponse
from codeact.runlog import RunLog
from tests.llama_server import LlamaServer

#: A small model on 2 shared cores takes seconds per request.
pytestmark = pytest.mark.timeout(900)

#: Statuses a run may end with; "error" only where a test says why it is acceptable.
CLASSIFIED = {"success", "max_steps", "invalid_output", "error", "cancelled", "budget_exceeded", "interrupted"}
#: Tokens a reply may take: the model rambles, and the window is small.
REPLY_TOKENS = 64


# --------------------------------------------------------------------------- a recording proxy


@dataclass
class Exchange:
    """One request through the proxy: what was asked and what the server said."""

    path: str
    body: dict[str, Any]
    status: int = 0
    usage: dict[str, int] = field(default_factory=dict)
    error: str = ""

    @property
    def had_images(self) -> bool:
        return any(isinstance(m.get("content"), list) and any(p.get("type") == "image_url" for p in m["content"])
                   for m in self.body.get("messages", ()))


class Recorder:
    """A loopback HTTP proxy in front of the model server that records each chat request and its answer.

    Streams are relayed as they arrive (the usage chunk, when the server sends one, is recorded)."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.host, self.port, self.prefix = parts.hostname or "127.0.0.1", parts.port or 80, parts.path
        self.exchanges: list[Exchange] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._relay(None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self._relay(self.rfile.read(length))

            def _relay(self, data: bytes | None) -> None:
                exchange = None
                if data is not None and self.path.endswith("/chat/completions"):
                    exchange = Exchange(self.path, json.loads(data))
                    recorder.exchanges.append(exchange)
                upstream = http.client.HTTPConnection(recorder.host, recorder.port, timeout=600)
                headers = {"Content-Type": "application/json"} if data is not None else {}
                upstream.request(self.command, self.path, body=data, headers=headers)
                response = upstream.getresponse()
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(name, value)
                self.send_header("Connection", "close")  # the body ends when the connection does
                self.end_headers()
                seen = b""
                while True:
                    chunk = response.read1(65536)
                    if not chunk:
                        break
                    seen += chunk
                    self.wfile.write(chunk)
                    self.wfile.flush()
                upstream.close()
                self.close_connection = True
                if exchange is not None:
                    exchange.status = response.status
                    exchange.usage, exchange.error = _answer_of(seen)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{self.prefix}"

    def __enter__(self) -> Recorder:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answered(self) -> list[Exchange]:
        return [e for e in self.exchanges if e.status == 200]


def _answer_of(body: bytes) -> tuple[dict[str, int], str]:
    """The usage a response (JSON, or an SSE stream's usage chunk) reported, and an error's message."""
    text = body.decode("utf-8", "replace")
    documents = []
    if text.lstrip().startswith("{"):
        documents.append(text)
    else:
        documents += [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    usage: dict[str, int] = {}
    error = ""
    for document in documents:
        try:
            value = json.loads(document)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("usage"), dict):
            usage = value["usage"]
        if isinstance(value, dict) and value.get("error"):
            error = json.dumps(value["error"])[:500]
    return usage, error


@pytest.fixture
def recorder(llama_server: LlamaServer) -> Iterator[Recorder]:
    with Recorder(llama_server.base_url) as proxy:
        yield proxy


def real_model(base_url: str, llama_server: LlamaServer, **options: Any) -> OpenAIModel:
    options.setdefault("max_tokens", REPLY_TOKENS)
    return OpenAIModel(llama_server.model, base_url=base_url, api_key="none", temperature=0.0, seed=0,
                       timeout=300, max_retries=1, backoff=0.2, **options)


class ScriptedFirst:
    """The Model protocol: the given replies first, then every call to ``real`` (attributes are real's)."""

    def __init__(self, replies: Sequence[str], real: OpenAIModel) -> None:
        self.replies = list(replies)
        self.real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def complete(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None) -> ModelResponse:
        if self.replies:
            return ModelResponse(Message("assistant", self.replies.pop(0)), model="scripted")
        return self.real.complete(messages, tools=tools)

    def stream(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None) -> Iterator[Any]:
        if self.replies:
            yield ModelResponse(Message("assistant", self.replies.pop(0)), model="scripted")
            return
        yield from self.real.stream(messages, tools=tools)

    async def acomplete(self, messages: Sequence[Message], *, tools: Sequence[dict] | None = None) -> ModelResponse:
        return self.complete(messages, tools=tools)


def finished(events: list[Any]) -> Any:
    last = events[-1]
    assert isinstance(last, RunFinished), last
    return last.result


def py(code: str) -> str:
    return f"```python\n{code.strip()}\n```"


# --------------------------------------------------------------------------- a run, streaming, usage


@pytest.mark.docker
def test_a_run_ends_classified_and_its_usage_is_the_servers_count(tmp_path: Path, llama_server: LlamaServer,
                                                                 recorder: Recorder) -> None:
    model = real_model(recorder.base_url, llama_server)
    agent = CodeActAgent(model, sandbox="docker", log=tmp_path / "runs.db", max_steps=2)
    result = agent.run("Use Python to compute 17 * 23, then call final_answer with the number.")
    assert result.status in CLASSIFIED - {"error"}, result.error
    answered = recorder.answered()
    assert answered and all(e.usage for e in answered)  # llama.cpp reports usage on every completion
    # Every model call is one request the server answered, and the run's usage is the server's own count.
    assert result.usage.requests == len(answered) == len(result.steps)
    assert result.usage.input_tokens == sum(e.usage["prompt_tokens"] for e in answered)
    assert result.usage.output_tokens == sum(e.usage["completion_tokens"] for e in answered)
    log = RunLog(tmp_path / "runs.db")
    try:
        run = log.get_run(result.run_id)
        assert run.status == result.status and run.usage == result.usage
    finally:
        log.close()


@pytest.mark.docker
def test_streaming_relays_the_reply_as_the_server_sends_it(tmp_path: Path, llama_server: LlamaServer,
                                                           recorder: Recorder) -> None:
    model = real_model(recorder.base_url, llama_server)
    agent = CodeActAgent(model, sandbox="docker", log=False, max_steps=2, stream_model=True)
    events = list(agent.stream("Print the numbers 1 to 3 with Python."))
    result = finished(events)
    assert result.status in CLASSIFIED - {"error"}, result.error
    assert all(e.body.get("stream") is True for e in recorder.exchanges)
    # The deltas of each step add up to exactly the reply the step recorded.
    outputs = [e for e in events if isinstance(e, ModelOutput)]
    assert len(outputs) == len(result.steps) >= 1
    step_texts: list[str] = []
    current = ""
    for e in events:
        if isinstance(e, TextDelta):
            current += e.text
        elif isinstance(e, ModelOutput):
            step_texts.append(current)
            current = ""
    assert step_texts == [o.text for o in outputs] and all(step_texts)
    # Streamed usage: the server's own count when it sends the usage chunk, else codeact's estimate, never zero.
    for exchange, step in zip(recorder.answered(), result.steps, strict=True):
        assert step.usage.requests == 1 and step.usage.input_tokens > 0
        if exchange.usage:
            assert step.usage.input_tokens == exchange.usage["prompt_tokens"]


def test_streamed_and_whole_replies_count_the_same_prompt(llama_server: LlamaServer, recorder: Recorder) -> None:
    model = real_model(recorder.base_url, llama_server, max_tokens=8)
    messages = [Message("system", "You answer briefly."), Message("user", "Name a colour.")]
    whole = model.complete(messages)
    streamed = [p for p in model.stream(messages) if isinstance(p, ModelResponse)][-1]
    assert whole.prompt_tokens == recorder.answered()[0].usage["prompt_tokens"] > 0
    assert whole.usage.input_tokens == whole.prompt_tokens
    if streamed.prompt_tokens is not None:  # the server sent a usage chunk in the stream
        assert streamed.prompt_tokens == whole.prompt_tokens
    else:  # it did not: the estimate (never below a real count for this short prompt by much)
        assert streamed.usage.input_tokens > 0


# --------------------------------------------------------------------------- the window


def test_the_window_is_learned_from_the_servers_real_error(llama_server: LlamaServer, recorder: Recorder) -> None:
    model = real_model(recorder.base_url, llama_server)
    assert context_window(model) is None  # llama.cpp's Python server does not list n_ctx in /models
    digits = " ".join(str(i % 10) for i in range(1800))  # ~3,600 tokens for this tokenizer (one per character)
    with pytest.raises(ContextOverflowError) as info:
        model.complete([Message("user", f"Sum these: {digits}")])
    assert info.value.limit == llama_server.n_ctx and (info.value.requested or 0) > llama_server.n_ctx
    assert len(recorder.exchanges) == 1 and recorder.exchanges[0].status == 400  # refused at once, not retried
    assert context_window(model) == llama_server.n_ctx


@pytest.mark.docker
@pytest.mark.timeout(2400)
def test_a_long_chat_that_carries_data_answers_every_turn(tmp_path: Path, llama_server: LlamaServer,
                                                          recorder: Recorder) -> None:
    # 25 turns, each message carrying 300 numbers (~600 tokens here), against a 2,048-token window the server
    # enforces and does not announce: the history needs many windows; every turn must be answered. One model
    # call a turn (max_steps=1: a reply with code runs it and ends the turn at the step limit) keeps the test
    # within minutes: this model reads about 100 prompt tokens a second on this machine's cores.
    rng = random.Random(5)
    model = real_model(recorder.base_url, llama_server, max_tokens=64)
    agent = CodeActAgent(model, sandbox="docker", log=tmp_path / "runs.db", max_steps=1)
    results, events = [], []
    with agent.session() as chat:
        for k in range(1, 26):
            numbers = " ".join(str(rng.randint(0, 9)) for _ in range(300))
            turn = list(chat.stream(f"Turn {k}: store these numbers in a variable data{k} and print their "
                                    f"mean: {numbers}"))
            events += turn
            results.append(finished(turn))
    bad = [(k, r.status, r.error) for k, r in enumerate(results, 1) if r.status not in ("success", "max_steps")]
    assert not bad
    assert all(r.steps and r.steps[0].model_output for r in results)  # the model replied in every turn
    compacted = [e for e in events if isinstance(e, Compacted)]
    assert compacted and any(e.turns_folded or e.messages_shortened for e in compacted)
    sizes = [e.usage["prompt_tokens"] for e in recorder.answered()]
    refused = [e for e in recorder.exchanges if e.status != 200]
    assert max(sizes) <= llama_server.n_ctx and len(refused) <= 3, [e.error for e in refused]
    # Nothing lost: every message is in the history and the run log, whole.
    users = [m.content for m in chat.messages if m.role == "user" and m.content.startswith("Turn ")]
    assert [int(re.match(r"Turn (\d+):", u).group(1)) for u in users] == list(range(1, 26))  # type: ignore[union-attr]
    assert all(len(u.split(": ", 1)[1].split()) >= 300 for u in users)
    log = RunLog(tmp_path / "runs.db")
    try:
        assert [log.get_run(r.run_id).task for r in results] == [r.task for r in results]
        assert all(len(r.task) > 600 for r in results)
    finally:
        log.close()


def test_a_message_that_alone_exceeds_the_window_ends_the_turn_with_the_three_numbers(
        llama_server: LlamaServer, recorder: Recorder) -> None:
    model = real_model(recorder.base_url, llama_server)
    agent = CodeActAgent(model, sandbox="restricted", log=False, max_steps=2)
    digits = " ".join(str(i % 10) for i in range(1400))  # ~2,800 tokens: more than the whole window
    with agent.session() as chat:
        result = chat.send(f"Sum these numbers: {digits}")
        assert result.status == "error" and result.error
        match = re.search(r"the system prompt takes ~([\d,]+) tokens, the current message ~([\d,]+), and "
                          r"(\d+) for the reply \(max_tokens\)", result.error)
        assert match, result.error
        system, message, reply = (int(g.replace(",", "")) for g in match.groups())
        assert system + message + reply > llama_server.n_ctx and reply == REPLY_TOKENS
        assert f"{llama_server.n_ctx:,} tokens" in result.error
        assert 1 <= len(recorder.exchanges) <= 6 and not recorder.answered()  # refused, retried a bounded time
        # The session goes on: a message that fits is answered.
        after = chat.send("Say hello.")
    assert after.status in CLASSIFIED - {"error"}, after.error


# --------------------------------------------------------------------------- images


AGG_PLOT = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [2, 4, 1])
plt.show()
print("plotted")
"""


@pytest.mark.docker
def test_a_step_with_a_figure_falls_back_to_text_and_the_run_goes_on(tmp_path: Path, llama_server: LlamaServer,
                                                                      recorder: Recorder) -> None:
    real = real_model(recorder.base_url, llama_server)
    model = ScriptedFirst([py(AGG_PLOT)], real)
    agent = CodeActAgent(model, sandbox="docker", log=False, max_steps=2, output_dir=tmp_path / "out")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        events = list(agent.stream("Plot three points."))
    result = finished(events)
    assert result.status in CLASSIFIED - {"error"}, result.error
    first_obs = next(e for e in events if isinstance(e, Observation))
    assert "plotted" in first_obs.text and first_obs.images  # the Agg figure reached the observation
    # The server fails a request with image parts (HTTP 500 from its chat template); the same request without
    # them is answered; later requests carry none.
    statuses = [(e.had_images, e.status) for e in recorder.exchanges]
    assert statuses[0][0] and statuses[0][1] >= 400, statuses
    assert statuses[1] == (False, 200) and not any(had for had, _ in statuses[1:])
    assert real.vision is False
    ours = [w for w in caught if "does not take images" in str(w.message)]
    assert len(ours) == 1 and f"HTTP {statuses[0][1]}" in str(ours[0].message)
    sent = json.dumps(recorder.exchanges[1].body["messages"])
    assert "step1_figure1.png" in sent and "not shown: the endpoint does not take images" in sent


# --------------------------------------------------------------------------- typed answers, a child agent


@pytest.mark.docker
def test_a_typed_answer_is_validated_or_the_status_says_it_did_not_fit(llama_server: LlamaServer,
                                                                       recorder: Recorder) -> None:
    model = real_model(recorder.base_url, llama_server)
    agent = CodeActAgent(model, sandbox="docker", log=False, max_steps=2)
    result = agent.run("How many days are in a week? Answer with final_answer(<an integer>).", output_type=int,
                       output_retries=1)
    assert result.status in ("success", "invalid_output", "max_steps"), result.error
    if result.status == "success":
        assert isinstance(result.answer, int)
    if result.status == "invalid_output":
        assert result.error and "int" in result.error
    assert len(result.steps) <= 2 and result.usage.requests == len(recorder.answered())


@pytest.mark.docker
def test_a_child_agent_runs_against_the_server_linked_to_its_parent(tmp_path: Path, llama_server: LlamaServer,
                                                                   recorder: Recorder) -> None:
    log = RunLog(tmp_path / "runs.db")
    try:
        child = CodeActAgent(real_model(recorder.base_url, llama_server), sandbox="docker", log=log, max_steps=2)
        helper = child.as_tool(name="helper", description="Answers one arithmetic question.", timeout=300)
        parent_model = ScriptedFirst([py("try:\n    said = helper('What is 2 + 2?')\nexcept Exception as exc:\n"
                                         "    said = f'{type(exc).__name__}: {exc}'\nprint('child said:', said)")],
                                     real_model(recorder.base_url, llama_server))
        parent = CodeActAgent(parent_model, tools=[helper], sandbox="docker", log=log, max_steps=2)
        events = list(parent.stream("Ask the helper what 2 + 2 is."))
        result = finished(events)
        assert result.status in CLASSIFIED - {"error"}, result.error
        first_obs = next(e for e in events if isinstance(e, Observation))
        assert "child said:" in first_obs.text
        runs = log.list_runs()
        children = [r for r in runs if r.id != result.run_id]  # the model may call the helper again itself
        assert children and all(c.parent_run_id == result.run_id and c.status in CLASSIFIED for c in children)
        assert any(c.parent_step == 1 and c.task == "What is 2 + 2?" for c in children)
        # Every request the server answered is a child's or the parent's (its scripted first step is neither).
        assert sum(c.usage.requests for c in children) + result.usage.requests - 1 == len(recorder.answered())
    finally:
        log.close()
