"""Projects own their data: the places a server administrator grants a project, and what
its jobs may then read, write and delete, checked at submission, in the plan of its
instances, and when its artifacts are removed.

Projects ``alpha`` and ``beta`` each have data of their own beside the server's home;
``default`` is the one-team server as before."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, select, update

from service.grants.models import ProjectGrant
from service.jobs.models import JobWritePlace, TrainingJob
from service.kit.db import session_scope
from service.settings import Settings
from tests.conftest import job_spec


@dataclass(frozen=True)
class Places:
    """Each project's data, outside the server's home but inside its file roots."""

    root: Path

    def __getattr__(self, name: str) -> Path:
        path = self.root / name.replace("_", "-")
        path.mkdir(parents=True, exist_ok=True)
        return path


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _mint(api: TestClient, name: str, project: str, role: str) -> dict[str, str]:
    minted = api.post("/v1/tokens", json={"name": name, "project": project, "role": role})
    assert minted.status_code == 201, minted.text
    return _bearer(minted.json()["token"])


def _grant(api: TestClient, project: str, place: Path | str, access: str = "read-only") -> Any:
    prefix = place.as_uri() if isinstance(place, Path) else place
    return api.post(f"/v1/projects/{project}/grants", json={"prefix": prefix, "access": access})


@pytest.fixture
def places(api: TestClient, tmp_path: Path, source_dir: Path) -> Places:
    """alpha and beta exist, each may read the jobs' code; alpha reads alpha-data and
    writes alpha-out, beta reads beta-data and writes beta-out."""
    found = Places(tmp_path)
    for project in ("alpha", "beta"):
        assert api.post("/v1/projects", json={"name": project}).status_code == 201
        assert _grant(api, project, source_dir).status_code == 201
        assert _grant(api, project, getattr(found, f"{project}_data")).status_code == 201
        out = getattr(found, f"{project}_out")
        assert _grant(api, project, out, "read-write").status_code == 201
    (found.alpha_data / "train.csv").write_text("alpha's data")
    return found


# -- The grant API ------------------------------------------------------------------------


def test_a_server_administrator_grants_changes_lists_and_revokes(
    api: TestClient, places: Places
) -> None:
    shared = places.shared
    created = _grant(api, "beta", shared)
    assert created.status_code == 201, created.text
    assert created.json()["project"] == "beta"
    assert (created.json()["prefix"], created.json()["access"]) == (shared.as_uri(), "read-only")
    changed = _grant(api, "beta", shared, "read-write")
    assert changed.status_code == 200, changed.text
    assert changed.json()["access"] == "read-write"
    assert _grant(api, "beta", "s3://team-bucket/beta/data").status_code == 201
    listed = api.get("/v1/projects/beta/grants").json()["items"]
    assert {(item["prefix"], item["access"]) for item in listed} == {
        (places.beta_data.as_uri(), "read-only"),
        (places.beta_out.as_uri(), "read-write"),
        (shared.as_uri(), "read-write"),
        (Path(str(places.root / "src")).as_uri(), "read-only"),
        ("s3://team-bucket/beta/data", "read-only"),
    }
    revoked = api.delete("/v1/projects/beta/grants", params={"prefix": shared.as_uri()})
    assert revoked.status_code == 204, revoked.text
    again = api.delete("/v1/projects/beta/grants", params={"prefix": shared.as_uri()})
    assert again.status_code == 404
    assert _grant(api, "nowhere", shared).status_code == 404
    # The default project reaches what the server reaches, as before: nothing to grant.
    refused = _grant(api, "default", shared)
    assert refused.status_code == 409
    assert "grants are for the other projects" in refused.json()["detail"]


@pytest.mark.parametrize("role", ["viewer", "member", "admin"])
def test_only_a_server_administrator_changes_a_projects_grants(
    api: TestClient, places: Places, role: str
) -> None:
    """A project's own admin may not widen what its jobs reach; its members and viewers
    may not even list it. The role is decided before the body is looked at."""
    caller = _mint(api, f"ana-{role}", "beta", role)
    path = "/v1/projects/beta/grants"
    for body in ({"prefix": places.shared.as_uri()}, {"prefix": "http://not-a-place"}):
        refused = api.post(path, json=body, headers=caller)
        assert refused.status_code == 403, refused.text
        assert "server administrator" in refused.json()["detail"]
    revoking = api.delete(path, params={"prefix": places.beta_out.as_uri()}, headers=caller)
    assert revoking.status_code == 403
    listed = api.get(path, headers=caller)
    assert listed.status_code == (200 if role == "admin" else 403), listed.text
    # Another project's grants do not exist for it.
    assert api.get("/v1/projects/alpha/grants", headers=caller).status_code == 404
    assert (
        api.post(
            "/v1/projects/alpha/grants", json={"prefix": places.shared.as_uri()}, headers=caller
        ).status_code
        == 404
    )
    assert places.shared.as_uri() not in json.dumps(api.get(path).json())


@pytest.mark.parametrize(
    "prefix",
    [
        "http://example.com/data",
        "data/relative",
        "file://relative/path",
        "file:///data/../etc",
        "file:///data/",
        "file:///data//x",
        "file:///",
        "file://localhost/data",
        "file:///data/a b",  # written unescaped
        "s3://",
        "s3://Bucket_Name/x",
        "s3://bucket-1/a//b",
        "s3://bucket-1/a/",
        "s3://bucket-1/../x",
        "s3://bucket-1/a/*",
        "s3://bucket-1/a?b",
        "s3://" + "b" * 64,
        "s3://bucket-1/" + "k" * 1020,
        "",
    ],
)
def test_a_prefix_outside_the_allow_list_is_refused_naming_it(
    api: TestClient, places: Places, prefix: str
) -> None:
    refused = _grant(api, "beta", prefix)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["loc"] == ["body", "prefix"]


def test_a_grant_names_its_access_and_nothing_else(api: TestClient, places: Places) -> None:
    path = "/v1/projects/beta/grants"
    wrong = api.post(path, json={"prefix": places.shared.as_uri(), "access": "write"})
    assert wrong.status_code == 422
    assert wrong.json()["detail"][0]["loc"] == ["body", "access"]
    extra = api.post(path, json={"prefix": places.shared.as_uri(), "recursive": True})
    assert extra.status_code == 422


def test_a_place_the_server_does_not_hand_out_is_refused_naming_the_prefix(
    api: TestClient, settings: Settings, places: Places, tmp_path: Path
) -> None:
    artifacts = settings.home / "artifacts"
    cases = [
        (Path("/etc/runyard-test"), "read-only", "RUNYARD_FILE_ROOTS"),
        (settings.home / "logs", "read-only", "server's own directory"),
        (tmp_path, "read-only", "holds the whole artifact root"),
        (artifacts / "projects" / "alpha", "read-write", "own area only"),
    ]
    for path, access, why in cases:
        refused = _grant(api, "beta", path, access)
        assert refused.status_code == 422, (path, refused.text)
        [problem] = refused.json()["detail"]
        assert problem["loc"] == ["body", "prefix"]
        assert why in problem["msg"], problem
    # Sharing alpha's models with beta, to read: a place inside the artifact root.
    shared_models = artifacts / "projects" / "alpha" / "models"
    assert _grant(api, "beta", shared_models).status_code == 201


def test_two_projects_are_never_granted_one_place_to_write(api: TestClient, places: Places) -> None:
    inside_alphas = places.alpha_out / "sub"
    for place in (places.alpha_out, inside_alphas):
        refused = _grant(api, "beta", place, "read-write")
        assert refused.status_code == 409, refused.text
        assert "a place is written by one project's jobs only" in refused.json()["detail"]
    # Above alpha's: shares it as well.
    assert _grant(api, "beta", places.root / "shared", "read-write").status_code == 201
    assert _grant(api, "alpha", places.root / "shared" / "x", "read-write").status_code == 409
    # Reading what another project writes is sharing, not a conflict.
    assert _grant(api, "beta", places.alpha_out).status_code == 201
    assert _grant(api, "alpha", "s3://team-bucket/alpha", "read-write").status_code == 201
    assert _grant(api, "beta", "s3://team-bucket", "read-write").status_code == 409
    assert _grant(api, "beta", "s3://team-bucket/alphabet", "read-write").status_code == 201


def test_a_place_another_projects_job_wrote_is_not_granted_to_write(
    api: TestClient, places: Places, source_dir: Path
) -> None:
    written = places.root / "team-out"
    job = api.post("/v1/training-jobs", json=job_spec(source_dir, output_path=written.as_uri()))
    assert job.status_code == 201, job.text
    refused = _grant(api, "beta", written, "read-write")
    assert refused.status_code == 409
    assert "jobs of project default write or wrote" in refused.json()["detail"]
    assert _grant(api, "beta", written).status_code == 201  # to read


# -- What a job may name ------------------------------------------------------------------


def _refusal(answer: Any) -> tuple[list[str], str]:
    assert answer.status_code == 422, answer.text
    [problem] = answer.json()["detail"]
    return problem["loc"], problem["msg"]


def test_a_job_uses_only_its_projects_places(
    api: TestClient, places: Places, source_dir: Path
) -> None:
    beta = _mint(api, "bo", "beta", "member")

    def submit(**fields: Any) -> Any:
        spec = job_spec(source_dir, name="train", **fields)
        return api.post("/v1/training-jobs", json=spec, headers=beta)

    theirs = {"inputs": {"train": places.alpha_data.as_uri()}}
    loc, msg = _refusal(submit(**theirs))
    assert loc == ["body", "inputs", "train", "uri"]
    assert "outside what project 'beta' may use" in msg
    loc, msg = _refusal(submit(output_path=places.alpha_out.as_uri()))
    assert loc == ["body", "output_path"]
    assert "project 'beta'" in msg
    loc, _ = _refusal(submit(checkpoint_s3_uri=(places.alpha_out / "ckpt").as_uri()))
    assert loc == ["body", "checkpoint_s3_uri"]
    # TensorBoard data is written below <uri>/<job>/tensorboard-output: in alpha's place.
    loc, _ = _refusal(submit(tensorboard_s3_output_path=places.alpha_out.as_uri()))
    assert loc == ["body", "tensorboard_s3_output_path"]
    loc, msg = _refusal(submit(output_path=places.beta_data.as_uri()))
    assert (loc, "may only read there" in msg) == (["body", "output_path"], True)
    loc, _ = _refusal(submit(source_uri=places.alpha_data.as_uri()))
    assert loc == ["body", "source_uri"]
    # A link inside its own place that leads to another project's is where it leads.
    (places.beta_data / "borrowed").symlink_to(places.alpha_data)
    loc, _ = _refusal(submit(inputs={"train": (places.beta_data / "borrowed").as_uri()}))
    assert loc == ["body", "inputs", "train", "uri"]
    for s3 in (
        {"inputs": {"train": "s3://shared-ml/alpha/data/"}},
        {"output_path": "s3://shared-ml/alpha/models"},
    ):
        loc, msg = _refusal(submit(**s3))
        assert loc[1] in s3, loc
        assert "project 'beta'" in msg
    accepted = submit(
        inputs={"train": places.beta_data.as_uri()}, output_path=places.beta_out.as_uri()
    )
    assert accepted.status_code == 201, accepted.text
    # Without an output path: its own area of the artifact root.
    mine = api.post("/v1/training-jobs", json=job_spec(source_dir, name="own"), headers=beta)
    assert mine.status_code == 201, mine.text
    assert mine.json()["spec"]["output_path"].endswith("/artifacts/projects/beta")


def test_a_grant_changed_through_the_api_is_in_force_for_the_next_job_at_once(
    api: TestClient, places: Places, source_dir: Path
) -> None:
    """A project's access is remembered between creates (``service.kit.access_cache``):
    a grant or a revocation through the API forgets it once committed."""
    beta = _mint(api, "bo", "beta", "member")
    spec = job_spec(source_dir, inputs={"train": places.shared_data.as_uri()})
    loc, _ = _refusal(api.post("/v1/training-jobs", json=spec, headers=beta))
    assert loc == ["body", "inputs", "train", "uri"]
    assert _grant(api, "beta", places.shared_data).status_code == 201
    accepted = api.post("/v1/training-jobs", json=spec, headers=beta)
    assert accepted.status_code == 201, accepted.text
    revoked = api.delete("/v1/projects/beta/grants", params={"prefix": places.shared_data.as_uri()})
    assert revoked.status_code == 204
    loc, _ = _refusal(api.post("/v1/training-jobs", json=spec, headers=beta))
    assert loc == ["body", "inputs", "train", "uri"]


def test_a_grant_revoked_elsewhere_is_seen_within_the_token_cache_time(
    api: TestClient, settings: Settings, places: Places, source_dir: Path
) -> None:
    """Another API replica's revocation (here: the row deleted in the database, which no
    forgetting follows) is seen once ``token_cache_seconds`` have passed."""
    beta = _mint(api, "bo", "beta", "member")
    spec = job_spec(source_dir, inputs={"train": places.beta_data.as_uri()})
    accepted = api.post("/v1/training-jobs", json=spec, headers=beta)
    assert accepted.status_code == 201, accepted.text
    with session_scope(settings.database_url) as session:
        session.execute(
            delete(ProjectGrant).where(
                ProjectGrant.project == "beta", ProjectGrant.prefix == places.beta_data.as_uri()
            )
        )
    time.sleep(settings.token_cache_seconds + 0.1)
    loc, _ = _refusal(api.post("/v1/training-jobs", json=spec, headers=beta))
    assert loc == ["body", "inputs", "train", "uri"]


def test_the_default_project_reaches_what_it_did_but_no_other_projects_writing_place(
    api: TestClient, places: Places, source_dir: Path
) -> None:
    """A one-team server changes nothing; a default job just may not write where a
    server administrator granted another project to write."""
    reads = job_spec(source_dir, inputs={"train": places.alpha_data.as_uri()})
    assert api.post("/v1/training-jobs", json=reads).status_code == 201
    for fields in (
        {"output_path": places.beta_out.as_uri()},
        {"output_path": places.root.as_uri(), "name": "beta-out"},  # its folder would be it
        {"checkpoint_s3_uri": (places.alpha_out / "ckpt").as_uri()},
        {"tensorboard_s3_output_path": places.beta_out.as_uri()},
    ):
        loc, msg = _refusal(api.post("/v1/training-jobs", json=job_spec(source_dir, **fields)))
        assert loc[1] in fields, (loc, fields)
        assert "granted another project this place to write" in msg, (fields, msg)


def test_names_repeat_across_projects_but_the_places_they_write_do_not(
    api: TestClient, places: Places, source_dir: Path
) -> None:
    alpha, beta = _mint(api, "al", "alpha", "member"), _mint(api, "bo", "beta", "member")
    spec = job_spec(source_dir, name="train", output_path=places.alpha_out.as_uri())
    assert api.post("/v1/training-jobs", json=spec, headers=alpha).status_code == 201
    loc, _ = _refusal(api.post("/v1/training-jobs", json=spec, headers=beta))
    assert loc == ["body", "output_path"]
    own = {**spec, "output_path": places.beta_out.as_uri()}
    assert api.post("/v1/training-jobs", json=own, headers=beta).status_code == 201
    # alpha's place handed to beta to write: refused while alpha's job's outputs are there.
    revoked = api.delete("/v1/projects/alpha/grants", params={"prefix": places.alpha_out.as_uri()})
    assert revoked.status_code == 204
    handed = _grant(api, "beta", places.alpha_out, "read-write")
    assert handed.status_code == 409
    assert "jobs of project alpha write or wrote" in handed.json()["detail"]


def test_a_jobs_instances_are_held_to_its_projects_places(
    api: TestClient, settings: Settings, places: Places, source_dir: Path
) -> None:
    beta = _mint(api, "bo", "beta", "member")
    planned = api.post(
        "/v1/training-jobs",
        params={"dry_run": "true"},
        json=job_spec(source_dir, output_path=places.beta_out.as_uri()),
        headers=beta,
    )
    assert planned.status_code == 200, planned.text
    files = planned.json()["plan"]["instances"][0]["files"]
    config = json.loads(files["input/config/runyard.json"])
    artifacts = settings.home / "artifacts"
    assert config["confine_files"] is True
    assert sorted(config["file_roots"]) == sorted(
        [str(artifacts / "projects" / "beta"), str(places.beta_out)]
    )
    assert sorted(config["read_only_roots"]) == sorted(
        [str(artifacts / "_sources"), str(source_dir), str(places.beta_data)]
    )
    # The default project's: the server's file roots, as before.
    default = api.post(
        "/v1/training-jobs", params={"dry_run": "true"}, json=job_spec(source_dir)
    ).json()
    config = json.loads(default["plan"]["instances"][0]["files"]["input/config/runyard.json"])
    assert config["file_roots"] == [str(root) for root in settings.file_roots]
    assert (config["read_only_roots"], config["confine_files"]) == ([], False)


# -- What deleting a job removes ----------------------------------------------------------


def _ended(api: TestClient, headers: dict[str, str], spec: dict[str, Any]) -> dict[str, Any]:
    created = api.post("/v1/training-jobs", json=spec, headers=headers)
    assert created.status_code == 201, created.text
    stopped = api.post(f"/v1/training-jobs/{spec['name']}/stop", headers=headers)
    assert stopped.json()["status"] == "Stopped", stopped.text
    return dict(created.json())


def _model(folder: Path, text: str) -> Path:
    model = folder / "output" / "model.tar.gz"
    model.parent.mkdir(parents=True, exist_ok=True)
    model.write_text(text)
    return model


def test_removing_a_jobs_artifacts_removes_only_its_own(
    api: TestClient, settings: Settings, places: Places, source_dir: Path
) -> None:
    alpha, beta = _mint(api, "al", "alpha", "member"), _mint(api, "bo", "beta", "member")
    spec = job_spec(source_dir, name="train", output_path=places.alpha_out.as_uri())
    _ended(api, alpha, spec)
    alphas = _model(places.alpha_out / "train", "alpha's model")
    # A job of beta's from before places were checked, that named alpha's output path
    # and alpha's job's name: its folder is alpha's job's too.
    old = _ended(api, beta, {**spec, "output_path": places.beta_out.as_uri()})
    with session_scope(settings.database_url) as session:
        row = session.get(TrainingJob, old["id"])
        assert row is not None
        row.spec = {**row.spec, "output_path": places.alpha_out.as_uri()}
        session.execute(
            update(JobWritePlace)
            .where(JobWritePlace.job_id == old["id"])
            .values(key="file://" + str(places.alpha_out / "train"))
        )
    refused = api.delete("/v1/training-jobs/train", params={"artifacts": "remove"}, headers=beta)
    assert refused.status_code == 409, refused.text
    assert "another project" in refused.json()["detail"]
    assert alphas.read_text() == "alpha's model"
    kept = api.delete("/v1/training-jobs/train", headers=beta)
    assert kept.status_code == 200, kept.text
    # The place stays recorded as beta's: nobody of alpha's may remove it either now.
    with session_scope(settings.database_url, readonly=True) as session:
        left = session.scalars(select(JobWritePlace.project).where(JobWritePlace.job_id.is_(None)))
        assert set(left) == {"beta"}

    # beta's own job: its folder goes, and only its folder; a folder replaced by a link
    # leads nowhere (to another project's place: refused; elsewhere: nothing removed).
    _ended(api, beta, {**spec, "name": "mine", "output_path": places.beta_out.as_uri()})
    _model(places.beta_out / "mine", "beta's model")
    precious = _model(places.root / "precious", "nobody's job's")
    for name, target in (("into-alpha", places.alpha_out / "train"), ("away", precious)):
        _ended(api, beta, {**spec, "name": name, "output_path": places.beta_out.as_uri()})
        (places.beta_out / name).symlink_to(target.parent.parent if name == "away" else target)
    answers = {
        name: api.delete(f"/v1/training-jobs/{name}", params={"artifacts": "remove"}, headers=beta)
        for name in ("mine", "into-alpha", "away")
    }
    assert answers["mine"].json()["removed_objects"] == 1, answers["mine"].text
    assert answers["into-alpha"].status_code == 409, answers["into-alpha"].text
    assert answers["away"].json()["removed_objects"] == 0, answers["away"].text
    assert not (places.beta_out / "mine").exists()
    assert alphas.read_text() == "alpha's model"
    assert precious.read_text() == "nobody's job's"
    # Another project's job does not exist for beta.
    assert (
        api.delete(
            "/v1/training-jobs/train",
            params={"artifacts": "remove", "project": "alpha"},
            headers=beta,
        ).status_code
        == 404
    )
