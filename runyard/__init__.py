"""Runyard's SDK and CLI: submit training jobs to a Runyard server and follow them."""

from runyard.client import Client, RunyardError
from runyard.estimator import Estimator, JobFailedError

__all__ = ["Client", "Estimator", "JobFailedError", "RunyardError"]
