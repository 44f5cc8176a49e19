"""Tenancy's errors: seats, ownership, invitations, domain claims, account restore and roles,
each on a generic kind of `tenantd.errors` (the one error middleware answers them all the same
way). One table: a row is (kind or status, code, message); the class is named after the code."""

from __future__ import annotations

from tenantd.errors import Conflict, Forbidden, declare

GONE = 410

(
    FeatureNotEnabled,
    DomainClaimed,
    SeatLimitReached,
    OwnerCannotLeave,
    InvitationRevoked,
    InvitationExpired,
    InvitationAlreadyUsed,
    AccountPurged,
    DomainTaken,
    AccountNotDeleted,
    RoleExists,
    SystemRole,
    RoleInUse,
) = declare(
    __name__,
    (Forbidden, "FEATURE_NOT_ENABLED", "This feature is not enabled for the account"),
    # The requester learns here (and by email) that the owner and admins will see the address.
    (
        Conflict,
        "DOMAIN_CLAIMED",
        "This email domain is claimed by another account; a request to join it is pending."
        " Your email address is shown to that account's owner and admins, who approve or deny"
        " the request. Until then you cannot create a separate account.",
    ),
    (Conflict, "SEAT_LIMIT_REACHED", "The account has no free seat"),
    (
        Conflict,
        "OWNER_CANNOT_LEAVE",
        "The owner cannot leave; transfer ownership or delete the account",
    ),
    (GONE, "INVITATION_REVOKED", "This invitation was revoked"),
    (GONE, "INVITATION_EXPIRED", "This invitation has expired"),
    (GONE, "INVITATION_ALREADY_USED", "This invitation was already used"),
    # Account restore (issue 18).
    (
        GONE,
        "ACCOUNT_PURGED",
        "The account's grace period is over; it was (or is being) deleted for good",
    ),
    (
        Conflict,
        "DOMAIN_TAKEN",
        "Another account claimed this account's email domain after it was deleted",
    ),
    (Conflict, "ACCOUNT_NOT_DELETED", "The account is not deleted"),
    (Conflict, "ROLE_EXISTS", "The account already has a role with this key"),
    (
        Conflict,
        "SYSTEM_ROLE",
        "The system roles owner, admin and member cannot be changed or deleted",
    ),
    (
        Conflict,
        "ROLE_IN_USE",
        "Members or pending invitations have this role; give them another role (or revoke the"
        " invitations) first",
    ),
)
