"""A transformers GPT-2 trained with SageMaker's model-parallel API, as SageMaker's
``train_gpt_simple.py`` trains one: ``AutoModelForCausalLM.from_config``, made inside
``smp.tensor_parallelism()``, wrapped by ``smp.DistributedModel``,
``smp.DistributedOptimizer`` with a dynamic loss scale, ``@smp.step`` train and test steps
that read ``model(...)["loss"]``. Pipeline stages, tensor parallelism and replicas come
from the job's ``mp_parameters``; the script is the same for all of them.

The model is made from a small config and its data here (each sequence counts upward
from a random token), so nothing is downloaded; the job's image must hold transformers.
"""

from __future__ import annotations

import argparse
import math
import os

import smdistributed.modelparallel.torch as smp
import torch
from transformers import AutoModelForCausalLM, GPT2Config


@smp.step
def train_step(model, input_ids, attention_mask):
    loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)["loss"]
    model.backward(loss)
    return loss


@smp.step
def test_step(model, input_ids, attention_mask):
    return model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)["loss"]


def batches(args: argparse.Namespace, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's share of global batch ``step``: the same on every rank that asks."""
    generator = torch.Generator().manual_seed(step)
    starts = torch.randint(0, args.vocab, (args.global_batch, 1), generator=generator)
    ids = (starts + torch.arange(args.seq_length)) % args.vocab
    share = args.global_batch // smp.dp_size()
    mine = ids[smp.dp_rank() * share : (smp.dp_rank() + 1) * share]
    return mine, torch.ones_like(mine)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_steps", type=int, default=20)
    parser.add_argument("--global_batch", type=int, default=16)
    parser.add_argument("--seq_length", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--mp_parameters", default="")  # sent by the job; smp.init reads it
    args = parser.parse_args()

    smp.init()
    torch.manual_seed(0)
    model_config = GPT2Config(
        vocab_size=args.vocab,
        n_positions=args.seq_length,
        n_embd=args.width,
        n_layer=args.depth,
        n_head=args.heads,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    with smp.tensor_parallelism(enabled=smp.tp_size() > 1):
        model = AutoModelForCausalLM.from_config(model_config)
    model = smp.DistributedModel(model, trace_device="gpu")
    optimizer = smp.DistributedOptimizer(
        torch.optim.Adam(model.parameters(), lr=args.lr),
        static_loss_scale=None,
        dynamic_loss_scale=True,
        dynamic_loss_args={"scale_window": 1000, "min_scale": 1, "delayed_shift": 2},
    )
    for step in range(args.max_steps):
        model.train()
        input_ids, attention_mask = batches(args, step)
        optimizer.zero_grad(set_to_none=True)
        loss = train_step(model, input_ids, attention_mask).reduce_mean()
        optimizer.step()
        if smp.rank() == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)

    model.eval()
    with torch.no_grad():
        held_out = test_step(model, *batches(args, 10_000)).reduce_mean()
    if smp.rank() == 0:
        print(f"test loss {held_out.item():.4f} perplexity {math.exp(held_out.item()):.2f}")
    # The whole model, gathered from every stage and tensor-parallel share, in
    # transformers' own names: GPT2LMHeadModel(config).load_state_dict takes it.
    smp.save(
        model.state_dict(),
        os.path.join(os.environ.get("SM_MODEL_DIR", "/opt/ml/model"), "model.pt"),
        partial=False,
    )


if __name__ == "__main__":
    main()
