"""Per request: its id (the caller's X-Request-ID, or a new one, returned in the answer)
for the logs, and its count and latency for /metrics by route template.

A plain ASGI middleware, not Starlette's BaseHTTPMiddleware, which would run each request
through a second task and stream every answer through a queue. The route template is read
after the app has answered: routing writes the matched route into the scope then. A path
that matched nothing is counted as ``unmatched``, so that no caller can make up labels.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.observability import context, instruments

REQUEST_ID_HEADER = "X-Request-ID"
UNMATCHED = "unmatched"
_CALLER_ID = REQUEST_ID_HEADER.lower().encode()


class ObserveRequests:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        given = dict(scope["headers"]).get(_CALLER_ID)
        request_id = context.request_id_from(given.decode("latin-1") if given else None)
        token = context.request_id.set(request_id)
        status = 500  # what the server answers if the app raises before it answers

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request_id
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            context.request_id.reset(token)
            route = route_template(scope)
            method = scope["method"]
            instruments.REQUESTS.labels(method, route, str(status)).inc()
            instruments.REQUEST_SECONDS.labels(method, route).observe(time.perf_counter() - started)


def route_template(scope: Mapping[str, Any]) -> str:
    """The matched route's path as declared (``/v1/training-jobs/{name}``; a mount's
    own path for the files under it)."""
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) else UNMATCHED
