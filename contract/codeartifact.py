"""A job's CodeArtifact repository, named as SageMaker's training toolkit reads it: the
``CA_REPOSITORY_ARN`` variable of the job's environment. The service checks it when the
job is submitted and lets the job's credentials read that repository alone; the runtime
installs the job's requirements from it."""

from __future__ import annotations

import re
from dataclasses import dataclass

REPOSITORY_ARN = "CA_REPOSITORY_ARN"
# arn:<partition>:codeartifact:<region>:<owner account>:repository/<domain>/<repository>,
# each part a name (no wildcard: the ARN becomes an IAM policy's resource).
_ARN = re.compile(
    r"arn:(?P<partition>aws[a-z-]*):codeartifact:(?P<region>[a-z0-9-]+):(?P<owner>[0-9]{12}):"
    r"repository/(?P<domain>[a-z0-9][a-z0-9-]{1,49})/(?P<repository>[A-Za-z0-9][A-Za-z0-9._-]{1,99})"
)


@dataclass(frozen=True)
class Repository:
    arn: str
    partition: str
    region: str
    owner: str
    domain: str
    name: str

    @property
    def domain_arn(self) -> str:
        return f"arn:{self.partition}:codeartifact:{self.region}:{self.owner}:domain/{self.domain}"


def parse(arn: str) -> Repository | None:
    """The repository ``arn`` names, or None if it is not a repository's ARN."""
    match = _ARN.fullmatch(arn)
    if match is None:
        return None
    return Repository(
        arn,
        match["partition"],
        match["region"],
        match["owner"],
        match["domain"],
        match["repository"],
    )
