"""Skills: functions the model wrote, kept for later sessions and run only in the sandbox.

In a code action, ``save_skill(func)`` sends the function's source (and the
imports it uses) to the host, which checks it and asks the user: a
:class:`SkillApproval` with the name, signature, docstring and the whole code
(and a diff when it replaces a skill) goes to the agent's approver. Only an
approved save is stored in the :class:`SkillStore`; with no approver every
save is refused unless the user opted in with
``CodeActAgent(auto_approve_skills=True)`` (``--approve-skills``), which warns.

Later sessions list the skills in their prompt as quoted, bounded data under a
header that says they are not instructions (:func:`skills_section`), and
``from skills import name`` runs the source in the sandbox. The host stores and
checks text (names, sizes, that it defines ``name``) and never imports it.

Each project has its own store by default (:func:`default_skills_dir`, kept in
the user data directory, never in the project itself); one store is shared
only when chosen. ``codeact skills add|list|show|rm`` manages a store from the shell.

Example::

    from codeact import CodeActAgent
    from codeact.skills import SkillStore

    agent = CodeActAgent(model, tools, skills=True, approve=ask_me)       # this project's store
    agent = CodeActAgent(model, tools, skills=SkillStore.user(), approve=ask_me)   # shared by every project
"""

from __future__ import annotations

from ._prompt import MAX_PROMPT_BLOCK, MAX_PROMPT_SKILLS, skills_section
from ._session import SAVE_SKILL_STUB, SKILL_NAMES, SessionSkills, SkillApproval, SkillApprover, skill_functions
from ._store import (
    MAX_SKILL_BYTES,
    MAX_SKILLS,
    Skill,
    SkillStore,
    check_name,
    default_skills_dir,
    inspect_source,
    project_root,
    user_skills_dir,
)

__all__ = [
    "MAX_PROMPT_BLOCK",
    "MAX_PROMPT_SKILLS",
    "MAX_SKILLS",
    "MAX_SKILL_BYTES",
    "SAVE_SKILL_STUB",
    "SKILL_NAMES",
    "SessionSkills",
    "Skill",
    "SkillApproval",
    "SkillApprover",
    "SkillStore",
    "check_name",
    "default_skills_dir",
    "inspect_source",
    "project_root",
    "skill_functions",
    "skills_section",
    "user_skills_dir",
]
