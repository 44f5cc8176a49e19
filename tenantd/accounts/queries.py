"""Queries of the tenancy domain; each takes the connection it is given.

Lock order, kept by every mutation: the account row first (`lock_account`), then the rows
under it (memberships, invitations, join requests). Everything that adds a member or changes
an owner holds the account lock, so seat counts and owner checks cannot race.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence

from tenantd.db import Conn, Row
from tenantd.db.core import Prepared
from tenantd.db.fetch import fetch_column, fetch_row
from tenantd.db.predicates import exists

# The session-time view of memberships is identity's: one predicate for an active role (live
# account, unrevoked membership) and one rule for the default account.
from tenantd.identity.queries import active_role as active_role
from tenantd.identity.queries import default_account_id as default_account_id
from tenantd.identity.queries import user_email as user_email

# -- accounts ---------------------------------------------------------------------------------

# An account row as the service reads it (lock_account, lock_account_any).
ACCOUNT_COLUMNS = "id, name, claimed_domain, created_at, deleted_at"


async def account_liveness(conn: Conn, account_id: uuid.UUID) -> bool | None:
    """True when the account is live, False when soft-deleted, None when it does not exist."""
    deleted_at = await conn.fetch_one(
        "SELECT deleted_at FROM accounts WHERE id = %(a)s", {"a": account_id}
    )
    if deleted_at is None:
        return None
    return deleted_at["deleted_at"] is None


async def lock_account(conn: Conn, account_id: uuid.UUID) -> Row | None:
    """Lock a live account row (NO KEY UPDATE: serialises our writers, not FK inserts)."""
    return await conn.fetch_one(
        f"SELECT {ACCOUNT_COLUMNS}, require_mfa FROM accounts"
        " WHERE id = %(a)s AND deleted_at IS NULL FOR NO KEY UPDATE",
        {"a": account_id},
    )


async def insert_account(
    conn: Conn, *, name: str, claimed_domain: str | None = None
) -> uuid.UUID | None:
    """Insert an account; with a domain, None when a live account already holds that claim.

    ON CONFLICT waits for a concurrent claimer to commit, so two first signups on one new
    domain end with exactly one claim and no error.
    """
    if claimed_domain is None:
        account_id: uuid.UUID = await conn.fetch_val(
            "INSERT INTO accounts (name) VALUES (%(n)s) RETURNING id", {"n": name}
        )
        return account_id
    claimed: uuid.UUID | None = await conn.fetch_val(
        "INSERT INTO accounts (name, claimed_domain) VALUES (%(n)s, %(d)s)"
        " ON CONFLICT (lower(claimed_domain))"
        " WHERE claimed_domain IS NOT NULL AND deleted_at IS NULL DO NOTHING RETURNING id",
        {"n": name, "d": claimed_domain},
    )
    return claimed


async def insert_account_plan(conn: Conn, *, account_id: uuid.UUID, plan_code: str) -> None:
    await conn.execute(
        "INSERT INTO account_plans (account_id, plan_code) VALUES (%(a)s, %(p)s)",
        {"a": account_id, "p": plan_code},
    )


async def claim_holder(conn: Conn, domain: str) -> uuid.UUID | None:
    """The live account holding a domain claim."""
    holder: uuid.UUID | None = await conn.fetch_val(
        "SELECT id FROM accounts WHERE lower(claimed_domain) = lower(%(d)s)"
        " AND claimed_domain IS NOT NULL AND deleted_at IS NULL",
        {"d": domain},
    )
    return holder


async def accounts_of_user(conn: Conn, user_id: uuid.UUID) -> list[Row]:
    return await conn.fetch_all(
        "SELECT a.id, a.name, a.claimed_domain, a.created_at, m.role"
        " FROM memberships m JOIN accounts a ON a.id = m.account_id"
        " WHERE m.user_id = %(u)s AND m.revoked_at IS NULL AND a.deleted_at IS NULL"
        " ORDER BY m.created_at, a.id",
        {"u": user_id},
    )


ACCOUNT_DETAIL_SQL = """
SELECT a.id, a.name, a.claimed_domain, a.created_at, a.deleted_at, a.require_mfa,
       p.code AS plan, COALESCE(ap.seats, p.seats) AS seats, ap.seats AS seats_override,
       COALESCE(p.features, '{}') AS plan_features,
       COALESCE((SELECT jsonb_object_agg(o.feature, o.enabled)
                   FROM account_feature_overrides o WHERE o.account_id = a.id), '{}') AS overrides,
       (SELECT count(*) FROM memberships m
         WHERE m.account_id = a.id AND m.revoked_at IS NULL) AS seats_used,
       (SELECT count(*) FROM invitations i WHERE i.account_id = a.id
           AND i.accepted_at IS NULL AND i.revoked_at IS NULL) AS pending_invitations,
       (SELECT u.email FROM memberships m JOIN users u ON u.id = m.user_id
         WHERE m.account_id = a.id AND m.role = 'owner' AND m.revoked_at IS NULL) AS owner_email
  FROM accounts a
  LEFT JOIN account_plans ap ON ap.account_id = a.id
  LEFT JOIN plans p ON p.code = ap.plan_code
 WHERE a.id = %(a)s
