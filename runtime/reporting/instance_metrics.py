"""The instance's own metrics, as SageMaker publishes them to CloudWatch: CPU, memory and
disk utilisation, and the GPUs' where NVML finds any, sampled every few seconds and sent
to the service in batches.

"The instance" is the runtime's process tree: the runtime and everything it started (the
scripts, launchers, installs). On a machine or pod of the job's own that is what runs
there; on the local backend, where instances share the server's machine, it is this
instance's share of it and not the machine's, which the whole-machine figures of
/proc/stat and /proc/meminfo would be. So:

- CPUUtilization: the CPU time the tree's processes used (with that of the children they
  reaped) per second of the interval, as a percentage of one CPU, summed over CPUs as on
  SageMaker (0 to 100 x CPUs).
- MemoryUtilization: the tree's resident memory, a percentage of the machine's.
- DiskUtilization: the space used on the file system of the instance's base directory,
  as ``df`` shows it.
- GPUUtilization, GPUMemoryUtilization: each GPU NVML sees (on the local backend, the
  machine's), summed over GPUs. NVML (``pynvml``, from nvidia-ml-py) is imported only if
  it is installed, and tried once.

Standard library only, besides NVML: this runs in every training image.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
import urllib.error
from pathlib import Path
from typing import Any, NamedTuple

from contract.protocol import (
    MAX_INSTANCE_METRIC_ROWS,
    Endpoint,
    InstanceMetric,
    InstanceMetrics,
)
from runtime.linux import procfs
from runtime.reporting.reporter import ServiceClient

log = logging.getLogger("runyard.runtime")

Row = tuple[float, InstanceMetric, float]

_PROC = Path("/proc")
# Fields of /proc/<pid>/stat, counted from its state field (``procfs.read_stat``).
_PPID, _UTIME, _STIME, _CUTIME, _CSTIME, _RSS = 1, 11, 12, 13, 14, 21


class _Tree(NamedTuple):
    """What the tree's processes had used at ``when`` (monotonic seconds)."""

    when: float
    cpu_ticks: int
    rss_pages: int


def read_tree(root: int) -> _Tree:
    """The CPU ticks and resident pages of ``root`` and its live descendants, in one
    pass over /proc."""
    when = time.monotonic()
    stats: dict[int, list[str]] = {}
    for entry in os.scandir(_PROC):
        if entry.name.isdigit() and (stat := procfs.read_stat(int(entry.name))) is not None:
            stats[int(entry.name)] = stat
    children: dict[int, list[int]] = {}
    for pid, stat in stats.items():
        children.setdefault(int(stat[_PPID]), []).append(pid)
    ticks = pages = 0
    pending = [root] if root in stats else []
    while pending:
        pid = pending.pop()
        stat = stats[pid]
        ticks += sum(int(stat[index]) for index in (_UTIME, _STIME, _CUTIME, _CSTIME))
        pages += int(stat[_RSS])
        pending.extend(children.get(pid, ()))
    return _Tree(when, ticks, pages)


def _memory_total() -> int:
    """The machine's memory in bytes (/proc/meminfo's MemTotal)."""
    with open(_PROC / "meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise OSError("/proc/meminfo has no MemTotal")


class Gpus:
    """The GPUs NVML sees; without NVML or a GPU, none."""

    def __init__(self) -> None:
        self.nvml: Any = None
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return
        try:
            nvml.nvmlInit()
            if nvml.nvmlDeviceGetCount() > 0:
                self.nvml = nvml
        except Exception as exc:  # NVML's errors: no driver, no device
            log.info("no GPU metrics: NVML could not start: %s", exc)

    def sample(self) -> tuple[float, float] | None:
        """Utilisation and memory used, each a percentage summed over the GPUs."""
        nvml = self.nvml
        if nvml is None:
            return None
        busy = memory = 0.0
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                busy += float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                info = nvml.nvmlDeviceGetMemoryInfo(handle)
                memory += 100.0 * info.used / info.total if info.total else 0.0
        except Exception as exc:  # a GPU that fell off the bus: no figure this time
            log.info("no GPU metrics this time: %s", exc)
            return None
        return busy, memory


class Sampler:
    """Reads the instance's metrics; each ``sample`` covers the time since the last."""

    def __init__(self, base_dir: Path, root: int | None = None, gpus: Gpus | None = None) -> None:
        self.base_dir = base_dir
        self.root = os.getpid() if root is None else root
        self.gpus = Gpus() if gpus is None else gpus
        self.tick = os.sysconf("SC_CLK_TCK")
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.memory = _memory_total()
        self.last = read_tree(self.root)

    def sample(self) -> list[Row]:
        now, tree = time.time(), read_tree(self.root)
        last, self.last = self.last, tree
        elapsed = tree.when - last.when
        rows: list[Row] = []
        if elapsed > 0:
            # A process that ended unreaped, or reaped by a process outside the tree, takes
            # its ticks with it: never below nothing.
            used = max(tree.cpu_ticks - last.cpu_ticks, 0) / self.tick
            rows.append((now, InstanceMetric.CPU, 100.0 * used / elapsed))
        rows.append((now, InstanceMetric.MEMORY, 100.0 * tree.rss_pages * self.page / self.memory))
        disk = os.statvfs(self.base_dir)
        used = disk.f_blocks - disk.f_bfree
        # As df counts it: of the space the instance may use, blocks reserved for root
        # (and beyond a quota) left out.
        if used + disk.f_bavail > 0:
            rows.append((now, InstanceMetric.DISK, 100.0 * used / (used + disk.f_bavail)))
        if (gpus := self.gpus.sample()) is not None:
            rows.append((now, InstanceMetric.GPU, gpus[0]))
            rows.append((now, InstanceMetric.GPU_MEMORY, gpus[1]))
        return rows


class Collector:
    """Samples every ``interval`` seconds on a thread of its own and sends each sample;
    what the service did not take (it was away) goes with the next, up to a batch."""

    def __init__(self, client: ServiceClient, sampler: Sampler, interval: float) -> None:
        self.client = client
        self.sampler = sampler
        self.interval = interval
        self._pending: list[Row] = []
        # Each kind of trouble is told once (the runtime's stderr), not every sample.
        self._told: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="instance-metrics", daemon=True)

    def start(self) -> Collector:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(self.client.timeout + 1)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.collect()

    def collect(self) -> None:
        """Take a sample and send it, with what the service has not taken yet."""
        try:
            self._pending += self.sampler.sample()
        except OSError as exc:
            self._tell("read", f"could not read the instance's metrics: {exc}")
            return
        del self._pending[:-MAX_INSTANCE_METRIC_ROWS]
        if self._send(InstanceMetrics(list(self._pending))):
            self._pending.clear()

    def _tell(self, kind: str, message: str) -> None:
        if kind not in self._told:
            self._told.add(kind)
            log.warning("%s", message)

    def _send(self, batch: InstanceMetrics) -> bool:
        """Whether ``batch`` is done with: taken, or refused for good."""
        try:
            self.client.post(Endpoint.METRICS, batch)
            return True
        except urllib.error.HTTPError as exc:
            if exc.code < 500 and exc.code != 429:
                # Refused (the job has ended, say): sending it again would be too.
                self._tell("refused", f"the service refused instance metrics: {exc.code}")
                return True
            return False
        except (urllib.error.URLError, OSError):
            return False
