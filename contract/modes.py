"""Distribution modes: one record each, holding what every part must know of the mode.

A job's ``distribution`` dict enables a mode by its dotted name (``{"smdistributed":
{"dataparallel": {"enabled": true}}}`` is ``smdistributed.dataparallel``). The API checks
a job with the record of each mode it enables (``problems``); the runtime starts the
mode's processes with the launcher the record names; the reconciler reads the job's
result as that launcher implies (under mpirun, the first instance's result is the job's).

Adding a mode takes one record in ``MODES``, which registers it: its dotted name, its
launcher, the options it takes beside ``enabled`` (``Options``: the API's ``Distribution``
schema is built from the records, so its key appears there), the hyperparameters SageMaker's
SDK names it and its options by (``SageMakerFlags``: ``contract.sagemaker_flags`` reads and
writes them from the records), and where it needs them, a ``check`` of its options and the
``hyperparameters`` it hands the script. Only a mode that starts its processes in a way no
launcher does yet also needs a ``Launcher`` member here and its launcher in
``runtime.launch`` (``LAUNCHERS``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from contract import modelparallel, mpi_options
from contract.problems import Problem


class Launcher(StrEnum):
    """How an instance starts a mode's processes (``runtime.launch`` has one of each)."""

    # The entry point, once per instance.
    SCRIPT = "script"
    # torchrun-style: one ranked process per GPU (or one) on every instance.
    TORCHRUN = "torchrun"
    # Open MPI's mpirun on the first instance starts every rank; the others wait for it.
    MPIRUN = "mpirun"
    # Parameter servers beside the workers (TensorFlow's ps tasks, or Runyard's for PyTorch).
    PARAMETER_SERVER = "parameter_server"
    # TF_CONFIG naming every instance a worker, the entry point once per instance.
    TF_MULTI_WORKER = "tf_multi_worker"


@dataclass(frozen=True)
class Option:
    """One key a mode takes beside ``enabled``: its type (``dict``: a map of any values,
    empty by default), its default, and for a whole number, its bounds."""

    kind: type[int] | type[str] | type[dict[str, Any]]
    default: int | str | None = None
    minimum: int | None = None
    maximum: int | None = None


@dataclass(frozen=True)
class Options:
    """What a mode takes beside ``enabled``, in the order the API's schema lists them,
    and the name that schema gives them (clients generated from it know them by it)."""

    title: str
    keys: Mapping[str, Option]


@dataclass(frozen=True)
class SageMakerFlags:
    """The hyperparameters SageMaker's SDK writes for a mode, from which SageMaker's
    containers choose their launcher: the flag that enables it, and the hyperparameter of
    each option it carries there, by the option's key.

    A mode without a flag of its own (``enabled`` None) runs under another (``runs_under``)
    and is named by its options' hyperparameters, each a map, beside that mode's flag:
    ``mp_parameters`` beside ``sagemaker_mpi_enabled``."""

    enabled: str | None
    options: Mapping[str, str] = field(default_factory=dict)


# mpirun's own options, for the modes whose launcher is mpirun and that SageMaker lets
# pass them; only those ``contract.mpi_options`` allows.
_CUSTOM_MPI_OPTIONS = Option(str, "")


