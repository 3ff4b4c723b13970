"""One acting controller among replicas: the `kubernetes` client's leader election, on a
Lease (coordination.k8s.io/v1).

A replica that holds the Lease runs the controller's passes and renews it; the others wait
until it stops renewing for the Lease's duration, then one of them takes it (the API
server's optimistic concurrency on the Lease lets only one win). A leader that cannot
renew stops acting before another can take over; one that stops cleanly gives the Lease
up so a follower takes over at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

log = logging.getLogger(__name__)


class _Stopped(Exception):
    """Raised through the client's election loop to end it."""


def run(
    api_client: ApiClient,
    *,
    namespace: str,
    name: str,
    identity: str,
    lease_seconds: int,
    lead: Callable[[threading.Event], None],
    stop: threading.Event,
) -> None:
    """Take part in the election until ``stop`` is set. While leading, ``lead(lost)``
    runs in a thread of its own; ``lost`` is set when leadership ends, and ``lead`` must
    return then."""
    from kubernetes.leaderelection import electionconfig, leaderelection

    lock = _lock(api_client, name, namespace, identity, stop)
    lost = threading.Event()
    renew = max(2, lease_seconds * 2 // 3)
    config = electionconfig.Config(  # type: ignore[no-untyped-call]
        lock,
        lease_duration=lease_seconds,
        renew_deadline=renew,
        retry_period=1,
        onstarted_leading=lambda: lead(lost),
        onstopped_leading=lost.set,
    )
    try:
        leaderelection.LeaderElection(config).run()  # type: ignore[no-untyped-call]
    except _Stopped:
        pass
    finally:
        was_leading = lock.holding
        lost.set()
        if was_leading and stop.is_set():
            lock.release()


def _lock(
    api_client: ApiClient, name: str, namespace: str, identity: str, stop: threading.Event
) -> Any:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    class Lock(LeaseLock):
        """The client's Lease lock, on this client, that ends the election on ``stop``."""

        def __init__(self) -> None:
            super().__init__(name, namespace, identity)  # type: ignore[no-untyped-call]
            self.api_instance = client.CoordinationV1Api(api_client)
            self.holding = False

        def get(self, name: str, namespace: str) -> Any:
            if stop.is_set():
                raise _Stopped
            return super().get(name, namespace)  # type: ignore[no-untyped-call]

        def create(self, name: str, namespace: str, election_record: Any) -> bool:
            made = super().create(name, namespace, election_record)  # type: ignore[no-untyped-call]
            self.holding = bool(made)
            return self.holding

        def update(self, name: str, namespace: str, updated_record: Any) -> bool:
            done = super().update(name, namespace, updated_record)  # type: ignore[no-untyped-call]
            self.holding = bool(done)
            return self.holding

        def release(self) -> None:
            """Give the Lease up: a follower finds no holder and takes it at once."""
            lease = self.lease_reference
            if lease is None or lease.spec is None:
                return
            lease.spec.holder_identity = None
            try:
                self.api_instance.replace_namespaced_lease(name, namespace, lease)
            except ApiException as exc:  # taken meanwhile: nothing of ours to give up
                log.info("could not give the lease up: %s", exc.reason)

    return Lock()
