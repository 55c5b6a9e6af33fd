"""``codeact image`` and ``codeact sandbox``: the sandbox image and leftover containers."""

from __future__ import annotations

from typing import Any, Literal

import click

from ._app import (
    CONTEXT_SETTINGS,
    cli,
)


@cli.group(context_settings=CONTEXT_SETTINGS)
def image() -> None:
    """Build and inspect the sandbox image."""


@image.command("build", context_settings=CONTEXT_SETTINGS)
@click.option("--variant", type=click.Choice(["auto", "standard", "offline"]), default="auto", show_default=True,
              help="The base: standard is python:3.11-slim (needs an image registry); offline is a Debian made "
                   "with debootstrap (needs root); auto: standard when a registry answers. Either way the Python "
                   "packages are wheels the host fetches.")
@click.option("--flavor", type=click.Choice(["lean", "full"]), default=None,
              help="lean: the kernel with numpy, pandas and matplotlib (the default); full: also scikit-learn, "
                   "scipy, statsmodels, seaborn, pyarrow, openpyxl (use it with CODEACT_SANDBOX_FLAVOR=full) "
                   "[default: $CODEACT_SANDBOX_FLAVOR or lean].")
@click.option("--force", is_flag=True, help="Rebuild even when an image of the same recipe exists.")
@click.option("-q", "--quiet", is_flag=True, help="Do not print the build output.")
def image_build(variant: Literal["auto", "standard", "offline"], force: bool, quiet: bool,
                flavor: str | None = None) -> None:
    """Build the sandbox image (skipped when it is up to date).

    Its Python packages are binary wheels the host fetches with its own pip
    (pinned in images/requirements.txt and images/full.txt) and caches.
    """
    import os

    from sandbox.image import FLAVOR_ENV, build_image, default_image_tag, image_tag

    # With no --flavor, build what sessions will use (an image CODEACT_SANDBOX_IMAGE names, or the env's flavour).
    tag = image_tag(flavor) if flavor else default_image_tag()
    flavor = flavor or os.environ.get(FLAVOR_ENV) or "lean"
    click.echo(f"Sandbox image {tag} ({flavor} flavour, {variant} variant{', forced' if force else ''})")

    def log(line: str) -> None:
        if not quiet:
            click.secho(f"  {line}", dim=True)

    result = build_image(variant, flavor=flavor, tag=tag, force=force, log=log)
    if result.skipped:
        click.secho(f"✔ {result.tag} is already built (pass --force to rebuild)", fg="green")
    else:
        click.secho(f"✔ built {result.tag} ({result.variant} variant) in {result.seconds:.0f} s", fg="green")


@image.command("status", context_settings=CONTEXT_SETTINGS)
def image_status() -> None:
    """Print the image tag this version uses and whether it is present (exit 1 when it is not)."""
    from sandbox.container import docker_client
    from sandbox.image import default_image_tag

    tag = default_image_tag()
    client = docker_client(timeout=10)
    import docker.errors

    try:
        img = client.images.get(tag)
    except docker.errors.ImageNotFound:
        click.echo(f"{tag}: ", nl=False)
        click.secho("not built", fg="red", nl=False)
        click.echo(" (run `codeact image build`)")
        raise click.exceptions.Exit(1) from None
    labels = img.labels or {}
    size = (img.attrs.get("Size") or 0) / 1e6
    created = (img.attrs.get("Created") or "?")[:19].replace("T", " ")
    click.echo(f"{tag}: ", nl=False)
    click.secho("present", fg="green", nl=False)
    click.echo(f" ({labels.get('io.codeact.flavor', 'lean')} flavour, {labels.get('io.codeact.variant', '?')} "
               f"variant, {size:.0f} MB, created {created})")


# --------------------------------------------------------------------------- sandbox


@cli.group("sandbox", context_settings=CONTEXT_SETTINGS)
def sandbox_group() -> None:
    """Manage sandbox containers."""


@sandbox_group.command("reap", context_settings=CONTEXT_SETTINGS)
@click.option("--all", "everything", is_flag=True,
              help="Remove every sandbox container of this host, also those of running sessions.")
@click.option("--engine", "engine_names", metavar="NAME|URL", multiple=True,
              help="On this engine (a name from CODEACT_ENGINES, or a URL such as tcp://host:2376); "
                   "repeatable; 'all' for every engine in CODEACT_ENGINES. Default: the docker CLI's engine.")
def sandbox_reap(everything: bool, engine_names: tuple[str, ...]) -> None:
    """Remove sandbox containers and volumes left behind by processes that died.

    Only containers this host created are considered, on any engine.
    """
    from sandbox import reap
    from sandbox.engines import connect, describe

    clients = [connect(e, timeout=30) for e in _engines_named(engine_names)] if engine_names else [None]
    removed = []
    for client in clients:
        found = reap(client, everything=everything)
        where = f" on {describe(client)}" if client is not None and len(clients) > 1 else ""
        removed += [f"{name}{where}" for name in found]
    if not removed:
        click.echo("Nothing to remove.")
        return
    click.echo(f"Removed {len(removed)}:")
    for name in removed:
        click.echo(f"  {name}")


def _engines_named(names: tuple[str, ...]) -> list[Any]:
    """Engines for ``--engine``: names from CODEACT_ENGINES, 'all' of them, or URLs."""
    from sandbox.engines import ENGINES_ENV, Engine, load_engines

    from ..errors import ConfigError

    pool = {e.name: e for e in load_engines()}
    chosen: list[Any] = []
    for name in names:
        if name == "all":
            if not pool:
                raise ConfigError(f"--engine all: {ENGINES_ENV} names no engines")
            chosen += list(pool.values())
        elif name in pool:
            chosen.append(pool[name])
        elif "://" in name:
            chosen.append(Engine(name, name))
        else:
            known = ", ".join(pool) or f"none ({ENGINES_ENV} is unset)"
            raise ConfigError(f"--engine {name}: not an engine name (known: {known}) nor a URL such as tcp://host:2376")
    return chosen
