"""Jobs on the Kubernetes backend, end to end: the real API, worker and beat processes drive
a Kubernetes API server (kmock) through the official client.

No kubelet runs pods here, so the test plays the cluster (pod phases, scheduling failures,
exit codes) and the runtime inside each pod (status reports with the pod's own token, read
from the job's Secret, through the runtime's own client). After every job, the server
holds no object of it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as client_module

from contract.hosts import host_names
from provisioning.kubernetes import manifests
from provisioning.kubernetes.manifests import LABEL_JOB_NAME
from runtime.reporting.reporter import ServiceClient
from runyard.client import Client
from service.custom_resources import crd, names
from tests.e2e.conftest import EXAMPLES, Stack
from tests.kube import (
    NAMESPACE,
    KubeServer,
    exited,
    running,
    set_pod_status,
    starting,
    unschedulable,
)
from tests.timeouts import scaled

pytestmark = pytest.mark.e2e

HERE = Path(__file__).parent

INSTANCE_TYPE = "ml.g5.xlarge"
# How long a job's pods may wait unscheduled: what the unschedulable test waits out, and
# what a loaded machine's worker and test may take between a launch and seeing its pods.
SCHEDULE_TIMEOUT = 15.0
NO_GPU = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


@pytest.fixture(scope="module")
def kube_stack(
    tmp_path_factory: pytest.TempPathFactory, kube_server: KubeServer
) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("runyard-kubernetes")
    stack = Stack(home, f"sqlite:///{home / 'runyard.db'}", f"sqla+sqlite:///{home / 'broker.db'}")
    stack.env.update(
        {
            "RUNYARD_BACKENDS": json.dumps({"local": "local", INSTANCE_TYPE: "kubernetes"}),
            "RUNYARD_KUBERNETES": json.dumps(
                {
                    "api_url": kube_server.url,
                    # The test plays the kubelet: on a loaded machine it marks pods running
                    # later, and the job must not fail for that.
                    "schedule_timeout_seconds": scaled(SCHEDULE_TIMEOUT),
                    # Uploaded sources live under the artifact root, shared with the pods.
                    "artifact_volume_claim": "runyard-artifacts",
                }
            ),
            "RUNYARD_REAP_INTERVAL": "1",
            # Where pods would reach the API (a loopback URL is refused for them); the
            # runtimes this test plays report to the stack's own URL.
            "RUNYARD_PUBLIC_URL": "http://runyard-api.runyard.svc:8642",
        }
    )
    stack.describe_cluster = lambda job: kube_server.describe_job(job["id"])
    stack.cluster_left = lambda job: kube_server.objects_of(job["id"])
    stack.up()
    yield stack
    assert stack.down() == []


class Pods:
    """The job's pods as a kubelet and the runtimes inside them would see them."""

    def __init__(self, kube: KubeServer, stack: Stack, job: dict[str, Any]) -> None:
        self.kube, self.stack, self.job = kube, stack, job
        self.api = kube.api()
        self.base = manifests.base_name(job["name"], job["id"])

    def wait_created(self, count: int, timeout: float = 30) -> None:
        """Until the job's ``count`` pods exist; then each is scheduled at once (its image
        being pulled), as a cluster with room does within moments, so that no start
        timeout runs while the test plays the kubelet."""
        deadline = time.monotonic() + scaled(timeout)
        while (
            len(pods := [n for k, n in self.kube.objects_of(self.job["id"]) if k == "pods"]) < count
        ):
            if time.monotonic() > deadline:
                job = self.stack.client().get_job(self.job["name"])
                pytest.fail(f"pods of {self.job['name']} never appeared\n{self.stack.explain(job)}")
            time.sleep(0.1)
        for name in pods:
            set_pod_status(self.api, name, starting())

    def pod_names(self) -> list[str]:
        return [name for kind, name in self.kube.objects_of(self.job["id"]) if kind == "pods"]

    def set(self, host: str, status: dict[str, Any]) -> None:
        set_pod_status(self.api, manifests.pod_name(self.base, host), status)

    def runtime(self, host: str) -> ServiceClient:
        """The client the runtime in this pod reports with, holding the pod's token."""
        secret = self.api.read_namespaced_secret(f"{self.base}-token", NAMESPACE)
        token = secret.string_data[manifests.token_key(host)]
        return ServiceClient(self.stack.url, token, self.job["name"], host)

    def left(self) -> list[tuple[str, str]]:
        return self.kube.objects_of(self.job["id"])

    def all_running(self, *, training: bool = False) -> None:
        """Every pod scheduled and started, and (``training``) its runtime saying so."""
        for host in host_names(self.job["spec"]["instance_count"]):
            self.set(host, running())
            if training:
                assert self.runtime(host).report("Training", deadline_seconds=10)


