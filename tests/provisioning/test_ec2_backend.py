"""The EC2 backend: the exact RunInstances calls (golden), its user-data run for real in
bash, and launches, adoption, failures and teardown through the real boto3 against moto's
server (tests/aws.py).

Two failures moto cannot produce are injected at botocore's HTTP boundary (its
``before-send`` event, as an answer in EC2's own XML that botocore then parses): a
capacity error on the second of several launches, and instances that never terminate.
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import json
import random
import shlex
import stat
import string
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from pydantic import ValidationError

from contract.failure_causes import FailureCause
from contract.images import Catalog
from contract.spec import JobSpec
from provisioning import registry
from provisioning.base import REDACTED, InstanceState, JobRef, LaunchRequest, TeardownError
from provisioning.catalog import InstanceCatalog
from provisioning.catalog_settings import InstanceTypeDefinition
from provisioning.ec2 import userdata as ec2_userdata
from provisioning.ec2.backend import ConsoleCache, Ec2Backend, Ec2Error, instance_state
from provisioning.ec2.settings import Ec2Settings
from service.jobs.schemas import JobCreate
from service.kit.errors import SpecError, refuse
from service.settings import Settings
from tests import aws

IMAGE = "ami-0abcdef1234567890"
ARTIFACT_ROOT = "file:///srv/runyard/artifacts"
SERVICE_URL = "http://runyard.internal:8642"
TOKEN = "ryi_secret"
AGENT_KEY = "shared-secret"
# The runyard wheel, where an operator would host it for the instances.
RUNTIME_WHEEL = "https://files.example.test/runyard-0.1.0-py3-none-any.whl"


@pytest.fixture
def ec2(moto: aws.MotoServer) -> Any:
    moto.reset()
    return moto.client("ec2")


@pytest.fixture
def settings(ec2: Any) -> Ec2Settings:
    """A VPC of the test's own: instances get private addresses from its subnet."""
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.1.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="runyard-jobs", Description="jobs", VpcId=vpc)
    return Ec2Settings(
        image_id=IMAGE,
        subnet_id=subnet,
        security_group_ids=[group["GroupId"]],
        runtime_package=RUNTIME_WHEEL,
        teardown_timeout_seconds=5,
        poll_interval_seconds=0.02,
    )


def _backend(client: Any, settings: Ec2Settings) -> Ec2Backend:
    return Ec2Backend(client, settings, artifact_root=ARTIFACT_ROOT)


def _tokens(spec: JobSpec) -> dict[str, str]:
    """Each instance's own token."""
    return {host: f"{TOKEN}-{host}" for host in spec.hosts}


def _request(name: str = "job-1", job_id: str = "a" * 32, **spec: Any) -> LaunchRequest:
    values: dict[str, Any] = {
        "name": name,
        "entry_point": "train.py",
        "source_uri": "s3://runyard/sources/abc.tar.gz",
        "instance_type": "ml.m5.xlarge",
        "output_path": "s3://runyard/output",
    }
    values.update(spec)
    spec = JobCreate.model_validate(values).job_spec_at(values["output_path"])
    return LaunchRequest(JobRef(job_id, name), spec, SERVICE_URL, _tokens(spec), AGENT_KEY)


def _instances(client: Any, job_id: str) -> list[dict[str, Any]]:
    filters = [{"Name": "tag:runyard:job-id", "Values": [job_id]}]
    reservations = client.describe_instances(Filters=filters)["Reservations"]
    found = [instance for reservation in reservations for instance in reservation["Instances"]]
    return sorted(found, key=lambda instance: _tags(instance)["runyard:host"])


def _tags(instance: dict[str, Any]) -> dict[str, str]:
    return {tag["Key"]: tag["Value"] for tag in instance.get("Tags", [])}


def _states(client: Any, job_id: str) -> list[str]:
    return [instance["State"]["Name"] for instance in _instances(client, job_id)]


def _answer(client: Any, operation: str, status: int, body: str, calls_to_pass: int = 0) -> None:
    """Answer ``operation`` with ``body`` instead of sending it, after letting
    ``calls_to_pass`` calls through: EC2's reply as botocore would receive it."""
    seen = {"calls": 0}

    def reply(**_: Any) -> AWSResponse | None:
        seen["calls"] += 1
        if seen["calls"] <= calls_to_pass:
            return None
        return AWSResponse(client.meta.endpoint_url, status, {}, _Raw(body.encode()))

    client.meta.events.register(f"before-send.ec2.{operation}", reply)


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body


# -- planning (pure) ---------------------------------------------------------------------

