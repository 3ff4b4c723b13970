"""The Kubernetes backend with the real client against a Kubernetes API server (kmock).

The manifests are pinned by a golden file and checked against the official schemas of a
current Kubernetes; the rest drives pods through their phases as a kubelet would and
checks what the backend makes of them and what it leaves behind (nothing).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from fastapi.testclient import TestClient

from contract import storage, variables
from contract.failure_causes import FailureCause
from contract.hosts import host_names
from provisioning.base import (
    CONSOLE_BYTES,
    REDACTED,
    InstanceState,
    JobRef,
    LaunchRequest,
    TeardownError,
)
from provisioning.catalog import InstanceCatalog
from provisioning.catalog_settings import InstanceTypeDefinition
from provisioning.kubernetes import manifests
from provisioning.kubernetes.backend import KubernetesBackend, KubernetesError
from provisioning.kubernetes.client import shared_client
from provisioning.kubernetes.settings import KubernetesSettings
from service.jobs.schemas import JobCreate
from service.kit.errors import SpecError, refuse
from service.settings import Settings
from tests.conftest import job_spec, make_settings
from tests.kube import (
    NAMESPACE,
    KubeServer,
    exited,
    running,
    set_pod_status,
    starting,
    unschedulable,
)

GOLDEN = Path(__file__).parent / "golden" / "kubernetes_manifests.yaml"
KUBERNETES_VERSION = "1.37.0"
JOB_ID = "3f2a9c1e" + "0" * 24


def _request(job_id: str = JOB_ID, name: str = "Bert-Large-2026", **spec: Any) -> LaunchRequest:
    values: dict[str, Any] = {
        "name": name,
        "entry_point": "train.py",
        "source_uri": "file:///srv/runyard/artifacts/sources/abc.tar.gz",
        "instance_type": "ml.p3.16xlarge",
        "instance_count": 2,
        "volume_size": 100,
        "distribution": {"torch_distributed": {"enabled": True}},
        "hyperparameters": {"epochs": 3},
        "output_path": "file:///srv/runyard/artifacts",
    }
    values.update(spec)
    return LaunchRequest(
        job=JobRef(job_id, name),
        spec=JobCreate.model_validate(values).job_spec_at(values["output_path"]),
        service_url="http://runyard-api.runyard.svc:8642",
        tokens={host: f"ryi_secret-{host}" for host in host_names(values["instance_count"])},
        agent_key="shared-secret",
    )


def _backend(
    url: str = "http://127.0.0.1:1",
    *,
    kill_wait: float = 10.0,
    stop_grace: float = 5.0,
    spot_grace: float = 7.5,
    artifact_root: str = "file:///srv/runyard/artifacts",
    instance_catalog: InstanceCatalog | None = None,
    **settings: Any,
) -> KubernetesBackend:
    configured = KubernetesSettings.model_validate({"api_url": url, **settings})
    return KubernetesBackend(
        lambda: shared_client(configured.model_dump_json()),
        configured,
        artifact_root=artifact_root,
        stop_grace=stop_grace,
        spot_grace=spot_grace,
        teardown_grace=1,
        poll_interval=0.02,
        kill_wait=kill_wait,
        instance_catalog=instance_catalog,
    )


# -- the manifests -------------------------------------------------------------------


def test_manifests_are_the_golden_ones() -> None:
    backend = _backend(
        node_selector={"pool": "gpu"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        priority_class="training",
        service_account="runyard-job",
        artifact_volume_claim="runyard-artifacts",
    )
    rendered = backend.materialize(_request()).render()
    if os.environ.get("RUNYARD_TEST_UPDATE_GOLDEN"):
        GOLDEN.write_text(rendered)
    assert rendered == GOLDEN.read_text(), "regenerate with RUNYARD_TEST_UPDATE_GOLDEN=1"


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"s3_secret": "job-s3", "service_account": "trainer"},
        {"gang_scheduler": "kueue", "gang_queue": "team-a"},
        {"gang_scheduler": "volcano", "gang_queue": "team-a", "image_pull_secrets": ["reg"]},
    ],
)
def test_every_manifest_passes_the_official_schema(settings: dict[str, Any]) -> None:
    objects = _backend(**settings).materialize(_request()).public["manifests"]
    kinds = [manifest["kind"] for manifest in objects]
    assert kinds[:3] == ["ConfigMap", "Secret", "Service"]
    assert kinds.count("Pod") == 2
    for manifest in objects:
        if manifest["kind"] == "PodGroup":
            continue  # Volcano's CRD: not part of Kubernetes' own schemas
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


# An instance type an operator adds (RUNYARD_INSTANCE_TYPES): Inferentia2, on its own nodes.
INF2 = {
    "name": "ml.inf2.48xlarge",
    "vcpus": 192,
    "memory_gib": 768,
    "gpus": 12,
    "gpu_model": "Inferentia2",
    "gpu_resource": "aws.amazon.com/neuron",
    "node_selector": {"node.kubernetes.io/instance-type": "inf2.48xlarge"},
    "tolerations": [
        {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "spot", "value": "true", "effect": "NoExecute", "tolerationSeconds": 120},
    ],
}


def _with_inf2() -> InstanceCatalog:
    return InstanceCatalog.with_extra([InstanceTypeDefinition.model_validate(INF2).instance_type()])


def test_a_configured_types_pods_ask_for_its_accelerators_on_its_nodes() -> None:
    catalog = _with_inf2()
    backend = _backend(
        instance_catalog=catalog,
        node_selector={"pool": "training", "node.kubernetes.io/instance-type": "any"},
        tolerations=[
            {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
            {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"},
        ],
    )
    objects = backend.materialize(_request(instance_type="ml.inf2.48xlarge")).public["manifests"]
    for manifest in objects:
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
    pods = [manifest["spec"] for manifest in objects if manifest["kind"] == "Pod"]
    assert len(pods) == 2
    for pod in pods:
        resources = pod["containers"][0]["resources"]
        assert resources["limits"] == {
            "ephemeral-storage": "100Gi",
            "cpu": "192",
            "memory": f"{768 * 1024}Mi",
            "aws.amazon.com/neuron": "12",
        }
        assert resources["requests"]["aws.amazon.com/neuron"] == "12"
        assert "nvidia.com/gpu" not in resources["requests"]
        # The backend's labels, and the type's over them where both name one.
        assert pod["nodeSelector"] == {
            "pool": "training",
            "node.kubernetes.io/instance-type": "inf2.48xlarge",
        }
        # The backend's tolerations, then those of the type it does not have already.
        assert pod["tolerations"] == [
            {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
            {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"},
            {
                "key": "spot",
                "operator": "Equal",
                "value": "true",
                "effect": "NoExecute",
                "tolerationSeconds": 120,
            },
        ]


def test_a_type_alone_places_its_pods_and_a_built_in_one_nowhere_in_particular() -> None:
    catalog = _with_inf2()
    pod = _backend(instance_catalog=catalog).materialize(_request(instance_type="ml.inf2.48xlarge"))
    spec = pod.public["manifests"][-1]["spec"]
    assert spec["nodeSelector"] == INF2["node_selector"]
    assert len(spec["tolerations"]) == 2
    built_in = _backend(instance_catalog=catalog).materialize(_request()).public["manifests"][-1]
    assert "nodeSelector" not in built_in["spec"]
    assert "tolerations" not in built_in["spec"]


def test_a_type_taken_out_of_the_catalog_since_fails_the_launch_naming_it() -> None:
    with pytest.raises(KubernetesError, match=r"'ml.inf2.48xlarge' is no longer in this server"):
        _backend().materialize(_request(instance_type="ml.inf2.48xlarge"))


def test_names_are_dns_labels_even_for_long_uppercase_job_names() -> None:
    name = "A" * 63
    objects = _backend().materialize(_request(name=name)).public["manifests"]
    for manifest in objects:
        metadata = manifest["metadata"]
        assert len(metadata["name"]) <= 63
        assert metadata["name"] == metadata["name"].lower()
        assert metadata["labels"][manifests.LABEL_JOB_NAME] == name


def test_pods_get_the_instance_types_resources_and_the_token_only_by_reference() -> None:
    materialized = _backend().materialize(_request())
    pod = materialized.public["manifests"][-1]
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"] == {
        "ephemeral-storage": "100Gi",
        "cpu": "64",
        "memory": "499712Mi",
        "nvidia.com/gpu": "8",
    }
    token = next(env for env in container["env"] if env["name"] == "RUNYARD_JOB_TOKEN")
    assert "value" not in token
    assert token["valueFrom"]["secretKeyRef"]["key"] == "token-algo-2"  # the last pod's own
    assert materialized.public["manifests"][1]["stringData"] == {
        "agent-key": REDACTED,
        "token-algo-1": REDACTED,
        "token-algo-2": REDACTED,
    }
    # The real plan keeps each instance's token for apply(); only what is shown is redacted.
    assert materialized.plan.objects[1]["stringData"] == {
        "agent-key": "shared-secret",
        "token-algo-1": "ryi_secret-algo-1",
        "token-algo-2": "ryi_secret-algo-2",
    }
    assert "ryi_secret" not in materialized.render()
    assert "shared-secret" not in materialized.render()


def test_the_config_map_holds_each_hosts_config_with_cluster_addresses() -> None:
    root = _backend().materialize(_request()).public["manifests"][0]
    base = root["metadata"]["name"]
    resource = yaml.safe_load(root["data"]["algo-2.resourceconfig.json"])
    assert resource["current_host"] == "algo-2"
    assert resource["host_addresses"]["algo-1"] == f"algo-1.{base}.{NAMESPACE}.svc.cluster.local"
    runyard = yaml.safe_load(root["data"]["algo-1.runyard.json"])
    assert runyard["launch_agent"] == ["python3", "-m", "runtime.launch.remote_agent"]
    assert runyard["agent_port"] == 7077
    assert runyard["master_port"] == 7777


def test_the_cluster_domain_is_a_setting() -> None:
    objects = _backend(cluster_domain="k8s.example.internal").materialize(_request())
    root, pod = objects.public["manifests"][0], objects.public["manifests"][-1]
    base = root["metadata"]["name"]
    domain = f"{base}.{NAMESPACE}.svc.k8s.example.internal"
    resource = yaml.safe_load(root["data"]["algo-1.resourceconfig.json"])
    assert resource["host_addresses"] == {
        "algo-1": f"algo-1.{domain}",
        "algo-2": f"algo-2.{domain}",
    }
    assert pod["spec"]["dnsConfig"] == {"searches": [domain]}
    assert "cluster.local" not in objects.render()
    with pytest.raises(ValueError, match="cluster_domain"):
        KubernetesSettings(cluster_domain="Not A Domain")


def test_pods_keep_the_longest_grace_for_evictions() -> None:
    # A node drained for its spot capacity evicts with the pod's own grace: the spot one.
    pod = _backend(stop_grace=5, spot_grace=110).materialize(_request()).public["manifests"][-1]
    assert pod["spec"]["terminationGracePeriodSeconds"] == 110
    pod = _backend(stop_grace=30.2, spot_grace=0).materialize(_request()).public["manifests"][-1]
    assert pod["spec"]["terminationGracePeriodSeconds"] == 31


def test_the_artifact_mount_is_the_roots_decoded_path() -> None:
    backend = _backend(
        artifact_root="file:///srv/run%20yard/artifacts", artifact_volume_claim="artifacts"
    )
    pod = backend.materialize(_request()).public["manifests"][-1]
    mounts = {m["name"]: m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["artifacts"] == "/srv/run yard/artifacts"


def test_a_loopback_service_url_is_refused() -> None:
    backend, spec = _backend(artifact_volume_claim="artifacts"), _request().spec
    for url in ("http://127.0.0.1:8642", "http://localhost:8642", "http://[::1]:8642"):
        with pytest.raises(SpecError, match=r"pods cannot report to .*RUNYARD_PUBLIC_URL") as e:
            refuse(backend.check(spec, url))
        assert e.value.loc == ("backend",)
    refuse(backend.check(spec, "http://runyard-api.runyard.svc:8642"))


def test_planning_needs_no_cluster() -> None:
    calls = []

    def unreachable() -> Any:
        calls.append(1)
        raise AssertionError("a dry run must not talk to the cluster")

    backend = KubernetesBackend(
        unreachable, KubernetesSettings(), artifact_root="file:///a", stop_grace=1
    )
    assert backend.materialize(_request()).public["manifests"]
    assert calls == []


def _s3_refs(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        env["name"]: env["valueFrom"]["secretKeyRef"]
        for env in pod["spec"]["containers"][0]["env"]
        if env["name"].startswith("AWS_")
    }


def test_without_an_s3_secret_pods_know_nothing_of_s3(monkeypatch: pytest.MonkeyPatch) -> None:
    # The worker's own keys and endpoint stay where they are: nothing is copied from it.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "the-servers-own")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://minio.test:9000")
    materialized = _backend().materialize(dataclasses.replace(_request(), aws_credentials=False))
    for pod in materialized.public["manifests"][3:]:
        assert _s3_refs(pod) == {}
    assert "the-servers-own" not in materialized.render()
    assert "minio.test" not in materialized.render()
    with pytest.raises(ValueError, match="s3_secret"):
        KubernetesSettings(s3_secret="Not_A_Name")


# -- against the API server ----------------------------------------------------------


@pytest.fixture
def cluster(kube_server: KubeServer) -> Iterator[KubeServer]:
    yield kube_server
    for plural, name in kube_server.all_objects():
        if plural == "pods":
            kube_server.api().delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


def _pod(cluster: KubeServer, job: JobRef, host: str) -> str:
    return manifests.pod_name(manifests.base_name(job.name, job.id), host)


def test_submit_creates_the_job_owned_by_its_config_map(cluster: KubeServer) -> None:
    backend = _backend(cluster.url)
    request = _request()
    backend.submit(request)
    base = manifests.base_name(request.job.name, request.job.id)
    assert cluster.objects_of(JOB_ID) == [
        ("configmaps", base),
        ("pods", f"{base}-algo-1"),
        ("pods", f"{base}-algo-2"),
        ("secrets", f"{base}-token"),
        ("services", base),
    ]
    api = cluster.api()
    root_uid = api.read_namespaced_config_map(base, NAMESPACE).metadata.uid
    pod = api.read_namespaced_pod(f"{base}-algo-1", NAMESPACE)
    assert [(ref.kind, ref.name, ref.uid) for ref in pod.metadata.owner_references] == [
        ("ConfigMap", base, root_uid)
    ]
    # Deletion is in the background, which blockOwnerDeletion never held up; setting it
    # would need update on configmaps/finalizers where owner references are enforced.
    assert pod.metadata.owner_references[0].block_owner_deletion is None
    secret = api.read_namespaced_secret(f"{base}-token", NAMESPACE)
    assert secret.string_data == {
        "agent-key": "shared-secret",
        **{
            f"token-{host}": f"ryi_secret-{host}"
            for host in host_names(request.spec.instance_count)
        },
    }
    backend.teardown(request.job)
    assert cluster.objects_of(JOB_ID) == []


@pytest.mark.parametrize(
    ("service_credentials", "keys"),
    [(True, ()), (False, variables.AWS_STATIC_KEYS)],
    ids=["service", "machine"],
)
def test_pods_take_s3_from_the_named_secret_and_run_as_the_named_account(
    cluster: KubeServer, service_credentials: bool, keys: tuple[str, ...]
) -> None:
    backend = _backend(cluster.url, s3_secret="job-s3", service_account="trainer")
    request = dataclasses.replace(_request(), aws_credentials=service_credentials)
    backend.submit(request)
    api = cluster.api()
    for host in request.hosts:
        pod = api.read_namespaced_pod(_pod(cluster, request.job, host), NAMESPACE)
        assert pod.spec.service_account_name == "trainer"
        assert pod.spec.automount_service_account_token is False
        refs = {
            env.name: env.value_from.secret_key_ref
            for env in pod.spec.containers[0].env
            if env.name.startswith("AWS_")
        }
        # Where S3 is, always; keys only where the job's instances bring their own (the
        # service otherwise gives the job credentials limited to its own locations).
        assert set(refs) == {*storage.S3_ENDPOINT_ENV, *keys}
        for name, ref in refs.items():
            assert (ref.name, ref.key, ref.optional) == ("job-s3", name, True)
    backend.teardown(request.job)
    assert cluster.objects_of(JOB_ID) == []


def test_a_retried_submit_adopts_what_exists(cluster: KubeServer) -> None:
    backend = _backend(cluster.url)
    request = _request()
    backend.submit(request)
    before = cluster.objects_of(JOB_ID)
    backend.submit(request)  # the worker died after creating them; the retry adopts
    assert cluster.objects_of(JOB_ID) == before
    backend.teardown(request.job)


def test_a_config_map_of_another_job_is_not_adopted(cluster: KubeServer) -> None:
    backend = _backend(cluster.url)
    first = _request()
    backend.submit(first)
    # Same base name: a different id sharing the first 8 characters.
    impostor = _request(job_id=JOB_ID[:8] + "f" * 24)
    with pytest.raises(KubernetesError, match="belongs to job"):
        backend.submit(impostor)
    backend.teardown(first.job)


def test_pod_phases_map_to_instance_states(cluster: KubeServer) -> None:
    backend = _backend(cluster.url)
    request = _request()
    backend.submit(request)
    api, job = cluster.api(), request.job
    statuses = backend.describe(job)
    assert statuses is not None
    assert {host: s.state for host, s in statuses.items()} == {
        "algo-1": InstanceState.PENDING,
        "algo-2": InstanceState.PENDING,
    }
    set_pod_status(api, _pod(cluster, job, "algo-1"), running())
    set_pod_status(api, _pod(cluster, job, "algo-2"), exited(3))
    statuses = backend.describe(job)
    assert statuses is not None
    assert statuses["algo-1"].state == InstanceState.RUNNING
    assert statuses["algo-2"].state == InstanceState.EXITED
    assert statuses["algo-2"].exit_code == 3
    assert statuses["algo-2"].reason == "Error"
    # Its runtime ended without its result: lost, as the backend reads it.
    assert statuses["algo-2"].cause == FailureCause.INSTANCE_LOST
    assert statuses["algo-1"].cause is None
    set_pod_status(api, _pod(cluster, job, "algo-1"), {"phase": "Unknown"})
    statuses = backend.describe(job)
    assert statuses is not None
    assert statuses["algo-1"].state == InstanceState.UNKNOWN
    backend.teardown(job)
    assert backend.describe(job) is None


def test_an_unschedulable_pod_carries_the_schedulers_words(cluster: KubeServer) -> None:
    backend = _backend(cluster.url, schedule_timeout_seconds=60)
    request = _request()
    backend.submit(request)
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    set_pod_status(cluster.api(), _pod(cluster, request.job, "algo-2"), unschedulable(message))
    statuses = backend.describe(request.job)
    assert statuses is not None
    assert statuses["algo-2"].state == InstanceState.PENDING
    assert statuses["algo-2"].reason == f"Unschedulable: {message}"
    assert backend.start_timeout == 60
    assert _backend(cluster.url, on_unschedulable="wait").start_timeout is None
    backend.teardown(request.job)


def test_only_pods_waiting_for_a_node_count_against_the_start_timeout(
    cluster: KubeServer,
) -> None:
    backend = _backend(cluster.url)
    request = _request(instance_count=3)
    backend.submit(request)
    api, job = cluster.api(), request.job
    set_pod_status(api, _pod(cluster, job, "algo-1"), starting())  # pulling a big image
    set_pod_status(api, _pod(cluster, job, "algo-2"), unschedulable("0/3 nodes are available"))
    statuses = backend.describe(job)
    assert statuses is not None
    assert {host: (s.state, s.starting) for host, s in statuses.items()} == {
        "algo-1": (InstanceState.PENDING, True),
        "algo-2": (InstanceState.PENDING, False),
        "algo-3": (InstanceState.PENDING, False),  # not even seen by the scheduler yet
    }
    # A pull that fails is news: waiting again, with the kubelet's words.
    set_pod_status(api, _pod(cluster, job, "algo-1"), starting("ErrImagePull", "manifest unknown"))
    statuses = backend.describe(job)
    assert statuses is not None
    assert statuses["algo-1"].state == InstanceState.PENDING
    assert not statuses["algo-1"].starting
    assert statuses["algo-1"].reason == "ErrImagePull: manifest unknown"
    backend.teardown(job)


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("InvalidImageName", 'Failed to apply default image tag "Registry/Bad:": invalid'),
        ("CreateContainerConfigError", 'secret "missing" not found'),
        ("ErrImageNeverPull", 'Container image "x" is not present with pull policy of Never'),
    ],
)
def test_a_container_that_can_never_start_ends_the_instance(
    cluster: KubeServer, reason: str, message: str
) -> None:
    backend = _backend(cluster.url, on_unschedulable="wait")
    request = _request(instance_count=1)
    backend.submit(request)
    set_pod_status(cluster.api(), _pod(cluster, request.job, "algo-1"), starting(reason, message))
    statuses = backend.describe(request.job)
    assert statuses is not None
    assert statuses["algo-1"].state == InstanceState.EXITED
    assert statuses["algo-1"].exit_code is None
    assert statuses["algo-1"].reason == f"{reason}: {message}"
    assert statuses["algo-1"].cause == FailureCause.JOB_CONFIGURATION
    backend.teardown(request.job)


@pytest.mark.parametrize(
    ("status", "reason", "cause"),
    [
        (exited(137, reason="OOMKilled"), "OOMKilled", FailureCause.OUT_OF_MEMORY),
        (
            {**exited(137), "reason": "Evicted", "message": "The node was low on memory."},
            "Error: Evicted: The node was low on memory.",
            FailureCause.INSTANCE_LOST,
        ),
        (exited(128, reason="StartError"), "StartError", FailureCause.JOB_CONFIGURATION),
    ],
)
def test_an_ended_pod_has_the_cause_its_reasons_give(
    cluster: KubeServer, status: dict[str, Any], reason: str, cause: FailureCause
) -> None:
    backend = _backend(cluster.url)
    request = _request(instance_count=1)
    backend.submit(request)
    set_pod_status(cluster.api(), _pod(cluster, request.job, "algo-1"), status)
    statuses = backend.describe(request.job)
    assert statuses is not None
    assert statuses["algo-1"].state == InstanceState.EXITED
    assert (statuses["algo-1"].reason, statuses["algo-1"].cause) == (reason, cause)
    backend.teardown(request.job)


def test_a_pulling_pod_explains_itself_from_its_container(cluster: KubeServer) -> None:
    backend = _backend(cluster.url)
    request = _request()
    backend.submit(request)
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": "pull access denied"}}
    status = {
        "phase": "Pending",
        "containerStatuses": [
            {
                "name": "runtime",
                "image": "x",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": waiting,
            }
        ],
    }
    set_pod_status(cluster.api(), _pod(cluster, request.job, "algo-1"), status)
    statuses = backend.describe(request.job)
    assert statuses is not None
    assert statuses["algo-1"].reason == "ImagePullBackOff: pull access denied"
    backend.teardown(request.job)


def _pod_deletions(cluster: KubeServer, base: str) -> list[str | None]:
    """The grace of every delete sent for the job's pods, in order."""
    return [
        request.params.get("gracePeriodSeconds")
        for request in cluster.emulator["delete"]
        if f"/pods/{base}-algo-" in request.url.path
    ]


