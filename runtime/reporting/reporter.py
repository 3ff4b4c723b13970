"""The runtime's line to the service: phase reports and every log line, over HTTP.

Standard library only: this runs in every training image. Each host numbers its lines;
a batch that is retried after a lost response is recognised by the service by those
numbers, so retrying is always safe. Lines wait in memory while the service is away.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime
from json.encoder import encode_basestring_ascii
from typing import Any

from contract import protocol, variables
from contract.limits import MAX_LINE, MAX_LOG_BATCH, MAX_LOG_BATCH_TEXT
from contract.phases import Phase
from contract.protocol import Endpoint, LogBatch, StatusReport, Stream

log = logging.getLogger("runyard.runtime")

# As many lines as the service takes in one batch: each batch costs a request and a
# commit, so a script printing fast is shipped in few.
MAX_BATCH = MAX_LOG_BATCH
# The longest a line waits to go out with others: `runyard logs -f` stays this live.
BATCH_INTERVAL = 0.2
MAX_BUFFERED = 200_000


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
        self.base = protocol.instance_url(url, job_name, host)
        self.token = token
        self.timeout = timeout
        # Sent with every report: the service ignores the words of an earlier attempt.
        self.attempt = attempt

    @classmethod
    def from_env(cls, job_name: str, host: str, attempt: int = 0) -> ServiceClient | None:
        url = os.environ.get(variables.SERVICE_URL)
        token = os.environ.get(variables.JOB_TOKEN)
        if not url or not token:
            return None  # run without a service (e.g. by hand): logs go to stdout only
        return cls(url, token, job_name, host, attempt=attempt)

    def post(self, endpoint: Endpoint, message: protocol.InstanceMessage) -> None:
        request = urllib.request.Request(  # noqa: S310 (scheme checked in __init__)
            f"{self.base}/{endpoint}",
            data=json.dumps(protocol.body(message)).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
            response.read()

    def get(self, endpoint: Endpoint) -> bytes:
        request = urllib.request.Request(  # noqa: S310 (scheme checked in __init__)
            f"{self.base}/{endpoint}", headers={"Authorization": f"Bearer {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
            body: bytes = response.read()
            return body

    def post_with_retry(
        self, endpoint: Endpoint, message: protocol.InstanceMessage, deadline: float
    ) -> bool:
        """Retry transient failures until ``deadline`` (monotonic); False if never delivered."""
        delay = 0.2
        while True:
            try:
                self.post(endpoint, message)
                return True
            except urllib.error.HTTPError as exc:
                if exc.code < 500 and exc.code != 429:
                    log.error("service refused %s: %s %s", endpoint, exc.code, exc.read()[:500])
                    return False
                error: Exception = exc
            except (urllib.error.URLError, OSError) as exc:
                error = exc
            if time.monotonic() + delay > deadline:
                log.error("could not reach the service for %s: %s", endpoint, error)
                return False
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    def report(
        self,
        phase: Phase,
        fields: Mapping[str, Any] | None = None,
        deadline_seconds: float = 300.0,
    ) -> bool:
        report = StatusReport(phase, datetime.now(UTC), attempt=self.attempt, **(fields or {}))
        return self.post_with_retry(Endpoint.STATUS, report, time.monotonic() + deadline_seconds)


def _printable(text: str) -> str:
    """``text`` as any UTF-8 output takes it: the bytes of a file name that are not UTF-8
    (held as lone surrogates) written ``\\xff``, where printing them would raise."""
    if text.isascii():  # nearly every line, and nothing to do (a tenth of the cost)
        return text
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that stands for no byte
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


class LogShipper:
    """Collects lines from every process of the instance and ships them in batches.

    ``emit`` is called by the threads that read the scripts' pipes, for every line, so it
    only numbers, stamps and keeps the line: echoing, encoding and sending happen on the
    shipper's own thread, a batch at a time, and a script never waits on the network.
    """

    def __init__(self, client: ServiceClient | None, echo: bool = True, first_seq: int = 1) -> None:
        self.client = client
        self.echo = echo
        # Guards what follows; notified when a full batch is waiting, or on close.
        self._ready = threading.Condition()
        # Stamped, as the rows a batch sends, in seq order: the service keeps only seqs
        # above the last one it stored for the host, so lines must leave in the order they
        # were numbered. A batch sends only its first row's seq; the others follow it.
        self._pending: list[Row] = []
        # A restarted job's instances number their lines on from the last attempt's.
        self._pending_seq = first_seq
        self._stamp = 0.0
        self._dropped = 0
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="log-shipper", daemon=True)

    def start(self) -> LogShipper:
        self._thread.start()
        return self

    def emit(self, stream: Stream, message: str) -> None:
        if self.client is None and not self.echo:
            return
        message = _printable(message.rstrip("\n")[:MAX_LINE])
        with self._ready:
            if len(self._pending) >= MAX_BUFFERED:
                self._dropped += 1  # the service has been away too long
                return
            self._append(stream, message)
            if len(self._pending) == MAX_BATCH:
                self._ready.notify()

    def close(self, timeout: float = 120.0) -> None:
        """Ship what is left, waiting at most ``timeout`` seconds."""
        with self._ready:
            if self._dropped:
                note = f"{self._dropped} log lines were dropped while the service was unreachable"
                self._append("runtime", note)
                self._dropped = 0
            self._closing = True
            self._ready.notify()
        if self._thread.ident is None:  # never started: what was emitted still goes out
            self._thread.start()
        self._thread.join(timeout)

    def _append(self, stream: Stream, message: str) -> None:
        """Kept and stamped under the lock, so seqs follow the order lines came in."""
        # Never before the line above, should the clock step back: a follower reads a
        # host's lines by time, and relies on times rising with seqs. (Compared, not
        # max(): this runs for every line a script prints.)
        now = time.time()
        if now > self._stamp:
            self._stamp = now
        self._pending.append((self._stamp, stream, message))

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            if not batch.rows:
                continue
            if self.echo:
                _echo(batch.rows)
            if self.client is not None:
                self._deliver(self.client, batch)

    def _take(self) -> LogBatch | None:
        """The next batch, once a full one waits or BATCH_INTERVAL has passed (empty if
        nothing came); None once closing with nothing left."""
        with self._ready:
            if len(self._pending) < MAX_BATCH and not self._closing:
                self._ready.wait(BATCH_INTERVAL)
            if not self._pending:
                return None if self._closing else LogBatch(self._pending_seq, [])
            size = _batch_size(self._pending)
            # Packed: the lines' seqs follow each other, so only the first is sent, and
            # each line is a row, which the service reads five times faster than an object.
            batch = LogBatch(self._pending_seq, self._pending[:size])
            del self._pending[:size]
            self._pending_seq += size
            return batch

    def _deliver(self, client: ServiceClient, packed: LogBatch) -> None:
        """Send ``packed`` until it is taken or refused; the same batch again after a
        failure, which the service recognises by its seqs."""
        delay = BATCH_INTERVAL
        while not self._ship(client, packed):
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    def _ship(self, client: ServiceClient, packed: LogBatch) -> bool:
        try:
            client.post(Endpoint.LOGS, packed)
            return True
        except urllib.error.HTTPError as exc:
            if exc.code < 500 and exc.code != 429:
                log.error("service refused a log batch: %s", exc.code)
                return True  # resending the same batch would be refused again
            return False
        except (urllib.error.URLError, OSError):
            return False


# A line as a batch sends it: its time (seconds since the epoch), stream and message.
Row = tuple[float, Stream, str]


def _batch_size(pending: list[Row]) -> int:
    """How many of the first pending lines make one batch: at most MAX_BATCH lines and
    MAX_LOG_BATCH_TEXT bytes of messages as the body writes them, but always at least one
    line. Counted in bytes sent, not characters: the service bounds bodies in bytes, and
    escapes make a line of progress bars six times longer than it reads."""
    size, budget = 0, MAX_LOG_BATCH_TEXT
    for _, _, message in itertools.islice(pending, MAX_BATCH):
        # As json.dumps writes the message: quoted, with its escapes (json's C code).
        budget -= len(encode_basestring_ascii(message))
        if size and budget < 0:
            break
        size += 1
    return size


def _echo(batch: list[Row]) -> None:
    # One write for the batch: a line each would cost a system call each. A console that
    # is gone must not stop the lines from reaching the service.
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.write("".join(f"[{stream}] {message}\n" for _, stream, message in batch))
        sys.stdout.flush()
