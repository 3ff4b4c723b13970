"""Whose lines explain a failure when several processes write to one stderr.

Launchers tag each process's lines with its rank: ``mpirun --tag-output`` puts
``[1,3]<stderr>: `` before every line of rank 3 (Open MPI 4 without the space; SageMaker's
training toolkit rewrites the tag as ``[1,mpirank:3,algo-2]<stderr>:``), and once a script
has called ``init_process_group`` torch prints its uncaught exception with ``[rank3]: ``
before each line. Under mpirun a script's traceback carries both: ``[1,3]<stderr>:
[rank3]: Traceback ...``. Ranks that fail together interleave their tracebacks, and those
that fail second fail because of the first (a peer's connection closed), so the reason is
the traceback of the rank that failed first, alone: the one its launcher names (torchrun's
root cause, mpirun's first process to exit), else the first to start printing one. A
launcher names the first to exit, which on a busy machine can be a rank that failed
because its peer did (the peer still tearing torch down): where the named rank's error is
only that (``peer_lost``) and another rank's is not, the other's is the reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from runtime.reporting.tracebacks import Traceback, begins_traceback, last_traceback

# The rank of Open MPI's tag is the process's rank in MPI_COMM_WORLD; under Runyard's
# mpirun launcher it is also the process's torch rank (runtime.launch.mpi_rank).
_MPI_TAG = re.compile(r"\[\d+,(?:mpirank:)?(?P<rank>\d+)(?:,[\w.-]+)?\]<std(?:out|err)>:")
_TORCH_TAG = re.compile(r"\[rank(?P<rank>\d+)\]: ?")
# What gloo, NCCL and sockets say when a rank's peer has gone (gloo adds "This is
# typically caused by a remote worker crashing").
_PEER_LOST = re.compile(
    r"Connection (?:closed|reset) by peer|remote process exited|communicator was aborted"
    r"|Broken pipe",
    re.IGNORECASE,
)
# mpirun's summary of the first rank to exit with an error: "Process name:
# [prterun-algo-1-5@1,3]" (Open MPI 5) or "[[41234,1],3]" (Open MPI 4).
_MPIRUN_FIRST = re.compile(
    r"^\s*Process name:\s*\[(?:[^\]@]+@\d+,(?P<prrte>\d+)|\[\d+,\d+\],(?P<orte>\d+))\]"
)


@dataclass(frozen=True)
class RankLine:
    # The rank that printed it, or None for a launcher's own line.
    rank: int | None
    # Which tags it carried: within one rank, a line tagged differently is another
    # writer's (torch tags only what its exception hook prints).
    tags: tuple[str, ...]
    text: str


def untag(lines: Sequence[str]) -> list[RankLine]:
    """``lines`` split into rank and text. Open MPI 5 puts a space after its tag, Open MPI
    4 does not: the space goes only where every tagged line has one, so that a frame's
    indentation is the one Python printed."""
    mpi_tags = [_MPI_TAG.match(line) for line in lines]
    spaced = all(
        line[tag.end() : tag.end() + 1] == " "
        for line, tag in zip(lines, mpi_tags, strict=True)
        if tag is not None
    )
    return [_untag(line, tag, spaced) for line, tag in zip(lines, mpi_tags, strict=True)]


def _untag(line: str, mpi_tag: re.Match[str] | None, spaced: bool) -> RankLine:
    rank: int | None = None
    tags: list[str] = []
    at = 0
    if mpi_tag is not None:
        rank, at = int(mpi_tag["rank"]), mpi_tag.end() + (1 if spaced else 0)
        tags.append("mpi")
    torch_tag = _TORCH_TAG.match(line, at)
    if torch_tag is not None:
        rank = int(torch_tag["rank"]) if rank is None else rank
        at = torch_tag.end()
        tags.append("torch")
    return RankLine(rank, tuple(tags), line[at:])


def mpirun_first_rank(lines: Iterable[RankLine]) -> int | None:
    """The rank mpirun's summary names as the first to exit with an error."""
    for line in lines:
        found = _MPIRUN_FIRST.match(line.text) if line.rank is None else None
        if found is not None:
            return int(found["prrte"] or found["orte"])
    return None


def traceback_of(lines: Sequence[RankLine], ranks: Iterable[int | None]) -> Traceback | None:
    """The last traceback of the first of ``ranks`` (those a launcher names as the first
    to fail, most trusted first) that printed one; where that one only says a peer was
    lost, the first rank's that says more, if any does."""
    for rank in ranks:
        if rank is not None and (traceback := last_traceback(lines_of(lines, rank))):
            return first_cause(lines) if peer_lost(traceback) else traceback
    return None


def peer_lost(traceback: Traceback) -> bool:
    """Whether the error is only that a peer of the rank went away (its connection closed
    or reset, its collective aborted): the effect of another rank's failure."""
    return _PEER_LOST.search(traceback.exception) is not None


def first_cause(lines: Sequence[RankLine]) -> Traceback | None:
    """The last traceback of the first rank to print one that is not ``peer_lost``; else
    the first rank's."""
    starts = (line.rank for line in lines if line.rank is not None and begins_traceback(line.text))
    tracebacks = [last_traceback(lines_of(lines, rank)) for rank in dict.fromkeys(starts)]
    found = [traceback for traceback in tracebacks if traceback is not None]
    return next((each for each in found if not peer_lost(each)), found[0] if found else None)


def lines_of(lines: Sequence[RankLine], rank: int) -> list[str]:
    """The text of ``rank``'s lines, with an empty line where its tags change, which ends
    an exception's text as an empty line does."""
    texts: list[str] = []
    previous: tuple[str, ...] | None = None
    for line in lines:
        if line.rank != rank:
            continue
        if previous is not None and line.tags != previous:
            texts.append("")
        texts.append(line.text)
        previous = line.tags
    return texts