def test_cancel_gives_the_grace_it_is_asked_for(cluster: KubeServer) -> None:
    backend = _backend(cluster.url, stop_grace=4.2, spot_grace=110)
    request = _request(job_id="6" * 32, instance_count=1)
    base = manifests.base_name(request.job.name, request.job.id)
    backend.submit(request)
    backend.cancel(request.job, force=False)  # a stop: the stop grace, not the pod's own
    assert _pod_deletions(cluster, base) == ["5"]
    backend.submit(request)
    backend.cancel(request.job, force=False, grace_seconds=110)  # a spot interruption
    assert _pod_deletions(cluster, base)[1:] == ["110"]
    backend.submit(request)
    backend.cancel(request.job, force=True)
    backend.teardown(request.job)
    assert _pod_deletions(cluster, base)[2:] == ["0"]


def test_cancel_deletes_the_pods_and_teardown_everything(cluster: KubeServer) -> None:
    backend = _backend(cluster.url, gang_scheduler="volcano", gang_queue="team-a")
    cluster.emulator.resources["scheduling.volcano.sh/v1beta1/podgroups"] = {}
    request = _request()
    backend.submit(request)
    base = manifests.base_name(request.job.name, request.job.id)
    assert ("podgroups", base) in cluster.objects_of(JOB_ID)
    backend.cancel(request.job, force=False)
    assert [kind for kind, _ in cluster.objects_of(JOB_ID)].count("pods") == 0
    statuses = backend.describe(request.job)
    assert statuses is not None
    assert {s.state for s in statuses.values()} == {InstanceState.UNKNOWN}
    backend.teardown(request.job)
    assert cluster.objects_of(JOB_ID) == []
    assert not backend.exists(request.job)
    backend.teardown(request.job)  # twice is harmless


