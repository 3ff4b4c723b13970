"""charts/runyard standing up alone: `helm install` with no values on a fresh single-node
cluster (its default storage class, ReadWriteOnce claims only), its own PostgreSQL, Redis
and MinIO when no URLs or store are given, job pods wired to that store as the kubernetes
backend makes them, secrets generated at install and kept across upgrades (read back with
Helm's lookup, here against a Kubernetes API server, kmock), artifacts on an S3 of the
operator's instead, and NetworkPolicies. Every variant's objects are validated against
Kubernetes' schemas in test_chart.py; here, what they mean.

Job pods are the kubernetes backend's own manifests, built from the settings the chart
renders, so the chart's policies and Secrets are checked against the pods Runyard makes."""

from __future__ import annotations

import base64
import copy
import json
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any

import helm_python as helm
import pytest
import yaml

from contract import storage, variables
from provisioning.base import JobRef, LaunchRequest
from provisioning.kubernetes import manifests
from provisioning.kubernetes.backend import KubernetesBackend
from service.jobs.schemas import JobCreate
from service.settings import Settings
from service.training import instance_credentials
from tests.deploy.chart import (
    CHART,
    NAMESPACE,
    NEWEST,
    RELEASE,
    all_workloads,
    component,
    environment,
    manifest_objects,
    objects_of,
    one,
    pod_labels,
    pod_spec,
    render_texts,
    runyard_settings,
    secret_refs,
    selects,
    workloads,
)
from tests.deploy.support import REPO
from tests.deploy.test_chart import EXTERNAL, S3_ROOT, VARIANTS
from tests.kube import KubeServer

SECRET = f"{RELEASE}-runyard"
# What the chart generates when it is not given them.
GENERATED = ("RUNYARD_SECRET_KEY", "RUNYARD_ADMIN_TOKEN", "POSTGRES_PASSWORD", "REDIS_PASSWORD")


def _settings(
    chart: helm.Chart, values: dict[str, Any], monkeypatch: pytest.MonkeyPatch, part: str
) -> Settings:
    return runyard_settings(environment(objects_of(chart, values), part), monkeypatch)


def _job_pods(settings: Settings, *, service_credentials: bool = True) -> list[dict[str, Any]]:
    """The pods the kubernetes backend makes, configured as the chart configures it."""
    spec = JobCreate.model_validate(
        {
            "name": "chart-job",
            "entry_point": "train.py",
            "source_uri": f"{settings.artifact_root}/_sources/abc.tar.gz",
            "instance_type": "ml.m5.xlarge",
            "instance_count": 2,
        }
    ).job_spec_at(f"{settings.artifact_root}/chart-job")
    request = LaunchRequest(
        job=JobRef("7" * 32, "chart-job"),
        spec=spec,
        service_url=settings.public_url,
        tokens={host: f"ryi_{host}" for host in spec.hosts},
        aws_credentials=service_credentials,
    )
    objects = KubernetesBackend.from_settings(settings).materialize(request).plan.objects
    return [manifest for manifest in objects if manifest["kind"] == "Pod"]


def _stateful_set(objects: list[dict[str, Any]], part: str) -> dict[str, Any]:
    return one(objects, "StatefulSet", f"{SECRET}-{part}")


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod_spec(workload)["containers"]
    return container


# -- the chart's own PostgreSQL and Redis ------------------------------------------------


