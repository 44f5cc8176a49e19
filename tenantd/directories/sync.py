"""SCIM provisioning of a directory's account: the rules behind /scim/v2/{directoryId}/.

- A User is one tenantd user, found or created by its address: the primary of `emails` (else
  the first), or `userName` when it is an address. An existing user with that address is
  linked. Every user a directory holds active is a member of the directory's account, within
  the seat cap (SEAT_LIMIT_REACHED, a SCIM 409, beyond it).
- `active: false` or a DELETE takes the membership away and ends the user's sessions in that
  account at once; `active: true` again gives it back (within the seat cap).
- A Group mapped to a role key gives its active members that role: the highest of their
  mapped groups (admin over any other key over member); leaving the last mapped group gives
  `member`. The owner's membership is never changed by a directory.

Every change holds the account lock (as every writer of memberships does), so two creates of
one userName serialise: the second answers 409 uniqueness.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from scim2_models import Context, Group, SCIMException, SearchRequest

from tenantd import audit
from tenantd.accounts import memberships
from tenantd.accounts.service import lock_live_account
from tenantd.addresses import InvalidEmail, canonical_email
from tenantd.db import Conn, Row
from tenantd.directories import events, queries, scim
from tenantd.directories.domain import Directories
from tenantd.directories.scim import ScimError
from tenantd.errors import NotFound
from tenantd.identity import queries as identity_queries
from tenantd.identity.events import user_changed

ROLE_RANK = {"admin": 3, "member": 1}  # any other role key ranks between the two


@dataclass(frozen=True)
class Directory:
    id: uuid.UUID
    account_id: uuid.UUID

    @property
    def via(self) -> dict[str, Any]:
        return {"via": "directory", "directoryId": str(self.id)}


def unauthorized() -> ScimError:
    return ScimError(401, "A valid bearer token of this directory is required")


def not_found(kind: str, scim_id: object) -> ScimError:
    return ScimError(404, f"{kind} {scim_id} not found")


def parse_id(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


# -- users --------------------------------------------------------------------------------------


def address_of(resource: Any) -> str | None:
    """The user's address: the primary of `emails` (else the first), or `userName` when it
    is an address; None when it has neither (the user is linked once it has one)."""
    emails = [email for email in resource.emails or [] if email.value]
    chosen = next((e for e in emails if e.primary), emails[0] if emails else None)
    if chosen is None:
        try:
            return canonical_email(resource.user_name)
        except InvalidEmail:
            return None
    try:
        return canonical_email(str(chosen.value))
    except InvalidEmail as error:
        raise ScimError(400, f"emails: not an email address: {error}", "invalidValue") from None


async def _tenantd_user(
    conn: Conn, directory: Directory, *, email: str, resource: Any
) -> tuple[uuid.UUID, bool]:
    """The user holding the address (linked), or a new verified one; (id, created)."""
    name = resource.name
    first = (name.given_name if name else None) or ""
    last = (name.family_name if name else None) or ""
    created = await identity_queries.insert_verified_user_unless_taken(
        conn, email=email, first_name=first[:100], last_name=last[:100]
    )
    if created is not None:
        await user_changed(conn, "user.created", created, actor=events.actor(directory.id))
        return created, True
    existing = await identity_queries.user_liveness_by_email(conn, email)
    assert existing is not None
    if existing["deleted_at"] is not None:
        raise ScimError(409, f"the user holding {email} is being deleted", "uniqueness")
    return existing["id"], False


def _role_of(roles: Iterable[str]) -> str:
    """The role a user's mapped groups give: the highest, `member` without any."""
    return max(sorted(roles), key=lambda role: ROLE_RANK.get(role, 2), default="member")


