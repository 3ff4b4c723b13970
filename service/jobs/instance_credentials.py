"""The AWS credentials a job's instances are given, the way AWS gives a container its role:
short-lived, and limited to the job's own S3 locations, whatever the service's own
credentials may reach.

They come from STS, asked with the service's own credentials: ``AssumeRole`` of the role
the operator names (``RUNYARD_INSTANCE_ROLE_ARN``; ``{project}`` in it makes one role per
project), else ``GetFederationToken`` (an IAM user's keys only). Either way the request
carries a session policy that allows reading the job's code and channels and writing its
output and checkpoints, and nothing else: AWS grants what both the role (or user) and that
policy allow. The runtime on each instance fetches them (``GET .../credentials`` with its
instance token) and serves them to the job's processes as a container credentials
endpoint; the service's keys never leave it, unless its operator says they may
(``RUNYARD_INSTANCE_CREDENTIALS=server``, for an S3-compatible store without STS).

A job's credentials are kept here while more than ``REUSE_MARGIN`` of them remains, so
the instances of one job, and each refresh, cost one STS call between them.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field

from contract import storage
from contract.spec import JobSpec
from service.jobs.models import TrainingJob
from service.jobs.schemas import JobCreate
from service.kit.errors import Conflict, RunyardError
from service.settings import Settings

# STS refuses a session policy longer than this (as plain text, before it packs it).
MAX_POLICY_CHARACTERS = 2048
# A job's credentials are handed out again while this much of their life remains; the
# runtime asks again once less than its own margin (runtime.instance.credentials_relay,
# 20 minutes) remains, so it is always given fresh ones then.
REUSE_MARGIN = timedelta(minutes=25)
# The repository a job's requirements come from (as SageMaker's toolkit reads it).
CODEARTIFACT_REPOSITORY = "CA_REPOSITORY_ARN"


class CredentialsUnavailable(RunyardError):
    """STS could not be reached or refused; the instance asks again."""

    status_code = 503


class InstanceCredentials(BaseModel):
    """A container credentials endpoint's answer, as botocore (and every AWS SDK) reads it."""

    access_key_id: str = Field(serialization_alias="AccessKeyId")
    secret_access_key: str = Field(serialization_alias="SecretAccessKey")
    token: str = Field(serialization_alias="Token")
    expiration: datetime = Field(serialization_alias="Expiration")


@dataclass(frozen=True)
class Location:
    """An S3 location a job uses: an object, or everything below it as a directory."""

    bucket: str
    key: str


def for_job(settings: Settings, job: TrainingJob) -> InstanceCredentials:
    """The job's credentials: those handed out before, while enough of them remains."""
    if settings.instance_credentials == "machine":
        raise Conflict("this server leaves AWS credentials to the instances' own machines")
    now = datetime.now(UTC)
    with _lock:
        kept = _kept.get(job.id)
        if kept is not None and kept.expiration - now > REUSE_MARGIN:
            return kept
    if settings.instance_credentials == "server":
        fresh = _servers_own(settings)
    else:
        fresh = _from_sts(settings, job, JobCreate.model_validate(job.spec).job_spec())
    with _lock:
        for ended in [key for key, value in _kept.items() if value.expiration <= now]:
            del _kept[ended]
        _kept[job.id] = fresh
    return fresh


_lock = threading.Lock()
_kept: dict[str, InstanceCredentials] = {}


def role_for(settings: Settings, project: str) -> str:
    """The role the service assumes for a job of ``project``; "" for none."""
    return settings.instance_role_arn.replace("{project}", project)


def locations(spec: JobSpec, job_name: str) -> tuple[list[Location], list[Location]]:
    """What the job reads (its code, its channels) and what it writes (its output below
    ``output_path``, its checkpoints), on S3."""
    read = [spec.source_uri, *(channel.uri for channel in spec.inputs.values())]
    written = [storage.join(spec.output_path, job_name)]
    if spec.checkpoint_s3_uri:
        written.append(spec.checkpoint_s3_uri)
    return _s3(read), _s3(written)


def _s3(uris: list[str]) -> list[Location]:
    found = []
    for uri in uris:
        if uri.startswith("s3://"):
            bucket, _, key = uri.removeprefix("s3://").partition("/")
            found.append(Location(bucket, key.strip("/")))
    return found


def session_policy(spec: JobSpec, job_name: str, partition: str = "aws") -> str:
    """The IAM policy (compact JSON) that holds a job's credentials to its locations.

    A ManifestFile channel names objects anywhere its manifest says; the manifest is not
    read here, so the whole bucket it lies in is readable to the job.
    """
    read, written = locations(spec, job_name)
    manifests = [c.uri for c in spec.inputs.values() if c.s3_data_type == "ManifestFile"]
    read += [Location(location.bucket, "") for location in _s3(manifests)]
    statements: list[dict[str, Any]] = []
    if read or written:
        statements.append(
            {
                "Effect": "Allow",
                "Action": ["s3:GetObject"],
                "Resource": _object_arns(partition, [*read, *written]),
            }
        )
    if written:
        statements.append(
            {
                "Effect": "Allow",
                "Action": ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
                "Resource": _object_arns(partition, written),
            }
        )
    for bucket, keys in sorted(_by_bucket([*read, *written]).items()):
        statement: dict[str, Any] = {
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": f"arn:{partition}:s3:::{bucket}",
        }
        if "" not in keys:
            patterns = sorted({pattern for key in keys for pattern in (key, f"{key}/*")})
            statement["Condition"] = {"StringLike": {"s3:prefix": patterns}}
        statements.append(statement)
    repository = spec.environment.get(CODEARTIFACT_REPOSITORY, "")
    if repository:
        statements += _codeartifact(repository)
    if not statements:
        # Nothing on S3: credentials that allow nothing (a policy needs one statement).
        statements.append({"Effect": "Deny", "Action": ["s3:*"], "Resource": "*"})
    policy = json.dumps({"Version": "2012-10-17", "Statement": statements}, separators=(",", ":"))
    if len(policy) > MAX_POLICY_CHARACTERS:
        raise Conflict(
            f"training job {job_name!r} names more S3 locations than one STS session policy "
            f"can hold ({len(policy)} characters, at most {MAX_POLICY_CHARACTERS}): fewer "
            "channels, or channels under one prefix"
        )
    return policy


