"""The TrainingJob controller: each resource brought to its job, one pass at a time.

A pass lists the resources of every namespace the settings map to a project and, for each,
is level-triggered and idempotent (a pass cut short anywhere is finished by the next):

- a new resource gets the finalizer, then its job is submitted through the same service
  the REST API uses, named after the resource and tagged with its uid. The database stays
  the source of truth: a controller that restarted finds the job by its name and tag
  (never submitting twice, never losing one), and a job of that name without the tag
  (one submitted over REST) is not taken over;
- a spec the server refuses (an instance type it does not run, a source that is not
  there) leaves the resource with ``Accepted=False``, reason ``Invalid``, and a Warning
  Event, both naming the field (``spec.instanceType: ...``);
- the job's status is written to the status subresource and each new transition posted
  as an Event;
- a resource being deleted has its job stopped; its finalizer is removed once the job has
  ended and its backend holds nothing of it any more. A job reads as ended as soon as its
  result is decided, before its instances are torn down (``worker.reconciler.ending``),
  so the controller asks the backend itself: no pod or ConfigMap outlives the resource.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from provisioning import registry
from provisioning.base import Backend, JobRef
from service.custom_resources import crd, events, names, resources, status
from service.custom_resources.status import ResourceStatus
from service.jobs import lookup
from service.jobs.public import public_of
from service.jobs.schemas import JobCreate, JobPublic
from service.jobs.states import TERMINAL, Status
from service.kit.db import session_scope, utcnow
from service.kit.errors import Conflict, NotFound, RunyardError, SpecError
from service.settings import Settings
from service.training import service

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

log = logging.getLogger(__name__)


BuildBackend = Callable[[str, Settings], Backend[Any]]


class Controller:
    def __init__(
        self,
        settings: Settings,
        api_client: ApiClient,
        build_backend: BuildBackend = registry.build,
    ) -> None:
        from kubernetes import client

        self.settings = settings
        self.build_backend = build_backend
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)

    def sync(self) -> None:
        """One pass over every resource of the mapped namespaces."""
        from kubernetes.client.exceptions import ApiException

        for namespace, project in self.settings.controller.namespaces.items():
            listed = cast(
                dict[str, Any],
                self.custom.list_namespaced_custom_object(
                    names.GROUP, names.VERSION, namespace, names.PLURAL
                ),
            )
            for resource in listed.get("items", []):
                try:
                    self.reconcile(resource, project)
                except ApiException as exc:
                    # Changed meanwhile (409) or gone (404): the next pass reads it again.
                    log.info("%s/%s: %s", namespace, _name(resource), exc.reason)

    def reconcile(self, resource: dict[str, Any], project: str) -> None:
        if resource["metadata"].get("deletionTimestamp"):
            self._finalize(resource, project)
            return
        if names.FINALIZER not in _finalizers(resource):
            resource = self._set_finalizers(resource, [*_finalizers(resource), names.FINALIZER])
        before = _status(resource)
        job = self._job(resource, project)
        if job is None:
            job = self._submit(resource, project, before)
            if job is None:
                return
        elif not _made_for(job, resource):
            self._refuse(
                resource,
                before,
                "NameTaken",
                f"metadata.name: project {project!r} has a training job named "
                f"{_name(resource)!r} already, not made for this resource",
            )
            return
        self._show(resource, before, job)

    # -- submitting --------------------------------------------------------------------

    def _submit(
        self, resource: dict[str, Any], project: str, before: ResourceStatus
    ) -> JobPublic | None:
        if before.job_id is not None:
            # Submitted once, and its job is gone (the database restored from before it):
            # submitting again would run it twice.
            self._refuse(
                resource, before, "JobLost", f"job {before.job_id} is no longer in Runyard"
            )
            return None
        try:
            spec = _spec(resource)
            with session_scope(self.settings.database_url) as session:
                service.submit(session, self.settings, spec, project)
        except SpecError as exc:
            self._refuse(resource, before, "Invalid", _in_resource(exc))
            return None
        except Conflict:
            return None  # stored meanwhile (by this pass's earlier try): the next finds it
        except RunyardError as exc:  # the project's capacity refused it now, say
            self._refuse(resource, before, type(exc).__name__, exc.message)
            return None
        return self._job(resource, project)

    def _refuse(
        self, resource: dict[str, Any], before: ResourceStatus, reason: str, message: str
    ) -> None:
        now = utcnow()
        after = status.refused(before, reason, message, now)
        if after.body() == before.body():
            return
        events.post(self.core, resource, "refused", reason, message, now, warning=True)
        self._write_status(resource, after)

    # -- following the job ---------------------------------------------------------------

    def _job(self, resource: dict[str, Any], project: str) -> JobPublic | None:
        viewer = _principal(project)
        with session_scope(self.settings.database_url, readonly=True) as session:
            try:
                return public_of(lookup.get(session, _name(resource), viewer))
            except NotFound:
                return None

    def _show(
        self, resource: dict[str, Any], before: ResourceStatus, job: JobPublic
    ) -> dict[str, Any]:
        """The job's status written to the resource, its new transitions as Events; the
        resource as it is now."""
        now = utcnow()
        after = status.from_job(job, before, now)
        for index in range(before.events_recorded, len(job.transitions)):
            transition = job.transitions[index]
            events.post(
                self.core,
                resource,
                f"t{index}",
                transition.secondary_status,
                transition.message or f"{transition.status}: {transition.secondary_status}",
                transition.start_time,
                warning=events.is_warning(transition.secondary_status),
            )
        after.events_recorded = len(job.transitions)
        if after.body() == before.body():
            return resource
        return self._write_status(resource, after)

    def _write_status(self, resource: dict[str, Any], after: ResourceStatus) -> dict[str, Any]:
        return resources.write_status(self.custom, names.TRAINING_JOB, resource, after.body())

    # -- deleting --------------------------------------------------------------------------

    def _finalize(self, resource: dict[str, Any], project: str) -> None:
        if names.FINALIZER not in _finalizers(resource):
            return
        job = self._job(resource, project)
        if job is not None and _made_for(job, resource):
            before = _status(resource)
            if job.status not in TERMINAL:
                if job.status != Status.STOPPING:
                    self._stop(job, project)
                    job = self._job(resource, project) or job
                self._show(resource, before, job)
                return  # the worker tears it down; a later pass sees it ended
            resource = self._show(resource, before, job)
            if self._instances_left(job):
                return  # the worker's teardown (or the reaper's) is under way
        kept = [each for each in _finalizers(resource) if each != names.FINALIZER]
        self._set_finalizers(resource, kept)

    def _instances_left(self, job: JobPublic) -> bool:
        backend = self.build_backend(job.backend, self.settings)
        return backend.exists(JobRef(job.id, job.name, job.attempt))

    def _stop(self, job: JobPublic, project: str) -> None:
        try:
            with session_scope(self.settings.database_url) as session:
                service.stop(session, self.settings, job.name, _principal(project), project)
        except Conflict:
            pass  # it ended (or began stopping) meanwhile

    def _set_finalizers(self, resource: dict[str, Any], finalizers: list[str]) -> dict[str, Any]:
        return resources.set_finalizers(self.custom, names.TRAINING_JOB, resource, finalizers)


def _spec(resource: dict[str, Any]) -> JobCreate:
    return resources.request(resource, JobCreate, crd.request_schema(), ("name", "baseJobName"))


def _in_resource(error: SpecError) -> str:
    return resources.in_resource(error, crd.request_schema())


def _made_for(job: JobPublic, resource: dict[str, Any]) -> bool:
    return resources.made_for(job.spec.tags, resource)


def _status(resource: dict[str, Any]) -> ResourceStatus:
    return ResourceStatus.model_validate(resource.get("status") or {})


_finalizers = resources.finalizers_of
_name = resources.name_of
_principal = resources.principal
