"""Skills: functions the model wrote, kept for later sessions and run only in the sandbox.

In a code action, ``save_skill(func)`` stores the function's source (and the
imports it uses) in a :class:`SkillStore` directory on the host; later
sessions list the skills in their prompt and ``from skills import name``
runs the source in the sandbox. The host stores and checks text (names,
sizes, that it defines ``name``) and never imports it. ``codeact skills
add|list|show|rm`` manages a store from the shell.

Example::

    from codeact import CodeActAgent
    from codeact.skills import SkillStore

    agent = CodeActAgent(model, tools, skills=SkillStore("./.codeact/skills"))   # or skills=True (user dir)
"""

from __future__ import annotations

from ._session import SKILL_NAMES, skill_functions, skills_section
from ._store import MAX_SKILL_BYTES, MAX_SKILLS, Skill, SkillStore, check_name, default_skills_dir, inspect_source

__all__ = [
    "MAX_SKILLS",
    "MAX_SKILL_BYTES",
    "SKILL_NAMES",
    "Skill",
    "SkillStore",
    "check_name",
    "default_skills_dir",
    "inspect_source",
    "skill_functions",
    "skills_section",
]
