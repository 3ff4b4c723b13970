"""The local backend's plan for instances with namespaces of their own (golden), and the
job's private network made and removed for real with iproute2."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioning.base import LaunchError, LaunchRequest
from provisioning.local import network
from provisioning.local.backend import LocalBackend
from service.kit.errors import SpecError, refuse
from tests.instances import launch_request

ENVIRON = {"PATH": "/usr/bin:/bin", "HOME": "/home/u"}


def _request(tmp_path: Path, **spec: object) -> LaunchRequest:
    source = tmp_path / "src"
    source.mkdir(exist_ok=True)
    (source / "train.py").write_text("print('x')\n")
    return launch_request(source, **spec)


def _backend(tmp_path: Path, **options: object) -> LocalBackend:
    return LocalBackend(
        tmp_path / "jobs",
        python="/opt/python/bin/python3",
        environ=ENVIRON,
        cpus=[0, 1, 2, 3],
        **options,  # type: ignore[arg-type]
    )


@pytest.fixture
def without_tools(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A machine without util-linux's unshare or iproute2's ip on the worker's PATH."""
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    network.unavailable.cache_clear()
    yield
    network.unavailable.cache_clear()


def test_each_instance_is_planned_as_a_host_of_its_own(tmp_path: Path) -> None:
    request = _request(tmp_path, instance_count=2)
    materialized = _backend(tmp_path).materialize(request)
    assert materialized.isolation == "namespaces"
    public = materialized.public
    job_id = request.job.id
    assert public["network"] == {
        "bridge": f"ry{job_id[:12]}",
        "ports": [
            {
                "host": "algo-1",
                "namespace": f"runyard-{job_id}-algo-1",
                "veth": f"ry{job_id[:8]}-1",
                "address": "10.213.0.2",
            },
            {
                "host": "algo-2",
                "namespace": f"runyard-{job_id}-algo-2",
                "veth": f"ry{job_id[:8]}-2",
                "address": "10.213.0.3",
            },
        ],
    }
    second = public["instances"][1]
    assert second["argv"][1:] == [
        "--uts",
        "--mount",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "--",
        "/opt/python/bin/python3",
        "-m",
        "runtime.train",
    ]
    assert second["argv"][0].endswith("unshare")
    files = second["files"]
    resources = json.loads(files["input/config/resourceconfig.json"])
    assert resources["network_interface_name"] == "eth0"
    assert resources["host_addresses"] == {"algo-1": "10.213.0.2", "algo-2": "10.213.0.3"}
    runyard = json.loads(files["input/config/runyard.json"])
    assert {key: runyard[key] for key in ("master_addr", "master_port", "agent_port")} == {
        "master_addr": "algo-1",
        "master_port": 7777,
        "agent_port": 7077,
    }
    assert runyard["launch_agent"] == [
        "/opt/python/bin/python3",
        "-m",
        "runtime.launch.remote_agent",
    ]
    assert (runyard["isolation"], runyard["shared_machine"]) == ("namespaces", False)
    assert runyard["network_namespace"] == f"/run/netns/runyard-{job_id}-algo-2"
    assert runyard["peer_timeout_seconds"] == 60.0
    assert runyard["notices"] == []
    # The job's processes see nothing of the server's home, where the jobs directory is.
    assert runyard["hidden_paths"] == [str(tmp_path)]
    # Planning makes nothing.
    assert not Path(runyard["network_namespace"]).exists()
    assert not (tmp_path / "jobs").exists()


def test_more_instances_than_cpus_are_told_so(tmp_path: Path) -> None:
    request = _request(tmp_path, instance_count=6)
    runyard = json.loads(
        _backend(tmp_path).materialize(request).plan.instances[0].files["input/config/runyard.json"]
    )
    assert runyard["notices"] == [
        "6 instances share this machine's 4 CPUs: each has one, which others use too, so "
        "they run slower than on machines of their own"
    ]


