"""Source retention: uploaded code that no job refers to is deleted once it is old enough.

No table records uploads: a stored bundle's own time (when it was last uploaded) says how
old it is, and the jobs' specs say which bundles are in use. Code a job refers to is kept
as long as the job's description is, so the job can always be read and run again.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from contract import storage
from service.jobs.models import record_field
from service.kit.db import utcnow
from service.settings import Settings
from service.sources.service import STORED_NAME, folder, legacy_folder


def prune_unreferenced(
    session: Session, settings: Settings, now: datetime | None = None
) -> list[str]:
    """Delete the stored bundles last uploaded over ``source_retention_days`` ago that no
    job's ``source_uri`` names; returns their URIs. 0 days keeps everything."""
    if settings.source_retention_days <= 0:
        return []
    cutoff = (now or utcnow()) - timedelta(days=settings.source_retention_days)
    old = [uri for uri in _stored(settings) if storage.modified(uri) < cutoff]
    in_use = _referenced(session, settings)
    removed = []
    for uri in old:
        # Looked at again just before: uploaded meanwhile, it is about to be used.
        if uri in in_use or storage.modified(uri) >= cutoff:
            continue
        storage.remove(uri)
        removed.append(uri)
    return removed


def _stored(settings: Settings) -> list[str]:
    """Every stored bundle: those under the sources folder, and those stored under the
    old one by earlier versions. That old folder may also be a job's output (a job named
    ``sources``), so only names the bundles had there are taken."""
    found = [item.uri for item in _listing(folder(settings))]
    found += [
        item.uri
        for item in _listing(legacy_folder(settings))
        if STORED_NAME.fullmatch(item.relative)
    ]
    return found


def _listing(uri: str) -> list[storage.StoredObject]:
    return storage.listing(uri) if storage.is_dir(uri) else []


def _referenced(session: Session, settings: Settings) -> set[str]:
    source_uri = record_field("source_uri").as_string()
    found: set[str] = set()
    for prefix in (folder(settings), legacy_folder(settings)):
        rows = session.scalars(
            select(source_uri).where(source_uri.startswith(prefix + "/", autoescape=True))
        )
        found.update(uri for uri in rows if uri)
    return found
