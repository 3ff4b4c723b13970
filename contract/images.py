"""Images: what an instance's software is, chosen as SageMaker's training images are.

A job names its image by framework, framework version and Python version (the SDK's
``framework_version``/``py_version``), or by ``image_uri``: a catalog image's name or alias,
the name of one of SageMaker's training images (``...dkr.ecr...amazonaws.com/
pytorch-training:2.13.0-cpu-py311``, ``sagemaker-scikit-learn:1.2-1-cpu-py3``, read for
its framework, version and Python), or any other OCI image reference, which runs as a
custom container. Naming nothing means the built-in image: the environment Runyard itself
runs from, which needs nothing downloaded.

The catalog holds its own images (the defaults and an operator's), and besides them the
image of every version SageMaker has images of (``contract.framework_versions``), made
for the server's Python by the framework's recipe (``contract.image_recipes``) and named
as SageMaker names it (``pytorch-training:2.1.0-cpu-py311``).

Every backend runs a catalog image its own way: the local backend builds it once, from the
package registries, into an environment shared read-only by every instance that names it
(content-addressed: a changed definition is a new image); Kubernetes runs the OCI image of
the same name from its registry.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

from contract.framework_versions import SAGEMAKER_VERSIONS, known
from contract.image_recipes import RUNTIME_TOOLS, TRIED, VERIFY, numbers, recipe

BUILTIN = "builtin"
# Bumped when what a build makes of the same definition changes: every image is then new.
BUILD_FORMAT = 1
# Where each framework's training images are, as SageMaker names them: an image's name is
# <repository>:<version>-<processor>-<py_version>.
REPOSITORIES = {
    "pytorch": "pytorch-training",
    "tensorflow": "tensorflow-training",
    "sklearn": "sagemaker-scikit-learn",
}
# The repositories of SageMaker's training images (AWS's Deep Learning Containers, the
# older framework images and scikit-learn's), and their framework.
DLC_REPOSITORIES = {
    "pytorch-training": "pytorch",
    "sagemaker-pytorch": "pytorch",
    "huggingface-pytorch-training": "pytorch",
    "tensorflow-training": "tensorflow",
    "sagemaker-tensorflow": "tensorflow",
    "sagemaker-tensorflow-scriptmode": "tensorflow",
    "huggingface-tensorflow-training": "tensorflow",
    "sagemaker-scikit-learn": "sklearn",
}
_DLC = re.compile(
    r"(?:[0-9]{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(?:\.cn)?/)?"
    r"(?P<repository>[a-z0-9._-]+):(?P<tag>[A-Za-z0-9._-]+)"
)
# SageMaker's Python versions: py311, and for its oldest images py2 and py3.
_PY_VERSION = re.compile(r"py(?P<major>[0-9])(?P<minor>[0-9]{1,2})?")
# An OCI image reference (Docker's grammar): [registry[:port]/]path[:tag][@digest].
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(
    rf"(?:(?P<registry>[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*(?::[0-9]{{1,5}})?)/)?"
    rf"(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[a-f0-9]{64}))?"
)
# A framework's version; scikit-learn's images add their release ("1.2-1").
VERSION = re.compile(r"[0-9]+(?:\.[0-9]+){0,3}(?:-[0-9]+)?")
PYTHON = re.compile(r"3\.[0-9]{1,2}")


class ImageError(ValueError):
    """A job names an image no catalog entry matches; ``field`` is the spec's field."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


@dataclass(frozen=True)
class Image:
    """One entry of the catalog: an environment with a framework, as a training image."""

    framework: str
    framework_version: str
    # The Python it runs ("3.11").
    python: str
    # What pip installs into it, in order.
    packages: tuple[str, ...]
    processor: str = "cpu"
    # Other names a job may give it as image_uri.
    aliases: tuple[str, ...] = ()
    description: str = ""
    # Packages the build tries after the others, each kept only where it installs without
    # changing what is there and passes its check (image_recipes.TRIED_CHECKS).
    tried: tuple[str, ...] = ()
    # Python the build runs in the new environment; a failure fails the build.
    verify: str = ""
    # For the image of a version SageMaker knows, made for this server: the framework's
    # requirement at that version. Where the package index has no build of it for the
    # image's Python, the local backend runs the job on the nearest catalog image.
    framework_requirement: str = ""

    @property
    def py_version(self) -> str:
        return "py" + self.python.replace(".", "")

    @property
    def name(self) -> str:
        """As SageMaker's training images are named: repository:tag."""
        repository = REPOSITORIES.get(self.framework, f"{self.framework}-training")
        return f"{repository}:{self.framework_version}-{self.processor}-{self.py_version}"

    @property
    def digest(self) -> str:
        """What the environment is made of, as a name: the same definition, the same image."""
        made_of: dict[str, object] = {
            "python": self.python,
            "packages": self.packages,
            "format": BUILD_FORMAT,
        }
        if self.tried or self.verify:
            made_of.update(tried=self.tried, verify=self.verify)
        return hashlib.sha256(json.dumps(made_of, sort_keys=True).encode()).hexdigest()[:20]

    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


