"""Benchmarks beyond plain HTTP reads: webhook ingestion, dispatch, SSE latency."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench import (
    admin,
    announce,
    apikeys,
    db_roundtrip,
    dispatch,
    metrics_scrape,
    mfa,
    outbox,
    scim,
    sso,
    webhooks,
)

Benchmark = Callable[[str, str, dict[str, str], Any], dict[str, Any]]


def server_env() -> dict[str, str]:
    return {
        "SENDGRID_WEBHOOK_PUBLIC_KEY": webhooks.public_key_pem(),
        "MAGIC_LINK_ENABLED": "true",  # the email-code sign-in figure
    }


def service_benchmarks() -> list[tuple[str, Benchmark]]:
    # SSE first: the dispatch figures write ~100k notifications, and autovacuum then works
    # through them for a minute on the same two cores; latency is measured before that churn.
    return [
        ("sse_latency_10000_clients", dispatch.sse_latency_10000),
        ("metrics_scrape", metrics_scrape.metrics_scrape),
        ("sendgrid_ingestion", webhooks.sendgrid_ingestion),
        ("dispatch_inline", dispatch.dispatch_inline),
        ("dispatch_inline_declared", dispatch.dispatch_inline_declared),
        ("dispatch_queued", dispatch.dispatch_queued),
        # Last: it leaves its dispatch jobs to the server's runner.
        ("send_batch", apikeys.send_batch),
        ("password_login", mfa.password_login),
        ("email_code_login", mfa.email_code_login),
        ("imported_bcrypt_login", mfa.imported_bcrypt_login),
        ("mfa_verify", mfa.mfa_verify),
        ("saml_sign_in", sso.saml_sign_in),
        ("webhook_deliveries", outbox.webhook_deliveries),
        ("outbox_overhead", outbox.outbox_overhead),
        # A prepared SELECT 1 through tenantd/db, 32 in flight, on the server's core.
        ("db_roundtrip", db_roundtrip.figure),
        # GET /api/v1/admin/users?query= over at least 10,000 users (issue 28).
        ("admin_user_search", admin.admin_user_search),
        # SCIM directory sync (issue 30): POST /Users, and Entra's PATCH active "False".
        ("scim_create", scim.scim_create),
        ("scim_deactivate", scim.scim_deactivate),
        # Publish after commit (issue 31): 32 writers that each announce, durable commits,
        # pg_notify in the transaction against a row and the relay (a cluster of its own).
        ("announce_commits", announce.figure),
    ]
