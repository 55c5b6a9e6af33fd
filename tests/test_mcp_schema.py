"""Tool.from_schema (JSON schema -> typed stub + validator) and the mcpServers configuration."""

from __future__ import annotations

import ast
import json
import re

import pytest

from codeact.errors import ConfigError, ToolArgumentError, ToolDefinitionError
from codeact.mcp import MCPServerConfig, load_config, parse_config, parse_server_spec
from codeact.tools import Tool
from codeact.tools._json_schema import python_name, render_type


def make(schema, output=None, name="t"):
    return Tool.from_schema(name, "Does things.", schema, lambda args, ctx: args, output_schema=output)


def test_scalars_enums_defaults_and_optional_order():
    t = make({"type": "object", "required": ["city"], "properties": {
        "unit": {"enum": ["C", "F"], "default": "C", "description": "temperature unit"},
        "city": {"type": "string", "description": "city name"},
        "days": {"type": ["integer", "null"]},
    }}, {"type": "number"})
    stub = t.python_stub()
    ast.parse(stub)
    assert stub.splitlines()[0] == "def t(city: str, unit: Literal['C', 'F'] = 'C', days: int | None = ...) -> float:"
    assert "city: city name" in stub and "unit: temperature unit" in stub
    assert t.call({"city": "Oslo"}) == {"city": "Oslo"}  # left-out optionals are not sent
    assert t.bind(("Oslo", "F"), {}) == {"city": "Oslo", "unit": "F"}


