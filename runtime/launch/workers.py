"""Runs the processes of one instance as a group: output pumped line by line, one failure
ends the rest (as torchrun does), and a stop request is passed on to every process."""

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

Sink = Callable[[str, str], None]
STDERR_TAIL = 60


@dataclass(frozen=True)
class WorkerSpec:
    argv: list[str]
    env: dict[str, str]
    cwd: Path


@dataclass
class GroupResult:
    exit_code: int
    # stderr tail of the process whose exit decided the result
    stderr_tail: list[str] = field(default_factory=list)
    stopped: bool = False


class WorkerGroup:
    def __init__(self, specs: list[WorkerSpec], sink: Sink, kill_grace: float = 10.0) -> None:
        self.specs = specs
        self.sink = sink
        self.kill_grace = kill_grace
        self._processes: list[subprocess.Popen[bytes]] = []
        self._tails: list[collections.deque[str]] = []
        self._pumps: list[threading.Thread] = []
        self._stop = threading.Event()

    def request_stop(self) -> None:
        """Pass a stop on (SIGTERM); the scripts get their chance to save and exit."""
        self._stop.set()
        self._signal_all(signal.SIGTERM)

    def run(self) -> GroupResult:
        for spec in self.specs:
            process = subprocess.Popen(
                spec.argv,
                env=spec.env,
                cwd=spec.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
            self._processes.append(process)
            self._tails.append(tail)
            assert process.stdout is not None
            assert process.stderr is not None
            self._pump(process.stdout, "stdout", None)
            self._pump(process.stderr, "stderr", tail)
        result = self._wait()
        for pump in self._pumps:
            pump.join(timeout=5)
        return result

    def _pump(self, pipe: IO[bytes], stream: str, tail: collections.deque[str] | None) -> None:
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
        while True:
            codes = [process.poll() for process in self._processes]
            failed = [i for i, code in enumerate(codes) if code not in (None, 0)]
            if self._stop.is_set():
                self._end_all()
                return GroupResult(exit_code=0, stopped=True)
            if failed:
                first = failed[0]
                self._end_all()
                return GroupResult(_shell_code(codes[first] or 1), list(self._tails[first]))
            if all(code == 0 for code in codes):
                return GroupResult(0)
            time.sleep(0.05)

    def _end_all(self) -> None:
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
