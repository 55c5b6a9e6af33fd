"""What every run is, whatever the agent kind: the turn driver and the parts it is made of.

=====================  ==============================================================================
:mod:`.turn`           the turn driver (:func:`drive`) and what a kind supplies (:class:`TurnBody`)
:mod:`.limits`         :class:`RunLimits`, the one :class:`ArtifactQuota`, ``max_steps``, the output root
:mod:`.artifacts`      a run's output directory and what tools save (:class:`RunArtifacts`)
:mod:`.calls`          tool calls on the host: approvals, invoking, reporting
:mod:`.model_call`     one model call of a step (streamed text, usage, span)
:mod:`.recording`      events into the run log; the result they end with
:mod:`.tree`           agents as tools: run links, budgets and approvers shared down a tree
:mod:`.agents`         ``run`` / ``stream`` / ``arun`` / ``astream`` / ``as_tool`` of every agent
=====================  ==============================================================================

CodeAct (:mod:`codeact.agent`), ReAct (:mod:`codeact.react`) and the web
workspace's cells (:mod:`codeact.ui`) each supply a :class:`TurnBody`; the
rest of a run is here, once.
"""

from __future__ import annotations

from .agents import AgentRuns, Turns, stream_async
from .artifacts import RunArtifacts
from .calls import ApprovalRequest, Approvals, Approver, ainvoke_tool, invoke_tool, tools_to_add
from .limits import ArtifactQuota, RunLimits, check_max_steps, default_output_root
from .model_call import model_turn
from .recording import open_log, recorder, result_of
from .tree import RunLink, agent_tool, begin_run, calling
from .turn import Turn, TurnBody, drive

__all__ = [
    "AgentRuns", "Turns", "stream_async", "RunArtifacts", "ApprovalRequest", "Approvals", "Approver", "ainvoke_tool",
    "invoke_tool", "tools_to_add", "ArtifactQuota", "RunLimits", "check_max_steps", "default_output_root",
    "model_turn", "open_log", "recorder", "result_of", "RunLink", "agent_tool", "begin_run", "calling", "Turn",
    "TurnBody", "drive",
]