def _submit(stack: Stack, client: Client, count: int = 2) -> dict[str, Any]:
    return stack.submit(
        client,
        "scripts",
        entry_point="report_env.py",
        instance_type=INSTANCE_TYPE,
        instance_count=count,
    )


def _launched(
    stack: Stack, kube: KubeServer, client: Client, count: int = 2
) -> tuple[dict[str, Any], Pods]:
    """A job submitted, and its pods created (not yet scheduled)."""
    job = _submit(stack, client, count)
    pods = Pods(kube, stack, job)
    pods.wait_created(count)
    return job, pods


def _secondary(client: Client, name: str) -> Any:
    return lambda job: job["secondary_status"] == name


def test_a_job_runs_to_completion_and_leaves_nothing(
    kube_stack: Stack, kube_server: KubeServer
) -> None:
    with kube_stack.client() as client:
        job, pods = _launched(kube_stack, kube_server, client)
        kube_stack.wait_for(client, job["name"], _secondary(client, "Pending"))
        pods.all_running(training=True)
        kube_stack.wait_for(client, job["name"], _secondary(client, "Training"))
        for host in ("algo-1", "algo-2"):
            model = f"file:///artifacts/{job['name']}/output/model.tar.gz"
            fields = {"exit_code": 0, "model_uri": model if host == "algo-1" else None}
            assert pods.runtime(host).report("Completed", fields, deadline_seconds=10)
            pods.set(host, exited(0))
        ended = kube_stack.wait_until_ended(client, job["name"])
        assert ended["status"] == "Completed", ended["failure_reason"]
        assert ended["model_artifacts"].endswith("model.tar.gz")
        assert pods.left() == []


def test_unschedulable_pods_fail_the_job_naming_why_and_are_removed(
    kube_stack: Stack, kube_server: KubeServer
) -> None:
    with kube_stack.client() as client:
        job, pods = _launched(kube_stack, kube_server, client)
        pods.set("algo-1", running())
        pods.set("algo-2", unschedulable(NO_GPU))
        waiting = kube_stack.wait_for(
            client,
            job["name"],
            lambda job: "Insufficient" in job["transitions"][-1]["message"],
        )
        assert waiting["secondary_status"] == "Pending"
        assert "algo-2: Unschedulable: 0/3 nodes" in waiting["transitions"][-1]["message"]
        ended = kube_stack.wait_until_ended(client, job["name"], timeout=SCHEDULE_TIMEOUT + 30)
        assert ended["status"] == "Failed"
        assert ended["failure_reason"].startswith("CapacityError: 1 of 2 instances")
        assert NO_GPU in ended["failure_reason"]
        assert pods.left() == []


