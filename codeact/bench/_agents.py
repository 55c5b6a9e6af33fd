"""The agent kinds a sweep runs: ReAct's formats, CodeAct, and CodeAct with a fixed tool disclosure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..react import AGENT_KINDS

if TYPE_CHECKING:
    from ..catalog import Disclosure

#: CodeAct with a fixed tool disclosure (see codeact.catalog); plain "codeact" uses the agent's default, auto.
CODEACT_VARIANTS: dict[str, Disclosure] = {"codeact-all": "all", "codeact-on-demand": "on_demand"}

#: Every kind ``--agents`` accepts.
ALL_KINDS = (*AGENT_KINDS, *CODEACT_VARIANTS)


def agent_base(kind: str) -> str:
    """The agent a kind runs: ``codeact`` for CodeAct's disclosure variants, else the kind itself."""
    return "codeact" if kind in CODEACT_VARIANTS else kind
