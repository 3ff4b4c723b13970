"""What the chart's tests share: rendering charts/runyard with Helm's own engine (offline,
through helm_python), finding objects among the result, and reading the environment and
settings a rendered pod would get."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from service.settings import Settings
from tests.deploy.support import REPO

CHART = REPO / "charts" / "runyard"
RELEASE, NAMESPACE = "ry", "ml"
NEWEST = kubernetes_validate.utils.latest_version()
# The floor of Chart.yaml's kubeVersion (">=1.30.0-0").
KUBE_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
OLDEST = KUBE_VERSION.removeprefix(">=").removesuffix(".0-0")
# What the pod templates of a chart are in.
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job")
# What the chart runs beside Runyard, by component: its own databases and object store, and
# the Job that makes the store's bucket.
BUNDLED = ("postgresql", "redis", "minio", "minio-bucket")


def render_texts(
    chart: helm.Chart, values: dict[str, Any], *, upgrade: bool = False
) -> dict[str, str]:
    """Each template's text, as `helm install` (or `helm upgrade`) renders it without a
    cluster: ``lookup`` finds nothing."""
    return chart.render(
        values, name=RELEASE, namespace=NAMESPACE, is_install=not upgrade, is_upgrade=upgrade
    )


def objects_of(
    chart: helm.Chart, values: dict[str, Any], *, upgrade: bool = False
) -> list[dict[str, Any]]:
    return manifest_objects(
        text
        for template, text in sorted(render_texts(chart, values, upgrade=upgrade).items())
        if not template.endswith("NOTES.txt")
    )


def manifest_objects(texts: Any) -> list[dict[str, Any]]:
    """The objects of YAML streams (rendered templates, or a release's manifest)."""
    return [doc for text in texts for doc in yaml.safe_load_all(text) if doc]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


def component(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["labels"]["app.kubernetes.io/component"])


def workloads(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Runyard's own Deployments and Jobs by component: api, worker, beat, migrate, and
    the controller where it runs."""
    return {
        component(o): o
        for o in objects
        if o["kind"] in ("Deployment", "Job") and component(o) not in BUNDLED
    }


def all_workloads(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every object with pods, by component: Runyard's own and what the chart runs beside
    it (BUNDLED)."""
    return {component(o): o for o in objects if o["kind"] in WORKLOAD_KINDS}


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def pod_labels(workload: dict[str, Any]) -> dict[str, str]:
    return workload["spec"]["template"]["metadata"]["labels"]


def secret_refs(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The container's variables that come from Secrets: name -> secretKeyRef."""
    return {
        item["name"]: item["valueFrom"]["secretKeyRef"]
        for item in container.get("env", [])
        if "secretKeyRef" in item.get("valueFrom", {})
    }


def environment(objects: list[dict[str, Any]], part: str) -> dict[str, str]:
    """The environment a component's container gets from the ConfigMap and the Secrets the
    chart renders (those an operator manages are not among the objects: left out)."""
    container = pod_spec(all_workloads(objects)[part])["containers"][0]
    environ: dict[str, str] = {}
    for source in container.get("envFrom", []):
        environ |= one(objects, "ConfigMap", source["configMapRef"]["name"])["data"]
    rendered = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Secret"}
    for name, ref in secret_refs(container).items():
        if ref["name"] not in rendered:
            continue
        data = rendered[ref["name"]]["stringData"]
        if ref["key"] in data or not ref.get("optional"):
            environ[name] = data[ref["key"]]
    for item in container.get("env", []):
        if "value" in item:
            environ[item["name"]] = item["value"]
    return environ


def runyard_settings(environ: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Runyard's own Settings, as a process with ``environ`` builds them."""
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    return Settings()


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels, matchExpressions) selects ``labels``."""
    if any(labels.get(key) != value for key, value in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator = expression["key"], expression["operator"]
        present = key in labels
        if operator == "Exists":
            matched = present
        elif operator == "DoesNotExist":
            matched = not present
        elif operator == "In":
            matched = present and labels[key] in expression["values"]
        elif operator == "NotIn":
            matched = not present or labels[key] not in expression["values"]
        else:
            raise AssertionError(f"no such selector operator: {operator}")
        if not matched:
            return False
    return True