def _object_arns(partition: str, found: list[Location]) -> list[str]:
    arns = set()
    for location in found:
        if not location.key:
            arns.add(f"arn:{partition}:s3:::{location.bucket}/*")
        else:
            key = _literal(location.key)
            arns.add(f"arn:{partition}:s3:::{location.bucket}/{key}")
            arns.add(f"arn:{partition}:s3:::{location.bucket}/{key}/*")
    return sorted(arns)


def _by_bucket(found: list[Location]) -> dict[str, set[str]]:
    buckets: dict[str, set[str]] = {}
    for location in found:
        buckets.setdefault(location.bucket, set()).add(_literal(location.key))
    return buckets


def _literal(key: str) -> str:
    """``key`` as IAM reads a resource or condition: its own ``*``, ``?`` and ``$``
    escaped as IAM's ``${*}``, ``${?}`` and ``${$}``, so that a key that holds them
    allows that key and no other."""
    return "".join({"$": "${$}", "*": "${*}", "?": "${?}"}.get(char, char) for char in key)


def _codeartifact(repository: str) -> list[dict[str, Any]]:
    """Reading the job's CodeArtifact repository: a token for its domain, the repository's
    endpoint and packages (the ARN is checked by the runtime before it is used)."""
    domain = repository.replace(":repository/", ":domain/", 1).rsplit("/", 1)[0]
    return [
        {
            "Effect": "Allow",
            "Action": ["codeartifact:GetAuthorizationToken"],
            "Resource": domain,
        },
        {
            "Effect": "Allow",
            "Action": ["codeartifact:GetRepositoryEndpoint", "codeartifact:ReadFromRepository"],
            "Resource": repository,
        },
        {
            "Effect": "Allow",
            "Action": ["sts:GetServiceBearerToken"],
            "Resource": "*",
            "Condition": {"StringEquals": {"sts:AWSServiceName": "codeartifact.amazonaws.com"}},
        },
    ]


def _servers_own(settings: Settings) -> InstanceCredentials:
    """The server's own credentials, as boto3 finds them (RUNYARD_INSTANCE_CREDENTIALS=server)."""
    import boto3

    found = boto3.session.Session().get_credentials()
    if found is None:
        raise Conflict(_NO_CREDENTIALS)
    frozen = found.get_frozen_credentials()
    lasting = timedelta(seconds=settings.instance_credentials_seconds)
    return InstanceCredentials(
        access_key_id=frozen.access_key,
        secret_access_key=frozen.secret_key,
        token=frozen.token or "",
        expiration=datetime.now(UTC) + lasting,
    )


_NO_CREDENTIALS = (
    "this server has no AWS credentials to give jobs: it needs its own (an IAM user's keys, "
    "or RUNYARD_INSTANCE_ROLE_ARN and credentials that may assume it)"
)


def _from_sts(settings: Settings, job: TrainingJob, spec: JobSpec) -> InstanceCredentials:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    session = boto3.session.Session()
    region = session.region_name or "us-east-1"
    partition = session.get_partition_for_region(region)
    policy = session_policy(spec, job.name, partition)
    seconds = settings.instance_credentials_seconds
    sts = session.client("sts", region_name=region)
    role = role_for(settings, job.project)
    try:
        if role:
            answer = sts.assume_role(
                RoleArn=role,
                RoleSessionName=f"runyard-{job.name}"[:64],
                Policy=policy,
                DurationSeconds=seconds,
            )
        else:
            answer = sts.get_federation_token(
                Name=f"runyard-{job.id}"[:32], Policy=policy, DurationSeconds=seconds
            )
    except NoCredentialsError:
        raise Conflict(_NO_CREDENTIALS) from None
    except ClientError as exc:
        error = exc.response.get("Error", {})
        call = "AssumeRole of " + role if role else "GetFederationToken"
        raise CredentialsUnavailable(
            f"STS refused {call}: {error.get('Code', '')}: {error.get('Message', '')}"
        ) from None
    except BotoCoreError as exc:
        raise CredentialsUnavailable(f"STS could not be reached: {exc}") from None
    given = answer["Credentials"]
    return InstanceCredentials(
        access_key_id=given["AccessKeyId"],
        secret_access_key=given["SecretAccessKey"],
        token=given["SessionToken"],
        expiration=given["Expiration"],
    )
