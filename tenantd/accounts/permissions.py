"""The permission matrix of roles against actions (INTERFACE.md "Roles")."""

from __future__ import annotations

from collections.abc import Mapping

from tenantd.errors import Forbidden

RANK = {"member": 1, "admin": 2, "owner": 3}

# action -> lowest role allowed
ACTIONS: dict[str, str] = {
    "account.read": "member",
    "members.read": "member",
    "account.leave": "member",
    "account.rename": "admin",
    "invitations.manage": "admin",
    "members.manage": "admin",
    "join_requests.decide": "admin",
    "audit.read": "admin",
    "directories.manage": "admin",  # SCIM directories and their group-to-role mapping
    "ownership.transfer": "owner",
    "account.delete": "owner",
    "account.mfa_policy": "owner",  # requireMfa
}

# capability name in /me -> (action, feature the action also needs)
CAPABILITIES: dict[str, tuple[str, str | None]] = {
    "canRenameAccount": ("account.rename", None),
    "canInviteMembers": ("invitations.manage", "team_invitations"),
    "canManageMembers": ("members.manage", None),
    "canDecideJoinRequests": ("join_requests.decide", None),
    "canTransferOwnership": ("ownership.transfer", None),
    "canDeleteAccount": ("account.delete", None),
    "canLeaveAccount": ("account.leave", None),
}


def allowed(role: str | None, action: str) -> bool:
    if role is None:
        return False
    return RANK.get(role, 0) >= RANK[ACTIONS[action]]


def require(role: str | None, action: str) -> None:
    if not allowed(role, action):
        raise Forbidden()


def capabilities(role: str | None, features: Mapping[str, bool]) -> dict[str, bool]:
    result = {}
    for name, (action, feature) in CAPABILITIES.items():
        ok = allowed(role, action) and (feature is None or features.get(feature, False))
        if name == "canLeaveAccount":
            ok = ok and role != "owner"  # the owner must transfer ownership first
        result[name] = ok
    return result
