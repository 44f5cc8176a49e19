"""The admin portal: an owner's short-lived, single-use link that lets someone without an
account in the app configure the account's SSO connection (intent `sso`) or SCIM directory
(intent `directory`), and nothing else, on hosted pages.

- The link (`/portal?token=T`) lives LINK_TTL (1 hour) and opens once: its page posts the token
  back, which trades it for a portal session (a cookie scoped to /portal, SESSION_TTL, 1 hour)
  bound to the account and the intent; the link itself never opens again, so a forwarded or
  logged copy is worth nothing once the IT admin has opened it.
- Only HMAC-SHA256 digests (keyed by SECRET_KEY) of the link token and the session token are
  stored, like every token tenantd issues.
- Creating a link takes `portal:create`, an owner-only permission: the portal hands the
  account's sign-in (and, through SCIM, its membership) to someone outside it, so neither an
  admin nor a custom role may create one.
- The link's creation, its opening and every change made through the portal are audit entries
  (changes name `via: admin_portal` and the link's id).
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from tenantd import audit
from tenantd.accounts.service import lock_scoped
from tenantd.errors import Forbidden, NotFound
from tenantd.identity import permissions
from tenantd.identity.tokens import new_opaque_token, token_hash
from tenantd.portal import queries
from tenantd.portal.domain import Portal
from tenantd.principal import Principal

INTENTS = ("sso", "directory")
LINK_TTL = dt.timedelta(hours=1)
SESSION_TTL = dt.timedelta(hours=1)
PORTAL_PATH = "/portal"
SESSION_COOKIE = "tenantd_portal"


@dataclass(frozen=True)
class Link:
    id: uuid.UUID
    url: str
    intent: str
    expires_at: dt.datetime


@dataclass(frozen=True)
class PortalSession:
    """An opened link: the one account and intent it may touch."""

    link_id: uuid.UUID
    account_id: uuid.UUID
    account_name: str
    intent: str
    expires_at: dt.datetime

    def require(self, intent: str) -> None:
        """Refuse a page of the other intent (403)."""
        if self.intent != intent:
            raise Forbidden("This portal link was made for another task")


async def create_link(
    services: Portal, actor: Principal, account_id: uuid.UUID, intent: str
) -> Link:
    """The owner's link for `intent` (the body model already checked it)."""
    settings = services.settings
    token = new_opaque_token()
    async with services.db.transaction() as conn:
        await lock_scoped(conn, actor, account_id, permissions.PORTAL_CREATE)
        row = await queries.insert_link(
            conn,
            account_id=account_id,
            intent=intent,
            token_hash=token_hash(settings.secret_key, token),
            created_by=actor.user_id,
            ttl=LINK_TTL,
        )
        await audit.record(
            conn,
            account_id=account_id,
            actor_user_id=actor.user_id,
            action="admin_portal.link_created",
            target=str(row["id"]),
            data={"intent": intent, "expiresAt": row["expires_at"].isoformat()},
        )
    return Link(
        id=row["id"],
        url=f"{settings.public_base_url}{PORTAL_PATH}?token={token}",
        intent=intent,
        expires_at=row["expires_at"],
    )


async def open_link(services: Portal, token: str) -> tuple[str, PortalSession]:
    """Trade the link's token for a portal session token (once); NotFound for an unknown,
    used or expired link, or one of a deleted account."""
    settings = services.settings
    if not token or len(token) > 200:
        raise NotFound("This portal link is not valid: it expired or was already opened")
    session_token = new_opaque_token()
    async with services.db.transaction() as conn:
        row = await queries.open_link(
            conn,
            token_hash=token_hash(settings.secret_key, token),
            session_hash=token_hash(settings.secret_key, session_token),
            ttl=SESSION_TTL,
        )
        if row is None:
            raise NotFound("This portal link is not valid: it expired or was already opened")
        await audit.record(
            conn,
            account_id=row["account_id"],
            actor_user_id=None,
            action="admin_portal.link_opened",
            target=str(row["id"]),
            data={"intent": row["intent"], "via": "admin_portal"},
        )
    return session_token, _session(row)


async def find_session(services: Portal, session_token: str | None) -> PortalSession | None:
    """The live portal session of a cookie, or None."""
    if not session_token or len(session_token) > 200:
        return None
    async with services.db.connection() as conn:
        row = await queries.session(
            conn, session_hash=token_hash(services.settings.secret_key, session_token)
        )
    return _session(row) if row is not None else None


def _session(row: dict[str, object]) -> PortalSession:
    expires = row["session_expires_at"]
    assert isinstance(expires, dt.datetime)
    return PortalSession(
        link_id=uuid.UUID(str(row["id"])),
        account_id=uuid.UUID(str(row["account_id"])),
        account_name=str(row["account_name"]),
        intent=str(row["intent"]),
        expires_at=expires,
    )
