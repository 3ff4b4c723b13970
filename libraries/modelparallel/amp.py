"""``smp.amp.GradScaler``: torch's scaler for sharded gradients, whose overflow check is
agreed across every rank, so all replicas skip the same steps (a replica that stepped
alone would drift apart)."""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler


class GradScaler(ShardedGradScaler):
    def __init__(self, device: str = "cuda", **options: Any) -> None:
        super().__init__(device=device if torch.cuda.is_available() else "cpu", **options)
