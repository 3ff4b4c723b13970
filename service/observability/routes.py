"""/healthz, /readyz and /metrics: open without a token, for probes and Prometheus."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from contract.protocol import JOBS_PATH
from service.kit.deps import SettingsDep
from service.observability import context, exposition, http, readiness

router = APIRouter(tags=["health"])
PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process answers (liveness): nothing it depends on is asked."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "A dependency does not answer."}})
def readyz(settings: SettingsDep) -> JSONResponse:
    """Whether the database and the broker answer: 200, or 503 naming the one that
    does not."""
    checks = [readiness.check_database(settings), readiness.check_broker(settings)]
    body = {
        "status": "ok" if all(check.ok for check in checks) else "unavailable",
        "checks": {
            check.name: {"ok": check.ok, **({"error": check.error} if check.error else {})}
            for check in checks
        },
    }
    return JSONResponse(body, status_code=200 if body["status"] == "ok" else 503)


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    # The job gauges query the database: off the event loop.
    body = await run_in_threadpool(exposition.render, request.app.state.metrics_registry)
    return Response(body, media_type=exposition.CONTENT_TYPE)


async def note_job_name(request: Request) -> None:
    """A dependency of every route: lines logged while answering a job's route name it.
    Async, so that it sets the request's own context (a thread's would be lost)."""
    name = request.path_params.get("name")
    if isinstance(name, str) and http.route_template(request.scope).startswith(JOBS_PATH):
        context.job_name.set(name)
