"""The configuration page, ``docs/configuration.md``, written from the settings themselves.

``python -m service.settings_docs`` prints it (``make docs`` writes it): every field of
``Settings`` and of the models nested in it (each backend's, as its record declares it),
under the environment variable pydantic-settings reads it from, with its type, its default
(a secret's never shown), its description and the former name it is still read under.
A nested model's section is titled by its field's ``title``. The variables Runyard reads
outside ``Settings`` are kept by hand in ``OTHER_VARIABLES``; a test finds every
``RUNYARD_*`` name in the code and holds it to this page.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from contract.ports import SERVICE_PORT
from service.settings import Settings

# (variable, default, description) of what the CLI and the SDK read besides the settings
# (runyard/variables.py, runyard/client.py).
OTHER_VARIABLES: tuple[tuple[str, str, str], ...] = (
    (
        "RUNYARD_PORT",
        f"`{SERVICE_PORT}`",
        "The port `runyard server` and `runyard api` listen on; `--port` wins.",
    ),
    (
        "RUNYARD_URL",
        f"what `runyard server` recorded in `RUNYARD_HOME`, else `http://127.0.0.1:{SERVICE_PORT}`",
        "The server the CLI and the SDK call.",
    ),
    (
        "RUNYARD_TOKEN",
        "the admin token in `RUNYARD_HOME/token`",
        "The API token the CLI and the SDK call with.",
    ),
    (
        "RUNYARD_PROJECT",
        "the token's own",
        "The project the CLI and the SDK work in (a server administrator's token reaches "
        "every one); the CLI's `--project` wins.",
    ),
)


@dataclass(frozen=True)
class Setting:
    """One field, under the variable it is read from (for a list's items, its key)."""

    name: str
    path: tuple[str, ...]
    field: FieldInfo
    # The variable it was read from before a backend took it into its own settings.
    former: str = ""


@dataclass(frozen=True)
class Section:
    title: str
    intro: str
    settings: tuple[Setting, ...]
    # Keys of a JSON object, not variables.
    keys: bool = False


def page(settings: type[BaseSettings] = Settings) -> str:
    """The whole page, as Markdown."""
    prefix, delimiter = _naming(settings)
    parts = [_intro(prefix, delimiter)]
    for section in sections(settings):
        parts.append(_table(section))
    others = "\n".join(
        f"| `{name}` | {default} | {text} |" for name, default, text in OTHER_VARIABLES
    )
    parts.append(
        "## The CLI and the SDK\n\n"
        "Read by the `runyard` command and the SDK, outside the settings above; they also "
        "find the server and its token through `RUNYARD_HOME`.\n\n"
        f"| Variable | Default | |\n|---|---|---|\n{others}\n"
    )
    return "\n".join(parts)


def sections(settings: type[BaseSettings] = Settings) -> Iterator[Section]:
    """The server's own settings, then each nested model's, then each list's items'."""
    prefix, delimiter = _naming(settings)
    top = [Setting(prefix + name.upper(), (name,), f) for name, f in _items(settings)]
    yield Section("The server", "", tuple(top))
    former_fields: dict[tuple[str, ...], str] = {
        path: prefix + former.upper()
        for former, path in getattr(settings, "former_fields", {}).items()
    }
    for setting in top:
        model = _model_of(setting.field.annotation)
        if model is None or _is_list(setting.field.annotation):
            continue
        inner = tuple(
            Setting(
                setting.name + delimiter + name.upper(),
                (*setting.path, name),
                f,
                former_fields.get((*setting.path, name), ""),
            )
            for name, f in _items(model)
        )
        title = setting.field.title or setting.path[0]
        yield Section(f"{title}: `{setting.name}`", _describe(setting.field), inner)
    for setting in top:
        model = _model_of(setting.field.annotation)
        if model is None or not _is_list(setting.field.annotation):
            continue
        keys = tuple(Setting(name, (*setting.path, name), f) for name, f in _items(model))
        yield Section(f"Entries of `{setting.name}`", _describe(setting.field), keys, True)


def variables(settings: type[BaseSettings] = Settings) -> set[str]:
    """Every variable the page documents."""
    names = {name for name, _, _ in OTHER_VARIABLES}
    for section in sections(settings):
        if not section.keys:
            names |= {setting.name for setting in section.settings}
            names |= {setting.former for setting in section.settings if setting.former}
    return names


def models(root: type[BaseModel] = Settings) -> Iterator[type[BaseModel]]:
    """``root`` and every model nested in it, whose fields the page documents."""
    seen: list[type[BaseModel]] = [root]
    for model in seen:
        yield model
        for _, field in _items(model):
            inner = _model_of(field.annotation)
            if inner is not None and inner not in seen:
                seen.append(inner)


def _naming(settings: type[BaseSettings]) -> tuple[str, str]:
    """The variables' prefix and the delimiter of nested fields, as pydantic-settings reads
    them."""
    config = settings.model_config
    return str(config.get("env_prefix") or ""), str(config.get("env_nested_delimiter") or "")


def _intro(prefix: str, delimiter: str) -> str:
    return f"""\
# Configuration

Runyard's server (`runyard server`, or apart `runyard api`, `runyard worker`, `runyard
beat` and `runyard migrate`) reads its settings from environment variables that start with
`{prefix}` when it starts. Lists and maps are written as JSON unless their description
says otherwise. A backend's settings are one variable holding a JSON object
(`{prefix}EC2='{{"region": "eu-west-1"}}'`) or one variable per field, its name joined to
the backend's by `{delimiter}` (`{prefix}EC2{delimiter}REGION=eu-west-1`).
A value the server cannot use stops it with a line naming the variable.

This page is written by `make docs` (`python -m service.settings_docs`) from the
descriptions of the fields in `service/settings.py` and `provisioning/*/settings.py`:
change those, then run `make docs`; a test fails while the two differ.
"""


def _items(model: type[BaseModel]) -> Iterator[tuple[str, FieldInfo]]:
    yield from model.model_fields.items()


def _table(section: Section) -> str:
    lines = [f"## {section.title}", ""]
    if section.intro:
        lines += [section.intro, ""]
    lines += [
        f"| {'Key' if section.keys else 'Variable'} | Type | Default | |",
        "|---|---|---|---|",
    ]
    for setting in section.settings:
        field = setting.field
        default, described = _default(setting.name, field), _describe(field)
        if setting.former:
            described += (
                f" Also read from `{setting.former}`, its name before the backend had "
                "settings of its own (where both are set, this one wins)."
            )
        lines.append(f"| `{setting.name}` | {_type(field.annotation)} | {default} | {described} |")
    return "\n".join(lines) + "\n"


def _describe(field: FieldInfo) -> str:
    if not (field.description or "").strip():
        raise ValueError(f"{field!r}: a setting needs a description")
    return str(field.description).replace("|", "\\|")


def _default(name: str, field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True, validated_data={})
    if _is_secret(field.annotation):
        return "none" if value is None else "generated"
    if isinstance(value, BaseModel):
        return "below"
    if value is None:
        return "none"
    if value == "":
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, int) and name.lower().endswith("_bytes"):
        return f"`{value}` ({_size(value)})"
    if isinstance(value, Path):
        return f"`{_home_relative(value)}`"
    if isinstance(value, dict | list):
        return f"`{json.dumps(value)}`" if value else "none"
    return f"`{value}`"


