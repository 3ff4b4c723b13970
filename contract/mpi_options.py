"""``custom_mpi_options``: the mpirun options a job may add to Runyard's own, as an allow-list.

The launch is Runyard's: which hosts, how many processes, how mpirun reaches the other
instances, which program each rank runs, what files mpirun reads or writes, what code a
rank loads before the script. The job may tune what happens inside that launch: how the
ranks talk (MCA parameters of the communication frameworks), where each host's processes
sit on its CPUs, extra variables for the ranks, and how much mpirun says.

Allowed, each option and its values as separate words (``--mca=btl`` is refused):

- ``-verbose`` / ``--verbose``, ``--report-bindings`` / ``-report-bindings``,
  ``--display-map`` / ``-display-map``: diagnostics only.
- ``--bind-to <object>[:overload-allowed|:if-supported]`` and ``--map-by
  <object>[:PE=<n>|:OVERSUBSCRIBE|:NOOVERSUBSCRIBE]``, where the object is one inside a
  host (slot, hwthread, core, a cache level, numa, package, socket): each host keeps its
  own processes, in order. ``node``, ``ppr``, ``seq``, ``rankfile``, ``dist`` and
  ``span`` would move processes between hosts or change how many run on each.
- ``--mca`` / ``-mca <param> <value>`` for the communication frameworks: ``btl``, ``pml``,
  ``coll``, ``osc``, ``mtl`` (component lists, ``^`` to exclude) and their ``<name>_*``
  parameters, and ``mpi_*``; never a parameter that names a file, directory or output
  stream (``*file*``, ``*dir*``, ``*output*``, ``*dump*``, ``*path*``).
- ``-x NAME`` / ``-x NAME=value`` for ordinary variables: not ``RUNYARD_*``, not the
  loader's or Python's search paths (``LD_*``, ``PATH``, ``PYTHONPATH``, ...), not Open
  MPI's own (``OMPI_*``, ``PRTE_*``, ``PMIX_*``, ``OPAL_*``, ``ORTE_*``) except an
  ``*_MCA_<param>`` whose parameter ``--mca`` allows.

Values use letters, digits and ``_.,:/=+@%^-`` only: MCA values reach a shell on every
instance (on the daemon's command line, through the launch agent). The API checks a job's
options with ``problems``; the runtime parses them again with ``parse`` before it builds
mpirun's command, so a spec stored before a rule changed cannot launch around it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from contract import variables
from contract.problems import Problem

# What mpirun hands a shell: nothing here is special to one.
_SAFE_VALUE = re.compile(r"[A-Za-z0-9_.,:/=+@%^-]*")
_NEGATIVE_NUMBER = re.compile(r"-[0-9]+")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MCA_PARAM = re.compile(r"[a-z][a-z0-9_]*")

# MCA frameworks of the MPI layer whose parameters tune communication: the framework's
# own name selects its components, ``<framework>_*`` tunes them.
MCA_FRAMEWORKS = ("btl", "pml", "coll", "osc", "mtl")
# Parameters of the MPI layer itself (mpi_warn_on_fork, mpi_leave_pinned, ...).
_MCA_PREFIXES = (*(f"{name}_" for name in MCA_FRAMEWORKS), "mpi_")
# Parts of a parameter's name that mean it points at the file system (coll_tuned's rules
# file, the shared-memory backing directory, pml_monitoring's output file).
_MCA_NAME_REFUSED = ("file", "dir", "output", "dump", "path")

# Objects inside one host that processes may be mapped or bound to.
_HOST_OBJECTS = "hwthread|core|l1cache|l2cache|l3cache|numa|package|socket"
_BIND_TO = re.compile(rf"(none|{_HOST_OBJECTS})(:(overload-allowed|if-supported))*")
_MAP_BY = re.compile(
    rf"(slot|{_HOST_OBJECTS})(:(PE=[1-9][0-9]{{0,2}}|OVERSUBSCRIBE|NOOVERSUBSCRIBE))*"
)

# Variables that decide what code a process loads before the script runs; Runyard forwards
# its own values (the code, the compatibility package, Open MPI's libraries), which a
# ``-x NAME=value`` would replace in every rank.
_LOADER_PREFIXES = ("LD_",)
_LOADER_NAMES = frozenset(
    {
        "PATH",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PYTHONUSERBASE",
        "PYTHONPLATLIBDIR",
        "PYTHONEXECUTABLE",
    }
)
# Where Open MPI (and PRRTE, PMIx, OPAL underneath it) reads its own configuration.
_OPEN_MPI_PREFIXES = ("OMPI_", "PRTE_", "PRRTE_", "PMIX_", "OPAL_", "ORTE_")
_MCA_VARIABLE = re.compile(r"(OMPI|PRTE|PRRTE|PMIX|OPAL)_MCA_(.*)")


class MpiOptionError(ValueError):
    """A word of ``custom_mpi_options`` that may not be there; ``token`` is that word."""

    def __init__(self, token: str, reason: str) -> None:
        super().__init__(f"{token!r}: {reason}")
        self.token = token


@dataclass(frozen=True)
class Argument:
    """One allowed option with its values, as given (``words``) and as Runyard reads it."""

    option: str  # the canonical spelling: --verbose, --bind-to, --map-by, --mca, -x, ...
    words: tuple[str, ...]

    @property
    def values(self) -> tuple[str, ...]:
        return self.words[1:]

    @property
    def mca_param(self) -> str | None:
        return self.values[0] if self.option == "--mca" else None

    @property
    def variable(self) -> str | None:
        return self.values[0].split("=", 1)[0] if self.option == "-x" else None


@dataclass(frozen=True)
class _Spec:
    canonical: str
    arity: int


_OPTIONS = {
    "-verbose": _Spec("--verbose", 0),
    "--verbose": _Spec("--verbose", 0),
    "--report-bindings": _Spec("--report-bindings", 0),
    "-report-bindings": _Spec("--report-bindings", 0),
    "--display-map": _Spec("--display-map", 0),
    "-display-map": _Spec("--display-map", 0),
    # Single-dash -bind-to and -map-by are not read as options by Open MPI 5's mpirun.
    "--bind-to": _Spec("--bind-to", 1),
    "--map-by": _Spec("--map-by", 1),
    "--mca": _Spec("--mca", 2),
    "-mca": _Spec("--mca", 2),
    "-x": _Spec("-x", 1),
}

# Why some options people reach for are refused (the rest: not on the list).
_SET_BY_RUNYARD = "Runyard sets it from the job (instance_count, processes_per_host)"
_REFUSED_BECAUSE = {
    **dict.fromkeys(
        ("-np", "-n", "--np", "-N", "--n", "-c", "--npernode", "-npernode", "--npersocket"),
        _SET_BY_RUNYARD,
    ),
    **dict.fromkeys(
        ("-H", "-host", "--host", "--hosts", "-hostfile", "--hostfile", "-machinefile"),
        _SET_BY_RUNYARD,
    ),
    **dict.fromkeys(
        ("--machinefile", "--default-hostfile", "--add-host", "--add-hostfile"), _SET_BY_RUNYARD
    ),
    **dict.fromkeys(
        ("--launch-agent", "-launch-agent", "--prefix", "-prefix", "--prtemca", "--pmixmca"),
        "how mpirun reaches and starts the instances is Runyard's",
    ),
    **dict.fromkeys(("--gmca", "-gmca"), "use --mca, whose parameters are checked"),
    **dict.fromkeys(
        ("--app", "-app", "--tune", "-tune", "--output-filename", "-output-filename"),
        "mpirun would read or write files of the instance",
    ),
    **dict.fromkeys(("--output", "--wdir", "-wdir", "--path"), "Runyard sets where ranks run"),
}


def parse(options: str) -> list[Argument]:
    """The allowed options in ``options``, in order; raises ``MpiOptionError`` naming the
    first word that is not allowed."""
    try:
        words = shlex.split(options)
    except ValueError as exc:
        raise MpiOptionError(options, f"cannot be split into words: {exc}") from exc
    found: list[Argument] = []
    index = 0
    while index < len(words):
        word = words[index]
        spec = _OPTIONS.get(word)
        if spec is None:
            raise MpiOptionError(word, _why_not(word))
        values = words[index + 1 : index + 1 + spec.arity]
        if len(values) < spec.arity:
            raise MpiOptionError(word, f"takes {spec.arity} value(s) after it")
        argument = Argument(spec.canonical, (word, *values))
        _check_values(argument)
        found.append(argument)
        index += 1 + spec.arity
    return found


def problems(options: str, loc: tuple[str, ...]) -> list[Problem]:
    """What in ``custom_mpi_options`` may not be there (the first word found)."""
    try:
        parse(options)
    except MpiOptionError as exc:
        return [Problem(loc, str(exc))]
    return []


def mca_param_problem(param: str) -> str | None:
    """Why ``param`` may not be set with --mca (or its variable), or None."""
    if not _MCA_PARAM.fullmatch(param):
        return "not an MCA parameter name"
    if param not in MCA_FRAMEWORKS and not param.startswith(_MCA_PREFIXES):
        families = ", ".join((*MCA_FRAMEWORKS, *(f"{p}*" for p in _MCA_PREFIXES)))
        return f"only the communication frameworks' parameters may be set ({families})"
    if any(part in param for part in _MCA_NAME_REFUSED):
        return "names a file, directory or output stream of the instance"
    return None


def open_mpi_variable_problem(name: str) -> str | None:
    """Why a variable of Open MPI's own may not be set for a job, or None (also for a
    variable that is not Open MPI's): ``*_MCA_<param>`` as ``--mca`` allows, no other."""
    upper = name.upper()
    mca = _MCA_VARIABLE.fullmatch(upper)
    if mca is not None:
        param = name[len(upper) - len(mca.group(2)) :]
        problem = mca_param_problem(param)
        return None if problem is None else f"MCA parameter {param!r}: {problem}"
    if upper.startswith(_OPEN_MPI_PREFIXES):
        return "configures Open MPI's launch, which is Runyard's"
    return None


