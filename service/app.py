"""The FastAPI application, built by a factory so tests can hand it their own Settings."""

from __future__ import annotations

import functools
import gc
import logging
from collections.abc import Callable

from fastapi import Depends, FastAPI
from sqlalchemy import select

from provisioning import registry
from service.auth.anonymous import RefuseAnonymous
from service.auth.deps import admit
from service.auth.principal_cache import PrincipalCache
from service.auth.routes import me_router, projects_router, session_router
from service.auth.routes import router as tokens_router
from service.capacity.routes import router as capacity_router
from service.console import routes as console
from service.grants.routes import router as grants_router
from service.kit import enqueue
from service.kit.body_limit import BodyLimit
from service.kit.db import autocommit_reads
from service.kit.errors import install_error_handler
from service.logs.follow import Follows
from service.logs.routes import router as logs_router
from service.metrics.routes import router as metrics_router
from service.observability import exposition, logs, pool
from service.observability import routes as observability
from service.observability.http import ObserveRequests
from service.sagemaker.routes import router as sagemaker_router
from service.settings import Settings, get_settings
from service.sources.routes import router as sources_router
from service.training.instance_routes import router as instance_router
from service.training.offer import router as instance_types_router
from service.training.routes import router as jobs_router
from service.training.submissions import Submissions
from service.tuning import wake as tuning_wake
from service.tuning.routes import router as tuning_router

log = logging.getLogger(__name__)

# Open without a token: the health probes (for load balancers and Kubernetes) and the
# metrics (for Prometheus, which hold no names: docs/monitoring.md), the API
# documentation, which holds no data, signing in to the console, and the console's pages
# and files, which hold none either (their scripts ask /v1 for it with the session cookie).
PUBLIC_PATHS = (
    frozenset({"/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json", "/v1/session"})
    | observability.PATHS
    | console.PATHS
)
# Every route of these requires a token.
ROUTERS = (
    jobs_router,
    instance_router,
    logs_router,
    metrics_router,
    sources_router,
    tokens_router,
    projects_router,
    grants_router,
    me_router,
    capacity_router,
    instance_types_router,
    tuning_router,
)


def create_app(settings: Settings | None = None) -> FastAPI:
    app = FastAPI(
        title="Runyard",
        summary="Self-hosted managed training jobs",
        version="0.1.0",
        docs_url="/docs",
        dependencies=[Depends(observability.note_job_name)],
    )
    app.state.settings = settings or get_settings()
    app.state.principals = PrincipalCache(app.state.settings.token_cache_seconds)
    app.state.submissions = Submissions(app.state.settings)
    app.state.follows = Follows(app.state.settings)
    app.state.metrics_registry = exposition.api_registry(app.state.settings.database_url)
    pool.watch_pools()
    install_error_handler(app, admit)
    for router in ROUTERS:
        app.include_router(router)
    app.include_router(session_router)
    app.include_router(observability.router)
    # Signed with SigV4, not a bearer token: it checks its callers itself.
    app.include_router(sagemaker_router)
    console.install(app)
    # A trial the API stops while it waits in line ends here: its tuner hears of it.
    tuning_wake.listen(app.state.settings)
    # Source bundles stream to disk, up to their own limit; every other body is JSON.
    app.add_middleware(
        BodyLimit,
        default=app.state.settings.max_request_bytes,
        routes={("POST", sources_router.prefix): app.state.settings.max_source_bytes},
    )
    # Around the limit: a request without credentials is refused before its body is read.
    app.add_middleware(RefuseAnonymous)
    # Outermost: every answer is counted and carries its request id, refusals included.
    app.add_middleware(ObserveRequests)
    return app


def create_app_to_serve(settings: Settings | None = None) -> FastAPI:
    """The app for a process that serves it until it ends (``runyard server``, ``runyard
    api``). What exists once it is built (modules, routes, models: most of the process's
    objects) lives as long as the process, so the garbage collector is told to leave it
    out of its passes: a full pass over it held every request up to 190 ms under load."""
    app = create_app(settings)
    logs.capture_warnings(app.state.settings.log_format)
    _load_what_requests_need(app.state.settings)
    gc.freeze()
    return app


def _load_what_requests_need(settings: Settings) -> None:
    """Load what the first requests would, so that it is frozen with the rest: each
    enabled backend (a create checks its spec with it), the broker's client and the
    database's driver, connected. Left to the first requests, the collector's full passes
    walked about 45,000 objects instead of 15,000, every few seconds under load, and
    held the requests of the moment up 36 ms (median) instead of 14 (2 API processes,
    PostgreSQL and Redis, 3,000 creates). What cannot be loaded now is left for the
    request that needs it to report."""
    loads: list[tuple[str, Callable[[], object]]] = [
        (f"the {backend} backend", functools.partial(registry.build, backend, settings))
        for backend in sorted(set(settings.backends.values()))
    ]
    loads.append(("the broker's client", functools.partial(enqueue.load_sender, settings)))
    loads.append(("the database's driver", functools.partial(_connect, settings.database_url)))
    for what, load in loads:
        try:
            load()
        except Exception:
            log.warning("could not load %s before serving", what, exc_info=True)


def _connect(url: str) -> None:
    with autocommit_reads(url) as session:
        session.execute(select(1))
