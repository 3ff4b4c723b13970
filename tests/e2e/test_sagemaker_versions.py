"""Runyard's table of SageMaker's training image versions (contract.framework_versions) is
the SageMaker Python SDK's own: the versions, their short forms, Python versions and
repositories in the SDK's ``image_uri_config``; and every image name the SDK's
``image_uris.retrieve`` gives for training is chosen by the catalog, not refused.

The SDK lives in a virtual environment of its own (tests/e2e/sdk_venvs.py), as the server
has none of it."""

from __future__ import annotations

import json
import subprocess
import textwrap
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from contract.framework_versions import SAGEMAKER_VERSIONS, known
from contract.images import Catalog, ImageError
from tests.e2e.sdk_venvs import sdk_python

pytestmark = pytest.mark.e2e

FRAMEWORKS = ("pytorch", "tensorflow", "sklearn")
# What retrieve() is asked for: every version, by its full and its short form, with every
# Python the SDK lists for it, for a CPU and a GPU type (scikit-learn: CPU alone).
RETRIEVE = """
import json, sys
from sagemaker import image_uris
from sagemaker.image_uris import config_for_framework

found, failed = [], []
for framework in ("pytorch", "tensorflow", "sklearn"):
    training = config_for_framework(framework)["training"]
    short = {v: k for k, v in (training.get("version_aliases") or {}).items()}
    for version, entry in training["versions"].items():
        pys = entry.get("py_versions") or sorted(k for k in entry if k.startswith("py"))
        types = ["ml.m5.xlarge"] + (["ml.p3.2xlarge"] if framework != "sklearn" else [])
        for name in [version] + ([short[version]] if version in short else []):
            for py in pys:
                for instance_type in types:
                    try:
                        uri = image_uris.retrieve(
                            framework, region="us-west-2", version=name, py_version=py,
                            instance_type=instance_type, image_scope="training",
                        )
                    except Exception as exc:
                        failed.append([framework, name, py, instance_type, repr(exc)[:200]])
                    else:
                        found.append([framework, name, py, uri])
print(json.dumps({"found": found, "failed": failed}))
"""


def _sdk(code: str) -> str:
    done = subprocess.run(
        [str(sdk_python("v2")), "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # The SDK says where it looked for its own configuration first.
    return done.stdout.strip().splitlines()[-1]


@cache
def _config(name: str) -> dict[str, Any]:
    """The SDK's image_uri_config/<name>.json, as the SDK installed it."""
    where = _sdk(
        "import os, sagemaker; "
        "print(os.path.join(os.path.dirname(sagemaker.__file__), 'image_uri_config'))"
    )
    loaded: dict[str, Any] = json.loads((Path(where) / f"{name}.json").read_text())
    return loaded


def _sdk_rows(framework: str) -> dict[str, tuple[set[str], str | None, set[str]]]:
    """version -> (Python versions, short form, repositories), as the SDK lists them."""
    training = _config(framework)["training"]
    short = {full: alias for alias, full in (training.get("version_aliases") or {}).items()}
    rows = {}
    for version, entry in training["versions"].items():
        per_python = {key: value for key, value in entry.items() if key.startswith("py")}
        if "py_versions" in entry:
            pythons, repositories = set(entry["py_versions"]), {entry["repository"]}
        else:  # one entry per Python, each with its own repository
            pythons = set(per_python)
            repositories = {value["repository"] for value in per_python.values()}
        rows[version] = (pythons, short.get(version), repositories)
    return rows


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_table_holds_the_sdks_versions_short_forms_pythons_and_repositories(
    framework: str,
) -> None:
    ours = {
        row.version: (set(row.py_versions), row.short, set(row.repositories))
        for row in SAGEMAKER_VERSIONS[framework].versions
    }
    assert ours == _sdk_rows(framework)


def test_hugging_faces_training_images_name_versions_of_the_table() -> None:
    training = _config("huggingface")["training"]
    named = 0
    for transformers, entry in training["versions"].items():
        for key in entry:
            for framework in ("pytorch", "tensorflow"):
                if not key.startswith(framework) or key == "version_aliases":
                    continue
                version = key.removeprefix(framework)
                found = known(framework, version)
                assert found is not None, (transformers, key)
                assert found.version == version
                named += 1
    assert named > 20


def test_every_training_image_the_sdk_retrieves_is_chosen() -> None:
    answer = json.loads(_sdk(RETRIEVE))
    found, failed = answer["found"], answer["failed"]
    # The SDK itself refuses a few combinations its tables list (a GPU image of a
    # version only built for CPUs, say): those are not names a notebook can hold.
    assert len(found) > 10 * len(failed), failed
    catalog = Catalog()
    refused = []
    for framework, version, py_version, uri in found:
        try:
            by_name = catalog.choose(
                framework=framework, framework_version=None, py_version=None, image_uri=uri
            )
            # As the SDK's estimators send them over the REST API: framework, version, py.
            by_version = catalog.choose(
                framework=framework,
                framework_version=version,
                py_version=py_version,
                image_uri=None,
            )
        except ImageError as exc:
            refused.append((uri, exc.field, str(exc)[:200]))
            continue
        image = catalog.get(by_name.image)
        assert image is not None
        assert image.framework == framework
        assert by_version.image.replace("-gpu-", "-cpu-") == by_name.image.replace("-gpu-", "-cpu-")
    assert refused == []
