"""A backend brings its own settings: its package declares their model in its record, and
the server's settings, their page and their variables follow from the registry. A backend
the tests add (``batch_backend``) shows it, read from the environment as any other."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grimp
import pytest
from pydantic import ValidationError

from provisioning import kubernetes, registry
from provisioning.kubernetes.client import shared_client
from provisioning.plugin import BackendPlugin
from service import settings_docs
from service.settings import CoreSettings, Settings, settings_class
from tests.provisioning import batch_backend
from tests.provisioning.batch_backend import BatchBackend, BatchSettings

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> type[CoreSettings]:
    """The batch backend registered (for this test only), and the server's settings
    composed of the registry as it then is."""
    monkeypatch.setattr(registry, "PLUGINS", dict(registry.PLUGINS))
    registry.register(batch_backend.PLUGIN)
    return settings_class(registry.PLUGINS.values())


def test_a_registered_backend_gets_its_settings_from_the_environment(
    registered: type[CoreSettings], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert registered(home=tmp_path).backend_settings("batch") == BatchSettings()
    monkeypatch.setenv("RUNYARD_BATCH__PARTITION", "gpu")
    settings = registered(home=tmp_path)
    assert settings.backend_settings("batch") == BatchSettings(partition="gpu")
    backend = registry.build("batch", settings)
    assert isinstance(backend, BatchBackend)
    assert backend.partition == "gpu"
    # As one JSON object, as every backend's settings may be written.
    monkeypatch.delenv("RUNYARD_BATCH__PARTITION")
    monkeypatch.setenv("RUNYARD_BATCH", '{"partition": "long"}')
    built = registry.build("batch", registered(home=tmp_path))
    assert isinstance(built, BatchBackend)
    assert built.partition == "long"
    # A mistake names the field, as for the backends Runyard ships.
    monkeypatch.setenv("RUNYARD_BATCH", '{"partitoin": "long"}')
    with pytest.raises(ValidationError, match=r"batch\.partitoin"):
        registered(home=tmp_path)


def test_its_settings_are_on_the_configuration_page(registered: type[CoreSettings]) -> None:
    page = settings_docs.page(registered)
    assert "## The Batch backend: `RUNYARD_BATCH`" in page
    assert "| `RUNYARD_BATCH__PARTITION` | string | `default` | The batch system's" in page
    assert "RUNYARD_BATCH__PARTITION" in settings_docs.variables(registered)
    # The server's page of the backends it ships has none of it.
    assert "RUNYARD_BATCH" not in settings_docs.page()


def test_the_backends_setting_names_the_registered_backends(
    registered: type[CoreSettings], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    described = registered.model_fields["backends"].description or ""
    assert "one of `local`, `kubernetes`, `ec2`, `batch`" in described
    assert "`batch`" not in (Settings.model_fields["backends"].description or "")
    # Still read as RUNYARD_BACKENDS is: `type=backend,...`, not JSON alone.
    monkeypatch.setenv("RUNYARD_BACKENDS", "local=local,local_gpu=batch")
    assert registered(home=tmp_path).backends == {"local": "local", "local_gpu": "batch"}


_SERVER = """
import sys

from provisioning import registry
from tests.provisioning import batch_backend

registry.register(batch_backend.PLUGIN)  # the one line, before the settings are composed

from service.settings import Settings

print(registry.build("batch", Settings(home=sys.argv[1])).partition)
"""


def test_the_servers_own_settings_take_a_backend_registered_before_them(
    tmp_path: Path,
) -> None:
    # A process of its own: in this one the server's settings were composed long ago.
    environ = {name: value for name, value in os.environ.items() if name != "RUNYARD_BATCH"}
    done = subprocess.run(
        [sys.executable, "-c", _SERVER, str(tmp_path / "home")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=REPO,
        env={**environ, "RUNYARD_BATCH__PARTITION": "gpu"},
    )
    assert done.stdout.strip().splitlines()[-1] == "gpu"


@pytest.mark.parametrize("name", ["home", "not-a-name"])
def test_a_backend_whose_name_cannot_name_its_settings_is_refused(name: str) -> None:
    plugin = BackendPlugin(
        name=name,
        instance_types=batch_backend.PLUGIN.instance_types,
        build=batch_backend.PLUGIN.build,
        teardown_budget=batch_backend.PLUGIN.teardown_budget,
        settings_model=BatchSettings,
    )
    with pytest.raises(ValueError, match=f"backend {name!r}: its name cannot name"):
        settings_class([plugin])


def test_a_name_is_registered_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "PLUGINS", dict(registry.PLUGINS))
    with pytest.raises(ValueError, match="'local' is registered already"):
        registry.register(registry.PLUGINS["local"])


def test_no_module_outside_a_backends_package_imports_its_internals() -> None:
    """A backend's package shows the rest of Runyard its ``__init__`` alone (its record,
    its settings' model, what else it exports): another backend and the server import
    nothing else of it."""
    graph = grimp.build_graph(
        "runyard", "worker", "service", "provisioning", "runtime", "libraries", "contract",
        cache_dir=None,
    )  # fmt: skip
    packages = {plugin.build.__module__ for plugin in registry.PLUGINS.values()}
    assert {"provisioning.local", "provisioning.kubernetes", "provisioning.ec2"} <= packages
    for package in sorted(packages):
        strangers = sorted(
            (importer, internal)
            for internal in graph.find_descendants(package)
            for importer in graph.find_modules_that_directly_import(internal)
            if importer != package and not importer.startswith(f"{package}.")
        )
        assert strangers == [], package


def test_the_controller_gets_its_client_of_the_cluster_from_the_shared_factory(
    tmp_path: Path,
) -> None:
    """``runyard controller`` asks the Kubernetes backend's package for its client, which
    reaches the cluster its settings name and is the one the backend itself uses."""
    settings = Settings(home=tmp_path, kubernetes={"api_url": "http://127.0.0.1:1/"})
    client = kubernetes.api_client(settings)
    assert client.configuration.host == "http://127.0.0.1:1"
    assert kubernetes.api_client(settings) is client
    assert shared_client(settings.kubernetes.model_dump_json()) is client
