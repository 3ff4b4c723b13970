"""The model and data every model-parallel correctness test trains, and the one-process
training on the whole global batch that the library's runs must follow."""

from __future__ import annotations

import torch
from torch import nn

GLOBAL_BATCH = 16
FEATURES = 8
STEPS = 3
LR = 0.01
# The GradScaler runs: the first loss scale, and the step whose batch holds an inf.
SCALE = 2.0**10
POISONED_STEP = 1


class Block(nn.Module):
    """A residual block that counts how often it runs (recomputation included)."""

    runs = 0

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        Block.runs += 1
        return h + torch.tanh(self.linear(h))


class Stack(nn.Module):
    """A small stack of blocks (a ModuleList, as transformers have) with a head."""

    def __init__(self, width: int = 16, depth: int = 3) -> None:
        super().__init__()
        self.embed = nn.Linear(FEATURES, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def model() -> Stack:
    torch.manual_seed(0)
    return Stack()


def sequential() -> nn.Sequential:
    """The same model, made the same way, as one nn.Sequential: the embedding, each block
    and the head its items (torchvision's way of stacking a model)."""
    made = model()
    return nn.Sequential(made.embed, *made.blocks, made.head)


def sequential_key(key: str) -> str:
    """A key of ``sequential()``'s state_dict as ``model()``'s names it ("2.linear.weight"
    is "blocks.1.linear.weight")."""
    index, _, rest = key.partition(".")
    position = int(index)
    last = len(model().blocks) + 1
    where = "embed" if position == 0 else "head" if position == last else f"blocks.{position - 1}"
    return f"{where}.{rest}"


class Nested(nn.Module):
    """The same model as a tree of other containers, laid out as a ResNet is: its head in
    an nn.ModuleDict made first, the embedding a plain attribute, the blocks in nested
    nn.Sequentials of two and one."""

    def __init__(self) -> None:
        super().__init__()
        made = model()
        self.heads = nn.ModuleDict({"out": made.head})
        self.stem = made.embed
        first, second, third = made.blocks
        self.layers = nn.Sequential(nn.Sequential(first, second), nn.Sequential(third))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.heads["out"](self.layers(self.stem(x)))


# ``Nested``'s modules by ``model()``'s names.
NESTED_NAMES = {
    "heads.out": "head",
    "stem": "embed",
    "layers.0.0": "blocks.0",
    "layers.0.1": "blocks.1",
    "layers.1.0": "blocks.2",
}


def nested_key(key: str) -> str:
    """A key of ``Nested()``'s state_dict as ``model()``'s names it."""
    owner, _, rest = key.rpartition(".")
    for nested, name in NESTED_NAMES.items():
        if owner.startswith(nested):
            return name + owner[len(nested) :] + "." + rest
    raise KeyError(key)


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(100 + step)
    x = torch.randn(GLOBAL_BATCH, FEATURES, generator=generator)
    y = torch.randn(GLOBAL_BATCH, 1, generator=generator)
    return x, y


def loss_of(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((output.float() - target) ** 2).mean()


def single_process_reference(steps: int = STEPS) -> dict[str, torch.Tensor]:
    reference = model()
    optimizer = torch.optim.Adam(reference.parameters(), lr=LR)
    for step in range(steps):
        x, y = batch(step)
        optimizer.zero_grad()
        loss_of(reference(x), y).backward()
        optimizer.step()
    return {key: value.detach().clone() for key, value in reference.state_dict().items()}


def poisoned(x: torch.Tensor) -> torch.Tensor:
    """The batch with an inf in the last row: the last replica's share (and microbatch)."""
    x = x.clone()
    x[-1, 0] = float("inf")
    return x


def scaled_reference() -> tuple[dict[str, torch.Tensor], list[float]]:
    """One process on the global batch with torch's own GradScaler and fp16 autocast:
    the parameters, and the loss scale after each step."""
    reference = model()
    optimizer = torch.optim.Adam(reference.parameters(), lr=LR)
    scaler = torch.amp.GradScaler("cpu", init_scale=SCALE, growth_interval=1000)
    scales = []
    for step in range(STEPS):
        x, y = batch(step)
        if step == POISONED_STEP:
            x = poisoned(x)
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = loss_of(reference(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        scales.append(scaler.get_scale())
    state = {key: value.detach().clone() for key, value in reference.state_dict().items()}
    return state, scales
