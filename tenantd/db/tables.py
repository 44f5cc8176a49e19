"""The schema as SQLAlchemy Core sees it: every table, column, primary key and index that
the migrations in sql/ build (tests/db/test_tables.py checks it against a migrated database).

The migrations stay the source of truth (they carry defaults, checks and foreign keys too);
this module is their one description in Python, which dynamically composed queries (the
sweeps' batched deletes) are built from. A new migration changes this file in the same commit.
"""

from __future__ import annotations

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Double,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
    Time,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID

metadata = MetaData()


users = Table(
    "users",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("email", Text, nullable=False),
    Column("first_name", Text, nullable=False),
    Column("last_name", Text, nullable=False),
    Column("email_verified_at", DateTime(timezone=True)),
    Column("tokens_valid_after", DateTime(timezone=True)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("mfa_enabled", Boolean, nullable=False),  # sql/0125
    # Beyond (issue 18): delete my user
    Column("deleted_at", DateTime(timezone=True)),
    Column("deleted_email", Text),
    Column("anonymized_at", DateTime(timezone=True)),
    # Beyond (issue 18): quiet hours
    Column("time_zone", Text),
    Column("quiet_hours_start", Time),
    Column("quiet_hours_end", Time),
    Column("locale", Text),  # Beyond (issue 18): languages
    # Operators (issue 28): sql/0290
    Column("disabled_at", DateTime(timezone=True)),
    Column("last_sign_in_at", DateTime(timezone=True)),
)
Index("users_email_key", func.lower(users.c.email), unique=True)
Index(
    "users_deleted_idx",
    users.c.deleted_at,
    postgresql_where=text("deleted_at IS NOT NULL AND anonymized_at IS NULL"),
)
Index("users_created_idx", users.c.created_at.desc(), users.c.id.desc())
Index(
    "users_email_prefix_idx",
    func.lower(users.c.email),
    postgresql_ops={"lower": "text_pattern_ops"},
)
Index(
    "users_search_trgm_idx",
    # as PostgreSQL prints the expression of sql/0290
    text("lower((((email || ' '::text) || first_name) || ' '::text) || last_name)"),
    postgresql_using="gin",
    _table=users,
)

user_passwords = Table(
    "user_passwords",
    metadata,
    Column("user_id", UUID(as_uuid=True), primary_key=True),
    Column("password_hash", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

user_identities = Table(
    "user_identities",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("user_id", UUID(as_uuid=True), nullable=False),
    Column("provider", Text, nullable=False),
    Column("subject", Text, nullable=False),
    Column("email", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("provider", "subject", name="user_identities_provider_subject_key"),
    UniqueConstraint("user_id", "provider", name="user_identities_user_id_provider_key"),
)

user_tokens = Table(
    "user_tokens",
    metadata,
    Column("token_hash", LargeBinary, primary_key=True),
    Column("user_id", UUID(as_uuid=True), nullable=False),
    Column("purpose", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("used_at", DateTime(timezone=True)),
    Column("password_hash", Text),  # sql/0040: the password a verification link installs
    Column("binding_hash", LargeBinary),  # sql/0091: the registering browser's binding cookie
    Column("first_name", Text),  # sql/0210: the names of the sign-up that made the link
    Column("last_name", Text),
    Index("user_tokens_expires_idx", "expires_at"),
    Index("user_tokens_user_idx", "user_id", "purpose"),
)

accounts = Table(
    "accounts",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("name", Text, nullable=False),
    Column("claimed_domain", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("deleted_at", DateTime(timezone=True)),
    Column("require_mfa", Boolean, nullable=False),  # sql/0125
    Index("accounts_deleted_at_idx", "deleted_at", postgresql_where=text("deleted_at IS NOT NULL")),
)
Index(
    "accounts_claimed_domain_live_key",
    func.lower(accounts.c.claimed_domain),
    unique=True,
    postgresql_where=text("claimed_domain IS NOT NULL AND deleted_at IS NULL"),
)

sessions = Table(
    "sessions",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("family_id", UUID(as_uuid=True), nullable=False),
    Column("user_id", UUID(as_uuid=True), nullable=False),
    Column("account_id", UUID(as_uuid=True)),
    Column("token_hash", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("rotated_at", DateTime(timezone=True)),
    Column("revoked_at", DateTime(timezone=True)),
    Column("access_jti", UUID(as_uuid=True)),
    Column("user_agent", Text),
    Column("ip", Text),
    Column("signed_in_at", DateTime(timezone=True)),
    Column("method", Text),
    UniqueConstraint("token_hash", name="sessions_token_hash_key"),
    Index("sessions_expires_idx", "expires_at"),
    Index("sessions_family_idx", "family_id"),
    Index("sessions_user_idx", "user_id"),
)

revoked_tokens = Table(
    "revoked_tokens",
    metadata,
    Column("jti", UUID(as_uuid=True), primary_key=True),
    Column("user_id", UUID(as_uuid=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Index("revoked_tokens_expires_idx", "expires_at"),
)

oauth_state_uses = Table(
    "oauth_state_uses",
    metadata,
    Column("jti", UUID(as_uuid=True), primary_key=True),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Index("oauth_state_uses_expires_idx", "expires_at"),
)

# sql/0094: exact row counts of /metrics, kept on write by statement-level triggers.
metric_counts = Table(
    "metric_counts",
    metadata,
    Column("family", Text, nullable=False),
    Column("a", Text, nullable=False),
    Column("b", Text, nullable=False),
    Column("delta", BigInteger, nullable=False),
)

memberships = Table(
    "memberships",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("account_id", UUID(as_uuid=True), nullable=False),
    Column("user_id", UUID(as_uuid=True), nullable=False),
    Column("role", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("revoked_at", DateTime(timezone=True)),
    Index(
        "memberships_active_key",
        "account_id",
        "user_id",
        unique=True,
        postgresql_where=text("revoked_at IS NULL"),
    ),
    Index(
        "memberships_one_owner_key",
        "account_id",
        unique=True,
        postgresql_where=text("role = 'owner' AND revoked_at IS NULL"),
    ),
    Index("memberships_user_idx", "user_id", postgresql_where=text("revoked_at IS NULL")),
)

account_roles = Table(
    "account_roles",
    metadata,
    Column("account_id", UUID(as_uuid=True), primary_key=True),
    Column("key", Text, primary_key=True),
    Column("name", Text, nullable=False),
    Column("permissions", ARRAY(Text), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

plans = Table(
    "plans",
    metadata,
    Column("code", Text, primary_key=True),
    Column("name", Text, nullable=False),
    Column("seats", Integer, nullable=False),
    Column("features", ARRAY(Text), nullable=False),
)

account_plans = Table(
    "account_plans",
    metadata,
    Column("account_id", UUID(as_uuid=True), primary_key=True),
    Column("plan_code", Text, nullable=False),
    Column("seats", Integer),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

account_feature_overrides = Table(
    "account_feature_overrides",
    metadata,
    Column("account_id", UUID(as_uuid=True), primary_key=True),
    Column("feature", Text, primary_key=True),
    Column("enabled", Boolean, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

invitations = Table(
    "invitations",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("account_id", UUID(as_uuid=True), nullable=False),
    Column("email", Text, nullable=False),
    Column("role", Text, nullable=False),
    Column("token_hash", LargeBinary, nullable=False),
    Column("invited_by", UUID(as_uuid=True)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("resent_at", DateTime(timezone=True)),
    Column("accepted_at", DateTime(timezone=True)),
    Column("accepted_by", UUID(as_uuid=True)),
    Column("revoked_at", DateTime(timezone=True)),
    UniqueConstraint("token_hash", name="invitations_token_hash_key"),
    Index("invitations_account_idx", "account_id"),
    Index(
        "invitations_pending_expiry_idx",
        "expires_at",
        postgresql_where=text("accepted_at IS NULL AND revoked_at IS NULL"),
    ),
)
Index(
    "invitations_pending_email_key",
    invitations.c.account_id,
    func.lower(invitations.c.email),
    unique=True,
    postgresql_where=text("accepted_at IS NULL AND revoked_at IS NULL"),
)

join_requests = Table(
    "join_requests",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("account_id", UUID(as_uuid=True), nullable=False),
    Column("user_id", UUID(as_uuid=True), nullable=False),
    Column("domain", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("decided_at", DateTime(timezone=True)),
    Column("decided_by", UUID(as_uuid=True)),
    Index(
        "join_requests_pending_key",
        "account_id",
        "user_id",
        unique=True,
        postgresql_where=text("status = 'pending'"),
    ),
    Index("join_requests_pending_user_idx", "user_id", postgresql_where=text("status = 'pending'")),
)

audit_log = Table(
    "audit_log",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("account_id", UUID(as_uuid=True)),
    Column("actor_user_id", UUID(as_uuid=True)),
    Column("action", Text, nullable=False),
    Column("target", Text),
    Column("data", JSONB, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("prev_hash", LargeBinary, nullable=False),
    Column("row_hash", LargeBinary, nullable=False),
    Index("audit_log_account_idx", "account_id", "created_at"),
    Index("audit_log_account_id_idx", "account_id", "id"),
    Index("audit_log_chain_key", "account_id", "prev_hash", unique=True),
)

email_suppressions = Table(
    "email_suppressions",
    metadata,
    Column("email", Text, primary_key=True),
    Column("reason", Text, nullable=False),
    Column("provider", Text, nullable=False),
    Column("details", JSONB, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("email_suppressions_provider_idx", "provider", "reason"),
)

email_sends = Table(  # sql/0241: sent-markers of keyed emails (tenantd/email/service.py)
    "email_sends",
    metadata,
    Column("key", Text, primary_key=True),
    Column("provider", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("message_id", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("sent_at", DateTime(timezone=True)),
    Index("email_sends_created_idx", "created_at"),
)

webhook_events = Table(
    "webhook_events",
    metadata,
    Column("provider", Text, primary_key=True),
    Column("event_id", Text, primary_key=True),
    Column("received_at", DateTime(timezone=True), nullable=False),
    Index("webhook_events_received_idx", "received_at"),
)


jobs = Table(
    "jobs",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("kind", Text, nullable=False),
    Column("payload", JSONB, nullable=False),
    Column("status", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("run_at", DateTime(timezone=True), nullable=False),
    Column("locked_until", DateTime(timezone=True)),
    Column("locked_by", Text),
    Column("last_error", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Index(
        "jobs_finished_idx",
        "finished_at",
        postgresql_where=text("status = ANY (ARRAY['done', 'failed'])"),
    ),
    Index("jobs_lease_idx", "locked_until", postgresql_where=text("status = 'running'")),
    Index("jobs_ready_idx", "run_at", "id", postgresql_where=text("status = 'queued'")),
)

job_workers = Table(
    "job_workers",
    metadata,
    Column("worker", Text, primary_key=True),
    Column("backend_pid", Integer, nullable=False),
    Column("backend_start", DateTime(timezone=True), nullable=False),
    Column("registered_at", DateTime(timezone=True), nullable=False),
)

notifications = Table(
    "notifications",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("user_id", UUID(as_uuid=True), nullable=False),
    Column("account_id", UUID(as_uuid=True)),
    Column("event_type", Text, nullable=False),
    Column("title", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("cta_url", Text, nullable=False),
    Column("cta_label", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("read_at", DateTime(timezone=True)),
    Column("payload", JSONB, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("in_app", Boolean, nullable=False),  # sql/0020: false keeps it out of the inbox
    Index(
        "notifications_account_idx", "account_id", postgresql_where=text("account_id IS NOT NULL")
    ),
)
Index(
    "notifications_user_created_idx",
    notifications.c.user_id,
    notifications.c.created_at.desc(),
    notifications.c.id.desc(),
)
Index(
    "notifications_user_unread_idx",
    notifications.c.user_id,
    notifications.c.created_at.desc(),
    notifications.c.id.desc(),
    postgresql_where=text("status = 'unread' AND in_app"),
)

notification_deliveries = Table(
    "notification_deliveries",
    metadata,
    Column("id", UUID(as_uuid=True), nullable=False),  # unindexed since sql/0192
    Column("notification_id", UUID(as_uuid=True), nullable=False),
    Column("channel", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("reason", Text),
    Column("attempts", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # The rows' key (sql/0192: no primary key, and no index on `id`).
    UniqueConstraint(
        "notification_id", "channel", name="notification_deliveries_notification_id_channel_key"
    ),
)

notification_dedup = Table(
    "notification_dedup",
    metadata,
    Column("dedup_key", Text, primary_key=True),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("notification_dedup_expires_idx", "expires_at"),
)

notification_preferences = Table(
    "notification_preferences",
    metadata,
    Column("user_id", UUID(as_uuid=True), primary_key=True),
    Column("event_type", Text, primary_key=True),
    Column("channel", Text, primary_key=True),
    Column("enabled", Boolean, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

push_subscriptions = Table(
    "push_subscriptions",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("user_id", UUID(as_uuid=True), nullable=False),
    Column("endpoint", Text, nullable=False),
    Column("p256dh_key", Text, nullable=False),
    Column("auth_key", Text, nullable=False),
    Column("user_agent", Text),
    Column("expires_at", DateTime(timezone=True)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("last_used_at", DateTime(timezone=True)),
    UniqueConstraint("user_id", "endpoint", name="push_subscriptions_user_id_endpoint_key"),
)

rate_limits = Table(
    "rate_limits",
    metadata,
    Column("key", Text, primary_key=True),
    Column("window_start", DateTime(timezone=True), nullable=False),
    Column("count", Integer, nullable=False),
    Index("rate_limits_window_idx", "window_start"),
)

sweep_runs = Table(
    "sweep_runs",
    metadata,
    Column("name", Text, primary_key=True),
    Column("run_count", BigInteger, nullable=False),
    Column("last_started_at", DateTime(timezone=True)),
    Column("last_finished_at", DateTime(timezone=True)),
    Column("last_status", Text),
    Column("last_counts", JSONB, nullable=False),
    Column("last_error", Text),
    Column("last_instance", Text),
    Column("last_success_at", DateTime(timezone=True)),
)

# sql/0110: the transactional outbox (tenantd/outbox).
outbox_events = Table(
    "outbox_events",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("seq", BigInteger),
    Column("event_id", Text, nullable=False),
    Column("type", Text, nullable=False),
    Column("account_id", UUID(as_uuid=True)),
    Column("subject", Text, nullable=False),
    Column("actor_type", Text, nullable=False),
    Column("actor_id", Text),
    Column("data", JSONB, nullable=False),
    Column("previous", JSONB),
    Column("occurred_at", DateTime(timezone=True), nullable=False),
    Index("outbox_events_unsequenced_idx", "id", postgresql_where=text("seq IS NULL")),
    Index("outbox_events_occurred_idx", "occurred_at"),
    UniqueConstraint("seq", name="outbox_events_seq_key"),
    UniqueConstraint("event_id", name="outbox_events_event_id_key"),
)

outbox_sequencer = Table(
    "outbox_sequencer",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("last_seq", BigInteger, nullable=False),
)

# sql/0111: outbound webhooks (tenantd/webhooks).
webhook_endpoints = Table(
    "webhook_endpoints",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("url", Text, nullable=False),
    Column("description", Text, nullable=False),
    Column("event_types", ARRAY(Text), nullable=False),
    Column("secret", Text),  # clear text only until the start-up hook seals it (0220)
    Column("previous_secret", Text),
    Column("previous_secret_expires_at", DateTime(timezone=True)),
    Column("secret_sealed", LargeBinary),
    Column("previous_secret_sealed", LargeBinary),
    Column("failing_since", DateTime(timezone=True)),
    Column("disabled_at", DateTime(timezone=True)),
    Column("disabled_reason", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("endpoint_id", UUID(as_uuid=True), nullable=False),
    Column("event_row", BigInteger, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("subject", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("job_id", BigInteger),
    Column("next_attempt_at", DateTime(timezone=True), nullable=False),
    Column("first_attempt_at", DateTime(timezone=True)),
    Column("last_attempt_at", DateTime(timezone=True)),
    Column("last_status_code", Integer),
    Column("last_error", Text),
    Column("delivered_at", DateTime(timezone=True)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("webhook_deliveries_endpoint_idx", "endpoint_id", "id"),
    Index("webhook_deliveries_event_idx", "event_row"),
    Index(
        "webhook_deliveries_open_idx",
        "endpoint_id",
        "subject",
        "seq",
        postgresql_where=text("status = 'pending'"),
    ),
    Index(  # sql/0240: parked deliveries, handed over when an earlier one settles
        "webhook_deliveries_parked_idx",
        "endpoint_id",
        "subject",
        "seq",
        postgresql_where=text("status = 'pending' AND job_id IS NULL"),
    ),
)

api_keys = Table(  # sql/0115: server API keys (issue 15)
    "api_keys",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("name", Text, nullable=False),
    Column("scopes", ARRAY(Text), nullable=False),
    Column("secret_hash", LargeBinary, nullable=False),
    Column("created_by", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("last_used_at", DateTime(timezone=True)),
    Column("revoked_at", DateTime(timezone=True)),
)

api_idempotency_keys = Table(  # sql/0116: first answers of server routes, kept 24 h
    "api_idempotency_keys",
    metadata,
    Column("api_key_id", UUID(as_uuid=True), primary_key=True),
    Column("route", Text, primary_key=True),
    Column("idempotency_key", Text, primary_key=True),
    Column("request_hash", LargeBinary, nullable=False),
    Column("response", JSONB),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("api_idempotency_keys_created_idx", "created_at"),
)

# -- multi-factor authentication (sql/0125) ---------------------------------------------------

mfa_totp = Table(
    "mfa_totp",
    metadata,
    Column("user_id", UUID(as_uuid=True), primary_key=True),
    Column("secret_encrypted", LargeBinary, nullable=False),
    Column("confirmed_at", DateTime(timezone=True)),
    Column("last_used_step", BigInteger),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

mfa_failures = Table(
    "mfa_failures",
    metadata,
    Column("user_id", UUID(as_uuid=True), primary_key=True),
    Column("window_start", DateTime(timezone=True), nullable=False),
    Column("failures", Integer, nullable=False),
    Column("locked_until", DateTime(timezone=True)),
)

mfa_recovery_codes = Table(
    "mfa_recovery_codes",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("user_id", UUID(as_uuid=True), nullable=False),
    Column("code_hash", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("used_at", DateTime(timezone=True)),
    UniqueConstraint("code_hash", name="mfa_recovery_codes_code_hash_key"),
    Index("mfa_recovery_codes_user_idx", "user_id"),
)

mfa_tickets = Table(
    "mfa_tickets",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("token_hash", LargeBinary, nullable=False),
    Column("binding_hash", LargeBinary, nullable=False),
    Column("user_id", UUID(as_uuid=True), nullable=False),
    Column("amr", ARRAY(Text), nullable=False),
    Column("return_to", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("used_at", DateTime(timezone=True)),
    UniqueConstraint("token_hash", name="mfa_tickets_token_hash_key"),
    Index("mfa_tickets_expires_idx", "expires_at"),
)

session_auth = Table(
    "session_auth",
    metadata,
    Column("family_id", UUID(as_uuid=True), primary_key=True),
    Column("user_id", UUID(as_uuid=True), nullable=False),
    Column("amr", ARRAY(Text), nullable=False),
    Column("auth_time", DateTime(timezone=True), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("act", Text),  # sql/0290: the operator of an impersonation session
    Index("session_auth_user_idx", "user_id"),
)

impersonation_links = Table(
    "impersonation_links",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("token_hash", LargeBinary, nullable=False),
    Column("user_id", UUID(as_uuid=True), nullable=False),
    Column("actor", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("used_at", DateTime(timezone=True)),
    Column("family_id", UUID(as_uuid=True)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("token_hash", name="impersonation_links_token_hash_key"),
    Index("impersonation_links_user_idx", "user_id"),
)

passkeys = Table(
    "passkeys",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("user_id", UUID(as_uuid=True), nullable=False),
    Column("credential_id", LargeBinary, nullable=False),
    Column("public_key", LargeBinary, nullable=False),
    Column("sign_count", BigInteger, nullable=False),
    Column("aaguid", Text),
    Column("transports", ARRAY(Text), nullable=False),
    Column("name", Text, nullable=False),
    Column("backed_up", Boolean, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("last_used_at", DateTime(timezone=True)),
    UniqueConstraint("credential_id", name="passkeys_credential_id_key"),
    Index("passkeys_user_idx", "user_id"),
)

webauthn_challenges = Table(
    "webauthn_challenges",
    metadata,
    Column("challenge_hash", LargeBinary, primary_key=True),
    Column("purpose", Text, nullable=False),
    Column("user_id", UUID(as_uuid=True)),
    Column("ticket_id", UUID(as_uuid=True)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Index("webauthn_challenges_expires_idx", "expires_at"),
)

# Created by tenantd/db/migrate.py itself (the ledger of applied files), not by sql/.
schema_migrations = Table(
    "schema_migrations",
    metadata,
    Column("version", Text, primary_key=True),
    Column("applied_at", DateTime(timezone=True), nullable=False),
)

# Access-token signing keys (sql/0100); states follow from the timestamps.
signing_keys = Table(
    "signing_keys",
    metadata,
    Column("kid", Text, primary_key=True),
    Column("alg", Text, nullable=False),
    Column("public_jwk", JSONB, nullable=False),
    Column("private_key", LargeBinary),
    Column("published_at", DateTime(timezone=True), nullable=False),
    Column("signing_from", DateTime(timezone=True), nullable=False),
    Column("retired_at", DateTime(timezone=True)),
    Column("not_after", DateTime(timezone=True)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("signing_keys_signing_from_idx", "signing_from"),
)

# -- sessions users can see and end; the per-user security log (issue 14) -------------------

known_devices = Table(
    "known_devices",
    metadata,
    Column("user_id", UUID(as_uuid=True), primary_key=True),
    Column("device_hash", LargeBinary, primary_key=True),
    Column("browser", Text),
    Column("os", Text),
    Column("first_seen_at", DateTime(timezone=True), nullable=False),
    Column("last_seen_at", DateTime(timezone=True), nullable=False),
    Index("known_devices_seen_idx", "last_seen_at"),
)

security_events = Table(
    "security_events",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("user_id", UUID(as_uuid=True), nullable=False),
    Column("type", Text, nullable=False),
    Column("session_id", UUID(as_uuid=True)),
    Column("ip", Text),
    Column("user_agent", Text),
    Column("data", JSONB, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("security_events_user_idx", "user_id", "id"),
)

# --- Beyond (issue 18) ---------------------------------------------------------------------

email_changes = Table(
    "email_changes",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("user_id", UUID(as_uuid=True), nullable=False),
    Column("old_email", Text, nullable=False),
    Column("new_email", Text, nullable=False),
    Column("confirm_hash", LargeBinary, nullable=False),
    Column("cancel_hash", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("cancel_until", DateTime(timezone=True), nullable=False),
    Column("confirmed_at", DateTime(timezone=True)),
    Column("cancelled_at", DateTime(timezone=True)),
    Index("email_changes_confirm_key", "confirm_hash", unique=True),
    Index("email_changes_cancel_key", "cancel_hash", unique=True),
    Index("email_changes_user_idx", "user_id"),
)

notification_throttles = Table(
    "notification_throttles",
    metadata,
    Column("throttle_key", Text, primary_key=True),
    Column("window_start", DateTime(timezone=True), nullable=False),
    Column("count", Integer, nullable=False),
)

scheduled_notifications = Table(
    "scheduled_notifications",
    metadata,
    Column("notification_id", UUID(as_uuid=True), primary_key=True),
    Column("idempotency_key", Text),
    Column("job_id", BigInteger, nullable=False),
    Column("event_type", Text, nullable=False),
    Column("recipient_user_id", UUID(as_uuid=True), nullable=False),
    Column("deliver_at", DateTime(timezone=True), nullable=False),
    Column("cancelled_at", DateTime(timezone=True)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index(
        "scheduled_notifications_idempotency_key",
        "idempotency_key",
        unique=True,
        postgresql_where=text("idempotency_key IS NOT NULL"),
    ),
)

notification_digests = Table(
    "notification_digests",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("digest_key", Text, nullable=False),
    Column("user_id", UUID(as_uuid=True), nullable=False),
    Column("account_id", UUID(as_uuid=True)),
    Column("event_type", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("flushed_at", DateTime(timezone=True)),
    Column("channels", ARRAY(Text)),  # 0140: NULL is every channel of the event
    Index(
        "notification_digests_open_key",
        "digest_key",
        unique=True,
        postgresql_where=text("flushed_at IS NULL"),
    ),
)

notification_digest_items = Table(
    "notification_digest_items",
    metadata,
    Column("item_id", UUID(as_uuid=True), primary_key=True),
    Column("digest_id", UUID(as_uuid=True), nullable=False),
    Column("payload", JSONB, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("notification_digest_items_digest_idx", "digest_id"),
)

notification_account_defaults = Table(
    "notification_account_defaults",
    metadata,
    Column("account_id", UUID(as_uuid=True), primary_key=True),
    Column("event_type", Text, primary_key=True),
    Column("channel", Text, primary_key=True),
    Column("enabled", Boolean, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# Per-user notification frequency (0140, issue 18)
notification_frequencies = Table(
    "notification_frequencies",
    metadata,
    Column("user_id", UUID(as_uuid=True), primary_key=True),
    Column("event_type", Text, primary_key=True),
    Column("channel", Text, primary_key=True),
    Column("frequency", Text, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# Issue 18, second round (0185): throttle counters expire (the `throttles` sweep deletes them)
# and digest items keep their send's sequence (a digest lists them in send order).
notification_throttles.append_column(Column("expires_at", DateTime(timezone=True), nullable=False))
Index("notification_throttles_expires_idx", notification_throttles.c.expires_at)
notification_digest_items.append_column(Column("send_sequence", BigInteger))

# Sign-in by email (0250, issue 29): one live code and magic link per address, hashed.
email_codes = Table(
    "email_codes",
    metadata,
    Column("email", Text, primary_key=True),
    Column("code_hash", LargeBinary, nullable=False),
    Column("link_hash", LargeBinary, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Index("email_codes_link_key", "link_hash", unique=True),
    Index("email_codes_expires_idx", "expires_at"),
)


# --- Security, round three (issue 25): "This wasn't me" of sensitive actions -----------------

security_undo = Table(
    "security_undo",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("user_id", UUID(as_uuid=True), nullable=False),
    Column("action", Text, nullable=False),
    Column("notify_to", Text, nullable=False),
    Column("data", JSONB, nullable=False),
    Column("token_hash", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("used_at", DateTime(timezone=True)),
    UniqueConstraint("token_hash", name="security_undo_token_hash_key"),
    Index("security_undo_user_idx", "user_id", "created_at"),
    Index("security_undo_expires_idx", "expires_at"),
)


# Declarative event types (0280, issue 28): one row per type, its version from a sequence.
event_definitions = Table(
    "event_definitions",
    metadata,
    Column("type", Text, primary_key=True),
    Column("definition", JSONB, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# What each running `tenantd serve` reports about itself (0310, issue 28): `tenantd status`.
instances = Table(
    "instances",
    metadata,
    Column("instance", Text, primary_key=True),
    Column("host", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("listen", Text),
    Column("version", Text, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("heartbeat_at", DateTime(timezone=True), nullable=False),
    Column("heartbeat_seconds", Double, nullable=False),
    Column("switches", JSONB, nullable=False),
    Column("event_types", ARRAY(Text), nullable=False),
)

# Single sign-on connections per account (0340, issue 30): SAML or OpenID Connect.
sso_connections = Table(
    "sso_connections",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("account_id", UUID(as_uuid=True), nullable=False),
    Column("type", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("enforce", Boolean, nullable=False),
    Column("default_role", Text, nullable=False),
    Column("attribute_mapping", JSONB, nullable=False),
    Column("group_roles", JSONB, nullable=False),
    Column("allow_idp_initiated", Boolean, nullable=False),
    Column("idp_metadata_xml", Text),
    Column("idp_entity_id", Text),
    Column("idp_sso_url", Text),
    Column("idp_certificate", Text),
    Column("issuer", Text),
    Column("client_id", Text),
    Column("client_secret_sealed", LargeBinary),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Index("sso_connections_account_idx", "account_id"),
)

sso_connection_domains = Table(
    "sso_connection_domains",
    metadata,
    Column("domain", Text, primary_key=True),
    Column("connection_id", UUID(as_uuid=True), nullable=False),
    Column("account_id", UUID(as_uuid=True), nullable=False),
    Index("sso_connection_domains_connection_idx", "connection_id"),
)

sso_saml_requests = Table(
    "sso_saml_requests",
    metadata,
    Column("id", Text, primary_key=True),
    Column("connection_id", UUID(as_uuid=True), nullable=False),
    Column("binding_hash", LargeBinary, nullable=False),
    Column("return_to", Text),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("used_at", DateTime(timezone=True)),
    Index("sso_saml_requests_expires_idx", "expires_at"),
)

sso_saml_assertions = Table(
    "sso_saml_assertions",
    metadata,
    Column("connection_id", UUID(as_uuid=True), primary_key=True),
    Column("assertion_id", Text, primary_key=True),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Index("sso_saml_assertions_expires_idx", "expires_at"),
)


# SCIM directory sync (0350, issue 30): directories, their users and groups.
directories = Table(
    "directories",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("account_id", UUID(as_uuid=True), nullable=False),
    Column("name", Text, nullable=False),
    Column("token_hash", LargeBinary, nullable=False),
    Column("created_by", UUID(as_uuid=True)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("last_used_at", DateTime(timezone=True)),
    Index("directories_account_idx", "account_id", "created_at"),
)


directory_users = Table(
    "directory_users",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("directory_id", UUID(as_uuid=True), nullable=False),
    Column("user_id", UUID(as_uuid=True)),
    Column("user_name", Text, nullable=False),
    Column("user_name_key", Text, nullable=False),
    Column("external_id", Text),
    Column("active", Boolean, nullable=False),
    Column("resource", JSONB, nullable=False),
    Column("version", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("directory_id", "user_name_key", name="directory_users_user_name_key"),
    UniqueConstraint("directory_id", "user_id", name="directory_users_user_key"),
    Index("directory_users_external_idx", "directory_id", "external_id"),
    Index("directory_users_user_idx", "user_id"),
)


directory_groups = Table(
    "directory_groups",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("directory_id", UUID(as_uuid=True), nullable=False),
    Column("display_name", Text, nullable=False),
    Column("display_name_key", Text, nullable=False),
    Column("external_id", Text),
    Column("role", Text),
    Column("resource", JSONB, nullable=False),
    Column("version", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Index("directory_groups_name_idx", "directory_id", "display_name_key"),
    Index("directory_groups_external_idx", "directory_id", "external_id"),
)


directory_group_members = Table(
    "directory_group_members",
    metadata,
    Column("group_id", UUID(as_uuid=True), primary_key=True),
    Column("member_id", UUID(as_uuid=True), primary_key=True),
    Column("display", Text),
    Index("directory_group_members_member_idx", "member_id"),
)


# The admin portal's links and their sessions (0370, issue 30).
admin_portal_links = Table(
    "admin_portal_links",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("account_id", UUID(as_uuid=True), nullable=False),
    Column("intent", Text, nullable=False),
    Column("token_hash", LargeBinary, nullable=False),
    Column("created_by", UUID(as_uuid=True)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("opened_at", DateTime(timezone=True)),
    Column("session_hash", LargeBinary),
    Column("session_expires_at", DateTime(timezone=True)),
    UniqueConstraint("token_hash", name="admin_portal_links_token_hash_key"),
    UniqueConstraint("session_hash", name="admin_portal_links_session_hash_key"),
    Index("admin_portal_links_account_idx", "account_id", "created_at"),
)

# What committed transactions announce, until the relay publishes it (0380, issue 31).
announcements = Table(
    "announcements",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("channel", Text, nullable=False),
    Column("payload", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)
