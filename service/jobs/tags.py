"""A job's tags, changed after it was submitted (SageMaker's AddTags and DeleteTags).

Tags live in the job's spec, where it was submitted with them and where the REST API and
ListTags read them. A change is written with a plain UPDATE that leaves the job's version
and modification time alone: tags change nothing that runs, and must not make the
reconciler's concurrent step start over.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import ValidationError
from sqlalchemy import update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from service.jobs.models import TrainingJob
from service.jobs.spec_parts import MAX_TAGS, Tag
from service.kit.errors import SpecError


def of(job: TrainingJob) -> list[Tag]:
    return list(job.record.tags)


def add(session: Session, job: TrainingJob, given: Sequence[tuple[str, str]]) -> list[Tag]:
    """Give ``job`` the ``given`` (key, value) pairs, a key it has already taking the new
    value; returns its tags. The job must have been read to be changed (locked)."""
    tags = {tag.key: tag for tag in of(job)}
    for index, (key, value) in enumerate(given):
        try:
            tags[key] = Tag(key=key, value=value)
        except ValidationError as exc:
            field = str(exc.errors()[0]["loc"][0])
            raise SpecError(("tags", index, field), exc.errors()[0]["msg"]) from None
    if len(tags) > MAX_TAGS:
        raise SpecError(
            ("tags",),
            f"a training job has at most {MAX_TAGS} tags; these would make it {len(tags)}",
        )
    return _store(session, job, list(tags.values()))


def remove(session: Session, job: TrainingJob, keys: Iterable[str]) -> list[Tag]:
    """Take the tags with these keys off ``job`` (a key it lacks is no error); returns
    its tags."""
    gone = set(keys)
    return _store(session, job, [tag for tag in of(job) if tag.key not in gone])


def _store(session: Session, job: TrainingJob, tags: list[Tag]) -> list[Tag]:
    spec = job.record.model_copy(update={"tags": tags}).dump()
    session.execute(
        update(TrainingJob)
        .where(TrainingJob.id == job.id)
        .values(spec=spec, updated_at=TrainingJob.updated_at)
        .execution_options(synchronize_session=False)
    )
    # The session's copy shows the new tags too, without counting as a change to flush.
    set_committed_value(job, "spec", spec)
    return tags
