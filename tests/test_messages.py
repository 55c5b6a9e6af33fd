"""codeact.messages: what a message with images looks like on the wire, and what an image costs."""

import base64

from codeact.messages import ImagePart, Message


def test_a_message_with_images_becomes_text_then_image_url_parts():
    png = b"\x89PNG\r\n\x1a\nfake"
    msg = Message("user", "Observation:\nplot", images=(ImagePart(png, "image/png", 10, 10, "fig.png"),))
    wire = msg.to_openai()
    assert wire["role"] == "user"
    text, image = wire["content"]
    assert text == {"type": "text", "text": "Observation:\nplot"}
    url = image["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == png


def test_a_message_without_images_keeps_plain_text_content():
    assert Message("user", "hi").to_openai() == {"role": "user", "content": "hi"}


def test_image_tokens_follow_openais_tile_rule():
    # 1024x1024 -> shorter side to 768 -> 2x2 tiles of 512: 85 + 4 * 170 (OpenAI's own worked example).
    assert ImagePart(b"", width=1024, height=1024).tokens == 765
    # 2048x4096 -> fits 1024x2048 -> 768x1536 -> 2x3 tiles: 85 + 6 * 170 (also OpenAI's example).
    assert ImagePart(b"", width=2048, height=4096).tokens == 1105
    assert ImagePart(b"", width=100, height=50).tokens == 255  # one tile
