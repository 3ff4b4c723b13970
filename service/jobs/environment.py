"""What a caller is shown of a job's environment. The project's members and admins read it
whole: they may submit the job again, values and all. Anyone else who sees the job (its
viewers, an instance's token) gets the value of every variable whose name looks secret
masked, as a dry run shows them (``contract.variables.masked``): a read-only token is no
key to the credentials a job was handed."""

from __future__ import annotations

from contract import variables
from service.auth.access import Principal, Role
from service.jobs.models import TrainingJob


def shown_to(caller: Principal, job: TrainingJob) -> dict[str, str]:
    environment = job.record.environment
    if caller.may(Role.MEMBER, job.project):
        return dict(environment)
    return variables.masked(environment)
