"""STS's GetCallerIdentity for Runyard's own keys, as SageMaker's SDK asks it.

The SDK learns the account from it (its default bucket is ``sagemaker-<region>-<account>``)
and, where no role is given (``get_execution_role``, the ModelTrainer's default), the role
from the caller's assumed-role ARN. A Runyard key answers as the role its jobs show
(``RoleArn`` in DescribeTrainingJob): its project's ``RunyardJob`` role in the project's
account, assumed by a session named after the token.
"""

from __future__ import annotations

from typing import Any

from service.sagemaker import translate
from service.sagemaker.training import Call


def get_caller_identity(call: Call, _params: dict[str, Any]) -> dict[str, Any]:
    principal = call.principal
    account = translate.account_id(principal.project)
    # A session name is at most 64 characters of [\w+=,.@-], as STS's own are.
    session = "".join(c if c.isalnum() or c in "+=,.@-_" else "-" for c in principal.name)[:64]
    return {
        "UserId": f"AROA{account}:{session}",
        "Account": account,
        "Arn": f"arn:aws:sts::{account}:assumed-role/{translate.JOB_ROLE}/{session}",
    }


OPERATIONS = {"GetCallerIdentity": get_caller_identity}
