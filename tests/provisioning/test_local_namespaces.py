"""The local backend's plan for instances with namespaces of their own (golden), and the
job's private network made and removed for real with iproute2."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from provisioning.base import DECIDED_AT_LAUNCH, JobRef, LaunchError, LaunchRequest
from provisioning.local import addresses, egress, network
from provisioning.local.backend import LocalBackend
from service.kit.errors import SpecError, refuse
from service.settings import Settings
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


@pytest.mark.sshd
def test_each_instance_is_planned_as_a_host_of_its_own(tmp_path: Path) -> None:
    request = _request(tmp_path, instance_count=2, enable_network_isolation=True)
    materialized = _backend(tmp_path).materialize(request)
    assert materialized.isolation == "namespaces"
    public = materialized.public
    job_id = request.job.id
    # Network isolation: every closed network has the same subnet, and no way out.
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
        "subnet": "10.213.0.0/24",
        "egress": None,
        "pool": "10.213.0.0/16",
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
    assert runyard["resolv_conf"] == ""  # the machine's own, where it would be any
    # The job's processes see nothing of the server's home, where the jobs directory is.
    assert runyard["hidden_paths"] == [str(tmp_path)]
    # SSH between the job's hosts, with keys made at launch: none is in the plan.
    assert runyard["ssh"] is True
    assert public["ssh"] is True
    assert "PRIVATE KEY" not in json.dumps(public)
    # Planning makes nothing.
    assert not Path(runyard["network_namespace"]).exists()
    assert not (tmp_path / "jobs").exists()


@pytest.mark.nftables
def test_a_job_has_a_subnet_and_a_way_out_of_its_own(tmp_path: Path) -> None:
    request = _request(tmp_path, instance_count=2)
    materialized = _backend(tmp_path).launch_plan(request)
    planned = materialized.public["network"]
    subnet = ipaddress.IPv4Network(planned["subnet"])
    # A /24 of the pool that nothing on this machine routes to yet, not the closed one.
    assert subnet.prefixlen == 24
    assert subnet.subnet_of(addresses.DEFAULT_POOL)
    assert subnet != network.CLOSED_SUBNET
    assert not network.taken(subnet, network._routed(), addresses.DEFAULT_POOL)
    gateway = next(subnet.hosts())
    job_id = request.job.id
    assert [port["address"] for port in planned["ports"]] == [str(gateway + 1), str(gateway + 2)]
    assert planned["egress"] == {
        "table": f"runyard-{job_id}",
        "gateway": str(gateway),
        "api_port": 1,  # the service URL's (http://127.0.0.1:1)
        "nameservers": egress.machine_resolv_conf()[1],
        # Loopback, which from inside an instance is its own: the port is open nowhere.
        "api_addresses": (),
    }
    runyard = json.loads(materialized.plan.instances[1].files["input/config/runyard.json"])
    assert runyard["master_addr"] == "algo-1"  # by name, as SageMaker's containers
    assert runyard["resolv_conf"] == (egress.machine_resolv_conf()[0] or "")


@pytest.mark.parametrize(
    ("url", "addresses"),
    [
        ("http://192.0.2.7:8642", ("192.0.2.7",)),
        ("http://localhost:8642", ()),
        ("http://[::1]:8642", ()),
    ],
)
@pytest.mark.nftables
def test_the_api_is_open_to_a_job_at_the_address_its_service_url_names(
    tmp_path: Path, url: str, addresses: tuple[str, ...]
) -> None:
    request = replace(_request(tmp_path, instance_count=1), service_url=url)
    net = _backend(tmp_path).launch_plan(request).plan.network
    assert net is not None
    assert net.egress is not None
    assert (net.egress.api_port, net.egress.api_addresses) == (8642, addresses)


@pytest.mark.nftables
def test_a_dry_run_leaves_the_jobs_subnet_to_its_launch(tmp_path: Path) -> None:
    """The machine's routes are read when the job is launched, not when it is planned:
    the plan says so where it would name the subnet."""
    request = _request(tmp_path, instance_count=2)
    backend = _backend(tmp_path)
    materialized = backend.materialize(request)
    planned = materialized.public
    job_id = request.job.id
    assert planned["network"]["subnet"] == DECIDED_AT_LAUNCH
    assert [port["address"] for port in planned["network"]["ports"]] == [DECIDED_AT_LAUNCH] * 2
    assert planned["network"]["egress"] == {
        "table": f"runyard-{job_id}",
        "gateway": DECIDED_AT_LAUNCH,
        "api_port": 1,
        "nameservers": egress.machine_resolv_conf()[1],
        # The service URL's host is resolved at launch, not by a plan.
        "api_addresses": (DECIDED_AT_LAUNCH,),
    }
    resources = json.loads(planned["instances"][0]["files"]["input/config/resourceconfig.json"])
    assert resources["host_addresses"] == dict.fromkeys(["algo-1", "algo-2"], DECIDED_AT_LAUNCH)
    # Such a plan is shown, never applied: nothing of it is made.
    with pytest.raises(ValueError, match="leaves its subnet to its launch"):
        backend.apply(materialized)
    assert not (tmp_path / "jobs").exists()


# Plans and launches a job in a network namespace of its own (the test's), whose machine
# is on two networks that share the pool between them: no /24 of it is free.
_NO_FREE_SUBNET = """
import json, subprocess, sys
from pathlib import Path
from provisioning.base import LaunchError
from provisioning.local import addresses
from tests.provisioning.test_local_namespaces import _backend, _request
pool = addresses.DEFAULT_POOL
subprocess.run(["ip", "link", "add", "rypool0", "type", "bridge"], check=True)
for half in pool.subnets(prefixlen_diff=1):
    subprocess.run(["ip", "address", "add", f"{half[1]}/{half.prefixlen}", "dev", "rypool0"],
                   check=True)
