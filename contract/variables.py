"""The variables an instance's runtime is started with, the same on every backend, and
the other ``RUNYARD_*`` names that Runyard's processes hand one another.

The runtime reads the first group before it has read any config file: where its base
directory is, whom to report to and with what credential. A job's own ``environment`` may
not set names that start with ``RUNYARD_``, and the token never reaches user code. The
SageMaker variables a script sees (``SM_*``, SM_BASE_DIR among them) are named at the end;
the runtime sets them from the instance config (``runtime.instance.environment``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping

# Every name Runyard keeps for itself starts so.
RESERVED_PREFIX = "RUNYARD_"

# The instance's base directory: layout.IMAGE_BASE_DIR in the training image.
BASE_DIR = "SM_BASE_DIR"
SERVICE_URL = "RUNYARD_SERVICE_URL"
JOB_NAME = "RUNYARD_JOB_NAME"
# Carried by every process of the job, so those that left their process group are still
# found (and ended) by it.
JOB_ID = "RUNYARD_JOB_ID"
# Which instance a process runs on (algo-2): on the local backend several instances share
# one machine, so the machine's host name cannot tell them apart.
HOST = "RUNYARD_HOST"
# The instance's credential toward the service (each instance has its own).
JOB_TOKEN = "RUNYARD_JOB_TOKEN"  # noqa: S105 (the variable's name, not a secret)
# The secret every instance of a job shares, that its launch agents prove to each other.
AGENT_KEY = "RUNYARD_AGENT_KEY"
# Never handed to user code.
PRIVATE = (JOB_TOKEN, AGENT_KEY)
# Names of variables whose values plans and answers show masked: credentials, by the
# names they usually go by (AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, DB_PASSWORD, API_KEY).
_SECRET_NAME = re.compile(
    r"SECRET|TOKEN|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|PRIVATE|AUTH|(^|_)(API)?KEY(_|$)",
    re.IGNORECASE,
)


# What a masked value reads as, wherever a plan, an answer or a clone shows one.
REDACTED = "<redacted>"


def is_secret_name(name: str) -> bool:
    """Whether a variable of this name holds a credential, to be shown masked."""
    return name in PRIVATE or _SECRET_NAME.search(name) is not None


def masked(environment: Mapping[str, str]) -> dict[str, str]:
    """``environment`` as it is shown to those who may not read credentials: the value of
    every variable whose name looks secret replaced by REDACTED."""
    return {
        name: REDACTED if is_secret_name(name) else value for name, value in environment.items()
    }


def instance_environment(
    *,
    base_dir: str,
    service_url: str,
    job_name: str,
    job_id: str,
    host: str,
    token: str | None,
    agent_key: str | None,
) -> dict[str, str]:
    """What the runtime of one instance is started with (beside what its machine has).
    ``token`` and ``agent_key`` None leave them out, for a backend that hands secrets over
    another way."""
    environment = {
        BASE_DIR: base_dir,
        "PYTHONUNBUFFERED": "1",
        SERVICE_URL: service_url,
        JOB_NAME: job_name,
        JOB_ID: job_id,
        HOST: host,
    }
    if token is not None:
        environment[JOB_TOKEN] = token
    if agent_key is not None:
        environment[AGENT_KEY] = agent_key
    return environment


# The job's AWS credentials, as botocore (and every AWS SDK) finds a container's: the
# runtime relays them from the service on the instance's loopback (runtime.instance.
# credentials_relay), and every process of the job has these two. The token only opens
# that relay; it is the job's, shown masked like any credential.
CONTAINER_CREDENTIALS_URI = "AWS_CONTAINER_CREDENTIALS_FULL_URI"
CONTAINER_AUTHORIZATION = "AWS_CONTAINER_AUTHORIZATION_TOKEN"
# What botocore's chain looks at before a container endpoint (keys, a profile, a web
# identity, another container endpoint): a runtime that relays the job's own credentials
# leaves none of them set, and points the shared files (AWS_FILE_VARIABLES) at nothing.
# Keys themselves, as a machine hands them to what it starts (Kubernetes from a Secret).
AWS_STATIC_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
AWS_KEY_VARIABLES = (
    *AWS_STATIC_KEYS,
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
)
AWS_FILE_VARIABLES = ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE")
# What a process of the job needs to find the relayed credentials, wherever it starts
# (a rank mpirun starts through another instance's agent, a container).
RELAYED_CREDENTIALS = (CONTAINER_CREDENTIALS_URI, CONTAINER_AUTHORIZATION, *AWS_FILE_VARIABLES)


# Set by the parameter-server launcher for each process of Runyard's parameter server for
# PyTorch (libraries.parameter_server reads them): its role and its RPC rank among all.
PS_ROLE = "RUNYARD_PS_ROLE"
PS_NUM_SERVERS = "RUNYARD_PS_NUM_SERVERS"
PS_RANK = "RUNYARD_PS_RANK"
PS_WORLD_SIZE = "RUNYARD_PS_WORLD_SIZE"

# The launch agent between instances: how long its client keeps trying to reach a host,
# and the mark it puts on every process a command starts.
AGENT_CONNECT_TIMEOUT = "RUNYARD_AGENT_CONNECT_TIMEOUT"
AGENT_COMMAND = "RUNYARD_AGENT_COMMAND"
# Where the EC2 instance metadata service is, if not at its own address (tests).
IMDS_URL = "RUNYARD_IMDS_URL"

# The job's own variables on their way to its script through processes they must not
# reach (mpirun, its daemons and their launch agents): each under this prefix, which means
# nothing to a loader or to Open MPI, until the process that starts the script gives it its
# own name back (runtime.launch.mpi_rank). A job's names never start with RUNYARD_, so the
# prefixed names are never the job's own.
JOB_VARIABLE_PREFIX = "RUNYARD_JOB_VAR_"


def carry_job_variables(job: Mapping[str, str]) -> dict[str, str]:
    """``job`` under the names that carry it past the launcher's own processes."""
    return {JOB_VARIABLE_PREFIX + name: value for name, value in job.items()}


