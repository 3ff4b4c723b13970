"""Runyard's stand-in for SageMaker's ``smdistributed`` package.

It exists only inside training-job processes: the launcher puts ``runtime/compat`` on
their PYTHONPATH, so scripts written for SageMaker import it unchanged, and the service's
own environment never sees the name. Everything here re-exports ``runtime.dataparallel``
or ``runtime.modelparallel``.
"""
