"""Request bodies bounded while they arrive, before any route runs.

FastAPI reads and parses a JSON body before a route's dependencies run, authentication
among them: unbounded, one anonymous request of 300 MiB held the API for 51 s and 900 MB.
So the limit is this middleware's, outside the app's routes: a body whose
``Content-Length`` is over it is refused at once, unread, and a streamed one is refused
as soon as what arrived passes it. Pure ASGI, as Starlette's ``BaseHTTPMiddleware``
would read the body itself first.

Any answer given before the body was read to its end (this 413, a 401 to an upload)
closes the connection: uvicorn would otherwise read the rest, to keep it open.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# A route is named by its method and its path as the app routes it (without the prefix
# it is served under).
Route = tuple[str, str]
_CLOSE = (b"connection", b"close")
# A Content-Length of more digits is over any limit, and is not converted.
_MOST_DIGITS = 18


class BodyTooLarge(HTTPException):
    """Raised while a route reads a body past the limit. An HTTPException, so that FastAPI
    passes it on as it is while it reads a JSON body, and the app answers it."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, _message(limit))


class BodyLimit:
    """Bodies of at most ``default`` bytes; of at most ``routes[route]`` on those routes."""

    def __init__(self, app: ASGIApp, default: int, routes: Mapping[Route, int]) -> None:
        self.app = app
        self.default = default
        self.routes = dict(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.routes.get((scope["method"], route_path(scope)), self.default)
        headers = Headers(scope=scope)
        declared = _content_length(headers)
        if declared is not None and declared > limit:
            await _refuse(send, limit)
            return
        exchange = _Exchange(receive, send, limit, bool(declared) or "transfer-encoding" in headers)
        try:
            await self.app(scope, exchange.receive, exchange.send)
        except BodyTooLarge:
            # The app answers it (FastAPI's handler for HTTPException); this is for a body
            # read where nothing answers it, while there is still time to answer.
            if exchange.started:
                raise
            await _refuse(send, limit)


class _Exchange:
    """One request's messages: the body counted as it arrives, the answer watched."""

    def __init__(self, receive: Receive, send: Send, limit: int, has_body: bool) -> None:
        self._receive = receive
        self._send = send
        self._limit = limit
        self._unread = has_body
        self._received = 0
        self.started = False

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.request":
            self._received += len(message.get("body", b""))
            if self._received > self._limit:
                raise BodyTooLarge(self._limit)
            self._unread = message.get("more_body", False)
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            if self._unread:
                message = {**message, "headers": [*message.get("headers", []), _CLOSE]}
        await self._send(message)


async def _refuse(send: Send, limit: int) -> None:
    body = json.dumps({"detail": _message(limit)}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        _CLOSE,
    ]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _message(limit: int) -> str:
    return f"the request body is larger than {limit} bytes, the most this server takes here"


def _content_length(headers: Headers) -> int | None:
    value = headers.get("content-length", "")
    # A malformed length is the server's to refuse: uvicorn answers 400 before any app.
    if not (value.isascii() and value.isdigit()):
        return None
    return int(value) if len(value) <= _MOST_DIGITS else sys.maxsize


def route_path(scope: Scope) -> str:
    """The path the app routes: behind a proxy (uvicorn's ``--root-path``) the path
    carries the prefix it is served under."""
    path: str = scope["path"]
    prefix: str = scope.get("root_path", "")
    if prefix and path.startswith(prefix + "/"):
        return path[len(prefix) :]
    return path