def _size(value: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale and value % scale == 0:
            return f"{value // scale} {unit}"
    return f"{value} bytes"


def _home_relative(path: Path) -> str:
    """A default under the home of whoever runs this, as under any reader's home."""
    try:
        return "~/" + str(path.relative_to(Path.home()))
    except ValueError:
        return str(path)


def _type(annotation: Any) -> str:
    annotation = _unannotated(annotation)
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(f"`{value}`" for value in arguments)
    if origin in (typing.Union, types.UnionType):
        named = " or ".join(_type(a) for a in arguments if a is not type(None))
        return named + (" or none" if type(None) in arguments else "")
    if origin is list:
        return f"list of {_type(arguments[0])}"
    if origin is dict:
        return "object" if arguments[1] is Any else f"map of {_type(arguments[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    names: dict[Any, str] = {
        str: "string",
        int: "integer",
        float: "number",
        bool: "boolean",
        Path: "path",
        SecretStr: "secret",
    }
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _unannotated(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, itself or as a list's items."""
    annotation = _unannotated(annotation)
    if _is_list(annotation):
        annotation = _unannotated(typing.get_args(annotation)[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _is_list(annotation: Any) -> bool:
    return typing.get_origin(_unannotated(annotation)) is list


def _is_secret(annotation: Any) -> bool:
    annotation = _unannotated(annotation)
    return annotation is SecretStr or SecretStr in typing.get_args(annotation)


if __name__ == "__main__":
    print(page(), end="")
