"""Plans, seats and features: plan defaults, per-account overrides, the resolved set."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from tenantd.accounts import queries
from tenantd.db import Conn, Row

KNOWN_FEATURES = ("team_invitations",)


@dataclass(frozen=True)
class Entitlements:
    plan: str
    seats: int
    features: dict[str, bool]


def resolve_features(plan_features: list[str], overrides: dict[str, bool]) -> dict[str, bool]:
    names = set(KNOWN_FEATURES) | set(plan_features) | set(overrides)
    return {name: overrides.get(name, name in plan_features) for name in sorted(names)}


def features_of(row: Row) -> dict[str, bool]:
    """The resolved features of a query row with the plan's `plan_features` (NULL without a
    plan) and the account's `overrides`."""
    return resolve_features(list(row["plan_features"] or []), row["overrides"])


async def entitlements(conn: Conn, account_id: uuid.UUID) -> Entitlements:
    row = await queries.entitlements(conn, account_id)
    if row is None:  # no plan row: treat as the most restrictive plan
        return Entitlements(plan="free", seats=1, features=resolve_features([], {}))
    return Entitlements(
        plan=row["plan"],
        seats=row["seats"],
        features=features_of(row),
    )
