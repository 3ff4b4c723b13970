"""What preparing submissions reads of the database, once for the submissions stored
together (``service.training.submissions``): each project's data access and the project
count are the same for every job of a batch, and were read anew for each, the count in a
transaction of its own (three round trips a create, a third of the API's time on one);
now each is remembered by the process for a moment (``service.kit.access_cache``). Where
other projects' jobs write is read for the whole batch in one statement, in the
transaction that stores it.

A batch's own reads take no transaction (``autocommit_reads``): each statement sees what
was committed when it ran, as a read of its own for each job did, and the batch's jobs are
judged as if submitted at the same moment, as ``capacity.forecast`` judges them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any, TypeVar

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from provisioning import registry
from provisioning.base import Backend
from service.auth.models import Project
from service.grants import service as grant_service
from service.grants.service import DataAccess
from service.kit import access_cache, resolved_paths
from service.kit.db import autocommit_reads
from service.settings import Settings

T = TypeVar("T")


class PreparationReads:
    """The database as ``preparation.prepare`` reads it, each answer that does not depend
    on the job read once; a project's data access and the project count are remembered
    by the process for a moment (``service.kit.access_cache``). ``session``: where to
    read, or a way to open it when first needed (a batch whose answers are all remembered
    opens none)."""

    def __init__(self, session: Session | Callable[[], Session], settings: Settings) -> None:
        self._session = session
        self._settings = settings
        self._access: dict[str, DataAccess] = {}
        self._projects: int | None = None
        self._backends: dict[str, Backend[Any]] = {}

    @property
    def session(self) -> Session:
        if not isinstance(self._session, Session):
            self._session = self._session()
        return self._session

    def data_access(self, project: str) -> DataAccess:
        if project not in self._access:
            self._access[project] = self._remembered(
                ("data_access", project),
                lambda: grant_service.data_access(self.session, self._settings, project),
            )
        return self._access[project]

    def first_taken_each(self, wanted: Sequence[tuple[str, Sequence[str]]]) -> list[str | None]:
        """See ``grant_service.first_taken_each``: one statement for the batch."""
        return grant_service.first_taken_each(self.session, wanted)

    def backend(self, name: str) -> Backend[Any]:
        """The backend ``name`` as this server builds it: the same for every job of a
        batch, and building one (the local backend reads its networks) cost a tenth of
        preparing a job."""
        if name not in self._backends:
            self._backends[name] = registry.build(name, self._settings)
        return self._backends[name]

    def project_count(self) -> int:
        if self._projects is None:
            self._projects = self._remembered(
                "project_count",
                lambda: self.session.scalar(select(func.count()).select_from(Project)) or 0,
            )
        return self._projects

    def _remembered(self, key: Hashable, read: Callable[[], T]) -> T:
        settings = self._settings
        return access_cache.remembered(
            settings.database_url, key, settings.token_cache_seconds, read
        )


@contextmanager
def preparation_reads(settings: Settings) -> Iterator[PreparationReads]:
    """The reads of one batch, in a session of their own opened when first needed; inside
    it, each path the rules look at on disk is resolved once for the batch
    (``service.kit.resolved_paths``)."""
    with ExitStack() as opened, resolved_paths.resolved_once():
        yield PreparationReads(
            lambda: opened.enter_context(autocommit_reads(settings.database_url)), settings
        )
