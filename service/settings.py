"""Server configuration: one pydantic-settings class, every field read from ``RUNYARD_*``.

Unset URLs fall back to the embedded defaults, all inside ``RUNYARD_HOME``: a SQLite
database, a SQLite-backed Celery broker and a ``file://`` artifact store. That is what lets
``runyard server`` run on a laptop with no other servers.

The class is composed: the server's own fields (``CoreSettings``), and one field per
registered backend that has settings, named as the backend and holding its model
(``RUNYARD_<NAME>__<FIELD>``, or ``RUNYARD_<NAME>`` as one JSON object). The server knows
no backend's settings by name: a backend's package declares them in its record
(``provisioning.registry``), and ``docs/configuration.md`` (``settings_docs``) and the
checks of the chart's values follow.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from contract import storage
from contract.images import PYTHON, VERSION, Catalog, Image
from contract.limits import MAX_LOG_BATCH_BODY
from contract.ports import SERVICE_PORT
from provisioning import registry
from provisioning.catalog import InstanceCatalog
from provisioning.catalog_settings import InstanceTypeDefinition, entry_problems
from provisioning.kubernetes import DNS_LABEL
from provisioning.plugin import BackendPlugin

_PLACEHOLDER_SECRETS = {"changeme", "change-me", "secret", "runyard", "password"}
# Why no job's AWS credentials are shorter: service.training.instance_credentials.
SHORTEST_INSTANCE_CREDENTIALS_SECONDS = 1800
# A requirement as pip takes one (a name, extras, a version or marker), never an option.
_REQUIREMENT = r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]*\])?([ <>=!~;@][^\n]*)?$"


class ImageDefinition(BaseModel):
    """One image an operator adds to the catalog (``contract.images``)."""

    model_config = ConfigDict(extra="forbid")

    framework: Literal["pytorch", "tensorflow", "sklearn"] = Field(
        description="The framework it holds: `pytorch`, `tensorflow` or `sklearn`."
    )
    framework_version: str = Field(
        pattern=VERSION.pattern,
        max_length=32,
        description="The framework's version, as jobs name it in `framework_version` (`2.13.0`).",
    )
    python: str = Field(
        pattern=f"^{PYTHON.pattern}$",
        description="The Python it runs (`3.11`), as jobs name it in `py_version` (`py311`).",
    )
    packages: list[Annotated[str, Field(pattern=_REQUIREMENT, max_length=200)]] = Field(
        min_length=1,
        max_length=100,
        description="What pip installs into it, in order: 1 to 100 requirements (a name, "
        "extras, a version or a marker, never an option).",
    )
    processor: Literal["cpu", "gpu"] = Field(
        default="cpu",
        description="Whether its packages are CPU or GPU builds; part of its name, as "
        "SageMaker names its images (`pytorch-training:<version>-<processor>-<py_version>`; "
        "scikit-learn's repository is `sagemaker-scikit-learn`).",
    )
    aliases: list[Annotated[str, Field(min_length=1, max_length=255)]] = Field(
        default_factory=list,
        description="Other names a job may give it as `image_uri`.",
    )
    description: str = Field(default="", description="What `runyard images list` says of it.")

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


_NAMESPACE = Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
_PROJECT = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=64)]


class ControllerSettings(BaseModel):
    """The TrainingJob controller (``runyard controller``): which namespaces' resources it
    takes jobs from, and how its replicas elect the one that acts. It reaches the cluster
    as the Kubernetes backend does (``kubeconfig``, ``context`` or ``api_url`` there)."""

    model_config = ConfigDict(extra="forbid")

    namespaces: dict[_NAMESPACE, _PROJECT] = Field(
        default_factory=dict,
        description="The namespaces whose TrainingJob resources become jobs, each with the "
        'project its jobs go to (`{"team-a": "vision"}`); a namespace not named here is '
        "not watched.",
    )
    resync_seconds: float = Field(
        default=2.0,
        gt=0,
        le=300,
        description="How often, at least, each resource is brought to its job (submitted, "
        "its status written, its Events posted, its deletion carried out); a change to a "
        "resource (a watch) brings it there at once.",
    )
    lease_namespace: str = Field(
        default="runyard",
        pattern=DNS_LABEL,
        max_length=63,
        description="The namespace of the Lease (coordination.k8s.io) that the "
        "controller's replicas elect their leader with.",
    )
    lease_name: str = Field(
        default="runyard-controller",
        pattern=DNS_LABEL,
        max_length=63,
        description="The Lease's name.",
    )
    lease_seconds: int = Field(
        default=15,
        ge=3,
        le=300,
        description="How long a leader that stopped renewing the Lease keeps it before "
        "another replica takes over.",
    )


# RUNYARD_BACKENDS' description; ``settings_class`` names the registered backends in it.
_BACKENDS_DESCRIPTION = (
    "Which backend ({backends}) runs each instance type, written `type=backend,...` or as a "
    "JSON object; a job's backend is looked up here unless it names one."
)


class CoreSettings(BaseSettings):
    """The server's own settings, those of no backend (``Settings`` adds the backends')."""

    model_config = SettingsConfigDict(
        env_prefix="RUNYARD_", env_nested_delimiter="__", extra="ignore"
    )
    # Fields the server had before a backend took them into its own settings -> (the
    # backend, its field): set by ``settings_class`` from the records.
    former_fields: ClassVar[Mapping[str, tuple[str, str]]] = {}

    home: Path = Field(
        default_factory=lambda: Path.home() / ".runyard",
        description="The server's directory: its embedded database, broker and artifact "
        "store, the admin token, the signing key, the jobs' working directories and the "
        "images it builds live here unless set elsewhere.",
    )
    database_url: str = Field(
        default="",
        description="The database, as a SQLAlchemy URL such as "
        "`postgresql://user@host/db`. Empty: SQLite in `RUNYARD_HOME` (`runyard.db`).",
    )
    broker_url: str = Field(
        default="",
        description="Celery's broker: `redis://...` or `amqp://...`. Empty: a "
        "SQLite-backed broker in `RUNYARD_HOME` (`sqla+sqlite:///.../broker.db`).",
    )
    artifact_root: str = Field(
        default="",
        description="Where uploaded code (in `_sources/`, named by its content) and, "
        "unless a job names its own `output_path`, models and outputs are stored: a "
        "`file://` or `s3://` URI. Empty: `file://$RUNYARD_HOME/artifacts`.",
    )
    file_roots: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="Directories that a job's `file://` URIs (`source_uri`, input channels, "
        "`output_path`, `checkpoint_s3_uri`, `tensorboard_s3_output_path`) may name besides "
        "the artifact root, written "
        "`/data:/scratch` or as a JSON list; the artifact root, when it is `file://`, is "
        "always one. A URI outside them once `..`, percent-escapes and symbolic links are "
        "resolved is refused with a 422 that names the field, whether or not the path "
        "exists; with an `s3://` artifact root and no roots, every `file://` URI is. They "
        "serve the `default` project; any other uses its own area of the artifact root and "
        "the places granted to it inside them (`runyard project grant`).",
    )
    public_url: str = Field(
        default="",
        description="How instances reach the API. Empty: `http://127.0.0.1:<port>`, which "
        "only local instances can use: jobs on pods or EC2 instances are refused with a "
        "loopback one.",
    )
    root_path: str = Field(
        default="",
        pattern=r"^(|/[^\s?#]*[^/\s?#])$",
        description="The path prefix the API and console are served under behind a proxy "
        "(an Ingress at `/runyard`): the console's links and its session cookie then carry "
        "it. Empty: served at `/`.",
    )
    secret_key: SecretStr | None = Field(
        default=None,
        description="The key that signs per-job instance tokens and from which tokens' AWS "
        "credentials are derived; every process of a deployment needs the same. Unset: one "
        "is generated into `RUNYARD_HOME/secret_key`. Outside `development`, a placeholder "
        "(`changeme`, `secret`, ...) is refused.",
    )
    admin_token: SecretStr | None = Field(
        default=None,
        description="A fixed admin token (`ry_` and at least 32 characters), as every API "
        "replica of a deployment needs. Unset: one is minted into `RUNYARD_HOME/token` on "
        "first start.",
    )
    environment: str = Field(
        default="development",
        description="What this server is: any other value than `development` (such as "
        "`production`) makes it refuse a placeholder `RUNYARD_SECRET_KEY`.",
    )
    api_workers: int = Field(
        default=1,
        ge=1,
        le=64,
        description="API processes serving one port (`runyard server` and `runyard api`; "
        "the kernel spreads connections between them). A process answers from one core, "
        "so give a busy server about one per core.",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="How the server's processes (`runyard server`, `api`, `worker`, `beat`) "
        "write their logs to stderr: `text`, a line for people, or `json`, one object a "
        "line with `time`, `level`, `logger`, `message`, and the `request_id` and `job` of "
        "the work it came from where known (docs/monitoring.md).",
    )
    worker_metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="The port on which `runyard worker` serves its Prometheus metrics "
        "(`/metrics`: reconcile passes and lag, its database pool). `0`: not served. The "
        "API serves its own on its port (docs/monitoring.md).",
    )
    max_log_streams: int = Field(
        default=500,
        ge=1,
        le=100_000,
        description="How many followed logs (`GET /v1/training-jobs/{name}/logs?follow=true`: "
        "`runyard logs -f`, the SDK's `wait`, the console's live log) each API process "
        "streams at once; one more is answered 429 with `Retry-After`. A stream waiting "
        "for lines holds no database connection and no thread: each process reads a "
        "followed job's new lines once for all its streams, and a stream still reading a "
        "job's older lines takes turns with the others at that.",
    )
    max_log_streams_per_token: int = Field(
        default=20,
        ge=1,
        le=100_000,
        description="How many of those streams one token (or a console session of it) may "
        "hold open at once in each API process; one more is answered 429 with "
        "`Retry-After`, so that one user's many streams leave room for the others'.",
    )
    token_cache_seconds: float = Field(
        default=1.0,
        ge=0,
        le=60,
        description="How long an API process remembers who holds a token, the project "
        "count and what each project's jobs may use (its grants, and the other projects' "
        "read-write ones) instead of reading them again. A token revoked, a project "
        "created or a grant changed through one API process is seen by it at once, and by "
        "its other replicas within this time; `0` reads them for every request.",
    )

    backends: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=lambda: {"local": "local", "local_gpu": "local"},
        description=_BACKENDS_DESCRIPTION.format(backends="a registered backend's name"),
    )
    instance_types: list[InstanceTypeDefinition] = Field(
        default_factory=list,
        description="Instance types jobs may name besides the built-in ones, as a JSON list "
        "of objects (their fields below); one with a built-in type's name replaces it. A "
        "type runs where `RUNYARD_BACKENDS` sends it.",
    )
    controller: ControllerSettings = Field(
        default_factory=ControllerSettings,
        title="The TrainingJob controller",
        description="The TrainingJob controller's settings: one JSON object, or one "
        "variable per field.",
    )
    instance_metrics_seconds: float = Field(
        default=10.0,
        ge=0,
        le=3600,
        description="How often each instance's runtime samples its CPU, memory, disk and "
        "GPU utilisation for the job's instance metrics (CloudWatch's CPUUtilization and "
        "the others, per host), in seconds: at least 1, or `0` for never.",
    )
    max_instance_count: int = Field(
        default=16, ge=1, description="The largest `instance_count` a job may ask for."
    )
    max_source_bytes: int = Field(
        default=512 * 1024 * 1024,
        ge=1,
        description="The largest source bundle `POST /v1/sources` accepts, in bytes as sent "
        "(compressed); a larger one is refused with 413.",
    )
    max_source_unpacked_bytes: int = Field(
        default=1024 * 1024 * 1024,
        ge=1,
        description="The most bytes a source bundle may unpack to (every instance of its "
        "jobs unpacks it again); a larger one, or one that unpacks to more than 200 times "
        "its packed size (a decompression bomb), is refused with 413 as it is read.",
    )
    max_request_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=MAX_LOG_BATCH_BODY,
        description="The largest body, in bytes, of any other request (job specs, "
        "instances' reports and log batches, SageMaker's and CloudWatch's calls); a larger "
        "one is refused with 413 as it arrives, before the caller is authenticated, or at "
        f"once when its `Content-Length` says so. At least {MAX_LOG_BATCH_BODY}, the most "
        "an instance's log batch takes.",
    )
    images: list[ImageDefinition] = Field(
        default_factory=list,
        description="Images jobs may name besides the catalog's own, as a JSON list of "
        "objects (their fields below); one with a catalog image's name replaces it.",
    )
    image_aliases: dict[str, str] = Field(
        default_factory=dict,
        description="Other names that run a catalog image (or `builtin`), as a JSON object, "
        'such as the AWS Deep Learning Container a team\'s code names: `{"pytorch:2.1": '
        '"builtin"}`.',
    )

    instance_credentials: Literal["service", "machine", "server"] = Field(
        default="service",
        description="Where a job's instances get AWS credentials: `service` gives each job "
        "its own, short-lived and limited to its S3 locations, from STS through a container "
        "credentials endpoint; `machine` leaves it to the instances' machines (an EC2 "
        "instance profile, a pod's service account; local instances then have none); "
        "`server` relays the server's own keys, unlimited, for an S3-compatible store "
        "without STS (every job can then do all the server can).",
    )
    instance_role_arn: str = Field(
        default="",
        max_length=2048,
        pattern=r"^(|arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/{}-]+)$",
        description="The IAM role the service assumes for each job, with the job's limits "
        "as its session policy; `{project}` in it becomes the job's project (a role per "
        "project, which then bounds what its jobs reach; without one, a job of a project "
        "other than `default` is limited to its project's granted places). Empty: a "
        "federation token limited the same way, which only an IAM user's keys may ask for.",
    )
    instance_credentials_seconds: int = Field(
        default=3600,
        ge=SHORTEST_INSTANCE_CREDENTIALS_SECONDS,
        le=43200,
        description="The longest a job's AWS credentials last, in seconds (at most STS's "
        "12 hours; a role's own maximum may be lower). Each job's last its max_run and 25 "
        "minutes, at least 30 minutes and at most this; the runtime asks for fresh ones "
        "well before they end. The last ones a job was given stay valid that long after "
        "they were issued, whether the job still runs or not.",
    )

    capacity: dict[str, Annotated[int, Field(ge=0)]] = Field(
        default_factory=dict,
        description="How many instances of each type may run at once, as a JSON object "
        '(`{"ml.p4d.24xlarge": 8}`); a type missing here has no limit.',
    )
    project_quotas: dict[str, dict[str, Annotated[int, Field(ge=0)]]] = Field(
        default_factory=dict,
        description="Per project, how many instances of each type, or of all types "
        'together under `"*"`, its jobs may hold at once, as a JSON object '
        '(`{"team-a": {"*": 16}}`).',
    )
    tenant_quotas: dict[str, dict[str, Annotated[int, Field(ge=0)]]] = Field(
        default_factory=dict,
        description="Deprecated: the quotas of before projects. Each entry applies to the "
        "project of its name (a project's own entry in `RUNYARD_PROJECT_QUOTAS` wins); "
        "the server warns at start while it is set.",
    )
    on_capacity_exceeded: Literal["queue", "refuse"] = Field(
        default="queue",
        description="A job that does not fit now waits in line (`queue`), or is refused at "
        "submission with `ResourceLimitExceeded` (`refuse`).",
    )

    max_infrastructure_restarts: int = Field(
        default=3,
        ge=0,
        description="How many times a job is restarted after an infrastructure failure (a "
        "lost instance) before it fails; spot interruptions are bounded by the job's "
        "`max_wait` instead.",
    )
    restart_backoff_seconds: float = Field(
        default=1.0,
        ge=0,
        description="Seconds before the first restart after an application failure; each "
        "next one waits twice as long, up to `RUNYARD_RESTART_BACKOFF_MAX_SECONDS`.",
    )
    restart_backoff_max_seconds: float = Field(
        default=300.0,
        ge=0,
        description="The longest wait, in seconds, before a restart after an application failure.",
    )
    spot_price_ratio: float = Field(
        default=0.3,
        gt=0,
        le=1,
        description="What a spot instance second costs against on-demand: a spot job's "
        "`billable_seconds` are its worked seconds times this.",
    )
    spot_grace_seconds: float = Field(
        default=110.0,
        ge=0,
        description="Seconds an interrupted spot instance's scripts get after SIGTERM (EC2 "
        "gives two minutes' warning).",
    )
    spot_capacity_retry_seconds: float = Field(
        default=60.0,
        ge=0,
        description="A spot launch that finds no capacity tries again after this many "
        "seconds, within the job's `max_wait`.",
    )

    reconcile_interval: float = Field(
        default=2.0,
        gt=0,
        description="Seconds between beat's sweeps. Each re-drives every job launching, "
        "stopping or restarting, so this bounds how long a lost broker message or a dead "
        "worker can delay one.",
    )
    reconcile_lease_seconds: float = Field(
        default=30.0,
        gt=0,
        description="How long, in seconds, a worker holds a job it drives before another "
        "may take it over; never shorter than the longest teardown the server's backends "
        "may wait out.",
    )
    running_sweep_seconds: float = Field(
        default=10.0,
        gt=0,
        description="How often, in seconds, the sweep looks at a job whose instances run "
        "(their reports wake it as things happen): it finds an instance that died unheard, "
        "or a passed `max_run`.",
    )
    waiting_sweep_seconds: float = Field(
        default=30.0,
        gt=0,
        description="How often, in seconds, beat re-drives the first 20 jobs in line and (50 "
        "a sweep) the spot jobs waiting, whose `max_wait` runs. A job that lets go of "
        "capacity wakes the first 20 in line at once: this is a safety net for lost "
        "messages.",
    )
    stop_grace_seconds: float = Field(
        default=30.0,
        ge=0,
        description="Seconds scripts get after SIGTERM when their job is stopped.",
    )
    teardown_grace_seconds: float = Field(
        default=5.0,
        ge=0,
        description="Seconds a teardown waits for an instance's processes (or pods) to end "
        "once told to, before it kills them.",
    )
    reap_interval: float = Field(
        default=60.0,
        gt=0,
        description="How often, in seconds, beat removes what ended jobs still hold (pods, "
        "EC2 instances, local job directories and processes): what a worker that died "
        "during a job's teardown, or a teardown that failed, left.",
    )
    broker_poll_interval: float = Field(
        default=0.1,
        gt=0,
        description="How often, in seconds, the embedded SQLite broker (`sqla+` URLs) is "
        "polled for messages.",
    )
    log_retention_days: int = Field(
        default=30,
        ge=0,
        description="Days after a job ends that beat (hourly) deletes its log lines and "
        "metric points; its description, final metrics included, stays. `0` keeps them "
        "forever.",
    )
    source_retention_days: int = Field(
        default=7,
        ge=0,
        description="Days after its last upload that beat (hourly) deletes uploaded code no "
        "job refers to; code a job refers to is kept as long as the job. `0` keeps it "
        "forever.",
    )
    _signing_key: bytes | None = PrivateAttr(default=None)
    _catalog: Catalog = PrivateAttr(default_factory=Catalog)
    _instance_catalog: InstanceCatalog = PrivateAttr(default_factory=InstanceCatalog)
    # The list that catalog was built from.
    _instance_catalog_of: object = PrivateAttr(default=None)
    queue: str = Field(
        default="runyard",
        pattern=r"^[A-Za-z0-9._-]{1,64}$",
        description="The Celery queue's name: two Runyard installations may share one Redis "
        "or RabbitMQ if their queues differ.",
    )

    @field_validator("instance_metrics_seconds")
    @classmethod
    def _check_instance_metrics_seconds(cls, value: float) -> float:
        # Samples are numbered by their whole second (service.metrics.instance).
        if 0 < value < 1:
            raise ValueError("must be at least 1 second, or 0 for never")
        return value

    @field_validator("admin_token")
    @classmethod
    def _check_admin_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            token = value.get_secret_value()
            if not token.startswith("ry_") or len(token) < 35 or not _printable(token):
                raise ValueError("must be ry_ followed by at least 32 characters")
        return value

    @field_validator("instance_types", mode="wrap")
    @classmethod
    def _name_the_bad_entries(
        cls, value: object, handler: ValidatorFunctionWrapHandler
    ) -> list[InstanceTypeDefinition]:
        # Pydantic's own words name an entry by its index alone; an operator looks for it
        # by its name too.
        try:
            definitions: list[InstanceTypeDefinition] = handler(value)
        except ValidationError as exc:
            raise ValueError(
                entry_problems(exc.errors(), value, "RUNYARD_INSTANCE_TYPES")
            ) from None
        names = [definition.name for definition in definitions]
        for index, name in enumerate(names):
            if name in names[:index]:
                raise ValueError(
                    f"RUNYARD_INSTANCE_TYPES[{index}] ({name}): name: entry "
                    f"{names.index(name)} has it too"
                )
        return definitions

    @model_validator(mode="after")
    def _check_instance_type_names(self) -> CoreSettings:
        # A misspelt type would silently mean "unlimited", or a type no backend runs.
        known = self.instance_catalog
        _check_type_names(self.backends, "RUNYARD_BACKENDS", known)
        _check_type_names(self.capacity, "RUNYARD_CAPACITY", known)
        for variable, field in (
            ("RUNYARD_PROJECT_QUOTAS", self.project_quotas),
            ("RUNYARD_TENANT_QUOTAS", self.tenant_quotas),
        ):
            for project, quotas in field.items():
                _check_type_names(
                    {k: v for k, v in quotas.items() if k != "*"}, f"{variable}[{project!r}]", known
                )
        return self

    @property
    def instance_catalog(self) -> InstanceCatalog:
        """The instance types jobs may name: the built-in ones and ``instance_types``,
        built once per settings object (and again for a copy given other types)."""
        if self._instance_catalog_of is not self.instance_types:
            self._instance_catalog = InstanceCatalog.with_extra(
                definition.instance_type() for definition in self.instance_types
            )
            self._instance_catalog_of = self.instance_types
        return self._instance_catalog

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
    def _fill_embedded_defaults(self) -> CoreSettings:
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
    def _check_images(self) -> CoreSettings:
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
        if name not in type(self).model_fields or name in CoreSettings.model_fields:
            return None
        value = getattr(self, name)
        return value if isinstance(value, BaseModel) else None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The former names come after the variables of today: a field set both ways takes
        # its new name's value (``_move_former_fields``).
        return (
            init_settings,
            env_settings,
            _FormerVariables(settings_cls),
            dotenv_settings,
            file_secret_settings,
        )

    @model_validator(mode="before")
    @classmethod
    def _move_former_fields(cls, data: Any) -> Any:
        """A former field's value (``local_isolation``, from its variable or a keyword)
        into the backend's settings (``local.isolation``), unless that is set there."""
        if not isinstance(data, dict) or not cls.former_fields:
            return data
        data = dict(data)
        for former, (backend, name) in cls.former_fields.items():
            if former not in data:
                continue
            value = data.pop(former)
            own = data.get(backend, {})
            if isinstance(own, BaseModel):
                own = own.model_dump(exclude_unset=True)
            if isinstance(own, dict):
                data[backend] = {name: value, **own}
        return data

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


