"""SigV4 as AWS checks it: a token's AWS credentials sign requests; a wrong, stale,
malformed or missing signature, or a key nobody holds, gets AWS's error for it."""

from __future__ import annotations

import json
import re
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
from tests.service.sagemaker.conftest import credentials
from tests.service.sagemaker.live import REGION, client
from tests.timeouts import REQUEST_TIMEOUT

TARGET = "SageMaker.ListTrainingJobs"


def signed(
    url: str,
    keys: dict[str, str],
    body: Any,
    *,
    target: str = TARGET,
    service: str = "sagemaker",
    when: datetime | None = None,
) -> httpx.Response:
    """A request signed by botocore's own signer, sent as any HTTP client would; ``body``
    as JSON, or as the bytes given."""
    request = AWSRequest(
        method="POST",
        url=url + "/",
        data=body if isinstance(body, bytes) else json.dumps(body).encode(),
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


def answer(response: httpx.Response) -> tuple[int, str, str]:
    return response.status_code, response.json()["__type"], response.json()["message"]


def test_a_tokens_credentials_sign_and_every_bad_key_is_refused_alike(
    api: TestClient, server: str
) -> None:
    keys = credentials(api)
    assert re.fullmatch(r"RYAK[A-Z2-7]{16}", keys["access_key_id"])
    assert signed(server, keys, {}).status_code == 200

    secret = keys["secret_access_key"]
    # Its last character changed: to another one, whatever it was.
    wrong = {**keys, "secret_access_key": secret[:-1] + ("y" if secret.endswith("x") else "x")}
    refused = answer(signed(server, wrong, {}))
    assert refused[:2] == (400, "InvalidSignatureException")
    # Keys nobody holds, with the right secret of another key: the same answer, so that
    # trying ids tells nothing of which exist.
    for nobodys in ("RYAK" + "F" * 16, "RYAK" + "A" * 16, "AKIAEXAMPLE0000000000"):
        assert answer(signed(server, {**keys, "access_key_id": nobodys}, {})) == refused


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
        timeout=REQUEST_TIMEOUT,
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
    assert error(
        httpx.post(server + "/", content=b"{}", headers=headers, timeout=REQUEST_TIMEOUT)
    ) == (
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
            timeout=REQUEST_TIMEOUT,
        )
        assert error(response) == (400, "IncompleteSignature"), authorization


def test_a_revoked_tokens_credentials_stop_working(api: TestClient, server: str) -> None:
    minted = api.post("/v1/tokens", json={"name": "ci", "role": "member"}).json()["token"]
    keys = credentials(api, minted)
    assert signed(server, keys, {}).status_code == 200
    assert api.delete("/v1/tokens/ci").status_code == 204
    assert error(signed(server, keys, {})) == (400, "InvalidSignatureException")


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
    assert (
        httpx.post(server + "/", content=b"{}", timeout=REQUEST_TIMEOUT).status_code == 404
    )  # not SageMaker's protocol


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
    from tests.service.sagemaker.test_training_jobs import request

    body = request(source_dir, DebugHookConfig={"S3OutputPath": "s3://b/\ud800"})
    response = signed(server, credentials(api), body, target="SageMaker.CreateTrainingJob")
    assert error(response) == (400, "ValidationException")
    assert "debugHookConfig.s3OutputPath" in response.json()["message"]
    assert api.get("/v1/training-jobs").json()["items"] == []


def test_boto3_gets_one_answer_for_a_key_nobody_holds_a_revoked_one_and_a_wrong_secret(
    api: TestClient, server: str
) -> None:
    admin = credentials(api)
    minted = api.post("/v1/tokens", json={"name": "ci", "role": "member"}).json()["token"]
    revoked = credentials(api, minted)
    assert api.delete("/v1/tokens/ci").status_code == 204
    bad_keys = {
        "wrong secret": {**admin, "secret_access_key": "x" * 40},
        "nobody's key": {**admin, "access_key_id": "RYAK" + "Q" * 16},
        "revoked key": revoked,
    }
    answers = {}
    for label, keys in bad_keys.items():
        with pytest.raises(ClientError) as caught:
            client("sagemaker", server, keys).list_training_jobs()
        reply = caught.value.response
        answers[label] = (reply["ResponseMetadata"]["HTTPStatusCode"], reply["Error"])
    # The same status, code and message for each: nothing tells which ids exist.
    mismatch = (
        "The request signature we calculated does not match the signature you provided. "
        "Check your AWS Access Key ID, Secret Access Key and signing method."
    )
    expected = (400, {"Code": "InvalidSignatureException", "Message": mismatch})
    assert answers == dict.fromkeys(bad_keys, expected)


def test_access_key_ids_are_random_and_those_issued_before_still_work(
    api: TestClient, server: str, settings: Any
) -> None:
    from sqlalchemy import select, update

    from service.auth.models import ApiToken
    from service.auth.tokens import legacy_access_key_id
    from service.kit.db import session_scope

    names = ["one", "two", "three"]
    minted = {
        name: api.post("/v1/tokens", json={"name": name, "role": "member"}).json()["token"]
        for name in names
    }
    keys = {name: credentials(api, token) for name, token in minted.items()}
    with session_scope(settings.database_url, readonly=True) as session:
        row_ids: dict[str, int] = dict(session.execute(select(ApiToken.name, ApiToken.id)).all())
    ids = [keys[name]["access_key_id"] for name in names]
    assert len(set(ids)) == len(ids)
    for name in names:
        key_id = keys[name]["access_key_id"]
        # AWS's shape, and nothing of the row's number in it.
        assert re.fullmatch(r"RYAK[A-Z2-7]{16}", key_id), key_id
        assert key_id != legacy_access_key_id(row_ids[name])
        assert client("sagemaker", server, keys[name]).list_training_jobs()
    # The row's number is no key of a token with an id of its own.
    numbered = {**keys["one"], "access_key_id": legacy_access_key_id(row_ids["one"])}
    with pytest.raises(ClientError, match="InvalidSignatureException"):
        client("sagemaker", server, numbered).list_training_jobs()

    # A token from before ids were random has none: its key is its row's number still.
    with session_scope(settings.database_url) as session:
        session.execute(update(ApiToken).where(ApiToken.name == "two").values(access_key_id=None))
    before = credentials(api, minted["two"])
    assert before["access_key_id"] == legacy_access_key_id(row_ids["two"])
    assert before["secret_access_key"] == keys["two"]["secret_access_key"]
    assert client("sagemaker", server, before).list_training_jobs()["TrainingJobSummaries"] == []


# More digits than Python converts from text (4,300): json.loads would raise deep inside.
HUGE = "9" * 5000


@pytest.mark.parametrize(
    ("target", "body", "member", "constraint"),
    [
        (TARGET, f'{{"MaxResults": {HUGE}}}', "maxResults", "less than or equal to 100"),
        (TARGET, f'{{"MaxResults": -{HUGE}}}', "maxResults", "greater than or equal to 1"),
        (TARGET, f'{{"CreationTimeAfter": {HUGE}}}', "creationTimeAfter", "timestamp"),
        # Beyond a double's range, under Python's limit.
        (TARGET, f'{{"CreationTimeAfter": 1{"0" * 400}}}', "creationTimeAfter", "timestamp"),
        (
            "SageMaker.CreateTrainingJob",
            {"ResourceConfig": {"InstanceCount": HUGE}},
            "resourceConfig.instanceCount",
            "less than or equal to 2147483647",
        ),
        # Members with no maximum of their own: their type's (Java's int and long).
        (
            "SageMaker.CreateTrainingJob",
            {"StoppingCondition": {"MaxRuntimeInSeconds": str(2**31)}},
            "stoppingCondition.maxRuntimeInSeconds",
            "less than or equal to 2147483647",
        ),
        (
            "SageMaker.CreateTrainingJob",
            {"ProfilerConfig": {"ProfilingIntervalInMilliseconds": str(2**63)}},
            "profilerConfig.profilingIntervalInMilliseconds",
            "less than or equal to 9223372036854775807",
        ),
    ],
)
def test_an_integer_out_of_range_is_refused_naming_its_member(
    api: TestClient,
    server: str,
    source_dir: Any,
    target: str,
    body: str | dict[str, Any],
    member: str,
    constraint: str,
) -> None:
    if isinstance(body, dict):  # a CreateTrainingJob with those members, written as given
        from tests.service.sagemaker.test_training_jobs import request

        create = request(source_dir)
        for key, values in body.items():
            create[key] = {**create.get(key, {}), **{k: f"@{v}@" for k, v in values.items()}}
        body = re.sub(r'"@(-?[0-9]+)@"', r"\1", json.dumps(create))
    response = signed(server, credentials(api), body.encode(), target=target)
    assert error(response) == (400, "ValidationException"), response.text
    message = response.json()["message"]
    assert f"'{member}'" in message, message
    assert constraint in message, message
    assert api.get("/v1/training-jobs").json()["items"] == []