def test_with_nothing_given_the_urls_lead_to_the_charts_own_databases(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = objects_of(chart, {})
    secret = one(objects, "Secret", SECRET)["stringData"]
    for part in ("api", "worker", "beat", "migrate"):
        settings = runyard_settings(environment(objects, part), monkeypatch)
        for url, database, password in (
            (settings.database_url, "postgresql", "POSTGRES_PASSWORD"),
            (settings.broker_url, "redis", "REDIS_PASSWORD"),
        ):
            parsed = urllib.parse.urlsplit(url)
            service = one(objects, "Service", f"{SECRET}-{database}")
            assert parsed.hostname == f"{SECRET}-{database}.{NAMESPACE}.svc.cluster.local"
            (port,) = service["spec"]["ports"]
            assert parsed.port == port["port"]
            # The Service leads to the database's pod, on the port it listens on.
            workload = _stateful_set(objects, database)
            assert selects({"matchLabels": service["spec"]["selector"]}, pod_labels(workload))
            ports = {p["name"]: p["containerPort"] for p in _container(workload)["ports"]}
            assert port["targetPort"] in ports
            # With the password the database was started with.
            assert parsed.password == secret[password]
            assert secret_refs(_container(workload))[password] == {
                "name": SECRET,
                "key": password,
            }
    # The user and database PostgreSQL makes at its first start are those of the URL.
    database = urllib.parse.urlsplit(settings.database_url)
    postgres = _container(_stateful_set(objects, "postgresql"))
    given = {e["name"]: e["value"] for e in postgres["env"] if "value" in e}
    assert (given["POSTGRES_USER"], given["POSTGRES_DB"]) == (
        database.username,
        database.path.removeprefix("/"),
    )
    # Redis is given its password through the kubelet's $(VAR) expansion: no shell, and
    # the password in no manifest but the Secret.
    redis = _container(_stateful_set(objects, "redis"))
    argv = redis["command"]
    assert argv[argv.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    assert secret_refs(redis)["REDISCLI_AUTH"] == {"name": SECRET, "key": "REDIS_PASSWORD"}
    elsewhere = [o for o in objects if o["kind"] != "Secret"]
    assert secret["REDIS_PASSWORD"] not in json.dumps(elsewhere)
    assert secret["POSTGRES_PASSWORD"] not in json.dumps(elsewhere)


@pytest.mark.parametrize(
    ("variant", "bundled"),
    [
        ("defaults", {"postgresql", "redis", "minio"}),
        ("external", set()),
        ("external-database-only", {"redis", "minio"}),
        ("existing-secret", set()),
        ("s3", {"postgresql", "redis"}),
    ],
)
def test_given_urls_leave_out_the_charts_own_databases(
    chart: helm.Chart, variant: str, bundled: set[str]
) -> None:
    objects = objects_of(chart, VARIANTS[variant])
    assert {component(o) for o in objects if o["kind"] == "StatefulSet"} == bundled
    services = {component(o) for o in objects if o["kind"] == "Service"}
    assert services - {"api"} == bundled
    if variant != "existing-secret":
        secret = one(objects, "Secret", SECRET)["stringData"]
        passwords = {"postgresql": "POSTGRES_PASSWORD", "redis": "REDIS_PASSWORD"}
        assert {k for k in secret if k in passwords.values()} == {
            passwords[b] for b in bundled if b in passwords
        }
    # MinIO's keys are a Secret of their own.
    assert ("minio" in bundled) == (f"{SECRET}-minio" in {o["metadata"]["name"] for o in objects})


def test_a_given_url_is_used_as_it_is(chart: helm.Chart, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(chart, VARIANTS["external-database-only"], monkeypatch, "worker")
    assert settings.database_url == EXTERNAL["database"]["url"]
    assert settings.broker_url.startswith("redis://:")
    assert f"@{SECRET}-redis.{NAMESPACE}.svc.cluster.local:6379/0" in settings.broker_url


def test_the_databases_keep_their_data_on_claims_that_outlive_the_release(
    chart: helm.Chart,
) -> None:
    values = {
        "postgresql": {"persistence": {"size": "20Gi", "storageClassName": "fast"}},
        "redis": {"persistence": {"size": "2Gi"}},
    }
    objects = objects_of(chart, values)
    for database, size, storage_class in (("postgresql", "20Gi", "fast"), ("redis", "2Gi", None)):
        workload = _stateful_set(objects, database)
        (claim,) = workload["spec"]["volumeClaimTemplates"]
        assert claim["spec"]["resources"]["requests"]["storage"] == size
        assert claim["spec"].get("storageClassName") == storage_class
        assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
        # `helm uninstall` (deleting the StatefulSet) leaves the data, as it leaves the
        # Secret that holds the password the data was made with.
        assert workload["spec"]["persistentVolumeClaimRetentionPolicy"] == {
            "whenDeleted": "Retain",
            "whenScaled": "Retain",
        }
        mounts = {m["name"]: m["mountPath"] for m in _container(workload)["volumeMounts"]}
        assert claim["metadata"]["name"] in mounts
        assert "data" not in {v["name"] for v in pod_spec(workload).get("volumes", [])}
    postgres = _container(_stateful_set(objects, "postgresql"))
    data_dir = next(e["value"] for e in postgres["env"] if e["name"] == "PGDATA")
    assert data_dir.startswith(
        next(m["mountPath"] for m in postgres["volumeMounts"] if m["name"] == "data") + "/"
    )


def test_databases_without_claims_keep_their_data_in_the_pod(chart: helm.Chart) -> None:
    objects = objects_of(chart, VARIANTS["ephemeral-databases"])
    for database in ("postgresql", "redis"):
        workload = _stateful_set(objects, database)
        assert "volumeClaimTemplates" not in workload["spec"]
        volumes = {v["name"]: v for v in pod_spec(workload)["volumes"]}
        assert volumes["data"] == {"name": "data", "emptyDir": {}}
    argv = _container(_stateful_set(objects, "redis"))["command"]
    assert argv[argv.index("--appendonly") + 1] == "no"


def test_pods_that_need_the_database_at_once_wait_for_it(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The API migrates before it listens, and so does the migration: at install, the
    # chart's PostgreSQL starts at the same time as they do.
    objects = objects_of(chart, {})
    settings = runyard_settings(environment(objects, "api"), monkeypatch)
    database = urllib.parse.urlsplit(settings.database_url)
    for part in ("api", "migrate"):
        (wait,) = pod_spec(workloads(objects)[part])["initContainers"]
        env = {e["name"]: e["value"] for e in wait["env"]}
        assert (env["PGHOST"], int(env["PGPORT"])) == (database.hostname, database.port)
        assert env["PGUSER"] == database.username
        assert wait["image"] == _container(_stateful_set(objects, "postgresql"))["image"]
        # The script is fixed text: where it connects comes from the environment.
        assert wait["command"] == ["sh", "-c", "until pg_isready --quiet; do sleep 2; done"]
    for part in ("worker", "beat"):
        assert "initContainers" not in pod_spec(workloads(objects)[part])
    for workload in workloads(objects_of(chart, EXTERNAL)).values():
        assert "initContainers" not in pod_spec(workload)


def test_the_databases_are_the_images_docker_compose_runs(chart: helm.Chart) -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    objects = objects_of(chart, {})
    for database, service in (("postgresql", "postgres"), ("redis", "redis")):
        assert _container(_stateful_set(objects, database))["image"] == compose[service]["image"]


def test_the_databases_are_probed_without_the_network(chart: helm.Chart) -> None:
    objects = objects_of(chart, {})
    postgres = _container(_stateful_set(objects, "postgresql"))
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        command = postgres[probe]["exec"]["command"]
        assert command[0] == "pg_isready"
        assert command[command.index("--username") + 1] == "runyard"
    redis = _container(_stateful_set(objects, "redis"))
    for probe in ("livenessProbe", "readinessProbe"):
        # redis-cli finds the password in REDISCLI_AUTH, set from the Secret.
        assert redis[probe]["exec"]["command"] == ["redis-cli", "ping"]


def test_the_databases_run_unprivileged_on_a_read_only_root(chart: helm.Chart) -> None:
    objects = objects_of(chart, {})
    for database, writable in (
        ("postgresql", {"/var/lib/postgresql/data", "/var/run/postgresql", "/tmp"}),
        ("redis", {"/data"}),
    ):
        workload = _stateful_set(objects, database)
        pod = pod_spec(workload)
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        container = _container(workload)
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert writable <= {m["mountPath"] for m in container["volumeMounts"]}


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_container_asks_for_resources(chart: helm.Chart, variant: str) -> None:
    for name, workload in all_workloads(objects_of(chart, VARIANTS[variant])).items():
        pod = pod_spec(workload)
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            requests = container["resources"]["requests"]
            assert {"cpu", "memory"} <= set(requests), f"{name}/{container['name']}"


# -- secrets generated and kept -----------------------------------------------------------


def test_generated_secrets_are_valid_and_new_at_each_install(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = one(objects_of(chart, {}), "Secret", SECRET)["stringData"]
    second = one(objects_of(chart, {}), "Secret", SECRET)["stringData"]
    for key in GENERATED:
        assert first[key] != second[key], key
        assert len(first[key]) >= 32, key
    # Runyard takes them (an admin token must look like one).
    settings = _settings(chart, {}, monkeypatch, "api")
    assert settings.admin_token is not None
    assert settings.admin_token.get_secret_value().startswith("ry_")
    assert settings.secret_key is not None


def test_generated_secrets_are_the_same_wherever_one_render_uses_them(chart: helm.Chart) -> None:
    # An upgrade renders the Secret, the migration's copy of it and every pod's checksum:
    # one value each, or the migration would connect with another password.
    objects = objects_of(chart, {}, upgrade=True)
    secret = one(objects, "Secret", SECRET)["stringData"]
    assert one(objects, "Secret", f"{SECRET}-migrate")["stringData"] == secret
    checksums = {
        part: workload["spec"]["template"]["metadata"]["annotations"]["checksum/secret"]
        for part, workload in workloads(objects).items()
        if workload["kind"] == "Deployment"
    }
    assert len(set(checksums.values())) == 1, checksums


def test_given_secrets_are_used_as_they_are(chart: helm.Chart) -> None:
    given = {"secretKey": "k" * 40, "adminToken": "ry_" + "t" * 40}
    secret = one(objects_of(chart, given), "Secret", SECRET)["stringData"]
    assert secret["RUNYARD_SECRET_KEY"] == given["secretKey"]
    assert secret["RUNYARD_ADMIN_TOKEN"] == given["adminToken"]


def test_the_secret_outlives_the_release(chart: helm.Chart) -> None:
    secret = one(objects_of(chart, {}), "Secret", SECRET)
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


@pytest.fixture
def cluster() -> Iterator[KubeServer]:
    server = KubeServer().start()
    server.answer_helm(NEWEST)
    yield server
    server.stop()


def _kept_by_helm(secret: dict[str, Any]) -> dict[str, Any]:
    """``secret`` as the cluster holds it after Helm made it: its data encoded, and
    Helm's marks of the release it belongs to (what lets a later install adopt it)."""
    kept = copy.deepcopy(secret)
    kept["data"] = {
        key: base64.b64encode(value.encode()).decode()
        for key, value in kept.pop("stringData").items()
    }
    kept["metadata"]["annotations"] |= {
        "meta.helm.sh/release-name": RELEASE,
        "meta.helm.sh/release-namespace": NAMESPACE,
    }
    return kept


def _installed(cluster: KubeServer, values: dict[str, Any]) -> dict[str, str]:
    """The chart's Secret as Helm renders it for that cluster (lookup answered by it)."""
    with helm.Config(kube_apiserver=cluster.url, namespace=NAMESPACE) as config:
        release = config.install(CHART, RELEASE, values, namespace=NAMESPACE, dry_run="server")
    return one(manifest_objects([release["manifest"]]), "Secret", SECRET)["stringData"]


def test_a_later_install_keeps_the_secrets_the_cluster_holds(
    chart: helm.Chart, cluster: KubeServer
) -> None:
    # What the first install left in the cluster (and `helm uninstall` leaves there); an
    # upgrade reads it with the same lookup. (A whole install and upgrade cannot run
    # against kmock: Helm 4 applies objects server-side, which it does not emulate.)
    first = one(objects_of(chart, {}), "Secret", SECRET)
    cluster.api().create_namespaced_secret(NAMESPACE, _kept_by_helm(first))
    kept = _installed(cluster, {})
    assert kept == first["stringData"]
    # A value given now wins over the kept one; the others are still kept.
    given = _installed(cluster, {"secretKey": "n" * 64})
    assert given["RUNYARD_SECRET_KEY"] == "n" * 64
    assert given["RUNYARD_ADMIN_TOKEN"] == first["stringData"]["RUNYARD_ADMIN_TOKEN"]


def test_without_a_kept_secret_the_cluster_gets_new_ones(cluster: KubeServer) -> None:
    fresh = _installed(cluster, {})
    assert set(GENERATED) <= set(fresh)
    assert fresh != _installed(cluster, {})


def test_secrets_stay_out_of_config_maps(chart: helm.Chart) -> None:
    for variant in ("defaults", "s3"):
        objects = objects_of(chart, VARIANTS[variant])
        secrets = [
            value
            for o in objects
            if o["kind"] == "Secret"
            for key, value in o["stringData"].items()
            if not key.startswith(("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION"))
        ]
        assert secrets
        for config in (o for o in objects if o["kind"] == "ConfigMap"):
            text = json.dumps(config["data"])
            assert not [value for value in secrets if value in text], variant


# -- artifacts on S3 ------------------------------------------------------------------------


def test_s3_artifacts_need_no_shared_volume(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = objects_of(chart, VARIANTS["s3"])
    assert not [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    for name, workload in workloads(objects).items():
        volumes = pod_spec(workload)["volumes"]
        assert not [v for v in volumes if "persistentVolumeClaim" in v], name
    settings = runyard_settings(environment(objects, "worker"), monkeypatch)
    assert settings.artifact_root == S3_ROOT
    assert settings.kubernetes.artifact_volume_claim is None
    for pod in _job_pods(settings):
        assert not [v for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v]
    notes = render_texts(chart, VARIANTS["s3"])["runyard/templates/NOTES.txt"]
    assert f"Artifacts (code, models) live in {S3_ROOT}" in notes


def test_the_server_reaches_s3_with_its_own_keys(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3 = VARIANTS["s3"]["artifacts"]["s3"]
    objects = objects_of(chart, VARIANTS["s3"])
    for part in ("api", "worker"):
        environ = environment(objects, part)
        assert environ["AWS_ENDPOINT_URL_S3"] == s3["endpoint"]
        assert environ["AWS_REGION"] == environ["AWS_DEFAULT_REGION"] == s3["region"]
        assert environ["AWS_ACCESS_KEY_ID"] == s3["accessKeyId"]
        assert environ["AWS_SECRET_ACCESS_KEY"] == s3["secretAccessKey"]
        refs = secret_refs(_container(workloads(objects)[part]))
        assert refs["AWS_ACCESS_KEY_ID"]["name"] == f"{SECRET}-s3"
        assert refs["AWS_SESSION_TOKEN"]["optional"] is True
        runyard_settings(environ, monkeypatch)
    # The parts that store no artifacts hold no keys.
    for part in ("beat", "migrate"):
        assert not set(variables.AWS_STATIC_KEYS) & set(environment(objects, part))


@pytest.mark.parametrize("service_credentials", [True, False], ids=["service", "machine"])
def test_job_pods_learn_where_s3_is_and_never_the_servers_keys(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch, service_credentials: bool
) -> None:
    objects = objects_of(chart, VARIANTS["s3"])
    settings = runyard_settings(environment(objects, "worker"), monkeypatch)
    named = settings.kubernetes.s3_secret
    job_secret = one(objects, "Secret", named)
    assert job_secret["metadata"]["namespace"] == settings.kubernetes.namespace
    s3 = VARIANTS["s3"]["artifacts"]["s3"]
    assert job_secret["stringData"] == {
        "AWS_ENDPOINT_URL_S3": s3["endpoint"],
        "AWS_REGION": s3["region"],
        "AWS_DEFAULT_REGION": s3["region"],
    }
    for pod in _job_pods(settings, service_credentials=service_credentials):
        (container,) = pod["spec"]["containers"]
        refs = {name: ref for name, ref in secret_refs(container).items() if ref["name"] == named}
        expected = set(storage.S3_ENDPOINT_ENV)
        if not service_credentials:
            expected |= set(variables.AWS_STATIC_KEYS)  # the Secret holds none: optional
        assert set(refs) == expected
        assert all(ref["optional"] for ref in refs.values())
        assert s3["secretAccessKey"] not in json.dumps(pod)


def test_the_operators_secrets_and_a_job_identity(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = VARIANTS["s3-operator-secrets"]
    objects = objects_of(chart, values)
    # Nothing of S3 is made by the chart: both Secrets are the operator's.
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "Secret"] == [SECRET]
    for part in ("api", "worker"):
        refs = secret_refs(_container(workloads(objects)[part]))
        assert refs["AWS_ACCESS_KEY_ID"] == {"name": "runyard-s3", "key": "AWS_ACCESS_KEY_ID"}
        assert environment(objects, part)["AWS_ENDPOINT_URL_STS"] == "https://sts.example.test"
    settings = runyard_settings(environment(objects, "worker"), monkeypatch)
    assert settings.kubernetes.s3_secret == "training-s3"
    account = one(objects, "ServiceAccount", f"{SECRET}-job")
    assert account["metadata"]["namespace"] == "training"
    assert account["metadata"]["annotations"] == values["jobServiceAccount"]["annotations"]
    assert account["automountServiceAccountToken"] is False
    assert settings.kubernetes.service_account == account["metadata"]["name"]
    for pod in _job_pods(settings, service_credentials=False):
        assert pod["metadata"]["namespace"] == "training"
        assert pod["spec"]["serviceAccountName"] == account["metadata"]["name"]
        assert pod["spec"]["automountServiceAccountToken"] is False
        refs = secret_refs(pod["spec"]["containers"][0])
        assert refs["AWS_ACCESS_KEY_ID"]["name"] == "training-s3"


def test_a_named_job_service_account_is_the_one_created(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = {"kubernetes": {"service_account": "trainer"}, "jobServiceAccount": {"create": True}}
    objects = objects_of(chart, values)
    assert one(objects, "ServiceAccount", "trainer")["metadata"]["namespace"] == NAMESPACE
    assert _settings(chart, values, monkeypatch, "worker").kubernetes.service_account == "trainer"


@pytest.mark.parametrize(
    ("s3", "message"),
    [
        ({"accessKeyId": "a"}, "artifacts.s3.secretAccessKey is required"),
        ({"secretAccessKey": "b"}, "artifacts.s3.accessKeyId is required"),
        ({"existingSecret": "mine", "accessKeyId": "a"}, "artifacts.s3.existingSecret and"),
    ],
)
def test_the_servers_keys_come_from_one_place(
    chart: helm.Chart, s3: dict[str, str], message: str
) -> None:
    with pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        render_texts(chart, {"artifacts": {"root": S3_ROOT, "s3": s3}})


def test_without_an_endpoint_job_pods_get_no_s3_secret(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = {"artifacts": {"root": S3_ROOT}}
    objects = objects_of(chart, values)
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "Secret"] == [SECRET]
    settings = runyard_settings(environment(objects, "worker"), monkeypatch)
    assert settings.kubernetes.s3_secret is None
    for pod in _job_pods(settings, service_credentials=False):
        assert not [e for e in pod["spec"]["containers"][0]["env"] if e["name"].startswith("AWS_")]


# -- network policies ----------------------------------------------------------------------


def _policies(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "NetworkPolicy"]


def _guarding(
    objects: list[dict[str, Any]], labels: dict[str, str], namespace: str
) -> list[dict[str, Any]]:
    """The policies that select a pod of ``labels`` in ``namespace``."""
    return [
        policy
        for policy in _policies(objects)
        if policy["metadata"].get("namespace", NAMESPACE) == namespace
        and selects(policy["spec"]["podSelector"], labels)
    ]


def _admits(policy: dict[str, Any], labels: dict[str, str], namespace: str) -> bool:
    """Whether a pod of ``labels`` in ``namespace`` may connect at all."""
    own = policy["metadata"].get("namespace", NAMESPACE)
    for rule in policy["spec"].get("ingress", []):
        sources = rule.get("from")
        if sources is None or any(_peer(peer, labels, namespace, own) for peer in sources):
            return True
    return False


def _peer(peer: dict[str, Any], labels: dict[str, str], namespace: str, own: str) -> bool:
    """Whether a rule's peer is that pod: a pod selector alone means the policy's own
    namespace; with a namespace selector, the namespaces it selects (by their name label,
    which Kubernetes sets on every namespace)."""
    if "namespaceSelector" in peer:
        names = {"kubernetes.io/metadata.name": namespace}
        in_namespace = selects(peer["namespaceSelector"], names)
    else:
        in_namespace = namespace == own
    return in_namespace and selects(peer.get("podSelector", {}), labels)


# The parts that store and read artifacts: the ones that reach the chart's MinIO, with the
# Job that makes its bucket (and job pods).
STORE_USERS = {"api", "worker", "controller", "minio-bucket"}


@pytest.mark.parametrize(
    "variant", ["defaults", "s3-operator-secrets", "jobs-namespace-minio", "no-controller"]
)
def test_network_policies_let_in_only_what_each_part_needs(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch, variant: str
) -> None:
    objects = objects_of(chart, VARIANTS[variant])
    settings = runyard_settings(environment(objects, "worker"), monkeypatch)
    jobs_namespace = settings.kubernetes.namespace
    job_pods = _job_pods(settings)
    job_labels = job_pods[0]["metadata"]["labels"]
    parts = {name: pod_labels(w) for name, w in all_workloads(objects).items()}
    own = ("api", "worker", "beat", "migrate", "controller")
    control_plane = {name: parts[name] for name in own if name in parts}
    assert ("controller" in parts) == (variant != "no-controller")
    assert ("minio" in parts) == (variant != "s3-operator-secrets")
    # Every pod is guarded: the chart's, and the jobs' the backend makes.
    for name, labels in parts.items():
        assert _guarding(objects, labels, NAMESPACE), name
    for pod in job_pods:
        assert pod["metadata"]["namespace"] == jobs_namespace
        assert _guarding(objects, pod["metadata"]["labels"], jobs_namespace)

    def admitted(target: dict[str, str], namespace: str = NAMESPACE) -> set[str]:
        policies = _guarding(objects, target, namespace)
        sources = [(name, labels, NAMESPACE) for name, labels in parts.items()]
        sources.append(("job", job_labels, jobs_namespace))
        return {
            name
            for name, labels, where in sources
            if any(_admits(policy, labels, where) for policy in policies)
        }

    # The API: anyone, on its port alone.
    (api_policy,) = _guarding(objects, parts["api"], NAMESPACE)
    assert api_policy["spec"]["ingress"] == [{"ports": [{"port": "http", "protocol": "TCP"}]}]
    # The databases: Runyard's own pods, never a job's.
    for database in ("postgresql", "redis"):
        assert admitted(parts[database]) == set(control_plane), database
    # The object store: what stores and reads artifacts, and job pods, from their namespace.
    if "minio" in parts:
        assert admitted(parts["minio"]) == (STORE_USERS & set(parts)) | {"job"}
        (store_policy,) = _guarding(objects, parts["minio"], NAMESPACE)
        (rule,) = store_policy["spec"]["ingress"]
        assert rule["ports"] == [{"port": "minio", "protocol": "TCP"}]
    # Nothing connects to the worker, beat, the migration, the controller, the hook Jobs.
    for name in set(parts) - {"api", "postgresql", "redis", "minio"}:
        assert admitted(parts[name]) == set(), name
    # Job pods: only other job pods.
    assert admitted(job_labels, jobs_namespace) == {"job"}
    (job_policy,) = _guarding(objects, job_labels, jobs_namespace)
    assert job_policy["spec"]["podSelector"] == {
        "matchExpressions": [{"key": manifests.LABEL_JOB_ID, "operator": "Exists"}]
    }
    # Egress stays open: job pods reach S3 and the API, the worker the Kubernetes API.
    assert all(policy["spec"]["policyTypes"] == ["Ingress"] for policy in _policies(objects))


def test_without_the_charts_databases_there_is_no_policy_for_them(chart: helm.Chart) -> None:
    names = {p["metadata"]["name"] for p in _policies(objects_of(chart, EXTERNAL))}
    assert names == {f"{SECRET}-api", f"{SECRET}-no-ingress", f"{SECRET}-jobs"}


def test_network_policies_can_be_left_out(chart: helm.Chart) -> None:
    assert not _policies(objects_of(chart, VARIANTS["no-network-policies"]))


# -- the default install, on a fresh single-node cluster -----------------------------------

# `helm install runyard charts/runyard` with no values renders exactly these: what the
# docs' list of objects says, and what a change to the chart has to mean to change.
DEFAULT_INSTALL = {
    ("ConfigMap", "ry-runyard"),
    ("Secret", "ry-runyard"),
    ("Secret", "ry-runyard-minio"),
    ("Secret", "ry-runyard-job-s3"),
    ("Deployment", "ry-runyard-api"),
    ("Service", "ry-runyard-api"),
    ("Deployment", "ry-runyard-worker"),
    ("Deployment", "ry-runyard-beat"),
    ("Deployment", "ry-runyard-controller"),
    ("Job", "ry-runyard-migrate"),
    ("StatefulSet", "ry-runyard-postgresql"),
    ("Service", "ry-runyard-postgresql"),
    ("StatefulSet", "ry-runyard-redis"),
    ("Service", "ry-runyard-redis"),
    ("StatefulSet", "ry-runyard-minio"),
    ("Service", "ry-runyard-minio"),
    ("Job", "ry-runyard-minio-bucket"),
    ("ServiceAccount", "ry-runyard"),
    ("Role", "ry-runyard-jobs"),
    ("RoleBinding", "ry-runyard-jobs"),
    ("ServiceAccount", "ry-runyard-controller"),
    ("ClusterRole", "ry-runyard-controller"),
    ("RoleBinding", "ry-runyard-controller"),
    ("Role", "ry-runyard-controller-lease"),
    ("RoleBinding", "ry-runyard-controller-lease"),
    ("ValidatingAdmissionPolicy", "ry-runyard-controller-ml-instance-types"),
    ("ValidatingAdmissionPolicyBinding", "ry-runyard-controller-ml-instance-types"),
    ("ValidatingAdmissionPolicy", "ry-runyard-controller-ml-tuning-instance-types"),
    ("ValidatingAdmissionPolicyBinding", "ry-runyard-controller-ml-tuning-instance-types"),
    ("NetworkPolicy", "ry-runyard-api"),
    ("NetworkPolicy", "ry-runyard-no-ingress"),
    ("NetworkPolicy", "ry-runyard-postgresql"),
    ("NetworkPolicy", "ry-runyard-redis"),
    ("NetworkPolicy", "ry-runyard-minio"),
    ("NetworkPolicy", "ry-runyard-jobs"),
}


def test_the_default_install_is_these_objects(chart: helm.Chart) -> None:
    objects = objects_of(chart, {})
    assert {(o["kind"], o["metadata"]["name"]) for o in objects} == DEFAULT_INSTALL
    assert len(objects) == len(DEFAULT_INSTALL)


def _claims(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every claim the objects make: their own, and their StatefulSets' templates."""
    made = [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    for workload in objects:
        if workload["kind"] == "StatefulSet":
            made += workload["spec"].get("volumeClaimTemplates", [])
    return made


def test_the_default_install_asks_only_for_what_any_default_storage_class_gives(
    chart: helm.Chart,
) -> None:
    # kind's and k3s' local-path provisioners, and every cloud's default class, give
    # ReadWriteOnce volumes; none but a shared filesystem gives ReadWriteMany.
    claims = _claims(objects_of(chart, {}))
    assert len(claims) == 3  # PostgreSQL, Redis, MinIO
    for claim in claims:
        assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
        assert "storageClassName" not in claim["spec"]  # the cluster's default


def _references(obj: dict[str, Any]) -> Iterator[tuple[str, str, bool]]:
    """(kind, name, optional) of every Secret, ConfigMap, claim and service account a
    workload's pods need."""
    pod = pod_spec(obj)
    if "serviceAccountName" in pod:
        yield "ServiceAccount", pod["serviceAccountName"], False
    for volume in pod.get("volumes", []):
        if "persistentVolumeClaim" in volume:
            yield "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"], False
        if "secret" in volume:
            yield "Secret", volume["secret"]["secretName"], False
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        for source in container.get("envFrom", []):
            yield "ConfigMap", source["configMapRef"]["name"], False
        for item in container.get("env", []):
            ref = item.get("valueFrom", {}).get("secretKeyRef")
            if ref is not None:
                yield "Secret", ref["name"], bool(ref.get("optional"))


def test_everything_the_default_install_refers_to_is_in_it(chart: helm.Chart) -> None:
    objects = objects_of(chart, {})
    made = {(o["kind"], o["metadata"]["name"]) for o in objects}
    secrets = {o["metadata"]["name"]: o["stringData"] for o in objects if o["kind"] == "Secret"}
    for workload in all_workloads(objects).values():
        for kind, name, optional in _references(workload):
            assert (kind, name) in made or optional, (component(workload), kind, name)
        for container in pod_spec(workload)["containers"]:
            for item in container.get("env", []):
                ref = item.get("valueFrom", {}).get("secretKeyRef")
                if ref is not None and not ref.get("optional"):
                    assert ref["key"] in secrets[ref["name"]], (component(workload), ref)
    # The images are the names `make images` builds (tests/deploy/test_make_images.py).
    images = {
        container["image"]
        for workload in workloads(objects).values()
        for container in pod_spec(workload)["containers"]
    }
    assert images == {"runyard/service:0.1.0"}


def test_the_controller_runs_by_default_on_the_releases_namespace(chart: helm.Chart) -> None:
    objects = objects_of(chart, {})
    (container,) = pod_spec(workloads(objects)["controller"])["containers"]
    given = {item["name"]: item["value"] for item in container["env"] if "value" in item}
    assert json.loads(given["RUNYARD_CONTROLLER"])["namespaces"] == {NAMESPACE: "default"}


# -- the chart's own object store ----------------------------------------------------------

MINIO = f"{SECRET}-minio"


def test_with_no_store_named_artifacts_live_in_the_charts_minio(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = objects_of(chart, {})
    settings = _settings(chart, {}, monkeypatch, "api")
    assert settings.artifact_root == "s3://runyard"
    service = one(objects, "Service", MINIO)
    workload = _stateful_set(objects, "minio")
    assert selects({"matchLabels": service["spec"]["selector"]}, pod_labels(workload))
    (port,) = service["spec"]["ports"]
    ports = {p["name"]: p["containerPort"] for p in _container(workload)["ports"]}
    assert port["targetPort"] in ports
    url = f"http://{MINIO}.{NAMESPACE}.svc.cluster.local:{port['port']}"
    # The API and the worker store and read there; the API asks it for jobs' credentials.
    for part in ("api", "worker", "controller"):
        environ = environment(objects, part)
        assert environ["AWS_ENDPOINT_URL_S3"] == url, part
        assert environ["AWS_REGION"] == "us-east-1"
    assert environment(objects, "api")["AWS_ENDPOINT_URL_STS"] == url
    # The bucket the root names is the one the hook makes, at that same address.
    job = one(objects, "Job", f"{MINIO}-bucket")
    assert _hooks_of(job) == {"post-install", "post-upgrade"}
    env = {item["name"]: item.get("value") for item in _container(job)["env"]}
    assert env["BUCKET"] == urllib.parse.urlsplit(settings.artifact_root).hostname
    host = urllib.parse.urlsplit(env["MC_HOST_store"].replace("$(", "").replace(")", ""))
    assert (host.hostname, host.port) == (urllib.parse.urlsplit(url).hostname, port["port"])
    # A fixed script: where it connects and the bucket come from the environment.
    assert _container(job)["command"] == [
        "sh",
        "-c",
        'until mc mb --ignore-existing "store/$BUCKET"; do sleep 2; done',
    ]
    assert pod_spec(job)["restartPolicy"] == "Never"


def _hooks_of(obj: dict[str, Any]) -> set[str]:
    return set(obj["metadata"]["annotations"]["helm.sh/hook"].split(","))


def test_the_server_holds_the_stores_keys_and_minio_runs_with_them(chart: helm.Chart) -> None:
    objects = objects_of(chart, {})
    keys = one(objects, "Secret", MINIO)
    assert keys["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    root = secret_refs(_container(_stateful_set(objects, "minio")))
    assert root["MINIO_ROOT_USER"] == {"name": MINIO, "key": "AWS_ACCESS_KEY_ID"}
    assert root["MINIO_ROOT_PASSWORD"] == {"name": MINIO, "key": "AWS_SECRET_ACCESS_KEY"}
    for part in ("api", "worker", "controller"):
        environ = environment(objects, part)
        assert environ["AWS_ACCESS_KEY_ID"] == keys["stringData"]["AWS_ACCESS_KEY_ID"]
        assert environ["AWS_SECRET_ACCESS_KEY"] == keys["stringData"]["AWS_SECRET_ACCESS_KEY"]
    for part in ("beat", "migrate"):
        assert not set(variables.AWS_STATIC_KEYS) & set(environment(objects, part))
    # Generated at each install, as long as MinIO takes them.
    again = one(objects_of(chart, {}), "Secret", MINIO)["stringData"]
    assert again != keys["stringData"]
    assert len(again["AWS_ACCESS_KEY_ID"]) >= 3
    assert len(again["AWS_SECRET_ACCESS_KEY"]) >= 8


def test_job_pods_reach_the_charts_minio_with_their_own_credentials(
    chart: helm.Chart, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = objects_of(chart, VARIANTS["jobs-namespace-minio"])
    server = runyard_settings(environment(objects, "api"), monkeypatch)
    settings = runyard_settings(environment(objects, "worker"), monkeypatch)
    endpoint = environment(objects, "worker")["AWS_ENDPOINT_URL_S3"]
    # Where the store is: in a Secret of the jobs' namespace, as the backend reads it.
    named = settings.kubernetes.s3_secret
    job_secret = one(objects, "Secret", named)
    assert job_secret["metadata"]["namespace"] == settings.kubernetes.namespace == "training"
    assert job_secret["stringData"]["AWS_ENDPOINT_URL_S3"] == endpoint
    keys = one(objects, "Secret", MINIO)["stringData"]
    for pod in _job_pods(settings):
        (container,) = pod["spec"]["containers"]
        refs = {name: ref["name"] for name, ref in secret_refs(container).items()}
        assert refs["AWS_ENDPOINT_URL_S3"] == named
        assert refs["AWS_REGION"] == named
        # Never the store's keys: each job's credentials are its own.
        assert keys["AWS_SECRET_ACCESS_KEY"] not in json.dumps(pod)
        assert not set(variables.AWS_STATIC_KEYS) & set(refs)
    # ... which the API asks the store's STS for (AssumeRole: MinIO has no federation
    # tokens), held by a session policy to the job's own locations.
    assert server.instance_credentials == "service"
    assert instance_credentials.role_for(server, "default")
    assert environment(objects, "api")["AWS_ENDPOINT_URL_STS"] == endpoint


def test_minio_keeps_its_data_on_a_claim_that_outlives_the_release(chart: helm.Chart) -> None:
    workload = _stateful_set(
        objects_of(chart, {"minio": {"persistence": {"size": "50Gi"}}}), "minio"
    )
    (claim,) = workload["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert workload["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Retain"
    mounts = {m["name"]: m["mountPath"] for m in _container(workload)["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == "/data"
    assert "/data" in _container(workload)["command"]
    ephemeral = _stateful_set(objects_of(chart, VARIANTS["ephemeral-databases"]), "minio")
    assert "volumeClaimTemplates" not in ephemeral["spec"]
    assert {"name": "data", "emptyDir": {}} in pod_spec(ephemeral)["volumes"]


def test_minio_and_its_client_run_unprivileged_on_a_read_only_root(chart: helm.Chart) -> None:
    objects = objects_of(chart, {})
    for workload in (_stateful_set(objects, "minio"), one(objects, "Job", f"{MINIO}-bucket")):
        pod = pod_spec(workload)
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        context = _container(workload)["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert "/tmp" in {m["mountPath"] for m in _container(workload)["volumeMounts"]}
    # What MinIO writes besides its data (its certificates directory) is under /tmp.
    command = _container(_stateful_set(objects, "minio"))["command"]
    assert command[command.index("--certs-dir") + 1].startswith("/tmp/")
    probes = _container(_stateful_set(objects, "minio"))
    assert probes["readinessProbe"]["httpGet"]["path"] == "/minio/health/ready"


def test_the_operators_keys_for_minio_are_used_as_they_are(chart: helm.Chart) -> None:
    objects = objects_of(chart, VARIANTS["minio-keys-of-the-operator"])
    assert ("Secret", MINIO) not in {(o["kind"], o["metadata"]["name"]) for o in objects}
    refs = secret_refs(_container(_stateful_set(objects, "minio")))
    assert refs["MINIO_ROOT_USER"]["name"] == "runyard-minio-keys"
    assert secret_refs(_container(workloads(objects)["api"]))["AWS_ACCESS_KEY_ID"] == {
        "name": "runyard-minio-keys",
        "key": "AWS_ACCESS_KEY_ID",
    }


def test_a_store_of_the_operators_replaces_the_charts_minio(chart: helm.Chart) -> None:
    for variant in ("s3", "external", "s3-operator-secrets"):
        objects = objects_of(chart, VARIANTS[variant])
        assert not [o for o in objects if "minio" in o["metadata"]["name"]], variant
        assert "RUNYARD_INSTANCE_ROLE_ARN" not in environment(objects, "api")


def test_a_later_install_keeps_the_stores_keys_the_cluster_holds(cluster: KubeServer) -> None:
    # Its data was written with them: a reinstall that made new ones would lock it out.
    with helm.Chart.load(CHART) as chart:
        first = one(objects_of(chart, {}), "Secret", MINIO)
    cluster.api().create_namespaced_secret(NAMESPACE, _kept_by_helm(first))
    with helm.Config(kube_apiserver=cluster.url, namespace=NAMESPACE) as config:
        release = config.install(CHART, RELEASE, {}, namespace=NAMESPACE, dry_run="server")
    kept = one(manifest_objects([release["manifest"]]), "Secret", MINIO)["stringData"]
    assert kept == first["stringData"]
