# ruff: noqa: RUF001 - pip draws its boxes with the multiplication sign, as here
"""Reading what pip said went wrong from its output: its ERROR lines, and for a build that
failed, the package, the step and the last lines the build printed, taken from the box
pip shows them in: as many lines as pip says the box holds, and not one more."""

from __future__ import annotations

import pytest

from runtime.instance.install import PipOutput

# pip 24's words for a package whose build cannot even say what it needs.
METADATA_FAILED = """\
Processing ./broken
  Preparing metadata (pyproject.toml): started
  Preparing metadata (pyproject.toml): finished with status 'error'
  error: subprocess-exited-with-error

  × Preparing metadata (pyproject.toml) did not run successfully.
  │ exit code: 1
  ╰─> [3 lines of output]
      building broken-package 1.0
      checking for a C compiler... no
      error: broken-package needs a C compiler, and there is none
      [end of output]

  note: This error originates from a subprocess, and is likely not a problem with pip.
error: metadata-generation-failed

× Encountered error while generating package metadata.
╰─> See above for output.

note: This is an issue with the package mentioned above, not pip.
hint: See above for details.
"""

# pip installing a package's build dependencies, which runs pip, which fails to build one
# of them: the outer box holds the inner pip's output, its own box and end marker within.
NESTED = """\
Processing ./outer
  Installing build dependencies: started
  Installing build dependencies: finished with status 'error'
  error: subprocess-exited-with-error

  × pip subprocess to install build dependencies did not run successfully.
  │ exit code: 1
  ╰─> [20 lines of output]
      Looking in links: /srv/wheels
      Processing ./links/inner_dep-1.0.tar.gz
        Getting requirements to build wheel: started
        Getting requirements to build wheel: finished with status 'error'
        error: subprocess-exited-with-error

        × Getting requirements to build wheel did not run successfully.
        │ exit code: 1
        ╰─> [1 lines of output]
            inner-dep needs a C compiler, and there is none
            [end of output]

        note: This error originates from a subprocess, and is likely not a problem with pip.
      error: subprocess-exited-with-error

      × Getting requirements to build wheel did not run successfully.
      │ exit code: 1
      ╰─> See above for output.

      note: This error originates from a subprocess, and is likely not a problem with pip.
      [end of output]

  note: This error originates from a subprocess, and is likely not a problem with pip.
error: subprocess-exited-with-error

× pip subprocess to install build dependencies did not run successfully.
│ exit code: 1
╰─> See above for output.

note: This error originates from a subprocess, and is likely not a problem with pip.
"""

# The box ends after the two lines pip announced, though no end marker follows (a pip
# that words it otherwise, or a build's line that pip read as one and a reader as two):
# what follows is pip's own again.
UNMARKED = """\
Processing ./broken
  × Building wheel for broken (pyproject.toml) did not run successfully.
  │ exit code: 1
  ╰─> [2 lines of output]
      building broken-package 1.0
      error: broken-package needs a C compiler, and there is none
  note: This error originates from a subprocess, and is likely not a problem with pip.
  Building wheel for broken (pyproject.toml): finished with status 'error'
Failed to build broken
ERROR: Could not build wheels for broken, which is required to install pyproject.toml-based projects
"""

# The build's last line had no line end: pip's end marker follows it on that line.
GLUED = """\
Processing ./broken
  × Getting requirements to build wheel did not run successfully.
  │ exit code: 1
  ╰─> [2 lines of output]
      building broken-package 1.0
      error: no C compiler[end of output]

  note: This error originates from a subprocess, and is likely not a problem with pip.
ERROR: Failed to build installable wheels for some pyproject.toml based projects (broken)
"""

_SUMMARIES = {
    "metadata": (
        METADATA_FAILED,
        "./broken: Preparing metadata (pyproject.toml) did not run successfully (exit code: 1): "
        "building broken-package 1.0 / checking for a C compiler... no / error: "
        "broken-package needs a C compiler, and there is none",
    ),
    "nested": (
        NESTED,
        "./outer: pip subprocess to install build dependencies did not run successfully (exit "
        "code: 1): ./links/inner_dep-1.0.tar.gz: Getting requirements to build wheel did not "
        "run successfully (exit code: 1): inner-dep needs a C compiler, and there is none",
    ),
    "unmarked": (
        UNMARKED,
        "./broken: Building wheel for broken (pyproject.toml) did not run successfully (exit "
        "code: 1): building broken-package 1.0 / error: broken-package needs a C compiler, and "
        "there is none | ERROR: Could not build wheels for broken, which is required to install "
        "pyproject.toml-based projects",
    ),
    "glued": (
        GLUED,
        "./broken: Getting requirements to build wheel did not run successfully (exit code: 1): "
        "building broken-package 1.0 / error: no C compiler | ERROR: Failed to build installable "
        "wheels for some pyproject.toml based projects (broken)",
    ),
}


@pytest.mark.parametrize("case", list(_SUMMARIES))
def test_a_builds_output_is_what_pip_boxed_and_pip_goes_on_after_it(case: str) -> None:
    output, summary = _SUMMARIES[case]
    said = PipOutput()
    for line in output.splitlines():
        said.add(line)
    assert said.summary() == summary


def test_pips_last_lines_are_the_reason_where_it_names_no_failure() -> None:
    said = PipOutput()
    for line in ["Looking in links: /srv/wheels", "Processing ./code", "Killed"]:
        said.add(line)
    assert said.summary() == "Looking in links: /srv/wheels | Processing ./code | Killed"