def test_the_console_is_the_end_of_the_log(cluster: KubeServer) -> None:
    backend = _backend(cluster.url)
    request = _request(job_id="7" * 32, instance_count=1)
    backend.submit(request)
    printed = "".join(f"step {n}: " + "x" * 90 + "\n" for n in range(5000))  # ~500 KB
    cluster.set_log(_pod(cluster, request.job, "algo-1"), printed)
    console = backend.console(request.job)["algo-1"]
    assert console.endswith("step 4999: " + "x" * 90 + "\n")
    assert len(console.encode()) <= CONSOLE_BYTES
    assert printed.endswith(console)
    backend.teardown(request.job)


def test_held_jobs_are_found_from_the_cluster(cluster: KubeServer) -> None:
    backend = _backend(cluster.url)
    first, second = _request(), _request(job_id="9" * 32, name="other")
    backend.submit(first)
    backend.submit(second)
    assert backend.held_jobs() == [first.job, second.job]
    backend.teardown(first.job)
    backend.teardown(second.job)
    assert backend.held_jobs() == []


def test_a_refusal_names_the_object_and_the_cause(cluster: KubeServer) -> None:
    backend = _backend(cluster.url)
    request = _request(job_id="5" * 32)
    refused = manifests.pod_name(manifests.base_name(request.job.name, request.job.id), "algo-1")

    def this_pod(creation: Any) -> bool:
        return bool(creation.data.get("metadata", {}).get("name") == refused)

    # As a quota would: the API server refuses the job's first pod.
    refusals = cluster.emulator["post"][f"/api/v1/namespaces/{NAMESPACE}/pods"][this_pod]
    (
        refusals
        << 403
        << {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "code": 403,
            "reason": "Forbidden",
            "message": 'pods "x" is forbidden: exceeded quota: gpu, requested: nvidia.com/gpu=8',
        }
    )
    with pytest.raises(KubernetesError, match=r"refused to create Pod .*-algo-1: 403 .*quota"):
        backend.submit(request)
    backend.teardown(request.job)
    assert cluster.objects_of(request.job.id) == []


