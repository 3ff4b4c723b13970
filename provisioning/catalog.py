"""The instance-type catalog: what each type offers, for validation and scheduling.

``local`` and ``local_gpu`` run on the server's own machine (the local backend); their
CPUs and GPUs are whatever that machine has, so they carry no fixed figures. The ``ml.*``
types below are SageMaker's, with their public figures. An operator adds types or replaces
built-in ones (``RUNYARD_INSTANCE_TYPES``): a server's catalog is an ``InstanceCatalog``
built once from its settings, and every part that asks what a type is asks that one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# The extended resources the device plugins offer accelerators as: NVIDIA's GPUs, and AWS
# Trainium and Inferentia devices (each of them two or more NeuronCores).
NVIDIA_GPU = "nvidia.com/gpu"
NEURON_DEVICE = "aws.amazon.com/neuron"
# The types named after the server's own machine; the local backend's alone.
MACHINE_TYPES = ("local", "local_gpu")
# What names a cluster type (a pod or an EC2 instance of that size): EC2's name after it.
CLUSTER_PREFIX = "ml."


@dataclass(frozen=True)
class Toleration:
    """A taint a type's pods tolerate, as a pod spec's ``tolerations`` entry holds it."""

    key: str | None = None
    operator: str = "Equal"
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None

    def manifest(self) -> dict[str, Any]:
        """The entry as Kubernetes writes it, without the fields left unset."""
        written: dict[str, Any] = {
            "key": self.key,
            "operator": self.operator,
            "value": self.value,
            "effect": self.effect,
            "tolerationSeconds": self.toleration_seconds,
        }
        return {name: value for name, value in written.items() if value is not None}


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int | None
    memory_gib: float | None
    # Accelerators of ``gpu_resource``: NVIDIA GPUs by default, Trainium chips for trn1 and trn2.
    gpus: int
    gpu_model: str | None = None
    gpu_resource: str = NVIDIA_GPU
    # Where its pods run on a cluster: labels the node must have, taints they tolerate.
    # Pairs rather than a dict, so a type stays immutable and hashable.
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()

    @property
    def on_cluster(self) -> bool:
        """A pod or an EC2 instance of its size, rather than the server's own machine."""
        return self.name.startswith(CLUSTER_PREFIX)


def _ml(
    name: str,
    vcpus: int,
    memory: float,
    gpus: int = 0,
    gpu: str | None = None,
    resource: str = NVIDIA_GPU,
) -> InstanceType:
    return InstanceType(f"{CLUSTER_PREFIX}{name}", vcpus, memory, gpus, gpu, resource)


