"""Images reach the model: a step's figures, image files and tool images go with the next observation.

Real parts: the openai client over HTTP to tests/openai_server.py, the Docker sandbox with matplotlib,
the SDK's MCP toolbox server (its ``chart`` tool returns a PNG). What is checked: the image parts that
arrive decode (Pillow) to PNG/JPEG within the size bound; older images leave the prompt; an endpoint
that rejects image parts gets the call again text only, once, with one warning; ``vision=False`` /
``--no-images`` / ``CODEACT_IMAGES=0`` send none; hostile image bytes become a line of text.
"""

from __future__ import annotations

import base64
import io
import json
import os
import struct
import subprocess
import sys
import warnings
import zlib
from pathlib import Path
from textwrap import dedent
from typing import Any

import pytest
from PIL import Image

from codeact import CodeActAgent, ReActAgent, ScriptedModel
from codeact.config import images_enabled
from codeact.errors import ConfigError
from codeact.events import Observation, RunFinished, RunResult
from codeact.images import (
    ImageError,
    attach_images,
    prepare_image,
    step_images,
    strip_old_images,
    wants_images,
)
from codeact.messages import Message
from codeact.models import OpenAIModel
from tests.mcp_servers.helpers import PYTHON, TOOLBOX, assert_no_leftovers
from tests.openai_server import OPENAI_NO_IMAGES, OpenAITestServer, Reply
from tests.openai_server import ToolCall as PlannedCall

ROOT = Path(__file__).resolve().parents[1]


def py(code: str) -> str:
    return f"Let me do that.\n```python\n{dedent(code).strip()}\n```"


def png(width: int, height: int, color: str = "red", mode: str = "RGB") -> bytes:
    out = io.BytesIO()
    Image.new(mode, (width, height), color).save(out, "PNG")
    return out.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


#: A PNG whose header claims 100000x100000 pixels (30 GB of RGB), with a few bytes of data.
BOMB = (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0))
        + _chunk(b"IDAT", zlib.compress(b"\0" * 1000)) + _chunk(b"IEND", b""))


def decoded(url: str) -> Image.Image:
    """The image of a data URL, checked to be PNG or JPEG."""
    head, _, data = url.partition(",")
    assert head in ("data:image/png;base64", "data:image/jpeg;base64"), head
    im = Image.open(io.BytesIO(base64.b64decode(data)))
    assert im.format in ("PNG", "JPEG")
    im.load()
    return im


def openai_model(server: OpenAITestServer, **options: Any) -> OpenAIModel:
    options.setdefault("max_retries", 1)
    options.setdefault("backoff", 0.01)
    return OpenAIModel("test-model", base_url=server.base_url, api_key="test-key", timeout=30, **options)


def finished(events: list[Any]) -> RunResult:
    last = events[-1]
    assert isinstance(last, RunFinished)
    return last.result


def observations(events: list[Any]) -> list[Observation]:
    return [e for e in events if isinstance(e, Observation)]


# --------------------------------------------------------------------------- the module on its own


def test_an_image_is_downscaled_and_reencoded_within_the_bound() -> None:
    part = prepare_image(png(1600, 1200), "big.png")
    assert (part.width, part.height, part.mime, part.name) == (1024, 768, "image/png", "big.png")
    im = Image.open(io.BytesIO(part.data))
    assert im.format == "PNG" and im.size == (1024, 768)
    assert part.tokens == 765  # OpenAI's tile rule: 768x576 after the fit -> 2x2 tiles
    small = prepare_image(png(640, 480), "small.png", max_side=1024)
    assert (small.width, small.height) == (640, 480)  # never upscaled
    # a photograph (noise) goes as JPEG: as PNG it would cost several times the bytes
    noise = io.BytesIO()
    Image.effect_noise((800, 600), 60).convert("RGB").save(noise, "PNG")
    photo = prepare_image(noise.getvalue(), "photo.png")
    assert photo.mime == "image/jpeg" and Image.open(io.BytesIO(photo.data)).format == "JPEG"
    assert len(photo.data) < len(noise.getvalue()) / 2
    # modes PNG would keep but that need converting: palette with transparency, 16-bit grey
    for mode, color in (("P", 3), ("I;16", 300), ("LA", (10, 20)), ("CMYK", (1, 2, 3, 4))):
        buf = io.BytesIO()
        Image.new(mode, (40, 30), color).save(buf, "TIFF" if mode == "CMYK" else "PNG")
        if mode == "CMYK":
            with pytest.raises(ImageError, match="not a PNG, JPEG"):  # TIFF is not opened at all
                prepare_image(buf.getvalue(), "x.tiff")
        else:
            assert prepare_image(buf.getvalue(), mode).width == 40


