"""codeact: a CodeAct agent. The model writes Python that calls your tools as functions;
the code runs in a Docker-isolated, stateful Jupyter kernel.

Example::

    from codeact import CodeActAgent, OpenAIModel, tool

    @tool
    def get_daily_weather(city: str) -> str:
        \"\"\"Weather for today, tomorrow and the day after in a city.

        Args:
            city: city name, e.g. 北京
        \"\"\"
        ...

    agent = CodeActAgent(model=OpenAIModel("qwen-plus"), tools=[get_daily_weather])
    result = agent.run("明天北京的天气适合跑步吗?")
    result.answer, result.steps, result.usage, result.status

Names are imported on first use so that ``import codeact`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The public API. Each name is imported from its module on first use (_EXPORTS says which).
__all__ = [
    "AgentToolError",
    "ApprovalRequest",
    "ChatSession",
    "CodeActAgent",
    "CodeActError",
    "ConfigError",
    "Message",
    "Model",
    "ModelError",
    "ModelResponse",
    "NetworkPolicy",
    "OpenAIModel",
    "OutputSpec",
    "OutputTypeError",
    "Prices",
    "ReActAgent",
    "ReActSession",
    "RunContext",
    "RunLimits",
    "RunLog",
    "RunResult",
    "ScriptedModel",
    "Step",
    "Tool",
    "ToolError",
    "Usage",
    "load_tools",
    "tool",
]

_EXPORTS = {
    "CodeActAgent": ".agent",
    "ChatSession": ".agent",
    "ApprovalRequest": ".run",
    "ReActAgent": ".react",
    "ReActSession": ".react",
    "tool": ".tools",
    "Tool": ".tools",
    "RunContext": ".tools",
    "load_tools": ".tools",
    "Model": ".models",
    "OpenAIModel": ".models",
    "ScriptedModel": ".models",
    "Message": ".messages",
    "Usage": ".messages",
    "ModelResponse": ".messages",
    "RunResult": ".events",
    "OutputSpec": ".output",
    "OutputTypeError": ".errors",
    "Step": ".events",
    "RunLog": ".runlog",
    "CodeActError": ".errors",
    "ConfigError": ".errors",
    "ModelError": ".errors",
    "ToolError": ".errors",
    "AgentToolError": ".errors",
    "RunLimits": ".run",
    "Prices": ".budget",
    "NetworkPolicy": "sandbox.network",  # the sandbox's network allow-list, for CodeActAgent(sandbox_options=...)
}
assert sorted(_EXPORTS) == __all__, "codeact.__all__ and _EXPORTS must name the same things"


if TYPE_CHECKING:  # pragma: no cover
    from .agent import ChatSession, CodeActAgent
    from .run import ApprovalRequest, RunLimits
    from .budget import Prices
    from .errors import AgentToolError, CodeActError, ConfigError, ModelError, OutputTypeError, ToolError
    from .events import RunResult, Step
    from .output import OutputSpec
    from .messages import Message, ModelResponse, Usage
    from .models import Model, OpenAIModel, ScriptedModel
    from .react import ReActAgent, ReActSession
    from .runlog import RunLog
    from .tools import RunContext, Tool, load_tools, tool
    from sandbox.network import NetworkPolicy


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'codeact' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # cache: later lookups skip this hook
    return value