def _image(framework: str, version: str, python: str, processor: str = "cpu") -> Image:
    """The image of a framework's version made by its recipe (``image_recipes``)."""
    made = recipe(framework, version, processor)
    return Image(
        framework,
        version,
        python,
        made.packages,
        processor,
        description=made.description,
        tried=made.tried,
        verify=made.verify,
    )


# What Runyard offers without configuration: the frameworks' images as far as the
# package registries have them (SageMaker's containers also hold the training toolkit and
# Open MPI), which also stand in for a version SageMaker knows that the package index
# cannot install here. The GPU image pins the torchvision of its torch; the CPU one tries
# one (PyPI's is built against PyPI's own torch, the CUDA one) and goes without where it
# does not work.
DEFAULT_CATALOG: tuple[Image, ...] = (
    Image(
        "pytorch",
        "2.13.0",
        "3.11",
        ("torch==2.13.0", "numpy", *RUNTIME_TOOLS),
        aliases=("pytorch:2.13",),
        description="PyTorch 2.13 (CPU build), torchvision where a build of it matches, "
        "Open MPI, mpi4py, the SageMaker training toolkit",
        tried=TRIED["pytorch"],
        verify=VERIFY["pytorch"],
    ),
    Image(
        "pytorch",
        "2.14.1",
        "3.11",
        ("torch==2.14.1", "torchvision==0.29.1", "numpy", *RUNTIME_TOOLS),
        processor="gpu",
        aliases=("pytorch:2.14",),
        description="PyTorch 2.14 and torchvision 0.29 (CUDA builds, about 5.5 GB), Open MPI, "
        "mpi4py, the SageMaker training toolkit",
        verify=VERIFY["pytorch"],
    ),
    Image(
        "tensorflow",
        "2.20.0",
        "3.11",
        ("tensorflow-cpu==2.20.*", *RUNTIME_TOOLS),
        aliases=("tensorflow:2.20",),
        description="TensorFlow 2.20 (CPU build), Open MPI, mpi4py, the SageMaker training toolkit",
        verify=VERIFY["tensorflow"],
    ),
    replace(_image("sklearn", "1.4-2", "3.11"), aliases=("sklearn:1.4-2",)),
)


@dataclass(frozen=True)
class Choice:
    """What a job runs on: a catalog image (the built-in one by default), or an OCI image
    that runs as a custom container."""

    image: str = BUILTIN
    container: str | None = None
    # How the image differs from what the job's fields named (its Python, say).
    note: str | None = None

    @property
    def label(self) -> str:
        return self.container or self.image


def _running_python() -> str:
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


