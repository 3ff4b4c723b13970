"""The AWS credentials the service gives a job's instances: from STS (moto's server), with
a session policy that holds them to the job's own S3 locations."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from contract.spec import Channel, JobSpec
from service.app import create_app
from service.grants.places import Place, ProjectPlaces, places_of
from service.kit.errors import Conflict
from service.settings import Settings
from service.training import instance_credentials
from service.training.instance_credentials import MAX_POLICY_CHARACTERS, session_policy
from tests import aws
from tests.conftest import instance_headers, job_spec, make_settings

URL = "/v1/training-jobs/job-1/instances/algo-1/credentials"


def _spec(**fields: Any) -> JobSpec:
    values: dict[str, Any] = {
        "entry_point": "train.py",
        "source_uri": "s3://code/team-a/src.tar.gz",
        "instance_type": "local",
        "output_path": "s3://out/team-a",
    }
    values.update(fields)
    return JobSpec(**values)


def _statements(policy: str) -> list[dict[str, Any]]:
    parsed = json.loads(policy)
    assert parsed["Version"] == "2012-10-17"
    return list(parsed["Statement"])


def _actions(policy: str) -> dict[str, Any]:
    """Each allowed action's resources (and, for listing, its condition by bucket)."""
    found: dict[str, Any] = {}
    for statement in _statements(policy):
        assert statement["Effect"] == "Allow"
        for action in statement["Action"]:
            if action == "s3:ListBucket":
                condition = statement.get("Condition", {}).get("StringLike", {}).get("s3:prefix")
                found.setdefault(action, {})[statement["Resource"]] = condition
            else:
                found[action] = statement["Resource"]
    return found


def test_the_policy_reads_code_and_channels_and_writes_only_the_jobs_output() -> None:
    spec = _spec(
        inputs={"train": Channel("s3://data/team-a/train/"), "local": Channel("file:///d")},
        checkpoint_s3_uri="s3://out/team-a/checkpoints/job-1",
        tensorboard_s3_output_path="s3://out/team-a/tensorboard",
    )
    actions = _actions(session_policy(spec, "job-1"))
    written = [
        "arn:aws:s3:::out/team-a/checkpoints/job-1",
        "arn:aws:s3:::out/team-a/checkpoints/job-1/*",
        "arn:aws:s3:::out/team-a/job-1",
        "arn:aws:s3:::out/team-a/job-1/*",
        # Only the job's own folder below the TensorBoard URI, as below its output path.
        "arn:aws:s3:::out/team-a/tensorboard/job-1/tensorboard-output",
        "arn:aws:s3:::out/team-a/tensorboard/job-1/tensorboard-output/*",
    ]
    assert actions["s3:PutObject"] == written
    assert actions["s3:DeleteObject"] == written
    assert actions["s3:GetObject"] == sorted(
        [
            *written,
            "arn:aws:s3:::code/team-a/src.tar.gz",
            "arn:aws:s3:::code/team-a/src.tar.gz/*",
            "arn:aws:s3:::data/team-a/train",
            "arn:aws:s3:::data/team-a/train/*",
        ]
    )
    # Listing: only below the job's own prefixes, bucket by bucket.
    assert actions["s3:ListBucket"] == {
        "arn:aws:s3:::code": ["team-a/src.tar.gz", "team-a/src.tar.gz/*"],
        "arn:aws:s3:::data": ["team-a/train", "team-a/train/*"],
        "arn:aws:s3:::out": [
            "team-a/checkpoints/job-1",
            "team-a/checkpoints/job-1/*",
            "team-a/job-1",
            "team-a/job-1/*",
            "team-a/tensorboard/job-1/tensorboard-output",
            "team-a/tensorboard/job-1/tensorboard-output/*",
        ],
    }


