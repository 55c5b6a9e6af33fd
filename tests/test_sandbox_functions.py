"""Host functions at unit level: specs and stubs, the dispatcher, the run clock, the runtime's errors.

No kernel here: the in-kernel runtime is stdlib-only, so its stub builder and
its error classes are imported and checked directly. The value codec has its
own tests (test_codec.py); the whole bridge is tested against real kernels in
test_sandbox_kernel.py and test_boundary.py.
"""

import asyncio
import datetime as dt
import importlib.util
import inspect
import json
import sys
import threading
import time
import types
from pathlib import Path
from typing import Literal

import pytest

from sandbox.errors import FunctionRegistrationError
from sandbox.functions import (
    CallBudget,
    CallTimedOut,
    FunctionDispatcher,
    HostFunction,
    RunClock,
    as_host_functions,
    current_call,
    literal_default_text,
)
from sandbox.kernel import OUTPUT_CUT_MIME, READY_MARKER, clean_traceback, exit_detail
from sandbox.result import CappedText, Elided, ExecutionResult, Output, strip_ansi
from sandbox.runtime import sandbox_codec as codec

RUNTIME_DIR = Path(__file__).resolve().parents[1] / "sandbox" / "runtime"


@pytest.fixture(scope="module")
def runtime() -> types.ModuleType:
    """The in-kernel runtime module, loaded on the host (it only needs the standard library)."""
    sys.path.insert(0, str(RUNTIME_DIR))
    try:
        spec = importlib.util.spec_from_file_location("sandbox_runtime_under_test", RUNTIME_DIR / "sandbox_runtime.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(RUNTIME_DIR))


class Secret:
    """A default that must never reach the sandbox, not even as text."""

    def __repr__(self) -> str:
        return "sk-live-SECRET"


SECRET_DEFAULT = Secret()


def search(query: str, /, limit: int = 10, *tags: str, exact: bool = False, since: dt.date = dt.date(2020, 1, 1),
           mode: Literal["fast", "full"] = "fast", note: str | None = None, label: str = "x",
           client: Secret = SECRET_DEFAULT, **extra: int) -> list:
    """Search the index.

    Args:
        query: What to look for.
    """
    return []


# --- specs and stubs -----------------------------------------------------------------------------------


def test_spec_captures_the_signature_with_literal_defaults_only():
    spec = HostFunction(search).spec
    assert spec.name == "search" and spec.doc.startswith("Search the index.")
    kinds = [(p.name, p.kind) for p in spec.parameters]
    assert kinds == [
        ("query", "positional_only"), ("limit", "positional_or_keyword"), ("tags", "var_positional"),
        ("exact", "keyword_only"), ("since", "keyword_only"), ("mode", "keyword_only"), ("note", "keyword_only"),
        ("label", "keyword_only"), ("client", "keyword_only"), ("extra", "var_keyword"),
    ]
    by_name = {p.name: p for p in spec.parameters}
    assert by_name["limit"].default_text == "10" and by_name["note"].default_text == "None"
    assert by_name["since"].default_text == "..."  # not a literal: the host fills it in
    assert by_name["client"].default_text == "..."
    assert by_name["query"].annotation == "str" and not by_name["query"].has_default
    text = json.dumps(spec.to_json())
    assert "SECRET" not in text


def test_literal_default_text_never_calls_repr_of_other_objects():
    class Loud:
        def __repr__(self) -> str:
            raise AssertionError("repr() of a non-literal default was called")

    assert literal_default_text(Loud()) is None
    assert literal_default_text([1, (2, "x"), {"k": None}]) == "[1, (2, 'x'), {'k': None}]"
    assert literal_default_text("x" * 200) is None  # too long to show
    assert literal_default_text(True) == "True" and literal_default_text(b"ab") == "b'ab'"


def test_stub_rebuilds_the_signature_and_docstring(runtime):
    spec = json.loads(json.dumps(HostFunction(search).spec.to_json()))
    stub = runtime._make_stub(spec)
    assert stub.__name__ == "search" and stub.__doc__ == inspect.getdoc(search)
    shown = str(inspect.signature(stub))
    assert shown.startswith("(query: str, /, limit: int = 10, *tags: str, exact: bool = False, since: ")
    assert "since: datetime.date = ..." in shown and "Secret = ..., " in shown and "SECRET" not in shown


def test_async_functions_get_awaitable_stubs(runtime):
    async def fetch(url: str) -> str:
        return url

    spec = HostFunction(fetch).spec
    assert spec.is_async
    assert inspect.iscoroutinefunction(runtime._make_stub(json.loads(json.dumps(spec.to_json()))))
    assert not HostFunction(search).spec.is_async


def test_stub_checks_arguments_before_calling_the_host(runtime):
    stub = runtime._make_stub(json.loads(json.dumps(HostFunction(search).spec.to_json())))
    with pytest.raises(TypeError, match=r"search\(\)"):
        stub()  # query is required
    with pytest.raises(TypeError, match=r"search\(\)"):
        stub(query="q")  # positional-only
    with pytest.raises(RuntimeError, match="link to the host"):
        stub("q", 5, "t1", exact=True, anything=1)  # valid; no supervisor here


def test_host_function_names_and_fallback_signature():
    with pytest.raises(FunctionRegistrationError, match="identifier"):
        HostFunction(lambda: 1)
    with pytest.raises(FunctionRegistrationError):
        HostFunction(search, name="class")
    hf = HostFunction(lambda: 1, name="one", doc="Always one.")
    assert hf.name == "one" and hf.spec.doc == "Always one." and hf() == 1
    try:
        inspect.signature(max)
    except ValueError:  # no signature: the stub takes anything and the host checks
        assert [p.kind for p in HostFunction(max).spec.parameters] == ["var_positional", "var_keyword"]
    with pytest.raises(FunctionRegistrationError, match="two host functions"):
        as_host_functions([search, HostFunction(lambda: 1, name="search")])


def test_async_host_function_runs_to_completion():
    async def fetch(x: int) -> int:
        await asyncio.sleep(0)
        return x + 1

    assert HostFunction(fetch)(1) == 2


# --- the dispatcher (calls as they arrive from a kernel) -----------------------------------------------------


class Bridge:
    """The kernel side of a dispatcher, in-process: encodes calls, decodes replies."""

    def __init__(self, dispatcher: FunctionDispatcher, **budget: int) -> None:
        self.d = dispatcher
        self.replies: dict[int, tuple[int, object]] = {}
        self.records: list = []
        self.done = threading.Condition()
        self.clock = RunClock()
        self.budget = CallBudget(**budget)
        self.ids = iter(range(1, 10**6))

    def send(self, call_id: int, status: int, chunks: list) -> None:
        value = codec.decode(b"".join(bytes(c) for c in chunks))
        with self.done:
            self.replies[call_id] = (status, codec.decode_exception(value) if status else value)
            self.done.notify_all()

    def on_done(self, record, call) -> None:
        self.records.append(record)

    def start(self, name: str, *args, **kwargs) -> int:
        call_id = next(self.ids)
        payload = memoryview(b"".join(bytes(c) for c in codec.encode((args, kwargs))))
        self.d.submit(call_id, name, payload, send=self.send, on_done=self.on_done, clock=self.clock,
                      budget=self.budget, max_payload=2**20)
        return call_id

    def wait(self, call_id: int, timeout: float = 10.0):
        deadline = time.monotonic() + timeout
        with self.done:
            while call_id not in self.replies:
                now = time.monotonic()
                for call in self.d.overdue(now):  # what the kernel session's wait loop does
                    self.d.expire(call, self.send, self.clock)
                assert now < deadline, f"no reply to call {call_id}"
                self.done.wait(0.02)
            return self.replies[call_id]

    def call(self, name: str, *args, **kwargs):
        return self.wait(self.start(name, *args, **kwargs))


def add(a: int, b: int = 1) -> int:
    return a + b


def boom() -> None:
    raise PermissionError("no access")


class QuotaExceeded(Exception):
    pass


def quota() -> None:
    raise QuotaExceeded("5 of 5 requests used")


def echo(*args, **kwargs):
    return args, kwargs


def test_results_errors_and_unknown_names_reach_the_caller():
    b = Bridge(FunctionDispatcher([add, boom, quota, echo]))
    assert b.call("add", 2, b=3) == (0, 5)
    status, err = b.call("boom")
    assert status == 1 and type(err) is PermissionError and str(err) == "no access"
    status, err = b.call("quota")
    assert isinstance(err, codec.ToolError) and err.type_name.endswith("QuotaExceeded")
    assert err.message == "5 of 5 requests used"
    status, err = b.call("nope")
    assert type(err) is NameError and "add, boom, echo, quota" in str(err)
    assert b.call("echo", (1, 2), {3: "x"}, b"\x00", k={"s"}) == (0, (((1, 2), {3: "x"}, b"\x00"), {"k": {"s"}}))
    assert [r.name for r in b.records] == ["add", "boom", "quota", "echo"]  # unknown names are refused, not run
    assert b.records[0].args == [2] and b.records[0].kwargs == {"b": 3} and b.records[0].result == 5


def test_calls_run_concurrently():
    def nap(seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    b = Bridge(FunctionDispatcher([nap]))
    started = time.monotonic()
    ids = [b.start("nap", 0.5) for _ in range(8)]
    assert [b.wait(i) for i in ids] == [(0, 0.5)] * 8
    assert time.monotonic() - started < 1.5  # eight half-second calls side by side


def test_timeouts_are_answered_and_later_calls_are_not_blocked():
    release = threading.Event()

    def hang() -> None:
        release.wait(30)

    def quick() -> str:
        return "quick"

    b = Bridge(FunctionDispatcher([hang, quick], default_timeout=0.2, max_concurrent=8))
    try:
        started = time.monotonic()
        for _ in range(4):
            status, err = b.call("hang")
            assert type(err) is TimeoutError and "did not return within 0.2 s" in str(err)
        assert b.call("quick") == (0, "quick")
        assert time.monotonic() - started < 5
        assert [r.error.type for r in b.records[:4]] == ["TimeoutError"] * 4
    finally:
        release.set()
        b.d.close()


def test_too_many_calls_at_once_and_per_run_cap_are_refused():
    release = threading.Event()

    def hang() -> None:
        release.wait(30)

    b = Bridge(FunctionDispatcher([hang, add], max_concurrent=2), max_calls=5)
    try:
        b.start("hang"), b.start("hang")
        status, err = b.call("add", 1)
        assert status == 1 and "too many host-function calls at once (at most 2" in str(err)
        release.set()
        time.sleep(0.2)
        # Two hangs ran and one call was refused: a refusal costs a reply too, so it counts. Two more
        # may run, then the run's cap.
        assert [b.call("add", i) for i in range(2)] == [(0, 1), (0, 2)]
        status, err = b.call("add", 1)
        assert status == 1 and "made 5 host-function calls, the most one run may make" in str(err)
    finally:
        release.set()


def test_calls_to_unknown_names_count_against_the_run_and_their_answer_stays_short():
    """Refusals are not free for the host (each is a reply): a flood of calls to names that do not exist
    uses up the run's budget like real calls, and the refusal does not grow with the registry or the name."""
    many = [HostFunction(add, name=f"tool_{i:03d}") for i in range(200)]
    b = Bridge(FunctionDispatcher(many), max_calls=3)
    for _ in range(3):
        status, err = b.call("x" * 200)
        assert status == 1 and type(err) is NameError
        assert "tool_000" in str(err) and "and 180 more" in str(err) and len(str(err)) < 600, str(err)
    status, err = b.call("tool_001", 1)
    assert status == 1 and "made 3 host-function calls" in str(err)
    assert b.budget.calls == 4 and b.records == []


def test_call_records_keep_values_only_within_the_byte_budget():
    def blob(n: int) -> bytes:
        return b"x" * n

    b = Bridge(FunctionDispatcher([blob]), max_kept_bytes=10_000)
    assert b.call("blob", 100)[1] == b"x" * 100
    assert b.call("blob", 50_000)[1] == b"x" * 50_000  # the code still gets it
    small, big = b.records
    assert small.result == b"x" * 100
    assert isinstance(big.result, Elided) and big.result.size > 50_000


def test_approval_time_pauses_the_clocks_and_a_timed_out_call_never_runs_late():
    ran = []

    def approved_tool() -> str:
        call = current_call()
        with call.paused():  # a human deciding: 0.5 s, longer than the 0.2 s timeout
            time.sleep(0.5)
        call.checkpoint()
        ran.append("ran")
        return "done"

    b = Bridge(FunctionDispatcher([approved_tool], default_timeout=0.2))
    assert b.call("approved_tool") == (0, "done")
    assert b.clock.run_time() < 0.3  # the approval did not count
    assert ran == ["ran"]

    def late_tool() -> str:
        time.sleep(0.4)  # overruns its timeout, then a late "yes" arrives
        current_call().checkpoint()
        ran.append("late")
        return "too late"

    b = Bridge(FunctionDispatcher([late_tool], default_timeout=0.1))
    status, err = b.call("late_tool")
    assert type(err) is TimeoutError
    time.sleep(0.5)
    assert "late" not in ran  # checkpoint() stopped it: the sandbox was told it failed
    with pytest.raises(CallTimedOut):
        raise CallTimedOut("x")


class LoopThread:
    """An event loop on a thread of its own, as an async tool source keeps one."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def loop_thread():
    lt = LoopThread()
    yield lt
    lt.close()


def test_a_function_bound_to_a_loop_runs_there_and_its_task_answers(loop_thread):
    threads = []

    async def where(x: int, *, k: str = "") -> tuple:
        threads.append((threading.current_thread(), getattr(current_call(), "name", None)))
        await asyncio.sleep(0)
        return x, k

    async def fails() -> None:
        raise PermissionError("no access")

    async def unsendable() -> bytes:
        return b"x" * (2**20 + 1)  # over the bridge's max_payload

    b = Bridge(FunctionDispatcher([HostFunction(where, loop=loop_thread.loop, is_async=False),
                                   HostFunction(fails, loop=loop_thread.loop),
                                   HostFunction(unsendable, loop=loop_thread.loop)]))
    assert b.call("where", 1, k="a") == (0, (1, "a"))
    assert threads == [(loop_thread.thread, "where")]  # no worker thread in between; current_call() works
    status, err = b.call("fails")
    assert status == 1 and type(err) is PermissionError and str(err) == "no access"
    status, err = b.call("unsendable")
    assert status == 1 and "cannot be sent to the sandbox" in str(err)
    status, err = b.call("where", "x", "too", "many")
    assert status == 1 and type(err) is TypeError
    assert [(r.name, r.error.type if r.error else None) for r in b.records] == [
        ("where", None), ("fails", "PermissionError"), ("unsendable", "ValueError"), ("where", "TypeError")]
    assert b.records[0].args == [1] and b.records[0].kwargs == {"k": "a"} and b.records[0].result == (1, "a")
    assert b.d.running == 0 and b.d._busy_threads == 0 and b.d._held_memory == 0
    assert HostFunction(where, loop=loop_thread.loop)(2) == (2, "")  # called on the host, from another thread
    with pytest.raises(FunctionRegistrationError, match="must be a coroutine function"):
        HostFunction(add, loop=loop_thread.loop)


def test_a_loop_task_that_times_out_or_is_abandoned_is_cancelled(loop_thread):
    cancelled = []

    async def hang(tag: str) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(tag)
            raise

    b = Bridge(FunctionDispatcher([HostFunction(hang, loop=loop_thread.loop)], default_timeout=0.2))
    status, err = b.call("hang", "timeout")
    assert type(err) is TimeoutError and "did not return within 0.2 s" in str(err)
    call_id = b.start("hang", "abandon")
    time.sleep(0.05)
    b.d.abandon(call_id, b.clock)
    deadline = time.monotonic() + 5
    while len(cancelled) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(cancelled) == ["abandon", "timeout"]  # the work stopped, unlike a thread's
    assert [r.error.type for r in b.records] == ["TimeoutError", "RuntimeError"]
    assert b.d._busy_threads == 0 and b.d.running == 0  # the slots came back


def test_a_loop_bound_call_keeps_the_limits(loop_thread):
    release = asyncio.Event()

    async def wait() -> str:
        await release.wait()
        return "done"

    async def echo_async(*args, **kwargs):
        return args

    hfs = [HostFunction(wait, loop=loop_thread.loop), HostFunction(echo_async, loop=loop_thread.loop)]
    b = Bridge(FunctionDispatcher(hfs, max_concurrent=2), max_calls=6)
    first, second = b.start("wait"), b.start("wait")
    time.sleep(0.05)
    status, err = b.call("echo_async", 1)
    assert status == 1 and "too many host-function calls at once (at most 2" in str(err)
    loop_thread.loop.call_soon_threadsafe(release.set)
    assert b.wait(first) == (0, "done") and b.wait(second) == (0, "done")
    big = "y" * 100_000  # decoded on a thread (over DECODE_ON_LOOP), same answer
    assert b.call("echo_async", big) == (0, (big,))
    b.d.limits = type(b.d.limits)(max_call_items=50)  # hostile sizes are refused at decode, on the loop too
    status, err = b.call("echo_async", list(range(100)))
    assert status == 1 and type(err) is ValueError and "malformed arguments" in str(err)
    assert b.call("echo_async", 1) == (0, (1,))
    status, err = b.call("echo_async", 1)
    assert status == 1 and "made 6 host-function calls" in str(err)


def test_a_closed_loop_is_answered_at_once():
    lt = LoopThread()
    lt.close()

    async def f() -> int:
        return 1

    b = Bridge(FunctionDispatcher([HostFunction(f, loop=lt.loop)]))
    status, err = b.call("f")
    assert status == 1 and "its event loop is closed" in str(err)
    assert b.d._busy_threads == 0 and [r.error.type for r in b.records] == ["RuntimeError"]


def test_run_clock_separates_code_time_from_host_time():
    clock = RunClock()
    clock.call_started()
    clock.call_started()  # two at once count once
    time.sleep(0.2)
    clock.call_ended()
    clock.call_ended()
    assert clock.code_time() < 0.1 <= clock.run_time()
    clock.pause()
    time.sleep(0.2)
    clock.resume()
    assert clock.run_time() < 0.35


def test_register_replaces_and_unregister_checks():
    d = FunctionDispatcher([HostFunction(lambda: 1, name="f")])
    d.register(HostFunction(lambda: 2, name="f"))
    assert d.call("f", [], {}).result == 2
    d.unregister("f")
    with pytest.raises(FunctionRegistrationError):
        d.unregister("f")
    assert json.loads(d.specs_json()) == []


def test_in_process_calls_for_the_restricted_backend():
    d = FunctionDispatcher([add, boom], default_timeout=5)
    ok = d.call("add", [2], {"b": 3})
    assert ok.result == 5 and ok.error is None and ok.duration >= 0 and ok.started > 0
    err = d.call("boom", [], {})
    assert err.error.type == "PermissionError" and err.error.message == "no access"
    missing = d.call("nope", [], {})
    assert missing.error.type == "NameError" and "add, boom" in missing.error.message


# --- the runtime's error classes -------------------------------------------------------------------------


def test_host_errors_become_catchable_exceptions(runtime):
    exc = runtime._host_error(ValueError("bad"))
    assert isinstance(exc, ValueError) and isinstance(exc, runtime.ToolError)
    assert str(exc) == "bad" and type(exc).__name__ == "ValueError" and repr(exc) == "ValueError('bad')"
    key = runtime._host_error(KeyError("k"))
    assert isinstance(key, KeyError) and str(key) == "'k'"  # as the builtin prints it
    assert isinstance(runtime._host_error(FileNotFoundError(2, "gone", "x.txt")), OSError)
    custom = codec.ToolError("billing.QuotaExceeded", "over quota")
    assert runtime._host_error(custom) is custom
    assert type(runtime._host_error(ValueError("x"))) is type(exc)  # cached
    assert runtime.HostFunctionError is runtime.ToolError  # the old name still catches


def test_no_input_message(runtime):
    with pytest.raises(RuntimeError, match="input\\(\\) is not available in the sandbox"):
        runtime._no_input("name? ")


# --- output capping and cleaning -------------------------------------------------------------------------


def test_capped_text_keeps_head_and_tail():
    c = CappedText(100)
    for i in range(1000):
        c.write(f"{i:04d}\n")
    text = c.getvalue()
    assert c.truncated and c.dropped == 5000 - 100
    assert text.startswith("0000\n") and text.endswith("0999\n") and "characters cut" in text
    small = CappedText(100)
    small.write("short")
    assert small.getvalue() == "short" and not small.truncated


def test_capped_text_counts_what_the_kernel_cut():
    c = CappedText(100)
    c.write("head")
    c.dropped += 12345  # what the runtime reports it cut at the source
    assert c.truncated and "12345 characters cut" in c.getvalue()


class _Stream:
    name = "stdout"

    def __init__(self):
        self.parts: list[str] = []

    def write(self, text):
        self.parts.append(text)
        return len(text)


def test_runtime_output_limiter_cuts_at_the_source(runtime):
    stream = _Stream()
    limiter = runtime._OutputLimiter(stream)
    assert stream.write == limiter.write  # installed on the stream
    limiter.limit = 10
    limiter.reset()
    assert stream.write("0123456789abcdef") == 16
    for _ in range(100):
        stream.write("zz")
    stream.write("THE END")
    assert "".join(stream.parts) == "0123456789"  # only the head went out so far
    dropped = limiter.finish()
    sent = "".join(stream.parts)
    assert sent == "0123456789" + "zzzTHE END"[-10:]
    assert dropped == 16 + 200 + 7 - 20
    limiter.limit = None
    stream.write("unlimited")
    assert stream.parts[-1] == "unlimited"


def test_runtime_caps_rich_outputs(runtime):
    runtime._state.output_limit = 10
    runtime._state.rich_cut = 0
    try:
        small = {"text/plain": "short", "text/html": "<b>x</b>"}
        assert runtime._cap_bundle(small) is small
        capped = runtime._cap_bundle({"text/plain": "a" * 5 + "b" * 20 + "c" * 5, "text/html": "<p>" * 20,
                                      "image/png": "iVBOR"})
        assert capped["text/plain"] == "aaaaa\n[... 20 characters cut ...]\nccccc"
        assert "text/html" not in capped and capped["image/png"] == "iVBOR"
        assert runtime._cap_bundle({"text/html": "<p>" * 20}) == {
            "text/plain": "[an output too large for the sandbox was dropped]"}
        assert runtime._state.rich_cut == 2
    finally:
        runtime._state.output_limit = None
        runtime._state.rich_cut = 0


def test_runtime_strips_its_own_frames_from_tracebacks(runtime):
    stub = runtime._make_stub(json.loads(json.dumps(HostFunction(search).spec.to_json())))
    try:
        stub("q")
    except RuntimeError:
        tb = sys.exc_info()[2]
    names = []
    stripped = runtime._strip_tb(tb, ())
    while stripped is not None:
        names.append(stripped.tb_frame.f_code.co_name)
        stripped = stripped.tb_next
    assert names == ["test_runtime_strips_its_own_frames_from_tracebacks"]


def test_clean_traceback_and_exit_detail():
    lines = ["\x1b[0;31mValueError\x1b[0m    Traceback", "-" * 30, "Cell In[1], line 1", "",
             "    [... skipping hidden 1 frame]", "", "ValueError: x"]
    text = clean_traceback(lines)
    assert "\x1b" not in text and "skipping hidden" not in text and "-----" not in text
    assert "\n\n\n" not in text and text.endswith("ValueError: x")
    assert strip_ansi("\x1b[1;32mok\x1b[0m") == "ok"
    noise = ["WARNING | Config option x", "To connect another client", READY_MARKER]
    assert exit_detail(noise) == ""
    segfault = "Fatal Python error: Segmentation fault"
    assert exit_detail(noise + [segfault, ""]) == segfault
    assert exit_detail(["ImportError: no module named ipykernel"]) == "ImportError: no module named ipykernel"


def test_constants_match_the_runtime(runtime):
    assert runtime.READY_MARKER == READY_MARKER
    assert runtime.OUTPUT_CUT_MIME == OUTPUT_CUT_MIME


def test_result_helpers():
    png = Output({"image/png": b"\x89PNG", "text/plain": "<Figure>"})
    html = Output({"text/html": "<b>", "text/plain": "b"}, kind="result")
    r = ExecutionResult(outputs=[png, html])
    assert r.ok and r.images == [b"\x89PNG"]
    assert png.mime == "image/png" and png.is_image and html.mime == "text/html" and html.text == "b"
