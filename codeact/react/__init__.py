"""ReAct baselines: the same tools, model, events and run log as CodeAct, one tool call per action.

:class:`ReActAgent` has three action formats, so that published comparisons
(the CodeAct paper's among them) can be reproduced against a
:class:`~codeact.CodeActAgent` on the same tasks, tools and model:

=====================  ==============  ===============================================
format                 agent kind      an action
=====================  ==============  ===============================================
``function-calling``   ``react-fc``    native tool calls (``tools=[...]``), several
                                       per turn; results as ``tool`` messages
``json``               ``react-json``  ``Action: {"name": "f", "arguments": {"x": 1}}``
``text``               ``react-text``  ``Action: f(x=1)``
=====================  ==============  ===============================================

Tools run on the host, in the agent's process: no sandbox is needed, since
the model writes no code. Approvals, ``return_direct`` and the hidden
:class:`~codeact.tools.RunContext` behave exactly as in CodeAct. A malformed
action (bad JSON, an unknown tool, wrong arguments) is answered with an error
the model can correct and recorded as an ``ErrorEvent`` of kind ``"action"``.

Example::

    from codeact import ReActAgent, ScriptedModel

    model = ScriptedModel([
        ScriptedModel.tool_calls(("add", {"a": 2, "b": 3})),
        ScriptedModel.tool_calls(("final_answer", {"answer": 5})),
    ])
    agent = ReActAgent(model, [add], format="function-calling", log=False)
    agent.run("2 + 3?").answer      # 5
"""

from __future__ import annotations

from ._agent import HOST, ReActAgent, ReActSession, observation_text
from ._formats import FORMATS, ActionCall, ActionFormat, Decision, format_name, make_format, python_literal

#: The agent kinds results and runs record, CodeAct first.
AGENT_KINDS = ("codeact", *FORMATS.values())

__all__ = [
    "AGENT_KINDS",
    "FORMATS",
    "HOST",
    "ActionCall",
    "ActionFormat",
    "Decision",
    "ReActAgent",
    "ReActSession",
    "format_name",
    "make_format",
    "observation_text",
    "python_literal",
]
