"""``smdistributed.dataparallel``: Runyard data parallel under SageMaker's names."""