GOLDEN_USER_DATA = r"""#!/bin/bash
# Runyard: instance algo-2 of training job bert-1, run once by cloud-init.
set -euo pipefail
# Shutdown terminates this instance: whatever ends the script, success or error, the
# machine goes with it.
trap 'shutdown -h now' EXIT

# The runtime in a virtual environment that still sees the AMI's packages (torch).
python3 -m venv --system-site-packages /opt/runyard/venv
/opt/runyard/venv/bin/pip install --quiet --disable-pip-version-check 'runyard[train]==0.1.0'

# The artifact store at the server's own path, so file:// URIs mean the same here.
mkdir -p /srv/runyard/artifacts
mount -t nfs4 -o nfsvers=4.1,hard,timeo=600,retrans=2,noresvport \
  fs-0123.efs.us-east-1.amazonaws.com:/ /srv/runyard/artifacts

# The job's config files, as every backend writes them.
mkdir -p /opt/ml/input/config
cat > /opt/ml/input/config/hyperparameters.json <<'RUNYARD_EOF'
{
  "epochs": "3",
  "note": "\"it's $(reboot)\""
}
RUNYARD_EOF
cat > /opt/ml/input/config/resourceconfig.json <<'RUNYARD_EOF'
{
  "current_host": "algo-2",
  "current_instance_type": "ml.p4d.24xlarge",
  "current_group_name": "homogeneousCluster",
  "hosts": [
    "algo-1",
    "algo-2"
  ],
  "network_interface_name": "ens5",
  "instance_groups": [
    {
      "instance_group_name": "homogeneousCluster",
      "instance_type": "ml.p4d.24xlarge",
      "hosts": [
        "algo-1",
        "algo-2"
      ]
    }
  ],
  "host_addresses": {
    "algo-1": "algo-1",
    "algo-2": "algo-2"
  }
}
RUNYARD_EOF
cat > /opt/ml/input/config/inputdataconfig.json <<'RUNYARD_EOF'
{}
RUNYARD_EOF
cat > /opt/ml/input/config/runyard.json <<'RUNYARD_EOF'
{
  "job_name": "bert-1",
  "job_id": "ffffffffffffffffffffffffffffffff",
  "spec": {
    "entry_point": "train.py",
    "source_uri": "file:///srv/runyard/artifacts/sources/abc.tar.gz",
    "instance_type": "ml.p4d.24xlarge",
    "output_path": "file:///srv/runyard/artifacts/output",
    "output_compression": "GZIP",
    "instance_count": 2,
    "volume_size": 200,
    "framework": "pytorch",
    "image_uri": null,
    "hyperparameters": {},
    "distribution": {
      "torch_distributed": {
        "enabled": true
      }
    },
    "inputs": {},
    "environment": {
      "NCCL_DEBUG": "INFO"
    },
    "checkpoint_s3_uri": null,
    "checkpoint_local_path": null,
    "tensorboard_s3_output_path": null,
    "tensorboard_local_path": null,
    "use_spot_instances": false,
    "container_entrypoint": [],
    "container_arguments": [],
    "enable_network_isolation": false,
    "image": {
      "image": "builtin",
      "container": null,
      "note": null
    }
  },
  "attempt": 0,
  "first_log_seq": 1,
  "image": "builtin",
  "file_roots": [],
  "read_only_roots": [],
  "confine_files": false,
  "aws_credentials": false,
  "instance_metrics_seconds": 10.0,
  "master_addr": "algo-1",
  "master_port": 7777,
  "launch_agent": [
    "/opt/runyard/venv/bin/python3",
    "-m",
    "runtime.launch.remote_agent"
  ],
  "agent_port": 7077,
  "shared_machine": false,
  "spot_notice": null,
  "isolation": "machine",
  "notices": [],
  "peer_timeout_seconds": null,
  "network_namespace": null,
  "resolv_conf": "",
  "image_python": "",
  "image_store": "",
  "image_digest": "",
  "job_layer": "",
  "download_cache": "",
  "read_only_paths": [],
  "hidden_paths": [],
  "ssh": false,
  "container_image": "",
  "container_engine": []
}
RUNYARD_EOF

# The job's hosts by name: the worker tags every instance with each host's private
# address once all are launched; this instance reads them from its own metadata.
imds_url=http://169.254.169.254
imds() {
  local token
  token=$(curl -fs -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' \
    "$imds_url/latest/api/token") || return 1
  curl -fs -H "X-aws-ec2-metadata-token: $token" "$imds_url/latest/meta-data/$1"
}
deadline=$((SECONDS + 600))
for host in algo-1 algo-2; do
  until address=$(imds "tags/instance/runyard:address:$host"); do
    if ((SECONDS >= deadline)); then
      echo "runyard: no address for $host after 600 s" >&2
      exit 1
    fi
    sleep 2
  done
  echo "$address $host" >> /etc/hosts
done

# The instance's SageMaker host name: what its scripts and MPI see as this machine's.
hostname algo-2

cd /opt/ml
export SM_BASE_DIR=/opt/ml
export PYTHONUNBUFFERED=1
export RUNYARD_SERVICE_URL=http://runyard.internal:8642
export RUNYARD_JOB_NAME=bert-1
export RUNYARD_JOB_ID=ffffffffffffffffffffffffffffffff
export RUNYARD_HOST=algo-2
export RUNYARD_JOB_TOKEN='<redacted>'
export RUNYARD_AGENT_KEY='<redacted>'
# The runtime reports the job's result itself; its exit status only ends this script.
/opt/runyard/venv/bin/train || echo "runyard: the runtime exited with status $?" >&2
"""