# Every type SageMaker Training offers (the TrainingInstanceType of its API), with the
# figures EC2 gives the type of the same name without ``ml.``: vCPUs, memory in GiB, and
# accelerators with their model. tests/provisioning/test_catalog.py holds them to EC2's
# own data (DescribeInstanceTypes, as moto ships it). Three families are missing from that
# data and carry AWS's published figures instead: p2 and p3, which EC2 has retired, and
# p6e-gb200.
BUILTIN_TYPES: tuple[InstanceType, ...] = (
    InstanceType("local", None, None, 0),
    InstanceType("local_gpu", None, None, 0),
    # General purpose.
    _ml("t3.medium", 2, 4),
    _ml("t3.large", 2, 8),
    _ml("t3.xlarge", 4, 16),
    _ml("t3.2xlarge", 8, 32),
    _ml("m4.xlarge", 4, 16),
    _ml("m4.2xlarge", 8, 32),
    _ml("m4.4xlarge", 16, 64),
    _ml("m4.10xlarge", 40, 160),
    _ml("m4.16xlarge", 64, 256),
    _ml("m5.large", 2, 8),
    _ml("m5.xlarge", 4, 16),
    _ml("m5.2xlarge", 8, 32),
    _ml("m5.4xlarge", 16, 64),
    _ml("m5.12xlarge", 48, 192),
    _ml("m5.24xlarge", 96, 384),
    _ml("m6i.large", 2, 8),
    _ml("m6i.xlarge", 4, 16),
    _ml("m6i.2xlarge", 8, 32),
    _ml("m6i.4xlarge", 16, 64),
    _ml("m6i.8xlarge", 32, 128),
    _ml("m6i.12xlarge", 48, 192),
    _ml("m6i.16xlarge", 64, 256),
    _ml("m6i.24xlarge", 96, 384),
    _ml("m6i.32xlarge", 128, 512),
    _ml("m7i.large", 2, 8),
    _ml("m7i.xlarge", 4, 16),
    _ml("m7i.2xlarge", 8, 32),
    _ml("m7i.4xlarge", 16, 64),
    _ml("m7i.8xlarge", 32, 128),
    _ml("m7i.12xlarge", 48, 192),
    _ml("m7i.16xlarge", 64, 256),
    _ml("m7i.24xlarge", 96, 384),
    _ml("m7i.48xlarge", 192, 768),
    _ml("m7i-flex.large", 2, 8),
    _ml("m7i-flex.xlarge", 4, 16),
    _ml("m7i-flex.2xlarge", 8, 32),
    _ml("m7i-flex.4xlarge", 16, 64),
    _ml("m7i-flex.8xlarge", 32, 128),
    _ml("m7i-flex.12xlarge", 48, 192),
    _ml("m7i-flex.16xlarge", 64, 256),
    _ml("m8i.large", 2, 8),
    _ml("m8i.xlarge", 4, 16),
    _ml("m8i.2xlarge", 8, 32),
    _ml("m8i.4xlarge", 16, 64),
    _ml("m8i.8xlarge", 32, 128),
    _ml("m8i.12xlarge", 48, 192),
    _ml("m8i.16xlarge", 64, 256),
    _ml("m8i.24xlarge", 96, 384),
    _ml("m8i.32xlarge", 128, 512),
    _ml("m8i.48xlarge", 192, 768),
    _ml("m8i.96xlarge", 384, 1536),
    _ml("m8i-flex.large", 2, 8),
    _ml("m8i-flex.xlarge", 4, 16),
    _ml("m8i-flex.2xlarge", 8, 32),
    _ml("m8i-flex.4xlarge", 16, 64),
    _ml("m8i-flex.8xlarge", 32, 128),
    _ml("m8i-flex.12xlarge", 48, 192),
    _ml("m8i-flex.16xlarge", 64, 256),
    # Compute optimized.
    _ml("c4.xlarge", 4, 7.5),
    _ml("c4.2xlarge", 8, 15),
    _ml("c4.4xlarge", 16, 30),
    _ml("c4.8xlarge", 36, 60),
    _ml("c5.xlarge", 4, 8),
    _ml("c5.2xlarge", 8, 16),
    _ml("c5.4xlarge", 16, 32),
    _ml("c5.9xlarge", 36, 72),
    _ml("c5.18xlarge", 72, 144),
    _ml("c5n.xlarge", 4, 10.5),
    _ml("c5n.2xlarge", 8, 21),
    _ml("c5n.4xlarge", 16, 42),
    _ml("c5n.9xlarge", 36, 96),
    _ml("c5n.18xlarge", 72, 192),
    _ml("c6i.xlarge", 4, 8),
    _ml("c6i.2xlarge", 8, 16),
    _ml("c6i.4xlarge", 16, 32),
    _ml("c6i.8xlarge", 32, 64),
    _ml("c6i.12xlarge", 48, 96),
    _ml("c6i.16xlarge", 64, 128),
    _ml("c6i.24xlarge", 96, 192),
    _ml("c6i.32xlarge", 128, 256),
    _ml("c7i.large", 2, 4),
    _ml("c7i.xlarge", 4, 8),
    _ml("c7i.2xlarge", 8, 16),
    _ml("c7i.4xlarge", 16, 32),
    _ml("c7i.8xlarge", 32, 64),
    _ml("c7i.12xlarge", 48, 96),
    _ml("c7i.16xlarge", 64, 128),
    _ml("c7i.24xlarge", 96, 192),
    _ml("c7i.48xlarge", 192, 384),
    _ml("c7i-flex.xlarge", 4, 8),
    _ml("c7i-flex.2xlarge", 8, 16),
    _ml("c7i-flex.4xlarge", 16, 32),
    _ml("c7i-flex.8xlarge", 32, 64),
    _ml("c7i-flex.12xlarge", 48, 96),
    _ml("c7i-flex.16xlarge", 64, 128),
    _ml("c8i.xlarge", 4, 8),
    _ml("c8i.2xlarge", 8, 16),
    _ml("c8i.4xlarge", 16, 32),
    _ml("c8i.8xlarge", 32, 64),
    _ml("c8i.12xlarge", 48, 96),
    _ml("c8i.16xlarge", 64, 128),
    _ml("c8i.24xlarge", 96, 192),
    _ml("c8i.32xlarge", 128, 256),
    _ml("c8i.48xlarge", 192, 384),
    _ml("c8i.96xlarge", 384, 768),
    _ml("c8i-flex.xlarge", 4, 8),
    _ml("c8i-flex.2xlarge", 8, 16),
    _ml("c8i-flex.4xlarge", 16, 32),
    _ml("c8i-flex.8xlarge", 32, 64),
    _ml("c8i-flex.12xlarge", 48, 96),
    _ml("c8i-flex.16xlarge", 64, 128),
    # Memory optimized.
    _ml("r5.large", 2, 16),
    _ml("r5.xlarge", 4, 32),
    _ml("r5.2xlarge", 8, 64),
    _ml("r5.4xlarge", 16, 128),
    _ml("r5.8xlarge", 32, 256),
    _ml("r5.12xlarge", 48, 384),
    _ml("r5.16xlarge", 64, 512),
    _ml("r5.24xlarge", 96, 768),
    _ml("r5d.large", 2, 16),
    _ml("r5d.xlarge", 4, 32),
    _ml("r5d.2xlarge", 8, 64),
    _ml("r5d.4xlarge", 16, 128),
    _ml("r5d.8xlarge", 32, 256),
    _ml("r5d.12xlarge", 48, 384),
    _ml("r5d.16xlarge", 64, 512),
    _ml("r5d.24xlarge", 96, 768),
    _ml("r6i.large", 2, 16),
    _ml("r6i.xlarge", 4, 32),
    _ml("r6i.2xlarge", 8, 64),
    _ml("r6i.4xlarge", 16, 128),
    _ml("r6i.8xlarge", 32, 256),
    _ml("r6i.12xlarge", 48, 384),
    _ml("r6i.16xlarge", 64, 512),
    _ml("r6i.24xlarge", 96, 768),
    _ml("r6i.32xlarge", 128, 1024),
    _ml("r7i.large", 2, 16),
    _ml("r7i.xlarge", 4, 32),
    _ml("r7i.2xlarge", 8, 64),
    _ml("r7i.4xlarge", 16, 128),
    _ml("r7i.8xlarge", 32, 256),
    _ml("r7i.12xlarge", 48, 384),
    _ml("r7i.16xlarge", 64, 512),
    _ml("r7i.24xlarge", 96, 768),
    _ml("r7i.48xlarge", 192, 1536),
    _ml("r8i.large", 2, 16),
    _ml("r8i.xlarge", 4, 32),
    _ml("r8i.2xlarge", 8, 64),
    _ml("r8i.4xlarge", 16, 128),
    _ml("r8i.8xlarge", 32, 256),
    _ml("r8i.12xlarge", 48, 384),
    _ml("r8i.16xlarge", 64, 512),
    _ml("r8i.24xlarge", 96, 768),
    _ml("r8i.32xlarge", 128, 1024),
    _ml("r8i.48xlarge", 192, 1536),
    _ml("r8i.96xlarge", 384, 3072),
    _ml("r8i-flex.large", 2, 16),
    _ml("r8i-flex.xlarge", 4, 32),
    _ml("r8i-flex.2xlarge", 8, 64),
    _ml("r8i-flex.4xlarge", 16, 128),
    _ml("r8i-flex.8xlarge", 32, 256),
    _ml("r8i-flex.12xlarge", 48, 384),
    _ml("r8i-flex.16xlarge", 64, 512),
    # Accelerated: NVIDIA GPUs.
    _ml("p2.xlarge", 4, 61, 1, "K80"),
    _ml("p2.8xlarge", 32, 488, 8, "K80"),
    _ml("p2.16xlarge", 64, 732, 16, "K80"),
    _ml("p3.2xlarge", 8, 61, 1, "V100"),
    _ml("p3.8xlarge", 32, 244, 4, "V100"),
    _ml("p3.16xlarge", 64, 488, 8, "V100"),
    _ml("p3dn.24xlarge", 96, 768, 8, "V100"),
    _ml("p4d.24xlarge", 96, 1152, 8, "A100"),
    _ml("p4de.24xlarge", 96, 1152, 8, "A100"),
    _ml("p5.4xlarge", 16, 256, 1, "H100"),
    _ml("p5.48xlarge", 192, 2048, 8, "H100"),
    _ml("p5e.48xlarge", 192, 2048, 8, "H200"),
    _ml("p5en.48xlarge", 192, 2048, 8, "H200"),
    _ml("p6-b200.48xlarge", 192, 2048, 8, "B200"),
    _ml("p6-b300.48xlarge", 192, 4096, 8, "B300"),
    _ml("p6e-gb200.36xlarge", 144, 960, 4, "GB200"),
    _ml("g4dn.xlarge", 4, 16, 1, "T4"),
    _ml("g4dn.2xlarge", 8, 32, 1, "T4"),
    _ml("g4dn.4xlarge", 16, 64, 1, "T4"),
    _ml("g4dn.8xlarge", 32, 128, 1, "T4"),
    _ml("g4dn.12xlarge", 48, 192, 4, "T4"),
    _ml("g4dn.16xlarge", 64, 256, 1, "T4"),
    _ml("g5.xlarge", 4, 16, 1, "A10G"),
    _ml("g5.2xlarge", 8, 32, 1, "A10G"),
    _ml("g5.4xlarge", 16, 64, 1, "A10G"),
    _ml("g5.8xlarge", 32, 128, 1, "A10G"),
    _ml("g5.12xlarge", 48, 192, 4, "A10G"),
    _ml("g5.16xlarge", 64, 256, 1, "A10G"),
    _ml("g5.24xlarge", 96, 384, 4, "A10G"),
    _ml("g5.48xlarge", 192, 768, 8, "A10G"),
    _ml("g6.xlarge", 4, 16, 1, "L4"),
    _ml("g6.2xlarge", 8, 32, 1, "L4"),
    _ml("g6.4xlarge", 16, 64, 1, "L4"),
    _ml("g6.8xlarge", 32, 128, 1, "L4"),
    _ml("g6.12xlarge", 48, 192, 4, "L4"),
    _ml("g6.16xlarge", 64, 256, 1, "L4"),
    _ml("g6.24xlarge", 96, 384, 4, "L4"),
    _ml("g6.48xlarge", 192, 768, 8, "L4"),
    _ml("g6e.xlarge", 4, 32, 1, "L40S"),
    _ml("g6e.2xlarge", 8, 64, 1, "L40S"),
    _ml("g6e.4xlarge", 16, 128, 1, "L40S"),
    _ml("g6e.8xlarge", 32, 256, 1, "L40S"),
    _ml("g6e.12xlarge", 48, 384, 4, "L40S"),
    _ml("g6e.16xlarge", 64, 512, 1, "L40S"),
    _ml("g6e.24xlarge", 96, 768, 4, "L40S"),
    _ml("g6e.48xlarge", 192, 1536, 8, "L40S"),
    _ml("g7.2xlarge", 8, 32, 1, "RTX PRO 4500"),
    _ml("g7.4xlarge", 16, 64, 1, "RTX PRO 4500"),
    _ml("g7.8xlarge", 32, 128, 1, "RTX PRO 4500"),
    _ml("g7.12xlarge", 48, 192, 2, "RTX PRO 4500"),
    _ml("g7.24xlarge", 96, 384, 4, "RTX PRO 4500"),
    _ml("g7.48xlarge", 192, 768, 8, "RTX PRO 4500"),
    _ml("g7e.2xlarge", 8, 64, 1, "RTX PRO Server 6000"),
    _ml("g7e.4xlarge", 16, 128, 1, "RTX PRO Server 6000"),
    _ml("g7e.8xlarge", 32, 256, 1, "RTX PRO Server 6000"),
    _ml("g7e.12xlarge", 48, 512, 2, "RTX PRO Server 6000"),
    _ml("g7e.24xlarge", 96, 1024, 4, "RTX PRO Server 6000"),
    _ml("g7e.48xlarge", 192, 2048, 8, "RTX PRO Server 6000"),
    # Accelerated: AWS Trainium chips, as Neuron devices.
    _ml("trn1.2xlarge", 8, 32, 1, "Trainium", NEURON_DEVICE),
    _ml("trn1.32xlarge", 128, 512, 16, "Trainium", NEURON_DEVICE),
    _ml("trn1n.32xlarge", 128, 512, 16, "Trainium", NEURON_DEVICE),
    _ml("trn2.48xlarge", 192, 2048, 16, "Trainium2", NEURON_DEVICE),
)


