"""A pydantic model's JSON schema as a Kubernetes structural schema (a CRD's
``openAPIV3Schema``).

The API server takes OpenAPI v3.0 with Kubernetes' own rules (structural schemas): every
node says its type; no ``$ref`` (definitions are inlined); no ``anyOf`` with ``null``
(``nullable: true`` instead); no ``additionalProperties: false`` (unknown fields are
pruned, and kubectl's strict field validation names them); ``exclusiveMinimum`` is a flag
beside ``minimum``; a map of anything keeps its fields with
``x-kubernetes-preserve-unknown-fields``, and so does a value that may be one of several
scalar kinds (a categorical range's values: text, numbers or booleans), whose kind the
model checks when the controller reads it. Defaults are left to the server, which applies
its own at submission: the resource keeps what its author wrote.

Anything the conversion does not know is refused (``UnsupportedSchema``), so a new kind of
field in the model fails the generator's test instead of slipping into the CRD.
"""

from __future__ import annotations

from typing import Any

# JSON Schema words a structural schema takes as they are.
_KEPT = frozenset(
    {
        "type",
        "format",
        "description",
        "enum",
        "maximum",
        "minimum",
        "maxLength",
        "minLength",
        "maxItems",
        "minItems",
        "maxProperties",
        "minProperties",
        "pattern",
        "required",
    }
)
# Words that only inform people or pydantic, dropped.
_DROPPED = frozenset({"title", "default", "examples", "additionalProperties", "discriminator"})


class UnsupportedSchema(ValueError):
    """A JSON schema construct a structural schema cannot express."""


def structural(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (pydantic's ``model_json_schema()``) with its definitions inlined, in
    Kubernetes' structural form."""
    return _convert(schema, schema.get("$defs", {}), "")


# The JSON kinds of a scalar, which a union may mix.
_SCALARS = frozenset({"string", "integer", "number", "boolean"})


def _convert(node: dict[str, Any], defs: dict[str, Any], where: str) -> dict[str, Any]:
    node = _resolved(node, defs, where)
    if _scalar_union(node):
        kept = {key: node[key] for key in ("description",) if key in node}
        return {**kept, "x-kubernetes-preserve-unknown-fields": True}
    node = _without_null(node, defs, where)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _KEPT:
            out[key] = value
        elif key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[bound] = value
            out[key] = True
        elif key == "properties":
            out["properties"] = {
                name: _convert(child, defs, f"{where}.{name}") for name, child in value.items()
            }
        elif key == "items":
            out["items"] = _convert(value, defs, f"{where}[]")
        elif key in ("nullable", "$defs"):
            continue  # nullable is set below; definitions are inlined where used
        elif key not in _DROPPED:
            raise UnsupportedSchema(f"{where or '<root>'}: {key!r} has no structural form")
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and extra:
        if "properties" in out:
            raise UnsupportedSchema(f"{where}: both properties and additionalProperties")
        out["additionalProperties"] = _convert(extra, defs, f"{where}.*")
    elif (extra is True or extra == {}) and "properties" not in out:
        # A free map (hyperparameters, a library's parameters): kept whole.
        out["x-kubernetes-preserve-unknown-fields"] = True
    if node.get("nullable"):
        out["nullable"] = True
    if "type" not in out and "x-kubernetes-preserve-unknown-fields" not in out:
        raise UnsupportedSchema(f"{where or '<root>'}: no type")
    return out


def _scalar_union(node: dict[str, Any]) -> bool:
    """Whether ``node`` is a union of scalar kinds only (no null: a structural schema
    says that one with nullable)."""
    branches = node.get("anyOf")
    return (
        branches is not None
        and len(branches) > 1
        and all(set(branch) == {"type"} and branch["type"] in _SCALARS for branch in branches)
    )


def _resolved(node: dict[str, Any], defs: dict[str, Any], where: str) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    prefix = "#/$defs/"
    if not ref.startswith(prefix) or ref[len(prefix) :] not in defs:
        raise UnsupportedSchema(f"{where}: reference {ref!r} is not to a definition")
    # The referring node's own words (a description) win over the definition's.
    rest = {key: value for key, value in node.items() if key != "$ref"}
    return {**defs[ref[len(prefix) :]], **rest}


def _without_null(node: dict[str, Any], defs: dict[str, Any], where: str) -> dict[str, Any]:
    """``anyOf: [X, {type: null}]`` as X with ``nullable: true`` (the node's other words
    kept: pydantic puts a constraint given by ``json_schema_extra`` beside the anyOf)."""
    branches = node.get("anyOf")
    if branches is None:
        return node
    others = [branch for branch in branches if branch != {"type": "null"}]
    if len(others) != 1:
        raise UnsupportedSchema(f"{where}: a union of {len(others)} kinds of value")
    rest = {key: value for key, value in node.items() if key != "anyOf"}
    merged = {**_resolved(others[0], defs, where), **rest}
    if len(others) < len(branches):
        merged["nullable"] = True
    return merged
