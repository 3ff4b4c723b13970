"""The AWS credentials a job's instances are given, the way AWS gives a container its role:
short-lived, and limited to the job's own S3 locations, whatever the service's own
credentials may reach.

They come from STS, asked with the service's own credentials: ``AssumeRole`` of the role
the operator names (``RUNYARD_INSTANCE_ROLE_ARN``; ``{project}`` in it makes one role per
project), else ``GetFederationToken`` (an IAM user's keys only). Either way the request
carries a session policy that allows reading the job's code and channels and writing its
output and checkpoints, and nothing else: AWS grants what both the role (or user) and that
policy allow. A job of a project held to its places (any project but ``default``) that
has no role of its own is allowed its project's grants instead of whatever it names
(read, or read and write, as granted), its output and checkpoints, and what it names in
its project's own area or the uploaded sources; what it names beyond its project's
places (a grant revoked since it was submitted) refuses its credentials.

The runtime on each instance fetches them (``GET .../credentials`` with its instance
token) and serves them to the job's processes as a container credentials endpoint; the
service's keys never leave it, unless its operator says they may
(``RUNYARD_INSTANCE_CREDENTIALS=server``, for an S3-compatible store without STS).

A job's credentials are kept here while more than ``REUSE_MARGIN`` of them remains, so
the instances of one job, and each refresh, cost one STS call between them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field

from contract import codeartifact, storage
from contract.spec import JobSpec
from service.grants.places import ProjectPlaces, covers, keys
from service.jobs.models import TrainingJob
from service.kit.errors import Conflict, RunyardError
from service.settings import SHORTEST_INSTANCE_CREDENTIALS_SECONDS, Settings

# STS refuses a session policy longer than this (as plain text, before it packs it).
MAX_POLICY_CHARACTERS = 2048
# A job's credentials are handed out again while this much of their life remains; the
# runtime asks again once less than its own margin (runtime.instance.credentials_relay,
# 20 minutes) remains, so it is always given fresh ones then.
REUSE_MARGIN = timedelta(minutes=25)
# The shortest credentials asked for: the shortest that outlive the refreshes they set
# off. SDKs (botocore) ask for fresh ones once fewer than 15 minutes remain, the runtime's
# relay once fewer than 20 do, and kept ones are handed out while more than REUSE_MARGIN
# do: credentials of STS's shortest (15 minutes) would be asked for anew by every call a
# script makes.
SHORTEST_SECONDS = SHORTEST_INSTANCE_CREDENTIALS_SECONDS  # 30 minutes


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
    """An S3 location a job uses: an object, or everything below it as a directory; or,
    with ``starting``, every key that starts with ``key`` (a manifest's prefix, which
    SageMaker joins to its keys as strings)."""

    bucket: str
    key: str
    starting: bool = False


def for_job(settings: Settings, job: TrainingJob, places: ProjectPlaces) -> InstanceCredentials:
    """The job's credentials: those handed out before, while enough of them remains. The
    instances of a job ask at once when it starts: one of them asks STS, the others wait
    for its answer. ``places``: what the job's project may use, as granted now."""
    if settings.instance_credentials == "machine":
        raise Conflict("this server leaves AWS credentials to the instances' own machines")
    with _lock:
        asking = _asking.setdefault(job.id, threading.Lock())
    with asking:
        now = datetime.now(UTC)
        with _lock:
            kept = _kept.get(job.id)
        if kept is not None and kept.expiration - now > REUSE_MARGIN:
            return kept
        if settings.instance_credentials == "server":
            fresh = _servers_own(settings)
        else:
            fresh = _from_sts(settings, job, job.record.job_spec(), places)
        with _lock:
            for ended in [key for key, value in _kept.items() if value.expiration <= now]:
                del _kept[ended]
                _asking.pop(ended, None)
            _kept[job.id] = fresh
        return fresh


_lock = threading.Lock()
_kept: dict[str, InstanceCredentials] = {}
_asking: dict[str, threading.Lock] = {}


def duration_seconds(settings: Settings, job: TrainingJob) -> int:
    """How long a job's credentials are asked for, and so how long the last ones stay
    valid once the job has ended (STS cannot take them back): the job's max_run and
    REUSE_MARGIN, so that a job that ends within its max_run never asks again; at least
    SHORTEST_SECONDS; at most what the operator allows (``instance_credentials_seconds``,
    within STS's 12 hours and the role's own maximum). A job that runs longer has fresh
    ones fetched before these end."""
    wanted = job.record.max_run + int(REUSE_MARGIN.total_seconds())
    return max(SHORTEST_SECONDS, min(wanted, settings.instance_credentials_seconds))


def role_for(settings: Settings, project: str) -> str:
    """The role the service assumes for a job of ``project``; "" for none."""
    return settings.instance_role_arn.replace("{project}", project)


