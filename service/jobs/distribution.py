"""Which distribution modes a job may use, and what their options may say.

Checked at submission, so a job that could never launch is refused with a reason
instead of failing on its instances.
"""

from __future__ import annotations

import re
import shlex

from runtime.launch import SUPPORTED_DISTRIBUTIONS
from service.jobs.schemas import JobCreate
from service.kit.errors import SpecError

# Which framework each mode is for; modes not listed work with both.
_FRAMEWORK_OF_MODE = {
    "torch_distributed": "pytorch",
    "pytorchddp": "pytorch",
    "smdistributed.dataparallel": "pytorch",
    "smdistributed.modelparallel": "pytorch",
    "multi_worker_mirrored_strategy": "tensorflow",
}

# mpirun options Runyard sets itself from the job: a second value would break the launch
# (hosts, process counts) or isolation (another launch agent, another install prefix).
_RESERVED_MPI_OPTIONS = (
    "-np",
    "-n",
    "--np",
    "-c",
    "-H",
    "-host",
    "--host",
    "--hosts",
    "-hostfile",
    "--hostfile",
    "-machinefile",
    "--machinefile",
    "--default-hostfile",
    "--prefix",
    "--launch-agent",
)
_RESERVED_MCA = re.compile(r"^(plm|prte_hnp|ess)")
# mpirun hands MCA values on to a shell on every instance: none of these may reach it.
_SHELL_SPECIAL = re.compile(r"[$`;|&<>\\\"'\n(){}*?!]")


def check(spec: JobCreate) -> None:
    modes = spec.distribution.enabled_modes()
    for mode in modes:
        # What the spec says of itself first, then whether this server can run it.
        loc = ("distribution", *mode.split("."))
        wanted = _FRAMEWORK_OF_MODE.get(mode)
        if wanted is not None and spec.framework != wanted:
            raise SpecError(
                loc, f"{mode} runs {wanted} scripts, and this job's framework is {spec.framework}"
            )
        options = getattr(spec.distribution.section(mode), "custom_mpi_options", None)
        if options is not None:
            check_mpi_options(options, (*loc, "custom_mpi_options"))
        if mode not in SUPPORTED_DISTRIBUTIONS:
            raise SpecError(loc, f"{mode} is not supported by this server yet")


def check_mpi_options(options: str, loc: tuple[str, ...]) -> None:
    """Raise a SpecError naming what in ``options`` may not be there."""
    try:
        tokens = shlex.split(options)
    except ValueError as exc:
        raise SpecError(loc, f"cannot be split into arguments: {exc}") from exc
    for index, token in enumerate(tokens):
        flag = token.split("=", 1)[0]
        if flag in _RESERVED_MPI_OPTIONS:
            raise SpecError(loc, f"{flag} is set by Runyard from the job and may not be given")
        if _SHELL_SPECIAL.search(token):
            raise SpecError(loc, f"{token!r}: shell special characters are not allowed")
        after_mca = index > 0 and tokens[index - 1] in ("--mca", "-mca", "--prtemca", "--pmixmca")
        if after_mca and _RESERVED_MCA.match(token):
            raise SpecError(loc, f"the MCA parameter {token} is set by Runyard")
