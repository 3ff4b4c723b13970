"""SigV4 as AWS checks it: a token's AWS credentials sign requests; a wrong, stale,
malformed or missing signature, or a key nobody holds, gets AWS's error for it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from click.testing import CliRunner
from fastapi.testclient import TestClient

from runyard.cli import main
from tests.sagemaker.conftest import credentials
from tests.sagemaker.live import REGION, client

TARGET = "SageMaker.ListTrainingJobs"


def signed(
    url: str,
    keys: dict[str, str],
    body: dict[str, Any],
    *,
    target: str = TARGET,
    service: str = "sagemaker",
    when: datetime | None = None,
) -> httpx.Response:
    """A request signed by botocore's own signer, sent as any HTTP client would."""
    request = AWSRequest(
        method="POST",
        url=url + "/",
        data=json.dumps(body).encode(),
        headers={"X-Amz-Target": target, "Content-Type": "application/x-amz-json-1.1"},
    )
    signer = SigV4Auth(
        Credentials(keys["access_key_id"], keys["secret_access_key"]), service, REGION
    )
    if when is None:
        signer.add_auth(request)
    else:  # botocore signs with the present time; a test may want another
        request.context["timestamp"] = when.strftime("%Y%m%dT%H%M%SZ")
        request.headers["X-Amz-Date"] = request.context["timestamp"]
        canonical = signer.canonical_request(request)
        signature = signer.signature(signer.string_to_sign(request, canonical), request)
        scope = signer.scope(request)
        headers = ";".join(signer.signed_headers(signer.headers_to_sign(request)).split(";"))
        request.headers["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={scope}, SignedHeaders={headers}, Signature={signature}"
        )
    return httpx.post(
        url + "/", content=request.body, headers=dict(request.headers.items()), timeout=10
    )


