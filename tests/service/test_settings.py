from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from service.settings import Settings


def test_embedded_defaults_live_in_home(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    assert settings.database_url == f"sqlite:///{tmp_path / 'runyard.db'}"
    assert settings.broker_url == f"sqla+sqlite:///{tmp_path / 'broker.db'}"
    assert settings.artifact_root == (tmp_path / "artifacts").as_uri()
    assert settings.backends == {"local": "local", "local_gpu": "local"}


def test_environment_variables_configure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNYARD_HOME", str(tmp_path))
    monkeypatch.setenv("RUNYARD_DATABASE_URL", "postgresql://db/runyard")
    monkeypatch.setenv("RUNYARD_BACKENDS", "local=local, ml.m5.xlarge=local")
    monkeypatch.setenv("RUNYARD_PUBLIC_URL", "http://runyard.internal:8642/")
    settings = Settings()
    assert settings.home == tmp_path
    assert settings.database_url == "postgresql://db/runyard"
    assert settings.backends == {"local": "local", "ml.m5.xlarge": "local"}
    assert settings.public_url == "http://runyard.internal:8642"
    monkeypatch.setenv("RUNYARD_BACKENDS", '{"local_gpu": "local"}')
    assert Settings().backends == {"local_gpu": "local"}


def test_signing_key_is_created_once_and_private(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    key = settings.signing_key()
    assert Settings(home=tmp_path).signing_key() == key
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600


def test_placeholder_secret_is_refused_outside_development(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="placeholder"):
        Settings(home=tmp_path, secret_key="changeme", environment="production")
    assert Settings(home=tmp_path, secret_key="changeme").signing_key() == b"changeme"


def test_backend_settings_come_as_json_or_one_variable_per_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNYARD_HOME", str(tmp_path))
    monkeypatch.setenv(
        "RUNYARD_KUBERNETES",
        '{"namespace": "training", "node_selector": {"pool": "gpu"}, "gang_scheduler": "kueue"}',
    )
    kubernetes = Settings().kubernetes
    assert kubernetes.namespace == "training"
    assert kubernetes.node_selector == {"pool": "gpu"}
    assert kubernetes.gang_scheduler == "kueue"
    monkeypatch.delenv("RUNYARD_KUBERNETES")
    monkeypatch.setenv("RUNYARD_KUBERNETES__NAMESPACE", "team-a")
    monkeypatch.setenv("RUNYARD_KUBERNETES__SCHEDULE_TIMEOUT_SECONDS", "120")
    kubernetes = Settings().kubernetes
    assert (kubernetes.namespace, kubernetes.schedule_timeout_seconds) == ("team-a", 120)


@pytest.mark.parametrize(
    ("variable", "value", "field"),
    [
        ("RUNYARD_KUBERNETES__NAMESPACE", "Not_A_Label", "namespace"),
        ("RUNYARD_KUBERNETES__ON_UNSCHEDULABLE", "retry", "on_unschedulable"),
        ("RUNYARD_KUBERNETES", '{"namespaec": "typo"}', "namespaec"),
    ],
)
def test_bad_backend_settings_name_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, field: str
) -> None:
    monkeypatch.setenv("RUNYARD_HOME", str(tmp_path))
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError, match=field):
        Settings()


def test_capacity_and_quotas_refuse_unknown_instance_types(tmp_path: Path) -> None:
    # A misspelt type would otherwise mean "no limit" without a word.
    with pytest.raises(
        ValidationError, match=r"RUNYARD_CAPACITY: unknown instance type\(s\) ml.p4d"
    ):
        Settings(home=tmp_path, capacity={"ml.p4d": 8})
    with pytest.raises(ValidationError, match=r"RUNYARD_PROJECT_QUOTAS\['team-a'\]: unknown"):
        Settings(home=tmp_path, project_quotas={"team-a": {"*": 4, "gpu": 1}})
    with pytest.raises(ValidationError, match=r"RUNYARD_TENANT_QUOTAS\['team-a'\]: unknown"):
        Settings(home=tmp_path, tenant_quotas={"team-a": {"*": 4, "gpu": 1}})
    quotas = {"team-a": {"*": 4, "ml.p4d.24xlarge": 1}}
    assert Settings(home=tmp_path, project_quotas=quotas).quotas_of("team-a") == quotas["team-a"]


