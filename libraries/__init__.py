"""The distributed-training libraries that users' training scripts import.

``dataparallel``, ``modelparallel``, ``horovod`` and ``parameter_server``; SageMaker's and
Horovod's import names (``smdistributed``, ``horovod``) come from the compatibility
directories (``compat/``, ``horovod/compat/``) the launcher puts on a job's PYTHONPATH.
They ship in the training image beside the instance agent (``runtime/``), import only the
shared contract (and torch), and run only inside a job's processes.
"""
