"""Ranks that end their script at different moments without calling ``hvd.shutdown()``,
as Horovod's examples do. Rank 0 ends last. Each rank reports, from an exit handler that
runs after Horovod's own, when its interpreter ended and whether its group was still up.
"""

from __future__ import annotations

import atexit
import json
import time

import torch
import torch.distributed as dist

from libraries import horovod as hvd

# How much later than the others rank 0 ends its script.
LATE_S = 1.5


def _report(rank: list[int]) -> None:
    end = {"rank": rank[0], "at": time.time(), "group_up": dist.is_initialized()}
    print("END " + json.dumps(end), flush=True)


def main() -> None:
    rank: list[int] = []
    # Exit handlers run last-registered first: this one runs after the one hvd.init() adds.
    atexit.register(_report, rank)
    hvd.init()
    rank.append(hvd.rank())
    hvd.allreduce(torch.ones(1000), name="last")
    if hvd.rank() == 0:
        time.sleep(LATE_S)
        print("DONE " + json.dumps(time.time()), flush=True)


if __name__ == "__main__":
    main()
