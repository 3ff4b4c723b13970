"""Channels split across hosts (ShardedByS3Key) and s3:// code, data and model, with the
runtime as real processes and moto's server as S3."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests import aws
from tests.instances import launch_request, start_runtime, write_instances

BUCKET = "data"
SCRIPT = """
import os
for channel in ("train", "local", "config"):
    print(channel, sorted(os.listdir(os.environ["SM_CHANNEL_" + channel.upper()])))
with open(os.path.join(os.environ["SM_MODEL_DIR"], "weights"), "w") as f:
    f.write(os.environ["SM_CURRENT_HOST"])
print("trained", flush=True)
"""


@pytest.fixture
def s3(moto: aws.MotoServer) -> Any:
    moto.reset()
    client = moto.client("s3")
    client.create_bucket(Bucket=BUCKET)
    return client


def _source_tarball(s3: Any) -> str:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("train.py")
        info.size = len(SCRIPT.encode())
        tar.addfile(info, io.BytesIO(SCRIPT.encode()))
    s3.put_object(Bucket=BUCKET, Key="sources/code.tar.gz", Body=buffer.getvalue())
    return f"s3://{BUCKET}/sources/code.tar.gz"


def _run(bases: dict[str, Path], env: dict[str, str]) -> dict[str, tuple[int, str]]:
    processes = {host: start_runtime(base, **env) for host, base in bases.items()}
    results = {}
    for host, process in processes.items():
        try:
            output, _ = process.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
        results[host] = (process.returncode, output)
    return results


def _channel(base: Path, name: str) -> set[str]:
    return {path.name for path in (base / "input" / "data" / name).iterdir()}


def test_two_hosts_share_a_sharded_channel_and_store_the_model_on_s3(
    tmp_path: Path, s3: Any, moto: aws.MotoServer
) -> None:
    parts = [f"part-{i}.csv" for i in range(5)]
    for part in parts:
        s3.put_object(Bucket=BUCKET, Key=f"train/{part}", Body=part.encode())
    s3.put_object(Bucket=BUCKET, Key="config/settings.json", Body=b"{}")
    local = tmp_path / "local"
    local.mkdir()
    for name in ("a", "b", "c"):
        (local / name).write_text(name)
    request = launch_request(
        tmp_path,
        source_uri=_source_tarball(s3),
        instance_count=2,
        output_path=f"s3://{BUCKET}/models",
        inputs={
            "train": {"uri": f"s3://{BUCKET}/train", "distribution": "ShardedByS3Key"},
            "local": {"uri": local.as_uri(), "distribution": "ShardedByS3Key"},
            "config": {"uri": f"s3://{BUCKET}/config"},
        },
    )
    bases = write_instances(tmp_path / "job", request)
    results = _run(bases, moto.client_env())
    for code, output in results.values():
        assert code == 0, output
        assert "[stdout] trained" in output

    # Object i (by key) on host i mod 2: none twice, none missed.
    first, second = _channel(bases["algo-1"], "train"), _channel(bases["algo-2"], "train")
    assert first == {"part-0.csv", "part-2.csv", "part-4.csv"}
    assert second == {"part-1.csv", "part-3.csv"}
    assert (bases["algo-1"] / "input/data/train/part-2.csv").read_text() == "part-2.csv"
    # The same rule for file://; a replicated channel reaches every host whole.
    assert (_channel(bases["algo-1"], "local"), _channel(bases["algo-2"], "local")) == (
        {"a", "c"},
        {"b"},
    )
    assert (
        _channel(bases["algo-1"], "config")
        == _channel(bases["algo-2"], "config")
        == {"settings.json"}
    )

    body = s3.get_object(Bucket=BUCKET, Key="models/job-1/output/model.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        weights = tar.extractfile("weights")
        assert weights is not None
        assert weights.read() == b"algo-1"


def test_a_missing_channel_prefix_fails_before_training(
    tmp_path: Path, s3: Any, moto: aws.MotoServer
) -> None:
    missing = f"s3://{BUCKET}/no-such-prefix"
    request = launch_request(
        tmp_path,
        source_uri=_source_tarball(s3),
        inputs={"train": {"uri": missing, "distribution": "ShardedByS3Key"}},
    )
    base = write_instances(tmp_path / "job", request)["algo-1"]
    code, output = _run({"algo-1": base}, moto.client_env())["algo-1"]
    assert code == 1, output
    reason = (base / "output" / "failure").read_text()
    # As SageMaker says it: the download failed, naming the channel and what is missing.
    assert reason == (
        f"ClientError: Data download failed: channel train: no S3 objects found under "
        f"{missing}: check that objects exist under that prefix, and that the job's "
        f"credentials may list bucket {BUCKET!r}"
    )
    assert "Starting" not in output
    assert "trained" not in output