def take_job_variables(environ: MutableMapping[str, str]) -> dict[str, str]:
    """The job's variables carried in ``environ`` under their own names, removed from it."""
    carried = [name for name in environ if name.startswith(JOB_VARIABLE_PREFIX)]
    return {name.removeprefix(JOB_VARIABLE_PREFIX): environ.pop(name) for name in carried}


# What a user script sees, named as SageMaker's containers name them (the runtime builds
# them from the instance config, in ``runtime.instance.environment``). Each constant is
# spelled as its variable, so a search for the variable finds where it is set.
SM_PREFIX = "SM_"
TRAINING_JOB_NAME = "TRAINING_JOB_NAME"
# Where SageMaker's own training toolkit looks for /opt/ml when it is elsewhere.
SAGEMAKER_BASE_DIR = "SAGEMAKER_BASE_DIR"
SM_MODEL_DIR = "SM_MODEL_DIR"
SM_INPUT_DIR = "SM_INPUT_DIR"
SM_INPUT_CONFIG_DIR = "SM_INPUT_CONFIG_DIR"
SM_OUTPUT_DIR = "SM_OUTPUT_DIR"
SM_OUTPUT_DATA_DIR = "SM_OUTPUT_DATA_DIR"
SM_OUTPUT_INTERMEDIATE_DIR = "SM_OUTPUT_INTERMEDIATE_DIR"
SM_CHECKPOINT_DIR = "SM_CHECKPOINT_DIR"
SM_CHANNELS = "SM_CHANNELS"
SM_HPS = "SM_HPS"
SM_HOSTS = "SM_HOSTS"
SM_CURRENT_HOST = "SM_CURRENT_HOST"
SM_CURRENT_INSTANCE_TYPE = "SM_CURRENT_INSTANCE_TYPE"
SM_NUM_GPUS = "SM_NUM_GPUS"
SM_NUM_CPUS = "SM_NUM_CPUS"
SM_RESOURCE_CONFIG = "SM_RESOURCE_CONFIG"
SM_INPUT_DATA_CONFIG = "SM_INPUT_DATA_CONFIG"
SM_USER_ENTRY_POINT = "SM_USER_ENTRY_POINT"
SM_USER_ARGS = "SM_USER_ARGS"
SM_FRAMEWORK_PARAMS = "SM_FRAMEWORK_PARAMS"
SM_TRAINING_ENV = "SM_TRAINING_ENV"
SM_LOG_LEVEL = "SM_LOG_LEVEL"
SM_NETWORK_INTERFACE_NAME = "SM_NETWORK_INTERFACE_NAME"
SM_MODULE_NAME = "SM_MODULE_NAME"
SM_MODULE_DIR = "SM_MODULE_DIR"
SM_CHANNEL_PREFIX = "SM_CHANNEL_"
SM_HP_PREFIX = "SM_HP_"


def sm_channel(name: str) -> str:
    """The variable that holds a channel's directory (SM_CHANNEL_TRAIN)."""
    return SM_CHANNEL_PREFIX + _upper(name)


def sm_hp(key: str) -> str:
    """The variable that holds one hyperparameter (SM_HP_LEARNING_RATE)."""
    return SM_HP_PREFIX + _upper(key)


def _upper(name: str) -> str:
    # Anything but a letter, a digit or an underscore cannot be part of a variable's name.
    return re.sub(r"[^A-Z0-9_]", "_", name.upper())
