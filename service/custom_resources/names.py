"""The TrainingJob resource's names: its API group, version, kind and the marks the
controller leaves on it. One place, read by the CRD generator, the controller and the
chart's tests."""

from __future__ import annotations

GROUP = "runyard.dev"
VERSION = "v1"
KIND = "TrainingJob"
PLURAL = "trainingjobs"
SINGULAR = "trainingjob"
SHORT_NAMES = ("tj",)
API_VERSION = f"{GROUP}/{VERSION}"
CRD_NAME = f"{PLURAL}.{GROUP}"

# Held on every resource the controller has taken on: the resource is removed only once
# its job has ended and its instances are gone.
FINALIZER = f"{GROUP}/stop-job"
# The job's tag that names the resource it was made for (its uid): how a controller that
# restarted finds the job it submitted instead of submitting another.
RESOURCE_TAG = f"{GROUP}/resource-uid"
# What Events name as their source.
COMPONENT = "runyard-controller"
