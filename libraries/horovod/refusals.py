"""What Runyard's Horovod API does not offer, each with why and what to use instead.

A script that reaches for one of these stops at once with that sentence: nothing of
Horovod's is quietly left out or replaced by something that behaves differently.
"""

from __future__ import annotations

# The TensorFlow, Keras and MXNet flavours of Horovod (``import horovod.tensorflow``...).
OTHER_FRAMEWORKS = (
    "Runyard offers only horovod.torch, its own Horovod API on torch.distributed. Horovod's "
    "package (last release 0.28.1, 2023) does not build against today's frameworks: its "
    "TensorFlow extension needs XLA headers that TensorFlow 2.21's wheel does not ship, its "
    "PyTorch extension compiles as C++14 where PyTorch 2.13 needs C++17. For TensorFlow use "
    'the distribution {"multi_worker_mirrored_strategy": {"enabled": true}} or '
    '{"parameter_server": {"enabled": true}}; a Horovod built into the training environment '
    "(requirements.txt) takes the place of Runyard's"
)

# Names of Horovod's torch API that Runyard does not offer -> why, and what instead.
NOT_OFFERED = {
    "join": "hvd.join() lets ranks with fewer batches keep answering the others' "
    "collectives; give every rank the same number of batches (hvd.barrier() waits for all)",
    "SyncBatchNorm": "use torch.nn.SyncBatchNorm",
    "elastic": "Horovod Elastic (hvd.elastic.run, TorchState) is not offered; Runyard "
    "restarts a failed job from its checkpoints instead (checkpoint_s3_uri)",
    "ProcessSet": "process sets are not offered: every collective spans the whole job",
    "add_process_set": "process sets are not offered: every collective spans the whole job",
    "remove_process_set": "process sets are not offered: every collective spans the whole job",
    "reducescatter": "use torch.distributed.reduce_scatter_tensor on the same processes",
    "grouped_reducescatter": "use torch.distributed.reduce_scatter_tensor",
    "grouped_allreduce_async": "use hvd.grouped_allreduce, or hvd.allreduce_async per tensor",
    "grouped_allreduce_async_": "use hvd.grouped_allreduce_, or hvd.allreduce_async_ per tensor",
    "alltoall": "use torch.distributed.all_to_all_single on the same processes",
    "sparse_allreduce_async": "sparse gradients are not offered: use sparse_as_dense=True",
    "start_timeline": "Horovod's timeline is not offered: use torch.profiler",
    "stop_timeline": "Horovod's timeline is not offered: use torch.profiler",
}


class NotOfferedError(ValueError):
    """An option of a Horovod call that Runyard's horovod.torch refuses (an operation, a
    communicator, a process set): a value the call takes that it will not act on."""

    def __init__(self, feature: str, why: str) -> None:
        super().__init__(f"Runyard's horovod.torch does not offer {feature}: {why}")
        self.feature = feature


def missing_name(module: str, name: str) -> AttributeError:
    """For a module's ``__getattr__``: an AttributeError (so ``hasattr`` still answers
    False) that says why, where Horovod has the name and Runyard does not."""
    why = NOT_OFFERED.get(name)
    if why is None:
        return AttributeError(f"module {module!r} has no attribute {name!r}", name=name)
    return AttributeError(
        f"module {module!r} has no attribute {name!r}: Runyard's horovod.torch does not "
        f"offer hvd.{name}: {why}",
        name=name,
    )
