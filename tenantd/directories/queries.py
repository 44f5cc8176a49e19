"""Statements of directory sync (sql/0350): directories, their users, groups and group members.
Every function takes the connection its caller's transaction runs on."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from tenantd.db import Conn, Row
from tenantd.db.fetch import fetch_column, fetch_row
from tenantd.db.predicates import affected

DIRECTORY_COLUMNS = "id, account_id, name, created_by, created_at, last_used_at"
USER_COLUMNS = (
    "id, directory_id, user_id, user_name, external_id, active, resource, version,"
    " created_at, updated_at"
)
GROUP_COLUMNS = (
    "id, directory_id, display_name, external_id, role, resource, version, created_at, updated_at"
)


@dataclass(frozen=True)
class Table:
    """A SCIM resource's table: its columns and the comparison-key column it is found by."""

    name: str
    columns: str
    key: str


USERS = Table("directory_users", USER_COLUMNS, "user_name_key")
GROUPS = Table("directory_groups", GROUP_COLUMNS, "display_name_key")


def _placeholders(columns: Sequence[str]) -> str:
    """`%(c)s, …`: each column's value, from the parameter of its name."""
    return ", ".join(f"%({column})s" for column in columns)


def _assignments(columns: Sequence[str]) -> str:
    """`c = %(c)s, …`: each column set from the parameter of its name."""
    return ", ".join(f"{column} = %({column})s" for column in columns)


def _by(rows: list[Row], key: str) -> dict[uuid.UUID, list[Row]]:
    """The rows grouped by their `key` column, in their order."""
    found: dict[uuid.UUID, list[Row]] = {}
    for row in rows:
        found.setdefault(row[key], []).append(row)
    return found


# -- directories --------------------------------------------------------------------------------


async def insert_directory(
    conn: Conn,
    *,
    directory_id: uuid.UUID,
    account_id: uuid.UUID,
    name: str,
    token_hash: bytes,
    created_by: uuid.UUID | None,
) -> Row:
    return await fetch_row(
        conn,
        "INSERT INTO directories (id, account_id, name, token_hash, created_by)"
        " VALUES (%(id)s, %(a)s, %(n)s, %(h)s, %(by)s)"
        f" RETURNING {DIRECTORY_COLUMNS}",
        {"id": directory_id, "a": account_id, "n": name, "h": token_hash, "by": created_by},
    )


async def list_directories(conn: Conn, account_id: uuid.UUID) -> list[Row]:
    return await conn.fetch_all(
        f"SELECT {DIRECTORY_COLUMNS},"
        " (SELECT count(*) FROM directory_users u WHERE u.directory_id = d.id) AS users,"
        " (SELECT count(*) FROM directory_groups g WHERE g.directory_id = d.id) AS groups"
        " FROM directories d WHERE account_id = %(a)s ORDER BY created_at, id",
        {"a": account_id},
    )


async def delete_directory(conn: Conn, *, account_id: uuid.UUID, directory_id: uuid.UUID) -> bool:
    return await affected(
        conn,
        "DELETE FROM directories WHERE id = %(id)s AND account_id = %(a)s",
        {"id": directory_id, "a": account_id},
    )


async def directory_credentials(conn: Conn, directory_id: uuid.UUID) -> Row | None:
    """The directory's token hash and account (live accounts only)."""
    return await conn.fetch_one(
        "SELECT d.id, d.account_id, d.token_hash, d.last_used_at"
        " FROM directories d JOIN accounts a ON a.id = d.account_id"
        " WHERE d.id = %(id)s AND a.deleted_at IS NULL",
        {"id": directory_id},
    )


async def touch_directory(conn: Conn, directory_id: uuid.UUID, *, every_seconds: float) -> None:
    await conn.execute(
        "UPDATE directories SET last_used_at = now() WHERE id = %(id)s AND"
        " (last_used_at IS NULL OR last_used_at < now() - make_interval(secs => %(s)s))",
        {"id": directory_id, "s": every_seconds},
    )


# -- users and groups, by table ------------------------------------------------------------------


