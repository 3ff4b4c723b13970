"""A small GPT trained with SageMaker's model-parallel API, in the shape of SageMaker's
sharded-data-parallel example (smp.init, DistributedModel, DistributedOptimizer with a
dynamic loss scale, @smp.step train and test steps, model.backward). Its data is made
here: each sequence counts upward from a random token, which the model learns to
continue; nothing is downloaded."""

from __future__ import annotations

import argparse
import math
import os
import time

import smdistributed.modelparallel.torch as smp
import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width)
        self.attention = nn.Linear(width, 3 * width)
        self.projection = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, h: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        batch, length, width = h.shape
        q, k, v = self.attention(self.ln_1(h)).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        causal = torch.ones(length, length, dtype=torch.bool, device=h.device).tril()
        allowed = causal & attention_mask[:, None, None, :].bool()
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        h = h + self.projection(attended.transpose(1, 2).reshape(batch, length, width))
        return h + self.mlp(self.ln_2(h))


class GPT(nn.Module):
    def __init__(self, vocab: int, length: int, width: int, depth: int, heads: int) -> None:
        super().__init__()
        self.token = nn.Embedding(vocab, width)
        self.position = nn.Embedding(length, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        h = self.token(input_ids) + self.position(positions)
        for block in self.blocks:
            h = block(h, attention_mask)
        logits = self.head(self.ln_f(h)).float()
        loss = F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1)
        )
        return {"loss": loss, "logits": logits}


@smp.step
def train_step(model, input_ids, attention_mask):
    loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)["loss"]
    model.backward(loss)
    return loss


@smp.step
def test_step(model, input_ids, attention_mask):
    return model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)["loss"]


def batches(args: argparse.Namespace, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This replica's share of global batch ``step``: the same on every rank that asks."""
    generator = torch.Generator().manual_seed(step)
    starts = torch.randint(0, args.vocab, (args.global_batch, 1), generator=generator)
    ids = (starts + torch.arange(args.seq_length)) % args.vocab
    share = args.global_batch // smp.dp_size()
    mine = ids[smp.dp_rank() * share : (smp.dp_rank() + 1) * share]
    return mine, torch.ones_like(mine)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_steps", type=int, default=30)
    parser.add_argument("--global_batch", type=int, default=16)
    parser.add_argument("--seq_length", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--beta1", type=float, default=0.9)
    parser.add_argument("--beta2", type=float, default=0.95)
    parser.add_argument("--weight_decay", type=float, default=0.01)
    parser.add_argument("--checkpoint-dir", default="/opt/ml/checkpoints")
    parser.add_argument("--checkpoint_every", type=int, default=10)
    parser.add_argument("--step_seconds", type=float, default=0.0)  # to watch it train
    parser.add_argument("--delayed_param", type=int, default=1)
    parser.add_argument("--activation_checkpointing", type=int, default=1)
    parser.add_argument("--mp_parameters", default="")  # sent by the job; smp.init reads it
    args = parser.parse_args()

    smp.init()
    torch.manual_seed(0)
    with smp.delay_param_initialization(enabled=args.delayed_param > 0):
        model = GPT(args.vocab, args.seq_length, args.width, args.depth, args.heads)
    if args.activation_checkpointing:
        for block in model.blocks:
            smp.set_activation_checkpointing(block)
    model = smp.DistributedModel(model, trace_device="cpu")
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=args.lr,
        betas=(args.beta1, args.beta2),
        weight_decay=args.weight_decay,
    )
    optimizer = smp.DistributedOptimizer(
        optimizer,
        static_loss_scale=None,
        dynamic_loss_scale=True,
        dynamic_loss_args={"scale_window": 1000, "min_scale": 1, "delayed_shift": 2},
    )
    first_step = 0
    if os.path.exists(os.path.join(args.checkpoint_dir, "newest")):
        first_step = smp.resume_from_checkpoint(args.checkpoint_dir)["step"] + 1
        if smp.rank() == 0:
            print(f"resumed from step {first_step - 1}", flush=True)

    for step in range(first_step, args.max_steps):
        model.train()
        input_ids, attention_mask = batches(args, step)
        optimizer.zero_grad(set_to_none=True)
        loss = train_step(model, input_ids, attention_mask).reduce_mean()
        optimizer.step()
        if smp.rank() == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
        time.sleep(args.step_seconds)
        if (step + 1) % args.checkpoint_every == 0:
            smp.save_checkpoint(
                args.checkpoint_dir, tag=f"step-{step}", user_content={"step": step}
            )

    model.eval()
    with torch.no_grad():
        input_ids, attention_mask = batches(args, 10_000)
        held_out = test_step(model, input_ids, attention_mask).reduce_mean()
    if smp.rank() == 0:
        print(
            f"test loss {held_out.item():.4f} perplexity {math.exp(held_out.item()):.2f}",
            flush=True,
        )
    state = model.state_dict()
    smp.save(
        state,
        os.path.join(os.environ.get("SM_MODEL_DIR", "/opt/ml/model"), "model.pt"),
        partial=False,
    )


if __name__ == "__main__":
    main()
