"""What the ``*_async`` calls return: a collective in flight and what finishes its result.
``synchronize(handle)`` waits for it; ``poll(handle)`` says whether it is done."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist


class Handle:
    def __init__(
        self,
        works: list[dist.Work],
        finish: Callable[[], torch.Tensor],
    ) -> None:
        self._works = works
        self._finish = finish
        self._result: torch.Tensor | None = None

    @classmethod
    def done(cls, result: torch.Tensor) -> Handle:
        return cls([], lambda: result)

    def poll(self) -> bool:
        return self._result is not None or all(work.is_completed() for work in self._works)

    def wait(self) -> torch.Tensor:
        if self._result is None:
            for work in self._works:
                work.wait()
            self._result = self._finish()
        return self._result


def synchronize(handle: Handle) -> torch.Tensor:
    """The result of an ``*_async`` call, once its collective has finished."""
    return handle.wait()


def poll(handle: Handle) -> bool:
    """Whether ``synchronize(handle)`` would return without waiting."""
    return handle.poll()
