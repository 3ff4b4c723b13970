"""What an instance's own metrics cost: the collector's CPU, and the database's room.

1. The collector's CPU per sample, on the thread that samples: reading the runtime's
   process tree from /proc (here a tree like a training instance's: a launcher and eight
   workers), memory, the base directory's file system, then encoding and posting the
   sample (to a local HTTP server in another thread, whose CPU is not counted). From it,
   the share of one core it takes at the default interval of 10 s (goal: at most 0.5%).
   GPU figures are not read here (no GPU); NVML's two calls per GPU add to it.

2. The storage per host and hour of a job: against a fresh ``runyard server`` on its
   defaults (SQLite), an hour of samples at 10 s posted as the runtime posts them, one
   request a sample, for a host without GPUs (3 metrics) and one with (5); then the rows
   and bytes (SQLite's dbstat: tables and their indexes) that hour added to
   metric_points and metric_rollups.

    .venv/bin/python bench/instance_metrics.py
"""

from __future__ import annotations

import contextlib
import http.server
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from _server import REPO, server_and_home

sys.path.insert(0, str(REPO))

from contract.protocol import InstanceMetric
from runtime.reporting.instance_metrics import Collector, Gpus, Sampler
from runtime.reporting.reporter import ServiceClient
from service.auth.tokens import instance_token

INTERVAL = 10.0
SAMPLES = 300
WORKERS = 8
HOUR_SAMPLES = int(3600 / INTERVAL)
TABLES = ("metric_points", "metric_rollups")


class _Quiet(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def collector_cpu() -> float:
    """CPU seconds of the sampling thread per sample, sending included."""
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; "
            f"ps = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']) "
            f"for _ in range({WORKERS})]; [p.wait() for p in ps]",
        ],
        start_new_session=True,
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        time.sleep(1.0)  # the workers are started
        with tempfile.TemporaryDirectory() as base:
            sampler = Sampler(Path(base), root=launcher.pid, gpus=Gpus())
            url = f"http://127.0.0.1:{server.server_address[1]}"
            collector = Collector(ServiceClient(url, "t", "bench", "algo-1"), sampler, INTERVAL)
            processes = sum(1 for name in os.listdir("/proc") if name.isdigit())
            started = time.thread_time()
            for _ in range(SAMPLES):
                collector.collect()
            spent = (time.thread_time() - started) / SAMPLES
    finally:
        server.shutdown()
        server.server_close()
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()
    print(
        f"collector: {spent * 1000:.2f} ms of CPU per sample (tree of {WORKERS + 1} "
        f"processes, {processes} on the machine), {SAMPLES} samples"
    )
    print(f"collector: {100 * spent / INTERVAL:.3f}% of one core at a {INTERVAL:.0f} s interval")
    return spent


def _stored(database: Path) -> tuple[dict[str, int], int]:
    """Rows of each table, and bytes of both with their indexes."""
    with contextlib.closing(sqlite3.connect(database)) as db:
        rows = {
            table: db.execute(f"select count(*) from {table}").fetchone()[0] for table in TABLES
        }
        names = [
            name
            for (name,) in db.execute(
                "select name from sqlite_master where tbl_name in (?, ?)", TABLES
            )
        ]
        marks = ",".join("?" * len(names))
        size = db.execute(f"select sum(pgsize) from dbstat where name in ({marks})", names)
        return rows, int(size.fetchone()[0] or 0)


def storage_per_host_hour() -> None:
    # The instances themselves send nothing: only this benchmark posts their hour.
    settings = {"RUNYARD_INSTANCE_METRICS_SECONDS": "0"}
    with server_and_home(settings) as (client, home):
        source = home / "code"
        source.mkdir()
        (source / "train.py").write_text("import time\ntime.sleep(600)\n")
        job = client.create_job(
            {
                "name": "measured",
                "entry_point": "train.py",
                "source_uri": client.upload_source(source),
                "instance_type": "local",
                "instance_count": 2,
            }
        )
        key = (home / "secret_key").read_text().strip().encode()
        database = home / "runyard.db"
        hour_ago = time.time() - 3600
        kinds = {
            "algo-1": (InstanceMetric.CPU, InstanceMetric.MEMORY, InstanceMetric.DISK),
            "algo-2": tuple(InstanceMetric),
        }
        for host, metrics in kinds.items():
            token = instance_token(key, job["id"], host)
            before_rows, before_bytes = _stored(database)
            with httpx.Client(headers={"Authorization": f"Bearer {token}"}) as http:
                for index in range(HOUR_SAMPLES):
                    stamp = hour_ago + index * INTERVAL
                    rows = [[stamp, str(metric), 12.5] for metric in metrics]
                    answer = http.post(
                        f"{client.url}/v1/training-jobs/measured/instances/{host}/metrics",
                        json={"rows": rows},
                    )
                    answer.raise_for_status()
            after_rows, after_bytes = _stored(database)
            added = {table: after_rows[table] - before_rows[table] for table in TABLES}
            gpus = "with GPUs" if len(metrics) == len(InstanceMetric) else "without GPUs"
            print(
                f"storage, a host {gpus} ({len(metrics)} metrics every {INTERVAL:.0f} s): "
                f"{added['metric_points']} points and {added['metric_rollups']} rollups, "
                f"{(after_bytes - before_bytes) / 1024:.0f} KiB per host-hour (SQLite)"
            )


def main() -> None:
    print("python bench/instance_metrics.py")
    collector_cpu()
    storage_per_host_hour()


if __name__ == "__main__":
    main()