def test_deprecated_tenant_quotas_apply_to_the_project_of_that_name(tmp_path: Path) -> None:
    settings = Settings(
        home=tmp_path,
        tenant_quotas={"team-a": {"*": 4}, "team-b": {"*": 2}},
        project_quotas={"team-b": {"*": 1}},
    )
    assert settings.quotas_of("team-a") == {"*": 4}
    assert settings.quotas_of("team-b") == {"*": 1}  # the project's own entry wins
    assert settings.quotas_of("team-c") == {}


@pytest.mark.parametrize("prefix", ["runyard", "/runyard/", "/a b", "/x?y", "/"])
def test_a_root_path_is_a_path_prefix_or_nothing(tmp_path: Path, prefix: str) -> None:
    with pytest.raises(ValidationError, match="root_path"):
        Settings(home=tmp_path, root_path=prefix)
    assert Settings(home=tmp_path, root_path="/teams/runyard").root_path == "/teams/runyard"


def test_the_local_network_pool_is_an_ipv4_network_of_16_to_22_bits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert Settings(home=tmp_path).local.network_pool == "10.213.0.0/16"
    monkeypatch.setenv("RUNYARD_LOCAL_NETWORK_POOL", " 172.30.8.0/22 ")
    assert Settings(home=tmp_path).local.network_pool == "172.30.8.0/22"
    for wrong, why in [
        ("10.213.0.0/24", "is a /24; the pool is a /16 to a /22"),
        ("10.0.0.0/8", "is a /8"),
        ("10.213.1.0/16", "has host bits set"),
        ("fd00::/48", "not an IPv4 network"),
        ("pool", "not an IPv4 network"),
        ("169.254.0.0/16", "not for hosts' networks"),
    ]:
        monkeypatch.setenv("RUNYARD_LOCAL_NETWORK_POOL", wrong)
        with pytest.raises(ValidationError, match=f"RUNYARD_LOCAL_NETWORK_POOL: .*{why}"):
            Settings(home=tmp_path)


@pytest.mark.parametrize(
    ("variable", "value", "field", "read"),
    [
        ("RUNYARD_LOCAL_ISOLATION", "shared", "isolation", "shared"),
        ("RUNYARD_LOCAL_NETWORK_POOL", "172.30.8.0/22", "network_pool", "172.30.8.0/22"),
        ("RUNYARD_LOCAL_SHARED_PROJECTS", "many", "shared_projects", "many"),
        ("RUNYARD_PEER_TIMEOUT_SECONDS", "5", "peer_timeout_seconds", 5.0),
        ("RUNYARD_CONTAINER_ENGINE", "podman --runtime runc", "container_engine", None),
        ("RUNYARD_IMAGE_STORE", "/srv/images", "image_store", Path("/srv/images")),
        ("RUNYARD_IMAGE_FALLBACK", "refuse", "image_fallback", "refuse"),
    ],
)
def test_the_local_backends_settings_are_still_read_under_their_former_names(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
    field: str,
    read: object,
) -> None:
    """They were the server's own (RUNYARD_LOCAL_ISOLATION); now they are the local
    backend's (RUNYARD_LOCAL__ISOLATION), and the former names still say the same."""
    expected = value if read is None else read
    default = getattr(Settings(home=tmp_path).local, field)
    assert default != expected
    monkeypatch.setenv(variable, value)
    assert getattr(Settings(home=tmp_path).local, field) == expected
    # A keyword of the former name too, as code and tests wrote them.
    monkeypatch.delenv(variable)
    former = variable.removeprefix("RUNYARD_").lower()
    assert getattr(Settings(home=tmp_path, **{former: value}).local, field) == expected


def test_a_local_setting_under_its_new_name_wins_over_its_former_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNYARD_LOCAL_ISOLATION", "shared")
    monkeypatch.setenv("RUNYARD_LOCAL_SHARED_PROJECTS", "many")
    monkeypatch.setenv("RUNYARD_LOCAL__ISOLATION", "namespaces")
    local = Settings(home=tmp_path).local
    assert (local.isolation, local.shared_projects) == ("namespaces", "many")
    monkeypatch.delenv("RUNYARD_LOCAL__ISOLATION")
    monkeypatch.setenv("RUNYARD_LOCAL", '{"isolation": "auto"}')
    local = Settings(home=tmp_path).local
    assert (local.isolation, local.shared_projects) == ("auto", "many")
    # A former name's bad value names the setting as the new one does.
    monkeypatch.setenv("RUNYARD_LOCAL_NETWORK_POOL", "10.0.0.0/8")
    with pytest.raises(ValidationError, match=r"local.network_pool[\s\S]*is a /8"):
        Settings(home=tmp_path)
