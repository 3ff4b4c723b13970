"""The request a clone sends: the record less what the server chose at submission."""

from __future__ import annotations

from contract import modes
from runyard.cloning import request_of

MODEL_PARALLEL = {
    "mpi": {"enabled": True},
    "smdistributed": {"modelparallel": {"enabled": True, "parameters": {"partitions": 2}}},
}


def _job(name: str, **spec: object) -> dict[str, object]:
    record = {
        "name": name,
        "entry_point": "train.py",
        "source_uri": "file:///code.tar.gz",
        "instance_type": "local",
        "output_path": "file:///artifacts",
        "backend": "local",
        "image": {"name": "builtin", "container": None},
        "framework_version": "2.13",
        **spec,
    }
    return {"name": name, "spec": record}


def test_what_the_server_chose_is_left_for_it_to_choose_again() -> None:
    added = modes.hyperparameters(MODEL_PARALLEL)
    assert added  # the mode hands its script a hyperparameter of its own
    job = _job(
        "exp-2026-01-31-12-00-00-000",
        distribution=MODEL_PARALLEL,
        hyperparameters={**added, "epochs": 3},
    )
    assert request_of(job) == {
        "entry_point": "train.py",
        "source_uri": "file:///code.tar.gz",
        "instance_type": "local",
        "output_path": "file:///artifacts",
        "framework_version": "2.13",
        "distribution": MODEL_PARALLEL,
        "hyperparameters": {"epochs": 3},
        "base_job_name": "exp",
    }


def test_a_hyperparameter_the_request_set_to_its_own_value_is_kept() -> None:
    (key,) = modes.hyperparameters(MODEL_PARALLEL)
    job = _job("job-1", distribution=MODEL_PARALLEL, hyperparameters={key: {"partitions": 4}})
    request = request_of(job)
    assert request["hyperparameters"] == {key: {"partitions": 4}}
    assert request["base_job_name"] == "job-1"  # a name given, not generated: kept whole