def policy_places(settings: Settings, places: ProjectPlaces) -> ProjectPlaces | None:
    """What a job's session policy is held to: its project's places where the project is
    held to them and has no role of its own; None for what the job names (a role per
    project bounds what it names; the default project reaches what the server reaches)."""
    if not places.restricted or "{project}" in settings.instance_role_arn:
        return None
    return places


def locations(spec: JobSpec, job_name: str) -> tuple[list[Location], list[Location]]:
    """What the job reads (its code, its channels) and what it writes (its output below
    ``output_path``, its checkpoints), on S3."""
    read, written = _named(spec, job_name)
    return _s3(read), _s3(written)


def _named(spec: JobSpec, job_name: str) -> tuple[list[str], list[str]]:
    uses = spec.storage_uses(job_name)
    read = [use.used for use in uses if not use.writing]
    return read, [use.used for use in uses if use.writing]


def _granted(
    spec: JobSpec, job_name: str, places: ProjectPlaces, manifest_prefixes: Sequence[str]
) -> tuple[list[Location], list[Location]]:
    """What a job held to its project's places reads and writes on S3: its project's S3
    grants whole, and of what it names, what no grant covers (its own area's, the
    uploaded sources)."""
    read, written = _named(spec, job_name)
    grants = [place for place in places.grants if place.uri.startswith("s3://")]

    def granted(uri: str, *, writing: bool) -> bool:
        return any(
            all(covers(place.keys, key) for key in keys(uri))
            for place in grants
            if place.writable or not writing
        )

    for uri, writing in [*((uri, False) for uri in read), *((uri, True) for uri in written)]:
        if uri.startswith("s3://") and not places.allows(uri, writing=writing):
            raise Conflict(
                f"{uri}: project {places.project!r} may no longer "
                f"{'write' if writing else 'read'} there (its grant was revoked or changed)"
            )
    own_read = [uri for uri in read if not granted(uri, writing=False)]
    own_written = [uri for uri in written if not granted(uri, writing=True)]
    found_read = _s3([*own_read, *(place.uri for place in grants)])
    for prefix in manifest_prefixes:
        if not places.allows(prefix, writing=False):
            raise Conflict(
                f"a manifest names {prefix}, where project {places.project!r} may not read"
            )
        if not granted(prefix, writing=False):
            found_read += [
                Location(location.bucket, location.key, starting=True)
                for location in _s3([prefix], strip=False)
            ]
    writable = [place.uri for place in grants if place.writable]
    return found_read, _s3([*own_written, *writable])


def _s3(uris: list[str], *, strip: bool = True) -> list[Location]:
    found = []
    for uri in uris:
        if uri.startswith("s3://"):
            bucket, _, key = uri.removeprefix("s3://").partition("/")
            found.append(Location(bucket, key.strip("/") if strip else key))
    return found


# How much of a manifest is read for its prefix, its first element: far more than a
# prefix (a URI of at most a few hundred characters) takes.
MANIFEST_HEAD = 64 * 1024


def manifest_prefixes(spec: JobSpec, job_name: str) -> list[str]:
    """The prefix each of the job's ManifestFile channels' manifests names, read with the
    service's own credentials. A manifest the job may write itself is refused: it could
    point the job's next credentials anywhere."""
    _, written = locations(spec, job_name)
    prefixes = []
    for name, channel in sorted(spec.inputs.items()):
        if channel.s3_data_type != "ManifestFile" or not channel.uri.startswith("s3://"):
            continue
        (manifest,) = _s3([channel.uri])
        if any(_within(manifest, place) for place in written):
            raise Conflict(
                f"channel {name!r}: its manifest {channel.uri} lies where the job writes; "
                "a manifest the job could rewrite cannot say what it may read"
            )
        prefixes.append(_prefix_of(name, channel.uri))
    return prefixes


def _within(location: Location, place: Location) -> bool:
    return not place.key or location.key == place.key or location.key.startswith(place.key + "/")


def _prefix_of(channel: str, uri: str) -> str:
    try:
        chunks = storage.read_chunks(uri, MANIFEST_HEAD)
        try:
            head = next(chunks, b"")
        finally:
            chunks.close()  # the rest of a large manifest is never read
        text = head.decode("utf-8", errors="replace").lstrip()
        if not text.startswith("["):
            raise ValueError("not a JSON array")
        first, _ = json.JSONDecoder().raw_decode(text, len(text) - len(text[1:].lstrip()))
        prefix = first.get("prefix") if isinstance(first, dict) else None
        if not isinstance(prefix, str) or not prefix.startswith("s3://"):
            raise ValueError('its first element is not {"prefix": "s3://..."}')
    except (storage.StorageError, ValueError) as exc:
        raise Conflict(f"channel {channel!r}: its manifest {uri} cannot be read: {exc}") from None
    return prefix