"""


async def account_detail(conn: Conn, account_id: uuid.UUID) -> Row | None:
    """An account (live or soft-deleted) with plan, seats, features and usage, one round trip."""
    return await conn.fetch_one(ACCOUNT_DETAIL_SQL, {"a": account_id})


async def all_accounts(conn: Conn, *, include_deleted: bool) -> list[Row]:
    return await conn.fetch_all(
        "SELECT a.id, a.name, a.claimed_domain, a.created_at, a.deleted_at,"
        " ap.plan_code AS plan, COALESCE(ap.seats, p.seats) AS seats,"
        " (SELECT count(*) FROM memberships m"
        "   WHERE m.account_id = a.id AND m.revoked_at IS NULL) AS seats_used"
        " FROM accounts a LEFT JOIN account_plans ap ON ap.account_id = a.id"
        " LEFT JOIN plans p ON p.code = ap.plan_code"
        " WHERE %(all)s OR a.deleted_at IS NULL ORDER BY a.created_at, a.id",
        {"all": include_deleted},
    )


async def set_require_mfa(conn: Conn, *, account_id: uuid.UUID, required: bool) -> None:
    await conn.execute(
        "UPDATE accounts SET require_mfa = %(r)s, updated_at = now() WHERE id = %(a)s",
        {"r": required, "a": account_id},
    )


async def members_without_mfa(conn: Conn, account_id: uuid.UUID) -> list[uuid.UUID]:
    """Active members who have no second factor (told when the account starts requiring one)."""
    return await fetch_column(
        conn,
        "SELECT m.user_id FROM memberships m JOIN users u ON u.id = m.user_id"
        " WHERE m.account_id = %(a)s AND m.revoked_at IS NULL AND NOT u.mfa_enabled"
        " ORDER BY m.created_at, m.user_id",
        {"a": account_id},
    )


async def rename_account(conn: Conn, *, account_id: uuid.UUID, name: str) -> None:
    await conn.execute(
        "UPDATE accounts SET name = %(n)s, updated_at = now() WHERE id = %(a)s",
        {"n": name, "a": account_id},
    )


async def soft_delete_account(conn: Conn, account_id: uuid.UUID) -> dt.datetime:
    """Set deleted_at. The claim index is partial on deleted_at IS NULL: the claim is released
    while claimed_domain stays on the row as history."""
    deleted_at: dt.datetime = await conn.fetch_val(
        "UPDATE accounts SET deleted_at = now(), updated_at = now()"
        " WHERE id = %(a)s RETURNING deleted_at",
        {"a": account_id},
    )
    return deleted_at


async def plan_exists(conn: Conn, plan_code: str) -> bool:
    return await exists(conn, "SELECT 1 FROM plans WHERE code = %(p)s", {"p": plan_code})


async def known_features(conn: Conn) -> set[str]:
    return set(await fetch_column(conn, "SELECT DISTINCT unnest(features) AS feature FROM plans"))


async def set_plan(conn: Conn, *, account_id: uuid.UUID, plan_code: str, seats: int | None) -> None:
    await conn.execute(
        "INSERT INTO account_plans (account_id, plan_code, seats) VALUES (%(a)s, %(p)s, %(s)s)"
        " ON CONFLICT (account_id) DO UPDATE"
        " SET plan_code = EXCLUDED.plan_code, seats = EXCLUDED.seats, updated_at = now()",
        {"a": account_id, "p": plan_code, "s": seats},
    )


async def set_feature(conn: Conn, *, account_id: uuid.UUID, feature: str, enabled: bool) -> None:
    await conn.execute(
        "INSERT INTO account_feature_overrides (account_id, feature, enabled)"
        " VALUES (%(a)s, %(f)s, %(e)s) ON CONFLICT (account_id, feature) DO UPDATE"
        " SET enabled = EXCLUDED.enabled, updated_at = now()",
        {"a": account_id, "f": feature, "e": enabled},
    )


ENTITLEMENTS_SQL = """
SELECT p.code AS plan, COALESCE(ap.seats, p.seats) AS seats, p.features AS plan_features,
       COALESCE((SELECT jsonb_object_agg(o.feature, o.enabled)
                   FROM account_feature_overrides o WHERE o.account_id = %(a)s), '{}') AS overrides
  FROM account_plans ap JOIN plans p ON p.code = ap.plan_code
 WHERE ap.account_id = %(a)s
