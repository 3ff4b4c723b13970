"""Why a job cannot run as specified, as a value: the API turns it into a 422 naming the
field; the parts below the API (modes, backends) report it without knowing of HTTP."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    # The field to blame, as a path into the job spec (``("inputs", "train", "uri")``);
    # ``("backend",)`` where it is the server's configuration.
    loc: tuple[str | int, ...]
    message: str