def test_wildcards_in_a_key_allow_that_key_only() -> None:
    actions = _actions(session_policy(_spec(output_path="s3://out/a*b?$"), "job-1"))
    assert "arn:aws:s3:::out/a${*}b${?}${$}/job-1/*" in actions["s3:PutObject"]
    assert not any("a*" in arn for arn in actions["s3:PutObject"])


def test_a_whole_bucket_is_listed_without_a_condition() -> None:
    actions = _actions(session_policy(_spec(source_uri="s3://code"), "job-1"))
    assert "arn:aws:s3:::code/*" in actions["s3:GetObject"]
    assert actions["s3:ListBucket"]["arn:aws:s3:::code"] is None


MANIFEST = Channel("s3://lists/team-a/train.manifest", s3_data_type="ManifestFile")


def test_a_manifests_prefix_is_read_as_a_string_prefix() -> None:
    """SageMaker joins a manifest's prefix and its keys as strings: ``part-`` and
    ``0001``. The manifest itself is read too."""
    spec = _spec(inputs={"train": MANIFEST})
    policy = session_policy(spec, "job-1", manifest_prefixes=["s3://data/team-a/part-"])
    assert _permitted(policy, "s3:GetObject", "arn:aws:s3:::data/team-a/part-0001")
    assert _permitted(policy, "s3:GetObject", "arn:aws:s3:::lists/team-a/train.manifest")
    assert not _permitted(policy, "s3:GetObject", "arn:aws:s3:::data/team-a/other")
    assert not _permitted(policy, "s3:GetObject", "arn:aws:s3:::lists/team-b/x")
    assert _actions(policy)["s3:ListBucket"]["arn:aws:s3:::data"] == ["team-a/part-*"]


def test_the_service_reads_a_manifests_prefix_from_its_head(s3_client: Any) -> None:
    s3_client.create_bucket(Bucket="lists")
    entries = ["x" * 100 for _ in range(10_000)]  # a megabyte of keys after the prefix
    body = json.dumps([{"prefix": "s3://data/team-a/part-"}, *entries])
    s3_client.put_object(Bucket="lists", Key="team-a/train.manifest", Body=body.encode())
    spec = _spec(inputs={"train": MANIFEST})
    assert instance_credentials.manifest_prefixes(spec, "job-1") == ["s3://data/team-a/part-"]


def test_a_manifest_that_cannot_say_its_prefix_is_refused_naming_the_channel(
    s3_client: Any,
) -> None:
    s3_client.create_bucket(Bucket="lists")
    s3_client.put_object(Bucket="lists", Key="team-a/train.manifest", Body=b'{"no": "array"}')
    with pytest.raises(Conflict, match=r"channel 'train': its manifest .* cannot be read"):
        instance_credentials.manifest_prefixes(_spec(inputs={"train": MANIFEST}), "job-1")


def test_a_manifest_the_job_may_rewrite_is_refused() -> None:
    mine = Channel("s3://out/team-a/job-1/lists/train.manifest", s3_data_type="ManifestFile")
    with pytest.raises(Conflict, match="lies where the job writes"):
        instance_credentials.manifest_prefixes(_spec(inputs={"train": mine}), "job-1")


def test_a_job_on_files_only_gets_credentials_that_allow_nothing() -> None:
    spec = _spec(source_uri="file:///src", output_path="file:///out")
    assert _statements(session_policy(spec, "job-1")) == [
        {"Effect": "Deny", "Action": ["s3:*"], "Resource": "*"}
    ]


def test_a_codeartifact_repository_is_readable_through_its_domain() -> None:
    arn = "arn:aws:codeartifact:us-east-1:111122223333:repository/tools/pypi-store"
    statements = _statements(session_policy(_spec(environment={"CA_REPOSITORY_ARN": arn}), "job-1"))
    by_action = {action: s for s in statements for action in s["Action"]}
    assert by_action["codeartifact:GetAuthorizationToken"]["Resource"] == (
        "arn:aws:codeartifact:us-east-1:111122223333:domain/tools"
    )
    assert by_action["codeartifact:ReadFromRepository"]["Resource"] == arn