def test_a_failing_container_fails_the_job_with_its_exit_code(
    kube_stack: Stack, kube_server: KubeServer
) -> None:
    with kube_stack.client() as client:
        job, pods = _launched(kube_stack, kube_server, client)
        pods.all_running()
        # The runtime was killed before it could report: only the pod tells.
        kube_server.set_log(
            manifests.pod_name(pods.base, "algo-2"), "Training in progress\nKilled\n"
        )
        pods.set("algo-2", exited(137, reason="OOMKilled"))
        ended = kube_stack.wait_until_ended(client, job["name"])
        assert ended["status"] == "Failed"
        # Out of memory is the script's doing: not restarted as an infrastructure failure.
        assert ended["infrastructure_restarts"] == 0
        assert "InstanceLost: algo-2" in ended["failure_reason"]
        assert "exit code 137" in ended["failure_reason"]
        assert "OOMKilled" in ended["failure_reason"]
        assert ended["failure_reason"].endswith("last output: Training in progress\nKilled\n")
        # The pod is gone, its console is not: stored since the runtime never shipped a line.
        lines = [(e["host"], e["stream"], e["message"]) for e in client.logs(job["name"])]
        assert lines == [
            ("algo-2", "runtime", "Training in progress"),
            ("algo-2", "runtime", "Killed"),
        ]
        assert pods.left() == []


def _second_attempt_completes(
    stack: Stack, client: Client, pods: Pods, job: dict[str, Any], hosts: tuple[str, ...]
) -> dict[str, Any]:
    """Run the restarted pods to a clean end, each runtime reporting as attempt 1."""
    pods.all_running()
    for host in hosts:
        runtime = pods.runtime(host)
        runtime.attempt = 1
        assert runtime.report("Completed", {"exit_code": 0}, deadline_seconds=10)
        pods.set(host, exited(0))
    ended = stack.wait_until_ended(client, job["name"])
    assert ended["status"] == "Completed", ended["failure_reason"]
    return ended


def test_a_lost_pod_restarts_the_job_on_new_pods(
    kube_stack: Stack, kube_server: KubeServer
) -> None:
    with kube_stack.client() as client:
        job, pods = _launched(kube_stack, kube_server, client)
        pods.all_running(training=True)
        kube_stack.wait_for(client, job["name"], _secondary(client, "Training"))
        first = {name for kind, name in pods.left() if kind == "pods"}
        # Its node went away: the pod is gone, with no word from its runtime.
        pods.api.delete_namespaced_pod(
            manifests.pod_name(pods.base, "algo-2"), NAMESPACE, grace_period_seconds=0
        )
        restarted = kube_stack.wait_for(client, job["name"], lambda j: j["attempt"] == 1)
        assert restarted["infrastructure_restarts"] == 1
        pods.wait_created(2)
        # The new pods carry the new attempt in their config; the first attempt's are gone.
        config = pods.api.read_namespaced_config_map(pods.base, NAMESPACE)
        assert json.loads(config.data["algo-1.runyard.json"])["attempt"] == 1
        assert {name for kind, name in pods.left() if kind == "pods"} == first  # same names
        ended = _second_attempt_completes(kube_stack, client, pods, job, ("algo-1", "algo-2"))
        restarting = next(t for t in ended["transitions"] if t["secondary_status"] == "Restarting")
        assert "InstanceLost: algo-2" in restarting["message"]
        assert pods.left() == []


def test_a_spot_notice_moves_the_job_to_new_pods(
    kube_stack: Stack, kube_server: KubeServer
) -> None:
    with kube_stack.client() as client:
        job = kube_stack.submit(
            client,
            "scripts",
            entry_point="report_env.py",
            instance_type=INSTANCE_TYPE,
            instance_count=1,
            use_spot_instances=True,
            max_run=600,
            max_wait=1200,
        )
        pods = Pods(kube_server, kube_stack, job)
        pods.wait_created(1)
        pods.all_running(training=True)
        kube_stack.wait_for(client, job["name"], _secondary(client, "Training"))
        client.interrupt(job["name"], "algo-1", "rehearsal")
        # The pod is deleted (SIGTERM, then its grace), and the job starts on a new one.
        resumed = kube_stack.wait_for(client, job["name"], lambda j: j["attempt"] == 1)
        assert resumed["infrastructure_restarts"] == 1
        interrupted = next(
            t for t in resumed["transitions"] if t["secondary_status"] == "Interrupted"
        )
        assert interrupted["message"].startswith("Spot interruption: algo-1: rehearsal")
        pods.wait_created(1)
        _second_attempt_completes(kube_stack, client, pods, job, ("algo-1",))
        assert pods.left() == []