@dataclass(frozen=True)
class Catalog:
    images: tuple[Image, ...] = DEFAULT_CATALOG
    # Other names for catalog images (or the built-in one) that an operator gives: an
    # image_uri that is one of them (whole, or without its registry) runs that image.
    aliases: Mapping[str, str] = field(default_factory=dict)
    # The Python the images of SageMaker's versions are made for: the server's own, which
    # runs Runyard's runtime and libraries beside a job's script.
    python: str = field(default_factory=_running_python)
    _by_name: dict[str, Image] = field(default_factory=dict, init=False, compare=False)

    def __post_init__(self) -> None:
        for image in self.images:
            for name in image.names():
                if name in self._by_name or name == BUILTIN:
                    raise ValueError(f"the image name {name!r} is given twice")
                self._by_name[name] = image
        for alias, target in self.aliases.items():
            if target != BUILTIN and self.get(target) is None:
                raise ValueError(f"the alias {alias!r} names {target!r}, which is no image")

    @classmethod
    def with_extra(
        cls, extra: Iterable[Image], aliases: Mapping[str, str] | None = None
    ) -> Catalog:
        """The defaults, with ``extra`` added; an extra image of a default's name replaces it."""
        added = list(extra)
        replaced = {image.name for image in added}
        images = (*[i for i in DEFAULT_CATALOG if i.name not in replaced], *added)
        return cls(images, dict(aliases or {}))

    def get(self, name: str) -> Image | None:
        """The image of that name or alias: one of the catalog's, or the image this server
        makes of a version SageMaker knows (``pytorch-training:2.1.0-cpu-py311``)."""
        return self._by_name.get(name) or self._made_by_name(name)

    def made_for(self, framework: str, version: str, processor: str = "cpu") -> Image:
        """The image this server makes of a framework's version SageMaker knows."""
        made = recipe(framework, version, processor)
        return replace(
            _image(framework, version, self.python, processor),
            framework_requirement=made.requirement,
        )

    def nearest(self, image: Image) -> Image | None:
        """The catalog image of the same framework that stands in for ``image``: of its
        processor if one is, then the closest version (the newer of two as close)."""
        same = [i for i in self.images if i.framework == image.framework and i != image]
        if not same:
            return None
        wanted = numbers(image.framework_version)

        def distance(candidate: Image) -> tuple[int, ...]:
            have = numbers(candidate.framework_version)
            gaps = tuple(abs(a - b) for a, b in zip(have, wanted, strict=False))
            return (candidate.processor != image.processor, *gaps, *(-n for n in have))

        return min(same, key=distance)

    def summary(self, framework: str | None = None) -> str:
        """The images a job may name, for error messages."""
        offered = [i for i in self.images if framework in (None, i.framework)]
        if not offered:
            return f"no {framework} images" if framework else "no images"
        return ", ".join(f"{i.framework} {i.framework_version} ({i.py_version})" for i in offered)

    def choose(
        self,
        *,
        framework: str,
        framework_version: str | None,
        py_version: str | None,
        image_uri: str | None,
    ) -> Choice:
        """The image a job's fields name; ImageError naming the field when none does."""
        if image_uri is not None:
            choice = self._by_uri(image_uri, py_version)
            if choice.container is None and framework_version is not None:
                self._agrees(choice.image, framework_version)
            return choice
        if framework_version is not None:
            return self._by_version(framework, framework_version, py_version)
        if py_version is not None:
            _python_of(py_version, "py_version")  # a well-formed one, for the built-in image
        return Choice()

    def _by_uri(self, uri: str, py_version: str | None) -> Choice:
        target = self.aliases.get(uri) or self.aliases.get(uri.split("/", 1)[-1], uri)
        if target == BUILTIN:
            return Choice()
        named = self.get(target)
        if named is not None:
            return Choice(named.name)
        dlc = parse_dlc(uri)
        if dlc is not None:
            try:
                return self._by_version(
                    dlc.framework, dlc.version, dlc.py_version or py_version, dlc.processor
                )
            except ImageError as exc:
                raise ImageError("image_uri", str(exc)) from exc
        if not is_reference(uri):
            raise ImageError(
                "image_uri",
                f"{uri[:120]!r} is neither an image of this server's catalog "
                f"({self.summary()}) nor an OCI image reference",
            )
        return Choice(container=uri)

    def _by_version(
        self, framework: str, version: str, py_version: str | None, processor: str = "cpu"
    ) -> Choice:
        if not VERSION.fullmatch(version):
            raise ImageError("framework_version", f"{version[:32]!r} is not a version number")
        python = _python_of(py_version, "py_version") if py_version else None
        for key in _version_keys(framework, version, py_version):
            if key in self.aliases:
                return self._by_uri(self.aliases[key], None)
        wanted = version.split(".")
        found = [
            image
            for image in self.images
            if image.framework == framework
            and image.framework_version.split(".")[: len(wanted)] == wanted
            and _same_python(python, image.python)
        ]
        if found:
            # The newest release of that version, on the newest Python.
            best = max(found, key=lambda i: (numbers(i.framework_version), numbers(i.python)))
            return Choice(best.name)
        sagemakers = known(framework, version)
        if sagemakers is None:
            asked = f"{framework} {version}" + (f" ({py_version})" if py_version else "")
            table = SAGEMAKER_VERSIONS.get(framework)
            also = f", and SageMaker's versions {table.summary()}" if table is not None else ""
            raise ImageError(
                "framework_version",
                f"this server's image catalog has no {asked}; it has: "
                f"{self.summary(framework)}{also} (an operator adds images with "
                f"RUNYARD_IMAGES, or names one for {framework}:{version} in "
                "RUNYARD_IMAGE_ALIASES)",
            )
        image = self.made_for(framework, sagemakers.version, processor)
        note = None
        if python is not None and not _same_python(python, image.python):
            note = (
                f"{py_version} was asked for; the image of {framework} "
                f"{sagemakers.version} is made for this server's Python, {image.python}"
            )
        return Choice(image.name, note=note)

    def _made_by_name(self, name: str) -> Image | None:
        """The image of a SageMaker version this server makes, by the name it gives it."""
        dlc = parse_dlc(name)
        if dlc is None or name.split(":", 1)[0] != REPOSITORIES.get(dlc.framework):
            return None
        sagemakers = known(dlc.framework, dlc.version)
        if sagemakers is None or sagemakers.version != dlc.version:
            return None
        image = self.made_for(dlc.framework, dlc.version, dlc.processor)
        return image if image.name == name else None

    def _agrees(self, name: str, framework_version: str) -> None:
        image = self.get(name)
        wanted = framework_version.split(".")
        if image is None or image.framework_version.split(".")[: len(wanted)] == wanted:
            return
        sagemakers = known(image.framework, framework_version)
        if sagemakers is not None and sagemakers.version == image.framework_version:
            return  # the short form of the image's version ("2.1" for 2.1.0)
        raise ImageError(
            "framework_version",
            f"{framework_version[:32]!r} disagrees with image_uri, which names "
            f"{image.framework} {image.framework_version}: give one of them",
        )


