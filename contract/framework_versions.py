"""The framework versions SageMaker's training images exist for, as its Python SDK lists
them (its ``image_uri_config``): a job that names one of them, by its full version, by the
short form the SDK takes for it, or by the image's name, is never refused for naming a
version Runyard does not know (``contract.images`` builds or stands in for it).

Each table below is one line per version: the version, the Python versions SageMaker's
images of it have, the short form that names it (the SDK's alias; ``-`` for none), and
the repositories its images are in. A test holds the tables to the SDK's own lists.
scikit-learn's versions are its images' (``1.2-1``: scikit-learn 1.2, the images' first
release of it); the scikit-learn release each holds is a column of its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

_PYTORCH = """
    0.4.0    py2 py3        0.4    sagemaker-pytorch
    1.0.0    py2 py3        1.0    sagemaker-pytorch
    1.1.0    py2 py3        1.1    sagemaker-pytorch
    1.2.0    py2 py3        1.2    pytorch-training
    1.3.1    py2 py3        1.3    pytorch-training
    1.4.0    py2 py3 py36   1.4    pytorch-training
    1.5.0    py3 py36       1.5    pytorch-training
    1.6.0    py3 py36       1.6    pytorch-training
    1.7.1    py3 py36       1.7    pytorch-training
    1.8.0    py3 py36       -      pytorch-training
    1.8.1    py3 py36       1.8    pytorch-training
    1.9.0    py38           -      pytorch-training
    1.9.1    py38           1.9    pytorch-training
    1.10.0   py38           -      pytorch-training
    1.10.2   py38           1.10   pytorch-training
    1.11.0   py38           1.11   pytorch-training
    1.12.0   py38           -      pytorch-training
    1.12.1   py38           1.12   pytorch-training
    1.13.1   py39           1.13   pytorch-training
    2.0.0    py310          -      pytorch-training
    2.0.1    py310          2.0    pytorch-training
    2.1.0    py310          2.1    pytorch-training
    2.2.0    py310          2.2    pytorch-training
    2.3.0    py311          2.3    pytorch-training
    2.4.0    py311          2.4    pytorch-training
    2.5.1    py311          2.5    pytorch-training
    2.6.0    py312          2.6    pytorch-training
    2.7.1    py312          2.7    pytorch-training
    2.8.0    py312          2.8    pytorch-training
"""

_TENSORFLOW = """
    1.4.1    py2            1.4    sagemaker-tensorflow
    1.5.0    py2            1.5    sagemaker-tensorflow
    1.6.0    py2            1.6    sagemaker-tensorflow
    1.7.0    py2            1.7    sagemaker-tensorflow
    1.8.0    py2            1.8    sagemaker-tensorflow
    1.9.0    py2            1.9    sagemaker-tensorflow
    1.10.0   py2            1.10   sagemaker-tensorflow
    1.11.0   py2 py3        1.11   sagemaker-tensorflow-scriptmode
    1.12.0   py2 py3        1.12   sagemaker-tensorflow-scriptmode
    1.13.1   py2 py3        1.13   sagemaker-tensorflow-scriptmode tensorflow-training
    1.14.0   py2 py3        1.14   tensorflow-training
    1.15.0   py2 py3        -      tensorflow-training
    1.15.2   py2 py3 py37   -      tensorflow-training
    1.15.3   py2 py3 py37   -      tensorflow-training
    1.15.4   py3 py36 py37  -      tensorflow-training
    1.15.5   py3 py36 py37  1.15   tensorflow-training
    2.0.0    py2 py3        -      tensorflow-training
    2.0.1    py2 py3        -      tensorflow-training
    2.0.2    py2 py3        -      tensorflow-training
    2.0.3    py3 py36       -      tensorflow-training
    2.0.4    py3 py36       2.0    tensorflow-training
    2.1.0    py2 py3        -      tensorflow-training
    2.1.1    py2 py3        -      tensorflow-training
    2.1.2    py3 py36       -      tensorflow-training
    2.1.3    py3 py36       2.1    tensorflow-training
    2.2.0    py37           -      tensorflow-training
    2.2.1    py37           -      tensorflow-training
    2.2.2    py37           2.2    tensorflow-training
    2.3.0    py37           -      tensorflow-training
    2.3.1    py37           -      tensorflow-training
    2.3.2    py37           2.3    tensorflow-training
    2.4.1    py37           -      tensorflow-training
    2.4.3    py37           2.4    tensorflow-training
    2.5.0    py37           -      tensorflow-training
    2.5.1    py37           2.5    tensorflow-training
    2.6.0    py38           -      tensorflow-training
    2.6.2    py38           -      tensorflow-training
    2.6.3    py38           2.6    tensorflow-training
    2.7.1    py38           2.7    tensorflow-training
    2.8.0    py39           2.8    tensorflow-training
    2.9.2    py39           2.9    tensorflow-training
    2.10.1   py39           2.10   tensorflow-training
    2.11.0   py39           2.11   tensorflow-training
    2.12.0   py310          2.12   tensorflow-training
    2.13.0   py310          2.13   tensorflow-training
    2.14.1   py310          2.14   tensorflow-training
    2.16.2   py310          2.16   tensorflow-training
    2.18.0   py310          2.18   tensorflow-training
    2.19.0   py312          2.19   tensorflow-training
