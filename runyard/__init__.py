"""Runyard's SDK and CLI: submit training jobs to a Runyard server and follow them.

The SDK has the SageMaker Python SDK's shape: ``runyard.Estimator``,
``runyard.pytorch.PyTorch``, ``runyard.tensorflow.TensorFlow``, ``runyard.sklearn.SKLearn``
and ``runyard.inputs.TrainingInput`` take the arguments of their SageMaker namesakes.
"""

from runyard.client import Client, RunyardError
from runyard.estimator import Estimator, JobFailedError
from runyard.inputs import TrainingInput

__all__ = ["Client", "Estimator", "JobFailedError", "RunyardError", "TrainingInput"]
