"""The privacy filter: placeholders in what the model sees, real values in the sandbox and the tools.

The unit tests exercise :class:`codeact.privacy.Redactor`; the Docker test
runs the real CodeAct loop (scripted model) and checks the model's context,
the tool's arguments on the host and the run log.
"""

from __future__ import annotations

import json
import re
import sqlite3

import pytest

from codeact.agent import CodeActAgent
from codeact.errors import ConfigError
from codeact.events import Observation
from codeact.models import ScriptedModel
from codeact.privacy import PrivacyFilter
from codeact.react import ReActAgent
from codeact.runlog import RunLog
from codeact.tools import tool

CUSTOMER = {"name": "Ada Lovelace", "email": "ada@example.com", "phone": "+44 20 7946 0958",
            "address": {"street": "12 Hidden Lane", "city": "London"}, "since": "2021-03-04"}


def test_patterns_give_stable_placeholders_per_session() -> None:
    r = PrivacyFilter().session()
    text = r.redact("Mail ada@example.com or bob@example.org, call +44 20 7946 0958; again ada@example.com. "
                    "Order 123456789 on 2021-03-04.")
    assert text == ("Mail <EMAIL_1> or <EMAIL_2>, call <PHONE_1>; again <EMAIL_1>. "
                    "Order 123456789 on 2021-03-04.")  # a bare number and a date are not phone numbers
    assert r.redact("ada@example.com") == "<EMAIL_1>"  # the same value, the same placeholder, later too


def test_fields_of_a_tools_result_and_custom_patterns() -> None:
    privacy = PrivacyFilter(patterns=["email", ("IBAN", r"\b[A-Z]{2}\d{2}[A-Z0-9]{11,30}\b")],
                            fields={"get_customer": ["$.name", "$.address.street"]})
    r = privacy.session()
    r.learn("get_customer", CUSTOMER)
    r.learn("other_tool", {"name": "Not Hidden"})  # only the named tool's fields
    shown = r.redact(str(CUSTOMER) + " IBAN DE89370400440532013000, Not Hidden")
    assert "Ada Lovelace" not in shown and "12 Hidden Lane" not in shown and "ada@example.com" not in shown
    assert "<NAME_1>" in shown and "<STREET_1>" in shown and "<IBAN_1>" in shown and "Not Hidden" in shown
    assert "London" in shown


def test_restore_maps_only_this_sessions_placeholders() -> None:
    privacy = PrivacyFilter()
    r = privacy.session()
    r.redact("write to ada@example.com")
    assert r.restore({"to": "<EMAIL_1>", "cc": ["<EMAIL_2>"], "body": "Dear <EMAIL_1>"}) == {
        "to": "ada@example.com", "cc": ["<EMAIL_2>"], "body": "Dear ada@example.com"}
    # another session never issued <EMAIL_1>: a placeholder it was not shown maps to nothing
    assert privacy.session().restore("<EMAIL_1>") == "<EMAIL_1>"


def test_bad_configuration_says_what_to_give() -> None:
    with pytest.raises(ConfigError):
        PrivacyFilter(patterns=["postcode"])
    with pytest.raises(ConfigError):
        PrivacyFilter(patterns=[("IBAN", "[unclosed")])
    with pytest.raises(ConfigError):
        PrivacyFilter(fields={"get_customer": ["email"]})


@tool
def get_customer(customer_id: str) -> dict:
    """A customer's record."""
    return CUSTOMER


