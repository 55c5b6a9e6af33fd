"""Language models behind one small interface.

- :class:`Model`: the protocol the agents use (``name``, ``complete``, ``stream``);
  :class:`AsyncModel` adds the optional ``acomplete`` for asyncio code.
- :class:`OpenAIModel`: any OpenAI-compatible Chat Completions endpoint (OpenAI,
  vLLM, Ollama, llama.cpp server, LiteLLM, DashScope, ...), with streaming,
  retries with backoff and token usage.
- :class:`ScriptedModel`: replays given replies (tests, demos, replays).

Nothing here sends the ``stop`` parameter: some reasoning models reject it, and
the agents never need it for correctness.

Example::

    from codeact.messages import Message
    from codeact.models import OpenAIModel

    model = OpenAIModel("gpt-4o-mini")          # or CODEACT_MODEL=... in the environment
    reply = model.complete([Message("user", "Say hi")])
    print(reply.text, reply.usage.total_tokens)

``openai`` is imported on first use, so importing this package stays cheap.

Where each part lives:

========================  ==================================================================
``_protocol``             :class:`Model`, :class:`AsyncModel`
``_openai``               :class:`OpenAIModel`: settings, HTTP clients, each call's attempts
``_wire``                 request bodies, completions and streamed chunks (the wire format)
``_failures``             what an endpoint's error means; retries and backoff
``_vision``               the fallback to text only for endpoints that take no images
``_window``               the context window: given, learned from an error, or listed
``_usage``                token estimates for servers that report no usage
``_scripted``             :class:`ScriptedModel`
========================  ==================================================================
"""

from __future__ import annotations

from ..settings import API_KEY_ENV as API_KEY_ENV
from ._failures import UNREACHABLE_RETRIES as UNREACHABLE_RETRIES
from ._openai import DEFAULT_BASE_URL as DEFAULT_BASE_URL
from ._openai import PLACEHOLDER_API_KEY as PLACEHOLDER_API_KEY
from ._openai import OpenAIModel
from ._protocol import AsyncModel, Model
from ._scripted import ScriptedModel, ScriptedReply
from ._usage import estimate_tokens

__all__ = [
    "AsyncModel",
    "Model",
    "OpenAIModel",
    "ScriptedModel",
    "ScriptedReply",
    "estimate_tokens",
]
