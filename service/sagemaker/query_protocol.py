"""The AWS Query protocol, which botocore speaks to CloudWatch where its model of the
service predates CloudWatch's JSON protocol: a form-encoded ``POST /`` naming an
``Action`` and a ``Version``, answered in XML.

Both directions are read off botocore's model of the operation, as botocore writes and
reads them: ``Dimensions.member.1.Name`` is the first dimension's name, timestamps are ISO
8601, and an answer is ``<ActionResponse><ActionResult>...``. A form key the model does
not have is refused naming it, never dropped.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl
from xml.etree import ElementTree

from botocore.model import ListShape, MapShape, OperationModel, Shape, StructureShape
from botocore.utils import parse_timestamp
from fastapi.responses import Response

from service.sagemaker.errors import AwsError

CONTENT_TYPE = "text/xml"


def is_query(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "application/x-www-form-urlencoded"


def form_of(body: bytes) -> dict[str, str]:
    try:
        pairs = parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=bool(body))
    except (UnicodeDecodeError, ValueError):
        raise AwsError("MalformedQueryString", "The request body is not a form.") from None
    form: dict[str, str] = {}
    for key, value in pairs:
        if key in form:
            raise AwsError("MalformedQueryString", f"The parameter {key[:80]} is given twice.")
        form[key] = value
    return form


def params_of(shape: StructureShape | None, form: Mapping[str, str]) -> dict[str, Any]:
    """The operation's parameters as botocore's JSON protocol would send them (timestamps
    as epoch seconds), from the form's keys other than Action and Version."""
    tree: dict[str, Any] = {}
    for key, value in form.items():
        if shape is None:
            raise _unknown(key)
        _place(shape, key.split("."), value, tree, key)
    return _assembled(shape, tree) if shape is not None else {}


def _place(shape: Shape, parts: list[str], value: str, node: dict[str, Any], key: str) -> None:
    """Put ``value`` where ``parts`` lead in ``node`` (lists and maps as dicts by index
    until assembled)."""
    assert isinstance(shape, StructureShape)
    names = {member.serialization.get("name", name): name for name, member in shape.members.items()}
    name = names.get(parts[0])
    if name is None:
        raise _unknown(key)
    member, rest = shape.members[name], parts[1:]
    if isinstance(member, StructureShape):
        if not rest:
            raise _unknown(key)
        _place(member, rest, value, node.setdefault(name, {}), key)
    elif isinstance(member, ListShape | MapShape):
        if not rest:
            if value:  # botocore sends an empty list as the bare key
                raise _unknown(key)
            node.setdefault(name, {})
            return
        _place_item(member, rest, value, node.setdefault(name, {}), key)
    elif rest:
        raise _unknown(key)
    else:
        node[name] = _scalar(member, value, key)


def _place_item(
    shape: Shape, parts: list[str], value: str, items: dict[Any, Any], key: str
) -> None:
    if not parts:
        raise _unknown(key)
    flattened = shape.serialization.get("flattened", False)
    if isinstance(shape, ListShape):
        tag = shape.member.serialization.get("name", "member")
        if not flattened:
            if parts[0] != tag:
                raise _unknown(key)
            parts = parts[1:]
        index, rest = _index(parts, key)
        if isinstance(shape.member, StructureShape):
            _place(shape.member, rest or [""], value, items.setdefault(index, {}), key)
        elif isinstance(shape.member, ListShape | MapShape):
            _place_item(shape.member, rest, value, items.setdefault(index, {}), key)
        elif rest:
            raise _unknown(key)
        else:
            items[index] = _scalar(shape.member, value, key)
        return
    assert isinstance(shape, MapShape)
    if not flattened:
        if parts[0] != "entry":
            raise _unknown(key)
        parts = parts[1:]
    index, rest = _index(parts, key)
    names = {
        shape.key.serialization.get("name", "key"): "key",
        shape.value.serialization.get("name", "value"): "value",
    }
    if len(rest) != 1 or rest[0] not in names:
        raise _unknown(key)
    part = names[rest[0]]
    items.setdefault(index, {})[part] = _scalar(
        shape.key if part == "key" else shape.value, value, key
    )


# An index is a small ASCII number (1-based): no list of a request holds more items.
_INDEX = re.compile(r"[1-9][0-9]{0,5}")


def _index(parts: list[str], key: str) -> tuple[int, list[str]]:
    if not parts or not _INDEX.fullmatch(parts[0]):
        raise _unknown(key)
    return int(parts[0]), parts[1:]


