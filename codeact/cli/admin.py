"""``codeact image`` and ``codeact sandbox``: the sandbox image and leftover containers."""

from __future__ import annotations


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
              help="standard: python:3.11-slim + PyPI (needs a registry); offline: a Debian base made with "
                   "debootstrap (needs root); auto: standard when a registry answers.")
@click.option("--force", is_flag=True, help="Rebuild even when an image of the same recipe exists.")
@click.option("-q", "--quiet", is_flag=True, help="Do not print the build output.")
def image_build(variant: str, force: bool, quiet: bool) -> None:
    """Build the sandbox image (skipped when it is up to date)."""
    from sandbox.image import build_image, default_image_tag

    tag = default_image_tag()
    click.echo(f"Sandbox image {tag} ({variant} variant{', forced' if force else ''})")

    def log(line: str) -> None:
        if not quiet:
            click.secho(f"  {line}", dim=True)

    result = build_image(variant, force=force, log=log)  # type: ignore[arg-type]
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
    click.echo(f" ({labels.get('io.codeact.variant', '?')} variant, {size:.0f} MB, created {created})")


# --------------------------------------------------------------------------- sandbox


@cli.group("sandbox", context_settings=CONTEXT_SETTINGS)
def sandbox_group() -> None:
    """Manage sandbox containers."""


@sandbox_group.command("reap", context_settings=CONTEXT_SETTINGS)
@click.option("--all", "everything", is_flag=True,
              help="Remove every sandbox container of this host, also those of running sessions.")
def sandbox_reap(everything: bool) -> None:
    """Remove sandbox containers and volumes left behind by processes that died."""
    from sandbox import reap

    removed = reap(everything=everything)
    if not removed:
        click.echo("Nothing to remove.")
        return
    click.echo(f"Removed {len(removed)}:")
    for name in removed:
        click.echo(f"  {name}")
