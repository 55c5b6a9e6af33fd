"""Compaction of long sessions (codeact.compaction): each folding stage on message lists, the kernel's
namespace map from real kernels, and whole chats that outgrow a context window the endpoint enforces.

Everything is real but the model's text: ScriptedModel (with a ``context_window`` where a test needs
one) or the local OpenAI test server, whose ``default_reply`` here enforces a window it never
announces (a context-length error like OpenAI's, as an HTTP 400).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import pytest

from codeact import CodeActAgent, Prices, RunLimits, ScriptedModel
from codeact._namespace import parse_listing, read_namespace
from codeact.compaction import (AFTER_SHARE, BLOCK_HEADER, SUMMARY_PROMPT, Compactor, ContextTooLarge, assigned_names,
                                compacted_text)
from codeact.context_window import count_tokens
from codeact.errors import ContextOverflowError
from codeact.events import Compacted, ErrorEvent, Observation, RunFinished
from codeact.messages import Message
from codeact.models import OpenAIModel
from codeact.runlog import RunLog
from codeact.sessions import SaveOptions
from tests.openai_server import Fault, RecordedRequest, Reply


def code(source: str) -> str:
    return f"Let me do that.\n```python\n{source}\n```"


def windowed(model: Any, window: int) -> Any:
    model.context_window = window  # what OpenAIModel learns or is told; a ScriptedModel just carries it
    return model


def history(turns: int, steps: int = 2, obs_chars: int = 1200) -> tuple[list[Message], list[int]]:
    """A chat: ``turns`` turns of ``steps`` code steps each and a final answer."""
    messages = [Message("system", "You are a CodeAct agent.")]
    starts = []
    for t in range(1, turns + 1):
        starts.append(len(messages))
        messages.append(Message("user", f"task {t}: make v{t}"))
        for s in range(1, steps + 1):
            messages.append(Message("assistant", code(f"v{t}_{s} = {t * s}\nimport math\nprint('{'o' * 300}')")))
            messages.append(Message("user", f"Observation:\nturn {t} step {s} " + "o" * obs_chars))
        messages.append(Message("assistant", f"Answer {t}: done."))
    return messages, starts


def tokens(messages: list[Message]) -> int:
    return count_tokens(ScriptedModel([]), messages)


# --------------------------------------------------------------------------- the stages, on message lists


def test_under_the_budget_nothing_is_folded() -> None:
    messages, starts = history(2)
    compactor = Compactor(windowed(ScriptedModel([]), 100_000))
    view, event = compactor.prepare(messages, starts)
    assert event is None and view == messages


def test_old_observations_are_masked_first_oldest_first() -> None:
    messages, starts = history(1, steps=6)
    whole = tokens(messages)
    # A budget a few masked observations meet: actions stay, the last steps stay whole.
    compactor = Compactor(ScriptedModel([]), history_budget=int(whole * 0.9))
    view, event = compactor.prepare(messages, starts, run_id="r", step=7)
    assert isinstance(event, Compacted) and event.reason == "budget" and event.run_id == "r"
    assert event.observations_masked >= 1 and event.actions_shortened == 0 and event.turns_folded == 0
    assert event.tokens_after < event.tokens_before and event.tokens_after <= int(whole * 0.9)
    assert view[0] == messages[0] and view[1] == messages[1]  # system prompt, task
    assert "elided to fit the context" in view[3].content  # the oldest observation
    assert view[-4:] == messages[-4:]  # the last two steps whole
    assert [m for m in view if m.role == "assistant"] == [m for m in messages if m.role == "assistant"]


def test_then_old_actions_become_a_one_line_stand_in() -> None:
    messages, starts = history(1, steps=6, obs_chars=10)
    compactor = Compactor(ScriptedModel([]), history_budget=int(tokens(messages) * 0.8))
    view, event = compactor.prepare(messages, starts)
    assert event is not None and event.actions_shortened >= 1
    short = view[2]
    assert short.role == "assistant" and "\n" not in short.content
    assert "ran 3 line(s) of code" in short.content and "v1_1, math" in short.content
    assert view[-4:] == messages[-4:]


def test_assigned_names() -> None:
    assert assigned_names("a = 1\nb, (c, *d) = x\ne += 1\ndef f(): g = 2\nimport os.path as p, json\n") == [
        "a", "b", "c", "d", "e", "f", "p", "json"]
    assert assigned_names("this is not python(") == []


def test_then_whole_turns_fold_into_the_session_so_far_block() -> None:
    messages, starts = history(8)
    listing = parse_listing('__codeact_variables__:{"variables": [{"name": "v1_1", "type": "int", "repr": "1", '
                            '"size": ""}, {"name": "rows", "type": "list", "repr": "[1, 2]", "size": "len 2"}], '
                            '"total": 2}')
    files = [type("F", (), {"path": "data.csv", "size": 12})()]
    compactor = Compactor(ScriptedModel([]), history_budget=int(tokens(messages) * 0.3),
                          namespace=lambda: listing, files=lambda: files)
    view, event = compactor.prepare(messages, starts)
    assert event is not None and event.turns_folded >= 1 and event.turns_folded_total == event.turns_folded
    system = view[0]
    assert system.content.startswith(messages[0].content) and BLOCK_HEADER in system.content
    block = system.content
    assert "- turn 1: task 1: make v1" in block and "answer: Answer 1: done." in block
    assert "- v1_1 (int): 1" in block and "- rows (list, len 2): [1, 2]" in block
    assert "data.csv (12 bytes)" in block and "print any variable you need" in block
    # The folded turns' messages are gone; the current task and the last steps are whole.
    assert all("task 1:" not in m.content for m in view[1:])
    assert messages[starts[-1]] in view and view[-4:] == messages[-4:]
    assert event.tokens_after <= int(tokens(messages) * 0.3)


def test_the_folded_prefix_stays_stable_until_more_is_folded() -> None:
    messages, starts = history(8)
    calls = []

    def namespace() -> Any:
        calls.append(1)
        return parse_listing('__codeact_variables__:{"variables": [], "total": 0}')

    compactor = Compactor(ScriptedModel([]), history_budget=int(tokens(messages) * 0.2), namespace=namespace)
    first, event = compactor.prepare(messages, starts)
    assert event is not None and event.turns_folded > 0 and len(calls) == 1
    # One more step: the prompt grows a little, stays under the budget: the same prefix, no event.
    messages.append(Message("assistant", code("print(1)")))
    messages.append(Message("user", "Observation:\n1"))
    second, again = compactor.prepare(messages, starts)
    assert again is None and second[:len(first)] == first and len(calls) == 1


def test_never_folded_system_prompt_current_task_last_steps() -> None:
    messages, starts = history(3, steps=3)
    compactor = Compactor(ScriptedModel([]), history_budget=10)  # far below anything
    view, event = compactor.prepare(messages, starts)
    assert event is not None
    assert view[0].content.startswith(messages[0].content)
    assert messages[starts[-1]] in view and view[-4:] == messages[-4:]


def test_the_budget_is_the_smaller_of_history_budget_and_the_window_share() -> None:
    model = windowed(ScriptedModel([]), 10_000)
    assert Compactor(model).budget == 7_500
    assert Compactor(model, history_budget=5_000).budget == 5_000
    assert Compactor(model, history_budget=50_000).budget == 7_500
    model.max_tokens = 4_000  # the reply's room
    assert Compactor(model).budget == 6_000
    assert Compactor(ScriptedModel([]), history_budget=None).budget is None


def test_an_overflow_learns_the_window_and_folds_harder() -> None:
    messages, starts = history(6)
    compactor = Compactor(ScriptedModel([]), history_budget=None)
    assert compactor.prepare(messages, starts)[1] is None  # no budget known: nothing to do
    before = tokens(messages)
    view, event = compactor.overflow(ContextOverflowError("too long", limit=before // 2), messages, starts)
    assert event.reason == "overflow" and compactor.window == before // 2
    assert tokens(view) < before // 2
    # Without the number, the window is learnt below the prompt that failed.
    other = Compactor(ScriptedModel([]), history_budget=None)
    view, event = other.overflow(ContextOverflowError("too long"), messages, starts)
    assert other.window is not None and other.window < before and tokens(view) < before


def test_when_the_current_step_alone_cannot_fit_the_error_says_what_to_change() -> None:
    messages = [Message("system", "sys"), Message("user", "task " + "t" * 30_000)]
    compactor = Compactor(ScriptedModel([]))
    with pytest.raises(ContextTooLarge) as info:
        compactor.overflow(ContextOverflowError("maximum context length is 4096", limit=4096), messages, [1])
    text = str(info.value)
    assert "the current step alone does not fit" in text and "4,096 tokens" in text
    # The three numbers: the system prompt, the current message (at least 10,000 tokens by any count), the reply.
    match = re.search(r"the system prompt takes ~(\d+) tokens, the current message ~([\d,]+), and the reply's room "
                      r"\(max_tokens is not set\)", text)
    assert match is not None and int(match.group(1)) < 20 and int(match.group(2).replace(",", "")) >= 10_000
    assert "observation_limit" in text and "bigger context window" in text


def test_an_earlier_message_keeps_its_head_and_says_where_its_content_went() -> None:
    from codeact._namespace import Variable, VariableListing

    numbers = " ".join(str(i % 10) for i in range(1500))
    messages = [Message("system", "You are a CodeAct agent."),
                Message("user", f"Turn 1: store these numbers in data1: {numbers}"),
                Message("assistant", code("data1 = [int(x) for x in NUMBERS.split()]\nprint(len(data1))")),
                Message("user", "Observation:\n1500"),
                Message("assistant", "Stored 1500 numbers."),
                Message("user", f"Turn 2: the same for data2: {numbers}"),
                Message("assistant", code("total = 0\nprint(total)")),
                Message("user", "Observation:\n0"),
                Message("assistant", "Done."),
                Message("user", "Turn 3: what is the mean of data1?")]
    starts = [1, 5, 9]
    listing = VariableListing((Variable("data1", "list", "[0, 1, 2, ...]", "len 1500"),
                               Variable("total", "int", "0")), total=2)
    # A budget the two long messages' stand-ins meet (compaction folds to AFTER_SHARE of it): nothing else goes.
    budget = int((tokens(messages) - 2 * tokens([messages[1]]) + 2 * 400 + 200) / AFTER_SHARE)
    assert budget < tokens(messages)
    compactor = Compactor(ScriptedModel([]), history_budget=budget, namespace=lambda: listing)
    view, event = compactor.prepare(messages, starts)
    assert event is not None and event.messages_shortened == 2 and event.turns_folded == 0
    first, second = view[1].content, view[5].content
    assert first.startswith("Turn 1: store these numbers in data1: 0 1 2 3")
    assert ("more characters of turn 1's message folded to fit the context window; that turn's code stored it in "
            "`data1` (list, len 1500), which the kernel still holds: print what you need]") in first
    # turn 2's code stored no collection the kernel holds (`total` is a number): the run log has the message
    assert second.startswith("Turn 2: the same for data2:") and "the whole message is in the run log" in second
    assert view[-1] == messages[-1] and len(view) == len(messages)  # the current message whole, nothing dropped
    assert "earlier messages shortened" in compacted_text(event)


def test_compacted_text() -> None:
    event = Compacted(run_id="r", observations_masked=3, actions_shortened=1, turns_folded=2,
                      tokens_before=12_000, tokens_after=4_000)
    assert compacted_text(event) == ("earlier turns condensed: 2 turns folded, 1 code action shortened, "
                                     "3 observations masked (12,000 → 4,000 tokens)")


# --------------------------------------------------------------------------- sessions on real kernels


def test_the_namespace_map_from_a_local_kernel(tmp_path: Path) -> None:
    from sandbox import open_sandbox

    with pytest.warns(Warning):
        sandbox = open_sandbox("local")
    with sandbox:
        sandbox.run("import json\nrows = list(range(12))\nname = 'x' * 500\nclass K: pass\n"
                    "k = K()\ndef f(): pass\n_hidden = 1")
        listing = read_namespace(sandbox)
    by_name = {v.name: v for v in listing.variables}
    assert set(by_name) == {"rows", "name", "k"}
    assert by_name["rows"].type == "list" and by_name["rows"].size == "len 12"
    assert by_name["name"].size == "len 500" and len(by_name["name"].repr) <= 160
    assert by_name["k"].type == "K"


def test_the_restricted_backend_lists_its_variables_without_running_session_code() -> None:
    from sandbox.restricted import RestrictedSandbox

    with RestrictedSandbox() as sandbox:
        result = sandbox.run("import math\nrows = list(range(12))\nname = 'x' * 500\n"
                             "class K:\n    def __repr__(self):\n        while True:\n            pass\n"
                             "k = K()\nmixed = [K(), 'a']\ndef f(): pass\n")
        assert result.error is None
        listing = read_namespace(sandbox)  # K's __repr__ never ends: the listing must not call it
    by_name = {v.name: v for v in listing.variables}
    assert set(by_name) == {"rows", "name", "k", "mixed"} and listing.error is None and listing.total == 4
    assert by_name["rows"].type == "list" and by_name["rows"].size == "len 12"
    assert by_name["name"].size == "len 500" and len(by_name["name"].repr) <= 160
    assert by_name["k"].type == "K" and by_name["k"].repr == "<K object>"
    assert by_name["mixed"].repr == "[<K object>, 'a']"


def test_a_restricted_session_folds_turns_with_its_variables(tmp_path: Path) -> None:
    replies: list[str] = []
    for t in range(1, 7):
        replies += [code(f"x{t} = list(range({t}))\nprint('{'w' * 1500}')"), f"Turn {t} done."]
    model = windowed(ScriptedModel(replies), 2_500)
    agent = CodeActAgent(model, sandbox="restricted", log=False)
    with pytest.warns(Warning), agent.session() as chat:
        events = [e for t in range(1, 7) for e in chat.stream(f"turn {t}: make x{t}")]
    assert any(isinstance(e, Compacted) and e.turns_folded for e in events)
    block = model.requests[-1][0].content
    assert BLOCK_HEADER in block and "Variables in the kernel now (" in block
    assert "- x1 (list, len 1): [0]" in block and "- x5 (list, len 5): [0, 1, 2, 3, 4]" in block


def test_a_session_folds_turns_with_its_kernel_namespace_and_summary(openai_server: Any, tmp_path: Path) -> None:
    def reply(request: RecordedRequest) -> Any:
        if str(request.messages[0].get("content")).startswith(SUMMARY_PROMPT[:30]):
            return Reply("- The user had lists made, one per turn.", usage=(900, 12))
        return scripted_turn(request)

    openai_server.default_reply = reply
    model = windowed(OpenAIModel("test-model", base_url=openai_server.base_url, api_key="x", max_retries=0), 3_000)
    prices = Prices(1.0, 2.0)
    agent = CodeActAgent(model, sandbox="local", log=tmp_path / "runs.db", output_dir=tmp_path / "out",
                         condenser="summary", limits=RunLimits(prices={"test-model": prices}))
    events: list[Any] = []
    with pytest.warns(Warning), agent.session() as chat:
        for t in range(1, 9):
            events += list(chat.stream(f"turn {t}: make x{t}"))
    finished = [e.result for e in events if isinstance(e, RunFinished)]
    assert [r.status for r in finished] == ["success"] * 8
    folded = [e for e in events if isinstance(e, Compacted) and e.turns_folded]
    assert folded and all(e.summary and e.usage.requests == 1 and e.usage.input_tokens == 900 for e in folded)
    system = openai_server.chat_requests[-1].messages[0]["content"]
    assert "- x1 (list, len 50): [0, 1, 2," in system
    assert "Summary of them:\n- The user had lists made, one per turn." in system
    log = RunLog(tmp_path / "runs.db")
    try:
        run = folded[0].run_id
        assert any(e["type"] == "Compacted" for e in log.get_events(run))
        # The summary call's tokens count in the run's usage (two model calls and the summary).
        result = next(r for r in finished if r.run_id == run)
        assert result.usage.requests == 3 and result.usage.input_tokens >= 900
        assert log.get_run(run).usage.requests == 3
        # And its dollars: on the Compacted event, in the run's cost (each call priced, the summary too).
        assert folded[0].usage.cost == pytest.approx(prices.cost(folded[0].usage))
        assert result.usage.cost == pytest.approx(prices.cost(result.usage))
        assert log.get_run(run).usage.cost == pytest.approx(result.usage.cost)
    finally:
        log.close()


# --------------------------------------------------------------------------- the endpoint enforces a window


def enforcing(window: int, reply: Callable[[RecordedRequest], Any], sizes: list[int]) -> Callable[..., Any]:
    """A ``default_reply`` that refuses prompts over ``window`` tokens (4 characters a token) as OpenAI does."""

    def answer(request: RecordedRequest) -> Any:
        used = sum(len(json.dumps(m)) for m in request.messages) // 4
        sizes.append(used)
        if used > window:
            message = (f"This model's maximum context length is {window} tokens. However, your messages "
                       f"resulted in {used} tokens. Please reduce the length of the messages.")
            return Fault("error", status=400, body={"error": {"message": message, "type": "invalid_request_error",
                                                              "param": "messages",
                                                              "code": "context_length_exceeded"}})
        return reply(request)

    return answer


def scripted_turn(request: RecordedRequest) -> Any:
    """Turn k: code that makes ``xk`` and prints ~2,000 characters; turn 40 also uses x1; then a short answer."""
    last = request.messages[-1]
    if last.get("role") == "user" and str(last.get("content")).startswith("Observation:"):
        return "Done."
    k = int(re.findall(r"turn (\d+)", request.last_user_text)[-1])
    extra = "\nprint('x1 sum', sum(x1))" if k == 40 else ""
    return Reply(code(f"x{k} = [{k} * i for i in range(50)]\nprint('turn {k}', '-' * 2000)\n"
                      f"print('x{k} has', len(x{k}), 'items'){extra}"))


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_forty_turns_against_an_enforced_unannounced_window(openai_server: Any, tmp_path: Path) -> None:
    window = 2_500  # tokens; the 40 turns need ~10x that
    sizes: list[int] = []
    openai_server.default_reply = enforcing(window, scripted_turn, sizes)
    model = OpenAIModel("test-model", base_url=openai_server.base_url, api_key="x", max_retries=0)
    agent = CodeActAgent(model, sandbox="docker", log=tmp_path / "runs.db", output_dir=tmp_path / "out")
    results, events = [], []
    with agent.session() as chat:
        for k in range(1, 41):
            turn = list(chat.stream(f"turn {k}: make x{k}"))
            events += turn
            finished = turn[-1]
            assert isinstance(finished, RunFinished)
            results.append(finished.result)
    assert [r.status for r in results] == ["success"] * 40, [(r.status, r.error) for r in results if r.error]
    last_obs = [e for e in events if isinstance(e, Observation)][-1]
    assert "x1 sum 1225" in last_obs.text  # x1 = [1 * i ...]: turn 40 used turn 1's variable
    need = sum(len(json.dumps(m.to_openai())) for m in chat.messages) // 4
    assert need > 8 * window
    compactions = [e for e in events if isinstance(e, Compacted)]
    assert any(e.turns_folded for e in compactions) and any(e.reason == "overflow" for e in compactions)
    refused = [s for s in sizes if s > window]
    assert len(refused) <= 3  # learnt once (or a few times), then the prompts fit
    assert all(s <= window for s in sizes[-40:])
    assert not [e for e in events if isinstance(e, ErrorEvent) and e.fatal]
    # The block carried the kernel's namespace, read from the docker kernel.
    last_prompt = openai_server.chat_requests[-1].messages[0]["content"]
    assert BLOCK_HEADER in last_prompt and "- x1 (list, len 50): [0, 1, 2," in last_prompt
    log = RunLog(tmp_path / "runs.db")
    try:
        logged = [e for r in results for e in log.get_events(r.run_id) if e["type"] == "Compacted"]
    finally:
        log.close()
    assert len(logged) == len(compactions)


def test_an_overflow_is_compacted_and_retried(openai_server: Any, tmp_path: Path) -> None:
    sizes: list[int] = []
    openai_server.default_reply = enforcing(1_500, scripted_turn, sizes)
    model = OpenAIModel("test-model", base_url=openai_server.base_url, api_key="x", max_retries=0)
    agent = CodeActAgent(model, sandbox="local", log=tmp_path / "runs.db", output_dir=tmp_path / "out")
    with pytest.warns(Warning), agent.session() as chat:
        events = [e for k in range(1, 6) for e in chat.stream(f"turn {k}: make x{k}")]
    finished = [e.result for e in events if isinstance(e, RunFinished)]
    assert [r.status for r in finished] == ["success"] * 5
    overflow = [e for e in events if isinstance(e, Compacted) and e.reason == "overflow"]
    assert overflow and overflow[0].tokens_after < overflow[0].tokens_before
    refused = [i for i, s in enumerate(sizes) if s > 1_500]
    assert refused and sizes[refused[0] + 1] < sizes[refused[0]]  # the retry was smaller


def test_a_step_that_alone_cannot_fit_ends_the_run_with_what_to_change(openai_server: Any, tmp_path: Path) -> None:
    sizes: list[int] = []
    openai_server.default_reply = enforcing(200, scripted_turn, sizes)
    model = OpenAIModel("test-model", base_url=openai_server.base_url, api_key="x", max_retries=0)
    agent = CodeActAgent(model, sandbox="restricted", log=False)
    with pytest.warns(Warning), agent.session() as chat:
        result = chat.send("turn 1: " + "make it " * 400)
    assert result.status == "error"
    assert "the current step alone does not fit" in str(result.error)
    assert "observation_limit" in str(result.error) and "bigger context window" in str(result.error)


def test_a_resumed_session_compacts_the_same_way(tmp_path: Path) -> None:
    log = RunLog(tmp_path / "runs.db")
    try:
        replies = []
        for t in range(1, 7):
            replies += [code(f"x{t} = list(range({t}))\nprint('{'z' * 1500}')"), f"Turn {t} done."]
        first = windowed(ScriptedModel(replies), 2_500)
        agent = CodeActAgent(first, sandbox="local", log=log, output_dir=tmp_path / "out")
        with pytest.warns(Warning), agent.session(save=SaveOptions(store=tmp_path / "snaps")) as chat:
            folded = [e for t in range(1, 7) for e in chat.stream(f"turn {t}: make x{t}")
                      if isinstance(e, Compacted)]
        assert any(e.turns_folded for e in folded)
        (row,) = log.list_snapshots()
        second = windowed(ScriptedModel([code("print('x1 is', x1)"), "x1 is [0]."]), 2_500)
        again = CodeActAgent(second, sandbox="local", log=log, output_dir=tmp_path / "out")
        with pytest.warns(Warning), again.session(resume=row.id) as chat:
            events = list(chat.stream("turn 7: show x1"))
        result = events[-1].result
        assert result.status == "success" and result.answer == "x1 is [0]."
        # The history rebuilt from the run log is whole again: it is folded by the same rules, to the budget.
        [compacted] = [e for e in events if isinstance(e, Compacted)]
        assert compacted.tokens_before > compacted.budget >= compacted.tokens_after
        assert "x1 is [0]" in [e for e in events if isinstance(e, Observation)][0].text
        sent = second.requests[0]
        assert tokens(sent) == compacted.tokens_after
        # Turn 1 is either still whole or folded into the "session so far" block of the system message.
        assert sent[1].content == "turn 1: make x1" or ("turn 1: make x1" in sent[0].content
                                                        and BLOCK_HEADER in sent[0].content)
        assert sent[-1].content.endswith("turn 7: show x1")
    finally:
        log.close()


# --------------------------------------------------------------------------- seen: stream, log, CLI, web, traces


def chat_of(tmp_path: Path, turns: int, **options: Any) -> tuple[list[Any], Path]:
    """A CodeAct chat on the restricted backend whose model has a 2,500-token window; its events and log."""
    replies: list[str] = []
    for t in range(1, turns + 1):
        replies += [code(f"x{t} = {t}\nprint('{'w' * 1500}')"), f"Turn {t} done."]
    model = windowed(ScriptedModel(replies), 2_500)
    db = tmp_path / "runs.db"
    agent = CodeActAgent(model, sandbox="restricted", log=db, output_dir=tmp_path / "out", **options)
    with pytest.warns(Warning), agent.session() as chat:
        events = [e for t in range(1, turns + 1) for e in chat.stream(f"turn {t}: make x{t}")]
    return events, db


def test_a_react_session_compacts_the_same_way(tmp_path: Path) -> None:
    from codeact import ReActAgent, tool

    @tool
    def page(n: int) -> str:
        """A long page."""
        return f"page {n} " + "p" * 1500

    replies: list[Any] = []
    for t in range(1, 31):
        replies += [ScriptedModel.tool_calls(("page", {"n": t})), f"Turn {t} done."]
    model = windowed(ScriptedModel(replies), 2_500)
    agent = ReActAgent(model, [page], log=False)
    with agent.session() as chat:
        events = [e for t in range(1, 31) for e in chat.stream(f"turn {t}: read page {t}")]
    finished = [e.result for e in events if isinstance(e, RunFinished)]
    assert [r.status for r in finished] == ["success"] * 30
    folded = [e for e in events if isinstance(e, Compacted) and e.turns_folded]
    assert folded and all(e.budget == 1_875 for e in folded)
    last = model.requests[-1]
    assert BLOCK_HEADER in last[0].content and "- turn 27: turn 27: read page 27" in last[0].content
    assert "Variables in the kernel" not in last[0].content  # no kernel in ReAct
    # Tool results stay paired with their calls in what is kept.
    ids = {c.id for m in last for c in m.tool_calls}
    assert all(m.tool_call_id in ids for m in last if m.role == "tool")
    assert count_tokens(model, last) <= 2_500


def test_compactions_are_logged_shown_by_logs_show_rendered_and_sent_to_the_page(tmp_path: Path) -> None:
    import io
    import subprocess
    import sys

    from rich.console import Console

    from codeact.cli.render import Renderer
    from codeact.ui._wire import event_wire

    events, db = chat_of(tmp_path, 6)
    compactions = [e for e in events if isinstance(e, Compacted)]
    assert compactions
    event = compactions[-1]
    # The terminal renderer, live.
    out = io.StringIO()
    renderer = Renderer(console=Console(file=out, width=200), live=False)
    renderer.event(event)
    assert "earlier turns condensed" in out.getvalue() and f"{event.tokens_before:,}" in out.getvalue()
    # The page's wire format.
    wire = event_wire(event, lambda mime, data: "")
    assert wire["type"] == "Compacted" and wire["text"].startswith("earlier turns condensed")
    assert wire["tokens_after"] == event.tokens_after
    # `codeact logs show` of that run.
    shown = subprocess.run([sys.executable, "-m", "codeact.cli", "logs", "show", event.run_id, "--db", str(db)],
                           capture_output=True, text=True, timeout=120, env={**__import__("os").environ,
                                                                              "COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    assert "earlier turns condensed" in shown.stdout and f"{event.tokens_after:,} tokens" in shown.stdout


def test_a_compaction_is_a_span(spans: Any, tmp_path: Path) -> None:
    events, _ = chat_of(tmp_path, 5)
    compactions = [e for e in events if isinstance(e, Compacted)]
    assert compactions
    found = [s for s in spans.get_finished_spans() if s.name == "compact_history"]
    assert len(found) == len(compactions)
    attributes = found[-1].attributes
    assert attributes["codeact.compaction.tokens_before"] == compactions[-1].tokens_before
    assert attributes["codeact.compaction.turns_folded"] == compactions[-1].turns_folded
    runs = {s.context.span_id: s for s in spans.get_finished_spans() if s.name.startswith("invoke_agent")}
    assert found[-1].parent.span_id in runs


# --------------------------------------------------------------------------- long chats that carry data


def fine_grained(window: Callable[[RecordedRequest], int], reply: Callable[[RecordedRequest], Any],
                 sizes: list[int]) -> Callable[..., Any]:
    """A ``default_reply`` for a model whose tokenizer is finer than codeact's estimate (as SmolLM2's, which
    takes a token per digit and per punctuation mark): 2 characters a token, the window enforced in
    llama.cpp's words, the prompt's count reported in ``usage`` as a real server does."""

    def answer(request: RecordedRequest) -> Any:
        used = sum(len(str(m.get("content") or "")) for m in request.messages) // 2
        sizes.append(used)
        limit = window(request)
        if used > limit:
            message = f"Requested tokens ({used}) exceed context window of {limit}"
            return Fault("error", status=400, body={"error": {"message": message, "type": "internal_server_error",
                                                              "param": None, "code": 400}})
        out = reply(request)
        return Reply(out, usage=(used, 10)) if isinstance(out, str) else replace(out, usage=(used, 10))

    return answer


def data_turn(request: RecordedRequest) -> Any:
    """Turn k's message carries 300 numbers: code stores them in ``data{k}`` (copying them, as models do)."""
    last = request.messages[-1]
    if last.get("role") == "user" and str(last.get("content")).startswith("Observation:"):
        return "Stored."
    text = request.last_user_text
    k = int(re.findall(r"Turn (\d+):", text)[-1])
    numbers = text.rsplit(":", 1)[1].split()
    return Reply(code(f"data{k} = [{', '.join(numbers)}]\nprint('mean', sum(data{k}) / len(data{k}))"))