def test_a_job_naming_too_many_locations_is_refused_when_it_is_submitted(
    api: TestClient, source_dir: Path
) -> None:
    inputs = {f"c{n}": f"s3://data/some/long/prefix/number/{n}/" for n in range(20)}
    refused = api.post("/v1/training-jobs", json=job_spec(source_dir, inputs=inputs))
    assert refused.status_code == 422, refused.text
    detail = refused.json()["detail"][0]
    assert detail["loc"] == ["body", "inputs"]
    assert "one STS session policy" in detail["msg"]


@pytest.mark.parametrize(
    "arn", ["*", "arn:aws:codeartifact:*:*:repository/*/*", "arn:aws:s3:::bucket"]
)
def test_a_codeartifact_repository_must_be_named_by_its_arn(
    api: TestClient, source_dir: Path, arn: str
) -> None:
    spec = job_spec(source_dir, environment={"CA_REPOSITORY_ARN": arn})
    refused = api.post("/v1/training-jobs", json=spec)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["loc"] == ["body", "environment", "CA_REPOSITORY_ARN"]


def test_a_policy_over_stss_limit_is_refused_naming_the_job() -> None:
    inputs = {f"c{n}": Channel(f"s3://data/some/long/prefix/number/{n}/") for n in range(40)}
    with pytest.raises(Conflict, match=rf"'job-1'.*at most {MAX_POLICY_CHARACTERS}"):
        session_policy(_spec(inputs=inputs), "job-1")


def test_the_project_names_its_role() -> None:
    settings = make_settings(
        Path("/nonexistent"),
        "sqlite://",
        instance_role_arn="arn:aws:iam::123456789012:role/ry-{project}",
    )
    assert instance_credentials.role_for(settings, "team-a") == (
        "arn:aws:iam::123456789012:role/ry-team-a"
    )


@pytest.mark.parametrize("arn", ["role/x", "arn:aws:iam::12:role/x", "arn:aws:s3:::bucket"])
def test_a_role_that_is_not_an_iam_roles_arn_is_refused(arn: str) -> None:
    with pytest.raises(ValueError, match="instance_role_arn"):
        make_settings(Path("/nonexistent"), "sqlite://", instance_role_arn=arn)


@contextlib.contextmanager
def _api(settings: Settings, admin_token: str) -> Iterator[TestClient]:
    """The API of a server with ``settings`` (changed from the fixture's)."""
    with TestClient(create_app(settings)) as api:
        api.headers["Authorization"] = f"Bearer {admin_token}"
        yield api


@pytest.fixture(autouse=True)
def _forget_kept() -> None:
    instance_credentials._kept.clear()


def test_an_instance_is_given_federated_credentials_limited_to_its_job(
    api: TestClient, settings: Settings, source_dir: Path, s3_client: Any
) -> None:
    created = api.post("/v1/training-jobs", json=job_spec(source_dir)).json()
    answer = api.get(URL, headers=instance_headers(settings, created["id"]))
    assert answer.status_code == 200, answer.text
    given = answer.json()
    assert sorted(given) == ["AccessKeyId", "Expiration", "SecretAccessKey", "Token"]
    # Not the service's own keys (the dummy "testing" ones this process has).
    assert given["AccessKeyId"] != "testing"
    expires = datetime.fromisoformat(given["Expiration"])
    assert timedelta(minutes=55) < expires - datetime.now(UTC) <= timedelta(hours=1)
    assert answer.headers["cache-control"] == "no-store"
    # The same while plenty of them remains: one STS call for all of a job's instances.
    again = api.get(URL, headers=instance_headers(settings, created["id"])).json()
    assert again == given


