"""The estimator's distribution modes, by dotted name, in one place for the API (which
validates them) and the runtime (which launches them)."""

from __future__ import annotations

DISTRIBUTION_MODES = (
    "torch_distributed",
    "pytorchddp",
    "mpi",
    "parameter_server",
    "multi_worker_mirrored_strategy",
    "smdistributed.dataparallel",
    "smdistributed.modelparallel",
)