"""


async def entitlements(conn: Conn, account_id: uuid.UUID) -> Row | None:
    """The account's plan, seat cap, plan features and overrides; None without a plan row."""
    return await conn.fetch_one(ENTITLEMENTS_SQL, {"a": account_id})


# -- memberships ------------------------------------------------------------------------------

MEMBERSHIP_COLUMNS = "id, account_id, user_id, role, created_at, revoked_at"


async def lock_memberships(
    conn: Conn, *, account_id: uuid.UUID, user_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, Row]:
    """Lock the active memberships of these users in the account, keyed by user id."""
    rows = await conn.fetch_all(
        f"SELECT {MEMBERSHIP_COLUMNS} FROM memberships"
        " WHERE account_id = %(a)s AND user_id = ANY(%(u)s) AND revoked_at IS NULL"
        " ORDER BY user_id FOR UPDATE",
        {"a": account_id, "u": list(user_ids)},
    )
    return {row["user_id"]: row for row in rows}


async def insert_membership(
    conn: Conn, *, account_id: uuid.UUID, user_id: uuid.UUID, role: str
) -> Row:
    return await fetch_row(
        conn,
        "INSERT INTO memberships (account_id, user_id, role) VALUES (%(a)s, %(u)s, %(r)s)"
        f" RETURNING {MEMBERSHIP_COLUMNS}",
        {"a": account_id, "u": user_id, "r": role},
    )


async def set_role(conn: Conn, *, membership_id: uuid.UUID, role: str) -> Row:
    return await fetch_row(
        conn,
        "UPDATE memberships SET role = %(r)s, updated_at = now() WHERE id = %(id)s"
        f" RETURNING {MEMBERSHIP_COLUMNS}",
        {"r": role, "id": membership_id},
    )


async def revoke_membership(conn: Conn, membership_id: uuid.UUID) -> Row:
    """Soft revoke: the row is kept with revoked_at set."""
    return await fetch_row(
        conn,
        "UPDATE memberships SET revoked_at = now(), updated_at = now() WHERE id = %(id)s"
        f" RETURNING {MEMBERSHIP_COLUMNS}",
        {"id": membership_id},
    )


async def list_members(conn: Conn, account_id: uuid.UUID) -> list[Row]:
    return await conn.fetch_all(
        "SELECT m.user_id, u.email, m.role, m.created_at"
        " FROM memberships m JOIN users u ON u.id = m.user_id"
        " WHERE m.account_id = %(a)s AND m.revoked_at IS NULL"
        " ORDER BY (m.role = 'owner') DESC, m.created_at, m.user_id",
        {"a": account_id},
    )


SEATS_SQL = """
SELECT (SELECT count(*) FROM memberships
         WHERE account_id = %(a)s AND revoked_at IS NULL) AS used,
       (SELECT COALESCE(ap.seats, p.seats)
          FROM account_plans ap JOIN plans p ON p.code = ap.plan_code
         WHERE ap.account_id = %(a)s) AS seats,
       EXISTS (SELECT 1 FROM memberships
                WHERE account_id = %(a)s AND user_id = %(u)s AND revoked_at IS NULL) AS is_member
"""


async def seat_state(conn: Conn, *, account_id: uuid.UUID, user_id: uuid.UUID) -> Row:
    """Seats used (active memberships), the seat cap, and whether the user is already a member.

    Read it while holding the account lock: every writer that adds a member holds it too.
    """
    return await fetch_row(conn, SEATS_SQL, {"a": account_id, "u": user_id})