@pytest.mark.parametrize("data, why", [
    (BOMB, "too many pixels"),
    (b"garbage bytes, not an image", "not a PNG, JPEG, GIF or WebP image"),
    (b"\x89PNG\r\n\x1a\n" + b"x" * 100, "cannot be decoded"),
    (b"\xff\xd8\xff\xe0" + b"\0" * 50, "not a PNG, JPEG, GIF or WebP image"),  # a JPEG start, then nothing
])
def test_hostile_bytes_become_a_line_of_text(data: bytes, why: str) -> None:
    with pytest.raises(ImageError, match=why):
        prepare_image(data, "evil.png")
    shown = step_images([("evil.png", data), ("ok.png", png(10, 10))])
    assert [p.name for p in shown.parts] == ["ok.png"]
    assert "[image evil.png not shown to you: " in shown.note and why in shown.note


def test_at_most_n_images_a_step_the_rest_named_repeats_sent_once() -> None:
    candidates = [(f"f{i}.png", png(10 + i, 10)) for i in range(6)] + [("again.png", png(10, 10))]
    shown = step_images(candidates, max_images=4)
    assert [p.name for p in shown.parts] == ["f0.png", "f1.png", "f2.png", "f3.png"]
    assert "[images attached below, in this order: f0.png (10x10), f1.png (11x10)" in shown.note
    assert "at most 4 images a step), saved as: f4.png, f5.png]" in shown.note
    assert "again.png" not in shown.note  # the same bytes as f0.png
    # bad images use up attempts too: after 2 * max_images tries the rest are only named
    tried = step_images([(f"bad{i}.png", b"junk%d" % i) for i in range(5)] + [("good.png", png(9, 9))],
                        max_images=2)
    assert not tried.parts and tried.note.count("not shown to you: not a PNG") == 4
    assert "saved as: bad4.png, good.png]" in tried.note
    # a name from the sandbox cannot put control characters into the prompt
    odd = step_images([("a\nb\x1b.png", png(5, 5))])
    assert odd.parts[0].name == "a\\nb\\x1b.png"


def test_older_images_leave_the_prompt_named() -> None:
    a, b = prepare_image(png(30, 20), "a.png"), prepare_image(png(20, 30), "b.png")
    history = [Message("system", "s"), Message("user", "task"), Message("assistant", "code"),
               Message("user", "Observation:\n1", images=(a,)), Message("assistant", "code"),
               Message("user", "Observation:\n2", images=(b,))]
    sent = strip_old_images(history)
    assert [len(m.images) for m in sent] == [0, 0, 0, 0, 0, 1]
    assert sent[3].content == "Observation:\n1\n[image a.png (30x20) was shown here; no longer in the prompt]"
    assert history[3].images == (a,)  # the history itself is not changed
    assert [len(m.images) for m in strip_old_images(history, keep_last=2)] == [0, 0, 0, 1, 0, 1]
    assert all(not m.images for m in strip_old_images(history, keep_last=0))


def test_function_calling_images_go_in_a_user_message_after_the_tool_messages() -> None:
    shown = step_images([("mcp_tb_1.png", png(8, 8))])
    turn = [Message("assistant", "", tool_calls=()), Message("tool", "[image/png ...]", tool_call_id="c1")]
    out = attach_images(turn, shown)
    assert [m.role for m in out] == ["assistant", "tool", "user"] and not out[1].images
    assert out[2].images == shown.parts and "mcp_tb_1.png (8x8)" in out[2].content
    prompted = attach_images([Message("assistant", "x"), Message("user", "Observation: ok")], shown)
    assert len(prompted) == 2 and prompted[1].images == shown.parts
    assert prompted[1].content.startswith("Observation: ok\n[image attached below")


