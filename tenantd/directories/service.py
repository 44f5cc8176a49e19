"""Directories: an account's SCIM connections (owner or admin), each with a bearer token shown
once and stored as an HMAC of SECRET_KEY, like every token tenantd issues."""

from __future__ import annotations

import hmac
import re
import secrets
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tenantd import audit
from tenantd.accounts import roles
from tenantd.accounts.service import check_permitted, lock_live_account, lock_scoped, read_scoped
from tenantd.db import Conn, Row
from tenantd.directories import queries, sync
from tenantd.directories.domain import Directories
from tenantd.errors import NotFound, ValidationFailed
from tenantd.identity import permissions
from tenantd.identity.tokens import token_hash
from tenantd.web.schemas import control_character_fields

if TYPE_CHECKING:
    from tenantd.principal import Principal

TOKEN_PREFIX = "scim_"
NAME_MAX = 100
TOUCH_EVERY_SECONDS = 60.0  # last_used_at is written at most this often per directory
# Role keys a group may map to: the system roles below the owner (the owner changes only by
# transfer). A role key of the account's own roles is a plain string too.
ROLE_KEY = re.compile(r"[a-z0-9_.:-]{1,64}")


@dataclass(frozen=True)
class Created:
    directory: Row
    token: str  # shown once; only its hash is kept


def _check_name(name: str | None) -> str:
    name = (name or "").strip()
    if len(name) > NAME_MAX:
        raise ValidationFailed({"name": f"at most {NAME_MAX} characters"})
    if control_character_fields([("name", name)]):
        raise ValidationFailed({"name": "must not contain control characters"})
    return name


async def create_directory_locked(
    conn: Conn,
    *,
    secret_key: str,
    account_id: uuid.UUID,
    name: str | None,
    created_by: uuid.UUID | None,
    via: dict[str, str] | None = None,
) -> Created:
    """A new directory of the (locked, live) account and its token (`via` goes into the audit
    entry's data: the admin portal names itself and its link)."""
    directory_id = uuid.uuid4()
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = await queries.insert_directory(
        conn,
        directory_id=directory_id,
        account_id=account_id,
        name=_check_name(name),
        token_hash=token_hash(secret_key, token),
        created_by=created_by,
    )
    await audit.record(
        conn,
        account_id=account_id,
        actor_user_id=created_by,
        action="directory.created",
        target=str(directory_id),
        data={"name": row["name"], **(via or {})},
    )
    return Created(directory=row, token=token)


async def create_directory(
    services: Directories, actor: Principal, account_id: uuid.UUID, *, name: str | None
) -> Created:
    """Owner or admin: a new SCIM directory; its bearer token is answered once."""
    async with services.db.transaction() as conn:
        await lock_scoped(conn, actor, account_id, permissions.DIRECTORIES_MANAGE)
        return await create_directory_locked(
            conn,
            secret_key=services.settings.secret_key,
            account_id=account_id,
            name=name,
            created_by=actor.user_id,
        )


async def create_directory_as_operator(
    services: Directories, account_id: uuid.UUID, *, name: str | None
) -> Created:
    """The CLI's door: a directory of a live account, no session."""
    return await _create_in_live_account(services, account_id, name=name, via=None)


async def _create_in_live_account(
    services: Directories, account_id: uuid.UUID, *, name: str | None, via: dict[str, str] | None
) -> Created:
    """A directory of a live account, created by no user (the CLI or the admin portal)."""
    async with services.db.transaction() as conn:
        await lock_live_account(conn, account_id)
        return await create_directory_locked(
            conn,
            secret_key=services.settings.secret_key,
            account_id=account_id,
            name=name,
            created_by=None,
            via=via,
        )


async def create_directory_in_portal(
    services: Directories, account_id: uuid.UUID, *, name: str | None, link_id: uuid.UUID
) -> Created:
    """The admin portal's door: a directory of its session's (live) account; the token is
    shown once on the portal's page."""
    via = {"via": "admin_portal", "portalLinkId": str(link_id)}
    return await _create_in_live_account(services, account_id, name=name, via=via)


