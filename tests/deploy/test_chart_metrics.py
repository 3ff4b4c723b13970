"""The chart's monitoring: the worker's metrics port and Service, a ServiceMonitor checked
against the Prometheus Operator's own models, the Grafana dashboard, whose every query
names a metric Runyard exports, the JSON log setting, and the API's probes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
from cloudcoil.models.prometheus_operator.v1 import ServiceMonitor
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service.app import create_app
from service.kit.migrate import upgrade
from service.observability import exposition
from tests.conftest import make_settings
from tests.deploy.chart import (
    CHART,
    NEWEST,
    OLDEST,
    environment,
    objects_of,
    one,
    pod_spec,
    selects,
    workloads,
)
from tests.deploy.test_chart import EXTERNAL

MONITORED: dict[str, Any] = {
    **EXTERNAL,
    "logFormat": "json",
    "metrics": {
        "worker": {"enabled": True, "port": 9464},
        "serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "prom"}},
        "dashboard": {"enabled": True},
    },
}
DASHBOARD = CHART / "dashboards" / "runyard.json"


def _pruned(value: Any) -> Any:
    """``value`` without the empty maps and lists a model's dump leaves out."""
    if isinstance(value, dict):
        return {k: _pruned(v) for k, v in value.items() if v not in ({}, [], None)}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


@pytest.mark.parametrize("version", sorted({OLDEST, NEWEST}))
def test_every_monitoring_object_is_valid(chart: helm.Chart, version: str) -> None:
    objects = objects_of(chart, MONITORED)
    monitors = [o for o in objects if o["kind"] == "ServiceMonitor"]
    assert len(monitors) == 1
    for obj in objects:
        if obj["kind"] != "ServiceMonitor":
            kubernetes_validate.validate(obj, version, strict=True)
    # The operator's models ignore keys they do not know: what a dump of the model gives
    # back must be what was written, or a key was misspelt or misplaced.
    (monitor,) = monitors
    model = ServiceMonitor.model_validate(monitor)
    assert _pruned(model.model_dump(by_alias=True, exclude_none=True)) == _pruned(monitor)


def test_the_service_monitor_scrapes_the_api_and_the_worker(chart: helm.Chart) -> None:
    objects = objects_of(chart, MONITORED)
    monitor = one(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    selector = monitor["spec"]["selector"]
    services = [o for o in objects if o["kind"] == "Service"]
    scraped = {
        o["metadata"]["name"] for o in services if selects(selector, o["metadata"]["labels"])
    }
    assert scraped == {"ry-runyard-api", "ry-runyard-worker-metrics"}
    ports = {
        p["name"] for o in services if o["metadata"]["name"] in scraped for p in o["spec"]["ports"]
    }
    endpoints = monitor["spec"]["endpoints"]
    assert {(e["port"], e["path"], e["interval"]) for e in endpoints} == {
        ("http", "/metrics", "15s"),
        ("metrics", "/metrics", "15s"),
    }
    assert {e["port"] for e in endpoints} <= ports
    # The worker's Service reaches the worker's metrics port, which its settings serve.
    worker = workloads(objects)["worker"]
    service = one(objects, "Service", "ry-runyard-worker-metrics")
    assert selects(
        {"matchLabels": service["spec"]["selector"]},
        worker["spec"]["template"]["metadata"]["labels"],
    )
    (container,) = pod_spec(worker)["containers"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"metrics": 9464}
    assert environment(objects, "worker")["RUNYARD_WORKER_METRICS_PORT"] == "9464"
    assert environment(objects, "api")["RUNYARD_LOG_FORMAT"] == "json"


def test_the_worker_metrics_port_is_open_to_scrapes_only(chart: helm.Chart) -> None:
    objects = objects_of(chart, MONITORED)
    policy = one(objects, "NetworkPolicy", "ry-runyard-worker-metrics")
    assert policy["spec"]["ingress"] == [{"ports": [{"port": "metrics", "protocol": "TCP"}]}]


def test_monitoring_is_off_unless_asked(chart: helm.Chart) -> None:
    objects = objects_of(chart, EXTERNAL)
    assert not [o for o in objects if o["kind"] == "ServiceMonitor"]
    assert "ry-runyard-worker-metrics" not in {o["metadata"]["name"] for o in objects}
    assert "ports" not in pod_spec(workloads(objects)["worker"])["containers"][0]
    assert environment(objects, "api")["RUNYARD_LOG_FORMAT"] == "text"
    assert "RUNYARD_WORKER_METRICS_PORT" not in environment(objects, "worker")


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"logFormat": "yaml"}, "/logFormat"),
        ({"metrics": {"worker": {"enabled": True, "port": 80}}}, "/metrics/worker/port"),
        ({"metrics": {"serviceMonitor": {"enabled": True, "interval": "soon"}}}, "interval"),
        ({"metrics": {"grafana": {"enabled": True}}}, "grafana"),
    ],
)
def test_the_schema_rejects_wrong_monitoring_values(
    chart: helm.Chart, values: dict[str, Any], where: str
) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(where)):
        chart.validate_schema({**EXTERNAL, **values})


def test_the_dashboard_configmap_holds_the_dashboard(chart: helm.Chart) -> None:
    config = one(objects_of(chart, MONITORED), "ConfigMap", "ry-runyard-dashboard")
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config["data"]["runyard.json"]) == json.loads(DASHBOARD.read_text())


def _exported_sample_names(tmp_path: Path) -> set[str]:
    """Every sample name the API's and the worker's /metrics may hold: each family's
    name with the suffixes its type gives its samples."""
    url = f"sqlite:///{tmp_path / 'runyard.db'}"
    upgrade(url)
    settings = make_settings(tmp_path / "home", url)
    with TestClient(create_app(settings)) as client:
        api = client.get("/metrics").text
    worker = exposition.render(exposition.registry([])).decode()
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_count", "_sum", "_created"),
        "gauge": ("",),
        "summary": ("_count", "_sum", "_created", ""),
    }
    return {
        family.name + suffix
        for text in (api, worker)
        for family in text_string_to_metric_families(text)
        for suffix in suffixes.get(family.type, ("",))
    }


def test_every_metric_the_dashboard_queries_is_one_runyard_exports(tmp_path: Path) -> None:
    board = json.loads(DASHBOARD.read_text())
    expressions = [target["expr"] for panel in board["panels"] for target in panel["targets"]]
    queried = {name for expr in expressions for name in re.findall(r"\brunyard_[a-z0-9_]+", expr)}
    assert len(queried) >= 10
    exported = _exported_sample_names(tmp_path)
    assert queried - exported == set()
