"""Token counts with real tokenizers whose data ships with codeact: ``cl100k_base`` and ``o200k_base``.

``tiktoken`` downloads its vocabularies on first use, which an air-gapped
machine cannot do; the vocabulary files are bundled here instead
(``data/cl100k_base.tiktoken.gz``, GPT-4's, and ``data/o200k_base.tiktoken.gz``,
GPT-4o's and later; MIT, each checked against tiktoken's pinned SHA-256) and
handed to ``tiktoken`` directly. Without ``tiktoken`` the count falls back to
4 characters a token, and :func:`tokenizer_name` says so.

The tool catalogue counts with ``cl100k_base`` (:data:`TOKENIZER`);
:mod:`codeact.context_window` picks the encoding by the model's name.

Example::

    from codeact.catalog import bundled_encoding, count_tokens, tokenizer_name

    count_tokens("def get_weather(city: str) -> str: ...")   # 11
    tokenizer_name()                                           # 'cl100k_base'
    len(bundled_encoding("o200k_base").encode("héllo wörld"))  # 4
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
from dataclasses import dataclass
from importlib import resources
from typing import Any

#: The tokenizer the catalogue's counts use.
TOKENIZER = "cl100k_base"


@dataclass(frozen=True)
class _Spec:
    #: The SHA-256 of the uncompressed vocabulary, as tiktoken pins it for its own download.
    sha256: str
    pattern: str
    special: dict[str, int]


#: What tiktoken's ``tiktoken_ext.openai_public`` defines for each bundled encoding.
_SPECS = {
    "cl100k_base": _Spec(
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
        r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
        {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259, "<|fim_suffix|>": 100260,
         "<|endofprompt|>": 100276}),
    "o200k_base": _Spec(
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        "|".join([
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]),
        {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}),
}
#: The encodings whose vocabulary ships with codeact.
BUNDLED_ENCODINGS: tuple[str, ...] = tuple(_SPECS)


@functools.lru_cache(maxsize=len(_SPECS))
def bundled_encoding(name: str) -> Any:
    """The tiktoken ``Encoding`` ``name`` (one of :data:`BUNDLED_ENCODINGS`; loaded once, 0.3-0.5 s),
    or None without tiktoken."""
    spec = _SPECS.get(name)
    if spec is None:
        raise ValueError(f"no bundled encoding {name!r}; the bundled ones are {', '.join(_SPECS)}")
    try:
        import tiktoken
    except ImportError:
        return None
    packed = resources.files(__package__).joinpath("data").joinpath(f"{name}.tiktoken.gz")
    raw = gzip.decompress(packed.read_bytes())
    if hashlib.sha256(raw).hexdigest() != spec.sha256:
        raise RuntimeError(f"codeact/catalog/data/{name}.tiktoken.gz is damaged (its SHA-256 does not match); "
                           "reinstall codeact")
    ranks = {}
    for line in raw.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return tiktoken.Encoding(name, pat_str=spec.pattern, mergeable_ranks=ranks, special_tokens=spec.special)


def cl100k_encoding() -> Any:
    """The ``cl100k_base`` tiktoken ``Encoding`` (loaded once, about 0.3 s), or None without tiktoken."""
    return bundled_encoding("cl100k_base")


def tokenizer_name() -> str:
    """``cl100k_base``, or ``chars/4`` when tiktoken is not installed."""
    return TOKENIZER if cl100k_encoding() is not None else "chars/4"


def count_tokens(text: str) -> int:
    """Tokens of ``text`` (special-token text counts as ordinary text)."""
    encoding = cl100k_encoding()
    if encoding is None:
        return (len(text) + 3) // 4
    return len(encoding.encode(text, disallowed_special=()))
