"""A script that sets up torch.distributed itself (env://) before ``hvd.init()``: Horovod
adopts the group and still learns which processes share an instance."""

from __future__ import annotations

import json

import torch
import torch.distributed as dist

from libraries import horovod as hvd


def main() -> None:
    dist.init_process_group("gloo")
    hvd.init()
    place = [hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank()]
    total = hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum).item()
    print("PLACE " + json.dumps([*place, hvd.cross_size(), total]), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
