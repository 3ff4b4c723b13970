"""boto3's CloudWatch Logs client reads a job's lines as the SageMaker SDK does: one
stream per host in /aws/sagemaker/TrainingJobs, read forward from a time with its skip,
token by token, and filtered."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from fastapi.testclient import TestClient

from service.logs.pages import PAGE_BYTES
from service.settings import Settings
from tests.conftest import InstanceHeaders, log_line, submit_for_instances
from tests.service.logs.test_log_pages_bounded import (
    LINES,
    PER_PAGE,
    long_line,
    page_bytes,
    ship_long_lines,
)
from tests.service.sagemaker.conftest import credentials
from tests.service.sagemaker.live import check_answer, client

GROUP = "/aws/sagemaker/TrainingJobs"


@pytest.fixture
def logs(api: TestClient, server: str) -> Any:
    return client("logs", server, credentials(api))


@pytest.fixture
def shipped(api: TestClient, settings: Settings, source_dir: Path) -> InstanceHeaders:
    """Job ``job-1`` on two hosts; algo-1 printed five lines, algo-2 two."""
    headers = submit_for_instances(api, settings, source_dir, instance_count=2)
    url = "/v1/training-jobs/job-1/instances/{}/logs"
    lines = [log_line(seq, seq // 2, f"one {seq}") for seq in range(1, 6)]
    assert api.post(url.format("algo-1"), json={"lines": lines}, headers=headers).status_code == 200
    two = [log_line(1, 0, "two 1"), log_line(2, 3, "two 2 loss=0.5")]
    response = api.post(url.format("algo-2"), json={"lines": two}, headers=headers.of("algo-2"))
    assert response.status_code == 200
    return headers


def stream_names(answer: dict[str, Any]) -> list[str]:
    return [stream["logStreamName"] for stream in answer["logStreams"]]


def test_each_host_is_a_stream_named_as_sagemaker_names_it(logs: Any, shipped: Any) -> None:
    answer = logs.describe_log_streams(
        logGroupName=GROUP, logStreamNamePrefix="job-1/", orderBy="LogStreamName", limit=2
    )
    check_answer(logs, "DescribeLogStreams", answer)
    names = stream_names(answer)
    assert [name.rsplit("-", 1)[0] for name in names] == ["job-1/algo-1", "job-1/algo-2"]
    assert len({name.rsplit("-", 1)[1] for name in names}) == 1  # the job's creation second
    # Everything fit: no token, or the SDK's loop (which never passes one back) would spin.
    assert "nextToken" not in answer

    first = logs.describe_log_streams(logGroupName=GROUP, logStreamNamePrefix="job-1/", limit=1)
    assert "nextToken" in first
    rest = logs.describe_log_streams(
        logGroupName=GROUP, logStreamNamePrefix="job-1/", limit=1, nextToken=first["nextToken"]
    )
    assert stream_names(first) + stream_names(rest) == names
    assert "nextToken" not in rest
    assert stream_names(logs.describe_log_streams(logGroupName=GROUP)) == names
    assert (
        logs.describe_log_streams(logGroupName=GROUP, logStreamNamePrefix="other")["logStreams"]
        == []
    )


def test_events_read_forward_from_a_time_token_by_token(logs: Any, shipped: Any) -> None:
    name = stream_names(logs.describe_log_streams(logGroupName=GROUP))[0]
    answer = logs.get_log_events(logGroupName=GROUP, logStreamName=name, startFromHead=True)
    check_answer(logs, "GetLogEvents", answer)
    assert [e["message"] for e in answer["events"]] == [f"one {seq}" for seq in range(1, 6)]
    # Nothing new: the forward token stays where it is (the SDK stops on an empty page).
    again = logs.get_log_events(
        logGroupName=GROUP,
        logStreamName=name,
        startFromHead=True,
        nextToken=answer["nextForwardToken"],
    )
    assert again["events"] == []
    assert again["nextForwardToken"] == answer["nextForwardToken"]

    paged = logs.get_log_events(logGroupName=GROUP, logStreamName=name, startFromHead=True, limit=2)
    more = logs.get_log_events(
        logGroupName=GROUP, logStreamName=name, startFromHead=True, limit=2,
        nextToken=paged["nextForwardToken"],
    )  # fmt: skip
    assert [e["message"] for e in paged["events"] + more["events"]] == [
        "one 1", "one 2", "one 3", "one 4",
    ]  # fmt: skip

    # The SDK resumes from the last timestamp it printed (and skips what it saw there).
    stamp = answer["events"][2]["timestamp"]
    resumed = logs.get_log_events(
        logGroupName=GROUP, logStreamName=name, startTime=stamp, startFromHead=True
    )
    assert [e["message"] for e in resumed["events"]] == ["one 2", "one 3", "one 4", "one 5"]
    assert all(e["timestamp"] >= stamp for e in resumed["events"])

    latest = logs.get_log_events(logGroupName=GROUP, logStreamName=name, limit=2)
    assert [e["message"] for e in latest["events"]] == ["one 4", "one 5"]
    older = logs.get_log_events(
        logGroupName=GROUP, logStreamName=name, limit=2, nextToken=latest["nextBackwardToken"]
    )
    assert [e["message"] for e in older["events"]] == ["one 2", "one 3"]


def test_filter_finds_lines_across_streams(logs: Any, shipped: Any) -> None:
    answer = logs.filter_log_events(
        logGroupName=GROUP, logStreamNamePrefix="job-1/", filterPattern='"loss="'
    )
    check_answer(logs, "FilterLogEvents", answer)
    assert [e["message"] for e in answer["events"]] == ["two 2 loss=0.5"]
    assert answer["events"][0]["logStreamName"].startswith("job-1/algo-2-")
    every = logs.filter_log_events(logGroupName=GROUP, logStreamNamePrefix="job-1/")
    assert len(every["events"]) == 7


def test_filtered_events_page_in_time_order_with_tokens(logs: Any, shipped: Any) -> None:
    every = logs.filter_log_events(logGroupName=GROUP, logStreamNamePrefix="job-1/")["events"]
    paged, token, pages = [], None, 0
    while True:
        more = {"nextToken": token} if token else {}
        answer = logs.filter_log_events(
            logGroupName=GROUP, logStreamNamePrefix="job-1/", limit=2, **more
        )
        paged += answer["events"]
        pages += 1
        token = answer.get("nextToken")
        if token is None:
            break
    assert pages == 4
    assert [e["eventId"] for e in paged] == [e["eventId"] for e in every]
    assert [e["timestamp"] for e in paged] == sorted(e["timestamp"] for e in paged)
    # Terms narrow in the database and match exactly, case included.
    upper = logs.filter_log_events(logGroupName=GROUP, filterPattern="LOSS=")
    assert upper["events"] == []
    with pytest.raises(ClientError) as caught:
        logs.filter_log_events(logGroupName=GROUP, nextToken="bm90IGEgdG9rZW4=")
    assert caught.value.response["Error"]["Code"] == "InvalidParameterException"


def test_unknown_groups_and_streams_are_resource_not_found(logs: Any, shipped: Any) -> None:
    for call, params in (
        (logs.describe_log_streams, {"logGroupName": "/aws/lambda/x"}),
        (logs.get_log_events, {"logGroupName": GROUP, "logStreamName": "job-1/algo-9-1"}),
        (logs.get_log_events, {"logGroupName": GROUP, "logStreamName": "nope/algo-1-1"}),
    ):
        with pytest.raises(ClientError) as caught:
            call(**params)
        assert caught.value.response["Error"]["Code"] == "ResourceNotFoundException", params
    with pytest.raises(ClientError) as caught:
        logs.describe_log_streams(
            logGroupName=GROUP, logStreamNamePrefix="job-1/", orderBy="LastEventTime"
        )
    assert caught.value.response["Error"]["Code"] == "InvalidParameterException"


def test_another_projects_streams_are_not_seen(api: TestClient, server: str, shipped: Any) -> None:
    assert api.post("/v1/projects", json={"name": "vision"}).status_code == 201
    body = {"name": "outsider", "project": "vision", "role": "admin"}
    token = api.post("/v1/tokens", json=body).json()["token"]
    outsider = client("logs", server, credentials(api, token))
    assert outsider.describe_log_streams(logGroupName=GROUP)["logStreams"] == []
    assert json.dumps(outsider.filter_log_events(logGroupName=GROUP)["events"]) == "[]"


def test_pages_of_long_lines_stop_at_a_megabyte_and_tokens_resume_exactly(
    logs: Any, api: TestClient, settings: Settings, source_dir: Path
) -> None:
    ship_long_lines(api, settings, source_dir)
    name = stream_names(logs.describe_log_streams(logGroupName=GROUP))[0]
    every = [long_line(seq) for seq in range(1, LINES + 1)]

    def within_a_megabyte(answer: dict[str, Any]) -> list[str]:
        messages = [e["message"] for e in answer["events"]]
        assert page_bytes(messages) <= PAGE_BYTES
        return messages

    forward: list[str] = []
    more: dict[str, str] = {}
    while True:
        answer = logs.get_log_events(
            logGroupName=GROUP, logStreamName=name, startFromHead=True, **more
        )
        check_answer(logs, "GetLogEvents", answer)
        messages = within_a_megabyte(answer)
        if not messages:  # the SDK's loop ends on an empty page too
            break
        assert len(messages) in (PER_PAGE, LINES % PER_PAGE)
        forward += messages
        more = {"nextToken": answer["nextForwardToken"]}
    assert forward == every

    # Without startFromHead: the latest lines that fit, and back from there.
    backward: list[str] = []
    more = {}
    while True:
        answer = logs.get_log_events(logGroupName=GROUP, logStreamName=name, **more)
        messages = within_a_megabyte(answer)
        if not messages:
            break
        backward = messages + backward
        more = {"nextToken": answer["nextBackwardToken"]}
    assert backward == every

    filtered: list[str] = []
    more = {}
    while True:
        answer = logs.filter_log_events(logGroupName=GROUP, filterPattern="xxx", **more)
        check_answer(logs, "FilterLogEvents", answer)
        messages = within_a_megabyte(answer)
        assert len(messages) in (PER_PAGE, LINES % PER_PAGE)
        filtered += messages
        if "nextToken" not in answer:
            break
        more = {"nextToken": answer["nextToken"]}
    assert filtered == every
