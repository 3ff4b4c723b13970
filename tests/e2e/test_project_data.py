"""Projects own their data, end to end: a real stack on PostgreSQL serving two projects,
``alpha`` and ``beta``, each granted local directories and an S3 prefix of its own (moto's
server). A member of beta tries what a member of another project could do before places
belonged to projects: name alpha's data and alpha's output path (with alpha's job's name),
on ``file://`` and ``s3://``; swap a granted channel for a link to alpha's data once the
job is submitted; have its job's credentials reach alpha's prefix; and remove alpha's
model by deleting its own job. Each is refused, and what beta was granted works.

moto's STS does not enforce session policies: the policy the service builds for beta's S3
job is evaluated with moto's own IAM evaluator, as
``tests/service/training/test_instance_credentials.py`` does."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runyard.client import Client, RunyardError
from service.grants import service as grants
from service.jobs.models import TrainingJob
from service.kit.db import get_engine, session_scope
from service.settings import Settings
from service.training import instance_credentials
from tests import aws, postgres
from tests.aws import MotoServer
from tests.conftest import POSTGRES_ADMIN_URL
from tests.e2e.conftest import Stack, log_lines

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

BUCKET = "shared-ml"
# Reads its channel and stores a model saying what it read; waits first for the test's
# word where the test swaps something under it.
SCRIPT = """
import os, time
base = os.environ["SAGEMAKER_BASE_DIR"]
if os.environ.get("WAIT_FOR_GO"):
    for _ in range(1200):
        if os.path.exists(os.path.join(base, "go")):
            break
        time.sleep(0.1)
channel = os.environ["SM_CHANNEL_TRAIN"]
if os.environ.get("PIPE"):
    with open(channel + "_0", "rb") as fifo:
        read = fifo.read().decode()
else:
    read = open(os.path.join(channel, "train.txt")).read()
