"""Who may do what: roles within a project, and the server administrator above them.

Deny by default: a caller sees a job only in its own project (a server administrator, in
every project), and each action names the least role it needs. Another project's job is
reported as not found, never as forbidden, so its existence is not given away.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum
from typing import Literal

from service.kit.errors import Forbidden, NotFound


class Role(IntEnum):
    """Each role can do what the ones below it can."""

    VIEWER = 1  # read jobs, logs, metrics
    MEMBER = 2  # also submit, stop, interrupt
    ADMIN = 3  # also mint and revoke the project's tokens

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def of(cls, label: str) -> Role:
        return cls[label.upper()]


RoleName = Literal["viewer", "member", "admin"]


@dataclass(frozen=True)
class Principal:
    kind: Literal["user", "job"]
    name: str
    project: str
    role: Role = Role.VIEWER
    server_admin: bool = False
    token_id: int | None = None
    last_used_at: datetime | None = None
    # An instance token's job and host: it may report for that instance only.
    job_id: str | None = None
    host: str | None = None

    def sees(self, project: str) -> bool:
        return self.kind == "user" and (self.server_admin or project == self.project)

    def may(self, role: Role, project: str) -> bool:
        """Whether the caller holds ``role`` (or more) in ``project``."""
        if not self.sees(project):
            return False
        return self.server_admin or self.role >= role

    def project_in_sight(self, asked: str | None) -> str:
        """The project a request means: the one asked for, else the caller's own. One the
        caller cannot see does not exist for it."""
        project = asked or self.project
        if not self.sees(project):
            raise NotFound(f"no project named {project!r}")
        return project

    def require(self, role: Role, project: str, action: str) -> None:
        """Refuse ``action`` in a project the caller sees without the role it needs (the
        caller has already been told a project it cannot see does not exist)."""
        if not self.may(role, project):
            raise Forbidden(f"{action} needs the {role.label} role in project {project!r}")
