"""A job with a container entry point (SageMaker's ContainerEntrypoint, which the SDK v3's
ModelTrainer sends): validated at the API, and run by the runtime only where the instance's
directory is /opt/ml, which the command reads by that name."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from service.jobs.schemas import JobCreate
from tests.instances import launch_request, start_runtime, write_instances

BASE = {"instance_type": "local", "name": "job-1"}


def test_an_entrypoint_job_needs_no_script_or_source() -> None:
    spec = JobCreate.model_validate(
        {**BASE, "container_entrypoint": ["/bin/bash"], "container_arguments": ["-c", "true"]}
    )
    job = spec.job_spec_at("file:///tmp/out")
    assert (job.entry_point, job.source_uri) == ("", "")
    assert job.container_entrypoint + job.container_arguments == ("/bin/bash", "-c", "true")
    assert ("source_uri",) not in job.storage_uris()


@pytest.mark.parametrize(
    ("fields", "loc", "words"),
    [
        # Without an entry point, whether the job needs one depends on its image (a custom
        # container brings its own program): the service says so
        # (tests/service/training/test_api_images.py).
        ({"entry_point": "train.py"}, ("source_uri",), "Field required"),
        ({"container_arguments": ["-c", "true"]}, ("container_arguments",), "container_entrypoint"),
        (
            {
                "container_entrypoint": ["/bin/bash"],
                "distribution": {"torch_distributed": {"enabled": True}},
            },
            ("container_entrypoint",),
            "without a distribution mode",
        ),
        ({"container_entrypoint": []}, ("container_entrypoint",), "at least 1"),
        ({"container_entrypoint": ["x" * 257]}, ("container_entrypoint", 0), "at most 256"),
    ],
)
def test_what_runs_must_be_said_once(fields: dict[str, object], loc: tuple, words: str) -> None:
    with pytest.raises(ValidationError) as caught:
        JobCreate.model_validate({**BASE, **fields})
    errors = caught.value.errors()
    assert [tuple(error["loc"]) for error in errors] == [loc]
    assert words in errors[0]["msg"]


def test_the_runtime_refuses_an_entrypoint_off_opt_ml(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    request = launch_request(
        source,
        entry_point=None,
        source_uri=None,
        container_entrypoint=["/bin/sh"],
        container_arguments=["-c", "echo ran > /tmp/should-not-run"],
    )
    base = write_instances(tmp_path / "job", request)["algo-1"]
    process = start_runtime(base)
    output, _ = process.communicate(timeout=60)
    assert process.returncode != 0, output
    assert "reads /opt/ml itself" in output
    assert "RUNYARD_LOCAL_ISOLATION=namespaces" in (base / "output" / "failure").read_text()
