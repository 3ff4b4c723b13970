"""The console's pages. Each is a shell: its script asks ``/v1`` for everything it shows,
with the session cookie, so the pages themselves are open (``service.app.PUBLIC_PATHS``)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from contract.modes import MODES

_HERE = Path(__file__).parent
STATIC_DIR = _HERE / "static"
# Filled by `make install` from the npm packages in console/ (never committed).
VENDOR_DIR = STATIC_DIR / "vendor"
STATIC_PATH = "/console/static"
# Every path this module adds to the app: all open, since none holds data.
PATHS = frozenset(
    {
        "/",
        "/sign-in",
        "/jobs/{name}",
        "/submit",
        "/capacity",
        "/compare",
        "/tuning-jobs",
        "/tuning-jobs/{name}",
        STATIC_PATH,
    }
)

# No other site may show a page of the console in a frame, where a click meant for it
# could be taken (clickjacking): a page only says so for itself. X-Frame-Options is for
# browsers older than CSP's frame-ancestors.
FRAMING_HEADERS = {"Content-Security-Policy": "frame-ancestors 'none'", "X-Frame-Options": "DENY"}

templates = Jinja2Templates(directory=_HERE / "templates")
router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)


def _page(request: Request, template: str, title: str, **context: object) -> HTMLResponse:
    # Behind an Ingress under a prefix every link and request starts from the prefix.
    base = (request.scope.get("root_path") or "").rstrip("/") + "/"
    return templates.TemplateResponse(
        request,
        template,
        {
            "base": base,
            "static": f"{base}{STATIC_PATH.lstrip('/')}/",
            "title": title,
            "charts": (VENDOR_DIR / "uPlot.iife.min.js").is_file(),
            "yaml": (VENDOR_DIR / "js-yaml.min.js").is_file(),
            **context,
        },
        headers={"Cache-Control": "no-store", **FRAMING_HEADERS},
    )


@router.get("/")
def jobs_page(request: Request) -> HTMLResponse:
    return _page(request, "jobs.html", "Jobs", nav="jobs")


@router.get("/sign-in")
def sign_in_page(request: Request) -> HTMLResponse:
    return _page(request, "sign_in.html", "Sign in", nav="")


@router.get("/jobs/{name}")
def job_page(request: Request, name: str) -> HTMLResponse:
    return _page(request, "job.html", name, nav="jobs", job=name)


@router.get("/submit")
def submit_page(request: Request) -> HTMLResponse:
    # The distribution modes a job may enable, in the API schema's order.
    modes = [mode.name for mode in MODES]
    return _page(request, "submit.html", "Submit a job", nav="submit", modes=modes)


@router.get("/compare")
def compare_page(request: Request) -> HTMLResponse:
    return _page(request, "compare.html", "Compare jobs", nav="jobs")


@router.get("/tuning-jobs")
def tuning_jobs_page(request: Request) -> HTMLResponse:
    return _page(request, "tuning_jobs.html", "Tuning jobs", nav="tuning")


@router.get("/tuning-jobs/{name}")
def tuning_job_page(request: Request, name: str) -> HTMLResponse:
    return _page(request, "tuning_job.html", name, nav="tuning", tuning=name)


@router.get("/capacity")
def capacity_page(request: Request) -> HTMLResponse:
    return _page(request, "capacity.html", "Capacity", nav="capacity")


def install(app: FastAPI) -> None:
    """Add the console's pages and its static files to ``app``."""
    app.include_router(router)
    app.mount(STATIC_PATH, StaticFiles(directory=STATIC_DIR), name="console-static")
