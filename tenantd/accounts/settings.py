"""The accounts' settings section."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator

from tenantd.settings import SWITCH, Flag, Positive, Section, env, names


def app_permissions(value: Any) -> tuple[str, ...]:
    """The application's own permissions: a comma list of a-z 0-9 _ . : - (no `*`)."""
    found = names(value)
    for name in found:
        if not re.fullmatch(r"[a-z0-9_.:-]{1,100}", name):
            raise ValueError(f": {name!r} is not a permission (a-z 0-9 _ . : -, no *)")
    return found


AppPermissions = Annotated[tuple[str, ...], BeforeValidator(app_permissions)]


class AccountSettings(Section):
    """Accounts, their plans, invitations and claimed email domains."""

    title: ClassVar[str] = "Tenancy"

    account_domain_claiming: Flag = env(
        "ACCOUNT_DOMAIN_CLAIMING",
        "true: the first verified sign-up on a non-public email domain claims it; later"
        " sign-ups on that domain ask to join that account.",
        default=False,
        json_schema_extra=SWITCH,
    )
    invitation_ttl_hours: Positive = env(
        "INVITATION_TTL_HOURS", "Hours an invitation link stays valid.", default=168
    )
    default_plan: str = env(
        "DEFAULT_PLAN",
        "Plan of a new account: free (1 seat), team (10) or business (100). scripts/run sets team.",
        default="free",
    )
    app_permissions: AppPermissions = env(
        "TENANTD_PERMISSIONS",
        "The application's own permissions (comma-separated, a-z 0-9 _ . : -), which custom roles"
        " may name beside tenantd's own (a typo is a 422). Empty: a custom role may name any"
        " permission of a-z 0-9 _ . : * - (declared by using it).",
        default=(),
    )
