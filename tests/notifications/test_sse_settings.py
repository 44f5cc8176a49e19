"""The TENANTD_SSE_* knobs go through the one numeric parser, read once when the feed starts:
a bad value stops start-up naming the variable."""

from __future__ import annotations

import pytest

from tenantd.app.settings import load_settings
from tenantd.notifications.settings import NotificationSettings
from tenantd.settings import SettingsError


def test_unset_knobs_are_the_defaults(env: dict[str, str]) -> None:
    for name in ("TENANTD_SSE_TICK_SECONDS", "TENANTD_SSE_QUEUE_SIZE"):
        env.pop(name, None)
    config = load_settings(environ=env).section(NotificationSettings)
    assert (config.sse_tick_seconds, config.sse_queue_size) == (15.0, 100)  # docs/configuration.md


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TENANTD_SSE_TICK_SECONDS", "soon"),
        ("TENANTD_SSE_TICK_SECONDS", "0"),
        ("TENANTD_SSE_QUEUE_SIZE", "1.5"),
        ("TENANTD_SSE_QUEUE_SIZE", "0"),
        ("TENANTD_SSE_DISCONNECT_CHECK_SECONDS", "-1"),
    ],
)
def test_a_bad_value_stops_start_up_naming_the_variable(
    env: dict[str, str], name: str, value: str
) -> None:
    # The knobs are fields of the settings model: `tenantd serve` stops as it loads them.
    with pytest.raises(SettingsError, match=name):
        load_settings(environ={**env, name: value})
