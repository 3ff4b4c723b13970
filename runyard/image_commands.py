"""``runyard images``: the image catalog and the local backend's store on this machine.

Run where the worker runs (they read the server's settings, as ``runyard migrate`` does):
a first job on an image builds it, or an operator builds it ahead of time here.
"""

from __future__ import annotations

import sys

import click

from contract.images import Catalog, Image
from provisioning.local import ImageBuildError, ImageStore, image_store
from runyard.output import table


def _store_and_catalog() -> tuple[ImageStore, Catalog]:
    from service.settings import get_settings

    settings = get_settings()
    return image_store(settings), settings.catalog


@click.group("images")
def images_group() -> None:
    """Images jobs run on: the catalog, and what is built on this machine."""


@images_group.command("list")
@click.option("--packages", is_flag=True, help="Show what each image installs.")
def images_list(packages: bool) -> None:
    """The catalog, with each image's state in this machine's store."""
    store, catalog = _store_and_catalog()
    rows = [["builtin", "-", "-", "ready", "the environment Runyard runs from"]]
    listed = [*catalog.images, *_made_here(store, catalog)]
    for image in listed:
        state = store.state(image)
        shown = {
            "built": f"built {state.built_at[:10]} ({state.size_bytes / 2**20:,.0f} MiB)",
            "building": "building",
            "failed": "failed (runyard images build shows why)",
            "absent": "not built",
        }[state.state]
        aliases = ", ".join(image.aliases) or "-"
        rows.append([image.name, image.digest, aliases, shown, image.description])
    for line in table(["IMAGE", "DIGEST", "ALIASES", "STATE", "HOLDS"], rows):
        click.echo(line)
    click.echo(
        f"Besides these, the image of every version SageMaker has images of (Python "
        f"{catalog.python}), built on its first use: runyard images build "
        f"pytorch-training:2.1.0-cpu-{'py' + catalog.python.replace('.', '')}"
    )
    if packages:
        for image in listed:
            click.echo(f"{image.name}: {' '.join(image.packages)}")


@images_group.command("build")
@click.argument("names", nargs=-1)
@click.option("--all", "build_all", is_flag=True, help="Build every image of the catalog.")
def images_build(names: tuple[str, ...], build_all: bool) -> None:
    """Build images now (by name or alias), showing pip's progress; one already built is
    left as it is, one being built is waited for."""
    store, catalog = _store_and_catalog()
    chosen = _chosen(catalog, names, build_all)
    failed = 0
    for image in chosen:
        click.echo(f"== {image.name}")
        try:
            stored = store.build(image, sys.stdout)
        except ImageBuildError as exc:
            click.echo(f"error: {image.name} could not be built: {exc}", err=True)
            failed += 1
            continue
        click.echo(f"{image.name} is ready: {stored.environment}")
    if failed:
        sys.exit(1)


@images_group.command("prune")
@click.option("--all", "prune_all", is_flag=True, help="Also the images of the catalog.")
def images_prune(prune_all: bool) -> None:
    """Remove built images the catalog no longer names (with --all, every image), and
    what failed builds left; an image that a job runs on now is kept."""
    store, catalog = _store_and_catalog()
    named = [*catalog.images, *_made_here(store, catalog)]
    keep = set() if prune_all else {image.digest for image in named}
    if prune_all:
        store.index.forget()  # what pip answered, asked again once jobs need it
    removed = store.prune(keep, click.echo)
    click.echo(f"{len(removed)} image(s) removed")


def _made_here(store: ImageStore, catalog: Catalog) -> list[Image]:
    """The images of SageMaker's versions built in the store that the catalog still makes
    the same way."""
    found = []
    for record in store.records():
        image = catalog.get(str(record.get("name", "")))
        if image is not None and image not in catalog.images and image.digest == record["digest"]:
            found.append(image)
    return found


def _chosen(catalog: Catalog, names: tuple[str, ...], build_all: bool) -> list[Image]:
    if build_all:
        return list(catalog.images)
    if not names:
        raise click.UsageError("name the images to build (runyard images list), or --all")
    chosen = []
    for name in names:
        image = catalog.get(name)
        if image is None:
            known = ", ".join(i.name for i in catalog.images)
            raise click.BadParameter(
                f"{name!r} is no image of the catalog; it has: {known}, and the image of "
                "every version SageMaker has images of (runyard images list)"
            )
        chosen.append(image)
    return chosen
