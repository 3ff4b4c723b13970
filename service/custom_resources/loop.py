"""``runyard controller``: the controller's passes, run by the elected replica only."""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid

from service.custom_resources import election
from service.custom_resources.controller import Controller
from service.settings import Settings

log = logging.getLogger(__name__)


def identity() -> str:
    """Who this replica is in the Lease: its pod's name (the host name), and a suffix so
    that a restarted process is another candidate."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def serve(settings: Settings, stop: threading.Event) -> None:
    """Elect, then while leading run a pass every ``resync_seconds``, until ``stop``."""
    from provisioning.kubernetes.backend import api_client

    client = api_client(settings.kubernetes)
    controller = Controller(settings, client)

    def lead(lost: threading.Event) -> None:
        log.info("leading: taking TrainingJobs from %s", sorted(settings.controller.namespaces))
        while not (lost.is_set() or stop.is_set()):
            try:
                controller.sync()
            except Exception:  # the next pass tries again; the API may be back by then
                log.exception("a pass of the TrainingJob controller failed")
            # A lost lease is noticed within a pass: the lease outlasts its renewal
            # deadline by a third, longer than a pass by default.
            stop.wait(settings.controller.resync_seconds)

    config = settings.controller
    election.run(
        client,
        namespace=config.lease_namespace,
        name=config.lease_name,
        identity=identity(),
        lease_seconds=config.lease_seconds,
        lead=lead,
        stop=stop,
    )
