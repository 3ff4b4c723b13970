"""A real Runyard API under uvicorn in a thread, behind a path prefix (as under the Helm
chart's Ingress), with projects, tokens and jobs made over its own HTTP API."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import uvicorn
from sqlalchemy import update
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

from contract import storage
from contract.limits import MAX_LOG_BATCH
from runyard.server import prepare
from service.app import create_app
from service.auth.tokens import instance_token
from service.jobs.models import TrainingJob
from service.jobs.states import Stage
from service.kit.db import get_engine, session_scope
from service.settings import Settings
from tests.conftest import make_settings

PREFIX = "/runyard"
LOSS = [{"name": "loss", "regex": r"loss=([0-9.]+)"}]


@dataclass
class ConsoleServer:
    settings: Settings
    source: Path
    url: str = ""  # the console's own address, ending in "/"
    tokens: dict[str, str] = field(default_factory=dict)
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None
    _seq: dict[str, int] = field(default_factory=dict)

    def start(self) -> ConsoleServer:
        admin = prepare(self.settings)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(
            _behind_prefix(create_app(self.settings)), log_level="warning", lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, args=([sock],), daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{port}{PREFIX}/"
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the console's API server did not start")
            time.sleep(0.05)
        self.tokens["admin"] = admin
        for project in ("alpha", "beta"):
            self.call("admin", "POST", "v1/projects", json={"name": project})
            # The jobs' code, which a project other than default reads only where granted.
            grant = {"prefix": self.source.as_uri()}
            self.call("admin", "POST", f"v1/projects/{project}/grants", json=grant)
        # Where alpha's jobs keep their checkpoints.
        grant = {"prefix": (self.source.parent / "ckpt").as_uri(), "access": "read-write"}
        self.call("admin", "POST", "v1/projects/alpha/grants", json=grant)
        for name, project, role in [
            ("vera", "alpha", "viewer"),
            ("mo", "alpha", "member"),
            ("bea", "beta", "member"),
        ]:
            body = {"name": name, "project": project, "role": role}
            self.tokens[f"{project} {role}"] = self.call("admin", "POST", "v1/tokens", json=body)[
                "token"
            ]
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        get_engine(self.settings.database_url).dispose()

    def call(self, caller: str, method: str, path: str, **kwargs: Any) -> Any:
        response = httpx.request(
            method,
            self.url + path,
            headers={"Authorization": f"Bearer {self.tokens[caller]}"},
            timeout=30,
            **kwargs,
        )
        assert response.status_code < 300, (path, response.status_code, response.text)
        return response.json() if response.content else None

    def submit(self, name: str, project: str = "alpha", **spec: Any) -> dict[str, Any]:
        body = {
            "name": name,
            "entry_point": "train.py",
            "source_uri": self.source.as_uri(),
            "instance_type": "local",
            "instance_count": 1,
            **spec,
        }
        job: dict[str, Any] = self.call(
            "admin", "POST", "v1/training-jobs", params={"project": project}, json=body
        )
        return job

    def launched(self, job: dict[str, Any]) -> None:
        """Mark the job admitted and its instances launched, as the reconciler does (no
        worker runs here): it holds its instances, and runs."""
        now = datetime.now(UTC)
        with session_scope(self.settings.database_url) as session:
            session.execute(
                update(TrainingJob)
                .where(TrainingJob.id == job["id"])
                .values(admitted_at=now, launched_at=now, stage=Stage.RUNNING)
            )

    def stored_model(self, job: dict[str, Any], content: bytes) -> None:
        """The model the job's runtime would have stored, and reported: its model.tar.gz,
        or one file of its uncompressed model."""
        spec = job["spec"]
        uri = storage.model_uri(spec["output_path"], job["name"], spec["output_compression"])
        path = storage.local_path(uri)
        path = path / "model.bin" if uri.endswith("/") else path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        with session_scope(self.settings.database_url) as session:
            session.execute(
                update(TrainingJob).where(TrainingJob.id == job["id"]).values(model_artifacts=uri)
            )

    def failed(self, job: dict[str, Any], reason: str) -> None:
        """The job ended Failed with ``reason``, as its runtime would report it."""
        with session_scope(self.settings.database_url) as session:
            session.execute(
                update(TrainingJob)
                .where(TrainingJob.id == job["id"])
                .values(
                    status="Failed",
                    secondary_status="Failed",
                    stage=Stage.ENDED,
                    failure_reason=reason,
                    ended_at=datetime.now(UTC),
                )
            )

    def completed(self, job: dict[str, Any]) -> None:
        """The job ended Completed, as its runtime would report it (its model stored apart)."""
        with session_scope(self.settings.database_url) as session:
            session.execute(
                update(TrainingJob)
                .where(TrainingJob.id == job["id"])
                .values(
                    status="Completed",
                    secondary_status="Completed",
                    stage=Stage.ENDED,
                    ended_at=datetime.now(UTC),
                )
            )

    def reported(self, job: dict[str, Any], host: str, phase: str, message: str = "") -> None:
        """``host`` says it reached ``phase`` ("Training"...), as its runtime does."""
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        token = instance_token(self.settings.signing_key(), job["id"], host)
        response = httpx.post(
            f"{self.url}v1/training-jobs/{job['name']}/instances/{host}/status",
            json={"phase": phase, "time": now, "message": message},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert response.status_code < 300, response.text

    def measured(
        self, job: dict[str, Any], host: str, at: float | None = None, **values: float
    ) -> None:
        """Samples of ``host``'s own metrics taken at ``at`` (now by default, seconds since
        the epoch), as its runtime sends them."""
        when = time.time() if at is None else at
        rows = [[when, metric, value] for metric, value in values.items()]
        token = instance_token(self.settings.signing_key(), job["id"], host)
        response = httpx.post(
            f"{self.url}v1/training-jobs/{job['name']}/instances/{host}/metrics",
            json={"rows": rows},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert response.status_code == 200, response.text

    def interruption_message(self, job: dict[str, Any]) -> str | None:
        """What the job's pending spot notice says (the reconciler acts on it later)."""
        with session_scope(self.settings.database_url, readonly=True) as session:
            row = session.get(TrainingJob, job["id"])
            return None if row is None else row.interruption_message

    def log(
        self, job: dict[str, Any], *messages: str, host: str = "algo-1", spaced: float = 0
    ) -> None:
        """Lines printed by ``host`` of the job, as its runtime ships them: all now, or
        ``spaced`` seconds apart up to now (a run that has been going a while)."""
        now = time.time()
        times = [now - (len(messages) - 1 - i) * spaced for i in range(len(messages))]
        lines = list(zip(messages, times, strict=True))
        for start in range(0, len(lines), MAX_LOG_BATCH):
            self._log_batch(job, lines[start : start + MAX_LOG_BATCH], host)

    def _log_batch(self, job: dict[str, Any], lines: list[tuple[str, float]], host: str) -> None:
        key = f"{job['id']}/{host}"
        sent = []
        for message, at in lines:
            self._seq[key] = self._seq.get(key, 0) + 1
            when = datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")
            sent.append(
                {"seq": self._seq[key], "time": when, "stream": "stdout", "message": message}
            )
        token = instance_token(self.settings.signing_key(), job["id"], host)
        response = httpx.post(
            f"{self.url}v1/training-jobs/{job['name']}/instances/{host}/logs",
            json={"lines": sent},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert response.status_code == 200, response.text


def _behind_prefix(app: ASGIApp) -> ASGIApp:
    """What uvicorn --root-path sees behind an Ingress that strips the prefix: the full
    path, and the prefix as the root path (so every page's links must carry it)."""

    async def prefixed(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope["path"].startswith(PREFIX + "/"):
            await PlainTextResponse("outside the prefix", status_code=404)(scope, receive, send)
            return
        await app({**scope, "root_path": PREFIX}, receive, send)

    return prefixed


QUEUED_TYPE = "ml.m5.large"


def console_server(root: Path) -> ConsoleServer:
    """A server whose home, database and source live under ``root``; call start()."""
    source = root / "src"
    source.mkdir(parents=True)
    (source / "train.py").write_text("print('hello')\n")
    settings = make_settings(
        root / "home",
        f"sqlite:///{root / 'runyard.db'}",
        # A type with room for one job, for the tests of the line (none is admitted here,
        # where no worker runs: the first fits, the others wait behind it).
        backends={"local": "local", "local_gpu": "local", QUEUED_TYPE: "local"},
        capacity={QUEUED_TYPE: 1},
    )
    return ConsoleServer(settings, source)


def open_page(browser: Browser, **context_options: Any) -> Iterator[Page]:
    """A page in a context of its own, failing the test on any script error it shows."""
    context = browser.new_context(**context_options)
    # Generous: on a 2-core CI machine busy with the rest of the suite, a page's first
    # requests can take seconds (a failure still says which element it waited for).
    context.set_default_timeout(30_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, errors