def _scalar(shape: Shape, value: str, key: str) -> Any:
    kind = shape.type_name
    try:
        if kind in ("integer", "long"):
            return int(value)
        if kind in ("float", "double"):
            return float(value)
        if kind == "boolean":
            if value not in ("true", "false"):
                raise ValueError(value)
            return value == "true"
        if kind == "timestamp":
            return parse_timestamp(value).timestamp()
    except (ValueError, OverflowError, TypeError):
        raise _invalid(f"The value of the parameter {key[:80]} is not a valid {kind}.") from None
    if kind != "string":
        raise _invalid(f"The parameter {key[:80]} is of a type not accepted here.")
    return value


def _assembled(shape: Shape, node: Any) -> Any:
    """Dicts by index as the lists (and maps) they stand for, in index order."""
    if isinstance(shape, StructureShape):
        return {
            name: _assembled(shape.members[name], value)
            for name, value in node.items()
            if name in shape.members
        }
    if isinstance(shape, ListShape):
        return [_assembled(shape.member, node[index]) for index in sorted(node)]
    if isinstance(shape, MapShape):
        return {
            entry.get("key"): _assembled(shape.value, entry.get("value"))
            for _index, entry in sorted(node.items())
        }
    return node


# -- answers -----------------------------------------------------------------------------


def answer(operation: OperationModel, found: Mapping[str, Any]) -> Response:
    namespace = operation.service_model.metadata.get("xmlNamespace", "")
    root = ElementTree.Element(f"{operation.name}Response", xmlns=namespace)
    shape = operation.output_shape
    wrapper = (shape.serialization.get("resultWrapper") if shape else None) or (
        f"{operation.name}Result"
    )
    result = ElementTree.SubElement(root, wrapper)
    if shape is not None:
        _fill(result, shape, found)
    metadata = ElementTree.SubElement(root, "ResponseMetadata")
    ElementTree.SubElement(metadata, "RequestId").text = str(uuid.uuid4())
    return Response(ElementTree.tostring(root, encoding="utf-8"), media_type=CONTENT_TYPE)


def error(exc: AwsError, namespace: str) -> Response:
    root = ElementTree.Element("ErrorResponse", xmlns=namespace)
    detail = ElementTree.SubElement(root, "Error")
    ElementTree.SubElement(detail, "Type").text = "Sender" if exc.status < 500 else "Receiver"
    ElementTree.SubElement(detail, "Code").text = exc.code
    ElementTree.SubElement(detail, "Message").text = exc.message
    ElementTree.SubElement(root, "RequestId").text = str(uuid.uuid4())
    return Response(
        ElementTree.tostring(root, encoding="utf-8"),
        status_code=exc.status,
        media_type=CONTENT_TYPE,
    )


def _fill(element: ElementTree.Element, shape: Shape, value: Any) -> None:
    if isinstance(shape, StructureShape):
        for name, member in shape.members.items():
            if value.get(name) is not None:
                _child(element, member.serialization.get("name", name), member, value[name])
    elif isinstance(shape, ListShape):
        tag = shape.member.serialization.get("name", "member")
        for item in value:
            _child(element, tag, shape.member, item)
    elif isinstance(shape, MapShape):
        for key, item in value.items():
            entry = ElementTree.SubElement(element, "entry")
            _child(entry, shape.key.serialization.get("name", "key"), shape.key, key)
            _child(entry, shape.value.serialization.get("name", "value"), shape.value, item)
    else:
        element.text = _text(shape, value)


def _child(parent: ElementTree.Element, tag: str, shape: Shape, value: Any) -> None:
    if isinstance(shape, ListShape) and shape.serialization.get("flattened"):
        for item in value:
            _child(parent, tag, shape.member, item)
        return
    _fill(ElementTree.SubElement(parent, tag), shape, value)


def _text(shape: Shape, value: Any) -> str:
    if shape.type_name == "timestamp":
        when = value if isinstance(value, datetime) else datetime.fromtimestamp(value, UTC)
        return when.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if shape.type_name == "boolean":
        return "true" if value else "false"
    if shape.type_name in ("float", "double"):
        return repr(float(value))
    return str(value)


def _unknown(key: str) -> AwsError:
    return _invalid(f"The parameter {key[:80]} is not recognized.")


def _invalid(message: str) -> AwsError:
    return AwsError("ValidationError", message)
