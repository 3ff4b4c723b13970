"""The Kubernetes backend's configuration, nested in the server's settings.

Read from one variable holding a JSON object (``RUNYARD_KUBERNETES='{...}'``) or from one
variable per field (``RUNYARD_KUBERNETES__NAMESPACE=jobs``). Only an operator sets these;
nothing here comes from a job spec.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# Kubernetes object names: DNS-1123 labels (pods, services) and subdomains.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class KubernetesSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Where the client finds the cluster: in-cluster service account when both are unset.
    kubeconfig: str | None = None
    context: str | None = None
    # A plain API URL with no credentials (a local proxy, `kubectl proxy`, a mock server).
    api_url: str | None = None
    namespace: str = Field(default="runyard-jobs", pattern=DNS_LABEL, max_length=63)
    # The cluster's DNS domain: pods find each other as algo-N.<base>.<namespace>.svc.<it>.
    cluster_domain: str = Field(default="cluster.local", pattern=DNS_SUBDOMAIN, max_length=253)
    # What a job's pods run: this (Runyard's runtime image) for the built-in image, and a
    # catalog image (contract.images) as <images_repository>/<its name>, such as
    # runyard/pytorch-training:2.13.0-cpu-py311 (runtime/Dockerfile builds them).
    image: str = "runyard/runtime:0.1.0"
    images_repository: str = Field(default="runyard", min_length=1, max_length=200)
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    image_pull_secrets: list[str] = Field(default_factory=list)
    # The job pods' own identity; it needs no Kubernetes permissions at all.
    service_account: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    priority_class: str | None = None
    # All-or-nothing start: every pod must be scheduled within this many seconds, or the
    # job fails naming the cause ("fail") or keeps waiting with a pending reason ("wait").
    # A scheduled pod still pulling its image is not waiting for capacity: not counted.
    schedule_timeout_seconds: float = Field(default=300.0, gt=0)
    on_unschedulable: Literal["fail", "wait"] = "fail"
    # Gang scheduling by an installed scheduler: a Volcano PodGroup, or a Kueue queue label.
    gang_scheduler: Literal["none", "volcano", "kueue"] = "none"
    gang_queue: str | None = None
    # A ReadWriteMany claim mounted at the artifact root's path in every pod, so file://
    # sources, channels and outputs are the same paths inside the job as on the server.
    artifact_volume_claim: str | None = None
    # The port each pod's runtime listens on for mpirun's launch agent.
    agent_port: int = Field(default=7077, ge=1024, le=65535)
