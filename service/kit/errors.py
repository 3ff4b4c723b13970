"""One error base class with an HTTP status, and one handler that renders it.

Spec errors use the same shape as FastAPI's request validation errors
(``{"detail": [{"loc": [...], "msg": ..., "type": ...}]}``) so clients parse one format
whether pydantic or a domain rule refused the field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from contract.problems import Problem
from service.kit import integers


class RunyardError(Exception):
    status_code = 400
    headers: dict[str, str] | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def detail(self) -> Any:
        return self.message


class NotFound(RunyardError):
    status_code = 404


class Conflict(RunyardError):
    status_code = 409


class Unauthorized(RunyardError):
    status_code = 401
    headers = {"WWW-Authenticate": "Bearer"}


class Forbidden(RunyardError):
    status_code = 403


class PayloadTooLarge(RunyardError):
    status_code = 413


class TooManyRequests(RunyardError):
    """The server serves as many of these as it will at once; the client may ask again
    after ``retry_after`` seconds (Retry-After)."""

    status_code = 429

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.headers = {"Retry-After": str(retry_after)}


class ResourceLimitExceeded(RunyardError):
    """As SageMaker's error of that name: the job does not fit what this server has free
    now, and the server is configured to refuse rather than queue it."""

    def detail(self) -> Any:
        return f"ResourceLimitExceeded: {self.message}"


class SpecError(RunyardError):
    """A field of a request is wrong; ``loc`` names it the way pydantic would."""

    status_code = 422

    def __init__(self, loc: tuple[str | int, ...], message: str, *, source: str = "body") -> None:
        super().__init__(f"{'.'.join(str(part) for part in loc)}: {message}")
        self.loc = loc
        self.source = source  # body, query or path, as in FastAPI's own errors
        self.field_message = message

    def detail(self) -> Any:
        return [{"loc": [self.source, *self.loc], "msg": self.field_message, "type": "value_error"}]


def refuse(problems: Iterable[Problem]) -> None:
    """Raise the first problem found below the API (a mode, a backend) as a SpecError."""
    for problem in problems:
        raise SpecError(problem.loc, problem.message)


# Called before a 422 is sent, with the request: raises Unauthorized (or Forbidden) if the
# caller is not allowed in at all, so that no body is judged for someone without a token.
AdmissionCheck = Callable[[Request], None]


def install_error_handler(app: FastAPI, admit: AdmissionCheck | None = None) -> None:
    @app.exception_handler(RunyardError)
    async def _handle(_request: Request, exc: RunyardError) -> JSONResponse:
        return JSONResponse(
            status_code=exc.status_code, content={"detail": exc.detail()}, headers=exc.headers
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        if admit is not None:
            try:
                await run_in_threadpool(admit, request)
            except RunyardError as refused:
                return await _handle(request, refused)
        # Where and why, never the offending input: it may be a secret (an environment
        # value) or not even representable as JSON (NaN).
        errors = [
            {"loc": list(error["loc"]), "msg": error["msg"], "type": error["type"]}
            for error in exc.errors()
        ]
        return JSONResponse(status_code=422, content={"detail": errors})

    # A JSON body holding an integer too long for Python to convert gets FastAPI's 400,
    # which names nothing: it is answered as the field error it is, credentials first.
    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> Response:
        where = await _too_long_integer(request, exc)
        if where is None:
            return await http_exception_handler(request, exc)
        too_long = {
            "loc": ("body", *where),
            "msg": f"Input should be an integer of at most {integers.most_digits()} digits",
            "type": "int_parsing_size",
        }
        return await _invalid(request, RequestValidationError([too_long]))


async def _too_long_integer(request: Request, exc: HTTPException) -> tuple[str | int, ...] | None:
    """Where the body holds an integer too long to convert, when that is why FastAPI could
    not read it (its 400, raised from json.loads's ValueError); else None."""
    if exc.status_code != 400 or not isinstance(exc.__cause__, ValueError):
        return None
    try:
        # The body FastAPI read, kept by the request.
        return integers.first_too_long(integers.json_loads(await request.body()))
    except (ValueError, RecursionError):
        return None


class ErrorBody(BaseModel):
    """Every error reply: a sentence, or for a 422 where and why each field is wrong."""

    detail: str | list[dict[str, Any]]


_REPLIES = {
    401: "No token, or a revoked or invalid one",
    403: "The token's role does not allow this",
    404: "No such thing in the caller's projects",
    409: "The request conflicts with the current state",
    413: "The upload is larger than the server accepts",
    422: "A field is wrong (the reply names it)",
    429: "The server serves as many of these at once as it will; ask again after Retry-After",
}


def replies(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The error replies a route gives, for its OpenAPI document."""
    return {code: {"model": ErrorBody, "description": _REPLIES[code]} for code in codes}
