"""What wakes the controller between its passes: a watch on each namespace's TrainingJobs
and HyperparameterTuningJobs.

A pass is level-triggered (``controller.Controller.sync``): it reads every resource and
every job, so it needs no event's content, only to know that something changed. A watch
turns ``kubectl apply`` or ``kubectl delete`` into a pass within moments, while the pass
every ``resync_seconds`` still follows what only the database knows (a job's progress).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from service.custom_resources import names

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

log = logging.getLogger(__name__)

# How long one watch request lasts before it is made again (the API server ends watches
# on its own too).
WATCH_SECONDS = 30
# After a watch failed (the API server restarting, say): before the next one.
RETRY_SECONDS = 1.0
# How soon a wait notices that the lead ended.
_NOTICE_DONE_SECONDS = 0.25


class Watches:
    """A watching thread per namespace and kind, each setting ``changed`` when one of its
    resources is added, changed or deleted, until ``close``."""

    def __init__(self, api_client: ApiClient, namespaces: list[str]) -> None:
        from kubernetes import client

        self.changed = threading.Event()
        self._custom = client.CustomObjectsApi(api_client)
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._open: set[Any] = set()
        self._threads = [
            threading.Thread(
                target=self._watch,
                args=(namespace, kind.plural),
                name=f"watch-{namespace}-{kind.plural}",
                daemon=True,
            )
            for namespace in namespaces
            for kind in names.KINDS
        ]
        for thread in self._threads:
            thread.start()

    def close(self) -> None:
        """Ends every watch now: its open request too, which the API server would
        otherwise hold for up to ``WATCH_SECONDS``."""
        self._closed.set()
        with self._lock:
            for response in self._open:
                response.shutdown()  # unblocks the thread reading it
        for thread in self._threads:
            thread.join(timeout=5)

    def _watch(self, namespace: str, plural: str) -> None:
        while not self._closed.is_set():
            try:
                self._follow(namespace, plural)
            except Exception as exc:  # the passes go on without it; the next may work
                if self._closed.is_set():
                    return
                log.info("watching %s of %s: %s", plural, namespace, exc)
                self._closed.wait(RETRY_SECONDS)

    def _follow(self, namespace: str, plural: str) -> None:
        # The events themselves are not read: any of them means a pass is due.
        response: Any = self._custom.list_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            namespace,
            plural,
            watch=True,
            timeout_seconds=WATCH_SECONDS,
            _preload_content=False,
        )
        with self._lock:
            if self._closed.is_set():
                response.release_conn()
                return
            self._open.add(response)
        try:
            for _chunk in response.stream(amt=4096, decode_content=False):
                self.changed.set()
        finally:
            with self._lock:
                self._open.discard(response)
            response.release_conn()


def wait(changed: threading.Event, done: Callable[[], bool], seconds: float) -> None:
    """Until something changed, ``done()``, or ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while not done() and (left := deadline - time.monotonic()) > 0:
        if changed.wait(min(left, _NOTICE_DONE_SECONDS)):
            return
