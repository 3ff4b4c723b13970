"""The instance's own metrics, read by the runtime from real processes: the CPU a process
tree burns, the memory it holds, the disk its base directory is on; the GPUs' through
NVML, which cannot run here (no GPU), faked at the module it is imported as; and the
collector sending samples to a real HTTP server, keeping them while it answers 503."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contract.protocol import InstanceMetric
from runtime.reporting import instance_metrics
from runtime.reporting.instance_metrics import Collector, Gpus, Sampler
from runtime.reporting.reporter import ServiceClient

# A parent that starts a child, and waits for it: on a line from the test, the child
# burns a second of CPU time by its own count, then says so and sleeps.
BURNING = """
import sys, time
print("ready", flush=True)
sys.stdin.readline()
start = time.process_time()
while time.process_time() - start < 1.0:
    pass
print("done", flush=True)
time.sleep(60)
"""
BURNING_CHILD = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {BURNING!r}])"
HOLDING = (
    "import sys, time; b = bytearray({size}); b[::4096] = b'x' * len(b[::4096]); "
    "print('ready', flush=True); time.sleep(60)"
)


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        # The burning child is in the parent's group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                pipe.close()


def _start(started: list[subprocess.Popen[bytes]], code: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    started.append(process)
    return process


def _values(rows: list[instance_metrics.Row]) -> dict[InstanceMetric, float]:
    return {metric: value for _time, metric, value in rows}


def test_cpu_is_what_the_tree_burns(tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    burning = _start(started, BURNING_CHILD)
    assert burning.stdout is not None
    assert burning.stdin is not None
    assert burning.stdout.readline() == b"ready\n"
    sampler = Sampler(tmp_path, root=burning.pid, gpus=Gpus())
    since = sampler.last.when
    burning.stdin.write(b"go\n")
    burning.stdin.flush()
    assert burning.stdout.readline() == b"done\n"
    busy = _values(sampler.sample())
    # The child's second of CPU, as a share of the time sampled (whatever share of a
    # CPU the machine gave it); its reading and writing, and the clock's ticks
    # (hundredths of a second), a little more.
    seconds = busy[InstanceMetric.CPU] / 100 * (sampler.last.when - since)
    assert 0.95 <= seconds <= 1.2, busy
    # Then it sleeps, as does its parent.
    time.sleep(0.5)
    assert _values(sampler.sample())[InstanceMetric.CPU] < 5.0


def test_memory_is_what_the_tree_holds_and_disk_what_its_file_system_has(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    size = 256 * 1024 * 1024
    holding = _start(started, HOLDING.format(size=size))
    small = _start(started, HOLDING.format(size=1))
    for process in (holding, small):
        assert process.stdout is not None
        assert process.stdout.readline() == b"ready\n"
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    held = _values(Sampler(tmp_path, root=holding.pid, gpus=Gpus()).sample())
    little = _values(Sampler(tmp_path, root=small.pid, gpus=Gpus()).sample())
    assert held[InstanceMetric.MEMORY] >= 100.0 * size / total * 0.95
    assert held[InstanceMetric.MEMORY] < 100.0
    assert little[InstanceMetric.MEMORY] < held[InstanceMetric.MEMORY] / 4

    # What df shows, rounded up to a whole percent.
    shown = subprocess.run(
        ["df", "--output=pcent", str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    assert 0.0 < held[InstanceMetric.DISK] <= 100.0
    assert int(shown.rstrip("%")) - 1.5 < held[InstanceMetric.DISK] <= int(shown.rstrip("%"))
    # No GPU metric where there is no NVML.
    assert InstanceMetric.GPU not in held


class _Device:
    def __init__(self, busy: int, used: int, total: int) -> None:
        self.busy, self.used, self.total = busy, used, total


def _fake_nvml(devices: list[_Device], failing: bool = False) -> types.ModuleType:
    """A module that answers as pynvml does, for what the sampler asks."""
    nvml = types.ModuleType("pynvml")

    def init() -> None:
        if failing:
            raise RuntimeError("NVML Shared Library Not Found")

    nvml.nvmlInit = init  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetCount = lambda: len(devices)  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetHandleByIndex = lambda index: devices[index]  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetUtilizationRates = lambda device: types.SimpleNamespace(  # type: ignore[attr-defined]
        gpu=device.busy, memory=0
    )
    nvml.nvmlDeviceGetMemoryInfo = lambda device: types.SimpleNamespace(  # type: ignore[attr-defined]
        used=device.used, total=device.total, free=device.total - device.used
    )
    return nvml


def test_gpus_are_read_through_nvml_and_summed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    devices = [_Device(80, 30, 120), _Device(40, 60, 120)]
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(devices))
    values = _values(Sampler(tmp_path).sample())
    assert values[InstanceMetric.GPU] == 120.0
    assert values[InstanceMetric.GPU_MEMORY] == 75.0

    # No driver: no GPU metrics, and the others as ever.
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(devices, failing=True))
    values = _values(Sampler(tmp_path).sample())
    assert InstanceMetric.GPU not in values
    assert InstanceMetric.DISK in values


class _Service(http.server.BaseHTTPRequestHandler):
    """Answers 503 to the first ``refusing`` posts, then keeps each body."""

    bodies: list[dict[str, Any]]
    refusing: list[int]

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.refusing[0] > 0:
            self.refusing[0] -= 1
            self.send_response(503)
        else:
            assert self.path.endswith("/instances/algo-2/metrics")
            self.bodies.append(body)
            self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_the_collector_sends_samples_and_keeps_them_while_the_service_is_away(
    tmp_path: Path,
) -> None:
    bodies: list[dict[str, Any]] = []
    handler = type("Service", (_Service,), {"bodies": bodies, "refusing": [2]})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = ServiceClient(f"http://127.0.0.1:{server.server_address[1]}", "t", "j", "algo-2")
        collector = Collector(client, Sampler(tmp_path), interval=0.1).start()
        deadline = time.monotonic() + 20
        while len(bodies) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        collector.stop()
    finally:
        server.shutdown()
        server.server_close()
    # The first that got through holds the three samples the service refused until then.
    first = [metric for _time, metric, _value in bodies[0]["rows"]]
    assert first.count("CPUUtilization") == 3
    assert first.count("DiskUtilization") == 3
    second = [metric for _time, metric, _value in bodies[1]["rows"]]
    assert second == ["CPUUtilization", "MemoryUtilization", "DiskUtilization"]
    times = [row[0] for body in bodies for row in body["rows"]]
    assert times == sorted(times)
    assert not collector._thread.is_alive()
