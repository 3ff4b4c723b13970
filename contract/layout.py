"""An instance's base directory, laid out as SageMaker's ``/opt/ml``.

In the training image (pods, EC2 instances) the base directory is ``/opt/ml`` itself; the
local backend gives every instance a directory of its own. A path that a job spec gives
under ``/opt/ml`` (``checkpoint_local_path``) means the same place below whichever base
directory the instance has.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

IMAGE_BASE_DIR = "/opt/ml"
# The config files, relative to the base directory.
CONFIG_DIR = "input/config"
HYPERPARAMETERS_FILE = "hyperparameters.json"
RESOURCE_CONFIG_FILE = "resourceconfig.json"
INPUT_DATA_CONFIG_FILE = "inputdataconfig.json"
RUNYARD_CONFIG_FILE = "runyard.json"
# Written only for a job with TensorBoard output, as SageMaker writes it (its
# TensorBoardOutputConfig's keys): what SageMaker Debugger's hooks read.
TENSORBOARD_CONFIG_FILE = "tensorboardoutputconfig.json"


@dataclass(frozen=True)
class Paths:
    """The base directory laid out as SageMaker's /opt/ml."""

    base: Path
    # checkpoint_local_path, where the job gives one; else checkpoints/ in the base dir.
    checkpoint_dir: Path | None = None

    @property
    def code(self) -> Path:
        return self.base / "code"

    @property
    def input(self) -> Path:
        return self.base / "input"

    @property
    def config(self) -> Path:
        return self.base / CONFIG_DIR

    @property
    def data(self) -> Path:
        return self.base / "input" / "data"

    @property
    def model(self) -> Path:
        return self.base / "model"

    @property
    def output(self) -> Path:
        return self.base / "output"

    @property
    def output_data(self) -> Path:
        return self.base / "output" / "data"

    @property
    def intermediate(self) -> Path:
        return self.base / "output" / "intermediate"

    @property
    def failure(self) -> Path:
        return self.base / "output" / "failure"

    @property
    def success(self) -> Path:
        return self.base / "output" / "success"

    @property
    def checkpoints(self) -> Path:
        return self.checkpoint_dir or self.base / "checkpoints"

    def create(self) -> None:
        for path in (
            self.code,
            self.data,
            self.model,
            self.output_data,
            self.intermediate,
            self.checkpoints,
        ):
            path.mkdir(parents=True, exist_ok=True)


def local_checkpoint_problem(local_path: str | None) -> str | None:
    """Why ``local_path`` cannot hold a local instance's checkpoints, if it cannot. It
    must be a directory right below /opt/ml (``/opt/ml/checkpoints``, as SageMaker's
    default): any other path would be the server machine's, which the instance's runtime
    writes as root; and one deeper would lie in a directory the job's user owns, which it
    could swap for a link while the runtime stores from it."""
    if local_path is None:
        return None
    path = PurePosixPath(local_path)
    if path.parent == PurePosixPath(IMAGE_BASE_DIR) and not path.name.startswith("."):
        return None
    return (
        f"on the local backend checkpoints stay in the instance, in a directory right below "
        f"{IMAGE_BASE_DIR} (as {IMAGE_BASE_DIR}/checkpoints), not {local_path}"
    )


# Where a job's TensorBoard data is written when its TensorBoardOutputConfig names no
# LocalPath, as on SageMaker.
DEFAULT_TENSORBOARD_PATH = f"{IMAGE_BASE_DIR}/output/tensorboard"


def tensorboard_relative(local_path: str | None) -> PurePosixPath:
    """The TensorBoard directory below the instance's base directory (``local_path`` as
    ``tensorboard_path_problem`` allows it, or the default)."""
    return PurePosixPath(local_path or DEFAULT_TENSORBOARD_PATH).relative_to(IMAGE_BASE_DIR)


def tensorboard_path_problem(local_path: str) -> str | None:
    """Why ``local_path`` cannot hold a job's TensorBoard data, if it cannot. It must be a
    directory below /opt/ml, of the job's own: the runtime, which is root, stores what is
    there, reached from the instance's base directory without following a link (on a
    machine shared with others, a path of the machine's would be theirs). Not in input/,
    which is the runtime's, nor in a hidden directory of Runyard's."""
    path = PurePosixPath(local_path)
    if not path.is_absolute() or ".." in path.parts or "\\" in local_path:
        return "must be an absolute path without '..'"
    if not path.is_relative_to(IMAGE_BASE_DIR) or path == PurePosixPath(IMAGE_BASE_DIR):
        return f"must be a directory below {IMAGE_BASE_DIR} (as {DEFAULT_TENSORBOARD_PATH})"
    first = path.relative_to(IMAGE_BASE_DIR).parts[0]
    if first == "input" or first.startswith("."):
        return f"must not be in {IMAGE_BASE_DIR}/{first}, which is not the job's"
    return None


def checkpoint_dir(base: Path, local_path: str | None) -> Path | None:
    """Where the script's checkpoints go: a path under /opt/ml is taken as relative to
    this instance's base directory (so /opt/ml/checkpoints is <base>/checkpoints)."""
    if not local_path:
        return None
    path = Path(local_path)
    if path.is_relative_to(IMAGE_BASE_DIR):
        return base / path.relative_to(IMAGE_BASE_DIR)
    return path


@dataclass(frozen=True)
class ChannelFile:
    """A file the instance has in one of its channels, named by its path in the image
    (``/opt/ml/input/data/code/sourcedir.tar.gz``): with network isolation the SageMaker
    SDK ships a job's code as a channel and names it so, where its source would be an
    ``s3://`` URI."""

    channel: str
    # Its path below the channel's directory, '/'-separated.
    relative: str

    @property
    def below_data(self) -> PurePosixPath:
        """Its path below the instance's ``input/data/``."""
        return PurePosixPath(self.channel, self.relative)


CHANNELS_DIR = PurePosixPath(IMAGE_BASE_DIR) / "input" / "data"


def is_path(value: str) -> bool:
    """Whether a job's ``source_uri`` is written as a path rather than a URI (no scheme)."""
    return not urlsplit(value).scheme


def channel_file(value: str) -> ChannelFile | None:
    """The channel file a path names (absolute, below ``/opt/ml/input/data/<channel>/``,
    without '.' or '..'), or None for any other string."""
    if not value.startswith(f"{CHANNELS_DIR}/") or "\\" in value:
        return None
    parts = value.removeprefix(f"{CHANNELS_DIR}/").split("/")
    if len(parts) < 2 or any(part in ("", ".", "..") for part in parts):
        return None
    return ChannelFile(parts[0], "/".join(parts[1:]))
