"""The instance entry point as a real process, on files laid out as a backend lays them."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from contract import storage
from tests.instances import launch_request, start_runtime, write_instances

CHECKING_SCRIPT = """
import argparse, json, os, sys
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int)
parser.add_argument("--tag")
args = parser.parse_args()
data = os.environ["SM_CHANNEL_TRAIN"]
seen = {
    "epochs": args.epochs, "tag": args.tag, "cwd": os.getcwd(),
    "data": sorted(os.listdir(data)), "token": os.environ.get("RUNYARD_JOB_TOKEN"),
}
with open(os.path.join(os.environ["SM_MODEL_DIR"], "seen.json"), "w") as f:
    json.dump(seen, f)
print("trained", flush=True)
"""


def _source(tmp_path: Path, script: str) -> Path:
    source = tmp_path / "src"
    source.mkdir(exist_ok=True)
    (source / "train.py").write_text(script)
    return source


def test_runs_the_script_and_stores_the_model(tmp_path: Path) -> None:
    source = _source(tmp_path, CHECKING_SCRIPT)
    data = tmp_path / "data"
    data.mkdir()
    (data / "part-0.csv").write_text("1,2\n")
    request = launch_request(
        source, hyperparameters={"epochs": 2, "tag": "a b"}, inputs={"train": data.as_uri()}
    )
    base = write_instances(tmp_path / "job", request)["algo-1"]
    process = start_runtime(base, RUNYARD_JOB_TOKEN="must-not-leak")
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert "[stdout] trained" in output

    model = storage.local_path(request.spec.output_path or "") / "job-1" / "output" / "model.tar.gz"
    with tarfile.open(model) as tar:
        seen = json.load(tar.extractfile("seen.json"))  # type: ignore[arg-type]
    assert seen == {
        "epochs": 2,
        "tag": "a b",
        "cwd": str(base / "code"),
        "data": ["part-0.csv"],
        "token": None,
    }
    assert (base / "output" / "success").exists()


UNCOMPRESSED_MODEL_SCRIPT = """
import os
model = os.environ["SM_MODEL_DIR"]
os.makedirs(os.path.join(model, "tokenizer"))
with open(os.path.join(model, "weights.bin"), "wb") as f:
    f.write(bytes(range(256)))
with open(os.path.join(model, "tokenizer", "vocab.txt"), "w") as f:
    f.write("a\\nb\\n")
# A link a root runtime must not follow into the machine's files.
os.symlink("/etc/shadow", os.path.join(model, "shadow"))
"""


def test_a_model_stored_uncompressed_is_its_files_under_output_model(tmp_path: Path) -> None:
    # SageMaker's OutputDataConfig.CompressionType NONE (disable_output_compression).
    source = _source(tmp_path, UNCOMPRESSED_MODEL_SCRIPT)
    request = launch_request(source, output_compression="NONE")
    base = write_instances(tmp_path / "job", request)["algo-1"]
    process = start_runtime(base)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    uri = storage.model_uri(request.spec.output_path, "job-1", "NONE")
    assert uri.endswith("/job-1/output/model/")
    assert f"Model stored at {uri}" in output
    assert "Model: shadow is not a regular file, left out" in output
    stored = storage.local_path(uri)
    files = sorted(str(path.relative_to(stored)) for path in stored.rglob("*") if path.is_file())
    assert files == ["tokenizer/vocab.txt", "weights.bin"]
    assert (stored / "weights.bin").read_bytes() == bytes(range(256))
    assert not (stored.parent / "model.tar.gz").exists()


def test_a_failing_script_fails_the_instance_with_its_reason(tmp_path: Path) -> None:
    source = _source(tmp_path, "raise SystemExit('config file missing')\n")
    base = write_instances(tmp_path / "job", launch_request(source))["algo-1"]
    process = start_runtime(base)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 1, output
    assert "config file missing" in (base / "output" / "failure").read_text()


OUTPUT_DATA_SCRIPT = """
import os, sys
with open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "eval.json"), "w") as f:
    f.write('{"accuracy": 0.9}')
os.makedirs(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "plots"))
with open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "plots", "loss.txt"), "w") as f:
    f.write("1.0 0.5")
sys.exit(int(sys.argv[-1]))
"""


def _output_data(tmp_path: Path, exit_code: int) -> dict[str, bytes]:
    """What the job's output.tar.gz holds, after its script exited with ``exit_code``."""
    tmp_path.mkdir()
    request = launch_request(
        _source(tmp_path, OUTPUT_DATA_SCRIPT), hyperparameters={"code": exit_code}
    )
    base = write_instances(tmp_path / "job", request)["algo-1"]
    process = start_runtime(base)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == exit_code, output
    stored = storage.local_path(storage.output_data_uri(request.spec.output_path, "job-1"))
    with tarfile.open(stored) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_what_the_script_leaves_in_its_output_data_dir_is_stored_beside_the_model(
    tmp_path: Path,
) -> None:
    # As SageMaker stores it: output.tar.gz, whether the job completed or failed (what a
    # failed job left is often what tells why).
    expected = {"eval.json": b'{"accuracy": 0.9}', "plots/loss.txt": b"1.0 0.5"}
    assert _output_data(tmp_path / "completed", 0) == expected
    assert _output_data(tmp_path / "failed", 3) == expected


def test_no_output_data_stores_no_output_tarball(tmp_path: Path) -> None:
    request = launch_request(_source(tmp_path, "print('nothing kept')\n"))
    base = write_instances(tmp_path / "job", request)["algo-1"]
    process = start_runtime(base)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    folder = storage.local_path(request.spec.output_path) / "job-1" / "output"
    assert sorted(path.name for path in folder.iterdir()) == ["model.tar.gz"]


def test_missing_entry_point_is_a_client_error(tmp_path: Path) -> None:
    source = _source(tmp_path, "print('x')")
    base = write_instances(tmp_path / "job", launch_request(source))["algo-1"]
    (source / "train.py").unlink()
    process = start_runtime(base)
    _output, _ = process.communicate(timeout=60)
    assert process.returncode == 1
    assert (base / "output" / "failure").read_text().startswith("ClientError: entry point train.py")


def test_torch_distributed_ranks_two_instances(tmp_path: Path) -> None:
    script = (
        "import os, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "t = torch.tensor([dist.get_rank() + 1.0])\n"
        "dist.all_reduce(t)\n"
        "host = os.environ['SM_CURRENT_HOST']\n"
        "print(f'rank {dist.get_rank()} of {dist.get_world_size()} on {host} sum {t.item()}')\n"
        "dist.destroy_process_group()\n"
    )
    source = _source(tmp_path, script)
    request = launch_request(
        source, instance_count=2, distribution={"torch_distributed": {"enabled": True}}
    )
    bases = write_instances(tmp_path / "job", request)
    processes = {host: start_runtime(base) for host, base in bases.items()}
    outputs = {host: process.communicate(timeout=120)[0] for host, process in processes.items()}
    assert all(process.returncode == 0 for process in processes.values()), outputs
    assert "rank 0 of 2 on algo-1 sum 3.0" in outputs["algo-1"]
    assert "rank 1 of 2 on algo-2 sum 3.0" in outputs["algo-2"]


def test_a_shell_entry_point_runs_with_its_arguments(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.sh").write_text('echo "shell on $SM_CURRENT_HOST with $*"\n')
    request = launch_request(source, entry_point="train.sh", hyperparameters={"epochs": 2})
    base = write_instances(tmp_path / "job", request)["algo-1"]
    process = start_runtime(base)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert "[stdout] shell on algo-1 with --epochs 2" in output