def error(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["__type"]


def test_a_tokens_credentials_sign_and_a_wrong_secret_is_refused(
    api: TestClient, server: str
) -> None:
    keys = credentials(api)
    assert keys["access_key_id"].startswith("RYAK")
    assert len(keys["access_key_id"]) == 20
    assert signed(server, keys, {}).status_code == 200

    secret = keys["secret_access_key"]
    # Its last character changed: to another one, whatever it was.
    wrong = {**keys, "secret_access_key": secret[:-1] + ("y" if secret.endswith("x") else "x")}
    assert error(signed(server, wrong, {})) == (400, "InvalidSignatureException")
    nobody = {**keys, "access_key_id": "RYAK" + "F" * 16}
    assert error(signed(server, nobody, {})) == (400, "UnrecognizedClientException")
    assert error(signed(server, {**keys, "access_key_id": "AKIAEXAMPLE0000000000"}, {})) == (
        400,
        "UnrecognizedClientException",
    )


def test_the_signature_covers_the_body_the_time_and_the_service(
    api: TestClient, server: str
) -> None:
    keys = credentials(api)
    good = signed(server, keys, {"MaxResults": 5})
    assert good.status_code == 200
    # The same signature on another body.
    response = httpx.post(
        server + "/",
        content=json.dumps({"MaxResults": 6}).encode(),
        headers=dict(good.request.headers.items()),
    )
    assert error(response) == (400, "InvalidSignatureException")

    stale = signed(server, keys, {}, when=datetime.now(UTC) - timedelta(minutes=20))
    assert error(stale) == (400, "InvalidSignatureException")
    assert "Signature expired" in stale.json()["message"]
    assert (
        signed(server, keys, {}, when=datetime.now(UTC) - timedelta(minutes=5)).status_code == 200
    )

    logs_scope = signed(server, keys, {}, service="logs")
    assert error(logs_scope) == (400, "InvalidSignatureException")


def test_missing_or_malformed_signatures(api: TestClient, server: str) -> None:
    headers = {"X-Amz-Target": TARGET, "Content-Type": "application/x-amz-json-1.1"}
    assert error(httpx.post(server + "/", content=b"{}", headers=headers)) == (
        403,
        "MissingAuthenticationTokenException",
    )
    for authorization in (
        "AWS4-HMAC-SHA256 Credential=RYAK0000000000000001/20260101/eu-west-1/sagemaker",
        "AWS4-HMAC-SHA256 Signature=abc",
        "Bearer whatever",
    ):
        response = httpx.post(
            server + "/",
            content=b"{}",
            headers={**headers, "Authorization": authorization, "X-Amz-Date": "20260101T000000Z"},
        )
        assert error(response) == (400, "IncompleteSignature"), authorization


def test_a_revoked_tokens_credentials_stop_working(api: TestClient, server: str) -> None:
    minted = api.post("/v1/tokens", json={"name": "ci", "role": "member"}).json()["token"]
    keys = credentials(api, minted)
    assert signed(server, keys, {}).status_code == 200
    assert api.delete("/v1/tokens/ci").status_code == 204
    assert error(signed(server, keys, {})) == (400, "UnrecognizedClientException")


def test_bad_bodies_and_unknown_operations_get_aws_errors(api: TestClient, server: str) -> None:
    keys = credentials(api)
    unknown = signed(server, keys, {}, target="SageMaker.CreateEndpoint")
    assert error(unknown) == (400, "UnknownOperationException")
    assert "SageMaker.CreateTrainingJob" in unknown.json()["message"]
    # A member no model has: boto3 cannot even send it, any other client can.
    extra = signed(server, keys, {"MaxResults": 5, "Sorted": True})
    assert error(extra) == (400, "ValidationException")
    assert "'sorted'" in extra.json()["message"]
    assert error(signed(server, keys, {"MaxResults": 101})) == (400, "ValidationException")
    assert httpx.post(server + "/", content=b"{}").status_code == 404  # not SageMaker's protocol


def test_runyard_token_aws_prints_credentials_boto3_uses(
    api: TestClient, server: str, admin_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNYARD_URL", server)
    monkeypatch.setenv("RUNYARD_TOKEN", admin_token)
    printed = CliRunner().invoke(main, ["token", "--aws"])
    assert printed.exit_code == 0, printed.output
    found = dict(line.split("=", 1) for line in printed.output.split())
    assert set(found) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    keys = {
        "access_key_id": found["AWS_ACCESS_KEY_ID"],
        "secret_access_key": found["AWS_SECRET_ACCESS_KEY"],
    }
    assert client("sagemaker", server, keys).list_training_jobs()["TrainingJobSummaries"] == []

    created = CliRunner().invoke(main, ["token", "--create", "pipeline", "--aws"])
    assert created.exit_code == 0, created.output
    new = dict(line.split("=", 1) for line in created.stdout.split())
    assert new["AWS_ACCESS_KEY_ID"] != keys["access_key_id"]
    assert "ry_" not in created.stdout  # the new token itself is not printed
    listed = CliRunner().invoke(main, ["token", "--list", "--aws"])
    assert listed.exit_code != 0
    assert "--aws" in listed.output


def test_the_secret_is_not_stored(api: TestClient, settings: Any) -> None:
    from sqlalchemy import text

    from service.kit.db import session_scope

    keys = credentials(api)
    with session_scope(settings.database_url, readonly=True) as session:
        rows = session.execute(text("SELECT * FROM api_tokens")).all()
    assert keys["secret_access_key"] not in repr(rows)


def test_a_console_session_is_not_given_credentials(api: TestClient, admin_token: str) -> None:
    api.headers.pop("Authorization")
    assert api.post("/v1/session", json={"token": admin_token}).status_code == 200
    csrf = api.get("/v1/me").json()["csrf_token"]
    response = api.post("/v1/me/aws-credentials", headers={"X-CSRF-Token": csrf})
    assert response.status_code == 403


def test_boto3_reports_a_wrong_secret_as_aws_does(api: TestClient, server: str) -> None:
    keys = {**credentials(api), "secret_access_key": "nope"}
    with pytest.raises(ClientError) as caught:
        client("sagemaker", server, keys).list_training_jobs()
    assert caught.value.response["Error"]["Code"] == "InvalidSignatureException"


@pytest.mark.parametrize(
    "body",
    [
        {"NameContains": "a\x00b"},
        {"NameContains": "a\ud800b"},
        {"NextToken": "\ud800"},
        {"CreationTimeAfter": 1e300},
        {"MaxResults": 10**30},
        {"SortBy": ["Name"]},
        [],
        "text",
    ],
)
def test_hostile_bodies_are_validation_errors_never_500(
    api: TestClient, server: str, body: Any
) -> None:
    response = signed(server, credentials(api), body)
    assert response.status_code == 400, response.text
    assert response.json()["__type"] in ("ValidationException", "SerializationException")


def test_a_stored_member_with_a_lone_surrogate_is_refused(
    api: TestClient, server: str, source_dir: Any
) -> None:
    from tests.sagemaker.test_training_jobs import request

    body = request(source_dir, DebugHookConfig={"S3OutputPath": "s3://b/\ud800"})
    response = signed(server, credentials(api), body, target="SageMaker.CreateTrainingJob")
    assert error(response) == (400, "ValidationException")
    assert "debugHookConfig.s3OutputPath" in response.json()["message"]
    assert api.get("/v1/training-jobs").json()["items"] == []
