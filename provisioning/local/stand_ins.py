"""Which catalog image a job's instances run on this machine: the one its spec names or,
for the image of a version SageMaker knows (``Catalog.made_for``) whose framework the
package index has no build of for the image's Python (torch 1.12 for Python 3.11), the
nearest image of the catalog, said in the job's log and its describe. With
``RUNYARD_IMAGE_FALLBACK=refuse`` such a job is refused instead: at submission where the
index's answer is known already, else when it is launched.

Whether the index has the build is pip's answer (``package_index``), asked at the job's
launch the first time and remembered: an image already built needs no answer. A plan
that is not launched (a dry run) asks nothing: it shows the image as named, and what its
launch will decide of it (``undecided``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Literal

from contract.images import Catalog, Choice, Image
from contract.problems import Problem
from contract.spec import JobSpec
from provisioning.base import DECIDED_AT_LAUNCH, LaunchError
from provisioning.local.images import ImageBuildError, ImageStore, interpreter_for
from provisioning.local.package_index import Answer

Fallback = Literal["nearest", "refuse"]


@dataclass(frozen=True)
class ImageDecision:
    # The catalog image the instances run.
    image: str
    # Why it is not the one the spec names; "" where it is.
    note: str = ""


def decide(
    choice: Choice, catalog: Catalog, store: ImageStore, fallback: Fallback
) -> ImageDecision:
    """The image to launch the job's instances on; LaunchError where the operator refuses
    a stand-in, or the catalog has none."""
    image = catalog.get(choice.image)
    answer = _answer(image, store, ask=True) if image is not None else None
    if image is None or answer is None or answer.offered is not False:
        return ImageDecision(choice.image)
    why = _unavailable(image, answer)
    if fallback == "refuse":
        raise LaunchError(f"{why}; this server runs no other image in its place "
                          "(RUNYARD_IMAGE_FALLBACK=refuse)")  # fmt: skip
    stand_in = catalog.nearest(image)
    if stand_in is None:
        raise LaunchError(f"{why}, and the catalog has no other {image.framework} image")
    note = f"{why}: the job runs on {stand_in.name}, the nearest image of the catalog"
    return ImageDecision(stand_in.name, note)


def undecided(choice: Choice, catalog: Catalog, store: ImageStore, fallback: Fallback) -> str:
    """What the job's launch will decide of its image, for a plan that asks nobody (a dry
    run); "" where there is nothing to decide (not an image of a SageMaker version made
    here, or one built already)."""
    image = catalog.get(choice.image)
    if image is None or not image.framework_requirement or store.stored(image).is_built():
        return ""
    stand_in = catalog.nearest(image)
    if fallback == "refuse" or stand_in is None:
        otherwise = "the job is refused then"
    else:
        otherwise = f"the job runs on {stand_in.name}, the nearest image of the catalog"
    return (
        f"{DECIDED_AT_LAUNCH}: whether this server's package index has "
        f"{image.framework_requirement} for Python {image.python} (pip is asked); where it "
        f"has not, {otherwise}"
    )


def refusal(
    spec: JobSpec, catalog: Catalog, store: ImageStore, fallback: Fallback
) -> Problem | None:
    """Why the job is refused at submission: the operator refuses stand-ins, and pip has
    said already that the index has no build of the framework's version."""
    if fallback != "refuse" or spec.image.container is not None:
        return None
    image = catalog.get(spec.image.image)
    answer = _answer(image, store, ask=False) if image is not None else None
    if image is None or answer is None or answer.offered is not False:
        return None
    loc = "image_uri" if spec.image_uri else "framework_version"
    return Problem(
        (loc,),
        f"{_unavailable(image, answer)}, and this server runs no other image in its place "
        "(RUNYARD_IMAGE_FALLBACK=refuse)",
    )


def _answer(image: Image, store: ImageStore, *, ask: bool) -> Answer | None:
    """Whether the index has the image's framework at its version: None where the image
    is not one of SageMaker's versions made here, or is built already."""
    if not image.framework_requirement or store.stored(image).is_built():
        return None
    index = store.index
    if not ask:
        return index.remembered(image.framework_requirement, image.python)
    return index.offers(image.framework_requirement, image.python, _with_pip(image.python))


def _with_pip(python: str) -> str:
    """A Python of that version to run pip with: the server's own (its environment has
    pip), else the one a build would use."""
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == python:
        return sys.executable
    try:
        return interpreter_for(python)
    except ImageBuildError:
        return f"python{python}"  # not there: pip cannot answer, and the build says why


def _unavailable(image: Image, answer: Answer) -> str:
    return (
        f"{image.framework_requirement} cannot be installed for Python {image.python} from "
        f"this server's package index (pip: {answer.words})"
    )
