"""The instance-type catalog: what each type offers, for validation and scheduling.

``local`` and ``local_gpu`` run on the server's own machine (the local backend); their
CPUs and GPUs are whatever that machine has, so they carry no fixed figures.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int | None
    memory_gib: float | None
    gpus: int
    gpu_model: str | None = None


def _ml(
    name: str, vcpus: int, memory: float, gpus: int = 0, gpu: str | None = None
) -> InstanceType:
    return InstanceType(f"ml.{name}", vcpus, memory, gpus, gpu)


CATALOG: dict[str, InstanceType] = {
    t.name: t
    for t in [
        InstanceType("local", None, None, 0),
        InstanceType("local_gpu", None, None, 0),
        _ml("m5.large", 2, 8),
        _ml("m5.xlarge", 4, 16),
        _ml("m5.2xlarge", 8, 32),
        _ml("m5.4xlarge", 16, 64),
        _ml("m5.12xlarge", 48, 192),
        _ml("m5.24xlarge", 96, 384),
        _ml("c5.xlarge", 4, 8),
        _ml("c5.2xlarge", 8, 16),
        _ml("c5.4xlarge", 16, 32),
        _ml("c5.9xlarge", 36, 72),
        _ml("c5.18xlarge", 72, 144),
        _ml("p3.2xlarge", 8, 61, 1, "V100"),
        _ml("p3.8xlarge", 32, 244, 4, "V100"),
        _ml("p3.16xlarge", 64, 488, 8, "V100"),
        _ml("p3dn.24xlarge", 96, 768, 8, "V100"),
        _ml("p4d.24xlarge", 96, 1152, 8, "A100"),
        _ml("p4de.24xlarge", 96, 1152, 8, "A100"),
        _ml("p5.48xlarge", 192, 2048, 8, "H100"),
        _ml("g4dn.xlarge", 4, 16, 1, "T4"),
        _ml("g4dn.12xlarge", 48, 192, 4, "T4"),
        _ml("g5.xlarge", 4, 16, 1, "A10G"),
        _ml("g5.2xlarge", 8, 32, 1, "A10G"),
        _ml("g5.12xlarge", 48, 192, 4, "A10G"),
        _ml("g5.48xlarge", 192, 768, 8, "A10G"),
    ]
}

# What each backend can run: the ml.* types on a cluster; locally the machine's own types,
# and the CPU ml.* types where the server maps them to the local backend
# (RUNYARD_BACKENDS), so SageMaker code that names them runs on one machine. A local
# instance has the machine's CPUs and memory, whatever its type says.
CLUSTER_TYPES = frozenset(name for name in CATALOG if name.startswith("ml."))
LOCAL_TYPES = frozenset({"local", "local_gpu"}) | frozenset(
    name for name in CLUSTER_TYPES if CATALOG[name].gpus == 0
)