def session_policy(
    spec: JobSpec,
    job_name: str,
    partition: str = "aws",
    manifest_prefixes: Sequence[str] = (),
    *,
    places: ProjectPlaces | None = None,
) -> str:
    """The IAM policy (compact JSON) that holds a job's credentials to its locations:
    ``manifest_prefixes`` are the prefixes its ManifestFile channels' manifests name
    (``manifest_prefixes``, the function, reads them). With ``places`` (``policy_places``),
    to its project's places instead of what it names."""
    if places is not None:
        read, written = _granted(spec, job_name, places, manifest_prefixes)
    else:
        read, written = locations(spec, job_name)
        for prefix in _s3(list(manifest_prefixes), strip=False):
            read.append(Location(prefix.bucket, prefix.key, starting=True))
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
    for bucket, patterns in sorted(_by_bucket([*read, *written]).items()):
        statement: dict[str, Any] = {
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": f"arn:{partition}:s3:::{bucket}",
        }
        if "" not in patterns:
            statement["Condition"] = {"StringLike": {"s3:prefix": sorted(patterns)}}
        statements.append(statement)
    repository = codeartifact.parse(spec.environment.get(codeartifact.REPOSITORY_ARN, ""))
    if repository is not None:
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
        if location.starting:
            arns.add(f"arn:{partition}:s3:::{location.bucket}/{_literal(location.key)}*")
        elif not location.key:
            arns.add(f"arn:{partition}:s3:::{location.bucket}/*")
        else:
            key = _literal(location.key)
            arns.add(f"arn:{partition}:s3:::{location.bucket}/{key}")
            arns.add(f"arn:{partition}:s3:::{location.bucket}/{key}/*")
    return sorted(arns)


def _by_bucket(found: list[Location]) -> dict[str, set[str]]:
    """Each bucket's listing prefixes, as ``s3:prefix`` patterns ("" for all of it)."""
    buckets: dict[str, set[str]] = {}
    for location in found:
        key = _literal(location.key)
        if location.starting:
            patterns = {f"{key}*"} if key else {""}
        else:
            patterns = {key, f"{key}/*"} if key else {""}
        buckets.setdefault(location.bucket, set()).update(patterns)
    return buckets


def _literal(key: str) -> str:
    """``key`` as IAM reads a resource or condition: its own ``*``, ``?`` and ``$``
    escaped as IAM's ``${*}``, ``${?}`` and ``${$}``, so that a key that holds them
    allows that key and no other."""
    return "".join({"$": "${$}", "*": "${*}", "?": "${?}"}.get(char, char) for char in key)


def _codeartifact(repository: codeartifact.Repository) -> list[dict[str, Any]]:
    """Reading the job's CodeArtifact repository: a token for its domain, the repository's
    endpoint and packages."""
    return [
        {
            "Effect": "Allow",
            "Action": ["codeartifact:GetAuthorizationToken"],
            "Resource": repository.domain_arn,
        },
        {
            "Effect": "Allow",
            "Action": ["codeartifact:GetRepositoryEndpoint", "codeartifact:ReadFromRepository"],
            "Resource": repository.arn,
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
    expiration = datetime.now(UTC) + timedelta(seconds=settings.instance_credentials_seconds)
    # Temporary ones of the server's own (a role's, SSO's) end when they end: handed out
    # for longer, SDKs would not ask again in time.
    ends: datetime | None = getattr(found, "_expiry_time", None)
    if ends is not None:
        expiration = min(expiration, ends)
    return InstanceCredentials(
        access_key_id=frozen.access_key,
        secret_access_key=frozen.secret_key,
        token=frozen.token or "",
        expiration=expiration,
    )


_NO_CREDENTIALS = (
    "this server has no AWS credentials to give jobs: it needs its own (an IAM user's keys, "
    "or RUNYARD_INSTANCE_ROLE_ARN and credentials that may assume it)"
)


_TRANSIENT = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "ServiceUnavailable",
        "InternalFailure",
        "RequestTimeout",
    }
)


def _from_sts(
    settings: Settings, job: TrainingJob, spec: JobSpec, places: ProjectPlaces
) -> InstanceCredentials:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    session = boto3.session.Session()
    region = session.region_name or "us-east-1"
    role = role_for(settings, job.project)
    # The role's own partition (aws-cn, aws-us-gov) names the job's buckets, else the
    # region's.
    partition = role.split(":")[1] if role else session.get_partition_for_region(region)
    policy = session_policy(
        spec,
        job.name,
        partition,
        manifest_prefixes(spec, job.name),
        places=policy_places(settings, places),
    )
    seconds = duration_seconds(settings, job)
    sts = session.client("sts", region_name=region)
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
        code = str(error.get("Code", ""))
        # Asking again helps only where STS was busy; a refusal stays one.
        refused = Conflict if code not in _TRANSIENT else CredentialsUnavailable
        raise refused(f"STS refused {call}: {code}: {error.get('Message', '')}") from None
    except BotoCoreError as exc:
        raise CredentialsUnavailable(f"STS could not be reached: {exc}") from None
    given = answer["Credentials"]
    return InstanceCredentials(
        access_key_id=given["AccessKeyId"],
        secret_access_key=given["SecretAccessKey"],
        token=given["SessionToken"],
        expiration=given["Expiration"],
    )
