"""How a job ends, on real processes: it reads Completed as its last instance exits,
because that instance's report wakes the reconciler (the sweeps here are minutes
apart), and the SageMaker SDK reads its training and billable seconds, and a spot job's
savings, as Runyard bills them: billable never more than training, equal on demand."""

from __future__ import annotations

import re
import subprocess
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.aws import MotoServer
from tests.e2e.conftest import Stack
from tests.e2e.sdk_venvs import sdk_python
from tests.e2e.test_sagemaker_sdk import HERE, sdk_environment
from tests.instance_exits import instance_leaders, last_exit

pytestmark = pytest.mark.e2e

# Sweeps minutes apart: only the instances' own reports can end these jobs in time.
STACK_SETTINGS = {"RUNYARD_RECONCILE_INTERVAL": "300", "RUNYARD_RUNNING_SWEEP_SECONDS": "600"}
# Generous, for a busy machine: an end no report woke would wait for a sweep, minutes off.
PROMPT_END = timedelta(seconds=20)
SCRIPT = """\
import os, time
print("training", flush=True)
time.sleep(2)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.bin"), "wb") as model:
    model.write(os.urandom(5_000_000))
"""
SPOT = {"use_spot_instances": True, "max_run": 600, "max_wait": 1200}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("job-end")
    (source / "train.py").write_text(SCRIPT)
    return source


def _run(stack: Stack, source: Path, name: str, **spec: Any) -> tuple[dict[str, Any], datetime]:
    """Run the job to its end; returns it, and when its last instance exited."""
    with stack.client() as client:
        job = stack.submit(client, source, name=name, entry_point="train.py", **spec)
        leaders = instance_leaders(stack.home / "jobs" / job["id"], spec["instance_count"])
        exited = last_exit(leaders)
        done = stack.wait_until_ended(client, name)
    assert done["status"] == "Completed", stack.explain(done)
    return done, exited


def test_a_job_reads_completed_moments_after_its_last_instance_exits(
    stack: Stack, source: Path
) -> None:
    job, exited = _run(stack, source, "ends-promptly", instance_count=2)
    completed = datetime.fromisoformat(job["transitions"][-1]["start_time"])
    # The result is recorded with the last instance's report, before the instances are
    # removed (so perhaps before its last process has gone), and never long after it.
    assert completed - exited < PROMPT_END, stack.explain(job)


def test_the_sdk_reads_the_training_and_billable_seconds_runyard_bills(
    stack: Stack, source: Path, moto: MotoServer
) -> None:
    on_demand, _ = _run(stack, source, "billed-on-demand", instance_count=2)
    spot, _ = _run(stack, source, "billed-on-spot", instance_count=2, **SPOT)
    printed = _sdk_billing(stack, moto, ["billed-on-demand", "billed-on-spot"])

    # The SDK prints seconds times the instance count.
    demand = printed["billed-on-demand"]
    assert demand["Billable"] == demand["Training"] == on_demand["billable_seconds"] * 2
    assert "savings" not in demand

    saved = printed["billed-on-spot"]
    assert saved["Billable"] < saved["Training"]
    assert saved["Billable"] == spot["billable_seconds"] * 2
    # What Runyard's API says is what the SDK prints.
    assert saved["savings"] == f"{spot['spot_savings_percent']:.1f}%"


def _sdk_billing(stack: Stack, moto: MotoServer, names: list[str]) -> dict[str, dict[str, Any]]:
    """What the SageMaker SDK v2 prints of each job's billing, by job."""
    done = subprocess.run(
        [str(sdk_python("v2")), str(HERE / "print_billing.py"), *names],
        env=sdk_environment(stack, moto),
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{output}\n{stack.diagnostics()}"
    found: dict[str, dict[str, Any]] = {}
    for line in output.splitlines():
        if line.startswith("job "):
            job = found.setdefault(line.removeprefix("job "), {})
        elif seconds := re.fullmatch(r"(Training|Billable) seconds: (\d+)", line):
            job[seconds[1]] = int(seconds[2])
        elif savings := re.fullmatch(r"Managed Spot Training savings: (-?[\d.]+%)", line):
            job["savings"] = savings[1]
    assert set(found) == set(names), output
    return found
