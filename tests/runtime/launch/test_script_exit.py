"""What happens to an instance after its script's last line, with real runtimes and real
scripts: a torch rank is not aborted while its interpreter is torn down, a native abort
after a script that succeeded does not fail the instance, and one before its end still
does."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.instances import launch_request, start_runtime, write_instances

# Rank 0 leaves gloo's worker thread running Python (a future's callback, as a DDP
# communication hook's would) when its script ends without destroying its group (whose
# shutdown would wait for the callback), and its interpreter's teardown takes a while (a
# DDP model and torch's modules took seconds here): the callback takes the GIL back while
# the interpreter finalizes, which CPython answers with pthread_exit and C++ with
# std::terminate (pytorch/pytorch#38228).
TORCH_CALLBACK_AT_EXIT = """
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")

class SlowTeardown:
    def __del__(self):
        time.sleep(3)

if dist.get_rank() == 0:
    teardown = SlowTeardown()
    reduced = dist.all_reduce(torch.ones(10), async_op=True).get_future()
    reduced.then(lambda _: time.sleep(1.5))
    reduced.wait()
else:
    time.sleep(0.5)
    dist.all_reduce(torch.ones(10))
print(f"rank {dist.get_rank()}: last line", flush=True)
"""

# No torch: the interpreter is torn down as usual, and aborts in it.
ABORT_AT_TEARDOWN = """
import os
class AbortsAtTeardown:
    def __del__(self):
        os.abort()
left = AbortsAtTeardown()
open(os.path.join(os.environ["SM_MODEL_DIR"], "model.bin"), "w").write("trained")
print("last line", flush=True)
"""

ABORT_BEFORE_THE_END = """
import os
print("half way", flush=True)
os.abort()
print("last line", flush=True)
"""


def _instances(tmp_path: Path, script: str, **spec: object) -> dict[str, Path]:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(script)
    return write_instances(tmp_path / "job", launch_request(source, **spec))


def _finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    output, _ = process.communicate(timeout=180)
    return process.returncode, output


def test_a_torch_rank_is_not_aborted_by_a_thread_of_gloo_at_exit(tmp_path: Path) -> None:
    bases = _instances(
        tmp_path,
        TORCH_CALLBACK_AT_EXIT,
        instance_count=2,
        distribution={"torch_distributed": {"enabled": True}},
    )
    processes = {host: start_runtime(base) for host, base in bases.items()}
    ended = {host: _finish(process) for host, process in processes.items()}
    assert all(code == 0 for code, _ in ended.values()), ended
    assert "rank 0: last line" in ended["algo-1"][1]
    assert "terminate called" not in ended["algo-1"][1]
    assert "Script exited with code 0" in ended["algo-1"][1]
    assert (bases["algo-1"] / "output" / "success").exists()


def test_an_abort_after_the_scripts_success_does_not_fail_the_instance(tmp_path: Path) -> None:
    base = _instances(tmp_path, ABORT_AT_TEARDOWN)["algo-1"]
    code, output = _finish(start_runtime(base))
    assert code == 0, output
    assert "last line" in output
    assert (
        "Process 0 ended its script successfully, then was killed by SIGABRT (exit code 134)"
        " as its interpreter shut down: its script's success stands"
    ) in output
    assert (base / "output" / "success").exists()
    assert not (base / "output" / "failure").exists()


def test_an_abort_before_the_scripts_end_still_fails_it(tmp_path: Path) -> None:
    base = _instances(tmp_path, ABORT_BEFORE_THE_END)["algo-1"]
    code, output = _finish(start_runtime(base))
    assert code == 134, output
    assert "half way" in output
    assert "last line" not in output
    reason = (base / "output" / "failure").read_text()
    assert reason.startswith("AlgorithmError: killed by SIGABRT: "), reason
    assert reason.endswith(", exit code: 134"), reason
    assert "its script's success stands" not in output