@pytest.mark.docker
def test_placeholders_for_the_model_real_values_for_tools_and_none_in_the_log(tmp_path) -> None:
    sent: list[dict] = []

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an e-mail."""
        sent.append({"to": to, "body": body})
        return f"sent to {to}"

    model = ScriptedModel([
        "```python\nc = get_customer('c1')\nprint(c)\nprint(c['email'].startswith('ada@'))\n```",
        # the model only knows the placeholders, and writes them into the tool call
        "```python\nprint(send_email(to='<EMAIL_1>', body='Your street: <STREET_1>'))\n"
        "final_answer('Mailed <EMAIL_1>')\n```",
    ])
    db = tmp_path / "runs.db"
    agent = CodeActAgent(model, [get_customer, send_email], log=str(db), output_dir=tmp_path / "out",
                         privacy=PrivacyFilter(fields={"get_customer": {"$.address.street": "STREET"}}))
    events = list(agent.stream("Check customer c1 (ada@example.com) and mail them their street."))
    result = events[-1].result
    assert result.ok, result.error
    seen = "\n".join(m.content for request in model.requests for m in request)
    for secret in ("ada@example.com", "+44 20 7946 0958", "12 Hidden Lane"):
        assert secret not in seen
    assert "<EMAIL_1>" in model.requests[0][1].content  # the task, too
    first = [e for e in events if isinstance(e, Observation)][0]
    assert "<PHONE_1>" in first.text and "<STREET_1>" in first.text and "'London'" in first.text
    assert "True" in first.text  # the sandbox holds the real values
    assert "Privacy:" in model.requests[0][0].content
    # on the host the tool got the values back, and so did the caller's answer
    assert sent == [{"to": "ada@example.com", "body": "Your street: 12 Hidden Lane"}]
    assert result.answer == "Mailed ada@example.com"
    # the run log has placeholders only
    record = RunLog(db).get_run(result.run_id)
    assert record is not None
    with sqlite3.connect(db) as conn:
        dump = "\n".join(conn.iterdump())
    assert "<EMAIL_1>" in dump
    # The phone's digits in any spacing (a bare "7946" also turns up in the log's durations and timestamps).
    digits = re.sub(r"\D", "", dump)
    for secret in ("ada@example.com", "7946 0958", "12 Hidden Lane"):
        assert secret not in dump
    assert "4420794609" not in digits


def test_a_react_agent_gets_the_same_filter(tmp_path) -> None:
    """ReAct's model calls the tools itself: it reads placeholders, writes them into its calls, and the tools,
    the answer and no one else get the values back; the run log keeps placeholders only."""
    sent: list[dict] = []

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an e-mail."""
        sent.append({"to": to, "body": body})
        if "Lane" not in body:
            raise ValueError(f"no street in {body!r} for {to}")  # an error that carries the values back
        return f"sent to {to}"

    def action(name: str, **arguments: object) -> str:
        return "Thought: next.\nAction: " + json.dumps({"name": name, "arguments": arguments})

    model = ScriptedModel([
        action("get_customer", customer_id="c1"),
        action("send_email", to="<EMAIL_1>", body="Hello"),
        action("send_email", to="<EMAIL_1>", body="Your street: <STREET_1>"),
        action("final_answer", answer="Mailed <EMAIL_1> at <PHONE_1>"),
    ])
    db = tmp_path / "runs.db"
    agent = ReActAgent(model, [get_customer, send_email], format="json", log=str(db),
                       privacy=PrivacyFilter(fields={"get_customer": {"$.address.street": "STREET"}}))
    events = list(agent.stream("Check customer c1 (ada@example.com) and mail them their street."))
    result = events[-1].result
    assert result.ok, result.error
    seen = "\n".join(str(m.content) for request in model.requests for m in request)
    for secret in ("ada@example.com", "7946 0958", "12 Hidden Lane"):
        assert secret not in seen
    assert "Privacy:" in model.requests[0][0].content and "<EMAIL_1>" in model.requests[0][1].content
    first, failed = [e for e in events if isinstance(e, Observation)][:2]
    assert "<PHONE_1>" in first.text and "<STREET_1>" in first.text and "'London'" in first.text
    assert "ValueError" in failed.text and "<EMAIL_1>" in failed.text and "ada@" not in failed.text
    assert sent == [{"to": "ada@example.com", "body": "Hello"},
                    {"to": "ada@example.com", "body": "Your street: 12 Hidden Lane"}]
    assert result.answer == "Mailed ada@example.com at +44 20 7946 0958"
    with sqlite3.connect(db) as conn:
        dump = "\n".join(conn.iterdump())
    assert "<EMAIL_1>" in dump and "<STREET_1>" in dump
    for secret in ("ada@example.com", "7946 0958", "12 Hidden Lane"):
        assert secret not in dump
    assert "4420794609" not in re.sub(r"\D", "", dump)


