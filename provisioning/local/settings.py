"""The local backend's configuration, nested in the server's settings under ``local``.

Read, as every backend's, from one variable holding a JSON object
(``RUNYARD_LOCAL='{"isolation": "shared"}'``) or from one variable per field
(``RUNYARD_LOCAL__ISOLATION=shared``). These settings were the server's own before they
were the backend's, under the names in ``FORMER_FIELDS`` (``RUNYARD_LOCAL_ISOLATION``,
``RUNYARD_CONTAINER_ENGINE``, ...), which operators, pages and scripts use: the server
still reads those names, and keyword arguments of those names, into this model (the
registry's record says so), and a field set under its new name wins over its former one.
Only an operator sets these; nothing here comes from a job spec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from provisioning.local import addresses

# The server's fields these were, by the name each has here.
FORMER_FIELDS = {
    "local_isolation": "isolation",
    "local_network_pool": "network_pool",
    "local_shared_projects": "shared_projects",
    "peer_timeout_seconds": "peer_timeout_seconds",
    "container_engine": "container_engine",
    "image_store": "image_store",
    "image_fallback": "image_fallback",
}


class LocalSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    isolation: Literal["auto", "namespaces", "shared"] = Field(
        default="auto",
        description="How the local backend keeps a job's instances apart: `auto` gives each "
        "its own Linux namespaces (host name, address, `/opt/ml`, processes) where the "
        "worker may make them (root, with util-linux and iproute2), and lets them share the "
        "machine elsewhere; `namespaces` refuses jobs where it cannot; `shared` never uses "
        "namespaces.",
    )
    network_pool: str = Field(
        default=str(addresses.DEFAULT_POOL),
        min_length=1,
        max_length=40,
        description="The IPv4 addresses the local backend's job networks take (with "
        "namespaces), a /16 to a /22 written as address/length: each job with a way out "
        "has a /24 of it that no route of the machine takes, every closed one its first "
        "/24. Set it where the default is in use on the machine's networks; a /16 gives "
        "255 jobs with a way out at once, a /22 three.",
    )
    shared_projects: Literal["one", "many"] = Field(
        default="one",
        description="Local instances that share the machine (no namespaces) can read one "
        "another's files and the server's: `one` takes such jobs only while the server has "
        "one project, `many` takes them from every project (the operator trusts them all).",
    )
    peer_timeout_seconds: float = Field(
        default=60.0,
        ge=0,
        description="A local instance with namespaces that reached its peers and then none "
        "of them for this many seconds has lost the job's network: the job restarts, as "
        "after any infrastructure failure, instead of hanging in a collective until "
        "`max_run`. `0`: never.",
    )
    container_engine: str = Field(
        default="auto",
        min_length=1,
        max_length=500,
        description="What runs a job's own container image on the local backend: `auto` "
        "(podman, else a Docker whose daemon answers), or the engine's command with its "
        "options.",
    )
    image_store: Path | None = Field(
        default=None,
        description="Where the local backend builds catalog images (a disk with room for a "
        "few GB each). Unset: `RUNYARD_HOME/images`.",
    )
    image_fallback: Literal["nearest", "refuse"] = Field(
        default="nearest",
        description="What the local backend does with a job that names a framework version "
        'SageMaker has images of (`framework_version="1.12"`, or the image\'s name) where '
        "the package index has no build of that framework version for the image's Python "
        "(pip's answer, asked at the job's first launch and remembered for a day): "
        "`nearest` runs it on the nearest image of the catalog, saying so in the job's log "
        "and its describe; `refuse` refuses it (at submission once pip has answered, else "
        "when it is launched).",
    )

    @field_validator("network_pool")
    @classmethod
    def _check_network_pool(cls, value: str) -> str:
        if (why := addresses.pool_problem(value.strip())) is not None:
            raise ValueError(f"RUNYARD_LOCAL_NETWORK_POOL: {why}")
        return value.strip()

    def images_dir(self, home: Path) -> Path:
        """Where catalog images are built, for a server whose home is ``home``."""
        return self.image_store or home / "images"