async def _join(conn: Conn, directory: Directory, row: Row) -> None:
    """An active directory user is a member of the account (within the seat cap), with the
    role of its mapped groups when it has any (none while it has no address, nor for a user
    who deleted themselves)."""
    if row["user_id"] is None or not await queries.user_is_live(conn, row["user_id"]):
        return
    roles = await queries.mapped_roles(conn, row["id"])
    current = await memberships.active_membership(
        conn, account_id=directory.account_id, user_id=row["user_id"]
    )
    actor = events.actor(directory.id)
    if current is None:
        await memberships.join_within_seats(
            conn,
            account_id=directory.account_id,
            user_id=row["user_id"],
            role=_role_of(roles),
            actor=actor,
            actor_user_id=None,
            via=directory.via,
        )
    elif roles:
        await memberships.set_member_role(
            conn, membership=current, role=_role_of(roles), actor=actor, via=directory.via
        )


async def _leave(conn: Conn, directory: Directory, row: Row, *, reason: str) -> None:
    """The membership ends and, at once, every session of the user in the account."""
    if row["user_id"] is None:
        return
    current = await memberships.active_membership(
        conn, account_id=directory.account_id, user_id=row["user_id"]
    )
    if current is None:
        return
    if current["role"] == "owner":
        raise ScimError(
            409, "The account's owner cannot be deprovisioned; transfer ownership first"
        )
    await memberships.end_membership(
        conn, membership=current, actor=events.actor(directory.id), reason=reason, via=directory.via
    )


async def _audit(
    conn: Conn,
    directory: Directory,
    action: str,
    target: object,
    data: dict[str, Any],
    *,
    actor_user_id: uuid.UUID | None = None,
) -> None:
    """The audit entry of a directory change (the directory is the actor unless a user is)."""
    await audit.record(
        conn,
        account_id=directory.account_id,
        actor_user_id=actor_user_id,
        action=action,
        target=str(target),
        data={**directory.via, **data},
    )


async def _user_changed(
    conn: Conn,
    directory: Directory,
    action: str,
    row: Row,
    event: str | None = None,
    previous: dict[str, Any] | None = None,
) -> None:
    """Audit `action` on a directory user and emit `event` (the action by default)."""
    await _audit(conn, directory, action, row["id"], {"userId": _text(row["user_id"])})
    await events.user_changed(
        conn, event or action, row, account_id=directory.account_id, previous=previous
    )


async def _group_changed(
    conn: Conn,
    directory: Directory,
    action: str,
    row: Row,
    members: list[uuid.UUID],
    previous: dict[str, Any] | None = None,
) -> None:
    """Audit `action` on a group and emit it as the event, with the group's members."""
    await _audit(conn, directory, action, row["id"], {"displayName": row["display_name"]})
    await events.group_changed(
        conn, action, row, account_id=directory.account_id, members=members, previous=previous
    )


async def _lock(conn: Conn, directory: Directory) -> None:
    """The account lock every membership writer holds (404 when the account is gone)."""
    await lock_live_account(conn, directory.account_id)


def _columns(resource: Any) -> queries.UserFields:
    return {
        "user_name": resource.user_name,
        "user_name_key": scim.comparison_key(resource.user_name),
        "external_id": resource.external_id,
        "active": resource.active is not False,
        "resource": scim.stored(resource),
    }


async def _link(conn: Conn, directory: Directory, email: str, resource: Any) -> uuid.UUID:
    """The tenantd user the directory user stands for (linked or created); one per directory."""
    user_id, created = await _tenantd_user(conn, directory, email=email, resource=resource)
    if await queries.user_of(conn, directory_id=directory.id, user_id=user_id) is not None:
        raise ScimError(409, f"{email} is already a user of this directory", "uniqueness")
    await _audit(conn, directory, "directory.user.linked", user_id, {"created": created})
    return user_id


