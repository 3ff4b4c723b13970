"""The resources' names (TrainingJob, HyperparameterTuningJob): their API group, version,
kinds and the marks the controller leaves on them. One place, read by the CRD generator,
the controllers and the chart's tests."""

from __future__ import annotations

from dataclasses import dataclass

GROUP = "runyard.dev"
VERSION = "v1"
KIND = "TrainingJob"
PLURAL = "trainingjobs"
SINGULAR = "trainingjob"
SHORT_NAMES = ("tj",)
API_VERSION = f"{GROUP}/{VERSION}"
CRD_NAME = f"{PLURAL}.{GROUP}"


@dataclass(frozen=True)
class Kind:
    """One kind of resource of the group."""

    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{GROUP}"


TRAINING_JOB = Kind(KIND, PLURAL, SINGULAR, SHORT_NAMES)
# `kubectl get hpt`: a tuning job, its trials training jobs of the namespace's project.
TUNING_JOB = Kind(
    "HyperparameterTuningJob", "hyperparametertuningjobs", "hyperparametertuningjob", ("hpt",)
)
KINDS = (TRAINING_JOB, TUNING_JOB)

# Held on every resource the controller has taken on: the resource is removed only once
# its job has ended and its instances are gone.
FINALIZER = f"{GROUP}/stop-job"
# The job's tag that names the resource it was made for (its uid): how a controller that
# restarted finds the job it submitted instead of submitting another.
RESOURCE_TAG = f"{GROUP}/resource-uid"
# What Events name as their source.
COMPONENT = "runyard-controller"