def test_an_assumed_roles_credentials_are_given_when_the_operator_names_one(
    settings: Settings, admin_token: str, source_dir: Path, s3_client: Any
) -> None:
    role = "arn:aws:iam::123456789012:role/runyard-{project}"
    settings = settings.model_copy(update={"instance_role_arn": role})
    with _api(settings, admin_token) as api:
        created = api.post("/v1/training-jobs", json=job_spec(source_dir)).json()
        given = api.get(URL, headers=instance_headers(settings, created["id"])).json()
    # moto's assumed-role keys start as AWS's do (ASIA: temporary); a federation token's
    # are the fixed example keys.
    assert given["AccessKeyId"].startswith("ASIA"), given


@pytest.mark.parametrize(
    ("max_run", "longest", "lasts"),
    [
        (300, 3600, timedelta(minutes=30)),  # never shorter: SDKs would refresh at every call
        (1800, 3600, timedelta(minutes=55)),  # its max_run and the 25 minutes before a refresh
        (24 * 3600, 3600, timedelta(hours=1)),  # the operator's longest, refreshed as it runs
        (20 * 3600, 43200, timedelta(hours=12)),  # STS's longest, where the operator allows it
    ],
    ids=["short", "between", "long", "long-allowed"],
)
@pytest.mark.parametrize(
    "role", ["", "arn:aws:iam::123456789012:role/runyard"], ids=["user", "role"]
)
def test_credentials_last_the_jobs_max_run_within_stss_bounds(
    settings: Settings,
    admin_token: str,
    source_dir: Path,
    s3_client: Any,
    max_run: int,
    longest: int,
    lasts: timedelta,
    role: str,
) -> None:
    """STS (moto's) sets the expiration from the duration asked for."""
    update = {"instance_credentials_seconds": longest, "instance_role_arn": role}
    settings = settings.model_copy(update=update)
    with _api(settings, admin_token) as api:
        created = api.post("/v1/training-jobs", json=job_spec(source_dir, max_run=max_run))
        assert created.status_code == 201, created.text
        asked = datetime.now(UTC)
        answer = api.get(URL, headers=instance_headers(settings, created.json()["id"]))
        answered = datetime.now(UTC)
    assert answer.status_code == 200, answer.text
    expires = datetime.fromisoformat(answer.json()["Expiration"])
    # STS was asked at some time between the two (seconds apart on a loaded machine).
    second = timedelta(seconds=1)
    assert asked + lasts - second <= expires <= answered + lasts + second


def test_only_the_jobs_own_live_instances_get_credentials(
    api: TestClient, settings: Settings, source_dir: Path, s3_client: Any
) -> None:
    created = api.post("/v1/training-jobs", json=job_spec(source_dir)).json()
    # A user token (the admin's, here) is not an instance's.
    assert api.get(URL).status_code == 403
    other = instance_headers(settings, created["id"], "algo-2")
    assert api.get(URL, headers=other).status_code == 403
    api.post("/v1/training-jobs/job-1/stop")
    ended = api.get(URL, headers=instance_headers(settings, created["id"]))
    assert ended.status_code == 409, ended.text


def test_a_server_that_leaves_credentials_to_machines_gives_none(
    settings: Settings, admin_token: str, source_dir: Path
) -> None:
    settings = settings.model_copy(update={"instance_credentials": "machine"})
    with _api(settings, admin_token) as api:
        created = api.post("/v1/training-jobs", json=job_spec(source_dir)).json()
        refused = api.get(URL, headers=instance_headers(settings, created["id"]))
    assert refused.status_code == 409
    assert "machines" in refused.json()["detail"]


def test_an_operator_may_relay_the_servers_own_keys_to_a_store_without_sts(
    settings: Settings, admin_token: str, source_dir: Path, s3_client: Any
) -> None:
    settings = settings.model_copy(update={"instance_credentials": "server"})
    with _api(settings, admin_token) as api:
        created = api.post("/v1/training-jobs", json=job_spec(source_dir)).json()
        given = api.get(URL, headers=instance_headers(settings, created["id"])).json()
    # The dummy keys this process (the server, here) holds, through the relay still.
    assert (given["AccessKeyId"], given["SecretAccessKey"]) == ("testing", "testing")


