"""Seconds from a checkpoint file being written to it being stored, by size and target.

A separate process writes checkpoint files (1 MB chunks, then close) into a directory that
runtime.checkpoints.CheckpointSync watches, one at a time: the next file is written once
the last is stored, so each figure is one file's lag, not a queue's. The targets are a
file:// directory and moto's S3 server (real boto3 over HTTP, multipart above 8 MB). The
lag runs from the file's ctime (its last write, just before the close) to the object
being stored: noticing the close, copying the file aside, and uploading it.

    .venv/bin/python bench/checkpoint_upload_lag.py [--files 5] [--sizes 1 16 64] [--polling]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.checkpoints import CheckpointSync
from runtime.checkpoints.filewatch import PollingWatcher
from tests import aws

MB = 1_000_000
WRITER = """
import os, sys
root = sys.argv[1]
chunk = bytes(1_000_000)
for line in sys.stdin:
    name, size = line.split()
    with open(os.path.join(root, name), "wb") as f:
        for _ in range(int(size) // len(chunk)):
            f.write(chunk)
    print("written", flush=True)
"""
STORE_TIMEOUT = 300.0


@contextlib.contextmanager
def _targets(scratch: Path, with_s3: bool) -> Iterator[list[tuple[str, str]]]:
    targets = [("file://", (scratch / "store").as_uri())]
    if not with_s3:
        yield targets
        return
    with aws.moto_server(scratch) as server:
        os.environ.update(server.client_env())
        server.client("s3").create_bucket(Bucket="checkpoints")
        yield [*targets, ("s3:// (moto)", "s3://checkpoints/job/ckpt")]


def _measure(uri: str, scratch: Path, sizes: list[int], files: int, polling: bool) -> list[float]:
    """Each size's lags, in the order of ``sizes``, flattened ``files`` per size."""
    local = Path(tempfile.mkdtemp(dir=scratch, prefix="local-"))
    watcher = PollingWatcher(local) if polling else None
    sync = CheckpointSync(local, uri, lambda line: None, watcher=watcher, scratch_dir=scratch)
    sync.start()
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(local)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdin is not None
    assert writer.stdout is not None
    try:
        for size in sizes:
            for index in range(files):
                name = f"ckpt-{size}mb-{index}.pt"
                writer.stdin.write(f"{name} {size * MB}\n")
                writer.stdin.flush()
                assert writer.stdout.readline() == "written\n"
                _wait_stored(sync, name)
                (local / name).unlink()  # keeps the disk small; stored objects stay
    finally:
        writer.stdin.close()
        writer.wait(timeout=30)
        sync.stop()
    if sync.failed:
        raise SystemExit(f"uploads failed: {sync.failed}")
    return [upload.lag for upload in sync.uploads]


def _wait_stored(sync: CheckpointSync, name: str) -> None:
    deadline = time.monotonic() + STORE_TIMEOUT
    while not any(upload.relative == name for upload in sync.uploads):
        if time.monotonic() > deadline:
            raise SystemExit(f"{name} not stored within {STORE_TIMEOUT:.0f} s")
        time.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=5, help="files per size")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64], help="in MB")
    parser.add_argument("--polling", action="store_true", help="poll instead of inotify")
    parser.add_argument("--no-s3", action="store_true", help="file:// only")
    args = parser.parse_args()
    mechanism = "polling every 1 s" if args.polling else "inotify"
    print(f"{args.files} file(s) per size, one at a time, {mechanism}")
    print(f"{'target':<14} {'size':>6} {'median s':>9} {'max s':>7} {'MB/s':>7}")
    with tempfile.TemporaryDirectory(prefix="runyard-bench-") as name:
        scratch = Path(name)
        with _targets(scratch, not args.no_s3) as targets:
            for label, uri in targets:
                lags = _measure(uri, scratch, args.sizes, args.files, args.polling)
                for position, size in enumerate(args.sizes):
                    mine = lags[position * args.files : (position + 1) * args.files]
                    median = statistics.median(mine)
                    print(
                        f"{label:<14} {size:>4}MB {median:>9.3f} {max(mine):>7.3f} "
                        f"{size / median:>7.0f}"
                    )


if __name__ == "__main__":
    main()
