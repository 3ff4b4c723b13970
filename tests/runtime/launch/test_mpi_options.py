"""custom_mpi_options: an allow-list. Hostile strings are refused over the API naming the
field and the word; what SageMaker users pass is accepted, and runs under real mpirun
merged into Runyard's own command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from contract import mpi_options
from contract.instance_config import InstanceConfig
from runtime.launch import plan
from tests.conftest import job_spec
from tests.runtime.launch.test_launch_plans import _configs

# (options, the word the refusal must name)
HOSTILE = [
    ("-launch-agent /bin/sh", "-launch-agent"),
    ("--launch-agent /bin/sh", "--launch-agent"),
    ("--gmca plm_rsh_agent sh", "--gmca"),
    ("-gmca plm_rsh_agent sh", "-gmca"),
    ("--mca orte_rsh_agent x", "orte_rsh_agent"),
    ("--mca plm_rsh_agent sh", "plm_rsh_agent"),
    ("-mca plm_ssh_agent sh", "plm_ssh_agent"),
    ("--mca=plm_rsh_agent sh", "--mca=plm_rsh_agent"),
    ("--prtemca plm_ssh_agent sh", "--prtemca"),
    ("--pmixmca ptl_base_dir /tmp", "--pmixmca"),
    ("--mca prte_hnp_uri x", "prte_hnp_uri"),
    ("--mca ess_base_jobid 1", "ess_base_jobid"),
    ("--mca mca_param_files /tmp/p.conf", "mca_param_files"),
    ("--mca coll_tuned_dynamic_rules_filename /etc/shadow", "coll_tuned_dynamic_rules_filename"),
    ("--mca mpi_show_mca_params_file /tmp/x", "mpi_show_mca_params_file"),
    ("--mca btl_sm_backing_directory /etc", "btl_sm_backing_directory"),
    ("--mca pml_monitoring_filename /tmp/m", "pml_monitoring_filename"),
    ("--mca hwloc_base_binding_policy core", "hwloc_base_binding_policy"),
    ("--mca btl", "--mca"),
    ("--tune FILE", "--tune"),
    ("--app FILE", "--app"),
    ("-x LD_PRELOAD=/tmp/x.so", "LD_PRELOAD=/tmp/x.so"),
    ("-x LD_LIBRARY_PATH=/tmp", "LD_LIBRARY_PATH=/tmp"),
    ("-x LD_AUDIT=/tmp/a.so", "LD_AUDIT=/tmp/a.so"),
    ("-x PATH=/tmp/bin", "PATH=/tmp/bin"),
    ("-x PYTHONPATH=/tmp/mods", "PYTHONPATH=/tmp/mods"),
    ("-x OMPI_MCA_plm_rsh_agent=sh", "OMPI_MCA_plm_rsh_agent=sh"),
    ("-x PRTE_MCA_plm_ssh_agent=sh", "PRTE_MCA_plm_ssh_agent=sh"),
    ("-x PMIX_MCA_ptl_base_dir=/tmp", "PMIX_MCA_ptl_base_dir=/tmp"),
    ("-x OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_RANK=0"),
    ("-x RUNYARD_JOB_TOKEN=x", "RUNYARD_JOB_TOKEN=x"),
    ("-x=NCCL_DEBUG=INFO", "-x=NCCL_DEBUG=INFO"),
    ("-x 'A=$(id)'", "A=$(id)"),
    ("-x 'A=`id`'", "A=`id`"),
    ("-x 'A=b;c'", "A=b;c"),
    ("-x 'A=b\nc'", "A=b\nc"),
    ("-x 'A=b c'", "A=b c"),
    ("-x", "-x"),
    ("-N 8", "-N"),
    ("-np 8", "-np"),
    ("-n 8", "-n"),
    ("--npernode 2", "--npernode"),
    ("--host algo-1:8", "--host"),
    ("-H algo-9", "-H"),
    ("--hostfile /etc/hosts", "--hostfile"),
    ("--host=algo-3", "--host=algo-3"),
    ("--prefix /tmp/ompi", "--prefix"),
    ("--wdir /tmp", "--wdir"),
    ("--output-filename /tmp/out", "--output-filename"),
    ("--map-by node", "node"),
    ("--map-by ppr:4:node", "ppr:4:node"),
    ("--map-by slot:SPAN", "slot:SPAN"),
    ("--bind-to core:ordered;id", "core:ordered;id"),
    ("-bind-to core", "-bind-to"),
    ("--mca btl_tcp_if_include $(id)", "$(id)"),
    ("--mca btl_tcp_if_include --host", "--host"),
    ("--mca 'unbalanced", "--mca 'unbalanced"),
    ("-verbose /bin/sh -c id", "/bin/sh"),
    ("--allow-run-as-root", "--allow-run-as-root"),
    ("-q", "-q"),
]

ORDINARY = [
    "-verbose",
    "--verbose",
    "-verbose -x NCCL_DEBUG=VERSION",
    "-x NCCL_DEBUG=INFO",
    "-x NCCL_SOCKET_IFNAME",
    "-x NCCL_SOCKET_IFNAME=lo",
    "-x FI_PROVIDER=efa",
    "-x FI_EFA_USE_DEVICE_RDMA=1",
    "-x RDMAV_FORK_SAFE=1",
    "-x NCCL_PROTO=simple -x NCCL_ALGO=Ring",
    "-x OMP_NUM_THREADS=2",
    "-x OMPI_MCA_btl=^openib",
    "--mca btl_vader_single_copy_mechanism none",
    "--mca btl ^openib",
    "--mca pml ob1",
    "-mca pml ob1",
    "--mca btl_tcp_if_include lo",
    "--mca btl_tcp_if_exclude docker0",
    "--mca mpi_warn_on_fork 0",
    "--mca coll ^hcoll",
    "--mca coll_tuned_use_dynamic_rules 1",
    "--mca osc ^ucx",
    "--bind-to none",
    "--bind-to core",
    "--map-by slot",
    "--map-by core",
    "--map-by socket",
    "--report-bindings",
    "--display-map",
]


def _options_of(distribution: dict[str, Any]) -> list[str]:
    return ["distribution", *next(iter(_paths(distribution))), "custom_mpi_options"]


def _paths(tree: dict[str, Any], under: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if "enabled" in tree:
        return [under]
    return [path for key, sub in tree.items() for path in _paths(sub, (*under, key))]


def _distributions(options: str) -> list[dict[str, Any]]:
    return [
        {"mpi": {"enabled": True, "custom_mpi_options": options}},
        {"smdistributed": {"dataparallel": {"enabled": True, "custom_mpi_options": options}}},
    ]


def test_hostile_options_are_refused_naming_the_field_and_the_word(
    api: TestClient, source_dir: Path
) -> None:
    assert len(HOSTILE) >= 45
    wrong = []
    for options, word in HOSTILE:
        for distribution in _distributions(options):
            spec = job_spec(source_dir, distribution=distribution)
            response = api.post("/v1/training-jobs", json=spec)
            detail = response.json()["detail"] if response.status_code == 422 else []
            named = [error for error in detail if error["loc"][1:] == _options_of(distribution)]
            if not named or repr(word) not in named[0]["msg"]:
                wrong.append((options, response.status_code, response.text))
    assert wrong == []
    assert api.get("/v1/training-jobs").json()["items"] == []


def test_what_sagemaker_users_pass_is_accepted(api: TestClient, source_dir: Path) -> None:
    refused = []
    for index, options in enumerate(ORDINARY):
        for which, distribution in enumerate(_distributions(options)):
            spec = job_spec(source_dir, name=f"job-{index}-{which}", distribution=distribution)
            response = api.post("/v1/training-jobs", json=spec)
            if response.status_code != 201:
                refused.append((options, response.text))
    assert refused == []


@pytest.mark.parametrize(
    "variable", ["OMPI_MCA_plm_rsh_agent", "PRTE_MCA_prte_launch_agent", "OMPI_COMM_WORLD_SIZE"]
)
def test_the_environment_holds_open_mpi_variables_to_the_same_rule(
    api: TestClient, source_dir: Path, variable: str
) -> None:
    # The job's environment reaches each rank, whose Open MPI library reads these.
    response = api.post("/v1/training-jobs", json=job_spec(source_dir, environment={variable: "x"}))
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"][:2] == ["body", "environment"]
    allowed = job_spec(source_dir, environment={"OMPI_MCA_btl_tcp_if_exclude": "docker0"})
    assert api.post("/v1/training-jobs", json=allowed).status_code == 201


def _mpirun(tmp_path: Path, options: str, *, shared: bool = False) -> list[str]:
    distribution = {"mpi": {"enabled": True, "custom_mpi_options": options}}
    config = _configs(tmp_path, distribution=distribution)["algo-1"]
    config = InstanceConfig(
        **{**config.__dict__, "launch_agent": ("agent",), "shared_machine": shared}
    )
    env = {"NCCL_SOCKET_IFNAME": "lo", "PATH": "/bin"}
    (spec,) = plan(config, ["python", "train.py"], env, num_gpus=0).specs
    return spec.argv


def _pairs(argv: list[str], option: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == option]


def test_the_jobs_own_choice_replaces_runyards_default(tmp_path: Path) -> None:
    argv = _mpirun(tmp_path, "--bind-to core --map-by socket -x NCCL_SOCKET_IFNAME=eth1")
    assert _pairs(argv, "--bind-to") == ["core"]
    assert _pairs(argv, "--map-by") == ["socket"]
    # Open MPI takes the first -x of a name: Runyard's forwarding gives way.
    assert [x for x in _pairs(argv, "-x") if x.startswith("NCCL_SOCKET_IFNAME")] == [
        "NCCL_SOCKET_IFNAME=eth1"
    ]
    argv = _mpirun(tmp_path / "2", "--mca btl_tcp_if_exclude docker0")
    assert "btl_tcp_if_include" not in argv
    argv = _mpirun(tmp_path / "3", "")
    assert _pairs(argv, "--bind-to") == ["none"]
    assert _pairs(argv, "--map-by") == ["slot"]


def test_instances_on_one_machine_keep_runyards_components(tmp_path: Path) -> None:
    argv = _mpirun(tmp_path, "--mca btl ^openib --mca coll ^hcoll --mca pml ob1", shared=True)
    mca = [argv[i + 1 : i + 3] for i, word in enumerate(argv) if word == "--mca"]
    assert ["btl", "self,tcp"] in mca
    assert ["coll", "^han"] in mca
    assert ["btl", "^openib"] not in mca
    assert ["coll", "^hcoll"] not in mca
    assert ["pml", "ob1"] in mca


def test_a_stored_spec_is_checked_again_on_the_instance(tmp_path: Path) -> None:
    from runtime.launch.mpi import MpiSetupError

    with pytest.raises(MpiSetupError, match="launch-agent"):
        _mpirun(tmp_path, "-launch-agent /bin/sh")


@pytest.mark.parametrize("options", ORDINARY)
def test_ordinary_options_run_under_real_mpirun(tmp_path: Path, options: str) -> None:
    # Runyard's command with the job's options merged in, run for real on this machine:
    # two ranks on one host, reached without the launch agent.
    argv = _mpirun(tmp_path, options)
    host = argv.index("--host")
    argv[host + 1] = "localhost:2"
    argv[argv.index("-np") + 1] = "2"
    agent = argv.index("--prtemca")
    del argv[agent : agent + 3]
    program = argv.index(sys.executable)
    argv[program:] = [sys.executable, "-c", "pass"]
    if "--allow-run-as-root" not in argv:
        argv.insert(1, "--allow-run-as-root")
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, (argv, result.stdout[-2000:], result.stderr[-2000:])


def test_the_rule_is_one_for_both_sides() -> None:
    assert mpi_options.problems("-x NCCL_DEBUG=INFO", ("x",)) == []
    assert mpi_options.parse("--mca pml ob1 -x A")[0].mca_param == "pml"