subprocess.run(["ip", "link", "set", "rypool0", "up"], check=True)
where = Path(sys.argv[1])
backend, request = _backend(where), _request(where, instance_count=2)
planned = backend.materialize(request).public["network"]
try:
    backend.launch_plan(request)
    refused = None
except LaunchError as exc:
    refused = str(exc)
print(json.dumps({"planned": planned["subnet"], "way_out": bool(planned["egress"]),
                  "refused": refused}))
"""


@pytest.mark.nftables
def test_no_free_subnet_fails_the_launch_and_not_the_plan(tmp_path: Path) -> None:
    # A network namespace of its own: the machine's routes stay as they are for others.
    run = subprocess.run(
        ["unshare", "--net", sys.executable, "-c", _NO_FREE_SUBNET, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {
        "planned": DECIDED_AT_LAUNCH,
        "way_out": True,
        "refused": "no subnet for the job's network: every /24 of "
        f"{addresses.DEFAULT_POOL} is taken: too many jobs at once",
    }


def test_a_subnet_that_the_machine_routes_to_is_not_chosen(tmp_path: Path) -> None:
    job_id = "f" * 32
    preferred = network.choose_subnet(job_id)
    dummy = "rytestroute0"
    subprocess.run(["ip", "link", "add", dummy, "type", "bridge"], check=True)
    try:
        address = f"{next(preferred.hosts()) + 100}/{preferred.prefixlen}"
        subprocess.run(["ip", "address", "add", address, "dev", dummy], check=True)
        subprocess.run(["ip", "link", "set", dummy, "up"], check=True)
        chosen = network.choose_subnet(job_id)
    finally:
        subprocess.run(["ip", "link", "delete", dummy], check=True)
    assert chosen != preferred
    assert chosen.subnet_of(addresses.DEFAULT_POOL)


def test_routes_wider_than_the_pool_leave_its_slots_free() -> None:
    """A machine on a VPC or a VPN routes to 10.0.0.0/8, or a default-ish wide network:
    such a route covers the whole pool, and is no job's network. Only a route inside a
    slot, or one narrower than the pool that holds it, takes it. (Added to a table of
    their own, which no rule consults: the machine's own routing is left as it was.)"""
    job_id = "e" * 32
    preferred = network.choose_subnet(job_id)
    table = "213"
    narrower = ipaddress.IPv4Network(f"{preferred.network_address}/23", strict=False)
    dummy = "rytestroute1"
    subprocess.run(["ip", "link", "add", dummy, "type", "bridge"], check=True)
    try:
        subprocess.run(["ip", "link", "set", dummy, "up"], check=True)
        for wide in ("10.0.0.0/8", str(addresses.DEFAULT_POOL), "0.0.0.0/1"):
            _ip("route", "add", wide, "dev", dummy, "table", table)
        assert network.choose_subnet(job_id) == preferred
        # A route narrower than the pool takes every slot it holds.
        _ip("route", "add", str(narrower), "dev", dummy, "table", table)
        chosen = network.choose_subnet(job_id)
    finally:
        subprocess.run(["ip", "link", "delete", dummy], check=True)
    assert chosen.subnet_of(addresses.DEFAULT_POOL)
    assert not chosen.overlaps(narrower)


@pytest.mark.nftables
def test_a_server_may_set_the_pool_jobs_networks_take_their_subnets_from(
    tmp_path: Path,
) -> None:
    pool = ipaddress.IPv4Network("172.30.8.0/22")
    settings = Settings(
        home=tmp_path / "home", local_network_pool=str(pool), teardown_grace_seconds=1.0
    )
    backend = LocalBackend.from_settings(settings)
    request = _request(tmp_path, instance_count=2)
    materialized = backend.launch_plan(request)
    for instance in materialized.plan.instances:
        instance.argv[:] = [sys.executable, "-c", "import time; time.sleep(60)"]
    net = materialized.plan.network
    assert net is not None
    assert net.egress is not None
    subnet = ipaddress.IPv4Network(net.subnet)
    assert subnet.subnet_of(pool)
    assert subnet != ipaddress.ip_network("172.30.8.0/24")  # the closed networks'
    try:
        backend.apply(materialized)
        # The job's rules refuse the pool's other networks, not the default pool's.
        rules = subprocess.run(
            ["nft", "list", "table", "inet", net.egress.table],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert "172.30.8.0/22" in rules
        assert "10.213.0.0/16" not in rules
    finally:
        backend.teardown(request.job)
    assert _left(request.job.id, net) == []
    closed = backend.materialize(
        _request(tmp_path, instance_count=1, enable_network_isolation=True)
    ).plan.network
    assert closed is not None
    assert closed.subnet == "172.30.8.0/24"


def test_more_instances_than_cpus_are_told_so(tmp_path: Path) -> None:
    # A closed network, which says nothing of its own whether nftables is here or not.
    request = _request(tmp_path, instance_count=6, enable_network_isolation=True)
    runyard = json.loads(
        _backend(tmp_path).materialize(request).plan.instances[0].files["input/config/runyard.json"]
    )
    assert runyard["notices"] == [
        "6 instances share this machine's 4 CPUs: each has one, which others use too, so "
        "they run slower than on machines of their own"
    ]


@pytest.mark.parametrize(
    "isolated", [pytest.param(False, marks=pytest.mark.nftables), True], ids=["egress", "isolated"]
)
def test_the_jobs_network_is_made_and_removed_whole(tmp_path: Path, isolated: bool) -> None:
    backend = LocalBackend(tmp_path / "jobs", teardown_grace=1.0)
    request = _request(tmp_path, instance_count=2, enable_network_isolation=isolated)
    materialized = backend.launch_plan(request)
    for instance in materialized.plan.instances:
        instance.argv[:] = [sys.executable, "-c", "import time; time.sleep(60)"]
    net = materialized.plan.network
    assert net is not None
    assert (net.egress is None) == isolated
    try:
        backend.apply(materialized)
        backend.apply(materialized)  # a retried launch adopts what the first made
        prefix = ipaddress.ip_network(net.subnet).prefixlen
        for port in net.ports:
            assert Path(port.namespace_path).exists()
            shown = _ip("-n", port.namespace, "-4", "address", "show", "dev", "eth0")
            assert f"{port.address}/{prefix}" in shown
            route = _ip("-n", port.namespace, "-4", "route", "show", "default")
            assert route.split()[:3] == ([] if isolated else ["default", "via", net.egress.gateway])  # type: ignore[union-attr]
        # The machine holds an address on the bridge only as the way out, and never an
        # IPv6 one.
        bridge = _ip("address", "show", "dev", net.bridge)
        assert ("inet " in bridge) != isolated
        assert "inet6" not in bridge
        assert (request.job.id in egress.held_tables()) != isolated
        # Held by its directory, which the reaper leaves alone while the job lives.
        assert _held(backend, request.job.id) == [JobRef(request.job.id, request.job.name)]
    finally:
        backend.teardown(request.job)
    assert _left(request.job.id, net) == []


@pytest.mark.nftables
def test_a_network_no_plan_leads_to_is_found_and_removed(tmp_path: Path) -> None:
    """What a job's directory no longer names (lost with it) is still the job's, by name:
    the reaper finds it, and the job's teardown removes it."""
    backend = LocalBackend(tmp_path / "jobs", teardown_grace=1.0)
    request = _request(tmp_path, instance_count=2)
    net = backend.launch_plan(request).plan.network
    assert net is not None
    assert net.egress is not None
    try:
        network.create(net)
        assert _held(backend, request.job.id) == [JobRef(request.job.id, request.job.id)]
    finally:
        backend.teardown(request.job)
    assert _left(request.job.id, net) == []
    assert _held(backend, request.job.id) == []


def _held(backend: LocalBackend, job_id: str) -> list[JobRef]:
    """What the backend holds of one job (other tests' jobs may share the machine)."""
    return [ref for ref in backend.held_jobs() if ref.id == job_id]


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout


def _left(job_id: str, net: network.JobNetwork) -> list[str]:
    """Whatever of a job's network is still on the machine."""
    links = [net.bridge, *(port.veth for port in net.ports)]
    left = [name for name in links if subprocess.run(
        ["ip", "link", "show", name], capture_output=True).returncode == 0]  # fmt: skip
    left += [path.name for path in network.NETNS_DIR.glob(f"runyard-{job_id}-*")]
    return left + [f"table runyard-{held}" for held in egress.held_tables() if held == job_id]


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


@pytest.fixture
def without_nft(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A machine with iproute2 and util-linux, but not nftables, on the worker's PATH."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("ip", "unshare"):
        found = shutil.which(tool)
        assert found is not None
        (tools / tool).symlink_to(found)
    monkeypatch.setenv("PATH", f"{tools}:{Path(sys.executable).parent}")
    egress.unavailable.cache_clear()
    network.unavailable.cache_clear()
    yield
    egress.unavailable.cache_clear()
    network.unavailable.cache_clear()


@pytest.mark.usefixtures("without_nft")
def test_without_nftables_a_jobs_network_stays_closed_and_says_why(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    planned = backend.materialize(_request(tmp_path, instance_count=2))
    assert planned.isolation == "namespaces"
    assert planned.plan.network is not None
    assert planned.plan.network.egress is None
    why = "nft (Debian's nftables package) is not found on PATH"
    runyard = json.loads(planned.plan.instances[0].files["input/config/runyard.json"])
    assert runyard["notices"] == [
        f"This job's instances reach one another and nothing beyond: {why}"
    ]
    # (What the machine's SSH, or its lack, says is its own: sshd may be missing too.)
    assert [notice for notice in backend.notices() if "SSH" not in notice] == [
        f"local instances reach their job's other hosts and nothing beyond: {why}"
    ]
    # Isolation itself is had all the same, and says nothing.
    isolated = backend.materialize(
        _request(tmp_path, instance_count=2, enable_network_isolation=True)
    )
    assert (
        json.loads(isolated.plan.instances[0].files["input/config/runyard.json"])["notices"] == []
    )


def test_network_isolation_needs_instances_with_a_network_of_their_own(tmp_path: Path) -> None:
    assert _backend(tmp_path).network_isolation_problem() is None
    assert _backend(tmp_path, isolation="shared").network_isolation_problem() == (
        "local instances share this machine's network here (RUNYARD_LOCAL_ISOLATION is shared)"
    )


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


@pytest.mark.container_engine
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


def _subnet_lock_held() -> bool:
    """Whether this process (the launch under test) holds the machine's lock on choosing
    subnets. Asked of /proc/locks, by holder: a launch of another test running beside this
    one may hold the same lock, and trying to take it could not tell the two apart."""
    try:
        inode = os.stat(network.SUBNET_LOCK).st_ino
    except FileNotFoundError:
        return False
    for line in Path("/proc/locks").read_text().splitlines():
        # "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF"; a waiter's line has "->".
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or "->" in fields:
            continue
        pid, device_inode = int(fields[4]), fields[5]
        if pid == os.getpid() and int(device_inode.rsplit(":", 1)[1]) == inode:
            return True
    return False


@pytest.mark.nftables
def test_the_subnet_lock_is_held_from_the_choice_until_the_bridge_holds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Other launches wait for a job's subnet to be taken, never for its images, keys or
    processes."""
    backend = LocalBackend(tmp_path / "jobs", teardown_grace=1.0)
    request = _request(tmp_path, instance_count=2)
    held: dict[str, bool] = {}
    choose, create = network.choose_subnet, network.create

    def choosing(*args: Any) -> ipaddress.IPv4Network:
        held["choose"] = _subnet_lock_held()
        return choose(*args)

    def creating(net: network.JobNetwork) -> None:
        held["create"] = _subnet_lock_held()
        create(net)

    def launching(*args: Any) -> None:
        held.setdefault("launch", _subnet_lock_held())
        raise LaunchError("stopped here: the test looks no further")

    monkeypatch.setattr(network, "choose_subnet", choosing)
    monkeypatch.setattr(network, "create", creating)
    monkeypatch.setattr(backend, "_launch", launching)
    try:
        with pytest.raises(LaunchError, match="stopped here"):
            backend.submit(request)
    finally:
        backend.teardown(request.job)
    assert held == {"choose": True, "create": True, "launch": False}
