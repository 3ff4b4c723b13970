"""Server configuration: one pydantic-settings class, every field read from ``RUNYARD_*``.

Unset URLs fall back to the embedded defaults, all inside ``RUNYARD_HOME``: a SQLite
database, a SQLite-backed Celery broker and a ``file://`` artifact store. That is what lets
``runyard server`` run on a laptop with no other servers.
"""

from __future__ import annotations

import os
import secrets
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from contract import storage
from contract.images import PYTHON, VERSION, Catalog, Image
from contract.limits import MAX_LOG_BATCH_BODY
from contract.ports import SERVICE_PORT
from provisioning.catalog import CATALOG
from provisioning.ec2.settings import Ec2Settings
from provisioning.kubernetes.settings import KubernetesSettings

_PLACEHOLDER_SECRETS = {"changeme", "change-me", "secret", "runyard", "password"}
# A requirement as pip takes one (a name, extras, a version or marker), never an option.
_REQUIREMENT = r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]*\])?([ <>=!~;@][^\n]*)?$"


class ImageDefinition(BaseModel):
    """One image an operator adds to the catalog (``contract.images``)."""

    model_config = ConfigDict(extra="forbid")

    framework: Literal["pytorch", "tensorflow"]
    framework_version: str = Field(pattern=VERSION.pattern, max_length=32)
    python: str = Field(pattern=f"^{PYTHON.pattern}$")
    packages: list[Annotated[str, Field(pattern=_REQUIREMENT, max_length=200)]] = Field(
        min_length=1, max_length=100
    )
    processor: Literal["cpu", "gpu"] = "cpu"
    aliases: list[Annotated[str, Field(min_length=1, max_length=255)]] = Field(default_factory=list)
    description: str = ""

    def image(self) -> Image:
        return Image(
            framework=self.framework,
            framework_version=self.framework_version,
            python=self.python,
            packages=tuple(self.packages),
            processor=self.processor,
            aliases=tuple(self.aliases),
            description=self.description,
        )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="RUNYARD_", env_nested_delimiter="__", extra="ignore"
    )

    home: Path = Field(default_factory=lambda: Path.home() / ".runyard")
    database_url: str = ""
    broker_url: str = ""
    artifact_root: str = ""
    # The directories a job's file:// URIs (source, channels, output, checkpoints) may
    # name; the artifact root, when it is file://, is always one of them.
    file_roots: Annotated[list[Path], NoDecode] = Field(default_factory=list)
    public_url: str = ""
    # The path prefix the API is served under behind a proxy (an Ingress at /runyard): the
    # console's links and its session cookie then carry it. Empty: served at /.
    root_path: str = Field(default="", pattern=r"^(|/[^\s?#]*[^/\s?#])$")
    secret_key: SecretStr | None = None
    # The admin token, where a deployment manages it (each API replica of a Helm release
    # would otherwise mint its own); unset, one is minted into RUNYARD_HOME/token.
    admin_token: SecretStr | None = None
    environment: str = "development"
    # API processes serving one port (the kernel spreads connections between them): a
    # process answers from one core, so a many-core server needs several for its peak.
    api_workers: int = Field(default=1, ge=1, le=64)
    # How long an API process remembers who holds a bearer token (0: it reads the token
    # for every request). A token revoked through one API process is refused by it at
    # once, and by the other replicas of the deployment within this many seconds.
    token_cache_seconds: float = Field(default=1.0, ge=0, le=60)

    # Instance types each backend serves; a job's backend is looked up here unless it
    # names one: local, kubernetes or ec2.
    backends: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=lambda: {"local": "local", "local_gpu": "local"}
    )
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)
    ec2: Ec2Settings = Field(default_factory=Ec2Settings)
    # How the local backend keeps a job's instances apart: "auto" gives each its own Linux
    # namespaces (host name, address, /opt/ml, processes) where the worker may make them
    # (root, with util-linux and iproute2), and lets them share the machine elsewhere;
    # "namespaces" refuses jobs where it cannot; "shared" never uses namespaces.
    local_isolation: Literal["auto", "namespaces", "shared"] = "auto"
    # Local instances that share the machine (no namespaces) can read one another's files
    # and the server's: "one" takes such jobs only while the server has one project, "many"
    # takes them from every project (the operator trusts them all).
    local_shared_projects: Literal["one", "many"] = "one"
    # A local instance with namespaces that reaches none of its peers for this many seconds
    # (after it did) has lost the job's network: the job restarts, as after any
    # infrastructure failure, instead of hanging in a collective until max_run. 0: never.
    peer_timeout_seconds: float = Field(default=60.0, ge=0)
    max_instance_count: int = Field(default=16, ge=1)
    # An uploaded source bundle: at most this many bytes as sent (compressed), and at most
    # this many once unpacked, which every instance of a job it runs does again. Archives
    # that compress far better than code (decompression bombs) are refused besides.
    max_source_bytes: int = Field(default=512 * 1024 * 1024, ge=1)
    max_source_unpacked_bytes: int = Field(default=1024 * 1024 * 1024, ge=1)
    # The largest request body of any other route (job specs, reports, SageMaker's calls),
    # refused before it is read whole, whoever sends it. At least what an instance's log
    # batch may take, the largest body the service is sent.
    max_request_bytes: int = Field(default=8 * 1024 * 1024, ge=MAX_LOG_BATCH_BODY)
    # Images jobs may name besides the built-in catalog's (a JSON list of objects with
    # framework, framework_version, python, packages, and optionally processor, aliases
    # and description); one with a catalog image's name replaces it.
    images: list[ImageDefinition] = Field(default_factory=list)
    # What runs a job's own container image on the local backend: "auto" (podman, else a
    # Docker whose daemon answers), or the engine's command with its options.
    container_engine: str = Field(default="auto", min_length=1, max_length=500)
    # Where the local backend keeps the catalog images it builds (a disk with room for a
    # few GB each); RUNYARD_HOME/images by default.
    image_store: Path | None = None
    # Names that run a catalog image (or "builtin"), such as the AWS Deep Learning
    # Container a team's code names: {"pytorch-training:2.1.0-cpu-py310": "builtin"}.
    image_aliases: dict[str, str] = Field(default_factory=dict)

    # Where a job's instances get AWS credentials: "service" gives each job credentials of
    # its own, short-lived and limited to the job's S3 locations (its code, channels,
    # output and checkpoints), which the runtime serves to the job's processes as a
    # container credentials endpoint; the server's own keys never reach an instance.
    # "machine" leaves it to the instances' machines (an EC2 instance profile, a pod's
    # service account); local instances then have none. "server" relays the server's own
    # credentials, unlimited, for an S3-compatible store without STS: every job can then
    # do all the server can (the operator trusts them all).
    instance_credentials: Literal["service", "machine", "server"] = "service"
    # The IAM role the service assumes for each job, the job's limits as its session
    # policy; "{project}" in it becomes the job's project (a role per project). Unset: the
    # service asks STS for a federation token limited the same way, which only an IAM
    # user's keys may do.
    instance_role_arn: str = Field(
        default="",
        max_length=2048,
        pattern=r"^(|arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/{}-]+)$",
    )
    # How long the credentials a job is given last (STS's bounds; a role's own maximum
    # may be lower). The runtime asks for fresh ones well before they end.
    instance_credentials_seconds: int = Field(default=3600, ge=1800, le=43200)

    # Capacity: how many instances of each type exist to run jobs on (a type missing here
    # has no limit), and per project how many of each type, or of all types together under
    # "*", its jobs may hold at once.
    capacity: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    project_quotas: dict[str, dict[str, Annotated[int, Field(ge=0)]]] = Field(default_factory=dict)
    # Deprecated: the quotas of before projects, keyed by what was then the tenant. Each
    # entry now applies to the project of that name (a project's own entry in
    # RUNYARD_PROJECT_QUOTAS wins); the server warns at start while it is set.
    tenant_quotas: dict[str, dict[str, Annotated[int, Field(ge=0)]]] = Field(default_factory=dict)
    # A job that does not fit now waits in line ("queue"), or is refused at submission
    # with ResourceLimitExceeded ("refuse").
    on_capacity_exceeded: Literal["queue", "refuse"] = "queue"

    # Restarts: how many times a job may be restarted after an infrastructure failure (a
    # lost instance) before it fails; spot interruptions are bounded by max_wait instead.
    max_infrastructure_restarts: int = Field(default=3, ge=0)
    # The first restart after an application failure waits this long, each next one twice
    # as long (at most restart_backoff_max_seconds).
    restart_backoff_seconds: float = Field(default=1.0, ge=0)
    restart_backoff_max_seconds: float = Field(default=300.0, ge=0)
    # What an instance second costs on spot, as a fraction of on-demand: the saving that
    # spot jobs report.
    spot_price_ratio: float = Field(default=0.3, gt=0, le=1)
    # How long an interrupted spot instance's scripts get after SIGTERM (EC2 gives two
    # minutes' warning).
    spot_grace_seconds: float = Field(default=110.0, ge=0)
    # A spot launch that finds no capacity tries again after this long, within max_wait.
    spot_capacity_retry_seconds: float = Field(default=60.0, ge=0)

    # Worker timing. The sweep runs this often: it re-drives every job launching, stopping
    # or restarting each time, jobs whose instances run every running_sweep_seconds (their
    # reports wake them), and the front of the line every waiting_sweep_seconds; so it
    # bounds how long a lost broker message or a dead worker can delay a job.
    reconcile_interval: float = Field(default=2.0, gt=0)
    reconcile_lease_seconds: float = Field(default=30.0, gt=0)
    # How often the sweep looks at a job whose instances run, in case one died unheard
    # (or its max_run passed).
    running_sweep_seconds: float = Field(default=10.0, gt=0)
    # How often beat's safety sweep re-drives a job waiting for capacity (what frees
    # capacity wakes the first jobs in line at once; the sweep is for lost messages).
    waiting_sweep_seconds: float = Field(default=30.0, gt=0)
    stop_grace_seconds: float = Field(default=30.0, ge=0)
    teardown_grace_seconds: float = Field(default=5.0, ge=0)
    # How often beat looks for pods/instances of ended jobs that are still there.
    reap_interval: float = Field(default=60.0, gt=0)
    broker_poll_interval: float = Field(default=0.1, gt=0)
    # Log lines and metric points of a job are deleted this many days after it ended
    # (0 keeps them forever); a job's description, final metrics included, stays.
    log_retention_days: int = Field(default=30, ge=0)
    # Uploaded code that no job refers to is deleted this many days after its last upload
    # (0 keeps it forever); code a job refers to is kept as long as the job is.
    source_retention_days: int = Field(default=7, ge=0)
    _signing_key: bytes | None = PrivateAttr(default=None)
    _catalog: Catalog = PrivateAttr(default_factory=Catalog)
    # Two Runyard installations may share one Redis or RabbitMQ if their queues differ.
    queue: str = Field(default="runyard", pattern=r"^[A-Za-z0-9._-]{1,64}$")

    @field_validator("admin_token")
    @classmethod
    def _check_admin_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            token = value.get_secret_value()
            if not token.startswith("ry_") or len(token) < 35 or not _printable(token):
                raise ValueError("must be ry_ followed by at least 32 characters")
        return value

    @field_validator("capacity")
    @classmethod
    def _check_capacity_types(cls, value: dict[str, int]) -> dict[str, int]:
        # A misspelt type would silently mean "unlimited".
        _check_instance_types(value, "RUNYARD_CAPACITY")
        return value

    @field_validator("project_quotas", "tenant_quotas")
    @classmethod
    def _check_quota_types(
        cls, value: dict[str, dict[str, int]], info: ValidationInfo
    ) -> dict[str, dict[str, int]]:
        variable = f"RUNYARD_{str(info.field_name).upper()}"
        for project, quotas in value.items():
            _check_instance_types(
                {k: v for k, v in quotas.items() if k != "*"}, f"{variable}[{project!r}]"
            )
        return value

    @property
    def service_gives_credentials(self) -> bool:
        """Whether the service hands each job's instances their AWS credentials (its own
        from STS, or the server's): what every launch request says to the runtimes."""
        return self.instance_credentials != "machine"

    def quotas_of(self, project: str) -> dict[str, int]:
        """What ``project``'s jobs may hold, by instance type and "*" for all types."""
        if project in self.project_quotas:
            return self.project_quotas[project]
        return self.tenant_quotas.get(project, {})

    @field_validator("file_roots", mode="before")
    @classmethod
    def _parse_file_roots(cls, value: object) -> object:
        # RUNYARD_FILE_ROOTS="/data:/scratch" (as PATH is written) or a JSON list.
        if isinstance(value, str):
            import json

            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [item for item in text.split(":") if item.strip()]
        return value

    @field_validator("file_roots")
    @classmethod
    def _absolute_file_roots(cls, value: list[Path]) -> list[Path]:
        for root in value:
            if not root.is_absolute():
                raise ValueError(f"RUNYARD_FILE_ROOTS: {str(root)!r} is not an absolute path")
        return [Path(os.path.normpath(root)) for root in value]

    @field_validator("backends", mode="before")
    @classmethod
    def _parse_backends(cls, value: object) -> object:
        # RUNYARD_BACKENDS="local=local,local_gpu=local" or a JSON object.
        if isinstance(value, str):
            import json

            text = value.strip()
            if text.startswith("{"):
                return json.loads(text)
            pairs = [item.split("=", 1) for item in text.split(",") if item.strip()]
            if any(len(pair) != 2 for pair in pairs):
                raise ValueError("RUNYARD_BACKENDS must be 'type=backend,...' or a JSON object")
            return {key.strip(): backend.strip() for key, backend in pairs}
        return value

    @model_validator(mode="after")
    def _fill_embedded_defaults(self) -> Settings:
        self.home = self.home.expanduser().resolve()
        if not self.database_url:
            self.database_url = f"sqlite:///{self.home / 'runyard.db'}"
        if not self.broker_url:
            self.broker_url = f"sqla+sqlite:///{self.home / 'broker.db'}"
        if not self.artifact_root:
            self.artifact_root = (self.home / "artifacts").as_uri()
        if not self.public_url:
            self.public_url = f"http://127.0.0.1:{SERVICE_PORT}"
        self.public_url = self.public_url.rstrip("/")
        self.artifact_root = self.artifact_root.rstrip("/")
        if urlsplit(self.artifact_root).scheme == "file":
            artifacts = Path(os.path.normpath(storage.local_path(self.artifact_root)))
            if artifacts not in self.file_roots:
                self.file_roots = [*self.file_roots, artifacts]
        if (
            self.secret_key is not None
            and self.environment != "development"
            and self.secret_key.get_secret_value().lower() in _PLACEHOLDER_SECRETS
        ):
            raise ValueError("RUNYARD_SECRET_KEY is a placeholder; set a random value")
        return self

    @model_validator(mode="after")
    def _check_images(self) -> Settings:
        try:
            self._catalog = Catalog.with_extra((d.image() for d in self.images), self.image_aliases)
        except ValueError as exc:
            raise ValueError(f"RUNYARD_IMAGES: {exc}") from exc
        return self

    @property
    def jobs_dir(self) -> Path:
        return self.home / "jobs"

    def backend_settings(self, name: str) -> BaseModel | None:
        """The settings of backend ``name``: the field of that name, whose model its record
        in ``provisioning.registry`` names (RUNYARD_<NAME>__<FIELD>); None if it has none."""
        if name not in type(self).model_fields:
            return None
        value = getattr(self, name)
        return value if isinstance(value, BaseModel) else None

    @property
    def images_dir(self) -> Path:
        """Where the local backend builds catalog images."""
        return self.image_store or self.home / "images"

    @property
    def cache_dir(self) -> Path:
        """Downloads that jobs share (pip's cache)."""
        return self.home / "cache"

    @property
    def catalog(self) -> Catalog:
        return self._catalog

    def signing_key(self) -> bytes:
        """The key that signs per-job tokens, created once in RUNYARD_HOME if not configured.
        Read once per process: every authenticated request needs it."""
        if self._signing_key is None:
            self._signing_key = self._load_signing_key()
        return self._signing_key

    def _load_signing_key(self) -> bytes:
        if self.secret_key is not None:
            return self.secret_key.get_secret_value().encode()
        path = self.home / "secret_key"
        if not path.exists():
            self.home.mkdir(parents=True, exist_ok=True)
            _write_private(path, secrets.token_hex(32))
        return path.read_text().strip().encode()


def _write_private(path: Path, text: str) -> None:
    """Create ``path`` readable by its owner only; lose a race to another process gracefully."""
    import os

    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")


@lru_cache
def get_settings() -> Settings:
    return Settings()


def _printable(text: str) -> bool:
    """ASCII without spaces or controls: what fits in an Authorization header as it is."""
    return all("!" <= char <= "~" for char in text)


def _check_instance_types(keys: dict[str, int], setting: str) -> None:
    unknown = sorted(key for key in keys if key not in CATALOG)
    if unknown:
        raise ValueError(f"{setting}: unknown instance type(s) {', '.join(unknown)}")
