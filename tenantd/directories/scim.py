"""The SCIM 2.0 protocol as tenantd speaks it, on scim2-models: the service description
(ServiceProviderConfig, Schemas, ResourceTypes), the resource models, reading requests under
the tolerant policy identity providers need, and turning stored rows into resources.

The policy is the one Microsoft Entra ID and Okta need: an unknown attribute is dropped, a
`remove` whose `value` names the members to remove applies it, a filtered path that matches
nothing creates the entry. Capitalised ops (`"Replace"`) and string booleans (`"False"`) are
read by the models as they are.
"""

from __future__ import annotations

import datetime as dt
import unicodedata
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, cast

from pydantic import ValidationError
from scim2_models import (
    AuthenticationScheme,
    Bulk,
    ChangePassword,
    Context,
    EnterpriseUser,
    Error,
    ETag,
    Filter,
    Group,
    GroupMember,
    GroupMembership,
    ListResponse,
    Meta,
    Patch,
    PatchOp,
    ResourceType,
    Schema,
    ScimPolicy,
    ScimProvider,
    SearchRequest,
    ServiceProviderConfig,
    Sort,
    User,
)
from scim2_models.path import CompareOperator, Comparison

from tenantd.db import Row

MEDIA_TYPE = "application/scim+json"
MAX_RESULTS = 200  # one page of a list at most (ServiceProviderConfig filter.maxResults)

UserResource = User[EnterpriseUser]
GroupResource = Group

POLICY = ScimPolicy(
    unknown=ScimPolicy.Unknown.ignore,
    remove_value_as_filter=ScimPolicy.RemoveValue.apply,
    unmatched_path_filter=ScimPolicy.UnmatchedPathFilter.create,
)

CONFIG = ServiceProviderConfig(
    patch=Patch(supported=True),
    bulk=Bulk(supported=False, max_operations=0, max_payload_size=0),
    filter=Filter(supported=True, max_results=MAX_RESULTS),
    change_password=ChangePassword(supported=False),
    sort=Sort(supported=True),
    etag=ETag(supported=False),
    authentication_schemes=[
        AuthenticationScheme(
            type=AuthenticationScheme.Type.oauthbearertoken,
            name="OAuth Bearer Token",
            description="The directory's token: Authorization: Bearer <token>",
            primary=True,
        )
    ],
)

PROVIDER = ScimProvider(
    models=[User, EnterpriseUser, Group],
    resource_types=[ResourceType.from_resource(UserResource), ResourceType.from_resource(Group)],
    config=CONFIG,
    policy=POLICY,
)

# Attributes tenantd computes: never stored from a request.
COMPUTED = ("id", "meta", "groups", "members", "password")


class ScimError(Exception):
    """A SCIM error answer: `{schemas: [Error], status, scimType?, detail}`."""

    def __init__(self, status: int, detail: str, scim_type: str | None = None):
        super().__init__(detail)
        self.error = Error(status=status, scim_type=scim_type, detail=detail)


def comparison_key(value: str) -> str:
    """The form userName and displayName are compared in (caseExact false): NFC, lower case."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", value).lower())


def invalid(errors: ValidationError) -> ScimError:
    """A request the models refused: its first SCIM error."""
    first = Error.from_validation_errors(errors)[0]
    return ScimError(first.status or 400, first.detail or "invalid request", first.scim_type)


def read_resource(payload: Any, model: type[Any], context: Context) -> Any:
    """A User or Group (`model`) a request body describes."""
    try:
        return model.model_validate(payload, scim_ctx=context, scim_provider=PROVIDER)
    except ValidationError as error:
        raise invalid(error) from None


GenericModel = TypeVar("GenericModel")


def of_model(generic: type[GenericModel], model: type[Any]) -> type[GenericModel]:
    """`generic[model]` (a PatchOp, SearchRequest or ListResponse of Users or of Groups): the
    model is chosen at run time, and a type checker reads a subscription as a type, which a
    variable is not. Pydantic builds the class as it would for the literal subscription."""
    subscribed: type[GenericModel] = cast(Any, generic)[model]
    return subscribed


def read_patch(payload: Any, model: type[Any]) -> PatchOp[Any]:
    try:
        patch: PatchOp[Any] = of_model(PatchOp, model).model_validate(
            payload, scim_ctx=Context.RESOURCE_PATCH_REQUEST, scim_provider=PROVIDER
        )
    except ValidationError as error:
        raise invalid(error) from None
    return patch


def read_search(query: Mapping[str, Any], model: type[Any]) -> SearchRequest[Any]:
    """The list parameters (filter, startIndex, count, sortBy, attributes...) of a GET's query
    or a POST .search's body."""
    if not isinstance(query, Mapping):
        raise ScimError(400, "A search request is a JSON object", "invalidSyntax")
    try:
        search: SearchRequest[Any] = of_model(SearchRequest, model).model_validate(
            dict(query), scim_ctx=Context.SEARCH_REQUEST, scim_provider=PROVIDER
        )
    except ValidationError as error:
        raise invalid(error) from None
    return search