class _FormerVariables(PydanticBaseSettingsSource):
    """The variables of the fields a backend took into its own settings, read under their
    former names (``RUNYARD_LOCAL_ISOLATION``), which ``_move_former_fields`` moves."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # none is a field of the settings any more

    def __call__(self) -> dict[str, Any]:
        prefix = str(self.config.get("env_prefix") or "")
        # Read as pydantic-settings reads the others: whatever the variable's case.
        environ = {name.upper(): value for name, value in os.environ.items()}
        former_fields: Mapping[str, object] = getattr(self.settings_cls, "former_fields", {})
        return {
            former: environ[(prefix + former).upper()]
            for former in former_fields
            if (prefix + former).upper() in environ
        }


def settings_class(plugins: Iterable[BackendPlugin]) -> type[CoreSettings]:
    """The server's settings with those of ``plugins``: each backend's model a field of its
    name, read from ``RUNYARD_<NAME>__<FIELD>`` or ``RUNYARD_<NAME>`` (JSON), and its
    former fields read into it.

    Built with ``create_model`` rather than written out because the registry, not this
    module, knows which backends there are: a backend's package and its registry line
    are all that a backend with settings takes."""
    plugins = list(plugins)
    # Its description names the backends there are: the registry's, not a list kept here.
    names = ", ".join(f"`{plugin.name}`" for plugin in plugins)
    backends = CoreSettings.model_fields["backends"]
    fields: dict[str, Any] = {
        "backends": (
            backends.rebuild_annotation(),
            FieldInfo.merge_field_infos(
                backends, description=_BACKENDS_DESCRIPTION.format(backends=f"one of {names}")
            ),
        )
    }
    former_fields: dict[str, tuple[str, str]] = {}
    for plugin in plugins:
        model = plugin.settings_model
        if model is None:
            continue
        if not plugin.name.isidentifier() or plugin.name in CoreSettings.model_fields:
            raise ValueError(f"backend {plugin.name!r}: its name cannot name its settings")
        fields[plugin.name] = (model, _backend_field(plugin, model))
        for former, name in plugin.former_fields.items():
            if former in CoreSettings.model_fields or name not in model.model_fields:
                raise ValueError(f"backend {plugin.name!r}: former field {former!r}: no {name}")
            former_fields[former] = (plugin.name, name)
    composed = create_model("Settings", __base__=CoreSettings, __module__=__name__, **fields)
    composed.former_fields = former_fields
    return composed


def _backend_field(plugin: BackendPlugin, model: type[BaseModel]) -> Any:
    return Field(
        default_factory=model,
        title=f"The {plugin.shown_as} backend",
        description=f"The {plugin.shown_as} backend's settings: one JSON object, or one "
        "variable per field.",
    )


if TYPE_CHECKING:
    # To the type checker the server's settings are their core: a backend's own are read
    # through ``backend_settings`` (``provisioning.base.own_settings``), typed by the
    # model its record names, never as an attribute it would have to know of.
    Settings = CoreSettings
else:
    Settings = settings_class(registry.PLUGINS.values())


@lru_cache
def get_settings() -> Settings:
    return Settings()


def _printable(text: str) -> bool:
    """ASCII without spaces or controls: what fits in an Authorization header as it is."""
    return all("!" <= char <= "~" for char in text)


def _check_type_names(keys: Mapping[str, object], setting: str, known: InstanceCatalog) -> None:
    unknown = sorted(key for key in keys if key not in known)
    if unknown:
        raise ValueError(
            f"{setting}: unknown instance type(s) {', '.join(unknown)} (add a type with "
            "RUNYARD_INSTANCE_TYPES)"
        )
