"""Operational knobs (scheduler, sweeps, rate limits, proxies, metrics, shutdown): the settings
sections the kernel's engines read, and the rate rule of each scope."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import BeforeValidator, create_model

from tenantd.settings import (
    SWITCH,
    Count,
    Flag,
    Networks,
    Positive,
    Seconds,
    Section,
    Text,
    at_least,
    env,
)

# Sweep name -> default interval in seconds (SERVICE.md: invitations and accounts daily,
# dedup hourly; sessions and finished jobs hourly too).
DEFAULT_SWEEP_INTERVALS = {
    "invitations": 86_400,
    "accounts": 86_400,
    "dedup": 3_600,
    "sessions": 3_600,
    "jobs": 3_600,
    "keys": 3_600,  # access-token key rotation (ACCESS_TOKEN_KEY_ROTATION_DAYS)
    "users": 86_400,  # Beyond (issue 18): anonymise users deleted more than 30 days ago
    "throttles": 3_600,  # notification throttle counters whose window ended (issue 18)
}

# Scope -> (per IP, per email) within the window. 0 turns that counter off.
DEFAULT_RATE_LIMITS = {
    "register": (20, 5),
    "login": (100, 10),
    "resend_verification": (20, 5),
    "password_reset": (20, 5),
    "email_code": (20, 5),  # sign-in codes mailed (issue 29)
    "email_code_verify": (100, 10),  # codes tried, per address on top of five per code
}
# Scope -> (per IP, per session family) within the window: refresh has no email to count.
DEFAULT_SESSION_RATE_LIMITS = {"refresh": (600, 60)}
DEFAULT_RATE_WINDOW = 900
# The one list of actions that send mail to an address their caller chooses (issue 25):
# scope -> (per user, per recipient) within the window, each enforced inside the action
# (`ratelimit.limit_chosen_recipient`), whatever calls it. The scope names the action kind:
# `email_change` (request a change: the new address), `invitation` (create and resend).
MAIL_RATE_LIMITS = {"email_change": (10, 3), "invitation": (50, 3)}
MAIL_RATE_WINDOW = 3600
# How often a process does something periodic (scheduler tick, heartbeat, metrics refresh), in
# seconds; the floor keeps a typo from making it spin.
Period = Annotated[float, BeforeValidator(at_least(0.05))]


@dataclass(frozen=True)
class RateRule:
    per_ip: int
    per_email: int
    window_seconds: int
    per_session: int = 0
    per_user: int = 0  # mail actions: per acting user (the email counter is the recipient)


# The manual's line of the sweep that opens each group of TENANTD_SWEEP_<NAME>_INTERVAL_SECONDS
# variables (the sweeps after it, up to the next, share its meaning).
SWEEP_NOTES = {
    "invitations": "Interval of each sweep (seconds).",
    "users": "Delete my user: the `users` sweep anonymises users deleted more than 30 days ago.",
    "throttles": "Notification throttle counters: the `throttles` sweep deletes a key's counter"
    " once its window ended (a later send starts a new window anyway).",
}


def _sweep_fields() -> dict[str, Any]:
    """TENANTD_SWEEP_<NAME>_INTERVAL_SECONDS of every sweep, in the table's order, defaults from
    the table."""
    return {
        name: (
            Positive,
            env(
                f"TENANTD_SWEEP_{name.upper()}_INTERVAL_SECONDS",
                SWEEP_NOTES.get(name),
                default=seconds,
            ),
        )
        for name, seconds in DEFAULT_SWEEP_INTERVALS.items()
    }


class _SchedulerSwitches(Section):
    enabled: Flag = env(
        "TENANTD_SCHEDULER_ENABLED",
        "Turn the in-process scheduler off where cron runs `tenantd sweep` instead (or keep"
        " both: they never overlap).",
        default=True,
        json_schema_extra=SWITCH,
    )
    tick_seconds: Period = env(
        "TENANTD_SCHEDULER_TICK_SECONDS",
        "How often each instance checks whether a sweep is due.",
        default=60.0,
    )


if TYPE_CHECKING:
    _SchedulerSweeps = _SchedulerSwitches
else:
    _SchedulerSweeps = create_model(
        "_SchedulerSweeps", __base__=_SchedulerSwitches, **_sweep_fields()
    )


class SchedulerSettings(_SchedulerSweeps):
    """In-process scheduler of `tenantd serve`. Every instance ticks; under a PostgreSQL
    advisory lock and the shared `sweep_runs` table one instance runs each sweep once per
    interval."""

    title: ClassVar[str] = "Sweeps and scheduler"

    batch_size: Positive = env(
        "TENANTD_SWEEP_BATCH_SIZE",
        "Rows per DELETE/UPDATE batch (each batch its own short transaction); pause between"
        " batches.",
        default=1000,
    )
    batch_pause_ms: Count = env("TENANTD_SWEEP_BATCH_PAUSE_MS", default=0)
    webhook_events_retention_days: Positive = env(
        "TENANTD_WEBHOOK_EVENTS_RETENTION_DAYS",
        "Provider webhook event ids kept for replay protection; finished jobs kept for inspection.",
        default=30,
    )
    jobs_retention_days: Positive = env("TENANTD_JOBS_RETENTION_DAYS", default=7)

    def intervals(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in DEFAULT_SWEEP_INTERVALS}


# The manual's line of the scope that opens each group of RATE_LIMIT_<SCOPE>_* variables (the
# scopes after it, up to the next, share its meaning).
RATE_LIMIT_NOTES = {
    "register": "Per scope (register, login, resend_verification, password_reset): attempts per"
    " client IP and per email address within the scope's window (default"
    " RATE_LIMIT_WINDOW_SECONDS).",
    "email_code": "Sign-in by email (MAGIC_LINK_ENABLED): codes mailed, and codes tried (on top"
    " of five per code).",
    "refresh": "Refresh: per client IP and per session family (sign-in) instead of per email.",
    "email_change": "Mail to an address the caller chooses (email change, invitation create and"
    " resend): per acting user and per recipient within the scope's window.",
}
# Each table of scopes: its two counters' names and the default of its scopes' windows (None:
# RATE_LIMIT_WINDOW_SECONDS).
RATE_LIMIT_TABLES: tuple[tuple[Mapping[str, tuple[int, int]], str, str, int | None], ...] = (
    (DEFAULT_RATE_LIMITS, "ip", "email", None),
    (DEFAULT_SESSION_RATE_LIMITS, "ip", "session", None),
    (MAIL_RATE_LIMITS, "user", "recipient", MAIL_RATE_WINDOW),
)


# The `RateRule` field each counter of a scope sets (the email counter of a mail action counts
# its recipient).
RULE_FIELDS = {
    "ip": "per_ip",
    "email": "per_email",
    "recipient": "per_email",
    "session": "per_session",
    "user": "per_user",
}


def _scope_fields() -> dict[str, Any]:
    """RATE_LIMIT_<SCOPE>_PER_<COUNTER> twice and RATE_LIMIT_<SCOPE>_WINDOW_SECONDS of every
    scope of the tables, in their order, defaults from the tables."""
    fields: dict[str, Any] = {}
    for limits, first, second, window in RATE_LIMIT_TABLES:
        for scope, (first_limit, second_limit) in limits.items():
            variable = f"RATE_LIMIT_{scope.upper()}"
            fields[f"{scope}_per_{first}"] = (
                Count,
                env(
                    f"{variable}_PER_{first.upper()}",
                    RATE_LIMIT_NOTES.get(scope),
                    default=first_limit,
                ),
            )
            fields[f"{scope}_per_{second}"] = (
                Count,
                env(f"{variable}_PER_{second.upper()}", default=second_limit),
            )
            fields[f"{scope}_window_seconds"] = (
                (Positive | None, env(f"{variable}_WINDOW_SECONDS", default=None, examples=[900]))
                if window is None
                else (Positive, env(f"{variable}_WINDOW_SECONDS", default=window))
            )
    return fields


class _RateLimitSwitches(Section):
    enabled: Flag = env("RATE_LIMIT_ENABLED", "false: no abuse limit at all.", default=True)
    window_seconds: Positive = env(
        "RATE_LIMIT_WINDOW_SECONDS",
        "The window of every scope that sets none of its own.",
        default=DEFAULT_RATE_WINDOW,
    )


if TYPE_CHECKING:
    _RateLimitScopes = _RateLimitSwitches
else:
    _RateLimitScopes = create_model(
        "_RateLimitScopes", __base__=_RateLimitSwitches, **_scope_fields()
    )


class RateLimitSettings(_RateLimitScopes):
    """Abuse limits (fixed windows in PostgreSQL, shared by every instance); 429
    RATE_LIMITED with Retry-After. Per scope: attempts per client IP and per email address in
    the window; 0 = off."""

    title: ClassVar[str] = "Abuse limits and proxies"

    trusted_proxies: Networks = env(
        "TENANTD_TRUSTED_PROXIES",
        "Reverse proxies whose X-Forwarded-For is believed (addresses or CIDRs, comma list)."
        " Unset: the peer address is the client. Behind nginx on the same host: 127.0.0.1,::1",
        default=(),
    )

    def rules(self) -> dict[str, RateRule]:
        """Every scope's rule (a window left unset is RATE_LIMIT_WINDOW_SECONDS)."""

        rules = {}
        for limits, first, second, _window in RATE_LIMIT_TABLES:
            for scope in limits:
                own: int | None = getattr(self, f"{scope}_window_seconds")
                counts = {"per_ip": 0, "per_email": 0} | {
                    RULE_FIELDS[counter]: getattr(self, f"{scope}_per_{counter}")
                    for counter in (first, second)
                }
                rules[scope] = RateRule(
                    window_seconds=self.window_seconds if own is None else own, **counts
                )
        return rules

    def rule(self, scope: str) -> RateRule:
        """The rule of one scope; a scope no table names counts 100 per IP, 10 per email."""
        rule = _rules_of(self).get(scope)
        if rule is None:
            per_ip, per_email = DEFAULT_RATE_LIMITS.get(scope, (100, 10))
            rule = RateRule(per_ip, per_email, DEFAULT_RATE_WINDOW)
        return rule

    @property
    def longest_window(self) -> int:
        windows = [rule.window_seconds for rule in _rules_of(self).values()]
        return max([DEFAULT_RATE_WINDOW, *windows])


