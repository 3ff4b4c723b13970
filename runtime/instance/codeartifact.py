"""A job's CodeArtifact repository as its pip index, as SageMaker's training toolkit does it:
``CA_REPOSITORY_ARN`` in the job's environment names the repository; its index URL, with a
fresh authorization token in it, is where the job's requirements come from.

The token is asked for with the job's own AWS credentials and endpoint settings (its
environment's ``AWS_*`` variables, ``AWS_ENDPOINT_URL_CODEARTIFACT`` among them), never the
machine's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from contract import codeartifact

REPOSITORY_ARN = codeartifact.REPOSITORY_ARN


class CodeArtifactError(Exception):
    """The repository's index could not be had; the message says why."""


def index_url(env: Mapping[str, str]) -> str | None:
    """The authenticated index URL of the repository the job names, or None if it names
    none."""
    arn = env.get(REPOSITORY_ARN)
    if not arn:
        return None
    named = codeartifact.parse(arn)
    if named is None:
        raise CodeArtifactError(f"{REPOSITORY_ARN} {arn[:200]!r} is not a repository's ARN")
    from botocore.exceptions import BotoCoreError, ClientError

    client = _client(env, named.region)
    owner, domain, repository = named.owner, named.domain, named.name
    try:
        token = client.get_authorization_token(domain=domain, domainOwner=owner)
        endpoint = client.get_repository_endpoint(
            domain=domain, domainOwner=owner, repository=repository, format="pypi"
        )
    except (BotoCoreError, ClientError) as exc:  # a refusal, or no way to the endpoint
        raise CodeArtifactError(f"CodeArtifact refused {arn}: {exc}") from exc
    url = str(endpoint["repositoryEndpoint"]).rstrip("/")
    url = url if url.endswith("/simple") else f"{url}/simple"
    scheme, rest = f"{url}/".split("://", 1)
    return f"{scheme}://aws:{quote(str(token['authorizationToken']), safe='')}@{rest}"


def _client(env: Mapping[str, str], region: str) -> Any:
    import boto3  # only where a job names a repository

    session = boto3.session.Session(
        aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
        aws_session_token=env.get("AWS_SESSION_TOKEN"),
        region_name=region,
    )
    endpoint = env.get("AWS_ENDPOINT_URL_CODEARTIFACT") or env.get("AWS_ENDPOINT_URL")
    return session.client("codeartifact", endpoint_url=endpoint)