async def user_display(conn: Conn, user_id: uuid.UUID) -> Row | None:
    return await conn.fetch_one(
        "SELECT id, email, first_name, last_name FROM users WHERE id = %(u)s", {"u": user_id}
    )


# -- invitations ------------------------------------------------------------------------------

INVITATION_COLUMNS = (
    "id, account_id, email, role, invited_by, created_at, expires_at, resent_at,"
    " accepted_at, accepted_by, revoked_at"
)
# An account's invitations neither accepted nor revoked (expired ones too, until the sweep).
PENDING_INVITATIONS_SELECT = (
    f"SELECT {INVITATION_COLUMNS} FROM invitations WHERE account_id = %(a)s"
    " AND accepted_at IS NULL AND revoked_at IS NULL"
)


async def insert_invitation(
    conn: Conn,
    *,
    account_id: uuid.UUID,
    email: str,
    role: str,
    token_hash: bytes,
    invited_by: uuid.UUID | None,
    ttl_hours: int,
) -> Row:
    return await fetch_row(
        conn,
        "INSERT INTO invitations (account_id, email, role, token_hash, invited_by, expires_at)"
        " VALUES (%(a)s, %(e)s, %(r)s, %(h)s, %(by)s, now() + make_interval(hours => %(ttl)s))"
        f" RETURNING {INVITATION_COLUMNS}",
        {
            "a": account_id,
            "e": email,
            "r": role,
            "h": token_hash,
            "by": invited_by,
            "ttl": ttl_hours,
        },
    )


async def pending_invitation_for(conn: Conn, *, account_id: uuid.UUID, email: str) -> Row | None:
    return await conn.fetch_one(
        f"{PENDING_INVITATIONS_SELECT} AND lower(email) = lower(%(e)s)",
        {"a": account_id, "e": email},
    )


async def active_member_by_email(conn: Conn, *, account_id: uuid.UUID, email: str) -> bool:
    return await exists(
        conn,
        "SELECT 1 FROM memberships m JOIN users u ON u.id = m.user_id"
        " WHERE m.account_id = %(a)s AND m.revoked_at IS NULL"
        " AND lower(u.email) = lower(%(e)s)",
        {"a": account_id, "e": email},
    )


async def invitation_by_hash(conn: Conn, token_hash: bytes) -> Row | None:
    """Find by the keyed hash (an index lookup on a MAC: no timing oracle on the raw token)."""
    return await conn.fetch_one(
        f"SELECT {INVITATION_COLUMNS}, (expires_at <= now()) AS expired"
        " FROM invitations WHERE token_hash = %(h)s",
        {"h": token_hash},
    )


async def lock_invitation(
    conn: Conn, *, invitation_id: uuid.UUID, account_id: uuid.UUID | None = None
) -> Row | None:
    """FOR UPDATE on one invitation (of one account when given), fresh after any wait."""
    return await conn.fetch_one(
        f"SELECT {INVITATION_COLUMNS}, token_hash, (expires_at <= now()) AS expired"
        " FROM invitations WHERE id = %(id)s"
        " AND (%(a)s::uuid IS NULL OR account_id = %(a)s) FOR UPDATE",
        {"id": invitation_id, "a": account_id},
    )


async def list_pending_invitations(conn: Conn, account_id: uuid.UUID) -> list[Row]:
    return await conn.fetch_all(
        f"{PENDING_INVITATIONS_SELECT} ORDER BY created_at, id",
        {"a": account_id},
    )


async def rotate_invitation(
    conn: Conn, *, invitation_id: uuid.UUID, token_hash: bytes, ttl_hours: int
) -> Row:
    return await fetch_row(
        conn,
        "UPDATE invitations SET token_hash = %(h)s, resent_at = now(),"
        " expires_at = now() + make_interval(hours => %(ttl)s)"
        f" WHERE id = %(id)s RETURNING {INVITATION_COLUMNS}",
        {"h": token_hash, "ttl": ttl_hours, "id": invitation_id},
    )


async def revoke_invitation(conn: Conn, invitation_id: uuid.UUID) -> Row:
    return await fetch_row(
        conn,
        "UPDATE invitations SET revoked_at = now() WHERE id = %(id)s"
        f" RETURNING {INVITATION_COLUMNS}",
        {"id": invitation_id},
    )


