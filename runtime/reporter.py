"""The runtime's line to the service: phase reports and every log line, over HTTP.

Standard library only: this runs in every training image. Each host numbers its lines;
a batch that is retried after a lost response is recognised by the service by those
numbers, so retrying is always safe. Lines wait in memory while the service is away.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

log = logging.getLogger("runyard.runtime")

MAX_BATCH = 1000
BATCH_INTERVAL = 0.2
MAX_LINE = 16 * 1024
MAX_BUFFERED = 200_000


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


class ServiceClient:
    def __init__(
        self,
        url: str,
        token: str,
        job_name: str,
        host: str,
        timeout: float = 10.0,
        *,
        attempt: int | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"service URL must be http(s), got {url!r}")
        self.base = f"{url.rstrip('/')}/v1/training-jobs/{quote(job_name)}/instances/{quote(host)}"
        self.token = token
        self.timeout = timeout
        # Sent with every report: the service ignores the words of an earlier attempt.
        self.attempt = attempt

    @classmethod
    def from_env(cls, job_name: str, host: str, attempt: int = 0) -> ServiceClient | None:
        url = os.environ.get("RUNYARD_SERVICE_URL")
        token = os.environ.get("RUNYARD_JOB_TOKEN")
        if not url or not token:
            return None  # run without a service (e.g. by hand): logs go to stdout only
        return cls(url, token, job_name, host, attempt=attempt)

    def post(self, path: str, body: dict[str, Any]) -> None:
        request = urllib.request.Request(  # noqa: S310 (scheme checked in __init__)
            f"{self.base}/{path}",
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
            response.read()

    def post_with_retry(self, path: str, body: dict[str, Any], deadline: float) -> bool:
        """Retry transient failures until ``deadline`` (monotonic); False if never delivered."""
        delay = 0.2
        while True:
            try:
                self.post(path, body)
                return True
            except urllib.error.HTTPError as exc:
                if exc.code < 500 and exc.code != 429:
                    log.error("service refused %s: %s %s", path, exc.code, exc.read()[:500])
                    return False
                error: Exception = exc
            except (urllib.error.URLError, OSError) as exc:
                error = exc
            if time.monotonic() + delay > deadline:
                log.error("could not reach the service for %s: %s", path, error)
                return False
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    def report(
        self,
        phase: str,
        fields: Mapping[str, object] | None = None,
        deadline_seconds: float = 300.0,
    ) -> bool:
        given = {key: value for key, value in (fields or {}).items() if value is not None}
        body = {"phase": phase, "time": now_iso(), **given}
        if self.attempt is not None:
            body["attempt"] = self.attempt
        return self.post_with_retry("status", body, time.monotonic() + deadline_seconds)


def _printable(text: str) -> str:
    """``text`` as any UTF-8 output takes it: the bytes of a file name that are not UTF-8
    (held as lone surrogates) written ``\\xff``, where printing them would raise."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that stands for no byte
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


class LogShipper:
    """Collects lines from every process of the instance and ships them in batches."""

    def __init__(self, client: ServiceClient | None, echo: bool = True, first_seq: int = 1) -> None:
        self.client = client
        self.echo = echo
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue()
        # A restarted job's instances number their lines on from the last attempt's.
        self._seq = first_seq - 1
        self._seq_lock = threading.Lock()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="log-shipper", daemon=True)
        self._dropped = 0

    def start(self) -> LogShipper:
        self._thread.start()
        return self

    def emit(self, stream: str, message: str) -> None:
        message = _printable(message.rstrip("\n")[:MAX_LINE])
        if self.echo:
            print(f"[{stream}] {message}", flush=True)
        if self.client is None:
            return
        # Numbered, stamped and queued under one lock, by several pump threads: the queue
        # must hold lines in seq order, since the service keeps only seqs above the last
        # one it stored for the host.
        with self._seq_lock:
            if self._queue.qsize() >= MAX_BUFFERED:
                self._dropped += 1  # the service has been away too long
                return
            self._seq += 1
            line = {"seq": self._seq, "time": now_iso(), "stream": stream, "message": message}
            self._queue.put(line)

    def close(self, timeout: float = 120.0) -> None:
        """Ship what is left, waiting at most ``timeout`` seconds."""
        with self._seq_lock:
            if self._dropped:
                self._seq += 1
                note = f"{self._dropped} log lines were dropped while the service was unreachable"
                self._queue.put(
                    {"seq": self._seq, "time": now_iso(), "stream": "runtime", "message": note}
                )
        self._closing.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        pending: list[dict[str, Any]] = []
        delay = BATCH_INTERVAL
        while True:
            closing = self._closing.is_set()
            try:
                pending.append(self._queue.get(timeout=0 if closing else delay))
                if not closing:
                    time.sleep(0.05)  # let a burst of lines gather into one batch
            except queue.Empty:
                pass
            while len(pending) < MAX_BATCH:
                try:
                    pending.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if pending:
                if self._ship(pending):
                    pending = []
                    delay = BATCH_INTERVAL
                else:
                    time.sleep(delay)
                    delay = min(delay * 2, 5.0)
            elif closing:
                return

    def _ship(self, lines: list[dict[str, Any]]) -> bool:
        if self.client is None:
            return True
        try:
            self.client.post("logs", {"lines": lines})
            return True
        except urllib.error.HTTPError as exc:
            if exc.code < 500 and exc.code != 429:
                log.error("service refused a log batch: %s", exc.code)
                return True  # resending the same batch would be refused again
            return False
        except (urllib.error.URLError, OSError):
            return False