def test_the_jobs_network_is_made_and_removed_whole(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "jobs", teardown_grace=1.0)
    request = _request(tmp_path, instance_count=2)
    materialized = backend.materialize(request)
    for instance in materialized.plan.instances:
        instance.argv[:] = [sys.executable, "-c", "import time; time.sleep(60)"]
    net = materialized.plan.network
    assert net is not None
    try:
        backend.apply(materialized)
        backend.apply(materialized)  # a retried launch adopts what the first made
        for port in net.ports:
            assert Path(port.namespace_path).exists()
            shown = subprocess.run(
                ["ip", "-n", port.namespace, "-4", "address", "show", "dev", "eth0"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            assert f"{port.address}/24" in shown
        bridge = subprocess.run(["ip", "link", "show", net.bridge], capture_output=True)
        assert bridge.returncode == 0
    finally:
        backend.teardown(request.job)
    assert not any(Path(port.namespace_path).exists() for port in net.ports)
    assert subprocess.run(["ip", "link", "show", net.bridge], capture_output=True).returncode != 0


@pytest.mark.usefixtures("without_tools")
def test_without_the_tools_instances_share_the_machine_unless_namespaces_are_required(
    tmp_path: Path,
) -> None:
    request = _request(tmp_path, instance_count=2)
    shared = _backend(tmp_path).materialize(request)
    assert shared.isolation == "shared"
    runyard = json.loads(shared.plan.instances[0].files["input/config/runyard.json"])
    assert runyard["notices"] == [
        "The instances of this job share this machine's host name and network: "
        "ip and unshare (util-linux, iproute2) not found on PATH"
    ]
    strict = _backend(tmp_path, isolation="namespaces")
    with pytest.raises(SpecError, match="RUNYARD_LOCAL_ISOLATION is namespaces, but ip and"):
        refuse(strict.check(request.spec, "http://127.0.0.1:8642"))
    with pytest.raises(LaunchError, match="not found on PATH"):
        strict.materialize(request)


# Materializes a job in a process of its own: which isolation it got, and what it says.
_MATERIALIZE = """
import json, sys
from pathlib import Path
from tests.provisioning.test_local_namespaces import _backend, _request
planned = _backend(Path(sys.argv[1])).materialize(_request(Path(sys.argv[1]), instance_count=2))
runyard = json.loads(planned.plan.instances[0].files["input/config/runyard.json"])
print(json.dumps({"isolation": planned.isolation, "notices": runyard["notices"]}))
"""


def test_root_without_cap_net_admin_shares_the_machine_and_says_why(tmp_path: Path) -> None:
    # As in a container that kept CAP_SYS_ADMIN, so new namespaces can be made, but not
    # CAP_NET_ADMIN, which the links between them take: util-linux's setpriv drops it
    # from the bounding set, and so from what the process it starts has as root.
    dropped = subprocess.run(
        ["setpriv", "--bounding-set", "-net_admin", sys.executable, "-c", _MATERIALIZE,
         str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
        timeout=60,
        check=False,
    )  # fmt: skip
    assert dropped.returncode == 0, dropped.stderr
    assert json.loads(dropped.stdout) == {
        "isolation": "shared",
        "notices": [
            "The instances of this job share this machine's host name and network: "
            "the worker runs as root without CAP_NET_ADMIN"
        ],
    }
    # With every capability, as this test runs, the same job gets namespaces.
    assert _backend(tmp_path).materialize(_request(tmp_path, instance_count=2)).isolation == (
        "namespaces"
    )


def test_a_container_job_is_planned_as_containers_on_the_jobs_network(tmp_path: Path) -> None:
    image = "registry.example.com/team/train:7"
    request = _request(tmp_path, instance_count=2, image={"container": image})
    backend = _backend(tmp_path, container_engine="podman --runtime runc")
    materialized = backend.materialize(request)
    assert materialized.isolation == "container"
    second = materialized.public["instances"][1]
    # The runtime stays on this machine, outside the container it starts.
    assert second["argv"] == ["/opt/python/bin/python3", "-m", "runtime.train"]
    runyard = json.loads(second["files"]["input/config/runyard.json"])
    assert {key: runyard[key] for key in (
        "isolation", "network_namespace", "container_image", "container_engine", "launch_agent",
        "image", "master_addr", "master_port",
    )} == {
        "isolation": "container",
        "network_namespace": f"/run/netns/runyard-{request.job.id}-algo-2",
        "container_image": image,
        "container_engine": ["podman", "--runtime", "runc"],
        "launch_agent": [],
        "image": image,
        "master_addr": "algo-1",
        "master_port": 7777,
    }  # fmt: skip
    assert [port["host"] for port in materialized.public["network"]["ports"]] == [
        "algo-1",
        "algo-2",
    ]
