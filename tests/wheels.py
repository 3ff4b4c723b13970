"""Wheels made for a test, with pip from a tiny setuptools project, for installs that need
no package index: ``PIP_FIND_LINKS`` at the directory and ``PIP_NO_INDEX=1``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path


def make_wheel(
    wheels: Path, name: str, version: str, module: str, requires: tuple[str, ...] = ()
) -> Path:
    """A wheel of distribution ``name`` at ``version`` whose package ``name`` holds
    ``module`` as its ``__init__.py`` and that depends on ``requires``; returns its path."""
    project = wheels.parent / f"project-{wheels.name}-{name}-{version}"
    package = project / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(module))
    (project / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""\
            [build-system]
            requires = ["setuptools"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "{name}"
            version = "{version}"
            dependencies = {json.dumps(list(requires))}

            [tool.setuptools]
            packages = ["{name}"]
            """
        )
    )
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(wheels), str(project)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    (found,) = wheels.glob(f"{name}-{version}-*.whl")
    return found


def offline(wheels: Path) -> dict[str, str]:
    """pip's variables for installing from ``wheels`` alone."""
    return {"PIP_FIND_LINKS": str(wheels), "PIP_NO_INDEX": "1"}
