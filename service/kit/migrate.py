"""Schema migrations: the same Alembic scripts for the server, compose and the tests."""

from __future__ import annotations

from importlib.resources import files

from alembic import command
from alembic.config import Config

from service.kit.db import get_engine


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(files("migrations")))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    config = alembic_config(database_url)
    with get_engine(database_url).begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
