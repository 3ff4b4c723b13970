"""The variables that the ``runyard`` command and the SDK read, and the two that
``runyard server`` hands the worker and beat it starts.

The server's settings are ``RUNYARD_`` and a field of ``service.settings.Settings``, read
there; HOME and PUBLIC_URL are two of them. An instance's own variables are in
``contract.variables``.
"""

from __future__ import annotations

# The server's directory (its database, broker, artifacts, token and address by default).
HOME = "RUNYARD_HOME"
# Where the CLI and the SDK find a server, and the token they call it with, where not
# from what ``runyard server`` wrote into HOME.
URL = "RUNYARD_URL"
TOKEN = "RUNYARD_TOKEN"  # noqa: S105 (the variable's name, not a secret)
# The port ``runyard server`` and ``runyard api`` listen on.
PORT = "RUNYARD_PORT"
# How instances reach the service.
PUBLIC_URL = "RUNYARD_PUBLIC_URL"
