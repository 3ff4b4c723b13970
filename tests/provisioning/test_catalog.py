"""The instance-type catalog: the built-in types, and the ones an operator adds
(RUNYARD_INSTANCE_TYPES), each refused at start naming the entry and the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from pydantic import ValidationError

from provisioning.catalog import NEURON_DEVICE, NVIDIA_GPU, InstanceCatalog
from service.settings import Settings

# A type SageMaker Training does not offer, which an operator adds.
GR6: dict[str, Any] = {
    "name": "ml.gr6.4xlarge",
    "vcpus": 16,
    "memory_gib": 128,
    "gpus": 1,
    "gpu_model": "L4",
    "node_selector": {"node.kubernetes.io/instance-type": "gr6.4xlarge"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
}


def _refusal(tmp_path: Path, *entries: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as refused:
        Settings(home=tmp_path, instance_types=list(entries))
    (error,) = refused.value.errors()
    return str(error["msg"]).removeprefix("Value error, ")


def test_every_type_sagemaker_training_offers_is_built_in() -> None:
    # SageMaker's API names them: CreateTrainingJob's TrainingInstanceType, as botocore's
    # model of the API has it. A newer botocore that adds a type fails here until the
    # catalog has it too.
    model = botocore.session.get_session().get_service_model("sagemaker")
    offered = set(model.shape_for("TrainingInstanceType").enum)
    assert "ml.m4.xlarge" in offered  # the SDK's CPU type in its own tests
    assert offered - set(InstanceCatalog()) == set()


def test_the_built_in_types_are_sagemakers_with_their_public_figures() -> None:
    catalog = InstanceCatalog()
    figures = {
        name: (kind.vcpus, kind.memory_gib, kind.gpus, kind.gpu_model, kind.gpu_resource)
        for name, kind in catalog.items()
    }
    assert figures["ml.m4.xlarge"] == (4, 16, 0, None, NVIDIA_GPU)
    assert figures["ml.m5.xlarge"] == (4, 16, 0, None, NVIDIA_GPU)
    assert figures["ml.c4.xlarge"] == (4, 7.5, 0, None, NVIDIA_GPU)
    assert figures["ml.p3.16xlarge"] == (64, 488, 8, "V100", NVIDIA_GPU)
    assert figures["ml.p4d.24xlarge"] == (96, 1152, 8, "A100", NVIDIA_GPU)
    assert figures["ml.p5e.48xlarge"] == (192, 2048, 8, "H200", NVIDIA_GPU)
    assert figures["ml.g6.xlarge"] == (4, 16, 1, "L4", NVIDIA_GPU)
    assert figures["ml.g6e.48xlarge"] == (192, 1536, 8, "L40S", NVIDIA_GPU)
    assert figures["ml.trn1.2xlarge"] == (8, 32, 1, "Trainium", NEURON_DEVICE)
    assert figures["ml.trn2.48xlarge"] == (192, 2048, 16, "Trainium2", NEURON_DEVICE)
    assert figures["local"] == (None, None, 0, None, NVIDIA_GPU)
    # Every ml.* type is a cluster's; locally, the machine's own and those without
    # accelerators (Trainium's are Neuron devices, no more a local machine's than GPUs).
    assert catalog.cluster_types() == {name for name in catalog if name.startswith("ml.")}
    assert {"ml.m4.xlarge", "ml.t3.medium", "ml.r5d.24xlarge"} <= catalog.local_types()
    assert {"local", "local_gpu"} <= catalog.local_types()
    assert catalog.local_types() == {name for name in catalog if catalog[name].gpus == 0}


def test_an_entry_adds_a_type_or_replaces_the_built_in_one(tmp_path: Path) -> None:
    p4d = {"name": "ml.p4d.24xlarge", "vcpus": 96, "memory_gib": 1152, "gpus": 8}
    pinned = {**p4d, "node_selector": {"pool": "a100"}}
    settings = Settings(home=tmp_path, instance_types=[GR6, pinned])
    catalog = settings.instance_catalog
    assert set(catalog) - set(InstanceCatalog()) == {"ml.gr6.4xlarge"}
    gr6 = catalog["ml.gr6.4xlarge"]
    assert (gr6.vcpus, gr6.memory_gib, gr6.gpus, gr6.gpu_model) == (16, 128.0, 1, "L4")
    assert gr6.gpu_resource == NVIDIA_GPU
    assert dict(gr6.node_selector) == {"node.kubernetes.io/instance-type": "gr6.4xlarge"}
    assert [t.manifest() for t in gr6.tolerations] == GR6["tolerations"]
    assert "ml.gr6.4xlarge" in catalog.cluster_types()
    assert "ml.gr6.4xlarge" not in catalog.local_types()
    # The replacement is the whole type: what it does not say, it does not have.
    p4d_now = catalog["ml.p4d.24xlarge"]
    assert dict(p4d_now.node_selector) == {"pool": "a100"}
    assert p4d_now.gpu_model is None
    # Other servers, and the built-in catalog, are untouched.
    assert dict(InstanceCatalog()["ml.p4d.24xlarge"].node_selector) == {}
    assert "ml.gr6.4xlarge" not in Settings(home=tmp_path).instance_catalog


def test_an_entry_without_accelerators_may_also_run_locally(tmp_path: Path) -> None:
    m7a = {"name": "ml.m7a.xlarge", "vcpus": 4, "memory_gib": 16}
    catalog = Settings(home=tmp_path, instance_types=[m7a]).instance_catalog
    assert "ml.m7a.xlarge" in catalog.local_types()
    assert "ml.m7a.xlarge" in catalog.cluster_types()


def test_entries_come_from_the_environment_as_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trn2 = {
        "name": "ml.trn2.48xlarge",
        "vcpus": 192,
        "memory_gib": 2048,
        "gpus": 16,
        "gpu_model": "Trainium2",
        "gpu_resource": "aws.amazon.com/neuron",
        "tolerations": [
            {"operator": "Exists"},
            {"key": "spot", "value": "true", "effect": "NoExecute", "tolerationSeconds": 60},
        ],
    }
    monkeypatch.setenv("RUNYARD_HOME", str(tmp_path))
    monkeypatch.setenv("RUNYARD_INSTANCE_TYPES", json.dumps([trn2]))
    monkeypatch.setenv("RUNYARD_BACKENDS", '{"ml.trn2.48xlarge": "kubernetes"}')
    monkeypatch.setenv("RUNYARD_CAPACITY", '{"ml.trn2.48xlarge": 4}')
    settings = Settings()
    kind = settings.instance_catalog["ml.trn2.48xlarge"]
    assert (kind.gpus, kind.gpu_resource) == (16, "aws.amazon.com/neuron")
    assert [t.manifest() for t in kind.tolerations] == [
        {"operator": "Exists"},
        {
            "key": "spot",
            "operator": "Equal",
            "value": "true",
            "effect": "NoExecute",
            "tolerationSeconds": 60,
        },
    ]
    assert settings.capacity == {"ml.trn2.48xlarge": 4}


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"name": "gr6.4xlarge"}, "name: 'gr6.4xlarge' is not written as SageMaker's types are"),
        ({"name": "ml.GR6.4xlarge"}, "name: 'ml.GR6.4xlarge' is not written"),
        ({"name": "local_big"}, "name: 'local_big' is not written"),
        ({"vcpus": 0}, "vcpus: Input should be greater than or equal to 1"),
        ({"vcpus": "4"}, "vcpus: Input should be a valid integer"),
        ({"vcpus": True}, "vcpus: Input should be a valid integer"),
        ({"memory_gib": -1}, "memory_gib: Input should be greater than 0"),
        ({"gpus": 65}, "gpus: Input should be less than or equal to 64"),
        ({"gpu": 1}, "gpu: Extra inputs are not permitted"),
        ({"gpu_resource": "gpu"}, "gpu_resource: 'gpu' is no device plugin's resource"),
        ({"gpu_resource": "kubernetes.io/gpu"}, "gpu_resource: 'kubernetes.io/gpu' is no"),
        ({"gpu_resource": "requests.example.com/gpu"}, "'requests.'"),
        ({"gpus": 0}, "gpu_model: is given, and gpus is 0"),
        ({"node_selector": {"bad key": "x"}}, "node_selector.bad key.[key]: 'bad key'"),
        ({"node_selector": {"Pool.Example/gpu": "x"}}, "its prefix must be a DNS subdomain"),
        ({"node_selector": {"pool": "-a"}}, "node_selector.pool: '-a': a label value"),
        ({"node_selector": {f"k{i}": "v" for i in range(21)}}, "node_selector: Dictionary"),
        ({"tolerations": [{"key": "a", "operatr": "Exists"}]}, "tolerations.0.operatr: Extra"),
        ({"tolerations": [{"key": "a", "operator": "In"}]}, "tolerations.0.operator: Input"),
        ({"tolerations": [{"operator": "Exists", "key": "a", "value": "b"}]}, "value: must"),
        ({"tolerations": [{"value": "b"}]}, "tolerations.0: operator: must be Exists"),
        ({"tolerations": [{"key": "a", "effect": "Evict"}]}, "tolerations.0.effect: Input"),
        (
            {"tolerations": [{"key": "a", "tolerationSeconds": 5, "effect": "NoSchedule"}]},
            "tolerations.0: tolerationSeconds: is for effect NoExecute only",
        ),
        ({"tolerations": [{"key": "a", "toleration_seconds": 5}]}, "toleration_seconds: Extra"),
    ],
)
def test_a_bad_entry_is_refused_naming_it_and_its_field(
    tmp_path: Path, entry: dict[str, Any], problem: str
) -> None:
    bad = {**GR6, **entry}
    message = _refusal(tmp_path, {"name": "ml.m7a.large", "vcpus": 2, "memory_gib": 8}, bad)
    name = bad["name"] if isinstance(bad["name"], str) else None
    assert message.startswith(f"RUNYARD_INSTANCE_TYPES[1] ({name}): "), message
    assert problem in message


def test_every_problem_of_every_entry_is_told_at_once(tmp_path: Path) -> None:
    message = _refusal(
        tmp_path,
        {**GR6, "vcpus": 0},
        {"name": "ml.x.large", "memory_gib": 8, "gpus": -1},
    )
    assert message.split("; ") == [
        "RUNYARD_INSTANCE_TYPES[0] (ml.gr6.4xlarge): vcpus: Input should be greater than or "
        "equal to 1",
        "RUNYARD_INSTANCE_TYPES[1] (ml.x.large): vcpus: Field required",
        "RUNYARD_INSTANCE_TYPES[1] (ml.x.large): gpus: Input should be greater than or equal to 0",
    ]


def test_a_type_given_twice_is_refused(tmp_path: Path) -> None:
    message = _refusal(tmp_path, GR6, {**GR6, "vcpus": 8})
    assert message == "RUNYARD_INSTANCE_TYPES[1] (ml.gr6.4xlarge): name: entry 0 has it too"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("backends", {"ml.gr6.4xlarge": "kubernetes"}),
        ("capacity", {"ml.gr6.4xlarge": 2}),
        ("project_quotas", {"team-a": {"ml.gr6.4xlarge": 1}}),
    ],
)
def test_a_setting_may_name_a_type_only_once_it_is_in_the_catalog(
    tmp_path: Path, field: str, value: dict[str, Any]
) -> None:
    # A misspelt type would run nowhere, or be unlimited, without a word.
    with pytest.raises(ValidationError, match=r"unknown instance type\(s\) ml.gr6.4xlarge") as e:
        Settings(home=tmp_path, **{field: value})
    assert f"RUNYARD_{field.upper()}" in str(e.value)
    assert "add a type with RUNYARD_INSTANCE_TYPES" in str(e.value)
    added = Settings(home=tmp_path, instance_types=[GR6], **{field: value})
    assert getattr(added, field) == value


def test_a_copy_given_other_types_has_their_catalog(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    copied = settings.model_copy(
        update={"instance_types": Settings(home=tmp_path, instance_types=[GR6]).instance_types}
    )
    assert "ml.gr6.4xlarge" in copied.instance_catalog
    assert "ml.gr6.4xlarge" not in settings.instance_catalog
    # Read twice, built once.
    assert copied.instance_catalog is copied.instance_catalog
