"""Chat messages, model responses and token usage: the data that crosses the Model interface."""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ImagePart:
    """An image that goes to the model with a message (an OpenAI ``image_url`` part, as a data URL).

    ``data`` is the encoded image as it is sent (already downscaled and re-encoded by the
    caller); ``width`` and ``height`` are its pixels, ``name`` the artifact it came from
    (what a stand-in line names once the image leaves the prompt).
    """

    data: bytes = field(repr=False)
    mime: str = "image/png"
    width: int = 0
    height: int = 0
    name: str = ""

    def data_url(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"

    @property
    def tokens(self) -> int:
        """Prompt tokens the image costs, by OpenAI's published rule for ``detail: high``.

        The image is fitted within 2048x2048, then its shorter side to 768; each 512-pixel tile
        costs 170 tokens, plus 85. Other endpoints count differently; this is the estimate used for
        budgets and for usage when the server reports none.
        """
        w, h = float(max(self.width, 1)), float(max(self.height, 1))
        scale = min(1.0, 2048 / max(w, h))
        w, h = w * scale, h * scale
        scale = min(1.0, 768 / min(w, h))
        w, h = w * scale, h * scale
        return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)


@dataclass(frozen=True)
class ToolCallRequest:
    """A native function call requested by the model (ReAct / function calling)."""

    id: str
    name: str
    arguments: str  # JSON text exactly as the model produced it


@dataclass(frozen=True)
class Message:
    role: Role
    content: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str | None = None  # for role="tool"
    #: Images sent after ``content`` (user messages only: OpenAI takes image parts nowhere else).
    images: tuple[ImagePart, ...] = ()

    def to_openai(self) -> dict[str, Any]:
        content: Any = self.content
        if self.images:
            content = [{"type": "text", "text": self.content},
                       *({"type": "image_url", "image_url": {"url": image.data_url()}} for image in self.images)]
        msg: dict[str, Any] = {"role": self.role, "content": content}
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            msg["tool_call_id"] = self.tool_call_id
        return msg


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    #: Dollars, when the model's prices are known (``OpenAIModel(prices=...)``, ``RunLimits(prices=...)``).
    cost: float | None = None

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: "Usage") -> "Usage":
        costs = [c for c in (self.cost, other.cost) if c is not None]
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.requests + other.requests,
            sum(costs) if costs else None,
        )


@dataclass(frozen=True)
class ModelResponse:
    """One completion: the assistant message, its usage and how long it took."""

    message: Message
    usage: Usage = field(default_factory=Usage)
    duration: float = 0.0  # seconds, wall time of the request (all retries included)
    model: str = ""
    finish_reason: str | None = None
    #: The prompt's tokens as the endpoint itself counted them (None when it did not say, and
    #: ``usage`` is an estimate): compaction calibrates its counts against it.
    prompt_tokens: int | None = None

    @property
    def text(self) -> str:
        return self.message.content
