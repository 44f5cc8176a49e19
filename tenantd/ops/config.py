"""Operational knobs (scheduler, sweeps, rate limits, proxies, metrics), parsed from
`Settings.extra` (every TENANTD_* and RATE_LIMIT_* variable) once per process."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from functools import cache

from tenantd.settings import Settings, SettingsError, env_int, env_number

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


@dataclass(frozen=True)
class RateRule:
    per_ip: int
    per_email: int
    window_seconds: int
    per_session: int = 0
    per_user: int = 0  # mail actions: per acting user (the email counter is the recipient)


@dataclass(frozen=True)
class OpsConfig:
    scheduler_enabled: bool = True
    scheduler_tick_seconds: float = 60.0
    sweep_intervals: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_SWEEP_INTERVALS))
    sweep_batch_size: int = 1000
    sweep_batch_pause_ms: int = 0
    webhook_events_retention_days: int = 30
    jobs_retention_days: int = 7
    rate_limit_enabled: bool = True
    rate_rules: dict[str, RateRule] = field(default_factory=dict)
    trusted_proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    metrics_enabled: bool = True
    metrics_token: str | None = None
    metrics_refresh_seconds: float = 15.0
    shutdown_timeout_seconds: float = 25.0
    shutdown_drain_seconds: float = 5.0
    instance_heartbeat_seconds: float = 10.0  # each server's row of `instances` (ops/instances.py)

    def rate_rule(self, scope: str) -> RateRule:
        rule = self.rate_rules.get(scope)
        if rule is None:
            if scope in MAIL_RATE_LIMITS:
                per_user, per_recipient = MAIL_RATE_LIMITS[scope]
                rule = RateRule(0, per_recipient, MAIL_RATE_WINDOW, per_user=per_user)
            elif scope in DEFAULT_SESSION_RATE_LIMITS:
                per_ip, per_session = DEFAULT_SESSION_RATE_LIMITS[scope]
                rule = RateRule(per_ip, 0, DEFAULT_RATE_WINDOW, per_session)
            else:
                per_ip, per_email = DEFAULT_RATE_LIMITS.get(scope, (100, 10))
                rule = RateRule(per_ip, per_email, DEFAULT_RATE_WINDOW)
        return rule

    @property
    def longest_rate_window(self) -> int:
        windows = [rule.window_seconds for rule in self.rate_rules.values()]
        return max([DEFAULT_RATE_WINDOW, *windows])


def _bool(env: dict[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise SettingsError(f"{name} must be a boolean (true/false), got {raw!r}")


def _proxies(raw: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    networks = []
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise SettingsError(
                f"TENANTD_TRUSTED_PROXIES: not an address or CIDR: {item}"
            ) from None
    return tuple(networks)


def parse_ops_config(env: dict[str, str]) -> OpsConfig:
    """Build the knobs from TENANTD_* / RATE_LIMIT_* variables (defaults in DEFAULT_*)."""
    intervals = {
        name: env_int(env, f"TENANTD_SWEEP_{name.upper()}_INTERVAL_SECONDS", default, minimum=1)
        for name, default in DEFAULT_SWEEP_INTERVALS.items()
    }
    default_window = env_int(env, "RATE_LIMIT_WINDOW_SECONDS", DEFAULT_RATE_WINDOW, minimum=1)
    rules = {}
    for scope, (per_ip, per_email) in DEFAULT_RATE_LIMITS.items():
        prefix = f"RATE_LIMIT_{scope.upper()}_"
        rules[scope] = RateRule(
            per_ip=env_int(env, prefix + "PER_IP", per_ip),
            per_email=env_int(env, prefix + "PER_EMAIL", per_email),
            window_seconds=env_int(env, prefix + "WINDOW_SECONDS", default_window, minimum=1),
        )
    for scope, (per_user, per_recipient) in MAIL_RATE_LIMITS.items():
        prefix = f"RATE_LIMIT_{scope.upper()}_"
        rules[scope] = RateRule(
            per_ip=0,
            per_email=env_int(env, prefix + "PER_RECIPIENT", per_recipient),
            window_seconds=env_int(env, prefix + "WINDOW_SECONDS", MAIL_RATE_WINDOW, minimum=1),
            per_user=env_int(env, prefix + "PER_USER", per_user),
        )
    for scope, (per_ip, per_session) in DEFAULT_SESSION_RATE_LIMITS.items():
        prefix = f"RATE_LIMIT_{scope.upper()}_"
        rules[scope] = RateRule(
            per_ip=env_int(env, prefix + "PER_IP", per_ip),
            per_email=0,
            window_seconds=env_int(env, prefix + "WINDOW_SECONDS", default_window, minimum=1),
            per_session=env_int(env, prefix + "PER_SESSION", per_session),
        )
    token = env.get("TENANTD_METRICS_TOKEN", "").strip() or None
    return OpsConfig(
        scheduler_enabled=_bool(env, "TENANTD_SCHEDULER_ENABLED", True),
        scheduler_tick_seconds=env_number(
            env, "TENANTD_SCHEDULER_TICK_SECONDS", 60.0, minimum=0.05
        ),
        sweep_intervals=intervals,
        sweep_batch_size=env_int(env, "TENANTD_SWEEP_BATCH_SIZE", 1000, minimum=1),
        sweep_batch_pause_ms=env_int(env, "TENANTD_SWEEP_BATCH_PAUSE_MS", 0),
        webhook_events_retention_days=env_int(
            env, "TENANTD_WEBHOOK_EVENTS_RETENTION_DAYS", 30, minimum=1
        ),
        jobs_retention_days=env_int(env, "TENANTD_JOBS_RETENTION_DAYS", 7, minimum=1),
        rate_limit_enabled=_bool(env, "RATE_LIMIT_ENABLED", True),
        rate_rules=rules,
        trusted_proxies=_proxies(env.get("TENANTD_TRUSTED_PROXIES", "")),
        metrics_enabled=_bool(env, "TENANTD_METRICS_ENABLED", True),
        metrics_token=token,
        metrics_refresh_seconds=env_number(
            env, "TENANTD_METRICS_REFRESH_SECONDS", 15.0, minimum=0.05
        ),
        shutdown_timeout_seconds=env_number(
            env, "TENANTD_SHUTDOWN_TIMEOUT_SECONDS", 25.0, minimum=1
        ),
        shutdown_drain_seconds=env_number(env, "TENANTD_SHUTDOWN_DRAIN_SECONDS", 5.0, minimum=0),
        instance_heartbeat_seconds=env_number(
            env, "TENANTD_INSTANCE_HEARTBEAT_SECONDS", 10.0, minimum=0.05
        ),
    )


@cache
def _cached(items: tuple[tuple[str, str], ...]) -> OpsConfig:
    return parse_ops_config(dict(items))


def ops_config(settings: Settings) -> OpsConfig:
    """The knobs of these settings (parsed once per distinct set of variables)."""
    return _cached(tuple(sorted(settings.extra.items())))
