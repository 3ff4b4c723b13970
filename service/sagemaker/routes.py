"""``POST /``: SageMaker's, CloudWatch Logs' and CloudWatch's own protocols on Runyard's
port, and STS's GetCallerIdentity. With ``X-Amz-Target``, AWS JSON (1.1 for SageMaker and
Logs, 1.0 for CloudWatch, as current botocore speaks them); without it, a form-encoded body
is the AWS Query protocol (CloudWatch, as older botocore speaks it, and STS). Any other
``POST /`` is not one of these calls, and is answered as any unknown path."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from botocore.model import OperationModel
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from service.auth import service as auth
from service.kit import integers
from service.kit.db import session_scope
from service.kit.errors import NotFound
from service.sagemaker import (
    cloudwatch_logs,
    cloudwatch_metrics,
    query_protocol,
    search,
    shapes,
    sigv4,
    sts,
    tags,
    training,
    tuning,
)
from service.sagemaker.errors import AwsError
from service.sagemaker.training import Operation
from service.settings import Settings

router = APIRouter()

# Far above any request these operations take (a CreateTrainingJob at every limit is
# under 400 KiB); a larger body is refused before it is read whole.
MAX_BODY_BYTES = 1 << 20


@dataclass(frozen=True)
class Service:
    """An AWS service served here: botocore's model of it, its operations, and how its
    JSON protocol writes answers and names a request that breaks the model's rules."""

    model: str
    operations: Mapping[str, Operation] = field(repr=False)
    json_version: str = "1.1"
    validation_code: str = "ValidationException"

    @property
    def content_type(self) -> str:
        return f"application/x-amz-json-{self.json_version}"

    @property
    def signing_name(self) -> str:
        return str(shapes.service_model(self.model).signing_name)

    @property
    def query_compatible(self) -> bool:
        return bool(shapes.service_model(self.model).is_query_compatible)

    @property
    def xml_namespace(self) -> str:
        return str(shapes.service_model(self.model).metadata.get("xmlNamespace", ""))


SAGEMAKER = Service(
    shapes.SAGEMAKER,
    {**training.OPERATIONS, **tuning.OPERATIONS, **tags.OPERATIONS, **search.OPERATIONS},
)
LOGS = Service(shapes.LOGS, cloudwatch_logs.OPERATIONS)
CLOUDWATCH = Service(
    shapes.CLOUDWATCH,
    cloudwatch_metrics.OPERATIONS,
    json_version="1.0",
    validation_code="ValidationError",
)
# STS answers only who the caller is (service.sagemaker.sts), over AWS Query alone.
STS = Service(shapes.STS, sts.OPERATIONS, validation_code="ValidationError")
# X-Amz-Target's prefix for each service.
SERVICES = {
    "SageMaker": SAGEMAKER,
    "Logs_20140328": LOGS,
    "GraniteServiceVersion20100801": CLOUDWATCH,
}
# The services served over AWS Query, by the Version their requests name.
QUERY_SERVICES = {"2010-08-01": CLOUDWATCH, "2011-06-15": STS}
ParamsReader = Callable[[OperationModel], Any]


@router.post("/", include_in_schema=False)
async def aws_call(request: Request) -> Response:
    target = request.headers.get("x-amz-target")
    if target is not None:
        return await _json_call(request, target)
    if query_protocol.is_query(request.headers.get("content-type", "")):
        return await _query_call(request)
    raise NotFound(
        "POST / takes SageMaker's and CloudWatch's protocols: the X-Amz-Target header "
        "(or a form naming an Action) is missing"
    )


async def _json_call(request: Request, target: str) -> Response:
    prefix, _, name = target.partition(".")
    service = SERVICES.get(prefix)
    try:
        if service is None or name not in service.operations:
            raise _unknown_operation(repr(target[:80]))
        body = await _body(request)
        settings: Settings = request.app.state.settings
        answer = await run_in_threadpool(
            _answer, settings, service, name, request, body, lambda _model: _parsed(body)
        )
    except AwsError as exc:
        shown = service or SAGEMAKER
        return exc.response(shown.content_type, query_compatible=shown.query_compatible)
    return JSONResponse(_wire(answer), media_type=service.content_type)


async def _query_call(request: Request) -> Response:
    service = CLOUDWATCH  # whose errors are written while the version is not yet known
    try:
        body = await _body(request)
        form = query_protocol.form_of(body)
        action, version = form.pop("Action", ""), form.pop("Version", "")
        service = QUERY_SERVICES.get(version, service)
        operation = shapes.operation(service.model, action)
        if version not in QUERY_SERVICES or action not in service.operations or not operation:
            raise _unknown_operation(f"Action {action[:80]!r} of Version {version[:20]!r}")
        settings: Settings = request.app.state.settings
        answer = await run_in_threadpool(
            _answer,
            settings,
            service,
            action,
            request,
            body,
            lambda model: query_protocol.params_of(model.input_shape, form),
        )
    except AwsError as exc:
        return query_protocol.error(exc, service.xml_namespace)
    return query_protocol.answer(operation, answer)


def _unknown_operation(asked: str) -> AwsError:
    served = ", ".join(f"{p}.{op}" for p, service in SERVICES.items() for op in service.operations)
    queried = ", ".join(
        f"{op} ({version})"
        for version, service in QUERY_SERVICES.items()
        for op in service.operations
    )
    return AwsError(
        "UnknownOperationException",
        f"{asked} is not served here; Runyard serves {served}, and over AWS Query {queried}",
    )


def _answer(
    settings: Settings,
    service: Service,
    name: str,
    request: Request,
    body: bytes,
    read_params: ParamsReader,
) -> dict[str, Any]:
    operation_model = shapes.operation(service.model, name)
    if operation_model is None:  # botocore's model lacks an operation served here
        raise _unknown_operation(repr(name))
    signature = sigv4.read(request.headers)
    with session_scope(settings.database_url) as session:
        holder = auth.access_key_holder(session, settings.signing_key(), signature.access_key)
        arrived = sigv4.Arrived(request.method, str(request.url), request.headers, body)
        principal = sigv4.verify_holder(signature, holder, arrived, service.signing_name)
        try:
            params = shapes.check_input(operation_model, read_params(operation_model))
        except AwsError as exc:
            if exc.code != "ValidationException":
                raise
            raise AwsError(service.validation_code, exc.message) from None
        call = training.Call(session, settings, principal, signature.region)
        with training.as_aws_errors(params.get("TrainingJobName", "")):
            return service.operations[name](call, params)


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
        # An integer too long for Python to convert is kept for the member's check to
        # refuse by name (service.kit.integers).
        return integers.json_loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise AwsError("SerializationException", "The request body is not JSON.") from None


def _wire(value: Any) -> Any:
    """JSON as AWS JSON writes it: timestamps in epoch seconds."""
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, dict):
        return {key: _wire(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_wire(item) for item in value]
    return value
