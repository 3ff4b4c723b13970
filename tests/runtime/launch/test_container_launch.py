"""How the runtime starts a custom container (runtime.launch.container): the engine's exact
arguments, the container's environment and limits, and the reasons it gives when the
engine itself could not start the container. (tests/e2e/test_custom_containers.py runs
them with podman.)"""

from __future__ import annotations

import dataclasses
import itertools
import json
import resource
import sys
from pathlib import Path

import pytest

from contract.instance_config import InstanceConfig, load
from runtime.launch import container, container_users
from runtime.reporting.reporter import LogShipper
from runtime.train import Trainer
from tests.instances import launch_request, write_instances

IMAGE = "registry.example.com/team/train:7"


def _config(tmp_path: Path, **changes: object) -> InstanceConfig:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('x')\n")
    request = launch_request(source, instance_count=2, environment={"MY_SETTING": "on"})
    base = write_instances(tmp_path / "job", request)["algo-2"]
    config = load(base)
    return dataclasses.replace(
        config,
        container_image=IMAGE,
        container_engine=("podman", "--runtime", "runc"),
        network_namespace="/run/netns/runyard-job-algo-2",
        host_addresses={"algo-1": "10.213.0.2", "algo-2": "10.213.0.3"},
        **changes,
    )


def test_the_engine_runs_the_image_as_the_instance_on_its_network(tmp_path: Path) -> None:
    config = _config(tmp_path)
    env_file = tmp_path / "container.env"
    argv = container.run_arguments(config, env_file)
    name = f"runyard-{config.job_id}-algo-2-0"
    assert argv[:4] == ["run", "--rm", "--replace", "--name"]
    assert argv[4] == name
    pairs = dict(zip(argv[5:-2:2], argv[6:-1:2], strict=False))
    assert pairs["--label"] == "runyard.host=algo-2"
    assert f"runyard.job-id={config.job_id}" in argv
    assert pairs["--hostname"] == "algo-2"
    assert pairs["--env-file"] == str(env_file)
    assert pairs["--network"] == "ns:/run/netns/runyard-job-algo-2"
    # Its /etc/hosts is the instance's own, in place of the engine's (runtime.linux.etc_hosts).
    volumes = [argv[i + 1] for i, word in enumerate(argv) if word == "--volume"]
    assert volumes == [
        f"{config.paths.base}:/opt/ml",
        f"{config.paths.base}/.runyard/container-hosts:/etc/hosts",
    ]
    assert "--add-host" not in argv
    assert argv[-2:] == [IMAGE, "train"]


