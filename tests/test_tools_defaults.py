"""codeact.tools: defaults stay on the host; the model and the sandbox see literal defaults only."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any

import pytest

from codeact.errors import ToolArgumentError
from codeact.tools import Tool, tool
from sandbox.functions import FunctionDispatcher

SECRET = "sk-live-0123456789abcdef"
reprs: list[str] = []  # every time a secret-holding object was turned into text


class ApiClient:
    """Stands in for a client object that carries a key."""

    def __repr__(self) -> str:
        reprs.append("repr")
        return f"ApiClient(key={SECRET!r})"

    def __str__(self) -> str:
        reprs.append("str")
        return SECRET

    def __format__(self, spec: str) -> str:
        reprs.append("format")
        return SECRET


class SneakyStr(str):
    """A str subclass: its value is harmless, its repr is not."""

    def __repr__(self) -> str:
        reprs.append("sneaky")
        return SECRET


class Unit(enum.Enum):
    C = "C"
    F = "F"


CLIENT = ApiClient()


@dataclasses.dataclass
class Settings:
    region: str = "eu"
    client: Any = CLIENT  # a secret default one level down, in a structured type


# Defaults that are containers or built objects, named here rather than written in the signatures: the value a tool
# gets is the same, and ruff's B006/B008 (one shared mutable default) hold for the tests too.
CLIENTS = [CLIENT]
SETTINGS = Settings()
EMPTY_SET: set[int] = set()
NESTED = {"k": [1, None, True]}
LIST_WITH_AN_OBJECT = [object()]


@pytest.fixture(autouse=True)
def _no_reprs_yet() -> None:
    reprs.clear()


def make_tool() -> Tool[Any, Any]:
    def search(
        query: str,
        client: Any = CLIENT,
        token: str = "Bearer " + SECRET * 4,  # a literal, but too long to show
        clients: list[Any] = CLIENTS,  # a container holding a non-literal
        label: str = SneakyStr("public"),
        *,
        settings: Settings = SETTINGS,
        limit: int = 10,
    ) -> dict[str, Any]:
        """Search with the configured client."""
        return {"client": client, "token": token, "clients": clients, "label": label, "limit": limit}

    return Tool(search)


def all_the_text(t: Tool[Any, Any]) -> str:
    """Everything about a tool that can reach a prompt, a log or the sandbox."""
    hf = t.host_function(lambda a, k: None)
    return "\n".join(
        [
            t.python_stub(),
            json.dumps(t.openai_schema()),
            repr(t),
            json.dumps(hf.spec.to_json()),
            str(hf.signature),
            repr(hf),
            hf.doc,
        ]
    )


def test_non_literal_defaults_never_leave_the_host() -> None:
    t = make_tool()
    text = all_the_text(t)
    assert SECRET not in text
    assert "ApiClient" not in text
    assert reprs == []  # nothing even asked the objects for their text


def test_they_show_as_ellipsis_and_literals_as_themselves() -> None:
    stub = make_tool().python_stub()
    assert (
        "def search(query: str, client: Any = ..., token: str = ..., clients: list[Any] = ..., label: str = ..., "
        "*, settings: Settings = ..., limit: int = 10) -> dict[str, Any]:"
    ) in stub
    assert 'Settings: {"region": str = \'eu\', "client": Any = ...}' in stub


def test_schema_keeps_literal_defaults_only() -> None:
    props = make_tool().parameters["properties"]
    assert props["limit"]["default"] == 10
    for name in ("client", "token", "clients", "label", "settings"):
        assert "default" not in props[name], name
    assert "default" not in props["settings"]["properties"]["client"]
    assert props["settings"]["properties"]["region"]["default"] == "eu"
    assert make_tool().parameters.get("required") == ["query"]


def test_sandbox_signature_shows_ellipsis() -> None:
    t = make_tool()
    hf = t.host_function(lambda a, k: None)
    shown = {name: repr(p.default) for name, p in hf.signature.parameters.items() if p.default is not p.empty}
    assert shown == {
        "client": "...",
        "token": "...",
        "clients": "...",
        "label": "...",
        "settings": "...",
        "limit": "10",
    }
    for p in hf.spec.parameters:
        text = getattr(p, "default_text", None) or getattr(p, "default_repr", None)
        if p.name != "limit" and p.name != "query":
            assert text == "...", p


def test_the_host_applies_the_real_defaults() -> None:
    t = make_tool()
    result = t.call({"query": "q"})
    assert result["client"] is CLIENT
    assert result["clients"][0] is CLIENT
    assert type(result["label"]) is SneakyStr

    # From the sandbox: the stub forwards only what the code passed; the host fills in the rest.
    seen: list[Any] = []
    hf = t.host_function(lambda a, k: seen.append(t.call(t.bind(a, k))))
    dispatcher = FunctionDispatcher([hf])
    try:
        record = dispatcher.call("search", ["q"], {"limit": 3})
    finally:
        dispatcher.close()
    assert record.error is None
    assert seen[0]["client"] is CLIENT and seen[0]["limit"] == 3


def test_errors_show_the_signature_without_secrets() -> None:
    t = make_tool()
    with pytest.raises(ToolArgumentError) as info:
        t.call({"query": "q", "limit": "many"})
    assert "expected: search(query: str, client: Any = ..." in str(info.value)
    assert SECRET not in str(info.value)
    assert reprs == []


def test_what_counts_as_a_literal() -> None:
    @tool
    def shapes(
        a=(1, "a"),
        b=frozenset({1}),
        c=EMPTY_SET,
        d=float("nan"),
        e="x" * 61,
        f=b"\x00",
        g=NESTED,
        h=-1.5,
        i=(1,),
        j=float("inf"),
        k=LIST_WITH_AN_OBJECT,
    ) -> None:
        """Literal or not."""

    header = shapes.python_stub().splitlines()[0]
    assert header == (
        "def shapes(a=(1, 'a'), b=frozenset({1}), c=set(), d=..., e=..., f=b'\\x00', "
        "g={'k': [1, None, True]}, h=-1.5, i=(1,), j=..., k=...) -> None:"
    )
    props = shapes.parameters["properties"]
    assert {name for name, p in props.items() if "default" in p} == {"a", "b", "c", "f", "g", "h", "i"}
    assert props["a"]["default"] == [1, "a"]


def test_enum_defaults_show_their_value_when_it_is_a_literal() -> None:
    @tool
    def convert(value: float, unit: Unit = Unit.C) -> str:
        """Convert."""
        return unit.value

    assert "unit: Literal['C', 'F'] = 'C'" in convert.python_stub()
    assert convert.parameters["properties"]["unit"]["default"] == "C"
