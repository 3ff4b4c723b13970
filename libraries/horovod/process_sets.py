"""Horovod's process sets, as far as Runyard has them: the one of the whole job."""

from __future__ import annotations

from libraries.horovod.refusals import NOT_OFFERED, NotOfferedError


class ProcessSetOfTheJob:
    """``hvd.global_process_set``: every process of the job."""

    def __repr__(self) -> str:
        return "hvd.global_process_set"


global_process_set = ProcessSetOfTheJob()


def check(process_set: object) -> None:
    """Accepts the job's own set (or none given); refuses any other by name."""
    if process_set is not None and process_set is not global_process_set:
        raise NotOfferedError(f"process_set={process_set!r}", NOT_OFFERED["ProcessSet"])
