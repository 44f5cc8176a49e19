"""Custom roles: list (system roles too), create, change, delete; and which role may be given.

A custom role is a key of the account (`[a-z][a-z0-9_-]*`, never owner, admin or member), a
name and a list of permissions (tenantd/identity/permissions.py). Owners and admins manage
them (`roles:manage`); a custom role holding `roles:manage` or `members:change_role` hands out
no permission it lacks itself. Every change holds the account lock (as role assignment does),
writes an audit row and a `role.*` event; the principal and /me caches drop the account's principals
and bodies on commit (sql/0360).
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tenantd.accounts import events as outbox_events
from tenantd.accounts import queries
from tenantd.accounts.errors import RoleExists, RoleInUse, SystemRole
from tenantd.accounts.service import lock_scoped, read_scoped
from tenantd.accounts.settings import AccountSettings
from tenantd.bundle import Services
from tenantd.db import Conn, Row
from tenantd.errors import Forbidden, NotFound, ValidationFailed
from tenantd.identity import permissions

if TYPE_CHECKING:
    from tenantd.principal import Principal

SYSTEM_NAMES = {"owner": "Owner", "admin": "Admin", "member": "Member"}


@dataclass(frozen=True)
class Role:
    key: str
    name: str
    permissions: list[str]
    system: bool
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None


def _custom(row: Row) -> Role:
    return Role(
        key=row["key"],
        name=row["name"],
        permissions=list(row["permissions"]),
        system=False,
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def system_roles() -> list[Role]:
    return [
        Role(key=key, name=name, permissions=sorted(permissions.SYSTEM_ROLES[key]), system=True)
        for key, name in SYSTEM_NAMES.items()
    ]


async def roles_of(conn: Conn, account_id: uuid.UUID) -> list[Role]:
    """The system roles, then the account's custom roles by key."""
    return system_roles() + [_custom(row) for row in await queries.custom_roles(conn, account_id)]


async def list_roles(services: Services, actor: Principal, account_id: uuid.UUID) -> list[Role]:
    """Every role of the active account with its permissions (any member may read them)."""
    return await read_scoped(services, actor, account_id, permissions.MEMBERS_READ, roles_of)


def _checked_permissions(services: Services, wanted: list[str]) -> list[str]:
    """De-duplicated, in the order given; 422 with a field error per bad entry."""
    errors = permissions.problems(
        wanted, services.settings.section(AccountSettings).app_permissions
    )
    if errors:
        raise ValidationFailed(errors)
    return list(dict.fromkeys(wanted))


def _refuse_wider(account: Row, wanted: list[str]) -> None:
    """A custom role hands out only what it holds (owners and admins are trusted)."""
    if not permissions.covers(account["role"], account["role_permissions"], wanted):
        raise Forbidden(
            "You can hand out only permissions your own role holds",
            details={"permission": permissions.MEMBERS_CHANGE_ROLE},
        )


async def create_role(
    services: Services,
    actor: Principal,
    account_id: uuid.UUID,
    *,
    key: str,
    name: str,
    grants: list[str],
) -> Role:
    """A new custom role (owner or admin; 409 ROLE_EXISTS for a key the account has)."""
    if key in permissions.SYSTEM_ROLES:
        raise SystemRole()
    grants = _checked_permissions(services, grants)
    async with services.db.transaction() as conn:
        account = await lock_scoped(conn, actor, account_id, permissions.ROLES_MANAGE)
        _refuse_wider(account, grants)
        row = await queries.insert_role(
            conn, account_id=account_id, key=key, name=name, permissions=grants
        )
        if row is None:
            raise RoleExists(details={"key": key})
        data = {"name": name, "permissions": grants}
        await outbox_events.change(conn, "role.created", row, by=actor.user_id, data=data)
    return _custom(row)


async def _locked_custom(conn: Conn, account_id: uuid.UUID, key: str) -> Row:
    if key in permissions.SYSTEM_ROLES:
        raise SystemRole()
    row = await queries.custom_role(conn, account_id=account_id, key=key)
    if row is None:
        raise NotFound("No role with this key")
    return row


