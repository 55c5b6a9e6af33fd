"""The agent kinds a sweep runs: ReAct's formats, CodeAct, and CodeAct with a fixed tool disclosure."""

from __future__ import annotations

from ..react import AGENT_KINDS

#: CodeAct with a fixed tool disclosure (see codeact.catalog); plain "codeact" uses the agent's default, auto.
CODEACT_VARIANTS = {"codeact-all": "all", "codeact-on-demand": "on_demand"}

#: Every kind ``--agents`` accepts.
ALL_KINDS = (*AGENT_KINDS, *CODEACT_VARIANTS)


def agent_base(kind: str) -> str:
    """The agent a kind runs: ``codeact`` for CodeAct's disclosure variants, else the kind itself."""
    return "codeact" if kind in CODEACT_VARIANTS else kind
