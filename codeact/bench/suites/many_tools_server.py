"""One of the ``many-tools`` suite's MCP servers (stdio): ``python many_tools_server.py DOMAIN``.

The suite starts one process per domain of :mod:`.many_tools_world` (twelve
servers, thirty tools each), written with the official MCP SDK. Tools are
generated from the world's specs with real signatures, so each has a typed
JSON schema with parameter descriptions and an output schema. Offline and
deterministic.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

from pydantic import Field

if __package__ in (None, ""):  # run as a script: make the world importable without installing anything
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import many_tools_world as world
else:
    from . import many_tools_world as world

_TYPES: dict[str, Any] = {"str": str, "int": int, "optional-str": Optional[str]}
_RETURNS: dict[str, Any] = {"record": dict[str, Any], "records": list[dict[str, Any]], "counts": dict[str, int],
                            "number": float}


def _function(spec: world.ToolSpec) -> Any:
    def tool(**arguments: Any) -> Any:
        return world.call_tool(spec.name, **{k: v for k, v in arguments.items() if v is not None})

    params = []
    for name, kind, about, default in spec.params:
        # the parameter's type is chosen at run time from the spec: no static type to check
        annotation = Annotated[_TYPES[kind], Field(description=about)]  # type: ignore[valid-type]
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                                        default=inspect.Parameter.empty if default is ... else default))
    # inspect (and so the MCP SDK) reads a function's __signature__; typeshed does not declare it on functions
    tool.__signature__ = inspect.Signature(params, return_annotation=_RETURNS[spec.returns])  # type: ignore[attr-defined]
    tool.__name__ = tool.__qualname__ = spec.name
    tool.__doc__ = spec.description
    return tool


def build(domain_name: str) -> Any:
    """The MCP server of one domain (not started)."""
    from mcp.server.mcpserver import MCPServer

    domain = world.domain(domain_name)
    server = MCPServer(domain.name, instructions=domain.about)
    for spec in world.tool_specs(domain):
        server.add_tool(_function(spec), name=spec.name, description=spec.description)
    return server


def main() -> None:
    if len(sys.argv) != 2:
        names = ", ".join(d.name for d in world.DOMAINS)
        sys.exit(f"usage: many_tools_server.py DOMAIN   (one of: {names})")
    build(sys.argv[1]).run()


if __name__ == "__main__":
    main()
