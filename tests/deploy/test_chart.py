"""charts/runyard, rendered and linted by Helm's own engine (helm_python: the Helm v4 Go SDK
through its C library, offline), every object checked against the official schemas of the
oldest Kubernetes the chart claims and of the newest kubernetes-validate ships (strict:
an unknown field fails), and the settings it renders parsed by Runyard's own Settings.
What the chart runs beside Runyard (its own databases and object store, secrets, S3,
network policies) is tested in test_chart_standalone.py, the TrainingJob controller in
test_chart_controller.py."""

from __future__ import annotations

import copy
import json
import re
import typing
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from contract.variables import AWS_STATIC_KEYS
from provisioning import registry
from provisioning.base import JobRef, LaunchRequest
from provisioning.catalog import InstanceCatalog
from provisioning.kubernetes import backend as kubernetes_backend
from provisioning.kubernetes.settings import KubernetesSettings
from service.jobs.schemas import JobCreate
from tests.deploy.chart import (
    CHART,
    NAMESPACE,
    NEWEST,
    OLDEST,
    all_workloads,
    component,
    environment,
    objects_of,
    one,
    pod_spec,
    render_texts,
    runyard_settings,
    secret_refs,
    workloads,
)
from tests.deploy.support import REPO, SERVICE_COMMANDS, assert_health_route, check_runyard_args


def _docs_values(name: str) -> dict[str, Any]:
    """The values file ``name`` that docs/deploying.md shows (a block headed ``# name``)."""
    page = (REPO / "docs" / "deploying.md").read_text()
    found = re.search(rf"```yaml\n# {re.escape(name)}\n(.*?)```", page, re.DOTALL)
    assert found, f"docs/deploying.md shows no {name}"
    values: dict[str, Any] = yaml.safe_load(found.group(1))
    return values


# Artifacts on a volume every pod mounts (a ReadWriteMany class the operator has).
SHARED_ROOT = "file:///var/lib/runyard/artifacts"
# Everything outside the cluster given: the chart then runs no database or store of its own.
EXTERNAL = {
    "database": {"url": "postgresql://runyard:pw@postgres.db:5432/runyard"},
    "broker": {"url": "redis://redis.db:6379/0"},
    "secretKey": "9" * 64,
    "artifacts": {"root": SHARED_ROOT},
}
S3_ROOT = "s3://runyard-artifacts/prod"
VARIANTS: dict[str, dict[str, Any]] = {
    # Nothing given: the chart's own PostgreSQL, Redis and MinIO, generated secrets, the
    # controller taking the release's namespace's TrainingJobs.
    "defaults": {},
    "external": EXTERNAL,
    "external-database-only": {"database": EXTERNAL["database"]},
    "ephemeral-databases": {
        "postgresql": {"persistence": {"enabled": False}},
        "redis": {"persistence": {"enabled": False}},
        "minio": {"persistence": {"enabled": False}},
    },
    "minio-keys-of-the-operator": {"minio": {"existingSecret": "runyard-minio-keys"}},
    # The chart's MinIO reached from job pods in a namespace of their own.
    "jobs-namespace-minio": {"kubernetes": {"namespace": "training"}, "createJobsNamespace": True},
    "controller-namespaces": {"controller": {"namespaces": {"team-a": "vision", "team-b": "nlp"}}},
    "no-controller": {"controller": {"enabled": False}},
    "ingress": {
        **EXTERNAL,
        "ingress": {
            "enabled": True,
            "className": "nginx",
            "hosts": [{"host": "runyard.test", "paths": [{"path": "/", "pathType": "Prefix"}]}],
            "tls": [{"hosts": ["runyard.test"], "secretName": "runyard-tls"}],
        },
    },
    "volcano": {**EXTERNAL, "kubernetes": {"gang_scheduler": "volcano", "gang_queue": "train"}},
    "existing-secret": {"existingSecret": "runyard-credentials", "artifacts": {"root": S3_ROOT}},
    "jobs-namespace": {
        **EXTERNAL,
        "kubernetes": {"namespace": "training"},
        "createJobsNamespace": True,
        "artifacts": {"root": SHARED_ROOT, "persistence": {"existingClaim": "shared-artifacts"}},
    },
    # The values the instance-types section of docs/deploying.md gives.
    "instance-types": {**EXTERNAL, **_docs_values("instance-types.yaml")},
    "no-persistence": {
        **EXTERNAL,
        "artifacts": {"root": SHARED_ROOT, "persistence": {"enabled": False}},
    },
    # S3 artifacts with keys from values, job pods told the endpoint by the chart.
    "s3": {
        "artifacts": {
            "root": S3_ROOT,
            "s3": {
                "endpoint": "http://minio.storage.svc:9000",
                "region": "eu-west-1",
                "accessKeyId": "runyard-server",
                "secretAccessKey": "server-secret-key-1",
            },
        },
    },
    # S3 with the operator's Secrets, job pods in their own namespace with a cloud identity.
    "s3-operator-secrets": {
        "artifacts": {
            "root": S3_ROOT,
            "s3": {"existingSecret": "runyard-s3", "stsEndpoint": "https://sts.example.test"},
        },
        "kubernetes": {"namespace": "training", "s3_secret": "training-s3"},
        "createJobsNamespace": True,
        "jobServiceAccount": {
            "create": True,
            "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/jobs"},
        },
    },
    "no-network-policies": {"networkPolicy": {"enabled": False}},
}