class InstanceCatalog(Mapping[str, InstanceType]):
    """The types one server offers, by name: the built-in ones unless told otherwise."""

    def __init__(self, types: Iterable[InstanceType] = BUILTIN_TYPES) -> None:
        self._types = {kind.name: kind for kind in types}
        cluster = frozenset(name for name, kind in self._types.items() if kind.on_cluster)
        self._cluster_types = cluster
        # Locally, the machine's own types, and the ml.* types without accelerators where
        # the server maps them to the local backend (RUNYARD_BACKENDS), so SageMaker code
        # that names them runs on one machine. A local instance has the machine's CPUs
        # and memory, whatever its type says.
        machine = frozenset(MACHINE_TYPES) & frozenset(self._types)
        self._local_types = machine | frozenset(
            name for name in cluster if self._types[name].gpus == 0
        )

    @classmethod
    def with_extra(cls, extra: Iterable[InstanceType]) -> InstanceCatalog:
        """The built-in types and ``extra``; one of ``extra`` with a built-in type's name
        replaces it."""
        added = list(extra)
        names = [kind.name for kind in added]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"instance type {', '.join(twice)} is given twice")
        replaced = set(names)
        return cls([*(kind for kind in BUILTIN_TYPES if kind.name not in replaced), *added])

    def __getitem__(self, name: str) -> InstanceType:
        return self._types[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._types)

    def __len__(self) -> int:
        return len(self._types)

    def cluster_types(self) -> frozenset[str]:
        """The types a cluster backend (Kubernetes, EC2) runs: every ``ml.*`` one."""
        return self._cluster_types

    def local_types(self) -> frozenset[str]:
        """The types the local backend runs."""
        return self._local_types
