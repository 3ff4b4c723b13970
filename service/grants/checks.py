"""A job's URIs against what its project may use, at submission.

A job of a project other than ``default`` reads only inside its project's places (its
area, the uploaded sources, its grants) and writes only where they allow writing; a job
of any project writes nowhere another project may write (a read-write grant of its). Its
outputs go below ``output_path/<job name>``: that is where it writes.
"""

from __future__ import annotations

from collections.abc import Sequence

from contract import storage
from contract.problems import Problem
from contract.spec import JobSpec
from service.grants.places import MAX_PLACE_KEY, Place, ProjectPlaces, keys, overlap


def written_uris(spec: JobSpec, job_name: str) -> list[str]:
    """Where the job writes: its output folder, its checkpoints, its TensorBoard data
    (``contract.spec.WRITTEN``)."""
    return [use.used for use in spec.storage_uses(job_name) if use.writing]


def written_at(output_path: str, job_name: str) -> str:
    """A job's output folder (a bad URI is for other checks to name)."""
    try:
        return storage.join(output_path, job_name)
    except storage.StorageError:
        return output_path


def problems(
    spec: JobSpec, job_name: str, places: ProjectPlaces, others_writable: Sequence[Place]
) -> list[Problem]:
    """The first of the job's URIs its project may not use so, as a problem."""
    for use in spec.storage_uses(job_name):
        why = _refusal(use.used, places, writing=use.writing)
        if why is None and use.writing:
            why = _others(use.used, places.project, others_writable)
        if why is not None:
            return [Problem(use.loc, f"{use.given}: {why}")]
    return []


def _refusal(uri: str, places: ProjectPlaces, *, writing: bool) -> str | None:
    found = keys(uri)
    if any(len(key) > MAX_PLACE_KEY for key in found):
        return f"a path longer than {MAX_PLACE_KEY} characters"
    if places.allows(uri, writing=writing):
        return None
    project = places.project
    if writing and places.allows(uri, writing=False):
        return f"project {project!r} may only read there (its grant is read-only)"
    return (
        f"outside what project {project!r} may use: its own area ({places.places[0].uri}), "
        "the uploaded sources (to read), and the places a server administrator granted it "
        f"(its admins list them: runyard project grants {project})"
    )


def _others(uri: str, project: str, others_writable: Sequence[Place]) -> str | None:
    found = keys(uri)
    for place in others_writable:
        if overlap(found, place.keys):
            return (
                "a server administrator granted another project this place to write: "
                f"a job of project {project!r} may not write there"
            )
    return None
