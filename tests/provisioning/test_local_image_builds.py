"""What a build of the local backend's store makes, with real pip and real virtual
environments from directories of small wheels: the framework must import, and a tried
package (torchvision) is kept only where a build of it fits what is installed and works,
else removed again, the image's record saying why.

The wheels stand in for torch and torchvision: what is under test is the build's try,
check and removal, with the check the PyTorch images really run (image_recipes)."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from contract.image_recipes import TRIED, VERIFY
from contract.images import Image, StoredImage
from provisioning.local.images import ImageBuildError, ImageStore
from tests.wheels import make_wheel, offline

TORCH = """\
__version__ = "2.13.0+cpu"
def zeros(shape):
    return [0] * (shape if isinstance(shape, int) else shape[0])
"""
VISION = """\
import types
def _nms(boxes, scores, threshold):
    return [0]
ops = types.SimpleNamespace(nms=_nms)
"""
# As PyPI's torchvision beside a CPU torch of the same version: it imports, and its first
# operator is missing.
VISION_OF_ANOTHER_TORCH = """\
import types
def _nms(boxes, scores, threshold):
    raise RuntimeError("operator torchvision::nms does not exist")
ops = types.SimpleNamespace(nms=_nms)
"""


def _image(**changes: object) -> Image:
    fields: dict[str, object] = {
        "framework": "pytorch",
        "framework_version": "2.13.0",
        "python": "3.11",
        "packages": ("torch==2.13.0",),
        "tried": TRIED["pytorch"],
        "verify": VERIFY["pytorch"],
        **changes,
    }
    return Image(**fields)  # type: ignore[arg-type]


def _build(
    tmp_path: Path, wheels: Path, image: Image, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    for name, value in offline(wheels).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PIP_CONSTRAINT", "/dev/null")  # not the machine's own
    out = io.StringIO()
    stored = ImageStore(tmp_path / "images").build(image, out)
    record: dict[str, Any] = json.loads(stored.marker.read_text())
    record["output"] = out.getvalue()
    return record


def _installed(stored: StoredImage) -> dict[str, str]:
    listed = subprocess.run(
        [str(stored.python), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {entry["name"]: entry["version"] for entry in json.loads(listed)}


def test_a_torchvision_that_fits_and_works_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "torch", "2.13.0", TORCH)
    make_wheel(wheels, "torchvision", "0.28.0", VISION, requires=("torch==2.13.0",))
    image = _image()
    record = _build(tmp_path, wheels, image, monkeypatch)
    assert record["tried"] == ["torchvision"]
    assert record["left_out"] == {}
    assert "torchvision==0.28.0" in record["freeze"]
    assert "Kept torchvision" in record["output"]


def test_a_torchvision_built_for_another_torch_is_tried_and_removed_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "torch", "2.13.0", TORCH)
    # The newest needs another torch (it does not fit); the one that fits does not work.
    make_wheel(wheels, "torchvision", "0.29.0", VISION, requires=("torch==2.14.1",))
    make_wheel(wheels, "torchvision", "0.28.0", VISION_OF_ANOTHER_TORCH, requires=("torch",))
    image = _image()
    record = _build(tmp_path, wheels, image, monkeypatch)
    assert record["left_out"] == {
        "torchvision": "the build pip found does not work beside the image's: RuntimeError: "
        "operator torchvision::nms does not exist"
    }
    installed = _installed(StoredImage(tmp_path / "images", image.digest))
    assert "torchvision" not in installed
    assert installed["torch"] == "2.13.0"
    assert "The image goes without torchvision: " in record["output"]


def test_a_torchvision_of_no_fitting_build_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "torch", "2.13.0", TORCH)
    make_wheel(wheels, "torchvision", "0.29.0", VISION, requires=("torch==2.14.1",))
    image = _image()
    record = _build(tmp_path, wheels, image, monkeypatch)
    (why,) = record["left_out"].values()
    assert why.startswith("no build of it fits what the image holds (")
    assert "torch" in why
    assert _installed(StoredImage(tmp_path / "images", image.digest))["torch"] == "2.13.0"


def test_an_image_whose_framework_does_not_import_fails_to_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "torch", "2.13.0", "raise ImportError('built against NumPy 1.x')\n")
    with pytest.raises(ImageBuildError) as caught:
        _build(tmp_path, wheels, _image(), monkeypatch)
    assert str(caught.value) == (
        "pytorch does not import in the image: ImportError: built against NumPy 1.x"
    )
    assert not StoredImage(tmp_path / "images", _image().digest).is_built()
