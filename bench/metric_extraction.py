"""What searching a job's lines for its metrics costs, and what it costs everyone else.

Two sets of metric definitions over one log batch each:

- typical: 3 definitions (``loss=``, ``acc=``, ``epoch``) over 5,000 lines of 80 characters;
- costly: 40 definitions that RE2's DFA cannot hold (``[ab]*a[ab]{60}c(\\d)``, 70
  instructions, within the bound on a program) over 256 lines of 16 KiB of random a/b,
  the most one batch carries.

For each it prints the CPU per line of the search itself (this process, the service's
own ``find``), then, against a fresh ``runyard server`` on its defaults: how long the
instance's POST of the batch takes to be answered, the slowest answer to another user's
``GET /v1/me`` sent every 50 ms while the lines are searched, and when the points (or the
host's stop) are in.

    .venv/bin/python bench/metric_extraction.py
"""

from __future__ import annotations

import random
import sys
import threading
import time
from typing import Any

import httpx
from _server import REPO, server_and_home

sys.path.insert(0, str(REPO))

from service.auth.tokens import instance_token
from service.kit.db import to_micros, utcnow
from service.logs.schemas import Line
from service.metrics import service

TYPICAL = [
    {"name": "loss", "regex": r"loss=([0-9.]+)"},
    {"name": "acc", "regex": r"acc=([0-9.]+)"},
    {"name": "epoch", "regex": r"^epoch (\d+)"},
]
COSTLY = [{"name": f"m{n}", "regex": r"[ab]*a[ab]{60}c(\d)"} for n in range(40)]


def _typical_lines() -> list[str]:
    return [
        f"epoch {n // 500} step {n} loss={1 / (n + 1):.6f} acc=0.{n:04d} lr=0.001"
        for n in range(5000)
    ]


def _costly_lines() -> list[str]:
    chooser = random.Random(7)
    return ["".join(chooser.choice("ab") for _ in range(16_384)) for _ in range(256)]


def _cpu_per_line(definitions: list[dict[str, str]], messages: list[str]) -> float:
    now = to_micros(utcnow())
    lines = [Line(seq, now, "stdout", text) for seq, text in enumerate(messages, start=1)]
    compiled = service.definitions({"metric_definitions": definitions})
    started = time.thread_time()
    service.find("bench", "algo-1", compiled, lines, cpu_budget=1e9)
    return (time.thread_time() - started) / len(lines)


def _served(label: str, definitions: list[dict[str, str]], messages: list[str]) -> None:
    with server_and_home() as (client, home):
        source = home / "code"
        source.mkdir()
        # A live job whose instance prints nothing: only this benchmark posts its lines
        # (numbered far above any of the instance's own).
        (source / "train.py").write_text("import time\ntime.sleep(600)\n")
        name = f"metrics-{label}"
        job = client.create_job(
            {
                "name": name,
                "entry_point": "train.py",
                "source_uri": client.upload_source(source),
                "instance_type": "local",
                "metric_definitions": definitions,
            }
        )
        key = (home / "secret_key").read_text().strip().encode()
        token = instance_token(key, job["id"], "algo-1")
        stamp = time.time()
        body = {"first_seq": 1_000_000, "rows": [[stamp, "stdout", text] for text in messages]}
        slowest = _while_probing(client, lambda: _post(client.url, name, token, body))
        print(
            f"{label}: POST answered in {slowest['posted'] * 1000:.0f} ms; another user's "
            f"GET /v1/me at most {slowest['me'] * 1000:.0f} ms while the lines are searched"
        )
        if definitions is TYPICAL:
            print(f"{label}: the points are served {_until_served(client, name):.2f} s later")
        client.stop_job(name)
        client.wait(name, poll=0.5)


def _post(url: str, name: str, token: str, body: dict[str, Any]) -> float:
    started = time.monotonic()
    answer = httpx.post(
        f"{url}/v1/training-jobs/{name}/instances/algo-1/logs",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=600,
    )
    answer.raise_for_status()
    return time.monotonic() - started


def _while_probing(client: Any, action: Any) -> dict[str, float]:
    """``action``'s seconds, and the slowest GET /v1/me during it and 5 s after."""
    slowest = {"me": 0.0}
    done = threading.Event()

    def probe() -> None:
        with httpx.Client(
            base_url=client.url, headers={"Authorization": f"Bearer {client.token}"}
        ) as http:
            while not done.is_set():
                started = time.monotonic()
                http.get("/v1/me", timeout=600).raise_for_status()
                slowest["me"] = max(slowest["me"], time.monotonic() - started)
                time.sleep(0.05)

    thread = threading.Thread(target=probe)
    thread.start()
    try:
        slowest["posted"] = action()
        time.sleep(5)
    finally:
        done.set()
        thread.join()
    return slowest


def _until_served(client: Any, name: str) -> float:
    started = time.monotonic()
    while not any(series["points"] for series in client.metrics(name)):
        time.sleep(0.05)
    return time.monotonic() - started


def main() -> None:
    for label, definitions, messages in (
        ("typical", TYPICAL, _typical_lines()),
        ("costly", COSTLY, _costly_lines()),
    ):
        per_line = _cpu_per_line(definitions, messages[:500])
        print(
            f"{label}: {len(definitions)} definitions, {len(messages)} lines: "
            f"{per_line * 1e6:.1f} us of CPU per line searched"
        )
        _served(label, definitions, messages)


if __name__ == "__main__":
    main()
