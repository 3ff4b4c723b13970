"""boto3's sagemaker client tags training jobs (AddTags, DeleteTags, ListTags) and
searches them (Search), as SageMaker users script them; every answer checked against
botocore's output shapes."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from fastapi.testclient import TestClient

from tests.service.sagemaker.conftest import credentials
from tests.service.sagemaker.live import REGION, UNCHECKED, check_answer, client
from tests.service.sagemaker.test_training_jobs import (
    error_of,
    request,
    vision_viewer_and_member,
)
from tests.timeouts import REQUEST_TIMEOUT


def arn_of(sm: Any, name: str) -> str:
    return str(sm.describe_training_job(TrainingJobName=name)["TrainingJobArn"])


def rest_tags(api: TestClient, name: str, project: str | None = None) -> dict[str, str]:
    params = {"project": project} if project else {}
    job = api.get(f"/v1/training-jobs/{name}", params=params).json()
    return {tag["key"]: tag["value"] for tag in job["spec"]["tags"]}


def test_add_and_delete_tags_change_what_list_tags_and_the_api_show(
    sm: Any, api: TestClient, source_dir: Path
) -> None:
    sm.create_training_job(**request(source_dir))  # tagged team=vision
    arn = arn_of(sm, "wire-1")
    before = api.get("/v1/training-jobs/wire-1").json()

    added = sm.add_tags(
        ResourceArn=arn,
        Tags=[{"Key": "team", "Value": "speech"}, {"Key": "cost-center", "Value": "42"}],
    )
    check_answer(sm, "AddTags", added)
    both = [{"Key": "team", "Value": "speech"}, {"Key": "cost-center", "Value": "42"}]
    assert added["Tags"] == both
    listed = sm.list_tags(ResourceArn=arn)
    check_answer(sm, "ListTags", listed)
    assert listed["Tags"] == both
    assert rest_tags(api, "wire-1") == {"team": "speech", "cost-center": "42"}

    check_answer(sm, "DeleteTags", sm.delete_tags(ResourceArn=arn, TagKeys=["team", "absent"]))
    assert sm.list_tags(ResourceArn=arn)["Tags"] == [{"Key": "cost-center", "Value": "42"}]
    assert rest_tags(api, "wire-1") == {"cost-center": "42"}
    # A change of tags is no change of the job's state: the reconciler's version stands.
    after = api.get("/v1/training-jobs/wire-1").json()
    assert after["updated_at"] == before["updated_at"]
    assert after["status"] == before["status"]


def test_tags_keep_sagemakers_limits_naming_the_member(
    sm: Any, api: TestClient, server: str, source_dir: Path
) -> None:
    sm.create_training_job(**request(source_dir))
    arn = arn_of(sm, "wire-1")
    many = [{"Key": f"k{i}", "Value": "v"} for i in range(50)]
    code, message = error_of(sm.add_tags, ResourceArn=arn, Tags=many)  # 50 + team = 51
    assert (code, message.split(":")[0]) == ("ValidationException", "Tags")
    assert "at most 50" in message
    sm.add_tags(ResourceArn=arn, Tags=many[:49])  # 50 in all: fine
    assert len(sm.list_tags(ResourceArn=arn)["Tags"]) == 50

    code, message = error_of(sm.add_tags, ResourceArn=arn, Tags=[{"Key": "aws:x", "Value": ""}])
    assert (code, message.split(":")[0]) == ("ValidationException", "Tags.1.Key")
    twice = [{"Key": "k0", "Value": "a"}, {"Key": "k0", "Value": "b"}]
    code, message = error_of(sm.add_tags, ResourceArn=arn, Tags=twice)
    assert (code, message.split(":")[0]) == ("ValidationException", "Tags.2.Key")

    # What botocore would refuse before sending, refused by the server the same way.
    unchecked = client("sagemaker", server, credentials(api), UNCHECKED)
    long_key = [{"Key": "k" * 129, "Value": "v"}]
    code, message = error_of(unchecked.add_tags, ResourceArn=arn, Tags=long_key)
    assert (code, "'tags.1.key'" in message) == ("ValidationException", True)
    long_value = [{"Key": "k", "Value": "v" * 257}]
    code, message = error_of(unchecked.add_tags, ResourceArn=arn, Tags=long_value)
    assert (code, "'tags.1.value'" in message) == ("ValidationException", True)
    code, message = error_of(unchecked.delete_tags, ResourceArn=arn, TagKeys=[])
    assert (code, "'tagKeys'" in message) == ("ValidationException", True)
    assert len(sm.list_tags(ResourceArn=arn)["Tags"]) == 50  # nothing refused was kept

    code, message = error_of(
        sm.add_tags, ResourceArn=arn.replace("training-job/", "model/"), Tags=many[:1]
    )
    assert (code, message.split(":")[0]) == ("ValidationException", "ResourceArn")
    other_region = arn.replace(f":{REGION}:", ":us-west-2:")
    assert error_of(sm.list_tags, ResourceArn=other_region) == (
        "ValidationException",
        "Requested resource not found.",
    )


def test_tags_need_the_member_role_and_the_jobs_project(
    api: TestClient, server: str, source_dir: Path
) -> None:
    viewer, member = vision_viewer_and_member(api, server, source_dir)
    admin = client("sagemaker", server, credentials(api))  # of the project "default"
    member.create_training_job(**request(source_dir))
    arn = arn_of(member, "wire-1")

    assert viewer.list_tags(ResourceArn=arn)["Tags"] == [{"Key": "team", "Value": "vision"}]
    code, message = error_of(viewer.add_tags, ResourceArn=arn, Tags=[{"Key": "a", "Value": "b"}])
    assert (code, "member role" in message) == ("AccessDeniedException", True)
    code, _ = error_of(viewer.delete_tags, ResourceArn=arn, TagKeys=["team"])
    assert code == "AccessDeniedException"
    member.add_tags(ResourceArn=arn, Tags=[{"Key": "a", "Value": "b"}])
    assert rest_tags(api, "wire-1", "vision") == {"team": "vision", "a": "b"}

    # Another project's job does not exist for the caller, whatever the ARN says.
    for call, params in (
        (admin.list_tags, {}),
        (admin.add_tags, {"Tags": [{"Key": "x", "Value": "y"}]}),
        (admin.delete_tags, {"TagKeys": ["team"]}),
    ):
        assert error_of(call, ResourceArn=arn, **params) == (
            "ValidationException",
            "Requested resource not found.",
        )
    assert rest_tags(api, "wire-1", "vision") == {"team": "vision", "a": "b"}


# -- Search --------------------------------------------------------------------------------


def names(answer: dict[str, Any]) -> list[str]:
    return [result["TrainingJob"]["TrainingJobName"] for result in answer["Results"]]


def search(sm: Any, *filters: dict[str, Any], **params: Any) -> list[str]:
    """The names Search finds with these filters (all of them), oldest first unless
    ``params`` say otherwise."""
    if filters:
        params["SearchExpression"] = {"Filters": list(filters)}
    params = {"SortBy": "CreationTime", "SortOrder": "Ascending", **params}
    answer = sm.search(Resource="TrainingJob", **params)
    check_answer(sm, "Search", answer)
    return names(answer)


def made(sm: Any, source_dir: Path) -> None:
    """Five jobs, alpha-1 to alpha-5, made in that order; beta-2 stopped."""
    for name, team, rate in (
        ("alpha-1", "vision", "0.1"),
        ("beta-2", "speech", "0.01"),
        ("alpha-3", "vision", "0.5"),
        ("gamma-4", "speech", "0.05"),
        ("alpha-5", "nlp", "1"),
    ):
        body = request(source_dir, name=name, Tags=[{"Key": "team", "Value": team}])
        body["HyperParameters"]["learning_rate"] = rate
        sm.create_training_job(**body)
    sm.stop_training_job(TrainingJobName="beta-2")


def test_search_filters_on_names_statuses_times_tags_and_hyperparameters(
    sm: Any, source_dir: Path
) -> None:
    made(sm, source_dir)
    every = ["alpha-1", "beta-2", "alpha-3", "gamma-4", "alpha-5"]
    assert search(sm) == every

    def where(name: str, operator: str, value: str | None = None) -> dict[str, Any]:
        return {"Name": name, "Operator": operator, **({"Value": value} if value else {})}

    assert search(sm, where("TrainingJobName", "Equals", "alpha-3")) == ["alpha-3"]
    assert search(sm, {"Name": "TrainingJobName", "Value": "alpha-3"}) == ["alpha-3"]  # Equals
    assert search(sm, where("TrainingJobName", "Contains", "alpha")) == [
        "alpha-1",
        "alpha-3",
        "alpha-5",
    ]
    assert search(sm, where("TrainingJobStatus", "NotEquals", "InProgress")) == ["beta-2"]
    assert search(sm, where("TrainingJobStatus", "Equals", "Stopped")) == ["beta-2"]
    assert search(sm, where("Tags.team", "Equals", "speech")) == ["beta-2", "gamma-4"]
    assert search(sm, where("Tags.team", "In", "nlp, vision")) == ["alpha-1", "alpha-3", "alpha-5"]
    assert search(sm, where("Tags.owner", "NotExists")) == every
    assert search(sm, where("Tags.owner", "Exists")) == []
    # Hyperparameters compare as numbers where the value is one.
    assert search(sm, where("HyperParameters.learning_rate", "GreaterThan", "0.1")) == [
        "alpha-3",
        "alpha-5",
    ]
    assert search(sm, where("HyperParameters.learning_rate", "LessThan", "0.1")) == [
        "beta-2",
        "gamma-4",
    ]
    assert search(sm, where("ResourceConfig.InstanceType", "Equals", "ml.m5.large")) == every

    third = sm.describe_training_job(TrainingJobName="alpha-3")["CreationTime"]
    stamp = third.isoformat()
    assert search(sm, where("CreationTime", "GreaterThan", stamp)) == ["gamma-4", "alpha-5"]
    assert search(sm, where("CreationTime", "LessThan", stamp)) == ["alpha-1", "beta-2"]
    assert search(sm, where("CreationTime", "GreaterThanOrEqualTo", stamp)) == [
        "alpha-3",
        "gamma-4",
        "alpha-5",
    ]
    earlier = (third - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S")  # SageMaker's form
    assert search(sm, where("CreationTime", "GreaterThan", earlier)) == every

    # Several filters: all of them by default, any of them with Or; nested and sub-
    # expressions as SageMaker combines them.
    vision_alpha = [
        where("Tags.team", "Equals", "vision"),
        where("TrainingJobName", "Contains", "3"),
    ]
    assert search(sm, *vision_alpha) == ["alpha-3"]
    either = {"Filters": vision_alpha, "Operator": "Or"}
    assert search(sm, SearchExpression=either) == ["alpha-1", "alpha-3"]
    nested = {
        "NestedFilters": [
            {
                "NestedPropertyName": "Tags",
                "Filters": [
                    where("Tags.Key", "Equals", "team"),
                    where("Tags.Value", "Equals", "nlp"),
                ],
            }
        ]
    }
    assert search(sm, SearchExpression=nested) == ["alpha-5"]
    composed = {
        "SubExpressions": [
            {"Filters": [where("Tags.team", "Equals", "speech")]},
            {"Filters": [where("TrainingJobName", "Equals", "alpha-1")]},
        ],
        "Operator": "Or",
    }
    assert search(sm, SearchExpression=composed) == ["alpha-1", "beta-2", "gamma-4"]


def test_search_sorts_pages_and_answers_records_with_tags(sm: Any, source_dir: Path) -> None:
    made(sm, source_dir)
    by_name = search(sm, SortBy="TrainingJobName", SortOrder="Descending")
    assert by_name == ["gamma-4", "beta-2", "alpha-5", "alpha-3", "alpha-1"]
    # SageMaker's default: the last modified first (beta-2 was stopped last).
    answer = sm.search(Resource="TrainingJob")
    check_answer(sm, "Search", answer)
    assert names(answer)[0] == "beta-2"
    assert answer["TotalHits"] == {"Value": 5, "Relation": "EqualTo"}

    record = answer["Results"][0]["TrainingJob"]
    described = sm.describe_training_job(TrainingJobName="beta-2")
    assert record["TrainingJobArn"] == described["TrainingJobArn"]
    assert record["TrainingJobStatus"] == "Stopped"
    assert record["HyperParameters"] == described["HyperParameters"]
    assert record["Tags"] == [{"Key": "team", "Value": "speech"}]

    pages = list(
        sm.get_paginator("search").paginate(
            Resource="TrainingJob",
            SortBy="CreationTime",
            SortOrder="Ascending",
            PaginationConfig={"PageSize": 2},
        )
    )
    assert [len(page["Results"]) for page in pages] == [2, 2, 1]
    assert [n for page in pages for n in names(page)] == [
        "alpha-1",
        "beta-2",
        "alpha-3",
        "gamma-4",
        "alpha-5",
    ]
    # Tags changed after the job was made are what Search sees.
    sm.add_tags(ResourceArn=described["TrainingJobArn"], Tags=[{"Key": "owner", "Value": "ana"}])
    assert search(sm, {"Name": "Tags.owner", "Operator": "Equals", "Value": "ana"}) == ["beta-2"]


def test_search_sees_only_the_callers_project_and_refuses_bad_expressions(
    sm: Any, api: TestClient, server: str, source_dir: Path
) -> None:
    made(sm, source_dir)
    assert api.post("/v1/projects", json={"name": "vision"}).status_code == 201
    token = api.post("/v1/tokens", json={"name": "v", "project": "vision", "role": "viewer"})
    vision = client("sagemaker", server, credentials(api, token.json()["token"]))
    assert names(vision.search(Resource="TrainingJob")) == []

    def refused(**params: Any) -> tuple[str, str]:
        code, message = error_of(sm.search, **{"Resource": "TrainingJob", **params})
        return code, message.split(":")[0]

    assert refused(Resource="Endpoint") == ("ValidationException", "Resource")
    unknown = {"Filters": [{"Name": "Colour", "Operator": "Equals", "Value": "red"}]}
    assert refused(SearchExpression=unknown) == (
        "ValidationException",
        "SearchExpression.Filters.1.Name",
    )
    text = {"Filters": [{"Name": "TrainingJobName", "Operator": "GreaterThan", "Value": "b"}]}
    assert refused(SearchExpression=text) == (
        "ValidationException",
        "SearchExpression.Filters.1.Value",
    )
    valueless = {"Filters": [{"Name": "TrainingJobName", "Operator": "Equals"}]}
    assert refused(SearchExpression=valueless) == (
        "ValidationException",
        "SearchExpression.Filters.1.Value",
    )
    stray = {
        "NestedFilters": [
            {
                "NestedPropertyName": "Tags",
                "Filters": [{"Name": "TrainingJobName", "Value": "alpha-1"}],
            }
        ]
    }
    assert refused(SearchExpression=stray) == (
        "ValidationException",
        "SearchExpression.NestedFilters.1.Filters.1.Name",
    )
    assert refused(SortBy="Colour") == ("ValidationException", "SortBy")
    assert refused(NextToken="nonsense") == ("ValidationException", "NextToken")
    too_many = {
        "SubExpressions": [{"Filters": [{"Name": "TrainingJobName", "Value": "a"}] * 3}] * 13
    }
    assert refused(SearchExpression=too_many) == ("ValidationException", "SearchExpression")
    # Nested deeper than recursion could walk (botocore could not even send it): refused
    # before it is walked.
    deep: dict[str, Any] = {"Filters": [{"Name": "TrainingJobName", "Value": "a"}]}
    for _ in range(400):
        deep = {"SubExpressions": [deep]}
    body = json.dumps({"Resource": "TrainingJob", "SearchExpression": deep}).encode()
    headers = {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": "SageMaker.Search"}
    signed = AWSRequest(method="POST", url=server + "/", data=body, headers=headers)
    keys = credentials(api)
    SigV4Auth(
        Credentials(keys["access_key_id"], keys["secret_access_key"]), "sagemaker", REGION
    ).add_auth(signed)
    answer = httpx.post(
        server + "/", content=body, headers=dict(signed.headers), timeout=REQUEST_TIMEOUT
    )
    assert answer.status_code == 400, answer.text
    assert "ValidationException" in answer.json()["__type"]
    assert "nested more than" in answer.json()["message"]