async def create_user(services: Directories, directory: Directory, resource: Any) -> Row:
    """POST /Users: link or create the user and make it a member (when active)."""
    email = address_of(resource)
    columns = _columns(resource)
    async with services.db.transaction() as conn:
        await _lock(conn, directory)
        taken = await queries.find_resources(
            conn, queries.USERS, directory_id=directory.id, key=columns["user_name_key"]
        )
        if taken:
            raise ScimError(409, "userName is already in use in this directory", "uniqueness")
        user_id = await _link(conn, directory, email, resource) if email is not None else None
        row = await queries.insert_user(
            conn, directory_id=directory.id, user_id=user_id, fields=columns
        )
        if row is None:
            raise ScimError(409, "userName is already in use in this directory", "uniqueness")
        if row["active"]:
            await _join(conn, directory, row)
        await _user_changed(conn, directory, "directory.user.created", row)
        return row


def _text(value: uuid.UUID | None) -> str | None:
    return str(value) if value is not None else None


async def _write_user(conn: Conn, directory: Directory, before: Row, resource: Any) -> Row:
    """Store the new state of a user and apply what `active` changed."""
    columns = _columns(resource)
    user_id = before["user_id"]
    if user_id is None:
        email = address_of(resource)
        if email is not None:
            user_id = await _link(conn, directory, email, resource)
    after = await queries.update_user(conn, scim_id=before["id"], user_id=user_id, fields=columns)
    if after is None:
        raise ScimError(409, "userName is already in use in this directory", "uniqueness")
    if before["user_id"] is None and after["user_id"] is not None and after["active"]:
        await _join(conn, directory, after)
        action = "directory.user.updated"
    elif before["active"] and not after["active"]:
        await _leave(conn, directory, after, reason="directory_deactivated")
        action = "directory.user.deactivated"
    elif after["active"] and not before["active"]:
        await _join(conn, directory, after)
        action = "directory.user.reactivated"
    else:
        action = "directory.user.updated"
    changed = {
        key: before[key]
        for key in ("user_name", "external_id", "active")
        if before[key] != after[key]
    }
    previous = {_camel(key): value for key, value in changed.items()}
    await _user_changed(conn, directory, action, after, "directory.user.updated", previous)
    return after


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


async def _found(
    conn: Conn, directory: Directory, table: queries.Table, scim_id: str, *, lock: bool
) -> Row:
    """The directory's user or group `scim_id` (a SCIM 404 when there is none)."""
    parsed = parse_id(scim_id)
    row = (
        await queries.get_resource(
            conn, table, directory_id=directory.id, scim_id=parsed, lock=lock
        )
        if parsed is not None
        else None
    )
    if row is None:
        raise not_found("User" if table is queries.USERS else "Group", scim_id)
    return row


async def _lock_found(conn: Conn, directory: Directory, table: queries.Table, scim_id: str) -> Row:
    """The account lock, then the user or group `scim_id` FOR UPDATE: every write of a stored
    resource takes the two in this order."""
    await _lock(conn, directory)
    return await _found(conn, directory, table, scim_id, lock=True)


async def delete_user(services: Directories, directory: Directory, scim_id: str) -> None:
    """DELETE /Users/{id}: the user leaves the directory and the account at once (the
    tenantd user itself stays: it may belong to other accounts)."""
    async with services.db.transaction() as conn:
        row = await _lock_found(conn, directory, queries.USERS, scim_id)
        if row["active"]:
            await _leave(conn, directory, row, reason="directory_deleted")
        await queries.delete_resource(conn, queries.USERS, row["id"])
        await _user_changed(conn, directory, "directory.user.deleted", row)


async def user_resources(conn: Conn, rows: list[Row], base: str) -> list[Any]:
    groups = await queries.groups_of_users(conn, [row["id"] for row in rows])
    return [scim.user_resource(row, groups.get(row["id"], []), base) for row in rows]


# -- groups -------------------------------------------------------------------------------------


async def _members_of(conn: Conn, group_id: uuid.UUID) -> list[uuid.UUID]:
    found = await queries.members_of_groups(conn, [group_id])
    return [row["id"] for row in found.get(group_id, [])]


