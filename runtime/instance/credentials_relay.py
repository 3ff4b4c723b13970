"""The job's AWS credentials for its processes, the way ECS and EKS give a container its
role: an HTTP endpoint on the instance's loopback that answers in the container
credentials format, named by ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` and opened by the
token in ``AWS_CONTAINER_AUTHORIZATION_TOKEN``. botocore, and every AWS SDK, look there
by themselves, so a script's ``boto3.client("s3")`` works unchanged.

The runtime asks the service for the credentials with its instance token (which the
job's processes never see) and keeps them until less than ``REFRESH_MARGIN`` of them
remains; SDKs ask again 15 minutes before they end, and are then given fresh ones. With
namespaces the endpoint listens at the same address in the instance's own network, where
the job's processes are, and in the machine's, where the runtime stays (to reach the
service) and fetches the job's code, channels and checkpoints with the same credentials.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
import threading
import urllib.error
from collections.abc import Callable, MutableMapping
from datetime import UTC, datetime, timedelta
from http.client import HTTPException
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from contract import variables
from contract.instance_config import InstanceConfig
from contract.protocol import Endpoint
from runtime.linux import namespaces
from runtime.reporting.reporter import ServiceClient

log = logging.getLogger("runyard.runtime")

LOOPBACK = "127.0.0.1"
PATH = "/credentials"
REFRESH_MARGIN = timedelta(minutes=20)
# botocore refuses credentials with less than 10 minutes left (its mandatory refresh).
STILL_USABLE = timedelta(minutes=11)
# What an answer from the service must hold, as SDKs read it.
FIELDS = ("AccessKeyId", "SecretAccessKey", "Token", "Expiration")


class CredentialsError(Exception):
    """The service gave no usable credentials; the message says why."""


def serve(
    config: InstanceConfig,
    client: ServiceClient | None,
    environ: MutableMapping[str, str] = os.environ,
) -> CredentialsRelay | None:
    """Where the service gives the job AWS credentials, relay them: ``environ`` (this
    runtime's own, which every process it starts inherits) then names the relay and holds
    no other credentials, which would win over it."""
    if not config.aws_credentials or client is None:
        return None
    relay = CredentialsRelay(lambda: _ask(client), config.network_namespace).start()
    for name in variables.AWS_KEY_VARIABLES:
        environ.pop(name, None)
    # The machine's ~/.aws (the server's, on the local backend) would win over the relay.
    for name in variables.AWS_FILE_VARIABLES:
        environ[name] = os.devnull
    environ[variables.CONTAINER_CREDENTIALS_URI] = relay.url
    environ[variables.CONTAINER_AUTHORIZATION] = relay.token
    return relay


def _ask(client: ServiceClient) -> bytes:
    try:
        return client.get(Endpoint.CREDENTIALS)
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:1000].decode(errors="replace")
        raise CredentialsError(f"the service answered {exc.code}: {detail}") from None


class CredentialsRelay:
    """Serves what ``fetch`` returns (the service's answer), fetched again near its end."""

    def __init__(self, fetch: Callable[[], bytes], network_namespace: str | None = None):
        self._fetch = fetch
        self.token = secrets.token_urlsafe(32)
        self._lock = threading.Lock()
        self._kept: tuple[bytes, datetime] | None = None
        self._network_namespace = network_namespace
        self._servers: list[ThreadingHTTPServer] = []

    @property
    def port(self) -> int:
        assert self._servers, "the relay is not started"
        port: int = self._servers[0].server_address[1]
        return port

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}{PATH}"

    def start(self) -> CredentialsRelay:
        """Listen on the machine's loopback (for this runtime) and, with namespaces, on
        the same port of the instance's (for the job's processes, which inherit this
        runtime's variables): one URL, right in both networks. The instance's network has
        nothing of the job's running yet, so the port is free there."""
        self._servers.append(ThreadingHTTPServer((LOOPBACK, 0), _handler(self)))
        try:
            if self._network_namespace:
                # A socket belongs to the network it was made in, whoever serves it.
                with namespaces.network(self._network_namespace):
                    self._servers.append(ThreadingHTTPServer((LOOPBACK, self.port), _handler(self)))
        except OSError:
            for server in self._servers:
                server.server_close()  # never served: nothing to shut down
            raise
        for server in self._servers:
            server.daemon_threads = True
            threading.Thread(
                target=server.serve_forever, name="credentials-relay", daemon=True
            ).start()
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()

    def answer(self) -> bytes:
        """The credentials to hand out now, fetched anew when near their end. While the
        service cannot give fresh ones, those held are handed out as long as SDKs still
        take them (more than ``STILL_USABLE`` left)."""
        with self._lock:
            now = datetime.now(UTC)
            if self._kept is None or self._kept[1] - now < REFRESH_MARGIN:
                try:
                    body = self._fetch()
                except (OSError, HTTPException, CredentialsError):
                    if self._kept is None or self._kept[1] - now < STILL_USABLE:
                        raise
                    log.warning("the service gave no fresh AWS credentials; the held ones serve")
                    return self._kept[0]
                self._kept = (body, _expiration(body))
            return self._kept[0]

    def allows(self, authorization: str | None) -> bool:
        return authorization is not None and hmac.compare_digest(
            authorization.encode(), self.token.encode()
        )


def _expiration(body: bytes) -> datetime:
    try:
        given: Any = json.loads(body)
        if not isinstance(given, dict) or not all(
            isinstance(given.get(name), str) for name in FIELDS
        ):
            raise ValueError("not a credentials object")
        expiration = datetime.fromisoformat(given["Expiration"])
    except ValueError as exc:
        raise CredentialsError(f"the service's credentials are unreadable: {exc}") from None
    return expiration if expiration.tzinfo else expiration.replace(tzinfo=UTC)


def _handler(relay: CredentialsRelay) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = 10  # a client that connects and says nothing holds a thread no longer

        def do_GET(self) -> None:
            if self.path != PATH:
                self._send(404, {"message": f"the credentials are at {PATH}"})
            elif not relay.allows(self.headers.get("Authorization")):
                self._send(401, {"message": "AWS_CONTAINER_AUTHORIZATION_TOKEN is required"})
            else:
                try:
                    body = relay.answer()
                except (OSError, HTTPException, CredentialsError) as exc:  # the SDK asks again
                    log.warning("no AWS credentials for the job: %s", exc)
                    self._send(503, {"message": f"no AWS credentials for the job: {exc}"})
                    return
                self._send_raw(200, body)

        def _send(self, code: int, body: dict[str, str]) -> None:
            self._send_raw(code, json.dumps(body).encode())

        def _send_raw(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # every SDK refresh would be a line in the job's log

    return Handler
