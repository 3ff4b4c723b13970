"""FastAPI dependencies every domain uses: settings and the request's transaction."""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import anyio
from fastapi import Depends, Request
from sqlalchemy.orm import Session

from service.kit.db import end_session, get_sessionmaker
from service.settings import Settings


# Async, as the dependencies below that do no I/O: FastAPI runs a plain function in its
# thread pool, a hand-off that costs more than what these do.
async def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(get_app_settings)]


async def get_session(settings: SettingsDep) -> AsyncIterator[Session]:
    """The request's transaction: committed before the response is sent, else rolled back."""
    async with _transaction(settings.database_url, readonly=False) as session:
        yield session


async def get_read_session(settings: SettingsDep) -> AsyncIterator[Session]:
    """A transaction for routes that only read."""
    async with _transaction(settings.database_url, readonly=True) as session:
        yield session


@asynccontextmanager
async def _transaction(url: str, *, readonly: bool) -> AsyncIterator[Session]:
    # A session touches the database only when first used, in the route's thread: made
    # here, it spares a hand-off to the thread pool (a sync generator costs one to enter
    # and one to leave), which under load cost as much as a query.
    session = get_sessionmaker(url, readonly=readonly)()
    try:
        yield session
    except BaseException:
        await _end(session, committed=False)
        raise
    await _end(session, committed=True)


async def _end(session: Session, *, committed: bool) -> None:
    if session.get_transaction() is None and not (session.new or session.dirty or session.deleted):
        # Never used (a route that stores its rows elsewhere, or only checked the
        # caller): nothing to commit, and closing it touches no database.
        session.close()
        return
    await anyio.to_thread.run_sync(
        functools.partial(end_session, session, committed=committed), limiter=_ending()
    )


# Threads of their own for ending the requests' transactions. A transaction holds its
# connection from the route's thread until it ends in another; behind the routes' threads,
# which may all be waiting for a connection, it would keep its connection from them: 200
# requests at once on SQLite's pool of 15 held one another up until the pool's 30 s timeout,
# and failed. An ending waits for no connection: it gives one back.
ENDING_THREADS = 40
_endings: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)


def _ending() -> anyio.CapacityLimiter:
    loop = asyncio.get_running_loop()
    if loop not in _endings:
        _endings[loop] = anyio.CapacityLimiter(ENDING_THREADS)
    return _endings[loop]


# scope="function": commit before the response goes out, so a 201 means it is stored.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
ReadSessionDep = Annotated[Session, Depends(get_read_session, scope="function")]