def test_codeact_images_setting_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEACT_IMAGES", "0")
    assert images_enabled() is False and images_enabled(True) is True
    # The agents consult the setting (models do not read the environment): no images are prepared.
    assert not wants_images(OpenAIModel("m", base_url="http://127.0.0.1:9/v1"), images_enabled())
    assert not wants_images(ScriptedModel([]), images_enabled())
    monkeypatch.setenv("CODEACT_IMAGES", "maybe")
    with pytest.raises(ConfigError, match="CODEACT_IMAGES='maybe': use 0"):
        images_enabled()
    monkeypatch.delenv("CODEACT_IMAGES")
    assert images_enabled() and wants_images(OpenAIModel("m", base_url="http://127.0.0.1:9/v1"), images_enabled())


# --------------------------------------------------------------------------- the model


def _with_image() -> list[Message]:
    return [Message("user", "Look:", images=(prepare_image(png(640, 480), "step1_figure1.png"),))]


def ask_with_image(model: OpenAIModel, how: str) -> str:
    """One request with an image part through ``how``: complete, acomplete or stream; the reply's text."""
    import asyncio

    if how == "complete":
        return model.complete(_with_image()).text
    if how == "acomplete":
        return asyncio.run(model.acomplete(_with_image())).text
    return "".join(p for p in model.stream(_with_image()) if isinstance(p, str))


@pytest.mark.parametrize("how", ["complete", "stream", "acomplete"])
def test_a_rejecting_endpoint_gets_the_call_again_text_only_and_no_images_later(
        openai_server: OpenAITestServer, how: str) -> None:
    openai_server.reject_images = OPENAI_NO_IMAGES
    model = openai_model(openai_server)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert ask_with_image(model, how) == "OK"
        assert ask_with_image(model, how) == "OK"
    rejected, retry, later = openai_server.chat_requests
    assert rejected.image_urls and not retry.image_urls and not later.image_urls
    assert retry.last_user_text == ("Look:\n[image step1_figure1.png (640x480) not shown: "
                                    "the endpoint does not take images]")
    assert model.vision is False
    ours = [w for w in caught if "does not take images" in str(w.message)]
    assert len(ours) == 1 and "image_url is only supported by certain models" in str(ours[0].message)


def test_an_error_the_text_only_request_repeats_stands_and_vision_stays_on(openai_server: OpenAITestServer) -> None:
    from codeact.errors import ModelError

    # a 400 that says nothing of images: the request is made once more without them; it fails the same way,
    # so the error stands and the images were not the cause (vision stays on)
    openai_server.plan_error(400, "Unrecognized request argument supplied: foo")
    openai_server.plan_error(400, "Unrecognized request argument supplied: foo")
    model = openai_model(openai_server)
    with pytest.raises(ModelError, match="foo"):
        model.complete(_with_image())
    assert model.vision is True
    assert [bool(r.image_urls) for r in openai_server.chat_requests] == [True, False]
    # the refusal words, but the request had no image parts: an error, not a text-only retry (no loop)
    openai_server.plan_error(400, OPENAI_NO_IMAGES)
    with pytest.raises(ModelError, match="image_url is only supported"):
        model.complete([Message("user", "no images here")])
    assert model.vision is True and len(openai_server.chat_requests) == 3


@pytest.mark.parametrize("how", ["complete", "stream", "acomplete"])
@pytest.mark.parametrize("status", [400, 422, 500, 503])
def test_any_failure_of_a_request_with_images_is_retried_once_text_only(
        openai_server: OpenAITestServer, status: int, how: str) -> None:
    # llama.cpp's Python server answers image parts with HTTP 500 and a Python error, no word of images
    openai_server.plan_error(status, 'can only concatenate str (not "list") to str')
    model = openai_model(openai_server)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert ask_with_image(model, how) == "OK"
        assert ask_with_image(model, how) == "OK"
    assert [bool(r.image_urls) for r in openai_server.chat_requests] == [True, False, False]  # remembered
    assert model.vision is False
    ours = [w for w in caught if "does not take images" in str(w.message)]
    assert len(ours) == 1 and f"HTTP {status}" in str(ours[0].message) and "can only concatenate" in str(
        ours[0].message)


def test_a_rate_limit_keeps_the_images(openai_server: OpenAITestServer) -> None:
    openai_server.plan_rate_limit(0.01)
    model = openai_model(openai_server)
    assert model.complete(_with_image()).text == "OK"
    assert [bool(r.image_urls) for r in openai_server.chat_requests] == [True, True] and model.vision is True