def test_dry_run_is_the_exact_run_instances_call(ec2: Any) -> None:
    settings = Ec2Settings(
        image_id=IMAGE,
        launch_template="lt-0123456789abcdef0",
        subnet_id="subnet-0a1b2c3d",
        security_group_ids=["sg-0a1b2c3d"],
        iam_instance_profile="arn:aws:iam::123456789012:instance-profile/runyard-jobs",
        key_name="ops",
        runtime_package="runyard[train]==0.1.0",
        artifact_nfs="fs-0123.efs.us-east-1.amazonaws.com:/",
    )
    request = _request(
        "bert-1",
        "f" * 32,
        instance_type="ml.p4d.24xlarge",
        instance_count=2,
        volume_size=200,
        hyperparameters={"epochs": 3, "note": "it's $(reboot)"},
        distribution={"torch_distributed": {"enabled": True}},
        environment={"NCCL_DEBUG": "INFO"},
        # Readable on the instances: the artifact root is shared with them over NFS.
        source_uri=f"{ARTIFACT_ROOT}/sources/abc.tar.gz",
        output_path=f"{ARTIFACT_ROOT}/output",
    )
    backend = _backend(ec2, settings)
    materialized = backend.materialize(request)

    tags = [
        {"Key": "Name", "Value": "bert-1-algo-2"},
        {"Key": "runyard:job-name", "Value": "bert-1"},
        {"Key": "runyard:job-id", "Value": "f" * 32},
        {"Key": "runyard:host", "Value": "algo-2"},
        {"Key": "runyard:attempt", "Value": "0"},
    ]
    second = materialized.public["instances"][1]
    assert second["host"] == "algo-2"
    assert second["run_instances"] == {
        "MinCount": 1,
        "MaxCount": 1,
        "ClientToken": "f" * 32 + "-algo-2",
        "InstanceType": "p4d.24xlarge",
        "ImageId": IMAGE,
        "LaunchTemplate": {"LaunchTemplateId": "lt-0123456789abcdef0"},
        "SubnetId": "subnet-0a1b2c3d",
        "SecurityGroupIds": ["sg-0a1b2c3d"],
        "IamInstanceProfile": {"Arn": "arn:aws:iam::123456789012:instance-profile/runyard-jobs"},
        "KeyName": "ops",
        "UserData": GOLDEN_USER_DATA,
        "InstanceInitiatedShutdownBehavior": "terminate",
        "MetadataOptions": {
            "HttpTokens": "required",
            "HttpEndpoint": "enabled",
            "InstanceMetadataTags": "enabled",
        },
        "BlockDeviceMappings": [
            {
                "DeviceName": "/dev/xvda",
                "Ebs": {"VolumeSize": 200, "VolumeType": "gp3", "DeleteOnTermination": True},
            }
        ],
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": tags},
        ],
    }
    # What is sent: the same call, the real token, the script gzipped for cloud-init.
    sent = materialized.plan.instances[1].run_instances
    script = gzip.decompress(sent["UserData"]).decode()
    assert script == GOLDEN_USER_DATA.replace(
        f"RUNYARD_JOB_TOKEN='{REDACTED}'", f"RUNYARD_JOB_TOKEN={TOKEN}-algo-2"
    ).replace(f"RUNYARD_AGENT_KEY='{REDACTED}'", f"RUNYARD_AGENT_KEY={AGENT_KEY}")
    assert {**sent, "UserData": GOLDEN_USER_DATA} == second["run_instances"]
    assert TOKEN not in materialized.render()
    # Pure: planning again gives the same bytes (one client token, one set of arguments)
    # and nothing was launched.
    assert backend.materialize(request).plan == materialized.plan
    assert ec2.describe_instances()["Reservations"] == []


def test_spot_is_asked_for_when_the_spec_says_so(ec2: Any, settings: Ec2Settings) -> None:
    # JobCreate has no use_spot_instances yet; a spec that carries it is obeyed.
    request = _request()
    spot = LaunchRequest(
        request.job,
        dataclasses.replace(request.spec, use_spot_instances=True),
        SERVICE_URL,
        request.tokens,
    )
    backend = _backend(ec2, settings)
    [on_demand] = backend.materialize(request).plan.instances
    assert "InstanceMarketOptions" not in on_demand.run_instances
    [asked] = backend.submit(spot).plan.instances
    assert asked.run_instances["InstanceMarketOptions"] == {
        "MarketType": "spot",
        "SpotOptions": {
            "SpotInstanceType": "one-time",
            "InstanceInterruptionBehavior": "terminate",
        },
    }
    [instance] = _instances(ec2, request.job.id)
    assert instance["InstanceLifecycle"] == "spot"


