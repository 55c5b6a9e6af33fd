"""How long a model's context window is, and how many tokens a prompt takes of it.

The compaction of long sessions (:mod:`codeact.compaction`) asks two things:

- :func:`context_window` — the window of a model in tokens: ``OpenAIModel(context_window=N)``
  when given; else what a context-length error taught (the number the endpoint named); else
  what the endpoint reports in its model list (``max_model_len``, ``context_length``...,
  read once per model, on first need); else None (unknown).
- :func:`count_tokens` — the prompt tokens a list of messages takes: the model's real
  tokenizer where one is known, a conservative estimate otherwise; images count by
  :attr:`codeact.messages.ImagePart.tokens`.

Which tokenizer (:func:`tokenizer_name`): the one the model was given
(``OpenAIModel(tokenizer=...)``: ``"cl100k_base"``, ``"o200k_base"``, ``"estimate"`` or a function
that counts a text's tokens, e.g. a Hugging Face tokenizer's); else OpenAI's encoding for OpenAI's
names, as tiktoken maps them (both bundled with codeact, counted exactly): ``cl100k_base`` for GPT-3.5
and GPT-4, ``o200k_base`` for GPT-4o, GPT-4.1, GPT-4.5, GPT-5, o1, o3 and o4-mini (and gpt-oss, whose
``o200k_harmony`` adds only special tokens to it). Every other model gets ``"estimate"``: the larger of the
``cl100k_base`` count and a character rule (ASCII characters other than digits / 3, each digit
one token, each non-ASCII character one token). The character rule covers tokenizers that are
less thrifty than ``cl100k_base`` on prose and code (about 1.35x its count there) and those that
split numbers digit by digit (Qwen, Llama 2, Gemma); the ``cl100k_base`` floor covers what the
character rule alone undercounts: JSON, tables of numbers, hex and base64, CJK text and emoji.
Without ``tiktoken`` the estimate counts each non-ASCII character by its UTF-8 bytes, which no
byte-level tokenizer exceeds, and every model gets it.

The module also reads the window out of what endpoints say: :func:`window_from_model_list` (a
``GET /models`` answer) and :func:`overflow_numbers` (a context-length error), and tells such
errors apart (:func:`is_context_overflow`).

Example::

    from codeact.context_window import context_window, count_tokens

    window = context_window(model)          # e.g. 8192, or None
    used = count_tokens(model, messages)
"""

from __future__ import annotations

import math
import re
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .messages import Message

__all__ = [
    "MESSAGE_OVERHEAD",
    "TOOL_CALL_OVERHEAD",
    "context_window",
    "count_tokens",
    "is_context_overflow",
    "overflow_numbers",
    "tokenizer_name",
    "window_from_model_list",
]

#: Tokens every message costs beyond its text (role, separators), as OpenAI's chat format adds them.
MESSAGE_OVERHEAD = 4
#: Tokens every native tool call costs beyond its name and arguments (id, type, JSON scaffolding).
TOOL_CALL_OVERHEAD = 8

#: Windows outside this range are not believed (a typo, an overflowed integer, a hostile list).
_MIN_WINDOW, _MAX_WINDOW = 16, 100_000_000
#: At most this many entries of a model list are looked at.
_MAX_LISTED_MODELS = 10_000


# --------------------------------------------------------------------------- the window


def context_window(model: Any) -> int | None:
    """The model's context window in tokens, or None when nothing says it.

    For a model that can discover its window (:meth:`codeact.models.OpenAIModel.discover_context_window`)
    this asks it: the first call may read the endpoint's model list once (bounded; a failure means
    unknown, never an error). For any other model it reads the ``context_window`` attribute.
    """
    discover = getattr(model, "discover_context_window", None)
    window = discover() if callable(discover) else getattr(model, "context_window", None)
    return _window_value(window)


