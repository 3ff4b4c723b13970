"""The image catalog (contract.images) and SageMaker's versions (contract.framework_versions):
every version SageMaker has training images of is chosen, by every name it goes by, and
what is no such version is refused naming the field. (tests/e2e/test_sagemaker_versions.py
holds the table to the SageMaker SDK's own lists.)"""

from __future__ import annotations

from dataclasses import replace

import pytest

from contract.framework_versions import SAGEMAKER_VERSIONS, KnownVersion, known
from contract.image_recipes import numbers
from contract.images import DEFAULT_CATALOG, Catalog, Choice, ImageError

CATALOG = Catalog(python="3.11")
EVERY_VERSION = [
    (framework, row) for framework, table in SAGEMAKER_VERSIONS.items() for row in table.versions
]


def _choose(framework: str = "pytorch", **fields: str) -> Choice:
    return CATALOG.choose(
        framework=framework,
        framework_version=fields.get("framework_version"),
        py_version=fields.get("py_version"),
        image_uri=fields.get("image_uri"),
    )


@pytest.mark.parametrize(
    ("framework", "row"), EVERY_VERSION, ids=lambda v: getattr(v, "version", v)
)
def test_every_version_sagemaker_has_is_chosen_by_version_and_by_its_images_names(
    framework: str, row: KnownVersion
) -> None:
    by_version = _choose(framework, framework_version=row.version)
    image = CATALOG.get(by_version.image)
    assert image is not None
    # The catalog's own image of that version, or the one made of it for this Python.
    assert image.framework == framework
    assert image.framework_version == row.version
    assert image.python == "3.11"
    for py_version in row.py_versions:
        named = _choose(framework, framework_version=row.version, py_version=py_version)
        assert named.image == by_version.image
        for repository in row.repositories:
            for processor in ("cpu", "gpu"):
                tag = f"{row.version}-{processor}-{py_version}"
                uri = f"123456789012.dkr.ecr.us-west-2.amazonaws.com/{repository}:{tag}"
                by_name = _choose(framework, image_uri=uri)
                chosen = CATALOG.get(by_name.image)
                assert chosen is not None
                assert chosen.framework_version == row.version


@pytest.mark.parametrize(
    ("framework", "short", "full"),
    [
        ("pytorch", "2.1", "2.1.0"),
        ("pytorch", "2.0", "2.0.1"),
        ("pytorch", "1.13", "1.13.1"),
        ("pytorch", "1.8", "1.8.1"),
        ("tensorflow", "2.16", "2.16.2"),
        ("tensorflow", "1.15", "1.15.5"),
    ],
)
def test_the_sdks_short_forms_name_the_version_they_stand_for(
    framework: str, short: str, full: str
) -> None:
    repository = {"pytorch": "pytorch-training", "tensorflow": "tensorflow-training"}[framework]
    assert _choose(framework, framework_version=short).image == f"{repository}:{full}-cpu-py311"
    found = known(framework, short)
    assert found is not None
    assert found.version == full


def test_an_image_made_for_a_sagemaker_version_is_found_by_its_name_and_is_the_same() -> None:
    chosen = _choose(framework_version="2.1", py_version="py310")
    assert chosen == Choice(
        "pytorch-training:2.1.0-cpu-py311",
        note="py310 was asked for; the image of pytorch 2.1.0 is made for this server's "
        "Python, 3.11",
    )
    image = CATALOG.get(chosen.image)
    assert image is not None
    assert image == CATALOG.made_for("pytorch", "2.1.0")
    assert image.packages[:2] == ("torch==2.1.0", "numpy<2")
    assert image.tried == ("torchvision",)
    assert image.framework_requirement == "torch==2.1.0"
    # Names the catalog does not make: another Python, a short form, a version it lacks.
    for name in (
        "pytorch-training:2.1.0-cpu-py310",
        "pytorch-training:2.1-cpu-py311",
        "pytorch-training:2.9.0-cpu-py311",
        "sagemaker-pytorch:1.0.0-cpu-py311",
    ):
        assert CATALOG.get(name) is None, name


def test_scikit_learns_versions_are_its_images_and_hold_its_release() -> None:
    uri = "246618743249.dkr.ecr.us-west-2.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
    chosen = _choose(image_uri=uri)  # the framework comes from the name
    assert chosen.image == "sagemaker-scikit-learn:1.2-1-cpu-py311"
    assert chosen == _choose("sklearn", framework_version="1.2-1", py_version="py3")
    image = CATALOG.get(chosen.image)
    assert image is not None
    assert image.packages[:5] == ("scikit-learn==1.2.1", "numpy<2", "scipy", "pandas", "joblib")
    assert "sagemaker-training" in image.packages
    assert image.framework_requirement == "scikit-learn==1.2.1"
    # The catalog's own: the newest SageMaker has, whose scikit-learn takes NumPy 2.
    (own,) = [i for i in DEFAULT_CATALOG if i.framework == "sklearn"]
    assert own.name == "sagemaker-scikit-learn:1.4-2-cpu-py311"
    assert own.packages[:2] == ("scikit-learn==1.4.2", "numpy")
    assert _choose("sklearn", framework_version="1.4-2").image == own.name


