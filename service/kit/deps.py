"""FastAPI dependencies every domain uses: settings and the request's transaction."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from service.kit.db import session_scope
from service.settings import Settings


# Async, as the dependencies below that do no I/O: FastAPI runs a plain function in its
# thread pool, a hand-off that costs more than what these do.
async def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(get_app_settings)]


def get_session(settings: SettingsDep) -> Iterator[Session]:
    """The request's transaction: committed before the response is sent, else rolled back."""
    with session_scope(settings.database_url) as session:
        yield session


def get_read_session(settings: SettingsDep) -> Iterator[Session]:
    """A transaction for routes that only read."""
    with session_scope(settings.database_url, readonly=True) as session:
        yield session


# scope="function": commit before the response goes out, so a 201 means it is stored.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
ReadSessionDep = Annotated[Session, Depends(get_read_session, scope="function")]
