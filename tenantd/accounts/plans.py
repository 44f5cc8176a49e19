"""Plans, seats and features: plan defaults, per-account overrides, the resolved set."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from tenantd.db import Conn

KNOWN_FEATURES = ("team_invitations",)


@dataclass(frozen=True)
class Entitlements:
    plan: str
    seats: int
    features: dict[str, bool]


ENTITLEMENTS_SQL = """
SELECT p.code AS plan, COALESCE(ap.seats, p.seats) AS seats, p.features AS plan_features,
       COALESCE((SELECT jsonb_object_agg(o.feature, o.enabled)
                   FROM account_feature_overrides o WHERE o.account_id = %(a)s), '{}') AS overrides
  FROM account_plans ap JOIN plans p ON p.code = ap.plan_code
 WHERE ap.account_id = %(a)s
"""


def resolve_features(plan_features: list[str], overrides: dict[str, bool]) -> dict[str, bool]:
    names = set(KNOWN_FEATURES) | set(plan_features) | set(overrides)
    return {name: overrides.get(name, name in plan_features) for name in sorted(names)}


async def entitlements(conn: Conn, account_id: uuid.UUID) -> Entitlements:
    row = await conn.fetch_one(ENTITLEMENTS_SQL, {"a": account_id})
    if row is None:  # no plan row: treat as the most restrictive plan
        return Entitlements(plan="free", seats=1, features=resolve_features([], {}))
    return Entitlements(
        plan=row["plan"],
        seats=row["seats"],
        features=resolve_features(list(row["plan_features"]), row["overrides"]),
    )
