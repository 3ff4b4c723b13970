"""Saving and resuming: ``smp.save``/``smp.load`` (one file per part, or one whole file),
and ``smp.save_checkpoint``/``smp.resume_from_checkpoint``, whose checkpoints are
torch.distributed.checkpoint's: every rank writes its own shards in parallel, and any
layout of ranks can load them. Under a job with ``checkpoint_s3_uri``, a checkpoint
written below ``/opt/ml/checkpoints`` is uploaded by the runtime's checkpoint sync and
is there again after an automatic restart. ``full_state_dict`` rebuilds the whole
model's state_dict from a checkpoint, with no process group, for use outside the job.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.tensor import DTensor

from libraries.modelparallel import state as smp_state
from libraries.modelparallel.model import distributed_model
from libraries.modelparallel.optimizer import distributed_optimizer

# The file in a checkpoint folder that names its newest tag, as SageMaker's library has.
NEWEST = "newest"
USER_CONTENT = "user_content.pt"
# Beside a full checkpoint (``partial=False``), the user content's file: this and its tag.
FULL_USER_CONTENT = "user_content_"


def _partial_name(path: str | Path, state: smp_state.State) -> str:
    # One file per part of the model, named as SageMaker's library names them: its stage
    # and tensor-parallel rank, and its shard where the states are sharded.
    suffix = f"_{state.pp_rank}_{state.tp_rank}"
    if state.mesh is not None:
        suffix += f"_{state.mesh.get_local_rank('shard')}"
    return f"{path}{suffix}"


def _writes(state: smp_state.State, partial: bool) -> bool:
    if not partial:
        return state.rank == 0
    # Every part is written by one rank: the first replica (or shard group) holding it.
    if state.mesh is not None:
        return state.mesh.get_local_rank("replicate") == 0
    return state.rdp_rank == 0


def save(obj: Any, f: str | Path, partial: bool = True, **torch_save_options: Any) -> None:
    """``partial``: each part of the model to a file of its own (``f`` with its stage's
    suffix); else ``f`` whole, written by the first rank."""
    state = smp_state.current()
    if _writes(state, partial):
        target = _partial_name(f, state) if partial else str(f)
        torch.save(obj, target, **torch_save_options)
    dist.barrier()


def load(f: str | Path, partial: bool = True, **torch_load_options: Any) -> Any:
    state = smp_state.current()
    source = _partial_name(f, state) if partial else str(f)
    torch_load_options.setdefault("weights_only", False)
    return torch.load(source, **torch_load_options)


def save_checkpoint(
    path: str | Path,
    tag: str,
    partial: bool = True,
    model: Any = None,
    optimizer: Any = None,
    user_content: Any = None,
    num_kept_partial_checkpoints: int | None = None,
    **_sagemaker_options: Any,
) -> None:
    """The model's and optimizer's states (the script's wrapped ones by default) under
    ``path/tag``, each rank its own shards; ``user_content`` beside them.

    ``partial=False``: the whole model's state_dict alone (no optimizer), as one file
    ``path/tag`` that ``torch.load`` and the model's own class read, and
    ``user_content`` in ``path/user_content_<tag>``, as SageMaker's library lays a full
    checkpoint out."""
    state = smp_state.current()
    model = model or state.model
    optimizer = optimizer or state.optimizer
    if model is None:
        raise RuntimeError("smp.save_checkpoint: no smp.DistributedModel to save")
    if not partial:
        _save_full(Path(path), tag, model, user_content, state)
        return
    folder = Path(path) / tag
    states = _states(model, optimizer)
    dcp_save(states, checkpoint_id=str(folder))
    if state.rank == 0:
        torch.save(user_content, folder / USER_CONTENT)
        _write_newest(Path(path), tag)
        if num_kept_partial_checkpoints:
            _prune(Path(path), keep=num_kept_partial_checkpoints)
    dist.barrier()


def resume_from_checkpoint(
    path: str | Path,
    tag: str | None = None,
    partial: bool = True,
    strict: bool = True,
    load_optimizer: bool = True,
    **_sagemaker_options: Any,
) -> Any:
    """Loads the newest checkpoint under ``path`` (or ``tag``'s) into the wrapped model and
    optimizer; returns its ``user_content``."""
    state = smp_state.current()
    model = distributed_model(state)
    if model is None:
        raise RuntimeError(
            "smp.resume_from_checkpoint: wrap the model in smp.DistributedModel first"
        )
    tag = tag or (Path(path) / NEWEST).read_text().strip()
    if not partial:
        # A full checkpoint holds the model alone: the optimizer starts afresh.
        whole = torch.load(Path(path) / tag, weights_only=False)
        model.load_state_dict(whole, strict=strict)
        return torch.load(Path(path) / f"{FULL_USER_CONTENT}{tag}", weights_only=False)
    folder = Path(path) / tag
    optimizer = distributed_optimizer(state) if load_optimizer else None
    states = _states(model, optimizer)
    dcp_load(states, checkpoint_id=str(folder))
    module = model.own_module
    if model.pipeline is not None or model.shares is not None:
        # The model's own load: a stage's parameters, or shares taken from split ones.
        model.load_state_dict(states["model"])
    else:
        set_model_state_dict(module, states["model"])
    if optimizer is not None:
        moments = {
            key: _moment_as_held(model, key, value) for key, value in states["optimizer"].items()
        }
        set_optimizer_state_dict(module, optimizer.optimizer, moments, options=_OPTIMIZER_LAYOUT)
    return torch.load(folder / USER_CONTENT, weights_only=False)


# The optimizer's state keyed by parameter name, one entry per parameter and setting: a
# checkpoint is then the union of what every stage wrote, and any layout of stages, or
# the whole model before its stages are built, loads the entries it holds.
_OPTIMIZER_LAYOUT = StateDictOptions(flatten_optimizer_state_dict=True)


def _states(model: Any, optimizer: Any) -> dict[str, Any]:
    """This rank's part: its stage's (a pipeline), or its shards, or the whole model
    (before a pipeline is built, which is when scripts resume)."""
    module = model.own_module
    states: dict[str, Any] = {"model": get_model_state_dict(module)}
    if model.pipeline is not None:
        # A stage's traced module holds the model's non-persistent buffers (rotary
        # frequencies, say) as its own: what is saved is what the model's state_dict has.
        kept = model.local_state_dict().keys()
        states["model"] = {key: value for key, value in states["model"].items() if key in kept}
    if optimizer is not None:
        states["optimizer"] = get_optimizer_state_dict(
            module, optimizer.optimizer, options=_OPTIMIZER_LAYOUT
        )
    shares = model.shares
    if shares is not None:
        # Split parameters inside pipeline stages are plain shares: written as DTensors,
        # so each rank writes its own and a checkpoint holds the whole.
        states["model"] = {
            key: shares.as_dtensor(key, value) if key in shares.splits else value
            for key, value in states["model"].items()
        }
    if "optimizer" in states:
        states["optimizer"] = {
            key: _moment_as_saved(model, key, value) for key, value in states["optimizer"].items()
        }
    return states


def _moment_as_saved(model: Any, key: str, value: Any) -> Any:
    """An optimizer moment of a split parameter as a checkpoint keeps it: laid out as the
    whole parameter, in the model's order (GPT-2's fused query-key-value is held by rank
    while split), so any layout resumes from it."""
    owner = _moment_owner(key, value)
    if owner is not None and model.shares is not None and owner in model.shares.splits:
        return model.shares.as_dtensor(owner, value)
    if owner is not None and owner in model.parted and isinstance(value, DTensor):
        return model.parted[owner].in_model_order(value)
    return value


def _moment_as_held(model: Any, key: str, value: Any) -> Any:
    """``_moment_as_saved`` undone: a loaded moment as the split parameter holds it."""
    owner = _moment_owner(key, value)
    if owner is not None and model.shares is not None and owner in model.shares.splits:
        return model.shares.own(owner, value)
    if owner is not None and owner in model.parted and isinstance(value, DTensor):
        return model.parted[owner].as_held(value, value)
    return value


def _moment_owner(key: str, value: Any) -> str | None:
    """The parameter whose tensor a flattened optimizer entry (``state.<parameter>.<name>``)
    holds; None for anything else (a step count, a setting)."""
    if not key.startswith("state.") or not isinstance(value, torch.Tensor) or value.dim() == 0:
        return None
    return key.removeprefix("state.").rpartition(".")[0]


def _save_full(path: Path, tag: str, model: Any, user_content: Any, state: Any) -> None:
    whole = model.state_dict()  # every rank takes part in gathering it
    if state.rank == 0:
        path.mkdir(parents=True, exist_ok=True)
        torch.save(whole, path / tag)
        torch.save(user_content, path / f"{FULL_USER_CONTENT}{tag}")
        _write_newest(path, tag)
    dist.barrier()


def _write_newest(path: Path, tag: str) -> None:
    # Written aside and renamed: a crash never leaves a half-written name.
    with tempfile.NamedTemporaryFile("w", dir=path, delete=False) as file:
        file.write(tag)
    Path(file.name).replace(path / NEWEST)


def _prune(path: Path, keep: int) -> None:
    tags = sorted(
        (folder for folder in path.iterdir() if (folder / USER_CONTENT).exists()),
        key=lambda folder: folder.stat().st_mtime,
    )
    for folder in tags[:-keep]:
        shutil.rmtree(folder, ignore_errors=True)


def full_state_dict(checkpoint: str | Path) -> dict[str, Any]:
    """The whole model's state_dict rebuilt from a checkpoint folder (``path/tag``) by
    torch's own converter; needs no process group."""
    with tempfile.TemporaryDirectory() as scratch:
        whole = Path(scratch) / "whole.pt"
        dcp_to_torch_save(str(checkpoint), str(whole))
        states = torch.load(whole, weights_only=False)
    return dict(states["model"])
