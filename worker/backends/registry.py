"""Backends by name, built from the server's settings."""

from __future__ import annotations

from typing import Any

from service.settings import Settings
from worker.backends.base import Backend
from worker.backends.local import LocalBackend

BACKENDS: dict[str, type[Backend[Any]]] = {LocalBackend.name: LocalBackend}


def build(name: str, settings: Settings) -> Backend[Any]:
    if name == LocalBackend.name:
        return LocalBackend(settings.jobs_dir, teardown_grace=settings.teardown_grace_seconds)
    raise KeyError(f"unknown backend {name!r}")
