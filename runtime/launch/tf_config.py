"""TF_CONFIG for TensorFlow scripts, built as SageMaker's TensorFlow container builds it.

parameter_server: algo-1 is the ``master``, the other hosts are ``worker``s, and every host
also runs a ``ps`` task; multi_worker_mirrored_strategy: every host is a ``worker``.
(``master`` is TensorFlow 1's name; TensorFlow 2's strategies call that task ``chief``,
and a script for them renames it, as on SageMaker.)

SageMaker writes ``<host>:2222`` (tasks) and ``<host>:2223`` (parameter servers), or
``<host>:8890`` for multi_worker_mirrored_strategy, since its instances are separate
machines reachable by name. Where hosts share an address (the local
backend puts them all on loopback), names do not resolve and fixed ports would collide, so
each host gets the instance's address and ports of its own above the job's master port;
the structure and the order of the entries are SageMaker's.
"""

from __future__ import annotations

import json
from typing import Any

from contract import variables
from contract.instance_config import InstanceConfig
from runtime.launch.context import LaunchContext
from runtime.launch.workers import Launch, WorkerSpec

TASK_PORT = 2222
PS_PORT = 2223
MULTI_WORKER_PORT = 8890
# TensorFlow sizes its inter-op thread pool by the CPUs it may use. With one (a local
# instance's share of a small machine), a parameter-server worker hangs on the first step
# the chief sends it: the step holds the pool's only thread while it waits for work that
# needs another.
MIN_INTEROP_THREADS = 2


def _endpoints(
    config: InstanceConfig, hosts: list[str], ps: bool, port: int = TASK_PORT
) -> list[str]:
    addresses = [config.host_addresses.get(host, host) for host in config.hosts]
    if len(set(addresses)) == len(addresses):
        return [f"{host}:{PS_PORT if ps else port}" for host in hosts]
    count = len(config.hosts)
    first = config.master_port + 1 + (count if ps else 0)
    return [
        f"{config.host_addresses.get(host, host)}:{first + config.hosts.index(host)}"
        for host in hosts
    ]


def environment(env: dict[str, str], tf_config: dict[str, Any]) -> dict[str, str]:
    """A TensorFlow process's environment: TF_CONFIG, and enough inter-op threads (unless
    the job chose its own number)."""
    tf_env = {**env, "TF_CONFIG": json.dumps(tf_config)}
    if int(env.get(variables.SM_NUM_CPUS, MIN_INTEROP_THREADS)) < MIN_INTEROP_THREADS:
        tf_env.setdefault("TF_NUM_INTEROP_THREADS", str(MIN_INTEROP_THREADS))
    return tf_env


def parameter_server(config: InstanceConfig, *, ps_task: bool) -> dict[str, Any]:
    hosts = config.hosts
    masters, workers = hosts[:1], hosts[1:]
    cluster = {
        "master": _endpoints(config, masters, ps=False),
        "ps": _endpoints(config, hosts, ps=True),
        "worker": _endpoints(config, workers, ps=False),
    }
    if ps_task:
        task = {"index": hosts.index(config.current_host), "type": "ps"}
    elif config.current_host == masters[0]:
        task = {"index": 0, "type": "master"}
    else:
        task = {"index": workers.index(config.current_host), "type": "worker"}
    return {"cluster": cluster, "environment": "cloud", "task": task}


def multi_worker_mirrored(config: InstanceConfig) -> dict[str, Any]:
    return {
        "cluster": {"worker": _endpoints(config, config.hosts, ps=False, port=MULTI_WORKER_PORT)},
        "environment": "cloud",
        "task": {"index": config.hosts.index(config.current_host), "type": "worker"},
    }


def plan_multi_worker(context: LaunchContext) -> Launch:
    tf_env = environment(context.script_env, multi_worker_mirrored(context.config))
    return Launch([WorkerSpec(context.entry, tf_env, context.code)])