print("READ " + read, flush=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.txt"), "w") as model:
    model.write("trained on " + read)
"""


@dataclass(frozen=True)
class World:
    stack: Stack
    moto: MotoServer
    database_url: str
    data: Path  # each project's directories, by name: alpha-data, alpha-out, ...
    source: Path
    tokens: dict[str, str]

    def client(self, project: str) -> Client:
        return Client(self.stack.url, self.tokens[project], project=project)

    def place(self, name: str) -> Path:
        return self.data / name


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    with aws.moto_server(tmp_path_factory.mktemp("moto-data")) as server:
        s3 = server.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        for project in ("alpha", "beta"):
            s3.put_object(
                Bucket=BUCKET, Key=f"{project}/data/train.txt", Body=f"{project}'s s3 data"
            )
        yield server


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, moto: MotoServer) -> Iterator[World]:
    data = tmp_path_factory.mktemp("project-data")
    for project in ("alpha", "beta"):
        for kind in ("data", "out"):
            (data / f"{project}-{kind}").mkdir()
        (data / f"{project}-data" / "train.txt").write_text(f"{project}'s local data")
    swap = data / "beta-data" / "swap"
    swap.mkdir()
    (swap / "part.bin").write_text("beta's part")
    (data / "alpha-data" / "part.bin").write_text("alpha's secret part")
    source = tmp_path_factory.mktemp("project-code")
    (source / "train.py").write_text(textwrap.dedent(SCRIPT))
    with postgres.empty_database(POSTGRES_ADMIN_URL, "runyard_e2e_data") as database_url:
        home = tmp_path_factory.mktemp("runyard-data")
        stack = Stack(home, database_url, f"sqla+sqlite:///{home / 'broker.db'}")
        stack.env = {k: v for k, v in stack.env.items() if not k.startswith("AWS_")}
        # Whatever the machine allows: with namespaces or without, both projects' jobs run.
        stack.env.update({**moto.client_env(), "RUNYARD_LOCAL_SHARED_PROJECTS": "many"})
        stack.up()
        try:
            tokens = {}
            with stack.client() as admin:
                for project in ("alpha", "beta"):
                    admin.create_project(project)
                    admin.grant(project, source.as_uri())
                    admin.grant(project, (data / f"{project}-data").as_uri())
                    admin.grant(project, (data / f"{project}-out").as_uri(), access="read-write")
                    admin.grant(project, f"s3://{BUCKET}/{project}", access="read-write")
                    tokens[project] = admin.create_token(
                        f"{project}-member", project=project, role="member"
                    )["token"]
            yield World(stack, moto, database_url, data, source, tokens)
            assert stack.down() == [], "processes of finished jobs were left running"
        finally:
            stack.down()
            get_engine(database_url).dispose()


def _run(world: World, project: str, **spec: Any) -> tuple[dict[str, Any], list[str]]:
    with world.client(project) as client:
        job = world.stack.submit(client, world.source, entry_point="train.py", **spec)
        ended = world.stack.wait_until_ended(client, job["name"], timeout=180)
        return ended, log_lines(client, job["name"])


def _refused(world: World, project: str, **spec: Any) -> str:
    with world.client(project) as client, pytest.raises(RunyardError) as caught:
        world.stack.submit(client, world.source, entry_point="train.py", **spec)
    return str(caught.value)


@dataclass(frozen=True)
class Trained:
    """The jobs each project ran on its own places: each ended, and what it printed."""

    local: dict[str, tuple[dict[str, Any], list[str]]]
    s3: tuple[dict[str, Any], list[str]]


@pytest.fixture(scope="module")
def trained(world: World) -> Trained:
    """The same job name in both projects, each on its own data and output path; and a
    job of beta's on its own S3 prefix."""
    local = {
        project: _run(
            world,
            project,
            name="train",
            inputs={"train": world.place(f"{project}-data").as_uri()},
            output_path=world.place(f"{project}-out").as_uri(),
        )
        for project in ("alpha", "beta")
    }
    s3 = _run(
        world,
        "beta",
        name="train-s3",
        inputs={"train": f"s3://{BUCKET}/beta/data/"},
        output_path=f"s3://{BUCKET}/beta/models",
    )
    return Trained(local, s3)


def test_each_project_runs_on_the_places_it_was_granted(world: World, trained: Trained) -> None:
    for project, (ended, lines) in trained.local.items():
        assert ended["status"] == "Completed", world.stack.explain(ended)
        assert f"READ {project}'s local data" in lines, lines
        assert (world.place(f"{project}-out") / "train" / "output" / "model.tar.gz").is_file()
    ended, lines = trained.s3
    assert ended["status"] == "Completed", world.stack.explain(ended)
    assert "READ beta's s3 data" in lines, lines
    model = f"beta/models/{ended['name']}/output/model.tar.gz"
    assert world.moto.client("s3").head_object(Bucket=BUCKET, Key=model)["ContentLength"] > 0


def test_another_projects_data_is_refused_at_submission(world: World) -> None:
    alphas = [
        ("inputs.train.uri", {"inputs": {"train": world.place("alpha-data").as_uri()}}),
        ("output_path", {"output_path": world.place("alpha-out").as_uri()}),
        (
            "checkpoint_s3_uri",
            {"checkpoint_s3_uri": (world.place("alpha-out") / "checkpoints").as_uri()},
        ),
        ("inputs.train.uri", {"inputs": {"train": f"s3://{BUCKET}/alpha/data/"}}),
        ("output_path", {"output_path": f"s3://{BUCKET}/alpha/models"}),
    ]
    for field, spec in alphas:
        refused = _refused(world, "beta", name="train", **spec)
        assert field in refused, (field, refused)
        assert "project 'beta'" in refused, (field, refused)
    # Granted to read, not to write.
    refused = _refused(world, "beta", name="ro", output_path=world.place("beta-data").as_uri())
    assert "may only read there" in refused
    with world.client("beta") as beta:
        assert [job["name"] for job in beta.list_jobs()["items"]].count("ro") == 0


def test_a_channel_swapped_for_a_link_to_another_projects_data_leads_nowhere(
    world: World,
) -> None:
    """Inside beta's grant when submitted; a link into alpha's data once the job runs:
    the runtime reads nothing through it."""
    swap = world.place("beta-data") / "swap"
    with world.client("beta") as client:
        job = world.stack.submit(
            client,
            world.source,
            name="swapped",
            entry_point="train.py",
            inputs={"train": {"uri": swap.as_uri(), "input_mode": "Pipe"}},
            output_path=world.place("beta-out").as_uri(),
            environment={"WAIT_FOR_GO": "1", "PIPE": "1"},
        )
        world.stack.wait_for(client, job["name"], lambda j: j["secondary_status"] == "Training")
        swap.rename(swap.with_name("moved"))
        swap.symlink_to(world.place("alpha-data"))
        (world.stack.home / "jobs" / job["id"] / "algo-1" / "go").touch()
        ended = world.stack.wait_until_ended(client, job["name"], timeout=180)
        lines = log_lines(client, job["name"])
    assert ended["status"] == "Failed", world.stack.explain(ended)
    assert "refused" in ended["failure_reason"], ended["failure_reason"]
    assert not any("alpha's secret" in line for line in lines), lines


def test_betas_credentials_reach_its_grants_and_no_more(world: World, trained: Trained) -> None:
    """The session policy the service gives beta's S3 job, from what the database holds,
    by the evaluator moto enforces IAM with."""
    from moto.iam.access_control import IAMPolicy, PermissionResult

    settings = Settings(home=world.stack.home, database_url=world.database_url)
    with session_scope(world.database_url, readonly=True) as session:
        job = session.query(TrainingJob).filter_by(project="beta", name="train-s3").one()
        places = grants.places(session, settings, "beta")
        spec = job.record.job_spec()
    policy = instance_credentials.session_policy(
        spec, "train-s3", places=instance_credentials.policy_places(settings, places)
    )

    def permitted(action: str, key: str) -> bool:
        resource = f"arn:aws:s3:::{BUCKET}/{key}"
        return IAMPolicy(policy).is_action_permitted(action, resource) == (
            PermissionResult.PERMITTED
        )

    assert permitted("s3:GetObject", "beta/data/train.txt")
    assert permitted("s3:PutObject", "beta/models/train-s3/output/model.tar.gz")
    assert not permitted("s3:GetObject", "alpha/data/train.txt")
    assert not permitted("s3:PutObject", "alpha/models/train/output/model.tar.gz")
    assert not permitted("s3:DeleteObject", "alpha/models/train/output/model.tar.gz")
    assert json.loads(policy)["Version"] == "2012-10-17"


def test_deleting_a_job_removes_only_what_it_wrote(world: World, trained: Trained) -> None:
    alphas = world.place("alpha-out") / "train" / "output" / "model.tar.gz"
    assert alphas.is_file()
    # alpha's job of the same name does not exist for beta's member.
    with (
        Client(world.stack.url, world.tokens["beta"], project="alpha") as across,
        pytest.raises(RunyardError) as caught,
    ):
        across.delete_job("train", remove_artifacts=True)
    assert caught.value.status_code == 404, caught.value
    with world.client("beta") as beta:
        deleted = beta.delete_job("train", remove_artifacts=True)
    assert deleted["removed_objects"] >= 1
    assert not (world.place("beta-out") / "train").exists()
    assert alphas.is_file()
    with world.client("alpha") as alpha:
        assert alpha.get_job("train")["status"] == "Completed"