@dataclass(frozen=True)
class Mode:
    # The dotted path of its options in ``distribution``.
    name: str
    # None: a mode of SageMaker's that this server does not run yet (refused at submission).
    launcher: Launcher | None
    # The only framework whose scripts it runs; None: any.
    framework: str | None = None
    # The packages its scripts import that Runyard offers under another project's name
    # (SageMaker's ``smdistributed``, Horovod's ``horovod``): only these jobs' processes
    # can import them.
    libraries: tuple[str, ...] = ()
    # The mode whose launcher runs it, enabled beside it as SageMaker asks
    # (``smdistributed.modelparallel`` under ``mpi``): its launch options are that mode's.
    runs_under: str | None = None
    # What it takes beside ``enabled``; None: nothing else.
    takes: Options | None = None
    # What else its options must satisfy, on a job of this many processes.
    check: Callable[[Mapping[str, Any], int, tuple[str, ...]], list[Problem]] | None = None
    # What it hands the script as hyperparameters, from its options, beside the job's own
    # (which win where a name is the same).
    hyperparameters: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
    # How SageMaker's SDK names it in a job's hyperparameters; None: it does not.
    sagemaker_flags: SageMakerFlags | None = None

    @property
    def uses_mpi(self) -> bool:
        return self.launcher == Launcher.MPIRUN

    @functools.cached_property
    def path(self) -> tuple[str, ...]:
        """Where its options are in ``distribution``."""
        return tuple(self.name.split("."))

    @property
    def loc(self) -> tuple[str, ...]:
        return ("distribution", *self.path)

    def options(self, distribution: Mapping[str, Any]) -> dict[str, Any]:
        """The mode's options in a ``distribution`` dict; {} where it has none."""
        # Every job's spec is read through this several times (each mode asked whether it
        # is enabled), and a dict, as JSON gives, is checked first: Mapping's own check
        # took most of a create's time here.
        section: Any = distribution
        for part in self.path:
            section = section.get(part) if _is_mapping(section) else None
        return dict(section) if _is_mapping(section) else {}

    def launch_options(self, distribution: Mapping[str, Any]) -> dict[str, Any]:
        """The options its launcher reads: those of the mode it runs under, then its own."""
        under = by_name(self.runs_under).options(distribution) if self.runs_under else {}
        return {**under, **self.options(distribution)}

    def enabled(self, distribution: Mapping[str, Any]) -> bool:
        return bool(self.options(distribution).get("enabled"))

    def problems(
        self, distribution: Mapping[str, Any], framework: str, *, instance_count: int, gpus: int
    ) -> list[Problem]:
        """Why a job cannot run under this mode, in the order a person would fix them:
        what the spec says of itself, then what this server can run."""
        found = []
        options = self.options(distribution)
        if self.framework is not None and framework != self.framework:
            message = f"{self.name} runs {self.framework} scripts, and this job's framework is "
            found.append(Problem(self.loc, message + framework))
        if self.runs_under is not None and not by_name(self.runs_under).enabled(distribution):
            under = by_name(self.runs_under)
            message = (
                f"{self.name} runs under {under.name}, as in SageMaker: enable {under.name} too"
            )
            found.append(Problem(under.loc, message))
            return found
        custom = options.get("custom_mpi_options")
        if custom is not None:
            found += mpi_options.problems(str(custom), (*self.loc, "custom_mpi_options"))
        if self.launcher is None:
            found.append(Problem(self.loc, f"{self.name} is not supported by this server yet"))
        if self.check is not None and not found:
            per_host = processes_per_host(self.launch_options(distribution), gpus)
            found += self.check(options, instance_count * per_host, self.loc)
        return found


def _is_mapping(value: Any) -> bool:
    return type(value) is dict or isinstance(value, Mapping)


def _model_parallel_problems(
    options: Mapping[str, Any], processes: int, loc: tuple[str, ...]
) -> list[Problem]:
    return modelparallel.problems(
        options.get("parameters", {}), processes, (*loc, "parameters"), final=False
    )


def _model_parallel_hyperparameters(options: Mapping[str, Any]) -> dict[str, Any]:
    # As SageMaker's SDK sends them: the script reads them as ``mp_parameters``.
    return {modelparallel.HYPERPARAMETER: options.get("parameters", {})}