def test_a_stop_deletes_the_pods_and_everything_else(
    kube_stack: Stack, kube_server: KubeServer
) -> None:
    with kube_stack.client() as client:
        job, pods = _launched(kube_stack, kube_server, client)
        pods.all_running(training=True)
        kube_stack.wait_for(client, job["name"], _secondary(client, "Training"))
        client.stop_job(job["name"])
        ended = kube_stack.wait_until_ended(client, job["name"])
        assert ended["status"] == "Stopped"
        assert pods.left() == []


def test_a_worker_restart_mid_job_picks_the_job_up(
    kube_stack: Stack, kube_server: KubeServer
) -> None:
    with kube_stack.client() as client:
        job, pods = _launched(kube_stack, kube_server, client, count=1)
        pods.all_running(training=True)
        kube_stack.wait_for(client, job["name"], _secondary(client, "Training"))
        kube_stack.kill("worker")
        assert pods.runtime("algo-1").report("Completed", {"exit_code": 0}, deadline_seconds=10)
        pods.set("algo-1", exited(0))
        kube_stack.start("worker")  # a new worker, knowing nothing but the database
        ended = kube_stack.wait_until_ended(client, job["name"], timeout=60)
        assert ended["status"] == "Completed", ended["failure_reason"]
        assert pods.left() == []
        # The pods were created once: the new worker adopted, it did not launch again.
        transitions = [t["secondary_status"] for t in ended["transitions"]]
        assert transitions.count("LaunchingInstances") == 1


def test_beat_reaps_what_is_left_of_an_ended_job(
    kube_stack: Stack, kube_server: KubeServer
) -> None:
    with kube_stack.client() as client:
        job, pods = _launched(kube_stack, kube_server, client, count=1)
        pods.set("algo-1", exited(1))
        ended = kube_stack.wait_until_ended(client, job["name"])
        assert ended["status"] == "Failed"
    # Someone (an old worker, a person with kubectl) re-creates objects of the ended job.
    labels = {manifests.LABEL_JOB_ID: job["id"], manifests.LABEL_JOB_NAME: job["name"]}
    metadata = {"namespace": NAMESPACE, "labels": {**labels, manifests.LABEL_HOST: "algo-1"}}
    api = kube_server.api()
    api.create_namespaced_config_map(
        NAMESPACE, {"metadata": {**metadata, "name": pods.base}, "data": {}}
    )
    api.create_namespaced_pod(
        NAMESPACE,
        {
            "metadata": {**metadata, "name": f"{pods.base}-algo-1"},
            "spec": {"containers": [{"name": "runtime", "image": "runyard/runtime:0.1.0"}]},
        },
    )
    deadline = time.monotonic() + scaled(30)
    while pods.left():
        assert time.monotonic() < deadline, f"not reaped: {pods.left()}"
        time.sleep(0.2)


def test_a_refused_launch_fails_the_job_with_the_clusters_words(
    kube_stack: Stack, kube_server: KubeServer
) -> None:
    name = "over-quota"

    def this_job(creation: Any) -> bool:
        labels = creation.data.get("metadata", {}).get("labels", {})
        return bool(creation.data.get("kind") == "Pod" and labels.get(LABEL_JOB_NAME) == name)

    quota = 'pods "x" is forbidden: exceeded quota: gpu, requested: nvidia.com/gpu=1'
    refusals = kube_server.emulator["post"][f"/api/v1/namespaces/{NAMESPACE}/pods"][this_job]
    refusals << 403 << {"kind": "Status", "code": 403, "reason": "Forbidden", "message": quota}
    with kube_stack.client() as client:
        job = kube_stack.submit(
            client, "scripts", name=name, entry_point="report_env.py", instance_type=INSTANCE_TYPE
        )
        ended = kube_stack.wait_until_ended(client, name)
        assert ended["status"] == "Failed"
        assert ended["failure_reason"] == (
            f"LaunchError: Kubernetes refused to create Pod "
            f"{manifests.base_name(name, job['id'])}-algo-1: 403 {quota}"
        )
        # kmock keeps a refused object anyway; a real server would not. Either way: gone.
        assert kube_server.objects_of(job["id"]) == []


