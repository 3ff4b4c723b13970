"""docs/configuration.md is what the settings say of themselves: the committed page is the
generator's output, every field has a description, every ``RUNYARD_*`` name the code reads
is on the page, and the names it gives are those pydantic-settings reads."""

from __future__ import annotations

import ast
import os
import re
import typing
from pathlib import Path

import pytest
from pydantic import Field

from service import settings_docs
from service.settings import Settings

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "configuration.md"
# Where the server, the CLI and the SDK read their variables.
SCANNED = ("service", "worker", "provisioning", "runyard")
# RUNYARD_ names in that code that are no variable anyone sets -> what each is.
NOT_VARIABLES = {"RUNYARD_EOF": "the end of a heredoc in EC2 user-data"}
_NAME = re.compile(r"\bRUNYARD_[A-Z0-9_]*[A-Z0-9]\b")


class _Grown(Settings):
    """Settings with a field added without a description."""

    added_later: int = 1


class _GrownWell(Settings):
    added_later: int = Field(default=1, description="A field added with its description.")


def _undescribed(root: type[Settings]) -> list[str]:
    return [
        f"{model.__name__}.{name}"
        for model in settings_docs.models(root)
        for name, field in model.model_fields.items()
        if not (field.description or "").strip()
    ]


def _names_in_code() -> dict[str, str]:
    """Each RUNYARD_ name in a string of the scanned packages -> a file it is in."""
    found: dict[str, str] = {}
    for package in SCANNED:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    for name in _NAME.findall(node.value):
                        found.setdefault(name, str(path.relative_to(REPO)))
    return found


def test_the_committed_page_is_what_make_docs_writes() -> None:
    assert PAGE.read_text() == settings_docs.page(), (
        "docs/configuration.md differs from the settings' descriptions: run `make docs`"
    )


def test_every_setting_has_a_description() -> None:
    assert _undescribed(Settings) == []


def test_a_field_added_without_a_description_is_caught() -> None:
    assert _undescribed(_Grown) == ["_Grown.added_later"]
    with pytest.raises(ValueError, match="needs a description"):
        settings_docs.page(_Grown)
    # With its description it is on the page, which then differs from the committed one.
    assert "`RUNYARD_ADDED_LATER`" in settings_docs.page(_GrownWell)
    assert settings_docs.page(_GrownWell) != PAGE.read_text()


def test_every_runyard_variable_the_code_names_is_on_the_page() -> None:
    found = _names_in_code()
    documented = settings_docs.variables()
    missing = {
        name: path
        for name, path in found.items()
        if name not in documented and name not in NOT_VARIABLES
    }
    assert missing == {}, "add them to the settings or to settings_docs.OTHER_VARIABLES"
    page = PAGE.read_text()
    assert [name for name in documented if f"`{name}`" not in page] == []
    # Those kept by hand are still read, and the exceptions still there.
    assert {name for name, _, _ in settings_docs.OTHER_VARIABLES} <= found.keys()
    assert NOT_VARIABLES.keys() <= found.keys()


def test_the_page_names_the_variables_pydantic_settings_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each plain-string setting, set through the variable the page gives, arrives in its
    field: top-level and nested alike."""
    for name in list(os.environ):
        if name.startswith("RUNYARD_"):
            monkeypatch.delenv(name)
    probed: dict[tuple[str, ...], str] = {}
    for section in settings_docs.sections():
        for setting in section.settings:
            field = setting.field
            if section.keys or field.metadata or typing.get_origin(field.annotation):
                continue
            if field.annotation in (str, "str"):
                value = f"probe-{len(probed)}"
                monkeypatch.setenv(setting.name, value)
                probed[setting.path] = value
    assert len(probed) >= 5
    assert any(len(path) == 2 for path in probed), "no nested setting probed"
    settings = Settings()
    for path, value in probed.items():
        owner: object = settings
        for part in path:
            owner = getattr(owner, part)
        assert owner == value, f"{path} from {value!r}"
