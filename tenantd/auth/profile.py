"""The user's own names: `PATCH /api/v1/users/me {firstName?, lastName?}` and the profile page.

Names are single-line text (the request body refuses control characters and the line
separators), trimmed; an empty string clears a name. A change is announced as `user.updated`
with the previous values; the /me cache follows through the users trigger.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tenantd.bundle import Services
from tenantd.errors import NotFound
from tenantd.identity import queries
from tenantd.identity.events import user_changed

if TYPE_CHECKING:
    from tenantd.principal import Principal


@dataclass(frozen=True)
class Names:
    first_name: str
    last_name: str


async def update_names(
    services: Services,
    actor: Principal,
    *,
    first_name: str | None = None,
    last_name: str | None = None,
) -> Names:
    """Set the caller's first and/or last name (a name not given is kept)."""
    async with services.db.transaction() as conn:
        user = await queries.lock_user(conn, actor.user_id)
        if user is None or user.get("deleted_at") is not None:
            raise NotFound("User not found")
        before = Names(user["first_name"] or "", user["last_name"] or "")
        after = Names(
            before.first_name if first_name is None else first_name.strip(),
            before.last_name if last_name is None else last_name.strip(),
        )
        if after != before:
            await queries.set_names(
                conn, user_id=actor.user_id, first_name=after.first_name, last_name=after.last_name
            )
            previous = {
                key: old
                for key, old, new in (
                    ("firstName", before.first_name, after.first_name),
                    ("lastName", before.last_name, after.last_name),
                )
                if old != new
            }
            await user_changed(conn, "user.updated", actor.user_id, previous=previous)
    return after