# In the order the API's schema lists their keys; a job enables one, or one and the mode
# it runs under.
MODES = (
    Mode(
        "torch_distributed",
        Launcher.TORCHRUN,
        framework="pytorch",
        sagemaker_flags=SageMakerFlags("sagemaker_torch_distributed_enabled"),
    ),
    Mode(
        "pytorchddp",
        Launcher.MPIRUN,
        framework="pytorch",
        sagemaker_flags=SageMakerFlags("sagemaker_pytorch_ddp_enabled"),
    ),
    Mode(
        "mpi",
        Launcher.MPIRUN,
        # Horovod scripts run under plain ``mpi`` on SageMaker.
        libraries=("horovod",),
        takes=Options(
            "MpiDistribution",
            {
                "processes_per_host": Option(int, minimum=1, maximum=64),
                "custom_mpi_options": _CUSTOM_MPI_OPTIONS,
            },
        ),
        sagemaker_flags=SageMakerFlags(
            "sagemaker_mpi_enabled",
            {
                "processes_per_host": "sagemaker_mpi_num_of_processes_per_host",
                "custom_mpi_options": "sagemaker_mpi_custom_mpi_options",
            },
        ),
    ),
    Mode(
        "parameter_server",
        Launcher.PARAMETER_SERVER,
        sagemaker_flags=SageMakerFlags("sagemaker_parameter_server_enabled"),
    ),
    Mode(
        "smdistributed.dataparallel",
        Launcher.MPIRUN,
        framework="pytorch",
        libraries=("smdistributed",),
        takes=Options("DataParallelDistribution", {"custom_mpi_options": _CUSTOM_MPI_OPTIONS}),
        sagemaker_flags=SageMakerFlags(
            "sagemaker_distributed_dataparallel_enabled",
            {"custom_mpi_options": "sagemaker_distributed_dataparallel_custom_mpi_options"},
        ),
    ),
    Mode(
        "smdistributed.modelparallel",
        Launcher.MPIRUN,
        framework="pytorch",
        libraries=("smdistributed",),
        runs_under="mpi",
        # Any map to the schema: ``check`` holds it to the parameters Runyard's library runs.
        takes=Options("ModelParallelDistribution", {"parameters": Option(dict)}),
        check=_model_parallel_problems,
        hyperparameters=_model_parallel_hyperparameters,
        # No flag: the SDK sends the parameters beside the mpi flag.
        sagemaker_flags=SageMakerFlags(None, {"parameters": modelparallel.HYPERPARAMETER}),
    ),
    Mode(
        "multi_worker_mirrored_strategy",
        Launcher.TF_MULTI_WORKER,
        framework="tensorflow",
        sagemaker_flags=SageMakerFlags("sagemaker_multi_worker_mirrored_strategy_enabled"),
    ),
)


def by_name(name: str) -> Mode:
    return next(mode for mode in MODES if mode.name == name)


def enabled_modes(distribution: Mapping[str, Any]) -> list[Mode]:
    if not distribution:  # most jobs name none: spares asking every mode, twice a create
        return []
    return [mode for mode in MODES if mode.enabled(distribution)]


def enabled_mode(distribution: Mapping[str, Any]) -> Mode | None:
    """The mode a job runs under, or None: the one enabled, or of two, the one that runs
    under the other (the API refuses any other pair)."""
    enabled = enabled_modes(distribution)
    return next((mode for mode in enabled if mode.runs_under), next(iter(enabled), None))


def too_many(distribution: Mapping[str, Any]) -> list[str]:
    """The modes enabled beyond the one a job may run under ([] where that holds); a mode
    enabled only for another to run under it does not count."""
    enabled = enabled_modes(distribution)
    carriers = {mode.runs_under for mode in enabled if mode.runs_under}
    alone = [mode.name for mode in enabled if mode.name not in carriers]
    return alone if len(alone) > 1 else []


def problems(
    distribution: Mapping[str, Any], framework: str, *, instance_count: int, gpus: int
) -> list[Problem]:
    return [
        problem
        for mode in enabled_modes(distribution)
        for problem in mode.problems(
            distribution, framework, instance_count=instance_count, gpus=gpus
        )
    ]


def hyperparameters(distribution: Mapping[str, Any]) -> dict[str, Any]:
    """What the modes a job enables hand its script as hyperparameters, beside its own."""
    found: dict[str, Any] = {}
    for mode in enabled_modes(distribution):
        if mode.hyperparameters is not None:
            found.update(mode.hyperparameters(mode.options(distribution)))
    return found


def processes_per_host(options: Mapping[str, Any], gpus: int) -> int:
    """How many processes mpirun starts on each instance: as configured (only ``mpi``
    offers the option), else one per GPU, else one."""
    given = options.get("processes_per_host")
    return int(given) if given else max(gpus, 1)
