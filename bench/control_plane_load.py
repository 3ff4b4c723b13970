"""Load on the control plane: job creations per second and their latency, describe and
list latency with many jobs stored, and how long stopping them all takes.

Point it at any Runyard (``--url``/``--token``, or RUNYARD_URL and RUNYARD_TOKEN, or the
server running at RUNYARD_HOME), or leave them out to start a throwaway `runyard server` on
its embedded defaults (``--database-url``/``--broker-url`` to start it on PostgreSQL and
Redis instead; these, and ``--api-workers``, always start a throwaway one). The first line
printed says which server was measured. The jobs queue behind capacity: the throwaway
server has room for one job of the type, so the first runs (a script that sleeps) and the
rest wait in line; on your deployment use ``--instance-type`` of a type with little room.

    .venv/bin/python bench/control_plane_load.py [--jobs 500] [--warmup 100] [--clients 8]
        [--url URL --token TOKEN | --database-url postgresql://... --broker-url redis://...]
        [--instance-type local] [--source-uri URI] [--admissions 3] [--keep]

Prints creations/s with p50/p95/p99/max latency (after ``--warmup`` untimed ones),
describe and list p50/p99 over the stored jobs, how long the first job in line takes to
launch once the job holding the capacity is stopped (``--admissions`` times), and the
seconds from the first stop request until every job is Stopped.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from _machine import describe as describe_machine
from _server import server_and_home

from runyard.client import discover

STOP_DEADLINE = 600.0
# The server is quiet when its processes (and PostgreSQL's) use under 5% of a CPU over a
# second; beat's sweep every few seconds costs less than that.
SETTLE_WINDOW = 1.0
QUIET_SHARE = 0.05
SETTLE_DEADLINE = 300.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500, help="jobs to create (default 500)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    parser.add_argument("--url", help="a running Runyard (default: RUNYARD_URL, or start one)")
    parser.add_argument("--token", help="its API token (default: RUNYARD_TOKEN)")
    parser.add_argument("--database-url", help="for the throwaway server (default: SQLite)")
    parser.add_argument("--broker-url", help="for the throwaway server (default: SQLite)")
    parser.add_argument("--instance-type", default="local", help="the jobs' instance type")
    parser.add_argument("--source-uri", help="the jobs' code (default: a small uploaded tarball)")
    parser.add_argument(
        "--warmup",
        type=int,
        default=100,
        help="jobs created, untimed, before the timed ones (default 100)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the jobs running (no stop); not with a throwaway server",
    )
    parser.add_argument(
        "--admissions",
        type=int,
        default=3,
        help="times to stop the job holding the capacity and time the next one's start",
    )
    parser.add_argument(
        "--api-workers", type=int, help="API processes of the throwaway server (default 1)"
    )
    args = parser.parse_args()
    throwaway_only = [
        flag
        for flag, value in (
            ("--database-url", args.database_url),
            ("--broker-url", args.broker_url),
            ("--api-workers", args.api_workers),
        )
        if value is not None
    ]
    if throwaway_only and (args.url or args.token):
        parser.error(f"{', '.join(throwaway_only)}: only for a throwaway server, not with --url")

    with _target(args, throwaway=bool(throwaway_only)) as (url, token, home, which):
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as http:
            source = args.source_uri or _upload_source(http)
        run = f"load-{uuid.uuid4().hex[:6]}"
        print(f"{args.jobs} jobs, {args.clients} clients, against {url} ({which})")
        print(describe_machine())
        pid = _server_pid(home)
        # Untimed: the first requests of a process fill its connection pool and its
        # statement caches, and PostgreSQL prepares a statement on its fifth use.
        warm = _create_all(url, token, f"{run}-warmup", source, args, args.warmup)
        before = _settled(pid) if warm.names else _cpu_seconds(pid)
        clients_before = time.process_time()
        created = _create_all(url, token, run, source, args, args.jobs)
        clients_cpu = time.process_time() - clients_before
        _report("create", created.latencies, created.seconds, args.jobs)
        _print_cpu("create", before, _settled(pid), args.jobs)
        # On one machine the clients take their share of its CPU from the server's.
        print(f"  (and this bench's clients {clients_cpu / args.jobs * 1000:.1f} ms)")
        _read_latencies(url, token, run)
        _time_admissions(url, token, args.instance_type, args.admissions)
        if not args.keep:
            before = _cpu_seconds(pid)
            everything = warm.names + created.names
            _stop_all(url, token, everything, args.clients)
            _print_cpu("stop", before, _settled(pid), len(everything))


def _print_cpu(
    what: str, before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], jobs: int
) -> None:
    """The server's CPU per job of a phase, by process role (nothing when it runs
    elsewhere): where a deployment needs more processes. A process that ended during the
    phase (a database connection closed) is left out."""
    if not before or not after:
        return
    spent = dict.fromkeys(("API", "worker", "beat", "PostgreSQL"), 0.0)
    for pid, (role, seconds) in after.items():
        spent[role] += seconds - before.get(pid, (role, 0.0))[1]
    each = ", ".join(f"{role} {seconds / jobs * 1000:.1f} ms" for role, seconds in spent.items())
    print(f"CPU per {what} on this machine: {each}")


@contextmanager
def _target(
    args: argparse.Namespace, *, throwaway: bool
) -> Iterator[tuple[str, str, Path | None, str]]:
    """The server's URL, a token, its RUNYARD_HOME when it runs on this machine, and which
    server it is, in words. The throwaway one's options start a throwaway server even where
    the environment names a running one."""
    url = args.url or os.environ.get("RUNYARD_URL")
    token = args.token or os.environ.get("RUNYARD_TOKEN")
    where = os.environ.get("RUNYARD_HOME")
    home = Path(where) if where else None
    served_at_home = home is not None and (home / "server.json").is_file()
    if not throwaway and (url or token or served_at_home):
        found_url, found_token = discover()
        which = f"the server of RUNYARD_HOME={home}" if served_at_home and not url else "given"
        yield (url or found_url), (token or found_token or ""), home, which
        return
    if args.keep:
        # Its jobs would outlive it, running with no server to stop them.
        raise SystemExit("--keep is for a server that outlives the bench (--url, RUNYARD_HOME)")
    settings = {
        # Room for one job at a time: the rest queue, as under load from many teams.
        "RUNYARD_CAPACITY": '{"local": 1}',
        "RUNYARD_LOCAL_ISOLATION": "shared",
        "RUNYARD_API_WORKERS": str(args.api_workers or 1),
    }
    if args.database_url:
        settings["RUNYARD_DATABASE_URL"] = args.database_url
    if args.broker_url:
        settings["RUNYARD_BROKER_URL"] = args.broker_url
    database = urlsplit(args.database_url).scheme if args.database_url else "sqlite"
    which = f"a throwaway server on {database}, {args.api_workers or 1} API process(es)"
    with server_and_home(settings) as (client, throwaway_home):
        yield client.url, client.token or "", throwaway_home, which


def _server_pid(home: Path | None) -> int | None:
    """The pid of the server at ``home`` (the throwaway one's, or RUNYARD_HOME's)."""
    if home is None:
        return None
    try:
        return int(json.loads((home / "server.json").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def _settled(pid: int | None) -> dict[int, tuple[str, float]]:
    """The server's CPU times once it has gone quiet: the worker reconciles each job after
    its create returned, and that is part of what a create costs. Prints how long it
    took to catch up."""
    started = time.perf_counter()
    now = _cpu_seconds(pid)
    while now and time.perf_counter() - started < SETTLE_DEADLINE:
        time.sleep(SETTLE_WINDOW)
        before, now = now, _cpu_seconds(pid)
        busy = sum(seconds - before.get(each, ("", 0.0))[1] for each, (_, seconds) in now.items())
        if busy < QUIET_SHARE * SETTLE_WINDOW:
            print(f"  (the server went quiet {time.perf_counter() - started:.1f} s later)")
            break
    return now


def _cpu_seconds(pid: int | None) -> dict[int, tuple[str, float]]:
    """Each process of the server (API, worker, beat) and of PostgreSQL where this machine
    runs them, with its role and CPU time so far; empty when the server is elsewhere."""
    if pid is None or not Path(f"/proc/{pid}").exists():
        return {}
    spent = {each: (_role(each), _process_cpu(each)) for each in _tree(pid)}
    for comm in Path("/proc").glob("[0-9]*/comm"):
        if _read(comm).startswith("postgres"):
            backend = int(comm.parent.name)
            spent[backend] = ("PostgreSQL", _process_cpu(backend))
    return spent


def _role(pid: int) -> str:
    """Which part of the server a process is: `runyard worker` and `runyard beat` (and the
    worker's pool children) by their command line; the rest serve the API."""
    words = _read(Path(f"/proc/{pid}/cmdline")).split("\0")
    for role in ("worker", "beat"):
        if role in words:
            return role
    return "API"


def _tree(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        each = todo.pop()
        found.append(each)
        for task in Path(f"/proc/{each}/task").glob("*"):
            todo.extend(int(child) for child in _read(task / "children").split())
    return found


def _process_cpu(pid: int) -> float:
    fields = _read(Path(f"/proc/{pid}/stat")).rsplit(")", 1)[-1].split()
    if len(fields) < 13:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:  # it ended meanwhile
        return ""


def _upload_source(http: httpx.Client) -> str:
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch) / "train.py"
        script.write_text("import time\ntime.sleep(3600)\n")
        tarball = Path(scratch) / "code.tar.gz"
        with tarfile.open(tarball, "w:gz") as tar:
            tar.add(script, arcname="train.py")
        response = http.post(
            "/v1/sources",
            content=tarball.read_bytes(),
            headers={"Content-Type": "application/gzip"},
        )
    response.raise_for_status()
    return str(response.json()["source_uri"])


class _Poster:
    """POSTs JSON over one kept-alive connection with the standard library's client: a
    tenth of httpx's CPU per request, which on the server's own machine is taken from the
    server (httpx cost the clients 1 ms a create)."""

    def __init__(self, url: str, token: str) -> None:
        parts = urlsplit(url)
        kind = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        self._connection = kind(parts.netloc, timeout=60)
        self._prefix = parts.path.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def __enter__(self) -> _Poster:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._connection.close()

    def __call__(self, path: str, body: dict[str, Any]) -> tuple[int, str]:
        self._connection.request(
            "POST", self._prefix + path, json.dumps(body).encode(), self._headers
        )
        response = self._connection.getresponse()
        return response.status, response.read().decode(errors="replace")


class _Created:
    def __init__(self) -> None:
        self.names: list[str] = []
        self.latencies: list[float] = []
        self.seconds = 0.0
        self.lock = threading.Lock()


def _create_all(
    url: str, token: str, run: str, source: str, args: argparse.Namespace, count: int
) -> _Created:
    """Create ``count`` jobs named ``run``-0, -1, ... from ``args.clients`` clients."""
    created = _Created()
    per_client = [range(i, count, args.clients) for i in range(args.clients)]

    def client_loop(numbers: range) -> None:
        with _Poster(url, token) as post:
            for number in numbers:
                name = f"{run}-{number}"
                spec = {
                    "name": name,
                    "entry_point": "train.py",
                    "source_uri": source,
                    "instance_type": args.instance_type,
                    "instance_count": 1,
                }
                started = time.perf_counter()
                status, text = post("/v1/training-jobs", spec)
                took = time.perf_counter() - started
                if status != 201:
                    raise RuntimeError(f"{name}: {status} {text[:300]}")
                with created.lock:
                    created.names.append(name)
                    created.latencies.append(took)

    started = time.perf_counter()
    with ThreadPoolExecutor(args.clients) as pool:
        for future in [pool.submit(client_loop, numbers) for numbers in per_client]:
            future.result()
    created.seconds = time.perf_counter() - started
    return created


def _read_latencies(url: str, token: str, run: str) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as http:
        total = len(http.get("/v1/training-jobs", params={"limit": 100}).json()["items"])
        reads: dict[str, Callable[[int], httpx.Response]] = {
            "describe": lambda n: http.get(f"/v1/training-jobs/{run}-{n % 50}"),
            "list": lambda _n: http.get("/v1/training-jobs", params={"limit": 50}),
            "list by status": lambda _n: http.get(
                "/v1/training-jobs", params={"limit": 50, "status": "InProgress"}
            ),
        }
        for label, read in reads.items():
            latencies = []
            for n in range(200):
                started = time.perf_counter()
                read(n).raise_for_status()
                latencies.append(time.perf_counter() - started)
            print(
                f"{label:<16} p50 {_ms(_quantile(latencies, 0.5))}  "
                f"p99 {_ms(_quantile(latencies, 0.99))}  (first page: {total} jobs)"
            )


def _time_admissions(url: str, token: str, instance_type: str, rounds: int) -> None:
    """Stop the job holding the instance type's capacity, ``rounds`` times, and print how
    long the first job in line took to launch: after the stop was asked, and after the
    stopped job was Stopped (the two jobs' transitions, as the server timed them)."""
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as http:
        for _ in range(rounds):
            lines = {line["instance_type"]: line for line in _get(http, "/v1/capacity")["types"]}
            line = lines.get(instance_type)
            if line is None or not line["running"] or not line["waiting"]:
                print("admission: no job holds capacity with another waiting; nothing timed")
                return
            holder, first = line["running"][0]["name"], line["waiting"][0]["name"]
            if holder is None or first is None:
                print("admission: the jobs in the way are another project's; nothing timed")
                return
            asked = time.perf_counter()
            http.post(f"/v1/training-jobs/{holder}/stop").raise_for_status()
            while True:
                started = _get(http, f"/v1/training-jobs/{first}")
                if started["secondary_status"] not in ("Starting", "Pending"):
                    break
                if time.perf_counter() - asked > STOP_DEADLINE:
                    print(f"admission: {first} did not start within {STOP_DEADLINE:.0f} s")
                    return
                time.sleep(0.02)
            took = time.perf_counter() - asked
            launched = _first_transition(started, "LaunchingInstances")
            stopped = _first_transition(_get(http, f"/v1/training-jobs/{holder}"), "Stopped")
            after_stopped = (
                f", {(launched - stopped).total_seconds():.2f} s after it was Stopped"
                if launched and stopped
                else ""
            )
            print(f"admission: the next job launched {took:.2f} s after the stop{after_stopped}")


def _get(http: httpx.Client, path: str) -> Any:
    response = http.get(path)
    response.raise_for_status()
    return response.json()


def _first_transition(job: dict[str, Any], secondary: str) -> datetime | None:
    for transition in job["transitions"]:
        if transition["secondary_status"] == secondary:
            return datetime.fromisoformat(transition["start_time"])
    return None


def _stop_all(url: str, token: str, names: list[str], clients: int) -> None:
    started = time.perf_counter()

    def client_loop(some: list[str]) -> None:
        # One connection per client, as the creations use: a client made per request
        # costs this machine more CPU than the stop costs the server.
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        ) as http:
            for name in some:
                while True:
                    response = http.post(f"/v1/training-jobs/{name}/stop")
                    # 409 also says the job had already ended: that one is done with.
                    if response.status_code != 409 or "kept changing" not in response.text:
                        break
                    asked_again.append(name)
                if response.status_code not in (200, 409):
                    raise RuntimeError(f"stopping {name}: {response.status_code} {response.text}")

    asked_again: list[str] = []
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client_loop, [names[i::clients] for i in range(clients)]))
    requested = time.perf_counter() - started
    if asked_again:
        print(f"  ({len(asked_again)} stops were refused as the job kept changing, and sent again)")
    pending = set(names)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as http:
        while pending and time.perf_counter() - started < STOP_DEADLINE:
            cursor: str | None = None
            stopped: set[str] = set()
            while True:
                params: dict[str, Any] = {"limit": 100, "status": "Stopped"}
                if cursor:
                    params["cursor"] = cursor
                page = http.get("/v1/training-jobs", params=params).json()
                stopped |= {item["name"] for item in page["items"]}
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            pending -= stopped
            time.sleep(0.2)
    took = time.perf_counter() - started
    state = "all Stopped" if not pending else f"{len(pending)} not Stopped after"
    print(f"stop {len(names)} jobs: requests took {requested:.1f} s, {state} {took:.1f} s")


def _report(label: str, latencies: list[float], seconds: float, count: int) -> None:
    print(
        f"{label}: {count / seconds:.1f} jobs/s over {seconds:.1f} s; latency "
        f"p50 {_ms(_quantile(latencies, 0.5))}  p95 {_ms(_quantile(latencies, 0.95))}  "
        f"p99 {_ms(_quantile(latencies, 0.99))}  max {_ms(max(latencies))}"
    )


def _quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


if __name__ == "__main__":
    main()
