"""Projects and roles: every user route against every kind of caller.

Project ``alpha`` holds a job; its viewer, member and admin act on it, and so do a member
of project ``beta``, the server administrator, a caller without a token, a revoked token
and an instance's token. Another project's job must be invisible (404 everywhere, absent
from lists), roles must hold (403), and credentials come before everything else (401).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from contract import storage
from contract.variables import REDACTED
from runyard.server import prepare
from service.app import create_app
from service.auth.access import Role
from service.auth.tokens import instance_token
from service.jobs.models import TrainingJob
from service.kit.db import session_scope
from service.settings import Settings
from tests.conftest import job_spec, make_settings

JOB = "shared-name"
VIEWER, MEMBER, ADMIN = Role.VIEWER, Role.MEMBER, Role.ADMIN
# What a caller who may not reach a thing is told, by why.
UNAUTHENTICATED, FORBIDDEN, INVISIBLE = 401, 403, 404


@dataclass(frozen=True)
class Route:
    label: str
    method: str
    path: str
    needs: Role
    body: dict[str, Any] | None = None


def _routes(source_dir: Path) -> list[Route]:
    job = f"/v1/training-jobs/{JOB}"
    return [
        Route("describe", "GET", f"{job}?project=alpha", VIEWER),
        Route("logs", "GET", f"{job}/logs?project=alpha", VIEWER),
        Route("log download", "GET", f"{job}/logs/download?project=alpha", VIEWER),
        Route("clone", "GET", f"{job}/clone?project=alpha", VIEWER),
        Route("metrics", "GET", f"{job}/metrics?project=alpha", VIEWER),
        Route("model", "GET", f"{job}/model?project=alpha", VIEWER),
        Route("output data", "GET", f"{job}/output?project=alpha", VIEWER),
        Route("place in line", "GET", f"{job}/place-in-line?project=alpha", VIEWER),
        Route("stop", "POST", f"{job}/stop?project=alpha", MEMBER),
        Route(
            "interrupt",
            "POST",
            f"{job}/instances/algo-1/interruption?project=alpha",
            MEMBER,
            {"message": "rehearsal"},
        ),
        Route(
            "submit",
            "POST",
            "/v1/training-jobs?project=alpha",
            MEMBER,
            job_spec(source_dir),  # a generated name each time
        ),
        Route(
            "dry run",
            "POST",
            "/v1/training-jobs?project=alpha&dry_run=true",
            MEMBER,
            job_spec(source_dir, name="planned"),
        ),
        Route("capacity", "GET", "/v1/capacity", VIEWER),
        Route("instance types", "GET", "/v1/instance-types", VIEWER),
        Route("list tokens", "GET", "/v1/tokens", ADMIN),
        Route(
            "mint token",
            "POST",
            "/v1/tokens",
            ADMIN,
            {"name": "minted", "project": "alpha", "role": "viewer"},
        ),
        Route("revoke token", "DELETE", "/v1/tokens/spare?project=alpha", ADMIN),
        # Last: once "stop" has ended the job, a caller let through deletes it.
        Route("delete", "DELETE", f"{job}?project=alpha", MEMBER),
    ]


def _store_output_data(job: dict[str, Any], content: bytes) -> None:
    """What the job's runtime would have stored of its SM_OUTPUT_DATA_DIR."""
    path = storage.local_path(storage.output_data_uri(job["spec"]["output_path"], job["name"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)


def _store_model(settings: Settings, job: dict[str, Any], content: bytes) -> str:
    """What the job's runtime would have stored as its model, and reported."""
    uri = storage.join(job["spec"]["output_path"], job["name"], "output", "model.tar.gz")
    path = storage.local_path(uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    with session_scope(settings.database_url) as session:
        row = session.get(TrainingJob, job["id"])
        assert row is not None
        row.model_artifacts = uri
    return uri


@dataclass
class World:
    api: TestClient
    tokens: dict[str, str | None]
    alpha_job: dict[str, Any]
    beta_job: dict[str, Any]

    def call(self, caller: str, route: Route) -> int:
        token = self.tokens[caller]
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.api.headers.pop("Authorization", None)
        response = self.api.request(route.method, route.path, json=route.body, headers=headers)
        return response.status_code


def _mint(api: TestClient, admin: str, name: str, project: str, role: str) -> str:
    response = api.post(
        "/v1/tokens",
        json={"name": name, "project": project, "role": role},
        headers={"Authorization": f"Bearer {admin}"},
    )
    assert response.status_code == 201, response.text
    assert response.json()["project"] == project
    return str(response.json()["token"])


@pytest.fixture
def world(api: TestClient, settings: Settings, admin_token: str, source_dir: Path) -> World:
    for project in ("alpha", "beta"):
        assert api.post("/v1/projects", json={"name": project}).status_code == 201
        # Its jobs' code, which a project other than default reads only where granted.
        granted = api.post(f"/v1/projects/{project}/grants", json={"prefix": source_dir.as_uri()})
        assert granted.status_code == 201, granted.text
    tokens: dict[str, str | None] = {
        "alpha viewer": _mint(api, admin_token, "vera", "alpha", "viewer"),
        "alpha member": _mint(api, admin_token, "mo", "alpha", "member"),
        "alpha admin": _mint(api, admin_token, "ada", "alpha", "admin"),
        # Named like alpha's member: a name says nothing about the project.
        "beta member": _mint(api, admin_token, "mo", "beta", "member"),
        "server admin": admin_token,
        "no token": None,
    }
    revoked = _mint(api, admin_token, "gone", "alpha", "admin")
    assert api.delete("/v1/tokens/gone", params={"project": "alpha"}).status_code == 204
    tokens["revoked token"] = revoked
    _mint(api, admin_token, "spare", "alpha", "viewer")  # for the revoke cells

    def submit(project: str) -> dict[str, Any]:
        response = api.post(
            "/v1/training-jobs",
            params={"project": project},
            json=job_spec(source_dir, name=JOB, use_spot_instances=True, max_wait=90000),
        )
        assert response.status_code == 201, response.text
        return dict(response.json())

    alpha_job, beta_job = submit("alpha"), submit("beta")
    _store_model(settings, alpha_job, b"alpha's weights")
    _store_output_data(alpha_job, b"alpha's evaluation")
    tokens["instance token"] = instance_token(settings.signing_key(), alpha_job["id"], "algo-1")
    return World(api, tokens, alpha_job, beta_job)


CALLERS = {
    # caller: (role in alpha, or None if alpha is not theirs)
    "alpha viewer": VIEWER,
    "alpha member": MEMBER,
    "alpha admin": ADMIN,
    "server admin": ADMIN,
}


def _expected(caller: str, route: Route) -> int | None:
    """The refusal ``caller`` gets on ``route``, or None if it is let through."""
    if caller in ("no token", "revoked token"):
        return UNAUTHENTICATED
    if caller == "instance token":
        # An instance reports its own spot notice; nothing else of a user's is its.
        return None if route.label == "interrupt" else FORBIDDEN
    if caller == "beta member":
        # Listing its own project's tokens is a beta admin's, not a member's; the capacity
        # overview is every user's (with other projects' jobs unnamed), as is the list of
        # instance types.
        if route.label in ("capacity", "instance types"):
            return None
        return FORBIDDEN if route.label == "list tokens" else INVISIBLE
    role = CALLERS[caller]
    return None if role >= route.needs else FORBIDDEN


@pytest.mark.parametrize(
    "caller",
    [
        "alpha viewer",
        "alpha member",
        "alpha admin",
        "beta member",
        "server admin",
        "no token",
        "revoked token",
        "instance token",
    ],
)
def test_every_user_route_for_every_caller(world: World, source_dir: Path, caller: str) -> None:
    seen = {}
    for route in _routes(source_dir):
        code = world.call(caller, route)
        expected = _expected(caller, route)
        if expected is None:
            # Let through: whatever the route then says of the job's state.
            assert code not in (401, 403, 404), (caller, route.label, code)
        else:
            assert code == expected, (caller, route.label, code)
        seen[route.label] = code
    assert len(seen) == len(_routes(source_dir))


def test_another_projects_jobs_are_absent_from_lists_and_names_repeat(world: World) -> None:
    def listed(caller: str, **params: str) -> list[tuple[str, str]]:
        response = world.api.get(
            "/v1/training-jobs",
            params=params,
            headers={"Authorization": f"Bearer {world.tokens[caller]}"},
        )
        assert response.status_code == 200, response.text
        return [(item["project"], item["name"]) for item in response.json()["items"]]

    assert listed("alpha viewer") == [("alpha", JOB)]
    assert listed("beta member") == [("beta", JOB)]
    assert listed("beta member", project="alpha") == []  # asking for alpha's shows nothing
    assert sorted(listed("server admin")) == [("alpha", JOB), ("beta", JOB)]
    assert listed("server admin", project="beta") == [("beta", JOB)]
    # The same name in two projects is two jobs; each project sees its own.
    mine = world.api.get(
        f"/v1/training-jobs/{JOB}",
        headers={"Authorization": f"Bearer {world.tokens['beta member']}"},
    )
    assert mine.json()["id"] == world.beta_job["id"] != world.alpha_job["id"]


# A job's environment: four values by names that look secret, one by a name that does not.
SECRET_LOOKING = {
    "OPENAI_API_KEY": "sk-live-1",
    "GITHUB_TOKEN": "ghp-2",
    "db_password": "hunter2",
    "MySecretSalt": "salt-3",
}
PLAIN = {"LEARNING_RATE": "0.1"}


@pytest.mark.parametrize(
    ("caller", "reads_secrets"),
    [
        ("alpha viewer", False),
        ("alpha member", True),
        ("alpha admin", True),
        ("server admin", True),
    ],
)
def test_a_viewer_sees_secret_looking_environment_values_masked(
    world: World, source_dir: Path, caller: str, reads_secrets: bool
) -> None:
    member = {"Authorization": f"Bearer {world.tokens['alpha member']}"}
    environment = {**SECRET_LOOKING, **PLAIN}
    created = world.api.post(
        "/v1/training-jobs",
        params={"project": "alpha"},
        json=job_spec(source_dir, name="with-secrets", environment=environment),
        headers=member,
    )
    assert created.status_code == 201, created.text
    assert created.json()["spec"]["environment"] == environment  # its submitter's answer
    expected = (
        environment if reads_secrets else {**dict.fromkeys(SECRET_LOOKING, REDACTED), **PLAIN}
    )

    headers = {"Authorization": f"Bearer {world.tokens[caller]}"}
    job = "/v1/training-jobs/with-secrets"
    described = world.api.get(job, params={"project": "alpha"}, headers=headers)
    assert described.json()["spec"]["environment"] == expected
    clone = world.api.get(f"{job}/clone", params={"project": "alpha"}, headers=headers)
    assert clone.json()["environment"] == expected
    # A list names jobs, and shows nothing of their environment.
    listed = world.api.get("/v1/training-jobs", params={"project": "alpha"}, headers=headers)
    assert "with-secrets" in listed.text
    assert not any(value in listed.text for value in SECRET_LOOKING.values())
    if not reads_secrets:
        for answer in (described, clone):
            assert not any(value in answer.text for value in SECRET_LOOKING.values())


def test_no_job_is_made_in_a_project_that_does_not_exist(world: World, source_dir: Path) -> None:
    admin = {"Authorization": f"Bearer {world.tokens['server admin']}"}
    member = {"Authorization": f"Bearer {world.tokens['alpha member']}"}
    spec = job_spec(source_dir, name="nowhere-job")
    for params in ({"project": "nowhere"}, {"project": "nowhere", "dry_run": "true"}):
        # A server administrator sees every project, so may be told this one is not there;
        # a project's member gets the same answer for any project not its own.
        for headers in (admin, member):
            response = world.api.post(
                "/v1/training-jobs", params=params, json=spec, headers=headers
            )
            assert response.status_code == 404, response.text
            assert response.json()["detail"] == "no project named 'nowhere'"
    every = world.api.get("/v1/training-jobs", headers=admin).json()["items"]
    assert sorted(item["project"] for item in every) == ["alpha", "beta"]
    # Projects that exist still take the administrator's jobs.
    beta = world.api.post("/v1/training-jobs", params={"project": "beta"}, json=spec, headers=admin)
    assert beta.status_code == 201, beta.text
    assert beta.json()["project"] == "beta"


def test_a_dry_run_does_not_tell_whether_another_project_has_a_name(
    world: World, source_dir: Path
) -> None:
    headers = {"Authorization": f"Bearer {world.tokens['beta member']}"}
    spec = job_spec(source_dir, name="only-in-alpha")
    alpha = {"Authorization": f"Bearer {world.tokens['alpha member']}"}
    assert world.api.post("/v1/training-jobs", json=spec, headers=alpha).status_code == 201
    dry = world.api.post("/v1/training-jobs?dry_run=true", json=spec, headers=headers)
    assert dry.status_code == 200, dry.text  # free in beta, whatever alpha holds
    again = world.api.post("/v1/training-jobs?dry_run=true", json=spec, headers=alpha)
    assert again.status_code == 409


def test_tokens_are_listed_per_project_without_secrets(world: World) -> None:
    def names(caller: str) -> set[tuple[str, str, str]]:
        response = world.api.get(
            "/v1/tokens", headers={"Authorization": f"Bearer {world.tokens[caller]}"}
        )
        assert response.status_code == 200, response.text
        for item in response.json()["items"]:
            assert "token" not in item
            assert "token_hash" not in item
        return {(i["project"], i["name"], i["role"]) for i in response.json()["items"]}

    assert names("alpha admin") == {
        ("alpha", "vera", "viewer"),
        ("alpha", "mo", "member"),
        ("alpha", "ada", "admin"),
        ("alpha", "spare", "viewer"),
    }
    assert ("beta", "mo", "member") in names("server admin")


def test_a_project_admin_mints_only_for_its_own_project(world: World) -> None:
    headers = {"Authorization": f"Bearer {world.tokens['alpha admin']}"}
    own = world.api.post("/v1/tokens", json={"name": "new", "role": "member"}, headers=headers)
    assert own.status_code == 201
    assert own.json()["project"] == "alpha"
    other = world.api.post(
        "/v1/tokens", json={"name": "x", "project": "beta", "role": "admin"}, headers=headers
    )
    assert other.status_code == 404
    taken = world.api.post("/v1/tokens", json={"name": "vera"}, headers=headers)
    assert taken.status_code == 409
    project = world.api.post("/v1/projects", json={"name": "gamma"}, headers=headers)
    assert project.status_code == 403


def test_a_revoked_token_is_refused_at_once(world: World) -> None:
    token = world.tokens["alpha viewer"]
    headers = {"Authorization": f"Bearer {token}"}
    assert world.api.get("/v1/training-jobs", headers=headers).status_code == 200
    revoked = world.api.delete(
        "/v1/tokens/vera",
        headers={"Authorization": f"Bearer {world.tokens['alpha admin']}"},
    )
    assert revoked.status_code == 204
    assert world.api.get("/v1/training-jobs", headers=headers).status_code == 401


def test_a_token_named_like_another_projects_is_still_its_own_projects(
    world: World, source_dir: Path, settings: Settings
) -> None:
    # bob, a beta admin, names a token "ada" as alpha's admin is named: its jobs are
    # beta's, and count against beta's quota, not alpha's.
    bob = _mint(world.api, str(world.tokens["server admin"]), "bob", "beta", "admin")
    alias = world.api.post(
        "/v1/tokens",
        json={"name": "ada", "role": "member"},
        headers={"Authorization": f"Bearer {bob}"},
    )
    assert alias.status_code == 201
    assert alias.json()["project"] == "beta"
    job = world.api.post(
        "/v1/training-jobs",
        json=job_spec(source_dir),
        headers={"Authorization": f"Bearer {alias.json()['token']}"},
    )
    assert job.status_code == 201
    assert job.json()["project"] == "beta"


@pytest.mark.parametrize("credentials", [None, "Bearer ry_not-a-token"])
def test_credentials_are_checked_before_the_body(world: World, credentials: str | None) -> None:
    headers = {"Content-Type": "application/json"}
    if credentials:
        headers["Authorization"] = credentials
    world.api.headers.pop("Authorization", None)
    for body in ("{not json", '{"instance_type": 7}'):
        response = world.api.post("/v1/training-jobs", content=body, headers=headers)
        assert response.status_code == 401, response.text
    response = world.api.post(
        "/v1/training-jobs",
        content="{not json",
        headers={**headers, "Authorization": f"Bearer {world.tokens['alpha member']}"},
    )
    assert response.status_code == 422


def test_a_viewers_submission_is_refused_before_its_body_is_validated(world: World) -> None:
    """The role is decided before the body: a viewer's metric pattern is never compiled,
    nor is a malformed body read further than its JSON."""
    viewer = {"Authorization": f"Bearer {world.tokens['alpha viewer']}"}
    heavy = {"metric_definitions": [{"Name": "m", "Regex": "((((a{100}){100}){100}){100})"}]}
    for body in (heavy, {"instance_type": 7}):
        response = world.api.post("/v1/training-jobs", json=body, headers=viewer)
        assert response.status_code == 403, response.text
        assert "needs the member role" in response.text


def test_the_openapi_document_lists_each_routes_refusals(api: TestClient) -> None:
    document = api.get("/openapi.json").json()
    missing = []
    for path, operations in document["paths"].items():
        if not path.startswith("/v1/") or path == "/v1/session":
            continue
        for method, operation in operations.items():
            codes = set(operation["responses"])
            wanted = {"401"}
            if operation.get("parameters") or operation.get("requestBody"):
                wanted.add("422")
            if "{name}" in path:
                wanted.add("404")
            if method in ("post", "delete"):
                wanted.add("403")
            if not wanted <= codes:
                missing.append((method, path, sorted(wanted - codes)))
    assert missing == []


def test_each_project_has_its_own_part_of_the_artifact_root(
    world: World, settings: Settings, source_dir: Path
) -> None:
    root = settings.artifact_root
    beta = {"Authorization": f"Bearer {world.tokens['beta member']}"}
    assert world.beta_job["spec"]["output_path"] == f"{root}/projects/beta"
    assert world.alpha_job["spec"]["output_path"] == f"{root}/projects/alpha"
    default = world.api.post("/v1/training-jobs", json=job_spec(source_dir))
    assert default.json()["spec"]["output_path"] == root  # where it always was
    cases = [
        (("output_path",), {"output_path": f"{root}/projects/alpha"}),
        (("output_path",), {"output_path": f"{root}/projects/beta/../alpha"}),
        (("checkpoint_s3_uri",), {"checkpoint_s3_uri": f"{root}/projects/alpha/{JOB}/ckpt"}),
        (("inputs", "train", "uri"), {"inputs": {"train": f"{root}/{default.json()['name']}"}}),
        (("output_path",), {"output_path": f"{root}/_sources"}),  # sources are only read
    ]
    for loc, fields in cases:
        refused = world.api.post(
            "/v1/training-jobs", json=job_spec(source_dir, **fields), headers=beta
        )
        assert refused.status_code == 422, (fields, refused.text)
        assert refused.json()["detail"][0]["loc"] == ["body", *loc]
    # The default project reaches everything but the other projects' parts: not through
    # a job named after their folder, whose outputs would land in it, nor through the
    # root itself, which holds them all.
    for fields in (
        {"output_path": f"{root}/projects/beta"},
        {"name": "projects"},
        {"checkpoint_s3_uri": root},
        {"inputs": {"train": root}},
    ):
        refused = world.api.post("/v1/training-jobs", json=job_spec(source_dir, **fields))
        assert refused.status_code == 422, (fields, refused.text)
    mine = world.api.post(
        "/v1/training-jobs",
        json=job_spec(source_dir, output_path=f"{root}/projects/beta/models"),
        headers=beta,
    )
    assert mine.status_code == 201, mine.text


def test_a_model_is_downloaded_only_from_where_the_job_was_told_to_store_it(
    world: World, settings: Settings, tmp_path: Path
) -> None:
    viewer = {"Authorization": f"Bearer {world.tokens['alpha viewer']}"}
    url = f"/v1/training-jobs/{JOB}/model"
    got = world.api.get(url, headers=viewer)
    assert got.status_code == 200, got.text
    assert got.content == b"alpha's weights"
    assert got.headers["content-disposition"] == f'attachment; filename="{JOB}-model.tar.gz"'
    # An instance may report any URI as its model: a file elsewhere is never served.
    secret = tmp_path / "secret.txt"
    secret.write_text("not a model")
    with session_scope(settings.database_url) as session:
        row = session.get(TrainingJob, world.alpha_job["id"])
        assert row is not None
        row.model_artifacts = secret.as_uri()
    refused = world.api.get(url, headers=viewer)
    assert refused.status_code == 404
    assert "not a model" not in refused.text
    # beta's job of the same name has no model: beta's member gets nothing of alpha's.
    beta = {"Authorization": f"Bearer {world.tokens['beta member']}"}
    assert world.api.get(url, headers=beta).status_code == 404


def test_output_data_is_downloaded_from_where_the_runtime_stores_it(world: World) -> None:
    viewer = {"Authorization": f"Bearer {world.tokens['alpha viewer']}"}
    url = f"/v1/training-jobs/{JOB}/output"
    got = world.api.get(url, headers=viewer)
    assert got.status_code == 200, got.text
    assert got.content == b"alpha's evaluation"
    assert got.headers["content-disposition"] == f'attachment; filename="{JOB}-output.tar.gz"'
    # beta's job of the same name stored none: its member gets a 404, nothing of alpha's.
    beta = {"Authorization": f"Bearer {world.tokens['beta member']}"}
    refused = world.api.get(url, headers=beta)
    assert refused.status_code == 404
    assert "no output data stored" in refused.json()["detail"]


def test_a_project_admin_cannot_revoke_the_server_administrators_token(
    api: TestClient, admin_token: str
) -> None:
    ada = _mint(api, admin_token, "ada", "default", "admin")
    refused = api.delete("/v1/tokens/admin", headers={"Authorization": f"Bearer {ada}"})
    assert refused.status_code == 403
    assert api.get("/v1/me").json()["server_admin"] is True  # still in force


@pytest.mark.parametrize(
    ("projects", "opted_in", "accepted"),
    [
        (["default"], False, True),  # one team: its jobs share the machine as before
        (["default", "beta"], False, False),
        (["default", "beta"], True, True),  # the operator trusts every project
    ],
)
def test_instances_that_would_share_the_machine_take_one_projects_jobs_unless_opted_in(
    tmp_path: Path,
    database_url: str,
    source_dir: Path,
    projects: list[str],
    opted_in: bool,
    accepted: bool,
) -> None:
    settings = make_settings(
        tmp_path / "home",
        database_url,
        local_isolation="shared",
        local_shared_projects="many" if opted_in else "one",
    )
    admin = prepare(settings)
    with TestClient(create_app(settings)) as api:
        api.headers["Authorization"] = f"Bearer {admin}"
        for project in projects[1:]:
            assert api.post("/v1/projects", json={"name": project}).status_code == 201
        answer = api.post(
            "/v1/training-jobs", params={"dry_run": "true"}, json=job_spec(source_dir)
        )
    if accepted:
        assert answer.status_code == 200, answer.text
        return
    assert answer.status_code == 422
    (problem,) = answer.json()["detail"]
    assert problem["loc"] == ["body", "backend"]
    assert "RUNYARD_LOCAL_ISOLATION is shared" in problem["msg"]
    assert "2 projects" in problem["msg"]
    assert "RUNYARD_LOCAL_SHARED_PROJECTS=many" in problem["msg"]


def test_a_project_created_through_the_api_counts_for_the_next_job_at_once(
    tmp_path: Path, database_url: str, source_dir: Path
) -> None:
    """The project count is remembered between creates (``service.kit.access_cache``),
    and forgotten once a project is created."""
    settings = make_settings(tmp_path / "home", database_url, local_isolation="shared")
    admin = prepare(settings)
    with TestClient(create_app(settings)) as api:
        api.headers["Authorization"] = f"Bearer {admin}"
        first = api.post("/v1/training-jobs", json=job_spec(source_dir, name="alone"))
        assert first.status_code == 201, first.text
        assert api.post("/v1/projects", json={"name": "beta"}).status_code == 201
        second = api.post("/v1/training-jobs", json=job_spec(source_dir, name="shared"))
    assert second.status_code == 422, second.text
    assert "2 projects" in second.json()["detail"][0]["msg"]