# What the kubernetes backend does in the jobs namespace: (apiGroup, resource) -> verbs.
BACKEND_RULES = {
    ("", "pods"): {"list", "create", "delete"},
    ("", "pods/log"): {"get"},
    ("", "services"): {"create", "delete"},
    ("", "configmaps"): {"get", "list", "create", "delete"},
    ("", "secrets"): {"create", "delete"},
    ("", "events"): {"list"},
}
VOLCANO_RULE = {("scheduling.volcano.sh", "podgroups"): {"create", "delete"}}
# An instance type the catalog lacks, as the chart's instanceTypes gives one.
G6E = {"name": "ml.g6e.xlarge", "vcpus": 4, "memory_gib": 32, "gpus": 1, "gpu_model": "L40S"}


def _rules(objects: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    """What the worker's Role in the jobs namespace allows."""
    role = one(objects, "Role", "ry-runyard-jobs")
    rules: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "resourceNames" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                rules.setdefault((group, resource), set()).update(rule["verbs"])
    return rules


# -- Helm's own checks ------------------------------------------------------------------


def test_the_native_helm_library_loads() -> None:
    assert helm.helm_sdk_version().startswith("v4.")


@pytest.mark.parametrize("variant", VARIANTS)
def test_lint_is_clean(variant: str) -> None:
    report = helm.lint(CHART, VARIANTS[variant], strict=True, kube_version=f"v{NEWEST}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems, problems
    assert not report["errors"]


@pytest.mark.parametrize("version", sorted({OLDEST, NEWEST}))
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_object_is_valid_kubernetes(chart: helm.Chart, variant: str, version: str) -> None:
    objects = objects_of(chart, VARIANTS[variant])
    assert len(objects) >= 8
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


def test_names_are_unique_per_kind(chart: helm.Chart) -> None:
    for variant in VARIANTS.values():
        keys = [
            (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])
            for o in objects_of(chart, variant)
        ]
        assert len(keys) == len(set(keys)), keys


# -- required values and the schema -------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "values"),
    [
        ("database.url", {"postgresql": {"enabled": False}}),
        ("broker.url", {"redis": {"enabled": False}}),
        ("artifacts.root", {"minio": {"enabled": False}}),
    ],
)
def test_a_database_turned_off_needs_its_url(
    chart: helm.Chart, value: str, values: dict[str, Any]
) -> None:
    with pytest.raises(helm.HelmRenderError, match=re.escape(f"{value} is required")):
        render_texts(chart, values)


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"postgresql": {"enabled": True}, "database": EXTERNAL["database"]}, "database.url"),
        ({"redis": {"enabled": True}, "broker": EXTERNAL["broker"]}, "broker.url"),
        ({"postgresql": {"enabled": True}, "existingSecret": "mine"}, "existingSecret"),
        ({"minio": {"enabled": True}, "artifacts": {"root": S3_ROOT}}, "artifacts.root"),
    ],
)
def test_a_database_both_bundled_and_given_is_refused(
    chart: helm.Chart, values: dict[str, Any], named: str
) -> None:
    with pytest.raises(helm.HelmRenderError, match=rf"enabled is true and {re.escape(named)}"):
        render_texts(chart, values)


