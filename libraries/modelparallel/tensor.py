"""Tensor parallelism (``tensor_parallel_degree`` t > 1) on torch's DTensor.

The transformer blocks the script marked (``smp.tensor_parallelism()`` around the model's
making, ``smp.set_tensor_parallelism(module)``, ``smp.model_creation(tensor_parallelism=
True)``) are split as Megatron-LM splits them, with ``parallelize_module`` (``projections``
gives each layer its style, GPT-2's transposed and fused ``Conv1D`` too): in attention,
the query, key and value projections by output columns (whole heads on each rank) and the
output projection by input rows; in the MLP, the first projections by columns and the last
by rows. A rank so holds 1/t of each block's parameters and computes its heads and its
share of the MLP; an all-reduce after each row-wise projection gives every rank the
block's output. Other modules (embeddings, norms, the output head) stay whole on each rank
of the group, as SageMaker's library keeps the modules it does not distribute.

Each rank of a tensor-parallel group is fed its own samples and computes on them, except
in the split blocks, which compute on the group's samples together (``batches``); the
gradients are then averaged over the ranks that computed them (``batches.average_gradients``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import ParallelStyle, parallelize_module

from libraries.modelparallel import batches, projections


class TensorParallelError(ValueError):
    pass


@dataclass(frozen=True)
class Plan:
    """Which projections of a family's block are split by columns (outputs) and which by
    rows (inputs), as paths inside the block; ``parts``: column-split projections that
    compute several parts side by side, and how many; ``widths``: attributes of the
    block's modules that hold a split width (``module.attribute``), divided by the degree."""

    family: str
    columns: tuple[str, ...]
    rows: tuple[str, ...]
    parts: dict[str, int] = field(default_factory=dict)
    widths: tuple[str, ...] = ()

    def matches(self, block: nn.Module) -> bool:
        return all(
            projections.is_projection(_find(block, path)) for path in (*self.columns, *self.rows)
        ) and all(_has_width(block, path) for path in self.widths)

    def styles(self, block: nn.Module) -> dict[str, ParallelStyle]:
        split = {
            path: projections.columns(block.get_submodule(path), self.parts.get(path, 1))
            for path in self.columns
        }
        return split | {path: projections.rows(block.get_submodule(path)) for path in self.rows}

    def narrow(self, block: nn.Module, degree: int) -> None:
        """The widths the block's own code splits its projections' outputs by, as one
        rank's share (GPT-2's attention cuts ``c_attn``'s output every ``split_size``)."""
        for path in self.widths:
            owner_path, _, attribute = path.rpartition(".")
            owner = block.get_submodule(owner_path)
            setattr(owner, attribute, getattr(owner, attribute) // degree)


PLANS = (
    Plan(
        "Llama, Mistral, Qwen2",
        columns=(
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
        ),
        rows=("self_attn.o_proj", "mlp.down_proj"),
    ),
    Plan(
        "GPT-NeoX",
        columns=("attention.query_key_value", "mlp.dense_h_to_4h"),
        rows=("attention.dense", "mlp.dense_4h_to_h"),
    ),
    Plan(
        "GPT-2",
        columns=("attn.c_attn", "mlp.c_fc"),
        rows=("attn.c_proj", "mlp.c_proj"),
        parts={"attn.c_attn": 3},
        widths=("attn.split_size",),
    ),
    # BART's decoder layer (cross-attention beside self-attention) before the layer of
    # BART's encoder and OPT's decoder, whose projections it has too.
    Plan(
        "BART (decoder)",
        columns=(
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "encoder_attn.q_proj",
            "encoder_attn.k_proj",
            "encoder_attn.v_proj",
            "fc1",
        ),
        rows=("self_attn.out_proj", "encoder_attn.out_proj", "fc2"),
        widths=("self_attn.num_heads", "encoder_attn.num_heads"),
    ),
    Plan(
        "OPT, BART (encoder)",
        columns=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "fc1"),
        rows=("self_attn.out_proj", "fc2"),
        # OPT's attention reshapes its projections by its own count of heads.
        widths=("self_attn.num_heads",),
    ),
    Plan(
        "BERT",
        columns=(
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "intermediate.dense",
        ),
        rows=("attention.output.dense", "output.dense"),
    ),
)
# Attributes that count attention heads, on a module or its ``config``: each must divide.
HEAD_COUNTS = ("num_attention_heads", "num_key_value_heads", "num_heads")


