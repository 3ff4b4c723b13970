"""Errors as AWS JSON services send them: HTTP 400 (or 403, 404) with ``__type`` naming
the error and a ``message``; botocore turns ``__type`` into ``ClientError``'s code."""

from __future__ import annotations

from fastapi.responses import JSONResponse

CONTENT_TYPE = "application/x-amz-json-1.1"


class AwsError(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status

    def response(
        self, content_type: str = CONTENT_TYPE, *, query_compatible: bool = False
    ) -> JSONResponse:
        headers = {"x-amzn-ErrorType": self.code}
        if query_compatible:
            # A service that spoke AWS Query first (CloudWatch) names its errors by their
            # Query codes too, which botocore prefers: ``<code>;Sender``.
            fault = "Sender" if self.status < 500 else "Receiver"
            headers["x-amzn-query-error"] = f"{self.code};{fault}"
        return JSONResponse(
            status_code=self.status,
            content={"__type": self.code, "message": self.message},
            media_type=content_type,
            headers=headers,
        )


def validation(message: str) -> AwsError:
    return AwsError("ValidationException", message)


def not_found() -> AwsError:
    # What SageMaker answers for a training job it does not have (not a 404).
    return AwsError("ValidationException", "Requested resource not found.")
