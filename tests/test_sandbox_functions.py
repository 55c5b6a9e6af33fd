"""Host functions at unit level: value conversions, specs and stubs, the dispatcher.

No kernel here: the in-kernel runtime is stdlib-only, so its stub builder and
its half of the JSON conversions are imported and checked directly against
the host's half.
"""

import asyncio
import dataclasses
import datetime as dt
import decimal
import enum
import importlib.util
import inspect
import json
import sys
import threading
import time
import types
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal, Optional

import pytest

from sandbox.errors import FunctionRegistrationError
from sandbox.functions import (
    CALL_PREFIX,
    FunctionDispatcher,
    HostFunction,
    as_host_functions,
    encode_reply,
    from_json_value,
    to_json_value,
)
from sandbox.kernel import OUTPUT_CUT_MIME, READY_MARKER, clean_traceback, exit_detail
from sandbox.result import CappedText, ExecutionResult, Output, strip_ansi


@pytest.fixture(scope="module")
def runtime() -> types.ModuleType:
    """The in-kernel runtime module, loaded on the host (it only needs the standard library)."""
    path = Path(__file__).resolve().parents[1] / "sandbox" / "runtime" / "sandbox_runtime.py"
    spec = importlib.util.spec_from_file_location("sandbox_runtime_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    when: dt.datetime
    tags: set


# --- value conversions -----------------------------------------------------------------------------------


def test_json_conversions_follow_the_documented_rules():
    value = {
        "bytes": b"\x00\xff",
        "bytearray": bytearray(b"ab"),
        "tuple": (1, 2),
        "set": {3},
        1: "int key",
        "enum": Color.RED,
        "dataclass": Point(1, dt.datetime(2024, 1, 2, 3, 4, 5), {"a"}),
        "date": dt.date(2024, 1, 2),
        "time": dt.time(3, 4),
        "path": PurePosixPath("/a/b"),
        "decimal": decimal.Decimal("1.10"),
        "other": object.__new__(type("Thing", (), {"__str__": lambda self: "a thing"})),
    }
    out = to_json_value(value)
    json.dumps(out)  # must be JSON now
    assert out["bytes"] == {"__bytes__": "AP8="}
    assert out["bytearray"] == {"__bytes__": "YWI="}
    assert out["tuple"] == [1, 2] and out["set"] == [3]
    assert out["1"] == "int key"
    assert out["enum"] == "red"
    assert out["dataclass"] == {"x": 1, "when": "2024-01-02T03:04:05", "tags": ["a"]}
    assert out["date"] == "2024-01-02" and out["time"] == "03:04:00"
    assert out["path"] == "/a/b" and out["decimal"] == "1.10"
    assert out["other"] == "a thing"


def test_bytes_round_trip_and_nesting():
    value = {"a": [b"x", {"b": b"\x00\x01"}], "s": "plain", "n": None}
    assert from_json_value(json.loads(json.dumps(to_json_value(value)))) == value
    # A dict that merely has other keys besides __bytes__ is left alone.
    assert from_json_value({"__bytes__": "AA==", "other": 1}) == {"__bytes__": "AA==", "other": 1}


def test_numpy_pandas_and_pydantic_values():
    np = pytest.importorskip("numpy")
    pd = pytest.importorskip("pandas")
    assert to_json_value(np.int64(3)) == 3
    assert to_json_value(np.arange(3)) == [0, 1, 2]
    assert to_json_value(pd.DataFrame({"a": [1, 2]})) == [{"a": 1}, {"a": 2}]
    assert to_json_value(pd.Series([1.5])) == {"0": 1.5}
    pydantic = pytest.importorskip("pydantic")

    class Model(pydantic.BaseModel):
        name: str
        when: dt.date

    assert to_json_value(Model(name="n", when=dt.date(2024, 1, 1))) == {"name": "n", "when": "2024-01-01"}


def test_runtime_conversions_match_the_host(runtime):
    value = {"b": b"\xff", "t": (1, Color.RED), "d": Point(2, dt.datetime(2020, 1, 1), set()), "p": Path("x")}
    assert runtime._to_json(value) == to_json_value(value)
    wire = json.loads(json.dumps(to_json_value({"b": b"\x01", "l": [b"\x02"]})))
    assert runtime._from_json(wire) == from_json_value(wire) == {"b": b"\x01", "l": [b"\x02"]}


# --- specs and stubs -------------------------------------------------------------------------------------


def search(query: str, /, limit: int = 10, *tags: str, exact: bool = False, since: dt.date = dt.date(2020, 1, 1),
           mode: Literal["a", "b"] = "a", note: Optional[str] = None,
           label: Annotated[str, "a label"] = "x", **extra: int) -> list[dict]:
    """Search the index.

    Args:
        query: What to look for.
    """
    return []


def test_spec_captures_the_signature_as_data():
    spec = HostFunction(search).spec
    assert spec.name == "search" and spec.doc.startswith("Search the index.")
    kinds = [(p.name, p.kind) for p in spec.parameters]
    assert kinds == [
        ("query", "positional_only"), ("limit", "positional_or_keyword"), ("tags", "var_positional"),
        ("exact", "keyword_only"), ("since", "keyword_only"), ("mode", "keyword_only"), ("note", "keyword_only"),
        ("label", "keyword_only"), ("extra", "var_keyword"),
    ]
    by_name = {p.name: p for p in spec.parameters}
    assert by_name["limit"].default == 10 and by_name["limit"].default_repr is None
    assert by_name["since"].default_repr == "datetime.date(2020, 1, 1)"  # shown, never sent
    assert by_name["query"].annotation == "str" and not by_name["query"].has_default
    json.dumps(spec.to_json())


def test_stub_rebuilds_the_same_signature_and_docstring(runtime):
    spec = json.loads(json.dumps(HostFunction(search).spec.to_json()))
    stub = runtime._make_stub(spec)
    assert stub.__name__ == "search" and stub.__doc__ == inspect.getdoc(search)
    assert str(inspect.signature(stub)) == str(inspect.signature(search)).replace("typing.", "")


def test_stub_checks_arguments_before_calling_the_host(runtime):
    stub = runtime._make_stub(json.loads(json.dumps(HostFunction(search).spec.to_json())))
    with pytest.raises(TypeError, match=r"search\(\)"):
        stub()  # query is required
    with pytest.raises(TypeError, match=r"search\(\)"):
        stub(query="q")  # positional-only
    with pytest.raises(RuntimeError, match="only be called while the sandbox runs code"):
        stub("q", 5, "t1", exact=True, anything=1)  # valid; no kernel here


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


# --- dispatcher ------------------------------------------------------------------------------------------


def test_dispatcher_records_results_errors_and_unknown_names():
    seen = []

    def add(a: int, b: int = 1) -> int:
        return a + b

    def boom() -> None:
        raise PermissionError("no access")

    d = FunctionDispatcher([add, boom], on_call=seen.append)
    ok = d.call("add", [2], {"b": 3})
    assert ok.result == 5 and ok.error is None and ok.duration >= 0 and ok.started > 0
    err = d.call("boom", [], {})
    assert err.error.type == "PermissionError" and err.error.message == "no access"
    missing = d.call("nope", [], {})
    assert missing.error.type == "NameError" and "add, boom" in missing.error.message
    assert seen == [ok, err, missing]


def test_dispatcher_wire_format():
    d = FunctionDispatcher([lambda_free_echo])
    reply, record = d.handle_request(json.dumps({"name": "lambda_free_echo", "args": [{"__bytes__": "AP8="}],
                                                 "kwargs": {}}))
    assert record.args == [b"\x00\xff"]
    assert json.loads(reply) == {"ok": True, "value": {"got": {"__bytes__": "AP8="}, "when": "2024-01-01",
                                                       "set": [1]}}
    reply, record = d.handle_request("{not json")
    assert json.loads(reply)["ok"] is False and record.error.type == "ValueError"
    failure = json.loads(encode_reply(d.call("lambda_free_echo", [], {})))
    assert failure["ok"] is False and failure["type"] == "TypeError"


def lambda_free_echo(data: bytes) -> dict:
    return {"got": data, "when": dt.date(2024, 1, 1), "set": {1}}


def test_dispatcher_timeout_and_abandoned_calls_do_not_block_later_ones():
    release = threading.Event()

    def hang() -> None:
        release.wait(30)

    def quick() -> str:
        return "quick"

    d = FunctionDispatcher([hang, quick], default_timeout=0.2)
    try:
        started = time.monotonic()
        for _ in range(6):  # more than any small worker pool would have
            rec = d.call("hang", [], {})
            assert rec.error.type == "TimeoutError" and "did not return within 0.2 s" in rec.error.message
        assert d.call("quick", [], {}).result == "quick"
        assert time.monotonic() - started < 5
    finally:
        release.set()
        d.close()


def test_per_function_timeout_overrides_the_default():
    d = FunctionDispatcher([HostFunction(lambda: time.sleep(0.5) or "late", name="late", timeout=0.05)],
                           default_timeout=10)
    assert d.call("late", [], {}).error.type == "TimeoutError"
    d2 = FunctionDispatcher([HostFunction(lambda: "direct", name="direct")], default_timeout=None)
    assert d2.call("direct", [], {}).result == "direct"


def test_register_replaces_and_unregister_checks():
    d = FunctionDispatcher([HostFunction(lambda: 1, name="f")])
    d.register(HostFunction(lambda: 2, name="f"))
    assert d.call("f", [], {}).result == 2
    d.unregister("f")
    with pytest.raises(FunctionRegistrationError):
        d.unregister("f")
    assert json.loads(d.specs_json()) == []


# --- the runtime's error classes -------------------------------------------------------------------------


def test_host_errors_become_catchable_exceptions(runtime):
    value_error = runtime._error_class("ValueError")
    exc = value_error("bad")
    assert isinstance(exc, ValueError) and isinstance(exc, runtime.HostFunctionError)
    assert str(exc) == "bad" and value_error.__name__ == "ValueError"
    assert str(runtime._error_class("KeyError")("k")) == "k"  # not "'k'"
    assert issubclass(runtime._error_class("FileNotFoundError"), OSError)
    custom = runtime._error_class("MyToolError")
    assert issubclass(custom, runtime.HostFunctionError) and not issubclass(custom, ValueError)
    assert not issubclass(runtime._error_class("SystemExit"), SystemExit)  # never a BaseException escape
    assert runtime._error_class("ValueError") is value_error  # cached


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
    assert exit_detail(noise + ["Fatal Python error: Segmentation fault", ""]) == "Fatal Python error: Segmentation fault"
    assert exit_detail(["ImportError: no module named ipykernel"]) == "ImportError: no module named ipykernel"


def test_constants_match_the_runtime(runtime):
    assert runtime.CALL_PREFIX == CALL_PREFIX
    assert runtime.READY_MARKER == READY_MARKER
    assert runtime.OUTPUT_CUT_MIME == OUTPUT_CUT_MIME


def test_result_helpers():
    png = Output({"image/png": b"\x89PNG", "text/plain": "<Figure>"})
    html = Output({"text/html": "<b>", "text/plain": "b"}, kind="result")
    r = ExecutionResult(outputs=[png, html])
    assert r.ok and r.images == [b"\x89PNG"]
    assert png.mime == "image/png" and png.is_image and html.mime == "text/html" and html.text == "b"
