"""Moved to :mod:`codeact.run.tree`; this path re-exports it for one release."""

from .run.tree import RunLink, agent_tool, begin_run, calling

__all__ = ["RunLink", "agent_tool", "begin_run", "calling"]
