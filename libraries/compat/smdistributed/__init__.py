"""Runyard's stand-in for SageMaker's ``smdistributed`` package.

It exists only inside training-job processes: the launcher puts ``libraries/compat`` on
their PYTHONPATH, so scripts written for SageMaker import it unchanged, and the service's
own environment never sees the name. Everything here re-exports ``libraries.dataparallel``
or ``libraries.modelparallel``.
"""