def test_plans_that_ec2_cannot_run_are_refused(ec2: Any, settings: Ec2Settings) -> None:
    with pytest.raises(Ec2Error, match="RUNYARD_EC2__IMAGE_ID or RUNYARD_EC2__LAUNCH_TEMPLATE"):
        _backend(ec2, Ec2Settings()).materialize(_request())
    # Runyard is not on PyPI: nothing to install the runtime from until it is set.
    assert Ec2Settings().runtime_package is None
    unset = settings.model_copy(update={"runtime_package": None})
    with pytest.raises(Ec2Error, match="set RUNYARD_EC2__RUNTIME_PACKAGE to what pip install"):
        _backend(ec2, unset).materialize(_request())
    with pytest.raises(SpecError, match="RUNYARD_EC2__RUNTIME_PACKAGE") as refused:
        refuse(_backend(ec2, unset).check(_request().spec, SERVICE_URL))
    assert refused.value.loc == ("backend",)
    refuse(_backend(ec2, settings).check(_request().spec, SERVICE_URL))
    with pytest.raises(Ec2Error, match=r"'local' is not an ml\.\* type"):
        _backend(ec2, settings).materialize(_request(instance_type="local"))
    nfs = settings.model_copy(update={"artifact_nfs": "fs-1:/"})
    with pytest.raises(Ec2Error, match="ARTIFACT_NFS needs a file:// RUNYARD_ARTIFACT_ROOT"):
        Ec2Backend(ec2, nfs, artifact_root="s3://bucket/runyard").materialize(_request())
    with pytest.raises(
        Ec2Error, match=r"cannot report to http://127\.0\.0\.1:8642: set RUNYARD_PUB"
    ):
        _backend(ec2, settings).materialize(
            LaunchRequest(
                _request().job, _request().spec, "http://127.0.0.1:8642", _request().tokens
            )
        )
    local_files = _request(
        source_uri=f"{ARTIFACT_ROOT}/sources/abc.tar.gz",
        inputs={"train": "file:///data/train", "test": "s3://runyard/test"},
    )
    with pytest.raises(
        Ec2Error, match=r"file:// URIs of source_uri, inputs\.train\.uri: use s3://"
    ):
        _backend(ec2, settings).materialize(local_files)
    shared = settings.model_copy(update={"artifact_nfs": "fs-1:/"})
    with pytest.raises(Ec2Error, match=r"file:// URIs of inputs\.train\.uri: use s3://"):
        _backend(ec2, shared).materialize(local_files)
    # Random text does not compress: 100 hyperparameters of 2,000 characters exceed 16 KiB.
    rng = random.Random(0)
    noise = {f"h{i}": "".join(rng.choices(string.ascii_letters, k=2000)) for i in range(100)}
    with pytest.raises(Ec2Error, match=r"user-data of algo-1 is \d+ bytes compressed, over"):
        _backend(ec2, settings).materialize(_request(hyperparameters=noise))
    assert ec2.describe_instances()["Reservations"] == []


# -- the user-data, run -----------------------------------------------------------------