async def mark_invitation_accepted(
    conn: Conn, *, invitation_id: uuid.UUID, user_id: uuid.UUID
) -> None:
    await conn.execute(
        "UPDATE invitations SET accepted_at = now(), accepted_by = %(u)s WHERE id = %(id)s",
        {"u": user_id, "id": invitation_id},
    )


# -- join requests ----------------------------------------------------------------------------

JOIN_REQUEST_SELECT = (
    "SELECT j.id, j.account_id, j.user_id, u.email, j.domain, j.status, j.created_at,"
    " j.decided_at, j.decided_by FROM join_requests j JOIN users u ON u.id = j.user_id"
)


async def upsert_pending_join_request(
    conn: Conn, *, account_id: uuid.UUID, user_id: uuid.UUID, domain: str
) -> tuple[uuid.UUID, bool]:
    """The pending request of (account, user), created when missing: (id, created)."""
    created: uuid.UUID | None = await conn.fetch_val(
        "INSERT INTO join_requests (account_id, user_id, domain) VALUES (%(a)s, %(u)s, %(d)s)"
        " ON CONFLICT (account_id, user_id) WHERE status = 'pending' DO NOTHING RETURNING id",
        {"a": account_id, "u": user_id, "d": domain},
    )
    if created is not None:
        return created, True
    existing: uuid.UUID = await conn.fetch_val(
        "SELECT id FROM join_requests"
        " WHERE account_id = %(a)s AND user_id = %(u)s AND status = 'pending'",
        {"a": account_id, "u": user_id},
    )
    return existing, False


async def pending_claim_request(conn: Conn, user_id: uuid.UUID) -> Row | None:
    """The user's pending join request to a live account that still claims its domain."""
    return await conn.fetch_one(
        "SELECT j.id, j.account_id, j.domain FROM join_requests j"
        " JOIN accounts a ON a.id = j.account_id"
        " WHERE j.user_id = %(u)s AND j.status = 'pending' AND a.deleted_at IS NULL"
        " AND lower(a.claimed_domain) = lower(j.domain)"
        " ORDER BY j.created_at, j.id LIMIT 1",
        {"u": user_id},
    )


async def list_pending_join_requests(conn: Conn, account_id: uuid.UUID) -> list[Row]:
    return await conn.fetch_all(
        f"{JOIN_REQUEST_SELECT} WHERE j.account_id = %(a)s AND j.status = 'pending'"
        " ORDER BY j.created_at, j.id",
        {"a": account_id},
    )


async def lock_join_request(
    conn: Conn, *, request_id: uuid.UUID, account_id: uuid.UUID
) -> Row | None:
    return await conn.fetch_one(
        f"{JOIN_REQUEST_SELECT} WHERE j.id = %(id)s AND j.account_id = %(a)s FOR UPDATE OF j",
        {"id": request_id, "a": account_id},
    )


async def decide_join_request(
    conn: Conn, *, request_id: uuid.UUID, status: str, decided_by: uuid.UUID
) -> Row:
    await conn.execute(
        "UPDATE join_requests SET status = %(s)s, decided_at = now(), decided_by = %(by)s"
        " WHERE id = %(id)s",
        {"s": status, "by": decided_by, "id": request_id},
    )
    return await fetch_row(conn, f"{JOIN_REQUEST_SELECT} WHERE j.id = %(id)s", {"id": request_id})


# -- sweeps -----------------------------------------------------------------------------------


async def lock_purgeable_accounts(conn: Conn, *, older_than_days: int, limit: int) -> list[Row]:
    """A batch of accounts soft-deleted long enough ago; SKIP LOCKED lets sweeps run at once."""
    return await conn.fetch_all(
        "SELECT id, name, claimed_domain, deleted_at FROM accounts"
        " WHERE deleted_at IS NOT NULL"
        " AND deleted_at < now() - make_interval(days => %(d)s)"
        " ORDER BY deleted_at, id LIMIT %(n)s FOR UPDATE SKIP LOCKED",
        {"d": older_than_days, "n": limit},
    )