@pytest.mark.parametrize("message", [
    "Qwen/Qwen2.5-7B-Instruct is not a multimodal model",
    "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj",
    "litellm.BadRequestError: OllamaException - model llama3 does not support images",
])
def test_other_servers_rejections_are_recognised(openai_server: OpenAITestServer, message: str) -> None:
    openai_server.reject_images = message
    model = openai_model(openai_server)
    with pytest.warns(UserWarning, match="does not take images"):
        assert model.complete(_with_image()).text == "OK"
    assert [bool(r.image_urls) for r in openai_server.chat_requests] == [True, False]


def test_vision_false_sends_no_image_parts_and_usage_counts_images(openai_server: OpenAITestServer) -> None:
    openai_server.plan(Reply(text="seen", send_usage=False), Reply(text="seen", send_usage=False))
    with_vision = openai_model(openai_server).complete(_with_image())
    without = openai_model(openai_server, vision=False).complete(_with_image())
    sent, plain = openai_server.chat_requests
    assert len(sent.image_urls) == 1 and decoded(sent.image_urls[0]).size == (640, 480)
    assert not plain.image_urls and "step1_figure1.png (640x480) not shown" in plain.last_user_text
    # estimated usage (the server sent none): the image's tokens (OpenAI's rule: 640x480 is 2 tiles,
    # 85 + 2 * 170 = 425) are counted when it is sent
    assert _with_image()[0].images[0].tokens == 425
    assert with_vision.usage.input_tokens >= 425 > without.usage.input_tokens
    scripted = ScriptedModel(["a", "b"])
    assert scripted.complete(_with_image()).usage.input_tokens == 425 + 2  # "Look:" is 5 characters


# --------------------------------------------------------------------------- CodeAct on Docker


PLOT = """
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.plot([1, 2, 3], [3, 1, 2])
plt.show()
big = plt.figure(figsize=(16, 12), dpi=100)
plt.plot([0, 1], [1, 0])
big.savefig("big.png")
plt.close("all")
print("plotted")
"""


@pytest.mark.docker
def test_codeact_plot_reaches_the_model_and_older_images_leave(tmp_path: Path, openai_server: OpenAITestServer) -> None:
    openai_server.plan_text(py(PLOT))
    openai_server.plan_text(py("plt.plot([5, 6], [6, 5])\nplt.show()"))
    openai_server.plan_text(py("final_answer('done')"))
    agent = CodeActAgent(openai_model(openai_server), sandbox="docker", log=tmp_path / "runs.db",
                         output_dir=tmp_path / "out")
    events = list(agent.stream("Plot something"))
    result = finished(events)
    assert result.ok, result.error
    first, second, third = openai_server.chat_requests
    assert not first.image_urls
    # the figure shown (640x480) and the 1600x1200 file the code saved, downscaled to 1024
    last_user = second.messages[-1]
    assert last_user["role"] == "user" and isinstance(last_user["content"], list)
    figure, big = [decoded(url) for url in second.last_user_images]
    assert max(figure.size) <= 1024 and big.width == 1024 and 760 < big.height <= 768
    text = last_user["content"][0]["text"]
    assert (f"[images attached below, in this order: step1_figure1.png ({figure.width}x{figure.height}), "
            f"big.png ({big.width}x{big.height})]") in text
    # the next request: the images of the step before are named, not sent; only the newest step's go
    assert len(third.image_urls) == 1 and "step2_figure1.png" in third.last_user_text
    assert f"[image big.png (1024x{big.height}) was shown here; no longer in the prompt]" in json.dumps(third.messages)
    # the run log keeps the figure once (raw PNG in its images table) and never a data URL of what was sent
    db = b"".join(p.read_bytes() for p in tmp_path.glob("runs.db*"))
    assert b"data:image" not in db
    sent_b64 = second.last_user_images[1].split(",", 1)[1]
    assert sent_b64[100:160].encode() not in db


