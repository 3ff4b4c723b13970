"""The backends' registry: each backend one record, and the server learns of a backend from
its record alone (what it runs, how it is built, its settings, how long it tears down)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provisioning import registry
from provisioning.base import Backend
from provisioning.plugin import BackendPlugin
from service.jobs.schemas import JobCreate
from service.kit.errors import SpecError
from service.settings import Settings
from service.training import preparation
from tests.conftest import job_spec
from tests.inert_backend import InertBackend
from worker.reconciler import Reconciler


def test_a_registered_record_is_offered_as_any_other_backend(
    monkeypatch: pytest.MonkeyPatch, settings: Settings, source_dir: Path
) -> None:
    built: list[object] = []

    def build(server: object) -> Backend[Any]:
        built.append(server)
        return InertBackend()

    record = BackendPlugin(
        name="inert",
        instance_types=lambda catalog: frozenset({"ml.m5.large"}),
        build=build,
        teardown_budget=lambda server: 1234.0,
    )
    monkeypatch.setitem(registry.PLUGINS, record.name, record)
    settings = settings.model_copy(update={"backends": {"local": "local", "ml.m5.large": "inert"}})

    spec = JobCreate.model_validate(job_spec(source_dir, instance_type="ml.m5.large"))
    assert preparation.prepare(settings, spec, "default").backend == "inert"
    # Submission asked the backend itself whether it could run the job.
    assert built == [settings]
    other = JobCreate.model_validate(
        job_spec(source_dir, instance_type="ml.m5.xlarge", backend="inert")
    )
    with pytest.raises(SpecError) as refused:
        preparation.prepare(settings, other, "default")
    assert refused.value.field_message == "backend 'inert' cannot run ml.m5.xlarge"

    assert isinstance(registry.build("inert", settings), InertBackend)
    # The reconciler's lease outlasts the record's teardown, with its margin.
    assert Reconciler(settings).lease_seconds == 1234.0 + 5.0


def test_an_unknown_backend_is_refused_naming_the_known_ones(
    settings: Settings, source_dir: Path
) -> None:
    spec = JobCreate.model_validate(job_spec(source_dir, backend="nowhere"))
    with pytest.raises(SpecError) as refused:
        preparation.prepare(settings, spec, "default")
    assert refused.value.field_message == "unknown backend 'nowhere'; known: local, kubernetes, ec2"
    with pytest.raises(KeyError, match="nowhere"):
        registry.build("nowhere", settings)


@pytest.mark.parametrize("name", list(registry.PLUGINS))
def test_each_record_builds_its_backend_from_its_own_settings(tmp_path: Path, name: str) -> None:
    record = registry.PLUGINS[name]
    settings = Settings(home=tmp_path)
    own = settings.backend_settings(name)
    if record.settings_model is None:
        assert own is None
    else:
        # Read from RUNYARD_<NAME>__<FIELD>: the server's field of the record's name.
        assert Settings.model_fields[name].annotation is record.settings_model
        assert isinstance(own, record.settings_model)
    assert registry.build(name, settings).name == name
    assert record.teardown_budget(settings) > 0


def test_teardown_budget_is_the_slowest_backends(tmp_path: Path) -> None:
    settings = Settings(
        home=tmp_path,
        stop_grace_seconds=30,
        teardown_grace_seconds=5,
        ec2={"teardown_timeout_seconds": 7},
    )
    assert registry.teardown_budget(["local"], settings) == 15.0
    assert registry.teardown_budget(["local", "kubernetes"], settings) == 45.0
    assert registry.teardown_budget(["local", "ec2"], settings) == 15.0
    # A misspelt backend runs no job, so has nothing to tear down.
    assert registry.teardown_budget(["ec2", "ec3"], settings) == 7.0


_LOCAL_SERVER = """
import sys
from pathlib import Path

from provisioning import registry
from service.app import create_app
from service.settings import Settings
from worker.reconciler import Reconciler

settings = Settings(home=Path(sys.argv[1]))
create_app(settings)
Reconciler(settings)
registry.build("local", settings)
print(sorted({name.split(".")[0] for name in sys.modules} & {"kubernetes", "boto3"}))
"""


def test_a_server_that_runs_only_local_jobs_never_loads_the_cloud_sdks(tmp_path: Path) -> None:
    # A process of its own: this one has loaded everything already. (botocore itself is
    # loaded: the SageMaker API reads its wire protocol from botocore's models.)
    done = subprocess.run(
        [sys.executable, "-c", _LOCAL_SERVER, str(tmp_path / "home")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"
