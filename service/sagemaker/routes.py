"""``POST /`` with ``X-Amz-Target``: SageMaker's and CloudWatch Logs' AWS JSON 1.1
protocol on Runyard's own port. A ``POST /`` without that header is not one of these
calls, and is answered as any unknown path."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from service.auth import service as auth
from service.kit.db import session_scope
from service.kit.errors import NotFound
from service.sagemaker import cloudwatch_logs, shapes, sigv4, training
from service.sagemaker.errors import CONTENT_TYPE, AwsError
from service.settings import Settings

router = APIRouter()

# Far above any request these operations take (a CreateTrainingJob at every limit is
# under 400 KiB); a larger body is refused before it is read whole.
MAX_BODY_BYTES = 1 << 20
# X-Amz-Target's prefix for each service, and its operations.
SERVICES = {
    "SageMaker": (shapes.SAGEMAKER, training.OPERATIONS),
    "Logs_20140328": (shapes.LOGS, cloudwatch_logs.OPERATIONS),
}


@router.post("/", include_in_schema=False)
async def aws_json(request: Request) -> Response:
    target = request.headers.get("x-amz-target")
    if target is None:
        raise NotFound("POST / takes SageMaker's protocol: the X-Amz-Target header is missing")
    try:
        body = await _body(request)
        settings: Settings = request.app.state.settings
        answer = await run_in_threadpool(_answer, settings, target, request, body)
    except AwsError as exc:
        return exc.response()
    return JSONResponse(_wire(answer), media_type=CONTENT_TYPE)


def _answer(settings: Settings, target: str, request: Request, body: bytes) -> dict[str, Any]:
    prefix, _, name = target.partition(".")
    service_name, operations = SERVICES.get(prefix, ("", {}))
    operation_model = shapes.operation(service_name, name) if service_name else None
    if name not in operations or operation_model is None:
        served = ", ".join(f"{p}.{op}" for p, (_, ops) in SERVICES.items() for op in ops)
        raise AwsError(
            "UnknownOperationException",
            f"{target[:80]!r} is not served here; Runyard serves {served}",
        )
    signature = sigv4.read(request.headers)
    with session_scope(settings.database_url) as session:
        holder = auth.access_key_holder(session, settings.signing_key(), signature.access_key)
        if holder is None:
            raise sigv4.unrecognized()
        principal, secret = holder
        arrived = sigv4.Arrived(request.method, str(request.url), request.headers, body)
        sigv4.verify(signature, secret, arrived, service_name)
        params = shapes.check_input(operation_model, _parsed(body))
        call = training.Call(session, settings, principal, signature.region)
        with training.as_aws_errors(params.get("TrainingJobName", "")):
            return operations[name](call, params)


async def _body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise _too_large()
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _too_large()
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large() -> AwsError:
    return AwsError("SerializationException", f"The request body is over {MAX_BODY_BYTES} bytes.")


def _parsed(body: bytes) -> Any:
    if not body.strip():
        return {}
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise AwsError("SerializationException", "The request body is not JSON.") from None


def _wire(value: Any) -> Any:
    """JSON as AWS JSON 1.1 writes it: timestamps in epoch seconds."""
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, dict):
        return {key: _wire(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_wire(item) for item in value]
    return value
