"""The TrainingJob controller against a Kubernetes API server (kmock): a resource applied
becomes a job, its status and Events follow the job, a deletion stops the job and waits
for its instances to be gone, a restarted controller neither loses nor repeats a job, and
what the server refuses is said on the resource with the field named."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from kubernetes import client
from sqlalchemy import func, select

from provisioning.base import JobRef
from service.custom_resources import loop, names
from service.jobs.models import TrainingJob
from service.kit.db import session_scope
from service.settings import Settings
from tests.instances import SleepingInstances
from tests.jobs import job_dir, job_id, job_state, named, report, submit
from tests.kube import KubeServer
from tests.service.custom_resources.support import Cluster, sleepers
from worker.reconciler import Reconciler


@pytest.fixture
def cluster(kube_server: KubeServer) -> Cluster:
    return Cluster(kube_server)


@pytest.fixture
def settings(settings: Settings, cluster: Cluster) -> Settings:
    return cluster.settings(settings)


def _jobs(settings: Settings) -> int:
    with session_scope(settings.database_url, readonly=True) as session:
        return session.scalar(select(func.count()).select_from(TrainingJob)) or 0


def _conditions(resource: dict[str, object]) -> dict[str, str]:
    status = resource["status"]
    assert isinstance(status, dict)
    return {c["type"]: c["status"] for c in status["conditions"]}


def test_an_applied_resource_runs_as_a_job_and_shows_its_progress(
    settings: Settings, cluster: Cluster, source_dir: Path
) -> None:
    controller = cluster.controller(settings)
    reconciler = Reconciler(settings, sleepers(settings))
    cluster.apply("bert-1", source_dir, instance_count=2, hyperparameters={"epochs": 3})
    controller.sync()
    resource = cluster.get("bert-1")
    assert resource["metadata"]["finalizers"] == [names.FINALIZER]
    assert resource["status"]["status"] == "InProgress"
    assert resource["status"]["secondaryStatus"] == "Starting"
    assert resource["status"]["project"] == "default"
    assert _conditions(resource)["Accepted"] == "True"

    reconciler.reconcile(job_id(settings, "bert-1"))  # launches the instances
    for host in ("algo-1", "algo-2"):
        report(settings, "bert-1", host, "Training")
    reconciler.reconcile(job_id(settings, "bert-1"))
    controller.sync()
    status = cluster.get("bert-1")["status"]
    assert status["secondaryStatus"] == "Training"
    assert [(i["host"], i["phase"]) for i in status["instances"]] == [
        ("algo-1", "Training"),
        ("algo-2", "Training"),
    ]
    assert _conditions(cluster.get("bert-1"))["Running"] == "True"

    model = "file:///models/bert-1/model.tar.gz"
    report(settings, "bert-1", "algo-1", "Completed", exit_code=0, model_uri=model)
    report(settings, "bert-1", "algo-2", "Completed", exit_code=0)
    reconciler.reconcile(job_id(settings, "bert-1"))
    controller.sync()
    resource = cluster.get("bert-1")
    status = resource["status"]
    assert (status["status"], status["secondaryStatus"]) == ("Completed", "Completed")
    assert status["modelArtifacts"] == model
    assert status["duration"].endswith("s")
    conditions = _conditions(resource)
    assert (conditions["Completed"], conditions["Running"], conditions["Failed"]) == (
        "True",
        "False",
        "False",
    )
    # kubectl describe: one Event per transition, in order.
    reasons = [reason for _type, reason, _message in cluster.events("bert-1")]
    assert reasons[0] == "Starting"
    assert reasons[-1] == "Completed"
    assert "Training" in reasons
    assert status["eventsRecorded"] == len(reasons)
    assert all(kind == "Normal" for kind, _reason, _message in cluster.events("bert-1"))
    # Passes with nothing new post nothing again.
    controller.sync()
    assert len(cluster.events("bert-1")) == len(reasons)


def test_deleting_a_running_resource_stops_its_job_and_leaves_nothing(
    settings: Settings, cluster: Cluster, source_dir: Path
) -> None:
    backend = SleepingInstances(settings.jobs_dir)
    controller = cluster.controller(settings, backend)
    reconciler = Reconciler(settings, lambda _name, _settings: backend)
    cluster.apply("resnet", source_dir, instance_count=2)
    controller.sync()
    job = job_id(settings, "resnet")
    reconciler.reconcile(job)
    assert backend.describe(JobRef(job, "resnet")) is not None  # its processes run

    cluster.delete("resnet")
    controller.sync()
    # Held by the finalizer while the job stops.
    resource = cluster.get("resnet")
    assert resource["metadata"]["deletionTimestamp"]
    assert resource["status"]["status"] == "Stopping"

    # The worker stops the scripts and tears the instances down (over a few passes).
    deadline = time.monotonic() + 30
    while True:
        reconciler.reconcile(job)
        if job_state(settings, "resnet")["status"] == "Stopped":
            break
        controller.sync()
        assert cluster.exists("resnet")  # held until the job has ended
        assert time.monotonic() < deadline, job_state(settings, "resnet")
        time.sleep(0.1)
    assert cluster.exists("resnet")
    controller.sync()
    assert not cluster.exists("resnet")
    assert backend.describe(JobRef(job, "resnet")) is None
    assert not job_dir(settings, "resnet").exists()
    assert [reason for _t, reason, _m in cluster.events("resnet")][-2:] == ["Stopping", "Stopped"]


class _TeardownRefused(SleepingInstances):
    """Instances whose removal fails until ``refusing`` is cleared (an API server away)."""

    refusing = True

    def teardown(self, job: JobRef) -> None:
        if self.refusing:
            raise RuntimeError("the API server is away")
        super().teardown(job)


def test_a_deleted_resource_is_held_until_its_ended_jobs_instances_are_gone(
    settings: Settings, cluster: Cluster, source_dir: Path
) -> None:
    # A job reads Stopped as soon as its result is decided; its instances are removed
    # after that, here only on a later try (the reaper's).
    backend = _TeardownRefused(settings.jobs_dir)
    controller = cluster.controller(settings, backend)
    reconciler = Reconciler(settings, lambda _name, _settings: backend)
    cluster.apply("vit", source_dir)
    controller.sync()
    job = job_id(settings, "vit")
    reconciler.reconcile(job)
    cluster.delete("vit")
    deadline = time.monotonic() + 30
    while job_state(settings, "vit")["status"] != "Stopped":
        controller.sync()
        reconciler.reconcile(job)
        assert time.monotonic() < deadline, job_state(settings, "vit")
        time.sleep(0.1)
    controller.sync()
    controller.sync()
    assert backend.exists(JobRef(job, "vit"))
    assert cluster.exists("vit")  # held: the job's instances are still there

    backend.refusing = False
    backend.teardown(JobRef(job, "vit"))
    controller.sync()
    assert not cluster.exists("vit")


def test_a_restarted_controller_adopts_its_job_and_submits_none_again(
    settings: Settings, cluster: Cluster, source_dir: Path
) -> None:
    cluster.apply("gpt-small", source_dir)
    cluster.controller(settings).sync()
    job = job_id(settings, "gpt-small")
    posted = cluster.events("gpt-small")
    # As if the controller died after submitting and before it wrote the status.
    cluster.custom.patch_namespaced_custom_object_status(
        names.GROUP, names.VERSION, cluster.namespace, names.PLURAL, "gpt-small", {"status": None}
    )
    assert "status" not in cluster.get("gpt-small")

    restarted = cluster.controller(settings)
    restarted.sync()
    restarted.sync()
    assert _jobs(settings) == 1
    assert job_id(settings, "gpt-small") == job
    assert cluster.get("gpt-small")["status"]["jobId"] == job
    assert cluster.events("gpt-small") == posted  # none posted twice


def test_a_spec_the_schema_refuses_is_refused_at_admission_with_the_field_named(
    settings: Settings, cluster: Cluster, source_dir: Path
) -> None:
    with pytest.raises(client.ApiException) as refused:
        cluster.apply("bad", source_dir, instance_count=0)
    assert refused.value.status == 422
    assert "spec.instanceCount: Invalid value: 0 is less than the minimum" in str(
        refused.value.body
    )
    cluster.controller(settings).sync()
    assert not cluster.exists("bad")
    assert _jobs(settings) == 0


def test_a_resource_in_the_rest_apis_spelling_is_refused_at_admission_naming_the_field(
    settings: Settings, cluster: Cluster, source_dir: Path
) -> None:
    # As the resource was written before its fields were camelCase.
    old = {
        "entry_point": "train.py",
        "source_uri": source_dir.as_uri(),
        "instance_type": "local",
    }
    with pytest.raises(client.ApiException) as refused:
        cluster.apply_spec("old-style", old)
    assert refused.value.status == 422
    body = str(refused.value.body)
    assert (
        "spec.entry_point: Forbidden: a TrainingJob spells its fields in camelCase: "
        "entryPoint, not entry_point" in body
    )
    assert "spec.instanceType: Required value" in body
    cluster.controller(settings).sync()
    assert not cluster.exists("old-style")
    assert _jobs(settings) == 0


def test_the_camel_case_spec_becomes_the_rest_apis_request(
    settings: Settings, cluster: Cluster, source_dir: Path
) -> None:
    cluster.apply_spec(
        "spelled",
        {
            "entryPoint": "train.py",
            "sourceUri": source_dir.as_uri(),
            "instanceType": "local",
            "instanceCount": 2,
            "hyperparameters": {"learning_rate": 0.5},
            "inputs": {"train_data": {"uri": source_dir.as_uri(), "inputMode": "FastFile"}},
            "maxRun": 600,
            "metricDefinitions": [{"name": "loss", "regex": "loss=([0-9.]+)"}],
        },
    )
    cluster.controller(settings).sync()
    assert _conditions(cluster.get("spelled"))["Accepted"] == "True"
    with session_scope(settings.database_url, readonly=True) as session:
        spec = named(session, "spelled").record.job_spec()
    assert (spec.entry_point, spec.instance_type, spec.instance_count) == ("train.py", "local", 2)
    assert spec.hyperparameters["learning_rate"] == 0.5
    assert spec.inputs["train_data"].input_mode == "FastFile"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"inputs": {"train_data": {"uri": "gs://bucket/train"}}},
            "spec.inputs.train_data.uri: ",
        ),
        (
            {"metric_definitions": [{"name": "loss", "regex": "loss=([0-9]+)(x)"}]},
            "spec.metricDefinitions.0.regex: ",
        ),
    ],
)
def test_what_the_server_refuses_inside_the_spec_is_named_as_the_resource_spells_it(
    settings: Settings,
    cluster: Cluster,
    source_dir: Path,
    spec: dict[str, object],
    message: str,
) -> None:
    cluster.apply("refused-inside", source_dir, **spec)
    cluster.controller(settings).sync()
    accepted = next(
        c for c in cluster.get("refused-inside")["status"]["conditions"] if c["type"] == "Accepted"
    )
    assert (accepted["status"], accepted["reason"]) == ("False", "Invalid")
    assert accepted["message"].startswith(message), accepted["message"]
    assert _jobs(settings) == 0


def test_a_name_no_job_could_have_is_refused_at_admission(
    settings: Settings, cluster: Cluster, source_dir: Path
) -> None:
    # The CRD's CEL rule: a resource's name is its job's, held to SageMaker's job names.
    with pytest.raises(client.ApiException) as refused:
        cluster.apply("bert.v1", source_dir)
    assert refused.value.status == 422
    assert "metadata.name must be a training job's name" in str(refused.value.body)
    assert not cluster.exists("bert.v1")


def test_a_submitted_spec_cannot_change(
    settings: Settings, cluster: Cluster, source_dir: Path
) -> None:
    cluster.apply("fixed", source_dir)
    cluster.controller(settings).sync()
    changed = {"spec": {"hyperparameters": {"epochs": 9}}}
    with pytest.raises(client.ApiException) as refused:
        cluster.custom.patch_namespaced_custom_object(
            names.GROUP, names.VERSION, cluster.namespace, names.PLURAL, "fixed", changed
        )
    assert refused.value.status == 422
    assert "spec: Invalid value: spec cannot change once the job is submitted" in str(
        refused.value.body
    )
    assert "hyperparameters" not in cluster.get("fixed")["spec"]
    # What the controller writes of the resource itself (its finalizer) still goes.
    assert names.FINALIZER in cluster.get("fixed")["metadata"]["finalizers"]


def test_a_spec_the_server_refuses_is_said_on_the_resource_with_the_field_named(
    settings: Settings, cluster: Cluster, source_dir: Path
) -> None:
    cluster.apply("typo", source_dir, instance_type="ml.p9.huge")
    controller = cluster.controller(settings)
    controller.sync()
    controller.sync()
    resource = cluster.get("typo")
    accepted = next(c for c in resource["status"]["conditions"] if c["type"] == "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "Invalid")
    assert accepted["message"].startswith("spec.instanceType: unknown instance type 'ml.p9.huge'")
    assert cluster.events("typo") == [("Warning", "Invalid", accepted["message"])]
    assert _jobs(settings) == 0
    # Nothing ran, so nothing holds its deletion.
    cluster.delete("typo")
    controller.sync()
    assert not cluster.exists("typo")


def test_a_job_of_that_name_from_elsewhere_is_not_taken_over(
    settings: Settings, cluster: Cluster, source_dir: Path
) -> None:
    submit(settings, source_dir, name="shared-name")  # over REST, say
    cluster.apply("shared-name", source_dir)
    controller = cluster.controller(settings)
    controller.sync()
    resource = cluster.get("shared-name")
    accepted = next(c for c in resource["status"]["conditions"] if c["type"] == "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "NameTaken")
    assert accepted["message"].startswith("metadata.name:")
    assert "jobId" not in resource["status"]
    # Deleting the resource leaves that job alone.
    cluster.delete("shared-name")
    controller.sync()
    assert not cluster.exists("shared-name")
    assert _jobs(settings) == 1


def test_a_change_wakes_the_leader_before_its_next_resync(
    settings: Settings, cluster: Cluster, source_dir: Path
) -> None:
    # A resync far off: only the watch can bring the applied resource to a job in time.
    controller_settings = settings.controller.model_copy(update={"resync_seconds": 300.0})
    slow = settings.model_copy(update={"controller": controller_settings})
    lost, stop = threading.Event(), threading.Event()
    controller, first_pass = cluster.controller(slow), threading.Event()
    sync = controller.sync

    def counted_sync() -> None:
        sync()
        first_pass.set()

    controller.sync = counted_sync  # type: ignore[method-assign]
    leading = threading.Thread(
        target=loop.lead, args=(controller, cluster.api_client, lost, stop), daemon=True
    )
    leading.start()
    try:
        assert first_pass.wait(10)  # over no resources: the next is due in 300 s
        cluster.apply("woken", source_dir)
        deadline = time.monotonic() + 10
        while _jobs(settings) == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _jobs(settings) == 1
    finally:
        stop.set()
        leading.join(timeout=5)
    # Told to stop, it stops within moments, not at the next resync.
    assert not leading.is_alive()
