"""The SageMaker SDK's test run's own conftest (copied beside the SDK's ``tests/`` as
``conftest.py``): what pointing the SDK's tests at Runyard and moto takes beyond the
environment, and nothing else.

The SDK asks STS who the caller is (for its default bucket's account, and for the role
where none is named) at AWS's own regional endpoint, built from botocore's endpoint data
with ``https://`` prepended, whatever ``AWS_ENDPOINT_URL_STS`` says. Here it asks the
endpoint that variable names (Runyard, which answers for its own keys), as every other
boto3 client the SDK makes already does.
"""

import os
import sys

import sagemaker.utils
import sagemaker_core.helper.session_helper


def _sts_endpoint(region):
    return os.environ["AWS_ENDPOINT_URL_STS"]


_ORIGINALS = (
    sagemaker.utils.sts_regional_endpoint,
    sagemaker_core.helper.session_helper.sts_regional_endpoint,
)
# Every module that imported the function by name, and (for those imported later) the
# modules that define it.
for _module in list(sys.modules.values()):
    if getattr(_module, "sts_regional_endpoint", None) in _ORIGINALS:
        _module.sts_regional_endpoint = _sts_endpoint
