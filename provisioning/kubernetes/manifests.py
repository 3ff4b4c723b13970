"""The Kubernetes objects of one job, built from its launch request: pure data, no client.

Per job, in the configured namespace::

    ConfigMap <base>            the root: every instance's config files; the others are
                                owned by it, so deleting it deletes the whole job
    Secret    <base>-token      each instance's token, which its runtime reports with
    Service   <base>            headless, so algo-N.<base> resolve before pods are ready
    Pod       <base>-algo-N     one per instance: the runtime image running `train`
    PodGroup  <base>            only with the Volcano gang scheduler

``<base>`` is the job name made a DNS label plus part of the job id: unique, stable across
retries (a retried launch finds what an earlier one created), at most 63 characters with
the host suffix.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any

from contract import storage, variables
from contract.images import BUILTIN, Choice
from contract.instance_config import Placement
from contract.layout import CONFIG_DIR, IMAGE_BASE_DIR
from provisioning.base import LaunchRequest, file_uri_path
from provisioning.catalog import InstanceType
from provisioning.instance_files import instance_files
from provisioning.kubernetes.settings import KubernetesSettings

# The key of the launch agents' shared secret in the job's Secret.
AGENT_KEY_KEY = "agent-key"


def token_key(host: str) -> str:
    """The key of ``host``'s own token in the job's Secret (each pod reads only its own)."""
    return f"token-{host}"


LABEL_JOB_ID = "runyard.io/job-id"
LABEL_JOB_NAME = "runyard.io/job-name"
LABEL_HOST = "runyard.io/host"
# The owner's uid exists only once the root ConfigMap does; apply() fills it in.
OWNER_UID_PLACEHOLDER = "<uid of the job's ConfigMap>"
LAUNCH_AGENT = ("python3", "-m", "runtime.launch.remote_agent")
# A node the size of the instance type also runs the kubelet and daemon sets: pods ask for
# this share of it, so one pod fits one node of that size.
NODE_SHARE = 0.9
SHARED_MEMORY = "shm"
_BASE_NAME_LEN = 40


def base_name(job_name: str, job_id: str) -> str:
    label = re.sub(r"[^a-z0-9-]+", "-", job_name.lower())[:_BASE_NAME_LEN].strip("-")
    # Services need a leading letter (DNS-1035); job names may start with a digit.
    return f"ry-{label}-{job_id[:8]}" if label else f"ry-{job_id[:8]}"


def pod_name(base: str, host: str) -> str:
    return f"{base}-{host}"


def config_key(host: str, path: str) -> str:
    """ConfigMap keys cannot hold '/': ``algo-1.resourceconfig.json``."""
    return f"{host}.{path.rsplit('/', 1)[-1]}"


def service_domain(base: str, settings: KubernetesSettings) -> str:
    """The headless Service's DNS name, under which every pod of the job has its hostname."""
    return f"{base}.{settings.namespace}.svc.{settings.cluster_domain}"


def host_address(host: str, base: str, settings: KubernetesSettings) -> str:
    return f"{host}.{service_domain(base, settings)}"