def test_teardown_that_cannot_delete_says_what_is_left(cluster: KubeServer) -> None:
    backend = _backend(cluster.url, kill_wait=0.2, stop_grace=0.5)
    request = _request()
    backend.submit(request)
    base = manifests.base_name(request.job.name, request.job.id)
    # A finalizer nobody removes: the pod stays "terminating" forever.
    cluster.api().patch_namespaced_pod(
        f"{base}-algo-1", NAMESPACE, {"metadata": {"finalizers": ["example.com/hold"]}}
    )
    with pytest.raises(TeardownError, match=f"{base}-algo-1"):
        backend.teardown(request.job)
    cluster.api().patch_namespaced_pod(
        f"{base}-algo-1", NAMESPACE, {"metadata": {"finalizers": []}}
    )
    backend.teardown(request.job)
    assert cluster.objects_of(JOB_ID) == []


# -- the dry run through the API -----------------------------------------------------


@pytest.fixture
def settings(tmp_path: Path, database_url: str, kube_server: KubeServer) -> Settings:
    return make_settings(
        tmp_path / "home",
        database_url,
        backends={"local": "local", "ml.p3.16xlarge": "kubernetes"},
        kubernetes=KubernetesSettings(
            api_url=kube_server.url, artifact_volume_claim="runyard-artifacts"
        ),
        public_url="http://runyard-api.runyard.svc:8642",
    )


