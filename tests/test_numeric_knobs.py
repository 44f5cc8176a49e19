"""Every numeric knob goes through one parser: a bad value stops start-up naming the variable,
wherever the knob is read (core settings, ops, the job queue, web push)."""

from __future__ import annotations

import pytest

from tenantd.app.settings import load_settings
from tenantd.jobs.settings import JobSettings
from tenantd.ops.config import ProcessSettings, SchedulerSettings
from tenantd.settings import SettingsError

BASE = {"SECRET_KEY": "k" * 40, "DATABASE_URL": "postgresql:///x"}


@pytest.mark.parametrize("raw", ["ten", "1e400", "nan", "-5"])
@pytest.mark.parametrize(
    "name, read",
    [
        ("INVITATION_TTL_HOURS", lambda env: load_settings(environ=env)),
        ("DB_POOL_MAX", lambda env: load_settings(environ=env)),
        ("TENANTD_WEB_PUSH_TIMEOUT_SECONDS", lambda env: load_settings(environ=env)),
        (
            "TENANTD_SWEEP_BATCH_SIZE",
            lambda env: load_settings(environ=env).section(SchedulerSettings),
        ),
        (
            "TENANTD_SHUTDOWN_TIMEOUT_SECONDS",
            lambda env: load_settings(environ=env).section(ProcessSettings),
        ),
        (
            "TENANTD_SHUTDOWN_DRAIN_SECONDS",
            lambda env: load_settings(environ=env).section(ProcessSettings),
        ),
        ("TENANTD_JOB_CONCURRENCY", lambda env: load_settings(environ=env).section(JobSettings)),
        ("TENANTD_JOB_POLL_SECONDS", lambda env: load_settings(environ=env).section(JobSettings)),
    ],
)
def test_bad_numeric_value_names_the_variable(name: str, read: object, raw: str) -> None:
    with pytest.raises(SettingsError, match=name):
        read({**BASE, name: raw})  # type: ignore[operator]


def test_blank_is_the_default_and_fractions_are_refused_for_whole_numbers() -> None:
    blank = {**BASE, "TENANTD_WEB_PUSH_TIMEOUT_SECONDS": " "}
    assert load_settings(environ=blank).notifications.web_push_timeout_seconds == 10.0
    assert load_settings(environ=BASE).database.pool_max == 10
    assert load_settings(environ={**BASE, "DB_POOL_MAX": "12"}).database.pool_max == 12
    assert load_settings(environ={**BASE, "DB_POOL_MAX": "12.0"}).database.pool_max == 12
    with pytest.raises(SettingsError, match="DB_POOL_MAX must be an integer"):
        load_settings(environ={**BASE, "DB_POOL_MAX": "1.5"})


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("COOKIE_SECURE", "maybe", "COOKIE_SECURE must be a boolean (true/false), got 'maybe'"),
        ("TENANTD_UI", "maybe", "TENANTD_UI must be a boolean (true/false), got 'maybe'"),
        ("DB_POOL_MAX", "ten", "DB_POOL_MAX must be a number, got 'ten'"),
        ("DB_POOL_MAX", "0", "DB_POOL_MAX must be a number >= 1, got '0'"),
        ("LOG_FORMAT", "xml", "LOG_FORMAT must be console or json"),
        ("EMAIL_PROVIDER", "pigeon", "EMAIL_PROVIDER must be file, postmark, resend, sendgrid"),
        ("ACCESS_TOKEN_ALG", "RS256", "ACCESS_TOKEN_ALG must be EdDSA, ES256 or HS256"),
        ("PASSWORD_BREACH_CHECK", "maybe", "PASSWORD_BREACH_CHECK must be off | warn | block"),
        ("TENANTD_TRUSTED_PROXIES", "x", "TENANTD_TRUSTED_PROXIES: not an address or CIDR: x"),
        ("ALLOWED_ORIGINS", "ftp://a", "ALLOWED_ORIGINS: not an http(s) origin: ftp://a"),
        ("TENANTD_UI_ACCENT_COLOR", "red", "TENANTD_UI_ACCENT_COLOR must be a #rgb or #rrggbb"),
    ],
)
def test_a_bad_value_stops_start_up_with_one_line_naming_it(
    name: str, raw: str, message: str
) -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings(environ={**BASE, name: raw})
    assert str(raised.value).startswith(message)


def test_every_section_reads_the_same_environment_and_ignores_the_rest() -> None:
    settings = load_settings(environ={**BASE, "UNRELATED": "x", "TENANTD_JOB_CONCURRENCY": "3"})
    assert settings.jobs.concurrency == 3
    assert settings.section(type(settings.jobs)) is settings.jobs
    assert settings.database.url == "postgresql:///x"


def test_the_web_push_timeout_is_read_once_at_start_up() -> None:
    assert load_settings(environ=BASE).notifications.web_push_timeout_seconds == 10.0
    timeout = {**BASE, "TENANTD_WEB_PUSH_TIMEOUT_SECONDS": "2.5"}
    assert load_settings(environ=timeout).notifications.web_push_timeout_seconds == 2.5
