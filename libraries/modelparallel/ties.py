"""Parameters tied across pipeline stages: one parameter that several modules use, such as
a language model's input embedding and output projection (``lm_head.weight`` is
``transformer.wte.weight``).

torch's ``pipeline()`` gives each stage that uses such a parameter a copy of its own. The
copies stay one parameter as one process trains it: they start from the same value, each
stage's gradient is the sum of every stage's before the optimizer steps (what autograd
sums when one process holds the parameter), and the same gradient makes the same step, so
the copies are equal after every step. Where a stage holds the parameter under two names,
both names are made one tensor again. A tie is known by the names the parameter has in
the model (``named_parameters(remove_duplicate=False)``): ties made in ``__init__``,
by transformers' ``tie_weights()``, or by a script's own ``b.weight = a.weight``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import Pipe

from libraries.modelparallel.topology import Topology


@dataclass(frozen=True)
class Tie:
    """One parameter's names in the model, and the stages whose modules use it."""

    names: tuple[str, ...]
    stages: tuple[int, ...]


def tied_names(module: nn.Module) -> list[tuple[str, ...]]:
    """The names of each parameter that has more than one, in the model's order."""
    names: dict[int, list[str]] = {}
    for name, parameter in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), []).append(name)
    return [tuple(each) for each in names.values() if len(each) > 1]


def ties_of(module: nn.Module, pipe: Pipe) -> list[Tie]:
    """The model's tied parameters and the stages of ``pipe`` that hold each."""
    held = [
        {name for name, _ in pipe.get_stage_module(stage).named_parameters(remove_duplicate=False)}
        for stage in range(pipe.num_stages)
    ]
    ties = []
    for names in tied_names(module):
        stages = tuple(stage for stage, own in enumerate(held) if own & set(names))
        ties.append(Tie(names, stages))
    return ties


class TiedParameters:
    """This rank's copies of the tied parameters its stage holds, kept as one parameter."""

    def __init__(self, ties: list[Tie], topology: Topology, rank: int) -> None:
        self.ties = ties
        self._stage = topology.pp_rank(rank)
        # The tensor that stands for each tie on this stage, by the tie's first name.
        self.held: dict[str, nn.Parameter] = {}
        self._groups: dict[tuple[int, ...], dist.ProcessGroup] = {}
        self._make_groups(topology, rank)

    def _make_groups(self, topology: Topology, rank: int) -> None:
        """A group for each set of stages that share a parameter, in each replica. Every
        rank makes every group in the same order, as torch asks."""
        for stages in sorted({tie.stages for tie in self.ties if len(tie.stages) > 1}):
            for replica in range(topology.dp_size):
                ranks = [topology.rank_of(stage, replica) for stage in stages]
                group = dist.new_group(ranks)
                if rank in ranks:
                    self._groups[stages] = group

    def bind(self, stage: nn.Module, model: nn.Module) -> dict[int, nn.Parameter]:
        """Makes every name of a tie on ``stage`` one tensor: the one already chosen (a
        stage traced again for calls of another shape shares its first one's), else the
        model's own parameter where the stage holds it, else the stage's copy. Returns the
        model's tied parameters this rank stands in for, by id, with their stand-ins."""
        owned = dict(stage.named_parameters(remove_duplicate=False))
        stand_ins = {}
        for tie in self.ties:
            if self._stage not in tie.stages:
                continue
            original = model.get_parameter(tie.names[0])
            chosen = self.held.get(tie.names[0])
            if chosen is None:
                candidates = [owned[name] for name in tie.names if name in owned]
                chosen = next((p for p in candidates if p is original), candidates[0])
                self.held[tie.names[0]] = chosen
            for name in tie.names:
                if name in owned and owned[name] is not chosen:
                    _replace(stage, name, chosen)
            if chosen is not original:
                stand_ins[id(original)] = chosen
        return stand_ins

    def copies_counted_elsewhere(self) -> set[int]:
        """The ids of this stage's copies of tied parameters that an earlier stage holds
        too: a sum over the stages (a gradient norm) counts each tie once, on its first
        stage."""
        return {
            id(self.held[tie.names[0]])
            for tie in self.ties
            if self._stage in tie.stages[1:] and tie.names[0] in self.held
        }

    def under_every_name(self, state: dict[str, Any]) -> dict[str, Any]:
        """``state`` (the stages' gathered) with each tie it holds under every one of the
        tie's names, as the model's own state_dict has it: a name no stage's modules use
        (BART's ``model.shared.weight``: its encoder and decoder embed through modules of
        their own) is no stage's."""
        named = dict(state)
        for tie in self.ties:
            held = next((state[name] for name in tie.names if name in state), None)
            if held is not None:
                named |= {name: held for name in tie.names if name not in state}
        return named

    def copy_from(self, model: nn.Module) -> None:
        """Each copy takes its model parameter's value (made after the copy was, where
        parameters are made late: ``delayed_parameter_initialization``)."""
        with torch.no_grad():
            for tie in self.ties:
                held = self.held.get(tie.names[0])
                original = model.get_parameter(tie.names[0])
                if held is not None and held is not original:
                    held.copy_(original)

    def agree(self) -> None:
        """Every stage's copy takes the first holding stage's value."""
        for tie in self.ties:
            group = self._groups.get(tie.stages)
            held = self.held.get(tie.names[0])
            if group is None or held is None:
                continue
            source = dist.get_global_rank(group, 0)
            with torch.no_grad():
                dist.broadcast(held.data, src=source, group=group)

    def sum_gradients(self) -> None:
        """Each copy's gradient becomes the sum of every stage's: the whole parameter's."""
        for tie in self.ties:
            group = self._groups.get(tie.stages)
            held = self.held.get(tie.names[0])
            if group is None or held is None:
                continue
            if held.grad is None:
                held.grad = torch.zeros_like(held)
            dist.all_reduce(held.grad, group=group)


def _replace(root: nn.Module, name: str, parameter: nn.Parameter) -> None:
    owner_name, _, attribute = name.rpartition(".")
    owner = root.get_submodule(owner_name) if owner_name else root
    setattr(owner, attribute, parameter)