def distribute(
    model: nn.Module, marked: Mapping[int, bool], mesh: DeviceMesh, *, join: bool = True
) -> list[tuple[str, str]]:
    """Splits the marked blocks of ``model`` across ``mesh``; returns each split block's
    name ("" for the model itself) and family. With ``join`` each block computes on the
    rows of every rank's batch (``batches``); without, the ranks are fed one batch. A
    marked module that is a block of no family Runyard knows, and holds no such block, is
    refused by name."""
    blocks = planned(model, marked, mesh.size())
    for _, module, plan in blocks:
        parallelize_module(module, mesh, plan.styles(module))
        plan.narrow(module, mesh.size())
        if join:
            batches.join_batches(module, batches.key_of(mesh.get_group()))
    return [(name, plan.family) for name, _, plan in blocks]


def planned(
    model: nn.Module, marked: Mapping[int, bool], degree: int
) -> list[tuple[str, nn.Module, Plan]]:
    """The blocks ``distribute`` splits, each with its plan; refused (by name) where a
    block's heads or features do not divide by ``degree``, or where modules are marked
    and none of them is, or holds, a block of a family Runyard splits."""
    blocks = list(_marked_blocks(model, marked))
    for name, module, plan in blocks:
        _check_divisible(name, module, plan, degree)
    if not blocks and any(marked.values()):
        families = "; ".join(plan.family for plan in PLANS)
        raise TensorParallelError(
            "tensor_parallel_degree: no module marked for tensor parallelism holds a "
            f"transformer block Runyard splits ({families})"
        )
    return blocks


def _marked_blocks(
    model: nn.Module, marked: Mapping[int, bool]
) -> Iterator[tuple[str, nn.Module, Plan]]:
    """The blocks to split: matching a plan, marked themselves or by their closest marked
    ancestor; a split block's own modules are not looked into again."""
    inside: list[str] = []
    decided: dict[str, bool] = {}
    for name, module in model.named_modules():
        parent = name.rpartition(".")[0] if name else None
        on = marked.get(id(module), decided.get(parent, False) if parent is not None else False)
        decided[name] = on
        if not on or any(name.startswith(f"{done}.") for done in inside):
            continue
        plan = next((plan for plan in PLANS if plan.matches(module)), None)
        if plan is not None:
            inside.append(name)
            yield name, module, plan


def _check_divisible(name: str, block: nn.Module, plan: Plan, degree: int) -> None:
    for path in (*plan.columns, *plan.rows):
        projection = block.get_submodule(path)
        inputs, outputs = projections.features(projection)
        size = outputs // plan.parts.get(path, 1) if path in plan.columns else inputs
        if size % degree:
            raise TensorParallelError(
                f"tensor_parallel_degree {degree} does not divide the {size} features of "
                f"{name}.{path}"
            )
    for module in block.modules():
        for holder in (module, getattr(module, "config", None)):
            for attribute in HEAD_COUNTS:
                count = getattr(holder, attribute, None)
                if isinstance(count, int) and count % degree:
                    raise TensorParallelError(
                        f"tensor_parallel_degree {degree} does not divide the {count} "
                        f"attention heads of {name} ({attribute})"
                    )


def _has_width(block: nn.Module, path: str) -> bool:
    owner_path, _, attribute = path.rpartition(".")
    owner = _find(block, owner_path)
    return isinstance(getattr(owner, attribute, None), int)


def _find(block: nn.Module, path: str) -> nn.Module | None:
    try:
        return block.get_submodule(path)
    except AttributeError:
        return None