_last_rules: list[tuple[RateLimitSettings, dict[str, RateRule]]] = []  # latest section's rules


def _rules_of(limits: RateLimitSettings) -> dict[str, RateRule]:
    """The rules of these limits, built once per section object: every limited request reads
    one, and building them all costs tens of microseconds. Sections are frozen (a changed copy
    is a new object), so the object itself is the key."""
    if _last_rules and _last_rules[0][0] is limits:
        return _last_rules[0][1]
    rules = limits.rules()
    _last_rules[:] = [(limits, rules)]
    return rules


class ProcessSettings(Section):
    """How each `tenantd` process starts, reports itself, is measured and stops."""

    title: ClassVar[str] = "Process, metrics and shutdown"

    dev: Flag = env(
        "TENANTD_DEV",
        "`tenantd serve` without DATABASE_URL refuses to start unless this is a development"
        " run (true, or `serve --dev`): then it starts a private PostgreSQL cluster (fsync"
        " off) under var/. scripts/run sets it.",
        default=False,
    )
    env_file: str | None = env(
        "TENANTD_ENV_FILE",
        "The env file every `tenantd` command reads when --env-file is not given (the"
        " process environment wins over it): the service's own, /etc/tenantd/tenantd.env"
        " (systemd's EnvironmentFile=), when it exists, so the CLI runs with the"
        " configuration the service runs with. Set in the environment to name another file;"
        " empty: no file (docs/operations.md). Read before the file itself, from the process"
        " environment only.",
        default=None,
        examples=["/etc/tenantd/tenantd.env"],
    )
    instance_heartbeat_seconds: Period = env(
        "TENANTD_INSTANCE_HEARTBEAT_SECONDS",
        "Each `tenantd serve` reports itself (version, switches, event types) in the"
        " instances table every this many seconds; `tenantd status` shows the rows and marks"
        " one stale after three missed heartbeats. A clean shutdown deletes the row.",
        default=10.0,
    )
    metrics_enabled: Flag = env(
        "TENANTD_METRICS_ENABLED",
        "Prometheus metrics at GET /metrics; with a token set, scrapers send"
        ' "Authorization: Bearer <token>".',
        default=True,
        json_schema_extra=SWITCH,
    )
    metrics_token: Text | None = env("TENANTD_METRICS_TOKEN", default=None, repr=False)
    metrics_refresh_seconds: Period = env(
        "TENANTD_METRICS_REFRESH_SECONDS",
        "Database-derived figures (jobs, deliveries, suppressions, sweeps) are read by one"
        " task per process at most this often (seconds); a scrape serves the last figures and"
        " never queries the database, so scrapes cost no connection and answer even with the"
        " pool exhausted.",
        default=15.0,
    )
    shutdown_timeout_seconds: Annotated[float, BeforeValidator(at_least(1))] = env(
        "TENANTD_SHUTDOWN_TIMEOUT_SECONDS",
        "SIGTERM: the process stops within this bound (requests drain, SSE streams end,"
        " running jobs finish or go back to the queue, pools close), then exits by itself."
        " Keep systemd's TimeoutStopSec a few seconds above it.",
        default=25.0,
    )
    shutdown_drain_seconds: Seconds = env(
        "TENANTD_SHUTDOWN_DRAIN_SECONDS",
        "SIGTERM first stops listening and drains open keep-alive connections for up to this"
        " long: a request in flight or arriving on one is answered with `Connection: close`;"
        " the drain ends as soon as no connection is left (docs/reliability.md).",
        default=5.0,
    )


SECTIONS: tuple[type[Section], ...] = (SchedulerSettings, RateLimitSettings, ProcessSettings)
