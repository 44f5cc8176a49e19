"""The accounts' settings section."""

from __future__ import annotations

from typing import ClassVar

from tenantd.settings import SWITCH, Flag, Positive, Section, env


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