def _permitted(policy: str, action: str, resource: str) -> bool:
    """Whether ``policy`` allows ``action`` on ``resource``, by moto's IAM evaluator (the
    one its server enforces role and user policies with; it is given the session policy
    here, which its STS does not enforce)."""
    from moto.iam.access_control import IAMPolicy, PermissionResult

    return IAMPolicy(policy).is_action_permitted(action, resource) == PermissionResult.PERMITTED


def test_the_policy_allows_the_jobs_own_objects_and_no_neighbours() -> None:
    spec = _spec(
        inputs={"train": Channel("s3://data/team-a/train/")},
        checkpoint_s3_uri="s3://out/team-a/checkpoints/job-1",
    )
    policy = session_policy(spec, "job-1")
    allowed = [
        ("s3:GetObject", "arn:aws:s3:::data/team-a/train/part-0"),
        ("s3:GetObject", "arn:aws:s3:::code/team-a/src.tar.gz"),
        ("s3:PutObject", "arn:aws:s3:::out/team-a/job-1/output/model.tar.gz"),
        ("s3:PutObject", "arn:aws:s3:::out/team-a/checkpoints/job-1/step-10.pt"),
        ("s3:DeleteObject", "arn:aws:s3:::out/team-a/checkpoints/job-1/step-0.pt"),
    ]
    denied = [
        ("s3:GetObject", "arn:aws:s3:::data/team-a/train-old/part-0"),  # a sibling prefix
        ("s3:GetObject", "arn:aws:s3:::data/team-b/train/part-0"),
        ("s3:GetObject", "arn:aws:s3:::out/team-a/job-10/output/model.tar.gz"),
        ("s3:PutObject", "arn:aws:s3:::data/team-a/train/part-0"),  # channels are read
        ("s3:PutObject", "arn:aws:s3:::code/team-a/src.tar.gz"),
        ("s3:PutObject", "arn:aws:s3:::out/team-a/other-job/model.tar.gz"),
        ("s3:DeleteObject", "arn:aws:s3:::out/team-a/job-1-old/x"),
        ("s3:GetObject", "arn:aws:s3:::elsewhere/anything"),
        ("s3:DeleteBucket", "arn:aws:s3:::out"),
        ("iam:CreateUser", "*"),
    ]
    assert [case for case in allowed if not _permitted(policy, *case)] == []
    assert [case for case in denied if _permitted(policy, *case)] == []


