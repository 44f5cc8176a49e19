"""Every numeric knob goes through one parser: a bad value stops start-up naming the variable,
wherever the knob is read (core settings, ops, the job queue, web push)."""

from __future__ import annotations

import pytest

from tenantd.jobs.queue import job_config
from tenantd.ops.config import ops_config
from tenantd.settings import SettingsError, env_int, env_number, load_settings

BASE = {"SECRET_KEY": "k" * 40, "DATABASE_URL": "postgresql:///x"}


@pytest.mark.parametrize("raw", ["ten", "1e400", "nan", "-5"])
@pytest.mark.parametrize(
    "name, read",
    [
        ("INVITATION_TTL_HOURS", lambda env: load_settings(environ=env)),
        ("DB_POOL_MAX", lambda env: load_settings(environ=env)),
        ("TENANTD_WEB_PUSH_TIMEOUT_SECONDS", lambda env: load_settings(environ=env)),
        ("TENANTD_SWEEP_BATCH_SIZE", lambda env: ops_config(load_settings(environ=env))),
        ("TENANTD_SHUTDOWN_TIMEOUT_SECONDS", lambda env: ops_config(load_settings(environ=env))),
        ("TENANTD_SHUTDOWN_DRAIN_SECONDS", lambda env: ops_config(load_settings(environ=env))),
        ("TENANTD_JOB_CONCURRENCY", lambda env: job_config(load_settings(environ=env))),
        ("TENANTD_JOB_POLL_SECONDS", lambda env: job_config(load_settings(environ=env))),
    ],
)
def test_bad_numeric_value_names_the_variable(name: str, read: object, raw: str) -> None:
    with pytest.raises(SettingsError, match=name):
        read({**BASE, name: raw})  # type: ignore[operator]


def test_blank_is_the_default_and_fractions_are_refused_for_whole_numbers() -> None:
    assert env_number({"X": " "}, "X", 2.5) == 2.5
    assert env_int({}, "X", 7) == 7
    assert env_int({"X": "12"}, "X", 7) == 12
    with pytest.raises(SettingsError, match="X must be an integer"):
        env_int({"X": "1.5"}, "X", 7)


def test_the_web_push_timeout_is_read_once_at_start_up() -> None:
    assert load_settings(environ=BASE).web_push_timeout_seconds == 10.0
    timeout = {**BASE, "TENANTD_WEB_PUSH_TIMEOUT_SECONDS": "2.5"}
    assert load_settings(environ=timeout).web_push_timeout_seconds == 2.5