def test_the_charts_own_store_is_wired_by_the_chart_alone(chart: helm.Chart) -> None:
    # S3 settings name the store artifacts.root names; with none named, they would be
    # silently ignored beside the chart's MinIO.
    values = {"artifacts": {"s3": {"endpoint": "http://minio.storage.svc:9000"}}}
    with pytest.raises(helm.HelmRenderError, match=r"artifacts\.s3\.endpoint is set, but"):
        render_texts(chart, values)


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"api": {"replicaCount": "two"}}, "/api/replicaCount"),
        ({"worker": {"replicas": 2}}, "/worker"),
        ({"kubernetes": {"gang_scheduler": "slurm"}}, "/kubernetes/gang_scheduler"),
        ({"kubernetes": {"agent_port": 80}}, "/kubernetes/agent_port"),
        ({"kubernetes": {"namespace": "Not_A_Label"}}, "/kubernetes/namespace"),
        ({"backends": {"ml.m5.large": "slurm"}}, "/backends/ml.m5.large"),
        ({"extraConfig": {"RUNYARD_SECRET_KEY": "x"}}, "RUNYARD_SECRET_KEY"),
        ({"imagePullSecret": []}, "imagePullSecret"),
        ({"adminToken": "secret"}, "/adminToken"),
        ({"clusterDomain": "Cluster.Local"}, "/clusterDomain"),
        ({"instanceTypes": [{**G6E, "gpu": 1}]}, "/instanceTypes/0"),
        ({"instanceTypes": [{**G6E, "name": "g6e.xlarge"}]}, "/instanceTypes/0/name"),
        ({"instanceTypes": [{**G6E, "vcpus": "4"}]}, "/instanceTypes/0/vcpus"),
        (
            {"instanceTypes": [{**G6E, "tolerations": [{"key": "gpu", "operatr": "Exists"}]}]},
            "/instanceTypes/0/tolerations/0",
        ),
        ({"secretKey": "changeme"}, "/secretKey"),
        ({"postgresql": {"enabled": "yes"}}, "/postgresql/enabled"),
        ({"redis": {"persistence": {"size": "lots"}}}, "/redis/persistence/size"),
        ({"networkPolicies": {"enabled": False}}, "networkPolicies"),
        ({"artifacts": {"root": "gs://bucket/prefix"}}, "/artifacts/root"),
        ({"artifacts": {"root": "s3://Not_A_Bucket"}}, "/artifacts/root"),
        ({"artifacts": {"s3": {"endpoint": "minio:9000"}}}, "/artifacts/s3/endpoint"),
        ({"artifacts": {"s3": {"bucket": "x"}}}, "/artifacts/s3"),
        ({"kubernetes": {"s3_secret": "Not_A_Name"}}, "/kubernetes/s3_secret"),
        ({"jobServiceAccount": {"annotations": {"a": 1}}}, "/jobServiceAccount/annotations/a"),
        ({"minio": {"enabled": "yes"}}, "/minio/enabled"),
        ({"minio": {"bucket": "Not_A_Bucket"}}, "/minio/bucket"),
        ({"minio": {"persistence": {"size": "lots"}}}, "/minio/persistence/size"),
        ({"minio": {"accessKey": "x"}}, "/minio"),
        ({"controller": {"namespaces": {"Team_A": "vision"}}}, "'Team_A' does not match"),
    ],
)
def test_the_schema_rejects_wrong_values(
    chart: helm.Chart, values: dict[str, Any], where: str
) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(where)):
        chart.validate_schema({**EXTERNAL, **values})
    # And so does every install, before any template runs.
    with pytest.raises(helm.HelmValuesError):
        render_texts(chart, {**EXTERNAL, **values})


def test_the_schema_accepts_every_variant(chart: helm.Chart) -> None:
    for values in VARIANTS.values():
        chart.validate_schema(values)


def _schema_node(
    schema: dict[str, Any], node: dict[str, Any], key: str
) -> tuple[dict[str, Any], bool]:
    """The schema of ``key`` inside ``node``, and whether it is a named property (rather
    than an entry of a free-form map)."""
    node = _resolve(schema, node)
    if key in node.get("properties", {}):
        return _resolve(schema, node["properties"][key]), True
    entry = node.get("additionalProperties")
    assert isinstance(entry, dict), f"{key} is not in the schema"
    return _resolve(schema, entry), False


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    if "$ref" not in node:
        return node
    found: Any = schema
    for part in node["$ref"].removeprefix("#/").split("/"):
        found = found[part]
    return found


