"""Seconds from POST to the user script's first line, and from its exit to Completed.

A 2-instance job whose script prints one line on start and one just before it exits;
the times come from the runtime's timestamps on those lines and the job's transitions.
Median of 5 runs on a fresh `runyard server` with its embedded defaults.

    .venv/bin/python bench/startup_latency.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from _server import running_server

SCRIPT = """\
print("first line", flush=True)
print("last line", flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--instances", type=int, default=2)
    args = parser.parse_args()
    to_first_line, exit_to_completed, wall = [], [], []
    with tempfile.TemporaryDirectory() as scratch, running_server() as client:
        source = Path(scratch)
        (source / "quick.py").write_text(SCRIPT)
        source_uri = client.upload_source(source)
        for run in range(args.runs):
            spec = {
                "name": f"latency-{run}",
                "entry_point": "quick.py",
                "source_uri": source_uri,
                "instance_type": "local",
                "instance_count": args.instances,
            }
            posted = datetime.now(UTC)
            started = time.monotonic()
            client.create_job(spec)
            job = client.wait(spec["name"], poll=0.05)
            wall.append(time.monotonic() - started)
            assert job["status"] == "Completed", job
            events = list(client.logs(spec["name"]))
            first = min(e["time"] for e in events if e["message"] == "first line")
            last = max(e["time"] for e in events if e["message"] == "last line")
            completed = job["transitions"][-1]["start_time"]
            to_first_line.append((datetime.fromisoformat(first) - posted).total_seconds())
            exit_to_completed.append(
                (datetime.fromisoformat(completed) - datetime.fromisoformat(last)).total_seconds()
            )
            print(
                f"run {run + 1}: POST->first line {to_first_line[-1]:.3f} s, "
                f"exit->Completed {exit_to_completed[-1]:.3f} s, "
                f"POST->Completed seen {wall[-1]:.3f} s"
            )
    print(f"\n{args.instances}-instance job, median of {args.runs}:")
    print(f"  POST -> first line of the script: {statistics.median(to_first_line):.3f} s")
    print(f"  script exit -> Completed:         {statistics.median(exit_to_completed):.3f} s")
    print(f"  POST -> Completed (client view):  {statistics.median(wall):.3f} s")


if __name__ == "__main__":
    main()