async def _settle_roles(conn: Conn, directory: Directory, scim_ids: Iterable[uuid.UUID]) -> None:
    """The active members touched by a mapped group's change get their mapped role."""
    actor = events.actor(directory.id)
    for scim_id in sorted(set(scim_ids)):
        row = await queries.get_resource(
            conn, queries.USERS, directory_id=directory.id, scim_id=scim_id
        )
        if row is None or not row["active"] or row["user_id"] is None:
            continue
        current = await memberships.active_membership(
            conn, account_id=directory.account_id, user_id=row["user_id"]
        )
        if current is None:
            continue
        role = _role_of(await queries.mapped_roles(conn, scim_id))
        await memberships.set_member_role(
            conn, membership=current, role=role, actor=actor, via=directory.via
        )


async def _set_members(
    conn: Conn, directory: Directory, group: Row, wanted: dict[uuid.UUID, str | None]
) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    """Make the group's members `wanted` (each one of the directory's users, with its
    display); (before, after)."""
    known = await queries.existing_users(conn, directory_id=directory.id, scim_ids=list(wanted))
    unknown = [str(member) for member in wanted if member not in known]
    if unknown:
        raise ScimError(400, f"no user {', '.join(unknown)} in this directory", "invalidValue")
    before = await _members_of(conn, group["id"])
    added = [member for member in wanted if member not in before]
    removed = [member for member in before if member not in wanted]
    if wanted:
        await queries.set_member_displays(conn, group_id=group["id"], displays=wanted)
    if removed:
        await queries.remove_members(conn, group_id=group["id"], scim_ids=removed)
    if group["role"] is not None:
        await _settle_roles(conn, directory, [*added, *removed])
    return before, list(wanted)


def _group_columns(resource: Group) -> queries.GroupFields:
    if not resource.display_name:
        raise ScimError(400, "displayName is required", "invalidValue")
    return {
        "display_name": resource.display_name,
        "display_name_key": scim.comparison_key(resource.display_name),
        "external_id": resource.external_id,
        "resource": scim.stored(resource),
    }


async def create_group(services: Directories, directory: Directory, resource: Group) -> Row:
    """POST /Groups."""
    columns = _group_columns(resource)
    wanted = scim.members_of(resource)
    async with services.db.transaction() as conn:
        await _lock(conn, directory)
        row = await queries.insert_group(conn, directory_id=directory.id, fields=columns)
        await _set_members(conn, directory, row, wanted)
        await _group_changed(conn, directory, "directory.group.created", row, list(wanted))
        return row


async def _write_group(conn: Conn, directory: Directory, before: Row, resource: Group) -> Row:
    columns = _group_columns(resource)
    wanted = scim.members_of(resource)
    after = await queries.update_group(conn, group_id=before["id"], fields=columns)
    previous_members, members = await _set_members(conn, directory, after, wanted)
    previous: dict[str, Any] = {}
    if before["display_name"] != after["display_name"]:
        previous["displayName"] = before["display_name"]
    if previous_members != members:
        previous["members"] = [str(member) for member in previous_members]
    await _group_changed(conn, directory, "directory.group.updated", after, members, previous)
    return after


async def delete_group(services: Directories, directory: Directory, group_id: str) -> None:
    """DELETE /Groups/{id}: its members lose the role it mapped to."""
    async with services.db.transaction() as conn:
        row = await _lock_found(conn, directory, queries.GROUPS, group_id)
        members = await _members_of(conn, row["id"])
        await queries.delete_resource(conn, queries.GROUPS, row["id"])
        if row["role"] is not None:
            await _settle_roles(conn, directory, members)
        await _group_changed(conn, directory, "directory.group.deleted", row, [])


