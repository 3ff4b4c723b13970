"""torchrun's own report when a worker fails: its traceback, which ends in
``ChildFailedError:``, then a block that names every failed rank and, under ``Root Cause
(first observed failure):``, the rank that failed first, with its exit code and (for a
script whose entry point torch's ``@record`` wraps) the traceback from its error file:

    torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
    ============================================================
    train.py FAILED
    ------------------------------------------------------------
    Failures:
      <NO_OTHER_FAILURES>
    ------------------------------------------------------------
    Root Cause (first observed failure):
    [0]:
      time      : 2024-05-01_10:00:00
      host      : algo-1
      rank      : 1 (local_rank: 1)
      exitcode  : 1 (pid: 4242)
      error_file: /tmp/torchelastic_x/attempt_0/1/error.json
      traceback : Traceback (most recent call last):
        File "train.py", line 7, in main
          return total / count
      ZeroDivisionError: float division by zero
    ============================================================

Its traceback is torchrun's, never the script's, so it must not become the reason. Its
root cause is the failure with the earliest time, in whole seconds: where another failed in
the same second, torchrun's choice between them is arbitrary (the first in its table)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from runtime.reporting.tracebacks import FRAME, HEADING

_CHILD_FAILED = re.compile(r"^(?:[\w.]+\.)?ChildFailedError:\s*$")
_ROOT_CAUSE = "Root Cause (first observed failure):"
_BORDER = re.compile(r"^={10,}$")
_SECTION = re.compile(r"^-{10,}$")
# "[0]:": the start of a failure's record.
_RECORD = re.compile(r"^\[\d+\]:$")
# "  rank      : 1 (local_rank: 1)": a field of a failure's record.
_FIELD = re.compile(r"^  (?P<name>[a-z_]+)\s*: ?(?P<value>.*?)\s*$")
_RANK = re.compile(r"^(?P<rank>\d+) \(local_rank: (?P<local_rank>\d+)\)")
_EXIT_CODE = re.compile(r"^(?P<code>-?\d+)(?: \(pid: \d+\))?(?:\s+\((?P<signal>SIG\w+)\))?")
# What torchrun says instead of a traceback when the script did not record one: no news.
_NO_TRACEBACK = "To enable traceback see"
# torch indents a recorded traceback's lines by this much under "traceback :".
_CONTINUATION = "  "


@dataclass(frozen=True)
class Failure:
    """One failed rank, as torchrun's block records it."""

    rank: int
    local_rank: int
    exit_code: int
    signal: str | None
    # When torchrun saw it fail, to the second.
    time: str
    # The failed script's traceback, from its error file; empty when it recorded none.
    traceback: list[str]
    # What torchrun says of a failure with no traceback ("Signal 9 (SIGKILL) received by
    # PID 42"); empty when it says nothing of use.
    message: str

    def describe(self) -> str:
        """The failure in a line, for a reason with nothing better to go on."""
        signal = f" ({self.signal})" if self.signal else ""
        said = f": {self.message}" if self.message else ""
        return (
            f"ChildFailedError: rank {self.rank} (local_rank: {self.local_rank}) exited first "
            f"with code {self.exit_code}{signal}{said}"
        )


@dataclass(frozen=True)
class Summary:
    # lines[start:end] are torchrun's own: its traceback and the block that follows.
    start: int
    end: int
    root_cause: Failure | None
    # Whether no other rank failed in the root cause's second: only then did it fail first.
    root_cause_alone: bool


def find(lines: Sequence[str]) -> Summary | None:
    """torchrun's last report in ``lines``, if there is one."""
    raised = next(
        (i for i in range(len(lines) - 1, -1, -1) if _CHILD_FAILED.match(lines[i].rstrip())),
        None,
    )
    if raised is None:
        return None
    end = _block_end(lines, raised + 1)
    others, root = _failures(lines[raised + 1 : end])
    alone = root is not None and all(other.time != root.time for other in others)
    return Summary(_traceback_start(lines, raised), end, root, alone)


def _traceback_start(lines: Sequence[str], raised: int) -> int:
    """The heading of the traceback that ends at ``raised``, or its first frame still in
    ``lines``."""
    start = raised
    while start > 0:
        line = lines[start - 1]
        if line.startswith(HEADING):
            return start - 1
        if not line.startswith((" ", "\t")):
            break
        start -= 1
    while start < raised and not FRAME.match(lines[start]):
        start += 1  # code lines of a frame whose location left the tail
    return start


def _block_end(lines: Sequence[str], begin: int) -> int:
    """Past the border that closes the block: the second, the first opens it."""
    borders = [i for i in range(begin, len(lines)) if _BORDER.match(lines[i].rstrip())]
    return borders[1] + 1 if len(borders) > 1 else len(lines)


def _failures(block: Sequence[str]) -> tuple[list[Failure], Failure | None]:
    """The block's other failures, and its root cause."""
    others: list[Failure] = []
    record: list[str] = []
    in_root = False
    for line in [*block, ""]:
        stripped = line.rstrip()
        if _RECORD.match(stripped) or _SECTION.match(stripped) or _BORDER.match(stripped):
            failure = _failure(record)
            if failure is not None and not in_root:
                others.append(failure)
            elif failure is not None:
                return others, failure
            record = []
        if stripped == _ROOT_CAUSE:
            in_root = True
        record.append(line)
    return others, _failure(record) if in_root else None


def _failure(record: Sequence[str]) -> Failure | None:
    fields: dict[str, str] = {}
    recorded: list[str] = []
    for line in record:
        field = _FIELD.match(line)
        if "traceback" in fields:
            recorded.append(line.removeprefix(_CONTINUATION).rstrip())
        elif field is not None:
            fields[field["name"]] = field["value"]
    rank = _RANK.match(fields.get("rank", ""))
    exit_code = _EXIT_CODE.match(fields.get("exitcode", ""))
    if rank is None or exit_code is None:
        return None
    said = fields.get("traceback", "")
    recorded = [said, *recorded] if said.startswith(HEADING) else []
    while recorded and not recorded[-1].strip():
        recorded.pop()
    return Failure(
        rank=int(rank["rank"]),
        local_rank=int(rank["local_rank"]),
        exit_code=int(exit_code["code"]),
        signal=exit_code["signal"],
        time=fields.get("time", ""),
        traceback=recorded,
        message="" if recorded or said.startswith(_NO_TRACEBACK) else said,
    )
