"""Statements of the tenancy notices (feed.py): who is told, and how people are named."""

from __future__ import annotations


def _name(alias: str) -> str:
    """A person as the pages show them: their name, else their address."""
    return (
        f"coalesce(nullif(btrim({alias}.first_name || ' ' || {alias}.last_name), ''),"
        f" {alias}.email)"
    )


ACCOUNT = (
    "SELECT a.name AS account_name,"
    f" (SELECT {_name('u')} FROM users u WHERE u.id = %(actor)s::uuid) AS actor_name,"
    f" (SELECT {_name('u')} FROM users u WHERE u.id = %(subject)s::uuid) AS subject_name"
    " FROM accounts a WHERE a.id = %(aid)s AND a.deleted_at IS NULL"
)
USER_BY_EMAIL = "SELECT id FROM users WHERE lower(email) = lower(%(email)s)"
# The owners and admins, and members whose custom role holds the permission that deals with
# the news (members:invite for a new member, join_requests:decide for a request), as the
# change found them: the relay may number an event after later changes committed (a member
# added since is not told of what came before them). A custom role's `*` is LIKE's `%`.
MANAGERS = (
    "SELECT m.user_id FROM memberships m WHERE m.account_id = %(aid)s AND m.revoked_at IS NULL"
    " AND (m.role IN ('owner', 'admin') OR EXISTS ("
    "   SELECT 1 FROM account_roles r, unnest(r.permissions) p"
    "    WHERE r.account_id = m.account_id AND r.key = m.role"
    "      AND %(permission)s LIKE replace(replace(p, '_', '\\_'), '*', '%%')))"
    " AND m.user_id <> %(except)s::uuid AND m.created_at < %(at)s ORDER BY m.user_id"
)
