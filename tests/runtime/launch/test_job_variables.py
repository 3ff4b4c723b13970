"""A job's own ``environment`` reaches its script and nothing else: real runtimes, with a
library preloaded through the job's LD_PRELOAD that notes every process that loads it, and
a script that looks through /proc at every other process of its job."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from contract import agent_hosts, variables
from contract.agent_hosts import AgentHost
from contract.instance_config import Placement, load
from provisioning.instance_files import instance_files
from provisioning.local.backend import free_port
from tests.instances import launch_request, start_runtime, write_instances

MARKER = "for-the-script-only"
SECRET = "s3cret-value-of-the-job"
AGENT = [sys.executable, "-m", "runtime.launch.local_agent"]

# Notes the command line of every process that loads it, in the file LOG names.
HOOK = r"""
#include <fcntl.h>
#include <unistd.h>

__attribute__((constructor)) static void loaded(void) {
    char line[4096];
    int fd = open("/proc/self/cmdline", O_RDONLY);
    if (fd < 0) return;
    ssize_t n = read(fd, line, sizeof line - 1);
    close(fd);
    if (n <= 0) return;
    for (ssize_t i = 0; i < n; i++) if (line[i] == '\0') line[i] = ' ';
    line[n] = '\n';
    int log = open(LOG, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (log < 0) return;
    if (write(log, line, n + 1) < 0) {}
    close(log);
}
"""

# What the script saw itself, and which of the job's variables each other process of its
# job (the runtime, mpirun, its daemon and launch agent, the other rank) was started with.
SCRIPT = """
import json, os
job = ("RUNYARD_JOB_ID=" + os.environ["RUNYARD_JOB_ID"]).encode()
names = (b"LD_PRELOAD=", b"JOB_MARKER=", b"API_TOKEN=")
others = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) == os.getpid():
        continue
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read().split(b"\\0")
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [word.decode() for word in f.read().split(b"\\0") if word]
    except OSError:
        continue
    if job in environ:
        held = [v.split(b"=")[0].decode() for v in environ if v.startswith(names)]
        others.append({"argv": argv, "held": held})
# The secret's value is not printed: the test looks for it in everything logged.
seen = {name: os.environ.get(name) for name in ("LD_PRELOAD", "JOB_MARKER")}
seen["API_TOKEN"] = len(os.environ.get("API_TOKEN", ""))
print("report " + json.dumps({"seen": seen, "others": others}), flush=True)
"""


@dataclass(frozen=True)
class Preload:
    """A library for the job's LD_PRELOAD. Without a C compiler, a path that does not
    exist: the loader then says so on the stderr of each process it was given to."""

    path: Path
    log: Path | None

    def loaded_by(self, output: str) -> list[str]:
        if self.log is None:
            return [line for line in output.splitlines() if "cannot be preloaded" in line]
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def preload(tmp_path: Path) -> Preload:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return Preload(tmp_path / "no-such-hook.so", None)
    source, library, log = tmp_path / "hook.c", tmp_path / "hook.so", tmp_path / "loaded.log"
    source.write_text(HOOK)
    subprocess.run(
        [compiler, "-shared", "-fPIC", f'-DLOG="{log}"', "-o", str(library), str(source)],
        check=True,
        timeout=60,
    )
    return Preload(library, log)


def _job_environment(preload: Preload) -> dict[str, str]:
    return {"LD_PRELOAD": str(preload.path), "JOB_MARKER": MARKER, "API_TOKEN": SECRET}


def _source(tmp_path: Path) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(SCRIPT)
    return source


def _run(base: Path, job_id: str) -> str:
    process = start_runtime(base, **{variables.JOB_ID: job_id})
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 0, output
    return output


def _reports(output: str) -> list[dict[str, Any]]:
    return [
        json.loads(line.split("report ", 1)[1])
        for line in output.splitlines()
        if "report {" in line
    ]


def _check(output: str, preload: Preload, scripts: int) -> list[list[str]]:
    """That each of ``scripts`` scripts saw the job's variables, that no other process
    of the job had them, and that only the scripts loaded the library; returns the
    command lines of the job's other processes."""
    reports = _reports(output)
    assert len(reports) == scripts, output
    for report in reports:
        assert report["seen"] == {
            "LD_PRELOAD": str(preload.path),
            "JOB_MARKER": MARKER,
            "API_TOKEN": len(SECRET),
        }
        holding = [other for other in report["others"] if other["held"]]
        assert all(_is_script(other["argv"]) for other in holding), holding
    loaded = preload.loaded_by(output)
    assert len(loaded) == scripts, (loaded, output)
    if preload.log is not None:
        assert all(line.strip().endswith("train.py") for line in loaded), loaded
    # Forwarded by name, never by value: the command lines the runtime logs hold none.
    assert SECRET not in output
    return [other["argv"] for report in reports for other in report["others"]]


