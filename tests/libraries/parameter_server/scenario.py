"""The worker script of the multi-process tests, and the model and data they share.

Run as a worker (``python scenario.py --output DIR ...``) it trains with the parameter
servers and writes what it saw to ``DIR/worker-<index>.json`` (and its final parameters to
``DIR/worker-<index>.pt``). Imported, it gives the tests the same model and batches to
compute the single-process reference.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

FEATURES = 8
BATCH = 16
TRUE_WEIGHTS = torch.linspace(-1.0, 1.0, FEATURES)


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1))


def batch(worker: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Worker ``worker``'s batch for its step ``step``: the same in every process."""
    generator = torch.Generator().manual_seed(1000 * worker + step)
    inputs = torch.randn(BATCH, FEATURES, generator=generator)
    targets = (0.5 * inputs @ TRUE_WEIGHTS).unsqueeze(1)
    return inputs, targets


def evaluation_loss(model: nn.Module) -> float:
    inputs, targets = batch(worker=999, step=0)
    with torch.no_grad():
        return float(nn.functional.mse_loss(model(inputs), targets))


def sgd(lr: float) -> functools.partial[torch.optim.SGD]:
    return functools.partial(torch.optim.SGD, lr=lr, momentum=0.9)


def _steps_for(worker: int, default: int, overrides: list[str]) -> int:
    # "--steps-for 1=12" gives worker 1 twelve steps
    for override in overrides:
        index, steps = override.split("=")
        if int(index) == worker:
            return int(steps)
    return default


def _wait_until_others_held(ps: Any, me: int) -> None:
    """Stop pushing until another worker is held back by the staleness bound, or has
    finished (which only happens when the bound does not hold it)."""
    while True:
        for stats in ps.server_stats():
            others = set(stats.waiting) | set(stats.finished)
            if others - {me}:
                return
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--mode", default="async")
    parser.add_argument("--max-staleness", type=int, default=None)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--steps-for", action="append", default=[])
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--pause-worker", type=int, default=None)
    parser.add_argument("--pause-after", type=int, default=3)
    parser.add_argument("--crash-worker", type=int, default=None)
    parser.add_argument("--crash-after", type=int, default=3)
    parser.add_argument("--join-timeout", type=float, default=60.0)
    args = parser.parse_args()

    import libraries.parameter_server as ps

    ps.init(join_timeout_s=args.join_timeout)
    me = ps.worker_index()
    # Different seeds on purpose: the Trainer must give every worker worker 0's values.
    model = make_model(seed=me)
    trainer = ps.Trainer(model, sgd(args.lr), mode=args.mode, max_staleness=args.max_staleness)
    record: dict[str, Any] = {
        "worker": me,
        "host": os.environ["RUNYARD_HOST"],
        "initial_loss": evaluation_loss(model),
        "initial": {k: v.tolist() for k, v in model.state_dict().items()},
        "pushes": [],
    }
    steps = _steps_for(me, args.steps, args.steps_for)
    for step in range(steps):
        if me == args.crash_worker and step == args.crash_after:
            os._exit(3)
        if me == args.pause_worker and step == args.pause_after:
            _wait_until_others_held(ps, me)
        inputs, targets = batch(me, step)
        nn.functional.mse_loss(model(inputs), targets).backward()
        sent = time.monotonic()
        trainer.step()
        record["pushes"].append([sent, time.monotonic()])
    torch.save(model.state_dict(), args.output / f"worker-{me}.pt")
    if me == 0:
        trainer.pull()
        torch.save(model.state_dict(), args.output / "pulled.pt")
        record["final_loss"] = evaluation_loss(model)
        record["owners"] = {name: trainer.shard_of(name) for name, _ in model.named_parameters()}
    record["finish_sent"] = time.monotonic()
    record["stats"] = [
        {"names": list(s.parameter_names), "numel": s.numel, "max_lead": s.max_lead}
        for s in ps.server_stats()
    ]
    ps.shutdown()
    (args.output / f"worker-{me}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