def build(
    request: LaunchRequest,
    settings: KubernetesSettings,
    *,
    instance_type: InstanceType,
    artifact_root: str,
    master_port: int,
    grace_seconds: float,
) -> list[dict[str, Any]]:
    """Every object of the job, root first; the order in which apply() creates them.

    ``instance_type`` is what the server's catalog says of the job's type: each pod asks
    for its resources and runs on its nodes.

    ``grace_seconds`` is the longest any stop gives the scripts (a spot interruption's
    grace is longer than a stop's): what the pods get when something other than Runyard
    evicts them, such as a node drained before its spot capacity goes.
    """
    namespace = settings.namespace
    base = base_name(request.job.name, request.job.id)
    hosts = request.hosts
    addresses = {host: host_address(host, base, settings) for host in hosts}
    labels = {LABEL_JOB_ID: request.job.id, LABEL_JOB_NAME: request.job.name}
    placement = Placement(
        master_addr=hosts[0],
        master_port=master_port,
        launch_agent=LAUNCH_AGENT,
        agent_port=settings.agent_port,
    )
    files = {
        host: instance_files(
            request, host, placement, host_addresses=addresses, network_interface="eth0"
        )
        for host in hosts
    }
    root: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(base, namespace, labels),
        "data": {
            config_key(host, path): content
            for host in hosts
            for path, content in sorted(files[host].items())
        },
    }
    owned = _metadata(base, namespace, labels, owner=base)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {**owned, "name": f"{base}-token"},
        "type": "Opaque",
        "stringData": {
            AGENT_KEY_KEY: request.agent_key,
            **{token_key(host): request.tokens[host] for host in request.hosts},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": owned,
        "spec": {
            "clusterIP": "None",
            # DNS records exist as soon as pods have addresses, not once they are ready:
            # the instances resolve each other while starting.
            "publishNotReadyAddresses": True,
            "selector": {LABEL_JOB_ID: request.job.id},
            "ports": [
                {"name": "rendezvous", "port": master_port, "protocol": "TCP"},
                {"name": "agent", "port": settings.agent_port, "protocol": "TCP"},
            ],
        },
    }
    objects: list[dict[str, Any]] = [root, secret, service]
    if settings.gang_scheduler == "volcano":
        objects.append(_pod_group(base, owned, len(hosts), settings))
    for host in hosts:
        objects.append(
            _pod(
                request,
                settings,
                instance_type=instance_type,
                base=base,
                host=host,
                labels={**labels, LABEL_HOST: host},
                owned=owned,
                config_paths=sorted(files[host]),
                artifact_root=artifact_root,
                grace_seconds=grace_seconds,
            )
        )
    # Each object its own data: shared lists would render as YAML anchors in a dry run.
    return [copy.deepcopy(manifest) for manifest in objects]


def container_image(image: Choice, settings: KubernetesSettings) -> str:
    """The OCI image a pod of the job runs: a custom container's own, a catalog image's from
    the operator's repository, or Runyard's runtime image for the built-in one."""
    if image.container is not None:
        return image.container
    if image.image != BUILTIN:
        return f"{settings.images_repository}/{image.image}"
    return settings.image


def _metadata(
    name: str, namespace: str, labels: dict[str, str], *, owner: str | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if owner is not None:
        # No blockOwnerDeletion: only a foreground deletion waits on it, and Runyard deletes
        # in the background; setting it needs update on configmaps/finalizers where owner
        # references are enforced (OpenShift).
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": OWNER_UID_PLACEHOLDER}
        ]
    return metadata


def _pod_group(
    base: str, owned: dict[str, Any], members: int, settings: KubernetesSettings
) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": members}
    if settings.gang_queue:
        spec["queue"] = settings.gang_queue
    if settings.priority_class:
        spec["priorityClassName"] = settings.priority_class
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {**owned, "name": base},
        "spec": spec,
    }


