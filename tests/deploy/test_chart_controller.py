"""The chart's TrainingJob controller: on by default, taking the release's own namespace's
TrainingJobs into the project default; its Deployment runs `runyard controller` with the
namespaces it was given, its identity may do exactly what the controller does there (and
hold its Lease), every object is valid Kubernetes, and the CRD ships in crds/ as
generated."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from provisioning.catalog import InstanceCatalog
from service.custom_resources import crd
from service.custom_resources.controller import Controller
from service.kit.db import session_scope
from service.settings import ControllerSettings, Settings
from tests.deploy.chart import (
    CHART,
    NAMESPACE,
    NEWEST,
    OLDEST,
    objects_of,
    one,
    pod_spec,
    workloads,
)
from tests.deploy.support import REPO, check_runyard_args
from tests.deploy.test_chart import EXTERNAL
from tests.jobs import named
from tests.kube import KubeServer
from tests.service.custom_resources.support import Cluster

ENABLED = {**EXTERNAL, "controller": {"enabled": True, "namespaces": {"team-a": "vision"}}}
CONTROLLER_RULES = {
    ("runyard.dev", "trainingjobs"): {"get", "list", "watch", "patch"},
    ("runyard.dev", "trainingjobs/status"): {"patch"},
    ("runyard.dev", "hyperparametertuningjobs"): {"get", "list", "watch", "patch"},
    ("runyard.dev", "hyperparametertuningjobs/status"): {"patch"},
    ("", "events"): {"create"},
}


def _rules(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    rules: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                rules.setdefault((group, resource), set()).update(rule["verbs"])
    return rules


def _controller_settings(objects: list[dict[str, Any]]) -> ControllerSettings:
    (container,) = pod_spec(workloads(objects)["controller"])["containers"]
    given = {item["name"]: item.get("value") for item in container["env"]}
    return ControllerSettings.model_validate(json.loads(given["RUNYARD_CONTROLLER"]))


def test_by_default_it_takes_the_releases_namespace_into_the_default_project(
    chart: helm.Chart,
) -> None:
    # A TrainingJob applied beside the release is acted on with no values given.
    objects = objects_of(chart, {})
    settings = _controller_settings(objects)
    assert settings.namespaces == {NAMESPACE: "default"}
    assert settings.lease_namespace == NAMESPACE
    cluster_role = one(objects, "ClusterRole")
    binding = one(objects, "RoleBinding", cluster_role["metadata"]["name"])
    assert binding["metadata"]["namespace"] == NAMESPACE
    admissions = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert len(admissions) == 2  # one per kind
    for admission in admissions:
        match = admission["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
        (selector,) = match
        assert selector["values"] == [NAMESPACE]


def test_it_can_be_left_out(chart: helm.Chart) -> None:
    objects = objects_of(chart, {**EXTERNAL, "controller": {"enabled": False}})
    assert "controller" not in workloads(objects)
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"ClusterRole", "ValidatingAdmissionPolicy"}
    assert not [o for o in objects if o["metadata"]["name"].endswith("-controller")]


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
def test_every_object_is_valid_kubernetes(chart: helm.Chart, version: str) -> None:
    for obj in objects_of(chart, ENABLED):
        kubernetes_validate.validate(obj, version, strict=True)
    for plural, generated in crd.DEFINITIONS.items():
        crds = yaml.safe_load((CHART / "crds" / f"{plural}.yaml").read_text())
        kubernetes_validate.validate(crds, version, strict=True)
        assert crds == generated()


def test_the_controller_runs_with_its_namespaces(chart: helm.Chart) -> None:
    objects = objects_of(chart, ENABLED)
    workload = workloads(objects)["controller"]
    assert workload["spec"]["replicas"] == 2
    (container,) = pod_spec(workload)["containers"]
    program, *argv = container["command"]
    assert program == "runyard"
    assert check_runyard_args(argv) == "controller"
    settings = _controller_settings(objects)
    assert settings.namespaces == {"team-a": "vision"}
    assert settings.lease_namespace == NAMESPACE


def test_its_identity_may_do_what_the_controller_does_and_no_more(chart: helm.Chart) -> None:
    objects = objects_of(chart, ENABLED)
    account = pod_spec(workloads(objects)["controller"])["serviceAccountName"]
    cluster_role = one(objects, "ClusterRole")
    assert _rules(cluster_role) == CONTROLLER_RULES
    binding = next(
        o for o in objects if o["kind"] == "RoleBinding" and o["roleRef"]["kind"] == "ClusterRole"
    )
    # Bound in the mapped namespace only: no ClusterRoleBinding.
    assert binding["metadata"]["namespace"] == "team-a"
    assert binding["roleRef"]["name"] == cluster_role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    ]
    assert not [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    lease_role = one(objects, "Role", f"{cluster_role['metadata']['name']}-lease")
    assert _rules(lease_role) == {("coordination.k8s.io", "leases"): {"get", "create", "update"}}


def _admits(policy: dict[str, Any], resource: dict[str, Any]) -> tuple[bool, str]:
    """Whether the policy's CEL expression admits ``resource``, and its refusal message,
    evaluated as the API server evaluates them (``object`` is the resource)."""
    import celpy

    (validation,) = policy["spec"]["validations"]
    environment = celpy.Environment()
    activation = {"object": celpy.json_to_cel(resource)}

    def evaluate(expression: str) -> Any:
        return environment.program(environment.compile(expression)).evaluate(activation)

    return bool(evaluate(validation["expression"])), str(evaluate(validation["messageExpression"]))


def test_an_instance_type_this_server_does_not_run_is_refused_at_admission(
    chart: helm.Chart,
) -> None:
    gr6 = {"name": "ml.gr6.4xlarge", "vcpus": 16, "memory_gib": 128, "gpus": 1, "gpu_model": "L4"}
    # A null takes a type out of the chart's default backends (Helm merges the maps).
    values = {**ENABLED, "instanceTypes": [gr6], "backends": {"ml.p4d.24xlarge": None}}
    objects = objects_of(chart, values)
    policies = {
        tuple(p["spec"]["matchConstraints"]["resourceRules"][0]["resources"]): p
        for p in objects
        if p["kind"] == "ValidatingAdmissionPolicy"
    }
    bindings = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert set(policies) == {("trainingjobs",), ("hyperparametertuningjobs",)}
    assert {b["spec"]["policyName"] for b in bindings} == {
        p["metadata"]["name"] for p in policies.values()
    }
    for binding in bindings:
        assert binding["spec"]["validationActions"] == ["Deny"]
        # In the controller's namespaces only.
        (selector,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
        assert (selector["key"], selector["values"]) == ("kubernetes.io/metadata.name", ["team-a"])
    for policy in policies.values():
        (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
        assert rule["apiGroups"] == ["runyard.dev"]

    # A TrainingJob names its instance type in its spec; a HyperparameterTuningJob in its
    # spec's training job.
    def training(instance_type: str) -> dict[str, Any]:
        return {"metadata": {"name": "j"}, "spec": {"instanceType": instance_type}}

    def tuning(instance_type: str) -> dict[str, Any]:
        return {"metadata": {"name": "t"}, "spec": {"trainingJob": {"instanceType": instance_type}}}

    cases = [
        (policies[("trainingjobs",)], training, "spec.instanceType", {"instance_type": "x"}),
        (
            policies[("hyperparametertuningjobs",)],
            tuning,
            "spec.trainingJob.instanceType",
            {"trainingJob": {"instance_type": "x"}},
        ),
    ]
    import celpy

    # Exactly what RUNYARD_BACKENDS sends to a backend: the built-in types but the one
    # taken out, and the one configured.
    runs = sorted(InstanceCatalog().cluster_types() - {"ml.p4d.24xlarge"} | {"ml.gr6.4xlarge"})
    for policy, resource, field, misspelled in cases:
        # Without the field, the CRD's rule refuses it, naming it as it is spelled now
        # (and why, for a resource in the REST spelling): nothing for this policy to judge.
        (validation,) = policy["spec"]["validations"]
        environment = celpy.Environment()
        program = environment.program(environment.compile(validation["expression"]))
        for spec in (misspelled, {}):
            assert bool(program.evaluate({"object": celpy.json_to_cel({"spec": spec})})), spec
        for admitted_type in runs:
            assert _admits(policy, resource(admitted_type))[0], admitted_type
        for refused in ("ml.p4d.24xlarge", "ml.p9.huge", "local"):
            admitted, message = _admits(policy, resource(refused))
            assert not admitted, refused
            assert message == (
                f"{field}: unknown instance type {refused}; this server runs: " + ", ".join(runs)
            )


def test_without_the_controller_there_is_no_admission_policy(chart: helm.Chart) -> None:
    kinds = {o["kind"] for o in objects_of(chart, {**EXTERNAL, "controller": {"enabled": False}})}
    assert not kinds & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def test_a_resource_applied_beside_the_default_release_becomes_a_job(
    chart: helm.Chart, kube_server: KubeServer, settings: Settings, source_dir: Path
) -> None:
    # The controller as the default install configures it, against an API server with the
    # chart's CRD, and the example resource applied in the release's namespace.
    configured = _controller_settings(objects_of(chart, {}))
    cluster = Cluster(kube_server)
    cluster.namespace = NAMESPACE
    controller = Controller(
        settings.model_copy(update={"controller": configured}), cluster.api_client
    )
    example = yaml.safe_load((REPO / "examples" / "kubernetes" / "trainingjob.yaml").read_text())
    # Its code where this server reads code, on an instance type it runs here.
    spec = {**example["spec"], "sourceUri": source_dir.as_uri(), "entryPoint": "train.py"}
    # The API server outlives this test: a name of its own.
    name = f"{example['metadata']['name']}-{uuid.uuid4().hex[:6]}"
    cluster.apply_spec(name, {**spec, "instanceType": "local"})
    controller.sync()
    resource = cluster.get(name)
    conditions = {c["type"]: c["status"] for c in resource["status"]["conditions"]}
    assert conditions["Accepted"] == "True", resource["status"]
    assert resource["status"]["project"] == "default"
    with session_scope(settings.database_url, readonly=True) as session:
        job = named(session, name).record.job_spec()
    assert (job.instance_count, job.hyperparameters["epochs"]) == (
        example["spec"]["instanceCount"],
        example["spec"]["hyperparameters"]["epochs"],
    )