async def get_resource(
    conn: Conn, table: Table, *, directory_id: uuid.UUID, scim_id: uuid.UUID, lock: bool = False
) -> Row | None:
    """The directory's user or group `scim_id` (locked FOR UPDATE when `lock`)."""
    return await conn.fetch_one(
        f"SELECT {table.columns} FROM {table.name} WHERE id = %(id)s AND directory_id = %(d)s"
        + (" FOR UPDATE" if lock else ""),
        {"id": scim_id, "d": directory_id},
    )


async def find_resources(
    conn: Conn,
    table: Table,
    *,
    directory_id: uuid.UUID,
    key: str | None = None,
    external_id: str | None = None,
    offset: int | None = None,
    limit: int | None = None,
) -> list[Row]:
    """The directory's users or groups in creation order, narrowed by their comparison key
    (userName, displayName) or externalId."""
    where = ["directory_id = %(d)s"]
    if key is not None:
        where.append(f"{table.key} = %(k)s")
    if external_id is not None:
        where.append("external_id = %(x)s")
    return await conn.fetch_all(
        f"SELECT {table.columns} FROM {table.name} WHERE {' AND '.join(where)}"
        " ORDER BY created_at, id OFFSET %(o)s LIMIT %(l)s",
        {"d": directory_id, "k": key, "x": external_id, "o": offset, "l": limit},
    )


async def count_resources(conn: Conn, table: Table, directory_id: uuid.UUID) -> int:
    count: int = await conn.fetch_val(
        f"SELECT count(*) FROM {table.name} WHERE directory_id = %(d)s", {"d": directory_id}
    )
    return count


async def delete_resource(conn: Conn, table: Table, scim_id: uuid.UUID) -> None:
    await conn.execute(f"DELETE FROM {table.name} WHERE id = %(id)s", {"id": scim_id})


# -- users --------------------------------------------------------------------------------------


class UserFields(TypedDict):
    """The columns a SCIM User writes (sync._columns)."""

    user_name: str
    user_name_key: str
    external_id: str | None
    active: bool
    resource: dict[str, Any]


# What insert_user and update_user write: the tenantd user linked, then the SCIM fields.
USER_WRITES = ("user_id", *UserFields.__annotations__)


async def insert_user(
    conn: Conn, *, directory_id: uuid.UUID, user_id: uuid.UUID | None, fields: UserFields
) -> Row | None:
    """A new directory user; None when the userName (or the tenantd user) is already there."""
    return await conn.fetch_one(
        f"INSERT INTO directory_users (directory_id, {', '.join(USER_WRITES)})"
        f" VALUES (%(d)s, {_placeholders(USER_WRITES)})"
        f" ON CONFLICT DO NOTHING RETURNING {USER_COLUMNS}",
        {"d": directory_id, "user_id": user_id, **fields},
    )


async def update_user(
    conn: Conn, *, scim_id: uuid.UUID, user_id: uuid.UUID | None, fields: UserFields
) -> Row | None:
    """Write the new state; None when the new userName is another user's."""
    return await conn.fetch_one(
        f"UPDATE directory_users SET {_assignments(USER_WRITES)},"
        " version = version + 1, updated_at = now()"
        " WHERE id = %(id)s AND NOT EXISTS (SELECT 1 FROM directory_users o"
        "  WHERE o.directory_id = directory_users.directory_id"
        "  AND o.user_name_key = %(user_name_key)s AND o.id <> %(id)s)"
        f" RETURNING {USER_COLUMNS}",
        {"id": scim_id, "user_id": user_id, **fields},
    )


async def user_of(conn: Conn, *, directory_id: uuid.UUID, user_id: uuid.UUID) -> Row | None:
    """The directory's user linked to this tenantd user."""
    return await conn.fetch_one(
        f"SELECT {USER_COLUMNS} FROM directory_users"
        " WHERE directory_id = %(d)s AND user_id = %(u)s",
        {"d": directory_id, "u": user_id},
    )


async def user_is_live(conn: Conn, user_id: uuid.UUID) -> bool:
    """The tenantd user exists and has not deleted itself."""
    live = await conn.fetch_val(
        "SELECT deleted_at IS NULL FROM users WHERE id = %(u)s", {"u": user_id}
    )
    return bool(live)


async def groups_of_users(conn: Conn, scim_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, list[Row]]:
    """The groups each directory user is a member of: {user: [{id, display_name}]}."""
    rows = await conn.fetch_all(
        "SELECT m.member_id, g.id, g.display_name FROM directory_group_members m"
        " JOIN directory_groups g ON g.id = m.group_id WHERE m.member_id = ANY(%(ids)s)"
        " ORDER BY g.display_name_key, g.id",
        {"ids": list(scim_ids)},
    )
    return _by(rows, "member_id")


