"""The one error the parameter-server library raises to user code."""

from __future__ import annotations


class ParameterServerError(RuntimeError):
    """Training on the parameter servers cannot go on: a misconfiguration, a lost worker,
    a server that went away, or an API used out of order."""