async def map_group_locked(
    conn: Conn,
    directory: Directory,
    *,
    group_id: uuid.UUID,
    role: str | None,
    actor_user_id: uuid.UUID | None,
) -> Row:
    """Map a group to a role key (None: unmapped); its active members' roles follow."""
    before = await queries.get_resource(
        conn, queries.GROUPS, directory_id=directory.id, scim_id=group_id, lock=True
    )
    if before is None:
        raise NotFound("No group of this directory has this id")
    if before["role"] == role:
        return before
    after = await queries.set_group_role(conn, group_id=group_id, role=role)
    members = await _members_of(conn, group_id)
    await _settle_roles(conn, directory, members)
    await _audit(
        conn,
        directory,
        "directory.group.role_mapped",
        group_id,
        {"from": before["role"], "to": role},
        actor_user_id=actor_user_id,
    )
    await events.group_changed(
        conn,
        "directory.group.updated",
        after,
        account_id=directory.account_id,
        members=members,
        previous={"role": before["role"]},
    )
    return after


async def group_resources(conn: Conn, rows: list[Row], base: str) -> list[Group]:
    members = await queries.members_of_groups(conn, [row["id"] for row in rows])
    return [scim.group_resource(row, members.get(row["id"], []), base) for row in rows]


# -- lists --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    resources: list[Any]
    total: int
    start: int  # 1-based


def _narrowing(search: SearchRequest[Any], endpoint: Endpoint) -> tuple[str | None, str | None]:
    """(key, externalId) narrowing the rows by the filter's one `eq` comparison, if any."""
    equality = scim.equality(search)
    if equality is None:
        return None, None
    if equality[0] == "externalid":
        return None, equality[1]
    if equality[0] == endpoint.key_attribute:
        return scim.comparison_key(equality[1]), None
    return None, None


def _page_bounds(search: SearchRequest[Any]) -> tuple[int, int]:
    """(offset, limit) of the asked page, at most MAX_RESULTS items."""
    offset = search.start_index_0 or 0
    count = search.count if search.count is not None else scim.MAX_RESULTS
    return offset, max(0, min(count, scim.MAX_RESULTS))


async def list_resources(
    services: Directories,
    directory: Directory,
    endpoint: str,
    search: SearchRequest[Any],
    base: str,
) -> Page:
    """GET /Users or /Groups: filtered (any filter; `userName eq`, `displayName eq` and
    `externalId eq` by index), sorted and paged (startIndex, count)."""
    kind = ENDPOINTS[endpoint]
    offset, limit = _page_bounds(search)
    async with services.db.connection() as conn:
        if search.filter is None and search.sort_by is None:
            total = await queries.count_resources(conn, kind.table, directory.id)
            rows = await queries.find_resources(
                conn, kind.table, directory_id=directory.id, offset=offset, limit=limit
            )
            return Page(await kind.resources(conn, rows, base), total, offset + 1)
        key, external_id = _narrowing(search, kind)
        rows = await queries.find_resources(
            conn, kind.table, directory_id=directory.id, key=key, external_id=external_id
        )
        resources = await kind.resources(conn, rows, base)
    return _select(resources, search, offset, limit)


async def search_all(
    services: Directories, directory: Directory, search: SearchRequest[Any], base: str
) -> Page:
    """POST /.search: Users, then Groups, filtered, sorted and paged as one list."""
    offset, limit = _page_bounds(search)
    async with services.db.connection() as conn:
        users = await queries.find_resources(conn, queries.USERS, directory_id=directory.id)
        groups = await queries.find_resources(conn, queries.GROUPS, directory_id=directory.id)
        resources = [
            *(await user_resources(conn, users, base)),
            *(await group_resources(conn, groups, base)),
        ]
    return _select(resources, search, offset, limit)


def _select(resources: list[Any], search: SearchRequest[Any], offset: int, limit: int) -> Page:
    """The filter decides (the database only narrowed), then the sort and the page."""
    if search.filter is not None:
        resources = [item for item in resources if search.filter.match(item)]
    if search.sort_by is not None:
        resources = search.sort(resources)
    return Page(resources[offset : offset + limit], len(resources), offset + 1)


# -- one action per SCIM write, by endpoint (Users or Groups) -----------------------------------


async def _patchable_user(conn: Conn, row: Row, base: str) -> Any:
    """The User a PATCH applies to: its stored attributes (groups are read-only)."""
    return scim.user_resource(row, [], base)


