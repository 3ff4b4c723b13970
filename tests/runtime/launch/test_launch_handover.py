"""mpirun's launch agents wait for the instance they start a daemon on, and a daemon that
cannot be started is Runyard's failure, not the script's: real agent processes and a real
runtime under mpirun, with an instance that is never ready."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from contract import agent_hosts, variables
from contract.agent_hosts import AgentHost
from contract.instance_config import Placement
from provisioning.instance_files import instance_files
from runtime.launch import handover
from tests.instances import launch_request, start_runtime

AGENT = [sys.executable, "-m", "runtime.launch.local_agent"]


def _hosts_file(tmp_path: Path) -> tuple[Path, Path]:
    """A hosts file naming algo-2, whose directory its runtime has not filled yet."""
    base = tmp_path / "algo-2"
    hosts = tmp_path / "hosts.json"
    agent_hosts.write(hosts, {"algo-2": AgentHost(base=str(base), cwd=str(base / "code"))})
    return hosts, base


def test_the_local_agent_waits_for_its_instance_to_be_ready(tmp_path: Path) -> None:
    hosts, base = _hosts_file(tmp_path)
    agent = subprocess.Popen(
        [*AGENT, str(hosts), "algo-2", "pwd"],
        env={variables.AGENT_CONNECT_TIMEOUT: "60", variables.BASE_DIR: str(tmp_path / "algo-1")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)
    assert agent.poll() is None  # the code is not there yet: nothing is started
    (base / "code").mkdir(parents=True)
    handover.mark_ready(base)
    out, err = agent.communicate(timeout=30)
    assert (agent.returncode, out.strip()) == (0, str(base / "code")), err
    assert handover.failures(tmp_path / "algo-1") == []


def test_a_local_agent_whose_instance_never_gets_ready_says_so_to_the_caller(
    tmp_path: Path,
) -> None:
    hosts, _ = _hosts_file(tmp_path)
    caller = tmp_path / "algo-1"
    agent = subprocess.run(
        [*AGENT, str(hosts), "algo-2", "true"],
        env={variables.AGENT_CONNECT_TIMEOUT: "0.5", variables.BASE_DIR: str(caller)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert agent.returncode == 255  # as ssh answers for a host it cannot reach
    assert handover.failures(caller) == ["algo-2 was not ready for mpirun's daemon within 0.5 s"]


def test_a_daemon_that_cannot_be_started_is_runyards_failure_not_the_scripts(
    tmp_path: Path,
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('never runs')\n")
    request = launch_request(source, instance_count=2, distribution={"mpi": {"enabled": True}})
    job = tmp_path / "job"
    hosts = job / "hosts.json"
    for host in request.hosts:
        placement = Placement(
            master_addr=request.hosts[0],
            master_port=29455,
            launch_agent=(*AGENT, str(hosts)),
            shared_machine=True,
        )
        files = instance_files(
            request,
            host,
            placement,
            host_addresses=dict.fromkeys(request.hosts, "127.0.0.1"),
            network_interface="lo",
        )
        for relative, content in files.items():
            (job / host / relative).parent.mkdir(parents=True, exist_ok=True)
            (job / host / relative).write_text(content)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    agent_hosts.write(
        hosts,
        {
            host: AgentHost(
                base=str(job / host),
                cwd=str(job / host / "code"),
                env={**env, variables.BASE_DIR: str(job / host)},
            )
            for host in request.hosts
        },
    )
    # algo-2's runtime never starts: its instance never becomes ready.
    runtime = start_runtime(job / "algo-1", **{variables.AGENT_CONNECT_TIMEOUT: "1"})
    output, _ = runtime.communicate(timeout=120)
    failure = (job / "algo-1" / "output" / "failure").read_text()
    assert runtime.returncode != 0, output
    assert failure.startswith(
        "InternalServerError: mpirun could not start its daemon: "
        "algo-2 was not ready for mpirun's daemon within 1 s"
    ), output
    assert "AlgorithmError" not in failure
    assert json.loads((job / "algo-1" / "input/config/runyard.json").read_text())["shared_machine"]
