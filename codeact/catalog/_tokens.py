"""Token counts with a real tokenizer whose data ships with codeact: ``cl100k_base`` (GPT-4's).

``tiktoken`` downloads its vocabularies on first use, which an air-gapped
machine cannot do; the vocabulary file is bundled here instead
(``data/cl100k_base.tiktoken.gz``, MIT, checked against tiktoken's pinned
SHA-256) and handed to ``tiktoken`` directly. Without ``tiktoken`` the count
falls back to 4 characters a token, and :func:`tokenizer_name` says so.

Example::

    from codeact.catalog import count_tokens, tokenizer_name

    count_tokens("def get_weather(city: str) -> str: ...")   # 11
    tokenizer_name()                                           # 'cl100k_base'
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
from importlib import resources
from typing import Any

#: The tokenizer every count uses.
TOKENIZER = "cl100k_base"
#: The SHA-256 of the uncompressed vocabulary, as tiktoken pins it for its own download.
_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
            r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
_SPECIAL = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}


@functools.lru_cache(maxsize=1)
def cl100k_encoding() -> Any:
    """The tiktoken ``Encoding`` (loaded once, about 0.3 s), or None without tiktoken."""
    try:
        import tiktoken
    except ImportError:
        return None
    packed = resources.files(__package__).joinpath("data").joinpath("cl100k_base.tiktoken.gz")
    raw = gzip.decompress(packed.read_bytes())
    if hashlib.sha256(raw).hexdigest() != _SHA256:
        raise RuntimeError("codeact/catalog/data/cl100k_base.tiktoken.gz is damaged (its SHA-256 does not match); "
                           "reinstall codeact")
    ranks = {}
    for line in raw.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return tiktoken.Encoding(TOKENIZER, pat_str=_PATTERN, mergeable_ranks=ranks, special_tokens=_SPECIAL)


def tokenizer_name() -> str:
    """``cl100k_base``, or ``chars/4`` when tiktoken is not installed."""
    return TOKENIZER if cl100k_encoding() is not None else "chars/4"


def count_tokens(text: str) -> int:
    """Tokens of ``text`` (special-token text counts as ordinary text)."""
    encoding = cl100k_encoding()
    if encoding is None:
        return (len(text) + 3) // 4
    return len(encoding.encode(text, disallowed_special=()))