def _stubs(root: Path) -> Path:
    """Commands the script calls, as small scripts that record what they were asked."""
    bin_dir = root / "bin"
    bin_dir.mkdir()
    scripts = {
        # IMDSv2: a session token, then the instance's tags as the worker wrote them.
        "curl": """#!/bin/bash
echo "$*" >> "$RECORD/curl"
url="${@: -1}"
case "$url" in
  */latest/api/token) printf tok ;;
  */tags/instance/runyard:address:*) cat "$ADDRESSES/${url##*:}" 2>/dev/null || exit 22 ;;
  *) exit 22 ;;
esac
""",
        "shutdown": '#!/bin/bash\necho "$*" >> "$RECORD/shutdown"\n',
        "hostname": '#!/bin/bash\necho "$*" >> "$RECORD/hostname"\n',
        # python3 -m venv --system-site-packages DIR: a venv whose pip and train record.
        "python3": """#!/bin/bash
mkdir -p "$4/bin"
cp "$STUBS/pip" "$STUBS/train" "$4/bin/"
""",
        "pip": '#!/bin/bash\nprintf "%s\\n" "$@" > "$RECORD/pip"\n',
        "train": f"""#!{sys.executable}
import json, os
record = {{"env": dict(os.environ), "cwd": os.getcwd()}}
json.dump(record, open(os.environ["RECORD"] + "/train", "w"))
""",
    }
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def _run_user_data(
    tmp_path: Path, boot: ec2_userdata.Bootstrap
) -> subprocess.CompletedProcess[str]:
    layout = ec2_userdata.Layout(
        base_dir=str(tmp_path / "opt ml"),
        venv=str(tmp_path / "venv"),
        hosts_file=str(tmp_path / "hosts"),
        imds_url="http://imds.invalid",
    )
    stubs = _stubs(tmp_path)
    script = tmp_path / "user-data"
    script.write_text(ec2_userdata.render(boot, layout))
    env = {
        "PATH": f"{stubs}:/usr/bin:/bin",
        "STUBS": str(stubs),
        "RECORD": str(tmp_path / "record"),
        "ADDRESSES": str(tmp_path / "addresses"),
    }
    (tmp_path / "record").mkdir()
    return subprocess.run(
        ["bash", str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30
    )


def _boot(**overrides: Any) -> ec2_userdata.Bootstrap:
    values: dict[str, Any] = {
        "job_name": "job-1",
        "host": "algo-2",
        "hosts": ["algo-1", "algo-2"],
        "python": "python3",
        "pip_args": ["runyard[train]==0.1.0", "--extra-index-url", "https://pypi.example/$x y"],
        "files": {
            "input/config/hyperparameters.json": '{"note": "it\'s $(touch pwned) `touch pwned`"}\n',
            # A line equal to the heredoc's delimiter, and no final newline.
            "input/config/odd.txt": "RUNYARD_EOF\n$HOME\\n 'quoted'",
            "input/config/tricky.txt": "line\nRUNYARD_EOF\nend\n",
        },
        "env": {"SM_BASE_DIR": "/opt/ml", "RUNYARD_JOB_TOKEN": "t'ok $(touch pwned)"},
        "address_wait_seconds": 60,
    }
    values.update(overrides)
    return ec2_userdata.Bootstrap(**values)


def test_user_data_writes_the_files_resolves_peers_runs_and_shuts_down(tmp_path: Path) -> None:
    boot = _boot()
    addresses = tmp_path / "addresses"
    addresses.mkdir()
    (addresses / "algo-1").write_text("10.20.1.4")
    (addresses / "algo-2").write_text("10.20.1.5")

    result = _run_user_data(tmp_path, boot)

    assert result.returncode == 0, result.stderr
    base = tmp_path / "opt ml"
    for relative, content in boot.files.items():
        assert (base / relative).read_text() == content
    assert (tmp_path / "hosts").read_text() == "10.20.1.4 algo-1\n10.20.1.5 algo-2\n"
    record = tmp_path / "record"
    assert (record / "pip").read_text().splitlines() == [
        "install",
        "--quiet",
        "--disable-pip-version-check",
        *boot.pip_args,
    ]
    train = json.loads((record / "train").read_text())
    assert train["cwd"] == str(base)
    assert train["env"]["RUNYARD_JOB_TOKEN"] == "t'ok $(touch pwned)"
    assert train["env"]["SM_BASE_DIR"] == "/opt/ml"
    assert "X-aws-ec2-metadata-token: tok" in (record / "curl").read_text()
    assert (record / "shutdown").read_text() == "-h now\n"
    assert (record / "hostname").read_text() == "algo-2\n"  # its SageMaker name
    assert not list(tmp_path.rglob("pwned"))


def test_user_data_ends_the_instance_when_no_addresses_come(tmp_path: Path) -> None:
    (tmp_path / "addresses").mkdir()
    result = _run_user_data(tmp_path, _boot(address_wait_seconds=1))
    assert result.returncode == 1
    assert "runyard: no address for algo-1 after 1 s" in result.stderr
    assert not (tmp_path / "record" / "train").exists()
    assert (tmp_path / "record" / "shutdown").read_text() == "-h now\n"


def test_a_configured_type_launches_as_ec2s_type_of_that_name(
    ec2: Any, settings: Ec2Settings
) -> None:
    m7a = {"name": "ml.m7a.xlarge", "vcpus": 4, "memory_gib": 16}
    catalog = InstanceCatalog.with_extra(
        [InstanceTypeDefinition.model_validate(m7a).instance_type()]
    )
    backend = Ec2Backend(ec2, settings, artifact_root=ARTIFACT_ROOT, instance_catalog=catalog)
    request = _request(instance_type="ml.m7a.xlarge")
    backend.submit(request)
    (instance,) = _instances(ec2, request.job.id)
    assert instance["InstanceType"] == "m7a.xlarge"
    # A server whose catalog lacks it refuses it, at submission and at launch.
    problems = _backend(ec2, settings).check(request.spec, SERVICE_URL)
    assert [p.loc for p in problems] == [("instance_type",)]
    with pytest.raises(Ec2Error, match=r"'ml.m7a.xlarge' is not an ml\.\* type of the catalog"):
        _backend(ec2, settings).materialize(_request(instance_type="ml.m7a.xlarge"))


# The built-in types EC2's data (moto's copy) does not describe, with AWS's published
# figures: p2 and p3, which EC2 has retired, and p6e-gb200.
NOT_DESCRIBED = {
    "ml.p2.xlarge": (4, 61, 1, "K80"),
    "ml.p2.8xlarge": (32, 488, 8, "K80"),
    "ml.p2.16xlarge": (64, 732, 16, "K80"),
    "ml.p3.2xlarge": (8, 61, 1, "V100"),
    "ml.p3.8xlarge": (32, 244, 4, "V100"),
    "ml.p3.16xlarge": (64, 488, 8, "V100"),
    "ml.p6e-gb200.36xlarge": (144, 960, 4, "GB200"),
}


def test_the_built_in_types_have_ec2s_own_figures(ec2: Any) -> None:
    # What EC2 says of every type it has (DescribeInstanceTypes, from moto's copy of AWS's
    # data), each built-in type held to the one named as it is without "ml.".
    described = {
        kind["InstanceType"]: kind
        for page in ec2.get_paginator("describe_instance_types").paginate()
        for kind in page["InstanceTypes"]
    }
    catalog = InstanceCatalog()
    names = sorted(catalog.cluster_types())
    assert {name for name in names if name.removeprefix("ml.") not in described} == set(
        NOT_DESCRIBED
    )
    for name in names:
        kind = catalog[name]
        if name in NOT_DESCRIBED:
            assert (kind.vcpus, kind.memory_gib, kind.gpus, kind.gpu_model) == NOT_DESCRIBED[name]
            assert kind.gpu_resource == "nvidia.com/gpu", name
            continue
        figures = described[name.removeprefix("ml.")]
        accelerators = [
            *figures.get("GpuInfo", {}).get("Gpus", []),
            *figures.get("NeuronInfo", {}).get("NeuronDevices", []),
        ]
        assert kind.vcpus == figures["VCpuInfo"]["DefaultVCpus"], name
        assert kind.memory_gib == figures["MemoryInfo"]["SizeInMiB"] / 1024, name
        assert kind.gpus == sum(a["Count"] for a in accelerators), name
        assert kind.gpu_model == (accelerators[0]["Name"] if accelerators else None), name
        neuron = "NeuronInfo" in figures
        assert (kind.gpu_resource == "aws.amazon.com/neuron") == neuron, name


# -- launching --------------------------------------------------------------------------


def test_submit_launches_one_tagged_instance_per_host(ec2: Any, settings: Ec2Settings) -> None:
    request = _request(instance_count=2, volume_size=50)
    materialized = _backend(ec2, settings).submit(request)

    instances = _instances(ec2, request.job.id)
    assert len(instances) == 2
    addresses = {_tags(i)["runyard:host"]: i["PrivateIpAddress"] for i in instances}
    assert all(address.startswith("10.20.1.") for address in addresses.values())
    for instance, planned in zip(instances, materialized.plan.instances, strict=True):
        host = planned.host
        assert instance["InstanceType"] == "m5.xlarge"
        assert instance["ImageId"] == IMAGE
        assert instance["SubnetId"] == settings.subnet_id
        assert [g["GroupId"] for g in instance["SecurityGroups"]] == settings.security_group_ids
        assert instance["ClientToken"] == f"{request.job.id}-{host}"
        assert instance["MetadataOptions"]["InstanceMetadataTags"] == "enabled"
        assert _tags(instance) == {
            "Name": f"job-1-{host}",
            "runyard:job-name": "job-1",
            "runyard:job-id": request.job.id,
            "runyard:host": host,
            "runyard:attempt": "0",
            # Every instance learns every host's address, its own included.
            "runyard:address:algo-1": addresses["algo-1"],
            "runyard:address:algo-2": addresses["algo-2"],
        }
        instance_id = instance["InstanceId"]
        user_data = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        script = gzip.decompress(base64.b64decode(user_data["UserData"]["Value"])).decode()
        assert script == gzip.decompress(planned.run_instances["UserData"]).decode()
        assert f"export RUNYARD_HOST={host}\n" in script
        assert f"export RUNYARD_JOB_TOKEN={TOKEN}-{host}\n" in script
        behaviour = ec2.describe_instance_attribute(
            InstanceId=instance_id, Attribute="instanceInitiatedShutdownBehavior"
        )
        assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
        [volume] = ec2.describe_volumes(
            Filters=[{"Name": "attachment.instance-id", "Values": [instance_id]}]
        )["Volumes"]
        assert volume["Size"] == 50


def test_a_retried_submit_launches_nothing_new(ec2: Any, settings: Ec2Settings) -> None:
    request = _request(instance_count=3)
    backend = _backend(ec2, settings)
    # An earlier attempt sent algo-1's RunInstances, then died.
    first = backend.materialize(request).plan.instances[0]
    early = ec2.run_instances(**first.run_instances)["Instances"][0]["InstanceId"]

    backend.submit(request)
    ids = [i["InstanceId"] for i in _instances(ec2, request.job.id)]
    assert len(ids) == 3
    assert ids[0] == early
    _backend(ec2, settings).submit(request)
    assert [i["InstanceId"] for i in _instances(ec2, request.job.id)] == ids
    # Even once they have ended, as EC2 answers a repeated client token.
    ec2.terminate_instances(InstanceIds=ids)
    backend.submit(request)
    assert [i["InstanceId"] for i in _instances(ec2, request.job.id)] == ids


def test_a_restart_launches_new_instances_and_sees_only_them(
    ec2: Any, settings: Ec2Settings
) -> None:
    backend = _backend(ec2, settings)
    first = _request(instance_count=2)
    backend.submit(first)
    old = {i["InstanceId"] for i in _instances(ec2, first.job.id)}
    backend.teardown(first.job)
    # The next attempt: new client tokens, so EC2 launches instead of answering with the
    # terminated instances, and only its own instances describe the job.
    second = LaunchRequest(
        JobRef(first.job.id, first.job.name, attempt=1), first.spec, SERVICE_URL, first.tokens
    )
    materialized = backend.submit(second)
    tokens = [i.run_instances["ClientToken"] for i in materialized.plan.instances]
    assert tokens == [f"{first.job.id}-1-algo-1", f"{first.job.id}-1-algo-2"]
    live = {
        i["InstanceId"] for i in _instances(ec2, first.job.id) if i["State"]["Name"] != "terminated"
    }
    assert len(live) == 2
    assert not live & old
    statuses = backend.describe(second.job) or {}
    assert sorted(statuses) == ["algo-1", "algo-2"]
    assert {s.state for s in statuses.values()} <= {InstanceState.PENDING, InstanceState.RUNNING}
    backend.teardown(second.job)
    assert set(_states(ec2, first.job.id)) == {"terminated"}


def test_a_type_the_region_lacks_fails_naming_it(ec2: Any, settings: Ec2Settings) -> None:
    # A real refusal of moto's: it knows which types each region offers (p3 is gone from
    # us-east-1), as EC2 does.
    request = _request(instance_type="ml.p3.2xlarge", instance_count=2)
    with pytest.raises(Ec2Error) as failure:
        _backend(ec2, settings).submit(request)
    assert str(failure.value) == (
        "EC2 could not launch algo-1 of job-1 as p3.2xlarge (ml.p3.2xlarge): "
        "InvalidInstanceType.NotFound: The instance type 'p3.2xlarge' does not exist; "
        "no instance was left running"
    )
    assert not failure.value.capacity  # never there: waiting would not help
    assert _instances(ec2, request.job.id) == []
    assert _backend(ec2, settings).describe(request.job) is None


CAPACITY_MESSAGE = (
    "We currently do not have sufficient p4d.24xlarge capacity in the Availability Zone you "
    "requested (us-east-1a)."
)
CAPACITY_ERROR = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
    f"<Code>InsufficientInstanceCapacity</Code><Message>{CAPACITY_MESSAGE}</Message>"
    "</Error></Errors><RequestID>5f7e5f0a-0000-4000-8000-000000000000</RequestID></Response>"
)