def test_the_schema_describes_every_value_with_a_type(chart: helm.Chart) -> None:
    schema = chart.schema
    assert schema is not None
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    described: list[str] = []

    def walk(values: Any, node: dict[str, Any], path: str, named: bool) -> None:
        assert "type" in node, f"{path} has no type"
        assert node.get("description") or not named, f"{path} has no description"
        if "properties" in node:
            assert node.get("additionalProperties") is False, f"{path}: unknown keys allowed"
            assert set(node.get("required", [])) <= set(node["properties"])
        # A free-form object (a securityContext, affinity) is Kubernetes' own type: the
        # rendered objects are validated against Kubernetes' schemas instead.
        free_form = "properties" not in node and not isinstance(
            node.get("additionalProperties"), dict
        )
        if isinstance(values, dict) and not free_form:
            for key, value in values.items():
                child, child_named = _schema_node(schema, node, key)
                walk(value, child, f"{path}.{key}", child_named)
                described.append(f"{path}.{key}")

    walk(chart.values, schema, "", True)
    assert ".kubernetes.agent_port" in described
    assert ".backends.ml.m5.large" in described
    assert set(schema["required"]) == set(chart.values)


def test_the_kubernetes_values_are_the_backend_settings(chart: helm.Chart) -> None:
    # The chart's workers run in the cluster: of the registered backends' settings it
    # offers the Kubernetes backend's, under the backend's name as the server reads them.
    offered = {name for name in registry.PLUGINS if name in chart.values}
    assert offered == {"kubernetes"}
    model = registry.PLUGINS["kubernetes"].settings_model
    assert model is KubernetesSettings
    fields = model.model_fields
    values = chart.values["kubernetes"]
    assert set(values) <= set(fields), set(values) - set(fields)
    section = chart.schema["properties"]["kubernetes"]["properties"]
    for name in values:
        choices = typing.get_args(fields[name].annotation)
        if typing.get_origin(fields[name].annotation) is typing.Literal:
            assert sorted(section[name]["enum"]) == sorted(choices), name
    # Every setting the chart does not offer is one an in-cluster worker has no use for.
    assert set(fields) - set(values) == {
        "kubeconfig",
        "context",
        "api_url",
        "artifact_volume_claim",  # from artifacts.persistence
        "cluster_domain",  # from clusterDomain
    }


# -- what is rendered ------------------------------------------------------------------------


