"""A job's spec as a client would submit it again: its record without what the server chose
at submission. Copied, those would pin a choice the server makes anew for each job (its
name, the backend and image it picked, the default output place of a project, the
hyperparameters a distribution mode adds) and so change what the copy does."""

from __future__ import annotations

from typing import Any

from contract import modes
from service.auth.access import Principal
from service.grants.places import output_root
from service.jobs import environment
from service.jobs.models import TrainingJob
from service.settings import Settings


def resubmittable(settings: Settings, job: TrainingJob, caller: Principal) -> dict[str, Any]:
    """The spec, its environment as ``caller`` may read it (``service.jobs.environment``)."""
    record = job.record
    spec = record.dump()
    spec["environment"] = environment.shown_to(caller, job)
    for chosen in ("name", "image"):
        spec.pop(chosen, None)
    if record.backend == settings.backends.get(record.instance_type):
        spec.pop("backend", None)
    if record.output_path == output_root(settings.artifact_root, job.project):
        spec.pop("output_path", None)
    added = modes.hyperparameters(record.distribution.as_dict())
    spec["hyperparameters"] = {
        key: value
        for key, value in record.hyperparameters.items()
        if key not in added or added[key] != value
    }
    return spec
