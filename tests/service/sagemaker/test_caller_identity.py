"""STS's GetCallerIdentity for Runyard's keys: the account and role the SageMaker SDK
derives its default bucket and execution role from, consistent with the ARNs Runyard's
own answers carry."""

from __future__ import annotations

import re
from typing import Any

import pytest
from botocore.exceptions import ClientError
from fastapi.testclient import TestClient

from tests.service.sagemaker.conftest import credentials
from tests.service.sagemaker.live import check_answer, client


def test_a_key_answers_as_its_projects_role_in_its_projects_account(
    api: TestClient, server: str, sm: Any
) -> None:
    sts = client("sts", server, credentials(api))
    identity = sts.get_caller_identity()
    check_answer(sts, "GetCallerIdentity", identity)
    account = identity["Account"]
    assert re.fullmatch(r"[0-9]{12}", account)
    assert identity["Arn"] == f"arn:aws:sts::{account}:assumed-role/RunyardJob/admin"
    assert identity["UserId"].endswith(":admin")
    # The role the SDK makes of it is the one a job's describe answer shows.
    assert sm.list_training_jobs()["TrainingJobSummaries"] == []
    assert f"arn:aws:iam::{account}:role/RunyardJob" == re.sub(
        r"^(.+)sts::(\d+):assumed-role/(.+?)/.*$", r"\1iam::\2:role/\3", identity["Arn"]
    )


def test_another_projects_key_is_another_account(api: TestClient, server: str) -> None:
    assert api.post("/v1/projects", json={"name": "vision"}).status_code in (200, 201)
    minted = api.post(
        "/v1/tokens", json={"name": "ci.bot", "role": "viewer", "project": "vision"}
    ).json()["token"]
    own = client("sts", server, credentials(api)).get_caller_identity()
    theirs = client("sts", server, credentials(api, minted)).get_caller_identity()
    assert theirs["Account"] != own["Account"]
    assert theirs["Arn"].endswith("/RunyardJob/ci.bot")


def test_a_key_nobody_holds_is_refused(api: TestClient, server: str) -> None:
    keys = {**credentials(api), "access_key_id": "RYAK" + "A" * 16}
    with pytest.raises(ClientError) as refused:
        client("sts", server, keys).get_caller_identity()
    assert refused.value.response["Error"]["Code"] in (
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "InvalidSignatureException",
    )


def test_other_sts_actions_are_not_served(api: TestClient, server: str) -> None:
    sts = client("sts", server, credentials(api))
    with pytest.raises(ClientError) as refused:
        sts.assume_role(RoleArn="arn:aws:iam::123456789012:role/x", RoleSessionName="session")
    assert "GetCallerIdentity" in refused.value.response["Error"]["Message"]
