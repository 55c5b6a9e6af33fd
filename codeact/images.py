"""Images that go to the model with an observation: selecting, decoding, downscaling, re-encoding, bounding.

A code action's figures (``plt.show()``, ``display(Image(...))``), the PNG/JPEG files it wrote and the
images a tool returned (an MCP tool's image content) reach the model with the next observation as image
parts of a user message (:class:`~codeact.messages.ImagePart`). All of them come from the sandbox or a
tool server, so they are hostile input here:

* at most :data:`MAX_INPUT_BYTES` of one image are looked at;
* only PNG, JPEG, GIF (first frame) and WebP are opened, with Pillow, and the size in the header is
  checked against :data:`MAX_PIXELS` before any pixel is decoded (decompression bombs); Pillow's own
  :class:`~PIL.Image.DecompressionBombWarning` is an error too;
* every decoding error becomes a line of text for the model (``[image x.png not shown to you: ...]``),
  never an exception out of this module;
* the image is downscaled to ``max_side`` pixels on its longer side (default :data:`MAX_SIDE`) and
  re-encoded: PNG for plots and drawings (sharp lines and text stay sharp), JPEG (quality 85) for
  photographs (a JPEG source, or a PNG that stays large) because PNG of a photo costs 5-10x the bytes;
  a result over :data:`MAX_ENCODED_BYTES` is refused.

At most ``max_images`` (default :data:`MAX_IMAGES_PER_STEP`) go with one observation; the rest are
named in its text. Older images leave the prompt: :func:`strip_old_images` keeps the image parts of the
last observations only and names the others (the loop calls it on the message list it sends).

Pillow is imported on first use, so importing this module stays cheap.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, replace
from typing import Any, Iterable, Sequence

from .messages import ImagePart, Message

__all__ = [
    "MAX_IMAGES_PER_STEP",
    "MAX_SIDE",
    "ImageError",
    "StepImages",
    "attach_images",
    "image_size",
    "image_suffix",
    "image_tokens",
    "is_image_mime",
    "is_image_name",
    "prepare_image",
    "step_images",
    "strip_old_images",
    "wants_images",
    "without_images",
]

#: Longest side, in pixels, of an image as the model gets it.
MAX_SIDE = 1024
#: Images sent with one observation; the others are named in its text.
MAX_IMAGES_PER_STEP = 4
#: Bytes of one image the host looks at (the sandbox's and the artifact caps apply before this).
MAX_INPUT_BYTES = 32 * 1024 * 1024
#: Pixels (width x height, from the header) an image may have to be decoded at all: 36 megapixels
#: (6000x6000), about 144 MB as RGBA while it is downscaled.
MAX_PIXELS = 36_000_000
#: Bytes of one re-encoded image sent to the model.
MAX_ENCODED_BYTES = 2 * 1024 * 1024
#: A PNG with more bytes than this per pixel after downscaling is photographic: JPEG is sent instead.
_PHOTO_BYTES_PER_PIXEL = 0.75
#: ... and bigger than this: small images stay PNG whatever they show.
_SMALL_PNG = 64 * 1024
_JPEG_QUALITY = 85
#: The decoders Pillow may use: nothing exotic (each format plugin is attack surface).
_FORMATS = ("PNG", "JPEG", "GIF", "WEBP")
_MIMES = {"image/png", "image/jpeg", "image/jpg", "image/gif", "image/webp"}
_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")
#: Names listed in one "not shown" line of an observation.
_NAMES_LISTED = 10


class ImageError(ValueError):
    """An image that cannot go to the model (the message says why, for the observation)."""


def is_image_mime(mime: str) -> bool:
    """True for the raster types sent to the model (PNG, JPEG, GIF, WebP)."""
    return mime.split(";")[0].strip().lower() in _MIMES


def image_suffix(mime: str) -> str:
    """The file suffix for one of the raster types (``.png`` when unknown)."""
    base = mime.split(";")[0].strip().lower()
    return {"image/jpeg": ".jpg", "image/jpg": ".jpg", "image/gif": ".gif", "image/webp": ".webp"}.get(base, ".png")


def is_image_name(name: str) -> bool:
    """True for a file name whose suffix is one of the raster types sent to the model."""
    return name.lower().endswith(_SUFFIXES)


def wants_images(model: Any, enabled: bool = True) -> bool:
    """Whether images should be prepared for ``model``: its ``vision`` attribute (True when it has none),
    and ``enabled`` (the agents pass :func:`codeact.settings.images_enabled`: ``CODEACT_IMAGES=0`` turns it off).

    :class:`~codeact.models.OpenAIModel` turns it off itself after an endpoint rejected image parts.
    """
    return enabled and bool(getattr(model, "vision", True))


def _shown_name(name: str, limit: int = 120) -> str:
    text = ascii(name)[1:-1]  # names come from the sandbox: no control characters into the prompt
    return text if len(text) <= limit else text[: limit - 3] + "..."


def prepare_image(data: bytes, name: str = "", *, max_side: int = MAX_SIDE) -> ImagePart:
    """``data`` decoded, downscaled to ``max_side`` and re-encoded, as an :class:`ImagePart` named ``name``.

    Raises:
        ImageError: not an image of a supported type, too large, corrupt, or any other decoding
            failure (never another exception for bad bytes).
    """
    if max_side < 16:
        raise ValueError(f"max_side must be at least 16 pixels, got {max_side}")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ImageError(f"not image bytes ({type(data).__name__})")
    data = bytes(data)
    if len(data) > MAX_INPUT_BYTES:
        raise ImageError(f"{len(data):,} bytes, over the limit of {MAX_INPUT_BYTES:,}")
    import warnings

    from PIL import Image

    try:
        with warnings.catch_warnings():
            # Our own pixel check below refuses such images first; this is the second lock on the door.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=_FORMATS) as im:
                width, height = im.size
                if width < 1 or height < 1 or width * height > MAX_PIXELS:
                    raise ImageError(f"{width}x{height} pixels, over the limit of {MAX_PIXELS:,} pixels")
                source = im.format or ""
                if source == "JPEG":
                    im.draft("RGB", (max_side, max_side))  # decode a big JPEG at a fraction of its size
                im.load()
                picture = _normalised(im)
                picture.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
                encoded, mime = _encoded(picture, photo=source == "JPEG")
                size = picture.size
    except ImageError:
        raise
    except Exception as exc:  # every Pillow failure (OSError, SyntaxError, the bomb warning...) is the image's fault
        raise ImageError(_decode_failure(exc)) from None
    if len(encoded) > MAX_ENCODED_BYTES:
        raise ImageError(f"{len(encoded):,} bytes after re-encoding, over the limit of {MAX_ENCODED_BYTES:,}")
    return ImagePart(encoded, mime, size[0], size[1], name)


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the header of a PNG, JPEG, GIF or WebP image, without decoding a pixel.

    Raises:
        ImageError: not such an image, its header is broken, or it has more than :data:`MAX_PIXELS`.
    """
    import warnings

    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(bytes(data)), formats=_FORMATS) as im:
                width, height = im.size
    except Exception as exc:  # every Pillow failure is the image's fault
        raise ImageError(_decode_failure(exc)) from None
    if width < 1 or height < 1 or width * height > MAX_PIXELS:
        raise ImageError(f"{width}x{height} pixels, over the limit of {MAX_PIXELS:,} pixels")
    return width, height


