"""A job's AWS credentials, end to end against moto's server with IAM enforced: the server
holds an IAM user's keys and assumes one role per project; a job reads its channel,
writes its model, reads its own prefix from its script with an unchanged boto3 call, and
is denied another project's prefix. The server's keys reach no instance.

The instances share the machine's network here: with namespaces a job's network reaches
its own instances and nothing else (as under SageMaker's network isolation), so only the
runtime, not the script, could reach S3. The relay's side in an instance's own network is
tested in ``tests/runtime/instance/test_credentials_relay.py``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from runyard.client import Client
from tests import aws
from tests.aws import MotoServer
from tests.e2e.conftest import Stack, log_lines

BUCKET = "shared"
ACCOUNT = "123456789012"  # moto's
PROBE = """\
import json, os
import boto3
from botocore.exceptions import ClientError

s3 = boto3.client("s3")
found = {"variables": sorted(name for name in os.environ if name.startswith("AWS_"))}
body = s3.get_object(Bucket="shared", Key="team-a/data/train.txt")["Body"]
found["own"] = body.read().decode()
try:
    s3.get_object(Bucket="shared", Key="team-b/secret.txt")
    found["other"] = "read"
except ClientError as error:
    found["other"] = error.response["Error"]["Code"]
with open(os.path.join(os.environ["SM_CHANNEL_TRAIN"], "train.txt")) as channel:
    found["channel"] = channel.read()
with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.txt"), "w") as model:
    model.write("weights")
print("PROBE " + json.dumps(found))
"""


def _project_role(iam: Any, project: str) -> None:
    """A role the server's user may assume, whose own policy reaches ``project``'s prefix
    of the shared bucket only."""
    iam.create_role(
        RoleName=f"runyard-{project}",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:user/runyard-server"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
    )
    iam.put_role_policy(
        RoleName=f"runyard-{project}",
        PolicyName="own-prefix",
        PolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                        "Resource": f"arn:aws:s3:::{BUCKET}/{project}/*",
                    },
                    {
                        "Effect": "Allow",
                        "Action": "s3:ListBucket",
                        "Resource": f"arn:aws:s3:::{BUCKET}",
                    },
                ],
            }
        ),
    )


@pytest.fixture(scope="module")
def enforcing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MotoServer, Any]]:
    """A moto server of this module's own, that checks every call against IAM once set up;
    with the server's (an IAM user's) S3 client."""
    with aws.moto_server(tmp_path_factory.mktemp("moto-iam")) as moto:
        everything = [{"Effect": "Allow", "Action": "*", "Resource": "*"}]
        key = aws.iam_user(moto, "runyard-server", everything)
        for project in ("team-a", "team-b"):
            _project_role(moto.client("iam"), project)
        s3 = moto.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        s3.put_object(Bucket=BUCKET, Key="team-a/data/train.txt", Body=b"team a's data")
        s3.put_object(Bucket=BUCKET, Key="team-b/secret.txt", Body=b"team b's secret")
        aws.enforce_iam(moto)
        server = boto3.session.Session(**key, region_name=aws.REGION).client(
            "s3", endpoint_url=moto.url
        )
        with pytest.raises(Exception, match=r"InvalidAccessKeyId|InvalidClientTokenId|403"):
            moto.client("s3").list_objects_v2(Bucket=BUCKET)  # unknown keys are refused now
        yield moto, (key, server)


@pytest.fixture(scope="module")
def iam_stack(
    tmp_path_factory: pytest.TempPathFactory, enforcing: tuple[MotoServer, Any]
) -> Iterator[Stack]:
    moto, (key, _) = enforcing
    home = tmp_path_factory.mktemp("runyard-iam")
    stack = Stack(home, f"sqlite:///{home / 'runyard.db'}", f"sqla+sqlite:///{home / 'broker.db'}")
    stack.env = {k: v for k, v in stack.env.items() if not k.startswith("AWS_")}
    stack.env.update(
        {
            "AWS_ENDPOINT_URL": moto.url,
            "AWS_ACCESS_KEY_ID": key["aws_access_key_id"],
            "AWS_SECRET_ACCESS_KEY": key["aws_secret_access_key"],
            "AWS_DEFAULT_REGION": aws.REGION,
            "RUNYARD_INSTANCE_ROLE_ARN": f"arn:aws:iam::{ACCOUNT}:role/runyard-{{project}}",
            "RUNYARD_LOCAL_ISOLATION": "shared",
            "RUNYARD_LOCAL_SHARED_PROJECTS": "many",
        }
    )
    stack.up()
    yield stack
    assert stack.down() == [], "processes of finished jobs were left running"


def _run_in_project(
    stack: Stack, source: Path, project: str, name: str, script: str, channel: str
) -> tuple[dict[str, Any], list[str]]:
    """Run ``script`` as a job of ``project`` (made now, and granted its prefix of the
    bucket to write and ``channel`` to read) with ``channel`` as its train channel and
    its output below the project's prefix; its end and what it printed."""
    source.mkdir()
    (source / "train.py").write_text(script)
    with stack.client() as admin:
        admin.create_project(project)
        admin.grant(project, f"s3://{BUCKET}/{project}", access="read-write")
        if not channel.startswith(f"s3://{BUCKET}/{project}/"):
            admin.grant(project, channel.rstrip("/"))
        token = admin.token
    with Client(stack.url, token, project=project) as client:
        job = stack.submit(
            client,
            source,
            name=name,
            entry_point="train.py",
            inputs={"train": channel},
            output_path=f"s3://{BUCKET}/{project}/output",
        )
        ended = stack.wait_until_ended(client, job["name"], timeout=180)
        return ended, log_lines(client, job["name"])


def test_a_job_reaches_its_own_prefix_and_is_denied_another_projects(
    iam_stack: Stack, enforcing: tuple[MotoServer, Any], tmp_path: Path
) -> None:
    _, (key, server_s3) = enforcing
    channel = f"s3://{BUCKET}/team-a/data/"
    ended, lines = _run_in_project(iam_stack, tmp_path / "src", "team-a", "probe", PROBE, channel)
    assert ended["status"] == "Completed", iam_stack.explain(ended)
    probe = json.loads(next(line for line in lines if line.startswith("PROBE "))[6:])
    assert probe["own"] == "team a's data"
    assert probe["channel"] == "team a's data"
    assert probe["other"] == "AccessDenied"
    # The relay, and none of the server's keys, in the script's environment.
    assert "AWS_CONTAINER_CREDENTIALS_FULL_URI" in probe["variables"]
    assert "AWS_CONTAINER_AUTHORIZATION_TOKEN" in probe["variables"]
    assert "AWS_ACCESS_KEY_ID" not in probe["variables"]
    assert "AWS_SECRET_ACCESS_KEY" not in probe["variables"]
    assert not any(key["aws_secret_access_key"] in line for line in lines)
    model = "team-a/output/probe/output/model.tar.gz"
    assert server_s3.head_object(Bucket=BUCKET, Key=model)["ContentLength"] > 0


def test_a_channel_of_another_projects_prefix_is_refused_to_the_job(
    iam_stack: Stack, tmp_path: Path
) -> None:
    """Granted to read team a's data by Runyard, team b's job is still held by its own
    role: with a role per project, the role bounds what the job names."""
    channel = f"s3://{BUCKET}/team-a/data/"
    script = "print('never runs')\n"
    ended, _ = _run_in_project(iam_stack, tmp_path / "src", "team-b", "across", script, channel)
    assert ended["status"] == "Failed", iam_stack.explain(ended)
    assert "access denied" in ended["failure_reason"]
    assert channel in ended["failure_reason"]
