"""One model call of a step: the request, its streamed text, its usage, its span."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Generator, Sequence

from ..errors import ModelError, RunCancelled
from ..events import Event, ModelOutput, Step, TextDelta
from ..messages import Message, ModelResponse, Usage

if TYPE_CHECKING:  # pragma: no cover
    from ..telemetry import RunTrace


def model_turn(model: Any, messages: Sequence[Message], step: Step, *, run_id: str, stream: bool,
               cancel: threading.Event | None, tools: Sequence[dict[str, Any]] | None = None,
               trace: RunTrace | None = None, price: Callable[[Usage], Usage] | None = None,
               ) -> Generator[Event, None, ModelResponse]:
    """Ask the model once: yield TextDelta events (when streaming) and the ModelOutput; return the response.

    Fills ``step.model_output``, ``model_time`` and ``usage`` (one request at
    least). ``tools`` are function schemas for native function calling.
    ``trace`` (the run's RunTrace, None when tracing is off) gets a ``chat`` span.
    ``price`` fills in the call's cost when the model's prices are known (:meth:`RunLink.price
    <codeact.run.tree.RunLink.price>`), so the ``ModelOutput`` event (and the run log) carries it.
    """
    started = time.perf_counter()
    response: ModelResponse | None = None
    options = {"tools": list(tools)} if tools else {}
    chat = trace.chat(model, messages, stream=stream) if trace is not None else None
    try:
        if stream:
            for piece in model.stream(messages, **options):
                if isinstance(piece, str):
                    if chat is not None:
                        chat.first_chunk()
                    if cancel is not None and cancel.is_set():
                        raise RunCancelled(f"cancelled during step {step.index}")
                    yield TextDelta(run_id=run_id, step=step.index, text=piece)
                else:
                    response = piece
        else:
            response = model.complete(messages, **options)
        if response is None:
            raise ModelError("the model's stream ended without a final response")
    except BaseException as exc:
        if chat is not None:
            chat.fail(exc)
        raise
    if chat is not None:
        chat.end(response)
    step.model_time = time.perf_counter() - started
    step.model_output = response.text or ""
    step.usage = response.usage if response.usage.requests else replace(response.usage, requests=1)
    if price is not None:
        step.usage = price(step.usage)
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in response.message.tool_calls]
    yield ModelOutput(run_id=run_id, step=step.index, text=step.model_output, usage=step.usage,
                      duration=step.model_time, input_messages=len(messages),
                      input_chars=sum(len(m.content) for m in messages), tool_calls=calls)
    return response
