"""Runs the processes of one instance as a group: output pumped line by line, one failure
ends the rest (as torchrun does), and a stop request is passed on to every process.

A process whose script recorded that it ended successfully (``runtime.launch.exit_records``)
and that then died by a signal counts as a success: the signal came after the script's
last line and its exit handlers, as its interpreter was torn down. The job's log says so.
"""

from __future__ import annotations

import collections
import contextlib
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from contract.protocol import Stream

Sink = Callable[[Stream, str], None]
# The exit status a process's script recorded, by the record's name; None: none recorded.
Recorded = Callable[[str], int | None]
RUNTIME_STREAM: Stream = "runtime"
# Enough lines for a deep traceback, heading and all (a library's stack, a DataLoader
# worker's carried in its exception), which the failure reason is made from.
STDERR_TAIL = 200
PUMP_GRACE = 1.0


@dataclass(frozen=True)
class WorkerSpec:
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    # A helper that serves the others (a TensorFlow parameter server) and runs until told
    # to stop: the instance is done when every other process is, and then it is ended.
    auxiliary: bool = False
    # Started only once every main process has completed, while the auxiliary ones still
    # serve: what the instance waits for before its helpers may end (another instance's
    # task that still needs them).
    afterwards: bool = False
    # The name of the record in which its script runner writes how its script ended
    # (``runtime.launch.exit_records``); None: it writes none.
    exit_record: str | None = None


@dataclass(frozen=True)
class Launch:
    """What one instance starts for its job's distribution mode."""

    specs: list[WorkerSpec] = field(default_factory=list)
    # An instance of an MPI job other than the first: mpirun starts its ranks.
    waits_for_mpi: bool = False


@dataclass
class GroupResult:
    exit_code: int
    # stderr tail of the process whose exit decided the result
    stderr_tail: list[str] = field(default_factory=list)
    stopped: bool = False


class WorkerGroup:
    """Runs one instance's processes. ``stop`` is set from a signal handler; the wait loop
    passes the stop on to each process exactly once, never from inside the handler, so a
    script's own SIGTERM handler (saving a checkpoint) is never re-entered."""

    def __init__(
        self,
        specs: list[WorkerSpec],
        sink: Sink,
        stop: threading.Event,
        kill_grace: float = 10.0,
        recorded: Recorded | None = None,
    ) -> None:
        self.specs = specs
        self.sink = sink
        self.stop = stop
        self.kill_grace = kill_grace
        self.recorded = recorded
        # The processes killed after their script had ended successfully, by index.
        self._finished_first: set[int] = set()
        self._started: list[WorkerSpec] = []
        self._processes: list[subprocess.Popen[bytes]] = []
        self._tails: list[collections.deque[str]] = []
        self._pumps: list[threading.Thread] = []
        # The process whose exit decided the result, when one failed.
        self._decided: int | None = None

    def run(self) -> GroupResult:
        self._start([spec for spec in self.specs if not spec.afterwards])
        result = self._wait()
        # The pipes close when the last writer goes; a child the script left running may
        # hold them open, so its remaining output gets a short grace, not a wait.
        deadline = time.monotonic() + PUMP_GRACE
        for pump in self._pumps:
            pump.join(timeout=max(0.0, deadline - time.monotonic()))
        if self._decided is not None:
            # Read now, not when the process exited: its last lines (the traceback) may
            # still have been in the pipe then.
            result.stderr_tail = list(self._tails[self._decided])
        return result

    def _start(self, specs: list[WorkerSpec]) -> None:
        for spec in specs:
            if self.stop.is_set():
                break
            process = subprocess.Popen(
                spec.argv,
                env=spec.env,
                cwd=spec.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
            self._started.append(spec)
            self._processes.append(process)
            self._tails.append(tail)
            assert process.stdout is not None  # PIPE above
            assert process.stderr is not None
            self._pump(process.stdout, "stdout", None)
            self._pump(process.stderr, "stderr", tail)

    def _pump(self, pipe: IO[bytes], stream: Stream, tail: collections.deque[str] | None) -> None:
        def pump() -> None:
            with pipe:
                for raw in iter(pipe.readline, b""):
                    line = raw.decode(errors="replace").rstrip("\n")
                    if tail is not None:
                        tail.append(line)
                    self.sink(stream, line)

        thread = threading.Thread(target=pump, daemon=True)
        thread.start()
        self._pumps.append(thread)

    def _wait(self) -> GroupResult:
        forwarded = False
        while True:
            codes = [self._result(i, process.poll()) for i, process in enumerate(self._processes)]
            if self.stop.is_set():
                # A stop waits for the scripts however long they take to save; the backend
                # bounds it, with SIGKILL once its grace period is over.
                if not forwarded:
                    self._signal_all(signal.SIGTERM)
                    forwarded = True
                if all(code is not None for code in codes):
                    return GroupResult(exit_code=0, stopped=True)
            else:
                failed = [i for i, code in enumerate(codes) if code not in (None, 0)]
                if failed:
                    self._decided = first = failed[0]
                    self._end_all()
                    return GroupResult(_shell_code(codes[first] or 1))
                main = [
                    code
                    for code, spec in zip(codes, self._started, strict=True)
                    if not spec.auxiliary
                ]
                if all(code == 0 for code in main):
                    later = [spec for spec in self.specs if spec.afterwards]
                    if later and not any(spec.afterwards for spec in self._started):
                        self._start(later)
                        continue
                    self._end_all()  # only auxiliary processes can still be running
                    return GroupResult(0)
            time.sleep(0.05)

    def _result(self, index: int, code: int | None) -> int | None:
        """Process ``index``'s exit status as its script's result: 0 where a signal killed
        it after its script had recorded that it ended successfully."""
        if index in self._finished_first:
            return 0
        if code is None or code >= 0 or self.recorded is None:
            return code
        spec = self._started[index]
        if spec.exit_record is None or self.recorded(spec.exit_record) != 0:
            return code
        self._finished_first.add(index)
        rank = f" (rank {spec.env['RANK']})" if "RANK" in spec.env else ""
        self.sink(
            RUNTIME_STREAM,
            f"Process {index}{rank} ended its script successfully, then was killed by "
            f"{_signal_name(-code)} (exit code {_shell_code(code)}) as its interpreter shut "
            "down: its script's success stands",
        )
        return 0

    def _end_all(self) -> None:
        """One process failed: the others end too, as under torchrun."""
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + self.kill_grace
        while any(process.poll() is None for process in self._processes):
            if time.monotonic() > deadline:
                self._signal_all(signal.SIGKILL)
                break
            time.sleep(0.05)
        for process in self._processes:
            process.wait()

    def _signal_all(self, sig: signal.Signals) -> None:
        for process in self._processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(sig)


def _shell_code(code: int) -> int:
    return 128 - code if code < 0 else code


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
