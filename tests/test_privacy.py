"""The privacy filter: placeholders in what the model sees, real values in the sandbox and the tools.

The unit tests exercise :class:`codeact.privacy.Redactor`; the Docker test
runs the real CodeAct loop (scripted model) and checks the model's context,
the tool's arguments on the host and the run log.
"""

from __future__ import annotations

import sqlite3

import pytest

from codeact.agent import CodeActAgent
from codeact.errors import ConfigError
from codeact.events import Observation
from codeact.models import ScriptedModel
from codeact.privacy import PrivacyFilter
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


@pytest.mark.docker
def test_placeholders_for_the_model_real_values_for_tools_and_none_in_the_log(tmp_path) -> None:
    sent: list[dict] = []

    @tool
    def get_customer(customer_id: str) -> dict:
        """A customer's record."""
        return CUSTOMER

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
    for secret in ("ada@example.com", "7946", "12 Hidden Lane"):
        assert secret not in dump