def test_the_container_runs_without_capabilities_as_no_one_of_the_machines(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    users = container_users.ContainerUsers(root=2_147_483_648, said="for the test")
    argv = container.run_arguments(config, tmp_path / "env", users)
    pairs = list(itertools.pairwise(argv))
    assert ("--cap-drop", "ALL") in pairs
    assert "--cap-add" not in argv
    assert ("--security-opt", "no-new-privileges") in pairs
    assert ("--uidmap", "0:2147483648:65536") in pairs
    assert ("--gidmap", "0:2147483648:65536") in pairs
    # Where the container's users cannot be mapped: no mapping, no capabilities still.
    unmapped = container_users.ContainerUsers(root=None, said="for the test")
    argv = container.run_arguments(config, tmp_path / "env", unmapped)
    assert ("--cap-drop", "ALL") in list(itertools.pairwise(argv))
    assert "--uidmap" not in argv


@dataclasses.dataclass
class Machine:
    """The files the choice of a container's users reads, as the test writes them."""

    subuid: Path
    subgid: Path
    podman_conf: Path
    podman_conf_d: Path
    max_user_namespaces: Path

    def podman_sets(self, sysctls: list[str] | None) -> None:
        """A drop-in that sets podman's default_sysctls (None: none does)."""
        self.podman_conf_d.mkdir(exist_ok=True)
        dropin = self.podman_conf_d / "runyard.conf"
        if sysctls is None:
            dropin.unlink(missing_ok=True)
        else:
            dropin.write_text(f"[containers]\ndefault_sysctls = {json.dumps(sysctls)}\n")


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Machine:
    """A machine with user namespaces and podman told to set no network sysctls."""
    found = Machine(
        tmp_path / "subuid",
        tmp_path / "subgid",
        tmp_path / "containers.conf",
        tmp_path / "containers.conf.d",
        tmp_path / "max_user_namespaces",
    )
    monkeypatch.setattr(container_users, "SUBUID", found.subuid)
    monkeypatch.setattr(container_users, "SUBGID", found.subgid)
    monkeypatch.setattr(
        container_users, "PODMAN_CONFIGURATION", (found.podman_conf, found.podman_conf_d)
    )
    monkeypatch.setattr(container_users, "MAX_USER_NAMESPACES", found.max_user_namespaces)
    monkeypatch.delenv("CONTAINERS_CONF", raising=False)
    found.max_user_namespaces.write_text("63000\n")
    found.podman_conf.write_text(
        '[containers]\ndefault_sysctls = ["net.ipv4.ping_group_range=0 0"]\n'
    )
    found.podman_sets([])
    return found


def test_a_jobs_container_ids_come_from_the_range_set_aside_for_containers(
    machine: Machine,
) -> None:
    for listing in (machine.subuid, machine.subgid):
        listing.write_text("alice:100000:65536\ncontainers:3000000:655360\n")
    users = container_users.for_job(("podman", "--runtime", "runc"), "job-a")
    assert users.root is not None
    assert 3_000_000 <= users.root <= 3_000_000 + 655_360 - 65_536
    assert (users.root - 3_000_000) % 65_536 == 0
    assert users.said.startswith(f"The container's users are the machine's ids {users.root} to")
    assert "set aside for containers" in users.said
    # The same on every instance of the job; another job's elsewhere in the range.
    assert container_users.for_job(("/usr/bin/podman",), "job-a") == users
    others = {container_users.for_job(("podman",), f"job-{n}").root for n in range(20)}
    assert len(others) > 1


@pytest.mark.parametrize(
    ("subuid", "subgid"),
    [
        (None, None),
        ("", ""),
        ("containers:3000000:1000\n", "containers:3000000:1000\n"),  # too few for one
        ("containers:3000000:655360\n", "containers:4000000:655360\n"),  # not shared
    ],
    ids=["no-files", "empty", "too-few", "not-shared"],
)
def test_without_a_range_for_containers_the_ids_are_runyards_own_and_the_log_says_so(
    machine: Machine, subuid: str | None, subgid: str | None
) -> None:
    for listing, text in ((machine.subuid, subuid), (machine.subgid, subgid)):
        if text is not None:
            listing.write_text(text)
    users = container_users.for_job(("podman",), "job-a")
    assert users.root is not None
    assert users.root >= container_users.OWN_START
    assert users.root + 65_536 <= 2**32 - 1  # 4294967295 is no id
    assert "Runyard's own range" in users.said
    assert "set no range aside for containers" in users.said


@pytest.mark.parametrize(
    ("engine", "change", "why"),
    [
        (("docker",), None, "docker maps no users per container"),
        (("podman",), "no-user-namespaces", "this kernel allows no user namespaces"),
        (
            ("podman",),
            "podman-sets-network-sysctls",
            "podman sets net.ipv4.ping_group_range=0 0 in every container",
        ),
        (
            ("podman",),
            "podman-default",  # no drop-in: podman's own configuration's
            "podman sets net.ipv4.ping_group_range=0 0 in every container",
        ),
    ],
    ids=["docker", "no-user-namespaces", "network-sysctls", "podman-default"],
)
def test_where_users_cannot_be_mapped_the_containers_root_is_the_machines_and_the_log_says_why(
    machine: Machine, engine: tuple[str, ...], change: str | None, why: str
) -> None:
    if change == "no-user-namespaces":
        machine.max_user_namespaces.write_text("0\n")
    elif change == "podman-sets-network-sysctls":
        machine.podman_sets(["kernel.msgmax=65536", "net.ipv4.ping_group_range=0 0"])
    elif change == "podman-default":
        machine.podman_sets(None)
    users = container_users.for_job(engine, "job-a")
    assert users.root is None
    assert users.arguments() == []
    assert users.said.startswith(
        "The container's root is the machine's root, without capabilities: "
    )
    assert why in users.said


def test_podman_reads_only_containers_conf_where_it_is_set(
    machine: Machine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = tmp_path / "chosen.conf"
    chosen.write_text('[containers]\ndefault_sysctls = ["net.core.somaxconn=1024"]\n')
    monkeypatch.setenv("CONTAINERS_CONF", str(chosen))
    assert container_users.for_job(("podman",), "job-a").root is None
    chosen.write_text('[engine]\nruntime = "runc"\n')  # podman's own default then
    assert container_users.for_job(("podman",), "job-a").root is None
    chosen.write_text("[containers]\ndefault_sysctls = []\n")
    assert container_users.for_job(("podman",), "job-a").root is not None


def test_the_container_gets_an_etc_hosts_of_the_instances_own(tmp_path: Path) -> None:
    config = dataclasses.replace(_config(tmp_path), container_engine=(sys.executable,))
    container.plan(config, {"SM_CURRENT_HOST": "algo-2"}, None)
    written = (config.paths.base / ".runyard" / "container-hosts").read_text().splitlines()
    # Both ways, the IPv4-mapped forms too, and nothing of this machine's own file.
    assert written == [
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        "10.213.0.2\talgo-1",
        "10.213.0.3\talgo-2",
        "::ffff:127.0.0.1\tlocalhost.ipv4-mapped",
        "::ffff:10.213.0.2\talgo-1.ipv4-mapped",
        "::ffff:10.213.0.3\talgo-2.ipv4-mapped",
    ]


def test_limits_are_the_instances_own_within_what_podman_may_give(tmp_path: Path) -> None:
    argv = container.run_arguments(_config(tmp_path), tmp_path / "env")
    limits = [argv[i + 1] for i, word in enumerate(argv) if word == "--ulimit"]
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    processes = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    assert limits == [
        f"nofile={min(files, container.OPEN_FILES)}:{min(files, container.OPEN_FILES)}",
        f"nproc={min(processes, 32768)}:{min(processes, 32768)}",
    ]


def test_a_container_entrypoint_replaces_train(tmp_path: Path) -> None:
    config = _config(tmp_path)
    spec = dataclasses.replace(
        config.spec, container_entrypoint=("/bin/bash",), container_arguments=("-c", "echo hi")
    )
    config = dataclasses.replace(config, spec=spec)
    argv = container.run_arguments(config, tmp_path / "env")
    assert argv[argv.index("--entrypoint") + 1] == '["/bin/bash"]'
    assert argv[-3:] == [IMAGE, "-c", "echo hi"]


def test_the_container_gets_the_jobs_variables_never_the_runtimes(tmp_path: Path) -> None:
    config = _config(tmp_path)
    env = container.container_environment(
        config, {"MY_SETTING": "on", "RUNYARD_JOB_TOKEN": "secret", "SM_CURRENT_HOST": "algo-2"}
    )
    assert env == {
        "MY_SETTING": "on",
        "SM_CURRENT_HOST": "algo-2",
        "SAGEMAKER_PROGRAM": "train.py",
        "SAGEMAKER_SUBMIT_DIRECTORY": "/opt/ml/code",
    }
    env_file = tmp_path / "container.env"
    container.write_env_file(env_file, env)
    assert env_file.stat().st_mode & 0o777 == 0o600
    assert env_file.read_text().splitlines()[0] == "MY_SETTING=on"
    with pytest.raises(container.ContainerSetupError, match="MULTI holds a line break"):
        container.write_env_file(env_file, {"MULTI": "a\nb"})


@pytest.mark.parametrize(
    ("code", "tail", "reason"),
    [
        (
            125,
            ["Error: localhost/x:1: image not known"],
            "CannotStartContainerError: podman could not start the container: "
            "Error: localhost/x:1: image not known",
        ),
        (126, ["Error: OCI runtime error: crun: cgroups in hybrid mode"], "CannotStart"),
        (1, ["Error: in the script's own words"], None),  # the container's own exit
        (125, ["Traceback (most recent call last):"], None),
    ],
)
def test_an_engine_that_could_not_start_the_container_is_told_from_its_exit(
    code: int, tail: list[str], reason: str | None
) -> None:
    found = container.engine_failure("podman", code, tail)
    if reason is None:
        assert found is None
    else:
        assert (found or "").startswith(reason), found


def test_the_container_reaches_the_jobs_credentials_and_s3_through_the_runtimes_relay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The relay listens in the instance's network, which the container joins: the
    container is told where, and nothing else of the runtime's own variables."""
    relayed = {
        "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://127.0.0.1:41000/credentials",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN": "relay-token",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_ENDPOINT_URL": "http://s3.example.com",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }
    for name, value in {**relayed, "RUNYARD_JOB_TOKEN": "secret", "DATABASE": "x"}.items():
        monkeypatch.setenv(name, value)
    config = dataclasses.replace(_config(tmp_path), container_engine=("true",))
    trainer = Trainer(config, None, LogShipper(None, echo=False))
    trainer._container_plan(0, 1)
    lines = (config.paths.base / container.ENV_FILE).read_text().splitlines()
    given = dict(line.split("=", 1) for line in lines)
    assert {name: given.get(name) for name in relayed} == relayed
    assert "RUNYARD_JOB_TOKEN" not in given
    assert "DATABASE" not in given
