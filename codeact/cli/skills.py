"""``codeact skills``: the functions kept for later sessions (add, list, show, rm).

The terminal's question before the code saves one is :func:`codeact.cli._skill_prompt.approve_skill`.

Skills are model-written code. These commands only move text: nothing is
imported or run on the host, and what a skill says is escaped before it
reaches the terminal.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ._app import CONTEXT_SETTINGS, UserError, cli


def _dir_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--dir", "skills_dir", metavar="DIR", type=click.Path(file_okay=False),
                        envvar="CODEACT_SKILLS_DIR",
                        help="The skills directory [default: this project's own store (the nearest directory "
                             "with .git, else this one), kept in the user data directory; "
                             "env: CODEACT_SKILLS_DIR].")(f)


def _store(skills_dir: str | None) -> Any:
    from ..skills import SkillStore

    return SkillStore(skills_dir or None)


@cli.group(invoke_without_command=True, context_settings=CONTEXT_SETTINGS)
@_dir_option
@click.pass_context
def skills(ctx: click.Context, skills_dir: str | None) -> None:
    """Functions kept for later sessions: the code imports them with `from skills import NAME`.

    The agent's code saves them with save_skill(func); these commands manage
    them from the shell. Without a subcommand: list them.

    \b
    Examples:
      codeact skills add cleanup.py            # a file that defines cleanup()
      codeact skills list
      codeact skills show cleanup
      codeact skills rm cleanup
      codeact skills --dir ~/shared-skills list     # a store shared by projects

    Each project (the nearest directory with .git, else the working
    directory) has its own store in the user data directory, so skills
    saved in one project never reach another's prompts and a cloned
    repository cannot bring any. Run and chat use the same store.
    """
    ctx.ensure_object(dict)["skills_dir"] = skills_dir
    if ctx.invoked_subcommand is None:
        _list(skills_dir, as_json=False)


def _hint_user_store(store: Any) -> None:
    """Skills saved before stores were per project are in the user-wide store: say how to reach them."""
    from ..skills import SkillStore, user_skills_dir
    from ..terminal import safe

    user = SkillStore(user_skills_dir())
    if user.path != store.path and user.list():
        click.echo(f"The user-wide store {safe(user.path)} has skills; use them with --skills-dir "
                   f"{safe(user.path)} (run, chat) or --dir (here).")


def _dir_of(ctx: click.Context, skills_dir: str | None) -> str | None:
    return skills_dir or (ctx.obj or {}).get("skills_dir")


@skills.command("list", context_settings=CONTEXT_SETTINGS)
@_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the skills as JSON.")
@click.pass_context
def list_skills(ctx: click.Context, skills_dir: str | None, as_json: bool) -> None:
    """List the skills: name, parameters, first docstring line."""
    _list(_dir_of(ctx, skills_dir), as_json)


def _list(skills_dir: str | None, as_json: bool) -> None:
    from ..terminal import safe, safe_json

    store = _store(skills_dir)
    found = store.list()
    if as_json:
        import json

        data = [{"name": s.name, "signature": s.signature, "summary": s.summary, "saved": s.saved,
                 "error": s.error} for s in found]
        click.echo(safe_json(json.dumps(data, ensure_ascii=False, indent=2)))
        return
    if not found:
        click.echo(f"No skills in {safe(store.path)}.")
        _hint_user_store(store)
        return
    click.echo(f"Skills in {safe(store.path)}:")
    for s in found:
        if s.error:
            click.echo(f"  {s.name}  [cannot be used: {safe(s.error)}]")
        else:
            click.echo(f"  {s.name}{safe(s.signature)}" + (f"  {safe(s.summary)}" if s.summary else ""))


@skills.command("show", context_settings=CONTEXT_SETTINGS)
@click.argument("name")
@_dir_option
@click.pass_context
def show_skill(ctx: click.Context, name: str, skills_dir: str | None) -> None:
    """Print a skill's source."""
    from ..terminal import safe

    skill = _store(_dir_of(ctx, skills_dir)).get(name)
    if skill.error:
        click.secho(f"# this skill cannot be used: {safe(skill.error)}", fg="yellow", err=True)
    click.echo(safe(skill.source).rstrip("\n"))


@skills.command("add", context_settings=CONTEXT_SETTINGS)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, readable=True))
@click.option("--name", metavar="NAME", help="The function in FILE to keep (default: its only function, or the "
                                              "one named like the file).")
@_dir_option
@click.pass_context
def add_skill(ctx: click.Context, file: str, name: str | None, skills_dir: str | None) -> None:
    """Keep the function in FILE (and the rest of the file: imports, helpers) as a skill.

    FILE is read as text; it is not run here. Sessions run it in the sandbox.
    """
    from ..skills import MAX_SKILL_BYTES

    path = Path(file)
    if path.stat().st_size > MAX_SKILL_BYTES:
        raise UserError(f"{file} is {path.stat().st_size:,} bytes; a skill may have at most {MAX_SKILL_BYTES:,}")
    source = path.read_bytes().decode("utf-8", "replace")
    chosen = name or _only_function(source, path)
    skill = _store(_dir_of(ctx, skills_dir)).save(chosen, source)
    click.echo(f"Saved skill {skill.name}{skill.signature}: sessions use it with `from skills import {skill.name}`.")


def _only_function(source: str, path: Path) -> str:
    import ast

    from sandbox.pyparse import parse  # here, not at the top: `codeact --help` must not import the sandbox

    try:
        tree = parse(source, str(path))
    except (SyntaxError, ValueError) as exc:
        raise UserError(f"{path} is not valid Python: {exc}") from None
    names = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(names) == 1:
        return names[0]
    if path.stem in names:
        return path.stem
    if not names:
        raise UserError(f"{path} defines no top-level function to keep")
    raise UserError(f"{path} defines several functions ({', '.join(names)}); choose one with --name")


@skills.command("rm", context_settings=CONTEXT_SETTINGS)
@click.argument("names", nargs=-1, required=True)
@_dir_option
@click.pass_context
def remove_skill(ctx: click.Context, names: tuple[str, ...], skills_dir: str | None) -> None:
    """Delete skills."""
    store = _store(_dir_of(ctx, skills_dir))
    for name in names:
        store.remove(name)
        click.echo(f"Removed skill {name}.")
