"""The port the service listens on unless told otherwise, which its clients (the CLI, the
SDK's client, the demo) reach by default: one number for both sides."""

from __future__ import annotations

SERVICE_PORT = 8642