def variable_problem(name: str) -> str | None:
    """Why ``-x`` may not set or forward ``name``, or None."""
    if not _VARIABLE.fullmatch(name):
        return "not a variable name"
    if name.startswith(variables.RESERVED_PREFIX):
        return f"names starting with {variables.RESERVED_PREFIX} are Runyard's"
    if name.startswith(_LOADER_PREFIXES) or name in _LOADER_NAMES:
        return "decides which code a rank loads; Runyard forwards its own value"
    return open_mpi_variable_problem(name)


def _check_values(argument: Argument) -> None:
    option = argument.option
    if option == "--bind-to" and not _BIND_TO.fullmatch(argument.values[0]):
        raise MpiOptionError(
            argument.values[0], "--bind-to takes none or an object of one host (core, ...)"
        )
    if option == "--map-by" and not _MAP_BY.fullmatch(argument.values[0]):
        raise MpiOptionError(
            argument.values[0],
            "--map-by takes an object of one host (slot, core, ...): each host keeps its "
            "own processes",
        )
    if option == "--mca":
        param, value = argument.values
        if (problem := mca_param_problem(param)) is not None:
            raise MpiOptionError(param, problem)
        _check_value(value)
    if option == "-x":
        name, has_value, value = argument.values[0].partition("=")
        if (problem := variable_problem(name)) is not None:
            raise MpiOptionError(argument.values[0], problem)
        if has_value:
            _check_value(value, argument.values[0])


def _check_value(value: str, word: str | None = None) -> None:
    if value.startswith("-") and not _NEGATIVE_NUMBER.fullmatch(value):
        raise MpiOptionError(word or value, "a value may not start with '-'")
    if not _SAFE_VALUE.fullmatch(value):
        raise MpiOptionError(word or value, "values may hold letters, digits and _.,:/=+@%^- only")


def _why_not(word: str) -> str:
    option, attached, _ = word.partition("=")
    if attached and option in _OPTIONS:
        return f"give {option}'s value as a word of its own"
    if word in _REFUSED_BECAUSE:
        return f"not allowed: {_REFUSED_BECAUSE[word]}"
    if not word.startswith("-"):
        return "not an option (mpirun would take it for the program to run)"
    allowed = ", ".join(dict.fromkeys(spec.canonical for spec in _OPTIONS.values()))
    return f"not an mpirun option a job may give (allowed: {allowed})"
