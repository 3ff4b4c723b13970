"""fp16/bf16-compressed averaging on CPU: half the bytes on the wire, the sum in float32.

gloo adds float16 and bfloat16 one element at a time and rounds after every addition, so
casting a buffer and all-reducing it through gloo saves bytes but not time. Here gloo only
moves bytes (point-to-point messages, no reduction) and torch's vectorised float32
kernels do the arithmetic. With N processes the buffer is cut into N parts (the last one
padded with zeros); process p owns part p:

1. every process rounds its buffer to the half type and sends part p to process p, which
   adds the N copies of its part in float32, divides by N and rounds the average once;
2. every process sends its averaged part to all the others, and each part is widened back
   into the float32 buffer as it arrives.

Small buffers, where a message's latency outweighs its bytes, take one collective
instead (``gather_average_async_``): every process all-gathers the N half-precision
buffers and adds them itself, in rank order, with the same arithmetic and so the same
bits; the reducer picks by size (``COMPRESSED_P2P_MIN_NUMEL`` in sharded_reduce.py).

Either way every process ends with the same bits (each part is computed by one process and only
copied), equal to the float32 average of the half-rounded inputs, rounded once. Each
process moves (N-1)/N of the half-precision buffer each way per phase: half what gloo's
float32 ring allreduce moves. Receives are posted before anything is sent, and the
additions and widening of arrived parts overlap the messages still in flight.

fp16's range is the only one smaller than float32's: an input above 65504 in magnitude
becomes infinite, as it does with torch's own fp16 compression hook. The sums themselves
are float32 and cannot overflow.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

# Point-to-point tags of the two phases, apart from any a script is likely to pick
# (gloo keeps the slots of its collectives apart from these).
_SCATTER_TAG = 0x52590001
_GATHER_TAG = 0x52590002


class CompressedAverage:
    """Averages CPU float32 buffers over the default group, in place. Scratch buffers
    grow to the largest buffer seen and are reused; not for two threads at once."""

    def __init__(self, dtype: torch.dtype, rank: int, world_size: int) -> None:
        self.dtype = dtype
        self.rank = rank
        self.world_size = world_size
        self._outgoing = torch.empty(0, dtype=dtype)
        self._incoming = torch.empty(0, dtype=dtype)
        self._sum = torch.empty(0)
        self._widened = torch.empty(0)

    def average_(self, flat: torch.Tensor) -> torch.Tensor:
        n, rank, numel = self.world_size, self.rank, flat.numel()
        if numel == 0 or n == 1:
            return flat
        part = -(-numel // n)
        outgoing = self._scratch("_outgoing", n * part).view(n, part)
        incoming = self._scratch("_incoming", n * part).view(n, part)
        total = self._scratch("_sum", part)
        widened = self._scratch("_widened", part)
        # Send to rank+1, rank+2, ... and receive from rank-1, rank-2, ...: at each step
        # every process is sending to the one that receives from it.
        peers = [(rank + step) % n for step in range(1, n)]
        sources = [(rank - step) % n for step in range(1, n)]

        scattering = {s: _receive(incoming[s], s, _SCATTER_TAG) for s in sources}
        sends = []
        for peer in peers:
            _round_into(outgoing[peer], flat, peer * part)
            sends.append(_send(outgoing[peer], peer, _SCATTER_TAG))
        mine = outgoing[rank]
        _round_into(mine, flat, rank * part)
        total.copy_(mine)
        gathering = {}
        for source in sources:
            scattering[source].wait()
            # Widened into a float32 buffer of our own first: adding a half-precision
            # tensor to a float32 one makes torch allocate a float32 copy of it, which
            # for large parts costs fresh pages (page faults) every call, 6x the add.
            widened.copy_(incoming[source])
            total.add_(widened)
            # That row is free again: the reduced part from ``source`` lands there.
            gathering[source] = _receive(incoming[source], source, _GATHER_TAG)
        total.div_(n)
        # ``mine`` was never sent in phase 1, so it can hold the result at once.
        mine.copy_(total)
        sends.extend(_send(mine, peer, _GATHER_TAG) for peer in peers)
        _widen_into(flat, mine, rank * part)
        for source in sources:
            gathering[source].wait()
            _widen_into(flat, incoming[source], source * part)
        for send in sends:
            send.wait()
        return flat

    def gather_average_async_(self, flat: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
        """The same average through one all-gather, started at once; the sum is taken
        when it completes (on gloo's thread: it issues nothing, so order is kept)."""
        n, numel = self.world_size, flat.numel()
        if numel == 0 or n == 1:
            done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
            done.set_result(flat)
            return done
        wire = flat.to(self.dtype)
        rows = wire.new_empty(n, numel)
        work = dist.all_gather_single(rows.view(-1), wire, async_op=True)
        assert work is not None  # async_op=True always gives the work

        def finished(_: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
            # Widened all at once: adding half-precision rows to a float32 sum one by
            # one would allocate a float32 copy of each (the same bits either way).
            widened = rows.float()
            total = widened[0]
            for row in widened[1:]:
                total.add_(row)
            total.div_(n)
            wire.copy_(total)  # sent already: free to hold the rounded average
            return flat.copy_(wire)

        averaged: torch.futures.Future[torch.Tensor] = work.get_future().then(finished)
        return averaged

    def _scratch(self, name: str, numel: int) -> torch.Tensor:
        buffer: torch.Tensor = getattr(self, name)
        if buffer.numel() < numel:
            buffer = buffer.new_empty(numel)
            setattr(self, name, buffer)
        return buffer[:numel]


def _round_into(row: torch.Tensor, flat: torch.Tensor, start: int) -> None:
    """Part of ``flat`` from ``start`` into the half-precision ``row``, zero-padded."""
    values = flat[start : start + row.numel()]
    row[: values.numel()].copy_(values)
    row[values.numel() :].zero_()


def _widen_into(flat: torch.Tensor, row: torch.Tensor, start: int) -> None:
    destination = flat[start : start + row.numel()]
    destination.copy_(row[: destination.numel()])


def _send(tensor: torch.Tensor, peer: int, tag: int) -> dist.Work:
    work = dist.isend(tensor, peer, tag=tag)
    assert work is not None  # only None for a process outside the group
    return work


def _receive(tensor: torch.Tensor, peer: int, tag: int) -> dist.Work:
    work = dist.irecv(tensor, peer, tag=tag)
    assert work is not None  # only None for a process outside the group
    return work
