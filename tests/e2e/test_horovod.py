"""Horovod PyTorch scripts under the ``mpi`` distribution, through the real service, worker
and local backend: mpirun starts the ranks, ``import horovod.torch`` is Runyard's."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest
import torch

from runyard.client import Client
from tests.e2e.conftest import Stack, log_lines
from tests.libraries.horovod.job import workload

pytestmark = pytest.mark.e2e

JOB_SOURCE = Path(workload.__file__).resolve().parent
TWO_BY_TWO = {"mpi": {"enabled": True, "processes_per_host": 2}}


def _untagged(line: str) -> str:
    """A rank's line without mpirun's "[1,3]<stdout>: " tag."""
    return re.sub(r"^\[\d+,\d+\]<std(?:out|err)>:\s?", "", line)


def _completed(stack: Stack, client: Client, source: str | Path, **spec: Any) -> dict[str, Any]:
    job = stack.submit(client, source, instance_count=2, distribution=TWO_BY_TWO, **spec)
    job = stack.wait_until_ended(client, job["name"], timeout=240)
    assert job["status"] == "Completed", stack.explain(job, list(client.logs(job["name"])))
    return job


def _extracted(job: dict[str, Any], member: str, into: Path) -> Path:
    with tarfile.open(job["model_artifacts"].removeprefix("file://")) as archive:
        archive.extract(member, into, filter="data")
    return into / member


@pytest.fixture(scope="module")
def checks(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The check job's reports (by rank) and rank 0's final parameters of each variant."""
    with stack.client() as client:
        job = _completed(
            stack, client, JOB_SOURCE, name="hvd-checks", entry_point="horovod_checks.py"
        )
        lines = [_untagged(line) for line in log_lines(client, job["name"])]
    reports = [
        json.loads(line.removeprefix("CHECK ")) for line in lines if line.startswith("CHECK ")
    ]
    finals = torch.load(_extracted(job, "finals.pt", tmp_path_factory.mktemp("hvd")))
    return {"ranks": sorted(reports, key=lambda report: report["rank"]), "finals": finals}


def test_ranks_know_their_place_among_instances(checks: dict[str, Any]) -> None:
    places = [
        (r["rank"], r["size"], r["local_rank"], r["local_size"], r["cross_rank"], r["cross_size"])
        for r in checks["ranks"]
    ]
    # mpirun fills algo-1's two slots, then algo-2's.
    assert places == [
        (0, 4, 0, 2, 0, 2),
        (1, 4, 1, 2, 0, 2),
        (2, 4, 0, 2, 1, 2),
        (3, 4, 1, 2, 1, 2),
    ]
    assert all(r["is_homogeneous"] and r["module"] == "horovod.torch" for r in checks["ranks"])
    assert {r["version"] for r in checks["ranks"]} == {"0.28.1+runyard"}


def test_collectives_give_horovods_results(checks: dict[str, Any]) -> None:
    for rank, r in enumerate(checks["ranks"]):
        # Each rank gave rank + 1.
        assert (r["average"], r["sum"], r["min"], r["max"], r["product"]) == (2.5, 10, 1, 4, 24)
        assert r["average_flag"] == 10  # average=False: a sum
        assert r["int_average"] == [4]  # (0 + 3 + 6 + 9) / 4, the fraction cut off
        assert r["scaled"] == 4.0  # 4 x (1 x 2), then x 0.5
        # Sent as float16: within its precision of the average, and not the float32 one.
        assert r["fp16"][0] == pytest.approx(2.5 / 3, abs=2e-3)
        assert r["fp16"][0] != pytest.approx(2.5 / 3, abs=1e-6)
        assert r["input_kept"] == rank + 1
        assert (r["async"], r["polled"], r["in_place"]) == (6, True, 6)
        assert r["grouped"] == [[10], [20]]
        assert r["allgather"] == [0, 1, 1, 2, 2, 2, 3, 3, 3, 3]  # rank + 1 rows each
        assert r["allgather_async"] == [[0, 0], [1, 1], [2, 2], [3, 3]]
        assert (r["broadcast"], r["broadcast_"]) == (10, 3)
        assert r["broadcast_object"] == {"from": 2}
        assert r["allgather_object"] == [0, 1, 2, 3]