def _window_value(value: Any) -> int | None:
    """``value`` as a believable window (an int, an integral float or a decimal string), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 12:
        value = int(value.strip())
    if isinstance(value, int) and _MIN_WINDOW <= value <= _MAX_WINDOW:
        return value
    return None


#: Fields that carry a window in a model list entry, most specific first: LM Studio's loaded
#: context, vLLM's ``max_model_len``, llama.cpp's ``n_ctx``, then what LiteLLM, OpenRouter,
#: Together, Groq, Mistral and others send. A dotted name is a field of a nested object;
#: ``meta.n_ctx_train`` (llama.cpp) is the length the model was trained for, an upper bound of
#: the server's window (a smaller real window is learned from the first context-length error).
_WINDOW_FIELDS = (
    "loaded_context_length",
    "max_model_len",
    "n_ctx",
    "context_length",
    "context_window",
    "max_context_length",
    "max_input_tokens",
    "meta.n_ctx",
    "meta.n_ctx_train",
    "top_provider.context_length",
    "metadata.context_length",
    "model_info.max_input_tokens",
)


def window_from_model_list(payload: Any, model_name: str) -> int | None:
    """The window a ``GET /models`` answer states for ``model_name``, or None.

    ``payload`` is the decoded JSON: ``{"data": [...]}`` (OpenAI style) or ``{"models": [...]}``
    or a bare list. The entry whose ``id`` (or ``name`` / ``model``) is ``model_name`` is read;
    when none matches and the list holds exactly one model (a server that serves one model under
    its own name, as llama.cpp does), that one. Anything malformed means None.
    """
    entries: Any = payload
    if isinstance(payload, Mapping):
        entries = payload.get("data")
        if not isinstance(entries, list):
            entries = payload.get("models")
    if not isinstance(entries, list):
        return None
    entries = [e for e in entries[:_MAX_LISTED_MODELS] if isinstance(e, Mapping)]
    chosen = next((e for e in entries if model_name in (e.get("id"), e.get("name"), e.get("model"))), None)
    if chosen is None and len(entries) == 1:
        chosen = entries[0]
    if chosen is None:
        return None
    for name in _WINDOW_FIELDS:
        node: Any = chosen
        for part in name.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        window = _window_value(node)
        if window is not None:
            return window
    return None


# --------------------------------------------------------------------------- context-length errors

#: Phrases (lower case) by which endpoints say that a prompt does not fit, and error types/codes.
_OVERFLOW_PHRASES = (
    "context length",  # OpenAI, vLLM, SGLang, DeepSeek, OpenRouter, LM Studio, Mistral, Ollama
    "context_length",
    "maximum context",
    "context window",
    "contextwindowexceeded",  # LiteLLM's ContextWindowExceededError passed through
    "context size",  # llama.cpp server
    "maximum model length",  # vLLM: "The decoder prompt (length N) is longer than the maximum model length of M"
    "maximum input length",
    "maximum prompt length",  # xAI
    "exceeds the context",
    "exceeds context",
    "prompt is too long",  # Anthropic (through LiteLLM)
    "input is too long",
    "cannot truncate prompt",  # llama.cpp / LM Studio: "Cannot truncate prompt with n_keep (N) >= n_ctx (M)"
    "exceeds the maximum number of tokens",  # Gemini
    "reduce the length of the messages",  # OpenAI's advice, also alone (Cerebras, Groq)
    "`inputs` tokens + `max_new_tokens`",  # text-generation-inference
)
_OVERFLOW_CODES = ("context_length_exceeded", "string_above_max_length", "exceed_context_size_error")


def is_context_overflow(code: Any, detail: str, error_type: Any = None, fields: Any = None) -> bool:
    """True when an endpoint's error says the prompt does not fit the model's context window.

    ``code`` and ``error_type`` are the error object's ``code`` and ``type``, ``detail`` its
    message, ``fields`` the error object itself (llama.cpp sends ``n_ctx`` and ``n_prompt_tokens``).
    """
    if code in _OVERFLOW_CODES or error_type in _OVERFLOW_CODES:
        return True
    if isinstance(fields, Mapping) and "n_ctx" in fields and "n_prompt_tokens" in fields:
        return True
    text = " ".join(detail.lower().split())
    return any(phrase in text for phrase in _OVERFLOW_PHRASES)


_N = r"(\d{1,12})"
#: The window, as endpoints name it (first match wins).
_LIMIT_PATTERNS = tuple(re.compile(p, re.IGNORECASE) for p in (
    rf"maximum context length (?:is|of) {_N}",  # OpenAI, vLLM, DeepSeek, OpenRouter
    rf"model maximum context length:? {_N}",  # Fireworks
    rf"maximum model length (?:is |of )?{_N}",  # vLLM decoder prompt
    rf"context (?:length|size|window) (?:is |of )(?:only )?{_N}",  # LM Studio "context length of only N"
    rf"context (?:length|size|window) \({_N}(?: tokens)?\)",  # llama.cpp, SGLang
    rf"{_N} maximum context length",  # Mistral
    rf"maximum prompt length is {_N}",  # xAI
    rf"must be <= {_N}",  # text-generation-inference
    rf"while limit is {_N}",  # Cerebras
    rf"> {_N} maximum",  # Anthropic
    rf"maximum number of tokens allowed \({_N}\)",  # Gemini
    rf"n_ctx(?: \(|=|: ?){_N}",  # llama.cpp
    rf"num_ctx(?: \(|=|: ?){_N}",  # Ollama
))
#: The tokens the request needed (first match wins); two groups are added up (prompt + completion).
_REQUESTED_PATTERNS = tuple(re.compile(p, re.IGNORECASE) for p in (
    rf"for a total of (?:at least )?{_N} tokens",  # vLLM
    rf"resulted in {_N} tokens",  # OpenAI
    rf"you requested (?:about )?{_N} tokens",  # OpenAI with a completion, older vLLM, OpenRouter
    rf"too large: {_N}\b.*?request has {_N} input tokens",  # vLLM: max_tokens too large for what is left
    rf"request has {_N} (?:input )?tokens",  # vLLM
    rf"prompt \(length {_N}\)",  # vLLM decoder prompt
    rf"request \({_N} tokens\)",  # llama.cpp
    rf"keep the first {_N} tokens",  # LM Studio
    rf"n_keep \({_N}\)",  # llama.cpp / LM Studio
    rf"given: {_N} `inputs` tokens and {_N} `max_new_tokens`",  # text-generation-inference
    rf"prompt contains (?:at least )?{_N}",  # Mistral, vLLM
    rf"the input \({_N} tokens\)",  # SGLang
    rf"current length is {_N}",  # Cerebras
    rf"prompt is too long: {_N}",  # Anthropic
    rf"input token count (?:\(|of ){_N}",  # Gemini
    rf"request contains {_N} tokens",  # xAI
    rf"(?:input|prompt) length \(?{_N}\)? exceeds",
    rf"requested {_N}\b(?! output)",  # "... requested 5000 ..." (last resort)
))


def overflow_numbers(detail: str, fields: Any = None) -> tuple[int | None, int | None]:
    """``(window, requested)`` an endpoint's context-length error names (None for what it does not).

    ``requested`` is the tokens the request needed as the endpoint counted them: the prompt's,
    plus the completion's room when the endpoint counts that too (OpenAI and vLLM with
    ``max_tokens``). ``fields`` is the error object, for llama.cpp's ``n_ctx`` and
    ``n_prompt_tokens``.
    """
    limit = requested = None
    if isinstance(fields, Mapping):
        limit = _window_value(fields.get("n_ctx"))
        prompt = fields.get("n_prompt_tokens")
        if isinstance(prompt, int) and not isinstance(prompt, bool) and 0 < prompt <= 10 * _MAX_WINDOW:
            requested = prompt
    text = " ".join(detail.split())[:4000]
    if limit is None:
        limit = _first(_LIMIT_PATTERNS, text, _window_value)
    if requested is None:
        requested = _first(_REQUESTED_PATTERNS, text, lambda n: n if 0 < n <= 10 * _MAX_WINDOW else None)
    return limit, requested


def _first(patterns: Sequence[re.Pattern[str]], text: str, accept: Callable[[int], int | None]) -> int | None:
    for pattern in patterns:
        match = pattern.search(text)
        if match:
            value = accept(sum(int(g) for g in match.groups() if g))
            if value is not None:
                return value
    return None


# --------------------------------------------------------------------------- counting tokens

#: OpenAI's model names by the encoding that counts them exactly (tiktoken's ``MODEL_TO_ENCODING`` and
#: ``MODEL_PREFIX_TO_ENCODING``; a fine-tuned ``ft:`` name counts as its base model).
_OPENAI_NAMES = (
    ("o200k_base", re.compile(r"^(?:ft:)?(?:(?:chat)?gpt-4o|gpt-4\.[15]|gpt-5|o1|o3|o4-mini|gpt-oss)(?:$|[-.:@_])")),
    ("cl100k_base", re.compile(r"^(?:ft:)?(?:gpt-3\.5|gpt-35|gpt-4(?![o.\d])|text-embedding-(?:ada-002|3))")),
)
#: The encodings counted exactly (their vocabularies ship with codeact).
_EXACT = ("cl100k_base", "o200k_base")


def tokenizer_name(model: Any) -> str:
    """``"cl100k_base"`` or ``"o200k_base"`` when the model's real tokenizer is known and bundled, else
    ``"estimate"``; ``"custom"`` for a model given its own (``OpenAIModel(tokenizer=...)``)."""
    chosen = getattr(model, "tokenizer", None)
    if callable(chosen):
        return "custom"
    if chosen in _COUNTERS and (chosen not in _EXACT or _encoding(chosen) is not None):
        return str(chosen)
    name = str(getattr(model, "name", "") or "").lower().rsplit("/", 1)[-1]
    for encoding, names in _OPENAI_NAMES:
        if names.match(name) and _encoding(encoding) is not None:
            return encoding
    return "estimate"


def _encoding(name: str) -> Any:
    from .catalog import bundled_encoding

    return bundled_encoding(name)


def _exact_count(name: str, text: str) -> int | None:
    encoding = _encoding(name)
    return None if encoding is None else len(encoding.encode(text, disallowed_special=()))


def _cl100k_count(text: str) -> int | None:
    return _exact_count("cl100k_base", text)


_DIGITS = "0123456789"


def _char_rule(text: str, *, non_ascii_bytes: bool) -> int:
    """ASCII characters other than digits / 3, plus one per digit and one per non-ASCII character
    (or its UTF-8 bytes, the bound of any byte-level tokenizer, when ``non_ascii_bytes``)."""
    digits = sum(text.count(d) for d in _DIGITS)
    ascii_chars = len(text.encode("ascii", "ignore")) if not text.isascii() else len(text)
    non_ascii = len(text) - ascii_chars
    if non_ascii and non_ascii_bytes:
        non_ascii = len(text.encode("utf-8", "surrogatepass")) - ascii_chars
    return math.ceil((ascii_chars - digits) / 3) + digits + non_ascii


def _estimate(text: str) -> int:
    exact = _cl100k_count(text)
    if exact is None:
        return _char_rule(text, non_ascii_bytes=True)
    return max(exact, _char_rule(text, non_ascii_bytes=False))


_COUNTERS: dict[str, Callable[[str], int]] = {
    "cl100k_base": lambda text: _exact_count("cl100k_base", text) or 0,
    "o200k_base": lambda text: _exact_count("o200k_base", text) or 0,
    "estimate": _estimate,
}


class _MessageTokens:
    """Tokens per message for one tokenizer, remembered while the message lives.

    The loop counts the whole history every step; a message is counted once. The cache holds
    messages weakly (an equal message made anew hits too), so it is bounded by the live history.
    """

    def __init__(self, count_text: Callable[[str], int]) -> None:
        self.count_text = count_text
        self._cache: weakref.WeakKeyDictionary[Message, int] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __call__(self, message: Message) -> int:
        try:
            with self._lock:
                cached = self._cache.get(message)
        except TypeError:  # unhashable (a list smuggled into a field): count without the cache
            return self._count(message)
        if cached is not None:
            return cached
        tokens = self._count(message)
        with self._lock:
            self._cache[message] = tokens
        return tokens

    def _count(self, m: Message) -> int:
        tokens = MESSAGE_OVERHEAD + (self.count_text(m.content) if m.content else 0)
        for call in m.tool_calls:
            tokens += TOOL_CALL_OVERHEAD + self.count_text(call.name) + self.count_text(call.arguments)
        return tokens + sum(image.tokens for image in m.images)


_MESSAGE_TOKENS = {name: _MessageTokens(count) for name, count in _COUNTERS.items()}
#: Counters for the tokenizers models were given, per model while the model lives (keyed by the
#: model, not the tokenizer: the counter holds the tokenizer, and a key its value holds never dies).
_CUSTOM_TOKENS: weakref.WeakKeyDictionary[Any, _MessageTokens] = weakref.WeakKeyDictionary()


def _counters(model: Any) -> tuple[Callable[[Message], int], Callable[[str], int]]:
    """Count a message, count a text: for the model's tokenizer."""
    kind = tokenizer_name(model)
    if kind != "custom":
        return _MESSAGE_TOKENS[kind], _COUNTERS[kind]
    count_text: Callable[[str], int] = model.tokenizer
    try:
        counter = _CUSTOM_TOKENS.get(model)
        if counter is None or counter.count_text is not count_text:
            counter = _CUSTOM_TOKENS[model] = _MessageTokens(count_text)
    except TypeError:  # a model that cannot be weakly referenced or hashed: no cache
        counter = _MessageTokens(count_text)
    return counter, count_text


def count_tokens(model: Any, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None) -> int:
    """Prompt tokens ``messages`` take for ``model``: exact where :func:`tokenizer_name` knows the
    tokenizer, an estimate that errs high otherwise.

    Each message costs :data:`MESSAGE_OVERHEAD` plus its text, each tool call
    :data:`TOOL_CALL_OVERHEAD` plus its name and arguments, each image its
    :attr:`~codeact.messages.ImagePart.tokens`; ``tools`` (function schemas sent with the
    request, as ReAct's function calling does) the tokens of their JSON. The count is additive
    over messages (the few tokens that prime the reply belong to the reply's room). Messages are
    counted once while they live, so counting a growing history every step costs only its new
    messages.
    """
    count_message, count_text = _counters(model)
    total = sum(count_message(m) for m in messages)
    if tools:
        import json

        total += count_text(json.dumps(list(tools)))
    return total