def test_the_rendered_settings_are_valid_runyard_settings(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = objects_of(chart, EXTERNAL)
    for part in SERVICE_COMMANDS:
        environ = environment(objects, part)
        KubernetesSettings.model_validate_json(environ["RUNYARD_KUBERNETES"])
        settings = runyard_settings(environ, monkeypatch)
        assert settings.environment == "production"
        assert settings.database_url == EXTERNAL["database"]["url"]
        assert settings.broker_url == EXTERNAL["broker"]["url"]
        assert settings.secret_key is not None
        assert settings.secret_key.get_secret_value() == EXTERNAL["secretKey"]
    kube = settings.kubernetes
    assert kube.namespace == NAMESPACE
    assert kube.image == "runyard/runtime:0.1.0"
    assert kube.artifact_volume_claim == "ry-runyard-artifacts"
    assert kube.gang_scheduler == "none"
    assert kube.service_account is None
    assert kube.priority_class is None
    # Every ml.* type of the catalog runs on Kubernetes, and nothing else is offered.
    ml_types = InstanceCatalog().cluster_types()
    assert settings.backends == dict.fromkeys(ml_types, "kubernetes")
    # Job pods reach the API through its Service.
    service = one(objects, "Service", "ry-runyard-api")
    port = service["spec"]["ports"][0]["port"]
    assert settings.public_url == f"http://ry-runyard-api.{NAMESPACE}.svc.cluster.local:{port}"


def test_every_kubernetes_setting_reaches_the_worker(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = {
        "namespace": NAMESPACE,
        "image": "registry.test/runyard/runtime:7",
        "image_pull_policy": "Always",
        "image_pull_secrets": ["registry"],
        "service_account": "trainer",
        "s3_secret": "training-s3",
        "node_selector": {"pool": "gpu"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "priority_class": "training",
        "schedule_timeout_seconds": 600.5,
        "on_unschedulable": "wait",
        "gang_scheduler": "kueue",
        "gang_queue": "team-a",
        "agent_port": 7100,
    }
    values = {
        **EXTERNAL,
        "kubernetes": given,
        "publicUrl": "https://runyard.test",
        "backends": {"ml.p4d.24xlarge": "ec2"},
        "extraConfig": {"RUNYARD_MAX_INSTANCE_COUNT": 32},
    }
    settings = runyard_settings(environment(objects_of(chart, values), "worker"), monkeypatch)
    assert settings.kubernetes == KubernetesSettings(
        **given, artifact_volume_claim="ry-runyard-artifacts"
    )
    assert settings.public_url == "https://runyard.test"
    assert settings.backends["ml.p4d.24xlarge"] == "ec2"
    assert settings.backends["ml.m5.large"] == "kubernetes"
    assert settings.max_instance_count == 32


def test_the_cluster_domain_reaches_the_api_url_and_the_job_pods(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert chart.values["clusterDomain"] == KubernetesSettings().cluster_domain
    values = {**EXTERNAL, "clusterDomain": "k8s.example.internal"}
    settings = runyard_settings(environment(objects_of(chart, values), "worker"), monkeypatch)
    assert settings.kubernetes.cluster_domain == "k8s.example.internal"
    assert settings.public_url.startswith(f"http://ry-runyard-api.{NAMESPACE}.svc.k8s.example.")


def test_rbac_is_exactly_what_the_backend_needs(chart: helm.Chart) -> None:
    objects = objects_of(chart, EXTERNAL)
    assert _rules(objects) == BACKEND_RULES
    role, binding = (
        one(objects, "Role", "ry-runyard-jobs"),
        one(objects, "RoleBinding", "ry-runyard-jobs"),
    )
    assert role["metadata"]["namespace"] == NAMESPACE
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    account = one(objects, "ServiceAccount", "ry-runyard")["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    ]
    assert not [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    # Only the worker holds that identity, the controller its own (test_chart_controller);
    # the other pods mount no API token at all.
    for part, workload in all_workloads(objects).items():
        pod = pod_spec(workload)
        if part == "worker":
            assert pod["serviceAccountName"] == account
            assert pod["automountServiceAccountToken"] is True
        elif part == "controller":
            assert pod["serviceAccountName"] == "ry-runyard-controller"
        else:
            assert "serviceAccountName" not in pod, part
            assert pod["automountServiceAccountToken"] is False, part


def test_podgroups_are_allowed_only_with_volcano(chart: helm.Chart) -> None:
    assert _rules(objects_of(chart, VARIANTS["volcano"])) == {**BACKEND_RULES, **VOLCANO_RULE}
    kueue = {**EXTERNAL, "kubernetes": {"gang_scheduler": "kueue"}}
    assert _rules(objects_of(chart, kueue)) == BACKEND_RULES


def test_the_role_allows_exactly_the_calls_the_backend_makes(chart: helm.Chart) -> None:
    # Read from the backend's source, so a new call there fails here until the Role has
    # it, and a call removed there fails here until the Role drops it.
    source = Path(kubernetes_backend.__file__).read_text()
    verbs = {"create": "create", "read": "get", "list": "list", "delete": "delete"}
    verbs |= {"patch": "patch", "replace": "update"}
    call = re.compile(r"\.(create|read|list|delete|patch|replace)_namespaced_(\w+?)\(")
    calls = set(call.findall(source))
    assert calls
    group, _version, plural = kubernetes_backend.VOLCANO
    used: dict[tuple[str, str], set[str]] = {}
    for action, kind in calls:
        if kind == "custom_object":
            resource = (group, plural)
        elif kind.endswith("_log"):
            resource = ("", kind.removesuffix("_log") + "s/log")
        else:
            resource = ("", kind.replace("_", "") + "s")
        used.setdefault(resource, set()).add(verbs[action])
    assert _rules(objects_of(chart, VARIANTS["volcano"])) == used


def _without_server_keys(environ: dict[str, str]) -> dict[str, str]:
    """What a part that stores no artifacts (the migration) gets of another's settings."""
    return {key: value for key, value in environ.items() if key not in AWS_STATIC_KEYS}


def _hooks(obj: dict[str, Any]) -> set[str]:
    return set(obj["metadata"]["annotations"]["helm.sh/hook"].split(","))


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("annotations") or {}


def _sources(container: dict[str, Any]) -> set[str]:
    """The ConfigMap and Secrets a container's environment comes from."""
    names = {source["configMapRef"]["name"] for source in container["envFrom"]}
    return names | {ref["name"] for ref in secret_refs(container).values()}


@pytest.mark.parametrize("values", [{}, EXTERNAL], ids=["bundled", "external"])
def test_the_migration_runs_after_install_on_the_releases_own_settings(
    chart: helm.Chart, values: dict[str, Any]
) -> None:
    # After, not before, the first install: the chart's own PostgreSQL is part of the
    # release, so before it there is no database to migrate.
    objects = objects_of(chart, values)
    job = workloads(objects)["migrate"]
    assert job["kind"] == "Job"
    assert _hooks(job) == {"post-install", "pre-upgrade"}
    container = pod_spec(job)["containers"][0]
    assert container["command"] == ["runyard", "migrate"]
    assert pod_spec(job)["restartPolicy"] == "Never"
    # The release's ConfigMap and Secret exist by then: no hook copies are made.
    assert _sources(container) == {"ry-runyard"}
    hooks = {component(o) for o in objects if "helm.sh/hook" in _annotations(o)}
    # Beside it, with the chart's own MinIO, only the Job that makes its bucket.
    assert hooks == ({"migrate", "minio-bucket"} if not values else {"migrate"})
    assert {o["kind"] for o in objects if "helm.sh/hook" in _annotations(o)} == {"Job"}
    assert not [v for v in pod_spec(job)["volumes"] if "persistentVolumeClaim" in v]
    assert environment(objects, "migrate") == _without_server_keys(environment(objects, "api"))


def test_the_migration_runs_before_an_upgrade_on_copies_of_the_new_settings(
    chart: helm.Chart,
) -> None:
    new = {**EXTERNAL, "database": {"url": "postgresql://runyard:pw@new.db:5432/runyard"}}
    objects = objects_of(chart, new, upgrade=True)
    job = workloads(objects)["migrate"]
    hooks = job["metadata"]["annotations"]
    # The release's own ConfigMap and Secret still hold the old values before an upgrade:
    # the Job reads copies of the new ones, hooks made before it.
    container = pod_spec(job)["containers"][0]
    copies = [o for o in objects if o["metadata"]["name"] in _sources(container) and o is not job]
    assert {o["kind"] for o in copies} == {"ConfigMap", "Secret"}
    for obj in copies:
        annotations = obj["metadata"]["annotations"]
        assert _hooks(obj) == {"post-install", "pre-upgrade"}
        assert int(annotations["helm.sh/hook-weight"]) < int(hooks["helm.sh/hook-weight"])
        # Removed once the migration succeeded: the release's own copies take over.
        assert "hook-succeeded" in annotations["helm.sh/hook-delete-policy"]
    assert container["command"] == ["runyard", "migrate"]
    assert environment(objects, "migrate") == _without_server_keys(environment(objects, "api"))
    assert environment(objects, "migrate")["RUNYARD_DATABASE_URL"] == new["database"]["url"]


def test_every_container_runs_a_runyard_command(chart: helm.Chart) -> None:
    for name, values in VARIANTS.items():
        parts = workloads(objects_of(chart, values))
        controller = {"controller"} if name != "no-controller" else set()
        assert set(parts) == {*SERVICE_COMMANDS, *controller}, name
        for part, workload in parts.items():
            (container,) = pod_spec(workload)["containers"]
            assert container["image"] == "runyard/service:0.1.0"
            program, *argv = container["command"]
            assert program == "runyard"
            assert check_runyard_args(argv) == part


def test_beat_is_a_single_pod_replaced_not_rolled(chart: helm.Chart) -> None:
    values = {**EXTERNAL, "api": {"replicaCount": 3}, "worker": {"replicaCount": 5}}
    parts = workloads(objects_of(chart, values))
    assert parts["beat"]["spec"]["replicas"] == 1
    assert parts["beat"]["spec"]["strategy"] == {"type": "Recreate"}
    assert parts["api"]["spec"]["replicas"] == 3
    assert parts["worker"]["spec"]["replicas"] == 5


def test_the_api_is_probed_on_its_health_route(chart: helm.Chart, tmp_path: Path) -> None:
    objects = objects_of(chart, EXTERNAL)
    (container,) = pod_spec(workloads(objects)["api"])["containers"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert check_runyard_args(container["command"][1:]) == "api"
    assert container["command"][container["command"].index("--port") + 1] == str(ports["http"])
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        assert get["port"] == "http"
        assert_health_route(get["path"], tmp_path)
    service = one(objects, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert (
        service["spec"]["selector"] == workloads(objects)["api"]["spec"]["selector"]["matchLabels"]
    )


def test_resources_come_from_values(chart: helm.Chart) -> None:
    wanted = {"requests": {"cpu": "2", "memory": "3Gi"}, "limits": {"cpu": "4", "memory": "6Gi"}}
    values = copy.deepcopy(EXTERNAL)
    for part in ("api", "worker", "beat", "migration", "controller"):
        values[part] = {"resources": wanted}
    for workload in workloads(objects_of(chart, values)).values():
        assert pod_spec(workload)["containers"][0]["resources"] == wanted


def test_control_plane_pods_run_as_non_root(chart: helm.Chart) -> None:
    for workload in workloads(objects_of(chart, EXTERNAL)).values():
        pod = pod_spec(workload)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True
            assert context["capabilities"] == {"drop": ["ALL"]}
            mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
            assert {"/tmp", "/var/lib/runyard"} <= mounts, "writable home and /tmp"


def test_the_artifact_claim_is_shared_by_api_worker_and_job_pods(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = objects_of(chart, EXTERNAL)
    claim = one(objects, "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    settings = runyard_settings(environment(objects, "worker"), monkeypatch)
    root = settings.artifact_root.removeprefix("file://")
    for part, workload in workloads(objects).items():
        pod = pod_spec(workload)
        claims = {
            v["name"]: v["persistentVolumeClaim"]["claimName"]
            for v in pod["volumes"]
            if "persistentVolumeClaim" in v
        }
        mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        # The parts that store or read artifacts (the controller checks a job's source).
        if part in ("api", "worker", "controller"):
            assert claims == {"artifacts": claim["metadata"]["name"]}
            assert mounts["artifacts"] == root
        else:
            assert not claims, part
    # The backend mounts the same claim at the same path in every job pod.
    assert settings.kubernetes.artifact_volume_claim == claim["metadata"]["name"]


def test_without_persistence_nothing_is_mounted(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = objects_of(chart, VARIANTS["no-persistence"])
    assert not [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    settings = runyard_settings(environment(objects, "worker"), monkeypatch)
    assert settings.kubernetes.artifact_volume_claim is None
    notes = render_texts(chart, VARIANTS["no-persistence"])["runyard/templates/NOTES.txt"]
    assert "No shared artifact claim" in notes


def test_another_jobs_namespace_needs_a_claim_that_exists_there(chart: helm.Chart) -> None:
    values = {**EXTERNAL, "kubernetes": {"namespace": "training"}}
    with pytest.raises(helm.HelmRenderError, match=r"artifacts\.persistence\.existingClaim"):
        render_texts(chart, values)
    objects = objects_of(chart, VARIANTS["jobs-namespace"])
    assert one(objects, "Namespace")["metadata"]["name"] == "training"
    assert one(objects, "Role", "ry-runyard-jobs")["metadata"]["namespace"] == "training"
    binding = one(objects, "RoleBinding", "ry-runyard-jobs")
    assert binding["metadata"]["namespace"] == "training"
    assert binding["subjects"][0]["namespace"] == NAMESPACE
    assert not [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    environ = environment(objects, "worker")
    assert json.loads(environ["RUNYARD_KUBERNETES"])["namespace"] == "training"
    assert json.loads(environ["RUNYARD_KUBERNETES"])["artifact_volume_claim"] == "shared-artifacts"


def test_an_existing_secret_replaces_the_charts_own(chart: helm.Chart) -> None:
    objects = objects_of(chart, VARIANTS["existing-secret"])
    assert not [o for o in objects if o["kind"] == "Secret"]
    for part, workload in workloads(objects).items():
        container = pod_spec(workload)["containers"][0]
        refs = secret_refs(container)
        assert refs == {
            **{
                key: {"name": "runyard-credentials", "key": key}
                for key in ("RUNYARD_DATABASE_URL", "RUNYARD_BROKER_URL", "RUNYARD_SECRET_KEY")
            },
            "RUNYARD_ADMIN_TOKEN": {
                "name": "runyard-credentials",
                "key": "RUNYARD_ADMIN_TOKEN",
                "optional": True,
            },
        }, part


def test_secrets_stay_out_of_the_configmap(chart: helm.Chart) -> None:
    objects = objects_of(chart, EXTERNAL)
    for config in (o for o in objects if o["kind"] == "ConfigMap"):
        text = json.dumps(config["data"])
        assert EXTERNAL["secretKey"] not in text
        assert "pw@" not in text
        assert not {"RUNYARD_DATABASE_URL", "RUNYARD_SECRET_KEY"} & set(config["data"])


def test_the_ingress_routes_to_the_api_service(chart: helm.Chart) -> None:
    objects = objects_of(chart, VARIANTS["ingress"])
    ingress = one(objects, "Ingress")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    service = one(objects, "Service")
    assert backend == {"name": service["metadata"]["name"], "port": {"name": "http"}}
    assert not [o for o in objects_of(chart, EXTERNAL) if o["kind"] == "Ingress"]


def test_notes_say_how_to_get_a_token(chart: helm.Chart) -> None:
    notes = render_texts(chart, EXTERNAL)["runyard/templates/NOTES.txt"]
    assert f"kubectl -n {NAMESPACE} exec deploy/ry-runyard-api -- runyard token" in notes
    assert "port-forward svc/ry-runyard-api 8642:8642" in notes
    ingress = render_texts(chart, VARIANTS["ingress"])["runyard/templates/NOTES.txt"]
    assert "https://runyard.test" in ingress


def test_an_admin_token_from_values_reaches_every_api_replica(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "ry_" + "a1" * 20
    objects = objects_of(chart, {**EXTERNAL, "adminToken": token})
    settings = runyard_settings(environment(objects, "api"), monkeypatch)
    assert settings.admin_token is not None
    assert settings.admin_token.get_secret_value() == token


def test_instance_types_reach_the_settings_and_run_on_kubernetes_unless_told(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = VARIANTS["instance-types"]
    trn2 = next(kind for kind in given["instanceTypes"] if kind["name"] == "ml.trn2.48xlarge")
    values = {**given, "backends": {"ml.trn2.48xlarge": "ec2"}}
    settings = runyard_settings(environment(objects_of(chart, values), "worker"), monkeypatch)
    catalog = settings.instance_catalog
    g6e = catalog["ml.g6e.xlarge"]
    assert (g6e.vcpus, g6e.memory_gib, g6e.gpus, g6e.gpu_model) == (4, 32, 1, "L40S")
    assert dict(g6e.node_selector) == {"node.kubernetes.io/instance-type": "g6e.xlarge"}
    assert [t.manifest() for t in g6e.tolerations] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert catalog["ml.trn2.48xlarge"].gpu_resource == trn2["gpu_resource"]
    # Each on Kubernetes, unless backends names another; the built-in types keep theirs.
    assert settings.backends["ml.g6e.xlarge"] == "kubernetes"
    assert settings.backends["ml.trn2.48xlarge"] == "ec2"
    assert settings.backends["ml.p4d.24xlarge"] == "kubernetes"
    # Both are built-in types, which the entries replace: the same types, now placed.
    assert set(catalog) == set(InstanceCatalog())
    assert not InstanceCatalog()["ml.g6e.xlarge"].node_selector
    # Without instanceTypes, the setting is not there at all: the built-in types alone.
    assert "RUNYARD_INSTANCE_TYPES" not in environment(objects_of(chart, EXTERNAL), "worker")


def test_a_configured_types_pods_are_valid_kubernetes(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = {
        **VARIANTS["instance-types"],
        "kubernetes": {
            "node_selector": {"pool": "training"},
            "tolerations": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
        },
    }
    settings = runyard_settings(environment(objects_of(chart, values), "worker"), monkeypatch)
    spec = JobCreate.model_validate(
        {
            "name": "trainium",
            "entry_point": "train.py",
            "source_uri": "file:///var/lib/runyard/artifacts/sources/abc.tar.gz",
            "instance_type": "ml.trn2.48xlarge",
            "instance_count": 2,
        }
    ).job_spec_at("file:///var/lib/runyard/artifacts")
    request = LaunchRequest(
        job=JobRef("0" * 32, "trainium"),
        spec=spec,
        service_url=settings.public_url,
        tokens={"algo-1": "t1", "algo-2": "t2"},
    )
    backend = kubernetes_backend.KubernetesBackend.from_settings(settings)
    manifests = backend.materialize(request).public["manifests"]
    pods = [m for m in manifests if m["kind"] == "Pod"]
    assert len(pods) == 2
    for manifest in manifests:
        kubernetes_validate.validate(manifest, NEWEST, strict=True)
    pod = pods[0]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["aws.amazon.com/neuron"] == "16"
    assert pod["nodeSelector"] == {
        "pool": "training",
        "node.kubernetes.io/instance-type": "trn2.48xlarge",
    }
    assert pod["tolerations"] == [
        {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
        {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"},
    ]
