"""``runyard controller``: the controller's passes, run by the elected replica only."""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from typing import TYPE_CHECKING

from service.custom_resources import election, watching
from service.custom_resources.controller import Controller
from service.custom_resources.tuning_controller import TuningController
from service.settings import Settings

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

log = logging.getLogger(__name__)


def identity() -> str:
    """Who this replica is in the Lease: its pod's name (the host name), and a suffix so
    that a restarted process is another candidate."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def serve(settings: Settings, stop: threading.Event) -> None:
    """Elect, then while leading run passes (``lead``), until ``stop``."""
    from provisioning.kubernetes import api_client

    client = api_client(settings)
    controller = Controllers(Controller(settings, client), TuningController(settings, client))
    config = settings.controller
    election.run(
        client,
        namespace=config.lease_namespace,
        name=config.lease_name,
        identity=identity(),
        lease_seconds=config.lease_seconds,
        lead=lambda lost: lead(controller, client, lost, stop),
        stop=stop,
    )


class Controllers:
    """The TrainingJob controller and the HyperparameterTuningJob one, a pass of each."""

    def __init__(self, training: Controller, tuning: TuningController) -> None:
        self.settings = training.settings
        self.training = training
        self.tuning = tuning

    def sync(self) -> None:
        try:
            self.training.sync()
        finally:  # one kind's failure does not hold the other's resources back
            self.tuning.sync()


def lead(
    controller: Controller | Controllers,
    client: ApiClient,
    lost: threading.Event,
    stop: threading.Event,
) -> None:
    """Passes, each as soon as a resource changes (a watch) and at least every
    ``resync_seconds``, until the lead is ``lost`` or the process told to ``stop``."""
    settings = controller.settings
    namespaces = sorted(settings.controller.namespaces)
    log.info("leading: taking TrainingJobs and HyperparameterTuningJobs from %s", namespaces)

    def done() -> bool:
        return lost.is_set() or stop.is_set()

    watches = watching.Watches(client, namespaces)
    try:
        while not done():
            watches.changed.clear()
            try:
                controller.sync()
            except Exception:  # the next pass tries again; the API may be back by then
                log.exception("a pass of the controller failed")
            # A lost lease is noticed within a pass: the lease outlasts its renewal
            # deadline by a third, longer than a pass by default.
            watching.wait(watches.changed, done, settings.controller.resync_seconds)
    finally:
        watches.close()