def _is_script(argv: list[str]) -> bool:
    """``python train.py``, or Runyard's script runner running it (``python run_script.py
    [--exit-record PATH] train.py``), which is the script's own process."""
    if len(argv) < 2 or not argv[-1].endswith("train.py"):
        return False
    return len(argv) == 2 or Path(argv[1]).name == "run_script.py"


def _programs(argvs: list[list[str]]) -> set[str]:
    """What each command line runs: a Python module by its name, else the program's."""
    return {argv[2] if argv[1:2] == ["-m"] else Path(argv[0]).name for argv in argvs if argv}


@pytest.mark.parametrize(
    "distribution", [{}, {"torch_distributed": {"enabled": True}}], ids=["script", "torchrun"]
)
def test_a_single_process_job_gives_its_variables_to_the_script_only(
    tmp_path: Path, preload: Preload, distribution: dict[str, Any]
) -> None:
    request = launch_request(
        _source(tmp_path), distribution=distribution, environment=_job_environment(preload)
    )
    base = write_instances(tmp_path / "job", request)["algo-1"]
    others = _check(_run(base, uuid.uuid4().hex), preload, scripts=1)
    # The runtime, which starts the script (torchrun's part), was looked at and is clean.
    assert "runtime.train" in _programs(others), others


def test_an_mpi_job_gives_its_variables_to_the_ranks_only(tmp_path: Path, preload: Preload) -> None:
    distribution = {"mpi": {"enabled": True, "processes_per_host": 2}}
    request = launch_request(
        _source(tmp_path), distribution=distribution, environment=_job_environment(preload)
    )
    job_id = uuid.uuid4().hex
    base = tmp_path / "job" / "algo-1"
    hosts = tmp_path / "job" / "hosts.json"
    placement = Placement(
        master_addr="algo-1", master_port=free_port(), launch_agent=(*AGENT, str(hosts))
    )
    files = instance_files(
        request,
        "algo-1",
        placement,
        host_addresses={"algo-1": "127.0.0.1"},
        network_interface="lo",
    )
    for relative, content in files.items():
        (base / relative).parent.mkdir(parents=True, exist_ok=True)
        (base / relative).write_text(content)
    # As the local backend writes it: the daemon runs in the instance's environment.
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    instance_env = {**inherited, variables.BASE_DIR: str(base), variables.JOB_ID: job_id}
    agent_hosts.write(
        hosts,
        {"algo-1": AgentHost(base=str(base), cwd=str(load(base).paths.code), env=instance_env)},
    )
    others = _check(_run(base, job_id), preload, scripts=2)
    # mpirun, its daemon and its launch agent were all looked at, and none had them.
    launchers = {"runtime.train", "prterun", "prted", "runtime.launch.local_agent"}
    assert launchers <= _programs(others), others


def test_the_job_variables_carried_are_the_ones_taken_back() -> None:
    job = {"LD_PRELOAD": "/job/hook.so", "EMPTY": "", "PATH": "/job/bin:/bin"}
    environ = {"PATH": "/bin", **variables.carry_job_variables(job)}
    assert variables.take_job_variables(environ) == job
    assert environ == {"PATH": "/bin"}


def test_the_rank_shim_becomes_the_script_with_the_jobs_variables() -> None:
    carried = variables.carry_job_variables({"JOB_MARKER": MARKER, "RANK": "7"})
    env = {**os.environ, **carried, "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}
    show = "import json, os; print(json.dumps(dict(os.environ)))"
    done = subprocess.run(
        [sys.executable, "-m", "runtime.launch.mpi_rank", sys.executable, "-c", show],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    seen = json.loads(done.stdout)
    assert seen["JOB_MARKER"] == MARKER
    # A rank's place is Open MPI's to say, whatever the job sets.
    assert (seen["RANK"], seen["WORLD_SIZE"]) == ("1", "2")
    assert not [name for name in seen if name.startswith(variables.JOB_VARIABLE_PREFIX)]
