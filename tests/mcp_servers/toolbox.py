"""An MCP server written with the official SDK, for the tests: every kind of result and behaviour.

Run: ``python tests/mcp_servers/toolbox.py [stdio|http|sse] [--port N]``.

Tools: text, structured output, an image, audio, an error, a resource link,
a tool whose name is not an identifier, schemas with anyOf/oneOf, nested
objects, arrays of objects and $ref, one that adds a tool (and announces the
change), one that reports progress, one that is slow, one that makes the
server exit mid-call, and one that answers with the text blocks it is given
(JSON or not, no structured content). Also a resource and a prompt. The tools
that only read are annotated ``readOnlyHint``; place_order, add_tool and crash
are not (an MCP client asks before it runs them).
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
from typing import Annotated, Literal, Union

import anyio
from mcp.server.mcpserver import Audio, Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, ResourceLink, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

# A valid 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
WAV = b"RIFF$\x00\x00\x00WAVEfmt " + b"\x00" * 24

app = MCPServer("toolbox", instructions="A toolbox for codeact's tests.")

#: Tools that only read (clients run them without asking); place_order, add_tool and crash have no annotations.
READ_ONLY = ToolAnnotations(read_only_hint=True)


class Weather(BaseModel):
    city: str
    temperature: float = Field(description="degrees Celsius")
    conditions: Literal["sunny", "cloudy", "rain"]


class Address(BaseModel):
    street: str = Field(description="street and number")
    city: str


class LineItem(BaseModel):
    sku: str
    quantity: int = Field(ge=1)


class Card(BaseModel):
    kind: Literal["card"] = "card"
    number: str


class Invoice(BaseModel):
    kind: Literal["invoice"] = "invoice"
    email: str


class Order(BaseModel):
    customer: str
    address: Address
    items: list[LineItem]
    payment: Annotated[Union[Card, Invoice], Field(discriminator="kind")]
    note: str | None = None
    priority: int | str = 1


@app.tool(annotations=READ_ONLY)
def echo(text: str) -> str:
    """Return the text unchanged.

    Args:
        text: what to echo
    """
    return text


@app.tool(structured_output=False, annotations=READ_ONLY)
def shout(text: str) -> str:
    """Upper-case the text (plain text content, no structured output)."""
    return text.upper()


@app.tool(annotations=READ_ONLY)
def weather(city: str) -> Weather:
    """Current weather in a city."""
    return Weather(city=city, temperature=21.5, conditions="sunny")


@app.tool(annotations=READ_ONLY)
def chart() -> Image:
    """A tiny chart, as a PNG image."""
    return Image(data=PNG, format="png")


@app.tool(annotations=READ_ONLY)
def beep() -> Audio:
    """A short sound."""
    return Audio(data=WAV, format="wav")


@app.tool(annotations=READ_ONLY)
def fail(message: str) -> str:
    """Always fails with the given message."""
    raise ToolError(message)


@app.tool(annotations=READ_ONLY)
def link() -> list[ResourceLink]:
    """A link to the hello note."""
    return [ResourceLink(type="resource_link", uri="note://hello", name="hello", mime_type="text/plain")]


@app.tool(structured_output=False, annotations=READ_ONLY)
def text_blocks(texts: list[str], image: bool = False) -> list[TextContent | ImageContent]:
    """Answer with each of TEXTS as its own text block, no structured content (and an image block if IMAGE)."""
    blocks: list[TextContent | ImageContent] = [TextContent(type="text", text=t) for t in texts]
    if image:
        blocks.append(ImageContent(type="image", data=base64.b64encode(PNG).decode(), mime_type="image/png"))
    return blocks


@app.tool(name="get-user.info", annotations=READ_ONLY)
def get_user_info(user_id: int) -> dict:
    """A tool whose name is not a Python identifier."""
    return {"id": user_id, "name": "Ada"}


@app.tool()
def place_order(order: Order, dry_run: bool = True) -> dict:
    """Place an order (nested objects, arrays of objects, a oneOf union, $ref)."""
    return {"total_items": sum(i.quantity for i in order.items), "payment": order.payment.kind,
            "city": order.address.city, "dry_run": dry_run}


@app.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Add a tool called NAME that returns 'NAME is new', and announce the change."""

    def new_tool() -> str:
        return f"{name} is new"

    app.add_tool(new_tool, name=name, description=f"A tool added at run time ({name}).")
    await ctx.request_context.session.send_tool_list_changed()  # handshake-era sessions
    await ctx.notify_tools_changed()  # 2026-era sessions (subscriptions/listen)
    return f"added {name}"


@app.tool(annotations=READ_ONLY)
async def work(steps: int, ctx: Context) -> str:
    """Report progress for each of STEPS steps."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1} of {steps}")
        await anyio.sleep(0.02)
    return f"did {steps} steps"


@app.tool(annotations=READ_ONLY)
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await anyio.sleep(seconds)
    return f"slept {seconds}"


@app.tool()
def crash() -> str:
    """Make the server exit in the middle of the call."""
    print("toolbox: crashing on purpose (exit code 3)", file=sys.stderr, flush=True)
    os._exit(3)


@app.tool(annotations=READ_ONLY)
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@app.resource("note://hello", name="hello", mime_type="text/plain")
def hello_note() -> str:
    return "Hello from a resource."


@app.prompt()
def review(code: str) -> str:
    """Ask for a code review."""
    return f"Please review this code:\n{code}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", nargs="?", default="stdio", choices=["stdio", "http", "sse"])
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    print(f"toolbox: starting ({args.transport})", file=sys.stderr, flush=True)
    if args.transport == "stdio":
        app.run()
    elif args.transport == "http":
        app.run("streamable-http", host="127.0.0.1", port=args.port)
    else:
        app.run("sse", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
