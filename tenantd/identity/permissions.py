"""Permissions: what a role in an account may do (docs/roles.md lists every one).

A role is a set of permission strings (`[a-z0-9_.:*-]`). tenantd's own permissions, one per
action it guards, are below; an application adds its own (`TENANTD_PERMISSIONS`, or simply by
naming them in a custom role). A `*` in a held permission matches any run of characters:
`billing:*` holds `billing:read`, `*` holds everything.

The system roles `owner`, `admin` and `member` are fixed sets equal to what each could do
before custom roles; custom roles are rows of `account_roles`, read with the membership (the
guard's token-state statement and the account lock both read them). Four permissions belong
to the owner alone (OWNER_ONLY): no custom role holds them, even through a wildcard, so the
single-owner invariant and the transfer rules stay as they are.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase

from tenantd.errors import Forbidden
from tenantd.principal import Principal

# -- tenantd's own permissions ------------------------------------------------------------------

ACCOUNT_READ = "account:read"
ACCOUNT_UPDATE = "account:update"
ACCOUNT_DELETE = "account:delete"
ACCOUNT_REQUIRE_MFA = "account:require_mfa"
MEMBERS_READ = "members:read"
MEMBERS_INVITE = "members:invite"
MEMBERS_CHANGE_ROLE = "members:change_role"
MEMBERS_REMOVE = "members:remove"
JOIN_REQUESTS_DECIDE = "join_requests:decide"
AUDIT_READ = "audit:read"
OWNERSHIP_TRANSFER = "ownership:transfer"
ROLES_MANAGE = "roles:manage"
NOTIFICATIONS_MANAGE_DEFAULTS = "notifications:manage_defaults"
SSO_MANAGE = "sso:manage"
DIRECTORIES_MANAGE = "directories:manage"
PORTAL_CREATE = "portal:create"

# permission -> what it allows (the docs table is checked against this)
TENANTD: dict[str, str] = {
    ACCOUNT_READ: "read the account (plan, seats, features)",
    ACCOUNT_UPDATE: "rename the account",
    ACCOUNT_DELETE: "soft-delete the account (owner only)",
    ACCOUNT_REQUIRE_MFA: "require a second factor of every member (owner only)",
    MEMBERS_READ: "list the members",
    MEMBERS_INVITE: "create, list, resend and revoke invitations",
    MEMBERS_CHANGE_ROLE: "change a member's role",
    MEMBERS_REMOVE: "remove a member",
    JOIN_REQUESTS_DECIDE: "list, approve and deny join requests",
    AUDIT_READ: "read the account's audit log",
    OWNERSHIP_TRANSFER: "transfer ownership (owner only)",
    ROLES_MANAGE: "create, change and delete custom roles",
    NOTIFICATIONS_MANAGE_DEFAULTS: "set the account's notification defaults",
    SSO_MANAGE: "add, change and remove single sign-on connections",
    DIRECTORIES_MANAGE: "add and remove SCIM directories",
    PORTAL_CREATE: "create admin portal links for the customer's IT (owner only)",
}
NAMESPACES = frozenset(name.split(":", 1)[0] for name in TENANTD)
OWNER_ONLY = frozenset({ACCOUNT_DELETE, ACCOUNT_REQUIRE_MFA, OWNERSHIP_TRANSFER, PORTAL_CREATE})

SYSTEM_ROLES: dict[str, frozenset[str]] = {
    "owner": frozenset({"*"}),
    "admin": frozenset(set(TENANTD) - OWNER_ONLY),
    "member": frozenset({ACCOUNT_READ, MEMBERS_READ}),
}
# Who may change a member's role or manage roles without holding every permission involved:
# the system managers keep their rights of before (an admin makes someone admin).
TRUSTED = frozenset({"owner", "admin"})

PERMISSION = re.compile(r"[a-z0-9_.:*-]{1,100}")


# -- holding --------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def granted(role: str | None, custom: tuple[str, ...] | None) -> frozenset[str]:
    """What a role holds: a system role's fixed set, else the custom role's list (without the
    owner's own permissions); nothing without a role."""
    if role is None:
        return frozenset()
    system = SYSTEM_ROLES.get(role)
    if system is not None:
        return system
    return frozenset(p for p in custom or () if p not in OWNER_ONLY)


def holds(held: Iterable[str], permission: str, *, owner: bool = False) -> bool:
    """Whether `held` grants `permission`, wildcards included; an owner-only permission is
    granted only when `owner` says the holder is the owner."""
    if permission in OWNER_ONLY and not owner:
        return False
    held = held if isinstance(held, frozenset) else frozenset(held)
    if permission in held:
        return True
    return any("*" in p and fnmatchcase(permission, p) for p in held)


def allowed(role: str | None, custom: tuple[str, ...] | None, permission: str) -> bool:
    return holds(granted(role, custom), permission, owner=role == "owner")


def require_grant(role: str | None, custom: tuple[str, ...] | None, permission: str) -> None:
    """403 FORBIDDEN unless the role holds `permission`."""
    if not allowed(role, custom, permission):
        raise Forbidden(details={"permission": permission})


def require(actor: Principal, permission: str) -> None:
    """403 FORBIDDEN unless the caller's role in the token's account holds `permission`."""
    require_grant(actor.role, actor.role_permissions, permission)


def effective(role: str | None, custom: tuple[str, ...] | None) -> list[str]:
    """The permissions listed in /me: the role's set, sorted (the owner's is `["*"]`)."""
    return sorted(granted(role, custom))


def covers(role: str | None, custom: tuple[str, ...] | None, wanted: Iterable[str]) -> bool:
    """Whether a role holds every permission of `wanted` (a wildcard wanted is held only by
    a wildcard at least as wide): a custom role hands out no more than it has."""
    if role in TRUSTED:
        return True
    held = granted(role, custom)
    return all(holds(held, p) for p in wanted)


# -- validating a custom role's list -------------------------------------------------------------


def problems(permissions: Iterable[str], declared: Iterable[str] = ()) -> dict[str, str]:
    """Field errors of a custom role's permission list, by index (`permissions.2`): not of
    `[a-z0-9_.:*-]`; naming no tenantd permission in a tenantd namespace; owner only; or,
    when the application declared its permissions (`TENANTD_PERMISSIONS`), none of them."""
    declared = tuple(declared)
    errors: dict[str, str] = {}
    for index, permission in enumerate(permissions):
        where = f"permissions.{index}"
        if not PERMISSION.fullmatch(permission):
            errors[where] = "invalid_permission: use 1 to 100 of a-z 0-9 _ . : * -"
        elif permission in OWNER_ONLY:
            errors[where] = "owner_only: only the owner holds this permission"
        elif permission.split(":", 1)[0] in NAMESPACES:
            if not any(fnmatchcase(known, permission) for known in TENANTD):
                errors[where] = "unknown_permission: no tenantd permission matches it"
        elif declared and not any(fnmatchcase(known, permission) for known in declared):
            errors[where] = "unknown_permission: not declared in TENANTD_PERMISSIONS"
    return errors


# -- /me capabilities (booleans the hosted pages and clients show or hide controls by) ----------

# capability name in /me -> (permission, feature the action also needs)
CAPABILITIES: dict[str, tuple[str, str | None]] = {
    "canRenameAccount": (ACCOUNT_UPDATE, None),
    "canInviteMembers": (MEMBERS_INVITE, "team_invitations"),
    "canManageMembers": (MEMBERS_CHANGE_ROLE, None),
    "canDecideJoinRequests": (JOIN_REQUESTS_DECIDE, None),
    "canTransferOwnership": (OWNERSHIP_TRANSFER, None),
    "canDeleteAccount": (ACCOUNT_DELETE, None),
    "canManageRoles": (ROLES_MANAGE, None),
}


def capabilities(
    role: str | None, custom: tuple[str, ...] | None, features: Mapping[str, bool]
) -> dict[str, bool]:
    result = {
        name: allowed(role, custom, permission)
        and (feature is None or features.get(feature, False))
        for name, (permission, feature) in CAPABILITIES.items()
    }
    # Anyone but the owner may leave (the owner transfers ownership first): a role never
    # keeps a person in an account.
    result["canLeaveAccount"] = role is not None and role != "owner"
    return result
