"""Tenancy's errors: seats, ownership, invitations, domain claims and account restore, each on
a generic kind of `tenantd.errors` (the one error middleware answers them all the same way)."""

from __future__ import annotations

from tenantd.errors import AppError, Conflict, Forbidden


class FeatureNotEnabled(Forbidden):
    code = "FEATURE_NOT_ENABLED"
    message = "This feature is not enabled for the account"


class DomainClaimed(Conflict):
    code = "DOMAIN_CLAIMED"
    # The requester learns here (and by email) that the owner and admins will see the address.
    message = (
        "This email domain is claimed by another account; a request to join it is pending."
        " Your email address is shown to that account's owner and admins, who approve or deny"
        " the request. Until then you cannot create a separate account."
    )


class SeatLimitReached(Conflict):
    code = "SEAT_LIMIT_REACHED"
    message = "The account has no free seat"


class OwnerCannotLeave(Conflict):
    code = "OWNER_CANNOT_LEAVE"
    message = "The owner cannot leave; transfer ownership or delete the account"


class InvitationRevoked(AppError):
    status = 410
    code = "INVITATION_REVOKED"
    message = "This invitation was revoked"


class InvitationExpired(AppError):
    status = 410
    code = "INVITATION_EXPIRED"
    message = "This invitation has expired"


class InvitationAlreadyUsed(AppError):
    status = 410
    code = "INVITATION_ALREADY_USED"
    message = "This invitation was already used"


# -- Account restore (issue 18) ----------------------------------------------------------------


class AccountPurged(AppError):
    status = 410
    code = "ACCOUNT_PURGED"
    message = "The account's grace period is over; it was (or is being) deleted for good"


class DomainTaken(Conflict):
    code = "DOMAIN_TAKEN"
    message = "Another account claimed this account's email domain after it was deleted"


class AccountNotDeleted(Conflict):
    code = "ACCOUNT_NOT_DELETED"
    message = "The account is not deleted"


class RoleExists(Conflict):
    code = "ROLE_EXISTS"
    message = "The account already has a role with this key"


class SystemRole(Conflict):
    code = "SYSTEM_ROLE"
    message = "The system roles owner, admin and member cannot be changed or deleted"


class RoleInUse(Conflict):
    code = "ROLE_IN_USE"
    message = (
        "Members or pending invitations have this role; give them another role (or revoke the"
        " invitations) first"
    )
