"""SQLAlchemy Core table definitions mirroring sql/ (the query builder's view of the schema).

The SQL migrations are the source of truth; these definitions only name columns for queries.
"""

from __future__ import annotations

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID

metadata = MetaData()


def _ts(name: str, nullable: bool = True) -> Column[object]:
    return Column(name, DateTime(timezone=True), nullable=nullable)


def _uuid(name: str, primary_key: bool = False) -> Column[object]:
    return Column(name, UUID(as_uuid=True), primary_key=primary_key)


users = Table(
    "users",
    metadata,
    _uuid("id", True),
    Column("email", Text),
    Column("first_name", Text),
    Column("last_name", Text),
    _ts("email_verified_at"),
    _ts("tokens_valid_after"),
    _ts("created_at"),
    _ts("updated_at"),
)

user_passwords = Table(
    "user_passwords",
    metadata,
    _uuid("user_id", True),
    Column("password_hash", Text),
    _ts("created_at"),
    _ts("updated_at"),
)

user_identities = Table(
    "user_identities",
    metadata,
    _uuid("id", True),
    _uuid("user_id"),
    Column("provider", Text),
    Column("subject", Text),
    Column("email", Text),
    _ts("created_at"),
)

user_tokens = Table(
    "user_tokens",
    metadata,
    Column("token_hash", LargeBinary, primary_key=True),
    _uuid("user_id"),
    Column("purpose", Text),
    _ts("created_at"),
    _ts("expires_at"),
    _ts("used_at"),
    Column("password_hash", Text),  # sql/0040: the password a verification link installs
    Column("binding_hash", LargeBinary),  # sql/0091: the registering browser's binding cookie
)

accounts = Table(
    "accounts",
    metadata,
    _uuid("id", True),
    Column("name", Text),
    Column("claimed_domain", Text),
    _ts("created_at"),
    _ts("updated_at"),
    _ts("deleted_at"),
)

sessions = Table(
    "sessions",
    metadata,
    _uuid("id", True),
    _uuid("family_id"),
    _uuid("user_id"),
    _uuid("account_id"),
    Column("token_hash", LargeBinary),
    _ts("created_at"),
    _ts("expires_at"),
    _ts("rotated_at"),
    _ts("revoked_at"),
    _uuid("access_jti"),
    Column("user_agent", Text),
    Column("ip", Text),
)

revoked_tokens = Table(
    "revoked_tokens",
    metadata,
    _uuid("jti", True),
    _uuid("user_id"),
    _ts("expires_at"),
)

memberships = Table(
    "memberships",
    metadata,
    _uuid("id", True),
    _uuid("account_id"),
    _uuid("user_id"),
    Column("role", Text),
    _ts("created_at"),
    _ts("updated_at"),
    _ts("revoked_at"),
)

plans = Table(
    "plans",
    metadata,
    Column("code", Text, primary_key=True),
    Column("name", Text),
    Column("seats", Integer),
    Column("features", ARRAY(Text)),
)

account_plans = Table(
    "account_plans",
    metadata,
    _uuid("account_id", True),
    Column("plan_code", Text),
    Column("seats", Integer),
    _ts("updated_at"),
)

account_feature_overrides = Table(
    "account_feature_overrides",
    metadata,
    _uuid("account_id", True),
    Column("feature", Text, primary_key=True),
    Column("enabled", Boolean),
    _ts("updated_at"),
)

invitations = Table(
    "invitations",
    metadata,
    _uuid("id", True),
    _uuid("account_id"),
    Column("email", Text),
    Column("role", Text),
    Column("token_hash", LargeBinary),
    _uuid("invited_by"),
    _ts("created_at"),
    _ts("expires_at"),
    _ts("resent_at"),
    _ts("accepted_at"),
    _uuid("accepted_by"),
    _ts("revoked_at"),
)

join_requests = Table(
    "join_requests",
    metadata,
    _uuid("id", True),
    _uuid("account_id"),
    _uuid("user_id"),
    Column("domain", Text),
    Column("status", Text),
    _ts("created_at"),
    _ts("decided_at"),
    _uuid("decided_by"),
)

audit_log = Table(
    "audit_log",
    metadata,
    Column("id", BigInteger, primary_key=True),
    _uuid("account_id"),
    _uuid("actor_user_id"),
    Column("action", Text),
    Column("target", Text),
    Column("data", JSONB),
    _ts("created_at"),
)

email_suppressions = Table(
    "email_suppressions",
    metadata,
    Column("email", Text, primary_key=True),
    Column("reason", Text),
    Column("provider", Text),
    Column("details", JSONB),
    _ts("created_at"),
)

webhook_events = Table(
    "webhook_events",
    metadata,
    Column("provider", Text, primary_key=True),
    Column("event_id", Text, primary_key=True),
    _ts("received_at"),
)

jobs = Table(
    "jobs",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("kind", Text),
    Column("payload", JSONB),
    Column("status", Text),
    Column("attempts", Integer),
    Column("max_attempts", Integer),
    _ts("run_at"),
    _ts("locked_until"),
    Column("locked_by", Text),
    Column("last_error", Text),
    _ts("created_at"),
    _ts("updated_at"),
    _ts("finished_at"),
)

notifications = Table(
    "notifications",
    metadata,
    _uuid("id", True),
    _uuid("user_id"),
    _uuid("account_id"),
    Column("event_type", Text),
    Column("title", Text),
    Column("body", Text),
    Column("cta_url", Text),
    Column("cta_label", Text),
    Column("status", Text),
    _ts("read_at"),
    Column("payload", JSONB),
    _ts("created_at"),
)

notification_deliveries = Table(
    "notification_deliveries",
    metadata,
    _uuid("id", True),
    _uuid("notification_id"),
    Column("channel", Text),
    Column("status", Text),
    Column("reason", Text),
    Column("attempts", Integer),
    _ts("created_at"),
    _ts("updated_at"),
)

notification_dedup = Table(
    "notification_dedup",
    metadata,
    Column("dedup_key", Text, primary_key=True),
    _ts("expires_at"),
    _ts("created_at"),
)

notification_preferences = Table(
    "notification_preferences",
    metadata,
    _uuid("user_id", True),
    Column("event_type", Text, primary_key=True),
    Column("channel", Text, primary_key=True),
    Column("enabled", Boolean),
    _ts("updated_at"),
)

push_subscriptions = Table(
    "push_subscriptions",
    metadata,
    _uuid("id", True),
    _uuid("user_id"),
    Column("endpoint", Text),
    Column("p256dh_key", Text),
    Column("auth_key", Text),
    Column("user_agent", Text),
    _ts("expires_at"),
    _ts("created_at"),
    _ts("last_used_at"),
)

rate_limits = Table(
    "rate_limits",
    metadata,
    Column("key", Text, primary_key=True),
    _ts("window_start"),
    Column("count", Integer),
)
