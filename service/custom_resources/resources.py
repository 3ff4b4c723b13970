"""What the controllers do alike to a resource of theirs, whatever its kind: read its
name, finalizers and spec (as the REST API's request, named after the resource and tagged
with its uid), say where in it the server refused something, act as a member of its
namespace's project, and write its finalizers and status back."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from pydantic import BaseModel, ValidationError

from service.auth.access import Principal, Role
from service.custom_resources import names, spelling
from service.jobs.spec_parts import Tag
from service.kit.errors import SpecError

if TYPE_CHECKING:
    from kubernetes.client import CustomObjectsApi

Request = TypeVar("Request", bound=BaseModel)


def name_of(resource: dict[str, Any]) -> str:
    return str(resource["metadata"]["name"])


def finalizers_of(resource: dict[str, Any]) -> list[str]:
    return list(resource["metadata"].get("finalizers") or [])


def principal(project: str) -> Principal:
    """What a controller acts as: a member of the namespace's project, no more."""
    return Principal(kind="user", name=names.COMPONENT, project=project, role=Role.MEMBER)


def set_finalizers(
    custom: CustomObjectsApi, kind: names.Kind, resource: dict[str, Any], finalizers: list[str]
) -> dict[str, Any]:
    meta = resource["metadata"]
    # With the version read: a finalizer another controller added meanwhile is kept (the
    # API server refuses this patch, and the next pass reads the resource again).
    patch = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
    patched = custom.patch_namespaced_custom_object(
        names.GROUP, names.VERSION, meta["namespace"], kind.plural, meta["name"], patch
    )
    return cast(dict[str, Any], patched)


def write_status(
    custom: CustomObjectsApi, kind: names.Kind, resource: dict[str, Any], body: dict[str, Any]
) -> dict[str, Any]:
    meta = resource["metadata"]
    written = custom.patch_namespaced_custom_object_status(
        names.GROUP, names.VERSION, meta["namespace"], kind.plural, meta["name"], {"status": body}
    )
    return cast(dict[str, Any], written)


def request(
    resource: dict[str, Any],
    model: type[Request],
    schema: Mapping[str, Any],
    named_by_metadata: tuple[str, ...] = ("name",),
) -> Request:
    """The resource's spec as the REST API takes it (``model``, its fields in the API's
    snake_case by the structural ``schema``): named after the resource, tagged with its
    uid. A rule the CRD's schema cannot hold refuses it as SpecError."""
    spec = spelling.to_request(dict(resource.get("spec") or {}), schema)
    if any(field in spec for field in named_by_metadata):
        raise SpecError(("name",), "is the resource's metadata.name; leave it out of spec")
    tags = [tag for tag in spec.get("tags") or [] if tag.get("key") != names.RESOURCE_TAG]
    tags.append({"key": names.RESOURCE_TAG, "value": resource["metadata"]["uid"]})
    try:
        return model.model_validate({**spec, "name": name_of(resource), "tags": tags})
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = tuple(error["loc"])
        if loc == ("name",):
            raise SpecError(("metadata", "name"), error["msg"]) from None
        raise SpecError(loc, error["msg"]) from None


def in_resource(error: SpecError, schema: Mapping[str, Any]) -> str:
    """What the server refused, at its place in the resource: ``spec.instanceType: ...``."""
    if error.loc[:1] == ("metadata",):
        return error.message
    path = spelling.field_path(error.loc, schema)
    return f"spec.{path}: {error.field_message}" if path else f"spec: {error.field_message}"


def made_for(tags: Iterable[Tag], resource: dict[str, Any]) -> bool:
    """Whether what carries ``tags`` was made for ``resource`` (tagged with its uid)."""
    uid = resource["metadata"]["uid"]
    return any(tag.key == names.RESOURCE_TAG and tag.value == uid for tag in tags)
