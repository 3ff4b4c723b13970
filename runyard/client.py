"""A small HTTP client for the Runyard API, used by the CLI and the SDK.

Finds the server and its token without configuration: ``RUNYARD_URL`` / ``RUNYARD_TOKEN``
if set, else what ``runyard server`` wrote into ``RUNYARD_HOME`` (``~/.runyard``).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import httpx

from contract.archive import ArchiveError, check_archive, make_tarball
from contract.ports import SERVICE_PORT
from contract.protocol import JOBS_PATH, TUNING_JOBS_PATH, Endpoint, instance_path
from runyard import variables

DEFAULT_PORT = SERVICE_PORT
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
# Not worth shipping to a training instance.
PACKING_EXCLUDES = frozenset(
    {"__pycache__", ".git", ".ipynb_checkpoints", ".mypy_cache", ".pytest_cache"}
)


UPLOAD_CHUNK = 1 << 20
# Given an upload's size in bytes, the context it is sent in, which hears of each chunk.
Progress = Callable[[int], AbstractContextManager[Callable[[int], object]]]


class RunyardError(Exception):
    """The server refused a request or could not be reached; the message says why."""

    def __init__(
        self,
        message: str,
        status_code: int | None = None,
        problems: list[tuple[tuple[str, ...], str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        # A refused request's fields, each (location in the body or query, message).
        self.problems = problems or []


def runyard_home() -> Path:
    return Path(os.environ.get(variables.HOME, "~/.runyard")).expanduser()


def discover() -> tuple[str, str | None]:
    """(server URL, token) from the environment or RUNYARD_HOME."""
    home = runyard_home()
    url = os.environ.get(variables.URL)
    if not url:
        try:
            url = json.loads((home / "server.json").read_text())["url"]
        except (OSError, ValueError, KeyError):
            url = DEFAULT_URL
    return url, os.environ.get(variables.TOKEN) or admin_token(home)


def admin_token(home: Path) -> str | None:
    """The admin token ``runyard server`` wrote into its RUNYARD_HOME, if it did."""
    try:
        return (home / "token").read_text().strip() or None
    except OSError:
        return None


def is_up(url: str) -> bool:
    """Whether a Runyard server answers its health probe at ``url``."""
    try:
        return httpx.get(f"{url.rstrip('/')}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def wait_until_up(
    url: str,
    *,
    timeout: float = 60.0,
    alive: Callable[[], bool] = lambda: True,
    interval: float = 0.1,
    waiting: Callable[[], None] = lambda: None,
) -> bool:
    """Wait for a server just started to answer; False once ``timeout`` has passed or
    ``alive`` says its process has ended. ``waiting`` is called between attempts."""
    deadline = time.monotonic() + timeout
    while not is_up(url):
        if not alive() or time.monotonic() > deadline:
            return False
        waiting()
        time.sleep(interval)
    return True


# Which project the CLI and SDK work in, for a token that reaches several.
PROJECT_VARIABLE = "RUNYARD_PROJECT"


class Client:
    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        project: str | None = None,
    ) -> None:
        found_url, found_token = discover()
        self.url = (url or found_url).rstrip("/")
        self.token = token or found_token
        # The project jobs are looked up and submitted in: the token's own unless given
        # (a server administrator's token reaches every project).
        self.project = project or os.environ.get(PROJECT_VARIABLE) or None
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        params = {"project": self.project} if self.project else {}
        self._http = httpx.Client(
            base_url=self.url, headers=headers, params=params, timeout=timeout
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- jobs -------------------------------------------------------------------------

    def create_job(self, spec: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        params = {"dry_run": "true"} if dry_run else {}
        return self._json("POST", JOBS_PATH, json=spec, params=params)

    def get_job(self, name: str) -> dict[str, Any]:
        return self._json("GET", f"{JOBS_PATH}/{name}")

    def clone_spec(self, name: str) -> dict[str, Any]:
        """The job's spec as it would be submitted again (what the server chose left out)."""
        return self._json("GET", f"{JOBS_PATH}/{name}/clone")

    def list_jobs(
        self,
        *,
        status: str | None = None,
        name_prefix: str | None = None,
        name_contains: str | None = None,
        tags: Sequence[str] = (),
        sort: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """A page of jobs; ``tags`` each ``key`` or ``key=value``, every one required."""
        params = {
            "status": status,
            "name_prefix": name_prefix,
            "name_contains": name_contains,
            "sort": sort,
            "limit": limit,
            "cursor": cursor,
        }
        given: list[tuple[str, Any]] = [(k, v) for k, v in params.items() if v is not None]
        return self._json("GET", JOBS_PATH, params=[*given, *(("tag", t) for t in tags)])

    def delete_job(self, name: str, *, remove_artifacts: bool = False) -> dict[str, Any]:
        """Delete an ended job; its artifacts too with ``remove_artifacts``."""
        params = {"artifacts": "remove" if remove_artifacts else "keep"}
        return self._json("DELETE", f"{JOBS_PATH}/{name}", params=params)

    def download_model(
        self,
        name: str,
        target: Path,
        progress: Progress | None = None,
        *,
        what: Literal["model", "output"] = "model",
    ) -> int:
        """Write the job's model.tar.gz (or, ``what="output"``, its output.tar.gz) to
        ``target`` (through a temporary file beside it, so an interrupted download leaves
        no partial file); its size."""
        partial = target.with_name(f".{target.name}.partial")
        try:
            with self._http.stream("GET", f"{JOBS_PATH}/{name}/{what}") as response:
                if response.status_code >= 400:
                    response.read()
                    raise _error(response)
                size = int(response.headers.get("Content-Length", 0))
                with (progress or _silent)(size) as received, open(partial, "wb") as handle:
                    for chunk in response.iter_bytes(UPLOAD_CHUNK):
                        handle.write(chunk)
                        received(len(chunk))
            partial.replace(target)
        except httpx.TransportError as exc:
            raise RunyardError(f"lost the download from {self.url}: {exc}") from exc
        finally:
            partial.unlink(missing_ok=True)
        return target.stat().st_size

    def stop_job(self, name: str) -> dict[str, Any]:
        return self._json("POST", f"{JOBS_PATH}/{name}/stop")

    def interrupt(self, name: str, host: str, message: str) -> dict[str, Any]:
        """Send a spot interruption notice for one instance of a spot job."""
        path = instance_path(name, host, Endpoint.INTERRUPTION)
        return self._json("POST", path, json={"message": message})

    def wait(self, name: str, *, poll: float = 1.0, timeout: float | None = None) -> dict[str, Any]:
        """Block until the job ends; returns its final description."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get_job(name)
            if job["status"] in ("Completed", "Failed", "Stopped"):
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise RunyardError(f"{name} is still {job['status']} after {timeout} s")
            time.sleep(poll)

    # -- tuning jobs ------------------------------------------------------------------

    def create_tuning_job(self, spec: dict[str, Any]) -> dict[str, Any]:
        return self._json("POST", TUNING_JOBS_PATH, json=spec)

    def get_tuning_job(self, name: str) -> dict[str, Any]:
        """The tuning job with its counters, its best trial and every trial."""
        return self._json("GET", f"{TUNING_JOBS_PATH}/{name}")

    def list_tuning_jobs(
        self, *, status: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        """A page of tuning jobs, newest first: ``{"items": [...], "next_cursor": ...}``."""
        params = {"status": status, "limit": limit, "cursor": cursor}
        return self._json(
            "GET", TUNING_JOBS_PATH, params={k: v for k, v in params.items() if v is not None}
        )

    def stop_tuning_job(self, name: str) -> dict[str, Any]:
        return self._json("POST", f"{TUNING_JOBS_PATH}/{name}/stop")

    def wait_tuning_job(
        self,
        name: str,
        *,
        poll: float = 2.0,
        seen: Callable[[dict[str, Any]], object] = lambda _tuning: None,
    ) -> dict[str, Any]:
        """Block until the tuning job ends; ``seen`` hears of each description read."""
        while True:
            tuning = self.get_tuning_job(name)
            seen(tuning)
            if tuning["status"] in ("Completed", "Failed", "Stopped"):
                return tuning
            time.sleep(poll)

    # -- metrics ----------------------------------------------------------------------

    def metrics(
        self,
        name: str,
        *,
        metric: str | None = None,
        limit: int | None = None,
        instance: bool = False,
        max_points: int | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
    ) -> list[dict[str, Any]]:
        """Each metric of the job's ``metric_definitions`` (or only ``metric``) as
        ``{name, points: [{time, value, host}]}``, its latest ``limit`` points by time; with
        ``instance``, what each instance measured of itself (CPU, memory, disk, GPU).
        ``max_points`` reads the whole range instead, downsampled to that many points per
        host (each then a bucket's mean, with its ``count``); ``start`` and ``end`` (aware
        times) bound the range."""
        params = {
            "name": metric,
            "limit": limit,
            "kind": "instance" if instance else None,
            "max_points": max_points,
            "start": start.isoformat() if start else None,
            "end": end.isoformat() if end else None,
        }
        page = self._json(
            "GET",
            f"{JOBS_PATH}/{name}/metrics",
            params={k: v for k, v in params.items() if v is not None},
        )
        series: list[dict[str, Any]] = page["metrics"]
        return series

    # -- logs -------------------------------------------------------------------------

    def logs(self, name: str, *, host: str | None = None) -> Iterator[dict[str, Any]]:
        """Every stored line, all hosts merged by time (or one host's)."""
        cursor = None
        while True:
            params = {"host": host, "cursor": cursor, "limit": 5000}
            page = self._json(
                "GET",
                f"{JOBS_PATH}/{name}/logs",
                params={k: v for k, v in params.items() if v is not None},
            )
            yield from page["events"]
            cursor = page["next_cursor"]
            if not cursor:
                return

    def follow_logs(self, name: str, *, host: str | None = None) -> Iterator[dict[str, Any]]:
        """Lines as they arrive until the job ends; the last item is ``{"end": status}``.
        Reconnects (resuming after the last line seen) if the stream drops, and asks
        again after Retry-After while the server streams as many logs as it will (429)."""
        last_id: str | None = None
        failures = 0
        while True:
            headers = {"Last-Event-ID": last_id} if last_id else {}
            params = {"follow": "true", **({"host": host} if host else {})}
            try:
                with self._http.stream(
                    "GET",
                    f"{JOBS_PATH}/{name}/logs",
                    params=params,
                    headers=headers,
                    timeout=None,
                ) as response:
                    if response.status_code == 429:
                        # The server streams as many logs as it will: ask again when it says.
                        response.read()
                        time.sleep(_retry_after(response))
                        continue
                    if response.status_code >= 400:
                        response.read()
                        raise _error(response)
                    for event, data, event_id in _sse_events(response.iter_lines()):
                        failures = 0
                        if event_id:
                            last_id = event_id
                        if event == "end":
                            yield {"end": json.loads(data)["status"]}
                            return
                        if event == "log":
                            yield json.loads(data)
            except httpx.TransportError as exc:
                failures += 1
                if failures > 5:
                    raise RunyardError(f"lost the log stream from {self.url}: {exc}") from exc
                time.sleep(min(2**failures * 0.2, 5))

    # -- sources and tokens -------------------------------------------------------------

    def upload_source(
        self,
        source_dir: Path,
        *,
        entry_point: str | None = None,
        dry_run: bool = False,
        progress: Progress | None = None,
    ) -> str:
        """Pack ``source_dir`` as a .tar.gz, store it on the server, return its source_uri.

        The bundle is checked here first, as the server would check it (and
        ``entry_point``, when given, must be one of its files), so nothing is sent for
        code that would be refused. With ``dry_run`` the server checks it and says where
        it would be stored, storing nothing. ``progress`` hears of the bytes sent.
        """
        if not source_dir.is_dir():
            raise RunyardError(f"source directory {source_dir} does not exist")
        with tempfile.TemporaryDirectory(prefix="runyard-pack-") as scratch:
            bundle = make_tarball(
                source_dir, Path(scratch) / "source.tar.gz", exclude=PACKING_EXCLUDES
            )
            _check_bundle(bundle, source_dir, entry_point)
            size = bundle.stat().st_size
            with (progress or _silent)(size) as sent:
                result = self._json(
                    "POST",
                    "/v1/sources",
                    params={"dry_run": "true"} if dry_run else {},
                    content=_chunks(bundle, sent),
                    # Sent as it is read, yet with its length: no chunked encoding.
                    headers={"Content-Type": "application/gzip", "Content-Length": str(size)},
                )
        return str(result["source_uri"])

    def create_token(
        self, name: str, *, project: str | None = None, role: str = "member"
    ) -> dict[str, Any]:
        body = {"name": name, "project": project or self.project, "role": role}
        return self._json("POST", "/v1/tokens", json={k: v for k, v in body.items() if v})

    def aws_credentials(self) -> dict[str, Any]:
        """This client's token as an AWS access key id and secret (SigV4 clients)."""
        return self._json("POST", "/v1/me/aws-credentials")

    def list_tokens(self) -> list[dict[str, Any]]:
        return list(self._json("GET", "/v1/tokens")["items"])

    def revoke_token(self, name: str, *, project: str | None = None) -> None:
        params = {"project": project} if project else {}
        self._json("DELETE", f"/v1/tokens/{name}", params=params)

    def create_project(self, name: str) -> dict[str, Any]:
        return self._json("POST", "/v1/projects", json={"name": name})

    def list_projects(self) -> list[dict[str, Any]]:
        return list(self._json("GET", "/v1/projects")["items"])

    def list_grants(self, project: str) -> list[dict[str, Any]]:
        """The places granted to ``project`` beyond its own area."""
        return list(self._json("GET", f"/v1/projects/{project}/grants")["items"])

    def grant(self, project: str, prefix: str, *, access: str = "read-only") -> dict[str, Any]:
        """Grant ``project`` a file:// directory or s3:// prefix, read-only or read-write
        (server administrators)."""
        body = {"prefix": prefix, "access": access}
        return self._json("POST", f"/v1/projects/{project}/grants", json=body)

    def revoke_grant(self, project: str, prefix: str) -> None:
        self._json("DELETE", f"/v1/projects/{project}/grants", params={"prefix": prefix})

    # -- plumbing -----------------------------------------------------------------------

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise RunyardError(
                f"cannot reach the Runyard server at {self.url} ({exc}); "
                "is `runyard server` running?"
            ) from exc
        if response.status_code >= 400:
            raise _error(response)
        if response.status_code == 204:
            return {}
        data: dict[str, Any] = response.json()
        return data


# How long to wait before asking again for a stream the server refused without saying.
RETRY_AFTER_SECONDS = 5.0


def _retry_after(response: httpx.Response) -> float:
    """The seconds a refusal's Retry-After asks for (a number of them; within a minute)."""
    try:
        return min(max(float(response.headers.get("retry-after", "")), 0.0), 60.0)
    except ValueError:
        return RETRY_AFTER_SECONDS


def _error(response: httpx.Response) -> RunyardError:
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = response.text
    problems: list[tuple[tuple[str, ...], str]] = []
    if isinstance(detail, list):
        # FastAPI validation errors: name each field ("instance_count: ...").
        parts = []
        for item in detail:
            loc = tuple(
                str(part) for part in item.get("loc", []) if part not in ("body", "query", "path")
            )
            problems.append((loc, str(item.get("msg"))))
            parts.append(f"{'.'.join(loc) or 'request'}: {item.get('msg')}")
        detail = "; ".join(parts)
    if response.status_code == 401:
        detail = f"{detail} (token from {variables.TOKEN} or {runyard_home() / 'token'})"
    return RunyardError(
        f"{detail or response.reason_phrase} (HTTP {response.status_code})",
        response.status_code,
        problems,
    )


def _check_bundle(bundle: Path, source_dir: Path, entry_point: str | None) -> None:
    try:
        files = check_archive(bundle)
    except ArchiveError as exc:
        raise RunyardError(f"source directory {source_dir}: {exc}") from exc
    if entry_point is not None and os.path.normpath(entry_point) not in files:
        raise RunyardError(f"entry_point: {entry_point} is not a file in {source_dir}")


@contextlib.contextmanager
def _silent(_size: int) -> Iterator[Callable[[int], object]]:
    yield lambda _sent: None


def _chunks(bundle: Path, sent: Callable[[int], object]) -> Iterator[bytes]:
    with open(bundle, "rb") as handle:
        while chunk := handle.read(UPLOAD_CHUNK):
            yield chunk
            sent(len(chunk))


def _sse_events(lines: Iterator[str]) -> Iterator[tuple[str, str, str | None]]:
    event, event_id = "message", None
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data), event_id
            event, data, event_id = "message", [], None
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)
            elif field == "id":
                event_id = value
