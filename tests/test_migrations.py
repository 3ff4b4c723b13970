"""The migrations build exactly the schema the models describe, on both databases."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from service.kit.db import get_engine
from service.kit.migrate import upgrade
from service.models import Base


def test_migrated_schema_matches_the_models(database_url: str) -> None:
    upgrade(database_url)  # a second upgrade is a no-op
    with get_engine(database_url).connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": False})
        differences = compare_metadata(context, Base.metadata)
    assert differences == []