def _decode_failure(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:200]
    if type(exc).__name__ == "UnidentifiedImageError":
        return "not a PNG, JPEG, GIF or WebP image"
    if "DecompressionBomb" in type(exc).__name__:
        return f"too many pixels ({text})"
    return f"cannot be decoded ({type(exc).__name__}: {text})" if text else f"cannot be decoded ({type(exc).__name__})"


def _normalised(im: Any) -> Any:
    """``im`` in a mode PNG and JPEG both take: RGB or L, with alpha kept where there is some."""
    mode = im.mode
    if mode in ("RGBA", "LA") and im.getchannel("A").getextrema()[0] == 255:
        return im.convert(mode[:-1])  # opaque (every matplotlib figure): a third less to scale and encode
    if mode in ("RGB", "L", "RGBA", "LA"):
        return im
    if mode in ("P", "PA"):
        return im.convert("RGBA" if mode == "PA" or "transparency" in im.info else "RGB")
    if mode == "1":
        return im.convert("L")
    if mode.startswith(("I", "F")):  # 16/32-bit greyscale: scale into 8 bits
        im = im.convert("I")
        low, high = im.getextrema()
        scale = 255 / ((high - low) or 1)
        return im.point(lambda v: v * scale - low * scale).convert("L")
    return im.convert("RGBA" if "A" in mode else "RGB")  # CMYK, YCbCr, LAB, ...


def _encoded(im: Any, *, photo: bool) -> tuple[bytes, str]:
    """(bytes, mime): PNG, or JPEG for a photograph (see the module docs)."""
    if not photo:
        out = io.BytesIO()
        im.save(out, format="PNG", compress_level=6)
        png = out.getvalue()
        if len(png) <= max(_PHOTO_BYTES_PER_PIXEL * im.size[0] * im.size[1], _SMALL_PNG):
            return png, "image/png"
    if im.mode in ("RGBA", "LA"):  # JPEG has no alpha: put the picture on white
        from PIL import Image

        background = Image.new("RGB", im.size, "white")
        background.paste(im.convert("RGBA"), mask=im.convert("RGBA").getchannel("A"))
        im = background
    out = io.BytesIO()
    im.save(out, format="JPEG", quality=_JPEG_QUALITY, optimize=True)
    return out.getvalue(), "image/jpeg"


@dataclass(frozen=True)
class StepImages:
    """The images of one step as they go to the model, and the text that goes with them.

    ``note`` names the images attached (in order, with their size as sent), and those not sent
    (over the per-step limit, or not decodable, with the reason); "" when there were none.
    """

    parts: tuple[ImagePart, ...] = ()
    note: str = ""
    #: The candidates' names of ``parts``, in order (for the run log: a resumed session sends them again).
    names: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.parts or self.note)