class DlcName(NamedTuple):
    """What a SageMaker training image's name says."""

    framework: str
    version: str
    py_version: str | None
    processor: str


def parse_dlc(uri: str) -> DlcName | None:
    """What the name of one of SageMaker's training images says; None for another name.
    Hugging Face's images carry the framework's version first too; scikit-learn's carry
    its release after its version (``1.2-1-cpu-py3``)."""
    match = _DLC.fullmatch(uri)
    if match is None or match["repository"] not in DLC_REPOSITORIES:
        return None
    framework = DLC_REPOSITORIES[match["repository"]]
    parts = match["tag"].split("-")
    version = parts[0]
    if framework == "sklearn" and len(parts) > 1 and parts[1].isdigit():
        version = f"{parts[0]}-{parts[1]}"
    py_version = next((part for part in parts if _PY_VERSION.fullmatch(part)), None)
    processor = "gpu" if "gpu" in parts else "cpu"
    return DlcName(framework, version[:32], py_version, processor)


def _version_keys(framework: str, version: str, py_version: str | None) -> list[str]:
    """The alias names a framework's version is known by, most precise first:
    ``pytorch:2.1.0-py310``, ``pytorch:2.1.0``, ``pytorch:2.1-py310``, ``pytorch:2.1``."""
    versions = list(dict.fromkeys([version, ".".join(version.split(".")[:2])]))
    keys = []
    for each in versions:
        if py_version:
            keys.append(f"{framework}:{each}-{py_version}")
        keys.append(f"{framework}:{each}")
    return keys


def is_reference(uri: str) -> bool:
    return len(uri) <= 255 and _REFERENCE.fullmatch(uri) is not None


def _python_of(py_version: str, field_name: str) -> str:
    """The Python a py_version names: "3.11", or "3" for SageMaker's "py3"."""
    match = _PY_VERSION.fullmatch(py_version)
    if match is None:
        raise ImageError(field_name, f"{py_version[:16]!r} is not a Python version such as py311")
    if match["minor"] is None:
        return match["major"]
    return f"{match['major']}.{match['minor']}"


def _same_python(asked: str | None, python: str) -> bool:
    """Whether an image on ``python`` ("3.11") is what ``asked`` ("3.11", "3" or None) names."""
    return asked is None or python == asked or python.split(".")[0] == asked


# -- where a built image lives --------------------------------------------------------------


@dataclass(frozen=True)
class StoredImage:
    """A catalog image's place in the local backend's store, by its digest: its
    environment, and beside it the build's lock, log and (when it failed) the reason. The
    builder writes the marker last, so an environment holding it is whole."""

    root: Path
    digest: str

    @property
    def environment(self) -> Path:
        return self.root / self.digest

    @property
    def marker(self) -> Path:
        return self.environment / "runyard-image.json"

    @property
    def python(self) -> Path:
        return self.environment / "bin" / "python"

    @property
    def lock(self) -> Path:
        return self.root / f"{self.digest}.lock"

    @property
    def log(self) -> Path:
        return self.root / f"{self.digest}.log"

    @property
    def failure(self) -> Path:
        return self.root / f"{self.digest}.failed"

    def is_built(self) -> bool:
        return self.marker.is_file()


def image_record(image: Image, extra: dict[str, object] | None = None) -> str:
    """What the marker holds: the definition, and what the build adds (times, versions)."""
    record: dict[str, object] = {
        "name": image.name,
        "digest": image.digest,
        "framework": image.framework,
        "framework_version": image.framework_version,
        "python": image.python,
        "processor": image.processor,
        "packages": list(image.packages),
        "tried": list(image.tried),
        **(extra or {}),
    }
    return json.dumps(record, indent=2) + "\n"


def definitions(images: Sequence[Image]) -> list[dict[str, object]]:
    """The catalog as plain data (the CLI's ``images list``, the API's catalog)."""
    return [
        {
            "name": image.name,
            "framework": image.framework,
            "framework_version": image.framework_version,
            "py_version": image.py_version,
            "processor": image.processor,
            "aliases": list(image.aliases),
            "packages": list(image.packages),
            "tried": list(image.tried),
            "description": image.description,
        }
        for image in images
    ]
