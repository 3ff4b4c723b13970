"""TensorFlow parameter-server training on Runyard against the same script run directly.

examples/tensorflow-ps/train.py (a Keras model under ParameterServerStrategy) as a
1-instance and a 2-instance ``parameter_server`` job on a fresh `runyard server` with its
embedded defaults, then the same script started by hand the way the job starts it: with
two instances, a ps task on each (``runtime.launch.tensorflow_ps``), the chief beside the
first and the worker beside the second, with SageMaker's TF_CONFIG on loopback ports,
each instance's processes on its share of the CPUs and the inter-op threads the runtime
sets; with one, the script alone. Prints the training throughput (steps/s, the chief's
count from its first step to the last) and the seconds before the first step (from the
job's POST, or from starting the processes), the median of --runs runs.

Run it with a Python that has TensorFlow and Runyard (the server it starts runs with the
same one, and so do the jobs' instances): after `.venv/bin/pip install -e '.[tensorflow]'`
the .venv, or build/tf-venv, which the TensorFlow tests make.

    build/tf-venv/bin/python bench/tensorflow_ps.py [--runs 3] [--steps 300]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime

from _server import REPO, log_lines, server_and_home

from provisioning.local.backend import share_cpus
from runtime.launch.tf_config import MIN_INTEROP_THREADS
from runyard.client import Client

EXAMPLE = REPO / "examples" / "tensorflow-ps"
FIRST_STEP = re.compile(r"first step done .* \(unix time ([\d.]+)\)")
RATE = re.compile(r"steps/s ([\d.]+)")
TIMEOUT = 300


def _ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for probe in sockets:
        probe.bind(("127.0.0.1", 0))
    ports = [probe.getsockname()[1] for probe in sockets]
    for probe in sockets:
        probe.close()
    return ports


def _figures(lines: list[str], since: float) -> tuple[float, float]:
    """(seconds from ``since`` to the first step, steps/s) from the chief's lines."""
    first = next(float(m.group(1)) for line in lines if (m := FIRST_STEP.search(line)))
    rate = next(float(m.group(1)) for line in lines if (m := RATE.search(line)))
    return first - since, rate


def through_runyard(client: Client, instances: int, steps: int, run: int) -> tuple[float, float]:
    spec = {
        "name": f"tf-ps-{instances}-{run}",
        "entry_point": "train.py",
        "source_uri": client.upload_source(EXAMPLE),
        "instance_type": "local",
        "instance_count": instances,
        "framework": "tensorflow",
        "distribution": {"parameter_server": {"enabled": True}},
        "hyperparameters": {"steps": steps},
    }
    posted = datetime.now(UTC).timestamp()
    client.create_job(spec)
    job = client.wait(spec["name"], poll=0.2, timeout=TIMEOUT)
    events = log_lines(client, spec["name"])
    if job["status"] != "Completed":
        raise RuntimeError(f"{spec['name']}: {job['status']}: {job['failure_reason']}")
    return _figures([e["message"] for e in events if e.get("host") == "algo-1"], posted)


def directly(instances: int, steps: int) -> tuple[float, float]:
    script = [sys.executable, str(EXAMPLE / "train.py"), "--steps", str(steps)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "SM_MODEL_DIR": "/tmp/runyard-bench-model"}
    cpus = share_cpus(sorted(os.sched_getaffinity(0)), instances)
    started = time.time()
    if instances == 1:
        alone = subprocess.run(script, env=env, capture_output=True, text=True, timeout=TIMEOUT)
        return _figures(alone.stdout.splitlines(), started)
    ports = _ports(2 * instances)
    tasks, ps = ports[:instances], ports[instances:]
    cluster = {
        "master": [f"127.0.0.1:{tasks[0]}"],
        "ps": [f"127.0.0.1:{port}" for port in ps],
        "worker": [f"127.0.0.1:{port}" for port in tasks[1:]],
    }
    if len(os.sched_getaffinity(0)) // instances < MIN_INTEROP_THREADS:
        env["TF_NUM_INTEROP_THREADS"] = str(MIN_INTEROP_THREADS)

    def start(argv: list[str], kind: str, index: int, host: int) -> subprocess.Popen[str]:
        config = {
            "cluster": cluster,
            "environment": "cloud",
            "task": {"index": index, "type": kind},
        }
        process = subprocess.Popen(
            argv,
            env={**env, "TF_CONFIG": json.dumps(config)},
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        os.sched_setaffinity(process.pid, cpus[host])
        return process

    servers = [
        start([sys.executable, "-m", "runtime.launch.tensorflow_ps"], "ps", host, host)
        for host in range(instances)
    ]
    workers = [start(script, "worker", i - 1, i) for i in range(1, instances)]
    chief = start(script, "master", 0, 0)
    try:
        out, _ = chief.communicate(timeout=TIMEOUT)
        if chief.returncode != 0:
            raise RuntimeError(f"the chief exited {chief.returncode}:\n{out}")
        for worker in workers:
            worker.wait(TIMEOUT)
    finally:
        for process in [*servers, *workers, chief]:
            process.kill()
            process.wait()
    return _figures(out.splitlines(), started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument(
        "--isolation",
        choices=["auto", "namespaces", "shared"],
        default="auto",
        help="RUNYARD_LOCAL_ISOLATION: shared puts the instances on loopback, as the direct runs",
    )
    args = parser.parse_args()
    if importlib.util.find_spec("tensorflow") is None:
        sys.exit(f"{sys.executable} has no TensorFlow: see this script's docstring")
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    settings = {"RUNYARD_LOCAL_ISOLATION": args.isolation}
    with server_and_home(settings) as (client, _home):
        for run in range(args.runs):
            for instances in (1, 2):
                for how in ("runyard", "direct"):
                    if how == "runyard":
                        figures = through_runyard(client, instances, args.steps, run)
                    else:
                        figures = directly(instances, args.steps)
                    results.setdefault((how, instances), []).append(figures)
                    print(
                        f"run {run + 1}, {instances} instance(s), {how}: first step after "
                        f"{figures[0]:.2f} s, {figures[1]:.1f} steps/s",
                        flush=True,
                    )
    print(f"\nMedians of {args.runs} runs, {args.steps} steps each ({args.isolation} isolation):")
    print(f"  {'':<26}{'first step after':>18}{'steps/s':>10}")
    for (how, instances), runs in results.items():
        first = statistics.median(f[0] for f in runs)
        rate = statistics.median(f[1] for f in runs)
        label = f"{instances} instance(s), {how}"
        print(f"  {label:<26}{first:>16.2f} s{rate:>10.1f}")


if __name__ == "__main__":
    main()