@pytest.mark.parametrize(
    ("framework", "fields", "field", "words"),
    [
        ("pytorch", {"framework_version": "2.9"}, "framework_version", "no pytorch 2.9; it has"),
        ("pytorch", {"framework_version": "2.1.5"}, "framework_version", "has no pytorch 2.1.5"),
        ("pytorch", {"framework_version": "v2"}, "framework_version", "not a version number"),
        ("pytorch", {"framework_version": "2.1", "py_version": "python3"}, "py_version",
         "not a Python version"),
        ("sklearn", {"framework_version": "1.2"}, "framework_version", "has no sklearn 1.2;"),
        ("tensorflow", {"framework_version": "2.15"}, "framework_version",
         "has no tensorflow 2.15; it has: tensorflow 2.20.0 (py311), and SageMaker's versions"),
        ("pytorch", {"image_uri": "pytorch-training:2.1.5-cpu-py310"}, "image_uri",
         "has no pytorch 2.1.5 (py310)"),
        ("pytorch", {"image_uri": "sagemaker-scikit-learn:1.3-1-cpu-py3"}, "image_uri",
         "has no sklearn 1.3-1 (py3)"),
        ("pytorch", {"image_uri": "pytorch-training:2.1.0-cpu-py310", "framework_version": "2.0"},
         "framework_version", "disagrees with image_uri"),
    ],
)  # fmt: skip
def test_what_no_catalog_image_and_no_sagemaker_version_is_is_refused_naming_the_field(
    framework: str, fields: dict[str, str], field: str, words: str
) -> None:
    with pytest.raises(ImageError) as caught:
        _choose(framework, **fields)
    assert caught.value.field == field
    assert words in str(caught.value)


def test_the_catalogs_own_images_come_first_and_aliases_before_them() -> None:
    assert _choose(framework_version="2.13").image == "pytorch-training:2.13.0-cpu-py311"
    aliased = Catalog(aliases={"pytorch:2.1": "builtin"}, python="3.11")
    assert (
        aliased.choose(
            framework="pytorch", framework_version="2.1.0", py_version="py310", image_uri=None
        )
        == Choice()
    )
    # An alias may name an image made for a SageMaker version.
    Catalog(aliases={"team:latest": "pytorch-training:2.1.0-cpu-py311"}, python="3.11")


@pytest.mark.parametrize(
    ("asked", "stand_in"),
    [
        ("pytorch-training:1.12.1-cpu-py311", "pytorch-training:2.13.0-cpu-py311"),
        ("pytorch-training:0.4.0-cpu-py311", "pytorch-training:2.13.0-cpu-py311"),
        ("pytorch-training:2.8.0-gpu-py311", "pytorch-training:2.14.1-gpu-py311"),
        ("tensorflow-training:1.15.5-cpu-py311", "tensorflow-training:2.20.0-cpu-py311"),
        ("sagemaker-scikit-learn:0.23-1-cpu-py311", "sagemaker-scikit-learn:1.4-2-cpu-py311"),
    ],
)
def test_the_nearest_catalog_image_stands_in_for_a_version(asked: str, stand_in: str) -> None:
    image = CATALOG.get(asked)
    assert image is not None
    nearest = CATALOG.nearest(image)
    assert nearest is not None
    assert nearest.name == stand_in


def test_the_nearest_is_by_major_then_minor_version_and_the_newer_of_two() -> None:
    assert numbers("1.2-1") == (1, 2, 1)
    base = DEFAULT_CATALOG[0]
    versions = ("1.9.0", "2.0.0", "2.4.0", "2.6.0")
    catalog = Catalog(
        tuple(replace(base, framework_version=v, aliases=()) for v in versions), python="3.11"
    )
    nearest = {
        asked: getattr(catalog.nearest(catalog.made_for("pytorch", asked)), "framework_version", "")
        for asked in ("1.8.1", "2.1.0", "2.5.1", "1.13.1")
    }
    assert nearest == {"1.8.1": "1.9.0", "2.1.0": "2.0.0", "2.5.1": "2.6.0", "1.13.1": "1.9.0"}