async def count_purgeable_accounts(conn: Conn, *, older_than_days: int) -> int:
    return int(
        await conn.fetch_val(
            "SELECT count(*) FROM accounts WHERE deleted_at IS NOT NULL"
            " AND deleted_at < now() - make_interval(days => %(d)s)",
            {"d": older_than_days},
        )
    )


async def delete_accounts(conn: Conn, account_ids: Sequence[uuid.UUID]) -> int:
    """Hard delete; foreign keys cascade to every account-scoped row (audit_log has none)."""
    return await conn.execute(
        "DELETE FROM accounts WHERE id = ANY(%(ids)s)", {"ids": list(account_ids)}
    )


EXPIRED_INVITATIONS_WHERE = """
accepted_at IS NULL AND revoked_at IS NULL
AND (expires_at <= now()
     OR (%(ttl)s::integer IS NOT NULL
         AND COALESCE(resent_at, created_at) <= now() - make_interval(hours => %(ttl)s::integer)))
"""


async def count_expired_invitations(conn: Conn, *, ttl_hours: int | None) -> int:
    return int(
        await conn.fetch_val(
            f"SELECT count(*) FROM invitations WHERE {EXPIRED_INVITATIONS_WHERE}",
            {"ttl": ttl_hours},
        )
    )


async def revoke_expired_invitations(conn: Conn, *, ttl_hours: int | None, limit: int) -> list[Row]:
    """Soft-revoke one batch of pending invitations past their time to live."""
    return await conn.fetch_all(
        # expires_at is pulled in too, so a later accept reports the invitation as expired.
        "UPDATE invitations SET revoked_at = now(), expires_at = LEAST(expires_at, now())"
        " WHERE id IN ("
        f" SELECT id FROM invitations WHERE {EXPIRED_INVITATIONS_WHERE}"
        " ORDER BY expires_at, id LIMIT %(n)s FOR UPDATE SKIP LOCKED)"
        " RETURNING id, account_id, email",
        {"ttl": ttl_hours, "n": limit},
    )


# -- what the account mails need when their job runs ------------------------------------------


async def invitation_mail(conn: Conn, invitation_id: uuid.UUID) -> Row | None:
    """An invitation with its account's name (None once the account is purged)."""
    return await conn.fetch_one(
        "SELECT i.id, i.email, i.role, i.accepted_at, i.revoked_at, a.name AS account_name"
        " FROM invitations i JOIN accounts a ON a.id = i.account_id WHERE i.id = %(id)s",
        {"id": invitation_id},
    )


async def join_request_mail(conn: Conn, request_id: uuid.UUID) -> Row | None:
    """A join request with its requester's address, its account and that account's owner."""
    return await conn.fetch_one(
        "SELECT j.id, j.account_id, j.domain, u.email AS requester, a.name AS account_name,"
        " (SELECT ou.email FROM memberships m JOIN users ou ON ou.id = m.user_id"
        "   WHERE m.account_id = a.id AND m.role = 'owner' AND m.revoked_at IS NULL) AS owner_email"
        " FROM join_requests j JOIN users u ON u.id = j.user_id"
        " JOIN accounts a ON a.id = j.account_id WHERE j.id = %(id)s",
        {"id": request_id},
    )


# -- restore within the grace window (tenantd/accounts/restore.py) -----------------------------


async def lock_account_any(conn: Conn, account_id: uuid.UUID) -> Row | None:
    """Lock an account row live or soft-deleted (the purge sweep skips it while held)."""
    return await conn.fetch_one(
        f"SELECT {ACCOUNT_COLUMNS},"
        " deleted_at < now() - make_interval(days => %(d)s) AS past_grace"
        " FROM accounts WHERE id = %(a)s FOR NO KEY UPDATE",
        {"a": account_id, "d": RESTORE_GRACE_DAYS},
    )


RESTORE_GRACE_DAYS = 30  # as accounts.service.GRACE_DAYS (the purge sweep's window)


async def owner_of_any(conn: Conn, account_id: uuid.UUID) -> uuid.UUID | None:
    """The active owner membership of an account, live or soft-deleted (the owner at deletion
    time: a soft-deleted account keeps its memberships and cannot change owner)."""
    owner: uuid.UUID | None = await conn.fetch_val(
        "SELECT user_id FROM memberships WHERE account_id = %(a)s AND role = 'owner'"
        " AND revoked_at IS NULL",
        {"a": account_id},
    )
    return owner