async def update_role(
    services: Services,
    actor: Principal,
    account_id: uuid.UUID,
    key: str,
    *,
    name: str | None,
    grants: list[str] | None,
    new_key: str | None = None,
) -> Role:
    """Rename a custom role and/or replace its permissions (owner or admin); its members
    hold the new set from their next request on. A key is never changed (`new_key`, when
    given, must be `key`)."""
    if new_key is not None and new_key != key:
        raise ValidationFailed({"key": "key_immutable: a role's key never changes"})
    if key in permissions.SYSTEM_ROLES:
        raise SystemRole()
    if grants is not None:
        grants = _checked_permissions(services, grants)
    async with services.db.transaction() as conn:
        account = await lock_scoped(conn, actor, account_id, permissions.ROLES_MANAGE)
        current = await _locked_custom(conn, account_id, key)
        _refuse_wider(account, list(current["permissions"]) + (grants or []))
        new_name = name if name is not None else current["name"]
        new_grants = grants if grants is not None else list(current["permissions"])
        if new_name == current["name"] and new_grants == list(current["permissions"]):
            return _custom(current)
        row = await queries.update_role(
            conn, account_id=account_id, key=key, name=new_name, permissions=new_grants
        )
        previous: dict[str, object] = {}
        if new_name != current["name"]:
            previous["name"] = current["name"]
        if new_grants != list(current["permissions"]):
            previous["permissions"] = list(current["permissions"])
        await outbox_events.change(
            conn,
            "role.updated",
            row,
            by=actor.user_id,
            data={"name": new_name, "permissions": new_grants, "previous": previous},
            previous=previous,
        )
    return _custom(row)


async def delete_role(
    services: Services, actor: Principal, account_id: uuid.UUID, key: str
) -> Role:
    """Delete a custom role nobody has (owner or admin): 409 ROLE_IN_USE while an active
    member or a pending invitation names it (details say how many)."""
    if key in permissions.SYSTEM_ROLES:
        raise SystemRole()
    async with services.db.transaction() as conn:
        account = await lock_scoped(conn, actor, account_id, permissions.ROLES_MANAGE)
        current = await _locked_custom(conn, account_id, key)
        _refuse_wider(account, list(current["permissions"]))
        use = await queries.role_use(conn, account_id=account_id, key=key)
        if use["members"] or use["invitations"]:
            raise RoleInUse(
                details={"members": int(use["members"]), "invitations": int(use["invitations"])}
            )
        await queries.delete_role(conn, account_id=account_id, key=key)
        await outbox_events.change(
            conn,
            "role.deleted",
            current,
            by=actor.user_id,
            data={"name": current["name"], "permissions": list(current["permissions"])},
        )
    return _custom(current)


async def assignable(conn: Conn, account: Row, key: str, *, field_name: str = "role") -> None:
    """Whether the locked `account`'s caller may give role `key` to someone: a role of the
    account (422 otherwise), never owner (that changes only by transfer), and for a custom
    role caller no wider than its own."""
    if key == "owner":
        raise ValidationFailed({field_name: "owner_by_transfer: use transfer-ownership"})
    if key in permissions.SYSTEM_ROLES:
        _refuse_wider(account, sorted(permissions.SYSTEM_ROLES[key]))
        return
    row = await queries.custom_role(conn, account_id=account["id"], key=key)
    if row is None:
        raise ValidationFailed({field_name: "unknown_role: not a role of this account"})
    _refuse_wider(account, list(row["permissions"]))


async def grants_of(conn: Conn, account_id: uuid.UUID, key: str) -> list[str]:
    """The permissions role `key` holds in the account (empty for an unknown key)."""
    if key in permissions.SYSTEM_ROLES:
        return sorted(permissions.SYSTEM_ROLES[key])
    row = await queries.custom_role(conn, account_id=account_id, key=key)
    return list(row["permissions"]) if row is not None else []


async def is_role_of(conn: Conn, account_id: uuid.UUID, key: str) -> bool:
    """Whether `key` names a role a membership may be given without an acting member (SSO
    just-in-time membership, a SCIM group mapping): admin, member or a custom role of the
    account; never owner."""
    if key in permissions.SYSTEM_ROLES:
        return key != "owner"
    return await queries.custom_role(conn, account_id=account_id, key=key) is not None
