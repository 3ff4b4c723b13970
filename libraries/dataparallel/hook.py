"""The DDP communication hook: fusion buffers reduced while the backward pass goes on.

DDP hands over each bucket (its fusion buffer, filled up to ``bucket_cap_mb``) as soon as
its gradients are ready, always in the same bucket order on every process. The hook queues
the buffer to one communication thread per model and returns a future at once, so autograd
keeps computing the next buckets while this one is reduced. A reduction that is a single
collective (the "allreduce" exchange, the default on CPU) is started from the hook itself.

Why a thread rather than chaining the stages with ``Future.then``: a callback runs on
whichever thread completed the previous collective (a gloo worker), so the stages of two
buckets could be issued in a different order on different processes, and collectives on a
group must be issued in the same order everywhere. One FIFO thread keeps that order.
"""

# No ``from __future__ import annotations`` here: DDP inspects the hook's annotations and
# accepts only the real GradBucket and Future[Tensor] objects, not strings.

import queue
import threading
import weakref
from dataclasses import dataclass

import torch

# torch.distributed re-exports GradBucket from its C extension without marking it
# exported, which strict mypy refuses; it is the same class.
from torch._C._distributed_c10d import GradBucket

from libraries.dataparallel.sharded_reduce import ShardedReducer


@dataclass
class _Job:
    buffer: torch.Tensor
    result: torch.futures.Future[torch.Tensor]
    # CUDA only: when the gradients in ``buffer`` are written, on autograd's stream.
    ready: torch.cuda.Event | None


class ReductionQueue:
    """Runs ``reducer.average_`` on buffers in submission order, off the caller's thread."""

    def __init__(self, reducer: ShardedReducer) -> None:
        self.reducer = reducer
        # None tells the thread to end.
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def submit(self, buffer: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
        if self.reducer.groups.world_size == 1:
            done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
            done.set_result(buffer)
            return done
        if self.reducer.starts_at_once(buffer):
            # One collective per bucket: DDP hands buckets over in order, so issuing it
            # here keeps the order, and the thread's hand-off is saved. (Compressed
            # buffers averaged point to point go to the thread: those messages are not
            # collectives, so they need no order against these.)
            return self.reducer.average_async_(buffer)
        if buffer.is_cuda:
            # A CUDA-aware future: its value carries the stream dependency to DDP.
            result: torch.futures.Future[torch.Tensor] = torch.futures.Future(
                devices=[buffer.device]
            )
            ready = torch.cuda.current_stream(buffer.device).record_event()
        else:
            result, ready = torch.futures.Future(), None
        self._ensure_started()
        self._jobs.put(_Job(buffer, result, ready))
        return result

    def _ensure_started(self) -> None:
        # Started on first use, not at construction: a model that never trains (or a
        # process that forks after building it) needs no thread.
        with self._start_lock:
            if self._thread is None:
                # The thread holds the queue and the reducer, not this object, so the
                # DDP model dropping its hook state ends the thread. A daemon, so that
                # a thread stuck in a collective cannot hold the interpreter at exit.
                self._thread = threading.Thread(
                    target=_serve,
                    args=(self._jobs, self.reducer),
                    name="runyard-dataparallel-reduce",
                    daemon=True,
                )
                self._thread.start()
                weakref.finalize(self, self._jobs.put, None)


def _serve(jobs: queue.SimpleQueue[_Job | None], reducer: ShardedReducer) -> None:
    while (job := jobs.get()) is not None:
        _complete(job, reducer)


def _complete(job: _Job, reducer: ShardedReducer) -> None:
    # A function of its own so that nothing keeps the buffer alive between buckets.
    try:
        if job.ready is not None:
            torch.cuda.set_device(job.buffer.device)
            torch.cuda.current_stream(job.buffer.device).wait_event(job.ready)
        job.result.set_result(reducer.average_(job.buffer))
    except Exception as error:  # handed to DDP, which raises it in backward()
        # torch annotates set_exception's argument with the future's value type.
        job.result.set_exception(error)  # type: ignore[arg-type]


def sharded_allreduce_hook(
    state: ReductionQueue, bucket: GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """``register_comm_hook`` signature: average the bucket's buffer over all processes."""
    return state.submit(bucket.buffer())