"""

# The last column: the scikit-learn release the image holds.
_SKLEARN = """
    0.20.0   py3            -      sagemaker-scikit-learn   0.20.0
    0.23-1   py3            -      sagemaker-scikit-learn   0.23.2
    1.0-1    py3            -      sagemaker-scikit-learn   1.0.2
    1.2-1    py3            -      sagemaker-scikit-learn   1.2.1
    1.4-2    py3            -      sagemaker-scikit-learn   1.4.2
"""

_PY_VERSION = re.compile(r"py[0-9]+")
_REPOSITORY = re.compile(r"[a-z][a-z0-9-]*")


@dataclass(frozen=True)
class KnownVersion:
    """One version SageMaker has training images of."""

    version: str
    py_versions: tuple[str, ...]
    # The SDK's short form for it ("2.1" for 2.1.0), if it has one.
    short: str | None
    repositories: tuple[str, ...]
    # For scikit-learn: the release the image holds ("1.2.1" for "1.2-1").
    release: str | None = None


@dataclass(frozen=True)
class FrameworkVersions:
    framework: str
    versions: tuple[KnownVersion, ...]
    _by_name: dict[str, KnownVersion] = field(default_factory=dict, init=False, compare=False)

    def __post_init__(self) -> None:
        for known in self.versions:
            self._by_name[known.version] = known
        for known in self.versions:
            if known.short is not None:
                self._by_name.setdefault(known.short, known)

    def find(self, version: str) -> KnownVersion | None:
        """The version ``version`` names, in full or by its short form."""
        return self._by_name.get(version)

    def names(self) -> Iterator[str]:
        """Every name a job may give a version by: the full ones and the short forms."""
        return iter(self._by_name)

    def summary(self) -> str:
        """The short forms (or full versions) for error messages, oldest first."""
        return ", ".join(known.short or known.version for known in self.versions)


def _table(framework: str, text: str) -> FrameworkVersions:
    rows = []
    for line in text.strip().splitlines():
        version, *rest = line.split()
        py_versions = tuple(word for word in rest if _PY_VERSION.fullmatch(word))
        short, *more = rest[len(py_versions) :]
        repositories = tuple(word for word in more if _REPOSITORY.fullmatch(word))
        release = more[len(repositories)] if len(more) > len(repositories) else None
        rows.append(
            KnownVersion(
                version,
                py_versions,
                None if short == "-" else short,
                repositories,
                release,
            )
        )
    return FrameworkVersions(framework, tuple(rows))


SAGEMAKER_VERSIONS: Mapping[str, FrameworkVersions] = {
    "pytorch": _table("pytorch", _PYTORCH),
    "tensorflow": _table("tensorflow", _TENSORFLOW),
    "sklearn": _table("sklearn", _SKLEARN),
}


def known(framework: str, version: str) -> KnownVersion | None:
    """The SageMaker training image version ``version`` names for ``framework``, if any."""
    table = SAGEMAKER_VERSIONS.get(framework)
    return table.find(version) if table is not None else None