def _png_showing_text() -> bytes:
    """A small PNG, as a screenshot of a customer record would be (pixels the filter cannot read)."""
    import io

    from PIL import Image, ImageDraw

    image = Image.new("RGB", (220, 30), "white")
    ImageDraw.Draw(image).text((4, 8), "ada@example.com", fill="black")
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


@pytest.mark.parametrize("send_images", [False, True])
def test_with_the_filter_on_images_reach_the_model_only_when_allowed(tmp_path, openai_server, send_images) -> None:
    import warnings

    from codeact.models import OpenAIModel

    png = _png_showing_text()
    openai_server.plan_text("```python\nwith open('record.png', 'wb') as f:\n"
                            f"    f.write(bytes.fromhex('{png.hex()}'))\nprint('saved the record')\n```")
    openai_server.plan_text("```python\nfinal_answer('done')\n```")
    model = OpenAIModel("test-model", base_url=openai_server.base_url, api_key="k", max_retries=0)
    agent = CodeActAgent(model, sandbox="restricted", log=False, output_dir=tmp_path / "out",
                         privacy=PrivacyFilter(send_images=send_images))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the restricted backend's warning that it is no boundary
        events = list(agent.stream("Save the record of ada@example.com as an image."))
    assert events[-1].result.ok, events[-1].result.error
    second = openai_server.chat_requests[1]
    observation = [e for e in events if isinstance(e, Observation)][0]
    # The image is an artifact of the run either way, and the program's events have it.
    assert (tmp_path / "out" / observation.run_id / "record.png").read_bytes() == png
    assert "record.png" in observation.artifacts
    if send_images:
        assert len(second.last_user_images) == 1 and observation.sent_images == ["record.png"]
        assert "withheld" not in second.last_user_text
    else:
        # No image part went over the wire; the model is told which image was withheld and why.
        assert not any(isinstance(m.get("content"), list) and any(p.get("type") == "image_url" for p in m["content"])
                       for request in openai_server.chat_requests for m in request.messages)
        assert observation.sent_images == []
        assert ("[image not shown to you (withheld by the privacy filter: an image may show what it hides; "
                "PrivacyFilter(send_images=True) sends images), saved as: record.png]") in observation.text
        assert "withheld by the privacy filter" in second.last_user_text
    assert "ada@example.com" not in json.dumps([r.messages for r in openai_server.chat_requests])


@pytest.mark.parametrize("options, images", [((), 0), (("--private-images",), 1)])
def test_the_cli_withholds_images_under_private_unless_private_images(tmp_path, openai_server, options,
                                                                      images) -> None:
    from click.testing import CliRunner

    from codeact.cli import cli

    png = _png_showing_text()
    openai_server.plan_text("```python\nwith open('record.png', 'wb') as f:\n"
                            f"    f.write(bytes.fromhex('{png.hex()}'))\n```")
    openai_server.plan_text("```python\nfinal_answer('done')\n```")
    result = CliRunner().invoke(cli, [
        "run", "Save the record", "--json", "--model", "test-model", "--base-url", openai_server.base_url,
        "--api-key", "sk-test", "--backend", "restricted", "--private", "email", *options, "--no-log",
        "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    second = openai_server.chat_requests[1]
    assert len(second.last_user_images) == images
    assert ("withheld by the privacy filter" in second.last_user_text) == (images == 0)