def step_images(candidates: Iterable[tuple[str, bytes]], *, max_side: int = MAX_SIDE,
                max_images: int = MAX_IMAGES_PER_STEP) -> StepImages:
    """The images of one step, from ``(name, bytes)`` candidates in the order the model should see them.

    The same bytes under two names are sent once; after ``max_images`` decoded images the rest are
    only named, and so are all after ``2 * max_images`` attempts (bad images cost decoding time too).
    Never raises for bad image bytes (each becomes a line of the note).
    """
    parts: list[ImagePart] = []
    names: list[str] = []
    over: list[str] = []
    failed: list[str] = []
    seen: set[bytes] = set()
    attempts = 0
    for name, data in candidates:
        if not isinstance(data, (bytes, bytearray)):
            continue
        digest = hashlib.sha256(data).digest()
        if digest in seen:
            continue
        seen.add(digest)
        if len(parts) >= max_images or attempts >= 2 * max_images:
            over.append(_shown_name(name))
            continue
        attempts += 1
        try:
            parts.append(prepare_image(bytes(data), _shown_name(name), max_side=max_side))
            names.append(name)
        except ImageError as exc:
            failed.append(f"[image {_shown_name(name)} not shown to you: {exc}]")
    lines: list[str] = []
    if parts:
        listing = ", ".join(f"{p.name or 'image'} ({p.width}x{p.height})" for p in parts)
        lines.append(f"[image{'s' if len(parts) > 1 else ''} attached below, in this order: {listing}]")
    lines.extend(failed)
    if over:
        listed = ", ".join(over[:_NAMES_LISTED])
        more = f" and {len(over) - _NAMES_LISTED} more" if len(over) > _NAMES_LISTED else ""
        lines.append(f"[not shown to you (at most {max_images} images a step), saved as: {listed}{more}]")
    return StepImages(tuple(parts), "\n".join(lines), tuple(names))


def withheld_images(candidates: Iterable[tuple[str, bytes]], why: str) -> StepImages:
    """The images of one step kept from the model: none sent, and a note naming them (each once) and ``why``."""
    names: list[str] = []
    seen: set[bytes] = set()
    for name, data in candidates:
        if not isinstance(data, (bytes, bytearray)):
            continue
        digest = hashlib.sha256(data).digest()
        if digest not in seen:
            seen.add(digest)
            names.append(_shown_name(name))
    if not names:
        return StepImages()
    listed = ", ".join(names[:_NAMES_LISTED])
    more = f" and {len(names) - _NAMES_LISTED} more" if len(names) > _NAMES_LISTED else ""
    return StepImages(note=f"[image{'s' if len(names) > 1 else ''} not shown to you ({why}), saved as: {listed}{more}]")


def attach_images(messages: Sequence[Message], images: StepImages,
                  header: str = "Images from the results above:") -> list[Message]:
    """``messages`` (what one step adds to the history) with ``images`` attached.

    The images go on the last message when it is a user message (an observation); otherwise (tool
    messages of native function calling: OpenAI takes image parts in user messages only) a user
    message with ``header``, the note and the images is added after them.
    """
    out = list(messages)
    if not images:
        return out
    if out and out[-1].role == "user":
        last = out[-1]
        note = f"\n{images.note}" if images.note and images.note not in last.content else ""
        out[-1] = replace(last, content=last.content + note, images=last.images + images.parts)
    else:
        out.append(Message("user", f"{header}\n{images.note}".strip(), images=images.parts))
    return out


def _gone_line(part: ImagePart, why: str) -> str:
    return f"[image {part.name or 'without a name'} ({part.width}x{part.height}) {why}]"


def strip_old_images(messages: Sequence[Message], keep_last: int = 1) -> list[Message]:
    """``messages`` with image parts only on the last ``keep_last`` messages that carry any.

    Older images leave the prompt the way old observations do: each is replaced by a line naming it
    (the artifact stays saved). The messages given are not changed.
    """
    out = list(messages)
    with_images = [i for i, m in enumerate(out) if m.images]
    older = with_images[: max(len(with_images) - max(keep_last, 0), 0)]
    for i in older:
        m = out[i]
        lines = "\n".join(_gone_line(p, "was shown here; no longer in the prompt") for p in m.images)
        out[i] = replace(m, content=f"{m.content}\n{lines}" if m.content else lines, images=())
    return out


def without_images(messages: Sequence[Message], why: str = "not shown: the endpoint does not take images"
                   ) -> list[Message]:
    """``messages`` with every image replaced by a line naming it (for an endpoint without vision)."""
    out: list[Message] = []
    for m in messages:
        if m.images:
            lines = "\n".join(_gone_line(p, why) for p in m.images)
            m = replace(m, content=f"{m.content}\n{lines}" if m.content else lines, images=())
        out.append(m)
    return out


def image_tokens(messages: Iterable[Message]) -> int:
    """Prompt tokens the images of ``messages`` cost (OpenAI's tile rule, :attr:`ImagePart.tokens`)."""
    return sum(p.tokens for m in messages for p in m.images)