def test_a_refusal_by_sts_is_not_asked_again_as_if_sts_were_busy(
    settings: Settings,
    admin_token: str,
    source_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server's keys may not assume the role: a refusal (409), not "busy" (503)."""
    role = "arn:aws:iam::123456789012:role/runyard"
    settings = settings.model_copy(update={"instance_role_arn": role})
    with aws.moto_server(tmp_path_factory.mktemp("moto-iam")) as server:
        s3_only = [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]
        keys = aws.iam_user(server, "runyard-server", s3_only)
        aws.enforce_iam(server)
        aws.as_user(monkeypatch, server, keys)
        with _api(settings, admin_token) as api:
            created = api.post("/v1/training-jobs", json=job_spec(source_dir)).json()
            refused = api.get(URL, headers=instance_headers(settings, created["id"]))
    assert refused.status_code == 409, refused.text
    assert f"STS refused AssumeRole of {role}: AccessDenied" in refused.text


# -- A project held to its places --------------------------------------------------------


def _beta_places() -> ProjectPlaces:
    """Project beta, with an S3 artifact root: it writes s3://shared-ml/beta and reads
    s3://shared-ml/alpha/public, and nothing else of the bucket."""
    return places_of(
        "s3://artifacts",
        "beta",
        [
            Place("s3://shared-ml/beta", "read-write"),
            Place("s3://shared-ml/alpha/public", "read-only"),
        ],
    )


def test_a_projects_policy_allows_its_grants_and_its_output_not_what_it_names() -> None:
    spec = _spec(
        source_uri="s3://artifacts/_sources/abc.tar.gz",
        inputs={"train": Channel("s3://shared-ml/beta/data/")},
        output_path="s3://artifacts/projects/beta",
    )
    policy = session_policy(spec, "job-1", places=_beta_places())
    allowed = [
        ("s3:GetObject", "arn:aws:s3:::shared-ml/beta/data/part-0"),
        ("s3:GetObject", "arn:aws:s3:::shared-ml/alpha/public/part-0"),
        ("s3:PutObject", "arn:aws:s3:::shared-ml/beta/anything"),  # its read-write grant
        ("s3:GetObject", "arn:aws:s3:::artifacts/_sources/abc.tar.gz"),
        ("s3:PutObject", "arn:aws:s3:::artifacts/projects/beta/job-1/output/model.tar.gz"),
    ]
    denied = [
        ("s3:GetObject", "arn:aws:s3:::shared-ml/alpha/data/part-0"),
        ("s3:PutObject", "arn:aws:s3:::shared-ml/alpha/models/job-1/output/model.tar.gz"),
        ("s3:PutObject", "arn:aws:s3:::shared-ml/alpha/public/part-0"),  # read-only
        ("s3:DeleteObject", "arn:aws:s3:::shared-ml/alpha/public/part-0"),
        ("s3:GetObject", "arn:aws:s3:::shared-ml/beta-old/x"),
        ("s3:GetObject", "arn:aws:s3:::artifacts/_sources/other.tar.gz"),
        ("s3:GetObject", "arn:aws:s3:::artifacts/projects/alpha/job-1/output/model.tar.gz"),
        ("s3:PutObject", "arn:aws:s3:::artifacts/projects/beta/job-2/output/model.tar.gz"),
    ]
    assert [case for case in allowed if not _permitted(policy, *case)] == []
    assert [case for case in denied if _permitted(policy, *case)] == []


def test_a_place_no_longer_granted_refuses_the_jobs_credentials() -> None:
    """What a job names is checked again when its credentials are asked: a grant
    revoked since it was submitted is not reached through its policy."""
    spec = _spec(
        source_uri="s3://artifacts/_sources/abc.tar.gz",
        inputs={"train": Channel("s3://shared-ml/alpha/data/")},
        output_path="s3://shared-ml/alpha/models",
    )
    with pytest.raises(Conflict, match="project 'beta' may no longer read"):
        session_policy(spec, "job-1", places=_beta_places())
    manifest = _spec(
        source_uri="s3://artifacts/_sources/abc.tar.gz",
        inputs={
            "train": Channel("s3://shared-ml/beta/train.manifest", s3_data_type="ManifestFile")
        },
        output_path="s3://shared-ml/beta/models",
    )
    with pytest.raises(Conflict, match="may not read"):
        session_policy(
            manifest, "job-1", manifest_prefixes=["s3://shared-ml/alpha/"], places=_beta_places()
        )


def test_a_role_per_project_or_the_default_project_keeps_the_named_locations(
    settings: Settings,
) -> None:
    beta = _beta_places()
    assert instance_credentials.policy_places(settings, beta) is beta
    per_project = settings.model_copy(
        update={"instance_role_arn": "arn:aws:iam::123456789012:role/runyard-{project}"}
    )
    assert instance_credentials.policy_places(per_project, beta) is None
    shared_role = settings.model_copy(
        update={"instance_role_arn": "arn:aws:iam::123456789012:role/runyard"}
    )
    assert instance_credentials.policy_places(shared_role, beta) is beta
    default = places_of("s3://artifacts", "default", [])
    assert instance_credentials.policy_places(settings, default) is None
