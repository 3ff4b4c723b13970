"""Events (core/v1) on a resource (a TrainingJob, a HyperparameterTuningJob): what
``kubectl describe`` lists.

Each of the job's transitions (each status of a tuning job) is posted once, under a name
made from the resource's uid and the transition's place: a controller that restarts and
posts it again is refused (409) by the API server instead of repeating it.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from service.custom_resources import names

if TYPE_CHECKING:
    from kubernetes.client import CoreV1Api

# Secondary statuses that tell of something gone wrong.
_WARNINGS = frozenset({"Failed", "MaxRuntimeExceeded", "MaxWaitTimeExceeded", "Interrupted"})
MAX_MESSAGE = 1024


def post(
    api: CoreV1Api,
    resource: dict[str, Any],
    key: str,
    reason: str,
    message: str,
    when: datetime,
    *,
    warning: bool = False,
) -> None:
    """Post one Event about ``resource``; ``key`` makes its name, once per resource."""
    from kubernetes.client.exceptions import ApiException

    meta = resource["metadata"]
    stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    # The client takes a plain dict as well as its model.
    body: Any = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta['name']}.{meta['uid'][:8]}-{key}",
            "namespace": meta["namespace"],
        },
        "involvedObject": {
            "apiVersion": resource.get("apiVersion", names.API_VERSION),
            "kind": resource.get("kind", names.KIND),
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "type": "Warning" if warning else "Normal",
        "source": {"component": names.COMPONENT},
        "reportingComponent": names.COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    try:
        api.create_namespaced_event(meta["namespace"], body)
    except ApiException as exc:
        if exc.status != 409:  # posted already, by this controller before it restarted
            raise


def is_warning(secondary_status: str) -> bool:
    return secondary_status in _WARNINGS
