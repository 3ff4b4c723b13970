"""A TrainingJob's spec in Kubernetes' spelling: the REST API's fields in camelCase.

One rule makes every name: pydantic's ``to_camel`` of the request model's own field name
(``entry_point`` is ``entryPoint``, ``s3_data_type`` is ``s3DataType``), at every level of
the model's schema. What is not a field keeps the spelling its author gave it: the keys of
free maps (``hyperparameters``, ``environment``, a channel's name in ``inputs``, a
library's ``parameters``). The REST API keeps its own snake_case names; both directions
are read off the same structural schema, so a field added to the model is spelled here
without a second list to edit.

The old snake_case spelling is refused at admission, naming the camelCase field
(``resource_schema``): each renamed field stays declared, untyped, under its REST name,
with a CEL rule that refuses it. Declared, because the API server decodes an
unknown field as an error of its own (kubectl's strict field validation) or drops it
(other clients), either way before any rule could name the new spelling; and a required
field is required by a rule too, since a schema's ``required`` stops the API server from
evaluating any rule of the object when it is missing, as a resource in the old spelling
would be.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic.alias_generators import to_camel

from service.custom_resources.structural import UnsupportedSchema

# A field name written as code in a description (`source_uri`).
_QUOTED_NAME = re.compile(r"`([a-z][a-z0-9_]*)`")


def camel(name: str) -> str:
    return to_camel(name)


def resource_schema(snake: dict[str, Any]) -> dict[str, Any]:
    """``snake`` (the model's structural schema) as a resource's: every field named in
    camelCase, field names quoted in descriptions spelled the same way, and each field
    whose REST name differs refused under that name by a rule that names the camelCase
    field. The API server prefixes a rule's message with the field's path (its
    ``fieldPath``): ``spec.inputs.train.input_mode: Forbidden: ...``."""
    return _spelled(snake, set(_field_names(snake)), "")


def _spelled(node: dict[str, Any], known: set[str], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {}
            for name, child in value.items():
                spelled = camel(name)
                if spelled in out[key]:
                    raise UnsupportedSchema(f"{where}{name}: spelled {spelled!r}, as another is")
                out[key][spelled] = _spelled(child, known, f"{where}{name}.")
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _spelled(value, known, where)
        elif key == "description":
            out[key] = _QUOTED_NAME.sub(
                lambda found: f"`{camel(found[1])}`" if found[1] in known else found[0], value
            )
        elif key == "required":
            # A field that was renamed is required by a rule instead (the module's doc).
            kept = [name for name in value if camel(name) == name]
            if kept:
                out[key] = kept
        else:
            out[key] = value
    rules = [
        *node.get("x-kubernetes-validations", []),
        *(_required(camel(name)) for name in node.get("required", []) if camel(name) != name),
    ]
    for name in node.get("properties") or {}:
        spelled = camel(name)
        if spelled != name:
            out["properties"][name] = {
                "description": f"Not a field: the REST API's name of {spelled}, which a "
                "TrainingJob spells in camelCase. Refused.",
                "x-kubernetes-preserve-unknown-fields": True,
            }
            rules.append(_refused(name, spelled))
    if rules:
        out["x-kubernetes-validations"] = rules
    return out


def _required(name: str) -> dict[str, str]:
    return {
        "rule": f"has(self.{name})",
        "fieldPath": f".{name}",
        "reason": "FieldValueRequired",
        "message": f"a TrainingJob needs {name}",
    }


def _refused(old: str, spelled: str) -> dict[str, str]:
    return {
        "rule": f"!has(self.{old})",
        "fieldPath": f".{old}",
        "reason": "FieldValueForbidden",
        "message": f"a TrainingJob spells its fields in camelCase: {spelled}, not {old}",
    }


def _field_names(node: dict[str, Any]) -> Iterator[str]:
    for name, child in (node.get("properties") or {}).items():
        yield name
        yield from _field_names(child)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from _field_names(node[key])


def to_request(value: Any, snake: Mapping[str, Any]) -> Any:
    """A resource's ``value`` (camelCase) as the REST API takes it, by the model's
    structural schema ``snake`` at that place. A key the schema does not name is kept as
    written, for the model to refuse by that name."""
    if isinstance(value, dict):
        properties = snake.get("properties")
        if properties:
            names = {camel(name): name for name in properties}
            return {
                names.get(key, key): to_request(child, properties.get(names.get(key, ""), {}))
                for key, child in value.items()
            }
        entry = snake.get("additionalProperties")
        if isinstance(entry, dict):
            return {key: to_request(child, entry) for key, child in value.items()}
        return value  # a free map: its keys are its author's
    if isinstance(value, list) and isinstance(snake.get("items"), dict):
        return [to_request(child, snake["items"]) for child in value]
    return value


def field_path(loc: tuple[str | int, ...], snake: Mapping[str, Any]) -> str:
    """A place in the request (pydantic's ``loc``, snake_case) as a dotted path in the
    resource's spelling: ``("inputs", "train", "input_mode")`` is ``inputs.train.inputMode``."""
    parts = []
    node: Mapping[str, Any] = snake
    for part in loc:
        properties = node.get("properties")
        if isinstance(part, str) and properties and part in properties:
            parts.append(camel(part))
            node = properties[part]
        elif isinstance(part, int) and isinstance(node.get("items"), dict):
            parts.append(str(part))
            node = node["items"]
        elif isinstance(node.get("additionalProperties"), dict):
            parts.append(str(part))
            node = node["additionalProperties"]
        else:
            parts.append(str(part))
            node = {}
    return ".".join(parts)