def _pod(
    request: LaunchRequest,
    settings: KubernetesSettings,
    *,
    instance_type: InstanceType,
    base: str,
    host: str,
    labels: dict[str, str],
    owned: dict[str, Any],
    config_paths: list[str],
    artifact_root: str,
    grace_seconds: float,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {**owned, "name": pod_name(base, host), "labels": labels}
    scheduler: dict[str, Any] = {}
    if settings.gang_scheduler == "volcano":
        scheduler["schedulerName"] = "volcano"
        metadata["annotations"] = {"scheduling.k8s.io/group-name": base}
    elif settings.gang_scheduler == "kueue":
        # Kueue's plain-pod groups: admitted together once all N exist.
        metadata["labels"] = {
            **labels,
            "kueue.x-k8s.io/queue-name": settings.gang_queue or "default",
            "kueue.x-k8s.io/pod-group-name": base,
        }
        metadata["annotations"] = {"kueue.x-k8s.io/pod-group-total-count": str(len(request.hosts))}
    environment = variables.instance_environment(
        base_dir=IMAGE_BASE_DIR,
        service_url=request.service_url,
        job_name=request.job.name,
        job_id=request.job.id,
        host=host,
        token=None,  # read from the job's Secret, never written into the pod spec
        agent_key=None,
    )
    env: list[dict[str, Any]] = [
        *({"name": name, "value": value} for name, value in environment.items()),
        {
            "name": variables.JOB_TOKEN,
            "valueFrom": {"secretKeyRef": {"name": f"{base}-token", "key": token_key(host)}},
        },
        {
            "name": variables.AGENT_KEY,
            "valueFrom": {"secretKeyRef": {"name": f"{base}-token", "key": AGENT_KEY_KEY}},
        },
        *_s3_environment(settings, machine_credentials=not request.aws_credentials),
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "config", "mountPath": f"{IMAGE_BASE_DIR}/{CONFIG_DIR}", "readOnly": True},
        {"name": SHARED_MEMORY, "mountPath": "/dev/shm"},  # noqa: S108 (the container's own)
    ]
    volumes: list[dict[str, Any]] = [
        {
            "name": "config",
            "configMap": {
                "name": base,
                "items": [
                    {"key": config_key(host, path), "path": path.rsplit("/", 1)[-1]}
                    for path in config_paths
                ],
            },
        },
        # NCCL and torch's data loaders use shared memory; a container's default is 64 MiB.
        {"name": SHARED_MEMORY, "emptyDir": {"medium": "Memory"}},
    ]
    if settings.artifact_volume_claim and artifact_root.startswith("file://"):
        mounts.append({"name": "artifacts", "mountPath": file_uri_path(artifact_root)})
        volumes.append(
            {
                "name": "artifacts",
                "persistentVolumeClaim": {"claimName": settings.artifact_volume_claim},
            }
        )
    spec: dict[str, Any] = {
        "hostname": host,
        "subdomain": base,
        # So a bare "algo-2" resolves, as SageMaker's hosts do.
        "dnsConfig": {"searches": [service_domain(base, settings)]},
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": math.ceil(grace_seconds),
        **scheduler,
        "containers": [
            {
                "name": "runtime",
                "image": container_image(request.spec.image, settings),
                "imagePullPolicy": settings.image_pull_policy,
                "command": ["train"],
                "workingDir": IMAGE_BASE_DIR,
                "env": env,
                "ports": [
                    {"name": "agent", "containerPort": settings.agent_port, "protocol": "TCP"}
                ],
                "resources": resources(instance_type, request.spec.volume_size),
                "volumeMounts": mounts,
            }
        ],
        "volumes": volumes,
    }
    if settings.service_account:
        spec["serviceAccountName"] = settings.service_account
    spec.update(placement(instance_type, settings))
    if settings.priority_class:
        spec["priorityClassName"] = settings.priority_class
    if settings.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_secrets]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _s3_environment(
    settings: KubernetesSettings, *, machine_credentials: bool
) -> list[dict[str, Any]]:
    """Where S3 is, from the operator's Secret (``s3_secret``), one variable per key it may
    hold; and its keys, only where the job's instances bring their own credentials: the
    service otherwise gives each job credentials limited to its own locations, and keys
    that reach further have no place in its pods."""
    if not settings.s3_secret:
        return []
    names = [*storage.S3_ENDPOINT_ENV, *(variables.AWS_STATIC_KEYS if machine_credentials else ())]
    return [
        {
            "name": name,
            "valueFrom": {
                "secretKeyRef": {"name": settings.s3_secret, "key": name, "optional": True}
            },
        }
        for name in names
    ]


def resources(kind: InstanceType, volume_size_gib: int) -> dict[str, dict[str, str]]:
    """Requests and limits from the catalog: a pod is the instance it stands for."""
    requests: dict[str, str] = {"ephemeral-storage": f"{volume_size_gib}Gi"}
    limits: dict[str, str] = {"ephemeral-storage": f"{volume_size_gib}Gi"}
    if kind.vcpus is not None:
        requests["cpu"] = f"{math.floor(kind.vcpus * NODE_SHARE * 1000)}m"
        limits["cpu"] = str(kind.vcpus)
    if kind.memory_gib is not None:
        requests["memory"] = f"{math.floor(kind.memory_gib * NODE_SHARE * 1024)}Mi"
        limits["memory"] = f"{math.floor(kind.memory_gib * 1024)}Mi"
    if kind.gpus:
        # Extended resources: the request must equal the limit.
        requests[kind.gpu_resource] = limits[kind.gpu_resource] = str(kind.gpus)
    return {"requests": requests, "limits": limits}


def placement(kind: InstanceType, settings: KubernetesSettings) -> dict[str, Any]:
    """The pod's ``nodeSelector`` and ``tolerations``: the backend's own, then the instance
    type's (whose label wins where both name one; the nodes of a type are the narrower
    choice)."""
    found: dict[str, Any] = {}
    selector = {**settings.node_selector, **dict(kind.node_selector)}
    if selector:
        found["nodeSelector"] = selector
    tolerations = [dict(toleration) for toleration in settings.tolerations]
    for toleration in kind.tolerations:
        if toleration.manifest() not in tolerations:
            tolerations.append(toleration.manifest())
    if tolerations:
        found["tolerations"] = tolerations
    return found