async def restorable_accounts(conn: Conn, user_id: uuid.UUID) -> list[Row]:
    """Soft-deleted accounts this user owns, still inside the restore window (newest first)."""
    return await conn.fetch_all(
        "SELECT a.id, a.name, a.deleted_at,"
        " a.deleted_at + make_interval(days => %(d)s) AS purge_after"
        " FROM accounts a JOIN memberships m ON m.account_id = a.id"
        " WHERE m.user_id = %(u)s AND m.role = 'owner' AND m.revoked_at IS NULL"
        " AND a.deleted_at IS NOT NULL"
        " AND a.deleted_at >= now() - make_interval(days => %(d)s)"
        " ORDER BY a.deleted_at DESC",
        {"u": user_id, "d": RESTORE_GRACE_DAYS},
    )


async def is_member_of_any(conn: Conn, account_id: uuid.UUID, user_id: uuid.UUID) -> bool:
    return await exists(
        conn,
        "SELECT 1 FROM memberships WHERE account_id = %(a)s"
        " AND user_id = %(u)s AND revoked_at IS NULL",
        {"a": account_id, "u": user_id},
    )


async def deleted_by(conn: Conn, account_id: uuid.UUID, user_id: uuid.UUID) -> bool:
    """Whether the audit log says this user soft-deleted the account (it outlives the purge)."""
    return await exists(
        conn,
        "SELECT 1 FROM audit_log WHERE account_id = %(a)s"
        " AND action = 'account.soft_deleted' AND actor_user_id = %(u)s",
        {"a": account_id, "u": user_id},
    )


async def was_purged(conn: Conn, account_id: uuid.UUID) -> bool:
    return await exists(
        conn,
        "SELECT 1 FROM audit_log WHERE account_id = %(a)s AND action = 'account.hard_deleted'",
        {"a": account_id},
    )


async def undelete_account(conn: Conn, account_id: uuid.UUID) -> None:
    """Clear deleted_at; the partial claim index refuses it if a live account took the domain."""
    await conn.execute(
        "UPDATE accounts SET deleted_at = NULL, updated_at = now() WHERE id = %(a)s",
        {"a": account_id},
    )


# -- GET /api/v1/users/me (tenantd/accounts/me.py) -----------------------------------------

# One round trip: user, providers, memberships, the active account's plan and overrides and a
# custom role's permissions there.
ME = Prepared(
    "tenantd_me",
    """
SELECT u.id, u.email, u.first_name, u.last_name, u.email_verified_at, u.mfa_enabled,
       (p.user_id IS NOT NULL) AS has_password,
       p.created_at AS password_created_at,
       COALESCE((SELECT jsonb_agg(jsonb_build_object('provider', i.provider,
                                                    'createdAt', i.created_at)
                                  ORDER BY i.created_at)
                   FROM user_identities i WHERE i.user_id = u.id), '[]') AS identities,
       COALESCE((SELECT jsonb_agg(jsonb_build_object('accountId', m.account_id,
                                                    'accountName', a.name,
                                                    'role', m.role,
                                                    'createdAt', m.created_at,
                                                    'requireMfa', a.require_mfa)
                                  ORDER BY m.created_at, m.account_id)
                   FROM memberships m JOIN accounts a ON a.id = m.account_id
                  WHERE m.user_id = u.id AND m.revoked_at IS NULL AND a.deleted_at IS NULL),
                '[]') AS memberships,
       (SELECT pl.features FROM account_plans ap JOIN plans pl ON pl.code = ap.plan_code
         WHERE ap.account_id = %(aid)s) AS plan_features,
       COALESCE((SELECT jsonb_object_agg(o.feature, o.enabled)
                   FROM account_feature_overrides o WHERE o.account_id = %(aid)s),
                '{}') AS overrides,
       (SELECT r.permissions FROM memberships m
          JOIN account_roles r ON r.account_id = m.account_id AND r.key = m.role
         WHERE m.user_id = u.id AND m.account_id = %(aid)s AND m.revoked_at IS NULL)
         AS role_permissions
  FROM users u
  LEFT JOIN user_passwords p ON p.user_id = u.id
 WHERE u.id = %(uid)s
""",
)


async def me(conn: Conn, *, user_id: uuid.UUID, account_id: uuid.UUID | None) -> Row | None:
    """The /me row of a user, with the plan and overrides of `account_id` (one round trip)."""
    return await conn.fetch_one(ME, {"uid": user_id, "aid": account_id})


