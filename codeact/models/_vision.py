"""Images to an endpoint that may not take them: which failures dropping the images may fix, and one call's fallback.

An endpoint that answers a request with image parts with an error gets the same request again, text
only (each image named in a line), once. The model stops sending images for good when the error says
"no images" in words, or when the text-only request that followed was answered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..messages import Message
from ._failures import error_detail, is_context_overflow

#: Words of an error that says the endpoint takes no image parts (OpenAI "Invalid content type. image_url is
#: only supported by certain models.", vLLM "... is not a multimodal model", llama.cpp "image input is not
#: supported", LiteLLM/Ollama "... does not support vision/images", TGI "unknown variant `image_url`").
IMAGE_WORDS = ("image", "vision", "multimodal", "multi-modal")
REFUSAL_WORDS = ("not support", "only supported", "unsupported", "not a multimodal", "invalid content type",
                 "unknown variant", "not enabled", "not allowed", "does not accept", "doesn't support",
                 "cannot", "can't", "no vision", "not multimodal", "must be a string")

#: Turns images off for the model: ``(the failure, whether it said "no images" in words) -> None``.
TurnOff = Callable[[BaseException, bool], None]


def sent_messages(messages: Sequence[Message], *, images: bool) -> Sequence[Message]:
    """The messages as they go out: without image parts (each named in a line) unless ``images``."""
    if images or not any(m.images for m in messages):
        return messages
    from ..images import without_images

    return without_images(messages)


def rejects_images(detail: str) -> bool:
    """Whether an error message says the endpoint takes no images."""
    text = detail.lower()
    return any(w in text for w in IMAGE_WORDS) and any(w in text for w in REFUSAL_WORDS)


def has_image_parts(body: dict[str, Any]) -> bool:
    """Whether a request body carries image parts."""
    return any(isinstance(m.get("content"), list) and any(p.get("type") == "image_url" for p in m["content"])
               for m in body.get("messages", ()))


def dropping_images_may_fix(exc: BaseException, body: dict[str, Any]) -> bool:
    """True when the request ``body`` carried image parts and failed with ``exc`` in a way that
    dropping them may fix: the call is then made again text only, once (never for a request
    without image parts: no loop).

    Any HTTP 4xx or 5xx qualifies but for the key (401, 403), the model's name (404), a rate limit
    (429) and a prompt over the context window (compaction's business). Servers word "no images"
    in many ways, and some just fail (llama.cpp's Python server: HTTP 500 "can only concatenate
    str (not "list") to str").
    """
    import openai

    if not (isinstance(exc, openai.APIStatusError) and 400 <= exc.status_code < 600
            and exc.status_code not in (401, 403, 404, 429) and has_image_parts(body)):
        return False
    return not is_context_overflow(exc.code, error_detail(exc), exc)


class ImageFallback:
    """One call's fallback to text only: images are dropped after the first failure of a request that
    had them; the model is told to stop sending them when the error said so in words
    (:func:`rejects_images`), or when the text-only request that followed at once was answered (a
    failure right after proves nothing about the images).

    Args:
        turn_off: called to turn images off for the model (it warns once).
    """

    def __init__(self, turn_off: TurnOff) -> None:
        self.turn_off = turn_off
        self.dropped = False
        self.cause: BaseException | None = None  # the failure the next answer would blame on the images

    def drops(self, exc: BaseException, body: dict[str, Any]) -> bool:
        """Whether to ask again without images after ``exc`` (at most once per call)."""
        if self.dropped or not dropping_images_may_fix(exc, body):
            return False
        if rejects_images(error_detail(exc)):
            self.turn_off(exc, True)
        self.dropped, self.cause = True, exc
        return True

    def failed(self) -> None:
        self.cause = None

    def answered(self) -> None:
        if self.cause is not None:
            self.turn_off(self.cause, False)
            self.cause = None