def test_a_capacity_error_terminates_what_was_launched(ec2: Any, settings: Ec2Settings) -> None:
    request = _request(instance_type="ml.p4d.24xlarge", instance_count=3)
    # EC2 launches algo-1, then runs out of p4d.24xlarge (HTTP 500, as EC2 answers).
    _answer(ec2, "RunInstances", 500, CAPACITY_ERROR, calls_to_pass=1)
    with pytest.raises(Ec2Error) as failure:
        _backend(ec2, settings).submit(request)

    [launched] = _instances(ec2, request.job.id)
    assert str(failure.value) == (
        "EC2 could not launch algo-2 of job-1 as p4d.24xlarge (ml.p4d.24xlarge): "
        f"InsufficientInstanceCapacity: {CAPACITY_MESSAGE}; "
        f"terminated the job's 1 launched instance(s): {launched['InstanceId']}"
    )
    assert failure.value.capacity  # a spot job waits and tries again
    assert _tags(launched)["runyard:host"] == "algo-1"
    assert launched["State"]["Name"] == "terminated"


# -- observing and ending ---------------------------------------------------------------


def test_describe_maps_ec2_states(ec2: Any, settings: Ec2Settings) -> None:
    request = _request(instance_count=2)
    backend = _backend(ec2, settings)
    assert backend.describe(request.job) is None
    backend.submit(request)
    first, second = _instances(ec2, request.job.id)
    ec2.stop_instances(InstanceIds=[second["InstanceId"]])

    statuses = backend.describe(request.job)
    assert statuses is not None
    assert statuses["algo-1"].state == InstanceState.RUNNING
    assert statuses["algo-1"].last_output == ""
    stopped = statuses["algo-2"]
    assert stopped.state == InstanceState.EXITED
    assert stopped.reason == "Client.UserInitiatedShutdown: User initiated shutdown"
    # Stopped from outside Runyard, as EC2's code for the state says.
    assert stopped.cause == FailureCause.INSTANCE_STOPPED
    assert statuses["algo-1"].cause is None
    # An ended instance's last console lines explain it (moto's console is a fixed sample).
    console = ec2.get_console_output(InstanceId=second["InstanceId"])["Output"]
    assert "Linux version" in console
    assert stopped.last_output == "\n".join(console.splitlines()[-20:])
    assert backend.console(request.job) == {"algo-1": console, "algo-2": console}

    ec2.terminate_instances(InstanceIds=[first["InstanceId"]])
    statuses = backend.describe(request.job)
    assert statuses is not None
    assert statuses["algo-1"].state == InstanceState.EXITED
    # What moto never shows, from the table itself.
    assert instance_state({"State": {"Name": "pending"}}) == InstanceState.PENDING
    assert instance_state({"State": {"Name": "rebooting"}}) == InstanceState.UNKNOWN
    assert instance_state({}) == InstanceState.UNKNOWN


