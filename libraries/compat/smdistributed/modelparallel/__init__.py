"""``smdistributed.modelparallel``: Runyard model parallel under SageMaker's names."""
