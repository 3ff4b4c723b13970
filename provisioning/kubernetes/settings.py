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

    kubeconfig: str | None = Field(
        default=None,
        description="A kubeconfig file to reach the cluster with. With neither it nor "
        "`context` (nor `api_url`) set: the in-cluster service account.",
    )
    context: str | None = Field(default=None, description="The kubeconfig's context to use.")
    api_url: str | None = Field(
        default=None,
        description="A plain API URL reached with no credentials (a local proxy, "
        "`kubectl proxy`, a mock server); it wins over `kubeconfig` and `context`.",
    )
    namespace: str = Field(
        default="runyard-jobs",
        pattern=DNS_LABEL,
        max_length=63,
        description="The namespace a job's pods, Service and config maps are made in.",
    )
    cluster_domain: str = Field(
        default="cluster.local",
        pattern=DNS_SUBDOMAIN,
        max_length=253,
        description="The cluster's DNS domain: pods find each other as "
        "`algo-N.<base>.<namespace>.svc.<it>`.",
    )
    image: str = Field(
        default="runyard/runtime:0.1.0",
        description="What a job's pods run for the built-in image: Runyard's runtime image "
        "(`runtime/Dockerfile` builds it).",
    )
    images_repository: str = Field(
        default="runyard",
        min_length=1,
        max_length=200,
        description="Where a catalog image is pulled from: `<it>/<the image's name>`, such "
        "as `runyard/pytorch-training:2.13.0-cpu-py311` (`runtime/Dockerfile` builds them).",
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent", description="The job containers' `imagePullPolicy`."
    )
    image_pull_secrets: list[str] = Field(
        default_factory=list,
        description="Secrets, by name, that the pods pull their images with.",
    )
    service_account: str | None = Field(
        default=None,
        description="The job pods' own identity; it needs no Kubernetes permissions at all. "
        "Unset: the namespace's default. Its annotations can give the pods a cloud role "
        "(IRSA's `eks.amazonaws.com/role-arn`, GKE Workload Identity's "
        "`iam.gke.io/gcp-service-account`), which they use with "
        "`RUNYARD_INSTANCE_CREDENTIALS=machine`.",
    )
    s3_secret: str | None = Field(
        default=None,
        pattern=DNS_SUBDOMAIN,
        max_length=253,
        description="A Secret in `namespace` whose keys become the job pods' S3 settings: "
        "`AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, `AWS_REGION` and `AWS_DEFAULT_REGION` "
        "always, and `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN` "
        "only with `RUNYARD_INSTANCE_CREDENTIALS=machine` (otherwise each job gets its own "
        "credentials from the service). Each key may be missing. Unset: the pods know "
        "only AWS's own endpoints.",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="The job pods' `nodeSelector`: labels a node must have to run them.",
    )
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list,
        description="The job pods' `tolerations`, as Kubernetes writes them.",
    )
    priority_class: str | None = Field(
        default=None,
        description="The job pods' (and Volcano pod groups') `priorityClassName`.",
    )
    schedule_timeout_seconds: float = Field(
        default=300.0,
        gt=0,
        description="All-or-nothing start: every pod of a job must be scheduled within this "
        "many seconds, or `on_unschedulable` decides. A scheduled pod still pulling its "
        "image is not waiting for capacity: not counted.",
    )
    on_unschedulable: Literal["fail", "wait"] = Field(
        default="fail",
        description="What a job whose pods are not all scheduled in time does: `fail` "
        "naming the cause, or `wait` on, with a pending reason.",
    )
    gang_scheduler: Literal["none", "volcano", "kueue"] = Field(
        default="none",
        description="Gang scheduling by an installed scheduler: a Volcano PodGroup "
        "(`volcano`), or a Kueue pod group and queue label (`kueue`).",
    )
    gang_queue: str | None = Field(
        default=None,
        description="The Volcano queue, or the Kueue queue (`default` when unset), that "
        "jobs' pods go to.",
    )
    artifact_volume_claim: str | None = Field(
        default=None,
        description="A ReadWriteMany claim mounted at the artifact root's path in every pod, "
        "so `file://` sources, channels and outputs are the same paths inside the job as on "
        "the server.",
    )
    agent_port: int = Field(
        default=7077,
        ge=1024,
        le=65535,
        description="The port each pod's runtime serves mpirun's launch agent on.",
    )
