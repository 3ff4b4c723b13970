"""Spot interruption notices on EC2, read from the instance metadata service.

EC2 announces the reclaim of a spot instance two minutes ahead at
``/latest/meta-data/spot/instance-action`` (404 until then). The runtime polls it and
tells the service, which gives the scripts SIGTERM and their grace to checkpoint, then
restarts the job on new capacity. IMDSv2 only: a session token first, then the read.

``RUNYARD_IMDS_URL`` points elsewhere than 169.254.169.254 (tests run a local server that
speaks the same protocol).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Callable

from contract import variables

log = logging.getLogger("runyard.runtime")

DEFAULT_IMDS_URL = "http://169.254.169.254"
TOKEN_TTL_SECONDS = 21600
POLL_SECONDS = 5.0
_TIMEOUT = 2.0


class SpotNoticeWatcher:
    """Polls for the notice on a thread and calls ``on_notice`` once with EC2's words."""

    def __init__(
        self,
        on_notice: Callable[[str], None],
        *,
        imds_url: str | None = None,
        interval: float = POLL_SECONDS,
    ) -> None:
        self.imds_url = (imds_url or os.environ.get(variables.IMDS_URL) or DEFAULT_IMDS_URL).rstrip(
            "/"
        )
        if not self.imds_url.startswith("http://"):
            raise ValueError(f"the metadata service is reached over http://, not {self.imds_url!r}")
        self.on_notice = on_notice
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spot-notice", daemon=True)

    def start(self) -> SpotNoticeWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(_TIMEOUT * 2 + 1)

    def check(self) -> str | None:
        """The notice, if EC2 has given one; None if not (or the service is unreachable,
        which must never end training)."""
        try:
            token = self._request(
                "PUT",
                "/latest/api/token",
                {"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_SECONDS)},
            )
            body = self._request(
                "GET",
                "/latest/meta-data/spot/instance-action",
                {"X-aws-ec2-metadata-token": token},
            )
        except (urllib.error.URLError, OSError):
            return None  # 404 (no notice yet) included: HTTPError is a URLError
        except Exception:  # a garbled answer (not HTTP, not text): ask again next time
            log.warning("unexpected answer from the metadata service", exc_info=True)
            return None
        return _describe(body)

    def _run(self) -> None:
        while not self._stop.is_set():
            notice = self.check()
            if notice is not None:
                try:
                    self.on_notice(notice)
                except Exception:
                    log.exception("handling the spot interruption notice failed")
                return
            self._stop.wait(self.interval)

    def _request(self, method: str, path: str, headers: dict[str, str]) -> str:
        request = urllib.request.Request(  # noqa: S310 (http:// checked in __init__)
            f"{self.imds_url}{path}", method=method, headers=headers
        )
        with urllib.request.urlopen(request, timeout=_TIMEOUT) as response:  # noqa: S310
            return str(response.read().decode())


def _describe(body: str) -> str:
    """``{"action": "terminate", "time": "..."}`` as a sentence."""
    try:
        notice = json.loads(body)
        return f"EC2 will {notice['action']} this instance at {notice['time']}"
    except (ValueError, KeyError, TypeError):
        return f"EC2 interruption notice: {body.strip()[:200]}"
