"""SageMaker's own wire protocol, beside Runyard's REST API: boto3's ``sagemaker``,
``logs`` and ``cloudwatch`` clients and the SageMaker Python SDK talk to Runyard as they
talk to AWS.

``POST /`` with ``X-Amz-Target: SageMaker.<Operation>`` (or ``Logs_20140328.<Operation>``,
AWS JSON 1.1; or ``GraniteServiceVersion20100801.<Operation>``, CloudWatch's AWS JSON 1.0;
or, without the header, CloudWatch's AWS Query form), signed with SigV4 by the
credentials of a Runyard token (``runyard token --aws``). Requests are checked against
botocore's own service models (``shapes``), translated into Runyard's job spec
(``translate``), and answered in the shapes botocore parses. The jobs are Runyard's jobs:
the REST API, the CLI and the console see them too.
"""
