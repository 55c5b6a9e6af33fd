"""Skills in a session: ``save_skill(func)`` and the ``skills`` module, backed by a :class:`SkillStore`.

Two host functions, each with a small face in the kernel (standard library only):

* ``save_skill(func, name=None)`` reads the function's source in the kernel
  (IPython keeps every cell's source, so ``inspect.getsource`` works for
  functions defined in code actions), adds the imports it uses, and sends the
  text to the host, which checks it and asks the user (a :class:`SkillApproval`
  through the agent's approver: name, signature, docstring, the whole code,
  and what it replaces with a diff). Only an approved save is stored; without
  an approver every save is refused. The code may call the host function
  directly with any text: the check and the question happen on the host.
  Nothing is run on the host.
* ``skills`` is a module in the kernel: ``from skills import name`` (or
  ``skills.name``) asks the host for the source, runs it in a fresh module
  ``skills.<name>`` *in the sandbox*, and returns the function; the session's
  tools are visible to it. A skill that fails to import raises ImportError
  with the reason; nothing else breaks. ``dir(skills)`` lists them.

Everything the sandbox sends (names, sources) is checked by the store.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox.functions import HostFunction

from ..run import ApprovalRequest
from ..errors import SkillError
from ._store import SkillStore, check_name

SAVE_SKILL = "save_skill"
SKILLS = "skills"
#: Names the skills take in the sandbox; a tool cannot have them.
SKILL_NAMES = (SAVE_SKILL, SKILLS)

#: How the prompt shows save_skill.
SAVE_SKILL_STUB = '''def save_skill(func, name: str | None = None) -> None:
    """Offer a function you wrote (and checked) to later sessions: the user is asked to approve it;
    then they import it with `from skills import <name>`. Give it a docstring: its first line is what
    later sessions see. Raises PermissionError when the user does not allow it (do not retry)."""'''


@dataclass(frozen=True)
class SkillApproval(ApprovalRequest):
    """A save of a skill waiting for the user's yes or no (``tool`` is ``"save_skill"``).

    ``arguments`` carries the same fields for approvers that only read it.
    Every text field is untrusted (the sandbox's code chose it): escape it
    before it reaches a terminal or a page.

    Attributes:
        name: the skill's name.
        signature: its parameters as the prompt will show them.
        docstring: its whole docstring.
        code: the whole source that would be stored.
        previous: the source it replaces, or None for a new skill.
        diff: a unified diff from ``previous`` to ``code`` ("" for a new skill).
        store: the directory it would be saved in.
    """

    name: str = ""
    signature: str = ""
    docstring: str = ""
    code: str = ""
    previous: str | None = None
    diff: str = ""
    store: str = ""

    @property
    def overwrite(self) -> bool:
        """It replaces a skill that exists."""
        return self.previous is not None


#: Asks the user about a :class:`SkillApproval`; True saves.
SkillApprover = Callable[[SkillApproval], bool]


@dataclass(frozen=True)
class SessionSkills:
    """A session's skills: the store, and how a save is approved.

    Args:
        store: where skills are read and saved.
        approve: asks the user about each save; None refuses every save (the
            code is told why) while saved skills stay importable.
    """

    store: SkillStore
    approve: SkillApprover | None = None

    @property
    def can_save(self) -> bool:
        return self.approve is not None


def approval_for(store: SkillStore, skill: Any, previous: str | None) -> SkillApproval:
    """The :class:`SkillApproval` for saving the checked ``skill`` over ``previous`` (None: a new one)."""
    diff = ""
    if previous is not None:
        diff = "".join(difflib.unified_diff(previous.splitlines(True), skill.source.splitlines(True),
                                            f"{skill.name} (saved)", f"{skill.name} (new)"))
    arguments = {"name": skill.name, "signature": skill.signature, "docstring": skill.docstring,
                 "code": skill.source, "replaces": previous, "diff": diff}
    return SkillApproval(SAVE_SKILL, arguments, "", 0, name=skill.name, signature=skill.signature,
                         docstring=skill.docstring, code=skill.source, previous=previous, diff=diff,
                         store=str(store.path))

_SAVE_WRAPPER = r'''
def save_skill(func, name=None):
    """Save a function you wrote for later sessions: ``save_skill(summarize)``.

    Later sessions import it with ``from skills import summarize``. The function's source
    (with the imports it uses) is stored; give it a docstring whose first line says what it does.
    """
    import inspect
    import sys
    import textwrap
    import types

    if not isinstance(func, types.FunctionType):
        raise TypeError("save_skill(func): give a function defined with def in this session")
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        raise ValueError("save_skill: the source of %s() cannot be found; define it with def in a code "
                         "action (not with exec or lambda) and save it again" % func.__name__) from None
    lines, left_out = _context_of(func, sys)
    header = "\n".join(lines)
    message = __host__(name or func.__name__, (header + "\n\n\n" if header else "") + source)
    if left_out:
        message += (" Not saved with it (define them inside the function if it needs them): "
                    + ", ".join(sorted(left_out)) + ".")
    print(message)


def _global_names(code, seen=None):
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _global_names(const)
    return names


def _context_of(func, sys):
    """Import lines (and helper functions of the session) the function's global names need."""
    import inspect
    import textwrap
    import types

    lines, constants, helpers, left_out = [], [], [], set()
    glb = func.__globals__
    for n in sorted(_global_names(func.__code__)):
        if n not in glb or n == func.__name__:
            continue
        v = glb[n]
        if isinstance(v, types.ModuleType):
            mod = v.__name__
            if getattr(v, "__sandbox_namespace__", False) or mod == "skills":
                continue  # tools and skills are there in every session
            lines.append("import %s" % mod if mod == n else "import %s as %s" % (mod, n))
        elif getattr(v, "__wrapped_host_function__", False):
            module = getattr(v, "__module__", "")
            if module.startswith("tools."):
                lines.append("from %s import %s as %s" % (module, v.__name__, n) if v.__name__ != n
                             else "from %s import %s" % (module, n))
        elif isinstance(v, (types.FunctionType, type)) and getattr(v, "__module__", None) == "__main__":
            try:
                helpers.append(textwrap.dedent(inspect.getsource(v)))
            except (OSError, TypeError):
                left_out.add(n)
        elif getattr(v, "__module__", None) and getattr(v, "__qualname__", None) and \
                getattr(sys.modules.get(v.__module__), v.__qualname__, None) is v:
            q = v.__qualname__
            lines.append("from %s import %s" % (v.__module__, q) if q == n
                         else "from %s import %s as %s" % (v.__module__, q, n))
        elif isinstance(v, (int, float, str, bool, type(None))) and len(repr(v)) <= 200:
            constants.append("%s = %r" % (n, v))
        else:
            left_out.add(n)
    return lines + constants + [h.rstrip() for h in helpers], left_out
'''

_SKILLS_WRAPPER = r'''
import sys as _sys
import types as _types


class _Skills(_types.ModuleType):
    """Functions saved in earlier sessions (save_skill): ``from skills import name``; dir(skills) lists them."""

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return _load(self, name)

    def __dir__(self):
        try:
            listed = [s["name"] for s in __host__("list") if isinstance(s, dict)]
        except Exception:
            listed = []
        return sorted(set(listed) | {n for n in vars(self) if not n.startswith("_")})


def _load(module, name):
    import linecache

    try:
        source = __host__("source", name)
    except LookupError as exc:
        raise ImportError(str(exc), name="skills." + name) from None
    filename = "<skill %s>" % name
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    skill = _types.ModuleType("skills." + name)
    skill.__file__ = filename
    main = _sys.modules.get("__main__")
    for key, value in list(vars(main).items()) if main is not None else ():
        if getattr(value, "__wrapped_host_function__", False) and not key.startswith("_"):
            skill.__dict__[key] = value  # the session's tools, as the code sees them
    if "tools" in _sys.modules:
        skill.__dict__["tools"] = _sys.modules["tools"]
    try:
        exec(compile(source, filename, "exec"), skill.__dict__)
        value = skill.__dict__[name]
    except BaseException as exc:
        raise ImportError("skill %r failed to import: %s: %s" % (name, type(exc).__name__, exc),
                          name="skills." + name) from exc
    _sys.modules["skills." + name] = skill
    setattr(module, name, value)
    return value


skills = _Skills("skills")
skills.__path__ = []
_sys.modules["skills"] = skills
'''


def skill_functions(skills: SessionSkills | SkillStore) -> list[HostFunction]:
    """``save_skill`` and the ``skills`` module for a session (a bare store: saving is refused)."""
    session = skills if isinstance(skills, SessionSkills) else SessionSkills(skills)
    store = session.store

    def save_skill(name: str, source: str) -> str:
        try:
            skill = store.check(check_name(name), source)
        except SkillError as exc:
            raise ValueError(str(exc)) from None
        if session.approve is None:
            raise PermissionError(f"skill {skill.name!r} was not saved: saving a skill needs the user's approval "
                                  "and no one can be asked in this session. Do not retry; say in your answer that "
                                  "the function could be kept as a skill if the user wants.")
        previous = store.current_source(skill.name)
        if previous == skill.source:
            return f"Skill {skill.name!r} is already saved with this code; nothing changed."
        if not session.approve(approval_for(store, skill, previous)):
            raise PermissionError(f"the user did not allow saving skill {skill.name!r}; it was not saved. "
                                  "Do not retry it.")
        try:
            store.save(skill.name, skill.source, replacing=previous)
        except SkillError as exc:
            raise ValueError(str(exc)) from None
        lines = skill.source.count("\n") + 1
        verb = "Replaced" if previous is not None else "Saved"
        return (f"{verb} skill {skill.name!r} ({lines} lines). Later sessions use it with "
                f"`from skills import {skill.name}`.")

    def skills_function(action: str, name: str = "") -> Any:  # the sandbox's skills(...)
        if action == "list":
            return [{"name": s.name, "summary": s.summary, "signature": s.signature}
                    for s in store.list() if s.error is None]
        if action == "source":
            try:
                skill = store.get(check_name(name))
            except SkillError:  # the message without the host's directory
                known = [s.name for s in store.list() if s.error is None]
                hint = f"; the skills are: {', '.join(known[:30])}" if known else "; no skills are saved yet"
                raise LookupError(f"no skill named {str(name)[:80]!r}{hint}") from None
            if skill.error is not None:
                raise LookupError(f"skill {name!r} cannot be used: {skill.error}")
            return skill.source
        raise ValueError("skills(action): 'list' or 'source'")

    return [
        HostFunction(save_skill, name=SAVE_SKILL, doc="Save a function for later sessions (asks the user).")
        .place(wrapper=_SAVE_WRAPPER),
        HostFunction(skills_function, name=SKILLS, doc="The skills saved in earlier sessions.")
        .place(wrapper=_SKILLS_WRAPPER),
    ]