def test_a_long_chat_whose_messages_carry_data_answers_every_turn(openai_server: Any, tmp_path: Path) -> None:
    import random

    rng = random.Random(3)
    messages = [f"Turn {k}: store these numbers in data{k} and print their mean: "
                + " ".join(str(rng.randint(0, 9)) for _ in range(300)) for k in range(1, 26)]
    model = OpenAIModel("test-model", base_url=openai_server.base_url, api_key="x", max_retries=0, max_tokens=100)
    agent = CodeActAgent(model, sandbox="local", log=tmp_path / "runs.db", output_dir=tmp_path / "out")
    # The window, set at the first request: the system prompt, one message, its code step (the message's
    # numbers copied), its observation and the answer fit; two turns do not.
    windows: list[int] = []

    def window(request: RecordedRequest) -> int:
        if not windows:
            windows.append((len(request.messages[0]["content"]) + 3 * len(messages[0]) + 600) // 2 + 200)
        return windows[0]

    sizes: list[int] = []
    openai_server.default_reply = fine_grained(window, data_turn, sizes)
    results, events = [], []
    with pytest.warns(Warning), agent.session() as chat:
        for text in messages:
            turn = list(chat.stream(text))
            events += turn
            results.append(turn[-1].result)
    assert [r.status for r in results] == ["success"] * 25, [(r.status, r.error) for r in results if r.error]
    # The need was many windows; the endpoint's refusals and its usage counts taught the window and how finely
    # it counts (2 characters a token against the estimate's 3 or 4): after the first refusals, every prompt fit.
    assert sum(sizes) > 10 * windows[0]
    refused = [s for s in sizes if s > windows[0]]
    assert 1 <= len(refused) <= 3 and all(s <= windows[0] for s in sizes[-30:])
    # Earlier messages were folded (whole turns into the block), and the block says where their numbers went:
    # the variable each turn's code stored them in, which the kernel holds.
    assert any(e.turns_folded for e in events if isinstance(e, Compacted))
    last = openai_server.chat_requests[-1].messages[0]["content"]
    assert re.search(r"- turn 24: Turn 24: store these numbers.*\[6\d\d characters; that turn's code stored it in "
                     r"`data24` \(list, len 300\), which the kernel still holds", last), last