def _resource_job(stack: Stack, client: Client, name: str, timeout: float = 30) -> dict[str, Any]:
    """The job the controller submitted for the resource ``name``, once it exists."""
    deadline = time.monotonic() + scaled(timeout)
    while True:
        try:
            return client.get_job(name)
        except Exception:
            if time.monotonic() > deadline:
                pytest.fail(f"no job for resource {name}\n{stack.log_tail('controller')}")
            time.sleep(0.2)


def test_a_trainingjob_resource_runs_on_pods_and_deleting_it_leaves_none(
    kube_stack: Stack, kube_server: KubeServer
) -> None:
    # kubectl's way in, with every part a real process: the controller submits the
    # resource's job, the worker runs it on pods, and deleting the resource stops the job
    # and waits until the pods are gone before the resource goes.
    kube_server.install(crd.definition())
    kube_server.install(crd.tuning_definition())  # as the chart installs both
    namespace = "team-e2e"
    controller = {"namespaces": {namespace: "default"}, "lease_namespace": namespace}
    kube_stack.start("controller", env={"RUNYARD_CONTROLLER": json.dumps(controller)})
    custom = client_module.CustomObjectsApi(kube_server.client())
    address = (names.GROUP, names.VERSION, namespace, names.PLURAL)
    try:
        with kube_stack.client() as client:
            spec = {
                "sourceUri": client.upload_source(EXAMPLES / "scripts"),
                "entryPoint": "report_env.py",
                "instanceType": INSTANCE_TYPE,
                "instanceCount": 2,
            }
            resource = {
                "apiVersion": names.API_VERSION,
                "kind": names.KIND,
                "metadata": {"name": "tj-e2e", "namespace": namespace},
                "spec": spec,
            }
            custom.create_namespaced_custom_object(*address, resource)
            job = _resource_job(kube_stack, client, "tj-e2e")
            pods = Pods(kube_server, kube_stack, job)
            pods.wait_created(2)
            pods.all_running(training=True)
            kube_stack.wait_for(client, job["name"], _secondary(client, "Training"))
            deadline = time.monotonic() + scaled(30)
            while (
                custom.get_namespaced_custom_object(*address, "tj-e2e")
                .get("status", {})
                .get("secondaryStatus")
                != "Training"
            ):
                assert time.monotonic() < deadline, kube_stack.log_tail("controller")
                time.sleep(0.2)
            custom.delete_namespaced_custom_object(*address, "tj-e2e")
            _wait_gone(custom, address, "tj-e2e", scaled(60), kube_stack)
            # Gone only once its job had ended and the job's pods were deleted.
            assert client.get_job(job["name"])["status"] == "Stopped"
            assert pods.left() == []
    finally:
        kube_stack.kill("controller")


def _wait_gone(
    custom: Any, address: tuple[str, ...], name: str, seconds: float, stack: Stack
) -> None:
    """Until the resource ``name`` is no longer listed (its finalizer released)."""
    deadline = time.monotonic() + seconds
    while any(
        item["metadata"]["name"] == name
        for item in custom.list_namespaced_custom_object(*address)["items"]
    ):
        assert time.monotonic() < deadline, stack.log_tail("controller")
        time.sleep(0.2)


def _status_of(custom: Any, address: tuple[str, ...], name: str) -> dict[str, Any]:
    found: dict[str, Any] = custom.get_namespaced_custom_object(*address, name)
    return dict(found.get("status") or {})


