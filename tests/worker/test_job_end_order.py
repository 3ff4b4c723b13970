"""How a job ends: its result is written first, and its instances are removed after,
however long that takes, certainly, even where the pass that ended it could not.

Real local instances (sleeping processes, the test reporting for their runtimes), a real
job directory, the real reconciler and the real reaper."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provisioning.base import JobRef, TeardownError
from service.jobs import repository
from service.kit.db import session_scope
from service.settings import Settings
from tests.instances import SleepingInstances
from tests.jobs import job_dir, job_id, job_state, report, submit
from worker.reconciler import Reconciler
from worker.tasks import reap_backend

# A job's layer as a requirements.txt install leaves it: many packages, many small files.
PACKAGES = 200
FILES_PER_PACKAGE = 100


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"stop_grace_seconds": 0.0, "teardown_grace_seconds": 0.5})


def _install_packages(layer: Path) -> int:
    """Fill ``layer`` as pip would fill a job's layer; how many files it holds."""
    site = layer / "lib" / "python3.11" / "site-packages"
    for package in range(PACKAGES):
        module = site / f"package_{package}"
        module.mkdir(parents=True)
        for number in range(FILES_PER_PACKAGE):
            (module / f"module_{number}.py").write_text(f"VALUE = {number}\n" * 20)
    return PACKAGES * FILES_PER_PACKAGE


class _Watched(SleepingInstances):
    """Real instances, whose teardown notes what the job read when it began and ended."""

    def __init__(self, settings: Settings, name: str) -> None:
        super().__init__(settings.jobs_dir)
        self.settings = settings
        self.job_name = name
        self.events: list[tuple[str, Any]] = []

    def teardown(self, job: JobRef) -> None:
        layer = self.jobs_dir / job.id / "job-env"
        files = sum(1 for path in layer.rglob("*") if path.is_file())
        self.events.append(("teardown begins", job_state(self.settings, self.job_name)["status"]))
        self.events.append(("files in the job's layer", files))
        super().teardown(job)
        self.events.append(("teardown ends", (self.jobs_dir / job.id).exists()))


def test_a_job_reads_completed_before_its_files_are_removed(
    settings: Settings, source_dir: Path
) -> None:
    name = submit(settings, source_dir, instance_count=2)
    backend = _Watched(settings, name)
    reconciler = Reconciler(settings, lambda _n, _s: backend)
    reconciler.reconcile(job_id(settings, name))
    installed = _install_packages(job_dir(settings, name) / "job-env")
    for host in ("algo-1", "algo-2"):
        report(settings, name, host, "Completed", exit_code=0)
    reconciler.reconcile(job_id(settings, name))
    # The status was written before the teardown began, so before it ended: the layer
    # was still whole then, and nothing of the job is left now.
    assert backend.events == [
        ("teardown begins", "Completed"),
        ("files in the job's layer", installed),
        ("teardown ends", False),
    ]
    assert not job_dir(settings, name).exists()


def test_what_a_teardown_could_not_remove_the_reaper_does(
    settings: Settings, source_dir: Path
) -> None:
    calls: list[str] = []

    class FailsOnce(SleepingInstances):
        def teardown(self, job: JobRef) -> None:
            calls.append(job.name)
            if len(calls) == 1:
                raise TeardownError(f"processes of {job.name} survived SIGKILL: [4242]")
            super().teardown(job)

    backend = FailsOnce(settings.jobs_dir)
    name = submit(settings, source_dir)
    reconciler = Reconciler(settings, lambda _n, _s: backend)
    reconciler.reconcile(job_id(settings, name))
    report(settings, name, "algo-1", "Completed", exit_code=0)
    reconciler.reconcile(job_id(settings, name))
    # The result stands: removing the instances is the server's business, not the job's.
    job = job_state(settings, name)
    assert (job["status"], job["reason"]) == ("Completed", None)
    assert calls == [name]  # not retried in a loop by the reconciler
    assert job_dir(settings, name).exists()
    # The reaper finds the ended job's directory, as after a worker died mid-teardown.
    assert reap_backend(backend, settings) == [JobRef(job_id(settings, name), name)]
    assert calls == [name, name]
    assert not job_dir(settings, name).exists()
    # (Other tests' jobs on this machine may hold networks of their own meanwhile.)
    assert [ref for ref in backend.held_jobs() if ref.id == job_id(settings, name)] == []


def test_the_reaper_leaves_alone_a_job_a_pass_is_ending(
    settings: Settings, source_dir: Path
) -> None:
    backend = SleepingInstances(settings.jobs_dir)
    name = submit(settings, source_dir)
    reconciler = Reconciler(settings, lambda _n, _s: backend)
    reconciler.reconcile(job_id(settings, name))
    report(settings, name, "algo-1", "Completed", exit_code=0)
    ref = JobRef(job_id(settings, name), name)

    class EndsWithoutTeardown(SleepingInstances):
        def teardown(self, job: JobRef) -> None:
            # While this pass holds the job's lease, as it does while it tears it down.
            assert reap_backend(backend, settings) == []
            raise TeardownError("left for the reaper")

    Reconciler(settings, lambda _n, _s: EndsWithoutTeardown(settings.jobs_dir)).reconcile(ref.id)
    assert job_state(settings, name)["status"] == "Completed"
    with session_scope(settings.database_url, readonly=True) as session:
        assert repository.ended_job_ids(session, [ref.id]) == {ref.id}  # the lease is gone
    assert reap_backend(backend, settings) == [ref]
    assert not job_dir(settings, name).exists()