def equality(search: SearchRequest[Any]) -> tuple[str, str] | None:
    """`(attribute, value)` when the filter is one `eq` comparison (userName, externalId,
    displayName): what the database narrows by before the filter itself decides."""
    if search.filter is None:
        return None
    node = search.filter.ast
    if not isinstance(node, Comparison) or node.op is not CompareOperator.eq:
        return None
    if node.attr_path.sub_attr is not None or not isinstance(node.value, str):
        return None
    return node.attr_path.attr.lower(), node.value


def stored(resource: Any) -> dict[str, Any]:
    """What is kept of a resource a provider wrote: everything but the computed attributes."""
    data: dict[str, Any] = resource.model_dump(scim_ctx=Context.DEFAULT, scim_provider=PROVIDER)
    for name in COMPUTED:
        data.pop(name, None)
    return data


def _meta(row: Row, resource_type: str, location: str) -> Meta:
    return Meta(
        resource_type=resource_type,
        created=row["created_at"],
        last_modified=row["updated_at"],
        location=location,
        version=f'W/"{row["version"]}"',
    )


def _stored_resource(model: type[Any], row: Row, resource_type: str, base: str) -> Any:
    """The `model` resource of a row: its stored attributes, id and meta."""
    resource = model.model_validate(
        row["resource"], scim_ctx=Context.DEFAULT, scim_provider=PROVIDER
    )
    resource.id = str(row["id"])
    resource.meta = _meta(row, resource_type, f"{base}/{resource_type}s/{row['id']}")
    return resource


def _references(
    model: type[Any], rows: Sequence[Row], base: str, *, display: str, kind: str
) -> list[Any] | None:
    """References to the rows at `base` (groups of a user, members of a group)."""
    return [
        model.model_validate(
            {
                "value": str(row["id"]),
                "$ref": f"{base}/{row['id']}",
                "display": row[display],
                "type": kind,
            }
        )
        for row in rows
    ] or None


def user_resource(row: Row, groups: Sequence[Row], base: str) -> Any:
    """The User resource of a directory user: its stored attributes, id, meta and groups."""
    user = _stored_resource(UserResource, row, "User", base)
    user.groups = _references(
        GroupMembership, groups, f"{base}/Groups", display="display_name", kind="direct"
    )
    return user


def group_resource(row: Row, members: Sequence[Row], base: str) -> Group:
    """The Group resource: its stored attributes, id, meta and members."""
    group: Group = _stored_resource(Group, row, "Group", base)
    group.members = _references(
        GroupMember, members, f"{base}/Users", display="display", kind="User"
    )
    return group


def members_of(group: Group) -> dict[uuid.UUID, str | None]:
    """The members a Group resource names, with their display (each must be one of the
    directory's users)."""
    members: dict[uuid.UUID, str | None] = {}
    for member in group.members or []:
        try:
            member_id = uuid.UUID(str(member.value))
        except ValueError:
            raise ScimError(
                400, f"no user {member.value!r} in this directory", "invalidValue"
            ) from None
        members.setdefault(member_id, member.display)
    return members


def dump(resource: Any, context: Context, search: SearchRequest[Any] | None = None) -> Any:
    return resource.model_dump(scim_ctx=context, response_parameters=search, scim_provider=PROVIDER)


def list_response(
    model: type[Any],
    resources: Sequence[Any],
    *,
    total: int,
    start: int,
    search: SearchRequest[Any],
) -> dict[str, Any]:
    """A ListResponse page of `model` resources: `start` is 1-based, as startIndex."""
    page = of_model(ListResponse, model)(
        total_results=total,
        start_index=start,
        items_per_page=len(resources),
        resources=list(resources) or None,
    )
    data: dict[str, Any] = page.model_dump(
        scim_ctx=Context.SEARCH_RESPONSE, response_parameters=search, scim_provider=PROVIDER
    )
    return data


def discovery(base: str) -> dict[str, Any]:
    """The three discovery documents with their locations, built once per directory base."""
    config = CONFIG.model_copy(deep=True)
    config.meta = Meta(
        resource_type="ServiceProviderConfig", location=f"{base}/ServiceProviderConfig"
    )
    schemas: list[Schema] = []
    for schema in PROVIDER.schemas:
        described = schema.model_copy(deep=True)
        described.meta = Meta(resource_type="Schema", location=f"{base}/Schemas/{schema.id}")
        schemas.append(described)
    types: list[ResourceType] = []
    for resource_type in PROVIDER.resource_types:
        bound = resource_type.model_copy(deep=True)
        bound.meta = Meta(
            resource_type="ResourceType", location=f"{base}/ResourceTypes/{resource_type.id}"
        )
        types.append(bound)
    return {"config": config, "schemas": schemas, "types": types}


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
