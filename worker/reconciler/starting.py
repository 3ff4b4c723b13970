"""Admission and launch: a queued job takes its instances from the capacity, all together,
or waits in line saying why; an admitted one has its backend start them."""

from __future__ import annotations

from sqlalchemy.orm import object_session

from provisioning.base import LaunchRequest
from service.auth.tokens import agent_key, instance_token
from service.capacity import service as capacity
from service.jobs import lifecycle
from service.jobs.lifecycle import Event
from service.jobs.models import TrainingJob
from service.kit.db import utcnow
from worker.reconciler.snapshot import JobSnapshot, Pass


def admit(step: Pass, snapshot: JobSnapshot) -> None:
    """Take the job's instances from the capacity, all together, or wait in line."""
    settings = step.settings

    def admitting(job: TrainingJob) -> None:
        session = object_session(job)
        if session is None:
            raise ValueError(f"{job.name} is not in a session")
        verdict = capacity.decide(session, settings, job)
        if verdict.admitted:
            job.admitted_at = utcnow()
            lifecycle.apply(job, Event.ADMITTED)
        else:
            lifecycle.apply(job, Event.WAITING, verdict.reason)

    snapshot = step.update(snapshot, admitting)
    if snapshot.admitted_at is not None:
        launch(step, snapshot)


def launch(step: Pass, snapshot: JobSnapshot) -> None:
    count = snapshot.spec.instance_count
    attempt = snapshot.ref.attempt
    message = f"Launching {count} {snapshot.spec.instance_type} instance{'s' * (count > 1)}"
    if attempt:
        resuming = ", resuming from the latest checkpoint" * bool(snapshot.spec.checkpoint_s3_uri)
        message += f" (attempt {attempt + 1}{resuming})"

    def launching(job: TrainingJob) -> None:
        lifecycle.apply(job, Event.LAUNCHING, message)

    snapshot = step.update(snapshot, launching)
    settings = step.settings
    roots = step.instance_roots(snapshot)
    request = LaunchRequest(
        job=snapshot.ref,
        spec=snapshot.spec.job_spec(),
        service_url=settings.public_url,
        tokens={
            host: instance_token(settings.signing_key(), snapshot.ref.id, host)
            for host in snapshot.hosts
        },
        agent_key=agent_key(settings.signing_key(), snapshot.ref.id),
        first_log_seq=snapshot.attempt_first_log_seq,
        file_roots=roots.writable,
        read_only_roots=roots.read_only,
        confine_files=roots.confined,
        aws_credentials=settings.service_gives_credentials,
        instance_metrics_seconds=settings.instance_metrics_seconds,
        # A restart, or a launch adopted after the worker's own restart, runs on what the
        # first launch decided (a stand-in chosen then may not be the one chosen today).
        launched_image=snapshot.launched_image or "",
        launched_image_note=snapshot.launched_image_note or "",
    )
    # Adopts what an earlier, interrupted attempt started.
    materialized = step.backend.submit(request)
    now = utcnow()

    def launched(job: TrainingJob) -> None:
        job.launched_at = now
        job.isolation = materialized.isolation
        # What describe shows as the job's image from now on: the one the instances run.
        job.launched_image = materialized.image or None
        job.launched_image_note = materialized.image_note or None
        lifecycle.apply(job, Event.LAUNCHED)

    step.update(snapshot, launched)