async def _patchable_group(conn: Conn, row: Row, base: str) -> Any:
    """The Group a PATCH applies to, with its members."""
    return (await group_resources(conn, [row], base))[0]


@dataclass(frozen=True)
class Endpoint:
    """What differs between /Users and /Groups: the table, the model, the attribute its
    comparison key narrows by, and the rules of each write."""

    table: queries.Table
    model: type[Any]
    key_attribute: str  # lower-cased, as scim.equality gives it
    resources: Callable[[Conn, list[Row], str], Awaitable[list[Any]]]
    create: Callable[[Directories, Directory, Any], Awaitable[Row]]
    write: Callable[[Conn, Directory, Row, Any], Awaitable[Row]]
    patchable: Callable[[Conn, Row, str], Awaitable[Any]]
    delete: Callable[[Directories, Directory, str], Awaitable[None]]


ENDPOINTS = {
    "Users": Endpoint(
        queries.USERS,
        scim.UserResource,
        "username",
        user_resources,
        create_user,
        _write_user,
        _patchable_user,
        delete_user,
    ),
    "Groups": Endpoint(
        queries.GROUPS,
        Group,
        "displayname",
        group_resources,
        create_group,
        _write_group,
        _patchable_group,
        delete_group,
    ),
}


async def read_resource(
    services: Directories, directory: Directory, endpoint: str, scim_id: str, base: str
) -> Any:
    """The User or Group `scim_id` of `endpoint` as a SCIM resource."""
    kind = ENDPOINTS[endpoint]
    async with services.db.connection() as conn:
        row = await _found(conn, directory, kind.table, scim_id, lock=False)
        return (await kind.resources(conn, [row], base))[0]


async def create_resource(
    services: Directories, directory: Directory, endpoint: str, payload: Any, base: str
) -> Any:
    """Create the User or Group a POST body describes; its SCIM resource, as stored."""
    kind = ENDPOINTS[endpoint]
    resource = scim.read_resource(payload, kind.model, Context.RESOURCE_CREATION_REQUEST)
    row = await kind.create(services, directory, resource)
    return await read_resource(services, directory, endpoint, str(row["id"]), base)


async def replace_resource(
    services: Directories,
    directory: Directory,
    endpoint: str,
    scim_id: str,
    payload: Any,
    base: str,
) -> Any:
    """PUT: the User or Group as given replaces the stored one; its SCIM resource afterwards."""
    kind = ENDPOINTS[endpoint]
    resource = scim.read_resource(payload, kind.model, Context.RESOURCE_REPLACEMENT_REQUEST)
    async with services.db.transaction() as conn:
        before = await _lock_found(conn, directory, kind.table, scim_id)
        await kind.write(conn, directory, before, resource)
    return await read_resource(services, directory, endpoint, scim_id, base)


async def patch_resource(
    services: Directories,
    directory: Directory,
    endpoint: str,
    scim_id: str,
    payload: Any,
    base: str,
) -> Any:
    """PATCH: RFC 7644 operations (for Groups, members added, removed by filter or value)
    applied to the stored User or Group; its SCIM resource afterwards."""
    kind = ENDPOINTS[endpoint]
    patch = scim.read_patch(payload, kind.model)
    async with services.db.transaction() as conn:
        before = await _lock_found(conn, directory, kind.table, scim_id)
        resource = await kind.patchable(conn, before, base)
        try:
            changed = patch.patch(resource, scim_policy=scim.POLICY)
        except SCIMException as error:
            raise ScimError(error.status, str(error), error.scim_type or None) from None
        if changed:
            await kind.write(conn, directory, before, resource)
    return await read_resource(services, directory, endpoint, scim_id, base)


async def delete_resource(
    services: Directories, directory: Directory, endpoint: str, scim_id: str
) -> None:
    """DELETE a User (its membership and sessions end at once) or a Group."""
    await ENDPOINTS[endpoint].delete(services, directory, scim_id)