AGG_PLOT = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [3, 1, 2])
plt.title("under Agg")
plt.show()
fig, ax = plt.subplots()
ax.bar(["a", "b"], [1, 2])
print("open figures:", len(plt.get_fignums()))
"""


@pytest.mark.parametrize("backend", [pytest.param("docker", marks=pytest.mark.docker), "local"])
def test_figures_made_under_agg_reach_the_model_like_any_other(tmp_path: Path, openai_server: OpenAITestServer,
                                                               backend: str) -> None:
    # matplotlib.use("Agg") then plt.show(): Jupyter loses such figures (show() only warns under Agg); the
    # kernel shows every figure a cell leaves open under a headless backend, as the inline backend would.
    openai_server.plan_text(py(AGG_PLOT))
    openai_server.plan_text(py("import matplotlib.pyplot as plt\nprint('after:', len(plt.get_fignums()))"))
    openai_server.plan_text(py("final_answer('done')"))
    agent = CodeActAgent(openai_model(openai_server), sandbox=backend, log=False, output_dir=tmp_path / "out")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the local backend's warning that it is no boundary
        events = list(agent.stream("Plot under Agg"))
    result = finished(events)
    assert result.ok, result.error
    first, second, third = openai_server.chat_requests
    text = second.last_user_text
    assert "open figures: 2" in text and "non-interactive" not in text  # the warning is gone, not just hidden
    figures = [decoded(url) for url in second.last_user_images]
    assert len(figures) == 2 and all(f.format == "PNG" and 100 < f.width <= 1024 for f in figures)
    assert "step1_figure1.png" in text and "step1_figure2.png" in text
    assert sorted(p.name for p in (tmp_path / "out").rglob("step1_figure*.png")) == ["step1_figure1.png",
                                                                                    "step1_figure2.png"]
    # shown once, then closed as the inline backend does: the next cell starts with none open, sends none
    assert "after: 0" in third.last_user_text and not third.last_user_images


@pytest.mark.docker
def test_a_rejecting_endpoint_does_not_fail_a_codeact_run(tmp_path: Path) -> None:
    with OpenAITestServer(reject_images=OPENAI_NO_IMAGES) as server:
        server.plan_text(py(PLOT))
        server.plan_text(py(PLOT))
        server.plan_text(py("final_answer('done')"))
        agent = CodeActAgent(openai_model(server), sandbox="docker", log=False, output_dir=tmp_path)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = finished(list(agent.stream("Plot twice")))
        requests = server.chat_requests
    assert result.ok and result.answer == "done", result.error
    assert [bool(r.image_urls) for r in requests] == [False, True, False, False]
    assert "not shown: the endpoint does not take images" in requests[2].last_user_text
    assert len([w for w in caught if "does not take images" in str(w.message)]) == 1
    # after the fallback the agent does not even prepare images: the observation names the figure only
    assert "attached below" not in requests[3].last_user_text and "step2_figure1.png" in requests[3].last_user_text


@pytest.mark.docker
def test_hostile_image_files_become_text_and_the_run_goes_on(tmp_path: Path) -> None:
    photo = io.BytesIO()
    Image.new("RGB", (120, 90), "teal").save(photo, "JPEG")
    code = f"""
    from IPython.display import Image, display
    display(Image(data={photo.getvalue()!r}))
    open("bomb.png", "wb").write({BOMB!r})
    open("junk.jpg", "wb").write(b"\\xff\\xd8\\xff" + b"junk" * 1000)
    open("fine.png", "wb").write({png(300, 200)!r})
    print("wrote")
    """
    model = ScriptedModel([py(code), py("final_answer('ok')")])
    agent = CodeActAgent(model, sandbox="docker", log=False, output_dir=tmp_path)
    events = list(agent.stream("Write images"))
    result = finished(events)
    assert result.ok, result.error
    [obs, _] = observations(events)
    assert "[image bomb.png not shown to you: too many pixels" in obs.text
    assert "[image junk.jpg not shown to you: not a PNG, JPEG, GIF or WebP image]" in obs.text
    sent = model.requests[1][-1]
    assert [p.name for p in sent.images] == ["step1_figure1.jpg", "fine.png"]
    assert sent.images[0].mime == "image/jpeg" and sent.images[1].width == 300
    assert (tmp_path / result.run_id / "step1_figure1.jpg").read_bytes() == photo.getvalue()


# --------------------------------------------------------------------------- MCP tool images


@pytest.fixture(scope="module")
def toolbox() -> Any:
    from codeact.mcp import MCPServerConfig, MCPToolset

    with MCPToolset([MCPServerConfig("tb", command=PYTHON, args=(TOOLBOX,))]) as tools:
        yield tools
    assert_no_leftovers()


@pytest.mark.docker
def test_an_mcp_tools_image_reaches_a_codeact_model(tmp_path: Path, toolbox: Any) -> None:
    model = ScriptedModel([py("print(chart())"), py("final_answer('ok')")])
    agent = CodeActAgent(model, list(toolbox), sandbox="docker", log=False, output_dir=tmp_path,
                         tool_disclosure="all")
    result = finished(list(agent.stream("Draw the chart")))
    assert result.ok, result.error
    sent = model.requests[1][-1]
    assert sent.role == "user" and len(sent.images) == 1
    part = sent.images[0]
    assert part.name.startswith("mcp_tb_") and (part.width, part.height) == (1, 1)
    assert Image.open(io.BytesIO(part.data)).format == "PNG"


def test_react_function_calling_gets_the_mcp_image(tmp_path: Path, toolbox: Any,
                                                   openai_server: OpenAITestServer) -> None:
    openai_server.plan(Reply(tool_calls=(PlannedCall("chart", {}),)), Reply(text="A tiny chart."))
    agent = ReActAgent(openai_model(openai_server), list(toolbox), log=False, output_dir=tmp_path)
    result = agent.run("Show me the chart")
    assert result.ok and result.answer == "A tiny chart.", result.error
    second = openai_server.chat_requests[1]
    roles = [m["role"] for m in second.messages]
    assert roles[-3:] == ["assistant", "tool", "user"]
    assert not any(isinstance(m["content"], list) for m in second.messages[:-1])  # images only in the user message
    [url] = second.last_user_images
    assert decoded(url).size == (1, 1)
    assert "mcp_tb_" in second.messages[-1]["content"][0]["text"]


def test_react_without_vision_gets_no_image(tmp_path: Path, toolbox: Any) -> None:
    model = ScriptedModel([ScriptedModel.tool_calls(("chart", {})), "done"], vision=False)
    result = ReActAgent(model, list(toolbox), log=False, output_dir=tmp_path).run("Chart")
    assert result.ok
    assert not any(m.images for m in model.requests[1]) and model.requests[1][-1].role == "tool"


# --------------------------------------------------------------------------- the CLI


def _cli_run(server: OpenAITestServer, tmp_path: Path, *options: str, **env_vars: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_BASE_URL": server.base_url,
           "OPENAI_API_KEY": "k", "CODEACT_MODEL": "test-model", **env_vars}
    env.pop("CODEACT_SCRIPTED_REPLIES", None)
    if "CODEACT_IMAGES" not in env_vars:
        env.pop("CODEACT_IMAGES", None)
    return subprocess.run([sys.executable, "-m", "codeact.cli", "run", "Save charts", "--backend", "local",
                           "--no-log", "-o", str(tmp_path), *options],
                          capture_output=True, text=True, env=env, timeout=240)


@pytest.mark.parametrize("options, env, expected", [
    ((), {}, [0, 1, 1]),
    (("--no-images",), {}, [0, 0, 0]),
    ((), {"CODEACT_IMAGES": "0"}, [0, 0, 0]),
])
def test_cli_sends_images_unless_told_not_to(tmp_path: Path, openai_server: OpenAITestServer, options: tuple[str, ...],
                                             env: dict[str, str], expected: list[int]) -> None:
    for name in ("a", "b"):
        openai_server.plan_text(py(f"open('{name}.png', 'wb').write({png(64, 48)!r})\nprint('saved')"))
    openai_server.plan_text(py("final_answer('ok')"))
    proc = _cli_run(openai_server, tmp_path, *options, **env)
    assert proc.returncode == 0, proc.stderr
    assert [len(r.image_urls) for r in openai_server.chat_requests] == expected


def test_cli_warns_once_when_the_endpoint_rejects_images(tmp_path: Path, openai_server: OpenAITestServer) -> None:
    openai_server.reject_images = OPENAI_NO_IMAGES
    for name in ("a", "b"):
        openai_server.plan_text(py(f"open('{name}.png', 'wb').write({png(64, 48)!r})\nprint('saved')"))
    openai_server.plan_text(py("final_answer('ok')"))
    proc = _cli_run(openai_server, tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["answer"] == "ok"
    assert proc.stderr.count("does not take images") == 1, proc.stderr
    assert [len(r.image_urls) for r in openai_server.chat_requests] == [0, 1, 0, 0]
