"""What each instance starts for each distribution mode (the processes, their argv and env)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contract.instance_config import InstanceConfig, load
from runtime.launch import plan, tf_config
from runtime.launch.mpi import COMPAT_DIR
from tests.instances import launch_request, write_instances


def _configs(
    tmp_path: Path, addresses: dict[str, str] | None = None, **spec: Any
) -> dict[str, InstanceConfig]:
    source = tmp_path / "src"
    source.mkdir(parents=True, exist_ok=True)
    (source / "train.py").write_text("")
    request = launch_request(source, instance_count=2, **spec)
    bases = write_instances(tmp_path / "job", request, master_port=29400)
    configs = {host: load(base) for host, base in bases.items()}
    if addresses:  # as on a cluster, where every instance has an address of its own
        configs = {
            host: InstanceConfig(**{**config.__dict__, "host_addresses": addresses})
            for host, config in configs.items()
        }
    return configs


CLUSTER = {"algo-1": "10.0.0.1", "algo-2": "10.0.0.2"}


def test_parameter_server_tf_config_is_sagemakers(tmp_path: Path) -> None:
    configs = _configs(tmp_path, CLUSTER, framework="tensorflow")
    cluster = {
        "master": ["algo-1:2222"],
        "ps": ["algo-1:2223", "algo-2:2223"],
        "worker": ["algo-2:2222"],
    }
    assert tf_config.parameter_server(configs["algo-1"], ps_task=False) == {
        "cluster": cluster,
        "environment": "cloud",
        "task": {"index": 0, "type": "master"},
    }
    assert tf_config.parameter_server(configs["algo-2"], ps_task=False)["task"] == {
        "index": 0,
        "type": "worker",
    }
    assert tf_config.parameter_server(configs["algo-2"], ps_task=True)["task"] == {
        "index": 1,
        "type": "ps",
    }
    assert tf_config.multi_worker_mirrored(configs["algo-2"]) == {
        "cluster": {"worker": ["algo-1:8890", "algo-2:8890"]},
        "environment": "cloud",
        "task": {"index": 1, "type": "worker"},
    }


def test_tf_config_on_one_machine_gives_every_task_a_port_of_its_own(tmp_path: Path) -> None:
    config = _configs(tmp_path, framework="tensorflow")["algo-1"]
    cluster = tf_config.parameter_server(config, ps_task=False)["cluster"]
    endpoints = cluster["master"] + cluster["worker"] + cluster["ps"]
    assert endpoints == ["127.0.0.1:29401", "127.0.0.1:29402", "127.0.0.1:29403", "127.0.0.1:29404"]


def test_tensorflow_parameter_server_runs_a_ps_task_beside_the_script(tmp_path: Path) -> None:
    configs = _configs(
        tmp_path,
        CLUSTER,
        framework="tensorflow",
        distribution={"parameter_server": {"enabled": True}},
    )
    launch = plan(configs["algo-2"], ["python", "train.py"], {"PATH": "/bin"}, num_gpus=0)
    ps, script, wait = launch.specs
    assert ps.argv[-1] == "runtime.launch.tensorflow_ps"
    assert ps.auxiliary
    assert json.loads(ps.env["TF_CONFIG"])["task"] == {"index": 1, "type": "ps"}
    assert script.argv == ["python", "train.py"]
    assert not script.auxiliary
    assert not script.afterwards
    assert json.loads(script.env["TF_CONFIG"])["task"] == {"index": 0, "type": "worker"}
    # As SageMaker's container: the ps serves on until the master's task is done.
    assert wait.argv[-2:] == ["runtime.launch.tensorflow_master", "algo-1:2222"]
    assert wait.afterwards
    # The master's instance ends its ps once its own script is done.
    master = plan(configs["algo-1"], ["python", "train.py"], {}, num_gpus=0)
    assert [spec.argv[-1] for spec in master.specs] == ["runtime.launch.tensorflow_ps", "train.py"]


def test_tensorflow_parameter_server_on_one_instance_runs_the_script_alone(
    tmp_path: Path,
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("")
    request = launch_request(
        source, framework="tensorflow", distribution={"parameter_server": {"enabled": True}}
    )
    [base] = write_instances(tmp_path / "job", request, master_port=29400).values()
    launch = plan(load(base), ["python", "train.py"], {"PATH": "/bin"}, num_gpus=0)
    # As on SageMaker: no parameter servers and no TF_CONFIG for a single instance.
    assert [(spec.argv, spec.env) for spec in launch.specs] == [
        (["python", "train.py"], {"PATH": "/bin"})
    ]


def test_pytorch_parameter_server_runs_a_server_and_the_workers(tmp_path: Path) -> None:
    configs = _configs(tmp_path, distribution={"parameter_server": {"enabled": True}})
    launch = plan(configs["algo-2"], ["python", "train.py"], {}, num_gpus=2)
    server, *workers = launch.specs
    assert server.argv[-2:] == ["-m", "libraries.parameter_server"]
    assert (server.env["RUNYARD_PS_ROLE"], server.env["RUNYARD_PS_RANK"]) == ("server", "1")
    assert [
        (w.env["RUNYARD_PS_ROLE"], w.env["RUNYARD_PS_RANK"], w.env["LOCAL_RANK"]) for w in workers
    ] == [
        ("worker", "4", "0"),
        ("worker", "5", "1"),
    ]
    assert {s.env["RUNYARD_PS_WORLD_SIZE"] for s in launch.specs} == {"6"}
    assert {s.env["RUNYARD_PS_NUM_SERVERS"] for s in launch.specs} == {"2"}
    assert {s.env["MASTER_PORT"] for s in launch.specs} == {"29400"}


def test_mpirun_on_the_first_instance_only(tmp_path: Path) -> None:
    configs = _configs(
        tmp_path,
        distribution={
            "mpi": {
                "enabled": True,
                "processes_per_host": 3,
                "custom_mpi_options": "-x NCCL_DEBUG=INFO",
            }
        },
        environment={"MY_FLAG": "1"},
    )
    configs = {
        host: InstanceConfig(**{**config.__dict__, "launch_agent": ("agent", "--hosts", "f.json")})
        for host, config in configs.items()
    }
    env = {"PATH": "/bin", "SM_HOSTS": "[]", "RUNYARD_HOST": "algo-1"}
    script_env = {**env, "MY_FLAG": "1"}
    master = plan(configs["algo-1"], ["python", "train.py"], env, script_env=script_env, num_gpus=0)
    (mpirun,) = master.specs
    argv = mpirun.argv
    assert argv[argv.index("--host") + 1] == "algo-1:3,algo-2:3"
    assert argv[argv.index("-np") + 1] == "6"
    assert argv[argv.index("plm_ssh_agent") + 1] == "agent --hosts f.json"
    forwarded = [argv[i + 1] for i, part in enumerate(argv) if part == "-x"]
    assert {"PATH", "SM_HOSTS", "MASTER_ADDR", "MASTER_PORT"} <= set(forwarded)
    assert "RUNYARD_HOST" not in forwarded  # each instance's identity comes from its agent
    # The job's own variable passes mpirun under Runyard's name, for the rank's shim.
    assert "MY_FLAG" not in mpirun.env
    assert mpirun.env["RUNYARD_JOB_VAR_MY_FLAG"] == "1"
    assert "RUNYARD_JOB_VAR_MY_FLAG" in forwarded
    assert argv[-4:] == ["-m", "runtime.launch.mpi_rank", "python", "train.py"]
    assert argv[argv.index("NCCL_DEBUG=INFO") - 1] == "-x"
    assert "self,tcp" not in argv  # separate machines keep shared memory inside each
    worker = plan(configs["algo-2"], ["python", "train.py"], env, num_gpus=0)
    assert worker.waits_for_mpi
    assert worker.specs == []


def test_instances_on_one_machine_talk_over_tcp_only(tmp_path: Path) -> None:
    # Shared-memory segments are named per hostname and local rank: two instances on one
    # machine would map the same one.
    config = _configs(tmp_path, distribution={"mpi": {"enabled": True}})["algo-1"]
    config = InstanceConfig(
        **{**config.__dict__, "launch_agent": ("agent",), "shared_machine": True}
    )
    (mpirun,) = plan(config, ["python", "train.py"], {}, num_gpus=0).specs
    argv = mpirun.argv
    assert argv[argv.index("btl") - 1 : argv.index("btl") + 2] == ["--mca", "btl", "self,tcp"]


@pytest.mark.parametrize(
    "distribution",
    [
        {"mpi": {"enabled": True}},
        {"pytorchddp": {"enabled": True}},
        {"smdistributed": {"dataparallel": {"enabled": True}}},
    ],
    ids=["mpi", "pytorchddp", "smdistributed.dataparallel"],
)
def test_every_mpi_mode_on_one_machine_leaves_out_the_per_node_collectives(
    tmp_path: Path, distribution: dict[str, Any]
) -> None:
    # Instances on one machine share its host name, so Open MPI's ranks disagree on which
    # of them share a node, and coll/han (which splits the world by node) would hang.
    config = _configs(tmp_path, distribution=distribution)["algo-1"]
    config = InstanceConfig(**{**config.__dict__, "launch_agent": ("agent",)})
    for shared in (True, False):
        on_one = InstanceConfig(**{**config.__dict__, "shared_machine": shared})
        (mpirun,) = plan(on_one, ["python", "train.py"], {}, num_gpus=0).specs
        options = list(zip(mpirun.argv, mpirun.argv[1:], mpirun.argv[2:], strict=False))
        assert (("--mca", "coll", "^han") in options) is shared, mpirun.argv
        assert (("--mca", "btl", "self,tcp") in options) is shared, mpirun.argv


def test_ranks_of_instances_on_one_machine_find_the_first_instances_credentials_relay(
    tmp_path: Path,
) -> None:
    """They share its loopback, and their launch agents have no relay of their own to
    name; instances on machines (or networks) of their own each have theirs."""
    config = _configs(tmp_path, distribution={"mpi": {"enabled": True}})["algo-1"]
    config = InstanceConfig(**{**config.__dict__, "launch_agent": ("agent",)})
    relay = {
        "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://127.0.0.1:41000/credentials",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN": "relay-token",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        "AWS_CONFIG_FILE": "/dev/null",
    }
    for shared in (True, False):
        on_one = InstanceConfig(**{**config.__dict__, "shared_machine": shared})
        (mpirun,) = plan(on_one, ["python", "train.py"], relay, num_gpus=0).specs
        pairs = set(zip(mpirun.argv, mpirun.argv[1:], strict=False))
        assert all((("-x", name) in pairs) is shared for name in relay), mpirun.argv


def test_data_parallel_jobs_see_the_compatibility_package(tmp_path: Path) -> None:
    configs = _configs(
        tmp_path, distribution={"smdistributed": {"dataparallel": {"enabled": True}}}
    )
    configs = {
        host: InstanceConfig(**{**config.__dict__, "launch_agent": ("agent",)})
        for host, config in configs.items()
    }
    (mpirun,) = plan(
        configs["algo-1"], ["python", "train.py"], {"PYTHONPATH": "/code"}, num_gpus=0
    ).specs
    assert mpirun.env["PYTHONPATH"] == f"{COMPAT_DIR}:/code"
    plain = plan(
        _configs(tmp_path / "other")["algo-1"],
        ["python", "train.py"],
        {"PYTHONPATH": "/code"},
        num_gpus=0,
    )
    assert plain.specs[0].env["PYTHONPATH"] == "/code"


@pytest.mark.parametrize(
    ("env", "threads"),
    [
        ({"SM_NUM_CPUS": "1"}, "2"),
        ({"SM_NUM_CPUS": "1", "TF_NUM_INTEROP_THREADS": "8"}, "8"),
        ({"SM_NUM_CPUS": "4"}, None),
    ],
)
def test_tensorflow_processes_get_two_inter_op_threads_at_least(
    tmp_path: Path, env: dict[str, str], threads: str | None
) -> None:
    for distribution in (
        {"parameter_server": {"enabled": True}},
        {"multi_worker_mirrored_strategy": {"enabled": True}},
    ):
        configs = _configs(
            tmp_path / next(iter(distribution)),
            CLUSTER,
            framework="tensorflow",
            distribution=distribution,
        )
        launch = plan(configs["algo-2"], ["python", "train.py"], env, num_gpus=0)
        tf_processes = [spec for spec in launch.specs if "TF_CONFIG" in spec.env]
        assert tf_processes
        assert {spec.env.get("TF_NUM_INTEROP_THREADS") for spec in tf_processes} == {threads}


# The job's own variables, as the runtime hands them to a launcher: in the script's
# environment only.
JOB = {"LD_PRELOAD": "/job/hook.so", "JOB_MARKER": "on"}


@pytest.mark.parametrize(
    ("framework", "distribution"),
    [
        ("pytorch", {}),
        ("pytorch", {"torch_distributed": {"enabled": True}}),
        ("pytorch", {"parameter_server": {"enabled": True}}),
        ("tensorflow", {"parameter_server": {"enabled": True}}),
        ("tensorflow", {"multi_worker_mirrored_strategy": {"enabled": True}}),
    ],
    ids=["script", "torch_distributed", "pytorch-ps", "tensorflow-ps", "multi_worker"],
)
def test_only_the_processes_that_run_the_script_get_the_jobs_variables(
    tmp_path: Path, framework: str, distribution: dict[str, Any]
) -> None:
    configs = _configs(
        tmp_path, CLUSTER, framework=framework, distribution=distribution, environment=JOB
    )
    env = {"PATH": "/bin"}
    launch = plan(
        configs["algo-2"], ["python", "train.py"], env, script_env={**env, **JOB}, num_gpus=2
    )
    scripts = [spec for spec in launch.specs if spec.argv == ["python", "train.py"]]
    helpers = [spec for spec in launch.specs if spec.argv != ["python", "train.py"]]
    assert scripts
    assert all(spec.env.items() >= JOB.items() for spec in scripts)
    # Runyard's parameter servers and the wait for the master are the runtime's helpers.
    assert not [spec.argv for spec in helpers if JOB.keys() & spec.env.keys()]


def test_mpirun_carries_the_jobs_variables_past_itself_to_the_ranks(tmp_path: Path) -> None:
    job = {"LD_PRELOAD": "/job/hook.so", "API_TOKEN": "s3cret", "NCCL_DEBUG": "WARN"}
    job |= {"PYTHONPATH": "/job/lib", "OMP_NUM_THREADS": "4", "GLOO_SOCKET_IFNAME": "eth1"}
    options = "-x OMP_NUM_THREADS=2 -x GLOO_SOCKET_IFNAME -x NCCL_SOCKET_IFNAME"
    data_parallel = {"enabled": True, "custom_mpi_options": options}
    distribution = {"smdistributed": {"dataparallel": data_parallel}}
    config = _configs(tmp_path, distribution=distribution, environment=job)["algo-1"]
    config = InstanceConfig(**{**config.__dict__, "launch_agent": ("agent",)})
    env = {"PATH": "/bin", "PYTHONPATH": "/code", "NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "lo"}
    script_env = {**env, **job, "PYTHONPATH": "/code:/job/lib"}
    (mpirun,) = plan(config, ["python", "train.py"], env, script_env=script_env, num_gpus=0).specs
    # mpirun runs as if the job had set nothing.
    assert {name: mpirun.env.get(name) for name in job} == {
        **dict.fromkeys(job),
        "PYTHONPATH": f"{COMPAT_DIR}:/code",
        "NCCL_DEBUG": "WARN",
    }
    carried = {
        name.removeprefix("RUNYARD_JOB_VAR_"): value
        for name, value in mpirun.env.items()
        if name.startswith("RUNYARD_JOB_VAR_")
    }
    assert carried == {
        "LD_PRELOAD": "/job/hook.so",
        "API_TOKEN": "s3cret",
        # The job's own, though mpirun's is the same: every rank gets it, wherever it runs.
        "NCCL_DEBUG": "WARN",
        # As the script sees it, the library its mode offers first.
        "PYTHONPATH": f"{COMPAT_DIR}:/code:/job/lib",
        # A bare -x of the job's variable is left to the shim, which sets the job's value.
        "GLOO_SOCKET_IFNAME": "eth1",
        # Not OMP_NUM_THREADS: the job's options set it for the ranks with -x, which wins.
    }
    argv = mpirun.argv
    forwarded = [argv[i + 1] for i, part in enumerate(argv) if part == "-x"]
    assert {f"RUNYARD_JOB_VAR_{name}" for name in carried} <= set(forwarded)
    assert "GLOO_SOCKET_IFNAME" not in forwarded
    assert {"OMP_NUM_THREADS=2", "NCCL_SOCKET_IFNAME"} <= set(forwarded)
    # Forwarded by name: no value of the job's is on the command line, which is logged.
    assert not [word for word in argv if "s3cret" in word or "/job/" in word]
