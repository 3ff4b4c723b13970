"""What an operator writes to add an instance type (``RUNYARD_INSTANCE_TYPES``), checked.

Every name an entry gives Kubernetes (node labels, taint keys, the accelerator's resource)
is held to the syntax the API server itself enforces, so a mistake is refused when the
server starts, naming the entry and its field, rather than by the cluster when a job's
pods are created.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from provisioning.catalog import NVIDIA_GPU, InstanceType, Toleration

# SageMaker's names: ml.<EC2's family>.<size>, which is how the EC2 backend finds EC2's
# own name for the type (ml.g6e.xlarge -> g6e.xlarge).
_TYPE_NAME = re.compile(r"ml\.[a-z0-9][a-z0-9-]*\.[a-z0-9][a-z0-9-]*")
# Kubernetes' qualified names (label keys, taint keys, resource names): an optional DNS
# subdomain and "/", then a name of up to 63 characters; and label values.
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_MAX_SELECTOR_LABELS = 20
_MAX_TOLERATIONS = 20


def _qualified_name(text: str) -> str:
    prefix, slash, name = text.rpartition("/")
    if slash and not (len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix)):
        raise ValueError(f"{text!r}: its prefix must be a DNS subdomain (example.com/)")
    if not (len(name) <= 63 and _NAME.fullmatch(name)):
        raise ValueError(
            f"{text!r}: a Kubernetes name is up to 63 letters, digits, '-', '_' or '.', "
            "beginning and ending with a letter or digit, after an optional prefix/"
        )
    return text


def _label_value(text: str) -> str:
    if text and not (len(text) <= 63 and _NAME.fullmatch(text)):
        raise ValueError(
            f"{text!r}: a label value is up to 63 letters, digits, '-', '_' or '.', "
            "beginning and ending with a letter or digit"
        )
    return text


def _extended_resource(text: str) -> str:
    # As Kubernetes takes a device plugin's resource: fully qualified, and outside the
    # names Kubernetes keeps for itself.
    _qualified_name(text)
    domain = text.partition("/")[0]
    if "/" not in text or domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        raise ValueError(
            f"{text!r} is no device plugin's resource: one is written domain/name, outside "
            f"kubernetes.io, such as {NVIDIA_GPU} or aws.amazon.com/neuron"
        )
    if text.startswith("requests."):
        raise ValueError(f"{text!r}: a resource name may not begin with 'requests.'")
    return text


def _type_name(text: str) -> str:
    if not (len(text) <= 64 and _TYPE_NAME.fullmatch(text)):
        raise ValueError(
            f"{text[:80]!r} is not written as SageMaker's types are: ml.<family>.<size>, "
            "of lowercase letters, digits and '-' (ml.g6e.xlarge), up to 64 characters"
        )
    return text


def _taint_key(text: str) -> str:
    # Empty, with Exists, as Kubernetes writes "every taint".
    return _qualified_name(text) if text else text


QualifiedName = Annotated[str, AfterValidator(_qualified_name)]
LabelValue = Annotated[str, AfterValidator(_label_value)]


class TolerationDefinition(BaseModel):
    """A pod spec's toleration, with the names Kubernetes gives its fields."""

    model_config = ConfigDict(extra="forbid")

    key: Annotated[str, AfterValidator(_taint_key)] | None = Field(
        default=None, description="The taint's key; unset, with `Exists`: every taint."
    )
    operator: Literal["Exists", "Equal"] = Field(
        default="Equal",
        description="`Equal` tolerates the taint with this value, `Exists` any value.",
    )
    value: LabelValue | None = Field(default=None, description="The taint's value, for `Equal`.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="The taint's effect; unset: every effect."
    )
    toleration_seconds: int | None = Field(
        default=None,
        alias="tolerationSeconds",
        ge=0,
        le=2**31 - 1,
        strict=True,
        description="How long a pod stays on a node once the `NoExecute` taint appears.",
    )

    @model_validator(mode="after")
    def _as_kubernetes_allows(self) -> TolerationDefinition:
        if self.operator == "Exists" and self.value:
            raise ValueError("value: must be empty with operator Exists")
        if not self.key and self.operator != "Exists":
            raise ValueError("operator: must be Exists when there is no key")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds: is for effect NoExecute only")
        return self

    def toleration(self) -> Toleration:
        return Toleration(
            key=self.key or None,
            operator=self.operator,
            value=self.value or None,
            effect=self.effect,
            toleration_seconds=self.toleration_seconds,
        )


