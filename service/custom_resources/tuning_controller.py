"""The HyperparameterTuningJob controller: each resource brought to its tuning job, one
pass at a time, as the TrainingJob controller brings its own (``controller``).

A pass lists the resources of every namespace the settings map to a project and, for each,
is level-triggered and idempotent:

- a new resource gets the finalizer, then its tuning job is created through the same
  service the REST API uses, named after the resource and tagged with its uid (a tag each
  trial's training job gets too). A controller that restarted finds the tuning job by its
  name and tag; one of that name without the tag (made over REST) is not taken over;
- a spec the server refuses is said in ``Accepted=False`` (reason ``Invalid``) and a
  Warning Event, naming the field as the resource spells it (``spec.parameterRanges...``);
- the tuning job's status, counters and best trial are written to the status
  subresource, and each status it reaches is posted as an Event;
- a resource being deleted has its tuning job stopped (the tuner stops its trials); its
  finalizer is removed once the tuning job has ended, its trials with it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast

from service.custom_resources import crd, events, names, resources, status
from service.custom_resources.tuning_status import TuningResourceStatus, from_tuning_job
from service.kit.db import session_scope, utcnow
from service.kit.errors import Conflict, NotFound, RunyardError, SpecError
from service.settings import Settings
from service.tuning import repository
from service.tuning import service as tuning_service
from service.tuning.schemas import TuningJobCreate, TuningJobPublic

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

log = logging.getLogger(__name__)

KIND = names.TUNING_JOB
_STATUS_ORDER = {"InProgress": 0, "Stopping": 1}


class TuningController:
    def __init__(self, settings: Settings, api_client: ApiClient) -> None:
        from kubernetes import client

        self.settings = settings
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)

    def sync(self) -> None:
        """One pass over every resource of the mapped namespaces."""
        from kubernetes.client.exceptions import ApiException

        for namespace, project in self.settings.controller.namespaces.items():
            try:
                listed = cast(
                    dict[str, Any],
                    self.custom.list_namespaced_custom_object(
                        names.GROUP, names.VERSION, namespace, KIND.plural
                    ),
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
                # The cluster has no HyperparameterTuningJob CRD (a chart from before it):
                # TrainingJobs still work.
                log.info("no %s resources in %s: %s", KIND.kind, namespace, exc.reason)
                continue
            for resource in listed.get("items", []):
                try:
                    self.reconcile(resource, project)
                except ApiException as exc:
                    # Changed meanwhile (409) or gone (404): the next pass reads it again.
                    log.info("%s/%s: %s", namespace, resources.name_of(resource), exc.reason)

    def reconcile(self, resource: dict[str, Any], project: str) -> None:
        if resource["metadata"].get("deletionTimestamp"):
            self._finalize(resource, project)
            return
        if names.FINALIZER not in resources.finalizers_of(resource):
            resource = resources.set_finalizers(
                self.custom, KIND, resource, [*resources.finalizers_of(resource), names.FINALIZER]
            )
        before = _status(resource)
        tuning = self._tuning(resource, project)
        if tuning is None:
            tuning = self._create(resource, project, before)
            if tuning is None:
                return
        elif not _made_for(tuning, resource):
            self._refuse(
                resource,
                before,
                "NameTaken",
                f"metadata.name: project {project!r} has a tuning job named "
                f"{resources.name_of(resource)!r} already, not made for this resource",
            )
            return
        self._show(resource, before, tuning)

    def _create(
        self, resource: dict[str, Any], project: str, before: TuningResourceStatus
    ) -> TuningJobPublic | None:
        if before.tuning_job_id is not None:
            # Created once, and its tuning job is gone: creating it again would run its
            # trials twice.
            message = f"tuning job {before.tuning_job_id} is no longer in Runyard"
            self._refuse(resource, before, "TuningJobLost", message)
            return None
        try:
            spec = _spec(resource)
            with session_scope(self.settings.database_url) as session:
                tuning_service.create(session, self.settings, spec, project)
        except SpecError as exc:
            self._refuse(resource, before, "Invalid", _in_resource(exc))
            return None
        except Conflict:
            return None  # created meanwhile (by this pass's earlier try): the next finds it
        except RunyardError as exc:
            self._refuse(resource, before, type(exc).__name__, exc.message)
            return None
        return self._tuning(resource, project)

    def _refuse(
        self, resource: dict[str, Any], before: TuningResourceStatus, reason: str, message: str
    ) -> None:
        now = utcnow()
        accepted = status.set_condition(before.conditions, "Accepted", False, reason, message, now)
        after = before.model_copy(update={"conditions": accepted})
        if after.body() == before.body():
            return
        events.post(self.core, resource, "refused", reason, message, now, warning=True)
        resources.write_status(self.custom, KIND, resource, after.body())

    def _tuning(self, resource: dict[str, Any], project: str) -> TuningJobPublic | None:
        viewer = resources.principal(project)
        with session_scope(self.settings.database_url, readonly=True) as session:
            try:
                found = tuning_service.get(session, resources.name_of(resource), viewer)
            except NotFound:
                return None
            return tuning_service.public(session, found)

    def _show(
        self, resource: dict[str, Any], before: TuningResourceStatus, tuning: TuningJobPublic
    ) -> dict[str, Any]:
        """The tuning job's status written to the resource, a status it reached for the
        first time posted as an Event; the resource as it is now."""
        now = utcnow()
        after = from_tuning_job(tuning, before, now)
        if after.status != before.status:
            events.post(
                self.core,
                resource,
                # Named in the order the statuses come, as kubectl sorts Events of
                # one second by name.
                f"s{_STATUS_ORDER.get(tuning.status, 2)}-{tuning.status.lower()}",
                tuning.status,
                _said(tuning),
                now,
                warning=tuning.status == "Failed",
            )
        if after.body() == before.body():
            return resource
        return resources.write_status(self.custom, KIND, resource, after.body())

    def _finalize(self, resource: dict[str, Any], project: str) -> None:
        if names.FINALIZER not in resources.finalizers_of(resource):
            return
        tuning = self._tuning(resource, project)
        if tuning is not None and _made_for(tuning, resource):
            before = _status(resource)
            if tuning.status not in repository.TERMINAL:
                if tuning.status == "InProgress":
                    self._stop(tuning, project)
                    tuning = self._tuning(resource, project) or tuning
                self._show(resource, before, tuning)
                return  # the tuner stops its trials; a later pass sees it ended
            resource = self._show(resource, before, tuning)
        kept = [each for each in resources.finalizers_of(resource) if each != names.FINALIZER]
        resources.set_finalizers(self.custom, KIND, resource, kept)

    def _stop(self, tuning: TuningJobPublic, project: str) -> None:
        try:
            with session_scope(self.settings.database_url) as session:
                tuning_service.stop(
                    session, self.settings, tuning.name, resources.principal(project), project
                )
        except Conflict:
            pass  # it ended meanwhile


def _spec(resource: dict[str, Any]) -> TuningJobCreate:
    return resources.request(resource, TuningJobCreate, crd.tuning_request_schema())


def _in_resource(error: SpecError) -> str:
    return resources.in_resource(error, crd.tuning_request_schema())


def _made_for(tuning: TuningJobPublic, resource: dict[str, Any]) -> bool:
    return resources.made_for(tuning.spec.tags, resource)


def _status(resource: dict[str, Any]) -> TuningResourceStatus:
    return TuningResourceStatus.model_validate(resource.get("status") or {})


def _said(tuning: TuningJobPublic) -> str:
    """An Event's message for the status the tuning job reached."""
    if tuning.failure_reason:
        return tuning.failure_reason
    best = tuning.best_trial
    if tuning.status == "Completed" and best is not None:
        return (
            f"best trial {best.name} ({tuning.spec.metric_of(best.definition)} "
            f"{best.objective:.6g}) of "
            f"{len(tuning.trials)}"
        )
    return f"{tuning.status}: {tuning.strategy} search, {tuning.max_trials} trials in all"