@pytest.fixture(scope="module")
def local_trials_stack(
    tmp_path_factory: pytest.TempPathFactory, kube_server: KubeServer
) -> Iterator[Stack]:
    """A server whose controller takes resources from the cluster and whose jobs run on
    the local backend, as real runtimes that report to it: a tuning job's trials end
    without the test playing their pods."""
    home = tmp_path_factory.mktemp("runyard-kubernetes-tuning")
    stack = Stack(home, f"sqlite:///{home / 'runyard.db'}", f"sqla+sqlite:///{home / 'broker.db'}")
    stack.env["RUNYARD_KUBERNETES"] = json.dumps({"api_url": kube_server.url})
    stack.up()
    yield stack
    assert stack.down() == []


def test_a_tuning_resource_runs_its_trials_and_names_the_best(
    local_trials_stack: Stack, kube_server: KubeServer
) -> None:
    # A HyperparameterTuningJob taken by the real controller process: the tuning job it
    # makes runs its trials (on the local backend, as real runtimes), and the resource's
    # status follows it to Completed with the best trial named.
    kube_stack = local_trials_stack
    kube_server.install(crd.definition())
    kube_server.install(crd.tuning_definition())
    namespace = "team-tuning"
    controller = {"namespaces": {namespace: "default"}, "lease_namespace": namespace}
    kube_stack.start("controller", env={"RUNYARD_CONTROLLER": json.dumps(controller)})
    custom = client_module.CustomObjectsApi(kube_server.client())
    kind = names.TUNING_JOB
    address = (names.GROUP, names.VERSION, namespace, kind.plural)
    try:
        with kube_stack.client() as client:
            training_job = {
                "sourceUri": client.upload_source(HERE / "sagemaker_sdk" / "tune_job"),
                "entryPoint": "train.py",
                "instanceType": "local",
                "hyperparameters": {"epochs": 2},
                "metricDefinitions": [{"name": "loss", "regex": "loss=([0-9.]+)"}],
            }
            resource = {
                "apiVersion": names.API_VERSION,
                "kind": kind.kind,
                "metadata": {"name": "hpt-e2e", "namespace": namespace},
                "spec": {
                    "strategy": "Random",
                    "randomSeed": 7,
                    "objective": {"type": "Minimize", "metricName": "loss"},
                    "resourceLimits": {
                        "maxNumberOfTrainingJobs": 3,
                        "maxParallelTrainingJobs": 2,
                    },
                    "parameterRanges": {
                        "continuous": [{"name": "shift", "minValue": 0.0, "maxValue": 1.0}]
                    },
                    "trainingJob": training_job,
                },
            }
            custom.create_namespaced_custom_object(*address, resource)
            deadline = time.monotonic() + scaled(180)
            while (status := _status_of(custom, address, "hpt-e2e")).get("status") != "Completed":
                assert status.get("status") not in ("Failed", "Stopped"), status
                if time.monotonic() > deadline:
                    tuning = client.get_tuning_job("hpt-e2e")
                    pytest.fail(
                        f"{status}\n{tuning['status']} {tuning['trials']}\n"
                        f"{kube_stack.log_tail('controller')}\n{kube_stack.log_tail('worker')}"
                    )
                time.sleep(0.5)
            tuning = client.get_tuning_job("hpt-e2e")
            trials = tuning["trials"]
            assert len(trials) == 3
            assert {trial["status"] for trial in trials} == {"Completed"}
            # The best is the trial of the lowest loss, as the resource names it.
            best = min(trials, key=lambda trial: trial["objective"])
            assert status["bestTrial"]["name"] == best["name"] == tuning["best_trial"]["name"]
            assert (status["trialsStarted"], status["trialsEnded"]) == (3, 3)
            assert status["trainingJobs"]["completed"] == 3
            # Its trials carry the resource's uid, as every job the controller makes does.
            uid = custom.get_namespaced_custom_object(*address, "hpt-e2e")["metadata"]["uid"]
            job = client.get_job(best["name"])
            assert {"key": names.RESOURCE_TAG, "value": uid} in job["spec"]["tags"]
            # Deleting an ended one removes it at once: nothing of it is left running.
            custom.delete_namespaced_custom_object(*address, "hpt-e2e")
            _wait_gone(custom, address, "hpt-e2e", scaled(30), kube_stack)
    finally:
        kube_stack.kill("controller")