def _count_calls(client: Any, operation: str) -> list[str]:
    """Every ``operation`` call the client makes from now on, by instance id."""
    calls: list[str] = []

    def count(params: dict[str, Any], **_: Any) -> None:
        calls.append(params.get("InstanceId", ""))

    client.meta.events.register(f"provide-client-params.ec2.{operation}", count)
    return calls


def test_a_terminated_instances_console_is_read_once(ec2: Any, settings: Ec2Settings) -> None:
    request = _request(instance_count=2)
    backend = _backend(ec2, settings)
    backend.submit(request)
    first, second = _instances(ec2, request.job.id)
    ec2.terminate_instances(InstanceIds=[first["InstanceId"]])
    ec2.stop_instances(InstanceIds=[second["InstanceId"]])
    calls = _count_calls(ec2, "GetConsoleOutput")
    for _ in range(3):  # three reconcile passes
        statuses = backend.describe(request.job)
        assert statuses is not None
        assert "Linux version" in statuses["algo-1"].last_output
    assert backend.console(request.job)["algo-1"]
    # Terminated: its console never changes again. Stopped: it may still.
    assert calls.count(first["InstanceId"]) == 1
    assert calls.count(second["InstanceId"]) == 4


def test_the_console_cache_outlives_the_backend_and_stays_small(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moto: aws.MotoServer
) -> None:
    # The reconciler builds a backend every pass: what they keep is the process's.
    monkeypatch.setenv("RUNYARD_EC2__ENDPOINT_URL", moto.url)
    settings = Settings(home=tmp_path)
    one, two = registry.build("ec2", settings), registry.build("ec2", settings)
    assert isinstance(one, Ec2Backend)
    assert isinstance(two, Ec2Backend)
    assert one._consoles is two._consoles
    cache = ConsoleCache(size=2)
    for instance_id in ("i-1", "i-2", "i-3"):
        cache.put(instance_id, instance_id)
    assert [cache.get(i) for i in ("i-1", "i-2", "i-3")] == [None, "i-2", "i-3"]


