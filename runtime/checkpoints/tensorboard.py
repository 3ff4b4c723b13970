"""TensorBoard data kept the way SageMaker keeps a job's ``TensorBoardOutputConfig``.

What the script writes below the job's TensorBoard directory (``tensorboard_local_path``,
/opt/ml/output/tensorboard by default) is stored below
``<tensorboard_s3_output_path>/<job name>/tensorboard-output``, where the SageMaker SDK
looks for it, while the script runs and when it ends: by the same sync as checkpoints
(``runtime.checkpoints.CheckpointSync``), from every instance.

The directory lies in a tree the job's user owns (``output/``), so the job could swap it
for a link to something of the machine's while the runtime, which is root, stores from
it. The sync therefore never uses its path: it works from a descriptor of the directory,
opened before the script starts from the instance's base directory without following a
link (``contract.untrusted``), through that descriptor's /proc/self/fd entry.
"""

from __future__ import annotations

import os
from pathlib import Path

from contract import storage, untrusted
from contract.instance_config import InstanceConfig
from contract.layout import IMAGE_BASE_DIR, tensorboard_relative
from runtime.checkpoints import CheckpointSync, Say

FIELD = "tensorboard_s3_output_path"


def prepare(config: InstanceConfig) -> None:
    """Make the job's TensorBoard directory, where it keeps one, before the job's user is
    handed what is below the base directory: the script finds it there, as on SageMaker."""
    if config.spec.tensorboard_s3_output_path:
        relative = tensorboard_relative(config.spec.tensorboard_local_path)
        with untrusted.directory(config.paths.base, relative, create=True):
            pass


def start_sync(config: InstanceConfig, say: Say) -> TensorBoardSync | None:
    """The running sync of the job's TensorBoard directory; None when it keeps none. A
    StorageError naming the directory if it cannot be opened or watched."""
    spec = config.spec
    if not spec.tensorboard_s3_output_path:
        return None
    relative = tensorboard_relative(spec.tensorboard_local_path)
    shown = Path(IMAGE_BASE_DIR) / relative
    try:
        with untrusted.directory(config.paths.base, relative) as found:
            fd = os.dup(found)  # not inherited by the job's processes (PEP 446)
    except OSError as exc:
        raise storage.StorageError(f"TensorBoard data in {shown}: {exc}") from exc
    sync = TensorBoardSync(
        fd,
        spec.written_at(FIELD, config.job_name),
        say,
        scratch_dir=config.paths.base,
        shown=shown,
    )
    try:
        sync.start()
    except OSError as exc:
        sync.close()
        raise storage.StorageError(f"storing TensorBoard data from {shown}: {exc}") from exc
    except BaseException:
        sync.close()
        raise
    return sync


class TensorBoardSync(CheckpointSync):
    """A ``CheckpointSync`` of the directory open as ``fd``, which it closes once stopped."""

    def __init__(self, fd: int, uri: str, say: Say, *, scratch_dir: Path, shown: Path) -> None:
        super().__init__(
            Path(f"/proc/self/fd/{fd}"),
            uri,
            say,
            scratch_dir=scratch_dir,
            what="TensorBoard file",
            shown=shown,
        )
        self._fd: int | None = fd

    def stop(self) -> int:
        try:
            return super().stop()
        finally:
            self.close()

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
