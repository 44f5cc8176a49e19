"""'This wasn't me': the link in the notice of a sensitive action (tenantd/mfa/sensitive.py).

`POST /api/v1/auth/security/undo {token}` (no session needed; the hosted page `/wasnt-me`
posts the same) undoes the action, once, within UNDO_DAYS, and ends every session of the
user whatever it could undo. What undo means per action:

| action                     | undo                                                          |
| totp_added                 | that authenticator app is removed (with it, the recovery codes |
|                            | when it was the last factor)                                  |
| passkey_added              | that passkey is removed (same)                                |
| totp_removed / passkey_removed | the factor is put back as it was                          |
| recovery_codes_regenerated | the new codes end; the old unused ones work again             |
| password_changed           | no exact revert (the old password is not kept): the password  |
|                            | is removed, the user sets a new one with "Forgot password"    |
| account_deleted            | the account is restored (unless purged or its domain taken)   |
| account_restored           | the account is soft-deleted again                             |
| ownership_transferred      | the ownership comes back (while both are still members)       |
| account_mfa_policy_changed | the requirement is set back                                   |
| user_deleted               | the user, its address and the accounts deleted with it come    |
|                            | back (not yet anonymised, address not taken); memberships in  |
|                            | other accounts stay revoked; no password: "Forgot password"    |

An email change keeps its own link (`/cancel-email-change`, tenantd/auth/email_change.py).
Each undo writes the audit row `security.action_undone` and the security event
`action_undone`; `reverted` says whether the state could be put back.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tenantd import audit
from tenantd.accounts import queries as account_queries
from tenantd.accounts.restore import restore_locked
from tenantd.accounts.service import soft_delete_locked
from tenantd.audit import security
from tenantd.bundle import Services
from tenantd.db import Conn
from tenantd.errors import AppError, ValidationFailed
from tenantd.identity import queries as identity_queries
from tenantd.identity.sessions import revoke_all
from tenantd.mfa import queries as mfa_queries
from tenantd.mfa import sensitive
from tenantd.mfa.service import after_factor_removed

log = logging.getLogger(__name__)

ACTION_UNDONE = "action_undone"

Undo = Callable[[Conn, uuid.UUID, dict[str, Any]], Awaitable[bool]]


async def _totp_added(conn: Conn, user_id: uuid.UUID, data: dict[str, Any]) -> bool:
    await mfa_queries.lock_user(conn, user_id)
    removed = await mfa_queries.delete_totp_created_at(
        conn, user_id=user_id, created_at=str(data["createdAt"])
    )
    await after_factor_removed(conn, user_id)
    return removed


async def _passkey_added(conn: Conn, user_id: uuid.UUID, data: dict[str, Any]) -> bool:
    await mfa_queries.lock_user(conn, user_id)
    removed = await mfa_queries.take_passkey(
        conn, user_id=user_id, passkey_id=uuid.UUID(str(data["passkeyId"]))
    )
    await after_factor_removed(conn, user_id)
    return removed is not None


async def _totp_removed(conn: Conn, user_id: uuid.UUID, data: dict[str, Any]) -> bool:
    await mfa_queries.lock_user(conn, user_id)
    back = await mfa_queries.put_back_totp(
        conn, user_id=user_id, secret_hex=str(data["secret"]), last_used_step=data["lastUsedStep"]
    )
    await identity_queries.sync_mfa_enabled(conn, user_id)
    return back


async def _passkey_removed(conn: Conn, user_id: uuid.UUID, data: dict[str, Any]) -> bool:
    await mfa_queries.lock_user(conn, user_id)
    back = await mfa_queries.put_back_passkey(conn, user_id=user_id, row=data["passkey"])
    await identity_queries.sync_mfa_enabled(conn, user_id)
    return back


async def _codes_regenerated(conn: Conn, user_id: uuid.UUID, data: dict[str, Any]) -> bool:
    user = await mfa_queries.lock_user(conn, user_id)
    if user is None or not user["mfa_enabled"]:
        return False
    previous = [bytes.fromhex(h) for h in data.get("previous", [])]
    await mfa_queries.replace_recovery_codes(conn, user_id=user_id, hashes=previous)
    return True


async def _password_changed(conn: Conn, user_id: uuid.UUID, data: dict[str, Any]) -> bool:
    await mfa_queries.lock_user(conn, user_id)
    return await identity_queries.drop_password(conn, user_id)


async def _account_deleted(conn: Conn, user_id: uuid.UUID, data: dict[str, Any]) -> bool:
    try:
        await restore_locked(conn, uuid.UUID(str(data["accountId"])), actor_id=user_id)
    except AppError as error:
        log.info("undo: account not restored (%s)", error.code)
        return False
    return True


async def _account_restored(conn: Conn, user_id: uuid.UUID, data: dict[str, Any]) -> bool:
    account_id = uuid.UUID(str(data["accountId"]))
    if await account_queries.lock_account(conn, account_id) is None:
        return False  # deleted again meanwhile
    if await account_queries.owner_of_any(conn, account_id) != user_id:
        return False
    await soft_delete_locked(conn, account_id, user_id, reason="undo")
    return True


async def _ownership_transferred(conn: Conn, user_id: uuid.UUID, data: dict[str, Any]) -> bool:
    account_id, to = uuid.UUID(str(data["accountId"])), uuid.UUID(str(data["to"]))
    if await account_queries.lock_account(conn, account_id) is None:
        return False
    locked = await account_queries.lock_memberships(
        conn, account_id=account_id, user_ids=[user_id, to]
    )
    mine, theirs = locked.get(user_id), locked.get(to)
    if mine is None or theirs is None or theirs["role"] != "owner":
        return False
    # Demote first: the one-owner unique index forbids two owners at once.
    await account_queries.set_role(conn, membership_id=theirs["id"], role="admin")
    await account_queries.set_role(conn, membership_id=mine["id"], role="owner")
    await audit.record(
        conn,
        account_id=account_id,
        actor_user_id=user_id,
        action="ownership.transferred",
        target=str(user_id),
        data={"from": str(to), "to": str(user_id), "reason": "undo"},
    )
    return True


async def _mfa_policy_changed(conn: Conn, user_id: uuid.UUID, data: dict[str, Any]) -> bool:
    account_id = uuid.UUID(str(data["accountId"]))
    if await account_queries.lock_account(conn, account_id) is None:
        return False
    if await account_queries.owner_of_any(conn, account_id) != user_id:
        return False
    await account_queries.set_require_mfa(
        conn, account_id=account_id, required=bool(data["required"])
    )
    return True


async def _user_deleted(conn: Conn, user_id: uuid.UUID, data: dict[str, Any]) -> bool:
    await mfa_queries.lock_user(conn, user_id)
    if not await identity_queries.untombstone_user(conn, user_id):
        return False
    account_ids = [uuid.UUID(str(a)) for a in data.get("accountIds", [])]
    await account_queries.unrevoke_owner_memberships(conn, user_id=user_id, account_ids=account_ids)
    for account_id in account_ids:
        try:
            await restore_locked(conn, account_id, actor_id=user_id)
        except AppError as error:
            log.info("undo: account not restored (%s)", error.code)
    return True


UNDO: dict[str, Undo] = {
    sensitive.TOTP_ADDED.name: _totp_added,
    sensitive.PASSKEY_ADDED.name: _passkey_added,
    sensitive.TOTP_REMOVED.name: _totp_removed,
    sensitive.PASSKEY_REMOVED.name: _passkey_removed,
    sensitive.RECOVERY_CODES_REGENERATED.name: _codes_regenerated,
    sensitive.PASSWORD_CHANGED.name: _password_changed,
    sensitive.ACCOUNT_DELETED.name: _account_deleted,
    sensitive.ACCOUNT_RESTORED.name: _account_restored,
    sensitive.OWNERSHIP_TRANSFERRED.name: _ownership_transferred,
    sensitive.MFA_POLICY_CHANGED.name: _mfa_policy_changed,
    sensitive.USER_DELETED.name: _user_deleted,
}


@dataclass(frozen=True)
class Undone:
    action: str
    reverted: bool


def bad_link() -> ValidationFailed:
    return ValidationFailed({"token": "This link is invalid, expired or already used"})


async def undo(services: Services, *, token: str) -> Undone:
    """ "This wasn't me": undo the action of the link (once) and end every session."""
    if not token:
        raise bad_link()
    async with services.db.transaction() as conn:
        row = await sensitive.lock_undo(conn, services.settings, token)
        if row is None:
            raise bad_link()
        user_id: uuid.UUID = row["user_id"]
        action = str(row["action"])
        handler = UNDO.get(action)
        reverted = await handler(conn, user_id, dict(row["data"])) if handler else False
        await mfa_queries.mark_undo_used(conn, row["id"])
        await audit.record_user(
            conn,
            user_id,
            "security.action_undone",
            data={"action": action, "reverted": reverted},
        )
        await security.record(
            conn,
            user_id=user_id,
            kind=ACTION_UNDONE,
            data={"action": action, "reverted": reverted},
        )
        await revoke_all(conn, user_id=user_id)  # writes session.revoked_all
    log.warning("sensitive action undone by its notice link", extra={"action": action})
    return Undone(action=action, reverted=reverted)
