"""Requests without credentials refused before the app reads anything of them.

FastAPI parses and validates a JSON body before a route's dependencies run, and
authentication is one of them: an anonymous body was read, parsed and judged before the
401 came (``service.auth.deps.admit`` turned a malformed one's 422 into that 401). This
middleware answers a request to the API that carries no credential at all (no bearer
token, no console session cookie) with the 401 at once, its body unread. Whether a
credential that is there holds is still the routes' to decide (``deps.get_principal``):
this only looks at which headers a request has, so it costs every request next to
nothing. The API is everything under ``/v1/`` but signing in; SageMaker's signed calls
(``POST /``) answer their callers in AWS's own shape, and the console's pages and the
probes are open.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from service.auth import sessions
from service.auth.deps import MISSING_CREDENTIALS, OPEN_PATHS
from service.kit.body_limit import route_path
from service.kit.errors import Unauthorized

API_PREFIX = "/v1/"


class RefuseAnonymous:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _needs_credentials(scope):
            headers = Headers(scope=scope)
            if not _has_credentials(headers):
                await _refuse(headers)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _needs_credentials(scope: Scope) -> bool:
    path = route_path(scope)
    return path.startswith(API_PREFIX) and path not in OPEN_PATHS


def _has_credentials(headers: Headers) -> bool:
    """Whether the request carries what ``deps.identify`` reads: a bearer token (any
    case of the scheme, a token after it), or a console session cookie."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return True
    cookies = headers.get("cookie")
    return cookies is not None and sessions.COOKIE in cookie_parser(cookies)


def _refuse(headers: Headers) -> JSONResponse:
    refusal = Unauthorized(MISSING_CREDENTIALS)
    answer = JSONResponse(
        {"detail": refusal.detail()}, status_code=refusal.status_code, headers=refusal.headers
    )
    if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
        # The body is left unread: uvicorn would otherwise read the rest of it to keep
        # the connection open.
        answer.headers["Connection"] = "close"
    return answer