class InstanceTypeDefinition(BaseModel):
    """One instance type an operator adds to the catalog (``provisioning.catalog``)."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, AfterValidator(_type_name)] = Field(
        description="What jobs name it as `instance_type`: SageMaker's `ml.<family>.<size>` "
        "(`ml.g6e.xlarge`), whose EC2 type is the name without `ml.`. One with a built-in "
        "type's name replaces it.",
    )
    vcpus: int = Field(
        ge=1, le=4096, strict=True, description="Its vCPUs: a pod's CPU limit is this."
    )
    memory_gib: float = Field(
        gt=0, le=65536, strict=True, description="Its memory in GiB: a pod's memory limit is this."
    )
    gpus: int = Field(
        default=0,
        ge=0,
        le=64,
        strict=True,
        description="Its accelerators, as `gpu_resource` counts them: a pod asks for this "
        "many. `0`: none, and a job may also run it on the local backend.",
    )
    gpu_model: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._-]*$",
        max_length=64,
        description="The accelerators' model, for people (`L40S`).",
    )
    gpu_resource: Annotated[str, AfterValidator(_extended_resource)] = Field(
        default=NVIDIA_GPU,
        max_length=317,
        description="The resource a device plugin offers its accelerators as: "
        f"`{NVIDIA_GPU}`, `aws.amazon.com/neuron` for Trainium and Inferentia, "
        "`nvidia.com/mig-1g.10gb` for a MIG slice.",
    )
    node_selector: dict[QualifiedName, LabelValue] = Field(
        default_factory=dict,
        max_length=_MAX_SELECTOR_LABELS,
        description="Labels a node must have to run its pods, besides the Kubernetes "
        "backend's own `node_selector` (this one wins on a shared key), such as "
        '`{"node.kubernetes.io/instance-type": "g6e.xlarge"}`.',
    )
    tolerations: list[TolerationDefinition] = Field(
        default_factory=list,
        max_length=_MAX_TOLERATIONS,
        description="Taints its pods tolerate, besides the Kubernetes backend's own "
        "`tolerations`: each an object with Kubernetes' keys `key`, `operator` (`Equal` "
        "or `Exists`), `value`, `effect` and `tolerationSeconds`.",
    )

    @model_validator(mode="after")
    def _accelerators_named_only_with_some(self) -> InstanceTypeDefinition:
        if self.gpus == 0:
            for name in ("gpu_model", "gpu_resource"):
                if name in self.model_fields_set:
                    raise ValueError(f"{name}: is given, and gpus is 0")
        return self

    def instance_type(self) -> InstanceType:
        return InstanceType(
            name=self.name,
            vcpus=self.vcpus,
            memory_gib=self.memory_gib,
            gpus=self.gpus,
            gpu_model=self.gpu_model,
            gpu_resource=self.gpu_resource,
            node_selector=tuple(sorted(self.node_selector.items())),
            tolerations=tuple(t.toleration() for t in self.tolerations),
        )


def entry_problems(errors: Sequence[Any], entries: Any, setting: str) -> str:
    """Pydantic's errors of a list of entries, each naming the entry (its index and name)
    and its field: ``RUNYARD_INSTANCE_TYPES[1] (ml.g6e.xlarge): vcpus: ...``."""
    lines = []
    for error in errors:
        loc = list(error["loc"])
        where = setting
        if loc and isinstance(loc[0], int):
            index = loc.pop(0)
            where = f"{setting}[{index}]"
            entry = entries[index] if isinstance(entries, list) and index < len(entries) else None
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                where += f" ({entry['name'][:64]})"
        message = str(error["msg"]).removeprefix("Value error, ")
        field = ".".join(str(part) for part in loc)
        lines.append(f"{where}: {field}: {message}" if field else f"{where}: {message}")
    return "; ".join(lines)
