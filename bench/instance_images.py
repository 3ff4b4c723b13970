"""What images and layers cost an instance, measured on throwaway `runyard server`s.

- Start overhead: per instance, seconds from its runtime's first line to its script's
  first line (the code fetched, the job's environment made, the script started), for a
  1-instance job of a script that prints one line: on the built-in image, on a catalog
  image already built, and with --baseline REV on the code at REV (a git worktree whose
  server runs from an environment above this .venv), alternating, in one run. Beside it,
  the CPU that making the two layers costs, measured in this process.
- A 1-package requirements.txt (--package, from the machine's package index): install
  time on a job's first run, with the server's download cache empty, and on its second.
- With --build: the first build of the catalog's PyTorch 2.13 image (wall and CPU of the
  builder) and the cached start after it.

    .venv/bin/python bench/instance_images.py [--runs 5] [--baseline 613d63a] [--build]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from _server import REPO, server_and_home

from runyard.client import Client

SCRIPT = 'print("first line", flush=True)\n'
# A catalog image made of one small package, built once on the server's first use.
SMALL_IMAGE = {
    "framework": "pytorch",
    "framework_version": "0.0.1",
    "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
    "packages": ["six"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", help="a git revision to compare the start with")
    parser.add_argument("--package", default="pyfiglet", help="what requirements.txt names")
    parser.add_argument("--build", action="store_true", help="time the PyTorch 2.13 build")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="runyard-bench-images-") as scratch:
        work = Path(scratch)
        if args.build:
            _first_build(work / "store")
        _layer_cpu(work / "layers")
        _start_overhead(work, args.runs, args.baseline)
        _requirements(work, args.package)


def _first_build(store: Path) -> None:
    from contract.images import Catalog
    from provisioning.local.images import ImageStore

    image = Catalog().get("pytorch:2.13")
    assert image is not None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with open(os.devnull, "w") as quiet:
        ImageStore(store).build(image, quiet)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    started = time.monotonic()
    ImageStore(store).ensure(image)
    cached = time.monotonic() - started
    size = sum(f.stat().st_size for f in store.rglob("*") if f.is_file() and not f.is_symlink())
    print(f"{image.name}: first build {wall:.0f} s wall, {cpu:.0f} s CPU, {size / 2**30:.2f} GiB")
    print(f"{image.name}: cached start (the store finds it whole) {cached * 1000:.1f} ms")


def _layer_cpu(root: Path, runs: int = 5) -> None:
    """What the job's and an instance's layers cost, made here as a runtime makes them."""
    from runtime.instance import layers

    code = root / "code"
    code.mkdir(parents=True)
    walls, cpus = [], []
    for run in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        mine = resource.getrusage(resource.RUSAGE_SELF)
        started = time.monotonic()
        image = layers.image(sys.executable)
        job = layers.job_layer(root / f"job-{run}", image, code, os.environ, lambda _: None)
        layers.instance_layer(root / f"instance-{run}", job)
        walls.append(time.monotonic() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        mine_after = resource.getrusage(resource.RUSAGE_SELF)
        cpus.append(
            (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            + (mine_after.ru_utime - mine.ru_utime + mine_after.ru_stime - mine.ru_stime)
        )
    print(
        f"making the job's and an instance's layers: median {statistics.median(walls):.3f} s "
        f"wall, {statistics.median(cpus):.3f} s CPU (of {runs})"
    )


def _start_overhead(work: Path, runs: int, baseline: str | None) -> None:
    source = work / "quick"
    source.mkdir()
    (source / "quick.py").write_text(SCRIPT)
    kinds: dict[str, tuple[Path | None, dict[str, str]]] = {
        "built-in image": (None, {}),
        "catalog image, built": (None, {"framework_version": SMALL_IMAGE["framework_version"]}),
    }
    if baseline:
        kinds[f"code at {baseline}"] = (_baseline_python(work, baseline), {})
    results: dict[str, list[float]] = {kind: [] for kind in kinds}
    settings = {"RUNYARD_IMAGES": json.dumps([SMALL_IMAGE])}
    with contextlib.ExitStack() as servers:
        clients = {
            kind: servers.enter_context(_server(python, settings))
            for kind, (python, _) in kinds.items()
        }
        # Each server's first job builds its image or warms its caches, and is not counted.
        for kind, (_python, extra) in kinds.items():
            _overheads(clients[kind], source, f"warm-{len(results[kind])}", extra)
        for run in range(runs):
            for kind, (_python, extra) in kinds.items():
                results[kind].append(_overheads(clients[kind], source, f"run-{run}", extra))
    print(f"\nper-instance start overhead (its runtime's first line to its script's), of {runs}:")
    for kind, values in results.items():
        print(f"  {kind:<28} median {statistics.median(values):.3f} s  {_spread(values)}")


def _requirements(work: Path, package: str) -> None:
    source = work / "wants"
    source.mkdir()
    (source / "quick.py").write_text(SCRIPT)
    (source / "requirements.txt").write_text(f"{package}\n")
    with _server(None, {}) as client:
        print(f"\na 1-package requirements.txt ({package}), installed once per job:")
        for label in ("first run, empty download cache", "second run, cache warm"):
            lines = _job_lines(client, source, label.split(",")[0].replace(" ", "-"), {})
            installed = next(line for line in lines if line.startswith("Installed requirements"))
            print(f"  {label:<34} {installed.split(' in ')[-1]}")


@contextlib.contextmanager
def _server(python: Path | None, settings: dict[str, str]) -> Iterator[Client]:
    with server_and_home(settings, python=python) as (client, _home):
        yield client


def _overheads(client: Client, source: Path, name: str, extra: dict[str, str]) -> float:
    spec = {
        "name": name,
        "entry_point": "quick.py",
        "source_uri": client.upload_source(source),
        "instance_type": "local",
        **extra,
    }
    client.create_job(spec)
    job = client.wait(name, poll=0.05, timeout=900)
    assert job["status"] == "Completed", job
    events = [e for e in client.logs(name) if "message" in e]
    first_runtime = min(e["time"] for e in events if e["stream"] == "runtime")
    first_line = min(e["time"] for e in events if e["message"] == "first line")
    return (
        datetime.fromisoformat(first_line) - datetime.fromisoformat(first_runtime)
    ).total_seconds()


def _job_lines(client: Client, source: Path, name: str, extra: dict[str, str]) -> list[str]:
    spec = {"name": name, "entry_point": "quick.py", "instance_type": "local", **extra}
    client.create_job({**spec, "source_uri": client.upload_source(source)})
    job = client.wait(name, poll=0.1, timeout=900)
    assert job["status"] == "Completed", job
    return [str(e["message"]) for e in client.logs(name) if "message" in e]


def _baseline_python(work: Path, revision: str) -> Path:
    """An interpreter that imports Runyard from a worktree at ``revision``, and everything
    else from this .venv: a virtual environment whose site directory names the worktree
    before this one's."""
    tree = work / "baseline"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), revision],
                   check=True, capture_output=True)  # fmt: skip
    venv = work / "baseline-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    here = sysconfig.get_paths()["purelib"]
    # Read in name order: the worktree's path first, so its packages are the ones found.
    (Path(site) / "0-baseline.pth").write_text(f"{tree}\n")
    (Path(site) / "1-venv.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    return python


def _spread(values: list[float]) -> str:
    return f"(min {min(values):.3f}, max {max(values):.3f})"


if __name__ == "__main__":
    try:
        main()
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], check=False)
