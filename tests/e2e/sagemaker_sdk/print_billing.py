"""Runs inside a virtual environment with the SageMaker Python SDK v2 (not Runyard's):
prints, for each finished job named, what the SDK prints of it once it has ended (its
"Training seconds", "Billable seconds" and a spot job's "Managed Spot Training savings"),
after a line ``job NAME``.

    python print_billing.py JOB_NAME...
"""

import sys

import sagemaker

session = sagemaker.Session()
for name in sys.argv[1:]:
    print(f"job {name}", flush=True)
    # As fit() ends: the SDK prints the billing only when it waited for the job (here,
    # one poll: the job has ended).
    session.logs_for_job(name, wait=True, poll=1)
    sys.stdout.flush()
