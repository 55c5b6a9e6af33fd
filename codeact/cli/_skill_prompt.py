"""The terminal's question before the model's code saves a skill: the whole request shown, escaped, then asked.

Kept apart from the ``codeact skills`` commands so that the shared command helpers (:mod:`._app`) can use it
without importing a command module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from .render import Renderer
    from ..skills import SkillApproval


def approve_skill(renderer: Renderer, request: SkillApproval, *, auto: bool, interactive: bool) -> bool:
    """The terminal's answer to a :class:`~codeact.skills.SkillApproval`: shown in full, then asked.

    ``auto`` (``--approve-skills``) saves without asking but still says what was
    saved; without a terminal the save is refused (``--yes`` does not cover skills).
    """
    from ..terminal import safe

    what = f"skill {request.name}{safe(request.signature)}"
    verb = "replace" if request.overwrite else "save"
    if auto:
        renderer.note(f"{verb}d (--approve-skills): {what} in {safe(request.store)}", style="yellow")
        return True
    if not interactive:
        renderer.warning(f"not saved: {what}: saving a skill needs your approval and there is no terminal to "
                         "ask (pass --approve-skills to save skills without asking)")
        return False
    _show_skill_request(renderer, request)
    try:
        allowed = click.confirm(f"{verb.capitalize()} skill {request.name} for later sessions?", default=False,
                                err=True)
    except click.exceptions.Abort:
        allowed = False
    renderer.note(("saved: " if allowed else "not saved: ") + what, style="green" if allowed else "yellow")
    renderer.wait(f"step {request.step}: running the code")
    return allowed


def _show_skill_request(renderer: Renderer, request: SkillApproval) -> None:
    """The whole request on the terminal, escaped: where, name, signature, docstring, then the code (a new
    skill) or the diff and the new code (a replacement)."""
    from rich import box
    from rich.console import Group
    from rich.panel import Panel
    from rich.syntax import Syntax
    from rich.text import Text

    from ..terminal import safe

    renderer.pause()
    head = Text.assemble(("store: ", "bold"), safe(request.store), "\n", ("name: ", "bold"), request.name, "\n",
                         ("signature: ", "bold"), safe(request.signature), "\n",
                         ("docstring: ", "bold"), safe(request.docstring) or "(none)")
    parts: list[Any] = [head]
    if request.overwrite:
        parts += [Text("\nchanges to the saved skill:", style="bold yellow"),
                  Syntax(safe(request.diff), "diff", theme="ansi_dark", background_color="default", word_wrap=True)]
    parts += [Text(f"\nthe whole code ({request.code.count(chr(10)) + 1} lines), run in the sandbox of every later "
                   "session that imports it:", style="bold"),
              Syntax(safe(request.code), "python", theme="ansi_dark", background_color="default",
                     word_wrap=True, line_numbers=True)]
    title = Text(f"step {request.step}: the code wants to {'REPLACE' if request.overwrite else 'save'} a skill",
                 style="bold yellow")
    renderer.err.print(Panel(Group(*parts), title=title, title_align="left", border_style="yellow",
                             box=box.ROUNDED))