async def account_directories(services: Directories, account_id: uuid.UUID) -> list[Row]:
    """The account's directories for the admin portal (its session is the check)."""
    async with services.db.connection() as conn:
        return await queries.list_directories(conn, account_id)


async def list_directories(
    services: Directories, actor: Principal, account_id: uuid.UUID
) -> list[Row]:
    """The account's directories (owner or admin); never a token."""
    return await read_scoped(
        services, actor, account_id, permissions.DIRECTORIES_MANAGE, queries.list_directories
    )


async def delete_directory(
    services: Directories, actor: Principal, account_id: uuid.UUID, *, directory_id: uuid.UUID
) -> None:
    """Owner or admin: remove a directory and its token (its users keep their memberships;
    nothing is synced any more)."""
    async with services.db.transaction() as conn:
        await lock_scoped(conn, actor, account_id, permissions.DIRECTORIES_MANAGE)
        if not await queries.delete_directory(
            conn, account_id=account_id, directory_id=directory_id
        ):
            raise NotFound("No directory of this account has this id")
        await audit.record(
            conn,
            account_id=account_id,
            actor_user_id=actor.user_id,
            action="directory.deleted",
            target=str(directory_id),
        )


def check_role_key(role: str | None) -> str | None:
    """The form of a role a group may map to: a role key other than `owner`, or None (that
    it is a role of the account is checked under the account lock, `map_group`)."""
    if role is None:
        return None
    if not ROLE_KEY.fullmatch(role) or role == "owner":
        raise ValidationFailed({"role": "a role key of the account other than owner, or null"})
    return role


async def list_groups(
    services: Directories, actor: Principal, account_id: uuid.UUID, *, directory_id: uuid.UUID
) -> list[Row]:
    """A directory's groups with the role each maps to (owner or admin)."""
    async with services.db.connection() as conn:
        await check_permitted(conn, actor, account_id, permissions.DIRECTORIES_MANAGE)
        await _own_directory(conn, account_id, directory_id)
        return await queries.find_resources(conn, queries.GROUPS, directory_id=directory_id)


async def _own_directory(conn: Conn, account_id: uuid.UUID, directory_id: uuid.UUID) -> None:
    found = await queries.directory_credentials(conn, directory_id)
    if found is None or found["account_id"] != account_id:
        raise NotFound("No directory of this account has this id")


async def map_group(
    services: Directories,
    actor: Principal,
    account_id: uuid.UUID,
    *,
    directory_id: uuid.UUID,
    group_id: uuid.UUID,
    role: str | None,
) -> Row:
    """Owner or admin: members of the group get `role` (None: the mapping is removed); the
    active members' roles follow at once."""
    checked = check_role_key(role)
    async with services.db.transaction() as conn:
        account = await lock_scoped(conn, actor, account_id, permissions.DIRECTORIES_MANAGE)
        if checked is not None:
            # a role of the account (admin, member, a custom role), no wider than the caller's
            await roles.assignable(conn, account, checked)
        await _own_directory(conn, account_id, directory_id)
        directory = sync.Directory(id=directory_id, account_id=account_id)
        return await sync.map_group_locked(
            conn, directory, group_id=group_id, role=checked, actor_user_id=actor.user_id
        )


async def authenticate(
    services: Directories, directory_id: uuid.UUID, token: str | None
) -> sync.Directory:
    """The directory a bearer token opens, or ScimError 401 (none, wrong, deleted)."""
    if not token:
        raise sync.unauthorized()
    async with services.db.connection() as conn:
        found = await queries.directory_credentials(conn, directory_id)
        if found is None or not hmac.compare_digest(
            bytes(found["token_hash"]), token_hash(services.settings.secret_key, token)
        ):
            raise sync.unauthorized()
        used = found["last_used_at"]
        if used is None or time.time() - used.timestamp() > TOUCH_EVERY_SECONDS:
            await queries.touch_directory(conn, directory_id, every_seconds=TOUCH_EVERY_SECONDS)
    return sync.Directory(id=directory_id, account_id=found["account_id"])
