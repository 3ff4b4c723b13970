"""examples/parameter-server/train.py, end to end on two emulated instances."""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from tests.libraries.parameter_server.cluster import REPO, by_role, describe, run_cluster

EXAMPLE = str(Path("examples", "parameter-server", "train.py"))


def _model_dirs(root: Path) -> dict[str, str]:
    return {host: str(root / host / "model") for host in ("algo-1", "algo-2")}


def test_the_example_trains_to_its_target_loss_and_worker_0_saves_the_model(
    tmp_path: Path,
) -> None:
    assert (REPO / EXAMPLE).is_file()
    model_dirs = _model_dirs(tmp_path)
    finished = run_cluster(
        tmp_path / "logs", [EXAMPLE], worker_env=lambda host: {"SM_MODEL_DIR": model_dirs[host]}
    )
    assert [p.exit_code for p in finished] == [0, 0, 0, 0], describe(finished)
    for worker in by_role(finished, "worker"):
        epochs = re.findall(rf"epoch \d+/6 worker {worker.index} loss (\S+)", worker.output)
        assert len(epochs) == 6, worker.output
        assert float(epochs[-1]) < float(epochs[0])
    saved = Path(model_dirs["algo-1"])
    state = torch.load(saved / "model.pt", weights_only=True)
    assert sorted(state) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert json.loads((saved / "metrics.json").read_text())["loss"] < 0.15
    assert not Path(model_dirs["algo-2"]).exists()


def test_the_example_fails_when_it_misses_the_target_loss(tmp_path: Path) -> None:
    model_dirs = _model_dirs(tmp_path)
    finished = run_cluster(
        tmp_path / "logs",
        [EXAMPLE, "--epochs", "1", "--target-loss", "0.0001"],
        worker_env=lambda host: {"SM_MODEL_DIR": model_dirs[host]},
    )
    # The servers end cleanly; the workers report the miss through their exit status.
    assert [p.exit_code for p in finished] == [0, 0, 1, 1], describe(finished)
    assert "missed the target 0.0001" in by_role(finished, "worker")[0].output