# -- memberships of a user being deleted or restored (tenantd/auth/deletion.py, security_undo.py) --


async def revoke_memberships_of(conn: Conn, user_id: uuid.UUID) -> list[Row]:
    return await conn.fetch_all(
        "UPDATE memberships SET revoked_at = now(), updated_at = now()"
        " WHERE user_id = %(u)s AND revoked_at IS NULL"
        f" RETURNING {MEMBERSHIP_COLUMNS}",
        {"u": user_id},
    )


async def unrevoke_owner_memberships(
    conn: Conn, *, user_id: uuid.UUID, account_ids: list[uuid.UUID]
) -> None:
    """The owner memberships of the accounts a user deletion soft-deleted, active again."""
    await conn.execute(
        "UPDATE memberships SET revoked_at = NULL, updated_at = now() WHERE user_id = %(u)s"
        " AND role = 'owner' AND account_id = ANY(%(a)s) AND revoked_at IS NOT NULL",
        {"u": user_id, "a": account_ids},
    )


async def account_event_row(conn: Conn, account_id: uuid.UUID) -> Row | None:
    """The account as its account.* events carry it (deleted or not)."""
    return await conn.fetch_one(
        "SELECT id, name, claimed_domain, created_at, deleted_at FROM accounts WHERE id = %(a)s",
        {"a": account_id},
    )


async def join_request_event_row(conn: Conn, request_id: uuid.UUID) -> Row | None:
    """The join request as its join_request.* events carry it."""
    return await conn.fetch_one(
        "SELECT id, account_id, user_id, domain, status, created_at FROM join_requests"
        " WHERE id = %(id)s",
        {"id": request_id},
    )


ROLE_COLUMNS = "account_id, key, name, permissions, created_at, updated_at"


async def custom_roles(conn: Conn, account_id: uuid.UUID) -> list[Row]:
    return await conn.fetch_all(
        f"SELECT {ROLE_COLUMNS} FROM account_roles WHERE account_id = %(a)s ORDER BY key",
        {"a": account_id},
    )


async def custom_role(conn: Conn, *, account_id: uuid.UUID, key: str) -> Row | None:
    return await conn.fetch_one(
        f"SELECT {ROLE_COLUMNS} FROM account_roles WHERE account_id = %(a)s AND key = %(k)s",
        {"a": account_id, "k": key},
    )


async def insert_role(
    conn: Conn, *, account_id: uuid.UUID, key: str, name: str, permissions: list[str]
) -> Row | None:
    """The new role, or None when the account already has one with this key."""
    return await conn.fetch_one(
        "INSERT INTO account_roles (account_id, key, name, permissions)"
        " VALUES (%(a)s, %(k)s, %(n)s, %(p)s) ON CONFLICT DO NOTHING"
        f" RETURNING {ROLE_COLUMNS}",
        {"a": account_id, "k": key, "n": name, "p": permissions},
    )


async def update_role(
    conn: Conn, *, account_id: uuid.UUID, key: str, name: str, permissions: list[str]
) -> Row:
    return await fetch_row(
        conn,
        "UPDATE account_roles SET name = %(n)s, permissions = %(p)s, updated_at = now()"
        f" WHERE account_id = %(a)s AND key = %(k)s RETURNING {ROLE_COLUMNS}",
        {"a": account_id, "k": key, "n": name, "p": permissions},
    )


async def delete_role(conn: Conn, *, account_id: uuid.UUID, key: str) -> None:
    await conn.execute(
        "DELETE FROM account_roles WHERE account_id = %(a)s AND key = %(k)s",
        {"a": account_id, "k": key},
    )


async def role_use(conn: Conn, *, account_id: uuid.UUID, key: str) -> Row:
    """How many active members and pending invitations name the role."""
    return await fetch_row(
        conn,
        "SELECT (SELECT count(*) FROM memberships WHERE account_id = %(a)s AND role = %(k)s"
        "         AND revoked_at IS NULL) AS members,"
        "       (SELECT count(*) FROM invitations WHERE account_id = %(a)s AND role = %(k)s"
        "         AND accepted_at IS NULL AND revoked_at IS NULL) AS invitations",
        {"a": account_id, "k": key},
    )