def test_nested_objects_arrays_of_objects_refs_and_recursion_render_as_named_types():
    schema = {
        "type": "object", "required": ["order"],
        "properties": {"order": {"$ref": "#/$defs/Order"}, "tree": {"$ref": "#/$defs/Node"}},
        "$defs": {
            "Order": {"type": "object", "required": ["items"], "properties": {
                "items": {"type": "array", "items": {"type": "object", "required": ["sku"], "properties": {
                    "sku": {"type": "string", "description": "stock keeping unit"}, "qty": {"type": "integer"}}}},
                "ship_to": {"type": "object", "properties": {"city": {"type": "string"}}},
                "pay": {"oneOf": [{"$ref": "#/$defs/Card"}, {"type": "string"}]},
            }},
            "Card": {"type": "object", "properties": {"number": {"type": "string"}}},
            "Node": {"type": "object",
                     "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}},
        },
    }
    stub = make(schema).python_stub()
    ast.parse(stub)
    assert "def t(order: Order, tree: Node = ...)" in stub
    assert 'Order: {"items": list[Item], "ship_to": ShipTo = ..., "pay": Card | str = ...}' in stub
    assert 'Item: {"sku": str, "qty": int = ...}' in stub and "sku: stock keeping unit" in stub
    assert 'Node: {"children": list[Node] = ...}' in stub  # recursion ends in the type's name


def test_any_of_all_of_and_free_form_objects():
    assert render_type({"anyOf": [{"type": "string"}, {"type": "null"}]}) == "str | None"
    assert render_type({"type": "object", "additionalProperties": {"type": "number"}}) == "dict[str, float]"
    assert render_type({"type": "object"}) == "dict[str, Any]"
    assert render_type({}) == "Any"
    assert render_type({"allOf": [{"type": "integer"}]}) == "int"
    assert render_type({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False}) \
        == "tuple[str, int]"
    assert render_type({"$ref": "https://example.com/remote.json"}) == "Any"  # never fetched


def test_property_names_that_are_not_identifiers_are_renamed_and_sent_under_their_own_names():
    t = make({"type": "object", "required": ["file-path"], "properties": {
        "file-path": {"type": "string"}, "from": {"type": "string"}, "2d": {"type": "boolean"}}})
    assert t.python_stub().splitlines()[0] == "def t(file_path: str, from_: str = ..., _2d: bool = ...):"
    assert t.call({"file_path": "a", "from_": "b", "_2d": True}) == {"file-path": "a", "from": "b", "2d": True}
    assert python_name("a b", {"a_b"}) == "a_b_2"


def test_missing_descriptions_and_an_empty_schema_are_fine():
    t = Tool.from_schema("ping", "", {"type": "object"}, lambda a, c: "pong")
    assert t.python_stub() == "def ping():\n    ..."
    assert t.call({}) == "pong"


def test_validation_reports_every_problem_with_the_signature():
    t = make({"type": "object", "required": ["city", "items"], "properties": {
        "city": {"type": "string"},
        "items": {"type": "array", "items": {"type": "object", "required": ["sku"],
                                             "properties": {"sku": {"type": "string"}, "qty": {"minimum": 1}}}}}})
    with pytest.raises(ToolArgumentError) as err:
        t.call({"city": 3, "items": [{"qty": 0}]})
    text = str(err.value)
    assert "city: 3 is not of type 'string'" in text
    assert "items[0]: 'sku' is a required property" in text
    assert "items[0]['qty']: 0 is less than the minimum of 1" in text
    assert text.endswith("expected: t(city: str, items: list[Item])")
    with pytest.raises(ToolArgumentError, match=r"unknown argument 'cty' \(did you mean 'city'\?\)"):
        t.call({"cty": "x", "items": []})
    with pytest.raises(ToolArgumentError, match="items: missing required argument"):
        t.call({"city": "x"})
    with pytest.raises(ToolArgumentError, match="a object cannot be sent as JSON|cannot be sent as JSON"):
        t.call({"city": "x", "items": [object()]})


def test_tuples_become_lists_and_an_invalid_schema_still_checks_names():
    t = make({"type": "object", "properties": {"xs": {"type": "array"}}})
    assert t.call({"xs": (1, 2)}) == {"xs": [1, 2]}
    weird = make({"type": "object", "properties": {"x": {"type": "no-such-type"}}})
    assert weird.call({"x": 1}) == {"x": 1}
    with pytest.raises(ToolArgumentError):
        weird.call({"y": 1})


def test_bad_definitions_are_refused():
    with pytest.raises(ToolDefinitionError, match="identifier"):
        Tool.from_schema("get-user", "", {"type": "object"}, lambda a, c: None)
    with pytest.raises(ToolDefinitionError, match="object"):
        Tool.from_schema("t", "", {"type": "string"}, lambda a, c: None)


# --------------------------------------------------------------------------- configuration


def test_config_transports_env_expansion_and_disabled(tmp_path):
    env = {"TOKEN": "s3cret", "HOME": "/home/x"}
    servers = parse_config({"mcpServers": {
        "git": {"command": "uvx", "args": ["mcp-server-git", "--repository", "${env:HOME}/repo"],
                "env": {"KEY": "${env:TOKEN}"}, "cwd": "sub"},
        "api": {"url": "https://api.example.com/mcp", "headers": {"Authorization": "Bearer ${env:TOKEN}"}},
        "old": {"url": "http://127.0.0.1:9000/sse"},
        "forced": {"url": "http://127.0.0.1:9000/events", "type": "sse", "timeout": 5},
        "off": {"command": "nothing", "disabled": True},
        "dflt": {"command": "x", "args": ["${env:MISSING:-fallback}"]},
    }}, "servers.json", env, tmp_path)
    by = {s.name: s for s in servers}
    assert set(by) == {"git", "api", "old", "forced", "dflt"}
    assert by["git"].transport == "stdio" and by["git"].args[-1] == "/home/x/repo"
    assert by["git"].env == {"KEY": "s3cret"}
    assert by["git"].cwd == str(tmp_path / "sub")
    assert by["api"].transport == "http" and by["api"].headers["Authorization"] == "Bearer s3cret"
    assert by["old"].transport == "sse" and by["forced"].transport == "sse" and by["forced"].timeout == 5
    assert by["dflt"].args == ("fallback",)


@pytest.mark.parametrize("doc, where", [
    ({"servers_typo": {}}, "no \"mcpServers\" key"),
    ({"mcpServers": []}, "mcpServers must be an object"),
    ({"mcpServers": {"git": "uvx mcp-server-git"}}, "mcpServers.git: expected an object"),
    ({"mcpServers": {"git": {"command": "uvx", "args": "mcp-server-git"}}}, "mcpServers.git.args: expected a list"),
    ({"mcpServers": {"git": {"command": "uvx", "args": [["x"]]}}}, "mcpServers.git.args[0]: expected a string"),
    ({"mcpServers": {"git": {"args": ["x"]}}}, "mcpServers.git: give either \"command\""),
    ({"mcpServers": {"git": {"command": "x", "comand": "y"}}}, "mcpServers.git: unknown key 'comand'"),
    ({"mcpServers": {"a": {"url": "ftp://x"}}}, "mcpServers.a: \"url\" must start with http"),
    ({"mcpServers": {"a": {"url": "http://x", "type": "websocket"}}}, "mcpServers.a.type: unknown transport"),
    ({"mcpServers": {"a": {"command": "x", "env": {"K": "${env:NOPE_NOT_SET}"}}}},
     "mcpServers.a.env.K: the environment variable NOPE_NOT_SET is not set"),
    ({"mcpServers": {"a": {"command": "x", "timeout": -1}}}, "mcpServers.a.timeout: expected a positive number"),
])
def test_malformed_config_names_the_file_and_the_key(tmp_path, doc, where):
    path = tmp_path / "servers.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(str(path) + ":")
    assert where in str(err.value)


def test_config_file_that_is_not_json_says_where(tmp_path):
    path = tmp_path / "servers.json"
    path.write_text('{"mcpServers": {"a": {"command": "x",}}}')
    with pytest.raises(ConfigError, match=r"servers.json: not valid JSON: .* line 1, column"):
        load_config(path)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.json")


def test_server_spec_from_the_command_line():
    s = parse_server_spec("time=mcp-server-time --local-timezone 'Europe/Paris'")
    assert (s.name, s.command, s.args, s.transport) == (
        "time", "mcp-server-time", ("--local-timezone", "Europe/Paris"), "stdio")
    assert parse_server_spec("api=http://127.0.0.1:8000/mcp").transport == "http"
    for bad in ("no-equals", "=cmd", "x=", "x='unbalanced"):
        with pytest.raises(ConfigError, match="--mcp-server"):
            parse_server_spec(bad)
    assert MCPServerConfig("a", command="x").describe() == "stdio: x"


def test_parse_json_text_setting_is_read_and_checked():
    def one(entry):
        return parse_config({"mcpServers": {"tb": {"command": "x", **entry}}}, "servers.json")[0]

    assert one({}).parse_json_text is True
    assert one({"parseJsonText": False}).parse_json_text is False
    for wrong in ("false", 0, None, [True]):
        with pytest.raises(ConfigError, match=r"servers.json: mcpServers.tb.parseJsonText: expected true or false, "
                                              rf"got {re.escape(repr(wrong))}"):
            one({"parseJsonText": wrong})
    with pytest.raises(ConfigError, match="parse_json_text must be True or False, got 'no'"):
        MCPServerConfig("tb", command="x", parse_json_text="no")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="known keys: .*parseJsonText"):
        one({"parseJSONText": False})