def test_stop_and_teardown_leave_nothing_running(ec2: Any, settings: Ec2Settings) -> None:
    request = _request(instance_count=2)
    other = _request("job-2", "b" * 32)
    backend = _backend(ec2, settings)
    backend.submit(request)
    backend.submit(other)
    assert backend.exists(request.job)

    backend.cancel(request.job, force=False)
    assert set(_states(ec2, request.job.id)) <= {"shutting-down", "terminated"}
    backend.teardown(request.job)
    assert _states(ec2, request.job.id) == ["terminated", "terminated"]
    assert not backend.exists(request.job)
    backend.teardown(request.job)  # again: nothing to do
    backend.cancel(request.job, force=True)
    # Another job's instances are not touched.
    assert _states(ec2, other.job.id) == ["running"]


def test_teardown_names_instances_that_do_not_end(ec2: Any, settings: Ec2Settings) -> None:
    request = _request(instance_count=2)
    backend = _backend(ec2, settings.model_copy(update={"teardown_timeout_seconds": 0.2}))
    backend.submit(request)
    ids = [i["InstanceId"] for i in _instances(ec2, request.job.id)]
    # EC2 accepts the termination, but the instances never get there.
    accepted = (
        '<TerminateInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        "<requestId>r-1</requestId><instancesSet/></TerminateInstancesResponse>"
    )
    _answer(ec2, "TerminateInstances", 200, accepted)
    with pytest.raises(TeardownError) as failure:
        backend.teardown(request.job)
    assert str(failure.value) == (
        f"EC2 instances of job-1 not terminated after 0.2 s: {ids[0]} (running), {ids[1]} (running)"
    )


def test_held_jobs_finds_instances_left_behind(ec2: Any, settings: Ec2Settings) -> None:
    backend = _backend(ec2, settings)
    ended, left = _request("job-1", "a" * 32), _request("job-2", "b" * 32, instance_count=2)
    backend.submit(ended)
    backend.submit(left)
    # An instance that is none of Runyard's business.
    ec2.run_instances(ImageId=IMAGE, MinCount=1, MaxCount=1, InstanceType="m5.large")
    assert backend.held_jobs() == [ended.job, left.job]
    backend.teardown(ended.job)
    assert backend.held_jobs() == [left.job]


# -- settings ---------------------------------------------------------------------------


def test_settings_are_read_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moto: aws.MotoServer
) -> None:
    monkeypatch.setenv("RUNYARD_EC2__REGION", "eu-west-1")
    monkeypatch.setenv("RUNYARD_EC2__ENDPOINT_URL", moto.url)
    monkeypatch.setenv("RUNYARD_EC2__IMAGE_ID", IMAGE)
    monkeypatch.setenv("RUNYARD_EC2__SECURITY_GROUP_IDS", '["sg-1", "sg-2"]')
    monkeypatch.setenv("RUNYARD_EC2__NETWORK_INTERFACE", "eth0")
    monkeypatch.setenv("RUNYARD_EC2__TEARDOWN_TIMEOUT_SECONDS", "42")
    monkeypatch.setenv("RUNYARD_EC2__START_TIMEOUT_SECONDS", "900")
    settings = Settings(home=tmp_path)
    assert settings.ec2.region == "eu-west-1"
    assert settings.ec2.security_group_ids == ["sg-1", "sg-2"]
    assert settings.ec2.network_interface == "eth0"
    assert settings.ec2.teardown_timeout_seconds == 42

    backend = registry.build("ec2", settings)
    assert isinstance(backend, Ec2Backend)
    assert backend.start_timeout == 900
    assert backend.client.meta.region_name == "eu-west-1"
    assert backend.client.meta.endpoint_url == moto.url

    monkeypatch.setenv("RUNYARD_EC2__NETWORK_INTERFACE", "eth0; reboot")
    with pytest.raises(ValidationError, match="network_interface"):
        Settings(home=tmp_path)


def test_a_catalog_image_is_installed_beside_the_runtime_and_a_container_is_refused(
    ec2: Any, settings: Ec2Settings
) -> None:
    backend = _backend(ec2, settings)
    image = {"name": "pytorch-training:2.13.0-cpu-py311"}
    first = backend.materialize(_request(image=image)).public["instances"][0]
    script = first["run_instances"]["UserData"]
    catalog_image = Catalog().get(image["name"])
    assert catalog_image is not None
    words = [RUNTIME_WHEEL, *catalog_image.packages]
    assert f"--disable-pip-version-check {shlex.join(words)}\n" in script
    assert '"image": "pytorch-training:2.13.0-cpu-py311"' in script
    container = _request(image={"container": "registry.example.com/team/train:7"})
    with pytest.raises(SpecError, match="a container image, which EC2 instances do not run"):
        refuse(backend.check(container.spec, SERVICE_URL))