def test_collectives_are_differentiable(checks: dict[str, Any]) -> None:
    for rank, r in enumerate(checks["ranks"]):
        # d/dx of avg(x) * (rank + 1), summed over ranks' losses: the average of rank + 1.
        assert r["allreduce_grad"] == [2.5]
        # Every rank's loss weighs row i by i: this rank's rows get 4 x their index.
        first = sum(range(1, rank + 1))
        assert r["allgather_grad"] == [4.0 * i for i in range(first, first + rank + 1)]
        assert r["broadcast_grad"] == ([12.0] if rank == 0 else [0.0])


def test_broadcasts_make_ranks_start_from_rank_0(checks: dict[str, Any]) -> None:
    for r in checks["ranks"]:
        assert r["params_differed_before"], "the ranks' random inits were the same already"
        assert r["params_agree_after"]
        assert r["params_are_roots"]
        # Rank 0's Adam: its learning rate and first moment (0.1 x its gradient of 1).
        assert r["lr_after"] == 0.001
        assert r["moments_agree"]
        assert r["moment_value"] == pytest.approx(0.1)


@pytest.mark.parametrize("variant", workload.VARIANTS)
def test_distributed_optimizer_matches_one_process_on_the_global_batch(
    checks: dict[str, Any], variant: str
) -> None:
    assert all(r[f"{variant}_agree"] for r in checks["ranks"]), "ranks ended apart"
    expected = workload.reference()
    got = checks["finals"][variant]
    assert got.keys() == expected.keys()
    # fp16 rounds every gradient on the wire; the others differ only in summation order.
    tolerance = {"atol": 2e-3, "rtol": 0} if variant == "fp16" else {"atol": 1e-6, "rtol": 1e-5}
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], **tolerance)
    if variant == "fp16":
        plain = checks["finals"]["average"]
        assert any(not torch.equal(got[key], plain[key]) for key in plain), "nothing was rounded"


def test_what_is_not_offered_says_so_by_name(checks: dict[str, Any]) -> None:
    r = checks["ranks"][0]
    assert r["adasum"] == r["adasum_optimizer"]
    assert r["adasum"].startswith("NotOfferedError: Runyard's horovod.torch does not offer ")
    assert "op=hvd.Adasum" in r["adasum"]
    assert r["join"].startswith("AttributeError: module 'horovod.torch' has no attribute 'join':")
    assert not r["has_join"]
    assert "process_set=" in r["process_set"]
    assert r["named_parameters"].startswith("ValueError: named_parameters leaves out 3")
    assert r["zero_grad_between"].startswith("RuntimeError: optimizer.zero_grad() was called")
    for module in ("tensorflow", "keras"):
        assert r[module].startswith("ImportError: horovod.tensorflow: Runyard offers only")


def test_the_example_trains_and_rank_0_saves_the_model(stack: Stack, tmp_path: Path) -> None:
    with stack.client() as client:
        job = _completed(
            stack,
            client,
            "horovod-pytorch",
            name="hvd-example",
            entry_point="train.py",
            hyperparameters={"epochs": 3},
        )
        lines = [_untagged(line) for line in log_lines(client, job["name"])]
    assert sorted(line for line in lines if line.startswith("rank ")) == [
        "rank 0/4, local rank 0/2, instance 0/2",
        "rank 1/4, local rank 1/2, instance 0/2",
        "rank 2/4, local rank 0/2, instance 1/2",
        "rank 3/4, local rank 1/2, instance 1/2",
    ]
    assert len([line for line in lines if line.startswith("epoch ")]) == 3  # rank 0 only
    metrics = json.loads(_extracted(job, "metrics.json", tmp_path).read_text())
    assert metrics["size"] == 4
    assert metrics["accuracy"] > 0.9
    state = torch.load(_extracted(job, "model.pt", tmp_path), weights_only=True)
    assert sorted(state) == ["0.bias", "0.weight", "2.bias", "2.weight"]


def test_a_tensorflow_horovod_script_fails_saying_why(stack: Stack, tmp_path: Path) -> None:
    source = tmp_path / "tf-hvd"
    source.mkdir()
    (source / "train.py").write_text("import horovod.tensorflow as hvd\n\nhvd.init()\n")
    with stack.client() as client:
        job = stack.submit(
            client,
            source,
            name="hvd-tf",
            entry_point="train.py",
            framework="tensorflow",
            distribution={"mpi": {"enabled": True, "processes_per_host": 1}},
        )
        job = stack.wait_until_ended(client, "hvd-tf")
        lines = [_untagged(line) for line in log_lines(client, "hvd-tf")]
    assert job["status"] == "Failed"
    said = [line for line in lines if line.startswith("ImportError: horovod.tensorflow: ")]
    assert said, lines
    assert "Runyard offers only horovod.torch" in said[0]
