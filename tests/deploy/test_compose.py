"""docker-compose.yml, checked without Docker: against the Compose Specification's JSON
Schema (as the check-jsonschema package ships it) and against what Runyard expects of it."""

from __future__ import annotations

import json
import re
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from service.settings import Settings
from tests.deploy.support import REPO, SERVICE_COMMANDS, assert_health_route, check_runyard_args

COMPOSE = REPO / "docker-compose.yml"
SCHEMA = files("check_jsonschema") / "builtin_schemas" / "vendor" / "compose-spec.json"
RUNYARD_IMAGE = "runyard/service:"
# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?message}, ${NAME?message}
INTERPOLATION = re.compile(
    r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
)
SECRET_NAME = re.compile(r"SECRET|PASSWORD|TOKEN|_KEY$")


class MissingVariable(Exception):
    pass


def _interpolate(value: Any, environ: dict[str, str]) -> Any:
    """Compose's variable substitution, enough of it for this file."""
    if isinstance(value, dict):
        return {key: _interpolate(item, environ) for key, item in value.items()}
    if isinstance(value, list):
        return [_interpolate(item, environ) for item in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"]
        current = environ.get(name)
        unset = current is None or (current == "" and op is not None and op.startswith(":"))
        if op and op.endswith("?") and unset:
            raise MissingVariable(f"required variable {name} is missing a value: {arg}")
        if op and op.endswith("-") and unset:
            return arg
        return current or ""

    return INTERPOLATION.sub(substitute, value.replace("$$", "\0")).replace("\0", "$")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def _runyard_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in compose["services"].items()
        if str(service.get("image", "")).startswith(RUNYARD_IMAGE)
    }


def test_valid_against_the_compose_specification(compose: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
    # The schema does catch mistakes: an unknown service key is one.
    broken = {**compose, "services": {**compose["services"], "api": {"imagee": "x"}}}
    assert not validator.is_valid(broken)


def test_depends_on_targets_exist_and_healthy_ones_have_healthchecks(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    for name, service in services.items():
        depends_on = service.get("depends_on", {})
        assert isinstance(depends_on, dict), f"{name}: depends_on needs conditions"
        for target, spec in depends_on.items():
            assert target in services, f"{name} depends on unknown service {target}"
            condition = spec["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in services[target], f"{target} has no healthcheck"
            if condition == "service_completed_successfully":
                assert services[target].get("restart") == "no", f"{target} must be one-shot"


def test_the_runyard_parts_and_their_order(compose: dict[str, Any]) -> None:
    parts = _runyard_services(compose)
    commands = {name: check_runyard_args(service["command"]) for name, service in parts.items()}
    assert sorted(commands.values()) == sorted(SERVICE_COMMANDS)
    migrate = next(name for name, command in commands.items() if command == "migrate")
    for name, service in parts.items():
        if name == migrate:
            continue
        depends_on = service["depends_on"]
        assert depends_on[migrate]["condition"] == "service_completed_successfully"
    api = compose["services"]["api"]
    assert commands["api"] == "api"
    assert {
        target: spec["condition"] for target, spec in api["depends_on"].items() if target != migrate
    } == {"postgres": "service_healthy", "redis": "service_healthy"}


def test_every_runyard_part_uses_one_image(compose: dict[str, Any]) -> None:
    parts = _runyard_services(compose)
    assert {service["image"] for service in parts.values()} == {"runyard/service:0.1.0"}
    for service in parts.values():
        assert service["build"]["dockerfile"] == "service/Dockerfile"
        assert (REPO / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
        # The worker runs jobs itself (local backend), so the image needs torch.
        assert service["build"]["args"]["TORCH_VERSION"]


def test_api_is_published_on_8642_with_a_healthcheck_on_the_health_route(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    api = compose["services"]["api"]
    assert api["ports"] == ["127.0.0.1:8642:8642"]
    command = api["command"]
    assert command[command.index("--port") + 1] == "8642"
    assert command[command.index("--host") + 1] == "0.0.0.0"
    probe = " ".join(api["healthcheck"]["test"])
    url = re.search(r"http://127\.0\.0\.1:8642(/[a-z]+)", probe)
    assert url, probe
    assert_health_route(url[1], tmp_path)


def test_backing_services_are_pinned_and_checked(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("postgres", "redis"):
        image = services[name]["image"]
        assert re.fullmatch(rf"{name}:\d+\.\d+(\.\d+)?(-[a-z0-9]+)?", image), image
    assert services["postgres"]["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    # Only the API is published; the databases are reachable by the containers alone.
    assert [name for name, s in services.items() if "ports" in s] == ["api"]


def test_no_secret_is_written_in_the_file(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for key, value in service.get("environment", {}).items():
            if SECRET_NAME.search(key):
                assert re.fullmatch(rf"\$\{{{key}:\?[^}}]+\}}", str(value)), (
                    f"{name}: {key} must come from the environment, required: ${{{key}:?...}}"
                )
            if isinstance(value, str) and "://" in value:
                assert not re.search(r"://[^/@]*:[^/@]*@", value), f"{name}: {key} has a password"
    # Postgres takes no password at all (it is not published); none is written here.
    assert "POSTGRES_PASSWORD" not in compose["services"]["postgres"]["environment"]


def test_compose_refuses_to_start_without_a_secret_key(compose: dict[str, Any]) -> None:
    with pytest.raises(MissingVariable, match="RUNYARD_SECRET_KEY"):
        _interpolate(compose, {})
    with pytest.raises(MissingVariable, match="RUNYARD_SECRET_KEY"):
        _interpolate(compose, {"RUNYARD_SECRET_KEY": ""})


def test_the_environment_is_valid_runyard_settings(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "f" * 64
    resolved = _interpolate(compose, {"RUNYARD_SECRET_KEY": key})
    homes = set()
    for name, service in _runyard_services(resolved).items():
        environment = service["environment"]
        for variable, value in environment.items():
            monkeypatch.setenv(variable, str(value))
        settings = Settings()
        assert settings.environment == "production"
        assert settings.secret_key is not None
        assert settings.secret_key.get_secret_value() == key
        assert settings.database_url.startswith("postgresql://runyard@postgres:5432/")
        assert settings.broker_url.startswith("redis://redis:")
        # How job processes (in the worker's container) reach the API: by its service name.
        assert settings.public_url == "http://api:8642"
        assert set(settings.backends.values()) == {"local"}
        # RUNYARD_HOME (and the artifact root inside it) is the one shared named volume.
        mounts = [volume.split(":") for volume in service["volumes"]]
        assert [str(settings.home)] == [target for _source, target in mounts], name
        assert settings.artifact_root == (settings.home / "artifacts").as_uri()
        homes.add(tuple(source for source, _target in mounts))
        for variable in environment:
            monkeypatch.delenv(variable)
    assert len(homes) == 1
    (volume,) = homes.pop()
    assert volume in resolved["volumes"]