async def mapped_roles(conn: Conn, scim_id: uuid.UUID) -> list[str]:
    """The role keys of the mapped groups the directory user is a member of."""
    return await fetch_column(
        conn,
        "SELECT DISTINCT g.role FROM directory_group_members m"
        " JOIN directory_groups g ON g.id = m.group_id"
        " WHERE m.member_id = %(id)s AND g.role IS NOT NULL",
        {"id": scim_id},
    )


# -- groups -------------------------------------------------------------------------------------


class GroupFields(TypedDict):
    """The columns a SCIM Group writes (sync._group_columns)."""

    display_name: str
    display_name_key: str
    external_id: str | None
    resource: dict[str, Any]


GROUP_WRITES = tuple(GroupFields.__annotations__)


async def insert_group(conn: Conn, *, directory_id: uuid.UUID, fields: GroupFields) -> Row:
    return await fetch_row(
        conn,
        f"INSERT INTO directory_groups (directory_id, {', '.join(GROUP_WRITES)})"
        f" VALUES (%(d)s, {_placeholders(GROUP_WRITES)}) RETURNING {GROUP_COLUMNS}",
        {"d": directory_id, **fields},
    )


async def update_group(conn: Conn, *, group_id: uuid.UUID, fields: GroupFields) -> Row:
    return await fetch_row(
        conn,
        f"UPDATE directory_groups SET {_assignments(GROUP_WRITES)},"
        " version = version + 1, updated_at = now()"
        f" WHERE id = %(id)s RETURNING {GROUP_COLUMNS}",
        {"id": group_id, **fields},
    )


async def set_group_role(conn: Conn, *, group_id: uuid.UUID, role: str | None) -> Row:
    return await fetch_row(
        conn,
        f"UPDATE directory_groups SET role = %(r)s, updated_at = now() WHERE id = %(id)s"
        f" RETURNING {GROUP_COLUMNS}",
        {"id": group_id, "r": role},
    )


async def members_of_groups(
    conn: Conn, group_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[Row]]:
    """Each group's members: {group: [{id, user_name, display}]}."""
    rows = await conn.fetch_all(
        "SELECT m.group_id, u.id, u.user_name,"
        " COALESCE(m.display, u.resource->>'displayName', u.user_name) AS display"
        " FROM directory_group_members m JOIN directory_users u ON u.id = m.member_id"
        " WHERE m.group_id = ANY(%(ids)s) ORDER BY u.created_at, u.id",
        {"ids": list(group_ids)},
    )
    return _by(rows, "group_id")


async def existing_users(
    conn: Conn, *, directory_id: uuid.UUID, scim_ids: Sequence[uuid.UUID]
) -> set[uuid.UUID]:
    return set(
        await fetch_column(
            conn,
            "SELECT id FROM directory_users WHERE directory_id = %(d)s AND id = ANY(%(ids)s)",
            {"d": directory_id, "ids": list(scim_ids)},
        )
    )


async def set_member_displays(
    conn: Conn, *, group_id: uuid.UUID, displays: dict[uuid.UUID, str | None]
) -> None:
    """Add the members (or update their display), each with the display the provider gave."""
    ids = list(displays)
    await conn.execute(
        "INSERT INTO directory_group_members (group_id, member_id, display)"
        " SELECT %(g)s, m, d FROM unnest(%(ids)s::uuid[], %(ds)s::text[]) AS t(m, d)"
        " ON CONFLICT (group_id, member_id) DO UPDATE SET display = EXCLUDED.display"
        " WHERE directory_group_members.display IS DISTINCT FROM EXCLUDED.display",
        {"g": group_id, "ids": ids, "ds": [displays[i] for i in ids]},
    )


async def remove_members(conn: Conn, *, group_id: uuid.UUID, scim_ids: Sequence[uuid.UUID]) -> None:
    await conn.execute(
        "DELETE FROM directory_group_members WHERE group_id = %(g)s AND member_id = ANY(%(ids)s)",
        {"g": group_id, "ids": list(scim_ids)},
    )