def _shared_source(settings: Settings, source_dir: Path) -> Path:
    """The code where pods can read it: under the artifact root, which they mount."""
    shared = Path(settings.artifact_root.removeprefix("file://")) / "sources" / "src"
    shutil.copytree(source_dir, shared)
    return shared


def test_a_dry_run_shows_the_manifests_and_creates_nothing(
    api: TestClient, settings: Settings, kube_server: KubeServer, source_dir: Path
) -> None:
    before = kube_server.all_objects()
    spec = job_spec(
        _shared_source(settings, source_dir), instance_type="ml.p3.16xlarge", instance_count=2
    )
    response = api.post("/v1/training-jobs", params={"dry_run": "true"}, json=spec)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["backend"] == "kubernetes"
    kinds = [manifest["kind"] for manifest in result["plan"]["manifests"]]
    assert kinds == ["ConfigMap", "Secret", "Service", "Pod", "Pod"]
    assert result["plan"]["manifests"][1]["stringData"] == {
        "agent-key": REDACTED,
        "token-algo-1": REDACTED,
        "token-algo-2": REDACTED,
    }
    assert "kind: Pod" in result["rendered"]
    assert kube_server.all_objects() == before
    assert api.get("/v1/training-jobs").json()["items"] == []


def test_code_the_pods_cannot_read_is_refused_at_submission(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    spec = job_spec(source_dir, instance_type="ml.p3.16xlarge")
    response = api.post("/v1/training-jobs", json=spec)
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "source_uri"]
    assert "pods cannot read this file:// URI" in error["msg"]
    assert api.get("/v1/training-jobs").json()["items"] == []


@pytest.mark.parametrize(
    ("image", "pulled", "label"),
    [
        (None, "runyard/runtime:0.1.0", "builtin"),
        (
            {"name": "pytorch-training:2.13.0-cpu-py311"},
            "registry.example.com/ml/pytorch-training:2.13.0-cpu-py311",
            "pytorch-training:2.13.0-cpu-py311",
        ),
        (
            {"container": "registry.example.com/team/train:7"},
            "registry.example.com/team/train:7",
            "registry.example.com/team/train:7",
        ),
    ],
)
def test_pods_run_the_image_the_server_chose_for_the_job(
    image: dict[str, str] | None, pulled: str, label: str
) -> None:
    materialized = _backend(images_repository="registry.example.com/ml").materialize(
        _request(image=image)
    )
    root, pod = materialized.public["manifests"][0], materialized.public["manifests"][-1]
    assert pod["spec"]["containers"][0]["image"] == pulled
    runyard = json.loads(root["data"][manifests.config_key("algo-1", "runyard.json")])
    assert runyard["image"] == label
