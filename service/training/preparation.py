"""Preparing a submission: the rules that need this server's configuration (instance
types, backends, the instance-count maximum, file roots, the artifact root, images), and
the record a job that passes them is stored as.

``prepare`` reads nothing of the database but what the job's project may use (its
grants, the places other projects write) and the project count, and writes nothing: a
dry run and a submission share it, and a batch of submissions runs it outside the
transaction that stores them (``service.training.submissions``), with reads shared by the
batch (``service.training.batch_reads``).
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from contract import layout, modes, sagemaker_flags, storage
from contract.archive import ArchiveError, check_archive
from contract.images import ImageError
from contract.problems import Problem
from contract.spec import JobSpec
from provisioning import registry
from provisioning.base import Backend
from service.capacity import service as capacity
from service.grants import checks as grant_checks
from service.grants import service as grant_service
from service.grants.checks import written_uris
from service.grants.places import keys, output_root, overlap
from service.jobs import file_roots
from service.jobs.record import JobRecord
from service.jobs.schemas import JobCreate, hyperparameters_too_large, spec_nul_location
from service.jobs.spec_parts import ImageChoice
from service.kit.db import utcnow
from service.kit.errors import (
    Conflict,
    SpecError,
    refuse,
)
from service.settings import Settings
from service.training import instance_credentials, project_areas
from service.training.batch_reads import PreparationReads, preparation_reads

_TIMESTAMP_LEN = len("-2024-01-01-00-00-00-000")


@dataclass(frozen=True)
class PreparedJob:
    """A spec that passed every rule, as the record the job is stored as."""

    name: str
    backend: str
    spec: JobRecord
    # For a job created through SageMaker's wire protocol: the request, as it is recorded.
    sagemaker_request: dict[str, Any] | None = None
    # The keys of the places it writes (service.grants.places.keys), recorded with it.
    written: tuple[str, ...] = ()


def prepare(
    settings: Settings,
    spec: JobCreate,
    project: str,
    now: datetime | None = None,
    *,
    source_checked: bool = False,
    reads: PreparationReads | None = None,
    places_checked_later: bool = False,
) -> PreparedJob:
    """Check the rules that depend on this server's configuration; ``source_checked``
    skips the source, which a dry run of its upload has checked. ``reads``: the database
    as other submissions of a batch read it (else read for this one alone).
    ``places_checked_later``: whether another project's jobs write where this one would
    is left to the caller, who asks ``places_taken`` for a batch at once."""
    if reads is None:
        with preparation_reads(settings) as own:
            return prepare(
                settings,
                spec,
                project,
                now,
                source_checked=source_checked,
                reads=own,
                places_checked_later=places_checked_later,
            )
    if (where := spec_nul_location(spec)) is not None:
        raise SpecError(where, "must not contain NUL characters")
    if (too_large := hyperparameters_too_large(spec.hyperparameters)) is not None:
        raise SpecError(("hyperparameters",), too_large)
    if spec.name is not None and spec.base_job_name is not None:
        raise SpecError(("name",), "give name or base_job_name, not both")
    catalog = settings.instance_catalog
    instance_type = catalog.get(spec.instance_type)
    if instance_type is None:
        raise SpecError(
            ("instance_type",),
            f"unknown instance type {spec.instance_type[:64]!r}"
            f"{_suggestion(spec.instance_type, settings)}; this server runs: {_runs(settings)}",
        )
    backend = spec.backend or settings.backends.get(spec.instance_type)
    if backend is None:
        raise SpecError(
            ("instance_type",),
            f"no backend on this server runs {spec.instance_type}"
            f"{_suggestion(spec.instance_type, settings)}; it runs: {_runs(settings)} "
            "(see RUNYARD_BACKENDS)",
        )
    plugin = registry.PLUGINS.get(backend)
    if plugin is None:
        raise SpecError(
            ("backend",), f"unknown backend {backend!r}; known: {', '.join(registry.PLUGINS)}"
        )
    if spec.instance_type not in plugin.instance_types(catalog):
        raise SpecError(("backend",), f"backend {backend!r} cannot run {spec.instance_type}")
    # Only the server's backends are reaped and sized for (the reconciler's lease), so a
    # job may pick among them, not bring another.
    enabled = sorted(set(settings.backends.values()))
    if backend not in enabled:
        raise SpecError(
            ("backend",),
            f"backend {backend!r} is not enabled on this server (RUNYARD_BACKENDS uses: "
            f"{', '.join(enabled)})",
        )
    if spec.instance_count > settings.max_instance_count:
        raise SpecError(
            ("instance_count",),
            f"{spec.instance_count} is above this server's maximum "
            f"of {settings.max_instance_count}",
        )
    impossible = capacity.never_fits(settings, spec.instance_type, spec.instance_count, project)
    if impossible is not None:
        raise SpecError(("instance_count",), f"can never start: {impossible}")
    _check_retry_rules(spec)
    image = _choose_image(settings, spec)
    if image.container is None and spec.container_entrypoint is None:
        # Runyard's runtime runs a script; a custom container brings its own program.
        for name in ("entry_point", "source_uri"):
            if getattr(spec, name) is None:
                raise SpecError((name,), "Field required")
    distribution = spec.distribution.as_dict()
    mode_problems = modes.problems(
        distribution, spec.framework, instance_count=spec.instance_count, gpus=instance_type.gpus
    )
    refuse(
        sagemaker_flags.at_flags(mode_problems)
        if spec.distribution_named_by_flags
        else mode_problems
    )
    output_path = spec.output_path or output_root(settings.artifact_root, project)
    name = spec.name or _generate_name(spec, now or utcnow())
    record = spec.to_record(
        name=name,
        backend=backend,
        output_path=output_path,
        image=image,
        # One the client sent is kept.
        hyperparameters={**modes.hyperparameters(distribution), **spec.hyperparameters},
    )
    located = record.job_spec()
    # Before anything looks at the files: a refusal must not tell what is there.
    refuse(file_roots.problems(located, settings.file_roots))
    written = grant_service.writable_keys(written_uris(located, name))
    # Reads outside any transaction: a submission's one commit is the batch's that stores it.
    access = reads.data_access(project)
    if access.places.restricted:
        refuse(grant_checks.problems(located, name, access.places, access.others_writable))
    else:
        refuse(project_areas.problems(located, name, settings.artifact_root, project))
        refuse(grant_checks.problems(located, name, access.places, access.others_writable))
    if not places_checked_later:
        (taken,) = places_taken([(name, record, written, project)], reads)
        refuse(taken)
    if settings.instance_credentials == "service":
        try:  # refused now, not when the instances first ask for the job's credentials
            instance_credentials.session_policy(
                located, name, places=instance_credentials.policy_places(settings, access.places)
            )
        except Conflict as exc:
            raise SpecError(("inputs",), exc.message) from None
    if not source_checked:
        _check_source(spec, settings.max_source_bytes)
    _check_inputs(spec)
    for use in located.storage_uses(name):
        if use.writing:
            _check_output_path(use.loc, use.given)
    # What only the backend knows: whether its instances could reach the code and data.
    built = reads.backend(backend)
    if located.enable_network_isolation and (why := built.network_isolation_problem()):
        refuse([Problem(("enable_network_isolation",), f"cannot be honoured: {why}")])
    refuse(built.check(located, settings.public_url))
    refuse(_shared_machine_problems(built, reads))
    return PreparedJob(name=name, backend=backend, spec=record, written=written)


def places_taken(
    jobs: Sequence[tuple[str, JobRecord, tuple[str, ...], str]], reads: PreparationReads
) -> list[list[Problem]]:
    """For each job (its name, record, the keys of the places it writes, its project):
    the problem of writing where a job of another project writes or wrote, if it would."""
    first = reads.first_taken_each([(project, written) for _, _, written, project in jobs])
    return [
        [_taken_problem(record.job_spec(), name, project, key)] if key is not None else []
        for (name, record, _, project), key in zip(jobs, first, strict=True)
    ]


def _taken_problem(spec: JobSpec, name: str, project: str, key: str) -> Problem:
    """The field through which the job would write where another project's job writes
    or wrote (that job is not named: it is another project's)."""
    written = [use for use in spec.storage_uses(name) if use.writing]
    use = next(
        (use for use in written if any(overlap([key], [mine]) for mine in keys(use.used))),
        written[0],  # the output folder, which every job writes
    )
    return Problem(
        use.loc,
        f"{use.used}: a job of another project writes or wrote there; a job of project "
        f"{project!r} writes only where no other project's jobs do",
    )


def _shared_machine_problems(backend: Backend[Any], reads: PreparationReads) -> list[Problem]:
    """Instances that share a machine can read any other job's files and the server's:
    the server takes such jobs only while it serves one project, unless its operator says
    every project may (RUNYARD_LOCAL_SHARED_PROJECTS=many)."""
    why = backend.shared_between_projects_because()
    if why is None:
        return []
    projects = reads.project_count()
    if projects <= 1:
        return []
    return [
        Problem(
            ("backend",),
            f"local instances would share this machine ({why}), where a job of one of this "
            f"server's {projects} projects could read another's data; give the instances "
            "namespaces, or set RUNYARD_LOCAL_SHARED_PROJECTS=many to take jobs of every "
            "project anyway",
        )
    ]


def _choose_image(settings: Settings, spec: JobCreate) -> ImageChoice:
    """The image the job's fields name, from this server's catalog (or a container's)."""
    if spec.image is not None:
        raise SpecError(
            ("image",),
            "is set by the server: name an image with image_uri, or with framework_version "
            "and py_version",
        )
    try:
        choice = settings.catalog.choose(
            framework=spec.framework,
            framework_version=spec.framework_version,
            py_version=spec.py_version,
            image_uri=spec.image_uri,
        )
    except ImageError as exc:
        raise SpecError((exc.field,), str(exc)) from exc
    return ImageChoice(name=choice.image, container=choice.container, note=choice.note)


def checks_reach_network(settings: Settings, spec: JobCreate) -> bool:
    """Whether ``prepare`` would look beyond this machine's files for the job (its code or
    outputs on s3://, the code file of a channel that ships it; other channels are looked
    at by its instances): checks that may wait on the network. The output path not given
    is one under the artifact root, on the root's storage."""
    located = spec.job_spec_at(spec.output_path or settings.artifact_root)
    uris = [uri for loc, uri in located.storage_uris().items() if loc[0] != "inputs"]
    in_channel = layout.channel_file(spec.source_uri) if spec.source_uri else None
    if in_channel is not None and in_channel.channel in spec.inputs:
        uris.append(spec.inputs[in_channel.channel].uri)
    return any(urlsplit(uri).scheme != "file" for uri in uris)


def _generate_name(spec: JobCreate, now: datetime) -> str:
    # As the SageMaker SDK does: <base>-<UTC timestamp to the millisecond>.
    stem = PurePosixPath(spec.entry_point or "job").stem
    base = spec.base_job_name or re.sub(r"[^a-zA-Z0-9]+", "-", stem)
    base = base.strip("-")[: 63 - _TIMESTAMP_LEN].rstrip("-") or "job"
    return f"{base}-{now:%Y-%m-%d-%H-%M-%S}-{now.microsecond // 1000:03d}"


def _check_source(spec: JobCreate, max_source_bytes: int) -> None:
    if spec.source_uri is None or spec.entry_point is None:
        return  # a container entry point brings its own code
    in_channel = layout.channel_file(spec.source_uri)
    try:
        uri = spec.source_uri if in_channel is None else _channel_object(spec, in_channel)
    except storage.StorageError as exc:
        raise SpecError(("source_uri",), str(exc)) from exc
    if uri is None:
        return  # a manifest's channel: its files are named as it is read, on the instance
    located = _Source(uri, spec.entry_point)
    try:
        if storage.scheme(located.uri) == "file":
            _check_source_at(located, storage.local_path(located.uri))
        else:
            _check_remote_source(located, max_source_bytes)
    except storage.StorageError as exc:
        raise SpecError(("source_uri",), str(exc)) from exc
    except OSError as exc:  # e.g. a directory the server may not enter
        raise SpecError(("source_uri",), f"cannot read it: {exc.strerror or exc}") from exc


def _channel_object(spec: JobCreate, found: layout.ChannelFile) -> str | None:
    """The object of the job's channel that lands as the file ``found`` (the code the
    SageMaker SDK ships in a channel), or None where that is known only on the instance.
    Found as the instance's download finds it (``storage.listing``), but by name (S3's
    HEAD), never by listing the channel, which may hold a whole data set: the channel's
    URI is the object itself (as the SDK names its code channel), which lands under its
    own name, or the prefix the file lies under."""
    channel = spec.inputs[found.channel]  # the schema checked that the job has it
    if channel.s3_data_type != "S3Prefix":
        return None
    if storage.is_file(channel.uri):
        if _object_name(channel.uri) == found.relative:
            return channel.uri
    else:
        below = storage.join(channel.uri, found.relative)
        # A local channel's download leaves out what put_file has not finished writing.
        unfinished = storage.scheme(below) == "file" and storage.is_partial(
            PurePosixPath(found.relative).name
        )
        if not unfinished and storage.is_file(below):
            return below
    raise SpecError(
        ("source_uri",),
        f"channel {found.channel!r} ({channel.uri}) holds no {found.relative}",
    )


def _object_name(uri: str) -> str:
    """The name an object lands under when a channel is that object alone."""
    if storage.scheme(uri) == "file":
        return storage.local_path(uri).name
    return uri.rpartition("/")[2]


@dataclass(frozen=True)
class _Source:
    """A job's code, and the entry point that must be in it."""

    uri: str
    entry_point: str


def _check_source_at(spec: _Source, source: Path) -> None:
    if source.is_dir():
        if not (source / spec.entry_point).is_file():
            raise SpecError(("entry_point",), f"{spec.entry_point} is not a file in {spec.uri}")
        return
    if not source.is_file():
        raise SpecError(("source_uri",), f"{spec.uri} does not exist")
    _check_tarball(spec, source)


def _check_remote_source(spec: _Source, max_source_bytes: int) -> None:
    """A prefix must hold the entry point; a tarball is fetched (no larger than an upload
    may be) and checked as an uploaded one is."""
    uri = spec.uri
    if storage.is_dir(uri):
        if not storage.is_file(storage.join(uri, spec.entry_point)):
            raise SpecError(("entry_point",), f"{spec.entry_point} is not a file in {uri}")
        return
    objects = storage.list_objects(uri) if storage.is_file(uri) else []
    if not objects:
        raise SpecError(("source_uri",), f"{uri} does not exist")
    if objects[0][1] > max_source_bytes:
        raise SpecError(("source_uri",), f"{uri} is larger than {max_source_bytes} bytes")
    with tempfile.TemporaryDirectory(prefix="runyard-source-check-") as scratch:
        _check_tarball(spec, storage.fetch(uri, Path(scratch)))


def _check_tarball(spec: _Source, source: Path) -> None:
    if not source.name.endswith((".tar.gz", ".tgz", ".tar")):
        raise SpecError(("source_uri",), "must be a directory or a .tar.gz archive")
    found = source.stat()
    try:
        files = _archive_files(str(source), found.st_size, found.st_mtime_ns)
    except ArchiveError as exc:
        raise SpecError(("source_uri",), str(exc)) from exc
    if spec.entry_point not in files:
        raise SpecError(("entry_point",), f"{spec.entry_point} is not a file in {spec.uri}")


@functools.lru_cache(maxsize=256)
def _archive_files(path: str, _size: int, _mtime_ns: int) -> frozenset[str]:
    """The files of a tarball that passed the checks. Many jobs name one uploaded source
    (stored under its digest, never rewritten): it is read once, not once per job. A file
    changed in place has another size or time, so it is read again."""
    return frozenset(check_archive(Path(path)))


def _check_inputs(spec: JobCreate) -> None:
    """What SageMaker refuses at CreateTrainingJob: a channel URI that names no place.
    Whether anything is there, the instances find out as SageMaker's do: a channel whose
    prefix holds nothing (or a manifest that is not there) fails the job at its download,
    a ``ClientError`` naming the channel and the URI (``runtime.channels``). Every input
    mode and compression is served by the runtime too."""
    for name, channel in spec.inputs.items():
        try:
            storage.check_form(channel.uri)
        except storage.StorageError as exc:
            raise SpecError(("inputs", name, "uri"), str(exc)) from exc


def _check_output_path(loc: tuple[str | int, ...], uri: str) -> None:
    """Outputs (the model, checkpoints) must be storable there: a directory, or one that
    can be made; for S3, a bucket this server can list (writing is only known when the
    first object is written)."""
    try:
        if storage.scheme(uri) == "s3":
            storage.is_dir(uri)  # a listing fails on a missing bucket or a denied one
            return
        path = storage.local_path(uri)
    except storage.StorageError as exc:
        raise SpecError(loc, str(exc)) from exc
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise SpecError(loc, f"{uri}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SpecError(loc, f"{uri}: {existing} is not writable by the server")


def _check_retry_rules(spec: JobCreate) -> None:
    # A rule that retries with no attempts allowed would silently never retry.
    if spec.max_retry_attempts == 0:
        for index, rule in enumerate(spec.retry_rules):
            if rule.action == "retry":
                raise SpecError(
                    ("retry_rules", index, "action"),
                    "retries, but max_retry_attempts is 0: set how many retries are allowed",
                )


def _runs(settings: Settings) -> str:
    """The instance types this server runs (those RUNYARD_BACKENDS sends somewhere): the
    catalog knows every SageMaker type, far more than a server runs."""
    return ", ".join(sorted(settings.backends))


def _suggestion(asked: str, settings: Settings) -> str:
    """A runnable type close to a mistyped one, as a hint."""
    close = difflib.get_close_matches(asked, sorted(settings.backends), n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""
